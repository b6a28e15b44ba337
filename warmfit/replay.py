"""Replay a trace through pricing policies (SPEC §3).

Each ``(run, rank)`` stream is replayed alone, readings in ``seq`` order, with
one profile per signature. At a wave's first reading the wave is priced from
its signature's profile as it stands; then every reading that did not run out
of memory is observed, except a split child's caller reading (the trainer
records that against its split structure, not the signature's profile). A
wave's actual bytes are the largest delta over its readings.

:func:`replay_scalar` is the reference engine: it feeds one reading at a time
to policy objects exactly as a trainer would. It accepts any policy.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from warmfit.errors import PolicyError, UsageError
from warmfit.policies import Policy, PriceRequest, Reading, checked_class, get_policy

DEFAULT_POLICIES = ("max-merge", "warm-fit")
DEFAULT_SAFETY_FACTOR = 1.1
ENGINES = ("auto", "scalar", "vectorized")

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


#: Estimates are int64 bytes (SPEC §5's per-wave Parquet); 8 EiB is beyond any device.
MAX_ESTIMATE_BYTES = 2**63 - 1


def _scaled(total_bytes: int, safety_factor: float) -> int:
    """``int(total_bytes * safety_factor)``, refusing what int64 cannot hold."""
    scaled = total_bytes * safety_factor
    if not scaled <= MAX_ESTIMATE_BYTES:  # also catches inf and nan
        raise OverflowError(f"estimate {scaled:.4g} bytes exceeds int64")
    return int(scaled)


def check_safety_factor(safety_factor: float) -> float:
    """Reject a safety factor that is not a positive finite number."""
    if not (math.isfinite(safety_factor) and safety_factor > 0):
        raise UsageError(
            f"--safety must be a positive number (1.1 adds a 10% margin); got {safety_factor}."
        )
    return float(safety_factor)


def resolve_policies(names: Sequence[str | type[Policy]] | None) -> list[type[Policy]]:
    """Policy classes for names, ``module:Class`` specs or classes; defaults when empty."""
    chosen = list(names) if names else list(DEFAULT_POLICIES)
    classes = [checked_class(p, repr(p)) if isinstance(p, type) else get_policy(p) for p in chosen]
    seen: set[str] = set()
    for cls in classes:
        if cls.name in seen:
            raise UsageError(f"policy {cls.name!r} is named twice; name each policy once.")
        seen.add(cls.name)
    return classes


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


def replay_scalar(
    readings: pl.DataFrame,
    policies: Sequence[type[Policy]],
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
) -> pl.DataFrame:
    """Replay readings one at a time; return one row per wave and policy.

    ``readings`` is a validated trace (see :func:`warmfit.trace.read_trace`)
    sorted by run, rank and seq. Rows come out by run, rank and the wave's
    first reading, then policy in the order given.
    """
    columns = readings.select(
        "run", "rank", "wave", "signature", "kind", "phase", "whole", "packed_tokens",
        "logical_tokens", "output_bytes", "baseline_bytes", "peak_bytes", "static_floor_bytes",
        "oom",
    ).iter_rows()  # fmt: skip
    stream: tuple[str, int] | None = None
    profiles: list[dict[str, Policy]] = []
    open_waves: dict[int, _Wave] = {}
    waves: list[_Wave] = []
    for run, rank, wave, sig, kind, phase, whole, n, m, o, baseline, peak, s, oom in columns:
        if (run, rank) != stream:  # a new stream: fresh profiles, as on a fresh trainer rank
            stream = (run, rank)
            profiles = [{} for _ in policies]
            open_waves = {}
        delta = max(0, peak - baseline)
        state = open_waves.get(wave)
        if state is None:  # the wave's first reading: price it before learning from it
            request = PriceRequest(n, m, o, kind, s)
            estimates = []
            for cls, by_signature in zip(policies, profiles, strict=True):
                profile = by_signature.get(sig)
                if profile is None:
                    profile = by_signature[sig] = cls()
                p = _checked_price(cls, profile.price(request))
                try:
                    estimates.append(estimate_bytes(p, o, s, safety_factor))
                except OverflowError:
                    raise UsageError(
                        f"policy {cls.name!r} prices wave {wave} (run {run!r}, rank {rank}) "
                        f"above 2**63 bytes (p={p!r}, outputs {o}, floor {s}, safety factor "
                        f"{safety_factor:g}); check the trace's byte counts and --safety."
                    ) from None
            state = _Wave(run, rank, wave, sig, kind, n, m, o, s, delta, oom, estimates)
            open_waves[wave] = state
            waves.append(state)
        else:
            state.actual_bytes = max(state.actual_bytes, delta)
            state.oom = state.oom or oom
        if is_observed(kind, phase, oom):
            reading = Reading(n, m, delta, o, whole, phase, kind, s)
            for by_signature in profiles:
                by_signature[sig].observe(reading)
    return _per_wave_frame(waves, [cls.name for cls in policies])


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
                )
            )
    return pl.DataFrame(rows, schema=PER_WAVE_SCHEMA, orient="row")


# --------------------------------------------------------------------------- summary

#: Columns of the per-run, per-policy summary (SPEC §5 ``results``, and §7's
#: ``median_excess_bytes``).
SUMMARY_COLUMNS = (
    "run",
    "policy",
    "priced_waves",
    "median_over_estimate",
    "min_over_estimate",
    "max_over_estimate",
    "under_peak",
    "set_by_profile",
    "set_by_floor",
    "oom_waves",
    "median_excess_bytes",
)
#: Columns a ``budget_bytes`` adds to the summary (SPEC §7).
BUDGET_COLUMNS = ("budget_bytes", "admitted", "refused_fit", "admitted_oom")
#: What a summary can be grouped by: one result per run, or per run and signature.
GROUPINGS = ("run", "signature")

#: The waves every figure is computed over (SPEC §3 "Report"): priced, not out
#: of memory, and with a positive actual.
IN_FIGURES = pl.col("estimate_bytes").is_not_null() & ~pl.col("oom") & (pl.col("actual_bytes") > 0)


def _median_int(values: pl.Expr) -> pl.Expr:
    """The median of integers as an integer: the mean of the two middle values
    truncated toward zero for an even count (SPEC §7); null with no value."""
    ordered = values.sort()
    count = values.len()
    total = ordered.get((count - 1) // 2, null_on_oob=True).cast(pl.Int128) + ordered.get(
        count // 2, null_on_oob=True
    ).cast(pl.Int128)
    # floor division, moved up by one for a negative odd total: truncation toward zero
    rounds_down = ((total < 0) & (total % 2 != 0)).cast(pl.Int128)
    return (total // 2 + rounds_down).cast(pl.Int64)


def summarize(
    per_wave: pl.DataFrame,
    policies: Sequence[str],
    groups: pl.DataFrame,
    budget_bytes: int | None = None,
) -> pl.DataFrame:
    """Per group and policy, the figures of SPEC §3 "Report" and §7.

    ``groups`` holds one row per result to report, with a ``run`` column and,
    for :data:`GROUPINGS` ``"signature"``, a ``signature`` column; rows come in
    its order, then by policy as given, and a group without figures has
    nulls. Figures count the priced waves that did not run out of memory and
    have ``actual > 0``; ``oom_waves`` counts priced waves with an oom
    reading. The median is the mean of the two middle values for an even
    count, ``(a + b) / 2`` like :func:`statistics.median`;
    ``median_excess_bytes`` is the median of ``estimate - actual``, an
    integer. With ``budget_bytes`` a figure wave is *admitted* when its
    estimate is at most the budget; ``refused_fit`` counts waves refused
    although they fit, ``admitted_oom`` waves admitted although they did not.
    """
    keys = list(groups.columns)
    priced = pl.col("estimate_bytes").is_not_null()
    over = pl.col("over_estimate").filter(IN_FIGURES)
    count = IN_FIGURES.sum()
    # The two middle values (one value twice for an odd count): the sorted
    # values at (n - 1) // 2 and n // 2, found by selection rather than a sort.
    lower = over.quantile(0.5, interpolation="lower")
    upper = over.quantile(0.5, interpolation="higher")
    figures = [
        count.cast(pl.Int64).alias("priced_waves"),
        ((lower + upper) / 2).alias("median_over_estimate"),
        over.min().alias("min_over_estimate"),
        over.max().alias("max_over_estimate"),
        _count(IN_FIGURES & (pl.col("estimate_bytes") < pl.col("actual_bytes")), "under_peak"),
        _count(IN_FIGURES & (pl.col("set_by") == "profile"), "set_by_profile"),
        _count(IN_FIGURES & (pl.col("set_by") == "floor"), "set_by_floor"),
        _count(priced & pl.col("oom"), "oom_waves"),
        _median_int((pl.col("estimate_bytes") - pl.col("actual_bytes")).filter(IN_FIGURES)).alias(
            "median_excess_bytes"
        ),
    ]
    counts = ["priced_waves", "under_peak", "set_by_profile", "set_by_floor", "oom_waves"]
    columns = [*keys, *SUMMARY_COLUMNS[1:]]
    if budget_bytes is not None:
        admitted = IN_FIGURES & (pl.col("estimate_bytes") <= budget_bytes)
        fits = pl.col("actual_bytes") <= budget_bytes
        figures += [
            _count(admitted, "admitted"),
            _count(IN_FIGURES & ~admitted & fits, "refused_fit"),
            _count(admitted & ~fits, "admitted_oom"),
        ]
        counts += ["admitted", "refused_fit", "admitted_oom"]
        columns += BUDGET_COLUMNS
    stats = per_wave.lazy().group_by(*keys, "policy").agg(figures).collect()
    grid = groups.join(
        pl.DataFrame({"policy": list(policies)}, schema={"policy": pl.String()}), how="cross"
    )
    summary = grid.join(stats, on=[*keys, "policy"], how="left", maintain_order="left")
    summary = summary.with_columns(pl.col(counts).fill_null(0))
    if budget_bytes is not None:
        summary = summary.with_columns(budget_bytes=pl.lit(budget_bytes, dtype=pl.Int64))
    return summary.select(columns)


def _count(condition: pl.Expr, name: str) -> pl.Expr:
    return condition.sum().cast(pl.Int64).alias(name)


def result_groups(readings: pl.DataFrame, by: str = "run") -> pl.DataFrame:
    """The groups a summary reports, sorted: every run, or every run and signature."""
    if by not in GROUPINGS:
        raise UsageError(f"by must be one of {', '.join(GROUPINGS)}; got {by!r}.")
    keys = ["run"] if by == "run" else ["run", "signature"]
    return readings.select(keys).unique().sort(keys)


# --------------------------------------------------------------------------- entry point


@dataclass(frozen=True)
class ReplayResult:
    """What a replay produced: per-wave rows and the summary.

    ``by`` is what the summary is grouped by (:data:`GROUPINGS`);
    ``budget_bytes`` the memory budget its admission figures assume, if any.
    """

    per_wave: pl.DataFrame
    summary: pl.DataFrame
    policies: tuple[str, ...]
    safety_factor: float
    engine: str
    by: str = "run"
    budget_bytes: int | None = None


def replay(
    readings: pl.DataFrame,
    policies: Sequence[str | type[Policy]] | None = None,
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    engine: str = "auto",
    by: str = "run",
    budget_bytes: int | None = None,
) -> ReplayResult:
    """Replay validated readings through policies and summarize, per SPEC §3 and §7.

    ``policies`` are registered names, ``module:Class`` specs or policy
    classes (default: max-merge and warm-fit). ``engine`` is ``auto``, ``scalar`` or
    ``vectorized``; every engine gives identical results, and ``auto`` picks
    the vectorized one when every policy has a vectorized form. ``by``
    groups the summary by ``run`` or by ``signature`` within each run. With
    ``budget_bytes`` (the memory free above the baseline when a wave is
    admitted) the per-wave rows gain ``admitted`` and the summary the
    admission counts.
    """
    safety_factor = check_safety_factor(safety_factor)
    if budget_bytes is not None and not budget_bytes >= 0:
        raise UsageError(f"the budget must be a number of bytes >= 0; got {budget_bytes!r}.")
    groups = result_groups(readings, by)
    classes = resolve_policies(policies)
    chosen = _choose_engine(engine, classes)
    if chosen == "vectorized":
        from warmfit.vectorized import replay_vectorized

        per_wave = replay_vectorized(readings, classes, safety_factor)
    else:
        per_wave = replay_scalar(readings, classes, safety_factor)
    if budget_bytes is not None:
        per_wave = per_wave.with_columns(admitted=pl.col("estimate_bytes") <= budget_bytes)
    names = tuple(cls.name for cls in classes)
    summary = summarize(per_wave, names, groups, budget_bytes)
    return ReplayResult(per_wave, summary, names, safety_factor, chosen, by, budget_bytes)


def _choose_engine(engine: str, classes: Sequence[type[Policy]]) -> str:
    if engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}; got {engine!r}.")
    if engine == "scalar":
        return "scalar"
    from warmfit.vectorized import has_vectorized_form

    vectorizable = all(has_vectorized_form(cls) for cls in classes)
    if engine == "vectorized" and not vectorizable:
        names = ", ".join(cls.name for cls in classes)
        raise UsageError(
            f"--engine vectorized: not every policy ({names}) is declared "
            "(warmfit.policies.rule.DeclaredPolicy), and only declared policies run on the "
            "vectorized engine; use --engine scalar or auto."
        )
    return "vectorized" if vectorizable else "scalar"
