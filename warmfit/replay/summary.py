"""The report's figures, per result and policy, from the per-wave rows (SPEC §3, §7)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from warmfit.errors import UsageError

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


def _median_int(values: pl.Expr, exact_in_doubles: bool) -> pl.Expr:
    """The median of integers as an integer: the mean of the two middle values
    truncated toward zero for an even count (SPEC §7); null with no value.

    The two middle values are found by selection (``quantile`` lower and
    higher, doubles) where every value is below 2**53 and so exact as a
    double, else by a sort.
    """
    count = values.len()
    if exact_in_doubles:
        lower = values.quantile(0.5, interpolation="lower").cast(pl.Int128)
        upper = values.quantile(0.5, interpolation="higher").cast(pl.Int128)
    else:
        ordered = values.sort()
        lower = ordered.get((count - 1) // 2, null_on_oob=True).cast(pl.Int128)
        upper = ordered.get(count // 2, null_on_oob=True).cast(pl.Int128)
    total = lower + upper
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
    excess = pl.col("estimate_bytes") - pl.col("actual_bytes")
    largest = per_wave.select(excess.abs().max()).item()
    exact = largest is None or largest < 2**53
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
        _median_int(excess.filter(IN_FIGURES), exact).alias("median_excess_bytes"),
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


def group_keys(by: str = "run") -> list[str]:
    """The columns that name one result when grouping ``by`` (:data:`GROUPINGS`).

    >>> group_keys("run"), group_keys("signature")
    (['run'], ['run', 'signature'])
    """
    if by not in GROUPINGS:
        raise UsageError(f"must be one of {', '.join(GROUPINGS)}; got {by!r}.", argument="by")
    return ["run"] if by == "run" else ["run", "signature"]


def result_groups(readings: pl.DataFrame, by: str = "run") -> pl.DataFrame:
    """The groups a summary reports, sorted: every run, or every run and signature."""
    keys = group_keys(by)
    return readings.select(keys).unique().sort(keys)


def wave_roles(readings: pl.DataFrame) -> pl.DataFrame:
    """Each wave's role in its profile ``(run, rank, signature)``: ``run, rank, wave, role``.

    ``seed`` for the wave holding the profile's first whole reading that is
    observed (SPEC §4: it pays one-time costs); ``warm`` for a wave with an
    observed whole reading after the seed; ``other`` for the rest
    (forward-only calls, split children, interrupted or out-of-memory waves,
    waves before the seed).
    """
    profile = ["run", "rank", "signature"]
    frame = readings.select(
        *profile, "wave", "seq", (pl.col("whole") & ~pl.col("oom")).alias("teaches")
    )
    seeds = frame.filter(pl.col("teaches")).group_by(profile).agg(pl.col("seq").min().alias("seed"))
    return (
        frame.join(seeds, on=profile, how="left")
        .group_by(["run", "rank", "wave"], maintain_order=True)
        .agg(
            (pl.col("seq") == pl.col("seed")).any().alias("is_seed"),
            (pl.col("teaches") & (pl.col("seq") > pl.col("seed"))).any().alias("is_warm"),
        )
        .select(
            "run",
            "rank",
            "wave",
            pl.when(pl.col("is_seed").fill_null(False))
            .then(pl.lit("seed"))
            .when(pl.col("is_warm").fill_null(False))
            .then(pl.lit("warm"))
            .otherwise(pl.lit("other"))
            .alias("role"),
        )
    )
