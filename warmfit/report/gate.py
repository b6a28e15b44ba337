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

A file written ``--by signature`` (SPEC §9) says so with ``by = "signature"``
and keys its tables ``[runs.RUN.SIGNATURE.POLICY]``, one per run, signature
and policy; a file without ``by`` was written ``--by run``. A check compares a
file only with figures of its own grouping.

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

import math
import os
import re
import shlex
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from warmfit.errors import UsageError
from warmfit.format.files import not_regular, write_atomically, write_bytes_atomically
from warmfit.replay import (
    DEFAULT_SAFETY_FACTOR,
    RECORDED,
    Replayed,
    check_safety_factor,
    group_keys,
)
from warmfit.report.formats import Report
from warmfit.report.formats import render as render_report
from warmfit.report.table import cell, percent, plain_table, table_text
from warmfit.run import signals
from warmfit.show.names import counted, printable, toml_string, waves_under

if TYPE_CHECKING:
    from rich.text import Text

FORMATS = ("table", "csv", "json")  # (formats.FORMATS but markdown)
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
_TOP_KEYS = ("version", "safety_factor", "by", "runs")
#: The groupings a file may be written with (SPEC §9), as ``--by`` names them.
BY_VALUES = ("run", "signature")


def tables_noun(by: str) -> str:
    """What one policy's figures for one group are called in a line that counts them:
    a run/policy pair, or ``--by signature`` a run/signature/policy table."""
    return "run/policy pair" if by == "run" else "run/signature/policy table"


#: One result's key: its group (the run, or the run and signature), then its policy.
Key = tuple[str, ...]


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
    """A parsed expectations file: limits per (run, policy) and key.

    With ``by == "signature"`` the keys are (run, signature, policy): the
    policy is always last, the group (:attr:`groups`) before it.
    """

    path: str
    safety_factor: float
    limits: Mapping[Key, Mapping[str, float | int]]
    #: Per (run, policy), the figures measured when the file was written
    #: (summary column -> value); empty where the file records none.
    measured: Mapping[Key, Mapping[str, float | int]] = field(default_factory=dict)
    #: The grouping the file was written with (:data:`BY_VALUES`).
    by: str = "run"
    #: Whether the file allows waves under their peak (a ``max_under_peak`` above 0 in
    #: any of its tables, as ``--write-expect --allow-under`` writes it): ``--update``
    #: then allows them in the tables it adds, and a rewrite repeats ``--allow-under``.
    #: Kept by :meth:`restricted_to`, whichever policies held the allowance.
    allows_under: bool = False

    @property
    def runs(self) -> list[str]:
        """Runs named in the file, in file order."""
        return list(dict.fromkeys(key[0] for key in self.limits))

    @property
    def groups(self) -> list[Key]:
        """The groups named in the file (runs, or runs and signatures), in file order."""
        return list(dict.fromkeys(key[:-1] for key in self.limits))

    @property
    def policies(self) -> list[str]:
        """Policies named in the file, in order of first appearance."""
        return list(dict.fromkeys(key[-1] for key in self.limits))

    def rewrite_options(self) -> list[str]:
        """The options of ``warmfit check --write-expect`` that write a file like this
        one again: its policies (``-p``), ``--allow-under`` where a limit allows waves
        under their peak, ``--by`` and ``--safety`` where not the defaults.

        >>> parse_expectations('safety_factor = 1.2\\nby = "signature"\\n'
        ...     '[runs.EP1.eval.envelope]\\nmax_under_peak = 1\\n'
        ...     '[runs.EP1.eval.recorded]\\nmax_under_peak = 0\\n').rewrite_options()
        ['-p', 'envelope', '-p', 'recorded', '--allow-under', '--by', 'signature', '--safety', '1.2']
        """
        options: list[str] = []
        for policy in self.policies:
            options += ["-p", policy]
        if self.allows_under:
            options.append("--allow-under")
        if self.by != "run":
            options += ["--by", self.by]
        if self.safety_factor != DEFAULT_SAFETY_FACTOR:
            options += ["--safety", repr(self.safety_factor)]
        return options

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
        kept = {key: v for key, v in self.limits.items() if key[-1] in policies}
        return Expectations(
            self.path, self.safety_factor, kept, self.measured, self.by, self.allows_under
        )


def check_grouping(expectations: Expectations, by: str) -> None:
    """Refuse to compare a file written with one grouping against figures of the
    other (SPEC §9), naming both."""
    if expectations.by == by:
        return
    raise ExpectationsError(
        expectations.path,
        f"was written --by {expectations.by} (one table per "
        f"{_GROUP_WORDS[expectations.by]} and policy), and these figures are grouped "
        f"--by {by}: they cannot be compared.",
        f"Check with --by {expectations.by}, or write a file --by {by} with "
        f"'warmfit check PATH... --by {by} --write-expect FILE'.",
    )


_GROUP_WORDS = {"run": "run", "signature": "run, signature"}


def _where(group: str | Sequence[str], policy: str | None = None) -> str:
    names = [group] if isinstance(group, str) else list(group)
    if policy is not None:
        names.append(policy)
    return "[runs." + ".".join(_toml_key(name) for name in names) + "]"


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
    by = doc.get("by", "run")
    if by not in BY_VALUES:
        raise ExpectationsError(
            path,
            f"by must be one of {', '.join(map(repr, BY_VALUES))} (the grouping it was "
            f"written with, as 'warmfit check --by' names it); got {by!r}.",
            _FIX,
        )
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
    limits: dict[Key, dict[str, float | int]] = {}
    measured: dict[Key, dict[str, float | int]] = {}
    for group, policies in _groups(path, runs, by):
        for policy, table in policies.items():
            if not isinstance(table, dict):
                raise ExpectationsError(
                    path,
                    f"{_where(group)} {policy} = {table!r} is not a table of limits; write it "
                    f"as {_where(group, policy)} followed by its limits.",
                    _FIX,
                )
            figures = table.get(MEASURED_KEY, {})
            limits[(*group, policy)] = _parse_limits(
                path, group, policy, {k: v for k, v in table.items() if k != MEASURED_KEY}
            )
            measured[(*group, policy)] = _parse_measured(path, group, policy, figures)
    allows_under = any(table.get("max_under_peak", 0) > 0 for table in limits.values())
    return Expectations(str(path), safety, limits, measured, by, allows_under)


def _groups(
    path: str | os.PathLike[str], runs: Mapping[str, Any], by: str
) -> list[tuple[Key, Mapping[str, Any]]]:
    """Each group of the file (a run, or a run and signature) with its policy tables."""
    groups: list[tuple[Key, Mapping[str, Any]]] = []
    for run, inner in runs.items():
        example = _where(run if by == "run" else (run, "SIGNATURE"), "warm-fit")
        if not isinstance(inner, dict) or not inner:
            what = "one table per policy" if by == "run" else "one table per signature"
            raise ExpectationsError(path, f"{_where(run)} must hold {what}, like {example}.", _FIX)
        if by == "run":
            groups.append(((run,), inner))
            continue
        for signature, policies in inner.items():
            if (
                not isinstance(policies, dict)
                or not policies
                or not all(isinstance(table, dict) for table in policies.values())
            ):
                raise ExpectationsError(
                    path,
                    f"{_where((run, signature))} must hold one table per policy: a file "
                    f'written --by signature (by = "signature") keys its tables like {example}.',
                    _FIX,
                )
            groups.append(((run, signature), policies))
    return groups


def _parse_limits(
    path: str | os.PathLike[str], group: Key, policy: str, table: Mapping[str, Any]
) -> dict[str, float | int]:
    parsed: dict[str, float | int] = {}
    where = _where(group, policy)
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
    path: str | os.PathLike[str], group: Key, policy: str, figures: object
) -> dict[str, float | int]:
    where = f"{_where(group, policy)} {MEASURED_KEY}"
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
    #: The signature, for a file written ``--by signature``; None ``--by run``.
    signature: str | None = None

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
        who = " ".join(
            printable(name) for name in (self.run, self.signature, self.policy) if name is not None
        )
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
    #: The grouping of the file and figures (:data:`BY_VALUES`).
    by: str = "run"
    #: The options that write the file again (:meth:`Expectations.rewrite_options`).
    rewrite: tuple[str, ...] = ()

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

    def regression_message(self, paths: Sequence[str] = ()) -> str:
        """The paragraph ``warmfit check`` prints on stderr when limits fail; its
        rewrite command names ``paths`` (the traces checked; ``PATH...`` without) and
        every option the file was written with (:attr:`rewrite`)."""
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
                "  " + rewrite_command(self.expect_path, paths, self.rewrite),
                "and commit them with the change.",
            ]
        return "\n".join(lines)


def rewrite_command(path: str, paths: Sequence[str], options: Sequence[str]) -> str:
    """The ``warmfit check`` line that writes the expectations file ``path`` again,
    quoted for a POSIX shell.

    >>> rewrite_command("e.toml", ["my traces"], ["-p", "warm-fit", "--allow-under"])
    "warmfit check 'my traces' --write-expect e.toml --force -p warm-fit --allow-under"
    """
    words = [shlex.quote(printable(p)) for p in paths] or ["PATH..."]
    words += ["--write-expect", shlex.quote(printable(path)), "--force"]
    words += [shlex.quote(printable(option)) for option in options]
    return " ".join(["warmfit", "check", *words])


def evaluate(result: Replayed, expectations: Expectations) -> CheckReport:
    """Check a replay's summary against expectations.

    Every run and policy named in the expectations must be in the replay,
    and every run of the replay must have expectations (so a stored trace
    cannot go unchecked); otherwise :class:`ExpectationsError`. Figures are
    compared exactly: a figure equal to its limit holds.
    """
    path = expectations.path
    check_grouping(expectations, result.by)
    summary = _summary_by_key(result)
    check_runs_held(result, expectations)
    missing = new_groups(result, expectations)
    if missing:
        raise ExpectationsError(
            path,
            f"has no expectations for {_groups_named(missing, result.by)} of the trace.",
            "Add them with 'warmfit check PATH... --expect FILE --update' (their current "
            "figures become their limits; the other runs' tables stay as they are), or leave "
            "those traces out of the paths.",
        )
    results = []
    for key, limits in expectations.limits.items():
        run, policy = key[0], key[-1]
        signature = key[1] if len(key) == 3 else None
        row = summary.get(key)
        if row is None:
            raise ExpectationsError(
                path,
                f"expects policy {printable(policy)!r} for {_group_named(key[:-1])}, but it "
                f"was not replayed (replayed: {', '.join(map(printable, result.policies))}).",
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
            measured = expectations.measured.get(key, {}).get(limit.figure)
            results.append(
                CheckResult(run, policy, limit, allowed, actual, holds, measured, signature)
            )
    return CheckReport(
        path,
        expectations.safety_factor,
        tuple(results),
        expectations.by,
        tuple(expectations.rewrite_options()),
    )


def _summary_by_key(result: Replayed) -> dict[Key, dict[str, Any]]:
    """Each summary row of ``result`` by its key: (run, policy) or (run, signature, policy)."""
    keys = group_keys(result.by)
    return {
        (*(row[k] for k in keys), row["policy"]): row
        for row in result.summary.iter_rows(named=True)
    }


def _result_groups(result: Replayed) -> list[Key]:
    """The groups of ``result``'s summary (runs, or runs and signatures), in its order."""
    keys = group_keys(result.by)
    return list(
        dict.fromkeys(tuple(row[k] for k in keys) for row in result.summary.iter_rows(named=True))
    )


def _group_named(group: Key) -> str:
    """``run 'EP1'`` or ``run 'EP1' signature 'eval'``."""
    text = f"run {printable(group[0])!r}"
    if len(group) > 1:
        text += f" signature {printable(group[1])!r}"
    return text


def _groups_named(groups: Sequence[Key], by: str) -> str:
    if by == "run":
        runs = [group[0] for group in groups]
        return (
            f"{'run' if len(runs) == 1 else 'runs'} "
            f"{', '.join(repr(printable(run)) for run in runs)}"
        )
    return ", ".join(_group_named(group) for group in groups)


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


def expectations_from(result: Replayed) -> dict[Key, dict[str, float | int]]:
    """The current figures of a replay, as limits that all hold on it, keyed (run,
    policy), or (run, signature, policy) for a replay ``--by signature``.

    ``recorded`` (SPEC §8) gets no table where the trainer recorded no price
    (no priced wave): there is nothing of its own to bound.
    """
    limits: dict[Key, dict[str, float | int]] = {}
    for key, row in _summary_by_key(result).items():
        if key[-1] == RECORDED and not row["priced_waves"]:
            continue
        table: dict[str, float | int] = {}
        for limit in LIMITS:
            value = row[limit.figure]
            if value is None:
                continue
            table[limit.key] = _round_limit(value, limit.upper) if limit.fraction else int(value)
        limits[key] = table
    return limits


def expectations_toml(result: Replayed, sources: Sequence[str] = ()) -> str:
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
        f"by = {toml_string(result.by)}",
    ]
    return "\n".join(lines + run_tables(result)) + "\n"


def run_tables(result: Replayed, groups: Sequence[Key] | None = None) -> list[str]:
    """The lines of the ``[runs.RUN.POLICY]`` tables (``[runs.RUN.SIGNATURE.POLICY]``
    ``--by signature``) of ``result``'s current figures (of ``groups`` only, when
    given), each table after a blank line."""
    lines: list[str] = []
    summary = _summary_by_key(result)
    for key, table in expectations_from(result).items():
        if groups is not None and key[:-1] not in groups:
            continue
        row = summary[key]
        lines += ["", _where(key[:-1], key[-1])]
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


def check_runs_held(result: Replayed, expectations: Expectations) -> None:
    """Every run (and signature, ``--by signature``) the expectations name is in
    ``result``, or an ExpectationsError."""
    check_grouping(expectations, result.by)
    trace_runs = list(dict.fromkeys(result.summary.get_column("run")))
    held = set(_result_groups(result))
    for group in expectations.groups:
        if group[0] not in trace_runs:
            raise ExpectationsError(
                expectations.path,
                f"expects run {printable(group[0])!r}, which the trace does not hold (its "
                f"runs: {', '.join(map(printable, trace_runs))}).",
                "Pass the trace that holds it, or remove its tables from the file.",
            )
        if group not in held:
            signatures = [g[1] for g in held if g[0] == group[0]]
            raise ExpectationsError(
                expectations.path,
                f"expects {_group_named(group)}, which the trace does not hold (its "
                f"signatures in that run: {', '.join(map(printable, sorted(signatures)))}).",
                "Pass the trace that holds it, or remove its tables from the file.",
            )


def new_groups(result: Replayed, expectations: Expectations) -> list[Key]:
    """The groups of ``result`` (runs, or runs and signatures) that ``expectations``
    do not list, in summary order."""
    listed = set(expectations.groups)
    return [group for group in _result_groups(result) if group not in listed]


def new_runs(result: Replayed, expectations: Expectations) -> list[str]:
    """The runs of ``result`` that ``expectations`` do not list, in summary order."""
    listed = set(expectations.runs)
    return [run for run in dict.fromkeys(result.summary.get_column("run")) if run not in listed]


def update_expectations(
    result: Replayed,
    expectations: Expectations,
    *,
    allow_under: bool = False,
) -> list[Key]:
    """Add to the expectations file the tables of the runs of ``result`` it does not
    list (their current figures, as :func:`write_expectations` writes them; runs and
    signatures ``--by signature``) and return those groups (``(run,)`` or ``(run,
    signature)``); every byte already in the file stays (hand-set limits,
    comments). ``result`` must be replayed at the file's safety factor. Figures with
    waves under their peak are refused as :func:`write_expectations` refuses them,
    unless ``allow_under`` or the file already allows them
    (:attr:`Expectations.allows_under`: written with ``--allow-under``, which, like
    its safety factor and grouping, the file keeps). The file is replaced
    atomically; nothing is written when no run is new."""
    check_runs_held(result, expectations)  # before anything is written: the check would fail
    added = new_groups(result, expectations)
    if not added:
        return []
    if result.safety_factor != expectations.safety_factor:
        raise ValueError("replay at the expectations' safety factor to update them")
    if not (allow_under or expectations.allows_under):
        offenders = [o for o in under_peak(result) if o.group in added]
        if offenders:
            raise UnderPeakError(
                expectations.path, result.safety_factor, offenders, result.safe_factors,
                updating=True, lineup=result.policies,
            )  # fmt: skip
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
        f"# Added by 'warmfit check --update': "
        f"{counted(len(added), 'run' if result.by == 'run' else 'run/signature')} "
        "the file did not list, at their current figures.",
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
    result: Replayed,
    path: str | os.PathLike[str],
    sources: Sequence[str] = (),
    *,
    allow_under: bool = False,
) -> Path:
    """Write the current figures of ``result`` as an expectations file.

    The file is written atomically (:func:`warmfit.format.files.write_atomically`).
    The caller decides whether an existing file may be replaced.

    Figures that put a wave under its peak (``under_peak`` above 0) would be
    written as ``max_under_peak`` above 0, a limit under which the gate passes
    a policy that ran out of memory: unless ``allow_under``, nothing is
    written and :class:`UnderPeakError` names them (:func:`under_peak`) with
    each policy's smallest safe factor, folded by the replay itself
    (``result.safe_factors``: no second replay).
    """
    if not allow_under:
        offenders = under_peak(result)
        if offenders:
            raise UnderPeakError(
                path, result.safety_factor, offenders, result.safe_factors,
                lineup=result.policies,
            )  # fmt: skip
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
    #: The signature, for figures ``--by signature``.
    signature: str | None = None

    @property
    def group(self) -> Key:
        """``(run,)``, or ``(run, signature)`` ``--by signature``."""
        return (self.run,) if self.signature is None else (self.run, self.signature)


def under_peak(result: Replayed) -> list[UnderPeak]:
    """Every (run, policy) of ``result`` with a wave under its peak, in summary order
    (every (run, signature, policy) ``--by signature``)."""
    return [
        UnderPeak(row["run"], row["policy"], int(row["under_peak"]), row.get("signature"))
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
        lineup: Sequence[str] = (),
    ) -> None:
        self.path = str(path)
        self.offenders = tuple(offenders)
        self.safe = dict(safe)
        super().__init__(under_peak_message(path, safety_factor, offenders, safe, updating, lineup))


def under_peak_message(
    path: str | os.PathLike[str],
    safety_factor: float,
    offenders: Sequence[UnderPeak],
    safe: Mapping[str, float | None],
    updating: bool = False,
    lineup: Sequence[str] = (),
) -> str:
    """Why expectations were not written: one line per offender (the first
    :data:`SHOWN_OFFENDERS`, then a count), and one paragraph of why and what to do.
    Where ``recorded`` is among them, it says how to leave it out: ``-p`` for every
    other policy of ``lineup`` (the replay's policies).

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
    by = "run" if all(o.signature is None for o in offenders) else "signature"
    lines = [
        f"{printable(str(path))}: not written: at safety factor {safety_factor!r}, waves "
        f"are priced under their peak in {counted(len(offenders), tables_noun(by))}:"
    ]
    lines += [
        f"  {' '.join(map(printable, (*o.group, o.policy)))}: {waves_under(o.waves)}"
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
    others = [p for p in lineup if p != RECORDED]
    if RECORDED in offending and others:
        options = " ".join(f"-p {shlex.quote(printable(p))}" for p in others)
        advice += (
            f" To leave {RECORDED}, the trainer's own prices, out of the file, name the "
            f"other policies alone: {options}."
        )
    lines.append(
        "An expectation that allows waves under their peak makes the gate pass a policy "
        f"that would have run out of memory on those waves. {advice}"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- render

COLUMNS = (
    "run",
    "signature",
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
    """One record per limit; ``signature`` only ``--by signature`` (SPEC §7's JSON
    results gain it the same way)."""
    return [
        {
            "run": r.run,
            **({} if report.by == "run" else {"signature": r.signature}),
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


def _document(report: CheckReport) -> dict[str, Any]:
    """``{"schema": "warmfit.check/1", "expect", "safety_factor", "passed", "results"}``."""
    return {
        "schema": JSON_SCHEMA,
        "expect": report.expect_path,
        "by": report.by,
        "safety_factor": report.safety_factor,
        "passed": report.passed,
        "results": _records(report),
    }


def _columns(report: CheckReport) -> list[str]:
    """:data:`COLUMNS`, ``signature`` only ``--by signature``."""
    return [c for c in COLUMNS if c != "signature" or report.by != "run"]


def to_table(report: CheckReport) -> str:
    """A table for a terminal, one line per limit; labels never break across lines."""
    table = plain_table("")
    table.caption = None  # the verdict line follows the table
    table.add_column("run", no_wrap=True)
    if report.by != "run":
        table.add_column("signature", no_wrap=True)
    table.add_column("policy", no_wrap=True)
    table.add_column("figure", no_wrap=True)
    table.add_column("allowed", justify="right", no_wrap=True)
    table.add_column("actual", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    previous = None
    for r in report.results:
        key = (r.run, r.signature, r.policy)
        actual, allowed = r.shown()
        group: list[str | Text] = [
            "" if previous is not None and previous[0] == r.run else cell(r.run)
        ]
        if report.by != "run":
            same = previous is not None and previous[:2] == key[:2]
            group.append("" if same else cell(r.signature or ""))
        table.add_row(
            *group,
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


def check_report(report: CheckReport) -> Report:
    """A check report as a :class:`~warmfit.report.formats.Report` (no markdown form)."""
    return Report(
        table=lambda: to_table(report),
        header=_columns(report),
        rows=lambda: (list(r.values()) for r in _records(report)),
        document=lambda: _document(report),
    )


def render(report: CheckReport, fmt: str) -> str:
    """Render a check report in one of :data:`FORMATS`."""
    return render_report(check_report(report), fmt)
