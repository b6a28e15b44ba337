"""traces/hf-qwen3moe-cpu: the Hugging Face Trainer recording that ships (issue 15)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from warmfit.format.trace import read_trace

TRACE = Path(__file__).resolve().parent.parent / "traces" / "hf-qwen3moe-cpu"


def test_every_signature_has_whole_readings_and_every_wave_two_readings():
    rows = read_trace([TRACE])
    assert set(rows["signature"]) == {"train/short", "train/long"}
    callers = rows.filter(pl.col("phase") == "caller")
    assert callers.height == rows.height // 2 == 60
    assert callers["whole"].all()
    assert not rows.filter(pl.col("phase") == "forward")["whole"].any()
    # two micro-batches of gradient accumulation per optimizer step
    per_step = callers.group_by("step").len()
    assert per_step["len"].to_list() == [2] * 30
    assert (rows["logical_tokens"] == rows["packed_tokens"]).all()
    assert not rows["oom"].any()


def test_the_recording_says_what_recorded_it():
    import pyarrow.parquet as pq

    (path,) = TRACE.rglob("*.parquet")
    meta = {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}
    assert meta["warmfit.meter"] == "warmfit.cpu-storages"
    assert meta["warmfit.torch_version"].startswith("2.")
