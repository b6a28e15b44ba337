"""Policies declared once (warmfit.policies.rule): every aggregate kind, on both engines,
by worked numbers and over generated traces."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings

from tests.strategies import traces
from warmfit.errors import PolicyError
from warmfit.policies import PriceRequest, Reading
from warmfit.policies.rule import (
    CALLER,
    COMPUTE,
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
    Sum,
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


def test_a_rule_that_fails_is_named_not_a_traceback() -> None:
    from warmfit.testing.checks import random_trace, read_trace_frame

    trace = read_trace_frame(random_trace(1))
    with pytest.raises(PolicyError, match=r"'python-max': its rule failed .*np.maximum"):
        replay(trace, [PythonMax], engine="vectorized")
    assert replay(trace, [PythonMax], engine="scalar").engine == "scalar"  # numbers are fine
    with pytest.raises(PolicyError, match=r"'raising' failed in price\(\) on wave \d+"):
        replay(trace, [Raising], engine="scalar")
