"""The Recorder: readings, whole-ness (SPEC §1), exceptions, OOM, the log."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from warmfit.errors import UsageError  # noqa: E402
from warmfit.format.trace import read_trace  # noqa: E402
from warmfit.recorder import Recorder  # noqa: E402
from warmfit.recorder.log import LOG_NAME, read_log, recover  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture
def rec(tmp_path):
    recorder = Recorder(tmp_path / "out", run="t", device="cpu", flush_interval_s=3600)
    yield recorder
    recorder.close()


def readings(recorder: Recorder):
    recorder.close()
    return read_trace([recorder.trace_path]).to_dicts()


def run_wave(recorder, floats_forward=1000, floats_caller=500, **kwargs):
    with recorder.wave("sig", 10, 30, **kwargs) as w:
        x = torch.empty(floats_forward)
        w.forward_done()
        y = torch.empty(floats_caller)
        del x, y


def test_a_plain_wave_gives_a_forward_and_a_whole_caller_reading(rec):
    run_wave(rec, 1000, 500, output_bytes=8)
    forward, caller = readings(rec)
    assert (forward["phase"], forward["whole"]) == ("forward", False)
    assert (caller["phase"], caller["whole"]) == ("caller", True)
    assert forward["peak_bytes"] - forward["baseline_bytes"] == 4000
    assert caller["peak_bytes"] - caller["baseline_bytes"] == 6000  # x and y together
    assert (caller["packed_tokens"], caller["logical_tokens"], caller["output_bytes"]) == (
        10,
        30,
        8,
    )
    assert [r["seq"] for r in (forward, caller)] == [0, 1]
    assert forward["wave"] == caller["wave"] == 0


def test_a_wave_entered_inside_another_makes_the_outer_caller_reading_not_whole(rec):
    with rec.wave("outer", 10, 10) as outer:
        x = torch.empty(1000)
        outer.forward_done()
        with rec.wave("inner", 5, 5) as inner:
            y = torch.empty(100)
            inner.forward_done()
        del x, y
    rows = {(r["signature"], r["phase"]): r for r in readings(rec)}
    assert rows[("inner", "caller")]["whole"] is True
    assert rows[("outer", "caller")]["whole"] is False
    # the outer peak still covers its forward: the nested reset's peak was carried
    outer_caller = rows[("outer", "caller")]
    assert outer_caller["peak_bytes"] - outer_caller["baseline_bytes"] >= 4000


def test_an_untracked_reset_below_the_forward_peak_makes_the_reading_not_whole(rec):
    with rec.wave("sig", 10, 10) as w:
        x = torch.empty(1000)
        w.forward_done()
        del x
        rec.meter.reset_peak()  # as a caller calling torch.cuda.reset_peak_memory_stats()
    caller = readings(rec)[1]
    assert caller["whole"] is False


def test_an_exception_in_the_caller_phase_is_recorded_and_re_raised_unchanged(rec):
    error = ValueError("loss is nan")
    with pytest.raises(ValueError) as caught, rec.wave("sig", 10, 10) as w:
        w.forward_done()
        raise error
    assert caught.value is error
    caller = readings(rec)[1]
    assert (caller["phase"], caller["whole"], caller["oom"]) == ("caller", False, False)


def test_an_exception_in_the_forward_records_a_forward_reading(rec):
    with pytest.raises(KeyError), rec.wave("sig", 10, 10):
        raise KeyError("x")
    (only,) = readings(rec)
    assert (only["phase"], only["whole"], only["oom"]) == ("forward", False, False)


def test_a_real_cpu_out_of_memory_error_records_an_oom_reading(rec):
    with pytest.raises(RuntimeError, match="can't allocate memory"), rec.wave("sig", 10, 10) as w:
        w.forward_done()
        torch.empty(2**62, dtype=torch.uint8)
    caller = readings(rec)[1]
    assert (caller["phase"], caller["oom"], caller["whole"]) == ("caller", True, False)


def test_torch_out_of_memory_error_records_an_oom_reading_and_propagates(rec):
    with pytest.raises(torch.OutOfMemoryError), rec.wave("sig", 10, 10):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    (only,) = readings(rec)
    assert only["oom"] is True


def test_split_children_and_forward_only_waves_record_a_forward_reading_only(rec):
    run_wave(rec, kind="split_child")
    with rec.wave("sig", 10, 10, kind="dp_rank_forward"):
        pass
    rows = readings(rec)
    assert [(r["kind"], r["phase"], r["whole"], r["oom"]) for r in rows] == [
        ("split_child", "forward", False, False),
        ("dp_rank_forward", "forward", False, False),  # left without forward_done()
    ]


def test_steps_label_readings_and_flush_the_log(rec):
    run_wave(rec)
    rec.step()
    log = rec.directory / LOG_NAME
    assert read_log(log).readings == 2  # flushed at step(), before close()
    run_wave(rec)
    rows = readings(rec)
    assert [r["step"] for r in rows] == [0, 0, 1, 1]
    assert [r["wave"] for r in rows] == [0, 0, 1, 1]
    assert not log.exists()  # compacted and removed


def test_the_log_is_flushed_every_few_seconds_without_a_step(tmp_path):
    import time

    recorder = Recorder(tmp_path, run="t", device="cpu", flush_interval_s=0.05)
    try:
        run_wave(recorder)
        log = recorder.directory / LOG_NAME
        deadline = time.monotonic() + 60  # bounds a hang only: a flush is due every 0.05 s
        while not (log.exists() and read_log(log).readings == 2):
            assert time.monotonic() < deadline, "the periodic flush never wrote the readings"
            time.sleep(0.02)
    finally:
        recorder.close()


def test_the_trace_file_records_meter_torch_version_and_device(rec):
    run_wave(rec)
    rec.close()
    meta = pq.read_schema(rec.trace_path).metadata
    assert meta[b"warmfit.schema"] == b"1"
    assert meta[b"warmfit.meter"] == b"warmfit.cpu-storages"
    assert meta[b"warmfit.torch_version"] == torch.__version__.encode()
    assert b"cpu" in meta[b"warmfit.device"]


def test_the_layout_is_run_then_rank(rec):
    run_wave(rec)
    rec.close()
    assert rec.trace_path.parent.name == "rank=0"
    assert rec.trace_path.parent.parent.name == "run=t"


def test_a_second_recorder_of_the_same_run_and_rank_is_refused(rec, tmp_path):
    run_wave(rec)
    rec.close()
    with pytest.raises(UsageError, match="already holds a recording"):
        Recorder(tmp_path / "out", run="t", device="cpu")


def test_a_wave_whose_values_cannot_be_recorded_runs_unrecorded_with_a_warning(rec):
    from warmfit.recorder import RecorderWarning

    # used to raise UsageError under warmfit record
    with pytest.warns(RecorderWarning, match="packed_tokens=0"), rec.wave("sig", 0, 10) as w:
        w.forward_done()
    with pytest.raises(UsageError, match="kind='odd'"):
        rec.wave("sig", 10, 10, kind="odd")
    assert rec.readings == 0 and rec.skipped_waves == 1


def test_a_run_label_that_cannot_name_a_directory_is_refused(tmp_path):
    with pytest.raises(UsageError, match="cannot name a directory"):
        Recorder(tmp_path, run="a/b", device="cpu")


@pytest.mark.parametrize("value", [None, ""])
def test_without_warmfit_record_from_env_records_nothing(monkeypatch, tmp_path, value):
    """WARMFIT_RECORD_DIR unset, or set to nothing (not the current directory)."""
    if value is None:
        monkeypatch.delenv("WARMFIT_RECORD_DIR", raising=False)
    else:
        monkeypatch.setenv("WARMFIT_RECORD_DIR", value)
    monkeypatch.chdir(tmp_path)
    recorder = Recorder.from_env()
    assert not recorder.enabled
    with recorder.wave("sig", 10, 10) as w:
        w.forward_done()
    recorder.step()
    assert recorder.close() is None
    assert list(tmp_path.iterdir()) == []


def test_from_env_records_where_warmfit_record_says(monkeypatch, tmp_path):
    monkeypatch.setenv("WARMFIT_RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("WARMFIT_RECORD_RUN", "envrun")
    monkeypatch.delenv("RANK", raising=False)
    recorder = Recorder.from_env(device="cpu")
    run_wave(recorder)
    recorder.close()
    assert recorder.trace_path == tmp_path / "run=envrun" / "rank=0" / "readings.parquet"


def test_rank_comes_from_the_environment_when_distributed_is_not_initialized(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "3")
    recorder = Recorder(tmp_path, run="t", device="cpu")
    try:
        assert recorder.rank == 3
    finally:
        recorder.close()


def test_recover_keeps_every_complete_batch_of_a_truncated_log(tmp_path):
    recorder = Recorder(tmp_path, run="t", device="cpu", flush_interval_s=3600)
    for _ in range(3):
        run_wave(recorder)
        recorder.step()
    recorder._writer.release()  # as a process killed mid-run: no close(), no compaction
    log = recorder.directory / LOG_NAME
    data = log.read_bytes()
    log.write_bytes(data[:-7])  # the last batch cut off mid-write
    recorder._closed = True
    recorder._stop.set()
    recorder.meter.close()
    (done,) = recover(tmp_path)
    assert (done.readings, done.batches) == (4, 2)
    assert done.dropped_bytes > 0
    rows = read_trace([tmp_path]).to_dicts()
    assert [r["seq"] for r in rows] == [0, 1, 2, 3]
    meta = pq.read_schema(done.trace).metadata
    assert meta[b"warmfit.recovered"] == b"true"


def test_recover_refuses_a_directory_without_logs(tmp_path):
    with pytest.raises(UsageError, match="holds no write-ahead logs"):
        recover(tmp_path)


# --------------------------------------------------------------------------- review fixes


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        ((b"sig", 10, 10), {}, "signature"),
        ((None, 10, 10), {}, "signature"),
        (("", 10, 10), {}, "signature"),
        (("sig", 10.0, 10), {}, "packed_tokens"),
        (("sig", 10, 10.5), {}, "logical_tokens"),
        (("sig", 10, 10), {"output_bytes": 8.0}, "output_bytes"),
        (("sig", 10, 10), {"static_floor_bytes": 1.5}, "static_floor_bytes"),
    ],
)
def test_wave_refuses_bad_arguments_at_entry_naming_the_argument(rec, args, kwargs, named):
    with pytest.raises(UsageError, match=named):
        rec.wave(*args, **kwargs)
    assert rec.readings == 0


def test_wave_refuses_a_float_tensor_count_at_entry(rec):
    with pytest.raises(UsageError, match="packed_tokens"):
        rec.wave("sig", torch.tensor(10.0), 10)


def test_wave_accepts_integer_tensor_counts_and_records_plain_ints(rec):
    with rec.wave("sig", torch.tensor(10), torch.tensor(30), torch.tensor(8), torch.tensor(0)) as w:
        w.forward_done()
    rows = readings(rec)  # a tensor left in the row would fail the flush
    assert [(r["packed_tokens"], r["logical_tokens"], r["output_bytes"]) for r in rows] == [
        (10, 30, 8),
        (10, 30, 8),
    ]
    assert [r["static_floor_bytes"] for r in rows] == [0, 0]


def test_a_flat_wave_without_forward_done_is_never_whole(rec):
    with rec.wave("plain", 10, 10):
        x = torch.empty(1000)
        del x
    # an untracked reset while the forward's tensors are alive: the counter stays
    # above the baseline, so the baseline check alone cannot see it
    with rec.wave("reset", 10, 10):
        x = torch.empty(1000)
        y = torch.empty(5000)
        del y
        rec.meter.reset_peak()
        del x
    rows = readings(rec)
    assert [(r["signature"], r["phase"], r["whole"]) for r in rows] == [
        ("plain", "caller", False),
        ("reset", "caller", False),
    ]


def _failing_close(rec):
    """Make the log's next write fail for real: its descriptor now writes to /dev/full."""
    import os

    run_wave(rec)
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        os.dup2(full, rec._writer.fd)  # every write now fails with ENOSPC
    finally:
        os.close(full)


def test_close_after_a_failed_flush_is_closed_and_a_second_close_does_nothing(rec):
    from warmfit.errors import RecordingError
    from warmfit.recorder.recorder import _close_at_exit

    _failing_close(rec)
    with pytest.raises(RecordingError, match="No space left") as caught:
        rec.close()
    assert caught.value.lost_readings == 2
    assert "2 readings" in str(caught.value) and "warmfit recover" in str(caught.value)
    assert rec._closed
    assert rec.close() is None  # idempotent: no second error
    _close_at_exit(weakref.ref(rec))  # the atexit hook is quiet too


def test_the_atexit_hook_warns_instead_of_raising_when_close_fails(rec, capsys):
    from warmfit.recorder.recorder import _close_at_exit

    _failing_close(rec)
    _close_at_exit(weakref.ref(rec))
    err = capsys.readouterr().err
    assert "could not close the recorder" in err and "warmfit recover" in err
    assert "Traceback" not in err
    assert rec._closed


def _killed_rank(tmp_path, rank: int) -> Recorder:
    recorder = Recorder(tmp_path, run="t", rank=rank, device="cpu", flush_interval_s=3600)
    run_wave(recorder)
    recorder.step()
    recorder._writer.release()  # as a process killed mid-run
    recorder._closed = True
    recorder._stop.set()
    recorder.meter.close()
    return recorder


def test_recover_recovers_every_other_log_when_one_fails_then_reports_it(tmp_path, monkeypatch):
    import warmfit.recorder.log as log_module

    bad, good = _killed_rank(tmp_path, 0), _killed_rank(tmp_path, 1)
    real = log_module.compact_log

    def compact(path, extra=None):
        if path.parent == bad.directory:
            raise OSError(5, "Input/output error")
        return real(path, extra)

    monkeypatch.setattr(log_module, "compact_log", compact)
    with pytest.raises(UsageError) as caught:
        recover(tmp_path)
    message = str(caught.value)
    assert str(bad.directory / LOG_NAME) in message and "Input/output error" in message
    assert "warmfit recover" in message
    assert (good.directory / "readings.parquet").exists()  # the other log was recovered
    assert (bad.directory / LOG_NAME).exists()  # the failed one is left for another try


def test_recovery_reports_progress_once_before_and_after_each_log(tmp_path):
    from warmfit.recorder.log import recover_all

    _killed_rank(tmp_path, 0), _killed_rank(tmp_path, 1)
    calls = []
    recovery = recover_all(tmp_path, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 2), (1, 2), (2, 2)]
    assert len(recovery.compactions) == 2 and not recovery.problems


# --------------------------------------------------------------------------- issue 14


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        (("sig", 0, 10), {}, "packed_tokens=0 is not positive"),
        (("sig", -3, 10), {}, "packed_tokens=-3 is not positive"),
        (("sig", 10, 5), {}, "logical_tokens=5 is below packed_tokens=10"),
        (("sig", 10, 10), {"output_bytes": -1}, "output_bytes=-1 is negative"),
        (("sig", 10, 10), {"static_floor_bytes": -1}, "static_floor_bytes=-1 is negative"),
        (("sig", 10, 10), {"padded_tokens": 9}, "padded_tokens=9 is below packed_tokens=10"),
        (("sig", 10, 10), {"sum_sq_tokens": 0}, "sum_sq_tokens=0 is not positive"),
    ],
)
@pytest.mark.parametrize("enabled", [True, False])
def test_wave_values_that_cannot_be_recorded_warn_alike_with_and_without_recording(
    tmp_path, args, kwargs, problem, enabled
):
    from warmfit.recorder import RecorderWarning

    rec = Recorder(tmp_path / "out", run="t", device="cpu", enabled=enabled)
    try:
        with pytest.warns(RecorderWarning, match=problem) as caught:
            for _ in range(3):
                with rec.wave(*args, **kwargs) as w:
                    w.forward_done()
        assert len(caught) == 1  # one warning, not one per wave
        assert caught[0].filename == __file__  # it points at the trainer's own line
        assert rec.skipped_waves == 3 and rec.readings == 0
    finally:
        rec.close()


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (("sig", 10.0, 10), {}, "packed_tokens"),
        (("sig", -1.5, 10), {}, "packed_tokens"),
        (("sig", 10, 10), {"kind": "odd"}, "kind"),
        (("", 10, 10), {}, "signature"),
    ],
)
@pytest.mark.parametrize("enabled", [True, False])
def test_wrong_types_raise_alike_with_and_without_recording(tmp_path, args, kwargs, named, enabled):
    # outside warmfit record, wave(packed_tokens=10.0) used to be accepted silently
    rec = Recorder(tmp_path / "out", run="t", device="cpu", enabled=enabled)
    try:
        with pytest.raises(UsageError, match=named):
            rec.wave(*args, **kwargs)
    finally:
        rec.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_forward_done_twice_raises_alike_with_and_without_recording(tmp_path, enabled):
    rec = Recorder(tmp_path / "out", run="t", device="cpu", enabled=enabled)
    try:
        with pytest.raises(UsageError, match="twice"), rec.wave("sig", 10, 10) as w:
            w.forward_done()
            w.forward_done()
    finally:
        rec.close()


def test_a_skipped_wave_inside_a_recorded_one_leaves_it_whole(rec):
    with rec.wave("outer", 10, 10) as outer:
        outer.forward_done()
        with pytest.warns(UserWarning), rec.wave("inner", 0, 10):  # skipped: no counter reset
            x = torch.empty(100)
            del x
    rows = readings(rec)
    assert [(r["signature"], r["phase"], r["whole"]) for r in rows] == [
        ("outer", "forward", False),
        ("outer", "caller", True),
    ]


def test_the_trace_counts_skipped_waves_in_its_metadata(rec):
    run_wave(rec)
    with pytest.warns(UserWarning):
        for _ in range(4):
            with rec.wave("sig", 0, 10):
                pass
    rec.close()
    meta = pq.read_schema(rec.trace_path).metadata
    assert meta[b"warmfit.skipped_waves"] == b"4"


def test_a_cpu_recording_has_no_reserved_column(rec):
    run_wave(rec)
    rec.close()
    assert "reserved_peak_bytes" not in pq.read_schema(rec.trace_path).names


class _ReservedMeter:
    """A CPU meter with a fake reserved pool: 2x the allocated peak, plus a fixed 1000."""

    def __init__(self):
        from warmfit.recorder.meters import CpuMeter

        self._cpu = CpuMeter()
        self.name = "test.reserved"
        self.device_name = "cpu (fake reserved pool)"
        self.has_reserved = True

    def allocated_bytes(self):
        return self._cpu.allocated_bytes()

    def peak_bytes(self):
        return self._cpu.peak_bytes()

    def reset_peak(self):
        self._cpu.reset_peak()

    def reserved_peak_bytes(self):
        return 2 * self._cpu.peak_bytes() + 1000

    def close(self):
        self._cpu.close()


def test_a_meter_with_a_reserved_pool_writes_its_peak_as_an_extra_column(tmp_path):
    rec = Recorder(tmp_path / "out", run="t", meter=_ReservedMeter(), flush_interval_s=3600)
    run_wave(rec, 1000, 500)
    with rec.wave("outer", 10, 10) as outer:  # the nested reset: the outer's peak is carried
        big = torch.empty(10_000)
        del big
        outer.forward_done()
        with rec.wave("inner", 5, 5) as inner:
            inner.forward_done()
    rec.close()
    assert pq.read_schema(rec.trace_path).field("reserved_peak_bytes").type == "int64"
    rows = read_trace([rec.trace_path]).to_dicts()
    for r in rows:
        assert r["reserved_peak_bytes"] >= 2 * r["peak_bytes"] + 1000
    outer_caller = next(r for r in rows if r["signature"] == "outer" and r["phase"] == "caller")
    assert outer_caller["reserved_peak_bytes"] >= 2 * (outer_caller["baseline_bytes"] + 40_000)


def test_a_log_with_the_reserved_column_is_recovered_with_it(tmp_path):
    from warmfit.recorder.log import LogWriter, log_schema, read_log

    log = tmp_path / "run=t" / "rank=0" / LOG_NAME
    writer = LogWriter(log, "t", 0, {}, fsync=False, extra_columns=("reserved_peak_bytes",))
    writer.append([(0, 0, 0, "s", "flat", "caller", True, 4, 4, 0, 10, 100, None, False, 300)])
    writer.release()  # killed: never closed
    assert read_log(log).ours
    assert log_schema(("reserved_peak_bytes",)).names[-1] == "reserved_peak_bytes"
    (compaction,) = recover(tmp_path)
    assert read_trace([compaction.trace])["reserved_peak_bytes"].to_list() == [300]


# --------------------------------------------------------------------------- issue 29


def test_wave_records_padded_tokens_and_the_sum_of_squared_lengths_on_every_reading(rec):
    # a batch of lengths 3 and 5 padded to 5: packed 8, padded 10, sum of squares 9 + 25 = 34
    with rec.wave("sig", 8, 8, padded_tokens=10, sum_sq_tokens=34) as w:
        w.forward_done()
    with rec.wave("sig", 8, 8, padded_tokens=torch.tensor(8)) as w:  # a 0-d tensor: its int
        w.forward_done()
    rows = readings(rec)
    assert [(r["padded_tokens"], r["sum_sq_tokens"]) for r in rows] == [
        (10, 34), (10, 34), (8, None), (8, None),
    ]  # fmt: skip
    assert all(type(r["padded_tokens"]) is int for r in rows)


def test_a_trace_recorded_without_them_has_neither_column(rec):
    run_wave(rec)
    rec.close()
    names = pq.read_schema(rec.trace_path).names
    assert "padded_tokens" not in names and "sum_sq_tokens" not in names


def test_a_float_padded_count_is_refused_naming_it(rec):
    with pytest.raises(UsageError, match="sum_sq_tokens"):
        rec.wave("sig", 8, 8, sum_sq_tokens=34.0)


def test_logical_tokens_default_to_the_packed_tokens(tmp_path) -> None:
    """Issue 29 item 10: wave(signature, packed_tokens) alone records m = n (no sharing)."""
    with Recorder(tmp_path / "out", run="t", device="cpu") as rec, rec.wave("sig", 12) as w:
        w.forward_done()
    frame = read_trace([tmp_path / "out"])
    assert frame.select("packed_tokens", "logical_tokens").unique().rows() == [(12, 12)]


REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- recorder


torch_only = pytest.mark.torch


@pytest.fixture
def recorder(tmp_path: Path) -> Any:
    pytest.importorskip("torch")
    from warmfit.recorder import Recorder

    rec = Recorder(tmp_path / "out", run="t", device="cpu", flush_interval_s=3600)
    yield rec
    rec.close()


def _recorded(rec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    from warmfit.format.trace import read_trace

    rec.close()
    rows = read_trace([rec.trace_path]).to_dicts()
    return {(r["signature"], r["phase"]): r for r in rows}


@torch_only
def test_a_nested_wave_carries_the_outer_peak_after_the_outer_tensor_is_freed(
    recorder: Any,
) -> None:
    import torch

    # outer: 1000 floats = 4000 bytes, freed before the inner wave; the inner
    # wave's entry resets the peak counter, and the inner wave only reaches
    # 100 floats = 400 bytes. The outer caller reading must still say 4000.
    with recorder.wave("outer", 10, 10) as outer:
        x = torch.empty(1000)
        outer.forward_done()
        del x
        with recorder.wave("inner", 5, 5) as inner:
            y = torch.empty(100)
            inner.forward_done()
            del y
    rows = _recorded(recorder)
    delta = {key: r["peak_bytes"] - r["baseline_bytes"] for key, r in rows.items()}
    assert delta == {
        ("outer", "forward"): 4000,
        ("inner", "forward"): 400,
        ("inner", "caller"): 400,
        ("outer", "caller"): 4000,  # 400 if the peak before the reset were not carried
    }
    assert rows[("outer", "caller")]["whole"] is False


@torch_only
def test_the_forward_reading_carries_a_peak_reset_by_a_nested_wave(recorder: Any) -> None:
    import torch

    # the outer forward peaks at 4000 bytes, frees them, and a nested wave
    # (400 bytes) resets the counter before outer.forward_done(): the forward
    # reading must still say 4000.
    with recorder.wave("outer", 10, 10) as outer:
        x = torch.empty(1000)
        del x
        with recorder.wave("inner", 5, 5) as inner:
            y = torch.empty(100)
            inner.forward_done()
            del y
        outer.forward_done()
    rows = _recorded(recorder)
    forward = rows[("outer", "forward")]
    assert forward["peak_bytes"] - forward["baseline_bytes"] == 4000  # 400 without the carry


_FSYNC_SCRIPT = textwrap.dedent(
    """
    import os, sys, torch
    from warmfit.recorder import Recorder
    rec = Recorder(sys.argv[1], run="t", device="cpu", flush_interval_s=3600)
    for step in range(3):
        with rec.wave("sig", 10, 10) as wave:
            x = torch.empty(100)
            wave.forward_done()
        rec.step()
    os._exit(0)  # as a kill -9 after the third step: no close, no compaction
    """
)


def _strace_works() -> bool:
    strace = shutil.which("strace")
    if strace is None:
        return False
    probe = subprocess.run([strace, "-qq", "-e", "trace=fsync", "true"], capture_output=True)
    return probe.returncode == 0


@torch_only
@pytest.mark.skipif(not _strace_works(), reason="needs strace and ptrace permission")
def test_every_step_fsyncs_the_write_ahead_log(tmp_path: Path) -> None:
    """The write-ahead log reaches the disk at each step: strace counts fsync on it."""
    pytest.importorskip("torch")
    log = tmp_path / "strace.txt"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o", str(log),
         sys.executable, "-c", _FSYNC_SCRIPT, str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    from warmfit.recorder.log import LOG_NAME

    calls = [
        line
        for line in log.read_text().splitlines()
        if re.search(r"f(data)?sync\(\d+<[^>]*" + re.escape(LOG_NAME), line)
    ]
    assert len(calls) >= 3, log.read_text()[-2000:]


# --------------------------------------------------------------------------- construction


def test_the_65_536th_buffered_reading_flushes_the_log_without_a_step(tmp_path: Path) -> None:
    """MAX_BUFFERED = 65,536 readings force a flush, whatever the time and with no step()."""
    from tests.fixed_meter import FixedMeter
    from warmfit.recorder.recorder import MAX_BUFFERED

    assert MAX_BUFFERED == 65_536
    rec = Recorder(tmp_path, run="t", meter=FixedMeter(100, 300), flush_interval_s=3600)
    log = rec.directory / LOG_NAME
    try:
        for _ in range(32_767):  # 65,534 readings (a forward and a caller each): none flushed
            with rec.wave("sig", 10) as wave:
                wave.forward_done()
        with rec.wave("sig", 10) as wave:
            wave.forward_done()  # the 65,535th reading: still buffered
            assert read_log(log).readings == 0
        # leaving the wave took the 65,536th: one batch of all of them, no step() taken
        contents = read_log(log)
        assert (contents.batches, contents.readings) == (1, 65_536)
        assert rec.current_step == 0
    finally:
        rec.close()


@pytest.mark.parametrize(
    ("raw", "message"),
    [("-1", "RANK environment variable is -1; ranks are >= 0"),
     ("two", "RANK environment variable is 'two', not a rank number")],
)  # fmt: skip
def test_a_rank_variable_that_is_negative_or_not_a_number_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, raw: str, message: str
) -> None:
    monkeypatch.setenv("RANK", raw)
    with pytest.raises(UsageError, match=re.escape(message)):
        Recorder(tmp_path, run="t", device="cpu")
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


def test_rank_0_from_the_environment_is_rank_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("RANK", "0")
    with Recorder(tmp_path, run="t", device="cpu") as rec:
        assert rec.rank == 0 and rec.directory == tmp_path / "run=t" / "rank=0"


@pytest.mark.parametrize("interval", [0, -1.0, float("nan")])
def test_a_flush_interval_that_is_not_positive_is_refused(tmp_path: Path, interval: float) -> None:
    with pytest.raises(UsageError, match="flush_interval_s must be positive"):
        Recorder(tmp_path, run="t", device="cpu", flush_interval_s=interval)


def test_a_flush_interval_below_a_second_is_taken(tmp_path: Path) -> None:
    with Recorder(tmp_path, run="t", device="cpu", flush_interval_s=0.5) as rec:
        run_wave(rec)
    assert read_trace([rec.trace_path]).height == 2


def test_from_env_refuses_a_flush_interval_that_is_not_a_positive_number(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WARMFIT_RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("WARMFIT_RECORD_FLUSH_S", "soon")
    with pytest.raises(UsageError, match=r"WARMFIT_RECORD_FLUSH_S='soon' is not a number"):
        Recorder.from_env(device="cpu")
    monkeypatch.setenv("WARMFIT_RECORD_FLUSH_S", "0")  # read, then refused as the argument
    with pytest.raises(UsageError, match=r"flush_interval_s must be positive; got 0\.0"):
        Recorder.from_env(device="cpu")


def test_a_disabled_recorder_keeps_its_run_and_rank_and_writes_nothing(tmp_path: Path) -> None:
    plain = Recorder(None)
    assert (plain.enabled, plain.run, plain.rank, plain.output_dir) == (False, "", 0, None)
    named = Recorder(tmp_path / "out", run="ep1", rank=3, enabled=False)
    assert (named.enabled, named.run, named.rank, named.output_dir) == (False, "ep1", 3, None)
    with named.wave("sig", 10) as wave:
        wave.forward_done()
    named.step()
    assert (named.readings, named.current_step, named.close()) == (0, 1, None)
    assert list(tmp_path.iterdir()) == []


def test_the_run_label_defaults_to_the_output_directorys_name(tmp_path: Path) -> None:
    with Recorder(tmp_path / "ep7", device="cpu") as rec:
        run_wave(rec)
    assert rec.trace_path == tmp_path / "ep7" / "run=ep7" / "rank=0" / "readings.parquet"


def test_the_rank_of_an_initialized_process_group_wins_over_rank(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import torch.distributed as dist

    monkeypatch.setenv("RANK", "5")  # what a launcher set; the process group says 2
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 2)
    with Recorder(tmp_path, run="t", device="cpu") as rec:
        assert rec.rank == 2 and rec.directory == tmp_path / "run=t" / "rank=2"


def test_a_value_too_large_is_named_not_one_exactly_at_int64s_largest(rec) -> None:
    largest = 2**63 - 1  # kept: the trace's int64 holds it
    with pytest.raises(UsageError) as caught:
        rec.wave("s", largest, 2**63, output_bytes=largest)
    assert str(caught.value).startswith(
        "wave('s'): logical_tokens=9,223,372,036,854,775,808 is above 2**63 - 1 "
        "(9,223,372,036,854,775,807)"
    )


class _ScriptedMeter:
    """A meter a test drives: it reads what the test last set (bytes allocated, the peak,
    the reserved pool's peak); reset_peak() brings both peaks down to what is held now."""

    name = "test.scripted"
    device_name = "a scripted meter (tests)"
    has_reserved = True

    def __init__(self) -> None:
        self.allocated = self.peak = self.reserved = self.reserved_now = 0

    def allocated_bytes(self) -> int:
        return self.allocated

    def peak_bytes(self) -> int:
        return self.peak

    def reset_peak(self) -> None:
        self.peak, self.reserved = self.allocated, self.reserved_now

    def reserved_peak_bytes(self) -> int:
        return self.reserved

    def close(self) -> None:
        pass


def _waves_and_peaks(rec: Recorder) -> list[tuple]:
    """Each reading of a closed recorder's trace: signature, phase, whole, baseline,
    peak and reserved peak."""
    return [
        (r["signature"], r["phase"], r["whole"], r["baseline_bytes"], r["peak_bytes"],
         r["reserved_peak_bytes"])
        for r in read_trace([rec.trace_path]).to_dicts()
    ]  # fmt: skip


def test_the_reserved_pools_peak_is_recorded_exactly_and_carried_over_a_nested_wave(
    tmp_path: Path,
) -> None:
    meter = _ScriptedMeter()
    rec = Recorder(tmp_path, run="t", meter=meter, flush_interval_s=3600)
    with rec.wave("empty", 10) as wave:  # nothing allocated, nothing reserved: 0, not 1
        wave.forward_done()
    with rec.wave("outer", 10) as outer:
        meter.allocated, meter.peak, meter.reserved = 100, 900, 5_000
        outer.forward_done()
        meter.reserved_now = 1_000  # the pool shrank: the nested wave's reset reads 1,000
        with rec.wave("inner", 10) as inner:
            meter.peak, meter.reserved = 300, 3_000
            inner.forward_done()  # the caller adds nothing: its peak is the forward's
        meter.peak, meter.reserved = 400, 4_000
    rec.close()
    assert _waves_and_peaks(rec) == [
        ("empty", "forward", False, 0, 0, 0),
        ("empty", "caller", True, 0, 0, 0),  # the counter at its forward peak and baseline
        ("outer", "forward", False, 0, 900, 5_000),
        ("inner", "forward", False, 100, 300, 3_000),
        ("inner", "caller", True, 100, 300, 3_000),
        # the counters read 400 and 4,000 at the end; the nested wave's reset hid the
        # 900 and 5,000 before it, which the outer wave carries; not whole
        ("outer", "caller", False, 0, 900, 5_000),
    ]


def test_a_second_nested_wave_never_lowers_the_peaks_the_outer_wave_carries(
    tmp_path: Path,
) -> None:
    """Two waves one after the other inside "outer": each one's reset hides the outer's
    peaks from the counters, so the outer carries the highest read at either reset.
    Outer's forward: a peak of 900, a reserved pool of 5,000; "first" peaks at 300
    (3,000), "second" at 200 (2,000); the counters read 400 and 4,000 at the outer's
    end. Its caller reading is 900 and 5,000, not the 300 and 3,000 read at the second
    wave's reset."""
    meter = _ScriptedMeter()
    rec = Recorder(tmp_path, run="t", meter=meter, flush_interval_s=3600)
    with rec.wave("outer", 10) as outer:
        meter.allocated, meter.peak, meter.reserved = 100, 900, 5_000
        outer.forward_done()
        meter.reserved_now = 1_000
        with rec.wave("first", 10) as first:
            meter.peak, meter.reserved = 300, 3_000
            first.forward_done()
        with rec.wave("second", 10) as second:
            meter.peak, meter.reserved = 200, 2_000
            second.forward_done()
        meter.peak, meter.reserved = 400, 4_000
    rec.close()
    assert _waves_and_peaks(rec) == [
        ("outer", "forward", False, 0, 900, 5_000),
        ("first", "forward", False, 100, 300, 3_000),
        ("first", "caller", True, 100, 300, 3_000),
        ("second", "forward", False, 100, 200, 2_000),
        ("second", "caller", True, 100, 200, 2_000),
        ("outer", "caller", False, 0, 900, 5_000),
    ]


def test_a_counter_below_the_baseline_at_the_end_makes_the_reading_not_whole(
    tmp_path: Path,
) -> None:
    meter = _ScriptedMeter()
    meter.allocated = meter.peak = 1_000
    rec = Recorder(tmp_path, run="t", meter=meter, flush_interval_s=3600)
    with rec.wave("freed", 10) as wave:  # entered with 1,000 bytes held (the baseline)
        meter.allocated = meter.peak = 200  # freed, and the counter reset behind the recorder
        wave.forward_done()  # a forward peak of 200
        meter.peak = 300  # above the forward peak, below the baseline: a reset was missed
    with rec.wave("held", 10) as wave:  # entered with 200 held
        meter.peak = 250
        wave.forward_done()
        meter.peak = 260
    rec.close()
    got = [(r["signature"], r["phase"], r["whole"], r["peak_bytes"])
           for r in read_trace([rec.trace_path]).to_dicts()]  # fmt: skip
    assert got == [
        ("freed", "forward", False, 200),
        ("freed", "caller", False, 300),
        ("held", "forward", False, 250),
        ("held", "caller", True, 260),
    ]


@pytest.mark.parametrize(
    ("error", "oom"),
    [(MemoryError(), True),
     (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
     (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8"), True),
     (type("OutOfMemoryError", (RuntimeError,), {})("no message"), True),
     (RuntimeError("shape mismatch"), False),
     # the words, but not from an allocator: an error of the trainer's own
     (ValueError("the model ran out of memory last time; lower the batch"), False),
     (KeyError("out of memory"), False)],
)  # fmt: skip
def test_only_an_allocators_error_marks_the_reading_oom(rec, error: Exception, oom: bool) -> None:
    from warmfit.recorder.recorder import is_out_of_memory

    assert is_out_of_memory(error) is oom
    with pytest.raises(type(error)), rec.wave("sig", 10):
        raise error
    (row,) = readings(rec)
    assert (row["phase"], row["oom"]) == ("forward", oom)


def test_a_failed_flush_warns_once_keeps_the_readings_and_retries_at_the_next_step(
    rec, capfd
) -> None:
    log = rec.directory / LOG_NAME
    run_wave(rec)
    rec.step()  # 2 readings in the log
    saved = os.dup(rec._writer.fd)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, rec._writer.fd)  # the disk is full: every write fails with ENOSPC
    os.close(full)
    run_wave(rec)
    rec.step()  # 2 readings cannot be written: one warning
    run_wave(rec)
    rec.step()  # 4 now: still failing, no second warning
    err = capfd.readouterr().err
    assert err.count("could not write") == 1
    assert f"could not write 2 readings to {rec._writer.path}: [Errno 28] No space left" in err
    os.dup2(saved, rec._writer.fd)  # room again
    os.close(saved)
    run_wave(rec)  # not flushed at this reading: at the next step
    assert read_log(log).readings == 2
    rec.step()
    assert read_log(log).readings == 8
    assert capfd.readouterr().err == (
        f"warmfit: the readings are being written to {rec._writer.path} again.\n"
    )
    assert [r["step"] for r in readings(rec)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_pricer_whose_price_overflows_int64_leaves_the_wave_unrecorded(tmp_path: Path) -> None:
    from warmfit.errors import EstimateOverflowError
    from warmfit.recorder import RecorderWarning

    class Overflowing:
        def price(self, *args: Any, **kwargs: Any) -> int:
            raise EstimateOverflowError("above 2**63 - 1 bytes")

        def observe_row(self, row: dict[str, Any]) -> None:
            raise AssertionError("a wave left unrecorded is not observed")

    rec = Recorder(tmp_path, run="t", device="cpu", pricer=Overflowing())
    price_overflows = "the pricer's price is above 2\\*\\*63 - 1 bytes"
    with pytest.warns(RecorderWarning, match=price_overflows), rec.wave("sig", 10) as wave:
        wave.forward_done()
    assert (rec.readings, rec.skipped_waves, rec.close()) == (0, 1, None)


def test_close_interrupted_by_ctrl_c_is_closed_all_the_same(rec) -> None:
    run_wave(rec)

    def interrupted(rows: list) -> list:
        raise KeyboardInterrupt

    rec._writer.append = interrupted
    with pytest.raises(KeyboardInterrupt):
        rec.close()
    assert rec._closed
    assert rec._writer.fd == -1  # the log let go: 'warmfit recover' may take it
    assert rec.close() is None  # a second close() does nothing, raises nothing
    assert read_log(rec.directory / LOG_NAME).readings == 0  # the log stays for recover


WAVE_COUNTS = ["packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes",
               "estimate_bytes", "padded_tokens", "sum_sq_tokens"]  # fmt: skip


@pytest.mark.parametrize("name", WAVE_COUNTS)
@pytest.mark.parametrize("enabled", [True, False])
def test_each_count_given_as_a_float_is_refused_naming_it(
    tmp_path: Path, name: str, enabled: bool
) -> None:
    rec = Recorder(tmp_path / "out", run="t", device="cpu", enabled=enabled)
    try:
        with pytest.raises(UsageError, match=rf"^wave\(\): {name}"):
            rec.wave("sig", **{"packed_tokens": 10, name: 12.0})
    finally:
        rec.close()


def test_each_count_given_as_an_integer_tensor_is_recorded_as_its_int(rec) -> None:
    values = {"packed_tokens": 10, "logical_tokens": 30, "output_bytes": 400,
              "static_floor_bytes": 5_000, "estimate_bytes": 60_000, "padded_tokens": 16,
              "sum_sq_tokens": 340}  # fmt: skip
    with rec.wave("sig", **{k: torch.tensor(v) for k, v in values.items()}) as wave:
        wave.forward_done()
    for row in readings(rec):
        assert {k: row[k] for k in values} == values
        assert all(type(row[k]) is int for k in values)


def test_values_at_the_edge_of_what_can_be_recorded_are_recorded(rec) -> None:
    # a floor of 0, a price of 0, no output, as many packed as logical tokens, a batch
    # without padding, and one sequence of one token: each recordable, each kept exactly
    edges = {"packed_tokens": 1, "logical_tokens": 1, "output_bytes": 0,
             "static_floor_bytes": 0, "estimate_bytes": 0, "padded_tokens": 1,
             "sum_sq_tokens": 1}  # fmt: skip
    with rec.wave("sig", **edges) as wave:
        wave.forward_done()
    assert rec.skipped_waves == 0
    rows = readings(rec)
    assert [row["phase"] for row in rows] == ["forward", "caller"]
    for row in rows:
        assert {k: row[k] for k in edges} == edges


def test_a_wave_left_while_a_later_one_is_open_leaves_that_one_open(tmp_path: Path) -> None:
    # waves interleaved by hand (two generators, say): a is left while b is open, then c
    # runs inside b; c's reset of the counter must still make b's reading not whole
    rec = Recorder(tmp_path, run="t", meter=_ScriptedMeter(), flush_interval_s=3600)
    a, b = rec.wave("a", 10), rec.wave("b", 10)
    a.__enter__()
    a.forward_done()
    b.__enter__()
    b.forward_done()
    a.__exit__(None, None, None)
    with rec.wave("c", 10) as c:
        c.forward_done()
    b.__exit__(None, None, None)
    rec.close()
    got = [
        (r["signature"], r["phase"], r["whole"]) for r in read_trace([rec.trace_path]).to_dicts()
    ]
    assert got == [
        ("a", "forward", False),
        ("b", "forward", False),
        ("a", "caller", False),  # b was entered inside it
        ("c", "forward", False),
        ("c", "caller", True),
        ("b", "caller", False),  # c was entered inside it
    ]


class _Unsaid:
    """reserved_peak_bytes() without has_reserved = True: the protocol asks for both."""

    name, device_name = "test.unsaid", "a meter without has_reserved (tests)"

    def allocated_bytes(self) -> int:
        return 0

    def peak_bytes(self) -> int:
        return 0

    def reset_peak(self) -> None:
        pass

    def reserved_peak_bytes(self) -> int:
        return 7

    def close(self) -> None:
        pass


def test_a_meter_that_does_not_say_has_reserved_gets_no_reserved_column(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, run="t", meter=_Unsaid(), flush_interval_s=3600)
    with rec, rec.wave("sig", 10) as wave:
        wave.forward_done()
    assert "reserved_peak_bytes" not in pq.read_schema(rec.trace_path).names


class _Observer:
    """A pricer with no price that keeps every reading it is told (WavePricer)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def price(self, *args: Any, **kwargs: Any) -> None:
        return None

    def observe_row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


class _ClosedOnce(_ScriptedMeter):
    """A scripted meter that counts its close() calls."""

    closes = 0

    def close(self) -> None:
        self.closes += 1


def _reading(**values: Any) -> dict[str, Any]:
    """A reading as a meter-only recorder hands it over: run "", rank 0, a flat wave of
    10 tokens, nothing else given; ``values`` the rest."""
    return {
        "run": "", "rank": 0, "kind": "flat", "packed_tokens": 10, "logical_tokens": 10,
        "output_bytes": 0, "static_floor_bytes": None, "oom": False, "estimate_bytes": None,
        "padded_tokens": None, "sum_sq_tokens": None, **values,
    }  # fmt: skip


def test_a_meter_only_recorder_hands_its_pricer_an_enabled_recorders_readings() -> None:
    """Recorder.meter_only (a Pricer's waves outside a recording) takes the readings an
    enabled recorder takes and hands each to the pricer, as the log would hold it: run
    "" and rank 0, seq, step and wave from 0, and the reserved pool's peak where the
    meter has one. Wave "a": 100 bytes allocated, a forward peak of 900 and a reserved
    peak of 5,000, a whole caller; a step; wave "b" (no forward_done()) over a baseline
    of 100: a caller reading of peak 100, not whole, the pool reset to 0."""
    meter, pricer = _ClosedOnce(), _Observer()
    rec = Recorder.meter_only(pricer, meter=meter)
    assert rec.current_step == 0
    with rec.wave("a", 10) as wave:
        meter.allocated, meter.peak, meter.reserved = 100, 900, 5_000
        wave.forward_done()
    rec.step()
    with rec.wave("b", 10):
        pass
    a = {"step": 0, "wave": 0, "signature": "a", "baseline_bytes": 0, "peak_bytes": 900}
    b = {"step": 1, "wave": 1, "signature": "b", "baseline_bytes": 100, "peak_bytes": 100}
    assert pricer.rows == [
        _reading(seq=0, **a, phase="forward", whole=False, reserved_peak_bytes=5_000),
        _reading(seq=1, **a, phase="caller", whole=True, reserved_peak_bytes=5_000),
        _reading(seq=2, **b, phase="caller", whole=False, reserved_peak_bytes=0),
    ]
    assert rec.close() is None and rec.trace_path is None and meter.closes == 1
    assert rec.close() is None and meter.closes == 1  # again: nothing to do


def test_meter_only_hands_no_reserved_peak_from_a_meter_that_does_not_say_so() -> None:
    pricer = _Observer()
    rec = Recorder.meter_only(pricer, meter=_Unsaid())
    with rec.wave("sig", 10) as wave:
        wave.forward_done()
    base = {"step": 0, "wave": 0, "signature": "sig", "baseline_bytes": 0, "peak_bytes": 0}
    assert pricer.rows == [
        _reading(seq=0, **base, phase="forward", whole=False),
        _reading(seq=1, **base, phase="caller", whole=True),
    ]


def test_a_recorder_dropped_unclosed_leaves_its_flush_thread_and_exit_hook_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorder the trainer drops without close(): once it is collected, its flush
    thread ends at its next tick without an exception, and the exit hook finds nothing
    to close and says nothing."""
    import gc
    import threading

    from warmfit.recorder.recorder import _close_at_exit

    errors: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    rec = Recorder(tmp_path, run="t", meter=_ScriptedMeter(), flush_interval_s=0.01)
    thread, ref = rec._flusher, weakref.ref(rec)
    del rec
    gc.collect()
    assert ref() is None
    thread.join()
    assert errors == []
    _close_at_exit(ref)
    assert capsys.readouterr().err == ""


class _Priced(_Observer):
    """A pricer whose every price is ``price``, keeping the readings it is told."""

    def __init__(self, price: int) -> None:
        super().__init__()
        self.value = price

    def price(self, *args: Any, **kwargs: Any) -> int:
        return self.value


@pytest.mark.parametrize("price", [0, 2**63 - 1])
def test_a_pricers_price_of_0_or_int64s_largest_is_recorded(price: int) -> None:
    """The edges of a price the trace holds: 0 bytes (not negative) and 2**63 - 1 (not
    above int64) are recorded on both readings, no wave skipped, no warning."""
    import warnings

    from warmfit.recorder import RecorderWarning

    pricer = _Priced(price)
    rec = Recorder.meter_only(pricer, meter=_ScriptedMeter())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecorderWarning)
        with rec.wave("sig", 10) as wave:
            wave.forward_done()
    assert [r["estimate_bytes"] for r in pricer.rows] == [price, price]
    assert rec.skipped_waves == 0


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"packed_tokens": 1, "output_bytes": -1}, "output_bytes=-1 is negative"),
        (
            {"packed_tokens": 10, "static_floor_bytes": 0, "estimate_bytes": -1},
            "estimate_bytes=-1 is negative",
        ),
    ],
)
def test_a_skipped_wave_names_the_argument_at_fault_not_one_at_its_edge(
    arguments: dict[str, int], named: str
) -> None:
    """One token (the fewest recordable) and a floor of 0 bytes are fine: the warning
    names the negative byte size or price, and counts the wave under it."""
    from warmfit.recorder import RecorderWarning

    rec = Recorder.meter_only(_Observer(), meter=_ScriptedMeter())
    packed = arguments.pop("packed_tokens")
    with pytest.warns(RecorderWarning, match=re.escape(named)), rec.wave("s", packed, **arguments):
        pass
    assert rec._skipped == {named.split("=")[0]: 1}


def test_a_recorder_left_open_is_closed_at_exit_and_the_process_ends(tmp_path: Path) -> None:
    """A trainer that never calls close(): its process still ends (the flush thread does
    not keep it alive: a daemon thread) and the exit hook compacts the log into the trace."""
    import threading

    before = set(threading.enumerate())
    here = Recorder(tmp_path / "here", run="t", meter=_ScriptedMeter(), flush_interval_s=3600)
    try:
        (flusher,) = set(threading.enumerate()) - before  # the recorder's flush thread
        assert flusher.daemon
    finally:
        here.close()
    code = textwrap.dedent(
        f"""
        from warmfit.recorder import Recorder
        rec = Recorder({str(tmp_path)!r}, run="t", device="cpu", flush_interval_s=3600)
        with rec.wave("sig", 10) as wave:
            wave.forward_done()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert read_trace([tmp_path / "run=t"]).height == 2


def test_forward_done_twice_is_refused_even_after_a_forward_peak_of_0_bytes() -> None:
    rec = Recorder.meter_only(_Observer(), meter=_ScriptedMeter())  # every reading 0 bytes
    with rec.wave("s", 10) as wave:
        wave.forward_done()
        with pytest.raises(UsageError, match="forward_done\\(\\) called twice in wave 0"):
            wave.forward_done()


def test_close_returns_what_compaction_did_and_the_same_again(tmp_path: Path) -> None:
    """close(): the Compaction (2 readings in the trace, no skipped wave named in its
    metadata); a second close() does nothing and returns the same."""
    rec = Recorder(tmp_path, run="t", meter=_ScriptedMeter(), flush_interval_s=3600)
    with rec.wave("s", 10) as wave:
        wave.forward_done()
    done = rec.close()
    assert done is not None and done.readings == 2 and done.trace == rec.trace_path
    assert b"warmfit.skipped_waves" not in (pq.read_schema(done.trace).metadata or {})
    assert rec.close() is done
