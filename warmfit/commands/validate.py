"""``warmfit validate``: check traces against format v1 and summarize them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def validate_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Trace files or directories (read recursively).",
            show_default=False,
            metavar="PATH",
        ),
    ],
) -> None:
    """Check that traces follow trace format v1; print a summary or every problem.

    Example: warmfit validate traces/pr991
    """
    from warmfit.trace import TraceSummary, find_trace_files, read_trace

    files = find_trace_files(paths)
    summary = TraceSummary.of(read_trace(files, all_problems=True), files=len(files))
    typer.echo(f"valid warmfit trace (format v1): {', '.join(str(p) for p in paths)}")
    notes = {"ranks": "  (run, rank) streams", "signatures": "  distinct signatures"}
    for label in ("files", "runs", "ranks", "signatures", "waves", "readings"):
        typer.echo(f"  {label:<11} {getattr(summary, label):>10,}{notes.get(label, '')}")
