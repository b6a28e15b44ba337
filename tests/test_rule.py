"""Policies declared once (warmfit.policies.rule): every aggregate kind, on both engines,
by worked numbers and over generated traces."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings

from tests.command_line import warmfit_cli
from tests.strategies import traces
from tests.whole_waves import policy_column, whole_wave, write_waves
from warmfit.errors import PolicyError
from warmfit.format.trace import read_trace, readings_frame
from warmfit.policies import MaxMerge, PriceRequest, Reading
from warmfit.policies.rule import (
    CALLER,
    COMPUTE,
    DELTA,
    LOGICAL,
    OUTPUT,
    PACKED,
    RATE,
    SHARING,
    WHOLE,
    Count,
    DeclaredPolicy,
    First,
    Last,
    Max,
    Min,
    Points,
    PointSet,
    Sum,
    is_declared,
)
from warmfit.replay import replay


class KitchenSink(DeclaredPolicy):
    """Every aggregate kind, initial values, references to earlier aggregates."""

    name = "kitchen-sink"
    summary = "every aggregate kind (a test policy)"

    wholes = Count(WHOLE)
    callers = Count(CALLER)
    rate_max = Max(RATE, initial=1.0)
    tokens_min = Min(PACKED, where=WHOLE)
    first_rate = First(RATE, where=(wholes - WHOLE) >= 1)
    last_sharing = Last(SHARING, where=~WHOLE)
    spent = Sum(COMPUTE / 1000.0, initial=0.5)
    above_first = Max(RATE - first_rate, where=RATE > first_rate)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        parts = (
            state.rate_max * n
            + np.nan_to_num(state.first_rate) * np.nan_to_num(state.tokens_min)
            + np.nan_to_num(state.last_sharing) * m
            + state.spent
            + np.nan_to_num(state.above_first)
            + state.wholes
            + state.callers
        )
        return np.where(state.wholes + state.callers > 0, parts, np.nan)


def reading(n: int, delta: int, whole: bool = False, m: int | None = None) -> Reading:
    return Reading(n, m or n, delta, whole=whole, phase="caller" if whole else "forward")


def test_the_reference_fold_by_worked_numbers() -> None:
    p = KitchenSink()
    assert p.price(PriceRequest(10, 10)) is None
    for r in (reading(100, 50_000), reading(100, 30_000, whole=True), reading(200, 80_000, True),
              reading(50, 40_000, m=100)):  # fmt: skip
        p.observe(r)
    # rates 500, 300, 400, 800; whole at 300 (seed) and 400 (after it)
    assert (p.wholes, p.callers) == (2.0, 2.0)
    assert p.rate_max == 800.0
    assert p.tokens_min == 100.0
    assert p.first_rate == 400.0  # the first reading after a whole one: the 200-token wave
    assert p.last_sharing == 2.0  # the last reading that is not whole: 100 / 50
    assert p.spent == 0.5 + 50.0 + 30.0 + 80.0 + 40.0  # in order, from the initial 0.5
    assert p.above_first == 400.0  # 800 - 400, the one reading above the first rate


# Fixed under the ci profile too: each example replays a trace on both engines, and
# the oracle (tests/test_oracle.py) and test_vectorized cover the same ground.
@settings(max_examples=150)
@given(traces())
def test_both_engines_run_the_one_declaration(frame: pl.DataFrame) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    scalar = replay(readings, [KitchenSink], engine="scalar")
    vectorized = replay(readings, [KitchenSink], engine="vectorized")
    assert vectorized.engine == "vectorized"
    assert scalar.per_wave.equals(vectorized.per_wave)
    # every profile as the trace left it: the same state on both engines
    assert scalar.profiles.keys() == vectorized.profiles.keys()
    for key, profile in scalar.profiles.items():
        other = vectorized.profiles[key]
        assert isinstance(profile, DeclaredPolicy) and isinstance(other, DeclaredPolicy)
        assert np.array_equal(
            np.array(list(profile.state.values())),
            np.array(list(other.state.values())),
            equal_nan=True,
        )
        assert profile.first_seen == other.first_seen


def test_the_segmented_path_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    from warmfit.replay import vectorized
    from warmfit.testing.checks import random_trace, read_trace_frame

    trace = read_trace_frame(random_trace(11))
    expected = replay(trace, [KitchenSink], engine="scalar").per_wave
    monkeypatch.setattr(vectorized, "LOOP_PROFILES", 0)  # every profile through the scan
    assert replay(trace, [KitchenSink], engine="vectorized").per_wave.equals(expected)


def test_a_declaration_reads_only_aggregates_declared_before_it() -> None:
    later = Max(RATE)
    with pytest.raises(PolicyError, match="'early' reads"):

        class Backwards(DeclaredPolicy):
            name = "backwards"
            summary = "broken"
            early = Max(RATE, where=later > 0)
            late = later

            @staticmethod
            def rule(state: Any, n: Any, m: Any) -> Any:
                return state.late * n


def test_a_declaration_takes_only_numbers_and_fields() -> None:
    with pytest.raises(PolicyError, match="numbers and fields"):
        Max(RATE, where=RATE > "a lot")


class PythonMax(DeclaredPolicy):
    """Broken on purpose: Python's max() runs on numbers but not on arrays."""

    name = "python-max"
    summary = "broken on purpose"
    rate = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return max(state.rate * n, 1.0)


class Raising(DeclaredPolicy):
    """Broken on purpose: the rule raises on every call."""

    name = "raising"
    summary = "broken on purpose"
    rate = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        raise RuntimeError("boom")


class Refusing(DeclaredPolicy):
    """Broken on purpose: the rule raises a ValueError of its own, not numpy's."""

    name = "refusing"
    summary = "broken on purpose"
    rate = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        raise ValueError("no price today")


def test_a_rule_that_fails_is_named_not_a_traceback() -> None:
    """Only an array's truth value asked (Python's max, min or if on arrays) is blamed
    on arrays, with the numpy functions to use; any other error, a ValueError of the
    rule's own too, is the rule's to fix."""
    from warmfit.testing.checks import random_trace, read_trace_frame

    trace = read_trace_frame(random_trace(1))
    with pytest.raises(PolicyError, match=r"'python-max': its rule failed .*np.maximum"):
        replay(trace, [PythonMax], engine="vectorized")
    with pytest.raises(PolicyError) as caught:
        replay(trace, [Refusing], engine="vectorized")
    assert str(caught.value) == (
        "policy 'refusing': its rule failed (ValueError: no price today). Fix the rule's code."
    )
    assert replay(trace, [PythonMax], engine="scalar").engine == "scalar"  # numbers are fine
    with pytest.raises(PolicyError, match=r"'raising' failed in price\(\) on wave \d+"):
        replay(trace, [Raising], engine="scalar")


# --------------------------------------------------------------------------- 12: redeclared aggregate


def test_a_redeclared_aggregate_takes_its_place_in_the_subclass(tmp_path: Path) -> None:
    """Survivor 12 (stranger-redeclared-aggregate-keeps-place): a subclass that
    redeclares a parent's aggregate declares it anew, after the aggregates it
    reads, and both engines fold and price it as declared.

    ``rate_max`` is redeclared to skip the seed (readings up to the first whole
    one). Wave 0 (100 tokens, 30,000 B) is the seed: not learned. Wave 1 (100
    tokens, 20,000 B) is unpriced (nothing learned yet), then teaches 200
    B/token. Wave 2, a forward-only call of 100 tokens at 25,000 B, is priced
    200 * 100 = 20,000 B, int(20,000 * 1.1) = 22,000 B, then teaches 250
    B/token. Wave 3 (200 tokens) is priced 250 * 200 * 1.1 = 55,000 B.
    (Plain max-merge would price them 33,000, 33,000 and 66,000 B.)
    """

    class SeedlessMaxMerge(MaxMerge):
        name = "seedless-max-merge"
        summary = "max-merge that leaves the seed out"
        wholes = Count(WHOLE)
        rate_max = Max(RATE, where=(wholes - WHOLE) >= 1)

    assert [a.name for a in SeedlessMaxMerge.aggregates] == ["sharing_max", "wholes", "rate_max"]
    forward: dict[str, Any] = {"kind": "dp_rank_forward", "phase": "forward", "whole": False}
    folder = write_waves(tmp_path, [
        whole_wave(0, 30_000), whole_wave(1, 20_000), whole_wave(2, 25_000, **forward), whole_wave(3, 50_000, 200),
    ])  # fmt: skip
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), [SeedlessMaxMerge, MaxMerge], engine=engine)
        assert result.engine == engine
        assert policy_column(result.per_wave, "seedless-max-merge", "estimate_bytes") == [
            None, None, 22_000, 55_000,
        ]  # fmt: skip
        assert policy_column(result.per_wave, "max-merge", "estimate_bytes") == [
            None, 33_000, 33_000, 66_000,
        ]  # fmt: skip


# --------------------------------------------------------------------------- 13: x / 0


class PerOutputByte(DeclaredPolicy):
    """Compute bytes per output byte, times the packed tokens: a policy whose
    aggregates divide by the outputs, which are 0 on most waves.

    ``ratio`` divides 0 by 0 on a wave with neither compute nor outputs;
    ``spread`` divides NaN (no whole reading yet) by 0. Both are NaN, as numpy
    has them, and a maximum skips NaN, on both engines.
    """

    name = "per-output-byte"
    summary = "compute bytes per output byte (a test policy)"
    first_whole = First(COMPUTE, where=WHOLE)
    ratio = Max(COMPUTE / OUTPUT)
    spread = Max(first_whole / OUTPUT)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return np.fmax(state.ratio, state.spread) * n


def _divisions(folder: Path, then_priced: bool) -> Path:
    """Wave 0 (10 tokens, no outputs, 0 B, forward): 0 / 0 and NaN / 0. Wave 1 (the
    same) is unpriced. Wave 2 (100 B of outputs, 600 B, whole): 500 / 100 = 5 for
    both. Wave 3 (no outputs, 0 B) is priced 5 * 10 = 50 B, int(50 * 1.1) = 55 B;
    its reading divides 500 / 0 = inf into ``spread``, so a wave 4 would be priced
    inf, which no engine may take as bytes."""
    empty: dict[str, Any] = {"phase": "forward", "whole": False}
    rows = [
        whole_wave(0, 0, 10, **empty), whole_wave(1, 0, 10, **empty), whole_wave(2, 600, 10, output_bytes=100),
        whole_wave(3, 0, 10, **empty),
    ]  # fmt: skip
    if then_priced:
        rows.append(whole_wave(4, 0, 10, **empty))
    return write_waves(folder, rows)


def test_dividing_nan_or_zero_by_zero_is_nan_on_both_engines(tmp_path: Path) -> None:
    """Survivor 13 (stranger-nan-over-zero-is-inf, stranger-zero-over-zero-is-inf):
    IEEE division as numpy does it, on the reference engine too: 0 / 0 and NaN / 0
    are NaN (a maximum skips them), x / 0 is ±inf.

    Priced [unpriced, unpriced, unpriced, 55 B] on both engines. A price that is
    not a finite number is refused naming the policy (docs/reference/policy-api.md),
    on both engines alike: with wave 4 priced inf, exit 2.
    """
    folder = _divisions(tmp_path / "trace", then_priced=False)
    frames = []
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), [PerOutputByte], engine=engine)
        assert result.engine == engine
        assert result.per_wave.get_column("estimate_bytes").to_list() == [None, None, None, 55]
        frames.append(result.per_wave)
    assert frames[0].equals(frames[1])
    infinite = _divisions(tmp_path / "infinite", then_priced=True)
    for engine in ("scalar", "vectorized"):
        with pytest.raises(PolicyError, match="'per-output-byte' priced a wave at inf"):
            replay(read_trace([infinite]), [PerOutputByte], engine=engine)
    result = warmfit_cli("replay", infinite, "-p", f"{__name__}:PerOutputByte")
    assert result.exit_code == 2, result.output
    assert "per-output-byte" in result.output and "Traceback" not in result.output


class Typo(DeclaredPolicy):
    """Broken on purpose: the rule reads a field the state does not have."""

    name = "typo"
    summary = "broken on purpose"
    rate = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rat * n


def test_a_typo_in_a_rule_is_not_blamed_on_arrays() -> None:
    from warmfit.testing.checks import random_trace, read_trace_frame

    trace = read_trace_frame(random_trace(1))
    with pytest.raises(PolicyError, match="'typo': its rule failed") as caught:
        replay(trace, [Typo], engine="vectorized")
    assert "np.maximum" not in str(caught.value) and "rat" in str(caught.value)


def test_a_where_that_is_not_a_condition_is_named() -> None:
    with pytest.raises(PolicyError, match=r"Max\(\.\.\., where=3\)"):
        Max(RATE + 1, where=3)  # type: ignore[arg-type]


#: Each operator of a declaration, a number on either side, over the packed tokens
#: 0, 1, 2 and 3: what it gives, written out. Each is built in its test (the mutant
#: runner then knows which test runs which operator).
OPERATORS: list[tuple[str, Callable[[], Any], list[float]]] = [
    ("2 + n", lambda: 2 + PACKED, [2, 3, 4, 5]),
    ("n + 2", lambda: PACKED + 2, [2, 3, 4, 5]),
    ("2 - n", lambda: 2 - PACKED, [2, 1, 0, -1]),
    ("n - 2", lambda: PACKED - 2, [-2, -1, 0, 1]),
    ("3 * n", lambda: 3 * PACKED, [0, 3, 6, 9]),
    ("n * 3", lambda: PACKED * 3, [0, 3, 6, 9]),
    ("n / 2", lambda: PACKED / 2, [0, 0.5, 1, 1.5]),
    ("1 / n", lambda: 1 / PACKED, [np.inf, 1, 0.5, 1 / 3]),
    ("n < 2", lambda: PACKED < 2, [1, 1, 0, 0]),
    ("n <= 2", lambda: PACKED <= 2, [1, 1, 1, 0]),
    ("n > 2", lambda: PACKED > 2, [0, 0, 0, 1]),
    ("n >= 2", lambda: PACKED >= 2, [0, 0, 1, 1]),
    ("n == 2", lambda: PACKED == 2, [0, 0, 1, 0]),
    ("n != 2", lambda: PACKED != 2, [1, 1, 0, 1]),
    ("(n > 0) & (n < 3)", lambda: (PACKED > 0) & (PACKED < 3), [0, 1, 1, 0]),
    ("(n < 1) | (n > 2)", lambda: (PACKED < 1) | (PACKED > 2), [1, 0, 0, 1]),
    ("~(n > 1)", lambda: ~(PACKED > 1), [1, 1, 0, 0]),
    ("n + nan", lambda: PACKED + float("nan"), [np.nan] * 4),
    ("n + inf", lambda: PACKED + float("inf"), [np.inf] * 4),
    ("n - inf", lambda: PACKED + float("-inf"), [-np.inf] * 4),
]


@pytest.mark.parametrize(("said", "build", "expected"), OPERATORS, ids=[o[0] for o in OPERATORS])
def test_each_operator_gives_the_same_numbers_on_both_engines(
    said: str, build: Callable[[], Any], expected: list[float]
) -> None:
    """A declaration's expression over every reading at once (the vectorized engine) and
    as the reference engine's Python source, reading by reading: both give the numbers
    written out (truth as 1 and 0; NaN and infinite constants kept as themselves)."""
    from warmfit.policies import rule

    expr = build()
    n = np.array([0.0, 1.0, 2.0, 3.0])
    vectorized = rule.evaluate(expr, {"packed_tokens": n}, {}, {})
    namespace = {"_div": rule._div, "_nan": float("nan"), "_inf": float("inf")}
    reference = [
        float(eval(expr.source(), {**namespace, "f_packed_tokens": x})) for x in n.tolist()
    ]
    np.testing.assert_array_equal(np.asarray(vectorized, dtype=float), expected)
    np.testing.assert_array_equal(reference, expected)


def test_declarations_read_back_as_written() -> None:
    """What an error message or a profile shows of a declaration: its aggregates and
    expressions as they were written (a ``where=`` only where given), and a ``Points``
    read on the class is the declaration itself (on an instance, its points)."""
    assert repr(Max(RATE, where=WHOLE)) == "Max(RATE, where=WHOLE)"
    assert repr(Min(PACKED)) == "Min(PACKED_TOKENS)"
    assert (repr(Count()), repr(Count(WHOLE))) == ("Count()", "Count(WHOLE)")
    assert (
        repr(Sum(COMPUTE / 1000.0, where=~WHOLE)) == "Sum((COMPUTE_BYTES / 1000.0), where=~WHOLE)"
    )
    assert repr((PACKED + 2) * RATE) == "((PACKED_TOKENS + 2.0) * RATE)"
    assert repr(Points(RATE, at=PACKED)) == "Points(RATE, at=PACKED_TOKENS)"
    assert repr(Points(COMPUTE, at=PACKED * 2, where=WHOLE)) == (
        "Points(COMPUTE_BYTES, at=(PACKED_TOKENS * 2.0), where=WHOLE)"
    )

    class Pointed(DeclaredPolicy):
        name = "pointed-test"
        summary = "points by packed tokens (a test policy)"
        pts = Points(RATE, at=PACKED, where=WHOLE)

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return n

    assert isinstance(Pointed.pts, Points) and Pointed.pts.name == "pts"
    policy = Pointed()
    policy.observe(reading(4, 400, whole=True))  # a rate of 400 / 4 = 100 at 4 tokens
    assert policy.pts.top(10) == 100.0


def test_points_are_read_by_the_rule_only() -> None:
    """A ``Points`` aggregate is not one number: an expression reading it cannot be
    computed over the readings, neither as the vectorized engine's arrays nor as the
    reference engine's source; both refuse naming it."""
    from warmfit.policies import rule

    class Pointed(DeclaredPolicy):
        name = "pointed-only-test"
        summary = "points by packed tokens (a test policy)"
        pts = Points(RATE, at=PACKED)

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return state.pts.top(n) * n

    with pytest.raises(PolicyError) as caught:

        class Reads(Pointed):
            name = "reads-points-test"
            bad = Max(Pointed.pts)

    assert str(caught.value) == (
        "policy test_points_are_read_by_the_rule_only.<locals>.Reads: aggregate 'bad' reads "
        "'pts', which holds points: only the rule can read them."
    )
    n = np.array([1.0, 2.0])
    for expr in (Pointed.pts, Pointed.pts + 1):
        with pytest.raises(PolicyError, match=r"'pts' holds points: only the rule can read it"):
            rule.evaluate(expr, {"packed_tokens": n, "rate": n}, {}, {})
        with pytest.raises(PolicyError, match=r"'pts' holds points"):
            expr.source()


def test_a_point_set_copied_counted_and_shown() -> None:
    """What a rule holds of a ``Points`` aggregate on the reference engine: sizes 100,
    200 and 400 measured (200 twice: 3 sizes, tops 7, 7 and 9); a point with a NaN
    coordinate measures nothing and is not kept, one by one or from arrays. Its copy answers the same and is its
    own: a point added to the copy (50 tokens, 8 B) leaves the original's 3 sizes and
    its ``below(60)`` unset (NaN)."""
    measured = ((200.0, 5.0), (100.0, 7.0), (math.nan, 8.0), (400.0, 9.0), (300.0, math.nan),
                (200.0, 6.0), (math.nan, math.nan))  # fmt: skip
    points = PointSet()
    for x, y in measured:
        points.add(x, y)
    # the same set from arrays, as the vectorized engine gives a profile's points
    assert PointSet.of(*np.array(measured).T) == points
    assert (len(points), repr(points)) == (3, "PointSet(3 sizes)")
    assert (points.sizes, points.tops) == ([100.0, 200.0, 400.0], [7.0, 7.0, 9.0])
    copied = points.copy()
    assert isinstance(copied, PointSet) and copied == points and copied is not points
    copied.add(50.0, 8.0)
    assert (len(copied), repr(copied), copied.below(60.0)) == (4, "PointSet(4 sizes)", 50.0)
    assert copied.tops == [8.0, 8.0, 8.0, 9.0]  # the envelope rises from 50 tokens
    assert len(points) == 3 and np.isnan(points.below(60.0)) and points.tops == [7.0, 7.0, 9.0]
    assert copied != points and len(PointSet()) == 0 and repr(PointSet()) == "PointSet(0 sizes)"


def test_a_declaration_of_no_aggregate_is_a_policy(tmp_path: Path) -> None:
    """A rule of the tokens alone declares nothing to fold (its class was refused with
    Python's IndentationError from the fold's source, a function of no statement).
    Every wave is priced, the first too: 1,000 B * 4 tokens = 4,000 B, times 1.1:
    4,400 B; 8 tokens: 8,800 B; on both engines, and by ``price``."""

    class PerToken(DeclaredPolicy):
        name = "per-token-test"
        summary = "1,000 B per packed token (a test policy)"

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return 1000.0 * n

    assert PerToken.aggregates == () and PerToken().price(PriceRequest(3, 3)) == 3000.0
    profile = PerToken()
    profile.observe(reading(4, 400, whole=True))
    assert profile.state == {} and profile.price(PriceRequest(8, 8)) == 8000.0
    folder = write_waves(tmp_path, [whole_wave(0, 400, 4), whole_wave(1, 900, 8)])
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), [PerToken], engine=engine)
        assert result.engine == engine
        assert policy_column(result.per_wave, "per-token-test", "estimate_bytes") == [4400, 8800]


class SignedZero(DeclaredPolicy):
    """Points whose values are zeros of either sign: +0.0 for a whole reading, -0.0 for
    another ((WHOLE - 1) * 0); the rule reads the top's sign (3n for +0.0, n for -0.0)."""

    name = "signed-zero-test"
    summary = "the sign of a zero top (a test policy)"
    pts = Points((WHOLE - 1) * 0, at=PACKED)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        top = state.pts.top(n)
        return np.where(np.isnan(top), np.nan, np.copysign(1.0, top) * n + 2 * n)


@pytest.mark.parametrize(
    ("first_whole", "expected"), [(True, [None, 13, 13]), (False, [None, 4, 4])]
)
def test_a_top_of_equal_zeros_keeps_the_first_measured_on_both_engines(
    first_whole: bool, expected: list[int | None]
) -> None:
    """Equal values at one size: the top stays the one measured first, which only a
    zero's sign tells apart (+0.0 == -0.0). Three waves of 4 tokens; waves 0 and 1 measure
    one zero each, whole first or not. Wave 0 is unpriced (no point); wave 1 sees wave
    0's zero, wave 2 both, the first kept: +0.0 gives 3 * 4 = 12 B, 13 B at 1.1; -0.0
    gives 4 B, 4 B at 1.1 (4.4 truncated). Both engines alike."""
    kinds = (first_whole, not first_whole, True)
    rows = [
        whole_wave(i, 400, 4, whole=whole, phase="caller" if whole else "forward")
        for i, whole in enumerate(kinds)
    ]
    for engine in ("scalar", "vectorized"):
        result = replay(readings_frame(rows), [SignedZero], engine=engine)
        assert result.engine == engine
        assert result.per_wave.get_column("estimate_bytes").to_list() == expected


def test_each_field_of_a_reading_as_the_fold_reads_it() -> None:
    """Two readings: 100 tokens (200 logical), 50,000 B, 10,000 B of outputs, whole,
    caller; 50 tokens, 5,000 B, forward. Compute 40,000 + 5,000 B; rates 400 + 100;
    sharing 2 + 1; one whole reading, one caller reading (1.0 each, 0.0 for the other);
    counted: 2 readings, 1 whole. (Declared here, not at import: the mutant runner then
    knows this test runs the aggregates' constructors.)"""

    class EveryField(DeclaredPolicy):
        name = "every-field-test"
        summary = "each field summed, and counted (a test policy)"
        packed, logical, delta = Sum(PACKED), Sum(LOGICAL), Sum(DELTA)
        output, compute, rate = Sum(OUTPUT), Sum(COMPUTE), Sum(RATE)
        sharing, whole, caller = Sum(SHARING), Sum(WHOLE), Sum(CALLER)
        readings, wholes = Count(), Count(WHOLE)

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return state.rate * n

    profile = EveryField()
    profile.observe(Reading(100, 200, 50_000, 10_000, whole=True, phase="caller"))
    profile.observe(Reading(50, 50, 5_000, 0, whole=False, phase="forward"))
    assert profile.state == {
        "packed": 150.0, "logical": 250.0, "delta": 55_000.0, "output": 10_000.0,
        "compute": 45_000.0, "rate": 500.0, "sharing": 3.0, "whole": 1.0, "caller": 1.0,
        "readings": 2.0, "wholes": 1.0,
    }  # fmt: skip


def test_a_declared_base_without_a_rule_is_shared_by_its_subclasses(tmp_path: Path) -> None:
    """A class that declares aggregates and no rule is no policy yet (not declared);
    a subclass adds the rule: twice the largest rate. Wave 0 (100 tokens, 30,000 B) is
    unpriced, then teaches 300 B/token; wave 1 is priced 2 * 300 * 100 = 60,000 B,
    66,000 B at 1.1, on both engines."""

    class RateBase(DeclaredPolicy):
        name = "rate-base-test"
        summary = "the largest rate, for subclasses (a test policy)"
        rate_max = Max(RATE)

    class Doubled(RateBase):
        name = "doubled-rate-test"

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return 2 * state.rate_max * n

    assert not is_declared(RateBase) and is_declared(Doubled)
    folder = write_waves(tmp_path, [whole_wave(0, 30_000), whole_wave(1, 30_000)])
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), [Doubled], engine=engine)
        assert result.engine == engine
        assert policy_column(result.per_wave, "doubled-rate-test", "estimate_bytes") == [
            None, 66_000,
        ]  # fmt: skip
