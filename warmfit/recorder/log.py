"""The recorder's write-ahead log, its compaction into Parquet, and recovery.

Each rank appends its readings to ``DIR/run=<run>/rank=<r>/readings.arrows``,
an Arrow IPC stream: a schema, then one record batch per flush, each written
through to the operating system (and fsynced) before the flush returns. A
process killed with ``kill -9`` leaves every complete batch readable; at most
a truncated last batch is lost. :func:`compact_log` turns a log into the
rank's ``readings.parquet`` with :func:`warmfit.trace.write_trace` (temporary
file, fsync, ``os.replace``) and only then removes the log. :func:`recover`
does that for every log a killed run left behind.

This module needs pyarrow only, not torch.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from warmfit.errors import UsageError
from warmfit.progress import ProgressCallback, no_progress
from warmfit.schema import COLUMNS, arrow_schema
from warmfit.trace import write_trace

LOG_NAME = "readings.arrows"
TRACE_NAME = "readings.parquet"

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")

#: The columns of a reading tuple, in order (``run`` and ``rank`` are per log).
ROW_COLUMNS = tuple(c for c in COLUMNS if c not in ("run", "rank"))


def check_run_label(run: str) -> str:
    """A run label becomes a directory name: letters, digits and ``._+-`` only."""
    if not _LABEL.match(run):
        raise UsageError(
            f"run label {run!r} cannot name a directory; use letters, digits and . _ + - "
            "(for example --run ep1-cp2)."
        )
    return run


def rank_dir(output_dir: str | os.PathLike[str], run: str, rank: int) -> Path:
    """Where one rank of one run writes: ``DIR/run=<run>/rank=<rank>``."""
    return Path(output_dir) / f"run={run}" / f"rank={rank}"


def existing_recording(directory: Path) -> list[Path]:
    """Trace files and logs already under ``directory`` (empty when none)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.suffix in (".parquet", ".arrows"))


# --------------------------------------------------------------------------- writing


class LogWriter:
    """Appends batches of readings to one rank's Arrow IPC stream.

    Each :meth:`append` writes one record batch and returns only once the
    bytes are in the operating system (and, with ``fsync``, on disk).
    """

    def __init__(
        self, path: Path, run: str, rank: int, metadata: dict[str, str], fsync: bool = True
    ) -> None:
        self.path = path
        self.run = run
        self.rank = rank
        self.schema = arrow_schema(metadata)
        self.fsync = fsync
        self.readings = 0
        self._types = [self.schema.field(name).type for name in ROW_COLUMNS]
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = open(path, "xb", buffering=0)  # noqa: SIM115 (closed in close())
        self._stream = pa.ipc.new_stream(self._file, self.schema)

    def append(self, rows: list[tuple[Any, ...]]) -> None:
        """Write reading tuples (in :data:`ROW_COLUMNS` order) as one batch."""
        if not rows:
            return
        count = len(rows)
        columns = list(zip(*rows, strict=True))
        arrays = [
            pa.repeat(pa.scalar(self.run, pa.string()), count),
            pa.repeat(pa.scalar(self.rank, pa.int32()), count),
        ]
        arrays += [
            pa.array(values, type=dtype) for values, dtype in zip(columns, self._types, strict=True)
        ]
        self._stream.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        if self.fsync:
            os.fsync(self._file.fileno())
        self.readings += count

    def close(self) -> None:
        """Write the end-of-stream marker and close the file."""
        if self._file.closed:
            return
        try:
            self._stream.close()
        finally:
            self._file.close()


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class LogContents:
    """What a write-ahead log holds: every complete batch, and what was cut off."""

    path: Path
    table: pa.Table | None  # None when not even one batch was complete
    batches: int
    readings: int
    kept_bytes: int
    dropped_bytes: int
    problem: str | None  # why reading stopped before the end, when it did


def read_log(path: Path) -> LogContents:
    """Read the complete batches of a log; a truncated tail is measured, not read."""
    data = path.read_bytes()
    source = pa.BufferReader(data)
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError) as exc:
        why = "the log ends inside its schema" if data else "the log is empty"
        if data and not isinstance(exc, pa.ArrowInvalid):
            why = f"the log's schema cannot be read ({exc})"
        return LogContents(path, None, 0, 0, 0, len(data), why)
    batches: list[pa.RecordBatch] = []
    kept = source.tell()
    problem: str | None = None
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:  # a clean end: the end-of-stream marker, or none yet
            kept = len(data)
            break
        except (pa.ArrowInvalid, OSError) as exc:
            problem = f"the last batch is truncated ({exc})"
            break
        kept = source.tell()
    table = pa.Table.from_batches(batches, schema=reader.schema) if batches else None
    readings = table.num_rows if table is not None else 0
    return LogContents(path, table, len(batches), readings, kept, len(data) - kept, problem)


def _metadata(schema: pa.Schema) -> dict[str, str]:
    return {
        k.decode(errors="replace"): v.decode(errors="replace")
        for k, v in (schema.metadata or {}).items()
    }


# --------------------------------------------------------------------------- compaction


@dataclass(frozen=True)
class Compaction:
    """What turning one log into Parquet did."""

    log: Path
    trace: Path | None  # the Parquet file written, or None when nothing was kept
    readings: int
    batches: int
    dropped_bytes: int
    note: str

    @property
    def readings_per_batch(self) -> float:
        """The mean readings per complete batch (a cut-off batch held about this many)."""
        return self.readings / self.batches if self.batches else 0.0


def compact_log(path: Path, extra_metadata: dict[str, str] | None = None) -> Compaction:
    """Turn one write-ahead log into ``readings.parquet`` beside it, then remove it.

    Keeps every complete batch; a truncated last batch (a process killed
    mid-write) is dropped and counted in ``dropped_bytes``. When the Parquet
    file already exists, the log is what a finished compaction left before it
    could remove it, and it is removed if the file holds at least its readings.
    """
    target = path.with_name(TRACE_NAME)
    contents = read_log(path)
    if target.exists():
        import pyarrow.parquet as pq

        have = pq.read_metadata(target).num_rows
        if have >= contents.readings:
            path.unlink()
            return Compaction(
                path, target, contents.readings, contents.batches, 0, "already compacted"
            )
        raise UsageError(
            f"{target} exists but holds fewer readings ({have}) than the log beside it "
            f"({contents.readings}); move one of them away and run 'warmfit recover' again."
        )
    if contents.table is None:
        path.unlink()
        return Compaction(
            path,
            None,
            0,
            0,
            contents.dropped_bytes,
            f"nothing kept: {contents.problem or 'no complete batch'}",
        )
    metadata = _metadata(contents.table.schema)
    if contents.problem is not None:
        metadata["warmfit.recovered_dropped_bytes"] = str(contents.dropped_bytes)
    metadata.update(extra_metadata or {})
    write_trace(contents.table, target, metadata)
    path.unlink()
    note = "complete" if contents.problem is None else contents.problem
    return Compaction(
        path, target, contents.readings, contents.batches, contents.dropped_bytes, note
    )


def find_logs(directory: str | os.PathLike[str]) -> list[Path]:
    """Every write-ahead log under ``directory``, sorted."""
    return sorted(p for p in Path(directory).rglob("*.arrows") if p.is_file())


@dataclass(frozen=True)
class Recovery:
    """What compacting several logs did: the logs compacted, and those that failed."""

    compactions: list[Compaction]
    problems: list[str]  # one line per log that could not be compacted, naming it

    def raise_problems(self, directory: str | os.PathLike[str]) -> None:
        """Raise one :class:`UsageError` listing every problem, if there was any."""
        if self.problems:
            raise UsageError(
                f"{len(self.problems)} log(s) could not be recovered (every other log was): "
                + "; ".join(self.problems)
                + f". Fix each, then run 'warmfit recover {directory}' again; it compacts "
                "only the logs still there."
            )


def compact_logs(
    logs: list[Path],
    extra_metadata: dict[str, str] | None = None,
    progress: ProgressCallback = no_progress,
) -> Recovery:
    """:func:`compact_log` each log; one that fails does not stop the others.

    ``progress(done, total)`` is called before the first log and after each.
    """
    compactions: list[Compaction] = []
    problems: list[str] = []
    progress(0, len(logs))
    for done, log in enumerate(logs, 1):
        try:
            compactions.append(compact_log(log, extra_metadata))
        except UsageError as exc:  # its message already says what to do
            problems.append(f"{log}: {exc}")
        except Exception as exc:  # reported per log, with the path
            problems.append(
                f"{log}: {type(exc).__name__}: {exc} (check the disk and the file's "
                "permissions; the log is left in place)"
            )
        progress(done, len(logs))
    return Recovery(compactions, problems)


def recover_all(
    directory: str | os.PathLike[str], progress: ProgressCallback = no_progress
) -> Recovery:
    """Compact every log a killed recording left under ``directory``, reporting failures.

    Raises :class:`UsageError` when the directory does not exist or holds no
    log (a finished recording has none: it is already a trace). A log that
    cannot be compacted is listed in :attr:`Recovery.problems`, after every
    other log has been compacted.
    """
    root = Path(directory)
    if not root.is_dir():
        raise UsageError(
            f"no such directory: {root}. Name the -o directory of a 'warmfit record' run."
        )
    logs = find_logs(root)
    if not logs:
        has_trace = any(root.rglob("*.parquet"))
        hint = (
            f"it already holds a trace: run 'warmfit replay {root}'."
            if has_trace
            else "name the -o directory of a 'warmfit record' run that was killed."
        )
        raise UsageError(f"{root} holds no write-ahead logs (*.arrows) to recover; {hint}")
    return compact_logs(logs, {"warmfit.recovered": "true"}, progress)


def recover(directory: str | os.PathLike[str]) -> list[Compaction]:
    """Compact every log a killed recording left under ``directory``.

    Raises :class:`UsageError` when the directory does not exist or holds no
    log (a finished recording has none: it is already a trace), and, after
    compacting every other log, when some log could not be compacted.
    """
    recovery = recover_all(directory)
    recovery.raise_problems(directory)
    return recovery.compactions
