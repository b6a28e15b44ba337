"""How many tokens to pack under a memory budget: each policy's answer beside the measured one.

Per run and signature, after learning the whole trace (every reading of each
``(run, rank, signature)`` observed in trace order: the profiles exactly as a
replay leaves them after the last wave):

- ``admitted_tokens``: the largest packed-token count ``n`` a policy prices
  within the budget (``estimate <= budget``, SPEC §7's admission rule), found
  by an exponential then a binary search (exact to the token; every built-in
  policy's price is monotone non-decreasing in ``n``): the search
  :meth:`warmfit.Pricer.max_tokens` runs, :mod:`warmfit.replay.admission`. A wave must fit on
  every rank, so it is the smallest over the ranks that can price it. The
  price at ``n`` is replay's own (:func:`warmfit.replay.reference.checked_price`
  and :func:`warmfit.replay.semantics.estimate_bytes`) for a ``flat`` wave of
  ``n`` packed and ``n * L // P`` logical tokens (``L`` and ``P``: the run and
  signature's summed logical and packed tokens over its waves), with the
  output bytes and static floor of the rank's last wave of the signature;
- ``measured_limit_tokens``: the largest packed-token count the measured
  waves show would have fitted (:func:`measured_limit`), interpolated between
  the two measured sizes around the budget, never extrapolated; a wave that
  ran out of memory is evidence that its size did not fit (SPEC §9), so the
  limit lies below the smallest OOM size above the largest fitting one; when
  that OOM is the first size that did not fit (no peak measured over the
  budget below it), nothing was measured between the two and no limit is
  made up: it lies somewhere in ``[largest fitted, OOM size - 1]``
  (``measured`` :data:`BELOW_AN_OOM`, ``measured_limit_tokens`` null);
- ``gap_tokens``: the measured limit minus the admitted tokens (the throughput
  a policy leaves unused; negative: it admits more than fitted, an OOM risk),
  and ``gap_fraction``, that over the measured limit; where the budget lies
  above every measured peak (no limit measured), ``gap_at_least_tokens``: the
  largest measured size minus the admitted tokens, when positive (every
  measured wave fitted, so at least that many tokens are left unused); the
  same where the limit lies below an OOM (:data:`BELOW_AN_OOM`), whose gap
  is at most the OOM size - 1 minus the admitted tokens (the table shows the
  range).

The choices the contract leaves open are spec-notes 23
(docs/explanation/spec-notes.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from warmfit.errors import UsageError
from warmfit.policies import Policy, PriceRequest
from warmfit.replay import DEFAULT_SAFETY_FACTOR, RECORDED, replay, resolve_policies
from warmfit.replay.admission import OVERFLOW, SEARCH_CAP_TOKENS, max_admitted
from warmfit.replay.engines import Priced
from warmfit.replay.reference import checked_price
from warmfit.replay.semantics import ProfileKey, check_budget, estimate_bytes
from warmfit.report.formats import FORMATS as ALL_FORMATS
from warmfit.report.formats import Report, render
from warmfit.report.table import cell, plain_table, table_text
from warmfit.show.names import markdown_cell
from warmfit.show.units import format_bytes

JSON_SCHEMA = "warmfit.recommend/1"

#: How the measured limit was found (``measured`` in every result).
INTERPOLATED = "interpolated"
ABOVE_EVERY_PEAK = "budget above every peak"
BELOW_EVERY_PEAK = "budget below every peak"
NO_MEASURED_WAVE = "no measured wave"
#: The first size that did not fit ran out of memory (no peak measured): the limit lies in
#: ``[largest_fitted, smallest_unfitted - 1]``, nothing measured in between (SPEC §9).
BELOW_AN_OOM = "below an OOM"

#: The fields of a result, in order (JSON objects and CSV columns).
FIELDS = (
    "run", "signature", "policy", "budget_bytes", "ranks", "sharing", "admitted_tokens",
    "admitted_logical_tokens", "estimate_bytes", "set_by", "rank", "output_bytes",
    "static_floor_bytes", "measured_limit_tokens", "measured", "largest_fitted_tokens",
    "smallest_unfitted_tokens", "gap_tokens", "gap_fraction", "gap_at_least_tokens",
)  # fmt: skip


def logical_tokens(packed_tokens: int, logical_sum: int, packed_sum: int) -> int:
    """The logical tokens ``m`` priced with ``n`` packed ones at a trace's own sharing:
    ``n * L // P`` (exact integers; never below ``n``, as ``L >= P``; non-decreasing in ``n``).

    >>> logical_tokens(6964, 106_752, 92_016)
    8079
    """
    return packed_tokens * logical_sum // packed_sum


@dataclass(frozen=True)
class MeasuredLimit:
    """The packed tokens measured waves show would fit a budget, and how that was found."""

    #: The interpolated limit; None unless ``measured`` is :data:`INTERPOLATED`.
    tokens: int | None
    #: :data:`INTERPOLATED`, :data:`ABOVE_EVERY_PEAK`, :data:`BELOW_EVERY_PEAK`,
    #: :data:`BELOW_AN_OOM` or :data:`NO_MEASURED_WAVE`.
    measured: str
    #: The largest measured size below the first one that did not fit (None: none).
    largest_fitted: int | None
    #: The smallest measured size whose bytes exceed the budget (None: every size fits).
    smallest_unfitted: int | None


def measured_limit(
    points: Sequence[tuple[int, int]], budget_bytes: int, oom_tokens: Sequence[int] = ()
) -> MeasuredLimit:
    """The largest packed-token count the measured ``(packed_tokens, actual_bytes)``
    points show would fit ``budget_bytes``, below the sizes in ``oom_tokens`` that ran
    out of memory (SPEC §9).

    Each size's bytes are the largest measured at it; sizes are taken smallest
    first. The first size whose bytes exceed the budget did not fit, and no
    larger size is claimed to. When the size before it fitted (so the budget
    lies between the two measured peaks), the limit is the straight line
    between the two, rounded down to a whole token (exact integers). Never
    extrapolated: a budget above every peak or below the smallest size's gives
    no limit (``largest_fitted`` says how far the waves fitted).

    An OOM wave is evidence that its size did not fit (SPEC §9): the smallest OOM
    size above the largest size that fitted, when it is smaller than the first
    size measured not to fit, is that first size. An OOM's own reading stops
    where the allocator gave up, so it measures no peak and there is no line to
    draw: the limit is known only to lie in ``[largest_fitted, OOM size - 1]``
    (:data:`BELOW_AN_OOM`, no tokens). With no size fitted, none fit
    (:data:`BELOW_EVERY_PEAK`).

    >>> measured_limit([(100, 1_000), (300, 3_000), (100, 1_200)], 2_000)  # 100 + 800 * 200 // 1800
    MeasuredLimit(tokens=188, measured='interpolated', largest_fitted=100, smallest_unfitted=300)
    >>> measured_limit([(100, 1_000)], 2_000).measured, measured_limit([], 1).measured
    ('budget above every peak', 'no measured wave')
    >>> measured_limit([(100, 1_000)], 2_000, [300])  # somewhere in [100, 299]
    MeasuredLimit(tokens=None, measured='below an OOM', largest_fitted=100, smallest_unfitted=300)
    """
    peaks: dict[int, int] = dict(points)  # one point a size (as MeasuredWaves gives them)
    if len(peaks) < len(points):  # else each size's peak: the largest of its points
        peaks = {}
        for n, actual in points:
            peaks[n] = max(actual, peaks.get(n, actual))
    sizes = sorted(peaks)
    unfitted = next((i for i, n in enumerate(sizes) if peaks[n] > budget_bytes), len(sizes))
    fitted = sizes[unfitted - 1] if unfitted else 0
    oom = min((n for n in oom_tokens if n > fitted), default=None)
    if oom is not None and (unfitted == len(sizes) or oom < sizes[unfitted]):
        # the OOM is the first size that did not fit: no peak of it to draw a line to
        if unfitted == 0:
            return MeasuredLimit(None, BELOW_EVERY_PEAK, None, oom)
        return MeasuredLimit(None, BELOW_AN_OOM, fitted, oom)
    if not sizes:
        return MeasuredLimit(None, NO_MEASURED_WAVE, None, None)
    if unfitted == len(sizes):
        return MeasuredLimit(None, ABOVE_EVERY_PEAK, sizes[-1], None)
    n = sizes[unfitted]
    if unfitted == 0:
        return MeasuredLimit(None, BELOW_EVERY_PEAK, None, n)
    n0, a0, a1 = sizes[unfitted - 1], peaks[sizes[unfitted - 1]], peaks[n]
    limit = n0 + (budget_bytes - a0) * (n - n0) // (a1 - a0)
    return MeasuredLimit(limit, INTERPOLATED, n0, n)


@dataclass(frozen=True)
class Profile:
    """One rank's profile of a signature after the trace, and its last wave's constants."""

    cls: type[Policy]
    policy: Policy
    run: str
    rank: int
    wave: int
    output_bytes: int
    static_floor_bytes: int | None
    logical_sum: int
    packed_sum: int

    def estimate(self, n: int, safety_factor: float) -> tuple[int | None, str | None]:
        """A flat wave of ``n`` packed tokens priced as replay prices it (SPEC §3); an
        estimate past int64 (which replay refuses) is never admitted."""
        m = logical_tokens(n, self.logical_sum, self.packed_sum)
        request = PriceRequest(n, m, self.output_bytes, "flat", self.static_floor_bytes)
        p = checked_price(self.cls, self.policy, request, self.run, self.rank, self.wave)
        try:
            return estimate_bytes(p, self.output_bytes, self.static_floor_bytes, safety_factor)
        except OverflowError:
            return None, "overflow"

    def admitted(self, budget_bytes: int, safety_factor: float) -> int | None:
        """The largest admitted ``n``, by the search :meth:`warmfit.Pricer.max_tokens`
        runs (:func:`warmfit.replay.admission.max_admitted`); None when the profile
        cannot price a wave (no profile, no floor)."""

        def estimate(n: int) -> int | None:
            price, set_by = self.estimate(n, safety_factor)
            return OVERFLOW if set_by == "overflow" else price

        return max_admitted(estimate, budget_bytes)


@dataclass(frozen=True)
class Recommendation:
    """One result per run, signature and policy (:data:`FIELDS`), and what they assume."""

    results: list[dict[str, object]]
    budget_bytes: int
    safety_factor: float
    policies: tuple[str, ...]
    #: Per (run, signature, policy), the profile that set ``admitted_tokens`` (the rank
    #: that admits least), None where no rank's profile can price.
    profiles: dict[tuple[str, str, str], Profile | None]


#: A (run, signature).
Key = tuple[str, str]


@dataclass
class MeasuredWaves:
    """What :func:`recommend` needs of a trace's waves (its first policy's rows), per
    (run, signature): the summed logical and packed tokens, every wave's packed
    tokens, actual bytes and whether it ran out of memory (OOM waves kept: evidence
    for the measured limit, SPEC §9), each rank's last wave (wave, outputs, floor)
    and the profiles as they stand after it, by (run, rank, signature, policy)."""

    totals: dict[Key, tuple[int, int]]
    waves: dict[Key, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]
    last: dict[Key, dict[int, tuple[int, int, int | None]]]
    profiles: dict[ProfileKey, Policy]

    def add(self, part: MeasuredWaves) -> None:
        """Fold in a later batch's (whole (run, rank) streams: no rank in two batches)."""
        for key, (logical, packed) in part.totals.items():
            before = self.totals.get(key, (0, 0))
            self.totals[key] = (before[0] + logical, before[1] + packed)
        for key, arrays in part.waves.items():
            self.waves.setdefault(key, []).extend(arrays)
        for key, ranks in part.last.items():
            self.last.setdefault(key, {}).update(ranks)
        self.profiles.update(part.profiles)

    def finish(self, summary: pl.DataFrame) -> MeasuredWaves:
        return self

    def ooms(self, key: Key) -> list[int]:
        """The packed-token counts of the waves that ran out of memory: evidence that
        each did not fit (SPEC §9, :func:`measured_limit`)."""
        arrays = self.waves.get(key, [])
        return [int(n) for a in arrays for n in a[0][a[2]]]

    def points(self, key: Key) -> list[tuple[int, int]]:
        """The measured waves that did not run out of memory as :func:`measured_limit`
        reads them: per packed-token count, its largest actual bytes (in order of size)."""
        arrays = self.waves.get(key, [])
        if not arrays:
            return []
        n = np.concatenate([a[0] for a in arrays])
        actual = np.concatenate([a[1] for a in arrays])
        fitted = ~np.concatenate([a[2] for a in arrays])
        n, actual = n[fitted], actual[fitted]
        if not len(n):
            return []
        # by size, each size's peak the largest of its bytes (a sort by size alone, then
        # a maximum per size: 2.6x cheaper than sorting by size and bytes, 1.3e6 waves)
        order = np.argsort(n)
        n = n[order]
        first = np.flatnonzero(np.concatenate(([True], n[1:] != n[:-1])))
        peaks = np.maximum.reduceat(actual[order], first)
        return list(zip(n[first].tolist(), peaks.tolist(), strict=True))


#: The columns of a wave :func:`measured_waves` reads.
WAVE_COLUMNS = (
    "run", "signature", "rank", "wave", "packed_tokens", "logical_tokens", "output_bytes",
    "static_floor_bytes",
)  # fmt: skip


def first_policy_waves(readings: pl.DataFrame, priced: Priced, policy: str) -> pl.DataFrame:
    """One row per wave priced (:data:`WAVE_COLUMNS`, ``actual_bytes`` and ``oom``): from
    the readings at each wave's first one (the vectorized engine), or ``policy``'s
    per-wave rows (the reference engine's)."""
    if priced.first is None:
        assert priced.per_wave is not None
        return priced.per_wave.filter(pl.col("policy") == policy)
    return (
        readings.select(WAVE_COLUMNS)
        .gather(priced.first)
        .with_columns(actual_bytes=pl.Series(priced.actual), oom=pl.Series(priced.oom))
    )


def measured_waves(waves: pl.DataFrame, profiles: dict[ProfileKey, Policy]) -> MeasuredWaves:
    """:class:`MeasuredWaves` of one row per wave (:func:`first_policy_waves`, or a
    policy's per-wave rows), with ``profiles`` (as a replay leaves them)."""
    keys = ["run", "signature"]
    totals = {
        (run, sig): (int(logical), int(packed))
        for run, sig, logical, packed in waves.group_by(keys, maintain_order=True)
        .agg(pl.col("logical_tokens").sum(), pl.col("packed_tokens").sum())
        .iter_rows()
    }
    measured: dict[Key, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for (run, sig), mine in waves.partition_by(keys, as_dict=True, maintain_order=True).items():
        measured[(str(run), str(sig))] = [
            (
                mine.get_column("packed_tokens").to_numpy(),
                mine.get_column("actual_bytes").to_numpy(),
                mine.get_column("oom").to_numpy(),
            )
        ]
    last: dict[Key, dict[int, tuple[int, int, int | None]]] = {}
    for run, sig, rank, wave, o, s in (
        waves.group_by([*keys, "rank"], maintain_order=True)
        .last()
        .select(*keys, "rank", "wave", "output_bytes", "static_floor_bytes")
        .iter_rows()
    ):
        last.setdefault((run, sig), {})[rank] = (wave, o, s)
    kept = {
        key: profile
        for key, profile in profiles.items()
        if (key[0], key[2]) in last and key[1] in last[(key[0], key[2])]
    }
    return MeasuredWaves(totals, measured, last, kept)


@dataclass(frozen=True)
class RecommendFold:
    """:func:`recommend`'s part of the one streamed replay (:class:`warmfit.replay.stream.Fold`):
    the :class:`MeasuredWaves` of each batch, from ``policy``'s rows."""

    policy: str
    wants_rows: bool = False
    wants_profiles: bool = True

    def part(
        self,
        readings: pl.DataFrame,
        priced: Priced,
        profiles: dict[ProfileKey, Policy] | None,
        lineup: object,
    ) -> MeasuredWaves:
        assert profiles is not None
        return measured_waves(first_policy_waves(readings, priced, self.policy), profiles)

    def start(self, policies: Sequence[str]) -> MeasuredWaves:
        return MeasuredWaves({}, {}, {}, {})


def _refuse_recorded(budget_bytes: int, policies: Sequence[str | type[Policy]] | None) -> None:
    if check_budget(budget_bytes) is None:
        raise UsageError("must be a number of bytes >= 0; got None.", argument="budget_bytes")
    if policies is not None and RECORDED in policies:
        raise UsageError(
            f"policy {RECORDED!r} is the trainer's own prices (a trace's estimate_bytes, "
            "SPEC §8): it has no profile to price another size with, so it admits no "
            f"token count. Leave -p {RECORDED} out; 'warmfit replay' reports its figures."
        )


def recommend(
    readings: pl.DataFrame,
    budget_bytes: int,
    policies: Sequence[str | type[Policy]] | None = None,
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    engine: str = "auto",
) -> Recommendation:
    """Per run, signature and policy: the admitted tokens under ``budget_bytes`` after
    the whole trace, the measured limit and the gap (module docstring) of validated
    readings (sorted by run, rank, seq), in memory; :func:`recommend_traces` streams."""
    _refuse_recorded(budget_bytes, policies)
    classes = resolve_policies(policies)
    result = replay(readings, classes, safety_factor, engine, "signature")
    waves = result.per_wave.filter(pl.col("policy") == classes[0].name)
    found = measured_waves(waves, result.profiles)
    return recommendation(result.summary, found, budget_bytes, classes, result.safety_factor)


def recommend_traces(
    paths: Sequence[str | os.PathLike[str]],
    budget_bytes: int,
    policies: Sequence[str | type[Policy]] | None = None,
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    engine: str = "auto",
    **stream: Any,
) -> Recommendation:
    """:func:`recommend` of the trace at ``paths``, folded from one streamed replay
    (:func:`warmfit.replay.stream.replay_stream`, whose keyword arguments ``stream``
    takes: ``jobs``, ``cluster``, ``progress``)."""
    from warmfit.replay.stream import replay_stream

    _refuse_recorded(budget_bytes, policies)
    classes = resolve_policies(policies)
    fold = RecommendFold(classes[0].name)
    result = replay_stream(
        paths, classes, safety_factor, engine, "signature", folds=[fold], **stream
    )
    (found,) = result.folded
    return recommendation(result.summary, found, budget_bytes, classes, result.safety_factor)


def recommendation(
    summary: pl.DataFrame,
    found: MeasuredWaves,
    budget_bytes: int,
    classes: Sequence[type[Policy]],
    safety_factor: float,
) -> Recommendation:
    """The results of every (run, signature, policy) of ``summary`` (by signature)."""
    keys = ["run", "signature"]
    totals = found.totals
    last_waves = {
        key: [(rank, *ranks[rank]) for rank in sorted(ranks)] for key, ranks in found.last.items()
    }
    rows: list[dict[str, object]] = []
    chosen: dict[tuple[str, str, str], Profile | None] = {}
    limits: dict[Key, MeasuredLimit] = {}
    by_name = {cls.name: cls for cls in classes}
    for run, sig, name in summary.select(*keys, "policy").iter_rows():
        cls = by_name.get(name)
        if cls is None:  # SPEC §8's ``recorded`` prices: no profile to ask about a size
            continue
        logical_sum, packed_sum = totals[(run, sig)]
        if (run, sig) not in limits:  # one per run and signature, whatever the policy
            limits[(run, sig)] = measured_limit(
                found.points((run, sig)), budget_bytes, found.ooms((run, sig))
            )
        limit = limits[(run, sig)]
        best: tuple[int, Profile] | None = None  # the smallest over the ranks, lowest rank
        for rank, wave, o, s in last_waves[(run, sig)]:
            profile = Profile(
                cls, found.profiles[(run, rank, sig, name)], run, rank, wave, o, s,
                logical_sum, packed_sum,
            )  # fmt: skip
            admitted = profile.admitted(budget_bytes, safety_factor)
            if admitted is not None and (best is None or admitted < best[0]):
                best = (admitted, profile)
        row: dict[str, object] = dict.fromkeys(FIELDS)
        row |= {
            "run": run,
            "signature": sig,
            "policy": name,
            "budget_bytes": budget_bytes,
            "ranks": len(last_waves[(run, sig)]),
            "sharing": logical_sum / packed_sum,
            "measured_limit_tokens": limit.tokens,
            "measured": limit.measured,
            "largest_fitted_tokens": limit.largest_fitted,
            "smallest_unfitted_tokens": limit.smallest_unfitted,
        }
        if best is not None:
            admitted, profile = best
            estimate, set_by = (
                profile.estimate(admitted, safety_factor) if admitted else (None, None)
            )
            row |= {
                "admitted_tokens": admitted,
                "admitted_logical_tokens": logical_tokens(admitted, logical_sum, packed_sum),
                "estimate_bytes": estimate,
                "set_by": set_by,
                "rank": profile.rank,
                "output_bytes": profile.output_bytes,
                "static_floor_bytes": profile.static_floor_bytes,
            }
            if limit.tokens is not None:
                gap = limit.tokens - admitted
                row |= {"gap_tokens": gap, "gap_fraction": gap / limit.tokens}
            elif limit.measured in (ABOVE_EVERY_PEAK, BELOW_AN_OOM):
                assert limit.largest_fitted is not None
                unused = limit.largest_fitted - admitted
                row["gap_at_least_tokens"] = unused if unused > 0 else None
        rows.append(row)
        chosen[(run, sig, name)] = None if best is None else best[1]
    names = tuple(by_name)
    return Recommendation(rows, budget_bytes, safety_factor, names, chosen)


# --------------------------------------------------------------------------- rendering

FORMATS = ALL_FORMATS


def _admitted_cell(row: dict[str, object]) -> str:
    admitted = row["admitted_tokens"]
    if admitted is None:
        return "no profile"
    if admitted == SEARCH_CAP_TOKENS:
        return "no limit"
    return f"{admitted:,}"


def _measured_cell(row: dict[str, object]) -> str:
    measured, fitted = row["measured"], row["largest_fitted_tokens"]
    if measured == INTERPOLATED:
        return f"{row['measured_limit_tokens']:,}"
    if measured == ABOVE_EVERY_PEAK:
        return f"not measured (all fit, up to {fitted:,})"
    if measured == BELOW_EVERY_PEAK:
        return "not measured (none fit)"
    if measured == BELOW_AN_OOM:
        oom = row["smallest_unfitted_tokens"]
        assert isinstance(fitted, int) and isinstance(oom, int)
        return f"between {fitted:,} and {oom - 1:,} (OOM at {oom:,})"
    return "not measured (no wave)"


def _gap_cell(row: dict[str, object]) -> str:
    gap, fraction = row["gap_tokens"], row["gap_fraction"]
    admitted, oom = row["admitted_tokens"], row["smallest_unfitted_tokens"]
    if row["measured"] == BELOW_AN_OOM and isinstance(admitted, int) and isinstance(oom, int):
        at_most = oom - 1 - admitted  # the limit is at most the OOM size - 1
        if isinstance(row["gap_at_least_tokens"], int):
            return f"{row['gap_at_least_tokens']:+,} to {at_most:+,}"
        return f"at most {at_most:+,}"
    if isinstance(row["gap_at_least_tokens"], int):
        return f"at least {row['gap_at_least_tokens']:+,}"
    if gap is None or not isinstance(fraction, float):
        return "—"
    return f"{gap:+,} ({fraction * 100:+.1f}%)"


def _note(row: dict[str, object]) -> str:
    admitted, gap = row["admitted_tokens"], row["gap_tokens"]
    unfitted, fitted = row["smallest_unfitted_tokens"], row["largest_fitted_tokens"]
    if not isinstance(admitted, int):
        return ""
    if isinstance(unfitted, int) and admitted >= unfitted:
        if row["measured"] == BELOW_AN_OOM:  # under a budget the trace does not name
            return "OOM risk: admits a size that ran out of memory"
        return "OOM risk: admits a size measured not to fit"
    if isinstance(gap, int) and gap < 0:
        return "OOM risk: admits more than fitted"
    if row["measured"] == ABOVE_EVERY_PEAK and isinstance(fitted, int) and admitted > fitted:
        return "beyond every size measured"
    return ""


def _cells(row: dict[str, object]) -> list[str]:
    return [_admitted_cell(row), _measured_cell(row), _gap_cell(row), _note(row)]


HEADER = ("admitted", "measured limit", "gap", "note")


def _caption(rec: Recommendation) -> str:
    return (
        f"admitted = the most packed tokens each policy prices within the budget of "
        f"{rec.budget_bytes:,} bytes ({format_bytes(rec.budget_bytes)}; estimate <= budget, "
        f"safety factor {rec.safety_factor:g}) after learning the whole trace, the smallest "
        "over the ranks, logical tokens at the trace's own sharing; measured limit = the "
        "packed tokens the measured waves show would fit, interpolated between the two "
        "measured sizes around the budget (never extrapolated); gap = measured limit - "
        "admitted, tokens (% of the limit) a policy leaves unused, negative: it admits more "
        "than fitted (an OOM risk); at least = every measured wave fitted, up to the largest "
        "size, and the policy admits fewer"
    ) + (
        "; between = the first size that did not fit ran out of memory (an OOM reading is "
        "taken to mean that size does not fit this budget, though the trace does not say "
        "under which budget it ran) and measured no peak, so the limit lies somewhere "
        "below it and is not interpolated; the gap is then a range"
        if any(row["measured"] == BELOW_AN_OOM for row in rec.results)
        else ""
    )


def recommendation_report(rec: Recommendation) -> Report:
    """A recommendation as a :class:`~warmfit.report.formats.Report`: json
    (:data:`JSON_SCHEMA`), csv, markdown or table."""

    def markdown() -> str:
        header = ["run", "signature", "policy", *HEADER]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in rec.results:
            labels = [markdown_cell(str(row[k])) for k in ("run", "signature", "policy")]
            lines.append("| " + " | ".join([*labels, *_cells(row)]) + " |")
        caption = _caption(rec)  # capitalize() would lower the rest: "100 gb", "oom"
        return "\n".join([*lines, "", caption[:1].upper() + caption[1:] + "."]) + "\n"

    return Report(
        table=lambda: _table(rec),
        header=FIELDS,
        rows=lambda: (list(row.values()) for row in rec.results),
        document=lambda: {
            "schema": JSON_SCHEMA,
            "budget_bytes": rec.budget_bytes,
            "safety_factor": rec.safety_factor,
            "search_cap_tokens": SEARCH_CAP_TOKENS,
            "results": rec.results,
        },
        markdown=markdown,
    )


def render_recommendation(rec: Recommendation, fmt: str) -> str:
    """Render a recommendation: json (:data:`JSON_SCHEMA`), csv, markdown or table."""
    return render(recommendation_report(rec), fmt)


def _table(rec: Recommendation) -> str:
    table = plain_table(_caption(rec))
    for name in ("run", "signature", "policy"):
        table.add_column(name, no_wrap=True, min_width=3)
    for name in HEADER:
        table.add_column(name, no_wrap=True, justify="left" if name == "note" else "right")
    previous: tuple[object, object] | None = None
    for row in rec.results:
        group = (row["run"], row["signature"])
        cells = _cells(row)
        if group == previous:  # the run, signature and measured limit are the group's
            table.add_row("", "", cell(row["policy"]), cells[0], "", *cells[2:])
        else:
            table.add_row(*[cell(name) for name in group], cell(row["policy"]), *cells)
        previous = group
    return table_text(table)
