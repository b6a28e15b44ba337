"""What the commands share: their options, and how they read traces and write files.

Each command module imports from here; no command borrows from another.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from warmfit.errors import UsageError
from warmfit.report.formats import Format as Format  # the one list of formats

if TYPE_CHECKING:
    import polars as pl


class Engine(StrEnum):
    auto = "auto"
    scalar = "scalar"
    vectorized = "vectorized"


PathsArg = Annotated[
    list[Path],
    typer.Argument(
        help="Trace files or directories (read recursively).",
        show_default=False,
        metavar="PATH",
    ),
]
PolicyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        help="Policy to replay (repeatable): a registered name or module:Class. "
        "Default: max-merge, warm-fit and envelope.",
        show_default=False,
        metavar="POLICY",
    ),
]
#: ``--safety``'s default: :data:`warmfit.replay.semantics.DEFAULT_SAFETY_FACTOR` (not
#: imported here, which would load polars for ``--help``; a test keeps them equal).
SAFETY = 1.1
SafetyOpt = Annotated[
    float,
    typer.Option("--safety", help="Safety factor applied to every estimate.", metavar="FACTOR"),
]
#: ``--format`` of every command that shows a report (:mod:`warmfit.report.formats`).
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]


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


def budget_bytes(budget: str | None, paths: Sequence[Path] = ()) -> int | None:
    """The ``--budget`` option in bytes (None when not given).

    The first of the command's trace ``paths`` that does not exist is refused first, as
    :func:`~warmfit.format.files.find_trace_files` would refuse it, where it reads as a
    size (``MiB``, ``8MiB``): then ``--budget 8 MiB`` was likely written with a space,
    and the message says how to write it."""
    from warmfit.show.units import parse_bytes, size_unit

    missing = next((p for p in paths if not os.path.lexists(p)), None)
    size = None if missing is None else size_unit(missing.name)
    if missing is not None and size is not None:
        from warmfit.format.files import missing_path

        number, unit = size
        given = (budget or "").strip()
        if not number:  # the number went to --budget (or, where it did not, an example)
            number = given if given and size_unit(given + unit) == (given, unit) else "8"
        hint = f"(a --budget with a space? write it as --budget {number}{unit})"
        raise missing_path(missing, hint)
    if budget is None:
        return None

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

JobsOpt = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        help="Replay batches of streams in this many processes. Default: the cores "
        "free now (usable cores less the load average; --verbose says how many). The "
        "output is the same for any number.",
        metavar="N",
        show_default=False,
    ),
]

ClusterOpt = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Run the batches on this Dask scheduler (tcp://HOST:8786) instead; its "
        "workers must see the trace's paths. Needs the cluster extra (pip install 'warmfit[cluster]').",
        metavar="ADDRESS",
        show_default=False,
    ),
]


@contextmanager
def streaming(paths: list[Path], jobs: int | None, cluster: str | None) -> Iterator[int | None]:
    """Where a command's one streamed replay (:func:`warmfit.replay.stream.replay_stream`)
    runs: yields its ``jobs`` (the cores free now unless given; None on a cluster).
    The workers' fork server starts at once, its imports beside this process's, and
    goes when the command ends, whether or not the replay took it."""
    from warmfit.run.memory import before_polars
    from warmfit.run.workers import default_jobs, discard_early_pool, prestart

    if cluster is not None and jobs is not None:
        raise UsageError(
            "--cluster runs the batches on the cluster's workers, --jobs on this machine's "
            "cores: give one of them."
        )
    if cluster is None and jobs is None:
        jobs = default_jobs()  # once: the load average it reads moves
    before_polars()  # first: polars' allocator reads its settings at import
    prestart(paths, jobs, cluster)  # the workers' imports run beside this process's
    try:
        yield jobs
    except BaseException:  # failed or interrupted before the replay took them
        discard_early_pool(now=True)
        raise
    discard_early_pool()  # a replay that ended before it took them (an error it reported)


def check_new_file(path: Path, force: bool, inputs: list[Path] | None = None) -> None:
    """Refuse to overwrite an existing file unless ``--force`` was given.

    A missing folder is no error: :func:`warmfit.format.files.write_atomically`
    creates it when the output is written.

    A file among the trace files of ``inputs`` (the command's trace paths) is
    refused even with ``--force``: however it is named (``..``, a symbolic or
    a hard link), warmfit never writes onto its input; nor does it write a
    Parquet file inside an input directory, where the next replay would read
    it as a trace (:func:`inside_trace_directory`).
    """
    from warmfit.format.files import written_over
    from warmfit.format.trace import find_trace_files

    if path.is_dir():
        raise UsageError(f"{path} is a directory; name a file to write.")
    if inputs is not None:
        hit = written_over(path, find_trace_files(inputs))
        if hit is not None:
            raise UsageError(
                f"will not write {path}: it is the input trace {hit}, and warmfit never "
                "writes onto its input, not even with --force. Name another file."
            )
        inside = inside_trace_directory(path, inputs)
        if inside is not None:
            raise UsageError(
                f"will not write {path}: it lies inside the trace directory {inside}, so "
                f"the next 'warmfit replay {inside}' would read it as a trace file. Write it "
                "outside the trace directory."
            )
    if path.exists() and not force:
        raise UsageError(f"will not overwrite without --force: {path}")
    folder = next((p for p in path.parents if os.path.lexists(p)), None)
    if folder is not None and not folder.is_dir():
        raise UsageError(
            f"cannot write {path}: {folder} is a file, not a folder. Name another path."
        )


def inside_trace_directory(path: Path, inputs: list[Path]) -> Path | None:
    """The input directory that would read ``path`` as a trace file, if any.

    A directory given as a trace path is read recursively for ``*.parquet``,
    so a Parquet output written below it would break the next replay; so is
    the folder of a trace file given alone, so a Parquet output beside it too.
    """
    from warmfit.format.files import TRACE_SUFFIX

    if not path.name.endswith(TRACE_SUFFIX):
        return None
    target = path.resolve()
    for given in inputs:
        if given.is_dir() and target.is_relative_to(given.resolve()):
            return given
        if given.is_file() and target.parent == given.resolve().parent:
            return given.parent  # beside an input file: in the folder a replay would read
    return None


def refuse_force_without(output: Path | None, option: str) -> None:
    """``--force`` lets an output overwrite a file: without that output it means nothing,
    and is refused rather than silently ignored."""
    if output is None:
        raise UsageError(
            f"--force overwrites the {option} file; give {option} FILE, or drop --force."
        )


def warn_without_whole(pairs: pl.DataFrame) -> None:
    """Warn on stderr about each run and signature without a whole reading (not a failure).

    ``pairs`` come from :func:`warmfit.format.trace.without_whole`: warm-fit then
    prices exactly as max-merge there, and nothing else says why.
    """
    from warmfit.format.trace import no_whole_warning

    text = no_whole_warning(pairs)
    if text:
        typer.echo(text, err=True)


def warn_about_shapes(frame: pl.DataFrame) -> None:
    """Warn on stderr about padding left out of the token counts and about waves of equal
    tokens whose peaks differ by more than the default safety factor allows
    (:func:`warmfit.format.shape.shape_warnings`; not a failure)."""
    from warmfit.format.shape import shape_warnings
    from warmfit.replay import DEFAULT_SAFETY_FACTOR

    for text in shape_warnings(frame, DEFAULT_SAFETY_FACTOR):
        typer.echo(text, err=True)


def warn_without_checksums(
    files: Sequence[str | os.PathLike[str]], bare: Sequence[str | os.PathLike[str]] | None = None
) -> None:
    """Warn once on stderr about the trace files whose pages carry no checksums
    (written by other tools): a flipped bit in them cannot be detected. ``bare``:
    those files, where already known (a replay's :attr:`StreamedReplay.without_checksums`);
    else each file's first page is read."""
    from warmfit.format.pagecrc import has_checksums
    from warmfit.show.names import counted, printable

    if bare is None:
        bare = [f for f in files if has_checksums(f) is False]
    if not bare:
        return
    shown = ", ".join(printable(str(f)) for f in bare[:3]) + (", ..." if len(bare) > 3 else "")
    typer.echo(
        f"warning: no page checksums in {len(bare):,} of {counted(len(files), 'trace file')} "
        f"({shown}): corruption in them cannot be detected. warmfit's recorder "
        "writes them; re-export such files with page checksums (pyarrow: "
        "write_page_checksum=True) to have them checked.",
        err=True,
    )


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn an error while writing ``path`` (a full disk, a file-size limit) into exit 2.

    Writers go through :func:`warmfit.format.files.write_atomically`, so nothing of
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
