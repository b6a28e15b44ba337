"""The summary fold's edges, each with its numbers spelled out.

Each test kills a survivor of the generated mutation pass over
``warmfit/replay/summary.py`` (``make mutants-generated``); the mutant it kills
is named in its docstring by the pass's id (file:line:column:operator, the
line as of the pass).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from warmfit.replay.semantics import PER_WAVE_SCHEMA, RECORDED
from warmfit.replay.summary import (
    SET_BY_CODES,
    SummaryFold,
    fold_part,
    per_wave_arrays,
    summarize,
    wave_roles,
)

PROFILE = 1  # SET_BY_CODES["profile"]


def _add(
    fold: SummaryFold,
    runs: list[str],
    actual: list[int],
    estimate: list[int],
    *,
    beyond: list[bool] | None = None,
    unscaled: list[int] | None = None,
) -> None:
    """One policy; each wave's run, actual and estimate (set by the profile, no OOM)."""
    n = len(runs)
    fold.add(
        pl.DataFrame({"run": runs}),
        np.array(actual, dtype=np.int64),
        np.zeros(n, dtype=bool),
        np.array(estimate, dtype=np.int64),
        np.full(n, PROFILE, dtype=np.uint8),
        np.array(beyond if beyond is not None else [False] * n),
        None if unscaled is None else np.array(unscaled, dtype=np.int64),
    )


def _rows(fold: SummaryFold, *columns: str) -> list[tuple[object, ...]]:
    return fold.finish().select("run", *columns).rows()


def test_a_wave_priced_exactly_at_its_peak_is_not_under_it_beyond_the_seen_range() -> None:
    """Kills summary.py:326:37:Lt->LtE (under_peak_beyond counting estimate == actual).

    Two waves, both beyond the seen range, each needing 1000 bytes: priced
    1000 (at its peak, not under) and 999 (under). priced_beyond 2,
    under_peak 1, under_peak_beyond 1.
    """
    with SummaryFold(["p"]) as fold:
        _add(fold, ["r", "r"], [1000, 1000], [1000, 999], beyond=[True, True])
        assert _rows(fold, "priced_beyond", "under_peak", "under_peak_beyond") == [("r", 2, 1, 1)]


def test_no_safe_factor_where_every_wave_is_priced_at_or_above_its_peak() -> None:
    """Kills summary.py:334:32:Lt->LtE (a wave at its peak asking for a safe factor).

    One wave priced exactly its 1000 bytes (unscaled 1000 at factor 1): no wave
    is under its peak, so no policy needs a larger factor and none is listed.
    """
    with SummaryFold(["p"]) as fold:
        _add(fold, ["r"], [1000], [1000], unscaled=[1000])
        assert fold.safe_factors() == {}


def test_the_safe_factor_covers_the_wave_furthest_under_its_peak() -> None:
    """Unscaled 800 for 1000 bytes needs x1.25; unscaled 999 needs the double just
    above 1000/999: the larger, 1.25, is the policy's safe factor."""
    with SummaryFold(["p"]) as fold:
        _add(fold, ["r", "r"], [1000, 1000], [800, 999], unscaled=[800, 999])
        assert fold.safe_factors() == {"p": 1.25}


def test_a_part_from_the_reference_engine_makes_the_safe_factor_unknown() -> None:
    """Kills summary.py:205:16:If->False and summary.py:205:33:.any->.all.

    The reference engine keeps no bytes before the factor (``unscaled`` None):
    a policy with a wave under its peak there has an unknown (NaN) safe factor,
    alone or beside a part that knows its own (x1.25).
    """
    with SummaryFold(["p"]) as fold:
        _add(fold, ["r"], [1000], [999])  # no unscaled
        assert math.isnan(fold.safe_factors()["p"])
    with SummaryFold(["p"]) as fold:
        _add(fold, ["a"], [1000], [800], unscaled=[800])
        _add(fold, ["b"], [1000], [999])  # another run, no unscaled
        assert math.isnan(fold.safe_factors()["p"])


def test_a_wave_priced_at_zero_bytes_has_no_safe_factor() -> None:
    """Kills summary.py:209:41:IfExp->False (infinity reported as a factor).

    A wave priced 0 bytes under its peak of 100: no factor of 0 covers it, so
    the safe factor is None, not inf.
    """
    with SummaryFold(["p"]) as fold:
        _add(fold, ["r"], [100], [0], unscaled=[0])
        assert fold.safe_factors() == {"p": None}


def test_finish_keeps_the_groups_asked_for_in_their_order_and_zero_counts() -> None:
    """Kills summary.py:221:12:If->True (the groups given ignored) and
    summary.py:260:65:Int->k+1 (counts of a group without waves filled with 1).

    Waves only for run "b"; asked for "c", "a", "b" in that order: three rows
    in that order, "c" and "a" with zero counts and null figures.
    """
    with SummaryFold(["p"]) as fold:
        _add(fold, ["b"], [100], [150])
        got = (
            fold.finish(pl.DataFrame({"run": ["c", "a", "b"]}))
            .select("run", "priced_waves", "under_peak", "median_over_estimate")
            .rows()
        )
    assert got == [("c", 0, 0, None), ("a", 0, 0, None), ("b", 1, 0, 0.5)]


def test_spilled_runs_whose_cells_come_out_of_order_are_reordered() -> None:
    """Kills summary.py:393:38:USub->drop (a worker's run taken as it lies when
    only its first cell is the smallest).

    One policy. A first part holds runs a, b (numbered 0, 1); a second,
    written to disk as a worker writes it, holds a, c, b: its cells become
    0, 2, 1, not increasing, so the run must be read back and reordered.
    Over-estimates: a 0.5 and 0.1 (median 0.3), b 0.2 and 0.3 (0.25), c 2.0;
    excess bytes: a 30, b 25, c 200.
    """
    with SummaryFold(["p"]) as fold:
        _add(fold, ["a", "b"], [100, 100], [150, 120])
        n = 3
        part = fold_part(
            np.array([0, 1, 2]),
            [("a",), ("c",), ("b",)],
            np.full(n, 100, dtype=np.int64),
            np.zeros(n, dtype=bool),
            np.array([110, 300, 130], dtype=np.int64),
            np.full(n, PROFILE, dtype=np.uint8),
            np.zeros(n, dtype=bool),
            1,
            runs=fold.run_paths(),
        )
        fold.add_part(part)
        got = _rows(fold, "median_over_estimate", "median_excess_bytes")
    assert got == [("a", pytest.approx(0.3), 30), ("b", pytest.approx(0.25), 25), ("c", 2.0, 200)]


def _per_wave(*waves: tuple[str, str, int, int]) -> pl.DataFrame:
    """One policy "p"; waves as (run, signature, estimate_bytes, actual_bytes)."""
    tokens = {"packed_tokens": 10, "logical_tokens": 10, "output_bytes": 0}
    rows = [
        {"run": run, "rank": 0, "signature": sig, "kind": "flat", "policy": "p"}
        | tokens
        | {"wave": i, "static_floor_bytes": None, "set_by": "profile", "oom": False}
        | {"actual_bytes": actual, "estimate_bytes": estimate}
        | {"over_estimate": estimate / actual - 1, "under_peak": estimate < actual}
        for i, (run, sig, estimate, actual) in enumerate(waves)
    ]
    return pl.DataFrame(rows, schema=PER_WAVE_SCHEMA)


def test_summarize_by_signature_gives_a_row_per_run_and_signature() -> None:
    """Kills summary.py:489:25:IfExp->False (groups with a signature summarized by run).

    Run r, signature s priced 150 for 100 (+0.5), signature t 90 for 100
    (-0.1, under its peak): one row each, not one row for r.
    """
    per_wave = _per_wave(("r", "s", 150, 100), ("r", "t", 90, 100))
    groups = pl.DataFrame({"run": ["r", "r"], "signature": ["s", "t"]})
    got = summarize(per_wave, ["p"], groups).select(
        "run", "signature", "median_over_estimate", "under_peak"
    )
    assert got.rows() == [("r", "s", 0.5, 0), ("r", "t", pytest.approx(-0.1), 1)]


def test_summarize_with_no_policy_and_no_wave_is_empty() -> None:
    """Kills summary.py:491:12:If->True and summary.py:491:28:And->Or (no policy:
    the per-wave rows are not split into policies, which needs at least one)."""
    got = summarize(pl.DataFrame(schema=PER_WAVE_SCHEMA), [], pl.DataFrame({"run": ["r"]}))
    assert got.height == 0
    assert got.columns[:2] == ["run", "policy"]


@pytest.mark.parametrize(("rows", "policies"), [(3, 2), (2, 0)])
def test_per_wave_rows_that_are_not_whole_waves_are_refused(rows: int, policies: int) -> None:
    """Kills summary.py:430:8:If->False and summary.py:430:21:Or->And: 3 rows for 2
    policies, or any rows for none, are not one row per wave and policy."""
    per_wave = _per_wave(*[("r", "s", 100, 100)] * rows)
    with pytest.raises(ValueError, match="one row per wave and policy"):
        per_wave_arrays(per_wave, policies)


def test_wave_roles_come_in_the_readings_order() -> None:
    """Kills summary.py:529:59:True->False (roles in hash order).

    Profile (r, 0, s): wave 5 is a forward-only call (other), wave 3 holds the
    first whole reading (seed), wave 9 a later one (warm), wave 1 ran out of
    memory (other); eight forward-only calls follow. One row per wave, in the
    order the readings list them.
    """
    later = [20, 12, 31, 17, 8, 26, 14, 40]  # then forward-only calls: the order is plain
    n = 5 + len(later)
    readings = pl.DataFrame(
        {
            "run": ["r"] * n,
            "rank": [0] * n,
            "signature": ["s"] * n,
            "wave": [5, 3, 3, 9, 1, *later],
            "seq": list(range(n)),
            "whole": [False, True, True, True, True] + [False] * len(later),
            "oom": [False, False, False, False, True] + [False] * len(later),
        }
    )
    got = wave_roles(readings).select("wave", "role").rows()
    assert got == [(5, "other"), (3, "seed"), (9, "warm"), (1, "other")] + [
        (w, "other") for w in later
    ]


def test_a_wave_is_warm_when_any_of_its_readings_teaches_and_no_seed_means_no_role() -> None:
    """Kills summary.py:532:68:.any->.all (a warm wave needing every reading to teach),
    summary.py:538:49:False->True and summary.py:540:47:False->True (a profile with no
    reading that teaches giving its waves a role).

    Profile s: wave 0 teaches first (seed); wave 1's forward reading is not whole,
    its caller reading is (warm). Profile t has no whole reading at all: its waves
    are other, neither seed nor warm.
    """
    readings = pl.DataFrame(
        {
            "run": ["r"] * 5,
            "rank": [0] * 5,
            "signature": ["s", "s", "s", "t", "t"],
            "wave": [0, 1, 1, 2, 3],
            "seq": [0, 1, 2, 3, 4],
            "whole": [True, False, True, False, False],
            "oom": [False] * 5,
        }
    )
    got = wave_roles(readings).select("wave", "role").rows()
    assert got == [(0, "seed"), (1, "warm"), (2, "other"), (3, "other")]


def test_the_recorded_prices_ask_for_no_safe_factor() -> None:
    """Kills summary.py:207:16:If->False (a safe factor for the trainer's own prices).

    Two policies: "p" and SPEC §8's "recorded", both pricing one wave 800 bytes
    (unscaled 800) against its 1000: p needs x1.25; no factor scales the recorded
    price, so it gets no entry.
    """
    with SummaryFold(["p", RECORDED]) as fold:
        fold.add(
            pl.DataFrame({"run": ["r"]}),
            np.array([1000], dtype=np.int64),
            np.zeros(1, dtype=bool),
            np.array([800, 800], dtype=np.int64),
            np.array([PROFILE, SET_BY_CODES[RECORDED]], dtype=np.uint8),
            np.zeros(1, dtype=bool),
            np.array([800, 800], dtype=np.int64),
        )
        assert fold.safe_factors() == {"p": 1.25}


# --------------------------------------------------------------------------- summary


def _estimated_waves(*waves: tuple[int, int]) -> pl.DataFrame:
    """One run, one policy; waves as (estimate_bytes, actual_bytes)."""
    same = {"run": "r", "rank": 0, "signature": "s", "kind": "flat", "policy": "p"}
    tokens = {"packed_tokens": 10, "logical_tokens": 10, "output_bytes": 0}
    rows = [
        same
        | tokens
        | {"wave": i, "static_floor_bytes": None, "set_by": "profile", "oom": False}
        | {"actual_bytes": actual, "estimate_bytes": estimate}
        | {"over_estimate": estimate / actual - 1, "under_peak": estimate < actual}
        for i, (estimate, actual) in enumerate(waves)
    ]
    return pl.DataFrame(rows, schema=PER_WAVE_SCHEMA)


def test_median_excess_of_a_negative_odd_total_truncates_toward_zero() -> None:
    """Kills median-excess-floors: excesses -3 and 0, mean -1.5, reported -1 (not -2)."""
    summary = summarize(
        _estimated_waves((97, 100), (100, 100)), ["p"], pl.DataFrame({"run": ["r"]})
    )
    assert summary.get_column("median_excess_bytes").to_list() == [-1]


def test_a_wave_estimated_exactly_at_the_budget_is_admitted() -> None:
    """Kills admitted-below-budget-only.

    Budget 100 bytes; waves estimated 97 and 100 (both using 100): both are
    admitted, none refused although it fit, none admitted that did not fit.
    """
    per_wave = _estimated_waves((97, 100), (100, 100))
    summary = summarize(per_wave, ["p"], pl.DataFrame({"run": ["r"]}), budget_bytes=100)
    row = summary.select("admitted", "refused_fit", "admitted_oom").row(0)
    assert row == (2, 0, 0)
