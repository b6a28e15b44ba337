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


def test_an_entry_naming_the_second_of_two_same_mutants_must_say_its_occurrence(
    tmp_path: Path,
) -> None:
    """``x[-1] if x else -1``: two ``USub->drop`` on one line. An entry whose id names
    the second (column 28) but gives no ``occurrence`` would match the first (the
    key's occurrence 0): ``wrong_occurrences`` names it; with ``occurrence = 1`` it
    matches the mutant its id names."""
    from generate import Accepted, match_accepted, wrong_occurrences

    (tmp_path / "m.py").write_text("def f(x):\n    return x[-1] if x else -1\n")
    made = [m for m in generate(tmp_path, "m.py") if m.kind == "USub->drop"]
    assert [m.id for m in made] == ["m.py:2:14:USub->drop", "m.py:2:28:USub->drop"]
    line = "return x[-1] if x else -1"
    slip = Accepted("m.py:2:28:USub->drop", "m.py", line, "USub->drop", 0, "why")
    assert match_accepted(made, [slip])[0] == {"m.py:2:14:USub->drop": slip}
    (message,) = wrong_occurrences(made, [slip])
    assert message.startswith("  m.py:2:28:USub->drop: names occurrence 1")
    assert message.endswith("(add occurrence = 1)")
    right = Accepted("m.py:2:28:USub->drop", "m.py", line, "USub->drop", 1, "why")
    assert wrong_occurrences(made, [right]) == []
    assert match_accepted(made, [right])[0] == {"m.py:2:28:USub->drop": right}
