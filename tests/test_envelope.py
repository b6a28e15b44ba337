"""The ``envelope`` policy and the ``Points`` state both engines answer from."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import examples
from warmfit.errors import PolicyError
from warmfit.format.trace import readings_frame
from warmfit.policies import Envelope, PriceRequest, Reading
from warmfit.policies.rule import COMPUTE, PACKED, DeclaredPolicy, Max, Points, PointSet
from warmfit.replay import replay, replay_scalar
from warmfit.replay.vectorized import PointQueries

SETTINGS = settings(max_examples=examples(150))
SIZES = st.integers(1, 5_000)


def fed(points: list[tuple[int, int]]) -> Envelope:
    profile = Envelope()
    for n, compute in points:
        profile.observe(Reading(n, n, compute, whole=True))
    return profile


def price(profile: Envelope, n: int) -> float:
    value = profile.price(PriceRequest(n, n))
    assert value is not None
    return value


# --------------------------------------------------------------------------- worked examples


def test_worked_example_below_within_on_and_beyond() -> None:
    # Points (100, 9,000), (200, 6,000), (400, 10,000): the envelope is 9,000 at 100 and
    # 200 (200 cost less than 100 did, and is never priced below it), 10,000 at 400.
    profile = fed([(200, 6_000), (100, 9_000), (400, 10_000)])
    assert price(profile, 50) == 9_000.0  # below the smallest size: its envelope
    assert price(profile, 100) == 9_000.0  # on a measured size: exact
    assert price(profile, 200) == 9_000.0  # the envelope, not the 6,000 measured there
    assert price(profile, 300) == 9_500.0  # halfway from 9,000 to 10,000
    assert price(profile, 400) == 10_000.0
    # beyond: the largest size costs 25 B/token, the cheapest point (200) 30, so no
    # superlinear growth was seen: k = 1, 10,000 * 800 / 400
    assert price(profile, 800) == 20_000.0


def test_worked_example_superlinear_growth_extrapolates_quadratically() -> None:
    # compute = n**2 / 10: 1,000 at 100, 4,000 at 200: 20 B/token at the top against 10
    profile = fed([(100, 1_000), (200, 4_000)])
    assert price(profile, 150) == 2_500.0  # the chord: 1,000 + 3,000 / 2 (truth 2,250)
    assert price(profile, 400) == 16_000.0  # 4,000 * (400 / 200) ** 2: the truth


def test_worked_example_equal_rates_extrapolate_linearly() -> None:
    """Kills envelope.py:98:58:Gt->GtE (bytes per token equal at the two largest sizes
    taken for growth faster than linear: 80,000 at 400 tokens, not 40,000).

    compute = 100 * n: 10,000 at 100, 20,000 at 200, 100 B/token at both (both
    quotients exactly 100.0): a line through the origin, which ``k = 1`` prices exactly.
    """
    profile = fed([(100, 10_000), (200, 20_000)])
    assert price(profile, 400) == 40_000.0  # 20,000 * 400 / 200: the truth
    assert price(profile, 1_000) == 100_000.0
    # one more byte at 200 tokens and the growth is superlinear: k = 2
    assert price(fed([(100, 10_000), (200, 20_001)]), 400) == 80_004.0


def test_worked_example_sharing_and_replay_bytes() -> None:
    # A whole reading at 1,000 packed / 2,000 logical tokens sets the sharing to 2; a
    # wave of 1,000 packed and 4,000 logical is priced at x = max(1,000, 4,000 / 2).
    profile = Envelope()
    profile.observe(Reading(1_000, 2_000, 100_000, output_bytes=10_000, whole=True))
    profile.observe(Reading(3_000, 6_000, 210_000, output_bytes=10_000, whole=True))
    # points (1,000, 90,000) and (3,000, 200,000); x = 2,000: 90,000 + 110,000 / 2
    assert profile.price(PriceRequest(1_000, 4_000)) == 145_000.0


def test_prices_as_max_merge_until_a_whole_reading() -> None:
    profile = Envelope()
    assert profile.price(PriceRequest(100, 100)) is None
    profile.observe(Reading(100, 100, 5_000, phase="forward", kind="dp_rank_forward"))
    assert profile.price(PriceRequest(200, 200)) == 10_000.0  # 50 B/token * 200


def test_replay_of_a_small_trace_spelled_out() -> None:
    # One stream, one signature; each wave a whole caller reading of (n, peak).
    waves = [(1_000, 1_100_000), (4_000, 2_600_000), (2_000, 1_600_000), (3_000, 2_000_000)]
    rows = [
        {"run": "r", "rank": 0, "seq": i, "wave": i, "signature": "s", "kind": "flat",
         "phase": "caller", "whole": True, "packed_tokens": n, "logical_tokens": n,
         "output_bytes": 0, "baseline_bytes": 0, "peak_bytes": peak, "oom": False}
        for i, (n, peak) in enumerate(waves)
    ]  # fmt: skip
    per_wave = replay(readings_frame(rows), ["envelope"], 1.0).per_wave
    # wave 0: unpriced; wave 1 (4,000, beyond 1,000): 1,100,000 * 4 = 4,400,000;
    # wave 2 (2,000): between 1,000 and 4,000: 1.1M + 1.5M / 3 = 1,600,000 (exact);
    # wave 3 (3,000): between 2,000 and 4,000: 1.6M + 1.0M / 2 = 2,100,000.
    assert per_wave.get_column("estimate_bytes").to_list() == [
        None, 4_400_000, 1_600_000, 2_100_000
    ]  # fmt: skip


# --------------------------------------------------------------------------- properties


@st.composite
def histories(draw: st.DrawFn, curve: str = "any") -> tuple[list[tuple[int, int]], object]:
    """Points measured on a curve, in any order: ``any`` (arbitrary bytes),
    ``increasing`` (non-decreasing), ``affine`` (a + b n, a, b >= 0) or ``convex``
    (a + b n + c n**2, a, b, c >= 0)."""
    sizes = draw(st.lists(SIZES, min_size=1, max_size=12))
    if curve == "any":
        values = draw(st.lists(st.integers(0, 10**9), min_size=len(sizes), max_size=len(sizes)))
        return list(zip(sizes, values, strict=True)), None
    if curve == "increasing":
        # a staircase with ramps: steps at some sizes, a rate between them
        steps = draw(st.lists(st.tuples(SIZES, st.integers(0, 10**8)), max_size=6))
        rate = draw(st.integers(0, 10**4))

        def rising(n: int) -> int:
            return rate * n + sum(height for at, height in steps if at <= n)

        return [(n, rising(n)) for n in sizes], rising
    a = draw(st.integers(0, 10**9))
    b = draw(st.integers(0, 10**5))
    c = draw(st.integers(0, 100)) if curve == "convex" else 0

    def truth(n: int) -> int:
        return a + b * n + c * n * n

    return [(n, truth(n)) for n in sizes], truth


@SETTINGS
@given(histories(), SIZES, SIZES)
def test_monotone_in_packed_and_logical_tokens(
    history: tuple[list[tuple[int, int]], object], n: int, more: int
) -> None:
    profile = fed(history[0])
    base = profile.price(PriceRequest(n, n))
    assert base is not None
    assert price(profile, n + more) >= base
    shared = profile.price(PriceRequest(n, n + more))
    assert shared is not None and shared >= base


@SETTINGS
@given(histories(), SIZES)
def test_never_below_a_smaller_size_seen(
    history: tuple[list[tuple[int, int]], object], n: int
) -> None:
    """Whatever the curve: never below the compute of a measured size not above the wave."""
    points = history[0]
    seen = [compute for size, compute in points if size <= n]
    assert price(fed(points), n) >= max(seen, default=0)


@SETTINGS
@given(histories("increasing"))
def test_exact_on_the_measured_points_of_a_non_decreasing_curve(
    history: tuple[list[tuple[int, int]], object],
) -> None:
    points, _ = history
    profile = fed(points)
    for size, compute in points:
        assert price(profile, size) == compute


@SETTINGS
@given(st.sampled_from(["affine", "convex"]), st.data())
def test_never_below_an_affine_or_convex_curve(curve: str, data: st.DataObject) -> None:
    """Within and below the range for both; beyond it, for an affine curve (k >= 1 covers a
    fixed cost plus a rate) and for a convex one once its points showed superlinear growth."""
    points, truth = data.draw(histories(curve))
    n = data.draw(SIZES)
    profile = fed(points)
    priced, exact = price(profile, n), truth(n)  # type: ignore[operator]
    # the chord's float arithmetic may lose an ulp or so of a byte count near 2**40
    tolerance = 1 - 1e-12
    within = n <= max(size for size, _ in points)
    sizes = sorted({size for size, _ in points})
    grew = False
    if len(sizes) > 1:  # bytes per token at the largest size above those at the next one
        below = max(compute for size, compute in points if size <= sizes[-2])
        grew = max(compute for _, compute in points) / sizes[-1] > below / sizes[-2]
    if within or curve == "affine" or grew:
        assert priced >= exact * tolerance


# --------------------------------------------------------------------------- both engines


def brute_force(points: list[tuple[float, float]], x: float) -> tuple[float, float, float]:
    """below, above, top of ``x`` over ``points`` by their definitions (the oracle)."""
    if not points or math.isnan(x):
        return math.nan, math.nan, math.nan
    below = [p for p in points if p[0] <= x]
    above = [p[0] for p in points if p[0] >= x]
    return (
        max((p[0] for p in below), default=math.nan),
        min(above, default=math.nan),
        max((p[1] for p in below), default=math.nan),
    )


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=examples(200))
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(1, 40).map(float), st.integers(0, 60).map(float)), max_size=70
        ),
        min_size=1,
        max_size=4,
    ),
    st.randoms(use_true_random=False),
    st.sampled_from([(1.0, 0.0), (1.0, 0.5), (0.5, 0.0), (0.5, 0.25)]),
)
def test_point_queries_answer_as_the_definition(
    profiles: list[list[tuple[float, float]]], rng: object, scale_shift: tuple[float, float]
) -> None:
    """Every wave's queries against its profile's points measured before it, vectorized,
    against the definitions computed point by point — and the reference PointSet too.
    Sizes are whole numbers (PointQueries counts them by a table) or halves (mostly not
    whole: by a search), queries whole or not."""
    scale, shift = scale_shift
    profiles = [[(x * scale, y) for x, y in points] for points in profiles]
    at, values, positions, starts, priced_at, queries, expected = [], [], [], [], [], [], []
    position = 0
    for points in profiles:
        starts.append(position)
        for i, (x, y) in enumerate(points):
            at.append(x)
            values.append(y)
            positions.append(position + i)
        for seen in range(len(points) + 1):  # a wave after every prefix of the points
            priced_at.append(position + seen - 1 if seen else -1)
            q = rng.randint(0, 42) * scale + shift  # type: ignore[attr-defined]
            queries.append(q)
            expected.append(brute_force(points[:seen], q))
            reference = PointSet()
            for x, y in points[:seen]:
                reference.add(x, y)
            got = (reference.below(q), reference.above(q), reference.top(q))
            assert all(map(same, got, expected[-1]))
        position += max(len(points), 1)
    answers = PointQueries(
        np.array(at, dtype=np.float64),
        np.array(values, dtype=np.float64),
        np.array(positions, dtype=np.int64),
        np.array(starts, dtype=np.int64),
        np.array(priced_at, dtype=np.int64),
    )
    x = np.array(queries)
    got = list(zip(answers.below(x), answers.above(x), answers.top(x), strict=True))
    for mine, truth in zip(got, expected, strict=True):
        assert all(map(same, mine, truth))


@st.composite
def long_streams(draw: st.DrawFn) -> pl.DataFrame:
    """Streams of many waves (deep blocks), sizes from a few values (ties) or many."""
    sizes = draw(st.sampled_from([[100, 200, 400], list(range(1, 2_000, 37))]))
    rows = []
    for rank in range(draw(st.integers(1, 3))):
        for seq in range(draw(st.integers(1, 150))):
            n = draw(st.sampled_from(sizes))
            rows.append(
                {"run": "r", "rank": rank, "seq": seq, "wave": seq,
                 "signature": draw(st.sampled_from(["a", "b"])), "kind": "flat",
                 "phase": "caller", "whole": draw(st.booleans()), "packed_tokens": n,
                 "logical_tokens": n * draw(st.integers(1, 3)), "output_bytes": 0,
                 "baseline_bytes": 0, "peak_bytes": draw(st.integers(0, 10**7)),
                 "oom": draw(st.integers(0, 20)) == 0}
            )  # fmt: skip
    return readings_frame(rows)


# A fixed budget: an example draws up to 450 readings and replays them on both engines
# (up to 0.2 s; the later, larger examples of a longer run cost more).
@settings(max_examples=60)
@given(long_streams())
def test_engines_agree_on_long_profiles(readings: pl.DataFrame) -> None:
    scalar = replay_scalar(readings, [Envelope])
    vectorized = replay(readings, [Envelope], engine="vectorized")
    assert vectorized.engine == "vectorized"
    assert scalar.equals(vectorized.per_wave.select(scalar.columns))
    # the profiles after the trace are the reference engine's too
    profiles: dict[tuple[str, int, str, str], object] = {}
    replay_scalar(readings, [Envelope], profiles_out=profiles)  # type: ignore[arg-type]
    for key, profile in profiles.items():
        mine, theirs = profile.state, vectorized.profiles[key].state  # type: ignore[attr-defined]
        assert mine.keys() == theirs.keys()
        for name, value in mine.items():
            if isinstance(value, PointSet):
                assert value == theirs[name], (key, name)
            else:
                assert same(value, theirs[name]), (key, name)


def test_only_the_rule_reads_points() -> None:
    with pytest.raises(PolicyError, match="holds points"):

        class Reads(DeclaredPolicy):
            name, summary = "reads-points", "x"
            points = Points(COMPUTE, at=PACKED)
            bad = Max(points)

            @staticmethod
            def rule(state: object, n: object, m: object) -> object:
                return n
