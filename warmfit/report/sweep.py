"""Which safety factor to ship: the smallest that puts no wave under its peak.

A wave's estimate at safety factor ``f`` is ``int((o + compute) * f)``
(SPEC §3), so one replay at ``f = 1.0`` gives every wave's unscaled bytes
``T`` exactly, and the estimate at any other factor is ``int(T * f)`` — the
very arithmetic a replay at ``f`` does. From that, per result (run, or run
and signature) and policy, over the same waves as the replay figures:

- ``safe_factor``: the smallest double ``f`` with ``int(T * f) >= actual``
  for every wave — exact, not a grid value (``None`` when a wave's ``T`` is
  0, so that no factor can cover it, or when there is no wave);
- ``median_over_estimate_at_safe``: the median over-estimate there;
- ``under_peak_at_1``: waves under their peak at ``f = 1.0``;
- ``points``: waves under their peak and the median over-estimate at every
  factor of a grid, for the Pareto picture.

The trainer's recorded prices (the policy ``recorded``, SPEC §8) are what the
trainer used: no safety factor scales them, so a sweep leaves them out
(``warmfit replay`` reports them), and naming them is an error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from warmfit.errors import UsageError
from warmfit.policies import Policy
from warmfit.replay import IN_FIGURES, RECORDED, group_keys, replay, resolve_policies
from warmfit.replay.engines import Priced
from warmfit.replay.semantics import covering_factors
from warmfit.replay.summary import number_groups

JSON_SCHEMA = "warmfit.sweep/1"
DEFAULT_GRID = "1.0:1.6:0.01"
#: A grid longer than this is almost surely a typo in its step.
MAX_GRID_POINTS = 100_000


def parse_grid(text: str) -> list[float]:
    """Factors from ``START:STOP:STEP``, both ends included, rounded to 12 decimals.

    >>> parse_grid("1.0:1.05:0.01")
    [1.0, 1.01, 1.02, 1.03, 1.04, 1.05]
    """
    try:
        start, stop, step = (float(part) for part in text.split(":"))
    except ValueError:
        raise UsageError(f"grid {text!r} is not START:STOP:STEP (e.g. {DEFAULT_GRID}).") from None
    if not all(math.isfinite(v) for v in (start, stop, step)) or start <= 0 or step <= 0:
        raise UsageError(f"grid {text!r}: START and STEP must be positive numbers.")
    if stop < start:
        raise UsageError(f"grid {text!r}: STOP must not be below START.")
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_GRID_POINTS:
        raise UsageError(f"grid {text!r} has {count:,} points; use a larger STEP.")
    return [round(start + i * step, 12) for i in range(count)]


def safe_factor(unscaled: np.ndarray, actual: np.ndarray) -> float | None:
    """The smallest double ``f`` with ``int(unscaled * f) >= actual`` for every wave.

    >>> safe_factor(np.array([1000, 3]), np.array([1100, 3]))  # 1.1 covers 1000 -> 1100
    1.1
    >>> safe_factor(np.array([0]), np.array([5])) is None
    True
    """
    if len(unscaled) == 0 or (unscaled <= 0).any():
        return None
    return float(covering_factors(unscaled, actual).max())


def _median(values: np.ndarray) -> float | None:
    """The usual median, ``(a + b) / 2`` of the two middle values (as replay's)."""
    if len(values) == 0:
        return None
    low, high = (len(values) - 1) // 2, len(values) // 2
    middle = np.partition(values, [low, high])  # the sorted values there, without a sort
    return float((middle[low] + middle[high]) / 2)


def _figures_at(
    unscaled: np.ndarray, actual: np.ndarray, factor: float
) -> tuple[int, float | None]:
    # int((o + compute) * f), kept a double: exact as the truncated double itself, where
    # an int64 would wrap for estimates past 2**63 (a large safe factor); compared with
    # and divided by the actual bytes exactly while those stay below 2**53 (8 PiB)
    # (arrays already of doubles are used as they are: sweep_rows converts once)
    estimate = np.trunc(np.asarray(unscaled, dtype=np.float64) * factor)
    actual = np.asarray(actual, dtype=np.float64)
    over = estimate / actual - 1
    return int(np.count_nonzero(estimate < actual)), _median(over)


class Grid:
    """One result's waves, for :func:`_figures_at` at many factors: the same figures,
    found without computing every wave's estimate at each factor.

    The waves are sorted once by ``T / actual``; at a factor ``f`` a wave's over-estimate
    ``trunc(T * f) / actual - 1`` lies within ``delta`` of ``T / actual * f - 1`` (the
    truncation moves it by less than ``1 / actual``, rounding by a few ulps). So the
    waves sure to lie under their peak, or not, and those sure to lie below or above
    the two middle over-estimates, are counted from the sorted order; only the waves
    near a boundary are computed exactly, as :func:`_figures_at` computes them. Exact:
    the same numbers, not an approximation of them.
    """

    #: Below this many waves, every wave is computed at each factor.
    DIRECT = 4096
    #: A relative margin far above the rounding of a double (2**-53, a few times over).
    MARGIN = 1e-9

    def __init__(self, unscaled: np.ndarray, actual: np.ndarray) -> None:
        self.unscaled = np.asarray(unscaled, dtype=np.float64)
        self.actual = np.asarray(actual, dtype=np.float64)
        self.direct = len(self.actual) < self.DIRECT
        if not self.direct:
            ratio = self.unscaled / self.actual
            # not a stable sort: waves of one ratio may lie in any order, since each
            # window below is bounded by ratios (whole runs of equal ones), so the
            # figures are the same; the stable sort cost 1.7x as much (1.3e6 waves)
            order = np.argsort(ratio)
            self.ratio = ratio[order]
            self.unscaled, self.actual = self.unscaled[order], self.actual[order]
            self.slack = 1.0 / float(self.actual.min())

    def figures(self, factor: float) -> tuple[int, float | None]:
        """:func:`_figures_at` of these waves at ``factor``."""
        if self.direct:
            return _figures_at(self.unscaled, self.actual, factor)
        return self._under(factor), self._median(factor)

    def _exact(self, begin: int, end: int, factor: float) -> tuple[np.ndarray, np.ndarray]:
        estimate = np.trunc(self.unscaled[begin:end] * factor)
        return estimate, self.actual[begin:end]

    def _under(self, factor: float) -> int:
        # ratio * factor well below 1: under its peak; well above: not; between, exactly
        sure = int(np.searchsorted(self.ratio, (1 - self.MARGIN) / factor, side="left"))
        beyond = int(np.searchsorted(self.ratio, (1 + self.MARGIN) / factor, side="right"))
        estimate, actual = self._exact(sure, max(sure, beyond), factor)
        return sure + int(np.count_nonzero(estimate < actual))

    def _median(self, factor: float) -> float | None:
        n = len(self.ratio)
        low, high = (n - 1) // 2, n // 2
        at_low = float(self.ratio[low]) * factor - 1
        at_high = float(self.ratio[high]) * factor - 1
        delta = self.slack + self.MARGIN * (1 + abs(at_low) + abs(at_high))
        begin = int(np.searchsorted(self.ratio, (at_low - 3 * delta + 1) / factor, side="left"))
        end = int(np.searchsorted(self.ratio, (at_high + 3 * delta + 1) / factor, side="right"))
        begin, end = min(begin, low), max(end, high + 1)
        estimate, actual = self._exact(begin, end, factor)
        over = estimate / actual - 1
        middle = np.partition(over, [low - begin, high - begin])
        return float((middle[low - begin] + middle[high - begin]) / 2)


@dataclass(frozen=True)
class SweepResult:
    """One row per result: the group's keys, policy and the sweep's figures."""

    results: list[dict[str, object]]
    grid: list[float]
    by: str


def _refuse_recorded(policies: Sequence[str | type[Policy]] | None) -> None:
    if policies is not None and RECORDED in policies:
        raise UsageError(
            f"policy {RECORDED!r} is the trainer's own prices (a trace's estimate_bytes, "
            "SPEC §8), which no safety factor scales: there is nothing to sweep. Leave "
            f"-p {RECORDED} out; 'warmfit replay' reports its figures."
        )


#: Per (group's keys, policy): the estimates at factor 1.0 and the actual bytes of
#: the waves in the figures, as arrays (one per batch).
Waves = dict[tuple[tuple[object, ...], str], list[tuple[np.ndarray, np.ndarray]]]


@dataclass(frozen=True)
class SweepFold:
    """The sweep's part of the one streamed replay (at factor 1.0, without ``recorded``):
    per group and policy, each figure wave's estimate and actual bytes, 16 bytes a
    wave and policy (:class:`warmfit.replay.stream.Fold`)."""

    policies: tuple[str, ...]
    wants_rows: bool = False
    wants_profiles: bool = False

    def part(
        self, readings: pl.DataFrame, priced: Priced, profiles: object, lineup: object
    ) -> Waves:
        code, distinct = number_groups(priced.groups)
        waves = len(priced.actual)
        estimate = priced.estimate.reshape(waves, len(self.policies))
        figure = ~priced.oom & (priced.actual > 0)
        order = np.argsort(code, kind="stable")
        bounds = np.searchsorted(code[order], np.arange(len(distinct) + 1))
        found: Waves = {}
        for i, key in enumerate(distinct):
            mine = order[bounds[i] : bounds[i + 1]]
            for p, policy in enumerate(self.policies):
                wave_estimate = estimate[mine, p]
                kept = figure[mine] & (wave_estimate >= 0)
                found[(key, policy)] = [(wave_estimate[kept], priced.actual[mine][kept])]
        return found

    def start(self, policies: Sequence[str]) -> SweepWaves:
        return SweepWaves()


class SweepWaves:
    """:class:`SweepFold`'s waves, batch after batch."""

    def __init__(self) -> None:
        self.waves: Waves = {}

    def add(self, part: Waves) -> None:
        for key, arrays in part.items():
            self.waves.setdefault(key, []).extend(arrays)

    def finish(self, summary: pl.DataFrame) -> SweepWaves:
        return self

    def arrays(self, key: tuple[tuple[object, ...], str]) -> tuple[np.ndarray, np.ndarray]:
        found = self.waves.get(key, [])
        if not found:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return (
            np.concatenate([e for e, _ in found]).astype(np.int64, copy=False),
            np.concatenate([a for _, a in found]).astype(np.int64, copy=False),
        )


def sweep_rows(
    summary: pl.DataFrame, by: str, waves: SweepWaves, factors: Sequence[float]
) -> SweepResult:
    """The sweep's figures of every (group, policy) row of ``summary``, from its waves."""
    keys = group_keys(by)
    rows: list[dict[str, object]] = []
    for group in summary.select(*keys, "policy").iter_rows(named=True):
        values = tuple(group.values())
        unscaled, actual = waves.arrays((values[:-1], str(values[-1])))
        safe = safe_factor(unscaled, actual)
        unscaled, actual = unscaled.astype(np.float64), actual.astype(np.float64)
        under_at_1, _ = _figures_at(unscaled, actual, 1.0)
        grid = Grid(unscaled, actual)
        points = []
        for factor in factors:
            under, median = grid.figures(factor)
            points.append(
                {"safety_factor": factor, "under_peak": under, "median_over_estimate": median}
            )
        rows.append(
            {
                **group,
                "safe_factor": safe,
                "median_over_estimate_at_safe": None
                if safe is None
                else _figures_at(unscaled, actual, safe)[1],
                "under_peak_at_1": under_at_1,
                "points": points,
            }
        )
    return SweepResult(rows, list(factors), by)


def sweep(
    readings: pl.DataFrame,
    policies: Sequence[str] | None = None,
    by: str = "run",
    grid: Sequence[float] | None = None,
    engine: str = "auto",
) -> SweepResult:
    """Sweep the safety factor of every policy over validated readings in memory
    (never ``recorded``: see the module's docstring); :func:`sweep_traces` streams."""
    _refuse_recorded(policies)
    factors = list(grid) if grid is not None else parse_grid(DEFAULT_GRID)
    result = replay(readings, policies, 1.0, engine, by, recorded=False)
    keys = group_keys(by)
    waves = result.per_wave.filter(IN_FIGURES).select(
        *keys, "policy", "estimate_bytes", "actual_bytes"
    )
    found = SweepWaves()
    for key, mine in waves.partition_by([*keys, "policy"], as_dict=True).items():
        unscaled = mine.get_column("estimate_bytes").to_numpy()
        actual = mine.get_column("actual_bytes").to_numpy()
        found.add({(tuple(key[:-1]), str(key[-1])): [(unscaled, actual)]})
    return sweep_rows(result.summary, by, found, factors)


def sweep_traces(
    paths: Sequence[str | os.PathLike[str]],
    policies: Sequence[str | type[Policy]] | None = None,
    by: str = "run",
    grid: Sequence[float] | None = None,
    engine: str = "auto",
    **stream: Any,
) -> SweepResult:
    """:func:`sweep` of the trace at ``paths``, folded from one streamed replay at factor
    1.0 (:func:`warmfit.replay.stream.replay_stream`, whose keyword arguments
    ``stream`` takes: ``jobs``, ``cluster``, ``progress``)."""
    from warmfit.replay.stream import replay_stream

    _refuse_recorded(policies)
    factors = list(grid) if grid is not None else parse_grid(DEFAULT_GRID)
    classes = resolve_policies(policies)
    fold = SweepFold(tuple(cls.name for cls in classes))
    result = replay_stream(paths, classes, 1.0, engine, by, folds=[fold], recorded=False, **stream)
    (waves,) = result.folded
    return sweep_rows(result.summary, by, waves, factors)


def safe_factors(
    readings: pl.DataFrame, policies: Sequence[str] | None = None, engine: str = "auto"
) -> dict[str, float | None]:
    """Per policy, the smallest safety factor that puts no wave of any run under its peak.

    The largest over the runs of :func:`warmfit.report.sweep.safe_factor` (exact,
    not a grid value), as :func:`warmfit.report.sweep.sweep` finds it; ``None``
    where no factor covers a wave (one priced at 0 bytes before the factor).
    A run with no priced wave asks for no factor; a policy with none in any
    run is left out, and so is ``recorded`` (no factor scales the trainer's prices).
    """
    if policies is not None:
        asked = len(policies)
        policies = [p for p in policies if p != RECORDED]
        if asked and not policies:
            return {}
    needed: dict[str, list[float | None]] = {}
    for row in sweep(readings, policies, "run", [], engine).results:
        factor = row["safe_factor"]
        if factor is None and not row["under_peak_at_1"]:
            continue  # no priced wave: every factor is safe
        assert factor is None or isinstance(factor, float)
        needed.setdefault(str(row["policy"]), []).append(factor)
    return {
        policy: None if None in factors else max(f for f in factors if f is not None)
        for policy, factors in needed.items()
    }
