"""The module the workers' fork server imports before it forks them (:data:`warmfit.run.workers.PRELOAD`).

It imports what a worker runs (:mod:`warmfit.replay.stream`, polars with it),
so that each worker starts in milliseconds. And it ends the server at once
when the command that started it ends: the server holds the command's
stdout and stderr, so a shell pipeline (``warmfit replay T | less``) or a
caller reading them waits for it to exit, and Python's own exit, tearing
polars down, kept them open 0.1 to 0.45 s after the command had ended.
Nothing in the server needs that teardown: its workers have exited by then,
and it holds no file of its own.

Only the fork server does this. The command says which process is its
server: :func:`warmfit.run.workers.fork_context` starts it with
:data:`warmfit.run.workers.FORK_SERVER` set to the command's process id, and
this module takes that variable out of the environment (no worker, nor
anything a worker starts, sees it). Imported in any other process (a test
that imports every module, say), this module changes nothing at exit.
"""

from __future__ import annotations

import atexit
import os

import numpy.ma  # noqa: F401  (polars imports it at a worker's first Series from numpy)

import warmfit.replay.stream  # noqa: F401  (what the workers run)
from warmfit.run.workers import FORK_SERVER


def _told_it_is_the_fork_server() -> bool:
    """Whether the process that started this one named it its fork server (the
    variable is removed either way)."""
    return os.environ.pop(FORK_SERVER, None) == str(os.getppid())


#: Whether this process is the fork server (and the workers it forked).
SERVER = _told_it_is_the_fork_server()
if SERVER:
    atexit.register(os._exit, 0)
