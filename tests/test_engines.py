"""The replay engines: the one reported is the one that ran, the vectorized engine's
fallbacks (int64 prices, extreme wave ids), and both engines agreeing to the byte on the
edges planted bugs hid in (an estimate equal to its peak, truncation, a price equal to the
floor, the segmented scan). ``mutants/mutants.toml`` names these tests as killers; the
numbers are spelled out so that a reader can check them by hand.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

import warmfit.replay
import warmfit.replay.engines
import warmfit.replay.vectorized
from tests.strategies import examples, traces
from warmfit.errors import UsageError
from warmfit.format.trace import readings_frame
from warmfit.policies import MaxMerge, Policy, WarmFit
from warmfit.replay import estimate_bytes, replay, replay_scalar, result_groups, summarize
from warmfit.replay.vectorized import replay_vectorized

BUILT_IN: list[type[Policy]] = [MaxMerge, WarmFit]


def _frame(*rows: dict[str, object]) -> pl.DataFrame:
    """Readings of one stream and signature, seq in the order given."""
    defaults = {"signature": "s", "packed_tokens": 100, "logical_tokens": 100}
    return readings_frame([{**defaults, "seq": i, **row} for i, row in enumerate(rows)])


def _assert_identical(expected: pl.DataFrame, got: pl.DataFrame) -> None:
    assert got.schema == expected.schema
    assert got.height == expected.height
    for name in expected.columns:
        assert expected.get_column(name).to_list() == got.get_column(name).to_list(), name


def _both(
    readings: pl.DataFrame, policies: Sequence[type[Policy]] = BUILT_IN, safety: float = 1.1
) -> tuple[pl.DataFrame, pl.DataFrame]:
    scalar = replay_scalar(readings, policies, safety)
    vectorized = replay_vectorized(readings, policies, safety)
    assert vectorized is not None, "the vectorized engine handed this trace to the reference"
    _assert_identical(scalar, vectorized)
    return scalar, vectorized


class _Spy:
    """Counts calls of the reference engine, then runs it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> pl.DataFrame:
        self.calls += 1
        return replay_scalar(*args, **kwargs)


@pytest.fixture
def reference_spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    """Every call of ``replay_scalar`` (from replay() and from the vectorized fallbacks)."""
    spy = _Spy()
    monkeypatch.setattr(warmfit.replay.engines, "replay_scalar", spy)
    return spy


# --------------------------------------------------------------------------- under_peak


def test_an_estimate_equal_to_the_peak_is_not_under_it() -> None:
    # Wave 0 teaches 20_000 B / 100 tokens = 200 B/token. At safety factor 1.0,
    # wave 1 (100 tokens) is priced int(200 * 100 * 1.0) = 20_000 = its peak:
    # not under. Wave 2 peaks one byte higher, 20_001: under.
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 20_000},
        {"wave": 1, "whole": True, "peak_bytes": 20_000},
        {"wave": 2, "whole": True, "peak_bytes": 20_001},
    )
    for engine in ("scalar", "vectorized"):
        result = replay(frame, ["max-merge"], 1.0, engine)
        rows = result.per_wave.select("estimate_bytes", "actual_bytes", "under_peak").rows()
        assert rows == [(None, 20_000, None), (20_000, 20_000, False), (20_000, 20_001, True)]
        assert result.summary.get_column("under_peak").to_list() == [1]
        # the summary counts from estimate and actual, not from the per-wave column
        groups = result_groups(frame)
        assert summarize(result.per_wave.drop("under_peak"), ["max-merge"], groups).get_column(
            "under_peak"
        ).to_list() == [1]


# --------------------------------------------------------------------------- which engine ran


def test_the_engine_reported_is_the_engine_that_ran(reference_spy: _Spy) -> None:
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000},
        {"wave": 1, "whole": True, "peak_bytes": 20_000},
    )
    for engine in ("vectorized", "auto"):
        result = replay(frame, None, 1.1, engine)
        assert result.engine == "vectorized"
        assert reference_spy.calls == 0, f"--engine {engine} ran the reference engine"
    result = replay(frame, None, 1.1, "scalar")
    assert result.engine == "scalar" and reference_spy.calls == 1


# --------------------------------------------------------------------------- int64 fallback


def test_a_price_of_2_to_the_64_is_refused_by_both_engines(reference_spy: _Spy) -> None:
    # 2**52 B/token learned from a 1-token wave; a 2**12-token wave is then
    # priced 2**64 bytes, beyond int64: the vectorized engine must hand the
    # trace to the reference engine, which refuses it.
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 2**52, "packed_tokens": 1, "logical_tokens": 1},
        {"wave": 1, "whole": True, "peak_bytes": 1, "packed_tokens": 2**12,
         "logical_tokens": 2**12},
    )  # fmt: skip
    for engine in ("scalar", "vectorized"):
        with pytest.raises(UsageError, match=r"above 2\*\*63 bytes"):
            replay(frame, ["max-merge"], 1.1, engine)
    assert reference_spy.calls == 2


def test_an_estimate_beyond_int64_after_the_safety_factor_is_refused(reference_spy: _Spy) -> None:
    # p = 2**52 bytes fits; times a safety factor of 4096 it is 2**64.
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 2**52, "packed_tokens": 1, "logical_tokens": 1},
        {"wave": 1, "whole": True, "peak_bytes": 1, "packed_tokens": 1, "logical_tokens": 1},
    )
    for engine in ("scalar", "vectorized"):
        with pytest.raises(UsageError, match=r"above 2\*\*63 bytes"):
            replay(frame, ["max-merge"], 4096.0, engine)
    assert reference_spy.calls == 2


def test_prices_below_the_price_limit_stay_on_the_vectorized_engine(reference_spy: _Spy) -> None:
    # p = 2**60 < PRICE_LIMIT = 2**61, estimate int(2**60 * 1.5): numpy's int64 is exact here.
    frame = _seed_then_4096_tokens(2**48)
    vectorized = replay(frame, ["max-merge"], 1.5, "vectorized")
    assert reference_spy.calls == 0
    assert vectorized.per_wave.get_column("estimate_bytes").to_list() == [None, 3 * 2**59]
    # and at or above it, the reference engine prices the same trace
    at_limit = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 2**49, "packed_tokens": 1, "logical_tokens": 1},
        {"wave": 1, "whole": True, "peak_bytes": 1, "packed_tokens": 2**12,
         "logical_tokens": 2**12},
    )  # fmt: skip
    result = replay(at_limit, ["max-merge"], 1.0, "vectorized")
    assert reference_spy.calls == 1 and result.engine == "scalar"  # and it says so
    assert result.per_wave.get_column("estimate_bytes").to_list() == [None, 2**61]


def _seed_then_4096_tokens(seed_peak: int) -> pl.DataFrame:
    """A seed wave of one token peaking at ``seed_peak`` bytes (its rate in B/token), then
    a wave of 2**12 tokens that max-merge prices at ``seed_peak * 2**12`` bytes."""
    return _frame(
        {"wave": 0, "whole": True, "peak_bytes": seed_peak, "packed_tokens": 1,
         "logical_tokens": 1},
        {"wave": 1, "whole": True, "peak_bytes": 1, "packed_tokens": 2**12,
         "logical_tokens": 2**12},
    )  # fmt: skip


def test_an_estimate_of_exactly_the_price_limit_goes_to_the_reference_engine(
    reference_spy: _Spy,
) -> None:
    # p = 2**60 < PRICE_LIMIT = 2**61, but at a safety factor of 2.0 the estimate is
    # 2**60 * 2 = 2**61, exactly the limit: the reference engine prices it (and says so);
    # at 1.5 it is 3 * 2**59, below: the vectorized engine keeps it.
    frame = _seed_then_4096_tokens(2**48)
    at_limit = replay(frame, ["max-merge"], 2.0, "vectorized")
    assert reference_spy.calls == 1 and at_limit.engine == "scalar"
    assert at_limit.per_wave.get_column("estimate_bytes").to_list() == [None, 2**61]
    below = replay(frame, ["max-merge"], 1.5, "vectorized")
    assert reference_spy.calls == 1 and below.engine == "vectorized"
    # a price of exactly 2**61 (2**49 B/token * 2**12 tokens) goes there too, even when
    # a safety factor of 0.5 brings its estimate down to 2**60
    at_price_limit = _seed_then_4096_tokens(2**49)
    halved = replay(at_price_limit, ["max-merge"], 0.5, "vectorized")
    assert reference_spy.calls == 2 and halved.engine == "scalar"
    assert halved.per_wave.get_column("estimate_bytes").to_list() == [None, 2**60]


def test_a_fallback_gives_the_reference_engines_profiles_in_its_order(
    reference_spy: _Spy,
) -> None:
    # Signature s prices its second wave at 2**49 B/token * 2**12 tokens = 2**61, the
    # price limit: the vectorized engine, which had kept max-merge's profiles (s, then
    # z) before it met that price, hands the trace to the reference engine. What the
    # replay keeps is then the reference engine's profiles, in its order (stream by
    # stream, each signature's policies together), as a scalar replay gives them.
    frame = _seed_then_4096_tokens(2**49).vstack(
        _frame({"wave": 2, "whole": True, "peak_bytes": 5_000, "signature": "z"}).with_columns(
            seq=pl.lit(2, pl.Int64)
        )
    )
    expected = [
        ("run", 0, "s", "max-merge"), ("run", 0, "s", "warm-fit"),
        ("run", 0, "z", "max-merge"), ("run", 0, "z", "warm-fit"),
    ]  # fmt: skip
    for engine in ("vectorized", "scalar"):
        result = replay(frame, ["max-merge", "warm-fit"], 1.0, engine)
        assert result.engine == "scalar"
        assert list(result.profiles) == expected, engine
        rates = [result.profiles[key].rate_max for key in expected[::2]]  # type: ignore[attr-defined]
        assert rates == [float(2**49), 50.0], engine
    assert reference_spy.calls == 2


def test_both_engines_hand_the_fold_the_same_arrays_spelled_out() -> None:
    """What each engine gives the summary fold, per wave (max-merge, safety factor 1.0):

    - wave 0 (s, 20_000 B / 100 tokens): no profile, no floor: unpriced (-1, code 0, -1);
    - wave 1 (s, 1_000 output bytes): 200 B/token * 100 = 20_000 + 1_000 = 21_000 (profile);
    - wave 2 (z, 500 B below its 1_000 output bytes): unpriced; it teaches 0 B/token;
    - wave 3 (z, no outputs): p = 0, no floor: 0 bytes, set by the profile (0 >= 0);
    - wave 4 (f, floor 3_000, 10 output bytes): no profile: 3_010 bytes, set by the floor.

    Numpy must not warn on the way (a warning reaches the user's terminal)."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 20_000},
        {"wave": 1, "whole": True, "peak_bytes": 500, "output_bytes": 1_000},
        {"wave": 2, "whole": True, "peak_bytes": 500, "output_bytes": 1_000, "signature": "z"},
        {"wave": 3, "whole": True, "peak_bytes": 500, "signature": "z"},
        {"wave": 4, "whole": True, "peak_bytes": 500, "output_bytes": 10, "signature": "f",
         "static_floor_bytes": 3_000},
    )  # fmt: skip
    for engine in ("scalar", "vectorized"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            priced = warmfit.replay.engines.price(frame, [MaxMerge], 1.0, engine, "run", False)
        assert priced.engine == engine
        assert priced.estimate.tolist() == [-1, 21_000, -1, 0, 3_010], engine
        assert priced.set_by.tolist() == [0, 1, 0, 1, 2], engine
        assert priced.unscaled is not None
        assert priced.unscaled.tolist() == [-1, 21_000, -1, 0, 3_010], engine
        assert priced.actual.tolist() == [20_000, 500, 500, 500, 500], engine
        # per-wave rows not asked for: the vectorized engine makes none (a batch's are
        # tens of megabytes); the reference engine makes them anyway (and keeps them)
        assert (priced.per_wave is None) == (engine == "vectorized"), engine
        asked = warmfit.replay.engines.price(frame, [MaxMerge], 1.0, engine, "run", True)
        assert asked.per_wave is not None
        assert asked.per_wave.get_column("estimate_bytes").to_list() == [
            None, 21_000, None, 0, 3_010,
        ], engine  # fmt: skip


def test_both_engines_hand_the_fold_the_recorded_prices_unscaled() -> None:
    """``recorded`` after max-merge (safety factor 1.1), per wave, spelled out:

    - wave 0: a forward reading (1_000 B, no price), then the caller's (2_000 B, 7_000 B
      paid): recorded 7_000, the first price there is; max-merge unpriced;
    - wave 1 (3_000 B, no price): recorded unpriced; max-merge 20 B/token * 100 = 2_000,
      2_200 at 1.1;
    - wave 2: paid 0 B on its first reading and 9_000 B on its second (500, 600 B): the
      first, 0, counts; max-merge 30 B/token * 100 = 3_000, 3_300 at 1.1.

    A recorded price's bytes before the factor are the price itself (-1: none). Warm-fit,
    between them, prices as it does without ``recorded`` (no price lands in its place)."""
    frame = _frame(
        {"wave": 0, "phase": "forward", "peak_bytes": 1_000},
        {"wave": 0, "whole": True, "peak_bytes": 2_000, "estimate_bytes": 7_000},
        {"wave": 1, "whole": True, "peak_bytes": 3_000},
        {"wave": 2, "whole": True, "peak_bytes": 500, "estimate_bytes": 0},
        {"wave": 2, "whole": True, "peak_bytes": 600, "estimate_bytes": 9_000},
    )
    for engine in ("scalar", "vectorized"):
        priced = warmfit.replay.engines.price(
            frame, BUILT_IN, 1.1, engine, "run", False, recorded=True
        )
        alone = warmfit.replay.engines.price(frame, BUILT_IN, 1.1, engine, "run", False)
        assert priced.engine == alone.engine == engine
        assert priced.unscaled is not None and alone.unscaled is not None
        # per wave: max-merge, warm-fit, recorded
        assert priced.estimate[0::3].tolist() == [-1, 2_200, 3_300], engine
        assert priced.estimate[2::3].tolist() == [7_000, -1, 0], engine
        assert priced.set_by[0::3].tolist() == [0, 1, 1], engine
        assert priced.set_by[2::3].tolist() == [3, 0, 3], engine
        assert priced.unscaled[0::3].tolist() == [-1, 2_000, 3_000], engine
        assert priced.unscaled[2::3].tolist() == [7_000, -1, 0], engine
        for got, without in [
            (priced.estimate, alone.estimate),
            (priced.set_by, alone.set_by),
            (priced.unscaled, alone.unscaled),
        ]:
            kept = got.reshape(3, 3)[:, :2].ravel()
            assert kept.tolist() == without.tolist(), engine
        assert priced.actual.tolist() == [2_000, 3_000, 600], engine
    # a trace without the column: recorded prices nothing, on either engine
    for engine in ("scalar", "vectorized"):
        bare = warmfit.replay.engines.price(
            frame.drop("estimate_bytes"), [MaxMerge], 1.1, engine, "run", False, recorded=True
        )
        assert bare.estimate.tolist() == [-1, -1, 2_200, -1, 3_300, -1], engine
        assert bare.unscaled is not None
        assert bare.unscaled.tolist() == [-1, -1, 2_000, -1, 3_000, -1], engine


def test_both_engines_give_each_profile_as_it_stands_after_the_trace() -> None:
    # Signature s learns 200 then 300 B/token (20_000, 30_000 B on 100 tokens); z learns
    # 50 B/token (5_000 B); a replay keeps each (run, rank, signature, policy)'s profile
    # (recommend prices from them), on either engine.
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 20_000},
        {"wave": 1, "whole": True, "peak_bytes": 30_000},
        {"wave": 2, "whole": True, "peak_bytes": 5_000, "signature": "z"},
    )
    for engine in ("scalar", "vectorized"):
        profiles = replay(frame, ["max-merge"], 1.1, engine).profiles
        assert sorted(profiles) == [("run", 0, "s", "max-merge"), ("run", 0, "z", "max-merge")]
        rates = [profiles[("run", 0, sig, "max-merge")].rate_max for sig in "sz"]  # type: ignore[attr-defined]
        assert rates == [300.0, 50.0], engine


# --------------------------------------------------------------------------- int() not round()


def test_the_learned_price_is_truncated_not_rounded() -> None:
    # 10_007 B / 10 tokens = 1000.7 B/token; a 1-token wave is priced p = 1000.7:
    # int(p) = 1000 bytes at safety factor 1.0 (round(p) would give 1001).
    assert estimate_bytes(1000.7, 0, None, 1.0) == (1000, "profile")
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 10_007, "packed_tokens": 10,
         "logical_tokens": 10},
        {"wave": 1, "whole": True, "peak_bytes": 900, "packed_tokens": 1, "logical_tokens": 1},
    )  # fmt: skip
    for policies in ([MaxMerge], [WarmFit]):
        _, vectorized = _both(frame, policies, 1.0)
        assert vectorized.get_column("estimate_bytes").to_list() == [None, 1000]


def test_the_scaled_estimate_is_truncated_not_rounded() -> None:
    # 1000 B/token, a 1-token wave with 5 output bytes: (5 + 1000) * 1.1 = 1105.5,
    # so int() gives 1105 bytes (round() would give 1106).
    assert (5 + 1000) * 1.1 == 1105.5
    assert estimate_bytes(1000.0, 5, None, 1.1) == (1105, "profile")
    assert estimate_bytes(None, 5, 1000, 1.1) == (1105, "floor")
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 100_000},
        {"wave": 1, "whole": True, "peak_bytes": 900, "packed_tokens": 1, "logical_tokens": 1,
         "output_bytes": 5},
        {"wave": 2, "whole": True, "peak_bytes": 900, "packed_tokens": 1, "logical_tokens": 1,
         "output_bytes": 5, "signature": "other", "static_floor_bytes": 1000},
    )  # fmt: skip
    _, vectorized = _both(frame, [MaxMerge], 1.1)
    assert vectorized.get_column("estimate_bytes").to_list() == [None, 1105, 1105]


# --------------------------------------------------------------------------- segmented scan


def _many_profiles(streams: int, signatures: int, waves: int, seed: int) -> pl.DataFrame:
    """A trace of ``streams * signatures`` profiles, waves interleaved across signatures.

    Rates, sharing and wholeness are drawn so that neighbouring profiles differ:
    a scan that ignored profile boundaries would carry one profile's maximum
    (or minimum) into the next.
    """
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for stream in range(streams):
        seq = 0
        for wave in range(waves * signatures):
            n = int(rng.integers(1, 5_000))
            base = {
                "run": f"run{stream % 3}",
                "rank": stream,
                "wave": wave,
                "signature": f"sig{int(rng.integers(signatures))}",
                "packed_tokens": n,
                "logical_tokens": n * int(rng.integers(1, 5)),
                "static_floor_bytes": None if rng.random() < 0.7 else int(rng.integers(0, 10**8)),
            }
            peak = n * int(rng.integers(10, 10_000))
            rows.append({**base, "seq": seq, "phase": "forward", "peak_bytes": peak // 2})
            rows.append(
                {**base, "seq": seq + 1, "phase": "caller", "peak_bytes": peak,
                 "whole": bool(rng.random() < 0.8), "oom": bool(rng.random() < 0.02)}
            )  # fmt: skip
            seq += 2
    return readings_frame(rows).sort("run", "rank", "seq", maintain_order=True)


@pytest.fixture
def segmented(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Force the segmented scan (as with more than 20,000 profiles); count its uses."""
    monkeypatch.setattr(warmfit.replay.vectorized, "LOOP_PROFILES", 0)
    used: list[int] = []
    accumulate = warmfit.replay.vectorized._accumulate

    def counting(ufunc: np.ufunc, values: np.ndarray, starts: np.ndarray, *rest: Any) -> None:
        used.append(len(starts))
        accumulate(ufunc, values, starts, *rest)

    monkeypatch.setattr(warmfit.replay.vectorized, "_accumulate", counting)
    return used


def test_the_segmented_scan_equals_the_reference_on_many_profiles(segmented: list[int]) -> None:
    readings = _many_profiles(streams=40, signatures=5, waves=12, seed=17)
    for safety in (1.1, 1.0):
        _both(readings, BUILT_IN, safety)
        _both(readings, [WarmFit], safety)
    assert segmented and min(segmented) > 100  # the scan ran, over many profiles


# function_scoped_fixture off on purpose: one patch for all examples, its count adds up.
@settings(
    max_examples=examples(60),
    suppress_health_check=[
        *settings.default.suppress_health_check,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(frame=traces())
def test_the_segmented_scan_equals_the_reference_on_generated_traces(
    frame: pl.DataFrame, segmented: list[int]
) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    _both(readings)


# --------------------------------------------------------------------------- wave order


def test_extreme_wave_ids_take_the_lexsort_path_and_keep_streams_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Wave ids -2**62 + k and 2**62 + k span more than an int64 can hold beside
    # the stream number, so waves are ordered with np.lexsort on (stream, wave).
    # Eight ranks reuse the same ids, and waves nest (forward i, forward i+1,
    # caller i, caller i+1): a sort that mixed the streams up would cut waves apart.
    calls: list[int] = []
    lexsort = np.lexsort

    def counting(keys: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(len(keys))
        return lexsort(keys, *args, **kwargs)

    monkeypatch.setattr(np, "lexsort", counting)
    ids = [(-(2**62) if k % 2 else 2**62) + k for k in range(60)]
    rows: list[dict[str, object]] = []
    for rank in range(8):
        seq = 0
        for i in range(0, len(ids), 2):
            a, b = ids[i], ids[i + 1]
            for wave, phase, peak in ((a, "forward", 4_000), (b, "forward", 5_000),
                                      (a, "caller", 9_000 + rank), (b, "caller", 7_000 + i)):  # fmt: skip
                rows.append(
                    {"rank": rank, "seq": seq, "wave": wave, "phase": phase,
                     "whole": phase == "caller", "peak_bytes": peak,
                     "signature": "s", "packed_tokens": 10 + i, "logical_tokens": 10 + i}
                )  # fmt: skip
                seq += 1
    readings = readings_frame(rows)
    _, vectorized = _both(readings)
    assert calls, "the lexsort fallback was not reached"
    assert vectorized.height == 8 * len(ids) * 2  # every wave once per policy
    assert vectorized.get_column("wave").to_list()[:4] == [ids[0], ids[0], ids[1], ids[1]]


def test_a_learned_price_equal_to_the_floor_is_set_by_the_profile() -> None:
    # 200 B/token learned; wave 1 (100 tokens) has a floor of exactly 20_000 bytes:
    # int(p) = 20_000 >= floor, so the profile sets it (SPEC §3: "profile" when learned >= floor).
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 20_000},
        {"wave": 1, "whole": True, "peak_bytes": 20_000, "static_floor_bytes": 20_000},
        {"wave": 2, "whole": True, "peak_bytes": 20_000, "static_floor_bytes": 20_001},
    )
    _, vectorized = _both(frame, [MaxMerge], 1.0)
    assert vectorized.get_column("set_by").to_list() == [None, "profile", "floor"]
    assert vectorized.get_column("estimate_bytes").to_list() == [None, 20_000, 20_001]


# --- issue 38, generated pass of vectorized.py (i38v2) ---


def test_a_count_of_exactly_2_to_the_53_goes_to_the_reference_engine() -> None:
    """Counts below 2**53 convert to doubles exactly; a trace where any one reaches it
    (here a single peak of exactly 2**53 bytes among peaks of 30,000) is priced by the
    reference engine, and replay() says so; at 2**53 - 1 the vectorized engine keeps
    it, to the same bytes."""

    def trace(peak: int) -> pl.DataFrame:
        return _frame(
            {"wave": 0, "whole": True, "peak_bytes": 30_000},
            {"wave": 1, "whole": True, "peak_bytes": peak},
            {"wave": 2, "whole": True, "peak_bytes": 30_000},
        )

    at_limit = trace(2**53)
    assert replay_vectorized(at_limit, BUILT_IN, 1.1) is None
    assert replay(at_limit, ["max-merge"], 1.1, "vectorized").engine == "scalar"
    below = trace(2**53 - 1)
    _both(below)
    assert replay(below, ["max-merge"], 1.1, "vectorized").engine == "vectorized"


def test_a_recorded_price_of_2_to_the_53_goes_to_the_reference_engine_when_reported() -> None:
    """The trainer's price of 2**53 + 1 bytes for a wave peaking at 100: its over-estimate
    is (2**53 + 1) / 100 - 1 = 90071992547408.94 as Python divides the integers, but
    90071992547408.92 from doubles (2**53 + 1 is not one). With the recorded prices
    reported, replay() runs the reference engine; without them the price is never read
    and the vectorized engine keeps the trace."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000},
        {"wave": 1, "whole": True, "peak_bytes": 100, "estimate_bytes": 2**53 + 1},
    )
    result = replay(frame, ["max-merge"], 1.1, "vectorized")
    assert result.engine == "scalar"
    # per wave: max-merge, recorded
    assert result.per_wave.get_column("over_estimate").to_list()[3] == 90071992547408.94
    assert replay(frame, ["max-merge"], 1.1, "vectorized", recorded=False).engine == "vectorized"


def test_replay_vectorized_reports_the_recorded_prices_last_when_asked() -> None:
    """replay_vectorized(recorded=True) gives the reference engine's rows: per wave
    max-merge, then the trainer's price. Wave 0 (300 B/token, paid 7,000 B): max-merge
    unpriced, recorded 7,000; wave 1 (no price): max-merge 300 * 100 * 1.1 = 33,000,
    recorded unpriced. Without recorded, max-merge alone."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000, "estimate_bytes": 7_000},
        {"wave": 1, "whole": True, "peak_bytes": 20_000},
    )
    got = replay_vectorized(frame, [MaxMerge], 1.1, recorded=True)
    assert got is not None
    _assert_identical(replay_scalar(frame, [MaxMerge], 1.1, recorded=True), got)
    assert got.get_column("policy").to_list() == ["max-merge", "recorded"] * 2
    assert got.get_column("estimate_bytes").to_list() == [None, 7_000, 33_000, None]
    plain = replay_vectorized(frame, [MaxMerge], 1.1)
    assert plain is not None and plain.get_column("policy").to_list() == ["max-merge"] * 2


def test_recorded_prices_follow_waves_that_open_out_of_order() -> None:
    """Wave 7 opens, wave 3 opens inside it and both close, then wave 5: the rows come in
    the order the waves first read (7, 3, 5), not by wave id, and each wave keeps the
    price the trainer recorded for it: 7,000, 3,000 and 5,000 bytes."""
    frame = _frame(
        {"wave": 7, "phase": "forward", "peak_bytes": 1_000, "estimate_bytes": 7_000},
        {"wave": 3, "phase": "forward", "peak_bytes": 9_000, "estimate_bytes": 3_000},
        {"wave": 7, "whole": True, "peak_bytes": 2_000},
        {"wave": 3, "whole": True, "peak_bytes": 5_000},
        {"wave": 5, "whole": True, "peak_bytes": 2_000, "estimate_bytes": 5_000},
    )
    got = replay_vectorized(frame, [MaxMerge], 1.1, recorded=True)
    assert got is not None
    _assert_identical(replay_scalar(frame, [MaxMerge], 1.1, recorded=True), got)
    paid = got.filter(pl.col("policy") == "recorded")
    assert paid.get_column("wave").to_list() == [7, 3, 5]
    assert paid.get_column("estimate_bytes").to_list() == [7_000, 3_000, 5_000]
