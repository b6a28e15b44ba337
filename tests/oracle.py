"""An independent oracle of warmfit's contract: SPEC §1-§8, written from the text.

A slow, plain model of what a replay computes, kept apart from warmfit on
purpose: it imports nothing from ``warmfit`` (and nothing but the standard
library), takes plain Python rows (dicts with the SPEC §2 columns), and walks
them one reading at a time with lists, dicts, ``int`` and ``float``. It shares
no code, no declaration and no arithmetic helper with the package, so a bug
in the package's engines, its summary, its sweep or its policy declarations
shows up as a difference from this model (``tests/test_oracle.py``).

What it models:

- the replay (SPEC §3): per ``(run, rank)`` stream, readings in ``seq`` order,
  one profile per signature and policy; a wave is priced at its first reading
  from the profile as it stands; then the reading is observed unless it ran
  out of memory or is a split child's caller reading (which still counts
  toward the wave's actual bytes); actual = the largest delta of the wave's
  readings, delta = ``max(0, peak - baseline)``;
- the estimate (SPEC §3): Python float arithmetic, then truncation, in the
  SPEC's order; ``set_by`` profile or floor; unpriced waves;
- every figure of SPEC §3, §7 and §8, by run or by run and signature, with
  and without a budget, and the per-wave rows;
- the trainer's recorded prices (SPEC §8): a trace with an ``estimate_bytes``
  column reports one more policy, ``recorded``, whose estimate of a wave is the
  first non-null ``estimate_bytes`` of its readings in ``seq`` order, unscaled by
  the safety factor and unraised by the floor (spec-notes 24: it comes last, its
  ``set_by`` is ``recorded``, and the sweep leaves it out);
- the safety sweep (SPEC §7), with the exact smallest safe factor found by a
  bisection over the doubles themselves (not warmfit's stepping);
- a hand-written scalar model of each built-in policy: ``max-merge`` and
  ``warm-fit`` (SPEC §4), ``warm-affine`` and ``envelope`` (warmfit's own
  policies: their definitions are the docstrings of
  ``warmfit/policies/warm_affine.py`` and ``envelope.py``, spec-notes 17 and
  21), plus ``from-seed-max-merge``, a small policy of the tests' own
  (see :class:`FromSeedMaxMerge`).

Where the contract leaves a choice, the oracle follows the reading
``docs/explanation/spec-notes.md`` documents, and says which note.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A reading as the oracle takes it: a dict of the SPEC §2 columns.
Row = dict[str, Any]

#: The safety factor of SPEC §3 when none is given.
DEFAULT_SAFETY_FACTOR = 1.1

#: The figures a budget adds to a result (SPEC §7), after §8's beyond counts
#: (spec-notes 16 and 20 fix the order of the columns).
BUDGET_FIGURES = ("budget_bytes", "admitted", "refused_fit", "admitted_oom")


# --------------------------------------------------------------------------- readings


@dataclass(frozen=True)
class Reading:
    """One reading as a profile sees it (SPEC §1, §4)."""

    n: int  # packed tokens
    m: int  # logical tokens
    delta: int  # max(0, peak - baseline)
    o: int  # output bytes
    whole: bool
    phase: str
    kind: str

    @property
    def compute(self) -> int:
        """Bytes above the outputs, ``max(0, delta - o)``."""
        return max(0, self.delta - self.o)

    @property
    def rate(self) -> float:
        """SPEC §4: ``max(0, delta - o) / n`` bytes per packed token (true division)."""
        return self.compute / self.n

    @property
    def sharing(self) -> float:
        """SPEC §1: ``m / n``."""
        return self.m / self.n


def larger(a: float | None, b: float) -> float:
    """The larger of a running value (None: unset) and a new one."""
    return b if a is None or b > a else a


def smaller(a: float | None, b: float) -> float:
    return b if a is None or b < a else a


# --------------------------------------------------------------------------- policies


class MaxMerge:
    """SPEC §4 "max-merge": the largest rate of any reading and the largest sharing
    (never below 1.0); prices ``rate_max * max(n, m / sharing_max)``."""

    name = "max-merge"

    def __init__(self) -> None:
        self.rate_max: float | None = None
        self.sharing_max = 1.0

    def observe(self, r: Reading) -> None:
        self.rate_max = larger(self.rate_max, r.rate)
        self.sharing_max = larger(self.sharing_max, r.sharing)

    def price(self, n: int, m: int) -> float | None:
        if self.rate_max is None:
            return None  # no reading observed: no profile (spec-notes 5)
        return self.rate_max * max(float(n), m / self.sharing_max)

    def case(self, n: int, m: int) -> str:
        """Which case of the policy prices a wave (for the tests' coverage only)."""
        return "no profile" if self.rate_max is None else "max-merge"


class WarmFit(MaxMerge):
    """SPEC §4 "warm-fit".

    The seed is the profile's first whole reading; it and every reading before it
    touch only the max-merge fields. After it: a whole reading raises
    ``warm_rate``, lowers ``warm_tokens`` to its ``n`` and raises ``warm_sharing``
    (from 1.0); any other observed reading raises only ``warm_rate``. Until
    ``warm_tokens`` is set it prices as max-merge; then
    ``min(max_merge, warm_rate * max(warm_tokens, max(n, m / warm_sharing)))``.
    """

    name = "warm-fit"

    def __init__(self) -> None:
        super().__init__()
        self.seeded = False
        self.warm_rate = 0.0
        self.warm_tokens: int | None = None
        self.warm_sharing = 1.0

    def observe(self, r: Reading) -> None:
        super().observe(r)
        if not self.seeded:
            if r.whole:
                self.seeded = True  # the seed itself: max-merge fields only
            return
        self.warm_rate = larger(self.warm_rate, r.rate)
        if r.whole:
            self.warm_tokens = int(smaller(self.warm_tokens, r.n))
            self.warm_sharing = larger(self.warm_sharing, r.sharing)

    def price(self, n: int, m: int) -> float | None:
        max_merge = MaxMerge.price(self, n, m)
        if self.warm_tokens is None or max_merge is None:
            return max_merge
        n_eff = max(float(self.warm_tokens), max(float(n), m / self.warm_sharing))
        return min(max_merge, self.warm_rate * n_eff)


class WarmAffine(WarmFit):
    """``warm-affine`` (warmfit's own policy, spec-notes 17), from its docstring.

    After the seed, the first whole reading is the anchor ``(n0, c0)``, ``c`` the
    compute bytes ``max(0, delta - o)``. Each later whole reading of another size
    gives a marginal rate ``(c - c0) / (n - n0)``; the profile keeps the steepest
    (``slope``), the largest compute at the anchor's size (``top``), the largest
    compute of the warm waves smaller than the anchor (``below``, 0 when none) and
    the largest warm size (``n_max``). ``L(x) = max(below, top + max(0, slope) *
    (x - n0))``; with ``n_eff = max(warm_tokens, n, m / warm_sharing)`` (warm-fit's)
    a wave is priced ``min(warm_fit, L(n_eff))``, and beyond ``n_max`` no lower than
    ``L(n_max) * n_eff / n_max``; until two distinct warm sizes are seen (no slope),
    as warm-fit. "Warm whole readings" are the whole readings after the seed, the
    anchor included (``top`` starts at the anchor's own compute).
    """

    name = "warm-affine"

    def __init__(self) -> None:
        super().__init__()
        self.anchor: tuple[float, float] | None = None
        self.top: float | None = None
        self.slope: float | None = None
        self.below = 0.0
        self.n_max: float | None = None

    def observe(self, r: Reading) -> None:
        warm = self.seeded  # after the seed: a whole reading came before this one
        super().observe(r)
        if not (warm and r.whole):
            return
        n, c = float(r.n), float(r.compute)
        if self.anchor is None:
            self.anchor = (n, c)
        n0, c0 = self.anchor
        if n == n0:
            self.top = larger(self.top, c)
        else:
            self.slope = larger(self.slope, (c - c0) / (n - n0))
        if n < n0:
            self.below = larger(self.below, c)
        self.n_max = larger(self.n_max, n)

    def line(self, x: float) -> float:
        assert self.anchor is not None and self.top is not None and self.slope is not None
        return max(self.below, self.top + max(0.0, self.slope) * (x - self.anchor[0]))

    def price(self, n: int, m: int) -> float | None:
        warm_fit = WarmFit.price(self, n, m)
        if self.slope is None or warm_fit is None:
            return warm_fit
        assert self.warm_tokens is not None and self.n_max is not None
        n_eff = max(float(self.warm_tokens), max(float(n), m / self.warm_sharing))
        affine = self.line(n_eff)
        if n_eff > self.n_max:  # beyond the largest warm wave: at least its own rate
            affine = max(affine, self.line(self.n_max) * (n_eff / self.n_max))
        return min(warm_fit, affine)

    def case(self, n: int, m: int) -> str:
        if self.slope is None:
            return "warm-fit"
        assert self.warm_tokens is not None and self.anchor is not None
        x = max(float(n), m / self.warm_sharing)
        if x < self.warm_tokens:
            return "line below warm_tokens"  # n_eff is warm_tokens, not the wave's size
        return "line below the anchor" if x < self.anchor[0] else "line"


#: Envelope's price stops growing at 8 PiB (its docstring; spec-notes 21).
CEILING = 2.0**53


class Envelope(MaxMerge):
    """``envelope`` (warmfit's own policy, spec-notes 21), from its docstring.

    Points: every whole reading (the seed included), packed tokens against compute
    bytes. ``E(x)``: the largest compute measured at a size not above ``x``.
    ``sharing``: the deepest sharing of the whole readings (from 1.0). A wave is
    priced at ``x = max(n, m / sharing)``: below the smallest size, that size's
    envelope; within, the chord ``E(lo) + (E(hi) - E(lo)) * (x - lo) / (hi - lo)``
    between the measured neighbours (``E(x)`` on a measured size); beyond the
    largest size ``n_max``, ``E(n_max) * (x / n_max) ** k``, ``k = 2`` when
    ``E(n_max) / n_max`` exceeds ``E(prev) / prev`` at the next smaller size
    measured, else 1, and no more than ``max(2**53, E(n_max))``. With no whole
    reading yet, as max-merge.
    """

    name = "envelope"

    def __init__(self) -> None:
        super().__init__()
        self.points: dict[float, float] = {}  # size -> largest compute measured there
        self.point_sharing = 1.0

    def observe(self, r: Reading) -> None:
        super().observe(r)
        if r.whole:
            n = float(r.n)
            self.points[n] = larger(self.points.get(n), float(r.compute))
            self.point_sharing = larger(self.point_sharing, r.sharing)

    def envelope(self, x: float) -> float:
        return max(c for size, c in self.points.items() if size <= x)

    def price(self, n: int, m: int) -> float | None:
        if not self.points:
            return MaxMerge.price(self, n, m)
        x = max(float(n), m / self.point_sharing)
        sizes = sorted(self.points)
        if x < sizes[0]:
            return self.envelope(sizes[0])
        if x > sizes[-1]:
            n_max = sizes[-1]
            top = self.envelope(n_max)
            ratio = x / n_max
            superlinear = len(sizes) > 1 and top / n_max > self.envelope(sizes[-2]) / sizes[-2]
            # E(n_max) * ratio ** k, multiplied out left to right as the declaration
            # (warmfit/policies/envelope.py) writes it, so that the bytes agree
            priced = top * ratio * (ratio if superlinear else 1.0)
            return min(priced, max(CEILING, top))
        lo = max(size for size in sizes if size <= x)
        hi = min(size for size in sizes if size >= x)
        if lo == hi:
            return self.envelope(lo)
        at_lo, at_hi = self.envelope(lo), self.envelope(hi)
        return at_lo + (at_hi - at_lo) * ((x - lo) / (hi - lo))

    def case(self, n: int, m: int) -> str:
        if not self.points:
            return MaxMerge.case(self, n, m)
        x = max(float(n), m / self.point_sharing)
        sizes = sorted(self.points)
        if x < sizes[0]:
            return "below"
        if x <= sizes[-1]:
            return "on a point" if x in self.points else "chord"
        top = self.envelope(sizes[-1])
        if len(sizes) > 1 and top / sizes[-1] > self.envelope(sizes[-2]) / sizes[-2]:
            return "beyond, k = 2"
        return "beyond, k = 1"


class FromSeedMaxMerge(WarmFit):
    """The tests' own policy (not warmfit's): warm-fit whose max-merge rate counts only
    the readings from the seed on (the seed included); a forward reading before the
    profile's first whole reading raises the sharing, not the rate. Until the seed
    is observed it has no profile.

    Declared in ``tests/test_oracle.py`` as a subclass of ``WarmFit`` that redeclares
    ``rate_max`` over ``wholes``, an aggregate the parent declares after it: it checks
    that a redeclared aggregate takes its place among the subclass's own.
    """

    name = "from-seed-max-merge"

    def __init__(self) -> None:
        super().__init__()
        self.wholes = 0

    def observe(self, r: Reading) -> None:
        self.wholes += 1 if r.whole else 0
        rate_max = self.rate_max
        super().observe(r)  # raises rate_max from every reading: undone before the seed
        if self.wholes < 1:
            self.rate_max = rate_max


POLICIES: dict[str, type[MaxMerge]] = {
    cls.name: cls for cls in (MaxMerge, WarmFit, WarmAffine, Envelope, FromSeedMaxMerge)
}
BUILT_IN = ("max-merge", "warm-fit", "warm-affine", "envelope")

#: SPEC §8: the policy that reports the price the trainer itself used for each wave.
RECORDED = "recorded"


def with_recorded(rows: Sequence[Row], policies: Sequence[str]) -> list[str]:
    """The policies a replay reports: ``policies``, then ``recorded`` when the trace
    carries an ``estimate_bytes`` column (SPEC §8; spec-notes 24: always last)."""
    named = [p for p in policies if p != RECORDED]
    carries = any("estimate_bytes" in row for row in rows)
    return [*named, RECORDED] if carries or RECORDED in policies else named


def recorded_price(row: Row) -> tuple[int | None, str | None, int | None]:
    """A reading's recorded price as an estimate (SPEC §8): the bytes themselves, set by
    ``recorded`` (spec-notes 24), no safety factor; Nones where the reading has none."""
    price = row.get("estimate_bytes")
    if price is None:
        return None, None, None
    return int(price), RECORDED, int(price)


# --------------------------------------------------------------------------- replay


def observed(kind: str, phase: str, oom: bool) -> bool:
    """SPEC §3 step 2: never an out-of-memory reading, nor a split child's caller one."""
    return not oom and not (kind == "split_child" and phase == "caller")


#: SPEC §5's per-wave ``estimate_bytes`` is an int64: a larger estimate cannot be reported.
INT64_MAX = 2**63 - 1


def estimate(
    p: float | None, o: int, s: int | None, f: float
) -> tuple[int | None, str | None, int | None]:
    """SPEC §3 "Estimate": (estimate, set_by, the bytes before the factor).

    Raises OverflowError for an estimate an int64 cannot hold (SPEC §5's per-wave
    column): no report can carry it, and warmfit refuses such a replay (exit 2).
    """
    if p is not None:
        learned = int(p)
        floor = s if s is not None else 0
        compute = max(floor, learned)
        total, set_by = o + compute, "profile" if learned >= floor else "floor"
    elif s is not None:
        total, set_by = o + s, "floor"
    else:
        return None, None, None
    scaled = total * f
    if scaled > INT64_MAX:
        raise OverflowError(f"estimate {scaled!r} bytes does not fit an int64")
    return int(scaled), set_by, total


@dataclass
class Wave:
    """One wave: its constants, what it used, and each policy's price."""

    run: str
    rank: int
    wave: int
    signature: str
    kind: str
    n: int
    m: int
    o: int
    s: int | None
    first_seq: int
    actual: int
    oom: bool
    #: Per policy: (estimate, set_by, bytes before the factor); Nones when unpriced.
    priced: dict[str, tuple[int | None, str | None, int | None]] = field(default_factory=dict)
    #: SPEC §8: the packed tokens exceed those of every reading the profile had
    #: observed when the wave was priced (False when it had observed none).
    beyond: bool = False
    #: Per policy: its learned bytes ``p`` (None: no profile) and which of its cases
    #: priced the wave (:meth:`MaxMerge.case`), for the tests to see what a trace reaches.
    learned: dict[str, float | None] = field(default_factory=dict)
    case: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.run, self.rank, self.first_seq)


def replay_waves(rows: Iterable[Row], policies: Sequence[str], f: float) -> list[Wave]:
    """Every wave of the trace priced by every policy (SPEC §3), in per-wave order:
    by run, rank and the wave's first reading (spec-notes 4)."""
    streams: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        streams.setdefault((str(row["run"]), int(row["rank"])), []).append(row)
    waves: list[Wave] = []
    for (run, rank), readings in streams.items():
        profiles: dict[str, dict[str, MaxMerge]] = {}  # signature -> policy -> profile
        largest: dict[str, int] = {}  # signature -> most packed tokens observed
        open_waves: dict[int, Wave] = {}
        for row in sorted(readings, key=lambda r: r["seq"]):
            sig, kind, phase = str(row["signature"]), str(row["kind"]), str(row["phase"])
            n, m, o = (
                int(row["packed_tokens"]),
                int(row["logical_tokens"]),
                int(row["output_bytes"]),
            )
            s = row["static_floor_bytes"]
            oom = bool(row["oom"])
            delta = max(0, int(row["peak_bytes"]) - int(row["baseline_bytes"]))
            if sig not in profiles:  # one profile per signature and policy, from its first reading
                profiles[sig] = {name: POLICIES[name]() for name in policies if name != RECORDED}
            mine = profiles[sig]
            wave = open_waves.get(int(row["wave"]))
            if wave is None:  # the first reading: priced now, before it is observed
                wave = Wave(run, rank, int(row["wave"]), sig, kind, n, m, o,
                            None if s is None else int(s), int(row["seq"]), delta, oom)  # fmt: skip
                for name in policies:
                    if name == RECORDED:  # the trainer's price: on the first reading with one
                        wave.priced[name] = recorded_price(row)
                        continue
                    p = mine[name].price(n, m)
                    wave.priced[name] = estimate(p, o, wave.s, f)
                    wave.learned[name] = p
                    wave.case[name] = mine[name].case(n, m)
                wave.beyond = sig in largest and n > largest[sig]
                open_waves[wave.wave] = wave
                waves.append(wave)
            else:
                wave.actual = max(wave.actual, delta)
                wave.oom = wave.oom or oom
                if RECORDED in policies and wave.priced[RECORDED][0] is None:
                    wave.priced[RECORDED] = recorded_price(row)
            if observed(kind, phase, oom):
                reading = Reading(n, m, delta, o, bool(row["whole"]), phase, kind)
                for profile in mine.values():
                    profile.observe(reading)
                largest[sig] = max(largest.get(sig, n), n)
    waves.sort(key=lambda w: w.key)
    return waves


def estimate_of(wave: Wave, policy: str) -> int:
    """A priced wave's estimate."""
    est = wave.priced[policy][0]
    assert est is not None, "an unpriced wave"
    return est


def unscaled(wave: Wave, policy: str) -> int:
    """A priced wave's bytes before the safety factor, ``o + compute`` (SPEC §3)."""
    total = wave.priced[policy][2]
    assert total is not None, "an unpriced wave"
    return total


def is_figure(wave: Wave, policy: str) -> bool:
    """SPEC §3 "Report": priced, did not run out of memory, ``actual > 0``."""
    return wave.priced[policy][0] is not None and not wave.oom and wave.actual > 0


def per_wave_rows(
    waves: list[Wave], policies: Sequence[str], budget: int | None = None
) -> list[Row]:
    """SPEC §5 ``--per-wave`` rows, §7's ``admitted`` with a budget, §8's ``beyond``
    (nulls as spec-notes 4 says: over_estimate null when unpriced or actual 0)."""
    rows = []
    for w in waves:
        for name in policies:
            est, set_by, _ = w.priced[name]
            row: Row = {
                "run": w.run,
                "rank": w.rank,
                "wave": w.wave,
                "signature": w.signature,
                "kind": w.kind,
                "policy": name,
                "packed_tokens": w.n,
                "logical_tokens": w.m,
                "output_bytes": w.o,
                "static_floor_bytes": w.s,
                "actual_bytes": w.actual,
                "estimate_bytes": est,
                "set_by": set_by,
                "over_estimate": None if est is None or w.actual == 0 else est / w.actual - 1,
                "under_peak": None if est is None else est < w.actual,
                "oom": w.oom,
                "beyond": None if est is None else w.beyond,
            }
            if budget is not None:
                row["admitted"] = None if est is None else est <= budget
            rows.append(row)
    return rows


def median(values: list[float]) -> float | None:
    """The usual median: the middle value, or the mean of the two middle values."""
    if not values:
        return None
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    return (ordered[half - 1] + ordered[half]) / 2


def median_int(values: list[int]) -> int | None:
    """SPEC §7: an integer; the mean of the two middle values truncated toward zero."""
    if not values:
        return None
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    total = ordered[half - 1] + ordered[half]
    return total // 2 if total >= 0 else -(-total // 2)


def groups_of(rows: Iterable[Row], by: str) -> list[tuple[str, ...]]:
    """The results to report: every run, or every (run, signature) pair with readings,
    sorted as strings (spec-notes 3 and 16)."""
    if by == "run":
        return sorted({(str(r["run"]),) for r in rows})
    return sorted({(str(r["run"]), str(r["signature"])) for r in rows})


def group_of(wave: Wave, by: str) -> tuple[str, ...]:
    return (wave.run,) if by == "run" else (wave.run, wave.signature)


def summary_rows(
    rows: list[Row],
    waves: list[Wave],
    policies: Sequence[str],
    by: str = "run",
    budget: int | None = None,
) -> list[Row]:
    """SPEC §3 "Report", §7 and §8 figures per result and policy; every figure but
    ``oom_waves`` over the figure waves (spec-notes 1, 2, 16, 20)."""
    keys = ["run"] if by == "run" else ["run", "signature"]
    out = []
    for group in groups_of(rows, by):
        mine = [w for w in waves if group_of(w, by) == group]
        for name in policies:
            # (estimate, actual, set_by, beyond) of each figure wave
            figure = [
                (estimate_of(w, name), w.actual, w.priced[name][1], w.beyond)
                for w in mine
                if is_figure(w, name)
            ]
            over = [e / a - 1 for e, a, _, _ in figure]
            row: Row = dict(zip(keys, group, strict=True))
            row["policy"] = name
            row["priced_waves"] = len(figure)
            row["median_over_estimate"] = median(over)
            row["min_over_estimate"] = min(over) if over else None
            row["max_over_estimate"] = max(over) if over else None
            row["under_peak"] = sum(e < a for e, a, _, _ in figure)
            row["set_by_profile"] = sum(by_ == "profile" for _, _, by_, _ in figure)
            row["set_by_floor"] = sum(by_ == "floor" for _, _, by_, _ in figure)
            # every priced wave that ran out of memory, figure wave or not
            row["oom_waves"] = sum(w.priced[name][0] is not None and w.oom for w in mine)
            row["median_excess_bytes"] = median_int([e - a for e, a, _, _ in figure])
            row["priced_beyond"] = sum(beyond for _, _, _, beyond in figure)
            row["under_peak_beyond"] = sum(e < a for e, a, _, beyond in figure if beyond)
            if budget is not None:
                row["budget_bytes"] = budget
                row["admitted"] = sum(e <= budget for e, _, _, _ in figure)
                row["refused_fit"] = sum(e > budget and a <= budget for e, a, _, _ in figure)
                row["admitted_oom"] = sum(e <= budget < a for e, a, _, _ in figure)
            out.append(row)
    return out


@dataclass(frozen=True)
class Result:
    summary: list[Row]
    per_wave: list[Row]
    waves: list[Wave]


def replay(
    rows: Sequence[Row],
    policies: Sequence[str] = ("max-merge", "warm-fit", "envelope"),  # SPEC §9's defaults
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    by: str = "run",
    budget_bytes: int | None = None,
) -> Result:
    """The replay of SPEC §3 with the figures of §3, §7 and §8 (``recorded`` added
    where the trace carries the trainer's prices)."""
    rows = list(rows)
    policies = with_recorded(rows, policies)
    waves = replay_waves(rows, policies, safety_factor)
    return Result(
        summary_rows(rows, waves, policies, by, budget_bytes),
        per_wave_rows(waves, policies, budget_bytes),
        waves,
    )


# --------------------------------------------------------------------------- sweep


def _bits(x: float) -> int:
    return int(struct.unpack("<q", struct.pack("<d", x))[0])


def _double(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<q", bits))[0])


def covers(pairs: list[tuple[int, int]], f: float) -> bool:
    """Whether every wave's estimate at ``f``, ``int(T * f)``, reaches its actual."""
    return all(int(t * f) >= a for t, a in pairs)


def safe_factor(pairs: list[tuple[int, int]]) -> float | None:
    """SPEC §7: the smallest double ``f`` with ``int(T * f) >= actual`` for every
    (``T``, actual) pair of the figure waves (``T = o + compute``, the bytes before
    the factor); None with no wave, or where one has ``T = 0`` (nothing scales it;
    spec-notes 16).

    The non-negative doubles ordered by value are ordered by their bit patterns,
    and ``covers`` grows with ``f`` (a correctly rounded product is monotone), so
    a bisection over the bit patterns finds the smallest covering double.
    """
    if not pairs or any(t <= 0 for t, _ in pairs):
        return None
    lo = _bits(0.0)  # 0.0 covers nothing: every actual is > 0
    hi = _bits(float(max(a for _, a in pairs)))  # T >= 1: T * max(actual) covers
    assert covers(pairs, _double(hi)) and not covers(pairs, _double(lo))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if covers(pairs, _double(mid)):
            hi = mid
        else:
            lo = mid
    return _double(hi)


def figures_at(pairs: list[tuple[int, int]], f: float) -> tuple[int, float | None]:
    """Waves under their peak and the median over-estimate at safety factor ``f``."""
    estimates = [(int(t * f), a) for t, a in pairs]
    under = sum(e < a for e, a in estimates)
    return under, median([e / a - 1 for e, a in estimates])


def sweep(
    rows: Sequence[Row],
    policies: Sequence[str] = ("max-merge", "warm-fit"),
    by: str = "run",
    grid: Sequence[float] = (),
) -> list[Row]:
    """SPEC §7 "Safety sweep", per result and policy, over the figure waves.

    Each wave's estimate at ``f`` is SPEC §3's ``int((o + compute) * f)``, so the
    replay's bytes before the factor, ``T = o + compute``, give it at any ``f``.
    """
    rows = list(rows)
    waves = replay_waves(rows, policies, 1.0)
    keys = ["run"] if by == "run" else ["run", "signature"]
    out = []
    for group in groups_of(rows, by):
        mine = [w for w in waves if group_of(w, by) == group]
        for name in policies:
            pairs = [(unscaled(w, name), w.actual) for w in mine if is_figure(w, name)]
            safe = safe_factor(pairs)
            row: Row = dict(zip(keys, group, strict=True))
            row["policy"] = name
            row["safe_factor"] = safe
            row["median_over_estimate_at_safe"] = (
                None if safe is None else figures_at(pairs, safe)[1]
            )
            row["under_peak_at_1"] = figures_at(pairs, 1.0)[0]
            points = []
            for f in grid:
                under, med = figures_at(pairs, f)
                points.append(
                    {"safety_factor": f, "under_peak": under, "median_over_estimate": med}
                )
            row["points"] = points
            out.append(row)
    return out


def unknown_signature_warning(taught: int, signature: str, known: list[str]) -> str:
    """The PricerWarning of docs/reference/pricer.md ("A signature it was never taught"),
    word for word, for a Pricer learning live."""
    shown = ", ".join(map(repr, known[:10])) + (
        f" (and {len(known) - 10} more)" if len(known) > 10 else ""
    )
    return (
        f"warmfit: the Pricer has been taught {taught:,} readings, none of signature "
        f"{signature!r}: it has no price for it and admits none of its waves. "
        + (f"It knows {shown}." if known else "It knows no signature yet.")
        + " Is the signature mistyped, or are its waves not measured (Pricer.wave, or an "
        "enabled Recorder(pricer=...))?"
    )
