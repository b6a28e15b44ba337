"""``warmfit import``: measurements people already have, as traces.

``warmfit import table CSV --map MAP.toml -o TRACE`` maps a table's columns to
readings (:mod:`warmfit.importers.table`); ``warmfit import art-misses DIR -o
TRACE`` reads ART's planner-miss reports (:mod:`warmfit.importers.art_misses`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warmfit.commands.options import check_new_file, writing
from warmfit.errors import UsageError
from warmfit.run import signals
from warmfit.show.names import counted

#: The group's line in ``warmfit --help``.
HELP = (
    "Turn measurements you already have (a CSV table, ART's planner-miss reports) into a "
    "trace.\n\n"
    "Example: warmfit import table calibration.csv --map map.toml -o traces/calib/t.parquet"
)

OutputOpt = Annotated[
    Path,
    typer.Option(
        "--output",
        "-o",
        help="The trace file to write (*.parquet).",
        metavar="TRACE",
        show_default=False,
    ),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite an existing output file.")]


def _check_output(output: Path, force: bool, inputs: list[Path]) -> None:
    """Refuse an output that is not a Parquet file, that is one of the inputs (even with
    --force) or that exists (without --force)."""
    from warmfit.format.files import TRACE_SUFFIX, same_file

    if not output.name.endswith(TRACE_SUFFIX):
        raise UsageError(
            f"-o {output}: name a {TRACE_SUFFIX} file; warmfit reads a directory's "
            f"*{TRACE_SUFFIX} files as its trace."
        )
    for given in inputs:
        if same_file(output, given) or output.resolve() == given.resolve():
            raise UsageError(
                f"will not write {output}: it is the input {given}, and warmfit never writes "
                "onto its input, not even with --force. Name another file."
            )
    check_new_file(output, force)


def table_command(
    table: Annotated[
        Path,
        typer.Argument(
            help="The table of measurements: a CSV file with a header row.", metavar="CSV"
        ),
    ],
    mapping: Annotated[
        Path,
        typer.Option(
            "--map",
            help="The TOML mapping from the table's columns to readings "
            "(docs/how-to/bring-your-own-measurements.md).",
            metavar="MAP",
            show_default=False,
        ),
    ],
    output: OutputOpt,
    force: ForceOpt = False,
) -> None:
    """Turn a CSV table into a trace through a TOML mapping of polars expressions.

    Example: warmfit import table runs.csv --map runs.toml -o traces/mine/runs.parquet

    The mapping gives each run's label and each wave's signature, tokens and
    peak as polars SQL expressions over the table's columns ("seq_len * batch",
    "peak_mem_MiB = 'OOM'"), the rows kept (where = "..."), the order of each
    run's waves and how many waves and readings a row becomes. A broken mapping is refused naming its
    key and column, a bad row naming the file, column and row, and nothing is
    written. The trace carries the mapping and the table's SHA-256.
    """
    from warmfit.format.writer import write_trace
    from warmfit.importers.table import import_table, load_mapping

    loaded = load_mapping(mapping)
    _check_output(output, force, [table, *loaded.sources])
    imported = import_table(table, loaded)
    for warning in imported.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if imported.readings.height == 0:
        raise UsageError(
            f"{mapping}: no row of {table} passes [filter] ({counted(imported.rows, 'row')} read); "
            "nothing to write. Check the filter's columns and values."
        )
    with signals.deferred():  # a stop waits until the line says what was written
        with writing(output):
            write_trace(imported.readings, output, imported.metadata)
        typer.echo(
            f"wrote {output}: {counted(imported.readings.height, 'reading')} in "
            f"{counted(imported.runs, 'run')} from {imported.kept:,} of "
            f"{counted(imported.rows, 'row')} of {table}. Replay it: warmfit replay {output}"
        )


def art_misses_command(
    directory: Annotated[
        Path,
        typer.Argument(
            help="The directory of ART's planner-miss reports (<id>.json).", metavar="DIR"
        ),
    ],
    output: OutputOpt,
    force: ForceOpt = False,
) -> None:
    """Turn ART's planner-miss reports into a trace: one wave per report.

    Example: warmfit import art-misses /tmp/art-planner-misses-1000-42 -o misses.parquet

    Each report (ART_TRAINER_RANK_PLANNER_MISS_THRESHOLD_PCT) becomes a flat
    wave of one caller reading, not whole, in occurred_at order per rank, with
    the bytes the rank admitted on as the recorded price (estimate_bytes:
    replay.local_admission_peak_bytes, else admission_peak_bytes, else
    predicted_peak_bytes times replay.safety_factor; the summary says which). A report that
    cannot be read (malformed, cut short, over 16 MiB) or that holds no wave is
    named on stderr and the others are imported; warmfit then exits 2.
    """
    from warmfit.errors import TraceError
    from warmfit.format.writer import write_trace
    from warmfit.importers.art_misses import REASONS, import_misses
    from warmfit.show.names import printable

    _check_output(output, force, [directory])
    misses = import_misses(directory)
    for refusal in misses.refused:
        typer.echo(
            f"warmfit: refused {printable(str(refusal.path))} ({refusal.reason}): {refusal.problem}",
            err=True,
        )
    counts = misses.counts()
    tally = f"{counted(misses.imported, 'report')} imported, " + ", ".join(
        f"{counts[r]} {r}" for r in REASONS
    )
    if misses.imported:
        sources = misses.sources()
        typer.echo(
            "estimate_bytes (the bytes admitted on, replayed as 'recorded'): "
            + ", ".join(f"{n} from {source}" for source, n in sources.items() if n)
        )
    if misses.imported == 0:
        raise TraceError(f"no report could be imported ({tally}); nothing written.", path=directory)
    with signals.deferred():  # a stop waits until the line says what was written
        with writing(output):
            write_trace(misses.readings, output, misses.metadata)
        typer.echo(f"wrote {output}: {tally}. Replay it: warmfit replay {output}")
    if misses.refused:
        raise TraceError(
            f"{counted(len(misses.refused), 'report')} refused ({tally}); the trace holds "
            "the others.",
            path=directory,
        )
