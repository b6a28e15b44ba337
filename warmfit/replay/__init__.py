"""Replay a trace through pricing policies (SPEC §3).

Each ``(run, rank)`` stream is replayed alone, readings in ``seq`` order, with
one profile per signature. At a wave's first reading the wave is priced from
its signature's profile as it stands; then every reading that did not run out
of memory is observed, except a split child's caller reading (the trainer
records that against its split structure, not the signature's profile). A
wave's actual bytes are the largest delta over its readings.

The package, imports pointing one way:

- :mod:`~warmfit.replay.semantics` — what the contract computes (which readings
  are observed, the estimate arithmetic), scalar and array forms side by side;
- :mod:`~warmfit.replay.reference` — the reference engine, one reading at a time;
- :mod:`~warmfit.replay.vectorized` — every wave at once, for declared policies;
- :mod:`~warmfit.replay.summary` — the report's figures;
- here: :func:`replay`, which picks the engine and reports the one that ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import polars as pl

from warmfit.format.schema import ESTIMATE_COLUMN
from warmfit.policies import Policy
from warmfit.replay.engines import (
    DEFAULT_POLICIES,
    ENGINES,
    choose_engine,
    fold_priced,
    lineup_names,
    price,
    resolve_lineup,
    resolve_policies,
)
from warmfit.replay.reference import replay_scalar
from warmfit.replay.semantics import (
    DEFAULT_SAFETY_FACTOR,
    MAX_ESTIMATE_BYTES,
    PER_WAVE_SCHEMA,
    RECORDED,
    ProfileKey,
    check_budget,
    check_safety_factor,
    estimate_bytes,
    is_observed,
)
from warmfit.replay.summary import (
    BUDGET_COLUMNS,
    GROUPINGS,
    IN_FIGURES,
    SUMMARY_COLUMNS,
    SummaryFold,
    group_keys,
    result_groups,
    summarize,
    wave_roles,
    with_admitted,
)
from warmfit.replay.vectorized import replay_vectorized

__all__ = [
    "BUDGET_COLUMNS",
    "DEFAULT_POLICIES",
    "DEFAULT_SAFETY_FACTOR",
    "ENGINES",
    "GROUPINGS",
    "IN_FIGURES",
    "MAX_ESTIMATE_BYTES",
    "PER_WAVE_SCHEMA",
    "RECORDED",
    "SUMMARY_COLUMNS",
    "ReplayResult",
    "Replayed",
    "check_safety_factor",
    "estimate_bytes",
    "group_keys",
    "is_observed",
    "replay",
    "replay_scalar",
    "replay_vectorized",
    "resolve_policies",
    "result_groups",
    "summarize",
    "wave_roles",
]


class Replayed(Protocol):
    """What every replay gives a report, whether of the trace in memory
    (:class:`ReplayResult`) or streamed (:class:`warmfit.replay.stream.StreamedReplay`)."""

    @property
    def summary(self) -> pl.DataFrame: ...
    @property
    def policies(self) -> tuple[str, ...]: ...
    @property
    def safety_factor(self) -> float: ...
    @property
    def engine(self) -> str: ...
    @property
    def by(self) -> str: ...
    @property
    def budget_bytes(self) -> int | None: ...
    @property
    def safe_factors(self) -> Mapping[str, float | None]: ...


@dataclass(frozen=True)
class ReplayResult:
    """What a replay produced: per-wave rows, the summary, and what every report needs.

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
    #: Every profile as it stands after the trace, by (run, rank, signature, policy).
    profiles: dict[ProfileKey, Policy] = field(default_factory=dict)
    #: The readings replayed (a reference to the caller's frame, not a copy).
    readings: pl.DataFrame = field(default_factory=pl.DataFrame, repr=False)
    #: Per policy that put a wave under its peak, the smallest safe factor
    #: (:meth:`~warmfit.replay.summary.SummaryFold.safe_factors`).
    safe_factors: dict[str, float | None] = field(default_factory=dict)

    @property
    def roles(self) -> pl.DataFrame:
        """Each wave's role in its profile: ``seed``, ``warm`` or ``other``
        (:func:`wave_roles`), computed when a report asks for it."""
        return wave_roles(self.readings)


def replay(
    readings: pl.DataFrame,
    policies: Sequence[str | type[Policy]] | None = None,
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    engine: str = "auto",
    by: str = "run",
    budget_bytes: int | None = None,
    *,
    recorded: bool = True,
) -> ReplayResult:
    """Replay validated readings through policies and summarize, per SPEC §3, §7 and §8.

    ``policies`` are registered names, ``module:Class`` specs or policy
    classes (default: max-merge, warm-fit and envelope). ``engine`` is ``auto``, ``scalar`` or
    ``vectorized``; every engine gives identical results, and ``auto`` picks
    the vectorized one when every policy is declared; :attr:`ReplayResult.engine`
    says which engine ran (the reference one also where the vectorized one could
    not match it exactly: values beyond 2**53). ``by``
    groups the summary by ``run`` or by ``signature`` within each run. With
    ``budget_bytes`` (the memory free above the baseline when a wave is
    admitted) the per-wave rows gain ``admitted`` and the summary the
    admission counts. Readings with an ``estimate_bytes`` column (SPEC §8) also
    report the policy ``recorded``, last: the prices the trainer itself used
    (``recorded=False``: not reported); ``policies`` may name it.
    """
    safety_factor = check_safety_factor(safety_factor)
    check_budget(budget_bytes)
    groups = result_groups(readings, by)
    carries = recorded and ESTIMATE_COLUMN in readings.columns
    classes, with_recorded = resolve_lineup(policies, carries)
    chosen = choose_engine(engine, classes)
    names = tuple(lineup_names(classes, with_recorded))
    profiles: dict[ProfileKey, Policy] = {}
    priced = price(
        readings, classes, safety_factor, chosen, by, True, profiles, recorded=with_recorded
    )
    assert priced.per_wave is not None
    with SummaryFold(names, by, budget_bytes) as fold:
        fold_priced(fold, priced)
        summary = fold.finish(groups)
        safe = fold.safe_factors()
    chosen, per_wave = priced.engine, priced.per_wave
    per_wave = with_admitted(per_wave, budget_bytes)
    return ReplayResult(
        per_wave, summary, names, safety_factor, chosen, by, budget_bytes, profiles,
        readings, safe,
    )  # fmt: skip
