"""``warmfit plot``: draw how each policy priced each wave (PNG or SVG)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from warmfit.commands.options import (
    SAFETY,
    ClusterOpt,
    Engine,
    EngineOpt,
    JobsOpt,
    PathsArg,
    PolicyOpt,
    SafetyOpt,
    check_new_file,
    streaming,
    writing,
)
from warmfit.run import signals
from warmfit.show.names import counted, printable

if TYPE_CHECKING:
    from warmfit.report.plot import PlotData, RunSheet


def _say_which_profiles(data: PlotData | RunSheet, signature: str | None) -> None:
    """Name the profile of each middle panel that could have shown another (on stderr)."""
    lacking = [run for run in data.runs if data.main_profiles[run][1] != signature]
    if signature is not None:
        if lacking:
            names = ", ".join(printable(run) for run in lacking)
            typer.echo(
                f"signature '{printable(signature)}' is not in {counted(len(lacking), 'run')} "
                f"({names}): the middle panel shows each one's busiest profile",
                err=True,
            )
        return
    for run in data.runs:
        rank, shown = data.main_profiles[run]
        if data.profile_counts[run] > 1:
            typer.echo(
                f"{printable(run)}: the middle panel shows rank {rank}, signature "
                f"'{printable(shown)}' (1 of {counted(data.profile_counts[run], 'profile')}; "
                "--signature NAME picks another)",
                err=True,
            )


def _say_which_runs_lack(rank: int, runs: list[str], drawn: tuple[str, ...]) -> None:
    """Name the runs of the trace that have no reading of ``rank`` (on stderr): not drawn."""
    lacking = [run for run in runs if run not in drawn]
    if lacking:
        names = ", ".join(printable(run) for run in lacking)
        typer.echo(
            f"rank {rank} is not in {counted(len(lacking), 'run')} ({names}): not drawn", err=True
        )


def plot_command(
    paths: PathsArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Image to write: .png or .svg.",
            show_default=False,
            metavar="FILE",
        ),
    ],
    policy: PolicyOpt = None,
    safety: SafetyOpt = SAFETY,
    engine: EngineOpt = Engine.auto,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the output file.")] = False,
    caption: Annotated[
        str | None,
        typer.Option(
            "--caption",
            help="Footnote under the figure (default: where the traces come from, from their "
            "files' warmfit.provenance metadata; '' for none).",
            show_default=False,
            metavar="TEXT",
        ),
    ] = None,
    signature: Annotated[
        str | None,
        typer.Option(
            "--signature",
            help="Signature whose profile the middle panel shows, in each run that has it "
            "(default: the run's profile with the most waves).",
            show_default=False,
            metavar="NAME",
        ),
    ] = None,
    rank: Annotated[
        int | None,
        typer.Option(
            "--rank",
            help="Draw only this rank's waves (default: every rank's).",
            show_default=False,
            metavar="N",
        ),
    ] = None,
    jobs: JobsOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Draw peaks, rates per token and over-estimates of every run on one sheet.

    Example: warmfit plot traces/pr991 -o pr991.png

    One row per run: each wave's actual peak and every policy's estimate;
    bytes per packed token against packed tokens, the seed (a profile's first
    whole wave) apart from the warm waves, under each policy's price curve; the
    over-estimates. The middle panel shows one profile per run: with several,
    its title names the rank and signature shown, and --signature NAME picks
    another. --rank N draws rank N's waves alone.
    """
    from warmfit.replay.stream import replay_stream
    from warmfit.report.plot import (
        PlotFold,
        plot_format,
        provenance_caption,
        render_plot,
    )
    from warmfit.show.progress import progress_bar

    plot_format(output)
    check_new_file(output, force, paths)
    # each run's per-wave rows wait in this folder until its row of panels is drawn
    with tempfile.TemporaryDirectory(prefix="warmfit-plot-", ignore_cleanup_errors=True) as folder:
        with (
            streaming(paths, jobs, cluster) as jobs,
            progress_bar("replaying", unit="batches") as bar,
        ):
            # this machine's workers write their batches' frames to the folder themselves
            fold = PlotFold(folder, rank, local=cluster is None)
            streamed = replay_stream(
                paths, policy, safety, engine.value, folds=[fold], jobs=jobs, cluster=cluster,
                progress=bar,
            )  # fmt: skip
        if caption is None:  # the files the replay found (each one's metadata is read here)
            caption = provenance_caption(streamed.files)
        data, every_run = streamed.folded[0].sheet(streamed, caption, signature)
        # a stop while it draws ends the command; once the file is drawn, it waits for the
        # lines that say what was written
        with signals.deferred(now=False) as drawn:
            with writing(output):
                render_plot(data, output, drawn)
            if rank is not None:
                _say_which_runs_lack(rank, list(every_run), data.runs)
            _say_which_profiles(data, signature)
            typer.echo(f"wrote {output} ({counted(len(data.runs), 'run')})")
