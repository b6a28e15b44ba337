"""``warmfit replay``: the over-estimate / peak-violation table of a trace."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

if TYPE_CHECKING:
    from warmfit.replay.stream import StreamedReplay

from warmfit.commands.options import (
    SAFETY,
    BudgetOpt,
    By,
    ByOpt,
    ClusterOpt,
    Engine,
    EngineOpt,
    Format,
    FormatOpt,
    JobsOpt,
    PathsArg,
    PolicyOpt,
    SafetyOpt,
    budget_bytes,
    check_new_file,
    refuse_force_without,
    streaming,
    warn_without_checksums,
    warn_without_whole,
    writing,
)
from warmfit.run import signals


def replay_command(
    paths: PathsArg,
    policy: PolicyOpt = None,
    safety: SafetyOpt = SAFETY,
    format: FormatOpt = Format.table,
    per_wave: Annotated[
        Path | None,
        typer.Option(
            "--per-wave",
            help="Also write one row per wave and policy to this file: .parquet or .csv.",
            metavar="FILE",
        ),
    ] = None,
    engine: EngineOpt = Engine.auto,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --per-wave file.")] = False,
    by: ByOpt = By.run,
    budget: BudgetOpt = None,
    jobs: JobsOpt = None,
    permute: Annotated[
        int | None,
        typer.Option(
            "--permute",
            help="Also replay each (run, rank) N times with its waves in random orders "
            "(each signature's first wave stays first) and report, per result, the mean and "
            "worst waves under their peak and the median over-estimate across the orders.",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of the --permute orders: same seed, same bytes."),
    ] = 0,
    cluster: ClusterOpt = None,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Say on stderr how many processes replay, and why."),
    ] = False,
) -> None:
    """Replay traces through pricing policies and print the over-estimate table.

    Example: warmfit replay traces/pr991 -p max-merge -p warm-fit --format markdown

    With --budget 128.8GB it also counts the waves each policy would admit on a
    device with that much memory free, with --by signature it gives one
    result per signature, and with --permute 20 it tries 20 random orders of
    each run's waves. When a policy puts a wave under its peak, a warning
    names it, how many of those waves were beyond the sizes seen, and the
    smallest safety factor that puts none under. A trace of any size replays
    in bounded memory, a batch of (run, rank) streams at a time, on every
    core (--jobs) or a cluster.
    """
    given = jobs is not None
    with streaming(paths, jobs, cluster) as jobs:
        if verbose:
            _say_jobs(paths, jobs, given, cluster)
        _replay(
            paths, policy=policy, safety=safety, format=format, per_wave=per_wave,
            engine=engine, force=force, by=by, budget=budget, jobs=jobs, cluster=cluster,
            permute=permute, seed=seed,
        )  # fmt: skip


def _say_jobs(paths: list[Path], jobs: int | None, given: bool, cluster: str | None) -> None:
    """``--verbose``: where the batches are replayed, and why (stderr)."""
    from warmfit.errors import TraceError
    from warmfit.format.files import find_trace_files
    from warmfit.run.workers import jobs_line
    from warmfit.show.names import printable

    if cluster is not None:
        typer.echo(f"jobs: on the Dask cluster at {printable(cluster)}", err=True)
        return
    try:
        files = find_trace_files(paths)
    except (TraceError, OSError):
        return  # the replay names what is wrong with the paths
    typer.echo(jobs_line(files, jobs, given), err=True)


def _replay(
    paths: list[Path],
    *,
    policy: list[str] | None,
    safety: float,
    format: Format,
    per_wave: Path | None,
    engine: Engine,
    force: bool,
    by: By,
    budget: str | None,
    jobs: int | None,
    cluster: str | None,
    permute: int | None = None,
    seed: int = 0,
) -> None:
    from warmfit.replay.perwave import PerWaveWriter
    from warmfit.replay.stream import replay_stream
    from warmfit.report.table import render
    from warmfit.show.names import counted, printable
    from warmfit.show.progress import progress_bar

    if force:
        refuse_force_without(per_wave, "--per-wave")
    limit = budget_bytes(budget, paths)
    if permute is not None:
        from warmfit.replay.permute import PermuteFold, check_permutations, check_seed

        check_permutations(permute)
        check_seed(seed)
    elif seed:
        from warmfit.errors import UsageError

        raise UsageError("--seed chooses the orders of --permute; give --permute N with it.")

    folds = [] if permute is None else [PermuteFold(permute, seed, by.value)]

    def run(per_wave: PerWaveWriter | None = None) -> StreamedReplay:
        with progress_bar("replaying", unit="batches") as progress:
            return replay_stream(
                paths, policy, safety, engine.value, by.value, limit, jobs=jobs,
                cluster=cluster, per_wave=per_wave, progress=progress, folds=folds,
            )  # fmt: skip

    if per_wave is None:
        result = run()
    else:
        from warmfit.format.files import write_atomically
        from warmfit.replay.perwave import per_wave_format

        fmt = per_wave_format(per_wave)
        check_new_file(per_wave, force, paths)
        results = []

        def write(sink: BinaryIO) -> None:
            # A failed replay abandons the writer (its thread ends, the sink is let go
            # before it closes), and write_atomically removes the unfinished file.
            with PerWaveWriter(sink, fmt, admitted=limit is not None) as writer:
                results.append(run(writer))

        # a stop while it replays ends the command; once the file is whole, it waits for
        # the line that says what was written
        with signals.deferred(now=False) as whole:
            with writing(per_wave):
                write_atomically(per_wave, write, whole)
            result = results[0]
            typer.echo(
                f"wrote {printable(str(per_wave))} ({counted(result.per_wave_rows, 'row')})",
                err=True,
            )
    warn_without_whole(result.without_whole)
    warn_without_checksums(result.files, result.without_checksums)
    if permute is not None:  # the orders' figures, folded from the same pass
        from dataclasses import replace

        keys = ["run", "signature"] if by.value == "signature" else ["run"]
        summary = result.summary.join(
            result.folded[0], on=[*keys, "policy"], how="left", maintain_order="left"
        )
        result = replace(result, summary=summary)
    typer.echo(render(result, format.value), nl=False)
    _warn_under_peak(result)


def _warn_under_peak(result: StreamedReplay) -> None:
    """One warning line per policy that put a wave under its peak, with the smallest
    safety factor that puts none under on these traces, folded by the replay itself
    (both engines keep the bytes before the factor)."""
    from warmfit.report.table import under_peak_warnings

    for line in under_peak_warnings(result.summary, result.safe_factors):
        typer.echo(line, err=True)
