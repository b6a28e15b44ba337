"""The vectorized replay engine: every wave of a trace priced at once (SPEC §3).

Each state of the built-in policies (SPEC §4) is a running maximum, minimum
or count over the readings a profile observed, so the state a wave is priced
from is an *exclusive* cumulative aggregate per ``(run, rank, signature)``,
taken at the wave's first reading over the readings strictly before it. This
module computes those aggregates in numpy on the readings sorted by profile
(``fmax``/``fmin`` accumulations, exact in any order), with no Python loop
over readings, and gives exactly what
:func:`warmfit.replay.replay_scalar` gives: the same rows in the same order,
the same bytes, the same floats.

A policy opts in by naming its :class:`VectorizedForm` in its ``vectorized``
class attribute (``"module:NAME"``). A form has two halves: ``state``, the
policy's fields as running aggregates over a :class:`Profiles` (numpy
arrays, per wave), and ``price``, the policy's ``price`` arithmetic over
numpy arrays of those fields taken at each wave's first reading. The engine
then applies the estimate arithmetic of :func:`warmfit.replay.estimate_bytes`.

Exactness: every division and multiplication is numpy's, on IEEE doubles, as
Python's; integers convert to doubles exactly below 2**53. A trace whose token or byte
counts reach 2**53 (8 PiB), or whose prices would not fit an int64, is
replayed by the reference engine instead, so the result never differs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from warmfit.errors import PolicyError
from warmfit.policies import Policy
from warmfit.schema import WAVE_CONSTANT

#: Below this, every int64 column converts to a double exactly.
EXACT_LIMIT = 2**53
#: Prices and estimates (as doubles) stay below this, so int64 arithmetic on them is exact.
PRICE_LIMIT = 2**61


class Profiles:
    """The readings of a trace as a vectorized form's ``state`` sees them.

    The engine sorts the readings by profile (stably, so each profile's
    readings stay in ``seq`` order and lie side by side) and hands a form
    this view: every attribute is a numpy array with one entry per reading,
    in that order. A reading is *observed* unless it ran out of memory
    and is not a split child's caller reading (SPEC §3). :meth:`max_before` and :meth:`min_before` give, per wave, the
    running maximum or minimum over the profile's readings strictly before
    the wave's first reading: the profile's state when the wave is priced.
    They are running maxima and minima only (exact in any order, so the
    result is the reference engine's to the bit): arithmetic belongs in a
    form's ``price``.
    """

    def __init__(
        self,
        columns: dict[str, np.ndarray],
        starts: np.ndarray,
        priced_at: np.ndarray,
    ) -> None:
        #: ``n`` per reading (int64).
        self.packed_tokens: np.ndarray = columns["packed_tokens"]
        self.whole: np.ndarray = columns["whole"]
        #: The reading is learned from (:func:`warmfit.replay.is_observed`): it did
        #: not run out of memory and is not a split child's caller reading.
        self.observed: np.ndarray = columns["observed"]
        #: ``max(0, delta - o) / n`` (SPEC §4), a double, as :attr:`Reading.rate`.
        self.rate: np.ndarray = columns["rate"]
        #: ``m / n``, a double, as :attr:`Reading.sharing`.
        self.sharing: np.ndarray = columns["sharing"]
        #: Compute bytes ``max(0, delta - o)``, as a double (exact below 2**53).
        self.compute: np.ndarray = columns["compute"]
        self._starts = starts
        self._lengths = np.diff(np.append(starts, len(self.rate)))
        # Per wave: the position of the reading before its first one, -1
        # when its first reading opens the profile (nothing came before).
        self._before = priced_at
        self._cache: dict[tuple[str, int, int], tuple[object, object, np.ndarray]] = {}
        self._scratch: np.ndarray | None = None

    def seen_before(self, condition: np.ndarray) -> np.ndarray:
        """Per reading: whether an earlier reading of its profile meets ``condition``."""
        meets = np.append(np.flatnonzero(condition), len(condition))
        ends = self._starts + self._lengths
        # Per profile, the first reading that meets it (its end when none does).
        at = np.searchsorted(meets, self._starts)
        first = np.minimum(meets[at], ends)
        # +1 from just after that reading to the profile's end: a running sum
        # of 0s and 1s, since profiles do not overlap.
        some = first + 1 < ends
        edges = np.zeros(len(condition) + 1, dtype=np.int8)
        edges[first[some] + 1] += 1
        edges[ends[some]] -= 1
        return np.cumsum(edges[:-1], dtype=np.int8).view(np.bool_)

    def first(self, value: np.ndarray, where: np.ndarray) -> np.ndarray:
        """Per reading: ``value`` at the first reading of its profile that meets
        ``where`` (the same for every reading of the profile); NaN where none does."""
        meets = np.append(np.flatnonzero(where), len(where))
        ends = self._starts + self._lengths
        first = np.minimum(meets[np.searchsorted(meets, self._starts)], ends)
        found = first < ends
        per_profile = np.full(len(first), np.nan)
        per_profile[found] = value[first[found]]
        return np.repeat(per_profile, self._lengths)

    def max_before(self, value: np.ndarray, where: np.ndarray) -> np.ndarray:
        """Per wave: the largest ``value`` over the profile's earlier readings that
        meet ``where``; NaN where there is none."""
        return self._running(np.fmax, value, where)

    def min_before(self, value: np.ndarray, where: np.ndarray) -> np.ndarray:
        """Per wave: the smallest, as :meth:`max_before`."""
        return self._running(np.fmin, value, where)

    def _running(self, ufunc: np.ufunc, value: np.ndarray, where: np.ndarray) -> np.ndarray:
        key = (ufunc.__name__, id(value), id(where))
        hit = self._cache.get(key)
        if hit is not None and hit[0] is value and hit[1] is where:
            return hit[2]
        if self._scratch is None:
            self._scratch = np.empty(len(value), dtype=np.float64)
        running = self._scratch
        running.fill(np.nan)
        np.copyto(running, value, where=where)
        _accumulate(ufunc, running, self._starts, self._lengths)
        before = self._before
        result = running[np.maximum(before, 0)]
        result[before < 0] = np.nan
        self._cache[key] = (value, where, result)
        return result


#: Up to this many profiles, running aggregates go profile by profile.
LOOP_PROFILES = 20_000


def _accumulate(
    ufunc: np.ufunc, values: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> None:
    """Running ``ufunc`` (fmax or fmin) over each profile's slice of ``values``, in place.

    Few profiles: one ``accumulate`` per profile. Many: a segmented
    Hillis-Steele scan (log2 of the longest profile passes over every
    reading), exact too, since a maximum or minimum is exact in any order.
    """
    if len(starts) <= LOOP_PROFILES:
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


@dataclass(frozen=True)
class VectorizedForm:
    """A policy's vectorized form: its state as running aggregates, and its price.

    ``state`` takes a :class:`Profiles` and maps names to numpy arrays: the
    policy's fields, per wave, as they stand when the wave is priced (NaN:
    unset), built from :meth:`Profiles.max_before` and
    :meth:`Profiles.min_before`. ``price`` takes those fields and the
    wave's packed and logical tokens, and returns ``p`` per wave (NaN: no
    profile), doing the policy's float arithmetic in the same order as its
    ``price`` method, on IEEE doubles as Python does.
    """

    state: Callable[[Profiles], dict[str, np.ndarray]]
    price: Callable[[dict[str, np.ndarray], np.ndarray, np.ndarray], np.ndarray]


def _max_merge_state(v: Profiles) -> dict[str, np.ndarray]:
    sharing_max = v.max_before(v.sharing, v.observed)
    return {
        "rate_max": v.max_before(v.rate, v.observed),
        # sharing_max starts at 1.0 and every sharing is >= 1.0
        "sharing_max": np.where(np.isnan(sharing_max), 1.0, sharing_max),
    }


def _max_merge_price(state: dict[str, np.ndarray], n: np.ndarray, m: np.ndarray) -> np.ndarray:
    # MaxMerge.price: rate_max * max(n, m / sharing_max)
    return state["rate_max"] * np.maximum(n, m / state["sharing_max"])


#: :class:`~warmfit.policies.MaxMerge` at once: ``rate_max * max(n, m / sharing_max)``.
MAX_MERGE = VectorizedForm(_max_merge_state, _max_merge_price)


def _warm_fit_state(v: Profiles) -> dict[str, np.ndarray]:
    # The seed is the profile's first observed whole reading; a reading is
    # warm when the seed came strictly before it.
    warm = v.observed & v.seen_before(v.whole & v.observed)
    warm_whole = warm & v.whole
    warm_rate = v.max_before(v.rate, warm)
    warm_sharing = v.max_before(v.sharing, warm_whole)
    return {
        **_max_merge_state(v),
        # warm_rate starts at 0.0 and every rate is >= 0.0
        "warm_rate": np.where(np.isnan(warm_rate), 0.0, warm_rate),
        "warm_tokens": v.min_before(v.packed_tokens, warm_whole),
        "warm_sharing": np.where(np.isnan(warm_sharing), 1.0, warm_sharing),
    }


def _warm_fit_price(state: dict[str, np.ndarray], n: np.ndarray, m: np.ndarray) -> np.ndarray:
    # WarmFit.price: max-merge until warm_tokens is set, then
    # min(max_merge, warm_rate * max(warm_tokens, max(n, m / warm_sharing)))
    max_merge = _max_merge_price(state, n, m)
    warm_tokens = state["warm_tokens"]
    with np.errstate(invalid="ignore"):
        warm = state["warm_rate"] * np.maximum(
            warm_tokens, np.maximum(n, m / state["warm_sharing"])
        )
        return np.where(np.isnan(warm_tokens), max_merge, np.minimum(max_merge, warm))


#: :class:`~warmfit.policies.WarmFit` at once: the seed, then the warm fit's running fields.
WARM_FIT = VectorizedForm(_warm_fit_state, _warm_fit_price)


def _warm_affine_state(v: Profiles) -> dict[str, np.ndarray]:
    # The anchor is the profile's first warm whole reading (the same reading
    # that first sets warm_tokens); marginal rates are taken against it.
    warm = v.observed & v.seen_before(v.whole & v.observed)
    warm_whole = warm & v.whole
    anchor_tokens = v.first(v.packed_tokens.astype(np.float64), warm_whole)
    anchor_bytes = v.first(v.compute, warm_whole)
    at_anchor = warm_whole & (v.packed_tokens == anchor_tokens)
    elsewhere = warm_whole & ~at_anchor
    with np.errstate(invalid="ignore", divide="ignore"):
        marginal = (v.compute - anchor_bytes) / (v.packed_tokens - anchor_tokens)
    below = v.max_before(v.compute, elsewhere & (v.packed_tokens < anchor_tokens))
    return {
        **_warm_fit_state(v),
        "anchor_tokens": v.max_before(anchor_tokens, warm_whole),
        "top_bytes": v.max_before(v.compute, at_anchor),
        "below_bytes": np.where(np.isnan(below), 0.0, below),
        "slope": v.max_before(marginal, elsewhere),
        "max_tokens": v.max_before(v.packed_tokens, warm_whole),
    }


def _warm_affine_price(state: dict[str, np.ndarray], n: np.ndarray, m: np.ndarray) -> np.ndarray:
    # WarmAffine.price: warm-fit until a slope is known, then min(warm_fit, L(n_eff)),
    # beyond max_tokens at least L(max_tokens) * (n_eff / max_tokens)
    warm_fit = _warm_fit_price(state, n, m)
    slope = np.maximum(0.0, state["slope"])

    def line(tokens: np.ndarray) -> np.ndarray:
        rise = state["top_bytes"] + slope * (tokens - state["anchor_tokens"])
        return np.maximum(state["below_bytes"], rise)

    with np.errstate(invalid="ignore"):
        n_eff = np.maximum(state["warm_tokens"], np.maximum(n, m / state["warm_sharing"]))
        max_tokens = state["max_tokens"]
        affine = line(n_eff)
        reach = line(max_tokens) * (n_eff / max_tokens)
        affine = np.where(n_eff > max_tokens, np.maximum(affine, reach), affine)
        priced = np.minimum(warm_fit, affine)
    return np.where(np.isnan(state["slope"]), warm_fit, priced)


#: :class:`~warmfit.policies.WarmAffine` at once: warm-fit's fields, then the line's.
WARM_AFFINE = VectorizedForm(_warm_affine_state, _warm_affine_price)


def has_vectorized_form(cls: type[Policy]) -> bool:
    """Whether ``cls`` itself (not a parent) declares a vectorized form.

    >>> from warmfit.policies import MaxMerge, WarmFit
    >>> has_vectorized_form(MaxMerge), has_vectorized_form(WarmFit)
    (True, True)
    >>> class Tweaked(WarmFit):
    ...     name = "tweaked"
    >>> has_vectorized_form(Tweaked)
    False
    """
    return isinstance(cls.__dict__.get("vectorized"), str)


def vectorized_form(cls: type[Policy]) -> VectorizedForm:
    """Load the vectorized form that ``cls`` declares."""
    spec = cls.__dict__.get("vectorized")
    if not isinstance(spec, str):
        raise PolicyError(f"policy {cls.name!r} declares no vectorized form.")
    module_name, _, attr = spec.partition(":")
    try:
        form = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(
            f"policy {cls.name!r} names the vectorized form {spec!r}, which cannot be loaded: "
            f"{exc}. Use --engine scalar."
        ) from None
    if not isinstance(form, VectorizedForm):
        raise PolicyError(f"{spec!r} (policy {cls.name!r}) is not a warmfit VectorizedForm.")
    return form


def _fits_exactly(readings: pl.DataFrame) -> bool:
    limits = readings.select(
        pl.max_horizontal(
            pl.col(c).max()
            for c in (
                "packed_tokens",
                "logical_tokens",
                "output_bytes",
                "peak_bytes",
                "static_floor_bytes",
            )
        )
    ).item()
    return limits is None or limits < EXACT_LIMIT


def replay_vectorized(
    readings: pl.DataFrame,
    policies: Sequence[type[Policy]],
    safety_factor: float,
) -> pl.DataFrame:
    """Replay readings with every policy's vectorized form; same result as the reference.

    ``readings`` is a validated trace sorted by run, rank and seq, as
    :func:`warmfit.replay.replay_scalar` takes it; the result is the one
    :func:`~warmfit.replay.replay_scalar` returns, row for row and byte for
    byte (:data:`warmfit.replay.PER_WAVE_SCHEMA`).
    """
    from warmfit.replay import PER_WAVE_SCHEMA, replay_scalar

    forms = [vectorized_form(cls) for cls in policies]
    if readings.height == 0 or not policies:
        return pl.DataFrame(schema=PER_WAVE_SCHEMA)
    if not _fits_exactly(readings):
        return replay_scalar(readings, policies, safety_factor)

    # Per reading: delta, rate and sharing, with Python's arithmetic (SPEC §4).
    n = _ints(readings, "packed_tokens")
    delta = np.maximum(_ints(readings, "peak_bytes") - _ints(readings, "baseline_bytes"), 0)
    compute = np.maximum(delta - _ints(readings, "output_bytes"), 0)
    rate = compute / n
    sharing = _ints(readings, "logical_tokens") / n
    # Streams are contiguous (sorted by run, rank, seq): number them, then profiles.
    new_stream = (pl.col("run") != pl.col("run").shift(1)) | (
        pl.col("rank") != pl.col("rank").shift(1)
    )
    keys = readings.select(
        new_stream.fill_null(True).cum_sum().cast(pl.Int64).alias("stream"),
        pl.col("signature").cast(pl.Categorical).to_physical().cast(pl.Int64).alias("signature"),
    )
    stream = keys.get_column("stream").to_numpy()
    signature = keys.get_column("signature").to_numpy()
    del keys

    # Per wave, by sorting readings by (stream, wave): its first reading, its
    # actual bytes and whether it ran out of memory. Waves then come in the
    # order of their first readings, as the reference engine emits them.
    wave = _ints(readings, "wave")
    order = _wave_order(stream, wave)
    wave_stream, wave = stream[order], wave[order]
    starts = np.flatnonzero(
        np.concatenate(([True], (np.diff(wave_stream) != 0) | (np.diff(wave) != 0)))
    )
    del wave_stream, wave
    first = order[starts]
    by_first = np.argsort(first, kind="stable")
    first = first[by_first]
    actual = np.maximum.reduceat(delta[order], starts)[by_first]
    oom_reading = readings.get_column("oom").to_numpy()
    # is_observed(kind, phase, oom), over every reading at once
    observed = (
        ~oom_reading
        & ~readings.select((pl.col("kind") == "split_child") & (pl.col("phase") == "caller"))
        .to_series()
        .to_numpy()
    )
    oom = np.logical_or.reduceat(oom_reading[order], starts)[by_first]
    del order, starts, by_first

    # Readings sorted by profile, each profile's readings side by side in
    # seq order; each wave's state is read just before its first reading.
    profile = _dense(stream * (int(signature.max()) + 1) + signature)
    del stream, signature
    by_profile = _profile_order(profile)
    sorted_profile = profile[by_profile]
    opens = np.concatenate(([True], sorted_profile[1:] != sorted_profile[:-1]))
    del profile, sorted_profile
    position = np.empty(len(by_profile), dtype=np.int64)
    position[by_profile] = np.arange(len(by_profile))
    at = position[first]
    del position
    priced_at = np.where(opens[at], -1, at - 1)
    profiles = Profiles(
        {
            "packed_tokens": n[by_profile],
            "whole": readings.get_column("whole").to_numpy()[by_profile],
            "observed": observed[by_profile],
            "rate": rate[by_profile],
            "sharing": sharing[by_profile],
            "compute": compute[by_profile].astype(np.float64),
        },
        np.flatnonzero(opens),
        priced_at,
    )
    del by_profile, opens, rate, sharing, compute, oom_reading, observed, delta
    states = [form.state(profiles) for form in forms]
    del profiles

    waves = readings.select(
        "packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes"
    ).gather(first)

    # Per wave and policy: p, then the estimate (SPEC §3), in numpy.
    n = _ints(waves, "packed_tokens")
    m = _ints(waves, "logical_tokens")
    o = _ints(waves, "output_bytes")
    has_floor = waves.get_column("static_floor_bytes").is_not_null().to_numpy()
    floor = waves.get_column("static_floor_bytes").fill_null(0).to_numpy()
    estimates, set_by = [], []
    for form, fields in zip(forms, states, strict=True):
        p = form.price(fields, n, m)
        has_p = ~np.isnan(p)
        if (p[has_p] >= PRICE_LIMIT).any():
            return replay_scalar(readings, policies, safety_factor)
        learned = np.where(has_p, p, 0.0).astype(np.int64)  # int(p)
        compute = np.maximum(floor, learned)
        with np.errstate(over="ignore"):  # an overflow falls back to the reference, below
            total = (o + np.where(has_p, compute, floor)).astype(np.float64) * safety_factor
        if (total >= PRICE_LIMIT).any():
            return replay_scalar(readings, policies, safety_factor)
        estimates.append(np.where(has_p | has_floor, total.astype(np.int64), -1))
        # 0: unpriced, 1: profile, 2: floor
        set_by.append(np.where(has_p, np.where(learned >= floor, 1, 2), np.where(has_floor, 2, 0)))

    # One row per wave and policy, policies in the order given.
    count = len(policies)
    estimate = np.stack(estimates, axis=1).ravel()
    del estimates
    priced = estimate >= 0
    per_row_actual = np.repeat(actual, count)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = estimate.astype(np.float64) / per_row_actual.astype(np.float64) - 1
    # set_by: index into ("profile", "floor"), null when unpriced
    code = np.stack(set_by, axis=1).ravel().astype(np.uint32)
    del set_by
    names = pl.Series([cls.name for cls in policies], dtype=pl.String)
    rows = readings.select(*_WAVE_KEY, *WAVE_CONSTANT).gather(np.repeat(first, count))
    return rows.with_columns(
        policy=names.gather(np.tile(np.arange(count, dtype=np.uint32), len(first))),
        actual_bytes=pl.Series(per_row_actual),
        estimate_bytes=_masked(estimate, priced),
        set_by=pl.Series(["profile", "floor"]).gather(_masked(code - 1, code > 0)),
        over_estimate=_masked(over, priced & (per_row_actual > 0)),
        under_peak=_masked(estimate < per_row_actual, priced),
        oom=pl.Series(np.repeat(oom, count)),
    ).select(pl.col(name).cast(dtype) for name, dtype in PER_WAVE_SCHEMA.items())


def _masked(values: np.ndarray, valid: np.ndarray) -> pl.Series:
    """``values`` as a Series, null where not ``valid``."""
    return pl.Series(pa.array(values, mask=~valid))


def _wave_order(stream: np.ndarray, wave: np.ndarray) -> np.ndarray:
    """A stable order of readings by (stream, wave).

    Recorders number waves in order, so the key is nearly sorted already and
    a stable sort (timsort/radix) of one integer key is quick; when the wave
    ids span too much to share one int64 with the stream, sort on both.
    """
    low, high = int(wave.min()), int(wave.max())
    span = high - low + 1
    if int(stream[-1]) * span + span < 2**63:
        return np.argsort(stream * span + (wave - low), kind="stable")
    return np.lexsort((wave, stream))


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
