"""The recorder's write-ahead log, its compaction into Parquet, and recovery.

Each rank appends its readings to ``DIR/run=<run>/rank=<r>/readings.arrows``,
an Arrow IPC stream: a schema, then one record batch per flush. The guarantees
(``docs/reference/recorder.md`` states them for users):

- **Only warmfit's own logs.** A log is named ``readings.arrows`` and its
  schema metadata carries :data:`LOG_MARKER`. Anything else (another Arrow
  file, a log whose schema is damaged) is never compacted or removed.
- **One writer per log.** The writer creates the log under a temporary name,
  takes an exclusive ``flock`` on it, writes the schema and only then links it
  to its real name, so a second writer fails at creation and
  :func:`compact_log` refuses a log whose lock is held ("still being written
  by pid N", the pid from the log's metadata).
- **A failed append leaves no torn bytes.** Each batch is serialized first
  and written at the end of the last good batch, then fsynced; if that fails
  the file is truncated back to the last good batch and the next append
  writes there again.
- **Every batch is checked before use.** :func:`read_log` validates each
  batch fully (``RecordBatch.validate(full=True)``) and stops at the first
  bad one. Bytes after the kept prefix are either a *torn tail* (the last
  message runs past the end of the file: a process killed while writing it)
  or *damage*. A log with damage is never removed.
- **Removed only when safe.** :func:`compact_log` writes the Parquet trace
  atomically (:func:`warmfit.format.trace.write_trace`), reads it back, validates it
  and compares it with the log, and only then removes the log.

This module needs pyarrow only, not torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from warmfit.errors import TraceError, UsageError
from warmfit.format.schema import (
    COLUMNS,
    ESTIMATE_COLUMN,
    PADDED_COLUMN,
    RESERVED_COLUMN,
    SUM_SQ_COLUMN,
    arrow_schema,
)
from warmfit.format.writer import write_trace
from warmfit.show.names import counted
from warmfit.show.progress import ProgressCallback, no_progress

LOG_NAME: Final = "readings.arrows"
TRACE_NAME: Final = "readings.parquet"
#: Beside a log: how many readings a recorder could not write (a full disk).
LOST_NAME: Final = "readings.lost"
#: Schema metadata that marks a write-ahead log as warmfit's own.
LOG_MARKER: Final = "warmfit.log"
LOG_VERSION: Final = "1"
#: Schema metadata naming the process that created the log.
PID_KEY: Final = "warmfit.pid"

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_CONTINUATION: Final = b"\xff\xff\xff\xff"
_END_OF_STREAM: Final = _CONTINUATION + b"\x00\x00\x00\x00"
_MAX_METADATA_BYTES: Final = 1 << 20  # far above any batch header the recorder writes
_MAX_BODY_BYTES: Final = 1 << 36

#: The columns of a reading tuple, in order (``run`` and ``rank`` are per log).
ROW_COLUMNS = tuple(c for c in COLUMNS if c not in ("run", "rank"))
#: Optional columns a log may carry after the v1 columns, in this order (each
#: reading tuple then ends with their values): the price the trainer used for the
#: wave (SPEC §8), the wave's tokens padding included and the sum of its squared
#: sequence lengths (the recorder writes these three in every log, and compaction
#: leaves each out of a trace where every reading's is null: :data:`DROPPED_WHEN_NULL`),
#: and the reserved pool's peak, from a meter that has one (docs/reference/recorder.md).
EXTRA_COLUMNS: Final[dict[str, pa.DataType]] = {
    ESTIMATE_COLUMN: pa.int64(),
    PADDED_COLUMN: pa.int64(),
    SUM_SQ_COLUMN: pa.int64(),
    RESERVED_COLUMN: pa.int64(),
}
#: The log's columns that compaction leaves out of a trace where every reading's is null.
DROPPED_WHEN_NULL: Final = (ESTIMATE_COLUMN, PADDED_COLUMN, SUM_SQ_COLUMN)


def log_schema(
    extra_columns: tuple[str, ...] = (), metadata: dict[str, str] | None = None
) -> pa.Schema:
    """The Arrow schema of a log: trace format v1's, then the given :data:`EXTRA_COLUMNS`."""
    base = arrow_schema(metadata)
    fields = list(base) + [pa.field(name, EXTRA_COLUMNS[name]) for name in extra_columns]
    return pa.schema(fields, metadata=base.metadata)


def _is_log_schema(schema: pa.Schema) -> bool:
    """Whether ``schema`` (without metadata) is a log's: v1's columns, then known extras."""
    extras = tuple(schema.names[len(COLUMNS) :])
    if len(set(extras)) != len(extras) or any(name not in EXTRA_COLUMNS for name in extras):
        return False
    ordered = tuple(name for name in EXTRA_COLUMNS if name in extras)
    return ordered == extras and schema.remove_metadata().equals(log_schema(extras))


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


class LogBusy(UsageError):
    """A log another live writer holds: recovering it would race the writer."""


def _lock(fd: int) -> bool:
    """Take the exclusive lock of an open log; False when another holder has it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def writer_pid(path: Path) -> str:
    """The pid recorded in a log's schema metadata, or ``"?"`` when unreadable."""
    try:
        with open(path, "rb") as f:
            schema = pa.ipc.open_stream(f).schema
        return _metadata(schema).get(PID_KEY, "?")
    except Exception:  # a damaged or foreign file: no pid to name
        return "?"


def is_busy(path: Path) -> bool:
    """Whether a live writer holds the lock of the log at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return not _lock(fd)
    finally:
        os.close(fd)  # closing the probe releases the lock it may have taken


def busy_message(path: Path) -> str:
    """Why a log cannot be touched: a live writer holds it."""
    pid = writer_pid(path)
    here = " (this process)" if pid == str(os.getpid()) else ""
    return (
        f"{path} is still being written by pid {pid}{here}: a recording is running. "
        "Let it finish (its close() compacts the log), or stop that process, then run "
        "'warmfit recover' again."
    )


# --------------------------------------------------------------------------- writing

#: Every open writer, so that a forked child can let go of their locks.
_OPEN_WRITERS: weakref.WeakSet[LogWriter] = weakref.WeakSet()


def _release_locks_in_child() -> None:
    """In a forked child, point each inherited log fd at /dev/null.

    An inherited descriptor shares the parent's lock; without this a worker
    process that outlives the trainer would keep a killed run's log "busy".
    The descriptor number stays valid, so the child's copy of the writer
    closes /dev/null, not somebody else's file.
    """
    writers = list(_OPEN_WRITERS)
    if not writers:
        return
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for writer in writers:
            if writer._fd >= 0:
                with contextlib.suppress(OSError):
                    os.dup2(null, writer._fd)
                writer._inherited = True
    finally:
        os.close(null)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_release_locks_in_child)


class LogWriter:
    """Appends batches of readings to one rank's Arrow IPC stream.

    Creating a writer creates the log (refusing one that exists, with
    :class:`UsageError`) and holds its lock until :meth:`release`. Each
    :meth:`append` writes one record batch and returns only once the bytes
    are in the operating system (and, with ``fsync``, on disk); when it
    fails, the file is cut back to its last complete batch and the error
    propagates, so the caller can try the same readings again.
    """

    def __init__(
        self,
        path: Path,
        run: str,
        rank: int,
        metadata: dict[str, str],
        fsync: bool = True,
        extra_columns: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.run = run
        self.rank = rank
        self.schema = log_schema(
            extra_columns, {**metadata, LOG_MARKER: LOG_VERSION, PID_KEY: str(os.getpid())}
        )
        self.fsync = fsync
        self.readings = 0
        self._inherited = False
        self._torn = False
        self._fd = -1
        self._types = [self.schema.field(name).type for name in (*ROW_COLUMNS, *extra_columns)]
        path.parent.mkdir(parents=True, exist_ok=True)
        header = self.schema.serialize()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(self):x}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh file: nobody else can hold it
            _write_all(fd, header, 0)
            if fsync:
                os.fsync(fd)
            try:
                os.link(tmp, path)  # the log appears with its schema and its lock
            except FileExistsError:
                raise UsageError(_taken_message(path)) from None
        except BaseException:
            os.close(fd)
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._fd = fd
        self.size = header.size  # the end of the last complete batch
        _OPEN_WRITERS.add(self)

    def append(self, rows: list[tuple[Any, ...]]) -> list[tuple[tuple[Any, ...], str]]:
        """Write reading tuples (in :data:`ROW_COLUMNS` order, then the extras) as one batch.

        A reading the log's columns cannot hold (a value beyond int64, a wrong type) does
        not cost the others: it is left out, and returned with why; every other reading
        is written. A failed write raises (the file cut back to its last batch).
        """
        if not rows:
            return []
        try:
            batch = self._batch(rows)
        except _UNCONVERTIBLE:  # find the readings at fault, one by one
            kept: list[tuple[Any, ...]] = []
            refused: list[tuple[tuple[Any, ...], str]] = []
            for row in rows:
                try:
                    self._batch([row])
                except _UNCONVERTIBLE as exc:
                    refused.append((row, f"{type(exc).__name__}: {exc}"))
                else:
                    kept.append(row)
            if kept:
                self._write(self._batch(kept).serialize())
                self.readings += len(kept)
            return refused
        self._write(batch.serialize())
        self.readings += len(rows)
        return []

    def _batch(self, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        count = len(rows)
        columns = list(zip(*rows, strict=True))
        arrays = [
            pa.repeat(pa.scalar(self.run, pa.string()), count),
            pa.repeat(pa.scalar(self.rank, pa.int32()), count),
        ]
        arrays += [
            pa.array(values, type=dtype) for values, dtype in zip(columns, self._types, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _write(self, data: pa.Buffer | bytes) -> None:
        if self._fd < 0:
            raise OSError(f"the log {self.path} is closed")
        if self._torn:  # an earlier failure could not cut the file back: try again first
            self._cut_back()
        try:
            _write_all(self._fd, data, self.size)
            if self.fsync:
                os.fsync(self._fd)
        except BaseException:
            self._torn = True
            with contextlib.suppress(OSError):
                self._cut_back()
            raise
        self.size += len(data)

    def _cut_back(self) -> None:
        """Truncate the log to its last complete batch."""
        os.ftruncate(self._fd, self.size)
        self._torn = False

    def finish(self) -> None:
        """Write the end-of-stream marker (a log reads the same without it)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):  # a full disk: the batches are what matter
                self._write(_END_OF_STREAM)

    @property
    def fd(self) -> int:
        """The open, locked descriptor of the log (-1 once released)."""
        return self._fd

    def discard(self) -> None:
        """Remove a log that holds no reading, and the directories left empty."""
        if self._fd < 0 or self._inherited:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.release()
        for directory in (self.path.parent, self.path.parent.parent):
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when empty

    def release(self) -> None:
        """Close the log, which releases its lock."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            _OPEN_WRITERS.discard(self)
            os.close(fd)

    close = release

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


#: What converting a reading the log's columns cannot hold raises (pyarrow's errors
#: derive from these: ArrowInvalid is a ValueError, ArrowTypeError a TypeError).
_UNCONVERTIBLE: Final = (OverflowError, TypeError, ValueError)


def _taken_message(path: Path) -> str:
    if is_busy(path):
        pid = writer_pid(path)
        who = "another Recorder in this process" if pid == str(os.getpid()) else f"pid {pid}"
        return (
            f"{path} is already being written by {who}: one recorder per rank. Give each "
            "process its own rank (torchrun sets RANK; or pass rank= to Recorder), or "
            "record it under another run label."
        )
    return (
        f"{path} already exists: a recording that was killed left it. Run "
        f"'warmfit recover {path.parent.parent.parent}' first, or record under another "
        "run label."
    )


def _write_all(fd: int, data: pa.Buffer | bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        offset += written
        view = view[written:]


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class LogContents:
    """What a write-ahead log holds: its valid prefix, and what follows it.

    ``ours`` is False when the file does not show itself to be a warmfit log
    (an unreadable schema, no :data:`LOG_MARKER`, other columns): such a file
    is never compacted or removed. ``torn`` says the bytes after the prefix
    are one message cut off by the end of the file (a process killed while
    writing it); any other ``problem`` is damage. ``complete`` is True when
    the log can be removed once its prefix is safely in a trace.
    """

    path: Path
    table: pa.Table | None  # None when not even one batch was complete
    batches: int
    readings: int
    kept_bytes: int
    dropped_bytes: int
    problem: str | None  # why reading stopped before the end, when it did
    ours: bool = True
    torn: bool = False
    batch_rows: tuple[int, ...] = field(default=(), repr=False)
    batch_ends: tuple[int, ...] = field(default=(), repr=False)  # byte offset after each

    @property
    def complete(self) -> bool:
        """Every byte was read, or only a torn last message was not."""
        return self.ours and (self.problem is None or self.torn)


def read_log(path: Path, data: bytes | None = None) -> LogContents:
    """Read the valid batches of a log; what follows them is measured and classified."""
    if data is None:
        data = path.read_bytes()
    source = pa.BufferReader(data)

    def refused(why: str) -> LogContents:
        return LogContents(path, None, 0, 0, 0, len(data), why, ours=False)

    if not data:
        return refused("the file is empty, so it cannot be shown to be a warmfit log")
    try:
        reader = pa.ipc.open_stream(source)
        schema = reader.schema
    except Exception as exc:  # pyarrow raises several kinds for damaged input
        torn = _torn_tail(data, 0)
        why = "ends inside its schema" if torn else f"has a schema that cannot be read ({exc})"
        return refused(f"the file {why}, so it cannot be shown to be a warmfit log")
    meta = _metadata(schema)
    if meta.get(LOG_MARKER) != LOG_VERSION:
        return refused(
            f"its schema carries no '{LOG_MARKER}: {LOG_VERSION}' marker: it is not a log "
            "this warmfit wrote (another program's Arrow file, or a log whose schema is damaged)"
        )
    if not _is_log_schema(schema):
        return refused("its columns are not those of a warmfit log (its schema is damaged)")
    batches: list[pa.RecordBatch] = []
    ends: list[int] = []
    kept = source.tell()
    problem: str | None = None
    torn = False
    while True:
        try:
            batch = reader.read_next_batch()
            batch.validate(full=True)
        except StopIteration:  # the end-of-stream marker, or the end of the file
            if source.tell() < len(data):
                problem = f"{len(data) - source.tell():,} bytes follow its end-of-stream marker"
                kept = source.tell()
            else:
                kept = len(data)
            break
        except Exception as exc:
            torn = _torn_tail(data, kept)
            problem = (
                "its last batch is cut off (a process killed while writing it)"
                if torn
                else f"batch {len(batches)} is damaged ({type(exc).__name__}: {exc})"
            )
            break
        batches.append(batch)
        kept = source.tell()
        ends.append(kept)
    table = pa.Table.from_batches(batches, schema=schema) if batches else None
    readings = table.num_rows if table is not None else 0
    return LogContents(
        path,
        table,
        len(batches),
        readings,
        kept,
        len(data) - kept,
        problem,
        torn=torn,
        batch_rows=tuple(b.num_rows for b in batches),
        batch_ends=tuple(ends),
    )


def _torn_tail(data: bytes, offset: int) -> bool:
    """Whether ``data[offset:]`` is one IPC message cut off by the end of the file.

    That is what a process killed while appending leaves. The message's own
    length fields are read (its framing, then ``bodyLength`` from the
    flatbuffer header) and must be plausible and run past the end of the file;
    anything else is damage.
    """
    rest = data[offset:]
    if not rest.strip(b"\x00"):  # zeros a crash left in place of unwritten data
        return True
    if len(rest) < 8:
        return _CONTINUATION.startswith(rest[:4])
    if rest[:4] != _CONTINUATION:
        return False
    (metadata_size,) = struct.unpack_from("<i", rest, 4)
    if not 0 < metadata_size <= _MAX_METADATA_BYTES:
        return False
    if 8 + metadata_size > len(rest):
        return True
    body = _body_length(rest[8 : 8 + metadata_size])
    if body is None or not 0 <= body <= _MAX_BODY_BYTES:
        return False
    return 8 + metadata_size + body > len(rest)


def _body_length(header: bytes) -> int | None:
    """``Message.bodyLength`` of a flatbuffer IPC message header, or None if malformed."""

    def at(fmt: str, offset: int) -> int:
        if not 0 <= offset <= len(header) - struct.calcsize(fmt):
            raise struct.error("outside the header")
        return int(struct.unpack_from(fmt, header, offset)[0])

    try:
        table = at("<I", 0)
        vtable = table - at("<i", table)
        vtable_size = at("<H", vtable)
        if vtable_size < 12:  # bodyLength is field 3, whose slot is at byte 10: absent
            return 0
        slot = at("<H", vtable + 10)
        return at("<q", table + slot) if slot else 0
    except struct.error:
        return None


def _metadata(schema: pa.Schema) -> dict[str, str]:
    return {
        k.decode(errors="replace"): v.decode(errors="replace")
        for k, v in (schema.metadata or {}).items()
    }


# --------------------------------------------------------------------------- compaction


@dataclass(frozen=True)
class Compaction:
    """What turning one log into Parquet did.

    ``problem`` is set when the log was kept: its readable prefix may be in
    ``trace``, but the rest could not be read, so the log stays for a person.
    """

    log: Path
    trace: Path | None  # the Parquet file written, or None when nothing was kept
    readings: int
    batches: int
    dropped_bytes: int
    note: str
    problem: str | None = None
    lost_readings: int = 0  # readings the recorder could not write (readings.lost)

    @property
    def readings_per_batch(self) -> float:
        """The mean readings per complete batch (a cut-off batch held about this many)."""
        return self.readings / self.batches if self.batches else 0.0


def compact_log(
    path: Path, extra_metadata: dict[str, str] | None = None, *, held_fd: int | None = None
) -> Compaction:
    """Turn one write-ahead log into ``readings.parquet`` beside it, then remove it.

    Takes the log's lock first (``held_fd``: a descriptor of the log whose
    lock the caller already holds) and raises :class:`LogBusy` when a live
    writer has it. Raises :class:`UsageError` for a file that is not a
    warmfit log, or whose readings cannot be put anywhere; the file is left
    alone. Otherwise writes every valid batch into the trace (atomically),
    reads the trace back, validates it and compares it with the log, and only
    then removes the log. A log with damage after its valid prefix is kept,
    and the returned :class:`Compaction` names the problem.
    """
    if held_fd is not None:
        return _compact_locked(path, held_fd, extra_metadata)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Compaction(path, None, 0, 0, 0, "gone: another process compacted it")
    try:
        if not _lock(fd):
            raise LogBusy(busy_message(path))
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if not same:  # compacted and removed while this process waited to open it
            return Compaction(path, None, 0, 0, 0, "gone: another process compacted it")
        return _compact_locked(path, fd, extra_metadata)
    finally:
        os.close(fd)


def _read_fd(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _compact_locked(path: Path, fd: int, extra_metadata: dict[str, str] | None) -> Compaction:
    target = path.with_name(TRACE_NAME)
    _remove_stale_temporaries(path.parent)
    contents = read_log(path, _read_fd(fd))
    if not contents.ours:
        raise UsageError(
            f"not recovered, left untouched: {contents.problem}. If it is a warmfit log, "
            "keep it for a person; otherwise move it out of the recording."
        )
    lost = _lost_readings(path)
    if target.exists():
        return _beside_existing_trace(path, target, contents, lost)
    if contents.table is None:
        if not contents.complete:
            raise UsageError(
                f"no batch of the log can be read: {contents.problem}; the log is kept."
            )
        _remove_log(path)
        why = contents.problem or "the recorder wrote no batch"
        return Compaction(
            path, None, 0, 0, contents.dropped_bytes, f"nothing kept: {why}", lost_readings=lost
        )
    table, batches, problem = contents.table, contents.batches, contents.problem
    complete = contents.complete
    # No wave priced: no estimate_bytes, so that the trace replays without a `recorded`
    # row; no wave described: no padded_tokens or sum_sq_tokens, a trace as before them.
    empty = [
        name
        for name in DROPPED_WHEN_NULL
        if name in table.column_names and table.column(name).null_count == len(table)
    ]
    if empty:
        table = table.drop_columns(empty)
    metadata = {k: v for k, v in _metadata(table.schema).items() if k not in (LOG_MARKER, PID_KEY)}
    if contents.dropped_bytes:
        metadata["warmfit.recovered_dropped_bytes"] = str(contents.dropped_bytes)
    if lost:
        metadata["warmfit.readings_lost"] = str(lost)
    metadata.update(extra_metadata or {})
    try:  # the trace did not exist: whatever goes wrong, leave none behind
        while True:
            write_trace(table, target, metadata)
            bad = _check_written(target, table)
            if bad is None:
                break
            # Valid Arrow, but values that break the format: the damage is in the
            # batch holding the offending row. Keep the batches before it, and the log.
            complete = False
            row, why = bad
            batches = min(_batches_before(contents.batch_rows, row), batches - 1)
            problem = f"batch {batches} holds values that break the trace format ({why})"
            if batches == 0:
                raise UsageError(f"no batch of the log can be kept: {problem}; the log is kept.")
            table = table.slice(0, sum(contents.batch_rows[:batches]))
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    size = contents.kept_bytes + contents.dropped_bytes
    dropped = (
        contents.dropped_bytes
        if batches == contents.batches
        else (size - contents.batch_ends[batches - 1])
    )
    if not complete:
        return Compaction(
            path,
            target,
            table.num_rows,
            batches,
            dropped,
            "readable prefix kept; the log is kept",
            problem=f"{problem}. The readable batches before it are in {target}; the log "
            "is kept, untouched, for a person to look at",
            lost_readings=lost,
        )
    _remove_log(path)
    note = "complete" if problem is None else problem
    return Compaction(path, target, table.num_rows, batches, dropped, note, lost_readings=lost)


def _batches_before(batch_rows: tuple[int, ...], row: int) -> int:
    total = 0
    for index, rows in enumerate(batch_rows):
        total += rows
        if row < total:
            return index
    return len(batch_rows)


def _check_written(target: Path, table: pa.Table) -> tuple[int, str] | None:
    """Read the trace back: None when it validates and holds exactly ``table``.

    Otherwise the first row that breaks a rule of the format (0 when the
    rule spans rows), and why. A file that validates but holds other
    readings (the disk returned other bytes) raises :class:`OSError`.
    """
    import polars as pl  # at compaction, never when a trainer imports the recorder

    from warmfit.format.trace import read_trace

    names = list(table.column_names)  # the v1 columns and the log's extras
    try:
        back = read_trace([target]).select(names)
    except TraceError as exc:
        return (exc.row if exc.row is not None else 0), str(exc)
    # without the log's schema metadata: polars refuses metadata that is not UTF-8
    expected = pl.from_arrow(table.select(names).replace_schema_metadata(None))
    assert isinstance(expected, pl.DataFrame)
    # read_trace returns readings sorted by seq; a log holds them as they came
    if not back.equals(expected) and not back.equals(
        expected.sort(["run", "rank", "seq"], maintain_order=True)
    ):
        raise OSError(f"{target} does not read back as the readings written to it")
    return None


def _beside_existing_trace(
    path: Path, target: Path, contents: LogContents, lost: int
) -> Compaction:
    """A log beside a trace: removed only when the trace holds every reading of it."""
    import pyarrow.parquet as pq

    try:
        have = pq.read_table(target)
    except Exception as exc:  # a damaged trace: keep both
        raise UsageError(
            f"{target} exists beside the log but cannot be read ({exc}); move it away and "
            "run 'warmfit recover' again."
        ) from None
    readings = contents.table.select(list(COLUMNS)) if contents.table is not None else None
    if set(COLUMNS) <= set(have.column_names):
        have = have.select(list(COLUMNS))
        holds = (readings is None and have.num_rows == 0) or (
            readings is not None and have.equals(readings)
        )
    else:
        holds = False
    prefix = (  # an earlier recovery kept the batches before damage
        not holds
        and readings is not None
        and 0 < have.num_rows < readings.num_rows
        and have.equals(readings.slice(0, have.num_rows))
    )
    if prefix:
        assert readings is not None
        return Compaction(
            path,
            target,
            have.num_rows,
            0,
            0,
            "readable prefix already in the trace; the log is kept",
            problem=f"{target} holds the first {have.num_rows:,} of the log's "
            f"{readings.num_rows:,} readings; the others break the trace format or "
            "cannot be read (an earlier 'warmfit recover' said which). The log is kept, "
            "untouched, for a person to look at",
            lost_readings=lost,
        )
    if not holds:
        raise UsageError(
            f"{target} exists beside the log and does not hold the log's readings "
            f"({have.num_rows:,} in the trace, {contents.readings:,} in the log); both are "
            "kept. Move one of them away and run 'warmfit recover' again."
        )
    if not contents.complete:
        return Compaction(
            path,
            target,
            contents.readings,
            contents.batches,
            0,
            "readable prefix already in the trace; the log is kept",
            problem=f"{contents.problem}. The readable batches are in {target}; the log "
            "is kept, untouched, for a person to look at",
            lost_readings=lost,
        )
    _remove_log(path)
    return Compaction(
        path,
        target,
        contents.readings,
        contents.batches,
        0,
        "already compacted",
        lost_readings=lost,
    )


def _lost_readings(log: Path) -> int:
    """The count a recorder left in ``readings.lost`` beside the log (0 when none)."""
    try:
        text = log.with_name(LOST_NAME).read_text()
    except (OSError, UnicodeDecodeError):
        return 0
    match = re.fullmatch(r"warmfit lost readings: (\d+)\n?", text)
    return int(match.group(1)) if match else 0


def write_lost_readings(log: Path, lost: int) -> None:
    """Leave the count of readings a recorder could not write beside its log."""
    with open(log.with_name(LOST_NAME), "w") as f:
        f.write(f"warmfit lost readings: {lost}\n")


def _remove_log(path: Path) -> None:
    """Remove a compacted log (and its lost-readings note), durably."""
    path.unlink()
    if _lost_readings(path):
        path.with_name(LOST_NAME).unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _remove_stale_temporaries(directory: Path) -> None:
    """Remove what a compaction killed part-way left: ``.readings.parquet.*.tmp``.

    Called with the log's lock held, so no compaction of this log is running.
    """
    for stale in directory.glob(f".{TRACE_NAME}.*.tmp"):
        with contextlib.suppress(OSError):
            if stale.is_file() and not stale.is_symlink():
                stale.unlink()


def _remove_unborn_logs(root: Path) -> None:
    """Remove what a recorder killed while creating its log left: ``.readings.arrows.*.tmp``
    that no live process holds (its creator keeps it locked until it is the log), then
    the rank and run directories left empty, so that a recording that never wrote is
    not taken for one."""
    for stale in list(root.rglob(f".{LOG_NAME}.*.tmp")):
        if stale.is_symlink() or not stale.is_file():
            continue
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not _lock(fd):
                continue  # its recorder is alive, creating the log now
            with contextlib.suppress(OSError):
                stale.unlink()
        finally:
            os.close(fd)
        for directory in (stale.parent, stale.parent.parent):
            if directory == root:
                break
            with contextlib.suppress(OSError):
                directory.rmdir()  # only when empty


def find_logs(directory: str | os.PathLike[str]) -> list[Path]:
    """Every write-ahead log (``readings.arrows``) under ``directory``, sorted."""
    return sorted(p for p in Path(directory).rglob(LOG_NAME) if p.is_file() and not p.is_symlink())


def lost_notes(directory: str | os.PathLike[str]) -> dict[Path, int]:
    """Lost-readings notes under ``directory``: the rank directory and the count."""
    notes = {}
    for note in Path(directory).rglob(LOST_NAME):
        count = _lost_readings(note.with_name(LOG_NAME))
        if count:
            notes[note.parent] = count
    return notes


@dataclass(frozen=True)
class Recovery:
    """What compacting several logs did: the logs compacted, and those that failed."""

    compactions: list[Compaction]
    problems: list[str]  # one line per log that could not be compacted, naming it
    busy: list[str] = field(default_factory=list)  # logs a live writer still holds

    @property
    def lost_readings(self) -> int:
        """Readings the recorders said they could not write (a full disk)."""
        return sum(c.lost_readings for c in self.compactions)

    def raise_problems(self, directory: str | os.PathLike[str]) -> None:
        """Raise one :class:`UsageError` listing every problem, if there was any."""
        if self.problems:
            raise UsageError(
                f"{counted(len(self.problems), 'log')} could not be recovered completely (every "
                "other log was): "
                + "; ".join(problem.rstrip(".") for problem in self.problems)
                + f". Fix each, then run 'warmfit recover {directory}' again; it handles "
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
    busy: list[str] = []
    progress(0, len(logs))
    for done, log in enumerate(logs, 1):
        try:
            compaction = compact_log(log, extra_metadata)
        except LogBusy as exc:
            busy.append(str(exc))
            problems.append(str(exc))
        except UsageError as exc:  # its message already says what to do
            problems.append(f"{log}: {exc}")
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # reported per log, with the path (polars panics too)
            problems.append(
                f"{log}: {type(exc).__name__}: {exc} (check the disk and the file's "
                "permissions; the log is left in place)"
            )
        else:
            compactions.append(compaction)
            if compaction.problem is not None:
                problems.append(f"{log}: {compaction.problem}")
        progress(done, len(logs))
    return Recovery(compactions, problems, busy)


def holds_recording(directory: Path) -> bool:
    """Whether ``directory`` holds a recording: a trace, or a ``run=*/rank=*`` directory."""
    return any(directory.rglob("*.parquet")) or any(directory.glob("**/run=*/rank=*"))


def recover_all(
    directory: str | os.PathLike[str], progress: ProgressCallback = no_progress
) -> Recovery:
    """Compact every log a killed recording left under ``directory``, reporting failures.

    Raises :class:`UsageError` when the directory does not exist, or holds
    neither a log nor a recording. A directory that holds a recording and no
    log has nothing to recover: the result is empty. A log that cannot be
    compacted is listed in :attr:`Recovery.problems`, after every other log
    has been compacted.
    """
    root = Path(directory)
    if not root.is_dir():
        what = "is a file, not a directory" if root.exists() else "no such directory"
        raise UsageError(f"{what}: {root}. Name the -o directory of a 'warmfit record' run.")
    _remove_unborn_logs(root)
    logs = find_logs(root)
    if not logs and not holds_recording(root):
        raise UsageError(
            f"{root} holds no write-ahead logs ({LOG_NAME}) to recover and no recording; "
            "name the -o directory of a 'warmfit record' run that was killed."
        )
    return compact_logs(logs, {"warmfit.recovered": "true"}, progress)


def recover(directory: str | os.PathLike[str]) -> list[Compaction]:
    """Compact every log a killed recording left under ``directory``.

    Raises :class:`UsageError` when the directory does not exist or holds
    neither a log nor a recording, and, after compacting every other log,
    when some log could not be compacted completely. A recording without logs
    gives an empty list: there is nothing to recover.
    """
    recovery = recover_all(directory)
    recovery.raise_problems(directory)
    return recovery.compactions
