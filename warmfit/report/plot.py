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
    at the seed's rate, warm-fit at the warm waves' rate. The seed is called
    cold only where its rate is above every warm wave's (:func:`seed_is_cold`;
    the footnote says so): a recording's seed may cost no more than its warm
    waves.
(c) **over-estimates**: the distribution of ``estimate / actual - 1`` per
    policy (%), over the waves the report counts.

Every figure gives a built-in policy its own colour (:data:`POLICY_COLOURS`),
whatever its place among the policies drawn; other policies take theirs from
:data:`OTHER_COLOURS`. A count's axis has whole ticks; the packed-token axis
writes them as a person reads them (:func:`token_tick`).

A large trace is drawn as its pixels can show it (:func:`thin`): a series
of more than :data:`THIN_ABOVE` points keeps, per pixel column, its lowest
and highest point (lines), or one point per pixel cell (dots), with its
extremes and every estimate under its peak always drawn, and the figure's
footnote says so. Smaller ones are drawn point by point.
"""

from __future__ import annotations

import io
import os
import textwrap
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import polars as pl

from warmfit.errors import UsageError, no_room
from warmfit.format.files import write_bytes_atomically
from warmfit.policies import PriceRequest
from warmfit.replay import (
    IN_FIGURES,
    RECORDED,
    ReplayResult,
    group_keys,
    wave_roles,
)
from warmfit.replay.engines import lineup_names
from warmfit.run.cluster import short_message
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
#: A series of more points than this in one panel is thinned to what its pixels can show
#: (:func:`thin`); one of at most this many is drawn point by point, as it always was.
THIN_ABOVE = 5_000
#: Columns across the x range of a thinned line; each keeps its lowest and highest point.
#: A panel is about 400 pixels wide at :data:`DPI`, so a column is under half a pixel.
LINE_COLUMNS = 1_000
#: Cells (x by y) across the data range of a thinned scatter; each occupied one keeps one
#: point. A cell is about a pixel, smaller than the smallest marker (about 5 pixels).
SCATTER_CELLS = (320, 240)
#: Cells across the y range of a thinned over-estimate strip, per jitter offset (11 of them).
STRIP_CELLS = 400
#: The jitter offsets of panel (c): the i-th value of a policy is drawn at its position plus
#: ``0.18 * ((i * JITTER_STEP) % JITTER_OFFSETS - 5) / 5``.
JITTER_STEP, JITTER_OFFSETS = 7919, 11


# --------------------------------------------------------------------------- data


def peak_series(result: ReplayResult) -> pl.DataFrame:
    """Panel (a): one row per wave and policy, in recording order.

    Columns: ``run, rank, wave, position`` (0, 1, ... within the run),
    ``policy, actual_gb, estimate_gb`` (null when unpriced), ``set_by``
    (profile, floor or null), ``under_peak`` and ``oom`` (the wave ran out of memory:
    its actual peak is where it stopped, not what it needed).
    """
    per_wave = result.per_wave
    return per_wave.with_columns(position=_positions(per_wave)).select(
        "run",
        "rank",
        "wave",
        "position",
        "policy",
        (pl.col("actual_bytes") / GB).alias("actual_gb"),
        (pl.col("estimate_bytes") / GB).alias("estimate_gb"),
        "set_by",
        pl.col("under_peak").fill_null(False),
        pl.col("oom").fill_null(False),
    )


#: At most this many profiles asked of :func:`curves_of`: their waves are picked out before
#: the spans are found (a figure asks for one a run; grouping every wave of a 1.3e6-wave
#: run to keep one group took 0.15 s).
FEW_PROFILES = 64

#: What names a wave in per-wave rows.
WAVE_KEY = ("run", "rank", "wave")


def _starts(*columns: str) -> pl.Expr:
    """Whether each row starts a block of rows alike in ``columns`` (the first row does)."""
    return pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(1)) for c in columns).fill_null(
        True
    )


def _positions(per_wave: pl.DataFrame) -> pl.Series:
    """Each row's wave's place in its run (0, 1, ...), waves in the order they first come.

    Rows come wave by wave (a wave's rows, one a policy, next to each other), so the
    places are those of the blocks of rows with one key, counted per run: found without
    a join where no key comes back in a later block (checked), by a join otherwise."""
    blocks = per_wave.select(_starts(*WAVE_KEY).alias("start"), *WAVE_KEY)
    firsts = blocks.filter("start").drop("start")
    if firsts.height == firsts.n_unique():
        place = firsts.select(pl.int_range(pl.len()).over("run")).to_series()
        block = blocks.get_column("start").cast(pl.Int64).cum_sum() - 1
        return place.gather(block).alias("position")
    order = (
        per_wave.select(*WAVE_KEY)
        .unique(maintain_order=True)
        .with_columns(pl.int_range(pl.len()).over("run").alias("position"))
    )
    return per_wave.join(order, on=list(WAVE_KEY), maintain_order="left").get_column("position")


def _with_roles(waves: pl.DataFrame, roles: pl.DataFrame) -> pl.DataFrame:
    """``waves`` (a row per wave) with each one's ``role`` from ``roles`` (null where it
    has none): taken row by row where both hold the same waves in the same order (as a
    replay makes them; checked), by a join otherwise."""
    keys = waves.select(*WAVE_KEY)
    if keys.equals(roles.select(*WAVE_KEY)) and keys.n_unique() == keys.height:
        return waves.with_columns(roles.get_column("role"))
    return waves.join(roles, on=list(WAVE_KEY), how="left", maintain_order="left")


def rate_points(result: ReplayResult, roles: pl.DataFrame | None = None) -> pl.DataFrame:
    """Panel (b) points: one row per wave with its rate and role.

    ``rate_kb_per_token`` = ``max(0, actual - output) / packed / 1000``,
    where actual is the wave's largest delta; ``floor_kb_per_token`` is the
    static floor per packed token (null without a floor). ``role`` is the
    wave's role in its profile as the replay found it
    (:func:`warmfit.replay.wave_roles`): ``seed``, ``warm`` or ``other``; ``roles``:
    those roles, where already found (default: from the result's readings).
    """
    waves = result.per_wave.filter(pl.col("policy") == result.policies[0])
    return (
        _with_roles(waves.with_row_index("first_seq"), result.roles if roles is None else roles)
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


def price_curves(
    result: ReplayResult,
    points: int = CURVE_POINTS,
    profiles: Collection[tuple[str, int, str]] | None = None,
) -> pl.DataFrame:
    """Panel (b) curves: each policy's final price per packed token.

    One row per (run, rank, signature, policy) and packed-token count on a
    grid spanning the profile's waves (from 0.8x the smallest to 1.1x the
    largest), priced by the profile as the replay left it
    (:attr:`warmfit.replay.ReplayResult.profiles`) with logical = packed
    tokens, no outputs and no floor: ``price_kb_per_token`` = ``p / packed /
    1000`` (null while unpriced). ``profiles``: only those (run, rank,
    signature), the ones the figure shows (default: every one).
    """
    return curves_of(result.profiles, result.per_wave, points, profiles)


def curves_of(
    found: dict[Any, Any],
    waves: pl.DataFrame,
    points: int = CURVE_POINTS,
    profiles: Collection[tuple[str, int, str]] | None = None,
) -> pl.DataFrame:
    """:func:`price_curves` of the profiles ``found``, by (run, rank, signature, policy),
    over the packed tokens of ``waves`` (per-wave rows, or :func:`rate_points`: a row per
    wave of each profile is enough)."""
    if profiles is not None and len(profiles) <= FEW_PROFILES:  # the figure's: one a run
        waves = waves.filter(
            pl.any_horizontal(
                (pl.col("run") == run) & (pl.col("rank") == rank) & (pl.col("signature") == sig)
                for run, rank, sig in profiles
            )
            if profiles
            else pl.lit(False)
        )
    spans = waves.group_by(["run", "rank", "signature"], maintain_order=True).agg(
        pl.col("packed_tokens").min().alias("lo"), pl.col("packed_tokens").max().alias("hi")
    )
    span = {(r["run"], r["rank"], r["signature"]): (r["lo"], r["hi"]) for r in spans.to_dicts()}
    rows: dict[str, list[Any]] = {
        k: [] for k in ("run", "rank", "signature", "policy", "packed_tokens", "price_kb_per_token")
    }
    for (run, rank, signature, name), profile in found.items():
        if profiles is not None and (run, rank, signature) not in profiles:
            continue
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
class Drawn:
    """The points the renderer draws (:func:`thin`): every one of a small run, and of a
    large one what its pixels can show. Each frame holds rows of :class:`PlotData`'s.

    - ``peaks``: rows of ``peaks``, with ``draw_actual`` (the wave's actual peak is a
      point of the actual-peak line: one row per drawn wave) and ``draw_estimate`` (the
      row's estimate is a point of its policy's line; every estimate under its peak is);
    - ``rates``: rows of ``rates`` of each run's main profile, with ``draw_point`` (a dot)
      and ``draw_floor`` (a point of the static-floor line);
    - ``over``: rows of ``over``, with ``offset``, the dot's jitter from its policy's place.
    """

    peaks: pl.DataFrame
    rates: pl.DataFrame
    over: pl.DataFrame
    #: Waves in the runs drawn, points the figure would draw unthinned and points it draws.
    waves: int
    points: int
    drawn: int
    #: Estimates under their peak, each drawn (a red cross) whatever the thinning.
    under: int
    #: The runs thinned: those of more than :data:`THIN_ABOVE` waves (a run of fewer has no
    #: series that long, and is drawn whole).
    thinned: tuple[str, ...]

    @classmethod
    def combined(cls, parts: Sequence[Drawn]) -> Drawn:
        """What a figure of several runs draws, from each run's (:class:`PlotParts`)."""
        frames = {
            name: pl.concat([getattr(part, name) for part in parts], how="vertical_relaxed")
            for name in ("peaks", "rates", "over")
        }
        return cls(
            **frames,
            waves=sum(part.waves for part in parts),
            points=sum(part.points for part in parts),
            drawn=sum(part.drawn for part in parts),
            under=sum(part.under for part in parts),
            thinned=tuple(run for part in parts for run in part.thinned),
        )

    @property
    def note(self) -> str | None:
        """The footnote's line about the thinning; ``None`` when every point is drawn."""
        if not self.thinned:
            return None
        under = (
            f"every wave under its peak drawn ({self.under:,} "
            f"{'estimate' if self.under == 1 else 'estimates'})"
            if self.under
            else "no estimate is under its peak"
        )
        return (
            f"{self.waves:,} waves: {self.drawn:,} of {self.points:,} points drawn, binned by "
            "pixel (a line keeps each pixel column's lowest and highest, dots one per pixel "
            f"cell, extremes kept);\n{under}"
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
    #: What of the frames above is drawn (:func:`thin`).
    drawn: Drawn
    #: A footnote under the figure: where the traces come from (see :func:`provenance_caption`).
    caption: str | None = None
    #: The one rank drawn (``plot --rank``; a rank not held is refused by
    #: :meth:`PlotParts.sheet`), or ``None``: every rank.
    rank: int | None = None


def main_profile(
    rates: pl.DataFrame, run: str, signature: str | None = None
) -> tuple[tuple[int, str], int]:
    """The (rank, signature) panel (b) shows for ``run``, and how many profiles it has.

    Panel (b) shows one profile: the one of ``signature`` when the run has
    it, else the busiest one; among several, the one with the most waves
    (lowest rank, then signature in name order, on a tie).
    """
    return pick_profile(
        rates.filter(pl.col("run") == run).group_by("rank", "signature").len(), signature
    )


def pick_profile(counts: pl.DataFrame, signature: str | None) -> tuple[tuple[int, str], int]:
    """:func:`main_profile`'s choice among one run's profiles, from their wave counts
    (``rank, signature, len``), and how many there are."""
    counts = counts.sort(["len", "rank", "signature"], descending=[True, False, False])
    chosen = counts.filter(pl.col("signature") == signature) if signature is not None else counts
    top = (chosen if chosen.height else counts).row(0, named=True)
    return (top["rank"], top["signature"]), counts.height


#: The footnote's line on the seed wave (panel b), on every figure that draws one.
SEED_NOTE = (
    "seed: a profile's first whole wave; called cold where its rate per packed token is "
    "above every warm wave's"
)


def seed_is_cold(points: pl.DataFrame) -> bool:
    """Whether the seed of one profile's panel (b) points (:func:`rate_points`) is *cold*:
    its rate per packed token above every warm wave's (their largest). Not where no warm
    wave has been seen to compare it with, nor where a warm wave's rate is as high: the
    PR #991 picture (max-merge held at the seed's rate, above every warm wave) is then
    not what the trace shows.

    >>> rows = {"role": ["seed", "warm", "warm"], "rate_kb_per_token": [3.0, 2.0, 2.5]}
    >>> seed_is_cold(pl.DataFrame(rows))
    True
    >>> seed_is_cold(pl.DataFrame({**rows, "rate_kb_per_token": [3.0, 2.0, 3.0]}))
    False
    """
    rate = pl.col("rate_kb_per_token")
    seed = points.filter(pl.col("role") == "seed").select(rate.min()).item()
    warm = points.filter(pl.col("role") == "warm").select(rate.max()).item()
    return seed is not None and warm is not None and seed > warm


def seed_label(points: pl.DataFrame) -> str:
    """The seed's name in the legend of panel (b), from its profile's points:
    ``cold seed (first whole wave)`` where :func:`seed_is_cold`, else ``seed (first whole
    wave)`` (:data:`SEED_NOTE` says so under the figure)."""
    return ("cold " if seed_is_cold(points) else "") + "seed (first whole wave)"


def check_signature(result: ReplayResult, signature: str) -> None:
    """Refuse (exit 2) a ``--signature`` that no run of the replay has, listing those it has."""
    known = result.per_wave.get_column("signature").unique(maintain_order=True).to_list()
    refuse_unknown_signature(known, signature)


def refuse_unknown_signature(known: Collection[str], signature: str) -> None:
    """:func:`check_signature`, given the replay's signatures."""
    if signature not in known:
        shown = ", ".join("'" + printable(s) + "'" for s in sorted(known))
        raise UsageError(
            f"--signature '{printable(signature)}': no run of the trace has that signature. "
            f"Its signatures: {shown}. Name one of them, or leave --signature out to show "
            "each run's busiest one."
        )


# --------------------------------------------------------------------------- thinning


def cells(values: np.ndarray, count: int) -> np.ndarray:
    """Each value's cell among ``count`` equal cells across the values' range:
    ``floor((v - min) / (max - min) * count)``, the largest value in the last cell
    (every value in cell 0 when they are all equal).

    >>> cells(np.array([0.0, 0.5, 0.99, 1.0]), 4).tolist()
    [0, 2, 3, 3]
    """
    if not len(values):
        return np.zeros(0, np.int64)
    lo, hi = values.min(), values.max()
    if not hi > lo:
        return np.zeros(len(values), np.int64)
    return np.minimum(((values - lo) / (hi - lo) * count).astype(np.int64), count - 1)


def line_keep(x: np.ndarray, y: np.ndarray, columns: int = LINE_COLUMNS) -> np.ndarray:
    """Which points of a line (``x`` ascending) to draw, as a mask: in each of ``columns``
    equal columns across its x range (:func:`cells`) the lowest and the highest (the
    first of equals); the first and the last; and both sides of every gap (a NaN ``y``,
    which breaks the line).

    >>> line_keep(np.arange(6.0), np.array([3, 1, 2, 9, 8, 7.0]), columns=2).tolist()
    [True, True, False, True, False, True]
    """
    keep = np.zeros(len(x), bool)
    if not len(x):
        return keep
    keep[[0, -1]] = True
    missing = np.isnan(y)
    edge = missing[1:] != missing[:-1]
    keep[:-1] |= edge
    keep[1:] |= edge
    at = np.flatnonzero(~missing)
    if at.size:
        values, column = y[at], cells(x, columns)[at]
        starts = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])  # x ascending
        segment = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, at.size]))
        for extreme in (np.minimum, np.maximum):
            hits = np.flatnonzero(values == extreme.reduceat(values, starts)[segment])
            firsts = hits[np.r_[True, segment[hits][1:] != segment[hits][:-1]]]
            keep[at[firsts]] = True
    return keep


def _one_per_cell(key: np.ndarray) -> np.ndarray:
    """The first point of each distinct ``key`` (whole numbers from 0: cells), as indices.

    >>> _one_per_cell(np.array([3, 0, 3, 1, 0])).tolist()
    [1, 3, 0]
    """
    if not key.size:
        return np.zeros(0, np.int64)
    first = np.full(int(key.max()) + 1, key.size)
    np.minimum.at(first, key, np.arange(key.size))  # 25x np.unique's speed on 1.3e6 keys
    return first[first < key.size]


def scatter_keep(x: np.ndarray, y: np.ndarray, grid: tuple[int, int] = SCATTER_CELLS) -> np.ndarray:
    """Which dots of a scatter to draw, as a mask: in a ``grid`` of cells (x by y) across
    the dots' ranges (:func:`cells`) the first dot of each occupied cell, and the dots
    with the lowest and highest x and y. Dots with no finite place are kept (matplotlib
    skips them).

    >>> x = np.array([0, 0.1, 0.2, 5, 10.0])
    >>> scatter_keep(x, x, (2, 2)).tolist()
    [True, False, False, True, True]
    """
    keep = ~(np.isfinite(x) & np.isfinite(y))
    at = np.flatnonzero(~keep)
    if at.size:
        fx, fy = x[at], y[at]
        keep[at[_one_per_cell(cells(fx, grid[0]) * grid[1] + cells(fy, grid[1]))]] = True
        keep[at[[fx.argmin(), fx.argmax(), fy.argmin(), fy.argmax()]]] = True
    return keep


def strip_keep(offset_index: np.ndarray, y: np.ndarray, count: int = STRIP_CELLS) -> np.ndarray:
    """Which dots of a jittered strip (panel c) to draw, as a mask: per jitter offset
    (``offset_index``), the first dot in each of ``count`` cells across the y range
    (:func:`cells`); the lowest and the highest; every one below 0 (an estimate under
    its peak); and any that is not finite."""
    keep = ~np.isfinite(y) | (y < 0)
    at = np.flatnonzero(np.isfinite(y))
    if at.size:
        fy = y[at]
        keep[at[_one_per_cell(offset_index[at] * count + cells(fy, count))]] = True
        keep[at[[fy.argmin(), fy.argmax()]]] = True
    return keep


def _first_of_each_wave(peaks: pl.DataFrame) -> np.ndarray:
    """Whether each row of ``peaks`` is the first of its (run, position). Where each run's
    rows are together and their positions never go down (as :func:`peak_series` makes
    them; checked), the first rows are those where the run or the position changes."""
    run, position = pl.col("run"), pl.col("position")
    together = peaks.select(
        (run.rle_id().max().fill_null(-1) + 1 == run.n_unique()).alias("runs"),
        (_starts("run") | (position >= position.shift(1))).fill_null(True).all().alias("up"),
    ).row(0)
    first = (
        _starts("run", "position")
        if all(together)
        else pl.struct(run, position).is_first_distinct()
    )
    return peaks.select(first).to_series().to_numpy().copy()


def _of_runs(frame: pl.DataFrame, runs: Sequence[str]) -> pl.DataFrame:
    """The rows of ``frame`` of ``runs``: the frame itself where it holds no other run."""
    inside = pl.col("run").is_in(runs)
    return frame if frame.select(inside.all()).item() else frame.filter(inside)


def _waves_per_run(peaks: pl.DataFrame, first: np.ndarray) -> dict[str, int]:
    """Each run's waves (its first rows, :func:`_first_of_each_wave`), runs in the order
    they first come."""
    if not peaks.height:
        return {}
    if peaks.select(pl.col("run").n_unique()).item() == 1:
        return {peaks.get_column("run")[0]: int(first.sum())}
    counts = (
        peaks.select("run", pl.Series("first", first))
        .group_by("run", maintain_order=True)
        .agg(pl.col("first").sum())
    )
    return dict(counts.iter_rows())


def _thin_peaks(
    peaks: pl.DataFrame, first: np.ndarray, waves: dict[str, int], large: Sequence[str]
) -> pl.DataFrame:
    """Panel (a) of :func:`thin`: the rows of ``peaks`` drawn, with their flags; the
    ``large`` runs thinned. ``first``: each row's wave's first row
    (:func:`_first_of_each_wave`), whose actual peak the line takes, as it always did;
    ``waves``: each run's waves (:func:`_waves_per_run`)."""
    draw_actual = first.copy()
    draw_estimate = np.ones(peaks.height, bool)
    needed = ("_row", "run", "position", "policy", "actual_gb", "estimate_gb", "under_peak", "oom")
    indexed = peaks.with_row_index("_row").select(needed)
    if set(large) == set(waves):  # every run (one, as a plot
        parts = [indexed] if len(large) == 1 else indexed.partition_by("run")  # draws it)
    else:
        parts = indexed.filter(pl.col("run").is_in(large)).partition_by("run")
    for part in parts:
        # a stable sort (none where the rows come in order, as a replay makes them): the
        # first row of each wave is the one _first_of_each_wave picked
        position = part.get_column("position").to_numpy()
        order = (
            None
            if bool(np.all(position[1:] >= position[:-1]))
            else np.argsort(position, kind="stable")
        )

        def column(name: str, part: pl.DataFrame = part, order: Any = order) -> np.ndarray:
            values = part.get_column(name).to_numpy()
            return values if order is None else values[order]

        rows, position = column("_row"), column("position").astype(float)
        under = column("under_peak")
        starts = np.flatnonzero(np.r_[True, position[1:] != position[:-1]])
        actual = column("actual_gb")[starts]
        oom = column("oom")[starts]
        keep = line_keep(position[starts], actual) | np.logical_or.reduceat(under, starts) | oom
        draw_actual[rows] = False
        draw_actual[rows[starts[keep]]] = True
        estimate = column("estimate_gb")
        draw_estimate[rows] = False
        names = part.get_column("policy")
        for name in names.unique(maintain_order=True):
            mask = (names == name).to_numpy()
            line = np.flatnonzero(mask if order is None else mask[order])
            keep = line_keep(position[line], estimate[line]) | under[line]
            draw_estimate[rows[line[keep]]] = True
    drawn = draw_actual | draw_estimate  # a mask, not an expression: no copy of the frame
    return peaks.filter(pl.Series(drawn)).with_columns(
        draw_actual=draw_actual[drawn], draw_estimate=draw_estimate[drawn]
    )


def _thin_rates(
    rates: pl.DataFrame,
    peaks: pl.DataFrame,
    runs: Sequence[str],
    main_profiles: dict[str, tuple[int, str]],
    above: int,
) -> pl.DataFrame:
    """Panel (b) of :func:`thin`: the rows of each run's main profile, with their flags."""
    under_waves = (
        peaks.filter(pl.col("under_peak")).select("run", "rank", "wave").unique()
    ).with_columns(under_peak=pl.lit(True))
    parts = []
    for run in runs:
        rank, signature = main_profiles[run]
        points = rates.filter(
            (pl.col("run") == run) & (pl.col("rank") == rank) & (pl.col("signature") == signature)
        )
        draw_point = np.ones(points.height, bool)
        draw_floor = points.get_column("floor_kb_per_token").is_not_null().to_numpy()
        if points.height > above:
            under = (
                points.join(under_waves, on=["run", "rank", "wave"], how="left",
                            maintain_order="left")
                .get_column("under_peak").fill_null(False).to_numpy()
            )  # fmt: skip
            x = points.get_column("packed_tokens").to_numpy() / 1000
            y = points.get_column("rate_kb_per_token").to_numpy().astype(float)
            role = points.get_column("role").to_numpy()
            for name in ("other", "warm", "seed"):
                at = np.flatnonzero(role == name)
                if at.size > above:
                    draw_point[at] = scatter_keep(x[at], y[at]) | under[at]
            at = np.flatnonzero(draw_floor)
            if at.size > above:  # drawn as a line along packed tokens
                at = at[np.argsort(x[at], kind="stable")]
                floor = points.get_column("floor_kb_per_token").to_numpy()
                draw_floor[at] = line_keep(x[at], floor[at])
        parts.append(points.with_columns(draw_point=draw_point, draw_floor=draw_floor))
    if not parts:
        return rates.clear().with_columns(draw_point=pl.lit(True), draw_floor=pl.lit(True))
    return pl.concat(parts)


def _thin_over(over: pl.DataFrame, runs: Sequence[str], above: int) -> pl.DataFrame:
    """Panel (c) of :func:`thin`: the rows of ``over`` (the rows of ``runs``) drawn, with
    their offsets.

    Each strip (a policy's rows, a run's when several) numbers its rows 0, 1, ... in
    order; row ``i`` sits at jitter offset ``(i * JITTER_STEP) % JITTER_OFFSETS``."""
    by = ("run", "policy") if len(runs) > 1 else ("policy",)  # one run: its rows alone
    code = np.zeros(over.height, np.int64)
    for name in by:  # each strip's number, its rows in order after a stable sort
        column = over.get_column(name).cast(pl.Categorical).to_physical().to_numpy()
        code = code * (int(column.max()) + 1 if column.size else 1) + column
    order = np.argsort(code, kind="stable")
    ordered = code[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])[: ordered.size]
    sizes = np.diff(np.r_[starts, code.size])
    within = np.arange(code.size) - np.repeat(starts, sizes)
    k = np.empty(code.size, np.int64)
    k[order] = (within * JITTER_STEP) % JITTER_OFFSETS
    kept = np.empty(code.size, bool)
    kept[order] = np.repeat(sizes <= above, sizes)
    values = over.get_column("over_estimate_pct").to_numpy()
    for start, size in zip(starts, sizes, strict=True):
        if size > above:
            rows = order[start : start + size]
            kept[rows[strip_keep(k[rows], values[rows])]] = True
    return (
        over.with_columns(_k=pl.Series(k))
        .filter(pl.Series(kept))
        .with_columns(offset=0.18 * (pl.col("_k") - 5) / 5)
        .drop("_k")
    )


def thin(
    peaks: pl.DataFrame,
    rates: pl.DataFrame,
    over: pl.DataFrame,
    runs: Sequence[str],
    main_profiles: dict[str, tuple[int, str]],
    above: int = THIN_ABOVE,
) -> Drawn:
    """What the figure draws of the panels' frames (:class:`Drawn`).

    A series of at most ``above`` points in its panel is drawn whole, point by point.
    A longer one is thinned to what its pixels can show: a line (a run's actual peaks,
    each policy's estimates, the static floor) keeps what :func:`line_keep` keeps; a
    scatter (each role's dots of panel b) one dot per pixel cell (:func:`scatter_keep`);
    a strip of over-estimates (panel c) one dot per cell and jitter offset
    (:func:`strip_keep`). Every estimate under its peak is drawn whatever the thinning:
    its point on its policy's line, its wave's actual peak and dot in panel (b), and its
    over-estimate.
    """
    shown_peaks = _of_runs(peaks, runs)
    first = _first_of_each_wave(shown_peaks)
    waves = _waves_per_run(shown_peaks, first)
    # every series of a run has at most one point per wave: a run of at most `above` waves
    # is drawn whole, and one of more has at least its peak line thinned
    large = [run for run, count in waves.items() if count > above]
    drawn_peaks = _thin_peaks(shown_peaks, first, waves, large)
    drawn_rates = _thin_rates(rates, peaks, runs, main_profiles, above)
    shown_over = _of_runs(over, runs)
    drawn_over = _thin_over(shown_over, runs, above)
    estimate = pl.col("estimate_gb").is_not_null()
    floor = pl.col("floor_kb_per_token").is_not_null()
    under, estimates = shown_peaks.select(pl.col("under_peak").sum(), estimate.sum()).row(0)
    # what the figure would draw whole: every wave's actual peak, every estimate, the
    # crosses under the peaks, panel (b)'s dots and floor, panel (c)'s dots
    total = sum(waves.values())
    points = total + estimates + under
    points += drawn_rates.height + drawn_rates.filter(floor).height
    points += shown_over.height
    drawn = drawn_peaks.filter(pl.col("draw_actual")).height
    drawn += drawn_peaks.filter(pl.col("draw_estimate") & estimate).height + under
    drawn += drawn_rates.filter(pl.col("draw_point")).height
    drawn += drawn_rates.filter(pl.col("draw_floor")).height + drawn_over.height
    return Drawn(
        peaks=drawn_peaks,
        rates=drawn_rates,
        over=drawn_over,
        waves=total,
        points=points,
        drawn=drawn,
        under=under,
        thinned=tuple(large),
    )


def build_plot_data(
    result: ReplayResult,
    caption: str | None = None,
    signature: str | None = None,
    rank: int | None = None,
    roles: pl.DataFrame | None = None,
) -> PlotData:
    """The data behind every figure of one replay, drawn from its result alone.

    ``caption`` is a footnote; ``signature`` picks the profile panel (b)
    shows in each run that has it (default: each run's busiest one,
    :func:`main_profile`); ``rank``: the replay is of that rank's readings alone,
    which the title says. ``roles``: each wave's role
    (:func:`warmfit.replay.wave_roles`), where already found.
    """
    if signature is not None:
        check_signature(result, signature)
    runs = tuple(result.summary.get_column("run").unique(maintain_order=True).to_list())
    frames = (peak_series(result), rate_points(result, roles), over_estimates(result))
    return plot_data(
        runs, result.policies, result.safety_factor, result.profiles, *frames,
        caption=caption, signature=signature, rank=rank,
    )  # fmt: skip


def plot_data(
    runs: tuple[str, ...],
    policies: tuple[str, ...],
    safety_factor: float,
    profiles: dict[Any, Any],
    peaks: pl.DataFrame,
    rates: pl.DataFrame,
    over: pl.DataFrame,
    *,
    caption: str | None = None,
    signature: str | None = None,
    rank: int | None = None,
) -> PlotData:
    """:func:`build_plot_data` from the panels' frames (:func:`peak_series`,
    :func:`rate_points`, :func:`over_estimates`) of the ``runs`` and their final
    ``profiles``: what each panel draws and how it is thinned."""
    mains: dict[str, tuple[int, str]] = {}
    counts: dict[str, int] = {}
    for run in runs:
        mains[run], counts[run] = main_profile(rates, run, signature)
    shown = {(run, *mains[run]) for run in runs}
    return PlotData(
        runs=runs,
        policies=policies,
        safety_factor=safety_factor,
        peaks=peaks,
        rates=rates,
        curves=curves_of(profiles, rates, profiles=shown),
        over=over,
        main_profiles=mains,
        profile_counts=counts,
        drawn=thin(peaks, rates, over, runs, mains),
        caption=caption or None,
        rank=rank,
    )


#: The panels' frames a streamed plot keeps, per run (:class:`PlotParts`).
PANELS = ("peaks", "rates", "over")


@dataclass(frozen=True)
class PlotFold:
    """What a plot draws, as a part of the one streamed replay
    (:class:`warmfit.replay.stream.Fold`): where each batch is replayed, its panels'
    frames (:func:`peak_series`, :func:`rate_points` with the waves' roles,
    :func:`over_estimates`) and its final profiles, kept by :class:`PlotParts` in
    ``folder`` (made and removed by the caller); ``rank``: of that rank's streams alone
    (``plot --rank``: each rank's profiles are its own, so its waves are priced as a
    replay of its readings alone prices them). ``local``: the batches replay on this
    machine (not a cluster's), so each writes its frames to ``folder`` itself rather
    than send them back through the pool's pipe."""

    folder: str
    rank: int | None = None
    local: bool = True
    wants_rows: bool = True
    wants_profiles: bool = True

    def part(
        self, readings: pl.DataFrame, priced: Any, profiles: dict[Any, Any] | None, lineup: Any
    ) -> PlotPart:
        rows, roles = priced.per_wave, wave_roles(readings)
        ranks = readings.get_column("rank").unique().to_list()
        found = dict(profiles or {})
        if self.rank is not None:
            rows = rows.filter(pl.col("rank") == self.rank)
            roles = roles.filter(pl.col("rank") == self.rank)
            found = {key: p for key, p in found.items() if key[1] == self.rank}
        names = tuple(lineup_names(lineup.classes, lineup.recorded))
        batch = ReplayResult(rows, pl.DataFrame(), names, lineup.safety_factor, lineup.engine)
        frames = (peak_series(batch), rate_points(batch, roles), over_estimates(batch))
        return PlotPart.of(frames, self.folder if self.local else None, found, ranks)

    def start(self, policies: Sequence[str]) -> PlotParts:
        return PlotParts(self.folder, self.rank)


@dataclass(frozen=True)
class PlotPart:
    """One batch's part of a plot (:meth:`PlotFold.part`): its panels' frames, written
    run by run to files of their own (:data:`PANELS`, Arrow IPC without the ``run``
    column, zstd) where the batch replayed on this machine, else the frames themselves,
    which :class:`PlotParts` writes. What the figure needs of every run travels beside
    them: the frames' columns (``empty``), each profile's wave count, the signatures,
    the final profiles and the ranks."""

    #: Per run of the batch, in order: its files and its waves (the ``position`` s).
    files: tuple[tuple[str, tuple[str, ...], int], ...]
    frames: tuple[pl.DataFrame, ...] | None
    #: The batch's rows of panel (b) (a wave each): where its ``first_seq`` starts counting.
    rates: int
    empty: tuple[pl.DataFrame, ...]
    counts: pl.DataFrame
    signatures: tuple[str, ...]
    profiles: dict[Any, Any]
    ranks: list[int]

    @classmethod
    def of(
        cls,
        frames: tuple[pl.DataFrame, ...],
        folder: str | None,
        profiles: dict[Any, Any],
        ranks: list[int],
    ) -> PlotPart:
        """The part of a batch's ``frames`` (:data:`PANELS`), written to ``folder`` if given."""
        rates = frames[1]
        return cls(
            files=() if folder is None else write_run_frames(frames, Path(folder)),
            frames=frames if folder is None else None,
            rates=rates.height,
            empty=tuple(frame.clear() for frame in frames),
            counts=rates.group_by("run", "rank", "signature").len(),
            signatures=tuple(rates.get_column("signature").unique(maintain_order=True)),
            profiles=profiles,
            ranks=ranks,
        )


def write_run_frames(
    frames: tuple[pl.DataFrame, ...], folder: Path
) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """Write each run's rows of ``frames`` (:data:`PANELS`) to new files in ``folder``: per
    run, its name, its files and its waves. A full disk or a file-size limit: exit 2
    naming the folder."""
    peaks = frames[0]
    runs = peaks.get_column("run").unique(maintain_order=True).to_list()
    written = []
    for run in runs:
        mine = frames if len(runs) == 1 else [f.filter(pl.col("run") == run) for f in frames]
        stem = folder / uuid.uuid4().hex
        paths = tuple(str(stem.with_suffix(f".{name}")) for name in PANELS)
        try:
            for frame, path in zip(mine, paths, strict=True):
                frame.drop("run").write_ipc(path, compression="zstd")
        except OSError as exc:  # a full disk, a file-size limit
            raise no_room(
                "the figure's temporary files",
                folder,
                exc,
                "Free space there, point TMPDIR at a folder with room, or raise the "
                "file-size limit (ulimit -f).",
            ) from None
        written.append((run, paths, mine[0].get_column("position").n_unique()))
    return tuple(written)


class PlotParts:
    """:class:`PlotFold`'s parts, batch after batch. Each run's panels' frames are in
    files of their own in ``folder`` (:class:`PlotPart`), read back one run at a time as
    its row of the figure is drawn (:class:`RunSheet`): a plot holds the largest run's
    frames, not the trace's. What the figure needs of every run is kept here: its
    profiles, each profile's wave count (:func:`pick_profile`), the signatures and
    ranks seen.

    The files hold each frame but its ``run`` (the file's), zstd-compressed: about 20
    bytes a wave and policy, against 180 uncompressed with the run's name on every row
    (LZ4: 38 bytes, and a third more time to read back, which the figure waits for).

    A trace's streams come in canonical order, (run, rank), each whole in one batch, so
    a run's waves are one stretch of the replay's: a batch's frames are the whole
    replay's but for where the batch starts, which is kept here and added as each file
    is read back (a wave's ``position`` in its run, :func:`rate_points`' ``first_seq``)."""

    def __init__(self, folder: str, rank: int | None) -> None:
        self.folder = Path(folder)
        self.rank = rank
        #: Per run, in the replay's order: its files (:data:`PANELS`), batch after batch,
        #: each with where its batch starts: the run's waves before it (``position``) and
        #: the rows of panel (b) before it (``first_seq``).
        self.files: dict[str, list[tuple[tuple[str, ...], dict[str, int]]]] = {}
        self.waves: dict[str, int] = {}
        self.seen = 0
        self.counts: list[pl.DataFrame] = []
        self.signatures: dict[str, None] = {}
        self.profiles: list[dict[Any, Any]] = []
        self.ranks: set[int] = set()
        self.empty: tuple[pl.DataFrame, ...] = ()

    def add(self, part: PlotPart) -> None:
        self.profiles.append(part.profiles)
        self.ranks.update(part.ranks)
        self.empty = self.empty or part.empty
        self.counts.append(part.counts)
        self.signatures.update(dict.fromkeys(part.signatures))
        written = part.files if part.frames is None else write_run_frames(part.frames, self.folder)
        for run, paths, waves in written:
            before = self.waves.get(run, 0)
            self.waves[run] = before + waves
            starts = {"position": before, "first_seq": self.seen}
            self.files.setdefault(run, []).append((paths, starts))
        self.seen += part.rates

    def finish(self, summary: pl.DataFrame) -> PlotParts:
        return self

    def sheet(
        self, streamed: Any, caption: str | None, signature: str | None
    ) -> tuple[RunSheet, tuple[str, ...]]:
        """The figure of the streamed replay (:class:`RunSheet`), and every run of the
        trace. With ``rank``, refused (exit 2) where the trace holds no reading of it,
        naming the ranks it holds; ``signature`` is refused where no run has it."""
        every_run = tuple(streamed.summary.get_column("run").unique(maintain_order=True))
        summary = streamed.summary
        if self.rank is not None:
            if self.rank not in self.ranks:
                shown = ", ".join(map(str, sorted(self.ranks))) or "none"
                raise UsageError(
                    f"--rank {self.rank}: the trace holds no reading of rank {self.rank}. Its "
                    f"ranks: {shown}. Name one of them, or leave --rank out to draw every rank."
                )
            summary = summary.filter(pl.col("run").is_in(sorted(self.files)))
        if signature is not None:
            refuse_unknown_signature(self.signatures, signature)
        counts = (
            pl.concat(self.counts).group_by("run", "rank", "signature").agg(pl.col("len").sum())
        )
        runs = tuple(summary.get_column("run").unique(maintain_order=True).to_list())
        picked = {run: pick_profile(counts.filter(pl.col("run") == run), signature) for run in runs}
        profiles = self._in_replay_order(streamed.policies, streamed.engine)
        sheet = RunSheet(
            self, runs, streamed.policies, streamed.safety_factor, profiles, caption, signature,
            picked,
        )  # fmt: skip
        return sheet, every_run

    def read(self, run: str) -> tuple[pl.DataFrame, ...]:
        """``run``'s panels' frames (:data:`PANELS`), as a replay of the whole trace makes them."""
        files = self.files.get(run, [])
        if not files:
            return self.empty
        try:
            return self._frames(run, files)
        except (OSError, pl.exceptions.PolarsError) as exc:  # removed or spoiled meanwhile
            raise UsageError(
                f"cannot read the figure's temporary files in {self.folder} (run "
                f"{printable(run)}): {short_message(exc)}. Something removed or changed them "
                "while warmfit drew (a cleaner of TMPDIR?); run the command again, with TMPDIR "
                "pointing at a folder nothing cleans meanwhile."
            ) from None

    def _frames(
        self, run: str, files: list[tuple[tuple[str, ...], dict[str, int]]]
    ) -> tuple[pl.DataFrame, ...]:
        return tuple(
            pl.concat(
                [  # each batch's columns counted from where the batch starts
                    pl.read_ipc(paths[i]).with_columns(
                        pl.col(name) + start
                        for name, start in starts.items()
                        if name in empty.columns
                    )
                    for paths, starts in files
                ]
            )
            .with_columns(run=pl.lit(run, pl.String()))
            .select(empty.columns)
            for i, empty in enumerate(self.empty)
        )

    def _in_replay_order(self, policies: Sequence[str], engine: str) -> dict[Any, Any]:
        """The profiles in the order a replay of the whole trace gives them: profile by
        profile on the reference engine, policy by policy on the vectorized one."""
        owners = list(dict.fromkeys(key[:3] for part in self.profiles for key in part))
        found = {key: p for part in self.profiles for key, p in part.items()}
        order = (
            [(*o, p) for p in policies for o in owners]
            if engine == "vectorized"
            else [(*o, p) for o in owners for p in policies]
        )
        return {key: found[key] for key in order if key in found}


class RunSheet:
    """A figure of one streamed replay (:class:`PlotParts`) that :func:`draw_figure` draws
    run by run: :meth:`build` gives one run's :class:`PlotData` (its frames read back),
    which is let go once its row of panels is drawn. ``main_profiles`` and
    ``profile_counts`` are every run's (:func:`main_profile`)."""

    def __init__(
        self,
        parts: PlotParts,
        runs: tuple[str, ...],
        policies: tuple[str, ...],
        safety_factor: float,
        profiles: dict[Any, Any],
        caption: str | None,
        signature: str | None,
        picked: dict[str, tuple[tuple[int, str], int]],
    ) -> None:
        self.parts, self.runs, self.policies = parts, runs, policies
        self.safety_factor, self.profiles = safety_factor, profiles
        self.caption, self.signature, self.rank = caption or None, signature, parts.rank
        self.main_profiles = {run: chosen for run, (chosen, _) in picked.items()}
        self.profile_counts = {run: count for run, (_, count) in picked.items()}

    def build(self, run: str) -> PlotData:
        """``run``'s data: what :func:`build_plot_data` gives of a replay of that run."""
        return plot_data(
            (run,), self.policies, self.safety_factor,
            {key: p for key, p in self.profiles.items() if key[0] == run}, *self.parts.read(run),
            caption=self.caption, signature=self.signature, rank=self.rank,
        )  # fmt: skip

    def whole(self) -> PlotData:
        """Every run's data in one :class:`PlotData` (in memory: for a notebook, a test),
        each frame run after run. Only while the replay's folder is there."""
        parts = [self.build(run) for run in self.runs]

        def joined(name: str) -> pl.DataFrame:
            return pl.concat([getattr(part, name) for part in parts], how="vertical_relaxed")

        return PlotData(
            runs=self.runs, policies=self.policies, safety_factor=self.safety_factor,
            peaks=joined("peaks"), rates=joined("rates"), curves=joined("curves"),
            over=joined("over"), main_profiles=self.main_profiles,
            profile_counts=self.profile_counts, drawn=Drawn.combined([p.drawn for p in parts]),
            caption=self.caption, rank=self.rank,
        )  # fmt: skip


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

#: Each built-in policy's colour, whatever its place among the policies drawn (``-p``), in
#: every figure (``plot`` and ``sweep --plot``); ``recorded`` is the trainer's own prices.
POLICY_COLOURS = {
    "max-merge": "#d95f02",
    "warm-fit": "#1b9e77",
    "warm-affine": "#7570b3",
    "envelope": "#e7298a",
    "recorded": "#a6761d",
}
#: The colours of the other policies (one's own), none a built-in's: the first of them
#: drawn takes the first colour, the next the second, and so on, round again after the last.
OTHER_COLOURS = ("#66a61e", "#e6ab02", "#17becf", "#bcbd22", "#525252")
_LINESTYLES = ("-", "--", "-.", ":")
_ACTUAL = "#222222"
_ROLE_STYLE = {
    "seed": {"color": "#c51b1b", "marker": "*", "s": 260, "zorder": 5},
    "warm": {"color": "#2c7fb8", "marker": "o", "s": 36, "label": "warm waves", "zorder": 4},
    "other": {"color": "#999999", "marker": "s", "s": 24, "label": "other waves", "zorder": 3},
}


#: The most characters of a panel title's line: the width of a panel at 10 points.
TITLE_CHARS = 48


def shortened(name: str, limit: int) -> str:
    """``name``, or its start and end around an ellipsis when longer than ``limit``
    characters (at least 9 are kept), so that a title fits its panel.

    >>> shortened("train/packed/seq-4096/bucket-07/eval", 20), shortened("eval", 20)
    ('train/pac…et-07/eval', 'eval')
    """
    limit = max(limit, 9)
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return name[:head] + "…" + name[-tail:]


def _label(name: str) -> str:
    """A name from a trace as matplotlib text: shown literally, never as mathtext."""
    return mathtext_literal(name)


def policy_colours(policies: Sequence[str]) -> dict[str, str]:
    """Each policy's colour: a built-in's own (:data:`POLICY_COLOURS`), whatever its
    place; another's from :data:`OTHER_COLOURS`, by its order among the other names.

    >>> policy_colours(["warm-fit"]), policy_colours(["max-merge", "warm-fit"])["warm-fit"]
    ({'warm-fit': '#1b9e77'}, '#1b9e77')
    >>> policy_colours(["mine", "warm-fit", "yours"])
    {'mine': '#66a61e', 'warm-fit': '#1b9e77', 'yours': '#e6ab02'}
    """
    others = [name for name in dict.fromkeys(policies) if name not in POLICY_COLOURS]
    return {
        name: POLICY_COLOURS.get(name) or OTHER_COLOURS[others.index(name) % len(OTHER_COLOURS)]
        for name in policies
    }


def _colour(policies: Sequence[str], name: str) -> str:
    return policy_colours(policies)[name]


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


def token_tick(tokens: float, largest: float) -> str:
    """A tick of the packed-token axis, whose ticks go up to ``largest``: whole tokens with
    thousands separators below 10,000, thousands (k) below ten million, millions (M) above.

    >>> [token_tick(n, 64) for n in (0, 8, 64)], token_tick(2_500, 9_000)
    (['0', '8', '64'], '2,500')
    >>> token_tick(12_500, 30_000), token_tick(0, 30_000), token_tick(1_500_000, 2e7)
    ('12.5k', '0', '1.5M')
    """
    if tokens == 0:
        return "0"
    if largest >= 10_000_000:
        return f"{tokens / 1e6:,.6g}M"
    if largest >= 10_000:
        return f"{tokens / 1e3:,.6g}k"
    return f"{tokens:,.0f}"


def _integer_ticks(axis: Any) -> None:
    """Ticks of a count at whole numbers only (a few waves or tokens had ticks at 0.5)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _token_ticks(axis: Any) -> None:
    """Whole-token ticks, written by :func:`token_tick` for the axis's range."""
    from matplotlib.ticker import FuncFormatter

    _integer_ticks(axis)
    axis.set_major_formatter(
        FuncFormatter(lambda value, _: token_tick(value, max(map(abs, axis.get_view_interval()))))
    )


def _require_matplotlib() -> None:
    """A clear usage error, not an ImportError, where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "warmfit plot needs matplotlib, which is not installed: pip install 'warmfit[plot]'."
        ) from None


def draw_figure(data: PlotData | RunSheet) -> Figure:
    """Draw every run's row of panels on one matplotlib figure (no pyplot state); a
    :class:`RunSheet`'s runs one at a time, each one's data let go once drawn."""
    _require_matplotlib()
    from matplotlib.figure import Figure

    width, height = figure_size(len(data.runs))
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.suptitle(
        "warmfit replay: "
        + ", ".join(map(_label, data.policies))
        + f" (safety factor {data.safety_factor:g})"
        + ("" if data.rank is None else f", rank {data.rank} alone"),
        fontsize=14,
    )
    axes = fig.subplots(max(1, len(data.runs)), 3, squeeze=False)
    parts = []
    for row, run in enumerate(data.runs):
        shown = data.build(run) if isinstance(data, RunSheet) else data
        _draw_peaks(axes[row][0], shown, run)
        _draw_rates(axes[row][1], shown, run)
        _draw_over(axes[row][2], shown, run)
        parts.append(shown.drawn)
        del shown
    drawn = Drawn.combined(parts) if isinstance(data, RunSheet) else data.drawn
    notes = []
    if data.caption:
        notes.append(data.caption)
    if drawn.rates.filter(pl.col("draw_point") & (pl.col("role") == "seed")).height:
        notes.append(SEED_NOTE)
    if drawn.note:
        notes.append(drawn.note)
    if notes:
        fig.supxlabel("\n".join(notes), fontsize=11, fontstyle="italic")
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
    drawn = data.drawn.peaks.filter(pl.col("run") == run)
    actual = drawn.filter(pl.col("draw_actual"))
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
    oom = actual.filter(pl.col("oom"))
    if oom.height:  # not an ordinary peak: where the wave stopped, not what it needed
        ax.scatter(
            oom.get_column("position").to_numpy(),
            (oom.get_column("actual_gb") * scale).to_numpy(),
            marker="X",
            s=140,
            color="black",
            edgecolors="white",
            linewidths=0.8,
            label="ran out of memory (its peak so far)",
            zorder=7,
        )
    under_labelled = False
    for name in data.policies:
        mine = drawn.filter(pl.col("policy") == name)
        line = mine.filter(pl.col("draw_estimate"))
        ax.plot(
            line.get_column("position").to_list(),
            (line.get_column("estimate_gb") * scale).to_list(),
            marker=".",
            label=f"{_label(name)} estimate",
            **_line(data.policies, name),
        )
        under = mine.filter(pl.col("under_peak"))
        if under.height:
            ax.scatter(
                under.get_column("position").to_numpy(),
                (under.get_column("estimate_gb") * scale).to_numpy(),
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
    _integer_ticks(ax.xaxis)
    ax.set_ylabel(f"bytes above baseline ({unit})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_below(ax, ncol=2)


def _draw_rates(ax: Any, data: PlotData, run: str) -> None:
    rank, signature = data.main_profiles[run]
    profiles = data.profile_counts[run]
    mine = (pl.col("run") == run) & (pl.col("rank") == rank) & (pl.col("signature") == signature)
    points = data.rates.filter(mine)
    drawn = data.drawn.rates.filter(mine)
    curves = data.curves.filter(mine)
    for name in data.policies:
        if name == RECORDED:  # the trainer's prices: no profile to draw a curve of
            continue
        curve = curves.filter(pl.col("policy") == name)
        ax.plot(
            curve.get_column("packed_tokens").to_list(),
            curve.get_column("price_kb_per_token").to_list(),
            label=f"{_label(name)} price",
            **_line(data.policies, name),
        )
    floors = drawn.filter(pl.col("draw_floor")).sort("packed_tokens")
    if floors.height:
        ax.plot(
            floors.get_column("packed_tokens").to_list(),
            floors.get_column("floor_kb_per_token").to_list(),
            color="#555555",
            linestyle=":",
            linewidth=2,
            label="static floor",
            zorder=2,
        )
    for role in ("other", "warm", "seed"):
        chosen = drawn.filter(pl.col("draw_point") & (pl.col("role") == role))
        if chosen.height:
            label = {"label": seed_label(points)} if role == "seed" else {}
            ax.scatter(
                chosen.get_column("packed_tokens").to_numpy(),
                chosen.get_column("rate_kb_per_token").to_numpy(),
                **_ROLE_STYLE[role],
                **label,
            )
    title = f"{_label(shortened(run, TITLE_CHARS))}: rate per packed token"
    if profiles > 1:  # on a line of its own, the signature shortened to fit the panel
        limit = TITLE_CHARS - len(f"rank {rank}, signature ")
        title += f"\nrank {rank}, signature {_label(shortened(signature, limit))}"
    ax.set_title(title, **({"fontsize": 10} if profiles > 1 else {}))
    ax.set_xlabel("packed tokens")
    _token_ticks(ax.xaxis)
    ax.set_ylabel("compute bytes per packed token (KB/token)")
    ax.grid(alpha=0.3)
    # the range of every point, drawn or thinned out
    shown = [
        column
        for column in (
            points.get_column("rate_kb_per_token"),
            curves.get_column("price_kb_per_token").drop_nulls(),
            points.get_column("floor_kb_per_token").drop_nulls(),
        )
        if len(column)
    ]
    if shown:
        low = min(cast(float, column.min()) for column in shown)
        high = max(cast(float, column.max()) for column in shown)
        span = max(high - low, 0.05 * high, 1.0)
        ax.set_ylim(low - 0.08 * span, high + 0.08 * span)
    _legend_below(
        ax,
        ncol=2,
        title=f"price per token after the last wave, before ×{data.safety_factor:g}",
        title_fontsize=8,
    )


def _middle(values: np.ndarray) -> list[float]:
    """The middle value of ``values`` in sorted order, or the two middle ones of an even
    count (a partition: what sorting them all gives, at a tenth of the time).

    >>> _middle(np.array([4.0, 1, 3, 2])), _middle(np.array([5.0, 1, 3]))
    ([2.0, 3.0], [3.0])
    """
    middle = sorted({(len(values) - 1) // 2, len(values) // 2})
    return np.partition(values, middle)[middle].tolist()


def _draw_over(ax: Any, data: PlotData, run: str) -> None:
    over = data.over.filter(pl.col("run") == run)
    drawn = data.drawn.over.filter(pl.col("run") == run)
    values = [
        over.filter(pl.col("policy") == name).get_column("over_estimate_pct").to_numpy()
        for name in data.policies
    ]
    positions = list(range(1, len(data.policies) + 1))
    present = [(p, v) for p, v in zip(positions, values, strict=True) if v.size]
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
        dots = drawn.filter(pl.col("policy") == data.policies[p - 1])
        ax.scatter(
            (p + dots.get_column("offset")).to_numpy(),
            dots.get_column("over_estimate_pct").to_numpy(),
            s=14,
            color=_colour(data.policies, data.policies[p - 1]),
            zorder=3,
        )
        median = _middle(v)
        ax.annotate(
            f"median {sum(median) / len(median):+.1f}%",
            (p, float(v.max())),
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


def render_bytes(data: PlotData | RunSheet, fmt: str = "png", dpi: float = DPI) -> bytes:
    """The figure as PNG or SVG bytes (``dpi``: pixels per inch of a PNG)."""
    return figure_bytes(draw_figure(data), fmt, dpi)


def figure_bytes(fig: Figure, fmt: str = "png", dpi: float = DPI) -> bytes:
    """A drawn figure as PNG or SVG bytes, with no date or version in them."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    extra: dict[str, Any] = {"pil_kwargs": {"optimize": True}} if fmt == "png" else {}
    # an SVG's ids (clip paths, glyphs) are hashed with a salt, random unless set
    with matplotlib.rc_context({"svg.hashsalt": "warmfit"}):
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=_metadata(fmt), **extra)
    return buffer.getvalue()


def _metadata(fmt: str) -> dict[str, Any]:
    # No dates or software versions in the file, so the same data gives the same bytes.
    if fmt == "svg":
        return {"Date": None, "Creator": None}
    return {"Software": None}


def render_plot(
    data: PlotData | RunSheet,
    path: str | os.PathLike[str],
    before_replace: Callable[[], object] | None = None,
) -> Path:
    """Write the figure to ``path`` atomically; PNG or SVG by its suffix.
    ``before_replace`` is called once it is drawn, just before the file is put in place."""
    target = Path(path)
    payload = render_bytes(data, plot_format(target))
    return write_bytes_atomically(target, payload, before_replace)


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


def safe_text(policy: str, factor: float | None) -> str:
    """A policy's entry in the legend of a sweep's panel: its name and its safe factor.

    >>> safe_text("warm-fit", 1.2345), safe_text("mine", None)
    ('warm-fit: safe ×1.234', 'mine: no safe factor')
    """
    return f"{policy}: " + ("no safe factor" if factor is None else f"safe ×{factor:.3f}")


def draw_pareto(result: SweepResult) -> Figure:
    """One panel per result: median over-estimate against waves under their peak as the
    safety factor varies, one line per policy, its safe factor starred.

    Each policy's safe factor is written in the panel's legend, below the panel (one
    entry a policy, its line and star), not beside its star: the stars of several
    policies often fall together, and their labels overprinted one another."""
    _require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    data = pareto_points(result)
    labels = list(dict.fromkeys(data.get_column("result").to_list()))
    policies = list(dict.fromkeys(data.get_column("policy").to_list()))
    colours = policy_colours(policies)
    columns = min(3, max(1, len(labels)))
    rows = max(1, -(-len(labels) // columns))
    # each row: a panel and, below it, its legend (a line a policy)
    height = 3.8 + 0.16 * len(policies)
    fig = Figure(figsize=(5.2 * columns, 0.6 + height * rows), dpi=DPI, layout="constrained")
    title = "warmfit sweep: median over-estimate against waves under their peak"
    # one panel is too narrow for the title on one line (it was clipped)
    fig.suptitle(title.replace(" against", "\nagainst") if columns == 1 else title, fontsize=13)
    axes = fig.subplots(rows, columns, squeeze=False)
    for i, label in enumerate(labels):
        ax = axes[i // columns][i % columns]
        handles: list[Any] = []  # a policy's line, and its star where it has a safe factor
        texts: list[str] = []
        for policy in policies:
            mine = data.filter((pl.col("result") == label) & (pl.col("policy") == policy))
            grid = mine.filter(~pl.col("safe")).sort("safety_factor")
            x, y = grid.get_column("under_peak"), grid.get_column("median_over_estimate_pct")
            (line,) = ax.plot(x, y, marker=".", **_line(policies, policy))
            safe = mine.filter(pl.col("safe"))
            factor, handle = None, line
            for f, u, m in safe.select(
                "safety_factor", "under_peak", "median_over_estimate_pct"
            ).iter_rows():
                star = ax.scatter([u], [m], marker="*", s=180, color=colours[policy], zorder=9)
                factor, handle = f, (line, star)
            handles.append(handle)
            texts.append(safe_text(_label(policy), factor))
        # a long run name on several lines, not over the next panel's
        ax.set_title("\n".join(_label(line) for line in textwrap.wrap(label, 64)), fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        low, high = ax.get_xlim()  # whole counts: at least 0 and 1 (all at 0 had ticks at ±0.05)
        ax.set_xlim(min(low, -0.5), max(high, 1.5))
        ax.set_xlabel("waves under their peak")
        ax.set_ylabel("median over-estimate (%)")
        ax.grid(alpha=0.3)
        _legend_below(ax, handles=handles, labels=texts, markerscale=0.7)
    for j in range(len(labels), rows * columns):
        axes[j // columns][j % columns].set_visible(False)
    return fig


def write_pareto(result: SweepResult, path: str | os.PathLike[str]) -> Path:
    """Write the Pareto picture of a sweep to ``path``; PNG or SVG by its suffix."""
    target = Path(path)
    return write_bytes_atomically(target, figure_bytes(draw_pareto(result), plot_format(target)))
