"""``warmfit record``: run a training command and record its waves as a trace."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from warmfit.errors import UsageError, WarmfitError
from warmfit.show.names import counted, printable

#: Files listed in the summary before "and N more" (it must fit on one screen).
_MAX_FILES_SHOWN = 8


def record_command(
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            help="Directory the trace is written to.",
            show_default=False,
            metavar="DIR",
        ),
    ],
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command to record, after --.", show_default=False, metavar="COMMAND"
        ),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            "--run", help="Run label (a row of the report). Default: DIR's name.", metavar="NAME"
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an earlier recording of the same run.")
    ] = False,
) -> None:
    """Run a command with recording enabled and write its waves as a v1 trace.

    Example: warmfit record -o traces/demo -- python -m warmfit.samples.demo --steps 4

    Every warmfit Recorder.from_env() in the command (one per rank under
    torchrun) records into DIR/run=<run>/rank=<r>/. SIGINT and SIGTERM are
    passed on; warmfit exits with the command's exit code (2 instead of 0 when
    a rank lost readings or left a log that could not be compacted, or when
    the command recorded nothing).
    """
    from warmfit.recorder.launch import default_run_label, run_recorded
    from warmfit.recorder.log import check_run_label

    label = run if run is not None else default_run_label(output)
    if run is None:
        try:
            check_run_label(label)
        except UsageError:
            raise UsageError(
                f"the run label defaults to the -o folder's name, {printable(label)!r}, which "
                "cannot name a directory; give one with --run (letters, digits and . _ + -, "
                "for example --run ep1-cp2)."
            ) from None
    recording = run_recorded(command or [], output, label, force=force)
    _print_summary(recording, output)
    if recording.stopped_by is not None:  # as any warmfit command stopped so: 130 or 143
        raise typer.Exit(143 if recording.stopped_by == "SIGTERM" else 130)
    if recording.incomplete or not recording.recorded:  # never report plain success then
        raise typer.Exit(recording.exit_code or 2)
    raise typer.Exit(recording.exit_code)


def _print_summary(recording: object, output: Path) -> None:
    from warmfit.format.shape import shape_warnings
    from warmfit.format.trace import (
        TraceSummary,
        file_metadata,
        find_trace_files,
        metadata_total,
        no_whole_warning,
        read_trace,
        without_whole,
    )
    from warmfit.recorder.launch import Recording
    from warmfit.replay import DEFAULT_SAFETY_FACTOR

    assert isinstance(recording, Recording)
    say = lambda text: typer.echo(text, err=True)  # noqa: E731 (diagnostics go to stderr)
    if recording.stopped_by is not None:
        _print_stopped(recording, say)
        return
    killed = f" (killed by {recording.killed_by})" if recording.killed_by else ""
    say(f"warmfit record: the command exited with code {recording.exit_code}{killed}")
    for c in recording.compactions:
        dropped = (
            f", dropped {c.dropped_bytes:,} bytes of a truncated batch" if c.dropped_bytes else ""
        )
        say(
            f"  recovered  {c.log.parent}: {c.readings:,} readings kept{dropped} (the rank did not close)"
        )
    for rank, lost in recording.lost_readings.items():
        say(
            f"  LOST       {rank}: {lost:,} readings could not be written (a full disk?); "
            "the trace lacks them"
        )
    for problem in recording.problems:
        say(f"  not recovered  {problem}")
    if recording.problems:
        say(f"  fix each, then run: warmfit recover {output}")
    removed = (
        f" (removed the empty {', '.join(str(d) for d in recording.removed)})"
        if recording.removed
        else ""
    )
    if not recording.recorded and recording.exit_code != 0:
        say(f"  nothing was recorded: the command failed before any wave was recorded{removed}")
        return
    if not recording.recorded:
        say(
            f"  nothing was recorded{removed}: the command succeeded, but no warmfit Recorder "
            "in it recorded a wave. Create one with Recorder.from_env() and run each wave "
            "inside recorder.wave(...) (docs/tutorial/first-trace.md); a wave whose "
            "arguments cannot be recorded is skipped, with a RecorderWarning. warmfit record "
            "exits 2."
        )
        return
    if not any(recording.run_dir.rglob("*.parquet")):
        return  # only logs that could not be compacted: named above
    try:
        files = find_trace_files([recording.run_dir])
        frame = read_trace(files)
        summary = TraceSummary.of(frame, files=len(files))
    except WarmfitError as exc:
        say(f"  the recording is not a valid trace: {exc}")
        return
    say(f"  run        {printable(recording.run_dir.name.removeprefix('run='))}")
    for label in ("ranks", "signatures", "waves", "readings"):
        say(f"  {label:<10} {getattr(summary, label):,}")
    shown = files[:_MAX_FILES_SHOWN]
    say(f"  files      {shown[0]}")
    for path in shown[1:]:
        say(f"             {path}")
    if len(files) > len(shown):
        say(f"             and {len(files) - len(shown)} more")
    skipped = metadata_total(file_metadata(files), "warmfit.skipped_waves")
    if skipped:
        say(
            f"  skipped    {skipped:,} waves not recorded: their arguments cannot be "
            "recorded (the recorder's warning above says which)"
        )
    warning = no_whole_warning(without_whole(frame))
    if warning:
        say(warning)
    for warning in shape_warnings(frame, DEFAULT_SAFETY_FACTOR):  # padding, equal tokens
        say(warning)
    say(f"replay it:   warmfit replay {output}")


def _print_stopped(recording: object, say: Callable[[str], None]) -> None:
    """A recording stopped by Ctrl-C or SIGTERM: one line saying what was kept (and a
    line for each rank whose readings could not all be kept)."""
    from warmfit.format.trace import TraceSummary, find_trace_files, read_trace
    from warmfit.recorder.launch import Recording

    assert isinstance(recording, Recording)
    how = "interrupted (Ctrl-C)" if recording.stopped_by == "SIGINT" else "terminated (SIGTERM)"
    where = printable(str(recording.run_dir))
    try:
        files = list(recording.run_dir.rglob("*.parquet"))
        if files:
            files = find_trace_files([recording.run_dir])
            waves = TraceSummary.of(read_trace(files), files=len(files)).waves
            say(f"warmfit record: {how}: {counted(waves, 'wave')} kept in {where}")
        else:
            say(f"warmfit record: {how}: no wave was recorded")
    except (WarmfitError, OSError) as exc:  # kept, but not readable as a trace now
        say(f"warmfit record: {how}: what was kept in {where} cannot be read as a trace: {exc}")
    for rank, lost in recording.lost_readings.items():
        say(f"  LOST       {rank}: {lost:,} readings could not be written; the trace lacks them")
    for problem in recording.problems:
        say(f"  not recovered  {problem}")
