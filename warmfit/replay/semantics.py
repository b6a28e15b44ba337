"""What the contract says a replay computes, scalar and array forms side by side.

SPEC §3: which readings a profile learns from (:func:`is_observed`,
:func:`observed`), and how a policy's learned bytes ``p`` become a wave's
estimate (:func:`estimate_bytes`, :func:`estimates`); SPEC §5: the columns of
the per-wave result. Both engines use these and nothing else, so they cannot
drift apart.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from warmfit.errors import UsageError

#: A profile: ``(run, rank, signature, policy name)``.
ProfileKey = tuple[str, int, str, str]

#: The safety factor ``f`` of SPEC §3 when none is given.
DEFAULT_SAFETY_FACTOR = 1.1

#: The policy that reports the prices the trainer itself used (SPEC §8 "Recorded
#: prices"): a trace's ``estimate_bytes`` column, not a pricing rule. Its estimate is
#: the wave's first non-null ``estimate_bytes`` in ``seq`` order, as recorded: no
#: safety factor scales it and no floor raises it; ``set_by`` is ``recorded``.
RECORDED = "recorded"

#: What may set a wave's estimate (the per-wave ``set_by``), in the order of the
#: codes the engines give them (1, 2, 3; 0: unpriced).
SETTERS = ("profile", "floor", RECORDED)

#: Columns and dtypes of the per-wave result (SPEC §5 ``--per-wave``).
PER_WAVE_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),
    "rank": pl.Int32(),
    "wave": pl.Int64(),
    "signature": pl.String(),
    "kind": pl.String(),
    "policy": pl.String(),
    "packed_tokens": pl.Int64(),
    "logical_tokens": pl.Int64(),
    "output_bytes": pl.Int64(),
    "static_floor_bytes": pl.Int64(),
    "actual_bytes": pl.Int64(),
    "estimate_bytes": pl.Int64(),
    "set_by": pl.String(),
    "over_estimate": pl.Float64(),
    "under_peak": pl.Boolean(),
    "oom": pl.Boolean(),
    # SPEC §8: priced beyond every size the profile had observed (null when unpriced)
    "beyond": pl.Boolean(),
}


def is_observed(kind: str, phase: str, oom: bool) -> bool:
    """Whether a profile learns from a reading (SPEC §3 step 2).

    Never from an out-of-memory reading, nor from a ``split_child`` wave's
    caller reading (ART records that against the split structure; it still
    counts toward the wave's actual bytes).

    >>> is_observed("flat", "caller", False), is_observed("split_child", "forward", False)
    (True, True)
    >>> is_observed("split_child", "caller", False), is_observed("flat", "forward", True)
    (False, False)
    """
    return not oom and not (kind == "split_child" and phase == "caller")


def observed(split_child: np.ndarray, caller: np.ndarray, oom: np.ndarray) -> np.ndarray:
    """:func:`is_observed` over arrays of readings at once (booleans: the wave is a
    split child, the reading is a caller reading, it ran out of memory)."""
    return ~oom & ~(split_child & caller)


def is_beyond(packed_tokens: int, largest_seen: int | None) -> bool:
    """Whether a wave is priced beyond the seen range (SPEC §8): its packed tokens exceed
    those of every reading its profile had observed (``largest_seen``; None: none yet).

    >>> is_beyond(300, 200), is_beyond(200, 200), is_beyond(300, None)
    (True, False, False)
    """
    return largest_seen is not None and packed_tokens > largest_seen


def first_recorded(prices: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per wave, the price the trainer recorded (SPEC §8): the first of its readings'
    ``prices`` that is not null (-1 stands for null), readings side by side per wave
    in ``seq`` order, each wave's opening at ``starts``; -1 where all are null.

    >>> first_recorded(np.array([-1, 7, 9, -1, -1, 0]), np.array([0, 3, 5])).tolist()
    [7, -1, 0]
    """
    if not len(starts):
        return np.zeros(0, dtype=np.int64)
    where = np.where(prices >= 0, np.arange(len(prices)), len(prices))
    at = np.minimum.reduceat(where, starts)
    found = at < len(prices)
    return np.where(found, prices[np.minimum(at, len(prices) - 1)], -1).astype(np.int64)


def estimate_bytes(
    p: float | None, output_bytes: int, static_floor_bytes: int | None, safety_factor: float
) -> tuple[int | None, str | None]:
    """A wave's estimate and what set it, from the policy's ``p`` (SPEC §3).

    >>> estimate_bytes(1000.7, 10, None, 1.1)   # int((10 + 1000) * 1.1)
    (1111, 'profile')
    >>> estimate_bytes(1000.7, 10, 2000, 1.1)   # the floor is higher
    (2211, 'floor')
    >>> estimate_bytes(None, 10, 2000, 1.1), estimate_bytes(None, 10, None, 1.1)
    ((2211, 'floor'), (None, None))
    """
    floor = static_floor_bytes or 0
    if p is not None:
        learned = int(p)
        compute = max(floor, learned)
        return _scaled(output_bytes + compute, safety_factor), (
            "profile" if learned >= floor else "floor"
        )
    if static_floor_bytes is not None:
        return _scaled(output_bytes + static_floor_bytes, safety_factor), "floor"
    return None, None


def unscaled_bytes(p: float | None, output_bytes: int, static_floor_bytes: int | None) -> int:
    """A wave's bytes before the safety factor (``o + compute``, SPEC §3; -1: unpriced),
    what :func:`estimate_bytes` scales: the reference engine keeps them, as
    :func:`estimates` gives them, for the safe factors (SPEC §7).

    >>> unscaled_bytes(1000.7, 10, None), unscaled_bytes(1000.7, 10, 2000)
    (1010, 2010)
    >>> unscaled_bytes(None, 10, 2000), unscaled_bytes(None, 10, None)
    (2010, -1)
    """
    if p is not None:
        total = output_bytes + max(static_floor_bytes or 0, int(p))
    elif static_floor_bytes is not None:
        total = output_bytes + static_floor_bytes
    else:
        return -1
    return min(total, MAX_ESTIMATE_BYTES)  # (an estimate past it is refused anyway)


#: Estimates are int64 bytes (SPEC §5's per-wave Parquet); 8 EiB is beyond any device.
MAX_ESTIMATE_BYTES = 2**63 - 1


def _scaled(total_bytes: int, safety_factor: float) -> int:
    """``int(total_bytes * safety_factor)``, refusing what int64 cannot hold."""
    scaled = total_bytes * safety_factor
    if not scaled <= MAX_ESTIMATE_BYTES:  # also catches inf and nan
        raise OverflowError(f"estimate {scaled:.4g} bytes exceeds int64")
    return int(scaled)


#: Prices and estimates (as doubles) stay below this in :func:`estimates`, so int64
#: arithmetic on them is exact.
PRICE_LIMIT = 2**61


def estimates(
    p: np.ndarray,
    output_bytes: np.ndarray,
    static_floor_bytes: np.ndarray,
    has_floor: np.ndarray,
    safety_factor: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`estimate_bytes` over arrays of waves: the estimates (-1: unpriced), what
    set them (0: unpriced, 1: profile, 2: floor) and the bytes before the safety factor
    (``o + compute``; -1: unpriced); None where a value could leave the range in which
    int64 arithmetic on doubles is exact (the reference engine then prices)."""
    has_p = ~np.isnan(p)
    if (p >= PRICE_LIMIT).any():  # (NaN compares false)
        return None
    learned = np.where(has_p, p, 0.0).astype(np.int64)  # int(p)
    compute = np.maximum(static_floor_bytes, learned)
    with np.errstate(over="ignore"):  # an overflow is caught just below
        total = (output_bytes + np.where(has_p, compute, static_floor_bytes)).astype(
            np.float64
        ) * safety_factor
    if (total >= PRICE_LIMIT).any():
        return None
    priced = has_p | has_floor
    estimate = np.where(priced, total.astype(np.int64), -1)
    # 1 where the profile's bytes are at least the floor, else 2; 2 or 0 without a profile
    set_by = np.where(has_p, 2 - (learned >= static_floor_bytes), 2 * has_floor)
    unscaled = np.where(priced, output_bytes + np.where(has_p, compute, static_floor_bytes), -1)
    return estimate, set_by, unscaled


def covering_factors(unscaled: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Per wave, the smallest double ``f`` with ``int(unscaled * f) >= actual`` (SPEC §7's
    safe factor of one wave; inf where ``unscaled`` is 0 and no factor covers ``actual``).

    >>> covering_factors(np.array([1000, 3, 0]), np.array([1100, 3, 5])).tolist()
    [1.1, 1.0, inf]
    """
    total = unscaled.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(total > 0, actual.astype(np.float64) / total, np.inf)
    finite = np.isfinite(f)

    def covers(factor: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return ~finite | ((total * np.where(finite, factor, 0.0)).astype(np.int64) >= actual)

    # A correctly rounded quotient is within a few ulps of the answer: step up
    # where it does not cover yet, then down while the next smaller still does.
    for _ in range(64):
        short = ~covers(f)
        if not short.any():
            break
        f = np.where(short, np.nextafter(f, np.inf), f)
    for _ in range(64):
        lower = np.nextafter(f, 0)
        still = covers(lower) & finite & (lower > 0)
        if not still.any():
            break
        f = np.where(still, lower, f)
    return f


def check_budget(budget_bytes: int | None) -> int | None:
    """Reject a memory budget that is not a number of bytes >= 0 (None: no budget)."""
    if budget_bytes is not None and not budget_bytes >= 0:
        raise UsageError(
            f"must be a number of bytes >= 0; got {budget_bytes!r}.", argument="budget_bytes"
        )
    return budget_bytes


def check_safety_factor(safety_factor: float) -> float:
    """Reject a safety factor that is not a positive finite number."""
    if not (math.isfinite(safety_factor) and safety_factor > 0):
        raise UsageError(
            f"must be a positive number (1.1 adds a 10% margin); got {safety_factor}.",
            argument="safety_factor",
        )
    return float(safety_factor)
