"""``warmfit check``: fail (exit 1) when replay figures are worse than expected."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from warmfit.commands.options import (
    SAFETY,
    By,
    ClusterOpt,
    Engine,
    EngineOpt,
    JobsOpt,
    PathsArg,
    check_new_file,
    refuse_force_without,
    streaming,
    writing,
)
from warmfit.errors import PolicyError, RegressionFound, UsageError
from warmfit.run import signals
from warmfit.show.names import counted, printable, waves_under

if TYPE_CHECKING:
    from collections.abc import Sequence

    from warmfit.replay.stream import StreamedReplay
    from warmfit.report.gate import Expectations, UnderPeak

PolicyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        help="Policy to check (repeatable): a registered name or module:Class. Default: those "
        "the expectations name (with --write-expect: max-merge, warm-fit and envelope, and "
        "recorded where the trace carries prices; -p without recorded leaves it out).",
        show_default=False,
        metavar="POLICY",
    ),
]


class CheckFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


ExpectOpt = Annotated[
    Path | None,
    typer.Option(
        "--expect",
        "-e",
        help="Expectations file (TOML) to check the figures against.",
        show_default=False,
        metavar="FILE",
    ),
]
WriteExpectOpt = Annotated[
    Path | None,
    typer.Option(
        "--write-expect",
        help="Instead of checking, write the current figures as expectations to this file.",
        show_default=False,
        metavar="FILE",
    ),
]
CheckFormatOpt = Annotated[CheckFormat, typer.Option("--format", "-f", help="Output format.")]
WriteSafetyOpt = Annotated[
    float | None,
    typer.Option(
        "--safety",
        help=f"Safety factor for --write-expect (default {SAFETY}); a check uses the file's.",
        show_default=False,
        metavar="FACTOR",
    ),
]
WriteForceOpt = Annotated[
    bool, typer.Option("--force", help="Let --write-expect overwrite an existing file.")
]
AllowUnderOpt = Annotated[
    bool,
    typer.Option(
        "--allow-under",
        help="Let --write-expect or --update write figures with waves under their peak "
        "(max_under_peak above 0), with a warning; without it they are refused (exit 2), "
        "since such a file passes a policy that would have run out of memory. A file "
        "written with it keeps allowing them: --update need not repeat it.",
    ),
]
ByOpt = Annotated[
    By,
    typer.Option(
        "--by",
        help="Check one result per run, or per run and signature (a regression of one "
        "signature then shows). The expectations file records it; a check refuses a file "
        "written with the other.",
    ),
]
UpdateOpt = Annotated[
    bool,
    typer.Option(
        "--update",
        help="With --expect: add the runs of the traces that the file does not list, at "
        "their current figures (every table already there stays as it is), then check.",
    ),
]


def check_command(
    paths: PathsArg,
    expect: ExpectOpt = None,
    write_expect: WriteExpectOpt = None,
    policy: PolicyOpt = None,
    format: CheckFormatOpt = CheckFormat.table,
    engine: EngineOpt = Engine.auto,
    by: ByOpt = By.run,
    safety: WriteSafetyOpt = None,
    force: WriteForceOpt = False,
    allow_under: AllowUnderOpt = False,
    update: UpdateOpt = False,
    jobs: JobsOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Check replay figures against stored expectations; exit 1 when a limit fails.

    Example: warmfit check traces --expect traces/expectations.toml

    Policies default to those the expectations name (with --write-expect:
    max-merge, warm-fit and envelope). --by signature gates each signature
    alone. --update adds the traces' new runs to the file.
    --write-expect and --update refuse figures with waves under their peak
    unless given --allow-under (--update: or the file already allows some). See docs/how-to/ci-gate.md for the file's
    format.
    """
    if (expect is None) == (write_expect is None):
        raise UsageError(
            "give exactly one of --expect FILE (check against it) or --write-expect FILE "
            "(write the current figures). Example: warmfit check traces --expect "
            "traces/expectations.toml"
        )
    if update and expect is None:
        raise UsageError(
            "--update adds new runs to the expectations file given with --expect FILE; "
            "--write-expect writes a whole new file."
        )
    if force:
        refuse_force_without(write_expect, "--write-expect")
    if write_expect is not None:
        check_new_file(write_expect, force, paths)
        with streaming(paths, jobs, cluster) as jobs:
            _write_expect(
                paths, write_expect, policy=policy, safety=safety, engine=engine, by=by,
                allow_under=allow_under, jobs=jobs, cluster=cluster,
            )  # fmt: skip
        return
    assert expect is not None
    if allow_under and not update:
        raise UsageError(
            f"--allow-under applies to --write-expect and --update only; a check against "
            f"{expect} applies its max_under_peak limits as they are."
        )
    if safety is not None:
        raise UsageError(
            f"--safety applies to --write-expect only; {expect} fixes the safety factor "
            "its figures were taken at (its 'safety_factor' key)."
        )
    from warmfit.replay import RECORDED

    expectations = _expectations(expect, policy, by)
    policies = policy or expectations.policies
    with streaming(paths, jobs, cluster) as jobs:
        result = _replayed(
            paths, policies, expectations.safety_factor, engine, jobs, cluster,
            by=by.value, recorded=RECORDED in policies,
        )  # fmt: skip
    _check(
        result, expect, expectations, paths, policy=policy, format=format, update=update,
        allow_under=allow_under,
    )  # fmt: skip


def _replayed(
    paths: list[Path],
    policies: list[str] | None,
    safety: float,
    engine: Engine,
    jobs: int | None,
    cluster: str | None,
    *,
    by: str,
    recorded: bool,
) -> StreamedReplay:
    """The figures the gate needs, from the one streamed replay of the traces (``by``:
    the summary's grouping, ``run`` or ``signature``, as replay's --by; ``recorded``:
    whether the trainer's recorded prices are reported)."""
    from warmfit.replay.stream import replay_stream
    from warmfit.show.progress import progress_bar

    with progress_bar("replaying", unit="batches") as progress:
        return replay_stream(
            paths, policies, safety, engine.value, by, jobs=jobs, cluster=cluster,
            progress=progress, recorded=recorded,
        )  # fmt: skip


def _write_expect(
    paths: list[Path],
    write_expect: Path,
    *,
    policy: list[str] | None,
    safety: float | None,
    engine: Engine,
    by: By,
    allow_under: bool,
    jobs: int | None,
    cluster: str | None,
) -> None:
    """``--write-expect``: the current figures as a new expectations file."""
    from warmfit.replay import DEFAULT_SAFETY_FACTOR, RECORDED
    from warmfit.report import gate

    factor = DEFAULT_SAFETY_FACTOR if safety is None else safety
    recorded = not policy or RECORDED in policy  # -p without it: a file without it
    result = _replayed(paths, policy, factor, engine, jobs, cluster, by=by.value, recorded=recorded)
    with signals.deferred():  # a stop waits until the line says what was written
        with writing(write_expect):
            gate.write_expectations(
                result, write_expect, [str(p) for p in paths], allow_under=allow_under
            )
        _warn_under(write_expect, gate.under_peak(result), by)  # only with --allow-under
        count = sum(1 for _ in gate.expectations_from(result))
        typer.echo(
            f"wrote expectations for {counted(count, gate.tables_noun(by.value))} "
            f"({', '.join(result.policies)}) to {write_expect}"
        )


def _warn_under(path: Path, offenders: Sequence[UnderPeak], by: By, why: str = "") -> None:
    """One warning per policy that ``path`` now allows waves under their peak for
    (``offenders``: the ones just written), then ``why`` it took them."""
    under: dict[str, list[UnderPeak]] = {}
    for offender in offenders:
        under.setdefault(offender.policy, []).append(offender)
    for name, of_policy in under.items():
        waves = sum(o.waves for o in of_policy)
        typer.echo(
            f"warning: {printable(str(path))} now allows {waves_under(waves)} "
            f"for {printable(name)} (in "
            f"{counted(len(of_policy), 'run' if by is By.run else 'run/signature pair')}): "
            f"the gate will pass {printable(name)} "
            "although it would have run out of memory on "
            f"{'that wave' if waves == 1 else 'those waves'}.{why}",
            err=True,
        )


def _expectations(expect: Path, policy: list[str] | None, by: By) -> Expectations:
    """The expectations file, narrowed to the policies of ``-p`` (said on stderr), or
    checked to name registered policies only."""
    from warmfit.policies import policy_names
    from warmfit.replay import RECORDED
    from warmfit.replay.engines import lineup_names, resolve_lineup
    from warmfit.report import gate

    expectations = gate.read_expectations(expect)
    gate.check_grouping(expectations, by.value)
    if policy:
        names = lineup_names(*resolve_lineup(policy, RECORDED in policy))
        left_out = [name for name in expectations.policies if name not in names]
        expectations = expectations.restricted_to(names)
        if left_out:  # -p narrows the check: say so, a gate must not shrink silently
            typer.echo(
                f"note: -p checks {', '.join(map(printable, names))} only; the expectations "
                f"of {', '.join(map(printable, left_out))} in {printable(str(expect))} are not "
                "checked (name every policy to check with -p).",
                err=True,
            )
        return expectations
    # A data file names registered policies only: a 'module:Class' in it would
    # import (run) that module. Such a policy is given on the command line (-p).
    try:
        registered = policy_names()
    except PolicyError as exc:
        raise gate.ExpectationsError(expect, f"names a policy that cannot be used: {exc}") from None
    for name in expectations.policies:
        if ":" in name or name not in [*registered, RECORDED]:
            raise gate.ExpectationsError(
                expect,
                f"names unknown policy {printable(name)!r}: it is not registered (registered: "
                f"{', '.join(registered)}); an expectations file names registered "
                "policies only and never imports a module.",
                "Key its tables by a registered policy's name; give a policy of your "
                "own on the command line as -p MODULE:CLASS, with a -p for every other "
                "policy of the file to check (-p names the policies checked; the file "
                "keys its tables by the class's name).",
            )
    return expectations


def _check(
    result: StreamedReplay,
    expect: Path,
    expectations: Expectations,
    paths: list[Path],
    *,
    policy: list[str] | None,
    format: CheckFormat,
    update: bool,
    allow_under: bool,
) -> None:
    """``--expect`` (with ``--update``: the new runs added first): the report, exit 1
    when a limit fails."""
    from warmfit.report import gate

    if update:
        with signals.deferred():  # a stop waits until the lines say what was added
            with writing(expect):
                added = gate.update_expectations(result, expectations, allow_under=allow_under)
            _report_added(result, added, expect)
        why = ""
        if not allow_under:  # the file allows them: it was written with --allow-under
            why = (
                " --update took them without --allow-under, as the file already allows waves "
                "under their peak (a max_under_peak above 0: written with --allow-under); "
                "rewrite it without --allow-under to refuse them."
            )
        offenders = [o for o in gate.under_peak(result) if o.group in added]
        _warn_under(expect, offenders, By(result.by), why)
        if added:
            updated = gate.read_expectations(expect)
            expectations = updated.restricted_to(expectations.policies) if policy else updated
    report = gate.evaluate(result, expectations)
    typer.echo(gate.render(report, format.value), nl=False)
    if not report.passed:
        raise RegressionFound(report.regression_message([str(p) for p in paths]))


def _report_added(result: StreamedReplay, added: list[tuple[str, ...]], expect: Path) -> None:
    """One line per run (and signature) ``--update`` added, with its figures per
    policy (stderr)."""
    import polars as pl

    from warmfit.report.table import percent

    if not added:
        typer.echo(f"{printable(str(expect))}: no new run to add.", err=True)
        return
    for group in added:
        where = pl.col("run") == group[0]
        named = f"run {printable(group[0])!r}"
        if len(group) > 1:
            where &= pl.col("signature") == group[1]
            named += f" signature {printable(group[1])!r}"
        rows = result.summary.filter(where).iter_rows(named=True)
        figures = "; ".join(
            f"{printable(r['policy'])} median {percent(r['median_over_estimate'])}, "
            f"{waves_under(r['under_peak'] or 0)}"
            for r in rows
        )
        typer.echo(f"added {named} to {printable(str(expect))}: {figures}", err=True)
