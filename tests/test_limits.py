"""Resource limits that stop warmfit: one line naming the limit, exit 2, nothing left.

Issue 42: ``replay`` with RLIMIT_NOFILE 12 ended in ``OSError: Too many open
files`` or an ``EOFError`` from the worker hand-off, and with RLIMIT_FSIZE 0 in
``No usable temporary directory`` (tracebacks). Each limit here is set for real
in the child process (SIGXFSZ ignored, so that a write fails with EFBIG as a
full disk's would).
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.test_faults import trace  # noqa: F401  (the fixture, shared)
from warmfit.cli import app, resource_limit

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux resource limits")


def limited(limit: int, value: int):
    def set_limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(limit, (value, value))

    return set_limit


def replay_limited(args: list[str], limit: int, value: int, tmp: Path):
    return subprocess.run(
        [sys.executable, "-m", "warmfit", "replay", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        preexec_fn=limited(limit, value), start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp), "WARMFIT_TEST_WORKERS": "always",
             "WARMFIT_BATCH_READINGS": "1000"},
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("files", [9, 11, 12, 14, 16])
def test_too_few_open_files_for_workers_names_the_limit(
    trace: Path,  # noqa: F811
    tmp_path: Path,
    files: int,
) -> None:
    done = replay_limited(
        [str(trace), "-p", "tests.slow_policy:Slow", "--jobs", "2"],
        resource.RLIMIT_NOFILE, files, tmp_path,
    )  # fmt: skip
    one_line(done, f"may open {files}", "ulimit -n", "--jobs 1")
    assert list(tmp_path.iterdir()) == []


def test_a_file_size_limit_of_0_with_workers_names_the_limit(
    trace: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    done = replay_limited(
        [str(trace), "-p", "tests.slow_policy:Slow", "--jobs", "2"],
        resource.RLIMIT_FSIZE, 0, tmp_path,
    )  # fmt: skip
    one_line(done, "file-size limit", "RLIMIT_FSIZE")


def test_a_file_size_limit_of_0_with_per_wave_is_one_line(
    trace: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    done = replay_limited(
        [str(trace), "-p", "tests.slow_policy:Slow", "--jobs", "2", "--per-wave",
         str(out / "waves.parquet")],
        resource.RLIMIT_FSIZE, 0, tmp_path,
    )  # fmt: skip
    one_line(done)
    assert list(out.iterdir()) == []


def test_no_usable_temporary_folder_names_the_file_size_limit() -> None:
    said = resource_limit(FileNotFoundError(2, "No usable temporary directory found in ['/t']"))
    assert said is not None and "RLIMIT_FSIZE" not in said and "ulimit -f" in said
    assert resource_limit(ValueError("a bug")) is None
    assert resource_limit(FileNotFoundError(2, "No such file", "x")) is None


# --------------------------------------------------------------------------- the lines, spelled out

#: (soft, hard) of each limit the lines name: the soft one is the process's limit.
LIMITS = {
    resource.RLIMIT_NOFILE: (1024, 4096),
    resource.RLIMIT_FSIZE: (10_000_000, resource.RLIM_INFINITY),
    resource.RLIMIT_AS: (2**31, resource.RLIM_INFINITY),
}


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[int, int]]:
    """This process's limits, as :func:`resource.getrlimit` answers, are :data:`LIMITS`
    (a copy the test may change)."""
    chosen = dict(LIMITS)
    monkeypatch.setattr(resource, "getrlimit", lambda which: chosen[which])
    return chosen


def test_each_limit_is_named_with_its_soft_value_and_what_to_do(
    limits: dict[int, tuple[int, int]],
) -> None:
    files = "this process may open 1,024 (ulimit -n, RLIMIT_NOFILE); nothing was written. "
    assert resource_limit(OSError(errno.EMFILE, "Too many open files")) == (
        "too many open files (Too many open files): " + files
        + "Raise the limit (ulimit -n 4096), or run with --jobs 1."
    )  # fmt: skip
    assert resource_limit(OSError(errno.ENFILE, "Too many open files in system")) == (
        "too many open files (Too many open files in system): " + files
        + "Raise the limit (ulimit -n 4096), or run with --jobs 1."
    )  # fmt: skip
    size = "(10,000,000 bytes: ulimit -f, RLIMIT_FSIZE); nothing was written. Raise the limit "
    assert resource_limit(OSError(errno.EFBIG, "File too large", "/out/w\x1b.parquet")) == (
        "a file grew past the file-size limit writing /out/w\\x1b.parquet " + size
        + "(ulimit -f unlimited)."
    )  # fmt: skip
    assert resource_limit(OSError(errno.EFBIG, "File too large")) == (
        "a file grew past the file-size limit " + size + "(ulimit -f unlimited)."
    )
    assert resource_limit(OSError(errno.ENOSPC, "No space left on device", "/o/w")) == (
        "no space left on the device at /o/w (No space left on device); free some, and run again."
    )
    assert resource_limit(OSError(errno.EDQUOT, "Disk quota exceeded")) == (
        "no space left on the device (Disk quota exceeded); free some, and run again."
    )
    assert resource_limit(EOFError()) == (
        "a worker process could not be started or handed its work (EOFError); nothing was "
        "written. This process may open 1,024 files (ulimit -n) and use memory up to "
        "2,147,483,648 bytes (ulimit -v): raise them, or run with --jobs 1."
    )
    assert resource_limit(MemoryError()) == (
        "out of memory (this process may use 2,147,483,648 bytes: ulimit -v, RLIMIT_AS); "
        "nothing was written. Raise the limit, run where there is more memory, or replay "
        "fewer files at once."
    )
    limits[resource.RLIMIT_AS] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    said = resource_limit(MemoryError())
    assert said is not None and said.startswith("out of memory (this process may use unlimited")


def test_a_file_too_large_for_its_file_system_is_not_a_limit_to_raise(
    limits: dict[int, tuple[int, int]],
) -> None:
    """EFBIG with no file-size limit set: the file system's largest file was reached
    (FAT32's is 4 GiB), which ``ulimit -f unlimited`` cannot raise."""
    limits[resource.RLIMIT_FSIZE] = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    assert resource_limit(OSError(errno.EFBIG, "File too large", "/usb/w.parquet")) == (
        "a file grew past the largest its file system holds writing /usb/w.parquet (File "
        "too large; the file-size limit, ulimit -f, is unlimited); nothing was written. "
        "Write it to another file system."
    )


def _failing_command(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> Result:
    """``warmfit policies`` in-process, failing with ``error`` where it lists the names."""
    import warmfit.policies

    def fail() -> list[str]:
        raise error

    monkeypatch.setattr(warmfit.policies, "policy_names", fail)
    return CliRunner().invoke(app, ["policies"], env={"_TYPER_FORCE_DISABLE_TERMINAL": "1"})


def test_a_command_out_of_memory_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, limits: dict[int, tuple[int, int]]
) -> None:
    result = _failing_command(monkeypatch, MemoryError())
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"warmfit: error: {resource_limit(MemoryError())}\n"


def test_a_bug_in_a_command_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error that is no limit's is a bug: it is not turned into a line, and its
    traceback is Python's own, as a bug report quotes it (typer's pretty one is off)."""
    import traceback

    import warmfit.policies

    result = _failing_command(monkeypatch, ValueError("a bug"))
    assert isinstance(result.exception, ValueError) and result.exit_code == 1

    def fail() -> list[str]:
        raise ValueError("a bug")

    monkeypatch.setattr(warmfit.policies, "policy_names", fail)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # typer sets its own: restored
    with pytest.raises(ValueError) as caught:
        app(["policies"], prog_name="warmfit")
    capsys.readouterr()
    sys.excepthook(caught.type, caught.value, caught.tb)  # as Python does at its exit
    printed = capsys.readouterr().err
    assert printed.startswith("Traceback (most recent call last):\n"), printed
    assert printed.endswith("ValueError: a bug\n") and "╭" not in printed
    assert printed == "".join(traceback.format_exception(caught.value))


def test_a_stopped_fork_server_is_said_instead_of_the_error_it_caused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """warmfit ended the workers' fork server, stopped too long: the command's error
    (whatever the lost workers caused) is that, in one line."""
    import warmfit.run.workers

    monkeypatch.setattr(warmfit.run.workers, "_stopped_server", 4242)
    result = _failing_command(monkeypatch, BrokenPipeError(32, "Broken pipe"))
    assert result.exit_code == 2
    assert result.stderr == f"warmfit: error: {warmfit.run.workers.stopped_server_message()}\n"
    assert "fork server (process 4242) was stopped" in result.stderr
