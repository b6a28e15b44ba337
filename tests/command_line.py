"""warmfit's command line run in-process (typer's CliRunner), without a terminal's colours.

:func:`warmfit_cli` gives typer's whole result (``exit_code``, ``stdout``, ``stderr``,
``output``); the ``invoke`` fixture (tests/conftest.py) gives ``(exit code, stdout,
stderr)``, what most tests compare; :func:`warmfit_output` the exit code and everything
printed, :func:`warmfit_stdout` the output of a command that must succeed. Every one fails
the test when a Python exception escapes the command: a person would see a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from warmfit.cli import app

#: The repository: a process of its own imports warmfit from here (the mutant pass's copy).
REPO = Path(__file__).resolve().parent.parent


def python_env(*first: Path, **variables: str) -> dict[str, str]:
    """This environment for a Python process of its own, with ``first`` (a sitecustomize's
    folder, an installed plugin's) then the repository ahead on PYTHONPATH, and
    ``variables`` set."""
    path = os.pathsep.join([*map(str, first), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **variables}


#: The ``invoke`` fixture's type: ``invoke("replay", trace, env={...})``.
Invoke = Callable[..., tuple[int, str, str]]


def warmfit_cli(*args: object, env: dict[str, str] | None = None) -> Result:
    """``warmfit ARGS`` in-process (paths and numbers as text), without a terminal's
    colours; typer's result: ``exit_code``, ``stdout``, ``stderr``, ``output``."""
    argv = [str(a) for a in args]
    try:
        result = CliRunner().invoke(
            app, argv, env={"_TYPER_FORCE_DISABLE_TERMINAL": "1", **(env or {})}
        )
    except BaseException as exc:  # a polars PanicException is a BaseException
        pytest.fail(f"traceback ({type(exc).__name__}: {exc}) from warmfit {argv}")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        pytest.fail(f"traceback ({result.exception!r}) from warmfit {argv}:\n{result.output}")
    return result


def warmfit_ok(*args: object) -> Result:
    """:func:`warmfit_cli`, which must exit 0."""
    result = warmfit_cli(*args)
    assert result.exit_code == 0, result.output
    return result


def warmfit_stdout(*args: object) -> str:
    """What ``warmfit ARGS`` prints on stdout; it must exit 0 (warnings go to stderr)."""
    return warmfit_ok(*args).stdout


def warmfit_output(*args: object) -> tuple[int, str]:
    """``warmfit ARGS``: its exit code and everything it printed, stdout and stderr."""
    result = warmfit_cli(*args)
    return result.exit_code, result.output


def warmfit_json(*args: object) -> list[dict[str, Any]]:
    """The ``results`` of ``warmfit ARGS --format json``, which must exit 0."""
    results: list[dict[str, Any]] = json.loads(warmfit_ok(*args, "--format", "json").stdout)[
        "results"
    ]
    return results


def warmfit_process(*args: object, **options: Any) -> subprocess.CompletedProcess[str]:
    """``python -m warmfit ARGS`` as a process of its own (signals, exit at exit, a
    trainer it starts), its output captured as text; ``options`` go to subprocess.run."""
    return subprocess.run(
        [sys.executable, "-m", "warmfit", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        **options,
    )


def invoke(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``warmfit ARGS`` in-process: (exit code, stdout, stderr)."""
    result = warmfit_cli(*args, env=env)
    return result.exit_code, result.stdout, result.stderr
