"""Resource limits that stop warmfit: one line naming the limit, exit 2, nothing left.

Issue 42: ``replay`` with RLIMIT_NOFILE 12 ended in ``OSError: Too many open
files`` or an ``EOFError`` from the worker hand-off, and with RLIMIT_FSIZE 0 in
``No usable temporary directory`` (tracebacks). Each limit here is set for real
in the child process (SIGXFSZ ignored, so that a write fails with EFBIG as a
full disk's would).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_faults import trace  # noqa: F401  (the fixture, shared)
from warmfit.cli import resource_limit

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
