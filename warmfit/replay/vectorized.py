"""The vectorized replay engine: every wave of a trace priced at once (SPEC §3).

A declared policy (:class:`warmfit.policies.rule.DeclaredPolicy`) states its
profile as running aggregates over the readings it observed, so the state a
wave is priced from is each aggregate taken over the readings of its
``(run, rank, signature)`` strictly before the wave's first reading. This
module computes every aggregate for every reading at once in numpy, on the
readings sorted by profile, then reads each wave's state just before its
first reading and applies the policy's one ``rule`` to arrays — the same
declaration the reference engine folds one reading at a time. It gives
exactly what :func:`warmfit.replay.replay_scalar` gives: the same rows in the
same order, the same bytes, the same floats.

Exactness: maxima, minima, first and last values are exact in any order;
sums are accumulated profile by profile in reading order, as the reference
engine adds them; every other operation is numpy's on IEEE doubles, as
Python's. Integers convert to doubles exactly below 2**53. For a trace whose
token or byte counts reach 2**53 (8 PiB), or whose prices would not fit an
int64, :func:`replay_vectorized` returns None and :func:`warmfit.replay.replay`
runs the reference engine instead (and says so), so the result never differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from warmfit.errors import PolicyError
from warmfit.format.schema import ESTIMATE_COLUMN, WAVE_CONSTANT
from warmfit.format.trace import Canonical, signature_codes, stream_numbers, wave_order
from warmfit.policies import Policy
from warmfit.policies.rule import (
    Aggregate,
    DeclaredPolicy,
    First,
    Memo,
    Points,
    PointSet,
    State,
    evaluate,
    is_declared,
)
from warmfit.replay.semantics import (
    PER_WAVE_SCHEMA,
    RECORDED,
    SETTERS,
    ProfileKey,
    estimates,
    first_recorded,
    observed,
)
from warmfit.replay.summary import condition_counts, nullable

#: Below this, every int64 column converts to a double exactly.
EXACT_LIMIT = 2**53


#: Up to this many profiles, running aggregates go profile by profile.
LOOP_PROFILES = 20_000


def _accumulate(
    ufunc: np.ufunc, values: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> None:
    """Running ``ufunc`` over each profile's slice of ``values``, in place.

    Few profiles: one ``accumulate`` per profile. Many: a segmented
    Hillis-Steele scan (log2 of the longest profile passes over every
    reading), which is exact only for an order-free ``ufunc`` such as fmax,
    fmin, maximum or minimum; sums always go profile by profile, in reading order.
    """
    if len(starts) <= LOOP_PROFILES or ufunc is np.add:
        for start, length in zip(starts.tolist(), lengths.tolist(), strict=True):
            part = values[start : start + length]
            ufunc.accumulate(part, out=part)
        return
    segment = np.repeat(np.arange(len(starts)), lengths)
    step, longest = 1, int(lengths.max())
    while step < longest:
        same = segment[step:] == segment[:-step]
        values[step:] = np.where(same, ufunc(values[step:], values[:-step]), values[step:])
        step *= 2


def _running(
    agg: Aggregate,
    values: np.ndarray,
    meets: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
) -> np.ndarray:
    """Per reading, ``agg`` over its profile's readings up to and including it."""
    count = len(values)
    if agg.kind in ("max", "min"):
        if not np.isnan(agg.initial) and not np.isnan(values).any():
            # Nothing to skip but the readings that do not count, and the initial
            # value seeds each profile: plain maximum (minimum) over -inf (+inf)
            # there gives fmax's (fmin's) values, in half the time.
            plain, fill = (np.maximum, -np.inf) if agg.kind == "max" else (np.minimum, np.inf)
            running = np.where(meets, values, fill)
            running[starts] = plain(agg.initial, running[starts])
            _accumulate(plain, running, starts, lengths)
            return running
        ufunc = np.fmax if agg.kind == "max" else np.fmin
        running = np.where(meets, values, np.nan)
        if not np.isnan(agg.initial):
            # the initial value taken into each profile's first reading: the same
            # maxima (or minima) as taking it into every running value after
            running[starts] = ufunc(agg.initial, running[starts])
        _accumulate(ufunc, running, starts, lengths)
        return running
    if agg.kind in ("sum", "count"):
        running = np.where(meets, values, 0.0)
        running[starts] = agg.initial + running[starts]  # ((initial + v1) + v2) + ...
        _accumulate(np.add, running, starts, lengths)
        return running
    # first / last: the position of the reading whose value it is, then the value
    positions = np.where(meets, np.arange(count, dtype=np.float64), np.nan)
    _accumulate(np.fmin if agg.kind == "first" else np.fmax, positions, starts, lengths)
    found = ~np.isnan(positions)
    result = np.full(count, agg.initial)
    result[found] = values[positions[found].astype(np.int64)]
    return result


@dataclass(frozen=True)
class _Computed:
    """One aggregate of a policy computed over a batch's readings."""

    #: Per reading (sorted by profile), its value up to and including the reading.
    running: np.ndarray
    #: Per wave, its value just before the wave's first reading (the state it is priced from).
    at_waves: np.ndarray
    #: Per profile, whether the aggregate was ever set (kept for a First aggregate only).
    reached: np.ndarray | None
    #: A Points aggregate's answers to the rule's queries (and nothing else above).
    points: PointQueries | None = None


#: Aggregates computed for one policy, for the next policies of the same readings:
#: keyed by the names and objects of a policy's aggregates up to and including one
#: (see :func:`declared_prices`).
Computed = dict[tuple[tuple[str, int], ...], _Computed]


def declared_prices(
    cls: type[DeclaredPolicy],
    columns: dict[str, np.ndarray],
    starts: np.ndarray,
    priced_at: np.ndarray,
    n: np.ndarray,
    m: np.ndarray,
    profiles_wanted: bool = True,
    computed: Computed | None = None,
) -> tuple[np.ndarray, list[DeclaredPolicy]]:
    """``p`` per wave (NaN: no profile) for a declared policy, and each profile as it
    stands after its last reading (none unless ``profiles_wanted``).

    ``columns`` holds every reading's :data:`~warmfit.policies.rule.FIELDS`
    and ``observed``, sorted by profile (each profile's readings side by side,
    in seq order, opening at ``starts``); ``priced_at`` is, per wave, the
    position of the reading just before its first one (-1: none before);
    ``n`` and ``m`` the waves' token counts.

    ``computed``, when given, keeps the aggregates computed here for the next
    policies priced over the same arguments, and gives those an earlier policy
    computed: ``warm-fit`` inherits ``rate_max`` and ``sharing_max`` from
    ``max-merge``, and they are computed once. An aggregate's values depend on
    it and on the aggregates declared before it, which its expressions read by
    name; so it is shared only where the two policies' aggregates, up to and
    including it, are the same objects under the same names (a policy of one's
    own may name an aggregate alike and mean something else).
    """
    lengths = np.diff(np.append(starts, len(columns["observed"])))
    observed = columns["observed"]
    computed = {} if computed is None else computed
    running: dict[str, np.ndarray] = {}
    memo: Memo = {}
    state: dict[str, Any] = {}  # arrays, and PointQueries for Points aggregates
    reached: dict[str, np.ndarray] = {}  # per profile: whether a First aggregate was set
    points_of: dict[str, PointQueries] = {}
    before = np.maximum(priced_at, 0)
    unpriced = np.flatnonzero(priced_at < 0)  # waves before which the profile saw nothing
    key: tuple[tuple[str, int], ...] = ()
    for agg in cls.aggregates:
        key += ((agg.name, id(agg)),)
        if key not in computed:
            meets = (
                observed
                if agg.where is None
                else observed & (evaluate(agg.where, columns, running, memo) != 0)
            )
            values = evaluate(agg.value, columns, running, memo)
            if isinstance(agg, Points):  # the points themselves, asked by the rule
                at = evaluate(agg.at, columns, running, memo)
                kept = meets & ~np.isnan(at) & ~np.isnan(values)
                points = PointQueries(
                    at[kept], values[kept], np.flatnonzero(kept), starts, priced_at
                )
                empty = np.zeros(0)
                computed[key] = _Computed(empty, empty, None, points)
            else:
                values = _running(agg, values, meets, starts, lengths)
                at_waves = values[before]
                at_waves[unpriced] = agg.initial
                first = np.logical_or.reduceat(meets, starts) if isinstance(agg, First) else None
                computed[key] = _Computed(values, at_waves, first)
        done = computed[key]
        if done.points is not None:
            state[agg.name] = done.points  # answers queries; nothing changes it
            points_of[agg.name] = done.points
            continue
        running[agg.name] = done.running
        # a copy: a rule may change its arguments in place, and the values are shared
        state[agg.name] = done.at_waves.copy()
        if done.reached is not None:
            reached[agg.name] = done.reached
    try:
        with np.errstate(all="ignore"):
            p = np.asarray(cls.rule(State(state), n.astype(np.float64), m.astype(np.float64)))
    except Exception as exc:  # a user's rule may fail on arrays in any way
        # Python's max/min/if on arrays ask for an array's truth value; other errors
        # are the rule's own (a typo fails on both engines alike).
        on_arrays = isinstance(exc, ValueError) and "truth value" in str(exc)
        advice = (
            "A declared rule must run on numbers and on numpy arrays alike: use "
            "np.maximum / np.minimum / np.where, not max / min / if."
            if on_arrays
            else "Fix the rule's code."
        )
        raise PolicyError(
            f"policy {cls.name!r}: its rule failed ({type(exc).__name__}: {exc}). {advice}"
        ) from None
    if p.shape != n.shape:
        raise PolicyError(
            f"policy {cls.name!r}: its rule gave shape {p.shape} for {len(n)} waves; it must "
            "return one price per wave (NaN for no profile)."
        )
    if not profiles_wanted:
        return p, []
    last = starts + lengths - 1
    finals = {name: values[last] for name, values in running.items()}
    profiles = []
    for j in range(len(starts)):
        profile = cls()
        profile.state = {name: float(values[j]) for name, values in finals.items()}
        profile.state |= {name: points.final(j) for name, points in points_of.items()}
        profile.first_seen = {name for name, met in reached.items() if met[j]}
        profiles.append(profile)
    return p, profiles


#: The widest range of whole-number sizes :class:`PointQueries` counts by a table (8 MiB
#: of counts): replay -p envelope of 1e7 readings (sizes 1k-32k tokens) spent 17% of its
#: point queries' CPU in a binary search per wave to rank its size, about 1% so.
SIZE_TABLE = 2**20


class PointQueries:
    """A :class:`~warmfit.policies.rule.Points` aggregate at every wave at once: the
    neighbour queries of :class:`~warmfit.policies.rule.PointSet`, each wave asking
    about its profile's points measured before it.

    Each query is a two-dimensional one (points measured *before* the wave, at a
    size *not above* ``x``), answered on dyadic blocks of each profile's points
    in the order they were measured: a wave that follows ``L`` of its profile's
    points sees them as at most ``log2(L) + 1`` whole blocks (one per bit of
    ``L``). Per level, every block is sorted by size once, with the running
    largest value along it; a wave then finds, in each of its blocks, the last
    point at a size not above ``x`` (``below``, ``top``), and the first at a size
    not below it (``above``) beside it. Every answer is a measured
    size or value, so exact.

    One binary search per wave, not one per block: the blocks of a level pair
    into the next level's, so the wave searches the one block of ``2**levels``
    points that holds every point it has seen and walks down towards its count
    ``L``, level by level, keeping how many points of its block lie at sizes not
    above ``x``; each sorted position keeps how many points before it came from a
    left half, so the count splits between the halves by two look-ups
    (fractional cascading). Where bit ``k`` of ``L`` is set, the left half is one
    of the wave's whole blocks. Cost: ``O(P log P log L)`` for ``P`` points to
    sort the levels, ``O(log P + log L)`` per wave (a search per block cost
    replay of 1e7 readings about 13% more CPU in the point queries).
    """

    def __init__(
        self,
        at: np.ndarray,
        values: np.ndarray,
        positions: np.ndarray,
        starts: np.ndarray,
        priced_at: np.ndarray,
    ) -> None:
        #: Each point's size and value, and its position among the readings (sorted by
        #: profile: each profile's points side by side, in the order measured).
        self.at, self.values = at, values
        profile = np.searchsorted(starts, positions, side="right") - 1
        #: Per profile, the index of its first point (its points follow it).
        self.first = np.searchsorted(positions, starts, side="left")
        self._point_first = self.first[profile]
        self._rank = np.arange(len(at)) - self._point_first  # within its profile
        #: The waves in (profile, time) order: every per-wave array below and every
        #: answer while it is found lie in this order, so that each level's waves are
        #: an ascending run of positions (gathers and scatters walk memory forward)
        #: and the searches get their needles near sorted (numpy's searches are
        #: faster so); the answers are put back in the waves' order once, at the end.
        self._in_order = np.argsort(priced_at, kind="stable")
        priced_at = priced_at[self._in_order]
        wave_profile = np.searchsorted(starts, np.maximum(priced_at, 0), side="right") - 1
        #: Per wave, the first point of its profile and how many it had measured.
        self._wave_first = self.first[wave_profile]
        counted = np.searchsorted(positions, priced_at, side="right") - self._wave_first
        self._seen = np.where(priced_at >= 0, counted, 0)
        # sizes and values ranked from one sort each (a search per point costs more)
        self._sizes, self._size_rank = np.unique(at, return_inverse=True)
        #: Where every size is a whole number within SIZE_TABLE of the smallest (token
        #: counts): per whole number from the smallest size, how many sizes lie at or
        #: below it, so that a query's count is one look-up, not a binary search.
        self._counts: np.ndarray | None = None
        sizes = self._sizes
        narrow = len(sizes) > 0 and np.isfinite(sizes[[0, -1]]).all()
        if narrow and sizes[-1] - sizes[0] < SIZE_TABLE and (sizes == np.floor(sizes)).all():
            marks = np.zeros(int(sizes[-1] - sizes[0]) + 1, dtype=np.intp)
            marks[(sizes - sizes[0]).astype(np.intp)] = 1
            self._counts = np.cumsum(marks)
        self._tops, self._value_rank = np.unique(values, return_inverse=True)
        self._levels: list[_Level] = []
        #: Each level's order of the points (by block, then size; ties as measured).
        self._orders: list[np.ndarray] = []
        #: The last queries asked, as copies known by their values (a rule may change an
        #: array in place between two asks), and their answers (handed out as copies).
        self._memo: list[tuple[np.ndarray, _Answer]] = []

    def final(self, profile: int) -> PointSet:
        """The profile's points after its last reading, as the reference engine holds them."""
        end = self.first[profile + 1] if profile + 1 < len(self.first) else len(self.at)
        begin = self.first[profile]
        return PointSet.of(self.at[begin:end], self.values[begin:end])

    def _level(self, k: int) -> _Level:
        """Level ``k``'s blocks of ``2**k`` points (built once, when first asked)."""
        while len(self._levels) <= k:
            level = len(self._levels)
            block = self._point_first + (self._rank >> level)  # unique across profiles
            width = len(self._sizes) + 1
            key = block * width + self._size_rank
            # From the last level's order: its blocks, sorted, pair into this level's, so
            # the stable sort merges sorted runs (the same order as sorting the points'
            # own order: ties keep the order measured, the left block's first)
            last = self._orders[-1] if self._orders else np.arange(len(key))
            order = last[np.argsort(key[last], kind="stable")]
            self._orders.append(order)
            key, block = key[order], block[order]
            # blocks ascend, so a running maximum of (block, value rank) stays in its block
            height = len(self._tops)
            running = np.maximum.accumulate(block * height + self._value_rank[order])
            tops = self._tops[running - block * height]
            # each point's run of points at its size, in its block: the top at its end
            ends = np.flatnonzero(np.append(key[1:] != key[:-1], True))
            run = np.cumsum(np.concatenate(([True], key[1:] != key[:-1]))) - 1
            # per sorted position, how many before it (from 0) came from a left half:
            # a block's count below a size splits into its halves' from two of these
            left_born = ((self._rank[order] >> max(level - 1, 0)) & 1) == 0  # unused at 0
            born = np.concatenate(([0], np.cumsum(left_born)))
            self._levels.append(_Level(key, self.at[order], tops, tops[ends][run], born))
        return self._levels[k]

    def _ask(self, x: np.ndarray) -> _Answer:
        """Per wave, over the points it has seen: the nearest sizes not above and not
        below ``x``, the top at the first, and the top of the points *at* the second
        (what :meth:`top` of it needs beyond ``top(x)``). In each block one search finds
        the last point at a size not above ``x``; the next point in the block, or that
        one where its size is ``x``, is the first not below. The last answers are kept:
        the rule asks ``below``, ``above`` and ``top`` of one ``x``."""
        for asked, answer in self._memo:
            if np.array_equal(asked, x, equal_nan=True):
                return answer
        query = np.broadcast_to(np.asarray(x, dtype=np.float64), self._seen.shape)
        query = query[self._in_order]  # (profile, time) order, as the answers are found
        answer = _Answer(*(np.full(len(query), np.nan) for _ in range(4)))
        # Each wave walks down from the block of 2**levels points holding all it has
        # seen, towards its count: `start` is where its block lies in that level's
        # sorted order, `below` how many of the block's points are at sizes not above x
        walking = np.flatnonzero(~np.isnan(query) & (self._seen > 0))
        seen, start = self._seen[walking], self._wave_first[walking]
        # Points with a size rank below `bound` are at sizes not above x.
        bound = self._count_not_above(query[walking])
        levels = int(seen.max(initial=0)).bit_length()
        if len(walking):
            key = self._level(levels).key
            target = start * (len(self._sizes) + 1) + bound  # block `start`, x
            below = np.searchsorted(key, target, side="left") - start
        for k in reversed(range(levels)):
            level, parent = self._level(k), self._level(k + 1)
            # the block's left half holds the points of the level below's block that starts
            # where it starts; so many of those are at sizes not above x
            left = parent.left_born[start + below] - parent.left_born[start]
            right = ((seen >> k) & 1) != 0
            # where bit k of the count is set, the left half is one of the wave's whole
            # blocks (points it has seen) and the walk goes on in the right half
            waves, begin = walking[right], start[right]
            after = begin + left[right]
            start = np.where(right, start + (1 << k), start)
            below = np.where(right, below - left, left)
            if not len(waves):
                continue
            # the wave's block holds the sorted positions begin .. begin + 2**k - 1
            end = begin + (1 << k)
            at = after - 1  # the last point not above x, where it is in the block
            inside = at >= begin
            low, at = waves[inside], at[inside]
            size_at = level.sizes[at]
            answer.below[low] = np.fmax(answer.below[low], size_at)
            answer.top[low] = np.fmax(answer.top[low], level.tops[at])
            # the first point not below x: x itself where the last one not above is at x
            on_x = np.zeros(len(waves), dtype=bool)
            on_x[inside] = size_at == query[low]
            first = np.where(on_x, after - 1, after)
            inside = on_x | (first < end)
            high, first = waves[inside], first[inside]
            found, found_top = level.sizes[first], level.run_tops[first]
            was, top_was = answer.above[high], answer.above_top[high]
            nearer = np.isnan(was) | (found < was)  # the nearest; the larger top on a tie
            answer.above[high] = np.where(nearer, found, was)
            answer.above_top[high] = np.where(
                nearer, found_top, np.where(found == was, np.fmax(top_was, found_top), top_was)
            )
        # back in the waves' order
        found = (answer.below, answer.top, answer.above, answer.above_top)
        answer = _Answer(*(_scattered(values, self._in_order) for values in found))
        self._memo = [*self._memo[-3:], (np.array(x, dtype=np.float64), answer)]
        return answer

    def _count_not_above(self, x: np.ndarray) -> np.ndarray:
        """Per query (not NaN), how many of the sizes lie at or below it."""
        if self._counts is None:
            return np.searchsorted(self._sizes, x, side="right")
        # whole sizes: those not above x are those not above floor(x)
        offset = np.clip(np.floor(x) - self._sizes[0], -1, len(self._counts) - 1)
        index = offset.astype(np.intp)
        return np.where(index < 0, 0, self._counts[np.maximum(index, 0)])

    def below(self, x: np.ndarray) -> np.ndarray:
        return self._ask(x).below.copy()

    def above(self, x: np.ndarray) -> np.ndarray:
        return self._ask(x).above.copy()

    def top(self, x: np.ndarray) -> np.ndarray:
        # top(above(y)) = the larger of top(y) and the top of the points at above(y)
        # in the blocks where it lies (elsewhere no point lies in (y, above(y)]): both
        # from the search for y, so no second search
        for _, answer in self._memo:
            if np.array_equal(answer.above, x, equal_nan=True):
                both = np.fmax(answer.top, answer.above_top)
                return np.where(np.isnan(answer.above), np.nan, both)
        return self._ask(x).top.copy()


def _scattered(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``values`` given in ``order`` (a permutation), put back in the original order."""
    out = np.empty_like(values)
    out[order] = values
    return out


@dataclass(frozen=True)
class _Answer:
    """What :meth:`PointQueries._ask` finds for one query, per wave (NaN: none)."""

    below: np.ndarray
    top: np.ndarray
    above: np.ndarray
    #: The top of the points at ``above`` in the blocks where it lies.
    above_top: np.ndarray


@dataclass(frozen=True)
class _Level:
    """One level of :class:`PointQueries`: its points sorted by (block, size rank)."""

    #: ``block * (distinct sizes + 1) + size rank``, ascending.
    key: np.ndarray
    #: Each point's size and, along its block, the largest value up to it.
    sizes: np.ndarray
    tops: np.ndarray
    #: The largest value up to the last point of its block at its size.
    run_tops: np.ndarray
    #: Per sorted position ``i`` (and one past the last), how many points before
    #: ``i`` came from the left half of their block (the level below's even block).
    left_born: np.ndarray


def _fits_exactly(readings: pl.DataFrame, recorded: bool = False) -> bool:
    exact = ["packed_tokens", "logical_tokens", "output_bytes", "peak_bytes", "static_floor_bytes"]
    if recorded and ESTIMATE_COLUMN in readings.columns:  # over-estimates divide them
        exact.append(ESTIMATE_COLUMN)
    limits = readings.select(pl.max_horizontal(pl.col(c).max() for c in exact)).item()
    return limits is None or limits < EXACT_LIMIT


def replay_vectorized(
    readings: pl.DataFrame,
    policies: Sequence[type[Policy]],
    safety_factor: float,
    profiles_out: dict[ProfileKey, Policy] | None = None,
    recorded: bool = False,
) -> pl.DataFrame | None:
    """Replay readings with every policy's declaration at once; same result as the reference.

    ``readings`` is a validated trace sorted by run, rank and seq, as
    :func:`warmfit.replay.replay_scalar` takes it; the result is the one
    :func:`~warmfit.replay.replay_scalar` returns, row for row and byte for
    byte (:data:`warmfit.replay.semantics.PER_WAVE_SCHEMA`) — or None where
    doubles could not give those bytes exactly (see the module's docstring).
    ``profiles_out``, when given, receives every profile as it stands after the
    trace, as :func:`~warmfit.replay.replay_scalar` gives them; ``recorded``: the
    policy ``recorded`` last, as there.
    """
    priced = price_waves(readings, policies, safety_factor, profiles_out, recorded=recorded)
    if priced is None:
        return None
    names = [cls.name for cls in policies] + ([RECORDED] if recorded else [])
    return per_wave_frame(readings, priced, names)


@dataclass(frozen=True)
class PricedWaves:
    """Every wave of some readings priced by every policy, as arrays (no strings).

    Waves come in the order of their first readings; the ``(wave, policy)``
    arrays are raveled wave-major, policies in the order given.
    """

    #: Per wave, the position of its first reading in the readings.
    first: np.ndarray
    #: Per wave, its actual bytes (the largest delta of its readings).
    actual: np.ndarray
    #: Per wave, whether any of its readings ran out of memory.
    oom: np.ndarray
    #: Per (wave, policy), the estimate in bytes; -1 where the wave is unpriced.
    estimate: np.ndarray
    #: Per (wave, policy), what set the estimate: 0 nothing, 1 the profile, 2 the floor,
    #: 3 the trainer's recorded price (:data:`~warmfit.replay.semantics.SETTERS`).
    set_by: np.ndarray
    #: Per wave, whether its packed tokens exceed every observed reading's of its
    #: profile before it (SPEC §8; False where nothing was observed).
    beyond: np.ndarray
    #: Per (wave, policy), the bytes before the safety factor (``o + compute``; -1:
    #: unpriced), from which a wave's smallest safe factor follows.
    unscaled: np.ndarray
    #: Per profile, :func:`warmfit.format.trace.reading_counts`' columns (run, signature, counts).
    counts: pl.DataFrame | None = None


def price_waves(
    readings: pl.DataFrame,
    policies: Sequence[type[Policy]],
    safety_factor: float,
    profiles_out: dict[ProfileKey, Policy] | None = None,
    checked: Canonical | None = None,
    recorded: bool = False,
) -> PricedWaves | None:
    """Every wave's actual bytes and every policy's estimate, without building rows.

    The figures of :func:`replay_vectorized` before they become a frame (a
    summary needs no strings); None where doubles could not give the
    reference engine's bytes. ``checked``: what :func:`warmfit.format.trace.canonical`
    found of how the rows lie (stream numbers, order by wave, signature
    codes), not computed again. ``recorded``: the policy ``recorded`` last (SPEC §8:
    each wave's first non-null ``estimate_bytes``, as :func:`replay_scalar` gives it).
    """
    declared = [_declared(cls) for cls in policies]
    if readings.height == 0 or not (policies or recorded):
        empty = np.zeros(0, dtype=np.int64)
        none = empty.astype(bool)
        return PricedWaves(empty, empty, none, empty, empty.astype(np.uint32), none, empty)
    if not _fits_exactly(readings, recorded):
        return None

    # Per reading: delta, rate and sharing, with Python's arithmetic (SPEC §4).
    n = _ints(readings, "packed_tokens")
    delta = np.maximum(_ints(readings, "peak_bytes") - _ints(readings, "baseline_bytes"), 0)
    output = _ints(readings, "output_bytes")
    compute = np.maximum(delta - output, 0)
    rate = compute / n
    logical = _ints(readings, "logical_tokens")
    sharing = logical / n
    # Streams are contiguous (sorted by run, rank, seq): number them, then profiles.
    wave = _ints(readings, "wave")
    if checked is None:
        stream, signature = stream_numbers(readings), signature_codes(readings)
        order = wave_order(stream, wave)
    else:
        stream, signature, order = checked.stream, checked.signature, checked.by_wave
    stream = stream.astype(np.int64)

    # Per wave, with readings in (stream, wave) order: its first reading, its
    # actual bytes and whether it ran out of memory. Waves then come in the
    # order of their first readings, as the reference engine emits them.
    wave_stream = stream if order is None else stream[order]
    if order is not None:
        wave = wave[order]
    starts = np.flatnonzero(
        np.concatenate(([True], (np.diff(wave_stream) != 0) | (np.diff(wave) != 0)))
    )
    del wave_stream, wave
    by_first: np.ndarray | None = None
    if order is None:  # each wave's readings side by side, waves in order: nothing to sort
        first = starts
        actual = np.maximum.reduceat(delta, starts)
    else:
        first = order[starts]
        by_first = np.argsort(first, kind="stable")
        first = first[by_first]
        actual = np.maximum.reduceat(delta[order], starts)[by_first]
    oom_reading = readings.get_column("oom").to_numpy()
    caller = (readings.get_column("phase") == "caller").to_numpy()
    split_child = (readings.get_column("kind") == "split_child").to_numpy()
    observed_reading = observed(split_child, caller, oom_reading)
    # the waves holding a reading that ran out of memory (few: found from those readings)
    oom = np.zeros(len(first), dtype=bool)
    if oom_reading.any():
        ooms = np.flatnonzero(oom_reading if order is None else oom_reading[order])
        oom[np.searchsorted(starts, ooms, side="right") - 1] = True
        if by_first is not None:
            oom = oom[by_first]
    paid = None
    if recorded:  # the trainer's price: the first non-null one of the wave's readings
        paid = _recorded_prices(readings, order, starts)
        if by_first is not None:
            paid = paid[by_first]
    del order, starts, by_first

    # Readings sorted by profile, each profile's readings side by side in
    # seq order; each wave's state is read just before its first reading.
    profile = _dense(stream * (int(signature.max()) + 1) + signature)
    del stream, signature
    by_profile = _profile_order(profile)
    sorted_profile = profile[by_profile]
    opens = np.concatenate(([True], sorted_profile[1:] != sorted_profile[:-1]))
    whole = readings.get_column("whole").to_numpy()
    tallies = _tallies(readings, profile, whole, oom_reading)
    del profile, sorted_profile
    position = np.empty(len(by_profile), dtype=np.int64)
    position[by_profile] = np.arange(len(by_profile))
    at = position[first]
    del position
    priced_at = np.where(opens[at], -1, at - 1)
    # Every reading's fields as the declarations read them (warmfit.policies.rule.FIELDS),
    # each made when an expression first reads it.
    columns = _Columns(
        by_profile,
        packed_tokens=n,
        logical_tokens=logical,
        delta_bytes=delta,
        output_bytes=output,
        compute_bytes=compute,
        rate=rate,
        sharing=sharing,
        whole=whole,
        caller=caller,
    )
    columns["observed"] = observed_reading[by_profile]
    profile_starts = np.flatnonzero(opens)
    by_profile_first = by_profile[profile_starts]
    counts = readings.select("run", "signature").gather(by_profile_first).with_columns(**tallies)
    # Per wave, from its first reading: the wave constants a price reads.
    m, o = logical[first], output[first]
    n = n[first]
    beyond = _beyond(columns, profile_starts, priced_at, n)
    static_floor = readings.get_column("static_floor_bytes")
    if static_floor.null_count() == 0:
        floor, has_floor = static_floor.to_numpy()[first], np.ones(len(first), dtype=bool)
    else:
        has_floor = static_floor.is_not_null().to_numpy()[first]
        floor = static_floor.fill_null(0).to_numpy()[first]
    # (the fields themselves are kept by columns until the policies have read them)
    del by_profile, opens, rate, sharing, compute, oom_reading, observed_reading, delta
    del output, logical, whole, caller, split_child, static_floor

    # Per wave and policy: p, then the estimate (SPEC §3), in numpy.
    estimates_of: list[np.ndarray] = []
    set_by: list[np.ndarray] = []
    unscaled_of: list[np.ndarray] = []
    # Each profile's (run, rank, signature), from its first reading.
    owners: list[tuple[str, int, str]] = (
        readings.select("run", "rank", "signature").gather(by_profile_first).rows()
        if profiles_out is not None
        else []
    )
    computed: Computed = {}  # aggregates policies share (see declared_prices)
    for cls in declared:
        p, finals = declared_prices(
            cls, columns, profile_starts, priced_at, n, m, profiles_out is not None, computed
        )
        if profiles_out is not None:
            for owner, final in zip(owners, finals, strict=True):
                profiles_out[(*owner, cls.name)] = final
        arithmetic = estimates(p, o, floor, has_floor, safety_factor)
        if arithmetic is None:
            return None
        estimates_of.append(arithmetic[0])
        set_by.append(arithmetic[1])
        unscaled_of.append(arithmetic[2])

    if paid is not None:  # recorded, last: not scaled, its price its own bytes
        estimates_of.append(paid)
        set_by.append(np.where(paid >= 0, SETTERS.index(RECORDED) + 1, 0))
        unscaled_of.append(paid)

    # One row per wave and policy, policies in the order given.
    estimate = np.stack(estimates_of, axis=1).ravel()
    del estimates_of
    # set_by: index into SETTERS plus one, 0 when unpriced
    code = np.stack(set_by, axis=1).ravel().astype(np.uint32)
    unscaled = np.stack(unscaled_of, axis=1).ravel()
    return PricedWaves(first, actual, oom, estimate, code, beyond, unscaled, counts)


def _recorded_prices(
    readings: pl.DataFrame, order: np.ndarray | None, starts: np.ndarray
) -> np.ndarray:
    """Per wave in (stream, wave) order, the trainer's recorded price (-1: none):
    :func:`~warmfit.replay.semantics.first_recorded` over the readings in that order
    (``order``; None: they are), each wave's opening at ``starts``."""
    if ESTIMATE_COLUMN not in readings.columns:
        return np.full(len(starts), -1, dtype=np.int64)
    prices = readings.get_column(ESTIMATE_COLUMN).cast(pl.Int64).fill_null(-1).to_numpy()
    return first_recorded(prices if order is None else prices[order], starts)


def _beyond(
    columns: dict[str, np.ndarray], starts: np.ndarray, priced_at: np.ndarray, n: np.ndarray
) -> np.ndarray:
    """Per wave, whether its ``n`` packed tokens exceed those of every reading its profile
    observed before it (SPEC §8): a running maximum per profile, read as the prices are."""
    largest = np.where(columns["observed"], columns["packed_tokens"], np.nan)
    lengths = np.diff(np.append(starts, len(largest)))
    _accumulate(np.fmax, largest, starts, lengths)
    seen = np.where(priced_at >= 0, largest[np.maximum(priced_at, 0)], np.nan)
    return n > seen  # NaN (nothing observed) compares false


class _Columns(dict[str, np.ndarray]):
    """The readings' fields sorted by profile, as doubles, each made when first read.

    A policy's expressions read a few of :data:`~warmfit.policies.rule.FIELDS`
    (max-merge and warm-fit none of the byte counts but the rate): a field is
    gathered into profile order and converted only when read. ``fields`` gives
    each reading's values in the readings' order.
    """

    def __init__(self, order: np.ndarray, **fields: np.ndarray) -> None:
        super().__init__()
        self._order = order
        self._fields = fields

    def __missing__(self, name: str) -> np.ndarray:
        values = self._fields[name][self._order].astype(np.float64, copy=False)
        self[name] = values
        return values


def _tallies(
    readings: pl.DataFrame, profile: np.ndarray, whole: np.ndarray, oom: np.ndarray
) -> dict[str, pl.Series]:
    """Per (dense) profile, what :func:`warmfit.format.trace.reading_counts` counts per run and
    signature: readings, flat ones, whole ones that did not run out of memory, oom ones
    (``whole`` and ``oom``: the readings' columns)."""
    flat = (readings.get_column("kind") == "flat").to_numpy()
    every = np.ones(len(profile), dtype=bool)
    counts = condition_counts(profile, int(profile.max()) + 1, [every, flat, whole & ~oom, oom])
    names = ("readings", "flat_readings", "whole_readings", "oom_readings")
    return {name: pl.Series(counts[:, i]) for i, name in enumerate(names)}


def per_wave_frame(
    readings: pl.DataFrame, priced: PricedWaves, names: Sequence[str]
) -> pl.DataFrame:
    """The per-wave rows (:data:`~warmfit.replay.semantics.PER_WAVE_SCHEMA`) of priced waves."""
    if not len(priced.first) or not names:
        return pl.DataFrame(schema=PER_WAVE_SCHEMA)
    count = len(names)
    estimate, code = priced.estimate, priced.set_by
    valid = estimate >= 0
    per_row_actual = np.repeat(priced.actual, count)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = estimate.astype(np.float64) / per_row_actual.astype(np.float64) - 1
    policy = pl.Series(list(names), dtype=pl.String)
    rows = readings.select(*_WAVE_KEY, *WAVE_CONSTANT).gather(np.repeat(priced.first, count))
    return rows.with_columns(
        policy=policy.gather(np.tile(np.arange(count, dtype=np.uint32), len(priced.first))),
        actual_bytes=pl.Series(per_row_actual),
        estimate_bytes=nullable(estimate, valid),
        set_by=pl.Series(SETTERS).gather(nullable(code - 1, code > 0)),
        over_estimate=nullable(over, valid & (per_row_actual > 0)),
        under_peak=nullable(estimate < per_row_actual, valid),
        oom=pl.Series(np.repeat(priced.oom, count)),
        beyond=nullable(np.repeat(priced.beyond, count), valid),
    ).select(pl.col(name).cast(dtype) for name, dtype in PER_WAVE_SCHEMA.items())


def _declared(cls: type[Policy]) -> type[DeclaredPolicy]:
    if not is_declared(cls):
        raise PolicyError(
            f"policy {cls.name!r} is not declared (warmfit.policies.rule.DeclaredPolicy), so "
            "only the reference engine can replay it: use the scalar or auto engine."
        )
    return cls  # type: ignore[return-value]


def _dense(key: np.ndarray) -> np.ndarray:
    """Number the distinct values of a non-negative int64 key 0, 1, ... in order."""
    high = int(key.max())
    if high < 4 * len(key) + 2**16:
        present = np.zeros(high + 1, dtype=np.int64)
        present[key] = 1
        return (np.cumsum(present) - 1)[key]
    return np.unique(key, return_inverse=True)[1].reshape(-1)


def _profile_order(profile: np.ndarray) -> np.ndarray:
    """A stable order of readings by (dense) profile number: a radix sort when it fits 16 bits."""
    if int(profile.max()) < 2**16:
        return np.argsort(profile.astype(np.uint16), kind="stable")
    return np.argsort(profile, kind="stable")


def _ints(frame: pl.DataFrame, column: str) -> np.ndarray:
    """A non-null integer column as an int64 numpy array."""
    return frame.get_column(column).cast(pl.Int64).to_numpy()


_WAVE_KEY = ("run", "rank", "wave")
