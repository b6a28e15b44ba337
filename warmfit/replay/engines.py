"""Which policies and which engine a replay runs, and the step that runs it
(shared by every way to replay: the whole trace, or one batch of streams)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from warmfit.errors import UsageError
from warmfit.format.trace import Canonical
from warmfit.policies import Policy, checked_class, get_policy
from warmfit.policies.rule import is_declared
from warmfit.replay.reference import replay_scalar
from warmfit.replay.semantics import RECORDED, ProfileKey
from warmfit.replay.summary import SummaryFold, group_keys, per_wave_arrays
from warmfit.replay.vectorized import per_wave_frame, price_waves

#: Without --policy (SPEC §9): the PR's two, then the policy the README recommends.
DEFAULT_POLICIES = ("max-merge", "warm-fit", "envelope")
ENGINES = ("auto", "scalar", "vectorized")


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


def resolve_lineup(
    names: Sequence[str | type[Policy]] | None, carries_prices: bool
) -> tuple[list[type[Policy]], bool]:
    """The policy classes a replay runs and whether it reports ``recorded`` (SPEC §8).

    ``recorded`` is reported whenever the trace carries ``estimate_bytes``
    (``carries_prices``), always after the other policies; naming it (``-p
    recorded``) asks for it, and alone, for it alone. Naming it for a trace without
    the column is a :class:`UsageError`, as is a policy of one's own named so.
    """
    asked = sum(1 for name in names or () if name == RECORDED)
    if asked > 1:
        raise UsageError(f"policy {RECORDED!r} is named twice; name each policy once.")
    if asked and not carries_prices:
        raise UsageError(
            f"policy {RECORDED!r} reports the prices the trainer itself used, from a trace's "
            "optional estimate_bytes column (SPEC §8), and this trace has no such column. "
            "Record them with Recorder.wave(..., estimate_bytes=...) or a pricer, or leave "
            f"-p {RECORDED} out."
        )
    rest = [name for name in names or () if name != RECORDED]
    classes = resolve_policies(rest) if rest or not asked else []
    if any(cls.name == RECORDED for cls in classes):
        raise UsageError(
            f"a policy of one's own may not be named {RECORDED!r}: that name reports the "
            "prices a trace recorded (SPEC §8). Rename the policy class."
        )
    return classes, carries_prices


def lineup_names(classes: Sequence[type[Policy]], recorded: bool) -> list[str]:
    """The names a replay reports: the classes', then ``recorded`` when it is reported."""
    return [cls.name for cls in classes] + ([RECORDED] if recorded else [])


def choose_engine(engine: str, classes: Sequence[type[Policy]]) -> str:
    """The engine that runs ``classes``: ``scalar`` or ``vectorized`` (``auto`` picks)."""
    if engine not in ENGINES:
        raise UsageError(f"must be one of {', '.join(ENGINES)}; got {engine!r}.", argument="engine")
    if engine == "scalar":
        return "scalar"
    vectorizable = all(is_declared(cls) for cls in classes)
    if engine == "vectorized" and not vectorizable:
        names = ", ".join(cls.name for cls in classes)
        raise UsageError(
            f"the vectorized engine: not every policy ({names}) is declared "
            "(warmfit.policies.rule.DeclaredPolicy), and only declared policies run on the "
            "vectorized engine; use the scalar or auto engine."
        )
    return "vectorized" if vectorizable else "scalar"


@dataclass(frozen=True)
class Priced:
    """Readings replayed by one engine, as a summary folds them and reports show them."""

    #: The engine that ran: ``vectorized``, or ``scalar`` (also where the
    #: vectorized one handed the readings over: values beyond 2**53).
    engine: str
    #: The per-wave rows, when asked for (the reference engine makes them anyway:
    #: always kept).
    per_wave: pl.DataFrame | None
    #: Per wave, its group's key columns (``run``, or ``run`` and ``signature``).
    groups: pl.DataFrame
    actual: np.ndarray
    oom: np.ndarray
    #: Per (wave, policy), wave-major: the estimate (-1: unpriced) and what set it.
    estimate: np.ndarray
    set_by: np.ndarray
    #: Per wave, whether it was priced beyond the seen range (SPEC §8).
    beyond: np.ndarray
    #: Per (wave, policy), the bytes before the safety factor (-1: unpriced), from
    #: either engine.
    unscaled: np.ndarray | None
    #: Per profile, the reading counts of :func:`warmfit.format.trace.reading_counts`
    #: (the vectorized engine counts them on the way; None from the scalar one).
    counts: pl.DataFrame | None
    #: Per wave, the row of its first reading in the readings priced (the vectorized
    #: engine; None from the scalar one, whose per-wave rows are always kept).
    first: np.ndarray | None = None


def price(
    readings: pl.DataFrame,
    classes: Sequence[type[Policy]],
    safety_factor: float,
    engine: str,
    by: str,
    per_wave: bool,
    profiles_out: dict[ProfileKey, Policy] | None = None,
    *,
    checked: Canonical | None = None,
    recorded: bool = False,
) -> Priced:
    """Replay validated readings (sorted by run, rank, seq) on ``engine`` (``vectorized``
    or ``scalar``, from :func:`choose_engine`); the one step both a whole-trace replay
    and a batch take. ``checked``: how the rows lie, where the checks found it
    (:class:`warmfit.format.trace.Canonical`). ``recorded``: the policy ``recorded``
    after ``classes`` (:func:`resolve_lineup`; null prices where these readings have
    no ``estimate_bytes`` column)."""
    keys = group_keys(by)
    priced = (
        price_waves(readings, classes, safety_factor, profiles_out, checked, recorded)
        if engine == "vectorized"
        else None
    )
    if priced is not None:
        names = lineup_names(classes, recorded)
        rows = per_wave_frame(readings, priced, names) if per_wave else None
        return Priced(
            "vectorized", rows, readings.select(keys).gather(priced.first), priced.actual,
            priced.oom, priced.estimate, priced.set_by, priced.beyond, priced.unscaled,
            priced.counts, priced.first,
        )  # fmt: skip
    if profiles_out is not None:
        profiles_out.clear()
    kept: list[int] = []
    frame = replay_scalar(readings, classes, safety_factor, profiles_out, recorded, kept)
    count = len(classes) + recorded
    waves, actual, oom, estimate, set_by, beyond = per_wave_arrays(frame, count)
    rows = frame  # made anyway: kept (a fold may read it)
    unscaled = np.array(kept, dtype=np.int64)
    return Priced(
        "scalar", rows, waves.select(keys), actual, oom, estimate, set_by, beyond, unscaled, None
    )


def fold_priced(fold: SummaryFold, priced: Priced) -> None:
    """Fold the waves one engine priced into a summary."""
    fold.add(
        priced.groups, priced.actual, priced.oom, priced.estimate, priced.set_by, priced.beyond,
        priced.unscaled,
    )  # fmt: skip
