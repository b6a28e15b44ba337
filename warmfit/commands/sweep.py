"""``warmfit sweep``: the smallest safe safety factor of every policy, and its cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warmfit.commands.options import (
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
    check_new_file,
    refuse_force_without,
    streaming,
    writing,
)
from warmfit.run import signals


def sweep_command(
    paths: PathsArg,
    policy: PolicyOpt = None,
    by: ByOpt = By.run,
    format: FormatOpt = Format.table,
    grid: Annotated[
        str,
        typer.Option("--grid", help="Safety factors of the points.", metavar="START:STOP:STEP"),
    ] = "1.0:1.6:0.01",
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also draw the Pareto picture (median over-estimate against waves under "
            "their peak as the factor varies) to this PNG or SVG.",
            metavar="FILE",
        ),
    ] = None,
    engine: EngineOpt = Engine.auto,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --plot file.")] = False,
    jobs: JobsOpt = None,
    cluster: ClusterOpt = None,
) -> None:
    """Find each policy's smallest safety factor with no wave under its peak.

    Example: warmfit sweep traces/art-h200 -p warm-fit -p warm-affine --plot sweep.png

    The safe factor is exact (not a grid value): at it no wave of the trace is
    priced under its peak, at the next smaller number at least one is. --format
    json has every grid point. The trace is replayed once, streamed (bounded
    memory, --jobs, --cluster).
    """
    from warmfit.report.sweep import parse_grid, sweep_traces
    from warmfit.report.table import render_sweep

    factors = parse_grid(grid)
    if force:
        refuse_force_without(plot, "--plot")
    if plot is not None:
        check_new_file(plot, force, paths)
    with streaming(paths, jobs, cluster) as jobs:
        result = sweep_traces(
            paths, policy, by.value, factors, engine.value, jobs=jobs, cluster=cluster
        )
    if plot is not None:
        from warmfit.report.plot import write_pareto

        with signals.deferred():  # a stop waits until the line says what was written
            with writing(plot):
                write_pareto(result, plot)
            typer.echo(f"wrote {plot}", err=True)
    typer.echo(render_sweep(result, format.value), nl=False)
