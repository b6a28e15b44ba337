"""Run a command with recording enabled: what ``warmfit record`` does.

The command runs as a child process with ``WARMFIT_RECORD_DIR`` and
``WARMFIT_RECORD_RUN`` set, so that every :meth:`Recorder.from_env` in it
(one per rank under ``torchrun``) records to the same directory. SIGINT and
SIGTERM sent to warmfit are passed on to the command, except a SIGINT typed
at the terminal, which the command already received from it. When the
command ends, the logs its ranks left (a rank killed before ``close()``) are
compacted as :func:`~warmfit.recorder.log.recover` would.

This module does not import torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warmfit.errors import UsageError
from warmfit.recorder.log import (
    Compaction,
    busy_message,
    check_run_label,
    compact_logs,
    existing_recording,
    find_logs,
    is_busy,
    lost_notes,
)
from warmfit.recorder.recorder import ENV_DIR, ENV_RUN
from warmfit.show.names import counted
from warmfit.show.progress import progress_bar

_FORWARDED = (signal.SIGINT, signal.SIGTERM)
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent: a key typed at the terminal


@dataclass(frozen=True)
class Recording:
    """What a recorded command left: its exit code and the trace directory."""

    exit_code: int
    run_dir: Path
    compactions: list[Compaction]
    problems: list[str] = field(default_factory=list)  # logs that could not be compacted
    lost_readings: dict[Path, int] = field(default_factory=dict)  # rank dir: readings lost
    recorded: bool = True  # False: no trace and no log; the folders warmfit made are gone
    removed: list[Path] = field(default_factory=list)  # the empty folders removed then
    killed_by: str | None = None  # the signal that ended the command (SIGKILL), if one did
    #: SIGINT or SIGTERM when the recording was stopped by one (typed at the terminal,
    #: sent to warmfit and passed on, or the command's own death by it), else None.
    stopped_by: str | None = None

    @property
    def incomplete(self) -> bool:
        """Whether readings may be missing: never report plain success then."""
        return bool(self.problems or self.lost_readings)


def prepare_run_dir(output_dir: Path, run: str, force: bool) -> Path:
    """Check (or, with ``force``, clear) the directory one run records into."""
    check_run_label(run)
    if output_dir.exists() and not output_dir.is_dir():
        raise UsageError(f"{output_dir} is a file; -o must name a directory.")
    run_dir = output_dir / f"run={run}"
    found = existing_recording(run_dir)
    if found and not force:
        raise UsageError(
            f"will not overwrite without --force: {run_dir} already holds a recording "
            f"({counted(len(found), 'file')}). Pick another --run, or pass --force to replace it."
        )
    if found:
        for log in find_logs(run_dir):
            if is_busy(log):  # --force replaces a finished recording, never a live one
                raise UsageError(busy_message(log))
        shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent that is a file, a read-only or missing file system
        raise UsageError(
            f"cannot create {run_dir}: {exc.strerror or exc}. Give -o a folder warmfit "
            "can create and write."
        ) from None
    return run_dir


def exit_code_of(returncode: int) -> int:
    """A child's exit code as a shell reports it: 128 + N for a death by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run_recorded(
    command: Sequence[str], output_dir: Path, run: str, *, force: bool = False
) -> Recording:
    """Run ``command`` with recording enabled; compact what its ranks left."""
    if not command:
        raise UsageError(
            "no command to record. Put it after --, for example: "
            "warmfit record -o traces/demo -- python -m warmfit.samples.demo"
        )
    env = {**os.environ, ENV_DIR: str(output_dir.resolve()), ENV_RUN: run}
    _check_startable(command[0], env)  # before --force removes an earlier recording
    run_dir = output_dir / f"run={run}"
    created = [d for d in (run_dir, *run_dir.parents) if not d.exists()]  # deepest first
    if force and existing_recording(run_dir):
        created.insert(0, run_dir)  # --force removes it and makes it anew
    run_dir = prepare_run_dir(output_dir, run, force)
    try:
        returncode, stop = _run_forwarding_signals(list(command), env)
    except UsageError:  # the command could not be started: leave nothing behind
        _remove_empty(run_dir, created)
        raise
    lost = lost_notes(run_dir)  # before compaction removes the notes with the logs
    with progress_bar("compacting logs", unit="logs") as progress:
        recovery = compact_logs(find_logs(run_dir), {"warmfit.recovered": "true"}, progress)
    problems = list(recovery.problems)
    code = exit_code_of(returncode)
    for c in recovery.compactions:
        if code == 0 and c.log.parent not in lost:
            problems.append(
                f"{c.log.parent}: the rank exited without closing its recorder (close() "
                "failed, or the process ended without running its exit hooks), so readings "
                "taken after its last flush may be lost"
            )
    recorded = bool(existing_recording(run_dir) or find_logs(run_dir) or lost)
    removed = [] if recorded else _remove_empty(run_dir, created)
    killed_by = _signal_name(-returncode) if returncode < 0 else None
    if stop is None and -returncode in _FORWARDED:
        stop = -returncode
    return Recording(
        code, run_dir, recovery.compactions, problems, lost, recorded, removed, killed_by,
        None if stop is None else _signal_name(stop),
    )  # fmt: skip


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _remove_empty(run_dir: Path, created: list[Path]) -> list[Path]:
    """Remove the folders warmfit created for a recording that left nothing; return them.

    Only folders in ``created`` (and the ``rank=*`` folders recorders made
    inside a created run folder) are removed, and only when empty.
    """
    removed = []
    candidates = list(created)
    if run_dir in created and run_dir.is_dir():
        candidates[:0] = sorted(d for d in run_dir.glob("rank=*") if d.is_dir())
    for directory in candidates:
        with contextlib.suppress(OSError):
            directory.rmdir()  # only an empty folder
            removed.append(directory)
    return removed


def _check_startable(program: str, env: dict[str, str]) -> None:
    """Refuse a command that cannot be found or run, before touching the disk."""
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program)
        if not path.exists():
            raise UsageError(
                f"command not found: {program}. Check the spelling, or give its full path."
            )
        if path.is_dir() or not os.access(path, os.X_OK):
            raise UsageError(f"command is not executable: {program}.")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise UsageError(
            f"command not found: {program}. Check the spelling, or give its full path."
        )


def _start(command: list[str], env: dict[str, str], **kwargs: Any) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(command, env=env, **kwargs)
    except FileNotFoundError:
        raise UsageError(
            f"command not found: {command[0]}. Check the spelling, or give its full path."
        ) from None
    except PermissionError:
        raise UsageError(f"command is not executable: {command[0]}.") from None
    except OSError as exc:  # for example a file that is not a program (ENOEXEC)
        raise UsageError(f"cannot start {command[0]}: {exc.strerror or exc}.") from None


def _run_forwarding_signals(command: list[str], env: dict[str, str]) -> tuple[int, int | None]:
    """Run the command, passing SIGINT and SIGTERM on; its return code, and the last
    of those signals warmfit received (None if none)."""
    if not hasattr(signal, "sigtimedwait"):  # macOS: plain handlers, no sender to tell apart
        return _run_with_handlers(command, env)
    waited = {*_FORWARDED, signal.SIGCHLD}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    stop: int | None = None

    def in_the_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        # warmfit passes SIGINT on, so the command must hear it: a job a script starts in
        # the background begins with SIGINT ignored, and the command would inherit that
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    try:
        child = _start(command, env, preexec_fn=in_the_child)
        while (code := child.poll()) is None:
            info = signal.sigtimedwait(waited, 0.5)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_pid != child.pid:  # the last one sent: SIGTERM after a Ctrl-C ends it
                stop = info.si_signo
            typed_at_terminal = info.si_signo == signal.SIGINT and info.si_code == _SI_KERNEL
            if not typed_at_terminal and info.si_pid != child.pid:
                child.send_signal(info.si_signo)
        return code, stop
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run_with_handlers(command: list[str], env: dict[str, str]) -> tuple[int, int | None]:
    child = _start(command, env)
    seen: list[int] = []

    def forward(signum: int, frame: object) -> None:
        seen.append(signum)
        child.send_signal(signum)

    saved = {sig: signal.signal(sig, forward) for sig in _FORWARDED}
    try:
        return child.wait(), (seen[-1] if seen else None)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def default_run_label(output_dir: Path) -> str:
    """The run label when none is given: the output directory's name."""
    name = output_dir.resolve().name
    return name if name else "run"
