"""``warmfit record``: run a training command and record its waves as a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warmfit.errors import WarmfitError

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

    Example: warmfit record -o traces/demo -- python -m warmfit.demo --steps 4

    Every warmfit Recorder.from_env() in the command (one per rank under
    torchrun) records into DIR/run=<run>/rank=<r>/. SIGINT and SIGTERM are
    passed on; warmfit exits with the command's exit code (2 instead of 0 when
    a rank lost readings or left a log that could not be compacted).
    """
    from warmfit.recorder.launch import default_run_label, run_recorded

    label = run if run is not None else default_run_label(output)
    recording = run_recorded(command or [], output, label, force=force)
    _print_summary(recording, output)
    if recording.incomplete:  # the trace is incomplete: never report plain success
        raise typer.Exit(recording.exit_code or 2)
    raise typer.Exit(recording.exit_code)


def _print_summary(recording: object, output: Path) -> None:
    from warmfit.recorder.launch import Recording
    from warmfit.trace import TraceSummary, find_trace_files, read_trace

    assert isinstance(recording, Recording)
    say = lambda text: typer.echo(text, err=True)  # noqa: E731 (diagnostics go to stderr)
    say(f"warmfit record: the command exited with code {recording.exit_code}")
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
    if not any(recording.run_dir.rglob("*.parquet")):
        say(
            f"  nothing was recorded in {recording.run_dir}: does the command create a "
            "warmfit Recorder (Recorder.from_env()) and run waves?"
        )
        return
    try:
        files = find_trace_files([recording.run_dir])
        summary = TraceSummary.of(read_trace(files), files=len(files))
    except WarmfitError as exc:
        say(f"  the recording is not a valid trace: {exc}")
        return
    say(f"  run        {recording.run_dir.name.removeprefix('run=')}")
    for label in ("ranks", "signatures", "waves", "readings"):
        say(f"  {label:<10} {getattr(summary, label):>10,}")
    shown = files[:_MAX_FILES_SHOWN]
    say(f"  files      {shown[0]}")
    for path in shown[1:]:
        say(f"             {path}")
    if len(files) > len(shown):
        say(f"             and {len(files) - len(shown)} more")
    say(f"replay it:   warmfit replay {output}")
