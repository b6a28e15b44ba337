"""A fork server for ``mutants/run.py --generate``: pytest runs without the start-up.

A mutant's test run spends seconds starting Python and importing numpy, polars,
pyarrow, Hypothesis and pytest before the first test runs; most mutants are
killed in less. This server, started once per copy of the tree (its working
directory, with the copy first on ``PYTHONPATH``), imports those libraries and
nothing of warmfit or the tests; for each request on its standard input, one
JSON line ``{"args": [...], "out": PATH}``, it forks a child that runs
``pytest.main(args)`` with its output in ``PATH`` and imports warmfit (mutated)
and the tests afresh. It answers ``{"pid": PID}`` at once (the child leads its
own process group, which the runner kills on a timeout) and ``{"rc": CODE}``
when the child ends (negative: killed by that signal).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback

#: Imported before any fork: the libraries warmfit and its tests import, not warmfit.
PRELOAD = (
    "numpy",
    "polars",
    "pyarrow",
    "pyarrow.parquet",
    "hypothesis",
    "hypothesis.strategies",
    "pytest",
    "_pytest.doctest",
    "typer",
    "typer.testing",
    "rich",
    "rich.table",
)


def main() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    local = [m for m in sys.modules if m.split(".")[0] in ("warmfit", "tests")]
    if local:
        raise SystemExit(f"the server imported {local[0]}: the mutants would not be imported")
    import pytest

    answer = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answer.flush()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.setpgid(0, 0)
                out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                sys.argv = ["pytest", *request["args"]]
                code = int(pytest.main(request["args"]))
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        print(json.dumps({"pid": pid}), file=answer, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), file=answer, flush=True)


if __name__ == "__main__":
    main()
