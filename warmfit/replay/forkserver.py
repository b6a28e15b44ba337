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
import sys
import traceback
from typing import Any

# First, before the imports that take half a second: a command killed meanwhile (even
# by SIGKILL) must not leave this server, nor its workers, running.
from warmfit.run.workers import FORK_SERVER, die_with_parent, told_fork_server


def _told_it_is_the_fork_server() -> bool:
    """Whether the command that started this process named it its fork server (the
    variable is removed either way). If so, this process ends when the command does,
    and at once where the command has ended already (interrupted while this server
    was starting)."""
    told = told_fork_server(os.environ.pop(FORK_SERVER, None))
    if told is None:
        return False
    command, from_main_thread = told
    die_with_parent(command, kernel=from_main_thread)  # exits if the command has ended
    return True


#: Whether this process is the fork server (and the workers it forked).
SERVER = _told_it_is_the_fork_server()

import numpy.ma  # noqa: E402, F401  (polars imports it at a worker's first Series from numpy)

import warmfit.replay.stream  # noqa: E402, F401  (what the workers run)


def _quiet_when_the_command_left(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    """The fork server's ``sys.excepthook``: silent for a worker that could not start
    because the command ended as it was starting it (stopped, or failing): the
    worker finds its start-up data gone (an ``OSError`` or ``EOFError`` raised
    while :mod:`multiprocessing` reads it); and for the server when it cannot take a
    new worker's descriptors (too many open files). Anything else is printed as
    Python would."""
    frames = traceback.extract_tb(tb)
    starting = any(f.name == "_main" and f.filename.endswith("spawn.py") for f in frames)
    if starting and issubclass(kind, (OSError, EOFError)):
        return
    # The server itself, out of file descriptors (a low ulimit -n), cannot take the
    # descriptors of a worker to start: the command names the limit, in one line.
    receiving = any(f.name == "recvfds" for f in frames)
    if receiving and issubclass(kind, (OSError, EOFError, AssertionError)):
        return
    sys.__excepthook__(kind, value, tb)


if SERVER:
    atexit.register(os._exit, 0)
    sys.excepthook = _quiet_when_the_command_left
