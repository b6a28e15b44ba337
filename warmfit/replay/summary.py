"""The report's figures, per result and policy, from the per-wave rows (SPEC §3, §7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from warmfit.errors import UsageError
from warmfit.replay.medians import (
    DEFAULT_SPILL_BYTES,
    ExactMedians,
    SortedValues,
    SpilledRun,
    midpoint_int,
    read_run,
    sort_by_group,
    write_run,
)
from warmfit.replay.semantics import RECORDED, SETTERS, covering_factors

#: Columns of the per-run, per-policy summary (SPEC §5 ``results``, §7's
#: ``median_excess_bytes`` and §8's ``priced_beyond`` and ``under_peak_beyond``).
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
    "priced_beyond",
    "under_peak_beyond",
)
#: Columns a ``budget_bytes`` adds to the summary (SPEC §7).
BUDGET_COLUMNS = ("budget_bytes", "admitted", "refused_fit", "admitted_oom")
#: What a summary can be grouped by: one result per run, or per run and signature.
GROUPINGS = ("run", "signature")

#: The waves every figure is computed over (SPEC §3 "Report"): priced, not out
#: of memory, and with a positive actual.
IN_FIGURES = pl.col("estimate_bytes").is_not_null() & ~pl.col("oom") & (pl.col("actual_bytes") > 0)


#: What ``set_by`` codes stand for in :class:`SummaryFold` (0: unpriced; ``recorded``,
#: the trainer's own price (SPEC §8), counts in neither ``set_by_profile`` nor
#: ``set_by_floor``).
SET_BY_CODES = {name: code for code, name in enumerate(SETTERS, 1)}

# Per (group, policy) cell, the counts SummaryFold keeps, in this order.
_COUNTS = (
    "priced_waves",
    "under_peak",
    "set_by_profile",
    "set_by_floor",
    "oom_waves",
    "priced_beyond",
    "under_peak_beyond",
)
_BUDGET_COUNTS = ("admitted", "refused_fit", "admitted_oom")


class SummaryFold:
    """The report's figures (SPEC §3 "Report", §7), folded part by part.

    A replay hands over its waves part by part — the whole trace at once, or
    one batch of ``(run, rank)`` streams at a time (:mod:`warmfit.replay.stream`)
    — and :meth:`finish` gives the summary; the parts may come in any order
    and the figures are the same. Counts, minima and maxima are kept per
    ``(group, policy)`` cell; the two medians need every value, which
    :class:`~warmfit.replay.medians.ExactMedians` keeps exactly, spilling sorted
    runs to a temporary folder beyond ``spill_bytes`` so that memory stays
    bounded however long the trace. Use it as a context manager, or call
    :meth:`close`, to remove the spilled runs.

    Figures count the priced waves that did not run out of memory and have
    ``actual > 0``; ``oom_waves`` counts priced waves with an oom reading.
    The median is the mean of the two middle values for an even count,
    ``(a + b) / 2`` like :func:`statistics.median`; ``median_excess_bytes``
    is the median of ``estimate - actual``, an integer (the mean of the
    two middle values truncated toward zero). With ``budget_bytes`` a figure
    wave is *admitted* when its estimate is at most the budget;
    ``refused_fit`` counts waves refused although they fit, ``admitted_oom``
    waves admitted although they did not.
    """

    def __init__(
        self,
        policies: Sequence[str],
        by: str = "run",
        budget_bytes: int | None = None,
        spill_bytes: int | None = None,
    ) -> None:
        self.policies = tuple(policies)
        self.keys = group_keys(by)
        self.budget_bytes = budget_bytes
        self._codes: dict[tuple[object, ...], int] = {}
        width = len(_COUNTS) + (len(_BUDGET_COUNTS) if budget_bytes is not None else 0)
        self._counts = np.zeros((0, width), dtype=np.int64)
        self._min = np.zeros(0)
        self._max = np.zeros(0)
        self._safe = np.zeros(0)
        spill = DEFAULT_SPILL_BYTES if spill_bytes is None else spill_bytes
        self._over = ExactMedians(np.float64, spill_bytes=spill)
        self._excess = ExactMedians(np.int64, spill_bytes=spill)

    def __enter__(self) -> SummaryFold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove what the medians spilled to disk."""
        self._over.close()
        self._excess.close()

    def add(
        self,
        groups: pl.DataFrame,
        actual: np.ndarray,
        oom: np.ndarray,
        estimate: np.ndarray,
        set_by: np.ndarray,
        beyond: np.ndarray,
        unscaled: np.ndarray | None = None,
    ) -> None:
        """Fold in some waves: per wave its group's key columns (``groups``),
        ``actual`` bytes, ``oom`` and whether it was priced ``beyond`` the seen range;
        per (wave, policy), raveled wave-major, the ``estimate`` (-1: unpriced) and
        ``set_by`` code (:data:`SET_BY_CODES`), and the bytes before the safety factor
        (``unscaled``, for :meth:`safe_factors`; None when the engine did not keep them)."""
        group, keys = number_groups(groups)
        count = len(self.policies)
        part = fold_part(
            group, keys, actual, oom, estimate, set_by, beyond, count, self.budget_bytes,
            unscaled=unscaled,
        )  # fmt: skip
        self.add_part(part)

    def add_part(self, part: FoldPart) -> None:
        """Fold in what :func:`fold_part` made of some waves (perhaps in another process)."""
        if not part.keys:
            return
        count = len(self.policies)
        codes = np.array([self._code(key) for key in part.keys], dtype=np.int64)
        self._grow()
        cells = (codes[:, None] * count + np.arange(count)).ravel()  # local cell -> cell
        self._counts[cells] += part.counts
        self._min[cells] = np.minimum(self._min[cells], part.low)
        self._max[cells] = np.maximum(self._max[cells], part.high)
        self._safe[cells] = np.maximum(self._safe[cells], part.safe)  # NaN (unknown) stays
        _add_values(self._over, part.over, cells)
        _add_values(self._excess, part.excess, cells)

    def flag_path(self) -> str:
        """A new file name in the medians' folder, removed at :meth:`close`: a replay
        creates the file to tell its workers to stop."""
        return self._over.run_path()

    def run_paths(self) -> tuple[str, str]:
        """Two new files in the medians' folders, for a worker's :func:`fold_part`
        (``runs``) to write its values to; removed at :meth:`close`."""
        return self._over.run_path(), self._excess.run_path()

    def _code(self, key: tuple[object, ...]) -> int:
        return self._codes.setdefault(key, len(self._codes))

    def _grow(self) -> None:
        """Room for every group numbered so far."""
        grown = len(self._codes) * len(self.policies) - len(self._min)
        if grown:
            self._counts = np.vstack(
                [self._counts, np.zeros((grown, self._counts.shape[1]), dtype=np.int64)]
            )
            self._min = np.concatenate([self._min, np.full(grown, np.inf)])
            self._max = np.concatenate([self._max, np.full(grown, -np.inf)])
            self._safe = np.concatenate([self._safe, np.full(grown, -np.inf)])

    def add_per_wave(self, per_wave: pl.DataFrame) -> None:
        """Fold in per-wave rows (:data:`~warmfit.replay.semantics.PER_WAVE_SCHEMA`),
        every wave with one row per policy, policies in this fold's order."""
        arrays = per_wave_arrays(per_wave, len(self.policies))
        self.add(arrays[0].select(self.keys), *arrays[1:])

    def safe_factors(self) -> dict[str, float | None]:
        """Per policy that put a figure wave under its peak, the smallest safety factor
        that puts none under (SPEC §7's safe factor, the largest over every result: a
        wave under its peak needs more than the factor replayed, any other wave no more,
        so the waves under their peak decide it). None where no factor covers a wave
        (priced at 0 bytes); NaN where a part was folded without the bytes before the
        factor (:meth:`add_per_wave`: per-wave rows do not keep them; both engines do,
        so a replay's parts always have them).
        Never for ``recorded``: no safety factor scales the trainer's own prices."""
        count = len(self.policies)
        if not count or not len(self._safe):
            return {}
        per_policy = self._safe.reshape(-1, count)
        found: dict[str, float | None] = {}
        for i, policy in enumerate(self.policies):
            if policy == RECORDED:
                continue
            column = per_policy[:, i]
            if np.isnan(column).any():
                found[policy] = math.nan
            elif column.max() > -np.inf:
                worst = float(column.max())
                found[policy] = None if math.isinf(worst) else worst
        return found

    def finish(self, groups: pl.DataFrame | None = None) -> pl.DataFrame:
        """The summary: one row per group and policy, groups sorted (or as ``groups``
        lists them, with a row of nulls for a group without waves), policies in order."""
        columns = [*self.keys, *SUMMARY_COLUMNS[1:]]
        if self.budget_bytes is not None:
            columns += BUDGET_COLUMNS
        known = pl.DataFrame(
            list(self._codes), schema=dict.fromkeys(self.keys, pl.String()), orient="row"
        ).with_row_index("__group")
        if groups is None:
            groups = known.select(self.keys).sort(self.keys)
        count = len(self.policies)
        cells = len(self._min)
        figures: dict[str, object] = {
            name: self._counts[:, i]
            for i, name in enumerate(_COUNTS + _BUDGET_COUNTS)
            if i < self._counts.shape[1]
        }
        has = self._counts[:, 0] > 0
        figures["min_over_estimate"] = nullable(self._min, has)
        figures["max_over_estimate"] = nullable(self._max, has)
        median = np.zeros(cells)
        over = self._over.middles()
        median[over.codes] = (over.lower + over.upper) / 2
        excess = np.zeros(cells, dtype=np.int64)
        middle = self._excess.middles()
        excess[middle.codes] = midpoint_int(middle.lower, middle.upper)  # toward zero
        figures["median_over_estimate"] = nullable(median, has)
        figures["median_excess_bytes"] = nullable(excess, has)
        stats = pl.DataFrame(
            {
                "__group": pl.Series(
                    np.repeat(np.arange(cells // max(count, 1)), count), dtype=pl.UInt32
                ),
                "policy": pl.Series(
                    list(self.policies) * (cells // max(count, 1)), dtype=pl.String
                ),
                **figures,
            }
        )
        grid = groups.join(
            pl.DataFrame({"policy": list(self.policies)}, schema={"policy": pl.String()}),
            how="cross",
        )
        summary = grid.join(known, on=self.keys, how="left", maintain_order="left").join(
            stats, on=["__group", "policy"], how="left", maintain_order="left"
        )
        counts = [c for c in (*_COUNTS, *_BUDGET_COUNTS) if c in summary.columns]
        summary = summary.with_columns(pl.col(counts).fill_null(0).cast(pl.Int64))
        if self.budget_bytes is not None:
            summary = summary.with_columns(budget_bytes=pl.lit(self.budget_bytes, dtype=pl.Int64))
        return summary.select(columns)


@dataclass(frozen=True)
class FoldPart:
    """Some waves' figures, ready to fold (:meth:`SummaryFold.add_part`): per local
    cell (group ``keys[g]``, policy ``p``: cell ``g * policies + p``) the counts,
    least and largest over-estimate, and the medians' values sorted by cell."""

    keys: list[tuple[object, ...]]
    counts: np.ndarray
    low: np.ndarray
    high: np.ndarray
    #: The values themselves, or where a worker wrote them (``runs`` of :func:`fold_part`).
    over: SortedValues | SpilledRun
    excess: SortedValues | SpilledRun
    #: Per local cell, the largest smallest-safe-factor of its waves under their peak
    #: (-inf: none under; inf: one no factor covers; NaN: not known, no bytes before
    #: the factor were given).
    safe: np.ndarray


def fold_part(
    group: np.ndarray,
    keys: Sequence[tuple[object, ...]],
    actual: np.ndarray,
    oom: np.ndarray,
    estimate: np.ndarray,
    set_by: np.ndarray,
    beyond: np.ndarray,
    policies: int,
    budget_bytes: int | None = None,
    runs: tuple[str, str] | None = None,
    unscaled: np.ndarray | None = None,
) -> FoldPart:
    """The figures of some waves (see :meth:`SummaryFold.add`) per local cell.

    ``runs``: files (:meth:`SummaryFold.run_paths`) to write the medians' sorted
    values to, as a worker process of this machine does, so that they are not
    sent back to the parent, which writes them to disk otherwise.

    The (wave, policy) values are taken policy by policy: the waves of one
    group (a batch of one run) then come cell after cell, and the medians'
    values need no partition by cell before they are sorted.
    """
    cells = len(keys) * policies
    waves = len(actual)
    cell = np.tile(np.asarray(group, dtype=np.int64) * policies, policies)
    cell += np.repeat(np.arange(policies, dtype=np.int64), waves)
    actual = np.tile(actual, policies)
    oom = np.tile(oom, policies)
    beyond = np.tile(beyond, policies)
    estimate = estimate.reshape(waves, policies).T.ravel()
    set_by = set_by.reshape(waves, policies).T.ravel()
    priced = estimate >= 0
    figure = priced & ~oom & (actual > 0)
    conditions = [
        figure,
        figure & (estimate < actual),
        figure & (set_by == SET_BY_CODES["profile"]),
        figure & (set_by == SET_BY_CODES["floor"]),
        priced & oom,
        figure & beyond,
        figure & beyond & (estimate < actual),
    ]
    if budget_bytes is not None:
        admitted = figure & (estimate <= budget_bytes)
        fits = actual <= budget_bytes
        conditions += [admitted, figure & ~admitted & fits, admitted & ~fits]
    counts = condition_counts(cell, cells, conditions)
    # each cell's smallest safe factor, from its waves under their peak (few)
    under = figure & (estimate < actual)
    safe = np.full(cells, -np.inf)
    if under.any():
        if unscaled is None:
            safe[np.unique(cell[under])] = np.nan
        else:
            below = unscaled.reshape(waves, policies).T.ravel()[under]
            np.maximum.at(safe, cell[under], covering_factors(below, actual[under]))
    cell, estimate, actual = cell[figure], estimate[figure], actual[figure]
    over = sort_by_group(
        cell, estimate.astype(np.float64) / actual.astype(np.float64) - 1, np.float64
    )
    # each cell's least and largest over-estimate: the ends of its sorted values
    low = np.full(cells, np.inf)
    high = np.full(cells, -np.inf)
    if len(over.codes):
        ordered = over.values()
        low[over.codes] = ordered[over.starts[:-1]]
        high[over.codes] = ordered[over.starts[1:] - 1]
    excess = sort_by_group(cell, estimate - actual, np.int64)
    if runs is not None:
        over_run, excess_run = write_run(over, runs[0]), write_run(excess, runs[1])
        return FoldPart(list(keys), counts, low, high, over_run, excess_run, safe)
    return FoldPart(list(keys), counts, low, high, over, excess, safe)


def condition_counts(cell: np.ndarray, cells: int, conditions: list[np.ndarray]) -> np.ndarray:
    """Per cell (rows) and condition (columns), how many of the values meet it.

    Each value's conditions as the bits of one small number, and one bincount
    of (cell, that number); each condition's count is the sum over the numbers
    with its bit set. Where there are more (cell, number) pairs than values
    (many cells, few waves each), a bincount per condition instead.
    """
    patterns = 1 << len(conditions)
    if cells * patterns > max(len(cell), 4096):
        twice = cell * 2  # per cell, its values without and with the condition
        return np.stack(
            [np.bincount(twice + c, minlength=2 * cells)[1::2] for c in conditions], axis=1
        ).astype(np.int64)
    bits = np.zeros(len(cell), dtype=np.uint16)  # at most 16 conditions
    for i, condition in enumerate(conditions):
        bits |= condition.astype(np.uint16) << np.uint16(i)
    key = cell * patterns
    key += bits
    tally = np.bincount(key, minlength=cells * patterns)
    tally = tally.reshape(cells, patterns)
    has = (np.arange(patterns)[:, None] >> np.arange(len(conditions))) & 1  # pattern x condition
    return (tally @ has).astype(np.int64)


def _add_values(
    medians: ExactMedians, values: SortedValues | SpilledRun, cells: np.ndarray
) -> None:
    """Add a part's values, local cell ``c`` renumbered ``cells[c]``: a run a worker
    wrote is taken as it lies when the renumbered cells keep its order (a batch of
    whole runs, in order, always does), else read back and reordered."""
    if isinstance(values, SpilledRun):
        codes = cells[values.codes]
        if np.all(codes[1:] > codes[:-1]):
            medians.add_run(values._replace(codes=codes))
            return
        values = read_run(values)
    medians.add_sorted(_renumbered(values, cells))


def _renumbered(values: SortedValues, cells: np.ndarray) -> SortedValues:
    """``values`` with local cell ``c`` renumbered ``cells[c]``, blocks reordered to
    keep the cells increasing."""
    codes = cells[values.codes]
    order = np.argsort(codes, kind="stable")
    if (order == np.arange(len(order))).all():
        return values._replace(codes=codes)
    sizes = np.diff(values.starts)[order]
    begin = values.starts[:-1][order]
    # each reordered block's positions: its old start plus 0, 1, ... size - 1
    offsets = np.repeat(begin - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    keys = values.keys[np.arange(len(values.keys)) + offsets]
    starts = np.concatenate(([0], np.cumsum(sizes)))
    return SortedValues(values.dtype, codes[order], starts, keys)


def with_admitted(per_wave: pl.DataFrame, budget_bytes: int | None) -> pl.DataFrame:
    """Per-wave rows with ``admitted`` (estimate within the budget) when there is a budget."""
    if budget_bytes is None:
        return per_wave
    return per_wave.with_columns(admitted=pl.col("estimate_bytes") <= budget_bytes)


def per_wave_arrays(
    per_wave: pl.DataFrame, policies: int
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-wave rows (one per wave and policy, wave-major) as a fold takes them:
    one row per wave, its ``actual`` and ``oom``, per (wave, policy) the
    ``estimate`` (-1: unpriced) and ``set_by`` code (:data:`SET_BY_CODES`), and
    per wave whether it was priced ``beyond`` the seen range (by any policy)."""
    if policies < 1 or per_wave.height % policies:
        raise ValueError("per-wave rows must hold one row per wave and policy")
    waves = per_wave.gather_every(policies)
    codes = pl.col("set_by").replace_strict(SET_BY_CODES, default=0, return_dtype=pl.UInt8)
    arrays = per_wave.select(pl.col("estimate_bytes").fill_null(-1), codes)
    # a per-wave frame written before SPEC §8 has no beyond column: no wave was beyond
    beyond = (
        per_wave.get_column("beyond").fill_null(False).to_numpy()
        if "beyond" in per_wave.columns
        else np.zeros(per_wave.height, dtype=bool)
    )
    return (
        waves,
        waves.get_column("actual_bytes").to_numpy(),
        waves.get_column("oom").to_numpy(),
        arrays.get_column("estimate_bytes").to_numpy(),
        arrays.get_column("set_by").to_numpy(),
        np.asarray(beyond.reshape(-1, policies).any(axis=1)),
    )


def number_groups(groups: pl.DataFrame) -> tuple[np.ndarray, list[tuple[object, ...]]]:
    """Number each row's key (all of ``groups``' columns): the numbers, and the
    distinct keys they index, in the order they first appear."""
    if groups.height == 0:
        return np.zeros(0, dtype=np.int64), []
    # one key in all (a batch of one run, say): seen without hashing every row
    if groups.select(pl.struct(groups.columns).rle_id().max()).item() == 0:
        return np.zeros(groups.height, dtype=np.int64), groups.head(1).rows()
    distinct = groups.unique(maintain_order=True)
    code = groups.join(
        distinct.with_row_index("__code"), on=groups.columns, how="left", maintain_order="left"
    ).get_column("__code")
    return code.to_numpy(), distinct.rows()


def nullable(values: np.ndarray, valid: np.ndarray) -> pl.Series:
    """``values`` as a Series of their dtype, null where not ``valid``.

    In polars alone: through pyarrow (``pa.array(values, mask=...)``) it was a
    little faster, but imported ``pyarrow.compute`` (25 ms) into a process that
    had no other use for it, at the end of every replay.
    """
    return pl.Series(values).scatter(np.flatnonzero(~valid), None)


def summarize(
    per_wave: pl.DataFrame,
    policies: Sequence[str],
    groups: pl.DataFrame,
    budget_bytes: int | None = None,
) -> pl.DataFrame:
    """Per group and policy, the figures of SPEC §3 "Report" and §7 (:class:`SummaryFold`).

    ``groups`` holds one row per result to report, with a ``run`` column and,
    for :data:`GROUPINGS` ``"signature"``, a ``signature`` column; rows come in
    its order, then by policy as given, and a group without figures has
    nulls.
    """
    by = "signature" if "signature" in groups.columns else "run"
    with SummaryFold(policies, by, budget_bytes) as fold:
        if per_wave.height and policies:
            fold.add_per_wave(per_wave)
        return fold.finish(groups)


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
