"""The vectorized engine equals the reference engine, to the byte (issue 4).

Every property here draws its traces from :mod:`tests.strategies`. The
default run checks a few hundred generated traces; ``make test-slow`` checks
thousands more.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from tests.strategies import (
    examples,
    signature_names,
    trace_bytes,
    trace_parts,
    trace_tokens,
    traces,
)
from warmfit.errors import PolicyError, UsageError
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import (
    Envelope,
    MaxMerge,
    Policy,
    PriceRequest,
    Reading,
    WarmAffine,
    WarmFit,
)
from warmfit.policies.rule import (
    COMPUTE,
    LOGICAL,
    PACKED,
    RATE,
    SHARING,
    WHOLE,
    DeclaredPolicy,
    Max,
    Min,
    Points,
    PointSet,
    is_declared,
)
from warmfit.replay import (
    GROUPINGS,
    PER_WAVE_SCHEMA,
    is_observed,
    replay,
    replay_scalar,
    result_groups,
    summarize,
    vectorized,
)
from warmfit.replay.vectorized import SIZE_TABLE, PointQueries, replay_vectorized

BUILT_IN: list[type[Policy]] = [MaxMerge, WarmFit, WarmAffine, Envelope]
BUILT_IN_NAMES = [cls.name for cls in BUILT_IN]
#: The two policies of ART PR #991: the worked cases below spell out their rows.
PR_POLICIES: list[type[Policy]] = [MaxMerge, WarmFit]
SAFETY = st.sampled_from([1.1, 1.0, 1.25, 0.9, 3.7])


def both_engines(
    readings: pl.DataFrame, policies: Sequence[type[Policy]], safety: float = 1.1
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each engine's per-wave rows; the vectorized one through replay(), which falls back
    to the reference engine where doubles cannot match it (and says so)."""
    return (
        replay_scalar(readings, policies, safety),
        replay(readings, list(policies), safety, "vectorized").per_wave,
    )


def assert_identical(expected: pl.DataFrame, got: pl.DataFrame) -> None:
    """Same schema, same rows in the same order, same values (nulls included)."""
    assert got.schema == expected.schema
    assert got.height == expected.height
    for name in expected.columns:
        a, b = expected.get_column(name), got.get_column(name)
        # to_list compares floats exactly and nulls as None
        assert a.to_list() == b.to_list(), name


def assert_same_summary(expected: pl.DataFrame, got: pl.DataFrame, names: list[str]) -> None:
    for by in GROUPINGS:
        groups = result_groups(expected, by)
        assert_identical(
            summarize(expected, names, groups, 10**9), summarize(got, names, groups, 10**9)
        )


# --------------------------------------------------------------------------- properties


# Fixed under the ci profile too: later examples are the largest traces, so the cost
# grows faster than the count; the slow variant below draws 3000.
@settings(max_examples=250)
@given(
    traces(),
    SAFETY,
    st.sampled_from(
        [BUILT_IN, [WarmFit, MaxMerge], [WarmFit], [MaxMerge], [WarmAffine], [Envelope]]
    ),
)
def test_every_wave_and_figure_is_identical(
    frame: pl.DataFrame, safety: float, policies: Sequence[type[Policy]]
) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    scalar, vectorized = both_engines(readings, policies, safety)
    assert_identical(scalar, vectorized)
    assert_same_summary(scalar, vectorized, [p.name for p in policies])


def _replay_files(parts: list[pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    with tempfile.TemporaryDirectory() as tmp:
        for i, part in enumerate(parts):
            # nested folders and names that do not sort like the rows
            write_trace(part, Path(tmp) / f"d{i % 2}" / f"part-{len(parts) - i}.parquet")
        readings = read_trace([tmp])
    return both_engines(readings, BUILT_IN)


# A fixed budget: each example writes a trace's files and replays them (up to 0.3 s);
# the slow variant below draws 500.
@settings(max_examples=60)
@given(trace_parts())
def test_identical_on_traces_read_from_files(parts: list[pl.DataFrame]) -> None:
    scalar, vectorized = _replay_files(parts)
    assert_identical(scalar, vectorized)
    assert_same_summary(scalar, vectorized, BUILT_IN_NAMES)


@pytest.mark.slow
@settings(max_examples=examples(3000))
@given(traces(max_waves=30), SAFETY)
def test_every_wave_and_figure_is_identical_slow(frame: pl.DataFrame, safety: float) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    scalar, vectorized = both_engines(readings, BUILT_IN, safety)
    assert_identical(scalar, vectorized)
    assert_same_summary(scalar, vectorized, BUILT_IN_NAMES)


@pytest.mark.slow
@settings(max_examples=examples(500))
@given(trace_parts(max_waves=20))
def test_identical_on_traces_read_from_files_slow(parts: list[pl.DataFrame]) -> None:
    scalar, vectorized = _replay_files(parts)
    assert_identical(scalar, vectorized)


@settings(max_examples=examples(40))
@given(traces())
def test_replay_entry_point_gives_the_same_result_with_every_engine(frame: pl.DataFrame) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    results = {engine: replay(readings, None, 1.1, engine) for engine in ("scalar", "vectorized")}
    assert replay(readings, None, 1.1, "auto").engine == "vectorized"
    assert_identical(results["scalar"].per_wave, results["vectorized"].per_wave)
    assert_identical(results["scalar"].summary, results["vectorized"].summary)


# --------------------------------------------------------------------------- stateful


class ReplayMachine(RuleBasedStateMachine):
    """A trainer's rank: waves open and close, readings interleave, prices are asked.

    After every step the vectorized engine must agree with the reference
    engine on the trace so far, and the estimate of every wave must be what
    policy objects fed one reading at a time priced when the wave opened.
    """

    waves = Bundle("waves")

    @initialize()
    def start(self) -> None:
        self.rows: list[dict[str, object]] = []
        self.profiles: dict[str, list[Policy]] = {}
        self.priced: dict[int, list[float | None]] = {}

    @rule(
        target=waves,
        signature=signature_names,
        n=trace_tokens,
        sharing=st.integers(1, 16),
        output=st.just(0) | trace_bytes,
        floor=st.none() | trace_bytes,
        kind=st.sampled_from(["flat", "split_child", "dp_rank_forward"]),
    )
    def open_wave(
        self, signature: str, n: int, sharing: int, output: int, floor: int | None, kind: str
    ) -> dict[str, object]:
        wave = {
            "wave": len(self.priced) * 3 + 11,
            "signature": signature,
            "kind": kind,
            "packed_tokens": n,
            "logical_tokens": n * sharing,
            "output_bytes": output,
            "static_floor_bytes": floor,
        }
        profiles = self.profiles.setdefault(signature, [cls() for cls in BUILT_IN])
        request = PriceRequest(n, n * sharing, output, kind, floor)
        self.priced[int(wave["wave"])] = [p.price(request) for p in profiles]  # type: ignore[call-overload]
        # the first reading is the forward one; it is taken now
        self._read(wave, "forward", False, 0, n * 1000, False)
        return wave

    def _read(
        self, wave: dict[str, object], phase: str, whole: bool, baseline: int, peak: int, oom: bool
    ) -> None:
        self.rows.append(
            {
                **wave,
                "seq": len(self.rows),
                "phase": phase,
                "whole": whole,
                "baseline_bytes": baseline,
                "peak_bytes": peak,
                "oom": oom,
            }
        )
        if is_observed(str(wave["kind"]), phase, oom):
            reading = Reading(
                int(wave["packed_tokens"]),  # type: ignore[call-overload]
                int(wave["logical_tokens"]),  # type: ignore[call-overload]
                max(0, peak - baseline),
                int(wave["output_bytes"]),  # type: ignore[call-overload]
                whole,
                phase,
                str(wave["kind"]),
                wave["static_floor_bytes"],  # type: ignore[arg-type]
            )
            for profile in self.profiles[str(wave["signature"])]:
                profile.observe(reading)

    @rule(
        wave=waves,
        whole=st.booleans(),
        baseline=trace_bytes,
        peak=trace_bytes,
        oom=st.booleans(),
    )
    def caller_reading(
        self, wave: dict[str, object], whole: bool, baseline: int, peak: int, oom: bool
    ) -> None:
        whole = whole and wave["kind"] == "flat"  # only a flat wave's caller reading (SPEC §1)
        self._read(wave, "caller", whole, baseline, peak, oom and not whole)

    @rule(wave=waves, peak=trace_bytes)
    def forward_reading(self, wave: dict[str, object], peak: int) -> None:
        self._read(wave, "forward", False, 0, peak, False)

    @invariant()
    def engines_agree(self) -> None:
        if not self.rows:
            return
        readings = readings_frame(self.rows)
        scalar, vectorized = both_engines(readings, BUILT_IN)
        assert_identical(scalar, vectorized)
        for row in vectorized.iter_rows(named=True):
            p = self.priced[row["wave"]][BUILT_IN_NAMES.index(row["policy"])]
            floor = row["static_floor_bytes"]
            if p is None:
                expected = None if floor is None else int((row["output_bytes"] + floor) * 1.1)
            else:
                compute = max(floor or 0, int(p))
                expected = int((row["output_bytes"] + compute) * 1.1)
            assert row["estimate_bytes"] == expected


# A fixed budget, runs and steps alike: the invariant replays the whole trace so far with
# both engines after every step, so a run costs the square of its steps (up to 0.4 s).
ReplayMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25)
test_replay_machine = ReplayMachine.TestCase


# --------------------------------------------------------------------------- worked cases


def _frame(*rows: dict[str, object]) -> pl.DataFrame:
    defaults = {"signature": "s", "packed_tokens": 100, "logical_tokens": 100}
    return readings_frame([{**defaults, "seq": i, **row} for i, row in enumerate(rows)])


def _estimates(frame: pl.DataFrame, policy: type[Policy]) -> list[int | None]:
    scalar, vectorized = both_engines(frame, [policy])
    assert_identical(scalar, vectorized)
    return vectorized.get_column("estimate_bytes").to_list()


def test_price_waves_prices_by_the_policies_given_only() -> None:
    """price_waves' arrays, wave-major, for the policies given: the trainer's recorded
    price (50,000 B on wave 1) is a policy only where asked. Wave 0 (the seed, 300
    B/token) is unpriced by both; wave 1 is priced 300 * 100 = 30,000 B unscaled,
    33,000 B at 1.1, by its profile (set_by 1); recorded: its 50,000 B, set by it (3)."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000},
        {"wave": 1, "whole": True, "peak_bytes": 20_000, "estimate_bytes": 50_000},
    )
    plain = vectorized.price_waves(frame, PR_POLICIES, 1.1)
    assert plain is not None and plain.actual.tolist() == [30_000, 20_000]
    assert plain.estimate.tolist() == [-1, -1, 33_000, 33_000]
    assert (plain.set_by.tolist(), plain.unscaled.tolist()) == (
        [0, 0, 1, 1],
        [-1, -1, 30_000, 30_000],
    )
    asked = vectorized.price_waves(frame, PR_POLICIES, 1.1, recorded=True)
    assert asked is not None and asked.estimate.tolist() == [-1, -1, -1, 33_000, 33_000, 50_000]
    assert asked.set_by.tolist() == [0, 0, 0, 1, 1, 3]


def test_the_seed_only_touches_max_merge() -> None:
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000},  # seed: 300 B/token
        {"wave": 1, "whole": True, "peak_bytes": 20_000},  # first warm wave
        {"wave": 2, "whole": True, "peak_bytes": 20_000},
    )
    assert _estimates(frame, MaxMerge) == [None, 33_000, 33_000]
    assert _estimates(frame, WarmFit) == [None, 33_000, 22_000]


def test_pending_warm_rate_stays_inert_until_a_whole_reading() -> None:
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000},
        {"wave": 1, "phase": "forward", "peak_bytes": 10_000},  # pending rate, no tokens
        {"wave": 2, "peak_bytes": 25_000},  # an interrupted caller phase: not whole
        {"wave": 3, "whole": True, "peak_bytes": 5_000},
        {"wave": 4, "whole": True, "peak_bytes": 5_000},
    )
    # waves 1-3 price as max-merge; wave 4 prices with warm_rate 250 B/token
    assert _estimates(frame, WarmFit) == [None, 33_000, 33_000, 33_000, 27_500]


def test_oom_readings_are_never_learned_from_and_nested_waves_price_at_open() -> None:
    frame = _frame(
        {"wave": 7, "phase": "forward", "peak_bytes": 1_000},
        {"wave": 3, "phase": "forward", "peak_bytes": 9_000, "oom": True},
        {"wave": 7, "whole": True, "peak_bytes": 2_000},
        {"wave": 3, "whole": True, "peak_bytes": 50_000, "oom": True},
        {"wave": 5, "whole": True, "peak_bytes": 2_000},
    )
    scalar, vectorized = both_engines(frame, PR_POLICIES)
    assert_identical(scalar, vectorized)
    assert vectorized.get_column("wave").to_list() == [7, 7, 3, 3, 5, 5]
    assert vectorized.get_column("oom").to_list() == [False, False, True, True, False, False]
    # wave 3 opened after wave 7's forward reading only: 10 B/token * 100 * 1.1
    assert vectorized.get_column("estimate_bytes").to_list()[2] == 1_100


def test_floor_sets_the_estimate_and_peaks_below_baseline_give_zero() -> None:
    frame = _frame(
        {"wave": 0, "static_floor_bytes": 500, "peak_bytes": 10, "baseline_bytes": 99},
        {"wave": 1, "static_floor_bytes": 500, "peak_bytes": 10_000, "output_bytes": 40},
        {"wave": 2, "peak_bytes": 10_000},
    )
    scalar, vectorized = both_engines(frame, PR_POLICIES)
    assert_identical(scalar, vectorized)
    assert vectorized.get_column("set_by").to_list() == [
        "floor", "floor", "floor", "floor", "profile", "profile",
    ]  # fmt: skip
    assert vectorized.get_column("actual_bytes").to_list()[0] == 0
    assert vectorized.get_column("over_estimate").to_list()[0] is None


def test_streams_and_signatures_learn_apart() -> None:
    frame = readings_frame(
        [
            {"run": "a", "rank": 0, "seq": 0, "wave": 0, "signature": "x", "packed_tokens": 10,
             "logical_tokens": 10, "peak_bytes": 1_000, "whole": True},
            {"run": "a", "rank": 0, "seq": 1, "wave": 1, "signature": "y", "packed_tokens": 10,
             "logical_tokens": 10, "peak_bytes": 1_000},
            {"run": "a", "rank": 1, "seq": 0, "wave": 0, "signature": "x", "packed_tokens": 10,
             "logical_tokens": 10, "peak_bytes": 1_000},
            {"run": "b", "rank": 0, "seq": 0, "wave": 0, "signature": "x", "packed_tokens": 10,
             "logical_tokens": 10, "peak_bytes": 1_000},
        ]
    )  # fmt: skip
    assert _estimates(frame, WarmFit) == [None, None, None, None]


def test_deep_sharing_prices_logical_tokens() -> None:
    frame = _frame(
        {"wave": 0, "logical_tokens": 800, "whole": True, "peak_bytes": 10_000},
        {"wave": 1, "logical_tokens": 3_200, "whole": True, "peak_bytes": 10_000},
    )
    # 100 B/token * max(100, 3200 / 8) = 40_000
    assert _estimates(frame, MaxMerge) == [None, 44_000]


def test_empty_trace_gives_the_empty_schema() -> None:
    empty = readings_frame([])
    scalar, vectorized = both_engines(empty, BUILT_IN)
    assert_identical(scalar, vectorized)
    assert vectorized.schema == pl.Schema(PER_WAVE_SCHEMA)


def test_values_too_large_for_doubles_fall_back_to_the_reference() -> None:
    # a peak above 2**53 is not exact as a double: the reference engine replays it
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 2**53 + 3, "packed_tokens": 2**20,
         "logical_tokens": 2**20},
        {"wave": 1, "whole": True, "peak_bytes": 2**53 + 1, "packed_tokens": 2**20 + 1,
         "logical_tokens": 2**21},
    )  # fmt: skip
    scalar, vectorized = both_engines(frame, PR_POLICIES)
    assert_identical(scalar, vectorized)
    assert vectorized.get_column("estimate_bytes").to_list()[2] is not None
    assert replay_vectorized(frame, PR_POLICIES, 1.1) is None
    assert replay(frame, ["max-merge"], 1.1, "vectorized").engine == "scalar"


def test_prices_beyond_int64_arithmetic_fall_back_to_the_reference() -> None:
    # 2**40 B/token * 2**22 tokens = 2**62: above PRICE_LIMIT, still an int64 estimate
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 2**40, "packed_tokens": 1, "logical_tokens": 1},
        {"wave": 1, "whole": True, "peak_bytes": 1, "packed_tokens": 2**22,
         "logical_tokens": 2**22},
    )  # fmt: skip
    scalar, vectorized = both_engines(frame, PR_POLICIES, 1.1)
    assert_identical(scalar, vectorized)
    assert vectorized.get_column("estimate_bytes").to_list()[2] == int(2**62 * 1.1)
    assert replay_vectorized(frame, PR_POLICIES, 1.1) is None
    assert replay(frame, ["max-merge"], 1.1, "vectorized").engine == "scalar"


# --------------------------------------------------------------------------- declaring a form


def test_built_in_policies_are_declared() -> None:
    assert all(is_declared(cls) for cls in BUILT_IN)
    # a subclass that only adds aggregates extends its parent's declaration
    assert [a.name for a in WarmFit.aggregates][:2] == ["rate_max", "sharing_max"]


def test_a_subclass_that_overrides_price_is_not_declared() -> None:
    class Cautious(WarmFit):
        name = "cautious"

        def price(self, request: PriceRequest) -> float | None:
            p = super().price(request)
            return None if p is None else 2 * p

    assert not is_declared(Cautious)
    frame = _frame({"wave": 0, "peak_bytes": 100}, {"wave": 1, "peak_bytes": 100})
    assert replay(frame, ["max-merge", f"{__name__}:Halved"], 1.1).engine == "scalar"
    with pytest.raises(UsageError, match="declared"):
        replay(frame, ["max-merge", f"{__name__}:Halved"], 1.1, "vectorized")
    with pytest.raises(PolicyError, match="not declared"):
        replay_vectorized(frame, [Cautious], 1.1)


def test_an_aggregate_may_read_only_those_declared_before_it() -> None:
    later = Max(RATE)
    with pytest.raises(PolicyError, match="not declared before it"):

        class Backwards(MaxMerge):
            name = "backwards"
            early = Max(RATE, where=later > 0)
            late = later


class _Doubling(MaxMerge):
    """Max-merge's aggregates (shared with it), doubled in place by its rule (a rule may)."""

    name = "doubling"

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        state.rate_max *= 2
        n *= 1.5
        return MaxMerge.rule(state, n, m)


class _NamedAlike(DeclaredPolicy):
    """Aggregates named as max-merge's, meaning something else."""

    name, summary = "named-alike", "max-merge's names, other aggregates"
    rate_max = Max(SHARING)
    sharing_max = Max(RATE, initial=1.0)
    rule = staticmethod(MaxMerge.rule)


class _Redeclared(WarmFit):
    """Warm-fit with one of max-merge's aggregates declared anew."""

    name = "redeclared"
    sharing_max = Max(LOGICAL, initial=1.0)


@settings(max_examples=examples(60))
@given(traces(), st.permutations([MaxMerge, _Doubling, WarmFit, _NamedAlike, _Redeclared]))
def test_policies_share_only_the_aggregates_they_share(
    frame: pl.DataFrame, policies: list[type[Policy]]
) -> None:
    """The vectorized engine computes an aggregate once for the policies that declare
    it alike (max-merge's two in warm-fit): not for one named alike, nor after a
    rule changed its state in place."""
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    scalar, vectorized = both_engines(readings, policies)
    assert_identical(scalar, vectorized)


class _ReadsUnset(WarmFit):
    """Aggregates with an initial value over warm-fit's warm tokens, which are NaN
    (unset) at the readings up to the seed, readings these aggregates count."""

    name = "reads-unset"
    tokens_seen = Max(WarmFit.warm_tokens, initial=0.0)
    tokens_low = Min(WarmFit.warm_tokens, initial=1e12)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return WarmFit.rule(state, n, m) + state.tokens_seen + np.minimum(state.tokens_low, 1e3)


@settings(max_examples=examples(60))
@given(traces())
def test_aggregates_with_an_initial_value_skip_unset_values(frame: pl.DataFrame) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    scalar, vectorized = both_engines(readings, [_ReadsUnset])
    assert_identical(scalar, vectorized)


def test_an_unset_value_does_not_reach_an_aggregate_with_an_initial_value() -> None:
    """Three whole waves of 10 tokens and 1,000 bytes (100 bytes a token). At the
    seed (wave 0) the warm tokens are unset, NaN: ``tokens_seen`` stays 0 and
    ``tokens_low`` 1e12 there; wave 1 sets both to 10. Wave 2 is priced
    warm-fit's 100 * 10 = 1,000 bytes, plus 10 + min(10, 1,000) = 1,020 bytes."""
    rows = [
        dict(seq=s, wave=s, signature="s", packed_tokens=10, logical_tokens=10,
             peak_bytes=1_000, whole=True)
        for s in range(3)
    ]  # fmt: skip
    scalar, vectorized = both_engines(readings_frame(rows), [_ReadsUnset], 1.0)
    assert_identical(scalar, vectorized)
    assert vectorized.get_column("estimate_bytes").to_list()[2] == 1020


class Halved(MaxMerge):
    """A plug-in policy without a vectorized form (used by the tests above)."""

    name = "halved"

    def price(self, request: PriceRequest) -> float | None:
        p = super().price(request)
        return None if p is None else p / 2


STORED_TRACES = sorted(
    p for p in (Path(__file__).resolve().parent.parent / "traces").iterdir() if p.is_dir()
)


@pytest.mark.parametrize("trace", STORED_TRACES, ids=[p.name for p in STORED_TRACES])
def test_identical_on_every_stored_trace(trace: Path) -> None:
    """Issue 25's bar: the engines agree byte for byte on every stored trace, every
    built-in policy (envelope's points included), per wave and in every figure."""
    readings = read_trace([trace])
    scalar, vectorized = both_engines(readings, BUILT_IN)
    assert_identical(scalar, vectorized)
    assert_same_summary(scalar, vectorized, BUILT_IN_NAMES)


# ------------------------------------------------------- the point queries, whole


@st.composite
def point_queries(draw: st.DrawFn) -> dict[str, Any]:
    """Readings sorted by profile (``starts``), some of them points (``positions``,
    ``at``, ``values``), waves priced from a reading (``priced_at``; -1 at a profile's
    opening) and one query per wave. The sizes are whole and close (the counting
    table), halves (a search), or spread wider than SIZE_TABLE (a search too)."""
    count = draw(st.integers(0, 40))
    cuts = draw(st.sets(st.integers(1, max(count - 1, 1)), max_size=6)) if count > 1 else set()
    starts = np.array(sorted({0, *cuts}) if count else [0], dtype=np.int64)
    kind = draw(st.sampled_from(["whole", "halves", "wide"]))
    size = {
        "whole": st.integers(3, 8).map(float),
        "halves": st.integers(3, 8).map(lambda k: k / 2),
        "wide": st.sampled_from([5.0, 7.0, 7.0 + SIZE_TABLE, 9.0 + 2 * SIZE_TABLE]),
    }[kind]
    value = st.sampled_from([-2.0, 0.0, 1.5, 4.0, 4.0, 9.0])
    kept = sorted(draw(st.sets(st.integers(0, max(count - 1, 0)), max_size=count)))
    at = np.array([draw(size) for _ in kept], dtype=np.float64)
    values = np.array([draw(value) for _ in kept], dtype=np.float64)
    wave_at = draw(st.lists(st.integers(0, max(count - 1, 0)), min_size=1, max_size=12))
    opening = set(starts.tolist())
    priced_at = np.array([-1 if a in opening else a - 1 for a in wave_at], dtype=np.int64)
    query = st.one_of(size, st.sampled_from([math.nan, 0.0, 2.5, 1e9, 7.0 + SIZE_TABLE / 2]))
    x = np.array([draw(query) for _ in wave_at], dtype=np.float64)
    return dict(
        at=at, values=values, positions=np.array(kept, dtype=np.int64), starts=starts,
        priced_at=priced_at, wave_at=wave_at, x=x, count=count,
    )  # fmt: skip


def _seen_by(case: dict[str, Any], wave: int) -> PointSet:
    """The points a wave's profile measured up to the reading it is priced from."""
    priced_at, positions = int(case["priced_at"][wave]), case["positions"]
    if priced_at < 0:
        return PointSet()
    opening = int(case["starts"][np.searchsorted(case["starts"], priced_at, side="right") - 1])
    mine = (positions >= opening) & (positions <= priced_at)
    return PointSet.of(case["at"][mine], case["values"][mine])


def _same(got: float, expected: float) -> bool:
    return (math.isnan(got) and math.isnan(expected)) or got == expected


@settings(max_examples=examples(300))
@given(point_queries())
def test_point_queries_answer_as_the_reference_point_set_of_each_wave(
    case: dict[str, Any],
) -> None:
    """Per wave, below/above/top of its query, and top of the answer above (the rule's
    top(above(x)), answered from the first search), are those of a PointSet holding the
    points its profile measured before the wave; each profile's final points, those of
    a PointSet of all its points."""
    queries = PointQueries(
        case["at"], case["values"], case["positions"], case["starts"], case["priced_at"]
    )
    x = case["x"]
    below, above, top = queries.below(x), queries.above(x), queries.top(x)
    top_above = queries.top(above)
    for wave in range(len(x)):
        ref = _seen_by(case, wave)
        q = float(x[wave])
        expected = (ref.below(q), ref.above(q), ref.top(q), ref.top(ref.above(q)))
        got = (below[wave], above[wave], top[wave], top_above[wave])
        assert all(map(_same, got, expected)), (wave, q, got, expected, ref.sizes, ref.tops)
    starts = case["starts"]
    for j in range(len(starts)):
        end = starts[j + 1] if j + 1 < len(starts) else case["count"]
        mine = (case["positions"] >= starts[j]) & (case["positions"] < end)
        assert queries.final(j) == PointSet.of(case["at"][mine], case["values"][mine])


def test_point_queries_worked_example() -> None:
    """One profile of six readings; points at readings 0 (size 4, value 1), 2 (size 8,
    value 5), 3 (size 4, value 3) and 5 (size 6, value 2). A wave priced from reading 3
    has seen sizes {4: top 3, 8: top 5}: at x = 6, below 4, above 8, top 3, and top of
    above (8) 5. A wave priced from reading 1 has seen only (4, 1): above 6 is none
    (NaN), top 1. A wave at the opening (-1) has seen nothing: NaN everywhere. A wave
    priced from reading 5 at x = 6: below 6 (measured at reading 5), above 6, top 3."""
    queries = PointQueries(
        np.array([4.0, 8.0, 4.0, 6.0]),
        np.array([1.0, 5.0, 3.0, 2.0]),
        np.array([0, 2, 3, 5]),
        np.array([0]),
        np.array([3, 1, -1, 5]),
    )
    x = np.array([6.0, 6.0, 6.0, 6.0])
    nan = math.nan
    assert list(map(_same, queries.below(x), [4.0, 4.0, nan, 6.0])) == [True] * 4
    assert list(map(_same, queries.above(x), [8.0, nan, nan, 6.0])) == [True] * 4
    assert list(map(_same, queries.top(x), [3.0, 1.0, nan, 3.0])) == [True] * 4
    assert list(map(_same, queries.top(queries.above(x)), [5.0, nan, nan, 3.0])) == [True] * 4


def test_the_top_above_is_the_largest_over_every_block_holding_that_size() -> None:
    """Points (8, 5), (4, 1), (8, 2), measured in that order; a wave that has seen all
    three asks x = 6. The walk sees them as a block of two, (8, 5) and (4, 1), and a
    block of one, (8, 2): above(6) is 8 in both blocks, and the top at 8 is 5, from
    the first block, not the later block's 2 (nor top(6) = 1)."""
    queries = PointQueries(
        np.array([8.0, 4.0, 8.0]), np.array([5.0, 1.0, 2.0]), np.array([0, 1, 2]),
        np.array([0]), np.array([2]),
    )  # fmt: skip
    x = np.array([6.0])
    assert queries.below(x).tolist() == [4.0]
    assert queries.top(x).tolist() == [1.0]
    above = queries.above(x)
    assert above.tolist() == [8.0]
    assert queries.top(above).tolist() == [5.0]


# ------------------------------------------- the helpers' branches for many profiles


@settings(max_examples=examples(200))
@given(
    st.lists(st.lists(st.sampled_from([math.nan, -1.0, 0.0, 2.0, 5.0, 5.0]), min_size=1,
                      max_size=9), min_size=1, max_size=6),
    st.sampled_from([np.fmax, np.fmin, np.maximum, np.minimum, np.add]),
    st.booleans(),
)  # fmt: skip
def test_accumulate_gives_each_profiles_running_value_on_either_path(
    parts: list[list[float]], ufunc: np.ufunc, scan: bool
) -> None:
    """Per profile, the running ``ufunc`` of its own values, never a neighbour's: one
    accumulate per profile, or (more than LOOP_PROFILES profiles, here made 0) the
    segmented scan, which sums never take."""
    values = np.array([v for part in parts for v in part])
    lengths = np.array([len(part) for part in parts])
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    expected = np.concatenate([ufunc.accumulate(np.array(part)) for part in parts])
    with pytest.MonkeyPatch.context() as patch, np.errstate(invalid="ignore"):
        patch.setattr(vectorized, "LOOP_PROFILES", 0 if scan else 10**6)
        vectorized._accumulate(ufunc, values, starts, lengths)
    np.testing.assert_array_equal(values, expected)


def test_accumulate_scan_worked_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three profiles [3, 1, 4, 1, 5], [9, 2] and [6] under the scan: running maxima
    3 3 4 4 5 | 9 9 | 6; running minima 3 1 1 1 1 | 9 2 | 6 (profile 2's 9 never
    reaches profile 3's 6, nor profile 1's 5 profile 2)."""
    monkeypatch.setattr(vectorized, "LOOP_PROFILES", 2)
    starts, lengths = np.array([0, 5, 7]), np.array([5, 2, 1])
    values = np.array([3.0, 1, 4, 1, 5, 9, 2, 6])
    top = values.copy()
    vectorized._accumulate(np.maximum, top, starts, lengths)
    assert top.tolist() == [3, 3, 4, 4, 5, 9, 9, 6]
    vectorized._accumulate(np.minimum, values, starts, lengths)
    assert values.tolist() == [3, 1, 1, 1, 1, 9, 2, 6]


@settings(max_examples=examples(100))
@given(st.lists(st.sampled_from([0, 1, 7, 2**16 - 1, 2**16, 2**20, 2**40, 2**62]), min_size=1,
                max_size=20))  # fmt: skip
def test_dense_numbers_the_distinct_keys_in_order(keys: list[int]) -> None:
    """Each key's rank among the distinct keys: by a table for small keys, by a sort for
    keys far beyond the count (2**16 beyond four per key)."""
    key = np.array(keys, dtype=np.int64)
    distinct = sorted(set(keys))
    assert vectorized._dense(key).tolist() == [distinct.index(k) for k in keys]


@pytest.mark.parametrize("offset", [0, 2**16 - 3, 2**16 - 2, 2**16, 2**20])
def test_profile_order_is_stable_by_profile_on_both_sides_of_16_bits(offset: int) -> None:
    """Profiles [offset+2, offset, offset+2, offset+1, offset]: readings 1 and 4 (the
    profile ``offset``), then 3, then 0 and 2, each profile's readings in their order."""
    profile = np.array([2, 0, 2, 1, 0], dtype=np.int64) + offset
    assert vectorized._profile_order(profile).tolist() == [1, 4, 3, 0, 2]


@pytest.mark.parametrize("loop_profiles", [0, 20_000])
def test_sums_accumulate_in_reading_order_whatever_the_profiles(
    loop_profiles: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sum is added one reading after the other, as the reference engine adds it, even
    where maxima take the segmented scan (more than LOOP_PROFILES profiles): 0.1, 0.2,
    0.3, 0.4, 0.5 run to 0.1, 0.30000000000000004, 0.6000000000000001, 1.0, 1.5 (the
    scan's pairwise order, 0.1 + (0.2 + 0.3) = 0.6 at the third, would differ)."""
    monkeypatch.setattr(vectorized, "LOOP_PROFILES", loop_profiles)
    values = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    vectorized._accumulate(np.add, values, np.array([0]), np.array([5]))
    assert values.tolist() == [0.1, 0.30000000000000004, 0.6000000000000001, 1.0, 1.5]


class _LowestRate(DeclaredPolicy):
    """Prices a wave at the lowest rate its profile has shown, times its packed tokens:
    a Min aggregate with a number for its initial value, over values never NaN."""

    name = "lowest-rate"
    rate_low = Min(RATE, initial=1e12)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return np.where(state.rate_low < 1e12, state.rate_low * n, np.nan)


def test_a_min_aggregate_with_an_initial_value_keeps_the_smallest() -> None:
    """Four whole waves of 10 tokens at 1,000, 500, 800 and 900 bytes: rates 100, 50, 80,
    90 bytes a token. Wave 0 has nothing before it (unpriced); wave 1 is priced at the
    lowest rate so far, 100 x 10 = 1,000 bytes; waves 2 and 3 at 50 x 10 = 500 (the
    largest, 100, or the initial 1e12 would be wrong), on both engines."""
    rows = [
        dict(seq=s, wave=s, signature="s", packed_tokens=10, logical_tokens=10,
             peak_bytes=peak, whole=True)
        for s, peak in enumerate((1_000, 500, 800, 900))
    ]  # fmt: skip
    scalar, vectorized_rows = both_engines(readings_frame(rows), [_LowestRate], 1.0)
    assert_identical(scalar, vectorized_rows)
    assert vectorized_rows.get_column("estimate_bytes").to_list() == [None, 1_000, 500, 500]


@settings(max_examples=examples(60))
@given(traces())
def test_a_min_aggregate_over_numbers_is_identical_on_both_engines(frame: pl.DataFrame) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    scalar, vectorized_rows = both_engines(readings, [_LowestRate, WarmFit])
    assert_identical(scalar, vectorized_rows)


# --- issue 38, generated pass of vectorized.py (i38v1) ---


def _three_readings() -> dict[str, np.ndarray]:
    """One profile of three observed whole readings of 100 packed tokens, sorted as
    declared_prices takes them: rates 50, 80 and 60 bytes a token (5,000, 8,000 and
    6,000 bytes), sharing 1, 2 and 1 (100, 200 and 100 logical tokens)."""
    columns = {
        "packed_tokens": [100.0, 100.0, 100.0],
        "logical_tokens": [100.0, 200.0, 100.0],
        "delta_bytes": [5_000.0, 8_000.0, 6_000.0],
        "output_bytes": [0.0, 0.0, 0.0],
        "compute_bytes": [5_000.0, 8_000.0, 6_000.0],
        "rate": [50.0, 80.0, 60.0],
        "sharing": [1.0, 2.0, 1.0],
        "whole": [1.0, 1.0, 1.0],
        "caller": [0.0, 0.0, 0.0],
    }
    return {name: np.array(values) for name, values in columns.items()} | {
        "observed": np.ones(3, dtype=bool)
    }


def test_declared_prices_prices_each_wave_from_the_readings_before_it() -> None:
    """Max-merge over the three readings, one wave opening at each (priced from the
    reading before: none, 0, 1) of 100 packed tokens and 100, 100, 300 logical: wave 0
    unpriced (NaN); wave 1 at 50 * max(100, 100 / 1) = 5,000; wave 2 at
    80 * max(100, 300 / 2) = 12,000. The profile after the trace: rate_max 80,
    sharing_max 2. ``computed`` left out: nothing is shared, the prices the same."""
    n, m = np.array([100, 100, 100]), np.array([100, 100, 300])
    starts, priced_at = np.array([0]), np.array([-1, 0, 1])
    p, profiles = vectorized.declared_prices(MaxMerge, _three_readings(), starts, priced_at, n, m)
    assert p.tolist()[1:] == [5_000.0, 12_000.0] and math.isnan(p[0])
    assert [profile.state for profile in profiles] == [{"rate_max": 80.0, "sharing_max": 2.0}]


def test_declared_prices_computes_a_shared_aggregate_once() -> None:
    """``computed`` keeps max-merge's two aggregates, and warm-fit, which inherits both,
    takes them as they are (the same objects, not computed again) and adds its own.
    Without ``profiles_wanted`` no profile is built."""
    columns = _three_readings()
    computed: vectorized.Computed = {}
    n, m = np.array([100, 100, 100]), np.array([100, 100, 300])
    starts, priced_at = np.array([0]), np.array([-1, 0, 1])
    p, profiles = vectorized.declared_prices(
        MaxMerge, columns, starts, priced_at, n, m, False, computed
    )
    assert (p.tolist()[1:], profiles) == ([5_000.0, 12_000.0], [])
    assert [[name for name, _ in key] for key in computed] == [
        ["rate_max"],
        ["rate_max", "sharing_max"],
    ]
    shared = dict(computed)
    vectorized.declared_prices(WarmFit, columns, starts, priced_at, n, m, False, computed)
    assert len(computed) == len(WarmFit.aggregates) > len(shared)
    assert all(computed[key] is done for key, done in shared.items())


class _OnePrice(DeclaredPolicy):
    """Broken on purpose: its rule folds every wave's price into one (np.max), which
    on a number is that number but on the arrays of every wave is a single price."""

    name, summary = "one-price", "broken on purpose"
    rate_max = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return np.max(state.rate_max * n)


def test_a_rule_that_gives_one_price_for_every_wave_is_refused() -> None:
    """Three waves: the vectorized engine refuses the single price rather than priced
    every wave alike from it."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 1_000},
        {"wave": 1, "whole": True, "peak_bytes": 2_000},
        {"wave": 2, "whole": True, "peak_bytes": 3_000},
    )
    with pytest.raises(PolicyError) as caught:
        replay_vectorized(frame, [_OnePrice], 1.0)
    assert str(caught.value) == (
        "policy 'one-price': its rule gave shape () for 3 waves; it must return one price "
        "per wave (NaN for no profile)."
    )


def test_point_queries_over_sizes_far_apart_across_zero() -> None:
    """Points at sizes -2**61 (value 1) and 2**61 (value 2), whole numbers 2**62 apart
    (a Points aggregate may measure at any expression): far beyond a table of counts,
    so the sizes are searched. A wave that has seen both asks x = 0: below -2**61,
    above 2**61, top 1, and top of above 2."""
    queries = PointQueries(
        np.array([-(2.0**61), 2.0**61]), np.array([1.0, 2.0]), np.array([0, 1]),
        np.array([0]), np.array([1]),
    )  # fmt: skip
    x = np.array([0.0])
    above = queries.above(x)
    assert (queries.below(x).tolist(), above.tolist()) == ([-(2.0**61)], [2.0**61])
    assert (queries.top(x).tolist(), queries.top(above).tolist()) == ([1.0], [2.0])


def test_point_queries_count_negative_whole_sizes_by_their_table() -> None:
    """Points at whole sizes -3 (value 1), 0 (value 2) and 5 (value 4), counted by a
    table of the 9 whole numbers from -3 to 5. A wave that has seen all three asks
    x = 1: below 0, above 5, top 2 (the largest value at a size not above 1), top of
    above 4; at x = -3: below and above -3, top 1."""
    queries = PointQueries(
        np.array([-3.0, 0.0, 5.0]), np.array([1.0, 2.0, 4.0]), np.array([0, 1, 2]),
        np.array([0]), np.array([2, 2]),
    )  # fmt: skip
    x = np.array([1.0, -3.0])
    above = queries.above(x)
    assert (queries.below(x).tolist(), above.tolist()) == ([0.0, -3.0], [5.0, -3.0])
    assert (queries.top(x).tolist(), queries.top(above).tolist()) == ([2.0, 1.0], [4.0, 1.0])


class _QueryChanged(DeclaredPolicy):
    """Asks its points of ``n``, changes ``n`` in place, asks again (a rule may change
    its arrays in place): top(n) + top(3n)."""

    name, summary = "query-changed", "a query changed in place between two asks"
    points = Points(COMPUTE, at=PACKED, where=WHOLE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        first = state.points.top(n)
        n *= 3
        return first + state.points.top(n)


class _AnswerChanged(DeclaredPolicy):
    """Doubles an answer in place, then asks the same query again: 2 top(n) + top(n)."""

    name, summary = "answer-changed", "an answer changed in place, then asked again"
    points = Points(COMPUTE, at=PACKED, where=WHOLE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        first = state.points.top(n)
        first *= 2
        return first + state.points.top(n)


class _AboveChanged(DeclaredPolicy):
    """Triples the answer above ``n`` in place, then asks the top there: top(3 above(n))."""

    name, summary = "above-changed", "an answer above changed in place, then its top"
    points = Points(COMPUTE, at=PACKED, where=WHOLE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        high = state.points.above(n)
        high *= 3
        return state.points.top(high)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (_QueryChanged, [None, 2_000, 6_000, 7_000]),
        (_AnswerChanged, [None, 3_000, 3_000, 6_000]),
        (_AboveChanged, [None, None, 5_000, 5_000]),
    ],
)
def test_point_queries_answer_arrays_changed_in_place_anew(
    policy: type[Policy], expected: list[int | None]
) -> None:
    """Whole waves of (packed tokens, bytes) (100, 1,000), (300, 5,000), (100, 2,000),
    (100, 1,500), safety factor 1.0. Wave 1 (n = 300) has seen the point 100: 1,000;
    wave 2 (n = 100) 100: 1,000 and 300: 5,000; wave 3 100: 2,000 and 300: 5,000. Each
    ask answers the values its array holds then, as the reference engine does:
    top(100) + top(300) is 1,000 + 5,000 = 6,000 at wave 2, not top(100) twice (2,000);
    2 top(100) + top(100) at wave 3 is 6,000, not the doubled answer again (8,000);
    top(3 above(100)) = top(300) is 5,000 at wave 3, not the top at 100 (2,000)."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 1_000},
        {"wave": 1, "whole": True, "peak_bytes": 5_000, "packed_tokens": 300,
         "logical_tokens": 300},
        {"wave": 2, "whole": True, "peak_bytes": 2_000},
        {"wave": 3, "whole": True, "peak_bytes": 1_500},
    )  # fmt: skip
    scalar, vectorized_rows = both_engines(frame, [policy], 1.0)
    assert_identical(scalar, vectorized_rows)
    assert vectorized_rows.get_column("estimate_bytes").to_list() == expected


# --- issue 38, generated pass of vectorized.py (i38v2) ---


def test_price_waves_counts_each_profiles_readings_as_reading_counts_does() -> None:
    """Signature s: two whole flat readings, a whole flat one that ran out of memory, a
    split child and a forward reading: 5 readings, 4 flat, 2 whole (the one out of memory
    is not counted) and 1 out of memory. Signature t: one flat reading, not whole. These
    are the counts warmfit.format.trace.reading_counts gives, made on the way."""
    frame = _frame(
        {"wave": 0, "whole": True, "peak_bytes": 30_000},
        {"wave": 1, "whole": True, "peak_bytes": 20_000},
        {"wave": 2, "whole": True, "oom": True, "peak_bytes": 90_000},
        {"wave": 3, "kind": "split_child", "peak_bytes": 10_000},
        {"wave": 4, "phase": "forward", "peak_bytes": 5_000},
        {"wave": 5, "signature": "t", "peak_bytes": 5_000},
    )
    priced = vectorized.price_waves(frame, PR_POLICIES, 1.1)
    assert priced is not None and priced.counts is not None
    got = priced.counts.sort("signature")
    assert got.columns == [
        "run", "signature", "readings", "flat_readings", "whole_readings", "oom_readings",
    ]  # fmt: skip
    assert got.rows() == [("run", "s", 5, 4, 2, 1), ("run", "t", 1, 1, 0, 0)]
