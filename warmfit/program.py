"""The ``warmfit`` program (its console script, and ``python -m warmfit``).

:func:`run` starts the workers of a large replay before anything else
(:func:`warmfit.run.workers.prestart_from_argv`: importing the command line and
reaching a command takes a tenth of a second), then runs the command line
(:func:`warmfit.cli.run`). Nothing here imports typer, polars or numpy.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from warmfit.run.workers import prestart_from_argv


def run() -> NoReturn:
    """Run ``warmfit`` with ``sys.argv``; the process ends with the command."""
    prestart_from_argv(sys.argv[1:])
    from warmfit.cli import run as command_line

    command_line()
