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

Streams that interleave (a collector that appends readings as they arrive:
every row group holds rows of many streams) are indexed by the readings each
stream has in a row group, not one entry per stretch (:data:`MIXED_STRETCHES`),
and read by their ``(run, rank)``. Every batch of such a file spans most of its
rows, and would decode most of the file; a replay has :func:`route` find
those files from the plan, decode each of their row groups once
(:func:`route_rows`, in as many processes as it has) and hand each batch its
rows from a temporary folder (:class:`Spool`).

A stream is never split, so memory is bounded by the batch size or the longest
stream, whichever is larger. Errors name the file, column and row in the file,
as :func:`~warmfit.format.trace.read_trace` does. Everything here is plain data and
picklable, so batches can be read in worker processes or on a cluster.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from warmfit.errors import TraceError, UsageError, no_room
from warmfit.format.pagecrc import RowGroup, has_checksums
from warmfit.format.trace import (
    Canonical,
    canonical,
    check_file_schema,
    conform,
    find_trace_files,
    optional_columns,
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


#: A row group whose rows change stream more than this many times (streams that
#: interleave row by row) is indexed by the readings each stream has in it
#: (:attr:`FileIndex.mixed`), not one entry per stretch, and its rows are told
#: apart by their ``(run, rank)`` when read.
MIXED_STRETCHES = 64
#: A file whose batches' rows, each batch's from its first row in the file to its
#: last, span its rows this many times over or more (streams that interleave:
#: every batch would decode most of the file) is decoded once and its rows routed
#: to their batches (:func:`route`). A file of streams side by side spans them once.
ROUTE_SPAN = 1.5

#: Parquet physical types (Thrift ``Type``): a string's, and each integer's width.
_BYTE_ARRAY = 6
_INTEGERS = {1: 4, 2: 8}

#: A stream's key: ``(run, rank)`` (None where the file holds a null; the rules
#: then report it when its batch is read).
StreamKey = tuple[str | None, int | None]


@dataclass(frozen=True)
class Segment:
    """Rows ``[start, stop)`` of one file, all of one stream; or, with ``count``,
    the ``count`` rows of one stream among them (streams that interleave:
    :attr:`FileIndex.mixed`), told apart from the others' by their ``(run, rank)``."""

    path: str
    start: int
    stop: int
    count: int | None = None
    #: The segment's stream (set by :func:`plan`).
    stream: StreamKey | None = None

    @property
    def readings(self) -> int:
        """The stream's readings in this segment."""
        return self.stop - self.start if self.count is None else self.count


@dataclass(frozen=True)
class FileIndex:
    """Where each stream's rows lie in one checked file."""

    path: str
    rows: int
    #: ``(run, rank, start, stop)`` per stretch of equal (run, rank), in file order.
    stretches: tuple[tuple[str | None, int | None, int, int], ...]
    #: Each row group: its first row, and what the footer says of it.
    groups: tuple[tuple[int, RowGroup], ...] = ()
    #: ``(run, rank, start, stop, readings)`` per stream of the row groups whose
    #: streams interleave (:data:`MIXED_STRETCHES`): its readings among rows
    #: ``[start, stop)`` (consecutive such groups), which hold other streams' too.
    mixed: tuple[tuple[str | None, int | None, int, int, int], ...] = ()
    #: The optional columns with a meaning the file has (``estimate_bytes``:
    #: :func:`warmfit.format.trace.optional_columns`), read beside replay's.
    columns: tuple[str, ...] = ()
    #: Whether its pages carry checksums (:func:`warmfit.format.pagecrc.has_checksums`,
    #: from the footer read here: a command warns of the files without them).
    checksums: bool | None = None


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
    #: ``(path, route)`` for each :class:`Route` that holds rows of this batch (the
    #: files :func:`route` routes), and the folder where they lie (:meth:`Spool.routed`):
    #: those files' rows are read from there.
    routes: tuple[tuple[str, int], ...] = ()
    spool: str | None = None
    #: Per file of the segments that has any, its optional columns (:attr:`FileIndex.columns`).
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)


def index_file(path: str | os.PathLike[str]) -> FileIndex:
    """Check one trace file's footer and find its streams' rows.

    A row group whose footer statistics give one ``run`` and one ``rank`` (as a
    recorder's do: it writes a stream's readings side by side) is one
    stretch, read from the footer alone; the ``run`` and ``rank`` of any other
    row group are read (after its pages' checksums). A row group of more than
    :data:`MIXED_STRETCHES` stretches (streams that interleave) is indexed by
    each stream's readings in it (:attr:`FileIndex.mixed`). :func:`read_batch`
    checks the rest of the pages, and that the rows hold the streams planned.
    """
    path = Path(path)
    schema = check_file_schema(path)
    groups = row_groups(path)
    stretches: list[tuple[str | None, int | None, int, int]] = []
    mixed: list[tuple[str | None, int | None, int, int, int]] = []
    last_mixed: dict[StreamKey, int] = {}  # per stream, its latest entry in mixed
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
            frame = read_rows(path, keys, start, group.rows)
            runs = _runs_of(frame, run)
            if runs.height > MIXED_STRETCHES:  # interleaved: each stream's readings
                stop = start + frame.height
                for name, rank, count in _counts(frame, run):
                    at = last_mixed.get((name, rank))
                    if at is not None and mixed[at][3] == start:  # on from the last group
                        mixed[at] = (name, rank, mixed[at][2], stop, mixed[at][4] + count)
                    else:
                        last_mixed[(name, rank)] = len(mixed)
                        mixed.append((name, rank, start, stop, count))
                start = stop
                continue
            found = _listed(runs)
        for run, rank, length in found:
            if (
                stretches
                and stretches[-1][:2] == (run, rank)
                and stretches[-1][3] == start  # continues across groups
            ):
                stretches[-1] = (run, rank, stretches[-1][2], start + length)
            elif length:
                stretches.append((run, rank, start, start + length))
            start += length
    return FileIndex(
        str(path), start, tuple(stretches), tuple(zip(starts, groups, strict=True)), tuple(mixed),
        optional_columns(schema), has_checksums(path, groups),
    )  # fmt: skip


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


def _key(run: str | None = None) -> pl.Expr:
    """A row's stream, a struct of ``run`` and ``rank`` as :func:`index_file` reads
    them (a run or rank that is no string or integer, as null); with ``run``
    given (the rows' one run, by the footer), from the rank alone."""
    runs = (
        pl.lit(run, pl.String) if run is not None else pl.col("run").cast(pl.String, strict=False)
    )
    return pl.struct(runs.alias("run"), pl.col("rank").cast(pl.Int64, strict=False))


def _runs_of(frame: pl.DataFrame, run: str | None = None) -> pl.DataFrame:
    """The runs of equal ``(run, rank)`` of some rows, in row order, as a frame: ``value``
    (the stream, :func:`_key`) and ``len``; with ``run`` given (the rows' one run),
    ``frame`` holds only their ranks."""
    return frame.select(_key(run).rle().struct.unnest())


def _listed(runs: pl.DataFrame) -> list[tuple[str | None, int | None, int]]:
    """The rows of a frame of ``value`` (a stream, :func:`_key`) and ``len``, as tuples."""
    lengths = runs.get_column("len").to_list()
    keys = runs.get_column("value").struct.unnest().rows()
    return [(run, rank, length) for (run, rank), length in zip(keys, lengths, strict=True)]


def _counts(
    frame: pl.DataFrame, run: str | None = None
) -> list[tuple[str | None, int | None, int]]:
    """Each stream of some rows (as :func:`_runs_of`), in the order of its first row,
    and how many rows it has."""
    counts = frame.group_by(_key(run).alias("value"), maintain_order=True).agg(pl.len())
    return _listed(counts)


def _order(key: StreamKey) -> tuple[bool, str, bool, int]:
    run, rank = key
    return (run is None, run or "", rank is None, rank or 0)


def plan(indexes: Iterable[FileIndex], batch_readings: int = DEFAULT_BATCH_READINGS) -> list[Batch]:
    """Group every stream, in canonical order, into batches of about ``batch_readings``."""
    if batch_readings < 1:
        raise ValueError("batch_readings must be at least 1")
    segments: dict[StreamKey, list[Segment]] = {}
    groups: dict[str, tuple[tuple[int, RowGroup], ...]] = {}
    columns: dict[str, tuple[str, ...]] = {}
    for index in indexes:
        groups[index.path] = index.groups
        if index.columns:
            columns[index.path] = index.columns
        for run, rank, start, stop in index.stretches:
            key = (run, rank)
            segments.setdefault(key, []).append(Segment(index.path, start, stop, None, key))
        for run, rank, start, stop, count in index.mixed:
            key = (run, rank)
            segments.setdefault(key, []).append(Segment(index.path, start, stop, count, key))
    batches: list[Batch] = []
    streams: list[StreamKey] = []
    held: list[Segment] = []
    readings = 0
    for key in sorted(segments, key=_order):
        streams.append(key)
        held += segments[key]
        readings += sum(s.readings for s in segments[key])
        if readings >= batch_readings:
            batches.append(_batch(len(batches), streams, held, readings, groups, columns))
            streams, held, readings = [], [], 0
    if streams:
        batches.append(_batch(len(batches), streams, held, readings, groups, columns))
    return batches


def _batch(
    number: int,
    streams: list[StreamKey],
    held: list[Segment],
    readings: int,
    groups: dict[str, tuple[tuple[int, RowGroup], ...]],
    columns: dict[str, tuple[str, ...]],
) -> Batch:
    rows: dict[str, tuple[int, int]] = {}  # per file, the rows from the first to the last held
    for s in held:
        low, high = rows.get(s.path, (s.start, s.stop))
        rows[s.path] = (min(low, s.start), max(high, s.stop))
    touched = {path: _groups_within(groups[path], *span) for path, span in rows.items()}
    optional = {path: columns[path] for path in rows if path in columns}
    return Batch(number, tuple(streams), tuple(held), readings, touched, columns=optional)


def plan_trace(
    paths: Iterable[str | os.PathLike[str]], batch_readings: int = DEFAULT_BATCH_READINGS
) -> list[Batch]:
    """Index every file of a trace in this process and plan its batches."""
    return plan([index_file(f) for f in find_trace_files(paths)], batch_readings)


#: The columns a :class:`Route` decodes: replay's (a batch read with others reads its
#: rows from the file itself).
_ROUTED_COLUMNS = tuple(wanted_columns(None, ()))
#: The column of a routed row's number in its file (:func:`route_rows`).
_ROW = "__warmfit_row"


@dataclass(frozen=True)
class Route:
    """Consecutive row groups of a file whose streams interleave, to decode once
    (:func:`route_rows`) and hand each batch its rows."""

    number: int
    path: str
    #: Rows ``[start, stop)``: the row groups ``groups``, each with its first row.
    start: int
    stop: int
    groups: tuple[tuple[int, RowGroup], ...]
    #: Each stream with rows among them, and the number of its batch.
    streams: tuple[tuple[StreamKey, int], ...]
    #: The file's optional columns, decoded with replay's (:attr:`FileIndex.columns`).
    columns: tuple[str, ...] = ()


def route(batches: Sequence[Batch], batch_readings: int = DEFAULT_BATCH_READINGS) -> list[Route]:
    """The files of a plan whose streams interleave, cut into routes of whole row
    groups of about ``batch_readings`` rows (one group at least).

    A file is routed when its batches' rows, each batch's from its first row in
    the file to its last, span its rows :data:`ROUTE_SPAN` times or more: each of
    those batches would decode most of the file (two runs whose rows alternate
    span it twice; streams side by side, once). The plan alone decides, from the
    index (no row is read). The other files' rows are read by their batches.
    """
    spanned: dict[str, int] = {}
    hull: dict[str, tuple[int, int]] = {}
    optional: dict[str, tuple[str, ...]] = {}
    for batch in batches:
        optional |= batch.columns
        for name, (low, high) in _spans(batch.segments).items():
            spanned[name] = spanned.get(name, 0) + high - low
            first, last = hull.get(name, (low, high))
            hull[name] = (min(first, low), max(last, high))
    routes: list[Route] = []
    for name, rows in spanned.items():
        first, last = hull[name]
        if rows < ROUTE_SPAN * (last - first):
            continue
        groups = {
            start: (start, group)
            for batch in batches
            for start, group in batch.groups.get(name, ())
            if start < last and start + group.rows > first
        }
        chunks: list[list[tuple[int, RowGroup]]] = []
        for start, group in sorted(groups.values(), key=lambda g: g[0]):
            chunk = chunks[-1] if chunks else None
            if (
                chunk is None
                or chunk[-1][0] + chunk[-1][1].rows != start  # not next to the last
                or chunk[-1][0] + chunk[-1][1].rows - chunk[0][0] >= batch_readings
            ):
                chunks.append([(start, group)])
            else:
                chunk.append((start, group))
        bounds = [chunk[0][0] for chunk in chunks]
        streams: list[dict[StreamKey, int]] = [{} for _ in chunks]
        for batch in batches:
            for s in batch.segments:
                if s.path != name:
                    continue
                at = max(0, int(np.searchsorted(bounds, s.start, side="right")) - 1)
                while at < len(chunks) and chunks[at][0][0] < s.stop:
                    end = chunks[at][-1][0] + chunks[at][-1][1].rows
                    if end > s.start:
                        assert s.stream is not None, "a segment of a plan names its stream"
                        streams[at][s.stream] = batch.number
                    at += 1
        for chunk, found in zip(chunks, streams, strict=True):
            end = chunk[-1][0] + chunk[-1][1].rows
            routes.append(
                Route(
                    len(routes), name, chunk[0][0], end, tuple(chunk), tuple(found.items()),
                    optional.get(name, ()),
                )
            )  # fmt: skip
    return routes


def _spans(segments: Iterable[Segment]) -> dict[str, tuple[int, int]]:
    """Per file, the rows from the first of ``segments`` to the last."""
    spans: dict[str, tuple[int, int]] = {}
    for s in segments:
        low, high = spans.get(s.path, (s.start, s.stop))
        spans[s.path] = (min(low, s.start), max(high, s.stop))
    return spans


def route_rows(route: Route, folder: str) -> int:
    """Decode a route's row groups once (their pages checked first) and write each
    batch's rows among them, with their row numbers in the file, to ``folder``
    (Arrow files, one a batch): the task a replay runs for each :class:`Route`
    before it replays the batches (:meth:`Spool.routed`). Returns the rows decoded."""
    path = Path(route.path)
    verify_pages(path, [g for _, g in route.groups])
    frame = read_rows(path, _ROUTED_COLUMNS + route.columns, route.start, route.stop - route.start)
    if frame.height < route.stop - route.start:
        raise _changed(path, route.start + frame.height, route.stop)
    batches = pl.DataFrame(
        [(run, rank, number) for (run, rank), number in route.streams],
        schema={"__run": pl.String, "__rank": pl.Int64, "__batch": pl.Int64},
        orient="row",
    )
    tagged = frame.with_columns(
        _key().struct.unnest().name.prefix("__"),
        pl.int_range(route.start, route.stop, dtype=pl.Int64).alias(_ROW),
    ).join(batches, on=["__run", "__rank"], how="left", nulls_equal=True, maintain_order="left")
    # rows of a stream no batch planned here are left out: that batch's count tells
    parts = tagged.filter(pl.col("__batch").is_not_null()).partition_by(
        "__batch", as_dict=True, maintain_order=True
    )
    for (number,), rows in parts.items():
        target = _spool_path(folder, route.number, int(number))
        try:
            rows.drop("__run", "__rank", "__batch").write_ipc(target)
        except OSError as exc:
            raise _no_room(folder, exc) from None
    return frame.height


def _spool_path(folder: str, route: int, batch: int) -> str:
    return os.path.join(folder, f"route-{route}-batch-{batch}.arrow")


def _read_routed(
    batch: Batch, name: str, numbers: Sequence[int]
) -> tuple[pl.DataFrame, np.ndarray]:
    """A batch's rows of file ``name`` that its routes wrote to its spool, in file
    order, and their row numbers."""
    assert batch.spool is not None
    parts = []
    for number in numbers:
        spooled = _spool_path(batch.spool, number, batch.number)
        if os.path.exists(spooled):  # none: the rows planned there hold other streams
            parts.append(pl.read_ipc(spooled))
    if not parts:
        return pl.DataFrame(schema={"run": pl.String, "rank": pl.Int64}), np.zeros(0, np.int64)
    frame = pl.concat(parts).rechunk() if len(parts) > 1 else parts[0]
    return frame.drop(_ROW), frame.get_column(_ROW).to_numpy()


def routed_batches(batches: Sequence[Batch], routes: Sequence[Route], folder: str) -> list[Batch]:
    """``batches``, each reading its rows of the routed files from what :func:`route_rows`
    wrote of ``routes`` to ``folder``."""
    takes: dict[int, list[tuple[str, int]]] = {}
    for r in routes:
        for number in dict.fromkeys(n for _, n in r.streams):
            takes.setdefault(number, []).append((r.path, r.number))
    return [
        replace(b, routes=tuple(takes[b.number]), spool=folder) if b.number in takes else b
        for b in batches
    ]


class Spool:
    """The temporary folder (in ``TMPDIR``) for the rows :func:`route_rows` routes,
    made when first needed and removed, with them, on exit (a context manager)."""

    def __init__(self) -> None:
        self.folder: str | None = None
        #: The rows decoded by the routes run so far.
        self.rows = 0

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the folder and what it holds."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def routed(
        self,
        batches: Sequence[Batch],
        routes: Sequence[Route],
        run: Callable[[Callable[..., Any], list[tuple[Any, ...]]], Iterable[Any]],
    ) -> list[Batch]:
        """``batches`` reading their rows of the routed files from this folder, once
        ``run`` (which calls a function on each tuple of arguments, here or in worker
        processes, and yields the results) has decoded every one of ``routes``."""
        if not routes:
            return list(batches)
        if self.folder is None:
            try:
                self.folder = tempfile.mkdtemp(prefix="warmfit-routed-")
            except OSError as exc:
                raise _no_room(tempfile.gettempdir(), exc) from None
        self.rows += sum(run(route_rows, [(r, self.folder) for r in routes]))
        return routed_batches(batches, routes, self.folder)


def _no_room(folder: str, exc: OSError) -> UsageError:
    return no_room(
        "the temporary files of the rows of streams that interleave",
        folder,
        exc,
        "Free space there, or point TMPDIR at a folder with room (about 130 bytes a "
        "reading of those files).",
    )


def _changed(path: Path, held: int, expected: int) -> TraceError:
    return TraceError(
        f"holds {held} rows where it held {expected} when it was indexed; "
        "it changed while it was being replayed.",
        path=path,
        fix="Replay a trace that no one is writing, or run the command again.",
    )


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
    The rows of a file that :func:`route` routed come from the batch's
    :attr:`~Batch.spool` instead (with replay's columns and the file's optional
    ones alone: other columns are read from the file).
    """
    by_file: dict[str, list[Segment]] = {}
    for segment in batch.segments:
        by_file.setdefault(segment.path, []).append(segment)
    wanted = tuple(wanted_columns(None, columns))  # index_file checked each footer already
    routes: dict[str, list[int]] = {}
    if batch.spool is not None and wanted == _ROUTED_COLUMNS:
        for name, number in batch.routes:
            routes.setdefault(name, []).append(number)
    frames = []
    for name, parts in by_file.items():
        path = Path(name)
        if name in routes:  # decoded once, by route_rows: this batch's rows, in file order
            frame, rows = _read_routed(batch, name, routes[name])
            _check_counts(frame, parts, path)
            frames.append(conform(frame, path, rows))
            continue
        plain = sorted((s for s in parts if s.count is None), key=lambda s: s.start)
        mixed = [s for s in parts if s.count is not None]
        parts.sort(key=lambda s: s.start)
        low, high = parts[0].start, max(s.stop for s in parts)
        columns_here = wanted + batch.columns.get(name, ())
        frame = _read_span(path, columns_here, low, high, batch.groups.get(name), tail)
        rows = np.arange(low, high)
        covered = sum(s.stop - s.start for s in plain)
        if covered != high - low:  # other streams' rows lie between: keep this batch's
            keep = np.zeros(high - low, dtype=bool)
            for s in plain:
                keep[s.start - low : s.stop - low] = True
            if mixed:  # among other streams' rows: told apart by (run, rank)
                keep |= _rows_of(frame, mixed, low)
            frame, rows = frame.filter(pl.Series(keep)), rows[keep]
        if mixed:
            _check_counts(frame, parts, path)
        frames.append(conform(frame, path, rows))
    if len(frames) > 1:  # files without an optional column: null there
        same = all(f.columns == frames[0].columns for f in frames)
        frame = pl.concat(frames, how="vertical_relaxed" if same else "diagonal_relaxed")
    else:
        frame = frames[0]
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


def _rows_of(frame: pl.DataFrame, mixed: Sequence[Segment], low: int) -> np.ndarray:
    """Which rows of ``frame`` (rows from ``low`` on of a file) are the rows of the
    ``mixed`` segments' streams within those segments."""
    within = np.zeros(frame.height, dtype=bool)
    for s in mixed:
        within[s.start - low : s.stop - low] = True
    streams = pl.DataFrame(
        [s.stream for s in mixed], schema={"run": pl.String, "rank": pl.Int64}, orient="row"
    ).to_struct("value")
    ours = frame.select(_key().is_in(streams.implode())).to_series().to_numpy()
    return within & ours


def _check_counts(frame: pl.DataFrame, parts: Sequence[Segment], path: Path) -> None:
    """Raise unless the rows read of ``path`` hold each stream of ``parts`` as many times
    as the index counted: rows told apart by (run, rank), not by where they lie,
    that hold some other stream (footer statistics that lied, a file rewritten)."""
    wanted: dict[StreamKey | None, int] = {}
    for s in parts:
        wanted[s.stream] = wanted.get(s.stream, 0) + s.readings
    found: dict[StreamKey | None, int] = dict(_key_counts(frame))
    if found != wanted:
        keys = [k for k in {**wanted, **found} if k is not None and found.get(k) != wanted.get(k)]
        key = min(keys, key=_order) if keys else None
        held = f"stream {key!r} has {found.get(key, 0)} where" if key else "they have other than"
        raise TraceError(
            f"the rows of its streams are not those it held when it was indexed: {held} "
            f"{wanted.get(key, 0)} were counted; its footer's statistics are wrong, or it "
            "changed while it was being replayed.",
            path=path,
            fix="Replay a trace that no one is writing; or rewrite the file with a correct "
            "Parquet writer (pyarrow, polars), or restore it from a good copy.",
        )


def _key_counts(frame: pl.DataFrame) -> list[tuple[StreamKey, int]]:
    return [((run, rank), n) for run, rank, n in _counts(frame)]


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
