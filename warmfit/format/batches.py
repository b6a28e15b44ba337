"""A trace as batches of whole ``(run, rank)`` streams, for a replay of any size.

Every ``(run, rank)`` stream replays alone (SPEC §3), so a trace larger than
memory replays a batch of streams at a time:

1. :func:`index_file` checks one file's footer (schema, required columns) and
   every page checksum, then reads only its ``run`` and ``rank`` columns to
   find where each stream's rows lie (runs of equal ``(run, rank)``: a
   recorder writes a stream's readings side by side, so a file usually holds
   a few long stretches);
2. :func:`plan` orders the streams canonically (run, rank) and groups them
   into :class:`Batch` es of about ``batch_readings`` readings;
3. :func:`read_batch` reads just the rows of a batch's streams, checks every
   rule of the format on them (:func:`warmfit.format.trace.conform`,
   :func:`warmfit.format.trace.canonical`: the rules that span rows span one
   stream at most) and returns them in canonical order, exactly as
   :func:`warmfit.format.trace.read_trace` would return those streams.

A stream is never split, so memory is bounded by the batch size or the longest
stream, whichever is larger. Errors name the file, column and row in the file,
as :func:`~warmfit.format.trace.read_trace` does. Everything here is plain data and
picklable, so batches can be read in worker processes or on a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from warmfit.errors import TraceError, UsageError
from warmfit.format.pagecrc import RowGroup
from warmfit.format.trace import (
    Canonical,
    canonical,
    check_file_schema,
    conform,
    find_trace_files,
    read_rows,
    row_groups,
    verify_pages,
    wanted_columns,
)
from warmfit.show.names import printable

#: Readings per batch when none is given (whole streams: at least one): about
#: 250 MB of engine memory per worker, and faster than larger batches (caches).
DEFAULT_BATCH_READINGS = 250_000
#: The environment variable that sets a replay's batch size (readings; the default
#: is :data:`DEFAULT_BATCH_READINGS`): smaller batches, less memory a worker.
BATCH_READINGS = "WARMFIT_BATCH_READINGS"


def default_batch_readings() -> int:
    """The batch size a replay uses when not given one: :data:`BATCH_READINGS` from
    the environment, else :data:`DEFAULT_BATCH_READINGS`."""
    text = os.environ.get(BATCH_READINGS, "").strip()
    if not text:
        return DEFAULT_BATCH_READINGS
    if not text.isdigit() or int(text) < 1:
        raise UsageError(
            f"{BATCH_READINGS} must be a whole number of readings, such as 100000; got {text!r}."
        )
    return int(text)


#: Parquet physical types (Thrift ``Type``): a string's, and each integer's width.
_BYTE_ARRAY = 6
_INTEGERS = {1: 4, 2: 8}

#: A stream's key: ``(run, rank)`` (None where the file holds a null; the rules
#: then report it when its batch is read).
StreamKey = tuple[str | None, int | None]


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of one file, all of one stream."""

    path: str
    start: int
    stop: int


@dataclass(frozen=True)
class FileIndex:
    """Where each stream's rows lie in one checked file."""

    path: str
    rows: int
    #: ``(run, rank, start, stop)`` per stretch of equal (run, rank), in file order.
    stretches: tuple[tuple[str | None, int | None, int, int], ...]
    #: Each row group: its first row, and what the footer says of it.
    groups: tuple[tuple[int, RowGroup], ...] = ()


@dataclass(frozen=True)
class Batch:
    """Whole streams to replay together, and the rows that hold them."""

    number: int
    streams: tuple[StreamKey, ...]
    segments: tuple[Segment, ...]
    readings: int
    #: Per file of the segments, the row groups its rows touch (as in
    #: :attr:`FileIndex.groups`): their pages are checked before they are read.
    groups: dict[str, tuple[tuple[int, RowGroup], ...]] = field(default_factory=dict)


def index_file(path: str | os.PathLike[str]) -> FileIndex:
    """Check one trace file's footer and find its streams' rows.

    A row group whose footer statistics give one ``run`` and one ``rank`` (as a
    recorder's do: it writes a stream's readings side by side) is one
    stretch, read from the footer alone; the ``run`` and ``rank`` of any other
    row group are read (after its pages' checksums). :func:`read_batch` checks
    the rest of the pages, and that the rows hold the streams planned.
    """
    path = Path(path)
    schema = check_file_schema(path)
    groups = row_groups(path)
    stretches: list[tuple[str | None, int | None, int, int]] = []
    starts: list[int] = []
    start = 0
    for group in groups:
        starts.append(start)
        key = _one_stream(group, schema)
        run = _one_run(group)
        if key is not None:
            found = [(*key, group.rows)]
        else:
            # one run (a file of one run's ranks): its ranks alone tell the stretches
            keys = ["run", "rank"] if run is None else ["rank"]
            verify_pages(path, [group.only(keys)])  # the batch checks the other columns
            found = _stretches(read_rows(path, keys, start, group.rows), run)
        for run, rank, length in found:
            if stretches and stretches[-1][:2] == (run, rank):  # continues across groups
                stretches[-1] = (run, rank, stretches[-1][2], start + length)
            elif length:
                stretches.append((run, rank, start, start + length))
            start += length
    return FileIndex(str(path), start, tuple(stretches), tuple(zip(starts, groups, strict=True)))


def _one_stream(group: RowGroup, schema: pa.Schema) -> StreamKey | None:
    """The one ``(run, rank)`` of a row group by its footer statistics, or None."""
    run, rank = _one_run(group), group.bounds.get("rank")
    if run is None or rank is None or rank[1] != rank[2] or rank[0] not in _INTEGERS:
        return None
    if not pa.types.is_signed_integer(schema.field("rank").type):
        return None  # an unsigned rank's bytes would need its width: read it instead
    if len(rank[1]) != _INTEGERS[rank[0]]:
        return None
    return run, int.from_bytes(rank[1], "little", signed=True)


def _one_run(group: RowGroup) -> str | None:
    """The one ``run`` of a row group by its footer statistics (no null), or None."""
    run = group.bounds.get("run")
    if run is None or run[1] != run[2] or run[0] != _BYTE_ARRAY:
        return None
    try:
        return run[1].decode()
    except UnicodeDecodeError:
        return None


def _stretches(
    frame: pl.DataFrame, run: str | None = None
) -> list[tuple[str | None, int | None, int]]:
    """The runs of equal ``(run, rank)`` of some rows: key and length, in row order;
    with ``run`` given (the rows' one run), ``frame`` holds only their ranks."""
    if run is not None:
        ranks = frame.select(pl.col("rank").cast(pl.Int64, strict=False).rle().struct.unnest())
        lengths = ranks.get_column("len").to_list()
        return [(run, rank, n) for rank, n in zip(ranks.get_column("value"), lengths, strict=True)]
    runs = frame.select(
        pl.struct(
            pl.col("run").cast(pl.String, strict=False),
            pl.col("rank").cast(pl.Int64, strict=False),
        )
        .rle()
        .struct.unnest()
    )
    lengths = runs.get_column("len").to_list()
    keys = runs.get_column("value").struct.unnest().rows()
    return [(run, rank, length) for (run, rank), length in zip(keys, lengths, strict=True)]


def _order(key: StreamKey) -> tuple[bool, str, bool, int]:
    run, rank = key
    return (run is None, run or "", rank is None, rank or 0)


def plan(indexes: Iterable[FileIndex], batch_readings: int = DEFAULT_BATCH_READINGS) -> list[Batch]:
    """Group every stream, in canonical order, into batches of about ``batch_readings``."""
    if batch_readings < 1:
        raise ValueError("batch_readings must be at least 1")
    segments: dict[StreamKey, list[Segment]] = {}
    groups: dict[str, tuple[tuple[int, RowGroup], ...]] = {}
    for index in indexes:
        groups[index.path] = index.groups
        for run, rank, start, stop in index.stretches:
            segments.setdefault((run, rank), []).append(Segment(index.path, start, stop))
    batches: list[Batch] = []
    streams: list[StreamKey] = []
    held: list[Segment] = []
    readings = 0
    for key in sorted(segments, key=_order):
        streams.append(key)
        held += segments[key]
        readings += sum(s.stop - s.start for s in segments[key])
        if readings >= batch_readings:
            batches.append(_batch(len(batches), streams, held, readings, groups))
            streams, held, readings = [], [], 0
    if streams:
        batches.append(_batch(len(batches), streams, held, readings, groups))
    return batches


def _batch(
    number: int,
    streams: list[StreamKey],
    held: list[Segment],
    readings: int,
    groups: dict[str, tuple[tuple[int, RowGroup], ...]],
) -> Batch:
    rows: dict[str, tuple[int, int]] = {}  # per file, the rows from the first to the last held
    for s in held:
        low, high = rows.get(s.path, (s.start, s.stop))
        rows[s.path] = (min(low, s.start), max(high, s.stop))
    touched = {path: _groups_within(groups[path], *span) for path, span in rows.items()}
    return Batch(number, tuple(streams), tuple(held), readings, touched)


def plan_trace(
    paths: Iterable[str | os.PathLike[str]], batch_readings: int = DEFAULT_BATCH_READINGS
) -> list[Batch]:
    """Index every file of a trace in this process and plan its batches."""
    return plan([index_file(f) for f in find_trace_files(paths)], batch_readings)


def read_batch(batch: Batch, columns: Sequence[str] = ()) -> pl.DataFrame:
    """The validated readings of a batch's streams, sorted by run, rank and seq.

    Loads replay's columns and ``columns``; raises :class:`TraceError` naming
    the file, column and row of the first broken rule.
    """
    return read_canonical(batch, columns).frame


class Tail:
    """The decoded rows of the row group where the previous read of a sequence of
    consecutive batches ended, for the next read, which starts in it.

    Batches are cut between streams, not between row groups, so two consecutive
    batches usually share a row group; a reader (a worker replaying a chain of
    batches, or this process replaying them in order) that passes one Tail to
    each :func:`read_canonical` decodes and checks that group once. Holds one
    row group's rows of one file.
    """

    def __init__(self) -> None:
        self._key: tuple[str, tuple[str, ...]] | None = None
        self._start = 0
        self._rows: pl.DataFrame | None = None

    def take(self, path: str, columns: tuple[str, ...], low: int, high: int) -> pl.DataFrame | None:
        """The held rows of ``[low, high)`` from ``low`` on, where the held group holds ``low``."""
        rows = self._rows
        if rows is None or self._key != (path, columns):
            return None
        if not self._start <= low < self._start + rows.height:
            return None
        return rows.slice(low - self._start, min(high, self._start + rows.height) - low)

    def keep(self, path: str, columns: tuple[str, ...], start: int, rows: pl.DataFrame) -> None:
        """Hold ``rows``, rows of ``path`` from row ``start`` to the end of a row group."""
        self._key, self._start, self._rows = (path, columns), start, rows


def read_canonical(
    batch: Batch, columns: Sequence[str] = (), tail: Tail | None = None
) -> Canonical:
    """:func:`read_batch`'s readings, with how their rows lie (for the pricing).

    ``tail``: shared by the reads of consecutive batches, in order (:class:`Tail`).
    """
    by_file: dict[str, list[Segment]] = {}
    for segment in batch.segments:
        by_file.setdefault(segment.path, []).append(segment)
    wanted = tuple(wanted_columns(None, columns))  # index_file checked each footer already
    frames = []
    for name, parts in by_file.items():
        path = Path(name)
        parts.sort(key=lambda s: s.start)
        low, high = parts[0].start, parts[-1].stop
        frame = _read_span(path, wanted, low, high, batch.groups.get(name), tail)
        rows = np.arange(low, high)
        covered = sum(s.stop - s.start for s in parts)
        if covered != high - low:  # other streams' rows lie between: keep this batch's
            keep = np.zeros(high - low, dtype=bool)
            for s in parts:
                keep[s.start - low : s.stop - low] = True
            frame, rows = frame.filter(pl.Series(keep)), rows[keep]
        frames.append(conform(frame, path, rows))
    frame = pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]
    found = canonical(frame, [Path(f) for f in by_file])
    _check_streams(found.frame, found.stream, batch)
    return found


def _read_span(
    path: Path,
    columns: tuple[str, ...],
    low: int,
    high: int,
    groups: tuple[tuple[int, RowGroup], ...] | None,
    tail: Tail | None,
) -> pl.DataFrame:
    """Rows ``[low, high)`` of ``path`` (one buffer a column), their pages checked
    first; with a ``tail``, the rows it holds are taken from it and the last row
    group read is read whole and left in it."""
    head = None if tail is None or groups is None else tail.take(str(path), columns, low, high)
    begin = low if head is None else low + head.height
    touched = None if groups is None else _groups_within(groups, begin, high)
    end = high
    if touched and tail is not None:
        # on to the end of the last group, to leave it in the tail: at most as many
        # rows again as the batch holds here (a huge row group is not held whole)
        group_end = touched[-1][0] + touched[-1][1].rows
        end = group_end if group_end - high <= high - low else high
    if begin < high:
        verify_pages(path, None if touched is None else [g for _, g in touched])
        try:
            frame = read_rows(path, columns, begin, end - begin, rechunk=False)
        except TraceError:
            if end == high:
                raise
            # The rows read ahead, for the next batch, may be what cannot be read
            # (pages without checksums); this batch's own rows, and errors, first.
            end = high
            frame = read_rows(path, columns, begin, end - begin, rechunk=False)
        if frame.height < high - begin:
            raise TraceError(
                f"holds {begin + frame.height} rows where it held {high} when it was indexed; "
                "it changed while it was being replayed.",
                path=path,
                fix="Replay a trace that no one is writing, or run the command again.",
            )
        if touched and tail is not None and end > high and frame.height == end - begin:
            last = max(touched[-1][0], begin)  # the last group, from where this read began
            tail.keep(str(path), columns, last, frame.slice(last - begin).rechunk())
        frame = frame.slice(0, high - begin)
        head = frame if head is None else pl.concat([head, frame])
    assert head is not None
    return head.rechunk()


def _groups_within(
    groups: Sequence[tuple[int, RowGroup]], low: int, high: int
) -> tuple[tuple[int, RowGroup], ...]:
    """The row groups (each with its first row) that rows ``[low, high)`` touch."""
    return tuple((start, g) for start, g in groups if start < high and start + g.rows > low)


def _check_streams(frame: pl.DataFrame, stream: np.ndarray, batch: Batch) -> None:
    """Raise unless the rows read (in canonical order, ``stream`` numbering their
    streams) hold exactly the streams planned.

    The plan trusts footer statistics (:func:`index_file`); a writer that
    stored wrong ones would otherwise split a stream between batches.
    """
    heads = np.flatnonzero(np.concatenate(([True], stream[1:] != stream[:-1])))
    found = frame.select("run", "rank")[heads].rows()
    if found != list(batch.streams):
        paths = sorted({s.path for s in batch.segments})
        raise TraceError(
            "the footer's statistics of its row groups name other (run, rank) streams than "
            f"its rows hold (planned {_streams_text(batch.streams)}; read "
            f"{_streams_text(found)}).",
            path=paths[0] if len(paths) == 1 else None,
            fix="Rewrite the file with a correct Parquet writer (pyarrow, polars), or "
            "restore it from a good copy."
            + ("" if len(paths) == 1 else f" Files: {', '.join(map(printable, paths))}."),
        )


def _streams_text(streams: Sequence[tuple[object, object]]) -> str:
    shown = ", ".join(f"({run!r}, {rank})" for run, rank in streams[:3])
    return shown + (f" and {len(streams) - 3} more" if len(streams) > 3 else "")
