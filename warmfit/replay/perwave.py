"""The ``--per-wave`` file: one row per wave and policy, as Parquet or CSV by its suffix.

Rows arrive batch by batch (:func:`warmfit.replay.stream.replay_stream`) and
are appended to one open sink, so the file is never held in memory whole; the
command writes the sink through :func:`warmfit.format.files.write_atomically`, so a
failed replay leaves no partial file. Parquet files carry the key-value
metadata ``warmfit.per_wave = "1"`` (and page checksums), which tells a
reader it is a replay's output, not a trace.

A batch's rows are made ready for the file where the batch is replayed (by
a :class:`PartEncoder`, in a worker): CSV rows are encoded there; Parquet
rows are cast there to the file's Arrow schema, and one pyarrow
``ParquetWriter`` in the command encodes them, a row group a batch, in a
thread of its own (:class:`_ParquetInThread`), so that encoding a batch
overlaps receiving the next ones. One writer writes the whole file: its
footer is pyarrow's own, as any reader expects it.

A worker process of this machine leaves its batch's Parquet rows in a
temporary folder of the writer's, as an Arrow IPC file (:class:`ArrowFile`,
about 50 MB a batch of 333k rows), which the writer's thread reads and
removes: sent through the pool's pipe as a pickled table, the same rows cost
the worker and the command about 0.1 s of CPU each, as much as encoding
them. A cluster's workers, which do not share the folder, send the table.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import shutil
import tempfile
import threading
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from warmfit.errors import UsageError, no_room
from warmfit.format.schema import PER_WAVE_KEY
from warmfit.replay.semantics import PER_WAVE_SCHEMA

#: Suffixes ``--per-wave`` understands, and the format each names.
PER_WAVE_FORMATS = {".parquet": "parquet", ".csv": "csv"}

#: Batches' rows that wait for the Parquet writer's thread, beside the one it
#: encodes: the replay goes on while they wait, and waits when they are this
#: many (a table is about 50 MB at the default batch size; an Arrow file waits
#: on disk).
QUEUED = 1


def per_wave_format(path: Path) -> str:
    """The format the suffix of ``path`` names; exit 2 for any other suffix."""
    fmt = PER_WAVE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"--per-wave {path}: the suffix {path.suffix or '(none)'!r} names no format "
            "warmfit writes; end the name in .parquet or .csv."
        )
    return fmt


@dataclass(frozen=True)
class PartEncoder:
    """How a batch's per-wave rows are made ready for the file where they are made
    (in a worker): the format, and whether the rows carry ``admitted`` (``--budget``)."""

    fmt: str
    admitted: bool = False
    #: Where Parquet rows go as an Arrow file (:class:`ArrowFile`), for a worker
    #: of this machine (:meth:`PerWaveWriter.spooling`); None: they go as a table.
    folder: str | None = None

    def empty(self) -> pl.DataFrame:
        """No rows, with the file's columns."""
        extra = {"admitted": pl.Boolean()} if self.admitted else {}
        return pl.DataFrame(schema={**PER_WAVE_SCHEMA, **extra})

    def encode(self, frame: pl.DataFrame) -> bytes | ArrowFile | Any:
        """A batch's part of the file: CSV rows without the header (bytes), or for
        Parquet the rows in the file's schema (:attr:`schema`), which the command's
        writer encodes: a ``pyarrow.Table``, or with a :attr:`folder` an
        :class:`ArrowFile` there."""
        if self.fmt == "csv":
            buffer = io.BytesIO()
            frame.write_csv(buffer, include_header=False)
            return buffer.getvalue()
        table = frame.to_arrow().cast(self.schema)
        return table if self.folder is None else _spool(table, self.folder)

    @cached_property
    def schema(self) -> Any:
        """The Parquet file's Arrow schema, marked as per-wave: the same for every part."""
        return self.empty().to_arrow().schema.with_metadata({PER_WAVE_KEY: "1"})


@dataclass(frozen=True)
class ArrowFile:
    """A batch's Parquet rows as an Arrow IPC file in the writer's temporary folder,
    left by a worker; the writer's thread reads and removes it."""

    path: str


def _spool(table: Any, folder: str) -> ArrowFile:
    """Write ``table`` to a new Arrow IPC file in ``folder`` (in a worker)."""
    import pyarrow as pa

    try:
        fd, path = tempfile.mkstemp(suffix=".arrow", dir=folder)
        os.close(fd)
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as file:
            file.write_table(table)
    except OSError as exc:
        raise _no_room(folder, exc) from None
    return ArrowFile(path)


def _no_room(folder: str, exc: OSError) -> UsageError:
    """A failure to write the per-wave rows' temporary files, as exit 2 naming the folder."""
    return no_room(
        "the per-wave rows' temporary files",
        folder,
        exc,
        "Free space there, or point TMPDIR at a folder with room (about 50 MB a batch, "
        "for a few batches at a time).",
    )


class PerWaveWriter:
    """Append per-wave rows to an open binary sink in one format, as frames
    (:meth:`write`) or as parts a worker made with :attr:`encoder` (:meth:`append`).

    Use it as a context manager, or call :meth:`close` when every row is in and
    :meth:`abandon` when the file will not be finished: a Parquet writer has a
    thread to stop, and must let go of the sink before the sink is closed.
    """

    def __init__(self, sink: BinaryIO, fmt: str, admitted: bool = False) -> None:
        self.sink = sink
        self.fmt = fmt
        self.encoder = PartEncoder(fmt, admitted)
        self._parquet = _ParquetInThread(sink, self.encoder.schema) if fmt == "parquet" else None
        self._started = False
        #: The temporary folder of :meth:`spooling`, removed by close and abandon.
        self._folder: str | None = None

    def __enter__(self) -> PerWaveWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None:
            self.abandon()
            return
        try:
            self.close()
        except BaseException:
            self.abandon()
            raise

    def spooling(self) -> PartEncoder:
        """The encoder for worker processes of this machine: Parquet rows come back as
        :class:`ArrowFile` parts in a temporary folder (in ``TMPDIR``) that
        :meth:`close` and :meth:`abandon` remove. CSV rows come back as they are."""
        if self._parquet is None:
            return self.encoder
        if self._folder is None:
            try:
                self._folder = tempfile.mkdtemp(prefix="warmfit-per-wave-")
            except OSError as exc:
                raise _no_room(tempfile.gettempdir(), exc) from None
        return replace(self.encoder, folder=self._folder)

    def write(self, frame: pl.DataFrame) -> None:
        """Append rows (:data:`~warmfit.replay.semantics.PER_WAVE_SCHEMA`)."""
        self.append(self.encoder.encode(frame))

    def append(self, part: bytes | Any) -> None:
        """Append a part (:meth:`PartEncoder.encode` of this writer's :attr:`encoder`,
        or of :meth:`spooling`'s)."""
        if self._parquet is not None:
            self._parquet.put(part)
        else:
            if not self._started:
                self.sink.write(self._header())
            self.sink.write(part)
        self._started = True

    def close(self) -> None:
        """Finish the file (a file of no rows still has the header or schema): once
        the writer's thread has written every part, and raising its error if it failed."""
        if not self._started:
            self.write(self.encoder.empty())
        if self._parquet is not None:
            self._parquet.close()
        self._remove_folder()

    def abandon(self) -> None:
        """Let go of a file that will not be finished (the replay failed): the parts
        still queued are dropped, the thread ends, and the Parquet writer is closed
        now, while its sink is open, with any error of it dropped."""
        if self._parquet is not None:
            self._parquet.abandon()
        self._remove_folder()

    def _remove_folder(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _header(self) -> bytes:
        buffer = io.BytesIO()
        self.encoder.empty().write_csv(buffer)
        return buffer.getvalue()


#: What tells the writer's thread that no part follows.
_END = object()


class _ParquetInThread:
    """One pyarrow ``ParquetWriter`` on ``sink``, fed Arrow tables (or :class:`ArrowFile`
    parts, read and removed here) in order through a queue of :data:`QUEUED`, and run
    by a thread of its own (pyarrow reads and encodes without the GIL). A row group
    a part; zstd, page checksums, dictionaries for the string columns only (the
    integer columns' values are nearly all distinct; their dictionaries made the
    encoding a third slower and the file 65 % larger)."""

    def __init__(self, sink: BinaryIO, schema: Any) -> None:
        import pyarrow.parquet as pq

        strings = [field.name for field in schema if field.type in ("string", "large_string")]
        self._writer = pq.ParquetWriter(
            sink, schema, compression="zstd", write_page_checksum=True, use_dictionary=strings
        )
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUED)
        #: The thread's failure (a full disk), raised by the next :meth:`put` or :meth:`close`.
        self._error: BaseException | None = None
        #: Set by :meth:`abandon`: the parts still queued are not written.
        self._dropping = False
        self._thread = threading.Thread(target=self._run, name="warmfit-per-wave", daemon=True)
        self._thread.start()

    def put(self, part: Any) -> None:
        """Queue a part (waits while the queue is full); raise the thread's failure."""
        self._raise()
        self._queue.put(part)

    def close(self) -> None:
        """Wait for every queued part to be written, then write the footer."""
        self._finish()
        self._raise()
        self._writer.close()

    def abandon(self) -> None:
        """Drop the parts still queued, end the thread and close the writer quietly."""
        self._dropping = True
        self._finish()
        with contextlib.suppress(Exception):
            self._writer.close()

    def _finish(self) -> None:
        if self._thread.is_alive():
            self._queue.put(_END)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        # After a failure the thread goes on taking parts (and drops them), so that
        # put() never waits for a thread that has stopped.
        while (part := self._queue.get()) is not _END:
            if self._error is None and not self._dropping:
                try:
                    self._writer.write_table(_read(part) if isinstance(part, ArrowFile) else part)
                except BaseException as exc:  # raised in the replay's thread
                    self._error = exc
            if isinstance(part, ArrowFile):
                with contextlib.suppress(OSError):
                    os.unlink(part.path)


def _read(part: ArrowFile) -> Any:
    """The table of an :class:`ArrowFile`, read into memory."""
    import pyarrow as pa

    with pa.OSFile(part.path) as source:
        return pa.ipc.open_file(source).read_all()
