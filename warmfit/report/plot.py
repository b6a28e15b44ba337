"""Figures of a replay: where each policy prices each wave, and why.

The module has two halves. The builders turn readings and a replay into
plain polars frames, one per figure, with the units the figures show (GB =
10^9 bytes, KB = 1000 bytes, percent); the tests check these. The renderer
draws them with matplotlib, imported lazily with the non-interactive Agg
canvas, so ``warmfit replay`` never imports matplotlib.

One row of three panels per run:

(a) **peaks**: each wave's actual peak above baseline and every policy's
    estimate, waves in recording order; estimates under their wave's peak
    are marked.
(b) **rates**: each wave's compute bytes per packed token
    (``max(0, actual - output) / packed``, KB/token) against its packed
    tokens, the seed wave (its profile's first whole reading) told apart from
    the warm waves, with each policy's final price per packed token drawn
    over them (no safety factor, logical = packed tokens). This is the PR
    #991 picture: the cold seed sits above the warm waves, max-merge prices
    at the seed's rate, warm-fit at the warm waves' rate.
(c) **over-estimates**: the distribution of ``estimate / actual - 1`` per
    policy (%), over the waves the report counts.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from warmfit.errors import UsageError
from warmfit.format.files import write_bytes_atomically
from warmfit.policies import PriceRequest
from warmfit.replay import IN_FIGURES, ReplayResult, group_keys
from warmfit.show.names import mathtext_literal, printable

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from warmfit.report.sweep import SweepResult

GB = 1e9
KB = 1e3
#: Output suffixes ``warmfit plot`` can write, and the matplotlib format of each.
SUFFIXES = {".png": "png", ".svg": "svg"}
#: Size of one run's row of panels, in inches; the figure is this wide and
#: ``ROW_HEIGHT_IN`` tall per run (plus a title band), at :data:`DPI`.
WIDTH_IN = 15.0
ROW_HEIGHT_IN = 4.2
TITLE_IN = 0.6
DPI = 100
CURVE_POINTS = 160


# --------------------------------------------------------------------------- data


def peak_series(result: ReplayResult) -> pl.DataFrame:
    """Panel (a): one row per wave and policy, in recording order.

    Columns: ``run, rank, wave, position`` (0, 1, ... within the run),
    ``policy, actual_gb, estimate_gb`` (null when unpriced), ``set_by``
    (profile, floor or null) and ``under_peak``.
    """
    per_wave = result.per_wave
    order = (
        per_wave.select("run", "rank", "wave")
        .unique(maintain_order=True)
        .with_columns(pl.int_range(pl.len()).over("run").alias("position"))
    )
    return per_wave.join(order, on=["run", "rank", "wave"], maintain_order="left").select(
        "run",
        "rank",
        "wave",
        "position",
        "policy",
        (pl.col("actual_bytes") / GB).alias("actual_gb"),
        (pl.col("estimate_bytes") / GB).alias("estimate_gb"),
        "set_by",
        pl.col("under_peak").fill_null(False),
    )


def rate_points(result: ReplayResult) -> pl.DataFrame:
    """Panel (b) points: one row per wave with its rate and role.

    ``rate_kb_per_token`` = ``max(0, actual - output) / packed / 1000``,
    where actual is the wave's largest delta; ``floor_kb_per_token`` is the
    static floor per packed token (null without a floor). ``role`` is the
    wave's role in its profile as the replay found it
    (:func:`warmfit.replay.wave_roles`): ``seed``, ``warm`` or ``other``.
    """
    waves = result.per_wave.filter(pl.col("policy") == result.policies[0])
    return (
        waves.with_row_index("first_seq")
        .join(result.roles, on=["run", "rank", "wave"], how="left", maintain_order="left")
        .select(
            "run",
            "rank",
            "signature",
            "wave",
            pl.col("first_seq").cast(pl.Int64),
            "packed_tokens",
            "actual_bytes",
            (
                (pl.col("actual_bytes") - pl.col("output_bytes")).clip(lower_bound=0)
                / pl.col("packed_tokens")
                / KB
            ).alias("rate_kb_per_token"),
            (pl.col("static_floor_bytes") / pl.col("packed_tokens") / KB).alias(
                "floor_kb_per_token"
            ),
            pl.col("role").fill_null("other"),
        )
        .sort(["run", "rank", "first_seq"])
    )


def price_curves(result: ReplayResult, points: int = CURVE_POINTS) -> pl.DataFrame:
    """Panel (b) curves: each policy's final price per packed token.

    One row per (run, rank, signature, policy) and packed-token count on a
    grid spanning the profile's waves (from 0.8x the smallest to 1.1x the
    largest), priced by the profile as the replay left it
    (:attr:`warmfit.replay.ReplayResult.profiles`) with logical = packed
    tokens, no outputs and no floor: ``price_kb_per_token`` = ``p / packed /
    1000`` (null while unpriced).
    """
    spans = result.per_wave.group_by(["run", "rank", "signature"], maintain_order=True).agg(
        pl.col("packed_tokens").min().alias("lo"), pl.col("packed_tokens").max().alias("hi")
    )
    span = {(r["run"], r["rank"], r["signature"]): (r["lo"], r["hi"]) for r in spans.to_dicts()}
    rows: dict[str, list[Any]] = {
        k: [] for k in ("run", "rank", "signature", "policy", "packed_tokens", "price_kb_per_token")
    }
    for (run, rank, signature, name), profile in result.profiles.items():
        lo, hi = span[(run, rank, signature)]
        start, stop = max(1, int(lo * 0.8)), max(2, int(hi * 1.1))
        grid = sorted({start + (stop - start) * i // (points - 1) for i in range(points)})
        for n in grid:
            p = profile.price(PriceRequest(n, n))
            rows["run"].append(run)
            rows["rank"].append(rank)
            rows["signature"].append(signature)
            rows["policy"].append(name)
            rows["packed_tokens"].append(n)
            rows["price_kb_per_token"].append(None if p is None else p / n / KB)
    return pl.DataFrame(
        rows,
        schema={
            "run": pl.String(),
            "rank": pl.Int32(),
            "signature": pl.String(),
            "policy": pl.String(),
            "packed_tokens": pl.Int64(),
            "price_kb_per_token": pl.Float64(),
        },
    )


def over_estimates(result: ReplayResult) -> pl.DataFrame:
    """Panel (c): ``run, policy, over_estimate_pct`` for the waves the report counts.

    Those are the priced waves that did not run out of memory and have an
    actual peak above baseline (SPEC §3 "Report").
    """
    return result.per_wave.filter(IN_FIGURES).select(
        "run", "policy", (pl.col("over_estimate") * 100).alias("over_estimate_pct")
    )


@dataclass(frozen=True)
class PlotData:
    """Everything the figures show, as plain frames."""

    runs: tuple[str, ...]
    policies: tuple[str, ...]
    safety_factor: float
    peaks: pl.DataFrame
    rates: pl.DataFrame
    curves: pl.DataFrame
    over: pl.DataFrame
    main_profiles: dict[str, tuple[int, str]]
    profile_counts: dict[str, int]
    #: A footnote under the figure: where the traces come from (see :func:`provenance_caption`).
    caption: str | None = None


def main_profile(
    rates: pl.DataFrame, run: str, signature: str | None = None
) -> tuple[tuple[int, str], int]:
    """The (rank, signature) panel (b) shows for ``run``, and how many profiles it has.

    Panel (b) shows one profile: the one of ``signature`` when the run has
    it, else the busiest one; among several, the one with the most waves
    (lowest rank, then signature in name order, on a tie).
    """
    counts = (
        rates.filter(pl.col("run") == run)
        .group_by("rank", "signature")
        .len()
        .sort(["len", "rank", "signature"], descending=[True, False, False])
    )
    chosen = counts.filter(pl.col("signature") == signature) if signature is not None else counts
    top = (chosen if chosen.height else counts).row(0, named=True)
    return (top["rank"], top["signature"]), counts.height


def check_signature(result: ReplayResult, signature: str) -> None:
    """Refuse (exit 2) a ``--signature`` that no run of the replay has, listing those it has."""
    known = result.per_wave.get_column("signature").unique(maintain_order=True).to_list()
    if signature not in known:
        shown = ", ".join("'" + printable(s) + "'" for s in sorted(known))
        raise UsageError(
            f"--signature '{printable(signature)}': no run of the trace has that signature. "
            f"Its signatures: {shown}. Name one of them, or leave --signature out to show "
            "each run's busiest one."
        )


def build_plot_data(
    result: ReplayResult, caption: str | None = None, signature: str | None = None
) -> PlotData:
    """The data behind every figure of one replay, drawn from its result alone.

    ``caption`` is a footnote; ``signature`` picks the profile panel (b)
    shows in each run that has it (default: each run's busiest one,
    :func:`main_profile`).
    """
    if signature is not None:
        check_signature(result, signature)
    rates = rate_points(result)
    runs = tuple(result.summary.get_column("run").unique(maintain_order=True).to_list())
    mains: dict[str, tuple[int, str]] = {}
    counts: dict[str, int] = {}
    for run in runs:
        mains[run], counts[run] = main_profile(rates, run, signature)
    return PlotData(
        runs=runs,
        policies=result.policies,
        safety_factor=result.safety_factor,
        peaks=peak_series(result),
        rates=rates,
        curves=price_curves(result),
        over=over_estimates(result),
        main_profiles=mains,
        profile_counts=counts,
        caption=caption or None,
    )


#: Trace-file metadata naming where a trace comes from (``warmfit.samples.synthetic`` writes it).
PROVENANCE_KEY = "warmfit.provenance"


def provenance_caption(files: Sequence[str | os.PathLike[str]]) -> str | None:
    """A footnote from the files' ``warmfit.provenance`` metadata: ``RUNS: provenance`` lines.

    Files without it (recordings) add nothing; ``None`` when no file has it.
    """
    import pyarrow.parquet as pq

    runs: dict[str, list[str]] = {}
    for path in files:
        text = (pq.read_schema(path).metadata or {}).get(PROVENANCE_KEY.encode())
        if text is None:
            continue
        names = (
            pl.read_parquet(Path(path), columns=["run"])
            .get_column("run")
            .unique(maintain_order=True)
        )
        runs.setdefault(text.decode(errors="replace"), []).extend(names.to_list())
    if not runs:
        return None
    return "\n".join(f"{', '.join(dict.fromkeys(names))}: {text}" for text, names in runs.items())


def figure_size(runs: int) -> tuple[float, float]:
    """Width and height in inches of the sheet for ``runs`` runs.

    >>> figure_size(2)
    (15.0, 9.0)
    """
    return WIDTH_IN, TITLE_IN + ROW_HEIGHT_IN * max(1, runs)


def plot_format(path: str | os.PathLike[str]) -> str:
    """The image format for an output path, from its suffix (png or svg).

    >>> plot_format("figures/pr991.SVG")
    'svg'
    """
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(
            f"cannot tell the image format of {path}: its suffix must be .png or .svg "
            f"(got {suffix or 'no suffix'!r})."
        )
    return SUFFIXES[suffix]


# --------------------------------------------------------------------------- render

#: Colours that tell policies apart (first ones: max-merge, warm-fit).
_POLICY_COLOURS = ("#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#e6ab02")
_LINESTYLES = ("-", "--", "-.", ":")
_ACTUAL = "#222222"
_ROLE_STYLE = {
    "seed": {"color": "#c51b1b", "marker": "*", "s": 260, "label": "cold seed wave", "zorder": 5},
    "warm": {"color": "#2c7fb8", "marker": "o", "s": 36, "label": "warm waves", "zorder": 4},
    "other": {"color": "#999999", "marker": "s", "s": 24, "label": "other waves", "zorder": 3},
}


def _label(name: str) -> str:
    """A name from a trace as matplotlib text: shown literally, never as mathtext."""
    return mathtext_literal(name)


def _colour(policies: Sequence[str], name: str) -> str:
    return _POLICY_COLOURS[list(policies).index(name) % len(_POLICY_COLOURS)]


def _line(policies: Sequence[str], name: str) -> dict[str, Any]:
    # Later policies are drawn thinner, dashed and on top, so that two
    # policies giving the same estimates (a floor sets both) both stay visible.
    i = list(policies).index(name)
    return {
        "color": _colour(policies, name),
        "linestyle": _LINESTYLES[i % len(_LINESTYLES)],
        "linewidth": max(1.2, 3.0 - 0.8 * i),
        "zorder": 3 + i,
    }


def _require_matplotlib() -> None:
    """A clear usage error, not an ImportError, where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "warmfit plot needs matplotlib, which is not installed: pip install 'warmfit[plot]'."
        ) from None


def draw_figure(data: PlotData) -> Figure:
    """Draw every run's row of panels on one matplotlib figure (no pyplot state)."""
    _require_matplotlib()
    from matplotlib.figure import Figure

    width, height = figure_size(len(data.runs))
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.suptitle(
        "warmfit replay: "
        + ", ".join(map(_label, data.policies))
        + f" (safety factor {data.safety_factor:g})",
        fontsize=14,
    )
    axes = fig.subplots(max(1, len(data.runs)), 3, squeeze=False)
    if data.caption:
        fig.supxlabel(data.caption, fontsize=11, fontstyle="italic")
    for row, run in enumerate(data.runs):
        _draw_peaks(axes[row][0], data, run)
        _draw_rates(axes[row][1], data, run)
        _draw_over(axes[row][2], data, run)
    return fig


def byte_unit(largest_gb: float) -> tuple[float, str]:
    """The factor from GB and the unit that keep a byte axis readable.

    >>> byte_unit(8.2), byte_unit(0.0075), byte_unit(2e-7)
    ((1.0, 'GB'), (1000.0, 'MB'), (1000000.0, 'KB'))
    """
    for factor, unit in ((1.0, "GB"), (1e3, "MB")):
        if largest_gb * factor >= 1:
            return factor, unit
    return 1e6, "KB"


#: Where a panel's legend goes: below its axes (under the x-axis label), so
#: that it can hide no wave, whatever the data (the constrained layout makes
#: room for it).
LEGEND_BELOW = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.17), "fontsize": 8}


def _legend_below(ax: Any, **options: Any) -> Any:
    return ax.legend(**{**LEGEND_BELOW, **options})


def _draw_peaks(ax: Any, data: PlotData, run: str) -> None:
    peaks = data.peaks.filter(pl.col("run") == run)
    actual = peaks.unique(["position"], keep="first", maintain_order=True)
    largest = peaks.select(
        pl.max_horizontal(pl.col("actual_gb").max(), pl.col("estimate_gb").max())
    ).item()
    scale, unit = byte_unit(largest or 0.0)
    x = actual.get_column("position").to_list()
    ax.plot(
        x,
        (actual.get_column("actual_gb") * scale).to_list(),
        color=_ACTUAL,
        marker="o",
        markersize=4,
        linewidth=2,
        label="actual peak",
        zorder=4,
    )
    under_labelled = False
    for name in data.policies:
        mine = peaks.filter(pl.col("policy") == name)
        ax.plot(
            mine.get_column("position").to_list(),
            (mine.get_column("estimate_gb") * scale).to_list(),
            marker=".",
            label=f"{_label(name)} estimate",
            **_line(data.policies, name),
        )
        under = mine.filter(pl.col("under_peak"))
        if under.height:
            ax.scatter(
                under.get_column("position").to_list(),
                (under.get_column("estimate_gb") * scale).to_list(),
                marker="x",
                s=80,
                color="red",
                linewidths=2,
                label=None if under_labelled else "estimate under its peak",
                zorder=6,
            )
            under_labelled = True
    setters = peaks.get_column("set_by").drop_nulls().unique().to_list()
    if setters == ["floor"]:
        ax.set_ylim(top=ax.get_ylim()[1] * 1.12)  # room for the note above the lines
        ax.text(
            0.02,
            0.97,
            "every estimate is set by the static floor",
            transform=ax.transAxes,
            va="top",
            fontsize=9,
            color="#555555",
        )
    ax.set_title(f"{_label(run)}: peak memory per wave")
    ax.set_xlabel("wave (recording order)")
    ax.set_ylabel(f"bytes above baseline ({unit})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_below(ax, ncol=2)


def _draw_rates(ax: Any, data: PlotData, run: str) -> None:
    rank, signature = data.main_profiles[run]
    profiles = data.profile_counts[run]
    mine = (pl.col("run") == run) & (pl.col("rank") == rank) & (pl.col("signature") == signature)
    points = data.rates.filter(mine)
    curves = data.curves.filter(mine)
    for name in data.policies:
        curve = curves.filter(pl.col("policy") == name)
        ax.plot(
            (curve.get_column("packed_tokens") / 1000).to_list(),
            curve.get_column("price_kb_per_token").to_list(),
            label=f"{_label(name)} price",
            **_line(data.policies, name),
        )
    floors = points.filter(pl.col("floor_kb_per_token").is_not_null()).sort("packed_tokens")
    if floors.height:
        ax.plot(
            (floors.get_column("packed_tokens") / 1000).to_list(),
            floors.get_column("floor_kb_per_token").to_list(),
            color="#555555",
            linestyle=":",
            linewidth=2,
            label="static floor",
            zorder=2,
        )
    for role in ("other", "warm", "seed"):
        chosen = points.filter(pl.col("role") == role)
        if chosen.height:
            ax.scatter(
                (chosen.get_column("packed_tokens") / 1000).to_list(),
                chosen.get_column("rate_kb_per_token").to_list(),
                **_ROLE_STYLE[role],
            )
    where = f" (rank {rank}, signature {_label(signature)})" if profiles > 1 else ""
    ax.set_title(
        f"{_label(run)}: rate per packed token{where}", **({"fontsize": 10} if where else {})
    )
    ax.set_xlabel("packed tokens (thousands)")
    ax.set_ylabel("compute bytes per packed token (KB/token)")
    ax.grid(alpha=0.3)
    shown = [
        *points.get_column("rate_kb_per_token").to_list(),
        *curves.get_column("price_kb_per_token").drop_nulls().to_list(),
        *floors.get_column("floor_kb_per_token").to_list(),
    ]
    if shown:
        low, high = min(shown), max(shown)
        span = max(high - low, 0.05 * high, 1.0)
        ax.set_ylim(low - 0.08 * span, high + 0.08 * span)
    _legend_below(
        ax,
        ncol=2,
        title=f"price per token after the last wave, before ×{data.safety_factor:g}",
        title_fontsize=8,
    )


def _draw_over(ax: Any, data: PlotData, run: str) -> None:
    over = data.over.filter(pl.col("run") == run)
    values = [
        over.filter(pl.col("policy") == name).get_column("over_estimate_pct").to_list()
        for name in data.policies
    ]
    positions = list(range(1, len(data.policies) + 1))
    present = [(p, v) for p, v in zip(positions, values, strict=True) if v]
    if present:
        box = ax.boxplot(
            [v for _, v in present],
            positions=[p for p, _ in present],
            widths=0.5,
            showfliers=False,
            patch_artist=True,
            medianprops={"color": "black", "linewidth": 2},
        )
        for patch, (p, _) in zip(box["boxes"], present, strict=True):
            patch.set_facecolor(_colour(data.policies, data.policies[p - 1]))
            patch.set_alpha(0.35)
    for p, v in present:
        spread = [p + 0.18 * ((i * 7919) % 11 - 5) / 5 for i in range(len(v))]
        ax.scatter(spread, v, s=14, color=_colour(data.policies, data.policies[p - 1]), zorder=3)
        median = sorted(v)[(len(v) - 1) // 2 : len(v) // 2 + 1]
        ax.annotate(
            f"median {sum(median) / len(median):+.1f}%",
            (p, max(v)),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=9,
        )
    ax.axhline(0, color="red", linewidth=1, linestyle="--", label="actual peak (0%)")
    ax.set_xticks(positions, [_label(p) for p in data.policies])
    ax.set_xlim(0.4, len(positions) + 0.6)
    ax.set_title(f"{_label(run)}: over-estimate per wave")
    ax.set_ylabel("estimate / actual - 1 (%)")
    ax.grid(alpha=0.3, axis="y")
    _legend_below(ax, ncol=2)
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, -5), high + (high - low) * 0.08)


def render_bytes(data: PlotData, fmt: str = "png", dpi: float = DPI) -> bytes:
    """The figure as PNG or SVG bytes (``dpi``: pixels per inch of a PNG)."""
    return figure_bytes(draw_figure(data), fmt, dpi)


def figure_bytes(fig: Figure, fmt: str = "png", dpi: float = DPI) -> bytes:
    """A drawn figure as PNG or SVG bytes, with no date or version in them."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    extra: dict[str, Any] = {"pil_kwargs": {"optimize": True}} if fmt == "png" else {}
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata=_metadata(fmt), **extra)
    return buffer.getvalue()


def _metadata(fmt: str) -> dict[str, Any]:
    # No dates or software versions in the file, so the same data gives the same bytes.
    if fmt == "svg":
        return {"Date": None, "Creator": None}
    return {"Software": None}


def render_plot(data: PlotData, path: str | os.PathLike[str]) -> Path:
    """Write the figure to ``path`` atomically; PNG or SVG by its suffix."""
    target = Path(path)
    return write_bytes_atomically(target, render_bytes(data, plot_format(target)))


# --------------------------------------------------------------------------- sweep


def pareto_points(result: SweepResult) -> pl.DataFrame:
    """The Pareto picture's data: per result and policy, every grid factor's waves
    under their peak and median over-estimate (%), and the safe factor's point."""
    rows = []
    keys = group_keys(result.by)
    for r in result.results:
        label = " / ".join(str(r[k]) for k in keys)
        grid = cast(list[dict[str, Any]], r["points"])
        points = [
            (p["safety_factor"], p["under_peak"], p["median_over_estimate"], False) for p in grid
        ]
        if r["safe_factor"] is not None:
            points.append((r["safe_factor"], 0, r["median_over_estimate_at_safe"], True))
        rows += [
            {"result": label, "policy": r["policy"], "safety_factor": f, "under_peak": u,
             "median_over_estimate_pct": None if m is None else m * 100, "safe": safe}
            for f, u, m, safe in points
        ]  # fmt: skip
    schema = {
        "result": pl.String(), "policy": pl.String(), "safety_factor": pl.Float64(),
        "under_peak": pl.Int64(), "median_over_estimate_pct": pl.Float64(), "safe": pl.Boolean(),
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema, orient="row")


def draw_pareto(result: SweepResult) -> Figure:
    """One panel per result: median over-estimate against waves under their peak as the
    safety factor varies, one line per policy, its safe factor starred."""
    _require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    data = pareto_points(result)
    labels = list(dict.fromkeys(data.get_column("result").to_list()))
    policies = list(dict.fromkeys(data.get_column("policy").to_list()))
    columns = min(3, max(1, len(labels)))
    rows = max(1, -(-len(labels) // columns))
    fig = Figure(figsize=(5.2 * columns, 0.6 + 3.8 * rows), dpi=DPI, layout="constrained")
    title = "warmfit sweep: median over-estimate against waves under their peak"
    # one panel is too narrow for the title on one line (it was clipped)
    fig.suptitle(title.replace(" against", "\nagainst") if columns == 1 else title, fontsize=13)
    axes = fig.subplots(rows, columns, squeeze=False)
    for i, label in enumerate(labels):
        ax = axes[i // columns][i % columns]
        for policy in policies:
            mine = data.filter((pl.col("result") == label) & (pl.col("policy") == policy))
            grid = mine.filter(~pl.col("safe")).sort("safety_factor")
            ax.plot(grid.get_column("under_peak"), grid.get_column("median_over_estimate_pct"),
                    label=policy, marker=".", **_line(policies, policy))  # fmt: skip
            for f, u, m in (
                mine.filter(pl.col("safe"))
                .select("safety_factor", "under_peak", "median_over_estimate_pct")
                .iter_rows()
            ):
                ax.scatter([u], [m], marker="*", s=180, color=_colour(policies, policy), zorder=9)
                ax.annotate(f"safe ×{f:.3f}", (u, m), textcoords="offset points", xytext=(6, 4),
                            fontsize=8, color=_colour(policies, policy))  # fmt: skip
        ax.set_title(label, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("waves under their peak")
        ax.set_ylabel("median over-estimate (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for j in range(len(labels), rows * columns):
        axes[j // columns][j % columns].set_visible(False)
    return fig


def write_pareto(result: SweepResult, path: str | os.PathLike[str]) -> Path:
    """Write the Pareto picture of a sweep to ``path``; PNG or SVG by its suffix."""
    target = Path(path)
    return write_bytes_atomically(target, figure_bytes(draw_pareto(result), plot_format(target)))
