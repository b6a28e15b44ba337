"""Expectations on replay figures: the CI gate behind ``warmfit check``.

An expectations file is a small TOML document that bounds, per run and per
policy, the figures of a replay summary (SPEC §3 "Report")::

    version = 1            # format of this file (optional; 1 is the only one)
    safety_factor = 1.1    # the f the figures were taken at (optional; 1.1)

    [runs.EP1.warm-fit]
    max_median_over_estimate = 0.1584   # fractions: 0.1584 means +15.84%
    max_max_over_estimate = 0.3043
    max_under_peak = 0
    min_priced_waves = 25

Every key of a ``[runs.RUN.POLICY]`` table is optional; the known ones are in
:data:`LIMITS`. A figure *fails* its limit when it is worse: above a ``max_``
limit, below a ``min_`` one, or missing (a run with no priced wave has no
median). :func:`write_expectations` writes the current figures as limits,
with no headroom beyond rounding to 0.01 percentage points in the permissive
direction, so the file stays readable and any worsening beyond that fails;
it also records the figures themselves (``measured = {...}``), so that a
failing limit can be told apart (:data:`VERDICTS`): it *regressed* when the
figure measured then met it, it was *never met* when even that figure did
not (a limit tightened by hand, a target), and it simply *fails* where the
file records no figure (a table written by hand). It refuses
(:class:`UnderPeakError`) figures that put waves under their peak unless
told ``allow_under``: such a limit would let the gate pass a policy that ran
out of memory.

The library never prints; :func:`check` returns a :class:`CheckReport` and
the command turns its regressions into exit code 1.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from warmfit.errors import UsageError
from warmfit.format.files import not_regular, write_atomically, write_bytes_atomically
from warmfit.replay import DEFAULT_SAFETY_FACTOR, RECORDED, ReplayResult, check_safety_factor
from warmfit.report.sweep import safe_factors
from warmfit.report.table import cell, percent, plain_table, table_text
from warmfit.run import signals
from warmfit.show.names import counted, printable, toml_string, waves_under

FORMATS = ("table", "csv", "json")
JSON_SCHEMA = "warmfit.check/1"
EXPECT_VERSION = 1
#: Limits are written rounded to this many decimals of a fraction (0.01 pp).
DECIMALS = 4


@dataclass(frozen=True)
class Limit:
    """One kind of expectation: which summary figure it bounds, and how."""

    key: str  # the TOML key, e.g. "max_median_over_estimate"
    figure: str  # the summary column it bounds, e.g. "median_over_estimate"
    label: str  # words for a person, e.g. "median over-estimate"
    upper: bool  # True: the figure must be <= the limit; False: >=
    fraction: bool  # True: an over-estimate fraction; False: a count of waves


#: Every key a ``[runs.RUN.POLICY]`` table may hold, in the order they are written.
LIMITS: tuple[Limit, ...] = (
    Limit("max_median_over_estimate", "median_over_estimate", "median over-estimate", True, True),
    Limit("max_max_over_estimate", "max_over_estimate", "largest over-estimate", True, True),
    Limit("max_under_peak", "under_peak", "waves under their peak", True, False),
    Limit("min_priced_waves", "priced_waves", "priced waves", False, False),
)
_BY_KEY = {limit.key: limit for limit in LIMITS}
_BY_FIGURE = {limit.figure: limit for limit in LIMITS}
#: The key of a table's figures as measured when ``--write-expect`` wrote it.
MEASURED_KEY = "measured"
#: What a check says of each limit: it holds, it held when the file was
#: written and fails now, the figure written then already failed it, or the
#: file records no figure to tell.
VERDICTS = ("ok", "regressed", "never met", "fails")
_TOP_KEYS = ("version", "safety_factor", "runs")


class ExpectationsError(UsageError):
    """An expectations file that cannot be read or does not fit the trace (exit 2)."""

    def __init__(self, path: str | os.PathLike[str], problem: str, fix: str = "") -> None:
        text = f"{printable(str(path))}: {problem}"
        if fix:
            text += f" {fix}"
        super().__init__(text)


_FIX = "See docs/how-to/ci-gate.md for the format of an expectations file."


# --------------------------------------------------------------------------- file


@dataclass(frozen=True)
class Expectations:
    """A parsed expectations file: limits per (run, policy) and key."""

    path: str
    safety_factor: float
    limits: Mapping[tuple[str, str], Mapping[str, float | int]]
    #: Per (run, policy), the figures measured when the file was written
    #: (summary column -> value); empty where the file records none.
    measured: Mapping[tuple[str, str], Mapping[str, float | int]] = field(default_factory=dict)

    @property
    def runs(self) -> list[str]:
        """Runs named in the file, in file order."""
        return list(dict.fromkeys(run for run, _ in self.limits))

    @property
    def policies(self) -> list[str]:
        """Policies named in the file, in order of first appearance."""
        return list(dict.fromkeys(policy for _, policy in self.limits))

    def restricted_to(self, policies: Sequence[str]) -> Expectations:
        """Only the limits of ``policies``; each must have some in the file."""
        lacking = [p for p in policies if p not in self.policies]
        if lacking:
            raise ExpectationsError(
                self.path,
                f"holds no expectations for policy {lacking[0]!r} (it has: "
                f"{', '.join(self.policies)}).",
                "Add them with 'warmfit check PATH... -p POLICY --write-expect NEW.toml', or "
                "drop that -p.",
            )
        kept = {key: v for key, v in self.limits.items() if key[1] in policies}
        return Expectations(self.path, self.safety_factor, kept, self.measured)


def _where(run: str, policy: str | None = None) -> str:
    return f"[runs.{_toml_key(run)}" + ("" if policy is None else f".{_toml_key(policy)}") + "]"


def parse_expectations(text: str, path: str | os.PathLike[str] = "<expectations>") -> Expectations:
    """Parse and validate the TOML text of an expectations file.

    >>> e = parse_expectations('[runs.EP1.warm-fit]\\nmax_under_peak = 0\\n')
    >>> e.safety_factor, dict(e.limits[("EP1", "warm-fit")])
    (1.1, {'max_under_peak': 0})
    """
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationsError(
            path, f"is not valid TOML: {exc}.", "Fix the syntax at that line. " + _FIX
        ) from None
    except RecursionError:
        raise ExpectationsError(
            path,
            "is nested too deeply to be read (thousands of [ or { inside one another).",
            "An expectations file needs only [runs.RUN.POLICY] tables. " + _FIX,
        ) from None
    unknown = [k for k in doc if k not in _TOP_KEYS]
    if unknown:
        raise ExpectationsError(
            path,
            f"unknown top-level key {unknown[0]!r}; the known ones are {', '.join(_TOP_KEYS)}.",
            _FIX,
        )
    version = doc.get("version", EXPECT_VERSION)
    if version != EXPECT_VERSION or isinstance(version, bool):
        raise ExpectationsError(
            path,
            f"has version {version!r}; this warmfit reads version {EXPECT_VERSION} only.",
            "Upgrade warmfit, or rewrite the file with 'warmfit check --write-expect'.",
        )
    safety = doc.get("safety_factor", DEFAULT_SAFETY_FACTOR)
    if isinstance(safety, bool) or not isinstance(safety, (int, float)):
        raise ExpectationsError(path, f"safety_factor must be a number; got {safety!r}.", _FIX)
    try:
        safety = check_safety_factor(float(safety))
    except UsageError:
        raise ExpectationsError(
            path, f"safety_factor must be a positive number; got {safety!r}.", _FIX
        ) from None
    runs = doc.get("runs")
    if runs is not None and not isinstance(runs, dict):
        raise ExpectationsError(
            path,
            f"'runs' must hold tables like [runs.EP1.warm-fit]; got {runs!r}.",
            _FIX,
        )
    if not runs:
        raise ExpectationsError(
            path,
            "holds no expectations: it needs at least one [runs.RUN.POLICY] table.",
            "Write one with 'warmfit check PATH... --write-expect FILE'. " + _FIX,
        )
    limits: dict[tuple[str, str], dict[str, float | int]] = {}
    measured: dict[tuple[str, str], dict[str, float | int]] = {}
    for run, policies in runs.items():
        if not isinstance(policies, dict) or not policies:
            raise ExpectationsError(
                path,
                f"{_where(run)} must hold one table per policy, like {_where(run, 'warm-fit')}.",
                _FIX,
            )
        for policy, table in policies.items():
            if not isinstance(table, dict):
                raise ExpectationsError(
                    path,
                    f"{_where(run)} {policy} = {table!r} is not a table of limits; write it as "
                    f"{_where(run, policy)} followed by its limits.",
                    _FIX,
                )
            figures = table.get(MEASURED_KEY, {})
            limits[(run, policy)] = _parse_limits(
                path, run, policy, {k: v for k, v in table.items() if k != MEASURED_KEY}
            )
            measured[(run, policy)] = _parse_measured(path, run, policy, figures)
    return Expectations(str(path), safety, limits, measured)


def _parse_limits(
    path: str | os.PathLike[str], run: str, policy: str, table: Mapping[str, Any]
) -> dict[str, float | int]:
    parsed: dict[str, float | int] = {}
    where = _where(run, policy)
    for key, value in table.items():
        limit = _BY_KEY.get(key)
        if limit is None:
            raise ExpectationsError(
                path,
                f"{where} has the unknown key {key!r}; the known ones are {', '.join(_BY_KEY)}.",
                _FIX,
            )
        if limit.fraction:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
            want = "a number (a fraction: 0.18 means +18%)"
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            want = "a whole number >= 0"
        if not ok:
            raise ExpectationsError(path, f"{where} {key} must be {want}; got {value!r}.", _FIX)
        parsed[key] = float(value) if limit.fraction else int(value)
    return parsed


def _parse_measured(
    path: str | os.PathLike[str], run: str, policy: str, figures: object
) -> dict[str, float | int]:
    where = f"{_where(run, policy)} {MEASURED_KEY}"
    if not isinstance(figures, dict):
        raise ExpectationsError(
            path, f"{where} must be a table of figures like {{ under_peak = 0 }}.", _FIX
        )
    parsed: dict[str, float | int] = {}
    for name, value in figures.items():
        limit = _BY_FIGURE.get(name)
        if limit is None:
            raise ExpectationsError(
                path,
                f"{where} has the unknown figure {name!r}; the known ones are "
                f"{', '.join(_BY_FIGURE)}.",
                _FIX,
            )
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value):
            raise ExpectationsError(path, f"{where} {name} must be a number; got {value!r}.", _FIX)
        parsed[name] = float(value) if limit.fraction else int(value)
    return parsed


def read_expectations(path: str | os.PathLike[str]) -> Expectations:
    """Read and validate an expectations file (a regular file only: never a FIFO)."""
    problem = not_regular(path)
    if problem is not None and os.path.exists(path):
        raise ExpectationsError(path, f"{problem}.", "Name the TOML file itself.")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExpectationsError(
            path,
            "no such file.",
            "Check the path, or create it with 'warmfit check PATH... --write-expect FILE'.",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExpectationsError(path, f"cannot be read ({exc}).") from None
    return parse_expectations(text, path)


# --------------------------------------------------------------------------- check


@dataclass(frozen=True)
class CheckResult:
    """One limit checked against one figure of one run and policy."""

    run: str
    policy: str
    limit: Limit
    allowed: float | int
    actual: float | int | None
    holds: bool
    #: The figure measured when the file was written (None: not recorded).
    measured: float | int | None = None

    @property
    def verdict(self) -> str:
        """One of :data:`VERDICTS`: ``ok``, ``regressed``, ``never met`` or ``fails``.

        >>> CheckResult("EP1", "warm-fit", LIMITS[0], 0.10, 0.16, False, 0.158).verdict
        'never met'
        """
        if self.holds:
            return "ok"
        if self.measured is None:
            return "fails"
        return "regressed" if _within(self.limit, self.measured, self.allowed) else "never met"

    def describe(self) -> str:
        """The before/after line of a person-readable report.

        >>> r = CheckResult("EP1", "warm-fit", LIMITS[0], 0.18, 0.214, False)
        >>> r.describe()
        'EP1 warm-fit: median over-estimate +21.4% > allowed +18.0%'
        """
        sign = (
            ("<=" if self.limit.upper else ">=")
            if self.holds
            else (">" if self.limit.upper else "<")
        )
        actual, allowed = self.shown()
        who = f"{printable(self.run)} {printable(self.policy)}"
        if self.actual is None:
            line = (
                f"{who}: {self.limit.label} is missing (no priced wave); "
                f"allowed {'at most' if self.limit.upper else 'at least'} {allowed}"
            )
        else:
            line = f"{who}: {self.limit.label} {actual} {sign} allowed {allowed}"
        if not self.holds and self.measured is not None:
            line += f" ({format_value(self.limit, self.measured)} when the file was written)"
        return line

    def shown(self) -> tuple[str, str]:
        """The actual figure and its limit as text, precise enough to tell them apart."""
        actual = format_value(self.limit, self.actual)
        allowed = format_value(self.limit, self.allowed)
        if actual == allowed and not self.holds:
            actual = format_value(self.limit, self.actual, digits=2)
            allowed = format_value(self.limit, self.allowed, digits=2)
        return actual, allowed


def _within(limit: Limit, value: float | int, allowed: float | int) -> bool:
    return value <= allowed if limit.upper else value >= allowed


def format_value(limit: Limit, value: float | int | None, digits: int = 1) -> str:
    """A figure as a person reads it: ``+15.8%`` or a count; ``—`` when missing.

    >>> format_value(LIMITS[0], 0.15786), format_value(LIMITS[2], 0), format_value(LIMITS[0], None)
    ('+15.8%', '0', '—')
    """
    if value is None or limit.fraction:
        return percent(value, digits)
    return str(int(value))


@dataclass(frozen=True)
class CheckReport:
    """Every limit of an expectations file, checked against a replay."""

    expect_path: str
    safety_factor: float
    results: tuple[CheckResult, ...]

    @property
    def failures(self) -> list[CheckResult]:
        """Every limit that does not hold, whatever its verdict."""
        return [r for r in self.results if not r.holds]

    @property
    def regressions(self) -> list[CheckResult]:
        """Every limit that does not hold (the name predates :attr:`CheckResult.verdict`)."""
        return self.failures

    @property
    def passed(self) -> bool:
        return not self.failures

    def regression_message(self) -> str:
        """The paragraph ``warmfit check`` prints on stderr when limits fail."""
        failing = self.failures
        counts = {v: sum(r.verdict == v for r in failing) for v in VERDICTS[1:]}
        if counts["regressed"] == len(failing):
            head = "regressed"
        else:
            head = "fail (" + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ")"
        lines = [
            f"{len(failing)} of {len(self.results)} expectations in {self.expect_path} {head}:"
        ]
        width = max(len(r.verdict) for r in failing)
        lines += [f"  {r.verdict:<{width}}  {r.describe()}" for r in failing]
        if counts["never met"]:
            lines += [
                "A limit never met is tighter than the figures the file was written from (set "
                "by hand, a target): improve the policy, or loosen the limit to the figure."
            ]
        if counts["regressed"] or counts["fails"]:
            lines += [
                "If the change is intended, rewrite the expectations with",
                f"  warmfit check PATH... --write-expect {self.expect_path} --force",
                "and commit them with the change.",
            ]
        return "\n".join(lines)


def evaluate(result: ReplayResult, expectations: Expectations) -> CheckReport:
    """Check a replay's summary against expectations.

    Every run and policy named in the expectations must be in the replay,
    and every run of the replay must have expectations (so a stored trace
    cannot go unchecked); otherwise :class:`ExpectationsError`. Figures are
    compared exactly: a figure equal to its limit holds.
    """
    path = expectations.path
    summary = {(r["run"], r["policy"]): r for r in result.summary.iter_rows(named=True)}
    check_runs_held(result, expectations)
    missing = new_runs(result, expectations)
    if missing:
        raise ExpectationsError(
            path,
            f"has no expectations for {'run' if len(missing) == 1 else 'runs'} "
            f"{', '.join(repr(printable(run)) for run in missing)} of the trace.",
            "Add them with 'warmfit check PATH... --expect FILE --update' (their current "
            "figures become their limits; the other runs' tables stay as they are), or leave "
            "those traces out of the paths.",
        )
    results = []
    for (run, policy), limits in expectations.limits.items():
        row = summary.get((run, policy))
        if row is None:
            raise ExpectationsError(
                path,
                f"expects policy {policy!r} for run {run!r}, but it was not replayed "
                f"(replayed: {', '.join(result.policies)}).",
                "Drop the -p options, or add that policy to them.",
            )
        for limit in LIMITS:
            if limit.key not in limits:
                continue
            allowed = limits[limit.key]
            actual = row[limit.figure]
            if actual is None:
                holds = False
            elif limit.upper:
                holds = actual <= allowed
            else:
                holds = actual >= allowed
            measured = expectations.measured.get((run, policy), {}).get(limit.figure)
            results.append(CheckResult(run, policy, limit, allowed, actual, holds, measured))
    return CheckReport(path, expectations.safety_factor, tuple(results))


# --------------------------------------------------------------------------- write


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    """A TOML key, quoted when it is not a bare key.

    >>> _toml_key("warm-fit"), _toml_key("run 1.a")
    ('warm-fit', '"run 1.a"')
    """
    return key if _BARE_KEY.match(key) else toml_string(key)


def _round_limit(value: float, upper: bool) -> float:
    """Round a fraction to :data:`DECIMALS` places, never on the failing side.

    >>> _round_limit(0.158312, True), _round_limit(0.158312, False), _round_limit(0.1584, True)
    (0.1584, 0.1583, 0.1584)
    """
    scale = 10**DECIMALS
    # From the side that holds (floor for an upper limit): where value * scale rounds
    # away from a whole number in doubles (0.1584 * 10**4 = 1584.0000000000002), the
    # other side would start, and stay, one step past the value's own 4 decimals.
    k = math.floor(value * scale) if upper else math.ceil(value * scale)
    while (k / scale < value) if upper else (k / scale > value):
        k += 1 if upper else -1
    return k / scale


def expectations_from(result: ReplayResult) -> dict[tuple[str, str], dict[str, float | int]]:
    """The current figures of a replay, as limits that all hold on it."""
    limits: dict[tuple[str, str], dict[str, float | int]] = {}
    for row in result.summary.iter_rows(named=True):
        table: dict[str, float | int] = {}
        for limit in LIMITS:
            value = row[limit.figure]
            if value is None:
                continue
            table[limit.key] = _round_limit(value, limit.upper) if limit.fraction else int(value)
        limits[(row["run"], row["policy"])] = table
    return limits


def expectations_toml(result: ReplayResult, sources: Sequence[str] = ()) -> str:
    """The text of an expectations file holding the current figures of ``result``."""
    lines = [
        "# warmfit expectations: the CI gate of 'warmfit check' (docs/how-to/ci-gate.md).",
        "# Written by 'warmfit check --write-expect'"
        + (f" from {' '.join(sources)}" if sources else "")
        + ". Over-estimates are fractions",
        "# (0.16 means +16%), rounded up to 0.01 percentage points; loosen a limit by hand,",
        "# or rewrite the file with --write-expect --force when a change is intended.",
        "# 'measured' holds the figures the limits were taken from (a limit they did not",
        "# meet, set by hand, is reported as 'never met' rather than 'regressed').",
        f"version = {EXPECT_VERSION}",
        f"safety_factor = {result.safety_factor!r}",
    ]
    return "\n".join(lines + run_tables(result)) + "\n"


def run_tables(result: ReplayResult, runs: Sequence[str] | None = None) -> list[str]:
    """The lines of the ``[runs.RUN.POLICY]`` tables of ``result``'s current figures
    (of ``runs`` only, when given), each table after a blank line."""
    lines: list[str] = []
    summary = {(r["run"], r["policy"]): r for r in result.summary.iter_rows(named=True)}
    for (run, policy), table in expectations_from(result).items():
        if runs is not None and run not in runs:
            continue
        row = summary[(run, policy)]
        lines += ["", f"[runs.{_toml_key(run)}.{_toml_key(policy)}]"]
        if row["median_over_estimate"] is None:
            lines.append("# no priced wave: no over-estimate figures to bound")
        lines += [f"{key} = {value!r}" for key, value in table.items()]
        figures = [
            f"{limit.figure} = {row[limit.figure]!r}"
            for limit in LIMITS
            if row[limit.figure] is not None
        ]
        if figures:
            lines.append(f"{MEASURED_KEY} = {{ {', '.join(figures)} }}")
    return lines


def check_runs_held(result: ReplayResult, expectations: Expectations) -> None:
    """Every run the expectations name is in ``result``, or an ExpectationsError."""
    trace_runs = list(dict.fromkeys(result.summary.get_column("run")))
    for run in expectations.runs:
        if run not in trace_runs:
            raise ExpectationsError(
                expectations.path,
                f"expects run {printable(run)!r}, which the trace does not hold (its runs: "
                f"{', '.join(map(printable, trace_runs))}).",
                "Pass the trace that holds it, or remove its tables from the file.",
            )


def new_runs(result: ReplayResult, expectations: Expectations) -> list[str]:
    """The runs of ``result`` that ``expectations`` do not list, in summary order."""
    listed = set(expectations.runs)
    return [run for run in dict.fromkeys(result.summary.get_column("run")) if run not in listed]


def update_expectations(
    result: ReplayResult,
    expectations: Expectations,
    *,
    allow_under: bool = False,
    policies: Sequence[str] | None = None,
) -> list[str]:
    """Add to the expectations file the tables of the runs of ``result`` it does not
    list (their current figures, as :func:`write_expectations` writes them) and
    return those runs; every byte already in the file stays (hand-set limits,
    comments). ``result`` must be replayed at the file's safety factor. Figures with
    waves under their peak are refused as :func:`write_expectations` refuses them,
    unless ``allow_under``. The file is replaced atomically; nothing is written
    when no run is new."""
    check_runs_held(result, expectations)  # before anything is written: the check would fail
    added = new_runs(result, expectations)
    if not added:
        return []
    if result.safety_factor != expectations.safety_factor:
        raise ValueError("replay at the expectations' safety factor to update them")
    if not allow_under:
        offenders = [o for o in under_peak(result) if o.run in added]
        if offenders:
            chosen = list(result.policies) if policies is None else policies
            safe = safe_factors(result.readings, chosen, result.engine)
            raise UnderPeakError(
                expectations.path, result.safety_factor, offenders, safe, updating=True
            )
    # A link is kept: the file it names is the one updated. Its mode and line endings
    # stay, and every byte already there.
    target = Path(os.path.realpath(expectations.path))
    status = target.stat()
    mode = stat.S_IMODE(status.st_mode)
    if not mode & stat.S_IWUSR:
        raise ExpectationsError(
            expectations.path,
            "is read-only, so --update leaves it as it is.",
            "Make it writable (chmod u+w) to add the new runs to it.",
        )
    if status.st_nlink > 1:  # a new file in its place would leave the other names old
        raise ExpectationsError(
            expectations.path,
            f"has {status.st_nlink} names (hard links), so --update leaves it as it is: it "
            "replaces the file whole, which would update this name alone.",
            "Update a copy (cp, then --update on the copy), then put the copy in place of "
            "each name, or make the other names symbolic links.",
        )
    data = target.read_bytes()
    newline = b"\r\n" if b"\r\n" in data else b"\n"
    if data and not data.endswith(b"\n"):
        data += newline
    lines = [
        "",
        f"# Added by 'warmfit check --update': {counted(len(added), 'run')} the file did not "
        "list, at their current figures.",
        *run_tables(result, added)[1:],  # the comment takes the first table's blank line
    ]
    data += newline.join(line.encode("utf-8") for line in lines) + newline

    def write(sink: BinaryIO) -> None:
        sink.write(data)
        os.fchmod(sink.fileno(), mode)
        if (status.st_uid, status.st_gid) != (os.geteuid(), os.getegid()):
            _keep_owner(sink.fileno(), status, expectations.path)
        signals.raise_if_received()  # a stop whose exception vanished: the file stays

    write_atomically(target, write)
    return added


def _keep_owner(fd: int, status: os.stat_result, path: str | os.PathLike[str]) -> None:
    """Give the new file the owner and group of the one it replaces (as root, say, on
    another user's file), or refuse: the file would change hands."""
    try:
        os.fchown(fd, status.st_uid, status.st_gid)
    except PermissionError:
        raise ExpectationsError(
            path,
            f"belongs to user {status.st_uid} and group {status.st_gid}, which --update "
            "cannot give the new file, so it leaves the file as it is.",
            "Run it as the file's owner, or on a copy.",
        ) from None


def write_expectations(
    result: ReplayResult,
    path: str | os.PathLike[str],
    sources: Sequence[str] = (),
    *,
    allow_under: bool = False,
    policies: Sequence[str] | None = None,
) -> Path:
    """Write the current figures of ``result`` as an expectations file.

    The file is written atomically (:func:`warmfit.format.files.write_atomically`).
    The caller decides whether an existing file may be replaced.

    Figures that put a wave under its peak (``under_peak`` above 0) would be
    written as ``max_under_peak`` above 0, a limit under which the gate passes
    a policy that ran out of memory: unless ``allow_under``, nothing is
    written and :class:`UnderPeakError` names them (:func:`under_peak`) with
    each policy's smallest safe factor (:func:`warmfit.report.sweep.safe_factors`, which replays
    ``policies``: those given to the replay of ``result``, by default its
    policy names).
    """
    if not allow_under:
        offenders = under_peak(result)
        if offenders:
            chosen = list(result.policies) if policies is None else policies
            safe = safe_factors(result.readings, chosen, result.engine)
            raise UnderPeakError(path, result.safety_factor, offenders, safe)
    text = expectations_toml(result, sources)
    return write_bytes_atomically(path, text.encode("utf-8"))


# --------------------------------------------------------------------------- under their peak

#: The most (run, policy) pairs a refusal names, one per line; the rest are counted.
SHOWN_OFFENDERS = 10


@dataclass(frozen=True)
class UnderPeak:
    """A run and policy whose replay priced waves under their peak."""

    run: str
    policy: str
    waves: int


def under_peak(result: ReplayResult) -> list[UnderPeak]:
    """Every (run, policy) of ``result`` with a wave under its peak, in summary order."""
    return [
        UnderPeak(row["run"], row["policy"], int(row["under_peak"]))
        for row in result.summary.iter_rows(named=True)
        if (row["under_peak"] or 0) > 0
    ]


class UnderPeakError(UsageError):
    """Expectations refused: they would allow waves under their peak (exit 2).

    ``offenders`` are the (run, policy) pairs with waves under their peak,
    ``safe`` the smallest safe factor per policy (:func:`warmfit.report.sweep.safe_factors`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        safety_factor: float,
        offenders: Sequence[UnderPeak],
        safe: Mapping[str, float | None],
        updating: bool = False,
    ) -> None:
        self.path = str(path)
        self.offenders = tuple(offenders)
        self.safe = dict(safe)
        super().__init__(under_peak_message(path, safety_factor, offenders, safe, updating))


def under_peak_message(
    path: str | os.PathLike[str],
    safety_factor: float,
    offenders: Sequence[UnderPeak],
    safe: Mapping[str, float | None],
    updating: bool = False,
) -> str:
    """Why expectations were not written: one line per offender (the first
    :data:`SHOWN_OFFENDERS`, then a count), and one paragraph of why and what to do.

    >>> print(under_peak_message("e.toml", 1.1, [UnderPeak("EP1", "warm-fit", 2)],
    ...                          {"warm-fit": 1.25}))  # doctest: +NORMALIZE_WHITESPACE
    e.toml: not written: at safety factor 1.1, waves are priced under their peak in
    1 run/policy pair:
      EP1 warm-fit: 2 waves under their peak
    An expectation that allows waves under their peak makes the gate pass a policy
    that would have run out of memory on those waves. Raise the safety factor with
    --safety (the smallest that puts no wave of these traces under its peak: 1.25 for
    warm-fit), choose another policy (-p), or pass --allow-under to record the
    figures anyway.
    """
    lines = [
        f"{printable(str(path))}: not written: at safety factor {safety_factor!r}, waves "
        f"are priced under their peak in {counted(len(offenders), 'run/policy pair')}:"
    ]
    lines += [
        f"  {printable(o.run)} {printable(o.policy)}: {waves_under(o.waves)}"
        for o in offenders[:SHOWN_OFFENDERS]
    ]
    if len(offenders) > SHOWN_OFFENDERS:
        lines.append(f"  and {len(offenders) - SHOWN_OFFENDERS} more")
    offending = {o.policy for o in offenders}
    order = [p for p in safe if p in offending]  # the replay's order of policies
    order += [p for p in dict.fromkeys(o.policy for o in offenders) if p not in safe]
    factors = []
    for policy in order:
        factor = safe.get(policy)
        name = printable(policy)
        factors.append(
            f"none for {name}, the trainer's own prices, which no factor scales"
            if policy == RECORDED
            else f"no factor covers {name}"
            if factor is None
            else f"{factor!r} for {name}"
        )
    smallest = (
        f"the smallest that puts no wave of these traces under its peak: {', '.join(factors)}"
    )
    if updating:  # --update keeps the file's factor: raising it means a new file
        advice = (
            "--update keeps the file's safety factor. Pass --allow-under to record the "
            "figures anyway, choose another policy (-p), or rewrite the whole file at a "
            f"larger factor with --write-expect FILE --safety F --force ({smallest})."
        )
    else:
        advice = (
            f"Raise the safety factor with --safety ({smallest}), choose another policy "
            "(-p), or pass --allow-under to record the figures anyway."
        )
    lines.append(
        "An expectation that allows waves under their peak makes the gate pass a policy "
        f"that would have run out of memory on those waves. {advice}"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- render

COLUMNS = (
    "run",
    "policy",
    "expectation",
    "figure",
    "allowed",
    "actual",
    "holds",
    "verdict",
    "measured",
)


def _records(report: CheckReport) -> list[dict[str, Any]]:
    return [
        {
            "run": r.run,
            "policy": r.policy,
            "expectation": r.limit.key,
            "figure": r.limit.figure,
            "allowed": r.allowed,
            "actual": r.actual,
            "holds": r.holds,
            "verdict": r.verdict,
            "measured": r.measured,
        }
        for r in report.results
    ]


def to_json(report: CheckReport) -> str:
    """``{"schema": "warmfit.check/1", "expect", "safety_factor", "passed", "results"}``."""
    doc = {
        "schema": JSON_SCHEMA,
        "expect": report.expect_path,
        "safety_factor": report.safety_factor,
        "passed": report.passed,
        "results": _records(report),
    }
    return json.dumps(doc, indent=2) + "\n"


def to_csv(report: CheckReport) -> str:
    """One header line and one line per limit; fractions in full precision."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for record in _records(report):
        writer.writerow([_csv_cell(v) for v in record.values()])
    return buffer.getvalue()


def _csv_cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def to_table(report: CheckReport) -> str:
    """A table for a terminal, one line per limit; labels never break across lines."""
    table = plain_table("")
    table.caption = None  # the verdict line follows the table
    table.add_column("run", no_wrap=True)
    table.add_column("policy", no_wrap=True)
    table.add_column("figure", no_wrap=True)
    table.add_column("allowed", justify="right", no_wrap=True)
    table.add_column("actual", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    previous = None
    for r in report.results:
        key = (r.run, r.policy)
        actual, allowed = r.shown()
        table.add_row(
            "" if previous is not None and previous[0] == r.run else cell(r.run),
            "" if key == previous else cell(r.policy),
            r.limit.label,
            ("≤ " if r.limit.upper else "≥ ") + allowed,
            actual,
            r.verdict if r.holds else r.verdict.upper(),
        )
        previous = key
    text = table_text(table)
    held = len(report.results) - len(report.failures)
    verdict = (
        f"{held} of {len(report.results)} expectations hold "
        f"({report.expect_path}, safety factor {report.safety_factor:g})"
    )
    return text + printable(verdict) + "\n"


def render(report: CheckReport, fmt: str) -> str:
    """Render a check report in one of :data:`FORMATS`."""
    if fmt == "json":
        return to_json(report)
    if fmt == "csv":
        return to_csv(report)
    if fmt == "table":
        return to_table(report)
    raise UsageError(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}.")
