"""Hostile logs and writers: the recorder and ``warmfit recover`` lose and destroy nothing.

Every fault is caused for real (issue 9): a process killed with SIGKILL, a
disk that fills (``RLIMIT_FSIZE`` in a child process, ``SIGXFSZ`` ignored,
or a descriptor pointed at ``/dev/full``), bits flipped in a real log, a
second real writer process. Nothing mocks an outcome. Whatever happens,
``recover`` either puts a log's readings in a valid trace and then removes
the log, or leaves the log byte for byte as it was and exits 2 naming it;
it never touches a file warmfit did not write, and never dies of a signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.command_line import warmfit_cli, warmfit_process
from warmfit.errors import UsageError
from warmfit.format.trace import read_trace
from warmfit.recorder.log import (
    LOG_MARKER,
    LOG_NAME,
    LOG_VERSION,
    LogWriter,
    find_logs,
    read_log,
    recover,
    recover_all,
    write_lost_readings,
)

ROW = (0, 0, 0, "sig", "flat", "forward", False, 10, 20, 0, 100, 200, None, False)


def rows(start: int, count: int) -> list[tuple]:
    """``count`` readings of consecutive waves (forward, then a whole caller)."""
    out = []
    for seq in range(start, start + count):
        phase, whole = ("forward", False) if seq % 2 == 0 else ("caller", True)
        out.append(
            (seq, 0, seq // 2, "sig", "flat", phase, whole, 10, 20, 0, 100, 200, None, False)
        )
    return out


def write_log(path: Path, batches: int = 3, per_batch: int = 4, *, close: bool = True) -> Path:
    """A real log as the recorder writes it: ``batches`` batches, seq 0, 1, ..."""
    writer = LogWriter(path, "r", 0, {"warmfit.meter": "test"}, fsync=False)
    for b in range(batches):
        writer.append(rows(b * per_batch, per_batch))
    if close:
        writer.finish()
    writer.release()
    return path


def a_log(root: Path, rank: int = 0, **kwargs) -> Path:
    return write_log(root / "run=r" / f"rank={rank}" / LOG_NAME, **kwargs)


def no_temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- item 1


def test_recover_never_touches_a_foreign_arrow_file_beside_the_logs(tmp_path):
    log = a_log(tmp_path)
    table = pa.table({"x": [1, 2, 3]})
    foreign = {
        log.with_name("other.arrows"): None,  # another name
        tmp_path / "run=r" / "rank=1" / LOG_NAME: None,  # warmfit's name, not warmfit's file
    }
    for path in foreign:
        path.parent.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        foreign[path] = path.read_bytes()
    done = warmfit_process("recover", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    named = tmp_path / "run=r" / "rank=1" / LOG_NAME
    assert str(named) in done.stderr and "not a log this warmfit wrote" in done.stderr
    for path, data in foreign.items():
        assert path.read_bytes() == data  # untouched
    assert not log.exists() and read_trace([log.parent]).height == 12  # ours was recovered


@pytest.mark.parametrize("where", [b"peak_bytes", b"warmfit.log"])
def test_a_flipped_bit_in_the_schema_keeps_the_log_and_exits_2(tmp_path, where):
    log = a_log(tmp_path)
    data = bytearray(log.read_bytes())
    at = bytes(data).index(where)  # a column name, or the marker: in the schema
    data[at + 3] ^= 0x04
    log.write_bytes(bytes(data))
    done = warmfit_process("recover", str(tmp_path))
    assert done.returncode == 2 and str(log) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert log.read_bytes() == bytes(data)  # every reading still there for a person
    assert not list(tmp_path.rglob("*.parquet"))


def test_recover_twice_is_a_no_op_that_exits_0(tmp_path):
    a_log(tmp_path)
    first = warmfit_process("recover", str(tmp_path))
    assert first.returncode == 0, first.stderr
    trace = next(tmp_path.rglob("*.parquet"))
    before = trace.read_bytes()
    again = warmfit_process("recover", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "nothing to recover" in again.stdout
    assert trace.read_bytes() == before


def test_a_trace_beside_a_log_that_lacks_its_readings_keeps_the_log(tmp_path):
    # The old "already compacted" check compared row counts and deleted the log
    # whenever the trace beside it held at least as many rows.
    log = a_log(tmp_path, batches=1)
    other = a_log(tmp_path / "elsewhere", batches=3)
    recover(tmp_path / "elsewhere")
    trace = next((tmp_path / "elsewhere").rglob("*.parquet"))
    trace.rename(log.with_name("readings.parquet"))  # 12 readings, not the log's 4
    before = log.read_bytes()
    with pytest.raises(UsageError, match="does not hold the log's readings"):
        recover(tmp_path / "run=r")
    assert log.read_bytes() == before
    assert not other.exists()


def test_a_log_beside_the_trace_it_was_compacted_into_is_removed(tmp_path):
    # A compaction killed between writing the trace and removing the log.
    log = a_log(tmp_path)
    copy = log.read_bytes()
    recover(tmp_path)
    log.write_bytes(copy)
    (done,) = recover(tmp_path)
    assert done.note == "already compacted" and not log.exists()
    assert read_trace([tmp_path]).height == 12


# --------------------------------------------------------------------------- item 5


def check_truncations(tmp_path: Path, every: bool) -> None:
    full = a_log(tmp_path / "full", batches=3, per_batch=4, close=False).read_bytes()
    ends = read_log(Path("x"), full).batch_ends
    sizes = range(len(full) + 1)
    if not every:  # a stride, and a few bytes around every batch boundary
        sizes = sorted({*sizes[::29], *(e + d for e in ends for d in (-2, -1, 0, 1, 2))})
    for size in sizes:
        root = tmp_path / f"cut{size}"
        log = root / "run=r" / "rank=0" / LOG_NAME
        log.parent.mkdir(parents=True)
        log.write_bytes(full[:size])
        complete = sum(1 for end in ends if end <= size)
        if not read_log(log).ours:  # cut inside the schema: not provably warmfit's
            assert complete == 0
            with pytest.raises(UsageError, match="cannot be shown to be a warmfit log"):
                recover(root)
            assert log.read_bytes() == full[:size]
            continue
        compactions = recover(root)  # a cut-off tail is what a kill leaves: exit 0
        assert not log.exists()
        kept = read_trace([root]).height if complete else 0
        assert kept == 4 * complete, size
        assert [c.readings for c in compactions] == [4 * complete]


def test_truncation_at_many_offsets_keeps_exactly_the_complete_batches(tmp_path):
    check_truncations(tmp_path, every=False)


@pytest.mark.slow
def test_truncation_at_every_offset_keeps_exactly_the_complete_batches(tmp_path):
    check_truncations(tmp_path, every=True)


HOSTILE_SCRIPT = textwrap.dedent(
    """
    import json, shutil, sys
    from pathlib import Path
    from warmfit.errors import WarmfitError
    from warmfit.recorder.log import LOG_NAME, recover_all
    from warmfit.format.trace import read_trace

    base = Path(sys.argv[1]).read_bytes()
    work = Path(sys.argv[2])
    for offset in map(int, sys.argv[3].split(",")):
        for attempt in range(2):  # a second recover must agree with the first
            root = work / str(offset)
            log = root / "run=r" / "rank=0" / LOG_NAME
            if attempt == 0:
                log.parent.mkdir(parents=True)
                data = bytearray(base)
                data[offset] ^= 1 << (offset % 8)
                log.write_bytes(bytes(data))
            print(json.dumps({"offset": offset, "attempt": attempt, "start": True}), flush=True)
            result = {"offset": offset, "attempt": attempt}
            try:
                recovery = recover_all(root)
                result["problems"] = len(recovery.problems)
            except WarmfitError as exc:
                result["error"] = str(exc)
            except BaseException as exc:
                result["crash"] = f"{type(exc).__name__}: {exc}"
            result["log_left"] = log.exists()
            result["same_bytes"] = log.exists() and log.read_bytes() == bytes(data)
            result["tmp"] = [p.name for p in root.rglob("*.tmp")]
            if list(root.rglob("*.parquet")):
                try:
                    result["trace_rows"] = read_trace([root]).height
                except WarmfitError as exc:
                    result["trace_invalid"] = str(exc)
            print(json.dumps(result), flush=True)
    """
)


def flip_bits(tmp_path: Path, offsets: list[int], base: Path) -> list[dict]:
    """Flip one bit at each offset of ``base`` and recover it twice, in a child process."""
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE_SCRIPT)
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, str(script), str(base), str(work), ",".join(map(str, offsets))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    last = lines[-1] if lines else {}
    assert done.returncode == 0, (
        f"the recovery died (exit {done.returncode}) at offset {last.get('offset')}: "
        + done.stderr[-2000:]
    )
    return [line for line in lines if "start" not in line]


def check_flips(results: list[dict], readings: int) -> None:
    for r in results:
        where = f"offset {r['offset']}, attempt {r['attempt']}: {r}"
        assert "crash" not in r, where
        assert r["tmp"] == [], where  # no temporary file left behind, ever
        assert "trace_invalid" not in r, where  # a trace warmfit wrote always validates
        if r["log_left"]:
            assert r["same_bytes"], where  # a kept log is kept byte for byte
            assert r.get("problems") or "error" in r, where  # ... and named: exit 2
        else:
            assert r.get("problems") == 0, where
            assert r.get("trace_rows", 0) <= readings, where


def test_bit_flips_at_many_offsets_of_a_log_never_crash_or_destroy_it(tmp_path):
    base = a_log(tmp_path / "base", batches=3, per_batch=4)
    size = base.stat().st_size
    offsets = sorted({*range(0, 256, 3), *range(0, size, 23), *range(size - 24, size)})
    results = flip_bits(tmp_path, offsets, base)
    assert len(results) == 2 * len(offsets)
    check_flips(results, 12)
    kept = [r for r in results if r["log_left"]]
    assert kept, "no flip was detected at all: the checks are not running"


@pytest.mark.slow
def test_bit_flips_at_every_offset_of_a_log_never_crash_or_destroy_it(tmp_path):
    base = a_log(tmp_path / "base", batches=3, per_batch=4)
    offsets = list(range(base.stat().st_size))
    check_flips(flip_bits(tmp_path, offsets, base), 12)


def test_recover_of_a_damaged_log_exits_2_and_reruns_leave_no_temporary_files(tmp_path):
    log = a_log(tmp_path, batches=3, per_batch=4)
    data = bytearray(log.read_bytes())
    ends = read_log(log).batch_ends
    at = bytes(data).index(b"caller", ends[0])  # a phase string in the second batch
    data[at] ^= 0x01
    log.write_bytes(bytes(data))
    for _ in range(3):
        done = warmfit_process("recover", str(tmp_path))
        assert done.returncode == 2, done.stdout + done.stderr
        assert str(log) in done.stderr and "Traceback" not in done.stderr
        assert log.read_bytes() == bytes(data)
        assert no_temporaries(tmp_path) == []
    # the batch before the damage is in the trace; the log stays for a person
    assert read_trace([tmp_path]).height == 4


# --------------------------------------------------------------------------- items 2-4: real processes

TRAINER = textwrap.dedent(
    """
    import os, resource, signal, sys, time
    from warmfit.errors import RecordingError
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import CpuMeter

    mode = sys.argv[1]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    rec = Recorder.from_env() if os.environ.get("WARMFIT_RECORD_DIR") else None
    if rec is None:
        rec = Recorder(sys.argv[2], run="r", rank=0, meter=CpuMeter(), flush_interval_s=3600)

    def waves(count):
        for _ in range(count):
            with rec.wave("sig", 10, 20) as w:
                w.forward_done()

    def full(extra=0):
        log = rec._writer.path
        resource.setrlimit(resource.RLIMIT_FSIZE, (log.stat().st_size + extra, hard))

    for step in range(5):
        if mode in ("moment", "stays", "atexit") and step == 2:
            full(extra=300)  # the next batch (about 1.5 KB) fits only in part
        if mode == "moment" and step == 4:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
        waves(5)
        rec.step()
    if mode == "compaction":
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))  # no Parquet file fits
    if mode == "wait":
        print("flushed", rec._writer.path, os.getpid(), flush=True)
        sys.stdin.read()
    if mode == "atexit":
        sys.exit(0)  # the exit hook closes, and warns
    try:
        rec.close()
    except RecordingError as exc:
        print("LOST", exc.lost_readings, str(exc).replace("\\n", " "), flush=True)
        sys.exit(3)
    print("closed", flush=True)
    """
)


@pytest.fixture
def trainer(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    path = tmp_path / "trainer.py"
    path.write_text(TRAINER)
    return path


def train(trainer: Path, mode: str, out: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARMFIT_RECORD")}
    env.pop("RANK", None)
    return subprocess.run(
        [sys.executable, str(trainer), mode, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **kwargs,
    )


@pytest.mark.torch
def test_a_disk_full_for_a_moment_loses_no_reading(tmp_path, trainer):
    done = train(trainer, "moment", tmp_path / "out")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "could not write" in done.stderr  # the failed flush was said out loud
    rows = read_trace([tmp_path / "out"])
    assert rows.height == 50 and rows["seq"].to_list() == list(range(50))


@pytest.mark.torch
def test_a_disk_that_stays_full_says_how_many_readings_are_lost(tmp_path, trainer):
    out = tmp_path / "out"
    done = train(trainer, "stays", out)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("LOST 30 ")  # steps 2, 3 and 4: 3 x 5 waves x 2
    assert "warmfit recover" in done.stdout
    recovered = warmfit_process("recover", str(out))
    assert recovered.returncode == 0, recovered.stderr
    assert "could not write 30 more" in recovered.stdout
    rows = read_trace([out])
    assert rows["seq"].to_list() == list(range(20))  # every reading flushed before
    meta = pq.read_schema(next(out.rglob("*.parquet"))).metadata
    assert meta[b"warmfit.readings_lost"] == b"30"


@pytest.mark.torch
def test_a_full_disk_during_compaction_leaves_the_log_intact(tmp_path, trainer):
    out = tmp_path / "out"
    done = train(trainer, "compaction", out)
    assert done.returncode == 3 and "could not compact" in done.stdout, done.stdout + done.stderr
    assert done.stdout.startswith("LOST 0 ")  # the log keeps every reading
    assert no_temporaries(out) == []
    (log,) = find_logs(out)
    assert read_log(log).readings == 50
    limited = subprocess.run(  # recover on a disk that is still full: nothing is lost
        [sys.executable, "-m", "warmfit", "recover", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size(200),
    )
    assert limited.returncode == 2 and str(log) in limited.stderr, limited.stderr
    assert "Traceback" not in limited.stderr
    assert read_log(log).readings == 50 and no_temporaries(out) == []
    assert warmfit_process("recover", str(out)).returncode == 0
    assert read_trace([out]).height == 50


def _limit_file_size(limit: int):
    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


@pytest.mark.torch
def test_warmfit_record_exits_non_zero_and_counts_readings_lost_to_a_full_disk(tmp_path, trainer):
    out = tmp_path / "rec"
    done = warmfit_process("record", "-o", str(out), "--", sys.executable, str(trainer), "stays")
    assert done.returncode != 0, done.stderr
    assert "30 readings" in done.stderr and "LOST" in done.stderr
    assert read_trace([out]).height == 20


@pytest.mark.torch
def test_warmfit_record_exits_non_zero_when_the_exit_hook_could_not_close(tmp_path, trainer):
    # The trainer exits 0 and leaves closing to the exit hook, which can only warn.
    out = tmp_path / "rec"
    done = warmfit_process("record", "-o", str(out), "--", sys.executable, str(trainer), "atexit")
    assert done.returncode == 2, done.stderr
    assert "could not close the recorder" in done.stderr  # the hook's warning
    assert "30 readings" in done.stderr and "LOST" in done.stderr
    assert read_trace([out]).height == 20


def _start_waiting_writer(trainer: Path, out: Path, env: dict[str, str] | None = None):
    child = subprocess.Popen(
        [sys.executable, str(trainer), "wait", str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline().split()
    assert line and line[0] == "flushed", child.stderr.read() if child.stderr else ""
    return child, Path(line[1]), int(line[2])


@pytest.mark.torch
def test_recover_refuses_a_log_that_a_live_recording_still_writes(tmp_path, trainer):
    out = tmp_path / "out"
    child, log, pid = _start_waiting_writer(trainer, out)
    try:
        before = log.read_bytes()
        done = warmfit_process("recover", str(out))
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"still being written by pid {pid}" in done.stderr
        assert "Traceback" not in done.stderr
        assert log.read_bytes() == before
    finally:
        stdout, stderr = child.communicate("", timeout=60)
    assert child.returncode == 0 and "closed" in stdout, stderr
    assert read_trace([out]).height == 50  # the writer kept every reading


@pytest.mark.torch
def test_a_second_process_recording_the_same_rank_is_refused_at_creation(tmp_path, trainer):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    env.update(WARMFIT_RECORD_DIR=str(out), WARMFIT_RECORD_RUN="r", WARMFIT_RECORD_FLUSH_S="3600")
    first, _, pid = _start_waiting_writer(trainer, out, env)
    try:
        second = subprocess.run(
            [sys.executable, str(trainer), "plain", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert second.returncode != 0
        assert f"already being written by pid {pid}" in second.stderr, second.stderr
        assert "FileExistsError" not in second.stderr
    finally:
        _, stderr = first.communicate("", timeout=60)
    assert first.returncode == 0, stderr
    rows = read_trace([out])
    assert rows.height == 50 and rows["seq"].to_list() == list(range(50))


@pytest.mark.torch
def test_two_recorders_of_one_rank_in_one_process_the_second_is_refused(tmp_path):
    pytest.importorskip("torch")
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import CpuMeter

    first = Recorder(tmp_path, run="r", rank=0, meter=CpuMeter(), flush_interval_s=3600)
    try:
        with pytest.raises(UsageError, match="another Recorder in this process"):
            Recorder(tmp_path, run="r", rank=0, meter=CpuMeter(), flush_interval_s=3600)
        with first.wave("sig", 1, 1) as w:
            w.forward_done()
    finally:
        first.close()
    assert read_trace([tmp_path]).height == 2


SIGKILLED = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from warmfit.recorder.log import LogWriter
    sys.path.insert(0, sys.argv[2])
    from tests.test_hostile_log import rows

    writer = LogWriter(Path(sys.argv[1]), "r", 0, {}, fsync=False)
    print("ready", flush=True)
    seq = 0
    while True:
        writer.append(rows(seq, 500))
        seq += 500
    """
)


@pytest.mark.parametrize("delay_s", [0.05, 0.2, 0.4])
def test_a_writer_killed_at_any_moment_leaves_a_log_recover_keeps_whole(tmp_path, delay_s):
    import time

    log = tmp_path / "run=r" / "rank=0" / LOG_NAME
    script = tmp_path / "writer.py"
    script.write_text(SIGKILLED)
    child = subprocess.Popen(
        [sys.executable, str(script), str(log), str(Path(__file__).parent.parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    time.sleep(delay_s)
    child.send_signal(signal.SIGKILL)
    child.wait()
    recovery = recover_all(tmp_path)
    assert recovery.problems == []
    if recovery.compactions[0].readings:
        seqs = read_trace([tmp_path])["seq"].to_list()
        assert seqs == list(range(len(seqs))) and len(seqs) % 500 == 0
    assert not log.exists()


FORKING = textwrap.dedent(
    """
    import os, sys, time
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import CpuMeter

    rec = Recorder(sys.argv[1], run="r", rank=0, meter=CpuMeter(), flush_interval_s=3600)
    with rec.wave("sig", 10, 20) as w:
        w.forward_done()
    rec.step()
    child = os.fork()  # a data-loader worker, say: it outlives a killed trainer
    if child == 0:
        # the fork handlers have run by now: the child says so, with its pid
        print(os.getpid(), flush=True)
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
    """
)


@pytest.mark.torch
def test_a_forked_child_does_not_keep_a_killed_writers_log_busy(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "forking.py"
    script.write_text(FORKING)
    out = tmp_path / "out"
    parent = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        (done,) = recover(out)  # the worker lives on, but holds no lock on the log
        assert done.readings == 2
    finally:
        os.kill(worker, signal.SIGKILL)


@pytest.mark.torch
def test_record_force_refuses_to_remove_a_log_a_live_recording_writes(tmp_path, trainer):
    out = tmp_path / "rec"
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    env.update(WARMFIT_RECORD_DIR=str(out), WARMFIT_RECORD_RUN="r", WARMFIT_RECORD_FLUSH_S="3600")
    first, log, pid = _start_waiting_writer(trainer, out, env)
    try:
        done = warmfit_process("record", "-o", str(out), "--run", "r", "--force", "--", "true")
        assert done.returncode == 2 and f"still being written by pid {pid}" in done.stderr
        assert log.exists()
    finally:
        _, stderr = first.communicate("", timeout=60)
    assert first.returncode == 0, stderr
    assert read_trace([out]).height == 50


def test_recover_removes_what_a_compaction_killed_part_way_left(tmp_path):
    # write_trace's temporary file, left 0 bytes long by a compaction that died
    log = a_log(tmp_path)
    stale = log.with_name(".readings.parquet.k1ll3d.tmp")
    stale.write_bytes(b"")
    foreign = log.with_name("notes.tmp")  # not warmfit's name: left alone
    foreign.write_bytes(b"mine")
    recover(tmp_path)
    assert not stale.exists() and foreign.read_bytes() == b"mine"
    assert read_trace([tmp_path]).height == 12


# --------------------------------------------------------------------------- write-ahead log


def test_a_marked_stream_with_other_columns_is_not_read_as_a_log() -> None:
    """Kills log-columns-unchecked: an Arrow stream that carries the log marker but
    one column, ``note``, of 3 rows is refused, its 3 rows not taken for readings."""
    schema = pa.schema([pa.field("note", pa.int64())], metadata={LOG_MARKER: LOG_VERSION})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.record_batch([pa.array([1, 2, 3])], schema=schema))
    data = sink.getvalue().to_pybytes()
    contents = read_log(Path("readings.arrows"), data)
    assert not contents.ours and contents.readings == 0 and contents.table is None
    assert contents.problem == "its columns are not those of a warmfit log (its schema is damaged)"
    assert contents.dropped_bytes == len(data)


# --------------------------------------------------------------------------- 15, 16: recover


def _readings(seqs: range, peak: int = 200) -> list[tuple[Any, ...]]:
    """Reading tuples of a log (the v1 columns but run and rank), one wave each."""
    return [
        (s, 0, s, "sig", "flat", "caller", True, 10, 10, 0, 100, peak, None, False) for s in seqs
    ]


def _log(root: Path, batches: list[list[tuple[Any, ...]]]) -> Path:
    path = root / "run=r" / "rank=0" / LOG_NAME
    writer = LogWriter(path, "r", 0, {"warmfit.meter": "test"}, fsync=False)
    for rows in batches:
        writer.append(rows)
    writer.release()
    return path


def _recovered(root: Path) -> tuple[Any, pl.DataFrame | None]:
    result = warmfit_cli("recover", root)
    traces = list(root.rglob("*.parquet"))
    return result, (read_trace(traces) if traces else None)


@pytest.mark.parametrize("bad", ["torn", "damaged", "breaks-the-format"])
def test_recover_keeps_every_good_batch_before_a_bad_one(tmp_path: Path, bad: str) -> None:
    """Survivor 15 (stranger-recover-keeps-one-batch-fewer): 3 good batches of 4
    readings, then a bad one — torn (cut off by a kill), damaged (bytes
    overwritten), or valid Arrow whose first reading has a negative peak
    (against the format) — recover keeps exactly the 3 batches, 12 readings,
    and says so."""
    good = [_readings(range(b * 4, b * 4 + 4)) for b in range(3)]
    last = _readings(range(12, 16), peak=-5 if bad == "breaks-the-format" else 200)
    log = _log(tmp_path, [*good, last])
    size = read_log(log).batch_ends[2]  # where the third batch ends
    data = log.read_bytes()
    if bad == "torn":
        log.write_bytes(data[: size + (len(data) - size) // 2])
    elif bad == "damaged":
        log.write_bytes(data[: size + 8] + b"\x5a" * (len(data) - size - 8))
    result, trace = _recovered(tmp_path)
    assert trace is not None and trace.get_column("seq").to_list() == list(range(12))
    assert "kept 12 readings in 3 batches" in " ".join(result.output.split())
    assert result.exit_code == (0 if bad == "torn" else 2), result.output
    assert log.exists() == (bad != "torn")  # a log with damage is kept for a person


def test_a_log_whose_batches_are_out_of_seq_order_is_compacted(tmp_path: Path) -> None:
    """Survivor 16 (stranger-compaction-refuses-out-of-order-log): a log holds
    readings in the order they were flushed, which need not be ``seq`` order
    (docs: the trace is read back and compared with the log, sorted as a trace
    is read). Batches of seq 4..7, then 0..3, then 8..11: recover keeps all 12
    readings, exit 0, and removes the log."""
    log = _log(tmp_path, [_readings(range(4, 8)), _readings(range(4)), _readings(range(8, 12))])
    recovery = recover_all(tmp_path)
    assert recovery.problems == []
    assert [(c.readings, c.batches, c.note) for c in recovery.compactions] == [(12, 3, "complete")]
    assert not log.exists()
    trace = read_trace(list(tmp_path.rglob("*.parquet")))
    assert trace.get_column("seq").to_list() == list(range(12))


def test_recover_names_the_out_of_order_log_kept_in_the_command(tmp_path: Path) -> None:
    """Survivor 16 through the command: exit 0, 12 readings kept in 3 batches."""
    _log(tmp_path, [_readings(range(8, 12)), _readings(range(4)), _readings(range(4, 8))])
    result, trace = _recovered(tmp_path)
    assert result.exit_code == 0, result.output
    assert "kept 12 readings in 3 batches" in result.output
    assert trace is not None and trace.height == 12


def test_recover_of_a_file_says_it_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "pw.csv"
    path.write_text("run\n")
    done = warmfit_cli("recover", str(path))
    assert done.exit_code == 2
    assert "is a file, not a directory" in done.stderr


def _rank_log(root: Path, rank: int, batches: int) -> Path:
    """Rank ``rank``'s log of ``batches`` batches of 4 readings."""
    path = root / "run=r" / f"rank={rank}" / LOG_NAME
    writer = LogWriter(path, "r", rank, {"warmfit.meter": "test"}, fsync=False)
    for b in range(batches):
        writer.append(_readings(range(b * 4, b * 4 + 4)))
    writer.release()
    return path


def test_recover_says_for_each_log_what_it_kept_dropped_and_lost(tmp_path: Path) -> None:
    """Each log's line, worked out. Rank 0: 3 batches of 4 readings kept, 100 bytes of a
    fourth cut off by the kill, 5 readings its recorder could not write; rank 1: its only
    batch cut off (1,366 of its bytes), nothing kept, so the log is named, not a trace.
    Rank 3's one batch is whole: nothing dropped, nothing more said. The summary adds
    the bytes dropped: 1,466. With rank 2's log damaged after 2 batches
    (1,416 bytes unreadable, kept for a person), exit 2 and its bytes are not counted as
    dropped. Run again where every log is a trace, it has nothing to recover."""

    def logs(root: Path, damaged: bool) -> list[str]:
        torn = _rank_log(root, 0, 4)
        torn.write_bytes(torn.read_bytes()[: read_log(torn).batch_ends[2] + 100])
        write_lost_readings(torn, 5)
        only = _rank_log(root, 1, 1)
        only.write_bytes(only.read_bytes()[:-50])
        lines = [
            f"{torn.with_name('readings.parquet')}: kept 12 readings in 3 batches; dropped 100 "
            "bytes of a batch cut off by the kill (a batch here held 4 readings on average); "
            "the recorder could not write 5 more (a full disk) [its last batch is cut off (a "
            "process killed while writing it)]",
            f"{only}: kept 0 readings in 0 batches; dropped 1,366 bytes of a batch cut off by "
            "the kill [nothing kept: its last batch is cut off (a process killed while writing "
            "it)]",
        ]
        if not damaged:
            whole = _rank_log(root, 3, 1)
            lines.append(
                f"{whole.with_name('readings.parquet')}: kept 4 readings in 1 batch [complete]"
            )
        else:
            bad = _rank_log(root, 2, 3)
            data = bad.read_bytes()
            end = read_log(bad).batch_ends[1]
            bad.write_bytes(data[: end + 8] + b"\x5a" * (len(data) - end - 8))
            lines.append(
                f"{bad.with_name('readings.parquet')}: kept 8 readings in 2 batches; 1,416 "
                "bytes after them cannot be read (the log is kept) [readable prefix kept; the "
                "log is kept]"
            )
        return lines

    clean = tmp_path / "clean"
    lines = logs(clean, damaged=False)
    result = warmfit_cli("recover", clean)
    assert (result.exit_code, result.stdout.splitlines()) == (0, [
        *lines,
        "recovered 3 logs: 16 readings kept, 1,466 bytes dropped. Readings taken after a "
        f"rank's last flush were never written. Replay it: warmfit replay {clean}",
    ])  # fmt: skip
    result = warmfit_cli("recover", clean)  # again: the logs are traces now
    assert (result.exit_code, result.stdout) == (0, (
        f"nothing to recover: {clean} holds no write-ahead log; its recording is already "
        f"a trace. Replay it: warmfit replay {clean}\n"
    ))  # fmt: skip
    damaged = tmp_path / "damaged"
    lines = logs(damaged, damaged=True)
    result = warmfit_cli("recover", damaged)
    assert (result.exit_code, result.stdout.splitlines()) == (2, [
        *lines, "recovered 3 logs: 20 readings kept, 1,466 bytes dropped."
    ])  # fmt: skip
    assert "1 log could not be recovered completely" in result.stderr
