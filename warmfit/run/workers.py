"""The worker processes of a large replay, started as early as the command can.

Workers come from a fork server (:mod:`multiprocessing`'s ``forkserver``)
that has imported :mod:`warmfit.replay.stream` once (:mod:`warmfit.replay.forkserver`),
so each worker starts in milliseconds, and the fork server keeps freed memory
(:func:`warmfit.run.memory.polars_keeps_freed_memory`). The fork server's imports
take about half a second; ``warmfit replay`` calls :func:`prestart` before it
imports polars itself, so that the two imports run side by side. The server
is told it is one (:data:`FORK_SERVER`), so that it ends at once after the
command instead of holding the command's output open while Python tears
polars down.

Nothing here imports polars, numpy or pyarrow.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from warmfit.errors import TraceError, UsageError
from warmfit.format.files import find_trace_files
from warmfit.run.memory import environment, keep_freed_memory, polars_keeps_freed_memory
from warmfit.run.signals import ctrl_c_ignored
from warmfit.show.names import printable

#: Trace files of at least this many bytes in all are replayed by worker
#: processes (about 1.5M readings: below it, starting them costs more than
#: they save; measured at 1e6, 1.2 s here against 1.6 s with two workers).
WORKER_BYTES = 32 * 2**20

#: What the fork server imports before it forks workers (see :mod:`warmfit.replay.forkserver`).
PRELOAD = ["warmfit.replay.forkserver"]
#: The environment variable that sets the size of polars' thread pool.
POLARS_THREADS = "POLARS_MAX_THREADS"
#: The environment variable that tells the fork server it is one: :func:`fork_context`
#: sets it, to the command's process id, only while it starts the server, and the
#: server's preload (:mod:`warmfit.replay.forkserver`) removes it.
FORK_SERVER = "WARMFIT_FORK_SERVER"
#: The environment variable that multiplies the time a replay's task may take
#: (:func:`warmfit.run.tasks.task_seconds`): 2 waits twice as long.
PATIENCE = "WARMFIT_WORKER_PATIENCE"
#: The longest path a Unix socket's address may hold (``sun_path``: 108 bytes on
#: Linux, 104 on macOS, the final NUL included): the smaller, less its NUL.
SOCKET_PATH_MAX = 103
#: Where the fork server's socket goes when TMPDIR is too deep for one: the folders
#: POSIX systems keep writable by anyone, first usable one.
SHORT_TEMP_FOLDERS = ("/tmp", "/var/tmp", "/usr/tmp")


def usable_cores() -> int:
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_jobs() -> int:
    """The worker processes a replay starts when not told (``--jobs``): the cores free
    now, those this process may use less the last minute's load average, rounded, and
    at least 1. On a busy machine more workers than free cores only wait for each other
    (measured on 2 cores at a load of 10: 19-26 s with two, 11.5 s with one)."""
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average here: every core
        return cores
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def jobs_line(files: Sequence[str | os.PathLike[str]], jobs: int | None, given: bool) -> str:
    """What ``replay --verbose`` says about its workers: how many, and why."""
    cores = usable_cores()
    try:
        load = f"load {os.getloadavg()[0]:.1f}"
    except OSError:
        load = "no load average"
    why = "--jobs" if given else f"the free cores: {cores} usable, {load}"
    jobs = default_jobs() if jobs is None else jobs
    if jobs > 1 and not wants_workers(files, jobs):
        size = sum(os.path.getsize(f) for f in files)
        return (
            f"jobs: {jobs} ({why}), but the trace's {size:,} bytes are under "
            f"{WORKER_BYTES // 2**20} MiB: replayed in this process"
        )
    where = "in this process" if jobs == 1 else f"in {jobs} worker processes"
    return f"jobs: {jobs} ({why}): replayed {where}"


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
    life of this process (it starts once). The server alone is given
    :data:`FORK_SERVER`, so that it ends at once after the command.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    jobs = default_jobs() if jobs is None else jobs
    threads = os.environ.get(POLARS_THREADS) or str(max(1, usable_cores() // jobs))
    said = stopped_server_message()
    if said is not None:  # killed by the watch below: no other server is started
        raise UsageError(said)
    with (
        polars_keeps_freed_memory(),
        environment(POLARS_THREADS, threads),
        environment(FORK_SERVER, _server_value()),
        _without_ctrl_c(),
    ):
        from multiprocessing import forkserver

        _socket_folder_that_fits()
        forkserver.ensure_running()
        _watch_server(getattr(forkserver._forkserver, "_forkserver_pid", None))
    _quiet_tracker_relaunch()
    return context


def _socket_folder_that_fits() -> None:
    """Make :mod:`multiprocessing`'s folder for its sockets where a socket's path fits.

    The fork server listens on a Unix socket, ``pymp-XXXXXXXX/listener-XXXXXXXX`` in
    TMPDIR; a TMPDIR deeper than about 70 bytes makes the path too long for a socket's
    address, and the first replay with workers ended in ``OSError: AF_UNIX path too
    long`` (a traceback). As CPython does from 3.14 (cpython#132124), such a TMPDIR
    keeps every other temporary file, and the folder for the sockets (a few bytes,
    removed at the end) is made in the first of :data:`SHORT_TEMP_FOLDERS` usable.
    """
    from multiprocessing import util

    base = tempfile.gettempdir()
    # len(base + "/pymp-XXXXXXXX" + "/listener-XXXXXXXX"): tempfile's names are 8 characters
    if len(os.fsencode(base)) + 14 + 18 <= SOCKET_PATH_MAX:
        return
    short = next((f for f in SHORT_TEMP_FOLDERS if _writable_folder(f)), None)
    if short is None:
        raise UsageError(
            f"the temporary folder {printable(base)} is too deep for the workers' socket "
            f"(a Unix socket's path holds at most {SOCKET_PATH_MAX} bytes), and none of "
            f"{', '.join(SHORT_TEMP_FOLDERS)} can be written; point TMPDIR at a shorter "
            "folder, or run with --jobs 1."
        )
    saved = tempfile.tempdir
    tempfile.tempdir = short
    try:
        util.get_temp_dir()  # made once, there, and removed at exit by multiprocessing
    finally:
        tempfile.tempdir = saved


def _writable_folder(folder: str) -> bool:
    return os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)


def _quiet_tracker_relaunch() -> None:
    """A killed resource tracker is started again by :mod:`multiprocessing` at the next
    resource, with a warning, and the new one prints a ``KeyError`` traceback for each
    resource the old one held: the relaunch is made with stderr on /dev/null and its
    warning dropped (the workers' semaphores are the only resources, and they end with
    the command)."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    original = tracker.ensure_running
    if getattr(original, "warmfit", False):
        return

    def ensure_running() -> None:
        pid = getattr(tracker, "_pid", None)
        if pid is None or not _gone(pid):
            original()  # first start, or alive: as multiprocessing does
            return
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                original()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(null)

    ensure_running.warmfit = True  # type: ignore[attr-defined]
    tracker.ensure_running = ensure_running  # type: ignore[method-assign]


#: Seconds the fork server may stay stopped (SIGSTOP) before it is killed.
SERVER_STOPPED_SECONDS = 5.0
_watched: set[int] = set()
_stopped_server: int | None = None


def stopped_server_message() -> str | None:
    """What to say when the fork server was killed for being stopped (None: it was not)."""
    if _stopped_server is None:
        return None
    return (
        f"the workers' fork server (process {_stopped_server}) was stopped (SIGSTOP, a "
        f"debugger, job control) for {SERVER_STOPPED_SECONDS:g} s, so no worker could "
        "start; nothing was written. Let it continue (kill -CONT) next time, or run with "
        "--jobs 1."
    )


def _watch_server(pid: int | None) -> None:
    """Watch the fork server from a daemon thread: stopped for :data:`SERVER_STOPPED_SECONDS`,
    it is killed, so that the command, waiting on it to start a worker, ends instead
    of waiting forever (its error then says why: :func:`stopped_server_message`)."""
    if pid is None or pid in _watched:
        return
    _watched.add(pid)

    def watch() -> None:
        global _stopped_server
        since: float | None = None
        while True:
            state = process_state(pid)
            if state is None or state in (b"Z", b"X"):
                return
            now = time.monotonic()
            since = (since or now) if state in (b"T", b"t") else None
            if since is not None and now - since >= SERVER_STOPPED_SECONDS:
                _stopped_server = pid
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.25)

    threading.Thread(target=watch, name="warmfit-fork-server", daemon=True).start()


def process_state(pid: int) -> bytes | None:
    """A process's state letter from ``/proc`` (``T``: stopped), or None: gone, or no
    ``/proc`` to read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return None


def _gone(pid: int) -> bool:
    """Whether process ``pid`` may have ended (exited, a zombie, or no ``/proc`` to tell):
    its ``/proc`` entry is looked up without a file descriptor first, so that a process
    out of descriptors (RLIMIT_NOFILE) never takes a living one for gone."""
    if not os.path.exists(f"/proc/{pid}"):
        return True
    return process_state(pid) in (b"Z", b"X")


def _server_value() -> str:
    """:data:`FORK_SERVER`'s value: the command's process id, then ``+`` where the
    server is started from the main thread (the kernel may then end the server
    with the command: :func:`die_with_parent`), ``-`` where not."""
    main = threading.current_thread() is threading.main_thread()
    return f"{os.getpid()}{'+' if main else '-'}"


def told_fork_server(value: str | None) -> tuple[int, bool] | None:
    """What :data:`FORK_SERVER` says: the command's process id and whether the server
    was started from its main thread; None where it says nothing."""
    if not value or value[-1] not in "+-" or not value[:-1].isdigit():
        return None
    return int(value[:-1]), value[-1] == "+"


def _without_ctrl_c() -> contextlib.AbstractContextManager[None]:
    """Ctrl-C ignored by the processes started meanwhile (the fork server, and the
    workers it forks): a terminal sends it to every process of the command, and
    the command alone handles it, ending them. Python sets the fork server's own
    handler only after it has imported its preload, and would print a
    traceback for a Ctrl-C before."""
    return ctrl_c_ignored()


def new_pool(jobs: int, context: Any = None) -> ProcessPoolExecutor:
    """``jobs`` worker processes from the fork server (each started when first needed);
    ``context``: :func:`fork_context`'s, when it was called already (it sets the
    environment for a moment, which another thread must not do)."""
    context = fork_context(jobs) if context is None else context
    return ProcessPoolExecutor(jobs, mp_context=context, initializer=start_worker)


def end_workers(pool: ProcessPoolExecutor) -> None:
    """Kill ``pool``'s worker processes now, whatever they are doing (stopped by a
    signal, say): for a command that is failing or was interrupted, whose batches
    nobody will see. :meth:`~concurrent.futures.Executor.shutdown` then finds the
    pool broken and returns at once."""
    processes = getattr(pool, "_processes", None) or {}  # the executor's own record
    for process in list(processes.values()):
        with contextlib.suppress(OSError, ValueError):  # exited already, or closed
            process.kill()


def stopped_workers(pool: ProcessPoolExecutor) -> list[int]:
    """The process ids of ``pool``'s workers that are stopped (state ``T``: SIGSTOP,
    job control; ``t``: a debugger), read from ``/proc`` (none elsewhere)."""
    processes = getattr(pool, "_processes", None) or {}
    stopped = []
    for pid in list(processes):
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                state = stat.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state in (b"T", b"t"):
            stopped.append(pid)
    return stopped


def patience() -> float:
    """:data:`PATIENCE` from the environment: how many times the usual allowance a
    replay's task may take (1 when unset)."""
    text = os.environ.get(PATIENCE, "").strip()
    if not text:
        return 1.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value < float("inf")):
        raise UsageError(f"{PATIENCE} must be a positive number, such as 2; got {text!r}.")
    return value


def start_worker() -> None:
    """A worker process: keep freed memory; leave Ctrl-C to the parent, which stops it;
    end when the fork server, its parent, ends (the fork server ends with the command:
    :func:`die_with_parent`)."""
    die_with_parent(os.getppid())
    folder = os.environ.get("TMPDIR")  # as the command's (warmfit.cli.pin_temporary_folder)
    if folder and os.path.isdir(folder):
        tempfile.tempdir = os.path.abspath(folder)
    keep_freed_memory()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


#: prctl(2)'s option that asks the kernel to signal a process when its parent ends.
PR_SET_PDEATHSIG = 1
#: How often a process without that option looks whether its parent has ended.
PARENT_POLL_S = 0.5


def die_with_parent(parent: int, kernel: bool = True) -> None:
    """End this process (SIGKILL) as soon as ``parent``, the process that started it,
    ends, however it ends (SIGKILL included: nothing of the parent's runs then).

    On Linux the kernel does it (``prctl(PR_SET_PDEATHSIG)``, asked for through
    ctypes); ``kernel=False``, or where that cannot be asked, a daemon thread looks
    every :data:`PARENT_POLL_S` whether this process was handed to another parent.
    The kernel's signal comes when the *thread* that started this process ends, so
    a process started from another thread than its parent's main one passes
    ``kernel=False``. A parent that has ended already ends this process now.
    """
    asked = kernel and _kernel_signals_parent_death()
    if os.getppid() != parent:  # it ended before the kernel was asked
        os._exit(1)
    if not asked:
        threading.Thread(
            target=_watch_parent, args=(parent,), name="warmfit-parent", daemon=True
        ).start()


def _kernel_signals_parent_death() -> bool:
    """Ask the kernel for SIGKILL when the parent ends; whether it was asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc to ask: the thread watches instead
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGKILL)


def index_task(path: str) -> Any:
    """:func:`warmfit.format.batches.index_file` as a task this module can name without
    importing polars (the parent of an early pool has not imported it yet)."""
    from warmfit.format.batches import index_file

    return index_file(path)


@dataclass
class EarlyPool:
    """Worker processes started by :func:`prestart`, indexing the files already."""

    jobs: int
    files: tuple[str, ...]
    #: Per file, its size and modification time when the index was asked for.
    stats: tuple[tuple[int, int], ...]
    #: Set by the thread that starts the pool (starting blocks until the fork
    #: server has imported warmfit).
    pool: ProcessPoolExecutor | None = None
    #: Per file, in order: its index (:func:`index_task`).
    index: list[Future[Any]] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)

    def serves(self, files: Sequence[str], jobs: int, stats: tuple[tuple[int, int], ...]) -> bool:
        """Whether it was started for these files, unchanged since, and jobs."""
        return (self.files, self.jobs, self.stats) == (tuple(files), jobs, stats)


_early: EarlyPool | None = None


def prestart(paths: Sequence[str | os.PathLike[str]], jobs: int | None, cluster: object) -> None:
    """For a command: if a replay of ``paths`` will use workers, start them now, and
    have them index the files (:func:`take_early_pool` hands both to the replay).

    The pool is started in a thread: starting a worker waits until the fork
    server has imported warmfit (about 0.4 s), and the command imports polars
    meanwhile; the workers then index the files while it finishes. Errors in
    ``paths`` are left to the replay, which names them.
    """
    global _early
    if cluster is not None:
        return
    try:
        files = tuple(str(f) for f in find_trace_files(paths))
        wanted = wants_workers(files, jobs)
        stats = _stats(files)
    except (TraceError, OSError):
        return
    if not wanted:
        return
    jobs = default_jobs() if jobs is None else jobs
    if _early is not None:
        if _early.serves(files, jobs, stats):
            return  # started already for this replay
        discard_early_pool()
    context = fork_context(jobs)  # in this thread: it sets the environment for a moment
    early = _early = EarlyPool(jobs, files, stats)

    def start() -> None:
        pool = None
        try:
            pool = new_pool(jobs, context)
            early.index = [pool.submit(index_task, f) for f in files]
            early.pool = pool
        except BaseException:  # no pool, then: the replay starts its own, and says why
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            early.index = []
        finally:
            early.started.set()

    threading.Thread(target=start, name="warmfit-workers", daemon=True).start()


def take_early_pool(files: Sequence[str], jobs: int) -> EarlyPool | None:
    """The pool :func:`prestart` started for these ``files`` and ``jobs``, once (None:
    none was, or for another replay)."""
    global _early
    early = _early
    if early is None:
        return None
    try:
        same = early.serves(files, jobs, _stats(files))
    except OSError:
        same = False
    if not same:  # another replay, or a file changed since: its index may be stale
        discard_early_pool()
        return None
    _early = None
    early.started.wait()
    return early if early.pool is not None else None


def discard_early_pool(now: bool = False) -> None:
    """Stop the pool :func:`prestart` started, if no replay took it; ``now``: kill its
    workers first (the command is failing or was interrupted)."""
    global _early
    early, _early = _early, None
    if early is not None:
        early.started.wait()
        if early.pool is not None:
            if now:
                end_workers(early.pool)
            early.pool.shutdown(wait=now, cancel_futures=True)


def _stats(files: Sequence[str]) -> tuple[tuple[int, int], ...]:
    return tuple((s.st_size, s.st_mtime_ns) for s in map(os.stat, files))
