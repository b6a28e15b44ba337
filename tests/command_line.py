"""warmfit's command line run in-process (typer's CliRunner), without a terminal's colours.

:func:`warmfit_cli` gives typer's whole result (``exit_code``, ``stdout``, ``stderr``,
``output``); the ``invoke`` fixture (tests/conftest.py) gives ``(exit code, stdout,
stderr)``, what most tests compare.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from typer.testing import CliRunner, Result

from warmfit.cli import app

#: The ``invoke`` fixture's type: ``invoke("replay", trace, env={...})``.
Invoke = Callable[..., tuple[int, str, str]]


def warmfit_cli(*args: object, env: dict[str, str] | None = None) -> Result:
    """``warmfit ARGS`` in-process (paths and numbers as text), without a terminal's
    colours; typer's result: ``exit_code``, ``stdout``, ``stderr``, ``output``."""
    return CliRunner().invoke(
        app, [str(a) for a in args], env={"_TYPER_FORCE_DISABLE_TERMINAL": "1", **(env or {})}
    )


def warmfit_ok(*args: object) -> Result:
    """:func:`warmfit_cli`, which must exit 0."""
    result = warmfit_cli(*args)
    assert result.exit_code == 0, result.output
    return result


def warmfit_json(*args: object) -> list[dict[str, Any]]:
    """The ``results`` of ``warmfit ARGS --format json``, which must exit 0."""
    results: list[dict[str, Any]] = json.loads(warmfit_ok(*args, "--format", "json").stdout)[
        "results"
    ]
    return results


def invoke(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``warmfit ARGS`` in-process: (exit code, stdout, stderr)."""
    result = warmfit_cli(*args, env=env)
    return result.exit_code, result.stdout, result.stderr
