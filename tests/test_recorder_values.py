"""What the recorder takes in: a value its trace cannot hold is refused at wave(),
never in the log, and one reading the log cannot hold never costs the others.

Issue 42: ``wave(estimate_bytes=2**63)`` was accepted; every later flush then
failed with ``Python int too large to convert to C long`` and the run's
readings were not in the trace. A recorder killed while creating its log left a
``.tmp`` that made ``recover`` say "already a trace" where there was none.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from warmfit.errors import UsageError  # noqa: E402
from warmfit.format.trace import read_trace  # noqa: E402
from warmfit.recorder import Recorder, RecorderWarning  # noqa: E402
from warmfit.recorder.log import LOG_NAME  # noqa: E402

pytestmark = pytest.mark.torch

TOO_LARGE = [2**63, 2**64]
ARGUMENTS = [
    "packed_tokens",
    "logical_tokens",
    "output_bytes",
    "static_floor_bytes",
    "estimate_bytes",
    "padded_tokens",
    "sum_sq_tokens",
]


def wave_arguments(name: str, value: int) -> dict[str, int]:
    arguments = {"packed_tokens": 10}
    if name == "packed_tokens":
        arguments["logical_tokens"] = value  # else the wave is skipped, not refused
    arguments[name] = value
    return arguments


def one_wave(recorder: Recorder, signature: str, **arguments) -> None:
    with recorder.wave(signature, **{"packed_tokens": 10, **arguments}) as wave:
        x = torch.empty(100)
        wave.forward_done()
        del x


@pytest.mark.parametrize("value", TOO_LARGE)
@pytest.mark.parametrize("name", ARGUMENTS)
@pytest.mark.parametrize("enabled", [True, False])
def test_a_value_beyond_int64_is_a_usage_error_at_wave_recording_or_not(
    tmp_path, name, value, enabled
):
    recorder = Recorder(
        tmp_path / "out" if enabled else None, run="t", device="cpu", enabled=enabled
    )
    try:
        with pytest.raises(UsageError, match=rf"wave\('s'\): {name}=.* above 2\*\*63 - 1"):
            recorder.wave("s", **wave_arguments(name, value))
    finally:
        recorder.close()


@pytest.mark.parametrize("value", TOO_LARGE)
@pytest.mark.parametrize("name", ["estimate_bytes", "padded_tokens", "sum_sq_tokens"])
def test_the_readings_before_and_after_a_refused_value_are_all_in_the_trace(tmp_path, name, value):
    recorder = Recorder(tmp_path / "out", run="t", device="cpu", flush_interval_s=3600)
    one_wave(recorder, "before")
    recorder.step()  # a flush between them, and one after
    with pytest.raises(UsageError):
        recorder.wave("bad", **wave_arguments(name, value))
    one_wave(recorder, "after", estimate_bytes=2**63 - 1, padded_tokens=10, sum_sq_tokens=100)
    recorder.step()
    one_wave(recorder, "last")
    recorder.close()
    rows = read_trace([recorder.trace_path]).to_dicts()
    assert [(r["signature"], r["phase"]) for r in rows] == [
        (s, p) for s in ("before", "after", "last") for p in ("forward", "caller")
    ]
    assert rows[2]["estimate_bytes"] == 2**63 - 1  # the largest value is kept exactly


def test_a_reading_the_log_cannot_hold_costs_no_other_reading(tmp_path, capfd):
    # A value set on the wave after wave() checked it (or a meter's absurd peak) still
    # never reaches a flush that would fail for the whole batch again and again.
    recorder = Recorder(tmp_path / "out", run="t", device="cpu", flush_interval_s=3600)
    one_wave(recorder, "before")
    with recorder.wave("bad", 10) as wave:
        wave.forward_done()
        wave.estimate_bytes = 2**64
    one_wave(recorder, "after")
    recorder.step()
    one_wave(recorder, "last")
    recorder.close()
    rows = read_trace([recorder.trace_path]).to_dicts()
    assert [(r["signature"], r["phase"]) for r in rows] == [
        ("before", "forward"),
        ("before", "caller"),
        ("bad", "forward"),  # taken before the bad value was set
        ("after", "forward"),
        ("after", "caller"),
        ("last", "forward"),
        ("last", "caller"),
    ]
    err = capfd.readouterr().err
    assert "1 readings could not be written" in err and "'bad' caller" in err


class HugePricer:
    def price(self, *args, **kwargs):
        return 2**63

    def observe_row(self, row) -> None:
        pass


def test_a_pricer_price_beyond_int64_names_the_pricer_and_the_wave_runs_unrecorded(tmp_path):
    """Recording never changes what the trainer does: a price the trace cannot hold
    (a user pricer's 2**63, as warmfit's Pricer's own overflow) skips the wave's
    recording with a warning naming the pricer; the wave itself runs."""
    recorder = Recorder(tmp_path / "out", run="t", device="cpu", pricer=HugePricer())
    ran = False
    try:
        warned = pytest.warns(RecorderWarning, match=r"HugePricer\.price\(\) returned .* above")
        with warned, recorder.wave("s", 10):
            ran = True
    finally:
        recorder.close()
    assert ran and recorder.skipped_waves == 1
    # unrecorded: no reading (not one without its price), so no trace
    assert recorder.readings == 0 and recorder.trace_path is None
    assert not list((tmp_path / "out").rglob("*.parquet"))


def test_a_recorder_killed_while_creating_its_log_leaves_nothing_recover_takes_for_a_trace(
    tmp_path,
):
    out = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from warmfit.recorder.log import LogWriter
        os.link = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # killed just here
        LogWriter(Path({str(out / "run=t" / "rank=0" / LOG_NAME)!r}), "t", 0, {{}})
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert list(out.rglob("*.tmp"))  # what the kill left
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", "recover", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "already a trace" not in done.stdout
    assert "holds no write-ahead logs" in done.stderr and "Traceback" not in done.stderr
    assert not list(out.rglob("*.tmp"))
