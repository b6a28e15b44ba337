"""The module the workers' fork server imports before it forks them (:data:`warmfit.run.workers.PRELOAD`).

It imports what a worker runs (:mod:`warmfit.replay.stream`, polars with it),
so that each worker starts in milliseconds. And it ends the server at once
when the command that started it ends: the server holds the command's
stdout and stderr, so a shell pipeline (``warmfit replay T | less``) or a
caller reading them waits for it to exit, and Python's own exit, tearing
polars down, took 0.1 s after the command had printed its result. Nothing
in the server needs that teardown: its workers have exited by then, and it
holds no file of its own.

Only the fork server does this: imported in any other process (a test that
imports every module, say), this module changes nothing at exit.
"""

from __future__ import annotations

import atexit
import os
import sys

import numpy.ma  # noqa: F401  (polars imports it at a worker's first Series from numpy)

import warmfit.replay.stream  # noqa: F401  (what the workers run)


def _in_fork_server() -> bool:
    """Whether this import is the fork server's preload (multiprocessing.forkserver.main)."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(
            os.path.join("multiprocessing", "forkserver.py")
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


#: Whether this process is the fork server (and the workers it forked).
SERVER = _in_fork_server()
if SERVER:
    atexit.register(os._exit, 0)
