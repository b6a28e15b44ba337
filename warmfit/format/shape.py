"""What a trace's waves say about their batches: padding left out of the token
counts, and waves of equal tokens whose peaks differ by more than a safety margin.

``warmfit validate`` and the summary of ``warmfit record`` print these warnings
(on stderr; they never fail a command). The padding warning needs the optional
column ``padded_tokens`` (:data:`~warmfit.format.schema.PADDED_COLUMN`); the
equal-tokens warning needs only the v1 columns, and names
``sum_sq_tokens`` (:data:`~warmfit.format.schema.SUM_SQ_COLUMN`), whether the
trace has it or not. Replay reads neither column.
"""

from __future__ import annotations

import polars as pl

from warmfit.format.schema import PADDED_COLUMN, SUM_SQ_COLUMN
from warmfit.show.names import counted, printable
from warmfit.show.units import format_bytes

#: A wave whose padding is more than this share of its tokens (padding included) is
#: named by :func:`padding_warning`.
PADDING_SHARE = 0.10
#: Where the fixes are documented.
SHAPE_DOCS = "docs/how-to/integrations.md, 'Padding and sequence lengths'"


def _integer_column(frame: pl.DataFrame, name: str) -> bool:
    return name in frame.columns and frame.schema[name].is_integer()


def padded_waves(frame: pl.DataFrame) -> pl.DataFrame:
    """Per ``(run, signature)`` with a wave whose padding is over :data:`PADDING_SHARE`
    of its tokens: ``waves`` (those with ``padded_tokens``), ``padded_waves`` (over the
    share) and ``largest_share``; sorted. Empty without the column.

    A wave's padding share is ``(padded_tokens - packed_tokens) / padded_tokens``
    (its readings' largest ``padded_tokens``; a null one is unknown, not counted).
    """
    empty = pl.DataFrame(
        schema={"run": pl.String, "signature": pl.String, "waves": pl.Int64,
                "padded_waves": pl.Int64, "largest_share": pl.Float64}
    )  # fmt: skip
    if frame.height == 0 or not _integer_column(frame, PADDED_COLUMN):
        return empty
    padded = pl.col(PADDED_COLUMN)
    share = (padded - pl.col("packed_tokens")).clip(lower_bound=0) / padded
    return (
        frame.group_by("run", "rank", "wave")
        .agg(pl.col("signature").first(), pl.col("packed_tokens").first(), padded.max())
        .filter(padded.is_not_null() & (padded > 0))
        .with_columns(share.alias("share"))
        .group_by("run", "signature")
        .agg(
            pl.len().cast(pl.Int64).alias("waves"),
            (pl.col("share") > PADDING_SHARE).sum().cast(pl.Int64).alias("padded_waves"),
            pl.col("share").max().alias("largest_share"),
        )
        .filter(pl.col("padded_waves") > 0)
        .sort("run", "signature")
    )


def padding_warning(frame: pl.DataFrame, shown: int = 5) -> str:
    """The warning about padding left out of ``packed_tokens`` (``""`` when none is
    over :data:`PADDING_SHARE` of a wave's tokens, or the trace has no ``padded_tokens``)."""
    rows = padded_waves(frame).rows(named=True)
    if not rows:
        return ""
    named = "; ".join(
        f"{row['padded_waves']} of {counted(row['waves'], 'wave')} of run "
        f"'{printable(row['run'])}' signature '{printable(row['signature'])}' "
        f"(up to {row['largest_share']:.0%})"
        for row in rows[:shown]
    )
    if len(rows) > shown:
        named += f"; and {len(rows) - shown} more signatures"
    return (
        f"warmfit: warning: padding is over {PADDING_SHARE:.0%} of a wave's tokens in "
        f"{named}. packed_tokens counts real tokens only, but a padded batch's memory "
        "follows its padded width (padded_tokens), so the rate a policy learns swings with "
        "the padding and can price waves under their peak. Count padded tokens: "
        "tokens=padded_token_counts (from warmfit.integrations.tokens) in "
        "WarmfitCallback(...) or record_trainer(...), or packed_tokens=<rows x width> in "
        "your own recorder.wave(...); or give each padded width its own signature, or pack "
        f"without padding ({SHAPE_DOCS})."
    )


def unequal_peaks(frame: pl.DataFrame, safety_factor: float) -> pl.DataFrame:
    """Waves of one run and signature with the same tokens whose peaks differ by more
    than ``safety_factor`` allows, one row per such group of equal tokens.

    A wave's peak is its actual bytes, as replay counts them (the largest
    ``max(0, peak - baseline)`` over its readings); waves that ran out of memory
    or used none are left out, and so is each signature's first wave on each rank
    (it pays one-time costs, such as the gradients' first allocation, which
    warm-fit's seed keeps out of its fit too). Waves have the same tokens when they agree on
    ``packed_tokens``, ``logical_tokens`` and ``output_bytes`` (every policy's
    inputs); a group is named when its largest peak is above ``int(smallest *
    safety_factor)``, the price a perfect estimate of the smallest would give.
    Columns: ``run``, ``signature``, ``packed_tokens``, ``waves``, ``low``, ``high``;
    ``low_baseline`` and ``high_baseline`` (the baseline of those two waves' first
    readings), ``high_kept`` (what the wave of the high peak left allocated: the next
    wave's baseline on its rank less its own; null for a rank's last wave) and
    ``by_baseline`` (true when the baselines explain the gap: the wave of the high
    peak started lower, by enough that its peak less that difference is within the
    margin, as when it allocated the gradients that the next wave found held, after
    ``zero_grad(set_to_none=True)``); and, when the trace has the column,
    ``low_sum_sq`` and ``high_sum_sq`` (the ``sum_sq_tokens`` of those two waves);
    sorted by run, signature, then widest first.

    Bytes near 2**63 are no error: a margin beyond the largest Int64 holds every peak.
    """
    has_sum_sq = _integer_column(frame, SUM_SQ_COLUMN)
    delta = pl.max_horizontal(pl.col("peak_bytes") - pl.col("baseline_bytes"), pl.lit(0))
    per_wave = [
        pl.col("signature").first(),
        pl.col("packed_tokens").first(),
        pl.col("logical_tokens").first(),
        pl.col("output_bytes").first(),
        delta.max().alias("actual"),
        pl.col("oom").any().alias("oom"),
        pl.col("seq").min().alias("first_seq"),
        pl.col("baseline_bytes").sort_by("seq").first().alias("baseline"),
    ]
    if has_sum_sq:
        per_wave.append(pl.col(SUM_SQ_COLUMN).max())
    groups = [
        pl.len().cast(pl.Int64).alias("waves"),
        pl.col("actual").min().alias("low"),
        pl.col("actual").max().alias("high"),
        pl.col("baseline").sort_by("actual").first().alias("low_baseline"),
        pl.col("baseline").sort_by("actual").last().alias("high_baseline"),
        pl.col("kept").sort_by("actual").last().alias("high_kept"),
    ]
    if has_sum_sq:
        groups += [
            pl.col(SUM_SQ_COLUMN).sort_by("actual").first().alias("low_sum_sq"),
            pl.col(SUM_SQ_COLUMN).sort_by("actual").last().alias("high_sum_sq"),
        ]
    if frame.height == 0:
        return frame.select("run", "signature", "packed_tokens").clear()
    # int(low * f): null where it is beyond Int64, which then holds every peak
    margin = (pl.col("low").cast(pl.Float64) * safety_factor).floor().cast(pl.Int64, strict=False)
    base_gap = pl.col("low_baseline") - pl.col("high_baseline")
    by_baseline = (base_gap > 0) & (pl.col("high") - base_gap <= margin)
    return (
        frame.group_by("run", "rank", "wave")
        .agg(per_wave)
        .sort("run", "rank", "first_seq")
        .with_columns(  # what each wave left allocated: the next one's start less its own
            (pl.col("baseline").shift(-1).over("run", "rank") - pl.col("baseline")).alias("kept")
        )
        .filter(  # not the signature's first wave on its rank: it pays one-time costs
            pl.col("first_seq").rank("ordinal").over("run", "rank", "signature") > 1
        )
        .filter(~pl.col("oom") & (pl.col("actual") > 0))
        .group_by("run", "signature", "packed_tokens", "logical_tokens", "output_bytes")
        .agg(groups)
        .filter(pl.col("high") > margin)
        .with_columns(
            (pl.col("high") / pl.col("low")).alias("ratio"),
            by_baseline.fill_null(False).alias("by_baseline"),
        )
        .sort(["run", "signature", "ratio"], descending=[False, False, True])
        .drop("logical_tokens", "output_bytes")
    )


def unequal_peaks_warning(frame: pl.DataFrame, safety_factor: float, shown: int = 5) -> str:
    """The warning for :func:`unequal_peaks` (``""`` when there are none): per run and
    signature, the groups of equal tokens and the widest; then what ``sum_sq_tokens``
    says (or that the trace lacks it), and how to split such waves into signatures."""
    found = unequal_peaks(frame, safety_factor)
    if found.height == 0:
        return ""
    has_sum_sq = "low_sum_sq" in found.columns
    parts = []
    pairs = found.partition_by("run", "signature", maintain_order=True)
    for group in pairs[:shown]:
        widest = group.row(0, named=True)
        text = (
            f"run '{printable(widest['run'])}' signature '{printable(widest['signature'])}': "
            f"{widest['waves']} waves of {widest['packed_tokens']:,} packed tokens (after "
            f"each rank's first wave of it) peak at "
            f"{format_bytes(widest['low'])} to {format_bytes(widest['high'])} "
            f"(+{widest['ratio'] - 1:.0%}"
        )
        if has_sum_sq and widest["low_sum_sq"] is not None and widest["high_sum_sq"] is not None:
            text += f"; sum_sq_tokens {widest['low_sum_sq']:,} and {widest['high_sum_sq']:,}"
        if widest["by_baseline"]:
            gap = widest["low_baseline"] - widest["high_baseline"]
            text += (
                f"; the wave of the higher peak started {format_bytes(gap)} lower, at a "
                f"baseline of {format_bytes(widest['high_baseline'])} against "
                f"{format_bytes(widest['low_baseline'])}"
            )
            if widest["high_kept"] is not None and widest["high_kept"] > 0:
                text += f", and left {format_bytes(widest['high_kept'])} allocated after it"
        text += ")"
        if group.height > 1:
            text += f" and {counted(group.height - 1, 'more set')} of equal tokens"
        parts.append(text)
    if len(pairs) > shown:
        parts.append(f"and {len(pairs) - shown} more signatures")
    shown_groups = [group.row(0, named=True) for group in pairs[:shown]]
    if all(row["by_baseline"] for row in shown_groups):
        return (
            "warmfit: warning: waves with the same tokens differ in peak by more than the "
            f"safety margin ({safety_factor - 1:.0%}, safety factor {safety_factor:g}): "
            + "; ".join(parts)
            + ". Their baselines explain it, not their tokens' shape: the wave of the higher "
            "peak allocated memory that a later wave found already held (the gradients, for "
            "one, when the first wave of each step allocates them after "
            "zero_grad(set_to_none=True)), so its delta above its baseline counts that "
            "memory too. Give the first wave of each step its own signature, or keep the "
            f"gradients allocated (zero_grad(set_to_none=False)) ({SHAPE_DOCS})."
        )
    if any(row["by_baseline"] for row in shown_groups):
        parts.append(
            "where the higher peak started lower, the baselines explain the gap (memory "
            "that wave allocated and kept, such as the gradients after "
            "zero_grad(set_to_none=True)), not attention"
        )
    if has_sum_sq:
        column = (
            f"The trace has the column {SUM_SQ_COLUMN} (the sum of each wave's squared "
            "sequence lengths): where it differs between such waves, attention (which "
            "without a fused kernel grows with each sequence's length squared) is the likely "
            "cause."
        )
    else:
        column = (
            f"This trace has no {SUM_SQ_COLUMN} column (the sum of each wave's squared "
            "sequence lengths, which attention without a fused kernel grows with): the "
            "Lightning and Hugging Face integrations write it, and your own loop can with "
            f"recorder.wave(..., {SUM_SQ_COLUMN}=...)."
        )
    margin = f"{safety_factor - 1:.0%}"
    return (
        "warmfit: warning: waves with the same tokens differ in peak by more than the "
        f"safety margin ({margin}, safety factor {safety_factor:g}): "
        + "; ".join(parts)
        + ". Tokens alone do not decide memory there: every policy prices one such wave "
        f"under its peak, or the others far over. {column} Split such waves into "
        f"signatures, by sequence-length bucket for example ({SHAPE_DOCS})."
    )


def shape_warnings(frame: pl.DataFrame, safety_factor: float) -> list[str]:
    """Every warning of this module about a trace (none: an empty list)."""
    return [
        text
        for text in (padding_warning(frame), unequal_peaks_warning(frame, safety_factor))
        if text
    ]
