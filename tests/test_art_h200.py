"""traces/art-h200: ART's real H200 measurements arranged into waves, checked
number by number against the CSV it is built from."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import polars as pl
from typer.testing import CliRunner

from warmfit.art_h200 import art_h200_readings, run_label, write_art_h200
from warmfit.cli import app
from warmfit.replay import replay
from warmfit.trace import read_trace

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "traces" / "art-h200"
SOURCE = TRACE / "source" / "recompute_memory_final.csv"


def source_rows() -> list[dict[str, str]]:
    with SOURCE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_stored_trace_is_what_the_converter_writes(tmp_path: Path) -> None:
    written = write_art_h200(SOURCE, tmp_path)
    assert written.read_bytes() == (TRACE / written.name).read_bytes()


def test_the_source_and_its_notice_travel_with_the_trace() -> None:
    rows = source_rows()
    assert len(rows) == 45 and {r["phase"] for r in rows} == {"final"}
    notice = " ".join((TRACE / "source" / "NOTICE.md").read_text().split())
    assert "Apache License 2.0" in notice and "OpenPipe" in notice
    assert "Apache License" in (TRACE / "source" / "LICENSE-APACHE-2.0").read_text()


def test_one_run_per_configuration_that_ran() -> None:
    rows = source_rows()
    ran = {run_label(r) for r in rows if r["refused_rank_samples"] == "0"}
    refused = {run_label(r) for r in rows} - ran
    readings = art_h200_readings(SOURCE)
    assert set(readings.get_column("run").unique()) == ran
    assert len(ran) == 11
    # the 27B TP4 memory-minimal configuration's only shape was refused by admission
    assert refused == {"qwen3.8-27b-tp4-compiled-core_attn-minimal"}
    # each shape that ran gives two waves of two readings
    measured = sum(r["refused_rank_samples"] == "0" for r in rows)
    assert readings.height == measured * 4


def test_readings_carry_the_csv_numbers() -> None:
    # Qwen3-1.7B, TP2, compiled, core_attn; its two shapes, smallest first:
    # 4096+4096: 6964 packed / 8192 logical; first forward 9,483,472,896, repeat
    # forward 9,414,886,400, forward peak (max of the two) 9,483,472,896,
    # forward+backward 9,604,248,576 (rise over the forward peak: 120,775,680).
    run = art_h200_readings(SOURCE).filter(pl.col("run") == "qwen3-1.7b-tp2-compiled-core_attn")
    assert run.get_column("packed_tokens").to_list() == [6964] * 4 + [13928] * 4
    first_shape = run.head(4).select("wave", "phase", "whole", "peak_bytes").rows()
    assert first_shape == [
        (0, "forward", False, 9_483_472_896),  # cold forward
        (0, "caller", True, 9_604_248_576),  # cold forward+backward
        (1, "forward", False, 9_414_886_400),  # warm forward
        (1, "caller", True, 9_414_886_400 + 120_775_680),  # warm forward + the same rise
    ]
    assert run.get_column("seq").to_list() == list(range(8))
    assert set(run.get_column("baseline_bytes")) == {0}
    assert set(run.get_column("art_estimate_bytes").head(4)) == {13_069_429_964}


def test_the_warm_caller_peak_lies_between_measured_bounds() -> None:
    readings = art_h200_readings(SOURCE)
    warm = readings.filter((pl.col("wave") % 2 == 1) & (pl.col("phase") == "caller"))
    for row in source_rows():
        if row["refused_rank_samples"] != "0":
            continue
        peak = warm.filter(
            (pl.col("run") == run_label(row))
            & (pl.col("packed_tokens") == int(row["packed_tokens"]))
        ).get_column("peak_bytes")
        assert peak.len() == 1
        assert int(row["repeat_forward_peak_max_bytes"]) <= peak[0]
        assert peak[0] <= int(row["forward_backward_peak_max_bytes"])


def test_replay_prints_one_row_per_configuration_and_policy() -> None:
    result = CliRunner().invoke(app, ["replay", str(TRACE), "--format", "json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.output)["results"]
    assert len(results) == 11 * 2
    # no wave of a real H200 run is priced under its peak by either policy
    assert all(r["under_peak"] == 0 for r in results)


def test_warm_fit_never_prices_above_max_merge_on_real_measurements() -> None:
    per_wave = replay(read_trace([TRACE])).per_wave
    wide = per_wave.pivot(on="policy", index=["run", "wave"], values="estimate_bytes")
    priced = wide.drop_nulls()
    # 44 shapes ran, two waves each; the first wave of each of the 11 runs is unpriced
    assert priced.height == 44 * 2 - 11
    assert (priced.get_column("warm-fit") <= priced.get_column("max-merge")).all()
    # ... and strictly below it on most waves: the PR's effect on real GPU memory
    assert (priced.get_column("warm-fit") < priced.get_column("max-merge")).sum() == 66
