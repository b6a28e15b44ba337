"""The worker processes and their fork server end with the command, however it ends.

Issue 42: ``replay --jobs 2`` whose command got SIGKILL (at 0.3, 1.0 and 2.5 s),
SIGHUP or SIGQUIT left the fork server and the workers running (the workers
hold the write end of their own task queue, so they never see it close, and
the fork server waits for them). Each test here starts the command in its own
session (:class:`tests.test_faults.Started`) and looks at every process of
that session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from time import sleep as real_sleep
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.test_faults import Started, trace  # noqa: F401  (the fixture, shared)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, uses sessions")

#: How long the processes of a killed command may outlive it.
GRACE_S = 5


def when(started: Started, moment: str) -> None:
    """Wait for ``moment``: a time in seconds after the start, or "workers" (both
    workers forked and replaying)."""
    if moment == "workers":
        while len(started.workers()) < 2:
            assert started.process.poll() is None, started.process.communicate()
            time.sleep(0.02)
        time.sleep(0.3)  # replaying, a task each
    else:
        time.sleep(float(moment))


def left_after_grace(started: Started) -> list[int]:
    """The command's session after :data:`GRACE_S` (what is left then is killed)."""
    deadline = time.monotonic() + GRACE_S
    while started.session() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = started.session()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize(
    "moment, per_wave",
    [
        ("0.3", False),
        ("workers", False),
        ("workers", True),
        pytest.param("1.0", False, marks=pytest.mark.slow),
        pytest.param("2.5", False, marks=pytest.mark.slow),
        pytest.param("2.5", True, marks=pytest.mark.slow),
    ],
)
def test_a_command_killed_with_sigkill_leaves_no_process(
    trace: Path,  # noqa: F811
    tmp_path: Path,
    moment: str,
    per_wave: bool,
) -> None:
    extra = ["--per-wave", str(tmp_path / "waves.parquet")] if per_wave else []
    started = Started(trace, tmp_path, *extra)
    when(started, moment)
    os.kill(started.process.pid, signal.SIGKILL)
    started.process.wait()  # not its output: what it left would hold that open
    left = left_after_grace(started)
    started.process.communicate()
    assert left == []


def test_a_killed_fork_server_takes_its_workers_with_it(trace: Path, tmp_path: Path) -> None:  # noqa: F811
    """The workers' parent is the fork server: it ending ends them (and the command
    then says a worker died: exit 2, one line)."""
    started = Started(trace, tmp_path)
    when(started, "workers")
    server = int(
        Path(f"/proc/{started.workers()[0]}/stat").read_text().rpartition(")")[2].split()[1]
    )
    os.kill(server, signal.SIGKILL)
    code, _, err = started.finish(limit=60)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("sent, code", [(signal.SIGHUP, 129), (signal.SIGQUIT, 131)])
def test_sighup_and_sigquit_end_the_command_like_sigterm(
    trace: Path,  # noqa: F811
    tmp_path: Path,
    sent: int,
    code: int,
) -> None:
    """Before: SIGHUP killed the command at once (no line) and SIGQUIT dumped core,
    each leaving the fork server and the workers running."""
    started = Started(trace, tmp_path)
    when(started, "workers")
    os.kill(started.process.pid, sent)
    status, out, err = started.finish(limit=60)
    assert status == code, err
    assert "Traceback" not in err and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "terminated (SIG" in lines[0], err
    assert list(started.tmp.iterdir()) == []


def fork_server(started: Started) -> int:
    """The command's fork server, once it runs (the process of the session that the
    command started with multiprocessing's forkserver main)."""
    while True:
        assert started.process.poll() is None, started.process.communicate()
        for pid in started.session():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
            except OSError:
                continue
            if b"forkserver import main" in command and parent == started.process.pid:
                return pid
        time.sleep(0.005)


def test_a_stopped_fork_server_ends_the_command_with_exit_2(
    trace: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: the command waited forever for the stopped server to start a worker."""
    started = Started(trace, tmp_path)
    server = fork_server(started)
    os.kill(server, signal.SIGSTOP)
    code, out, err = started.finish(limit=60)
    assert code == 2, err
    assert "Traceback" not in err and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"fork server (process {server}) was stopped" in lines[0], err
    assert list(started.tmp.iterdir()) == []


def test_a_killed_resource_tracker_prints_no_traceback(
    trace: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Before: multiprocessing started a new tracker with a warning, and the new one
    printed a KeyError traceback for each semaphore the killed one held."""
    started = Started(trace, tmp_path)
    when(started, "workers")
    trackers = [
        pid
        for pid in started.session()
        if b"resource_tracker import main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    assert trackers, "no resource tracker in the session"
    os.kill(trackers[0], signal.SIGKILL)
    code, _, err = started.finish(limit=120)
    assert code == 0, err
    assert "Traceback" not in err and "resource_tracker" not in err, err


# --------------------------------------------------------------------------- the fork server's hook


def _raised_in(function: str, filename: str, error: BaseException) -> tuple[Any, ...]:
    """``sys.exc_info()`` of ``error`` raised in a function ``function`` of a file named
    ``filename`` (compiled under that name), as the fork server's hook is given it."""
    code = compile(f"def {function}(error):\n    raise error\n", filename, "exec")
    space: dict[str, Any] = {}
    exec(code, space)
    try:
        space[function](error)
    except BaseException:
        return sys.exc_info()
    raise AssertionError("not raised")


@pytest.mark.parametrize(
    ("function", "filename", "error", "silent"),
    [
        # a worker that cannot start because the command ended as it started it
        ("_main", "/usr/lib/python3/multiprocessing/spawn.py", OSError(9, "gone"), True),
        ("_main", "/usr/lib/python3/multiprocessing/spawn.py", EOFError(), True),
        ("_main", "/usr/lib/python3/multiprocessing/spawn.py", ValueError("a bug"), False),
        ("_main", "/usr/lib/python3/other.py", OSError(9, "gone"), False),
        ("main", "/usr/lib/python3/multiprocessing/spawn.py", OSError(9, "gone"), False),
        # the server, out of file descriptors, taking a new worker's
        ("recvfds", "/usr/lib/python3/multiprocessing/reduction.py", AssertionError(), True),
        ("recvfds", "/usr/lib/python3/multiprocessing/reduction.py", OSError(24, "many"), True),
        ("recvfds", "/usr/lib/python3/multiprocessing/reduction.py", ValueError("bug"), False),
        ("sendfds", "/usr/lib/python3/multiprocessing/reduction.py", AssertionError(), False),
    ],
)
def test_the_fork_server_is_silent_only_for_a_command_that_left(
    function: str,
    filename: str,
    error: BaseException,
    silent: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fork server's ``sys.excepthook`` says nothing for the two failures that mean
    the command has gone (a worker's start-up data gone; the server out of descriptors),
    and prints any other exception as Python would."""
    from warmfit.replay.forkserver import _quiet_when_the_command_left

    printed: list[type[BaseException]] = []
    monkeypatch.setattr(sys, "__excepthook__", lambda kind, value, tb: printed.append(kind))
    _quiet_when_the_command_left(*_raised_in(function, filename, error))
    assert printed == ([] if silent else [type(error)])


# --------------------------------------------------------------------------- in this process
# warmfit.run.workers's own rules, called here (the commands above run in processes of
# their own, which a mutant's run does not trace); no fork server is started.


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this test's own (``sleep``), killed at the end."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def wait_for_state(pid: int, states: tuple[bytes, ...]) -> None:
    from warmfit.run.workers import process_state

    deadline = time.monotonic() + 10
    while process_state(pid) not in states:
        assert time.monotonic() < deadline, process_state(pid)
        time.sleep(0.01)


def test_usable_cores_are_this_process_s_or_every_core_or_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from warmfit.run import workers

    asked: list[int] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: asked.append(pid) or {0, 3, 5})
    assert workers.usable_cores() == 3 and asked == [0]
    monkeypatch.delattr(os, "sched_getaffinity")  # not on Linux
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert workers.usable_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown
    assert workers.usable_cores() == 1


@pytest.mark.parametrize(
    ("cores", "load", "jobs"),
    [
        (4, 0.0, 4),
        (4, 1.4, 3),  # 2.6 free: 3
        (4, 1.5, 3),  # 2.5 free: rounded up
        (4, 1.502, 2),  # 2.498 free: rounded down
        (4, 1.6, 2),
        (4, 3.6, 1),
        (4, 10.0, 1),  # never fewer than 1
        (2, -1.0, 2),  # never more than the cores
        (1, None, 1),
        (3, None, 3),  # no load average: every core
    ],
)
def test_default_jobs_are_the_free_cores_rounded(
    monkeypatch: pytest.MonkeyPatch, cores: int, load: float | None, jobs: int
) -> None:
    from warmfit.run import workers

    def getloadavg() -> tuple[float, float, float]:
        if load is None:
            raise OSError("no load average")
        return (load, 99.0, 99.0)

    monkeypatch.setattr(workers, "usable_cores", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", getloadavg)
    assert workers.default_jobs() == jobs


def sized(folder: Path, *sizes: int) -> list[str]:
    """Sparse files of these sizes."""
    paths = []
    for i, size in enumerate(sizes):
        path = folder / f"{i}.parquet"
        with open(path, "wb") as out:
            out.truncate(size)
        paths.append(str(path))
    return paths


def test_workers_replay_traces_of_32_mib_and_more_with_2_jobs_and_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmfit.run import workers

    assert workers.WORKER_BYTES == 32 * 2**20
    (tmp_path / "less").mkdir()
    exactly = sized(tmp_path, 2**20, 31 * 2**20)
    less = sized(tmp_path / "less", 32 * 2**20 - 1)
    assert workers.wants_workers(exactly, 2) and workers.wants_workers(exactly, 5)
    assert not workers.wants_workers(less, 2)
    assert not workers.wants_workers(exactly, 1)
    monkeypatch.setattr(workers, "default_jobs", lambda: 2)
    assert workers.wants_workers(exactly, None)
    monkeypatch.setattr(workers, "default_jobs", lambda: 1)
    assert not workers.wants_workers(exactly, None)


def test_the_jobs_line_says_how_many_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmfit.run import workers

    monkeypatch.setattr(workers, "usable_cores", lambda: 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 0.0, 0.0))
    big = sized(tmp_path, 40 * 2**20)
    (tmp_path / "s").mkdir()
    small = sized(tmp_path / "s", 1000, 234)
    assert workers.jobs_line(big, 2, True) == "jobs: 2 (--jobs): replayed in 2 worker processes"
    assert workers.jobs_line(big, 1, True) == "jobs: 1 (--jobs): replayed in this process"
    assert workers.jobs_line(small, 1, True) == "jobs: 1 (--jobs): replayed in this process"
    for jobs in (2, 3):
        assert workers.jobs_line(small, jobs, True) == (
            f"jobs: {jobs} (--jobs), but the trace's 1,234 bytes are under 32 MiB: replayed in "
            "this process"
        )
    assert workers.jobs_line(big, None, False) == (
        "jobs: 3 (the free cores: 4 usable, load 1.2): replayed in 3 worker processes"
    )

    def no_load() -> tuple[float, float, float]:
        raise OSError

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert workers.jobs_line(big, None, False) == (
        "jobs: 4 (the free cores: 4 usable, no load average): replayed in 4 worker processes"
    )


@pytest.mark.parametrize(
    ("value", "told"),
    [
        ("4242+", (4242, True)),
        ("4242-", (4242, False)),
        ("7+", (7, True)),
        (None, None),
        ("", None),
        ("4242", None),  # no mark
        ("4242*", None),
        ("+", None),  # no process id
        ("42a2+", None),
        ("+4242", None),
        ("-4242-", None),
    ],
)
def test_the_fork_servers_flag_names_the_command_and_its_thread(
    value: str | None, told: tuple[int, bool] | None
) -> None:
    from warmfit.run.workers import told_fork_server

    assert told_fork_server(value) == told


def test_the_flag_says_whether_the_server_was_started_from_the_main_thread() -> None:
    from warmfit.run.workers import _server_value, told_fork_server

    assert _server_value() == f"{os.getpid()}+"
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(_server_value()))
    thread.start()
    thread.join()
    assert seen == [f"{os.getpid()}-"]
    assert told_fork_server(seen[0]) == (os.getpid(), False)


def test_process_state_and_gone_read_proc(child: subprocess.Popen[bytes]) -> None:
    from warmfit.run.workers import _gone, process_state

    assert process_state(os.getpid()) == b"R"  # running: reading its own
    wait_for_state(child.pid, (b"S",))
    assert not _gone(child.pid)
    os.kill(child.pid, signal.SIGSTOP)
    wait_for_state(child.pid, (b"T",))
    assert not _gone(child.pid)
    os.kill(child.pid, signal.SIGKILL)
    wait_for_state(child.pid, (b"Z",))  # not reaped yet
    assert _gone(child.pid)
    child.wait()
    assert process_state(child.pid) is None and _gone(child.pid)


def test_a_process_whose_name_holds_a_parenthesis_is_read_from_its_last_one() -> None:
    """``/proc/PID/stat``'s second field is the name in parentheses, which may hold
    ``) R (``: the state is the first field after the last ``)``."""
    from warmfit.run import workers

    code = "import ctypes, sys, time\nctypes.CDLL(None).prctl(15, b'a) R (b', 0, 0, 0)\nprint(1, flush=True)\ntime.sleep(60)\n"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"1\n"
        os.kill(process.pid, signal.SIGSTOP)
        wait_for_state(process.pid, (b"T",))
        assert workers.stopped_workers(SimpleNamespace(_processes={process.pid: None})) == [
            process.pid
        ]  # type: ignore[arg-type]
    finally:
        process.kill()
        process.wait()


def test_stopped_workers_are_those_in_state_t(child: subprocess.Popen[bytes]) -> None:
    from warmfit.run.workers import stopped_workers

    gone = subprocess.Popen(["true"])
    gone.wait()
    pool: Any = SimpleNamespace(_processes={os.getpid(): None, child.pid: None, gone.pid: None})
    wait_for_state(child.pid, (b"S",))
    assert stopped_workers(pool) == []
    os.kill(child.pid, signal.SIGSTOP)
    wait_for_state(child.pid, (b"T",))
    assert stopped_workers(pool) == [child.pid]
    assert stopped_workers(SimpleNamespace()) == []  # type: ignore[arg-type]
    assert stopped_workers(SimpleNamespace(_processes=None)) == []  # type: ignore[arg-type]


def test_end_workers_kills_each_worker_even_when_one_has_gone() -> None:
    from warmfit.run.workers import end_workers

    killed: list[str] = []

    class Process:
        def __init__(self, name: str, error: type[Exception] | None = None) -> None:
            self.name, self.error = name, error

        def kill(self) -> None:
            killed.append(self.name)
            if self.error is not None:
                raise self.error("exited, or closed")

    processes = {1: Process("a", OSError), 2: Process("b", ValueError), 3: Process("c")}
    end_workers(SimpleNamespace(_processes=processes))  # type: ignore[arg-type]
    assert killed == ["a", "b", "c"]
    end_workers(SimpleNamespace(_processes=None))  # type: ignore[arg-type]
    end_workers(SimpleNamespace())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "patience"),
    [(None, 1.0), ("", 1.0), ("  ", 1.0), ("2", 2.0), (" 0.5 ", 0.5), ("1e-9", 1e-9)],
)
def test_patience_is_a_positive_number_1_when_unset(
    monkeypatch: pytest.MonkeyPatch, text: str | None, patience: float
) -> None:
    from warmfit.run.workers import PATIENCE
    from warmfit.run.workers import patience as read

    if text is None:
        monkeypatch.delenv(PATIENCE, raising=False)
    else:
        monkeypatch.setenv(PATIENCE, text)
    assert read() == patience


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "two", "0.0"])
def test_a_patience_that_is_no_positive_number_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    from warmfit.errors import UsageError
    from warmfit.run.workers import PATIENCE, patience

    monkeypatch.setenv(PATIENCE, text)
    with pytest.raises(UsageError) as raised:
        patience()
    assert str(raised.value) == (
        f"WARMFIT_WORKER_PATIENCE must be a positive number, such as 2; got {text!r}."
    )


@pytest.fixture
def socket_dir(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """multiprocessing's folder for its sockets, never made: the tempfile.tempdir it
    would be made in (one entry a call)."""
    from multiprocessing import util

    made: list[str | None] = []
    monkeypatch.setattr(util, "get_temp_dir", lambda: made.append(tempfile.tempdir))
    return made


def test_a_temporary_folder_whose_socket_path_fits_is_kept(
    monkeypatch: pytest.MonkeyPatch, socket_dir: list[str | None]
) -> None:
    """A socket's path is TMPDIR + 14 + 18 bytes; it fits in 103 (TMPDIR of 71 bytes)."""
    from warmfit.run import workers

    assert workers.SOCKET_PATH_MAX == 103
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/" + "d" * 70)
    workers._socket_folder_that_fits()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: "/" + "é" * 35)  # 71 bytes, 36 characters
    workers._socket_folder_that_fits()
    assert socket_dir == []


def test_a_temporary_folder_too_deep_puts_the_sockets_in_the_first_usable_short_one(
    monkeypatch: pytest.MonkeyPatch, socket_dir: list[str | None], tmp_path: Path
) -> None:
    """The first of SHORT_TEMP_FOLDERS that is a folder this process may write and
    search; a missing one, a file (even one it may write and run), a folder it may not
    write (where the test is not run as root, who may write any) are passed over."""
    from warmfit.errors import UsageError
    from warmfit.run import workers

    missing, a_file, locked, usable, other = (
        str(tmp_path / n) for n in ("missing", "file", "locked", "usable", "other")
    )
    Path(a_file).write_bytes(b"")
    os.chmod(a_file, 0o777)
    for folder in (locked, usable, other):
        os.mkdir(folder)
    os.chmod(locked, 0o500)
    unusable = (missing, a_file, locked) if not os.access(locked, os.W_OK) else (missing, a_file)
    try:
        monkeypatch.setattr(workers, "SHORT_TEMP_FOLDERS", (*unusable, usable, other))
        monkeypatch.setattr(
            tempfile, "gettempdir", lambda: "/" + "d" * 71
        )  # 72 bytes: one too many
        saved = tempfile.tempdir
        workers._socket_folder_that_fits()
        assert socket_dir == [usable] and tempfile.tempdir == saved
        monkeypatch.setattr(workers, "SHORT_TEMP_FOLDERS", unusable)
        with pytest.raises(UsageError) as raised:
            workers._socket_folder_that_fits()
        said = str(raised.value)
        assert f"none of {', '.join(unusable)} can be written" in said
        assert "at most 103 bytes" in said and socket_dir == [usable]
    finally:
        os.chmod(locked, 0o700)


def test_the_fork_server_gets_its_polars_threads_flag_and_no_ctrl_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fork_context starts the server with POLARS_MAX_THREADS (the cores shared by the
    jobs, at least 1, unless set), its flag, and Ctrl-C ignored; this process's
    environment and handler are as before afterwards. (The server is not started here.)"""
    from multiprocessing import forkserver

    from warmfit.run import workers

    started: list[tuple[str | None, str | None, object]] = []
    watched: list[object] = []

    def ensure_running() -> None:
        started.append((
            os.environ.get(workers.POLARS_THREADS),
            os.environ.get(workers.FORK_SERVER),
            signal.getsignal(signal.SIGINT),
        ))  # fmt: skip

    monkeypatch.setattr(forkserver, "ensure_running", ensure_running)
    monkeypatch.setattr(workers, "_watch_server", watched.append)
    monkeypatch.setattr(workers, "usable_cores", lambda: 4)
    monkeypatch.setattr(workers, "default_jobs", lambda: 3)
    monkeypatch.delenv(workers.POLARS_THREADS, raising=False)
    monkeypatch.delenv(workers.FORK_SERVER, raising=False)
    handler = signal.getsignal(signal.SIGINT)
    flag = f"{os.getpid()}+"
    for jobs, threads in [(1, "4"), (2, "2"), (3, "1"), (8, "1"), (None, "1")]:
        context = workers.fork_context(jobs)
        assert context.get_start_method() == "forkserver"
        assert started.pop() == (threads, flag, signal.SIG_IGN)
    monkeypatch.setenv(workers.POLARS_THREADS, "6")
    workers.fork_context(2)
    assert started.pop() == ("6", flag, signal.SIG_IGN)
    assert os.environ[workers.POLARS_THREADS] == "6" and workers.FORK_SERVER not in os.environ
    assert signal.getsignal(signal.SIGINT) is handler
    assert len(watched) == 6


def test_no_fork_server_is_started_after_one_was_killed_for_being_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from multiprocessing import forkserver

    from warmfit.errors import UsageError
    from warmfit.run import workers

    monkeypatch.setattr(forkserver, "ensure_running", lambda: pytest.fail("started"))
    monkeypatch.setattr(workers, "_stopped_server", 4321)
    with pytest.raises(UsageError) as raised:
        workers.fork_context(1)
    assert str(raised.value) == workers.stopped_server_message()
    assert str(raised.value).startswith(
        "the workers' fork server (process 4321) was stopped (SIGSTOP, a debugger, job "
        "control) for 5 s, so no worker could start"
    )
    monkeypatch.setattr(workers, "_stopped_server", None)
    assert workers.stopped_server_message() is None


def test_a_stopped_fork_server_is_killed_after_5_s_stopped(
    monkeypatch: pytest.MonkeyPatch, child: subprocess.Popen[bytes]
) -> None:
    """The watch looks every 0.25 s (a clock here that moves only as it sleeps): stopped
    (T or t) for 5 s, the server is killed and named; running again, the count starts
    anew."""
    from warmfit.run import workers

    now = [0.0]
    states = iter([b"S", b"T", b"R"] + [b"t"] * 19 + [b"T"] * 100)
    looks: list[float] = []

    real_state = workers.process_state

    watcher: list[int] = []  # the thread watching the child: the only one the clock follows

    def process_state(pid: int) -> bytes | None:
        if pid != child.pid:  # another watch of this process (a real fork server's)
            return real_state(pid)
        watcher[:] = [threading.get_ident()]
        looks.append(now[0])
        return next(states)

    def sleep(seconds: float) -> None:
        if watcher != [threading.get_ident()]:  # a real server's watch sleeps for real
            real_sleep(seconds)  # (it moved this clock too, once a CI run: looks 0.5 s apart)
            return
        now[0] += seconds
        real_sleep(0.001)

    monkeypatch.setattr(workers, "time", SimpleNamespace(monotonic=lambda: now[0], sleep=sleep))
    monkeypatch.setattr(workers, "process_state", process_state)
    monkeypatch.setattr(workers, "_watched", set())
    monkeypatch.setattr(workers, "_stopped_server", None)
    watches = watch_threads(lambda: workers._watch_server(child.pid))
    assert len(watches) == 1
    watches[0].join(10)
    assert child.wait(10) == -signal.SIGKILL
    # stopped from the 4th look (0.75 s): killed at the 24th (5.75 s), no later look
    assert looks == [0.25 * k for k in range(24)]
    assert workers._stopped_server == child.pid
    assert f"(process {child.pid}) was stopped" in (workers.stopped_server_message() or "")
    assert watch_threads(lambda: workers._watch_server(child.pid)) == []  # watched once
    assert watch_threads(lambda: workers._watch_server(None)) == []


@pytest.mark.parametrize("last", [None, b"Z", b"X"])
def test_the_watch_ends_with_its_server(
    monkeypatch: pytest.MonkeyPatch, child: subprocess.Popen[bytes], last: bytes | None
) -> None:
    """The watch ends at the first look that finds its server gone (no /proc entry) or
    a zombie: it looks no more (the states after it would keep a watch going)."""
    from warmfit.run import workers

    states = [b"S", b"T", last]
    looks: list[bytes | None] = []
    real_state = workers.process_state

    def process_state(pid: int) -> bytes | None:
        if pid != child.pid:  # another watch of this process (a real fork server's)
            return real_state(pid)
        looks.append(states[len(looks)] if len(looks) < len(states) else b"S")
        return looks[-1]

    monkeypatch.setattr(
        workers, "time", SimpleNamespace(monotonic=lambda: 0.0, sleep=lambda s: real_sleep(0.001))
    )
    monkeypatch.setattr(workers, "process_state", process_state)
    monkeypatch.setattr(workers, "_watched", set())
    monkeypatch.setattr(workers, "_stopped_server", None)
    watches = watch_threads(lambda: workers._watch_server(child.pid))
    watches[0].join(5)
    assert not watches[0].is_alive() and looks == states
    assert child.poll() is None and workers._stopped_server is None


class Threads:
    """``threading`` for :mod:`warmfit.run.workers`: its threads are real, and recorded
    as they are made (with how they were asked for)."""

    def __init__(self) -> None:
        self.made: list[tuple[threading.Thread, dict[str, object]]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(threading, name)

    def Thread(self, **how: Any) -> threading.Thread:
        thread = threading.Thread(**how)
        self.made.append((thread, how))
        return thread


def watch_threads(start: Callable[[], None]) -> list[threading.Thread]:
    """The fork-server watch threads ``start`` started, each a daemon (it must not hold
    the command's exit)."""
    from warmfit.run import workers

    threads = Threads()
    saved, workers.threading = workers.threading, threads  # type: ignore[assignment]
    try:
        start()
    finally:
        workers.threading = saved
    assert all(how["daemon"] is True for _, how in threads.made)
    assert all(how["name"] == "warmfit-fork-server" for _, how in threads.made)
    return [thread for thread, _ in threads.made]


def test_a_killed_resource_tracker_is_started_again_in_silence(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from multiprocessing import resource_tracker

    from warmfit.run import workers

    gone = subprocess.Popen(["true"])
    gone.wait()
    started: list[object] = []

    def ensure_running() -> None:
        started.append(tracker._pid)
        os.write(2, b"KeyError traceback\n")
        warnings.warn(
            "resource_tracker: process died unexpectedly, relaunching", UserWarning, stacklevel=1
        )

    tracker = SimpleNamespace(_pid=None, ensure_running=ensure_running)
    monkeypatch.setattr(resource_tracker, "_resource_tracker", tracker)
    workers._quiet_tracker_relaunch()
    wrapped = tracker.ensure_running
    workers._quiet_tracker_relaunch()  # wrapped once
    assert tracker.ensure_running is wrapped and wrapped is not ensure_running
    with pytest.warns(UserWarning):  # the first start: as multiprocessing does
        tracker.ensure_running()
    tracker._pid = os.getpid()  # alive: as multiprocessing does
    with pytest.warns(UserWarning):
        tracker.ensure_running()
    assert capfd.readouterr().err == "KeyError traceback\n" * 2
    tracker._pid = gone.pid  # killed: started again, saying nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker.ensure_running()
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
    assert started == [None, os.getpid(), gone.pid]


def test_a_worker_keeps_the_commands_temporary_folder_and_leaves_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from warmfit.run import workers

    asked: list[object] = []
    monkeypatch.setattr(workers, "die_with_parent", asked.append)
    monkeypatch.setattr(workers, "keep_freed_memory", lambda: asked.append("kept"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    handler = signal.getsignal(signal.SIGINT)
    try:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "t").mkdir()
        monkeypatch.setenv("TMPDIR", "t")
        workers.start_worker()
        assert asked == [os.getppid(), "kept"]
        assert tempfile.tempdir == os.path.join(os.getcwd(), "t")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        for unusable in ("missing", ""):
            monkeypatch.setattr(tempfile, "tempdir", None)
            monkeypatch.setenv("TMPDIR", unusable)
            workers.start_worker()
            assert tempfile.tempdir is None
    finally:
        signal.signal(signal.SIGINT, handler)


class Recording:
    """``threading`` for :mod:`warmfit.run.workers`: threads recorded, never started."""

    def __init__(self) -> None:
        self.made: list[dict[str, object]] = []

    def Thread(self, **how: object) -> SimpleNamespace:
        self.made.append(how)
        return SimpleNamespace(start=lambda: None)


@pytest.mark.parametrize(
    ("kernel", "asked", "watched"),
    [(True, True, False), (True, False, True), (False, True, True), (False, False, True)],
)
def test_a_process_dies_with_its_parent_by_the_kernel_or_a_watching_thread(
    monkeypatch: pytest.MonkeyPatch, kernel: bool, asked: bool, watched: bool
) -> None:
    from warmfit.run import workers

    threads = Recording()
    called: list[bool] = []
    monkeypatch.setattr(workers, "threading", threads)
    monkeypatch.setattr(
        workers, "_kernel_signals_parent_death", lambda: called.append(True) or asked
    )
    if kernel:
        workers.die_with_parent(os.getppid())  # the kernel is asked unless told not to
    else:
        workers.die_with_parent(os.getppid(), kernel=False)
    assert called == ([True] if kernel else [])
    assert threads.made == (
        [
            dict(
                target=workers._watch_parent,
                args=(os.getppid(),),
                name="warmfit-parent",
                daemon=True,
            )
        ]
        if watched
        else []
    )


def test_a_process_whose_parent_has_ended_already_ends_now(monkeypatch: pytest.MonkeyPatch) -> None:
    from warmfit.run import workers

    def exit_(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(workers, "threading", Recording())
    monkeypatch.setattr(workers, "_kernel_signals_parent_death", lambda: True)
    monkeypatch.setattr(os, "_exit", exit_)
    with pytest.raises(SystemExit) as raised:
        workers.die_with_parent(os.getppid() + 1)
    assert raised.value.code == 1


def test_the_kernel_is_asked_for_sigkill_when_the_parent_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctypes

    from warmfit.run import workers

    asked: list[tuple[object, ...]] = []
    answer = [0]

    class Libc:
        def __init__(self, name: object, use_errno: bool = False) -> None:
            assert name is None and use_errno

        def prctl(self, *args: object) -> int:
            asked.append(args)
            return answer[0]

    monkeypatch.setattr(ctypes, "CDLL", Libc)
    monkeypatch.setattr(sys, "platform", "linux")
    assert workers._kernel_signals_parent_death() is True
    assert asked == [(1, 9, 0, 0, 0)]  # PR_SET_PDEATHSIG, SIGKILL
    answer[0] = -1
    assert workers._kernel_signals_parent_death() is False

    class NoLibc:
        def __init__(self, name: object, use_errno: bool = False) -> None:
            raise OSError("no libc")

    monkeypatch.setattr(ctypes, "CDLL", NoLibc)
    assert workers._kernel_signals_parent_death() is False
    monkeypatch.setattr(ctypes, "CDLL", Libc)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert workers._kernel_signals_parent_death() is False and len(asked) == 2


def test_the_watching_thread_kills_its_process_once_the_parent_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from warmfit.run import workers

    parents = iter([10, 10, 10, 1])
    slept: list[float] = []
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "getppid", lambda: next(parents))
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    monkeypatch.setattr(workers, "time", SimpleNamespace(sleep=slept.append))
    workers._watch_parent(10)
    assert slept == [0.5] * 3 and sent == [(os.getpid(), signal.SIGKILL)]


def test_a_new_pool_comes_from_the_fork_server_with_its_worker_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import multiprocessing

    from warmfit.run import workers

    context = multiprocessing.get_context("forkserver")
    made: list[object] = []
    monkeypatch.setattr(workers, "fork_context", lambda jobs: made.append(jobs) or context)
    for given in (context, None):
        pool = workers.new_pool(3, given)
        try:
            assert pool._max_workers == 3 and pool._mp_context is context  # type: ignore[attr-defined]
            assert pool._initializer is workers.start_worker  # type: ignore[attr-defined]
        finally:
            pool.shutdown()
    assert made == [3]


# --------------------------------------------------------------------------- the pool started early


class EarlyPools:
    """fork_context and new_pool for :func:`warmfit.run.workers.prestart`: pools that
    run each task at once, here, and say what they were asked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: str = "") -> None:
        from warmfit.run import workers

        self.contexts: list[object] = []
        self.pools: list[SimpleNamespace] = []
        self.fail = fail  # "submit": a task cannot be given; "pool": no pool starts
        self.threads = Threads()
        monkeypatch.setattr(workers, "threading", self.threads)
        monkeypatch.setattr(
            workers, "fork_context", lambda jobs: self.contexts.append(jobs) or "ctx"
        )
        monkeypatch.setattr(workers, "new_pool", self.new_pool)
        monkeypatch.setattr(workers, "_early", None)
        monkeypatch.setattr(workers, "WORKER_BYTES", 0)
        monkeypatch.setattr(workers, "end_workers", lambda pool: pool.shut.append("killed"))

    def new_pool(self, jobs: int, context: object) -> SimpleNamespace:
        if self.fail == "pool":
            raise OSError(24, "Too many open files")
        pool = SimpleNamespace(jobs=jobs, context=context, shut=[])

        def submit(function: Callable[..., object], *args: object) -> Future[object]:
            if self.fail == "submit":
                raise RuntimeError("cannot start a worker")
            future: Future[object] = Future()
            future.set_result((function.__name__, *args))
            return future

        pool.submit = submit
        pool.shutdown = lambda **how: pool.shut.append(how)
        self.pools.append(pool)
        return pool


def started(workers: ModuleType) -> Any:
    early = workers._early
    assert early is not None and early.started.wait(10)
    return early


def test_workers_started_early_index_each_file_for_the_replay_that_takes_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from warmfit.run import workers

    pools = EarlyPools(monkeypatch)
    files = sized(tmp_path, 10, 20)
    workers.prestart([tmp_path], 2, None)
    early = started(workers)
    assert pools.contexts == [2] and len(pools.pools) == 1
    pool = pools.pools[0]
    assert (pool.jobs, pool.context, early.pool) == (2, "ctx", pool)
    assert [f.result() for f in early.index] == [("index_task", f) for f in files]
    assert (early.files, early.jobs) == (tuple(files), 2)
    assert early.stats == tuple((os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files)
    assert [(how["name"], how["daemon"]) for _, how in pools.threads.made] == [
        ("warmfit-workers", True)  # it must not hold the command's exit
    ]
    workers.prestart([tmp_path], 2, None)  # the same replay: started already
    assert len(pools.pools) == 1
    assert workers.take_early_pool(files, 2) is early and workers._early is None
    assert workers.take_early_pool(files, 2) is None  # taken once
    assert pool.shut == []


def test_workers_are_started_early_only_for_a_replay_that_will_use_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from warmfit.run import workers

    pools = EarlyPools(monkeypatch)
    files = sized(tmp_path, 10)
    workers.prestart([tmp_path], 2, "tcp://10.0.0.7:8786")  # on a cluster: none
    workers.prestart([tmp_path / "missing"], 2, None)  # left to the replay, which names it
    workers.prestart([tmp_path], 1, None)
    monkeypatch.setattr(workers, "default_jobs", lambda: 1)
    workers.prestart([tmp_path], None, None)
    assert workers._early is None and pools.contexts == []
    monkeypatch.setattr(workers, "default_jobs", lambda: 3)
    workers.prestart(files, None, None)
    assert started(workers).jobs == 3 and pools.contexts == [3]


def test_workers_started_for_another_replay_are_stopped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from warmfit.run import workers

    pools = EarlyPools(monkeypatch)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = sized(tmp_path / "a", 10), sized(tmp_path / "b", 20)
    workers.prestart(a, 2, None)
    first = started(workers)
    workers.prestart(b, 2, None)  # another replay: the first pool is stopped
    second = started(workers)
    assert second is not first and first.pool.shut == [{"wait": False, "cancel_futures": True}]
    assert workers.take_early_pool(b, 3) is None  # other jobs: stopped too
    assert workers._early is None and second.pool.shut == [{"wait": False, "cancel_futures": True}]
    workers.prestart(a, 2, None)
    third = started(workers)
    with open(a[0], "ab") as grown:
        grown.write(b"x")
    assert workers.take_early_pool(a, 2) is None  # changed since: its index is stale
    assert third.pool.shut == [{"wait": False, "cancel_futures": True}]
    workers.prestart(a, 2, None)
    fourth = started(workers)
    os.remove(a[0])
    assert workers.take_early_pool(a, 2) is None and fourth.pool.shut  # gone since
    workers.discard_early_pool(now=True)  # none left: nothing
    assert [len(p.shut) for p in pools.pools] == [1, 1, 1, 1]


def test_workers_discarded_now_are_killed_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from warmfit.run import workers

    EarlyPools(monkeypatch)
    files = sized(tmp_path, 10)
    workers.prestart(files, 2, None)
    early = started(workers)
    workers.discard_early_pool(now=True)
    assert early.pool.shut == ["killed", {"wait": True, "cancel_futures": True}]
    assert workers._early is None


def test_workers_that_fail_to_start_early_are_left_to_the_replay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from warmfit.run import workers

    pools = EarlyPools(monkeypatch, fail="submit")
    files = sized(tmp_path, 10)
    workers.prestart(files, 2, None)
    early = started(workers)
    assert early.pool is None and early.index == []
    assert pools.pools[0].shut == [{"wait": False, "cancel_futures": True}]
    assert workers.take_early_pool(files, 2) is None and workers._early is None
    workers.prestart(files, 2, None)
    started(workers)
    workers.discard_early_pool(now=True)  # no pool to stop
    assert [len(p.shut) for p in pools.pools] == [1, 1]


def test_an_early_pool_serves_only_its_files_jobs_and_stats() -> None:
    from warmfit.run.workers import EarlyPool

    early = EarlyPool(2, ("a", "b"), ((1, 2), (3, 4)))
    assert early.serves(["a", "b"], 2, ((1, 2), (3, 4)))
    assert not early.serves(["b", "a"], 2, ((1, 2), (3, 4)))
    assert not early.serves(["a", "b"], 3, ((1, 2), (3, 4)))
    assert not early.serves(["a", "b"], 2, ((1, 2), (3, 5)))
    assert (early.pool, early.index, early.started.is_set()) == (None, [], False)


def test_index_task_is_the_files_index() -> None:
    from warmfit.format.batches import index_file
    from warmfit.run.workers import index_task

    path = Path(__file__).resolve().parent.parent / "traces" / "pr991" / "EP1.parquet"
    assert index_task(str(path)).stretches == index_file(path).stretches


def test_workers_whose_pool_cannot_start_early_are_left_to_the_replay_in_silence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The replay starts its own pool, and says why it cannot; the early start's thread
    ends without a traceback."""
    from warmfit.run import workers

    EarlyPools(monkeypatch, fail="pool")
    raised: list[object] = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    files = sized(tmp_path, 10)
    workers.prestart(files, 2, None)
    early = started(workers)
    for thread, _ in workers.threading.made:  # type: ignore[attr-defined]
        thread.join(10)
    assert (early.pool, early.index, raised) == (None, [], [])
    assert workers.take_early_pool(files, 2) is None


def test_a_folder_the_user_may_not_write_is_no_place_for_the_sockets() -> None:
    """_writable_folder asks for writing and searching (W_OK | X_OK): existing is not
    enough. Root may write any folder, so where the test runs as root the check is made
    in a child forked from this process that has become ``nobody``."""
    import shutil

    from warmfit.run.workers import _writable_folder

    top = tempfile.mkdtemp(dir="/tmp")  # a place ``nobody`` may reach
    try:
        os.chmod(top, 0o755)
        open_, locked, unsearchable = (os.path.join(top, n) for n in ("open", "locked", "dark"))
        for folder, mode in ((open_, 0o777), (locked, 0o555), (unsearchable, 0o666)):
            os.mkdir(folder)
            os.chmod(folder, mode)
        found = [_writable_folder(f) for f in (open_, locked, unsearchable)]
        if os.geteuid() != 0:
            assert found == [True, False, False]
            return
        assert found == [True, True, True]  # root may write and search any folder
        pid = os.fork()
        if pid == 0:  # the child: nobody
            code = 3
            try:
                os.setgid(65534)
                os.setuid(65534)
                found = [_writable_folder(f) for f in (open_, locked, unsearchable)]
                code = 0 if found == [True, False, False] else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        shutil.rmtree(top)
