"""Replay semantics (SPEC §3) by worked examples with every number spelled out,
plus the PR #991 reconstruction's published figures."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.command_line import warmfit_json
from tests.whole_waves import policy_column, whole_wave, write_waves
from warmfit.errors import PolicyError, UsageError
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import MaxMerge
from warmfit.replay import PER_WAVE_SCHEMA, SUMMARY_COLUMNS, estimate_bytes, replay
from warmfit.replay.semantics import check_budget, first_recorded, unscaled_bytes
from warmfit.samples.synthetic import EP1, EP2, pr991_readings, write_pr991

REPO = Path(__file__).resolve().parent.parent


#: The PR's two policies, named: the worked examples give their figures alone.
PR_TWO = ["max-merge", "warm-fit"]


def run_replay(rows: list[dict[str, object]], **kwargs: object) -> pl.DataFrame:
    frame = readings_frame(rows).sort("run", "rank", "seq")
    kwargs.setdefault("policies", PR_TWO)
    return replay(frame, engine="scalar", **kwargs).per_wave  # type: ignore[arg-type]


def wave_rows(per_wave: pl.DataFrame, policy: str) -> list[dict[str, object]]:
    return per_wave.filter(pl.col("policy") == policy).to_dicts()


# One signature, one rank, three waves. o = 1_000 bytes on every wave, baseline 10_000.
#  wave 0: forward delta 10_000, caller (whole) delta 30_000; n=100, m=200
#  wave 1: forward delta 20_000, caller (whole) delta 50_000; n=200, m=300
#  wave 2: caller (whole) delta 90_000;                        n=400, m=400
WORKED = [
    dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=200, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=20_000, phase="forward"),
    dict(seq=1, wave=0, signature="s", packed_tokens=100, logical_tokens=200, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=40_000, phase="caller", whole=True),
    dict(seq=2, wave=1, signature="s", packed_tokens=200, logical_tokens=300, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=30_000, phase="forward"),
    dict(seq=3, wave=1, signature="s", packed_tokens=200, logical_tokens=300, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=60_000, phase="caller", whole=True),
    dict(seq=4, wave=2, signature="s", packed_tokens=400, logical_tokens=400, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=100_000, phase="caller", whole=True),
]  # fmt: skip


def test_worked_example_max_merge() -> None:
    rows = wave_rows(run_replay(WORKED), "max-merge")
    # wave 0: no profile and no floor -> unpriced; actual = max(10_000, 30_000)
    assert rows[0]["estimate_bytes"] is None and rows[0]["set_by"] is None
    assert rows[0]["actual_bytes"] == 30_000 and rows[0]["over_estimate"] is None
    # after wave 0: rate_max = (30_000 - 1_000) / 100 = 290; sharing_max = 200 / 100 = 2.0
    # wave 1: p = 290 * max(200, 300 / 2.0) = 58_000; estimate = int((1_000 + 58_000) * 1.1)
    assert rows[1]["estimate_bytes"] == 64_900 and rows[1]["set_by"] == "profile"
    assert rows[1]["actual_bytes"] == 50_000
    assert rows[1]["over_estimate"] == 64_900 / 50_000 - 1  # 0.298
    # wave 2: rate_max still 290 (wave 1 ran 245); p = 290 * max(400, 400 / 2.0) = 116_000
    assert rows[2]["estimate_bytes"] == 128_700  # int(117_000 * 1.1)
    assert rows[2]["over_estimate"] == 128_700 / 90_000 - 1  # 0.43


def test_worked_example_warm_fit() -> None:
    rows = wave_rows(run_replay(WORKED), "warm-fit")
    assert rows[0]["estimate_bytes"] is None
    # wave 0's caller reading is the seed; wave 1 is priced before any warm reading: as max-merge
    assert rows[1]["estimate_bytes"] == 64_900
    # wave 1 teaches: forward rate (20_000 - 1_000) / 200 = 95 (pending), caller rate
    # (50_000 - 1_000) / 200 = 245 -> warm_rate 245, warm_tokens 200, warm_sharing 1.5.
    # wave 2: min(116_000, 245 * max(200, 400, 400 / 1.5)) = 98_000; int(99_000 * 1.1)
    assert rows[2]["estimate_bytes"] == 108_900
    assert rows[2]["over_estimate"] == 108_900 / 90_000 - 1  # 0.21
    assert [r["under_peak"] for r in rows] == [None, False, False]


def test_worked_example_summary() -> None:
    result = replay(readings_frame(WORKED), PR_TWO, engine="scalar")
    mm, wf = result.summary.to_dicts()
    # two priced waves each; the median of two is their mean
    assert mm["priced_waves"] == 2
    assert (
        mm["median_over_estimate"] == (0.298 + 0.43) / 2
        or mm["median_over_estimate"] == ((64_900 / 50_000 - 1) + (128_700 / 90_000 - 1)) / 2
    )
    assert mm["min_over_estimate"] == 64_900 / 50_000 - 1
    assert mm["max_over_estimate"] == 128_700 / 90_000 - 1
    assert wf["median_over_estimate"] == ((64_900 / 50_000 - 1) + (108_900 / 90_000 - 1)) / 2
    assert (wf["under_peak"], wf["set_by_profile"], wf["set_by_floor"], wf["oom_waves"]) == (
        0,
        2,
        0,
        0,
    )


def test_floor_prices_a_wave_without_profile_and_sets_it_when_higher() -> None:
    rows = [
        dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=30_000, whole=True, static_floor_bytes=20_000),
        dict(seq=1, wave=1, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=25_000, whole=True, static_floor_bytes=40_000),
        dict(seq=2, wave=2, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=25_000, whole=True, static_floor_bytes=10_000),
    ]  # fmt: skip
    out = wave_rows(run_replay(rows), "max-merge")
    # wave 0: no profile, floor 20_000 -> int(20_000 * 1.1) = 22_000 < actual 30_000: under peak
    assert (out[0]["estimate_bytes"], out[0]["set_by"], out[0]["under_peak"]) == (
        22_000,
        "floor",
        True,
    )
    # wave 1: p = 300 * 100 = 30_000 < floor 40_000 -> int(40_000 * 1.1)
    assert (out[1]["estimate_bytes"], out[1]["set_by"]) == (44_000, "floor")
    # wave 2: p = 30_000 >= floor 10_000 -> the profile: int(30_000 * 1.1)
    assert (out[2]["estimate_bytes"], out[2]["set_by"]) == (33_000, "profile")


def test_peak_below_baseline_gives_delta_zero_and_no_figure() -> None:
    rows = [
        dict(seq=0, wave=0, signature="s", packed_tokens=10, logical_tokens=10,
             baseline_bytes=500, peak_bytes=100, static_floor_bytes=50),
    ]  # fmt: skip
    per_wave = run_replay(rows)
    assert per_wave["actual_bytes"].to_list() == [0, 0]
    assert per_wave["over_estimate"].to_list() == [None, None]
    summary = replay(readings_frame(rows), PR_TWO, engine="scalar").summary
    assert summary["priced_waves"].to_list() == [0, 0]
    assert summary["median_over_estimate"].to_list() == [None, None]


def test_oom_readings_are_priced_reported_and_never_learned() -> None:
    rows = [
        dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=10_000, whole=True),
        # wave 1 runs out of memory at 900 B/token: priced, reported, not learned
        dict(seq=1, wave=1, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=90_000, whole=True, oom=True),
        dict(seq=2, wave=2, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=10_000, whole=True),
    ]  # fmt: skip
    out = wave_rows(run_replay(rows), "max-merge")
    assert out[1]["oom"] is True and out[1]["estimate_bytes"] == 11_000
    # wave 2 is priced from 100 B/token, not 900
    assert out[2]["estimate_bytes"] == 11_000
    summary = replay(readings_frame(rows), engine="scalar").summary.to_dicts()[0]
    assert summary["oom_waves"] == 1 and summary["priced_waves"] == 1


def test_each_signature_and_each_rank_learns_its_own_profile() -> None:
    def wave(rank: int, seq: int, sig: str, rate: int) -> dict[str, object]:
        return dict(rank=rank, seq=seq, wave=seq, signature=sig, packed_tokens=100,
                    logical_tokens=100, peak_bytes=rate * 100, whole=True)  # fmt: skip

    rows = [
        wave(0, 0, "a", 500), wave(0, 1, "b", 100), wave(0, 2, "b", 100),
        wave(1, 0, "b", 300), wave(1, 1, "b", 300),
    ]  # fmt: skip
    out = wave_rows(run_replay(rows), "max-merge")
    by_key = {(r["rank"], r["wave"]): r["estimate_bytes"] for r in out}
    # rank 0, signature b: first b wave unpriced, second priced at 100 B/token (not a's 500)
    assert by_key[(0, 1)] is None and by_key[(0, 2)] == 11_000
    # rank 1 learns from its own waves: 300 B/token, nothing from rank 0
    assert by_key[(1, 0)] is None and by_key[(1, 1)] == 33_000


def test_nested_wave_is_priced_at_its_first_reading_between_the_outer_readings() -> None:
    # outer wave 0: forward (seq 0) ... inner wave 1 runs entirely inside its yield ...
    # outer caller (seq 3, not whole: the inner wave reset the counter)
    rows = [
        dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=100, peak_bytes=20_000, phase="forward"),
        dict(seq=1, wave=1, signature="s", packed_tokens=50, logical_tokens=50, peak_bytes=5_000, phase="forward"),
        dict(seq=2, wave=1, signature="s", packed_tokens=50, logical_tokens=50, peak_bytes=8_000, whole=True),
        dict(seq=3, wave=0, signature="s", packed_tokens=100, logical_tokens=100, peak_bytes=9_000),
    ]  # fmt: skip
    out = wave_rows(run_replay(rows), "max-merge")
    # wave 1 is priced after the outer forward: 200 B/token * 50 = 10_000 -> 11_000
    assert [(r["wave"], r["estimate_bytes"]) for r in out] == [(0, None), (1, 11_000)]
    # wave 0's actual is its largest delta over both readings
    assert out[0]["actual_bytes"] == 20_000


# SPEC §3 step 2, as ART does: a split child's caller reading is not observed
# by the signature's profile (the trainer records it against the split
# structure), but it still counts toward the wave's actual bytes.
# Outputs 0, baseline 0, no floor, one signature:
#  wave 0: flat, caller n=100 peak 30_000 whole (the seed: 300 B/token)
#  wave 1: split_child, forward n=400 peak 60_000 (150 B/token),
#          then caller n=400 peak 200_000 (500 B/token, not whole, not observed)
#  wave 2: flat, n=800, priced at its first reading
SPLIT = [
    dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=100, peak_bytes=30_000,
         whole=True),
    dict(seq=1, wave=1, signature="s", kind="split_child", packed_tokens=400, logical_tokens=400,
         peak_bytes=60_000, phase="forward"),
    dict(seq=2, wave=1, signature="s", kind="split_child", packed_tokens=400, logical_tokens=400,
         peak_bytes=200_000),
    dict(seq=3, wave=2, signature="s", packed_tokens=800, logical_tokens=800, peak_bytes=200_000,
         phase="forward"),
]  # fmt: skip


@pytest.mark.parametrize("engine", ["scalar", "vectorized"])
@pytest.mark.parametrize("policy", ["max-merge", "warm-fit"])
def test_a_split_childs_caller_reading_is_not_observed(engine: str, policy: str) -> None:
    frame = readings_frame(SPLIT).sort("run", "rank", "seq")
    rows = wave_rows(replay(frame, engine=engine).per_wave, policy)
    # wave 1 counts its caller reading toward its actual bytes: max(60_000, 200_000)
    assert rows[1]["actual_bytes"] == 200_000
    # max-merge: rate_max = max(300, 150) = 300 (the caller's 500 is not observed);
    # p = 300 * 800 = 240_000; estimate = int(240_000 * 1.1) = 264_000.
    # warm-fit: the seed is wave 0; wave 1's forward rate 150 is pending, inert
    # until a whole reading sets warm_tokens: it prices as max-merge, 264_000.
    # (Observing the caller reading would give 500 * 800 * 1.1 = 440_000.)
    assert rows[2]["estimate_bytes"] == 264_000


def test_per_wave_rows_follow_the_spec_schema_and_order() -> None:
    per_wave = run_replay(WORKED)
    assert per_wave.schema == pl.Schema(PER_WAVE_SCHEMA)
    assert per_wave.select("wave", "policy").rows() == [
        (0, "max-merge"), (0, "warm-fit"), (1, "max-merge"),
        (1, "warm-fit"), (2, "max-merge"), (2, "warm-fit"),
    ]  # fmt: skip


def test_a_results_repr_shows_what_replay_made_not_the_readings_it_was_given() -> None:
    """The readings are the caller's frame, kept by reference for the reports: a result
    printed in a notebook shows its per-wave rows and summary, not the input again."""
    result = replay(readings_frame(WORKED), policies=["warm-fit"])
    shown = repr(result)
    assert shown.startswith("ReplayResult(per_wave=shape: (3, ")
    assert "summary=shape: (1, " in shown and "policies=('warm-fit',)" in shown
    assert "readings=" not in shown
    assert result.readings.height == len(WORKED)
    # what the plot colours by: wave 0 seeds the profile, the whole waves after it are warm
    assert result.roles.rows() == [
        ("run", 0, 0, "seed"),
        ("run", 0, 1, "warm"),
        ("run", 0, 2, "warm"),
    ]


def test_summary_has_a_row_for_every_run_and_policy_in_order() -> None:
    rows = [dict(WORKED[0], run="b"), dict(WORKED[1], run="a")]
    summary = replay(readings_frame(rows), policies=["warm-fit", "max-merge"]).summary
    assert summary.columns == list(SUMMARY_COLUMNS)
    assert summary.select("run", "policy").rows() == [
        ("a", "warm-fit"), ("a", "max-merge"), ("b", "warm-fit"), ("b", "max-merge"),
    ]  # fmt: skip


def test_median_is_the_mean_of_the_two_middle_values() -> None:
    # four one-reading waves, floor-priced, with over-estimates 0.1, 0.2, 0.5, 1.0
    overs = [0.1, 0.2, 0.5, 1.0]
    rows = [
        dict(seq=i, wave=i, signature=f"s{i}", packed_tokens=1, logical_tokens=1,
             peak_bytes=1_000, static_floor_bytes=round(1_000 * (1 + o)))
        for i, o in enumerate(overs)
    ]  # fmt: skip
    summary = replay(readings_frame(rows), policies=["max-merge"], safety_factor=1.0).summary
    row = summary.to_dicts()[0]
    assert row["median_over_estimate"] == statistics.median(
        [1100 / 1000 - 1, 1200 / 1000 - 1, 1500 / 1000 - 1, 2000 / 1000 - 1]
    )
    assert row["median_over_estimate"] == pytest.approx(0.35)


def test_bad_safety_factor_and_policy_names_are_usage_errors() -> None:
    frame = readings_frame(WORKED)
    with pytest.raises(UsageError, match=r"^safety_factor must be a positive number"):
        replay(frame, safety_factor=0)
    with pytest.raises(UsageError, match="named twice"):
        replay(frame, policies=["warm-fit", "warm-fit"])
    with pytest.raises(PolicyError, match="unknown policy"):
        replay(frame, policies=["warmfit"])


def test_a_policy_returning_nonsense_is_named() -> None:
    with pytest.raises(PolicyError, match=r"'negative' priced a wave at -1\.0"):
        replay(readings_frame(WORKED), policies=["tests.example_policy:Negative"])


# ----------------------------------------------------------------- PR #991


def test_pr991_reconstruction_reproduces_the_published_table(tmp_path: Path) -> None:
    write_pr991(tmp_path)
    summary = replay(read_trace([tmp_path])).summary
    got = {(r["run"], r["policy"]): r for r in summary.to_dicts()}
    published = {  # (median over-estimate, min, waves under their peak, waves)
        ("EP1", "max-merge"): (0.36, None, 0, 25),
        ("EP1", "warm-fit"): (0.16, 0.09, 0, 25),
        ("EP2", "max-merge"): (0.43, None, 0, 17),
        ("EP2", "warm-fit"): (0.43, None, 0, 17),
    }
    for key, (median, minimum, under, waves) in published.items():
        row = got[key]
        assert abs(row["median_over_estimate"] - median) <= 0.02, key
        if minimum is not None:
            assert abs(row["min_over_estimate"] - minimum) <= 0.01, key
        assert (row["under_peak"], row["priced_waves"]) == (under, waves), key
    # EP1: the profile sets every estimate; EP2: the routing floor sets every one, so the
    # warm fit changes nothing
    assert got[("EP1", "warm-fit")]["set_by_profile"] == 25
    assert got[("EP2", "warm-fit")]["set_by_floor"] == 17
    assert (
        got[("EP2", "warm-fit")]["median_over_estimate"]
        == got[("EP2", "max-merge")]["median_over_estimate"]
    )


def test_pr991_reconstruction_matches_the_published_rates() -> None:
    for shape in (EP1, EP2):
        callers = pr991_readings(shape).filter(pl.col("phase") == "caller")
        rate_kb = (
            (pl.col("peak_bytes") - pl.col("baseline_bytes") - pl.col("output_bytes"))
            / pl.col("packed_tokens")
            / 1000
        )
        rates = callers.select(rate_kb).to_series()
        assert callers["packed_tokens"][0] == 15_600 and rates[0] == 275.0
        assert rates[1:].min() >= 206 and rates[1:].max() <= 247  # type: ignore[operator]


def test_stored_pr991_traces_are_what_the_generator_writes(tmp_path: Path) -> None:

    write_pr991(tmp_path)
    for name in ("EP1.parquet", "EP2.parquet"):
        stored, fresh = REPO / "traces/pr991" / name, tmp_path / name
        if pq.ParquetFile(stored).metadata.created_by == pq.ParquetFile(fresh).metadata.created_by:
            assert fresh.read_bytes() == stored.read_bytes(), (
                f"traces/pr991/{name} differs from its generator: run 'make traces'"
            )
        else:  # another pyarrow writes other bytes; the readings must still be the same
            assert pl.read_parquet(fresh).equals(pl.read_parquet(stored))


def test_replay_of_a_trace_split_across_files_equals_one_file(tmp_path: Path) -> None:
    frame = readings_frame(WORKED)
    write_trace(frame, tmp_path / "one/all.parquet")
    write_trace(frame[3:], tmp_path / "split/b.parquet")
    write_trace(frame[:3], tmp_path / "split/a.parquet")
    one = replay(read_trace([tmp_path / "one"]))
    split = replay(read_trace([tmp_path / "split"]))
    assert one.per_wave.equals(split.per_wave) and one.summary.equals(split.summary)


def test_a_numpy_price_is_a_price() -> None:

    from warmfit.replay.reference import _checked_price

    assert _checked_price(MaxMerge, np.int64(5)) == 5
    with pytest.raises(PolicyError, match="'max-merge' priced a wave at"):
        _checked_price(MaxMerge, np.float64("nan"))


def test_a_price_of_zero_or_a_fraction_is_a_price_and_a_boolean_is_not() -> None:
    from warmfit.replay.reference import _checked_price

    assert _checked_price(MaxMerge, 0) == 0  # no compute bytes: still a price (>= 0)
    assert _checked_price(MaxMerge, 0.5) == 0.5
    for value in (True, False):  # a bool is an int to Python, not a number of bytes
        with pytest.raises(PolicyError, match=f"'max-merge' priced a wave at {value}"):
            _checked_price(MaxMerge, value)


# --------------------------------------------------------------------------- 1, 2: summary counts


def test_oom_waves_counts_only_priced_waves(tmp_path: Path) -> None:
    """Survivor 1 (stranger-oom-waves-counts-unpriced): SPEC §3 ``oom_waves`` = priced
    waves with an oom reading.

    Wave 0 (100 tokens, 20,000 B) runs out of memory before any profile exists:
    it is unpriced, and not learned from. Wave 1 (20,000 B) is unpriced too (still
    no profile) and teaches 200 B/token. Wave 2 is priced 22,000 B and runs out
    of memory at 30,000 B. Wave 3 is priced 22,000 B for 20,000 B (+10%).
    ``oom_waves`` is 1 (wave 2), not 2: wave 0 was never priced.
    """
    folder = write_waves(tmp_path, [
        whole_wave(0, 20_000, oom=True), whole_wave(1, 20_000), whole_wave(2, 30_000, oom=True),
        whole_wave(3, 20_000),
    ])  # fmt: skip
    expected = {"oom_waves": 1, "priced_waves": 1, "under_peak": 0}
    for row in warmfit_json("replay", folder):
        assert {k: row[k] for k in expected} == expected, row["policy"]
        assert row["median_over_estimate"] == pytest.approx(0.1)
    summary = replay(read_trace([folder])).summary
    assert summary.get_column("oom_waves").to_list() == [1, 1, 1]  # the 3 default policies


def test_set_by_floor_counts_only_figure_waves(tmp_path: Path) -> None:
    """Survivor 2 (stranger-set-by-floor-counts-outside-figures): ``set_by_floor``
    counts the waves of the figures only (priced, no oom, actual > 0).

    Wave 0 (20,000 B) teaches 200 B/token. Waves 1 and 2 carry a floor of
    30,000 B, above the 20,000 B learned: both are set by the floor at
    33,000 B; wave 1 runs out of memory, wave 2 peaks at 0 B (both forward
    readings, so warm-fit has no warm fit). Wave 3, without a floor, is set by
    the profile at 22,000 B. ``set_by_floor`` is 0 (not 2), ``set_by_profile`` 1.
    """
    floor: dict[str, Any] = {"static_floor_bytes": 30_000, "phase": "forward", "whole": False}
    folder = write_waves(tmp_path, [
        whole_wave(0, 20_000), whole_wave(1, 40_000, oom=True, **floor), whole_wave(2, 0, **floor),
        whole_wave(3, 20_000),
    ])  # fmt: skip
    result = replay(read_trace([folder]))
    assert policy_column(result.per_wave, "max-merge", "set_by") == [
        None,
        "floor",
        "floor",
        "profile",
    ]
    assert policy_column(result.per_wave, "max-merge", "estimate_bytes") == [
        None,
        33_000,
        33_000,
        22_000,
    ]
    expected = {"set_by_floor": 0, "set_by_profile": 1, "priced_waves": 1, "oom_waves": 1}
    for row in warmfit_json("replay", folder):
        assert {k: row[k] for k in expected} == expected, row["policy"]


# --------------------------------------------------------------------------- semantics' edges
# (issue 38's generated pass over warmfit/replay/semantics.py: its survivors' tests)


def test_first_recorded_of_no_waves_is_an_empty_int64_array() -> None:
    # A batch with no wave has no recorded price: an empty int64 array (not one -1, not None).
    got = first_recorded(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.shape == (0,)


def test_a_price_of_zero_without_a_floor_adds_no_byte_before_the_factor() -> None:
    # p = 0.9 B truncates to 0 learned bytes; with no floor the bytes before the safety
    # factor are the outputs alone: 0 + 0 = 0 and 5 + 0 = 5 (a floor taken as 1 B gives 1, 6).
    assert unscaled_bytes(0.9, 0, None) == 0
    assert unscaled_bytes(0.9, 5, None) == 5
    assert unscaled_bytes(0.0, 5, 0) == 5


def test_bytes_before_the_factor_are_exact_up_to_int64_and_capped_there() -> None:
    # 2**63 - 1 B of outputs and p = 0: exactly int64's largest, kept as it is;
    # 5 B of floor more would pass it: capped at 2**63 - 1 (an estimate past it is refused).
    largest = 2**63 - 1
    assert unscaled_bytes(0.0, largest, None) == largest
    assert unscaled_bytes(0.0, largest, 5) == largest
    assert unscaled_bytes(None, largest - 7, 5) == largest - 2


def test_an_estimate_of_2_to_the_63_bytes_is_refused_and_one_double_below_is_not() -> None:
    # 2**63 bytes does not fit int64's largest (2**63 - 1); the double just below it,
    # 2**63 - 1024, does, and is the estimate at a safety factor of 1.0.
    with pytest.raises(OverflowError, match="exceeds int64"):
        estimate_bytes(2.0**63, 0, None, 1.0)
    assert estimate_bytes(2.0**63 - 1024, 0, None, 1.0) == (2**63 - 1024, "profile")
    # the same price through a replay: 2**61 B/token learned on 1 token, then a
    # 4-token wave is priced 2**63 bytes: refused on both engines
    frame = readings_frame([
        whole_wave(0, 2**61, tokens=1), whole_wave(1, 1, tokens=4),
    ])  # fmt: skip
    for engine in ("scalar", "vectorized"):
        with pytest.raises(UsageError, match=r"above 2\*\*63 bytes"):
            replay(frame, ["max-merge"], 1.0, engine)


def test_a_checked_budget_is_the_budget_given() -> None:
    # recommend reads check_budget's answer (None: no budget): 0 and 5 bytes come back as given.
    assert check_budget(0) == 0
    assert check_budget(5) == 5
    assert check_budget(None) is None
    with pytest.raises(UsageError, match="bytes >= 0"):
        check_budget(-1)
