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
   rule of the format on them (:func:`warmfit.trace.conform`,
   :func:`warmfit.trace.canonical`: the rules that span rows span one
   stream at most) and returns them in canonical order, exactly as
   :func:`warmfit.trace.read_trace` would return those streams.

A stream is never split, so memory is bounded by the batch size or the longest
stream, whichever is larger. Errors name the file, column and row in the file,
as :func:`~warmfit.trace.read_trace` does. Everything here is plain data and
picklable, so batches can be read in worker processes or on a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from warmfit.errors import TraceError
from warmfit.trace import (
    canonical,
    check_file_schema,
    conform,
    find_trace_files,
    read_rows,
    verify_pages,
    wanted_columns,
)

#: Readings per batch when none is given (whole streams: at least one): about
#: 250 MB of engine memory per worker, and faster than larger batches (caches).
DEFAULT_BATCH_READINGS = 250_000
#: ``run`` and ``rank`` are read this many rows at a time while indexing.
_INDEX_ROWS = 4_000_000

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


@dataclass(frozen=True)
class Batch:
    """Whole streams to replay together, and the rows that hold them."""

    number: int
    streams: tuple[StreamKey, ...]
    segments: tuple[Segment, ...]
    readings: int


def index_file(path: str | os.PathLike[str]) -> FileIndex:
    """Check one trace file's footer and pages, and find its streams' rows."""
    path = Path(path)
    check_file_schema(path)
    verify_pages(path)
    stretches: list[tuple[str | None, int | None, int, int]] = []
    start = 0
    while True:
        part = read_rows(path, ["run", "rank"], start, _INDEX_ROWS)
        if part.height == 0:
            break
        runs = part.select(
            pl.struct(
                pl.col("run").cast(pl.String, strict=False),
                pl.col("rank").cast(pl.Int64, strict=False),
            )
            .rle()
            .struct.unnest()
        )
        lengths = runs.get_column("len").to_list()
        keys = runs.get_column("value").struct.unnest().rows()
        for (run, rank), length in zip(keys, lengths, strict=True):
            if stretches and stretches[-1][:2] == (run, rank):  # continues across parts
                stretches[-1] = (run, rank, stretches[-1][2], start + length)
            else:
                stretches.append((run, rank, start, start + length))
            start += length
        if part.height < _INDEX_ROWS:
            break
    return FileIndex(str(path), start, tuple(stretches))


def _order(key: StreamKey) -> tuple[bool, str, bool, int]:
    run, rank = key
    return (run is None, run or "", rank is None, rank or 0)


def plan(indexes: Iterable[FileIndex], batch_readings: int = DEFAULT_BATCH_READINGS) -> list[Batch]:
    """Group every stream, in canonical order, into batches of about ``batch_readings``."""
    if batch_readings < 1:
        raise ValueError("batch_readings must be at least 1")
    segments: dict[StreamKey, list[Segment]] = {}
    for index in indexes:
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
            batches.append(Batch(len(batches), tuple(streams), tuple(held), readings))
            streams, held, readings = [], [], 0
    if streams:
        batches.append(Batch(len(batches), tuple(streams), tuple(held), readings))
    return batches


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
    by_file: dict[str, list[Segment]] = {}
    for segment in batch.segments:
        by_file.setdefault(segment.path, []).append(segment)
    wanted = wanted_columns(None, columns)  # index_file checked each footer already
    frames = []
    for name, parts in by_file.items():
        path = Path(name)
        parts.sort(key=lambda s: s.start)
        low, high = parts[0].start, parts[-1].stop
        frame = read_rows(path, wanted, low, high - low)
        if frame.height != high - low:
            raise TraceError(
                f"holds {low + frame.height} rows where it held {high} when it was indexed; "
                "it changed while it was being replayed.",
                path=path,
                fix="Replay a trace that no one is writing, or run the command again.",
            )
        rows = np.arange(low, high)
        covered = sum(s.stop - s.start for s in parts)
        if covered != high - low:  # other streams' rows lie between: keep this batch's
            keep = np.zeros(high - low, dtype=bool)
            for s in parts:
                keep[s.start - low : s.stop - low] = True
            frame, rows = frame.filter(pl.Series(keep)), rows[keep]
        frames.append(conform(frame, path, rows))
    frame = pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]
    return canonical(frame, [Path(f) for f in by_file])
