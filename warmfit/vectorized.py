"""The vectorized replay engine: every wave of a trace priced at once (SPEC §3).

Each state of the built-in policies (SPEC §4) is a running maximum, minimum
or count over the readings a profile observed, so the state a wave is priced
from is an *exclusive* cumulative aggregate per ``(run, rank, signature)``,
taken at the wave's first reading over the readings strictly before it. This
module computes those aggregates as polars window expressions, with no Python
loop over readings, and gives exactly what
:func:`warmfit.replay.replay_scalar` gives: the same rows in the same order,
the same bytes, the same floats.

A policy opts in by naming its :class:`VectorizedForm` in its ``vectorized``
class attribute (``"module:NAME"``). A form has two halves: ``state``, the
policy's fields as running aggregates over a :class:`Profiles` (polars
window expressions), and ``price``, the policy's ``price`` arithmetic over
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

from warmfit.errors import PolicyError
from warmfit.policies import Policy

#: A profile is one signature on one rank of one run: the engine numbers them in this column.
PROFILE_KEY = "_profile"
#: Below this, every int64 column converts to a double exactly.
EXACT_LIMIT = 2**53
#: Prices and estimates (as doubles) stay below this, so int64 arithmetic on them is exact.
PRICE_LIMIT = 2**61


class Profiles:
    """The readings of a trace as a vectorized form's ``state`` sees them.

    Every attribute is a per-reading expression, every method builds one.
    A reading is *observed* unless it ran out of memory (SPEC §3); the
    ``*_before`` methods aggregate over the profile's readings strictly
    before the reading, in ``seq`` order: the profile's state when a wave
    that opens at that reading is priced. They are running maxima, minima
    and counts only: arithmetic belongs in a form's ``price``.
    """

    packed_tokens = pl.col("packed_tokens")
    logical_tokens = pl.col("logical_tokens")
    whole = pl.col("whole")
    #: The reading is learned from (it did not run out of memory).
    observed = ~pl.col("oom")
    #: ``max(0, delta - o) / n`` (SPEC §4), a double, as :attr:`Reading.rate`.
    rate = pl.col("_rate")
    #: ``m / n``, a double, as :attr:`Reading.sharing`.
    sharing = pl.col("_sharing")

    def __init__(self) -> None:
        self.columns: list[tuple[str, pl.Expr]] = []

    def column(self, value: pl.Expr) -> pl.Expr:
        """Compute ``value`` per reading first, and refer to the result.

        Use it for an aggregate that another aggregate builds on: the engine
        computes these columns, in the order made, before any state, which is
        much faster than nesting one window expression in another.
        """
        name = f"_column{len(self.columns)}"
        self.columns.append((name, value))
        return pl.col(name)

    def max_before(self, value: pl.Expr) -> pl.Expr:
        """Running maximum of ``value`` over the profile's earlier readings.

        Readings where ``value`` is null do not count; the result is null
        until one has.
        """
        return value.cum_max().forward_fill().shift(1).over(PROFILE_KEY)

    def min_before(self, value: pl.Expr) -> pl.Expr:
        """Running minimum, as :meth:`max_before`."""
        return value.cum_min().forward_fill().shift(1).over(PROFILE_KEY)

    def count_before(self, condition: pl.Expr) -> pl.Expr:
        """How many of the profile's earlier readings meet ``condition``."""
        return condition.cast(pl.UInt32).cum_sum().shift(1, fill_value=0).over(PROFILE_KEY)


@dataclass(frozen=True)
class VectorizedForm:
    """A policy's vectorized form: its state as running aggregates, and its price.

    ``state`` maps names to :class:`Profiles` expressions: the policy's
    fields as they stand before each reading. ``price`` takes those fields
    at each wave's first reading (numpy arrays, NaN for null) and the wave's
    packed and logical tokens, and returns ``p`` per wave (NaN: no profile),
    doing the policy's float arithmetic in the same order as its ``price``
    method. Arithmetic is numpy's on purpose: polars may divide by a
    broadcast value as a multiplication by its reciprocal, which is not the
    division Python does.
    """

    state: Callable[[Profiles], dict[str, pl.Expr]]
    price: Callable[[dict[str, np.ndarray], np.ndarray, np.ndarray], np.ndarray]


def _max_merge_state(v: Profiles) -> dict[str, pl.Expr]:
    return {
        "rate_max": v.max_before(pl.when(v.observed).then(v.rate)),
        # sharing_max starts at 1.0 and every sharing is >= 1.0
        "sharing_max": v.max_before(pl.when(v.observed).then(v.sharing)).fill_null(1.0),
    }


def _max_merge_price(state: dict[str, np.ndarray], n: np.ndarray, m: np.ndarray) -> np.ndarray:
    # MaxMerge.price: rate_max * max(n, m / sharing_max)
    return state["rate_max"] * np.maximum(n, m / state["sharing_max"])


#: :class:`~warmfit.policies.MaxMerge` at once: ``rate_max * max(n, m / sharing_max)``.
MAX_MERGE = VectorizedForm(_max_merge_state, _max_merge_price)


def _warm_fit_state(v: Profiles) -> dict[str, pl.Expr]:
    # The seed is the profile's first observed whole reading; a reading is
    # warm when the seed came strictly before it.
    warm = v.column(v.observed & (v.count_before(v.whole & v.observed) > 0))
    warm_whole = warm & v.whole
    return {
        **_max_merge_state(v),
        # warm_rate starts at 0.0 and every rate is >= 0.0
        "warm_rate": v.max_before(pl.when(warm).then(v.rate)).fill_null(0.0),
        "warm_tokens": v.min_before(pl.when(warm_whole).then(v.packed_tokens)),
        "warm_sharing": v.max_before(pl.when(warm_whole).then(v.sharing)).fill_null(1.0),
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
    rate = np.maximum(delta - _ints(readings, "output_bytes"), 0) / n
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
    profile = stream * (int(signature.max()) + 1) + signature

    # Each policy's state before every reading (identical expressions once).
    profiles = Profiles()
    states = [form.state(profiles) for form in forms]
    state_columns: dict[str, pl.Expr] = {}
    where: list[dict[str, str]] = []
    for state in states:
        where.append({})
        for field, expr in state.items():
            same = next((c for c, e in state_columns.items() if e.meta.eq(expr)), None)
            if same is None:
                same = f"_state{len(state_columns)}"
                state_columns[same] = expr
            where[-1][field] = same
    frame = readings.select(
        "packed_tokens",
        "logical_tokens",
        "whole",
        "oom",
        _rate=pl.Series(rate),
        _sharing=pl.Series(sharing),
        _profile=pl.Series(profile),
    )
    for name, value in profiles.columns:
        frame = frame.with_columns(value.alias(name))
    frame = frame.select(**state_columns)

    # Per wave, by sorting readings by (stream, wave): its first reading, its
    # actual bytes and whether it ran out of memory. Waves then come in the
    # order of their first readings, as the reference engine emits them.
    order = _wave_order(stream, _ints(readings, "wave"))
    wave_of = stream[order], _ints(readings, "wave")[order]
    starts = np.flatnonzero(
        np.concatenate(([True], (np.diff(wave_of[0]) != 0) | (np.diff(wave_of[1]) != 0)))
    )
    first = order[starts]
    by_first = np.argsort(first, kind="stable")
    first = first[by_first]
    actual = np.maximum.reduceat(delta[order], starts)[by_first]
    oom = np.logical_or.reduceat(readings.get_column("oom").to_numpy()[order], starts)[by_first]
    waves = pl.concat(
        [
            readings.select(*_WAVE_KEY, *_WAVE_CONSTANT).gather(first),
            frame.gather(first),
            pl.DataFrame({"actual_bytes": actual, "oom": oom}),
        ],
        how="horizontal",
    )

    # Per wave and policy: p, then the estimate (SPEC §3), in numpy.
    n = _ints(waves, "packed_tokens")
    m = _ints(waves, "logical_tokens")
    o = _ints(waves, "output_bytes")
    has_floor = waves.get_column("static_floor_bytes").is_not_null().to_numpy()
    floor = waves.get_column("static_floor_bytes").fill_null(0).to_numpy()
    estimates, set_by = [], []
    for form, columns in zip(forms, where, strict=True):
        fields = {
            field: waves.get_column(column).cast(pl.Float64).fill_null(float("nan")).to_numpy()
            for field, column in columns.items()
        }
        p = form.price(fields, n, m)
        has_p = ~np.isnan(p)
        if (p[has_p] >= PRICE_LIMIT).any():
            return replay_scalar(readings, policies, safety_factor)
        learned = np.where(has_p, p, 0.0).astype(np.int64)  # int(p)
        compute = np.maximum(floor, learned)
        total = (o + np.where(has_p, compute, floor)).astype(np.float64) * safety_factor
        if (total >= PRICE_LIMIT).any():
            return replay_scalar(readings, policies, safety_factor)
        estimates.append(np.where(has_p | has_floor, total.astype(np.int64), -1))
        # 0: unpriced, 1: profile, 2: floor
        set_by.append(np.where(has_p, np.where(learned >= floor, 1, 2), np.where(has_floor, 2, 0)))

    # One row per wave and policy, policies in the order given.
    count = len(policies)
    estimate = np.stack(estimates, axis=1).ravel()
    priced = estimate >= 0
    per_row_actual = np.repeat(actual, count)
    with np.errstate(divide="ignore", invalid="ignore"):
        over = estimate.astype(np.float64) / per_row_actual.astype(np.float64) - 1
    code = pl.Series(np.stack(set_by, axis=1).ravel())
    rows = waves.select(_WAVE_COLUMNS).gather(np.repeat(np.arange(waves.height), count))
    return rows.with_columns(
        policy=pl.Series([cls.name for cls in policies] * waves.height, dtype=pl.String),
        estimate_bytes=pl.when(pl.Series(priced)).then(pl.Series(estimate)),
        set_by=pl.when(code == 1).then(pl.lit("profile")).when(code == 2).then(pl.lit("floor")),
        over_estimate=pl.when(pl.Series(priced & (per_row_actual > 0))).then(pl.Series(over)),
        under_peak=pl.when(pl.Series(priced)).then(pl.Series(estimate < per_row_actual)),
    ).select(pl.col(name).cast(dtype) for name, dtype in PER_WAVE_SCHEMA.items())


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


def _ints(frame: pl.DataFrame, column: str) -> np.ndarray:
    """A non-null integer column as an int64 numpy array."""
    return frame.get_column(column).cast(pl.Int64).to_numpy()


_WAVE_CONSTANT = (
    "signature",
    "kind",
    "packed_tokens",
    "logical_tokens",
    "output_bytes",
    "static_floor_bytes",
)
_WAVE_KEY = ("run", "rank", "wave")
_WAVE_COLUMNS = (*_WAVE_KEY, *_WAVE_CONSTANT, "actual_bytes", "oom")
