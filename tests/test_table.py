"""Replay's and sweep's outputs for people and machines (warmfit/report/table.py), on
summary frames written here with their figures spelled out."""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests.whole_waves import whole_wave
from warmfit.format.trace import readings_frame
from warmfit.replay import replay
from warmfit.report.sweep import SweepResult
from warmfit.report.table import (
    overall,
    render,
    render_sweep,
    to_csv,
    to_json,
    to_markdown,
    to_table,
    under_peak_warnings,
)

#: A summary's columns without a budget (SPEC §5), in replay's order.
COLUMNS = [
    "run", "policy", "priced_waves", "median_over_estimate", "min_over_estimate",
    "max_over_estimate", "under_peak", "set_by_profile", "set_by_floor", "oom_waves",
    "median_excess_bytes", "priced_beyond", "under_peak_beyond",
]  # fmt: skip


def summary(*rows: tuple[object, ...], by_signature: bool = False) -> pl.DataFrame:
    """One result per row: run (and signature), policy, priced waves, median, min, max,
    under, set by profile, set by floor, oom, median excess, priced beyond, under beyond."""
    columns = COLUMNS[:1] + ["signature"] * by_signature + COLUMNS[1:]
    return pl.DataFrame([list(r) for r in rows], schema=columns, orient="row")


A = ("a", "max-merge", 4, 0.25, 0.125, 0.5, 1, 3, 1, 0, 1000, 2, 1)
B = ("b", "max-merge", 6, 0.5, -0.25, 1.0, 2, 6, 0, 1, 2000, 3, 0)


def test_json_is_the_schema_the_factor_and_one_result_per_row() -> None:
    document = json.loads(to_json(summary(A), 1.25))
    assert document == {
        "schema": "warmfit.replay/1",
        "safety_factor": 1.25,
        "results": [dict(zip(COLUMNS, A, strict=True))],
    }


def test_csv_is_a_header_and_one_line_per_result_with_nulls_empty() -> None:
    frame = summary(A, B).with_columns(
        pl.when(pl.col("run") == "b").then(None).otherwise(pl.col("median_over_estimate"))
        .alias("median_over_estimate")
    )  # fmt: skip
    assert to_csv(frame).splitlines() == [
        ",".join(COLUMNS),
        "a,max-merge,4,0.25,0.125,0.5,1,3,1,0,1000,2,1",
        "b,max-merge,6,,-0.25,1.0,2,6,0,1,2000,3,0",
    ]


def test_the_results_together_by_signature_name_all_results_and_a_null_signature() -> None:
    frame = summary(("r", "x", *A[1:]), ("r", "y", *B[1:]), by_signature=True)
    together = overall(frame)
    assert together is not None
    assert together.columns == ["run", "signature", *COLUMNS[1:3], "median_over_estimate",
                                "min_over_estimate", "under_peak", "priced_beyond",
                                "under_peak_beyond"]  # fmt: skip
    # waves 4 + 6; the median of the medians 0.25 and 0.5; the least minimum; sums
    assert together.rows() == [("all 2 results", None, "max-merge", 10, 0.375, -0.25, 3, 5, 1)]
    assert overall(summary(A)) is None


def test_markdown_is_the_pr991_table_with_the_results_together_last() -> None:
    assert to_markdown(summary(A, B), ["max-merge"]).splitlines() == [
        "| run | max-merge median (min) | waves under their peak | under beyond the seen range |",
        "|---|---|---|---|",
        "| a | +25% (+12%) | 1 of 4 | 1 of 2 |",
        "| b | +50% (-25%) | 2 of 6 | 0 of 3 |",
        "| **all 2 runs** | +38% (-25%) | 3 of 10 | 1 of 5 |",
        "",
        "All 2 runs: the median of their medians (the least of their minima); waves counted "
        "over all of them.",
    ]


def test_markdown_keeps_the_results_in_the_summarys_order() -> None:
    runs = [f"r{i:02d}" for i in range(40, 0, -1)]
    frame = summary(*[(run, *A[1:]) for run in runs])
    lines = to_markdown(frame, ["max-merge"]).splitlines()[2 : 2 + len(runs)]
    assert [line.split(" | ")[0].removeprefix("| ") for line in lines] == runs


def test_markdown_gives_one_count_per_policy_where_they_differ_and_a_dash_for_none() -> None:
    none = ("a", "warm-fit", 4, None, None, None, 0, 4, 0, 0, None, 2, 0)
    assert to_markdown(summary(A, none), ["max-merge", "warm-fit"]).splitlines()[2] == (
        "| a | +25% (+12%) | — | max-merge 1 of 4, warm-fit 0 of 4 "
        "| max-merge 1 of 2, warm-fit 0 of 2 |"
    )


def _budget(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(
        budget_bytes=pl.lit(5000), admitted=pl.lit(3), refused_fit=pl.lit(1),
        admitted_oom=pl.lit(0),
    )  # fmt: skip


def test_the_table_with_a_budget_adds_up_its_waves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert to_table(_budget(summary(A)), 1.1).splitlines() == [
        "run  policy     waves  median     max  under  beyond   excess  admitted  refused  fits  ooms",
        "─" * 92,
        "a    max-merge      4  +25.0%  +50.0%      1     1/2  1.00 KB         3        1     1     0",
        "over-estimate = estimate / actual - 1 (safety factor 1.1); under = waves priced below their",
        "peak; beyond = of the waves priced beyond every size their profile had seen, those under",
        "their peak / all; excess = median estimate - actual; with a budget of 5.00 KB: admitted =",
        "estimate within it, refused = the others, fits = refused although the wave fits, ooms =",
        "admitted although it did not; waves that ran out of memory are not in the figures",
    ]  # fmt: skip
    assert to_markdown(_budget(summary(A)), ["max-merge"]).endswith(
        "\n\nThe budget's counts are in --format table, csv and json.\n"
    )


def test_the_table_of_several_runs_names_each_once_and_the_results_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    warm = ("b", "warm-fit", 6, 0.5, -0.25, 1.0, 2, 6, 0, 1, 2000, 3, 0)
    lines = to_table(summary(A, B, warm), 1.1).splitlines()
    assert lines[:7] == [
        "run         policy     waves  median     min      max  under  beyond  set by  oom",
        "─" * 81,
        "a           max-merge      4  +25.0%  +12.5%   +50.0%      1     1/2     3/1    0",
        "b           max-merge      6  +50.0%  -25.0%  +100.0%      2     0/3     6/0    1",
        "            warm-fit       6  +50.0%  -25.0%  +100.0%      2     0/3     6/0    1",
        "",
        "all 2 runs  max-merge     10  +37.5%  -25.0%               3     1/5",
    ]  # fmt: skip
    assert lines[7] == "            warm-fit       6  +50.0%  -25.0%               2     0/3"
    caption = " ".join(lines[8:])
    assert caption.endswith(
        "all = the results taken together: waves summed, the median of their medians, the "
        "least of their minima"
    )


def test_a_table_wider_than_the_terminal_is_laid_out_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    long = "a-run-label-that-is-longer-than-forty-characters"
    lines = to_table(summary((long, *A[1:])), 1.1).splitlines()
    assert lines[2].startswith(long + "  max-merge      4  +25.0%")
    assert all(not line.endswith(" ") for line in lines)


def test_under_peak_warnings_say_the_safe_factor_or_why_there_is_none() -> None:
    recorded = ("a", "recorded", 4, 0.1, 0.1, 0.1, 2, 4, 0, 0, 10, 2, 1)
    warm = ("a", "warm-fit", 4, 0.1, 0.1, 0.1, 3, 4, 0, 0, 10, 2, 0)
    clean = ("a", "envelope", 4, 0.1, 0.1, 0.1, 0, 4, 0, 0, 10, 2, 0)
    frame = summary(A, B, recorded, warm, clean)
    assert under_peak_warnings(frame, {"max-merge": 1.23456789, "warm-fit": None}) == [
        "warning: max-merge put 3 waves under their peak, 1 of them beyond every size its "
        "profile had seen; the smallest safety factor that puts none under on these traces "
        "is 1.2346 (exactly 1.23456789).",
        "warning: recorded put 2 waves under their peak, 1 of them beyond every size its "
        "profile had seen; the trainer's own prices (the trace's estimate_bytes, which no "
        "safety factor scales) would have run out of memory there.",
        "warning: warm-fit put 3 waves under their peak, 0 of them beyond every size its "
        "profile had seen; no safety factor covers them (a wave was priced at 0 bytes).",
    ]


SWEEP = SweepResult(
    results=[
        dict(run="a", policy="max-merge", safe_factor=1.2345678,
             median_over_estimate_at_safe=0.25, under_peak_at_1=3),
        dict(run="a", policy="warm-fit", safe_factor=None, median_over_estimate_at_safe=None,
             under_peak_at_1=0),
        dict(run="b|c", policy="warm-fit", safe_factor=1.0, median_over_estimate_at_safe=0.0,
             under_peak_at_1=0),
    ],
    grid=[1.0],
    by="run",
)  # fmt: skip


def test_the_sweep_in_markdown_and_as_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert render_sweep(SWEEP, "markdown").splitlines() == [
        "| run | policy | safe factor | median at safe | under at 1.0 |",
        "|---|---|---|---|---|",
        "| a | max-merge | 1.23457 | +25.0% | 3 |",
        "| a | warm-fit | — | — | 0 |",
        "| b\\|c | warm-fit | 1.00000 | +0.0% | 0 |",
    ]
    assert render_sweep(SWEEP, "table").splitlines()[:5] == [
        "run  policy     safe factor  median at safe  under at 1.0",
        "─" * 57,
        "a    max-merge      1.23457          +25.0%             3",
        "     warm-fit             —               —             0",
        "b|c  warm-fit       1.00000           +0.0%             0",
    ]
    document = json.loads(render_sweep(SWEEP, "json"))
    assert document == {"schema": "warmfit.sweep/1", "results": SWEEP.results}
    assert render_sweep(SWEEP, "csv").splitlines()[1] == "a,max-merge,1.2345678,0.25,3"


def test_by_signature_the_results_together_leave_the_signature_cell_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    frame = summary(("r", "x", *A[1:]), ("r", "y", *B[1:]), by_signature=True)
    lines = to_markdown(frame, ["max-merge"]).splitlines()
    assert lines[0].startswith("| run | signature | max-merge median (min) |")
    assert lines[2:5] == [
        "| r | x | +25% (+12%) | 1 of 4 | 1 of 2 |",
        "| r | y | +50% (-25%) | 2 of 6 | 0 of 3 |",
        "| **all 2 results** |  | +38% (-25%) | 3 of 10 | 1 of 5 |",
    ]
    assert to_table(frame, 1.1).splitlines()[5] == (
        "all 2 results             max-merge     10  +37.5%  -25.0%               3     1/5"
    )


def test_the_table_across_permute_orders_and_with_the_recorded_prices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    recorded = ("a", "recorded", 4, 0.1, 0.1, 0.2, 0, 4, 0, 0, 10, 2, 0)
    frame = summary(A, recorded).with_columns(
        permutations=pl.lit(20),
        under_peak_mean=pl.Series([1.75, None]),
        under_peak_worst=pl.Series([3, None]),
        median_over_estimate_median=pl.Series([0.2, None]),
    )
    lines = to_table(frame, 1.1).splitlines()
    assert lines[0].endswith("set by  oom  orders under  orders median")
    assert lines[2].endswith("3/1    0         1.8/3         +20.0%")
    assert lines[3].endswith("4/0    0             —              —")
    caption = " ".join(lines[4:])
    assert "; recorded = the prices the trainer itself used (the trace's estimate_bytes), " in (
        caption
    )
    assert "; across 20 random orders of each run's waves: orders under = waves" in caption
    assert "all = the results" not in caption
    assert to_markdown(frame, ["max-merge", "recorded"]).endswith(
        "\n\nThe figures across --permute orders are in --format table, csv and json.\n"
    )
    empty = to_table(frame.clear(), 1.1)
    assert "orders under  orders median" in empty and "random orders" not in empty


def test_a_budget_that_admits_nothing_refuses_every_priced_wave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    frame = _budget(summary(A)).with_columns(admitted=pl.lit(0), refused_fit=pl.lit(0))
    # waves 4 = admitted 0 + refused 4
    assert to_table(frame, 1.1).splitlines()[2].endswith("1.00 KB         0        4     0     0")


def test_one_wave_under_its_peak_is_warned_of() -> None:
    frame = summary(("a", "envelope", 4, 0.1, 0.1, 0.1, 1, 4, 0, 0, 10, 2, 0))
    assert under_peak_warnings(frame, {"envelope": 1.5}) == [
        "warning: envelope put 1 wave under its peak, 0 of them beyond every size its profile "
        "had seen; the smallest safety factor that puts none under on these traces is 1.5000 "
        "(exactly 1.5)."
    ]


def test_the_results_together_keep_the_policies_in_the_summarys_order() -> None:
    policies = [f"p{i:02d}" for i in range(30, 0, -1)]
    frame = summary(*[(run, p, *A[2:]) for run in ("a", "b") for p in policies])
    together = overall(frame)
    assert together is not None and together.get_column("policy").to_list() == policies


def test_a_replays_render_is_its_summary_in_each_format() -> None:
    readings = readings_frame(
        [whole_wave(i, 1000 * (i + 1), tokens=100 * (i + 1)) for i in range(4)]
    )
    result = replay(readings, ["max-merge"], 1.25)
    assert render(result, "csv") == to_csv(result.summary)
    assert json.loads(render(result, "json")) == json.loads(to_json(result.summary, 1.25))
    assert render(result, "markdown") == to_markdown(result.summary, ["max-merge"])
