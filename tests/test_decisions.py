"""The decision figures (SPEC §7): excess bytes, per-signature results, a memory
budget, and the safety-factor sweep, by worked examples and on stored traces."""

from __future__ import annotations

import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from tests.command_line import warmfit_stdout
from warmfit.cli import app
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.replay import BUDGET_COLUMNS, IN_FIGURES, replay
from warmfit.report.plot import pareto_points, write_pareto
from warmfit.report.sweep import parse_grid, safe_factor, sweep

REPO = Path(__file__).resolve().parent.parent
TRACES = REPO / "traces"
STORED = sorted(p for p in TRACES.iterdir() if p.is_dir())
os.environ.setdefault("_TYPER_FORCE_DISABLE_TERMINAL", "1")


# One signature "s", one rank, baseline 0, no outputs, no floor; whole caller readings.
#  wave 0: n=100, peak 30_000 (the seed, 300 B/token): unpriced
#  wave 1: n=100, peak 20_000: max-merge 300 * 100 * 1.1 = 33_000, excess 13_000
#  wave 2: n=200, peak 50_000: max-merge 300 * 200 * 1.1 = 66_000, excess 16_000
#  wave 3: n=100, peak 45_000: max-merge 300 * 100 * 1.1 = 33_000, excess -12_000
#  wave 4: n=100, peak 31_000 (rate_max now 450): 450 * 100 * 1.1 = 49_500, excess 18_500
WAVES = [(100, 30_000), (100, 20_000), (200, 50_000), (100, 45_000), (100, 31_000)]


def worked() -> pl.DataFrame:
    return readings_frame(
        [
            dict(
                seq=i,
                wave=i,
                signature="s",
                packed_tokens=n,
                logical_tokens=n,
                peak_bytes=p,
                whole=True,
            )
            for i, (n, p) in enumerate(WAVES)
        ]
    )


def test_median_excess_bytes_truncates_the_mean_of_the_two_middle_values() -> None:
    summary = replay(worked(), ["max-merge"]).summary.row(0, named=True)
    # excesses sorted: -12_000, 13_000, 16_000, 18_500 -> (13_000 + 16_000) / 2 = 14_500
    assert summary["median_excess_bytes"] == 14_500
    # without wave 4: -12_000, 13_000, 16_000 -> 13_000
    odd = replay(worked().filter(pl.col("wave") < 4), ["max-merge"]).summary.row(0, named=True)
    assert odd["median_excess_bytes"] == 13_000
    # two middle values -12_000 and 13_000 mean 500; -12_000 and 1_000 would mean -5_500:
    # an odd negative sum truncates toward zero, as int() does
    minus = worked().with_columns(
        pl.when(pl.col("wave") == 2)
        .then(10_000)
        .otherwise(pl.col("peak_bytes"))
        .alias("peak_bytes")
    )  # wave 2 now over-priced by 66_000 - 10_000 = 56_000; sorted -12_000, 13_000, 18_500, 56_000
    assert replay(minus, ["max-merge"]).summary.row(0, named=True)["median_excess_bytes"] == 15_750


def test_a_budget_counts_admitted_refused_and_oom_waves() -> None:
    # budget 40_000: estimates 33_000 (w1), 66_000 (w2), 33_000 (w3), 49_500 (w4)
    result = replay(worked(), ["max-merge"], budget_bytes=40_000)
    row = result.summary.row(0, named=True)
    assert [row[c] for c in BUDGET_COLUMNS] == [40_000, 2, 1, 1]
    # w1 and w3 admitted; w3 ran 45_000 > 40_000: admitted although it did not fit.
    # w2 (50_000) and w4 (31_000) refused; w4 fits: refused although it fits.
    admitted = result.per_wave.get_column("admitted").to_list()
    assert admitted == [None, True, False, True, False]


def test_budget_counts_agree_with_the_per_wave_file(tmp_path: Path) -> None:
    out = tmp_path / "waves.parquet"
    doc = json.loads(
        warmfit_stdout(
            "replay",
            str(TRACES / "art-h200"),
            "-p",
            "warm-fit",
            "-p",
            "warm-affine",
            "--budget",
            "128.8GB",
            "-f",
            "json",
            "--per-wave",
            str(out),
        )
    )
    per_wave = pl.read_parquet(out).filter(IN_FIGURES)
    budget = 128_800_000_000
    for r in doc["results"]:
        assert r["budget_bytes"] == budget
        mine = per_wave.filter((pl.col("run") == r["run"]) & (pl.col("policy") == r["policy"]))
        fits = pl.col("actual_bytes") <= budget
        assert r["admitted"] == mine.get_column("admitted").sum()
        assert r["refused_fit"] == mine.filter(~pl.col("admitted") & fits).height
        assert r["admitted_oom"] == mine.filter(pl.col("admitted") & ~fits).height
    # The 27B TP4 eager 12288+12288 pair peaked at 113.8 GB: warm-fit refuses it, warm-affine
    # admits it.
    pair = per_wave.filter(
        (pl.col("run") == "qwen3.8-27b-tp4-eager-core_attn") & (pl.col("packed_tokens") == 20892)
    )
    assert dict(pair.group_by("policy").agg(pl.col("admitted").all()).iter_rows()) == {
        "warm-fit": False,
        "warm-affine": True,
    }


@pytest.mark.parametrize("trace", STORED, ids=[p.name for p in STORED])
def test_results_by_signature_add_up_to_the_runs(trace: Path) -> None:
    readings = read_trace([trace])
    by_run = replay(readings, by="run").summary
    by_signature = replay(readings, by="signature").summary
    assert by_signature.columns[:3] == ["run", "signature", "policy"]
    totals = by_signature.group_by("run", "policy").agg(
        pl.col("priced_waves", "under_peak", "set_by_profile", "set_by_floor", "oom_waves").sum()
    )
    joined = by_run.join(totals, on=["run", "policy"], suffix="_sum")
    assert joined.height == by_run.height
    for column in ("priced_waves", "under_peak", "set_by_profile", "set_by_floor", "oom_waves"):
        assert joined.get_column(column).to_list() == joined.get_column(f"{column}_sum").to_list()


def test_by_signature_in_json_gains_a_signature_field() -> None:
    doc = json.loads(
        warmfit_stdout("replay", str(TRACES / "cpu-demo"), "--by", "signature", "-f", "json")
    )
    assert {r["signature"] for r in doc["results"]} == {"score/d64-l2-v64", "train/d64-l2-v64"}
    assert list(doc["results"][0])[:3] == ["run", "signature", "policy"]


def test_safe_factor_is_the_smallest_double_that_covers_every_wave() -> None:
    # int(1000 * 1.1) = 1100 covers 1100; the double just below 1.1 gives 1099
    assert safe_factor(np.array([1000]), np.array([1100])) == 1.1
    assert int(1000 * np.nextafter(1.1, 0)) == 1099
    # the largest factor over the waves wins; a wave with nothing to scale has no factor
    assert safe_factor(np.array([1000, 10]), np.array([500, 30])) == 3.0
    assert safe_factor(np.array([1000, 0]), np.array([500, 30])) is None
    assert safe_factor(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) is None


@pytest.mark.parametrize("trace", STORED, ids=[p.name for p in STORED])
def test_the_safe_factor_is_exact_on_every_stored_trace(trace: Path) -> None:
    readings = read_trace([trace])
    policies = ["max-merge", "warm-fit", "warm-affine"]
    result = sweep(readings, policies)
    for r in result.results:
        safe = r["safe_factor"]
        assert isinstance(safe, float)
        at = replay(readings.filter(pl.col("run") == r["run"]), [str(r["policy"])], safe).summary
        below = replay(
            readings.filter(pl.col("run") == r["run"]),
            [str(r["policy"])],
            float(np.nextafter(safe, 0)),
        ).summary
        assert at.get_column("under_peak").item() == 0
        assert below.get_column("under_peak").item() >= 1
        assert at.get_column("median_over_estimate").item() == r["median_over_estimate_at_safe"]


def test_sweep_points_are_the_replay_figures_at_each_factor() -> None:
    readings = read_trace([TRACES / "pr991"])
    result = sweep(readings, ["warm-fit"], grid=[1.0, 1.05, 1.1])
    for r in result.results:
        for point in r["points"]:  # type: ignore[attr-defined]
            summary = replay(
                readings.filter(pl.col("run") == r["run"]), ["warm-fit"], point["safety_factor"]
            ).summary.row(0, named=True)
            assert point["under_peak"] == summary["under_peak"]
            assert point["median_over_estimate"] == summary["median_over_estimate"]


def test_sweep_json_follows_the_spec(tmp_path: Path) -> None:
    picture = tmp_path / "pareto.png"
    doc = json.loads(
        warmfit_stdout(
            "sweep",
            str(TRACES / "pr991"),
            "-f",
            "json",
            "--grid",
            "1.0:1.1:0.05",
            "--plot",
            str(picture),
        )
    )
    assert doc["schema"] == "warmfit.sweep/1"
    first = doc["results"][0]
    assert list(first) == [
        "run", "policy", "safe_factor", "median_over_estimate_at_safe", "under_peak_at_1", "points",
    ]  # fmt: skip
    assert [p["safety_factor"] for p in first["points"]] == [1.0, 1.05, 1.1]
    assert set(first["points"][0]) == {"safety_factor", "under_peak", "median_over_estimate"}
    assert picture.read_bytes().startswith(b"\x89PNG")


def test_pareto_data_has_every_point_and_the_safe_factor(tmp_path: Path) -> None:
    result = sweep(read_trace([TRACES / "pr991"]), ["max-merge", "warm-fit"], grid=[1.0, 1.1])
    data = pareto_points(result)
    # two runs, two policies, two grid points each, plus one safe point each
    assert data.height == 2 * 2 * 3
    safe = data.filter(pl.col("safe"))
    assert safe.get_column("under_peak").to_list() == [0, 0, 0, 0]
    written = write_pareto(result, tmp_path / "p.svg")
    assert written.read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("grid", "words"),
    [("1.0:1.6", "START:STOP:STEP"), ("1.0:0.9:0.01", "STOP must not"), ("0:1:0.1", "positive"),
     ("1:2:1e-9", "larger STEP")],
)  # fmt: skip
def test_a_bad_grid_is_a_usage_error(grid: str, words: str) -> None:
    result = CliRunner().invoke(app, ["sweep", str(TRACES / "pr991"), "--grid", grid])
    assert result.exit_code == 2 and words in result.output


def test_the_default_grid_covers_one_to_one_point_six() -> None:
    grid = parse_grid("1.0:1.6:0.01")
    assert len(grid) == 61 and grid[0] == 1.0 and grid[10] == 1.1 and grid[-1] == 1.6
    assert all(math.isclose(b - a, 0.01) for a, b in itertools.pairwise(grid))


def test_a_budget_that_is_not_a_size_is_a_usage_error(tmp_path: Path) -> None:
    trace = write_trace(worked(), tmp_path / "t.parquet")
    result = CliRunner().invoke(app, ["replay", str(trace), "--budget", "lots"])
    assert result.exit_code == 2 and "is not a size" in result.output
