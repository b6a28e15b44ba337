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
import sys
import time
from pathlib import Path
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
