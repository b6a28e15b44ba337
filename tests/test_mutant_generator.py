"""``mutants/generate.py``: each generated mutant is the syntax tree it says (issue 38).

A mutant of the outer operator of a chain (``a | b | c`` with its second ``|`` as
``&``) must keep its operands together: written as is, ``a | b & c`` binds the
other way and the generator stopped ("did not plant as intended") on
``warmfit/importers/table.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "mutants"))

from generate import generate  # noqa: E402  (mutants/ is no package)


def test_the_outer_operator_of_a_chain_mutates_with_its_operands_together(
    tmp_path: Path,
) -> None:
    (tmp_path / "m.py").write_text("def f(a, b, c):\n    return a | b | c\n")
    made = [m for m in generate(tmp_path, "m.py") if m.kind == "BitOr->BitAnd"]
    assert len(made) == 2
    values = {}
    for mutant in made:
        expr = mutant.after.strip().removeprefix("return ")
        values[expr] = eval(expr, {"a": 1, "b": 2, "c": 4})
    # (a & b) | c = 4 and (a | b) & c = 0: each the tree its name says
    assert sorted(values.values()) == [0, 4], values
