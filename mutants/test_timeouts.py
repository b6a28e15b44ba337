"""A pytest plugin for ``mutants/run.py --generate``: each test's own time limit.

A mutant that makes a loop endless, or an array grow without end, would hold
its run until the run's timeout (five times all its tests' time). Loaded with
``-p test_timeouts`` (``mutants/`` on ``PYTHONPATH``), this gives each test the
limit that ``WARMFIT_MUTANTS_LIMITS`` (a JSON file: node id -> seconds) names,
or ``WARMFIT_MUTANTS_DEFAULT_LIMIT`` seconds. Past it, :mod:`faulthandler`'s
watchdog thread (which needs no Python code to run) writes ``Timeout (...)!``
and the tracebacks to the run's output and ends the process: the runner reads
that as a timeout.
"""

from __future__ import annotations

import faulthandler
import json
import os
from collections.abc import Generator
from pathlib import Path

import pytest

_path = os.environ.get("WARMFIT_MUTANTS_LIMITS")
_LIMITS: dict[str, float] = json.loads(Path(_path).read_text(encoding="utf-8")) if _path else {}
_DEFAULT = float(os.environ.get("WARMFIT_MUTANTS_DEFAULT_LIMIT", "120"))
# the output as it is now, before pytest captures file descriptor 2 during each test
_OUT = os.fdopen(os.dup(2), "w")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: object) -> Generator[None, None, None]:
    nodeid = item.nodeid
    limit = _LIMITS.get(nodeid) or _LIMITS.get(nodeid.split("[", 1)[0]) or _DEFAULT
    faulthandler.dump_traceback_later(limit, exit=True, file=_OUT)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
