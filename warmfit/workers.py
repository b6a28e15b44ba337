"""The worker processes of a large replay, started as early as a command can.

Workers come from a fork server (:mod:`multiprocessing`'s ``forkserver``)
that has imported :mod:`warmfit.replay.stream` once (:mod:`warmfit.forkserver`,
which also makes it end at once after the command), so each worker starts in
milliseconds, and the fork server keeps freed memory
(:func:`warmfit.memory.polars_keeps_freed_memory`). The fork server's imports
take about half a second; ``warmfit replay`` calls :func:`prestart` before it
imports polars itself, so that the two imports run side by side.

Nothing here imports polars, numpy or pyarrow.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from typing import Any

from warmfit.errors import TraceError
from warmfit.files import find_trace_files
from warmfit.memory import environment, polars_keeps_freed_memory

#: Trace files of at least this many bytes in all are replayed by worker
#: processes (about 1.5M readings: below it, starting them costs more than
#: they save; measured at 1e6, 1.2 s here against 1.6 s with two workers).
WORKER_BYTES = 32 * 2**20

#: What the fork server imports before it forks workers (see :mod:`warmfit.forkserver`).
PRELOAD = ["warmfit.forkserver"]
#: The environment variable that sets the size of polars' thread pool.
POLARS_THREADS = "POLARS_MAX_THREADS"


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def wants_workers(files: Sequence[str | os.PathLike[str]], jobs: int | None) -> bool:
    """Whether a replay of ``files`` with ``jobs`` (None: every core) uses worker processes."""
    jobs = default_jobs() if jobs is None else jobs
    return jobs > 1 and sum(os.path.getsize(f) for f in files) >= WORKER_BYTES


def fork_context(jobs: int | None = None) -> Any:
    """The fork server's context, its server started (at once; it imports in the background).

    The fork server imports polars afresh: its allocator keeps freed pages,
    and, unless ``POLARS_MAX_THREADS`` is set, polars in each of the ``jobs``
    workers (None: every core) gets its share of the cores. Two workers with
    two polars threads each on 2 cores took 3.6 s for a 1e7 replay, against
    3.3 s with one thread each. The settings are the fork server's for the
    life of this process (it starts once).
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    jobs = default_jobs() if jobs is None else jobs
    threads = os.environ.get(POLARS_THREADS) or str(max(1, default_jobs() // jobs))
    with polars_keeps_freed_memory(), environment(POLARS_THREADS, threads):
        from multiprocessing import forkserver

        forkserver.ensure_running()
    return context


def prestart(paths: Sequence[str | os.PathLike[str]], jobs: int | None, cluster: object) -> None:
    """For a command: start the fork server now if a replay of ``paths`` will use workers.

    Errors in ``paths`` are left to the replay, which names them.
    """
    if cluster is not None:
        return
    try:
        files = find_trace_files(paths)
        wanted = wants_workers(files, jobs)
    except (TraceError, OSError):
        return
    if wanted:
        fork_context(jobs)


def prestart_from_argv(argv: Sequence[str]) -> None:
    """For the program, before it parses its command line: :func:`prestart` for a
    ``warmfit replay`` (``argv`` without the program name) that will use workers.

    The command line's parser takes a tenth of a second to reach the command;
    starting the fork server before it lets the workers' imports run beside
    the command's from the start (a cold 1e7 replay planned its batches about
    0.1 s sooner). The command line is read loosely here, for this guess only:
    its paths are the arguments that exist on disk, ``-j``/``--jobs`` is read
    when it is a number, and ``--cluster`` or ``--help`` start nothing.
    Whatever it misreads, the command parses ``argv`` again and calls
    :func:`prestart` itself, which does nothing when the server runs; at
    worst a server starts for a replay that ends in a usage error.
    """
    if not argv or argv[0] != "replay":
        return
    args = list(argv[1:])
    if any(a in ("--help", "-h") or a == "--cluster" or a.startswith("--cluster=") for a in args):
        return
    jobs: int | None = None
    for i, arg in enumerate(args):
        value = None
        if arg in ("-j", "--jobs") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--jobs="):
            value = arg.removeprefix("--jobs=")
        elif arg.startswith("-j") and arg != "-j":
            value = arg.removeprefix("-j")
        if value is not None:
            jobs = int(value) if value.isdigit() and int(value) > 0 else None
    paths = [a for a in args if not a.startswith("-") and os.path.exists(a)]
    if paths:
        prestart(paths, jobs, None)
