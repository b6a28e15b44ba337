"""``warmfit recover``: turn the logs a killed recording left into a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warmfit.show.names import counted


def recover_command(
    directory: Annotated[
        Path,
        typer.Argument(help="The -o directory of a killed 'warmfit record' run.", metavar="DIR"),
    ],
) -> None:
    """Compact the write-ahead logs of a killed recording into a valid trace.

    Example: warmfit recover traces/demo

    Every valid batch of every log is kept; a batch cut off by the kill is
    dropped and its size reported. Readings not yet flushed when the process
    died were never written and cannot be recovered. Only warmfit's own logs
    are touched, and a log is removed only once its readings are in the trace.
    A log that cannot be read completely (damage), or that a live recording
    still writes, is kept and named, and warmfit exits 2 after recovering
    every other log. Run again, it has nothing to do and exits 0.
    """
    from warmfit.recorder.log import recover_all
    from warmfit.show.progress import progress_bar

    with progress_bar("recovering logs", unit="logs") as progress:
        recovery = recover_all(directory, progress)
    compactions = recovery.compactions
    if not compactions and not recovery.problems:
        typer.echo(
            f"nothing to recover: {directory} holds no write-ahead log; its recording is "
            f"already a trace. Replay it: warmfit replay {directory}"
        )
        return
    kept = sum(c.readings for c in compactions)
    dropped = sum(c.dropped_bytes for c in compactions if c.problem is None)
    for c in compactions:
        where = c.trace if c.trace is not None else c.log
        line = f"{where}: kept {counted(c.readings, 'reading')} in {counted(c.batches, 'batch', 'batches')}"
        if c.dropped_bytes and c.problem is not None:
            line += (
                f"; {counted(c.dropped_bytes, 'byte')} after them cannot be read (the log is kept)"
            )
        elif c.dropped_bytes:
            line += f"; dropped {counted(c.dropped_bytes, 'byte')} of a batch cut off by the kill"
            if c.readings:
                line += f" (a batch here held {c.readings_per_batch:.0f} readings on average)"
        if c.lost_readings:
            line += f"; the recorder could not write {c.lost_readings:,} more (a full disk)"
        typer.echo(line + f" [{c.note}]")
    if recovery.problems:
        typer.echo(
            f"recovered {counted(len(compactions), 'log')}: {counted(kept, 'reading')} kept, "
            f"{counted(dropped, 'byte')} dropped."
        )
        recovery.raise_problems(directory)
    typer.echo(
        f"recovered {counted(len(compactions), 'log')}: {counted(kept, 'reading')} kept, "
        f"{counted(dropped, 'byte')} dropped. "
        f"Readings taken after a rank's last flush were never written. "
        f"Replay it: warmfit replay {directory}"
    )
