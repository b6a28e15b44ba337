"""The reference replay engine: policies fed one reading at a time, as a trainer does.

It accepts any policy, declared or free-form: each wave is priced at its first
reading from its signature's profile as it stands, then every observed reading
is passed to ``observe`` (SPEC §3).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from warmfit.errors import PolicyError, UsageError
from warmfit.format.schema import ESTIMATE_COLUMN
from warmfit.policies import Policy, PriceRequest, Reading
from warmfit.replay.semantics import (
    DEFAULT_SAFETY_FACTOR,
    PER_WAVE_SCHEMA,
    RECORDED,
    ProfileKey,
    estimate_bytes,
    is_beyond,
    is_observed,
    unscaled_bytes,
)


def _call(
    cls: type[Policy], method: Callable[[Any], Any], argument: Any, run: str, rank: int, wave: int
) -> Any:
    """A policy's ``price`` or ``observe``; whatever it raises becomes a PolicyError
    naming the policy, the run, the rank and the wave (a user's code may fail anyhow)."""
    try:
        return method(argument)
    except Exception as exc:
        raise PolicyError(
            f"policy {cls.name!r} failed in {method.__name__}() on wave {wave} (run {run!r}, "
            f"rank {rank}): {type(exc).__name__}: {exc}. Fix the policy's code."
        ) from None


def _checked_price(cls: type[Policy], value: float | None) -> float | None:
    if value is None:
        return None
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (real and math.isfinite(value) and value >= 0):
        raise PolicyError(
            f"policy {cls.name!r} priced a wave at {value!r}; a price must be a finite number "
            "of bytes >= 0, or None when the profile has nothing to go on."
        )
    return value


def checked_price(
    cls: type[Policy], profile: Policy, request: PriceRequest, run: str, rank: int, wave: int
) -> float | None:
    """``profile.price(request)`` as replay asks it: what the policy raises becomes a
    PolicyError naming the policy, run, rank and wave, and a price that is not a finite
    number of bytes >= 0 (nor None) is refused. :func:`estimate_bytes` makes it bytes."""
    return _checked_price(cls, _call(cls, profile.price, request, run, rank, wave))


@dataclass(slots=True)
class _Wave:
    """A wave as the scalar engine sees it: what it was priced and what it used."""

    run: str
    rank: int
    wave: int
    signature: str
    kind: str
    packed_tokens: int
    logical_tokens: int
    output_bytes: int
    static_floor_bytes: int | None
    actual_bytes: int
    oom: bool
    estimates: list[tuple[int | None, str | None]]
    beyond: bool
    #: Per policy, the bytes before the safety factor (-1: unpriced).
    unscaled: list[int]


def replay_scalar(
    readings: pl.DataFrame,
    policies: Sequence[type[Policy]],
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    profiles_out: dict[ProfileKey, Policy] | None = None,
    recorded: bool = False,
    unscaled_out: list[int] | None = None,
) -> pl.DataFrame:
    """Replay readings one at a time; return one row per wave and policy.

    ``readings`` is a validated trace (see :func:`warmfit.format.trace.read_trace`)
    sorted by run, rank and seq. Rows come out by run, rank and the wave's
    first reading, then policy in the order given, then, with ``recorded``,
    the policy ``recorded``: the wave's first non-null ``estimate_bytes`` (SPEC §8;
    a frame without the column has none). ``profiles_out``, when
    given, receives every profile as it stands after the trace, by ``(run,
    rank, signature, policy)``. ``unscaled_out``, when given, receives each row's
    bytes before the safety factor (-1: unpriced; ``recorded``: its price), in the
    rows' order, as the vectorized engine gives them.
    """
    prices = (
        pl.col(ESTIMATE_COLUMN)
        if recorded and ESTIMATE_COLUMN in readings.columns
        else pl.lit(None, pl.Int64)
    )
    columns = readings.select(
        "run", "rank", "wave", "signature", "kind", "phase", "whole", "packed_tokens",
        "logical_tokens", "output_bytes", "baseline_bytes", "peak_bytes", "static_floor_bytes",
        "oom", prices.alias(ESTIMATE_COLUMN),
    ).iter_rows()  # fmt: skip
    stream: tuple[str, int] | None = None
    profiles: list[dict[str, Policy]] = []
    largest: dict[str, int] = {}  # per signature: the most packed tokens observed
    open_waves: dict[int, _Wave] = {}
    waves: list[_Wave] = []
    for run, rank, wave, sig, kind, phase, whole, n, m, o, baseline, peak, s, oom, paid in columns:
        if (run, rank) != stream:  # a new stream: fresh profiles, as on a fresh trainer rank
            stream = (run, rank)
            profiles = [{} for _ in policies]
            largest = {}
            open_waves = {}
        delta = max(0, peak - baseline)
        state = open_waves.get(wave)
        if state is None:  # the wave's first reading: price it before learning from it
            request = PriceRequest(n, m, o, kind, s)
            estimates = []
            unscaled = []
            for cls, by_signature in zip(policies, profiles, strict=True):
                profile = by_signature.get(sig)
                if profile is None:
                    profile = by_signature[sig] = cls()
                    if profiles_out is not None:
                        profiles_out[(run, rank, sig, cls.name)] = profile
                p = checked_price(cls, profile, request, run, rank, wave)
                unscaled.append(unscaled_bytes(p, o, s))
                try:
                    estimates.append(estimate_bytes(p, o, s, safety_factor))
                except OverflowError:
                    raise UsageError(
                        f"policy {cls.name!r} prices wave {wave} (run {run!r}, rank {rank}) "
                        f"above 2**63 bytes (p={p!r}, outputs {o}, floor {s}, safety factor "
                        f"{safety_factor:g}); check the trace's byte counts and the safety factor."
                    ) from None
            if recorded:  # the trainer's price, on this reading or a later one
                estimates.append((paid, RECORDED) if paid is not None else (None, None))
            beyond = is_beyond(n, largest.get(sig))
            state = _Wave(
                run, rank, wave, sig, kind, n, m, o, s, delta, oom, estimates, beyond, unscaled
            )
            open_waves[wave] = state
            waves.append(state)
        else:
            state.actual_bytes = max(state.actual_bytes, delta)
            state.oom = state.oom or oom
            if recorded and paid is not None and state.estimates[-1][0] is None:
                state.estimates[-1] = (paid, RECORDED)  # the first non-null one counts
        if is_observed(kind, phase, oom):
            largest[sig] = max(largest.get(sig, n), n)
            reading = Reading(n, m, delta, o, whole, phase, kind, s)
            for cls, by_signature in zip(policies, profiles, strict=True):
                _call(cls, by_signature[sig].observe, reading, run, rank, wave)
    if unscaled_out is not None:
        for w in waves:
            unscaled_out += w.unscaled
            if recorded:  # the trainer's price, which no factor scales
                paid_bytes = w.estimates[-1][0]
                unscaled_out.append(-1 if paid_bytes is None else paid_bytes)
    return _per_wave_frame(waves, [cls.name for cls in policies] + ([RECORDED] if recorded else []))


def _per_wave_frame(waves: list[_Wave], names: list[str]) -> pl.DataFrame:
    rows = []
    for w in waves:
        for name, (estimate, set_by) in zip(names, w.estimates, strict=True):
            actual = w.actual_bytes
            over = estimate / actual - 1 if estimate is not None and actual > 0 else None
            under = None if estimate is None else estimate < actual
            rows.append(
                (
                    w.run,
                    w.rank,
                    w.wave,
                    w.signature,
                    w.kind,
                    name,
                    w.packed_tokens,
                    w.logical_tokens,
                    w.output_bytes,
                    w.static_floor_bytes,
                    actual,
                    estimate,
                    set_by,
                    over,
                    under,
                    w.oom,
                    None if estimate is None else w.beyond,
                )
            )
    return pl.DataFrame(rows, schema=PER_WAVE_SCHEMA, orient="row")
