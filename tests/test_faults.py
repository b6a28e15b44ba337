"""Faults in flight on the replay side, caused for real (issue 28).

Each test starts ``warmfit replay`` as its own process, in its own session,
on a trace of many small batches replayed by two worker processes through a
policy that sleeps at every price (:mod:`tests.slow_policy`), so that the
replay is still running when the fault is caused: a worker stopped with
SIGSTOP, SIGINT or SIGTERM at several moments (start-up included), sent to
the command alone or, as a terminal does, to its whole process group. After
each, the command must have ended with its documented exit code and one
line, no traceback, no process of its session alive, and nothing left in
its TMPDIR.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from warmfit.format.writer import write_trace

REPO = Path(__file__).resolve().parent.parent
STREAMS, WAVES = 8, 250

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, uses sessions")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 (run, rank) streams of 250 flat waves, a forward and a whole caller reading
    each: 4,000 readings, replayed in batches of 1,000 (WARMFIT_BATCH_READINGS)."""
    rng = np.random.default_rng(0)
    n = np.repeat(rng.integers(100, 2_000, STREAMS * WAVES), 2)
    rank = np.repeat(np.arange(STREAMS), 2 * WAVES)
    wave = np.tile(np.repeat(np.arange(WAVES), 2), STREAMS)
    caller = np.tile([False, True], STREAMS * WAVES)
    frame = pl.DataFrame(
        {
            "run": "r",
            "rank": rank,
            "seq": 2 * wave + caller,
            "step": None,
            "wave": wave,
            "signature": "s",
            "kind": "flat",
            "phase": np.where(caller, "caller", "forward"),
            "whole": caller,
            "packed_tokens": n,
            "logical_tokens": n,
            "output_bytes": 0,
            "baseline_bytes": 0,
            "peak_bytes": 1_000_000 + 300 * n,
            "static_floor_bytes": None,
            "oom": False,
        }
    )
    path = tmp_path_factory.mktemp("faults") / "trace.parquet"
    write_trace(frame, path)
    return path


def default_signals() -> None:
    """In the child, before it runs warmfit: every signal warmfit ends on at its default.
    An ignored one is inherited across exec, and warmfit leaves a signal ignored at its
    start ignored (``nohup``'s SIGHUP, a background job's SIGINT): a suite run under
    ``nohup`` saw SIGHUP ignored, the replay run to its end and exit 0."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)


class Started:
    """A ``warmfit replay`` process in its own session, with its own TMPDIR, and the
    signals it ends on at their defaults whatever this process ignores."""

    def __init__(self, trace: Path, tmp: Path, *extra: str, env: dict[str, str] | None = None):
        self.tmp = tmp / "tmpdir"
        self.tmp.mkdir()
        args = ["replay", str(trace), "-p", "tests.slow_policy:Slow", "--jobs", "2", *extra]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "warmfit", *args],
            cwd=REPO,
            env={
                **os.environ,
                "TMPDIR": str(self.tmp),
                "WARMFIT_BATCH_READINGS": "1000",
                "WARMFIT_TEST_WORKERS": "always",
                **(env or {}),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=default_signals,
        )
        self.began = time.monotonic()

    def session(self) -> list[int]:
        """The processes of the command's session still alive (zombies excluded)."""
        alive = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[3]) == self.process.pid and fields[0] != "Z":  # session id
                alive.append(int(entry.name))
        return alive

    def workers(self) -> list[int]:
        """The worker processes: the session's processes whose parent is the fork server."""
        found = []
        for pid in self.session():
            try:
                parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
                command = Path(f"/proc/{parent}/cmdline").read_bytes()
            except OSError:
                continue
            if parent != self.process.pid and b"forkserver" in command:
                found.append(pid)
        return found

    def finish(self, limit: float = 120) -> tuple[int, str, str]:
        """Wait for the command (``limit`` seconds bound a hang), then up to 10 s for
        everything it started to end; its exit code, stdout and stderr."""
        try:
            out, err = self.process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.communicate()
            pytest.fail(f"the command still ran {limit:.0f} s after the fault")
        for _ in range(100):
            if not self.session():
                break
            time.sleep(0.1)
        left = self.session()
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert left == [], f"processes of the command still alive: {left}"
        return self.process.returncode, out.decode(), err.decode()


def test_the_trace_replays_to_the_end_undisturbed(trace: Path, tmp_path: Path) -> None:
    """The baseline of the tests below: the same command, left alone, ends with exit 0,
    its figures, and nothing left behind."""
    started = Started(trace, tmp_path, "--format", "json")
    code, out, err = started.finish()
    assert code == 0, err
    # every wave but the first of each stream (no profile yet to price it)
    assert [r["priced_waves"] for r in json.loads(out)["results"]] == [STREAMS * (WAVES - 1)]
    assert list(started.tmp.iterdir()) == []


def test_a_temporary_folder_too_deep_for_a_socket_still_replays(
    trace: Path, tmp_path: Path
) -> None:
    """The fork server listens on a Unix socket in TMPDIR (``pymp-*/listener-*``), whose
    path holds at most 107 bytes: a deeper TMPDIR (a test runner's, a job scheduler's)
    ended the first replay with workers in ``OSError: AF_UNIX path too long``. Its
    socket now goes to /tmp; the replay gives its figures and leaves TMPDIR empty."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    started = Started(trace, deep, "--format", "json")
    assert len(os.fsencode(started.tmp)) > 107 - 32
    code, out, err = started.finish()
    assert (code, "Traceback" in err) == (0, False), err
    assert [r["priced_waves"] for r in json.loads(out)["results"]] == [STREAMS * (WAVES - 1)]
    assert list(started.tmp.iterdir()) == []


def test_a_stopped_worker_ends_the_command_with_exit_2(trace: Path, tmp_path: Path) -> None:
    """A worker stopped with SIGSTOP is given up on after 5 s: exit 2, one line naming
    it, every process ended (the stopped one killed), no temporary file left."""
    started = Started(trace, tmp_path)
    while not started.workers():
        assert started.process.poll() is None, started.process.communicate()
        time.sleep(0.02)
    stopped = started.workers()[0]
    os.kill(stopped, signal.SIGSTOP)
    code, out, err = started.finish(limit=60)
    assert code == 2, err
    assert f"worker process {stopped} was stopped" in err
    assert "Traceback" not in err and out == ""
    assert list(started.tmp.iterdir()) == []


def test_a_task_past_its_deadline_ends_the_command_with_exit_2(trace: Path, tmp_path: Path) -> None:
    """A task that does not finish within its allowance (here made 0.5 s with
    WARMFIT_WORKER_PATIENCE; the slow policy takes longer) ends the command:
    exit 2 saying what to do, nothing left behind."""
    started = Started(trace, tmp_path, env={"WARMFIT_WORKER_PATIENCE": "0.008"})
    code, out, err = started.finish(limit=60)
    assert code == 2, err
    assert "did not finish within" in err and "WARMFIT_WORKER_PATIENCE" in err
    assert "Traceback" not in err and out == ""
    assert list(started.tmp.iterdir()) == []


SIGNALS = {
    "SIGINT": (signal.SIGINT, 130, "interrupted (Ctrl-C)"),
    "SIGTERM": (signal.SIGTERM, 143, "terminated"),
}
#: Every moment, signal and target; the default run takes a diagonal of them (each
#: moment, signal and target at least twice), ``make test-slow`` every one.
MOMENTS = [
    pytest.param(
        at, *SIGNALS[name], group, id=f"{at}-{name}-{'group' if group else 'command'}",
        marks=() if (i + j + k) % 2 == 0 else pytest.mark.slow,
    )
    for i, at in enumerate([0.5, 1.0, 2.0, 3.5])
    for j, name in enumerate(SIGNALS)
    for k, group in enumerate([False, True])
]  # fmt: skip


@pytest.mark.parametrize("at, sent, code, said, group", MOMENTS)
def test_a_signal_at_any_moment_ends_everything(
    trace: Path, tmp_path: Path, at: float, sent: signal.Signals, code: int, said: str,
    group: bool,
) -> None:  # fmt: skip
    """SIGINT or SIGTERM, to the command or its whole process group, while it starts
    (0.5 s, 1 s: its modules are imported, its workers start) or mid-replay: exit 130 or
    143, one line, no traceback from any process, no process left, no temporary
    file, no partial output."""
    output = tmp_path / "waves.parquet"
    started = Started(trace, tmp_path, "--per-wave", str(output))
    time.sleep(at)
    if started.process.poll() is None:
        (os.killpg if group else os.kill)(started.process.pid, sent)
    status, _, err = started.finish()
    assert "Traceback" not in err, err
    if status == 0:  # it had finished before the signal: nothing to check
        pytest.skip("the replay ended before the signal")
    assert status == code, err
    # one line, after the per-wave file's own line where the replay had written it
    lines = err.strip().splitlines()
    assert said in lines[-1] and len([line for line in lines if line]) <= 2, err
    if "wrote " in err:  # the signal came after the replay: its file is whole
        assert pl.read_parquet(output).height == STREAMS * WAVES
    else:  # no partial output
        assert not output.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name not in ("tmpdir", output.name)] == []
    assert list(started.tmp.iterdir()) == []


# --------------------------------------------------------------------------- Dask


def _scheduler(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A Dask scheduler of its own, as a process; its address."""
    pytest.importorskip("distributed")
    address_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(address_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    for _ in range(600):
        if address_file.exists() and address_file.stat().st_size:
            return scheduler, json.loads(address_file.read_text())["address"]
        time.sleep(0.1)
    scheduler.kill()
    pytest.fail("the Dask scheduler did not start")


def _worker(address: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers", "1",
         "--nthreads", "1", "--no-dashboard"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def _ended(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_cluster_without_a_worker_is_named_not_waited_on(trace: Path, tmp_path: Path) -> None:
    """A scheduler with no worker: exit 2 after a bounded wait (10 s, here 2 s with
    WARMFIT_WORKER_PATIENCE=0.2), saying so; never a hang."""
    scheduler, address = _scheduler(tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "warmfit", "replay", str(trace), "--cluster", address],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "WARMFIT_WORKER_PATIENCE": "0.2"},
        )  # fmt: skip
    finally:
        _ended(scheduler)
    assert done.returncode == 2, done.stderr
    assert "has no worker (waited 2 s)" in done.stderr and "Traceback" not in done.stderr


def _lost_mid_replay(trace: Path, tmp_path: Path, lost: str, patience: str = "1") -> str:
    """A slow replay on a cluster of one scheduler and one worker, ``lost`` ("scheduler"
    or "worker") killed after 4 s: the command's exit code must be 2 with one line and no
    traceback; that line."""
    scheduler, address = _scheduler(tmp_path)
    worker = _worker(address)
    try:
        started = subprocess.Popen(
            [sys.executable, "-m", "warmfit", "replay", str(trace), "--cluster", address,
             "-p", "tests.slow_policy:Slow"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            env={**os.environ, "WARMFIT_BATCH_READINGS": "1000", "WARMFIT_TEST_WORKERS": "always",
                 "WARMFIT_WORKER_PATIENCE": patience},
        )  # fmt: skip
        time.sleep(4)  # connected, and replaying
        assert started.poll() is None, started.communicate()
        _ended(scheduler if lost == "scheduler" else worker)
        _, err = started.communicate(timeout=120)
    finally:
        _ended(scheduler, worker)
    message = err.decode()
    assert started.returncode == 2, message
    assert "Traceback" not in message and message.count("warmfit: error:") == 1, message
    return message


def test_a_lost_scheduler_ends_the_command_with_exit_2(trace: Path, tmp_path: Path) -> None:
    """The scheduler killed mid-replay: exit 2 with one line, never a traceback or a hang."""
    _lost_mid_replay(trace, tmp_path, "scheduler")


def test_a_lost_sole_worker_ends_the_command_after_the_task_deadline(
    trace: Path, tmp_path: Path
) -> None:
    """The cluster's only worker killed mid-replay: the scheduler keeps the tasks and
    waits for a worker that never comes; the command ends at its tasks' deadline (60 s,
    here 12 s with WARMFIT_WORKER_PATIENCE=0.2), exit 2 with one line saying so."""
    message = _lost_mid_replay(trace, tmp_path, "worker", patience="0.2")
    assert "did not finish within 12 s" in message and "no worker" in message, message


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A scheduler and one worker, shared by the tests that only use them; its address."""
    scheduler, address = _scheduler(tmp_path_factory.mktemp("cluster"))
    worker = _worker(address)
    try:
        yield address
    finally:
        _ended(scheduler, worker)


def test_a_relative_path_replays_on_a_cluster(trace: Path, tmp_path: Path, cluster: str) -> None:
    """The trace named relative to the command's folder replays on a cluster whose
    worker runs elsewhere (its own folder): the paths are made absolute first."""
    relative = os.path.relpath(trace, tmp_path)
    args = [sys.executable, "-m", "warmfit", "replay", relative, "--format", "json"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    local = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    remote = subprocess.run(
        [*args, "--cluster", cluster], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout


def test_a_plot_on_a_cluster_draws_what_one_here_draws(
    trace: Path, tmp_path: Path, cluster: str
) -> None:
    """A cluster's workers send each batch's panels' frames back (they cannot write to
    this machine's temporary folder), and the command writes them: the same PNG bytes
    as a plot whose batches replay here."""
    pytest.importorskip("matplotlib")
    here, there = tmp_path / "here.png", tmp_path / "there.png"
    command = [sys.executable, "-m", "warmfit", "plot", str(trace), "-o"]
    local = subprocess.run([*command, str(here)], capture_output=True, text=True, timeout=120)
    remote = subprocess.run(
        [*command, str(there), "--cluster", cluster], capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    assert there.read_bytes() == here.read_bytes()


def test_a_path_the_cluster_cannot_read_is_named(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster whose workers cannot read the trace (here: a worker in this process,
    told so) names the path and what to do, rather than blaming the file."""
    distributed = pytest.importorskip("distributed")
    from warmfit.errors import UsageError
    from warmfit.replay.stream import replay_stream

    real_access = os.access

    def access(path: object, mode: int) -> bool:
        return False if str(path) == str(trace) else real_access(path, mode)  # type: ignore[arg-type]

    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        monkeypatch.setattr(os, "access", access)
        with pytest.raises(UsageError, match=r"the cluster's workers cannot read .*trace\.parquet"):
            replay_stream([trace], cluster=cluster.scheduler_address)


# --------------------------------------------------------------------------- unverifiable input


def test_files_without_page_checksums_are_named(trace: Path, tmp_path: Path) -> None:
    """A trace file written by another tool without page checksums: validate and
    replay say, once, that corruption in it cannot be detected; warmfit's own
    files, which carry them, get no such line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    bare = tmp_path / "bare.parquet"
    table = pq.read_table(trace)
    table = table.set_column(0, "run", pa.array(["bare"] * table.num_rows))  # its own run
    pq.write_table(table, bare)  # pyarrow writes no checksums unless asked
    for command in (["validate"], ["replay", "--format", "json"]):
        done = subprocess.run(
            [sys.executable, "-m", "warmfit", *command, str(bare), str(trace)],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("no page checksums in 1 of 2 trace files") == 1, done.stderr
        assert str(bare) in done.stderr and "cannot be detected" in done.stderr
        alone = subprocess.run(
            [sys.executable, "-m", "warmfit", *command, str(trace)],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert alone.returncode == 0 and "checksums" not in alone.stderr, alone.stderr


@pytest.mark.slow  # about 35 s: two workers, and the replay run twice
def test_a_lost_worker_is_retried_on_another(trace: Path, tmp_path: Path) -> None:
    """One of two Dask workers killed mid-replay (its nanny too): Dask reruns its tasks
    on the other, and the figures are those of a replay without a cluster."""
    scheduler, address = _scheduler(tmp_path)
    workers = [_worker(address), _worker(address)]
    env = {**os.environ, "WARMFIT_BATCH_READINGS": "1000", "WARMFIT_TEST_WORKERS": "always"}
    args = [sys.executable, "-m", "warmfit", "replay", str(trace), "-p",
            "tests.slow_policy:Slow", "--format", "json"]  # fmt: skip
    try:
        started = subprocess.Popen(
            [*args, "--cluster", address], cwd=REPO, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        time.sleep(4)  # both workers have tasks
        _ended(workers[0])
        out, err = started.communicate(timeout=180)
    finally:
        _ended(scheduler, *workers)
    local = subprocess.run(args, cwd=REPO, env=env, capture_output=True, timeout=180)
    assert started.returncode == 0, err.decode()
    assert out == local.stdout
