"""``warmfit replay``: the over-estimate / peak-violation table of a trace."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO

import typer

from warmfit.errors import UsageError

if TYPE_CHECKING:
    import polars as pl


class Format(StrEnum):
    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


class Engine(StrEnum):
    auto = "auto"
    scalar = "scalar"
    vectorized = "vectorized"


PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Trace files or directories (read recursively).",
        show_default=False,
        metavar="PATH...",
    ),
]
PolicyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        help="Policy to replay (repeatable): a registered name or module:Class. "
        "Default: max-merge and warm-fit.",
        show_default=False,
        metavar="POLICY",
    ),
]
SafetyOpt = Annotated[
    float,
    typer.Option("--safety", help="Safety factor f applied to every estimate.", metavar="F"),
]


class By(StrEnum):
    run = "run"
    signature = "signature"


ByOpt = Annotated[
    By,
    typer.Option(
        "--by", help="One result per run, or per run and signature (each signature's profile)."
    ),
]
BudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Memory free above the baseline when a wave is admitted, e.g. 128.8GB or 80GiB: "
        "adds how many waves a policy admits, refuses although they fit, and admits although "
        "they do not.",
        show_default=False,
        metavar="SIZE",
    ),
]


def budget_bytes(budget: str | None) -> int | None:
    """The ``--budget`` option in bytes (None when not given)."""
    if budget is None:
        return None
    from warmfit.units import parse_bytes

    try:
        return parse_bytes(budget)
    except ValueError as exc:
        raise UsageError(f"--budget: {exc}") from None


EngineOpt = Annotated[
    Engine,
    typer.Option(
        help="auto: vectorized when every policy has a vectorized form (the built-in ones "
        "do), else scalar, the one-reading-at-a-time reference. Both give identical output.",
    ),
]


def check_new_file(path: Path, force: bool, inputs: list[Path] | None = None) -> None:
    """Refuse to overwrite an existing file unless ``--force`` was given.

    A file among the trace files of ``inputs`` (the command's trace paths) is
    refused even with ``--force``: however it is named (``..``, a symbolic or
    a hard link), warmfit never writes onto its input.
    """
    from warmfit.files import written_over
    from warmfit.trace import find_trace_files

    if path.is_dir():
        raise UsageError(f"{path} is a directory; name a file to write.")
    if inputs is not None and os.path.lexists(path):
        hit = written_over(path, find_trace_files(inputs))
        if hit is not None:
            raise UsageError(
                f"will not write {path}: it is the input trace {hit}, and warmfit never "
                "writes onto its input, not even with --force. Name another file."
            )
    if path.exists() and not force:
        raise UsageError(f"will not overwrite without --force: {path}")
    if not path.parent.is_dir():
        raise UsageError(f"the folder of {path} does not exist; create it first.")


def read_traces(paths: list[Path]) -> pl.DataFrame:
    """Read and validate the traces a command replays, with a progress bar on a terminal.

    Loads only the columns replay uses (every column is still checked).
    """
    from warmfit.progress import progress_bar
    from warmfit.trace import read_trace

    with progress_bar("reading traces") as progress:
        return read_trace(paths, columns=(), progress=progress)


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an error while writing ``path`` (a full disk, a file-size limit) into exit 2.

    Writers go through :func:`warmfit.files.write_atomically`, so nothing of
    the failed file is left behind and a rerun works.
    """
    try:
        yield
    except OSError as exc:  # pyarrow reports a failed write as an OSError too
        reason = exc.strerror or str(exc)
        raise UsageError(
            f"cannot write {path}: {reason}. No partial file was left; fix that (free space, "
            "permissions, the file-size limit) and run the command again."
        ) from None


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
    result = replay(read_traces(paths), policy, safety, engine.value, by.value, limit)
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
