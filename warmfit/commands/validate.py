"""``warmfit validate``: check traces against format v1 and summarize them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

#: What the recorder writes into each file's metadata, and how validate labels it.
_RECORDED = (
    ("meter", "warmfit.meter"),
    ("device", "warmfit.device"),
    ("torch", "warmfit.torch_version"),
    ("recorder", "warmfit.recorder"),
)
#: Counts the recorder or `warmfit recover` leave in the metadata, added over the files.
_TALLIES = (
    ("warmfit.readings_lost", "readings lost (the recorder could not write them)"),
    ("warmfit.recovered_dropped_bytes", "bytes of a cut-off batch dropped by recovery"),
    ("warmfit.skipped_waves", "waves skipped by the recorder (arguments it cannot record)"),
)


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

    The summary gives what the recorder stored (meter, device, torch version,
    whether the trace was recovered) and, per run and signature, the waves,
    whole readings and OOM readings. A run and signature without a whole
    reading gets a warning on stderr (warm-fit cannot learn there), and so do
    waves whose padding is over 10% of their tokens (the padded_tokens column)
    and waves of equal tokens whose peaks differ by more than the default
    safety factor's 10% (naming the sum_sq_tokens column).

    Example: warmfit validate traces/pr991
    """
    from warmfit.commands.options import (
        warn_about_shapes,
        warn_without_checksums,
        warn_without_whole,
    )
    from warmfit.format.trace import (
        TraceSummary,
        file_metadata,
        find_trace_files,
        read_trace,
        without_whole,
    )

    files = find_trace_files(paths)
    frame = read_trace(files, all_problems=True)
    summary = TraceSummary.of(frame, files=len(files))
    typer.echo(f"valid warmfit trace (format v1): {', '.join(str(p) for p in paths)}")
    notes = {"ranks": "  (run, rank) streams", "signatures": "  distinct signatures"}
    for label in ("files", "runs", "ranks", "signatures", "waves", "readings"):
        typer.echo(f"  {label:<11} {getattr(summary, label):>10,}{notes.get(label, '')}")
    for line in _metadata_lines(file_metadata(files)):
        typer.echo(line)
    if frame.height:
        typer.echo(_signature_table(frame), nl=False)
    warn_without_whole(without_whole(frame))
    warn_about_shapes(frame)
    warn_without_checksums(files)


def _metadata_lines(metadata: list[dict[str, str]]) -> list[str]:
    """What the files' metadata says about how the trace was recorded."""
    from warmfit.format.trace import metadata_total
    from warmfit.show.names import printable

    total = len(metadata)
    lines = []
    missing = []  # said in one line: an imported trace lacks them all
    for label, key in _RECORDED:
        values = Counter(meta.get(key) for meta in metadata)
        if set(values) == {None}:
            missing.append((label, key))
            continue
        if len(values) == 1:
            text = printable(next(iter(values)) or "")
        else:
            text = "; ".join(
                f"{'none' if value is None else printable(value)} ({count} of {total} files)"
                for value, count in sorted(values.items(), key=lambda kv: (kv[0] is None, kv[0]))
            )
        lines.append(f"  {label:<11} {text}")
    if missing:
        lines.append(
            f"  {'not known':<11} {', '.join(label for label, _ in missing)} (no "
            f"{', '.join(key for _, key in missing)} metadata: written by another tool or "
            "imported)"
        )
    recovered = sum(meta.get("warmfit.recovered") == "true" for meta in metadata)
    lines.append(
        f"  {'recovered':<11} "
        + (
            f"yes, {recovered} of {total} files (written by 'warmfit recover' or after a "
            "rank did not close: readings after its last flush may be missing)"
            if recovered
            else "no"
        )
    )
    for key, words in _TALLIES:
        count = metadata_total(metadata, key)
        if count:
            lines.append(f"  {'':<11} {count:,} {words}")
    return lines


def _signature_table(frame: object) -> str:
    """Per run and signature: waves, readings, whole and OOM readings (and reserved peak)."""
    import polars as pl
    from rich.text import Text

    from warmfit.format.trace import RESERVED_COLUMN, signature_counts
    from warmfit.report.table import cell, plain_table, table_text
    from warmfit.show.units import format_bytes

    assert isinstance(frame, pl.DataFrame)
    counts = signature_counts(frame)
    reserved = RESERVED_COLUMN in counts.columns
    table = plain_table(
        "whole = whole readings that did not run out of memory (warm-fit learns from these "
        "only); oom = readings that ran out of memory"
        + ("; reserved peak = the largest allocator reserved pool (not priced)" if reserved else "")
    )
    for name in ("run", "signature"):
        table.add_column(name)
    for name in ("waves", "readings", "whole", "oom"):
        table.add_column(name, justify="right")
    if reserved:
        table.add_column("reserved peak", justify="right")
    for row in counts.iter_rows(named=True):
        cells: list[Text | str] = [cell(row["run"]), cell(row["signature"])]
        cells += [f"{row[c]:,}" for c in ("waves", "readings", "whole_readings", "oom_readings")]
        if reserved:
            cells.append(format_bytes(row[RESERVED_COLUMN]))
        table.add_row(*cells)
    return table_text(table)
