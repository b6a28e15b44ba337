"""``warmfit replay``: the over-estimate / peak-violation table of a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from warmfit.commands.options import (
    BudgetOpt,
    By,
    ByOpt,
    Engine,
    EngineOpt,
    Format,
    PathsArg,
    PolicyOpt,
    SafetyOpt,
    budget_bytes,
    check_new_file,
    read_traces,
    warn_without_whole,
    writing,
)


def replay_command(
    paths: PathsArg,
    policy: PolicyOpt = None,
    safety: SafetyOpt = 1.1,
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    per_wave: Annotated[
        Path | None,
        typer.Option(
            "--per-wave",
            help="Also write one row per wave and policy to this Parquet file.",
            metavar="FILE",
        ),
    ] = None,
    engine: EngineOpt = Engine.auto,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --per-wave file.")] = False,
    by: ByOpt = By.run,
    budget: BudgetOpt = None,
) -> None:
    """Replay traces through pricing policies and print the over-estimate table.

    Example: warmfit replay traces/pr991 -p max-merge -p warm-fit --format markdown

    With --budget 128.8GB it also counts the waves each policy would admit on a
    device with that much memory free, and with --by signature it gives one
    result per signature.
    """
    from warmfit.replay import replay
    from warmfit.report import render

    if per_wave is not None:
        check_new_file(per_wave, force, paths)
    limit = budget_bytes(budget)
    frame = read_traces(paths)
    warn_without_whole(frame)
    result = replay(frame, policy, safety, engine.value, by.value, limit)
    if per_wave is not None:
        from warmfit.files import write_atomically

        table = result.per_wave.to_arrow()

        def write(sink: BinaryIO) -> None:
            import pyarrow.parquet as pq

            pq.write_table(table, sink, compression="zstd", write_page_checksum=True)

        with writing(per_wave):
            write_atomically(per_wave, write)
        typer.echo(f"wrote {per_wave} ({result.per_wave.height:,} rows)", err=True)
    typer.echo(render(result, format.value), nl=False)
