"""Verify the CRC checksums of a Parquet file's pages without decoding them.

A Parquet page is a Thrift ``PageHeader`` (compact protocol) followed by
``compressed_page_size`` bytes; a writer may store the CRC-32 of those bytes
in the header (field 4). pyarrow can verify them while it reads, but its
reader is several times slower than polars', which verifies nothing. This
module walks every column chunk's pages from the footer's offsets, checks
that the pages tile the chunk exactly, that each header is sound (a known
page type and encoding; data pages holding the footer's count of values),
and compares each stored CRC with ``zlib.crc32`` of the page, in place:
about 15 ms for a million readings, so the trace can then be read by polars
at full speed.

:func:`verify` returns ``None`` when every page that carries a checksum
matches (pages without one, as in files other writers made, are accepted),
or the first problem as text.
"""

from __future__ import annotations

import mmap
import os
import zlib
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# Thrift compact protocol type ids.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = range(9)
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_MAX_DEPTH = 32


class _Bad(Exception):
    """A page header that cannot be parsed."""


_PAST = "page header runs past its column chunk"


class _Reader:
    def __init__(
        self, data: mmap.mmap | bytes, pos: int, end: int, keep_bytes: bool = False
    ) -> None:
        self.data, self.pos, self.end = data, pos, end
        #: Keep binary fields and lists of them (a footer's column paths and
        #: statistics) as bytes; page headers skip them.
        self.keep_bytes = keep_bytes

    def byte(self) -> int:
        if self.pos >= self.end:
            raise _Bad(_PAST)
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise _Bad("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _Bad("page header nested too deeply")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read before pos is: += would add to the old pos
            self.pos += length
        elif kind in (_LIST, _SET):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                self.skip(_BYTE if element in (_TRUE, _FALSE) else element, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                key, value = types >> 4, types & 0x0F
                # a boolean in a map, as in a list, is a byte (else a huge map of
                # them would be walked forever without reading a byte)
                key = _BYTE if key in (_TRUE, _FALSE) else key
                value = _BYTE if value in (_TRUE, _FALSE) else value
                for _ in range(size):
                    self.skip(key, depth + 1)
                    self.skip(value, depth + 1)
        elif kind == _STRUCT:
            self.struct(depth + 1)
        else:
            raise _Bad(f"unknown Thrift type {kind}")
        if self.pos > self.end:
            raise _Bad(_PAST)

    def binary(self) -> bytes:
        length = self.varint()
        if length > self.end - self.pos:
            raise _Bad("a string longer than its bytes")
        self.pos += length
        return bytes(self.data[self.pos - length : self.pos])

    def list_size(self) -> int:
        """A list's header: its size (each element takes at least one byte)."""
        head = self.byte()
        size = head >> 4
        if size == 15:
            size = self.varint()
        if size > self.end - self.pos:
            raise _Bad("a list longer than its bytes")
        return size

    def struct(self, depth: int) -> dict[int, Any]:
        """Read a struct: its integer fields, its struct fields as dicts and its lists of
        structs as lists of dicts (and, with ``keep_bytes``, its booleans, and its binary
        fields and lists of them as bytes); skip the rest.

        The hot path of checking a trace's pages (about 500 page headers a batch of
        300k readings): field headers, integers and skipped strings are read here
        with the position in a local variable rather than through :meth:`byte`,
        which made the checksums three times as slow as the CRCs themselves.
        """
        if depth > _MAX_DEPTH:
            raise _Bad("page header nested too deeply")
        data, end = self.data, self.end
        found: dict[int, Any] = {}
        field = 0
        pos = self.pos
        while True:
            if pos >= end:
                raise _Bad(_PAST)
            head = data[pos]
            pos += 1
            kind = head & 0x0F
            if kind == _STOP:
                self.pos = pos
                return found
            delta = head >> 4
            if delta:
                field += delta
            else:
                self.pos = pos
                field = self.zigzag()
                pos = self.pos
            if kind in (_I32, _I64, _BINARY):
                # a varint: the zigzag integer, or a string's length
                value = shift = 0
                while True:
                    if pos >= end:
                        raise _Bad(_PAST)
                    b = data[pos]
                    pos += 1
                    value |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise _Bad("varint too long")
                if kind != _BINARY:
                    found[field] = (value >> 1) ^ -(value & 1)
                    continue
                if value > end - pos:
                    raise _Bad(_PAST if not self.keep_bytes else "a string longer than its bytes")
                if self.keep_bytes:
                    found[field] = bytes(data[pos : pos + value])
                pos += value
                continue
            self.pos = pos
            if kind == _STRUCT:
                found[field] = self.struct(depth + 1)
            elif kind in (_TRUE, _FALSE) and self.keep_bytes:
                found[field] = kind == _TRUE
            elif (
                kind == _LIST
                and self.keep_bytes
                and self.pos < end
                and data[self.pos] & 0x0F == _BINARY
            ):
                found[field] = [self.binary() for _ in range(self.list_size())]
            elif kind == _LIST and self.pos < end and data[self.pos] & 0x0F == _STRUCT:
                found[field] = [self.struct(depth + 1) for _ in range(self.list_size())]
            else:
                self.skip(kind, depth)
            pos = self.pos


#: Page types (Thrift PageType): data page, dictionary page, data page v2.
_DATA, _DICTIONARY, _DATA_V2 = 0, 2, 3
#: Where each page type keeps its header, and the field numbers of its value
#: count and encoding in it.
_LAYOUT = {_DATA: (5, 1, 2), _DICTIONARY: (7, 1, 2), _DATA_V2: (8, 1, 4)}
#: Encodings a page may declare (Thrift Encoding, 1 is unused).
_ENCODINGS = frozenset({0, 2, 3, 4, 5, 6, 7, 8, 9})


def _chunk_pages(data: mmap.mmap | bytes, start: int, end: int, values: int) -> str | None:
    """Walk one column chunk's pages; ``values`` is the chunk's value count (footer)."""
    with memoryview(data) as view:  # pages are checked in place, not copied
        return _walk_pages(data, view, start, end, values)


def _walk_pages(
    data: mmap.mmap | bytes, view: memoryview, start: int, end: int, values: int
) -> str | None:
    pos = start
    seen = 0
    while pos < end:
        reader = _Reader(data, pos, end)
        try:
            header = reader.struct(0)
        except _Bad as exc:
            return f"the page header at byte {pos} is damaged ({exc})"
        kind, size, crc = header.get(1), header.get(3), header.get(4)
        if not isinstance(size, int) or size < 0 or reader.pos + size > end:
            return f"the page at byte {pos} has a damaged size"
        layout = _LAYOUT.get(kind) if isinstance(kind, int) else None
        sub = header.get(layout[0]) if layout else None
        if layout is None or not isinstance(sub, dict):
            return f"the page header at byte {pos} is damaged (page type {kind!r})"
        count, encoding = sub.get(layout[1]), sub.get(layout[2])
        if not isinstance(count, int) or count < 0 or encoding not in _ENCODINGS:
            return f"the page header at byte {pos} is damaged (values or encoding)"
        if kind != _DICTIONARY:
            seen += count
        body = reader.pos
        if isinstance(crc, int) and zlib.crc32(view[body : body + size]) != crc & 0xFFFFFFFF:
            return f"the page at byte {pos} fails its checksum"
        pos = body + size
    if seen != values:
        return f"its pages hold {seen} values where the footer says {values}"
    return None


def verify(path: str | os.PathLike[str], groups: Sequence[RowGroup] | None = None) -> str | None:
    """The first damaged page of ``path`` as text, or ``None`` when every checksum holds.

    ``groups``: check only the pages of these row groups, as :func:`row_groups`
    found them in this file's footer (the footer is not parsed again).
    Otherwise the footer is parsed here (``FileMetaData``: row groups, column
    chunks, their offsets and sizes), not through pyarrow, whose column
    metadata aborts the process on some damaged footers, and every page is
    checked.
    """
    with _mapped(path) as (data, length):
        if isinstance(data, str):
            return data
        if groups is None:
            found = _row_groups(data, length)
            if isinstance(found, str):
                return found
            groups = found
        for group in groups:
            if group.chunks is None:
                return "a row group in the footer lists no column chunks"
            for chunk in group.chunks:
                problem = _column(data, chunk, length, group.rows)
                if problem is not None:
                    return problem
    return None


@dataclass(frozen=True)
class RowGroup:
    """One row group as the footer describes it."""

    rows: int
    #: Per top-level column: its physical type (Thrift ``Type``: 1 INT32, 2 INT64,
    #: 6 BYTE_ARRAY, ...) and, when the writer stored them, its least and largest
    #: value (plain encoding) with no null among the rows; else None.
    bounds: dict[str, tuple[int, bytes, bytes] | None]
    #: Its column chunks' ``ColumnMetaData`` as parsed (None: the footer lists none).
    chunks: tuple[Any, ...] | None

    def only(self, columns: Collection[str]) -> RowGroup:
        """This row group with only the chunks of these top-level columns (to check
        the pages of just the columns about to be read)."""
        if self.chunks is None:
            return self
        kept = tuple(c for c in self.chunks if _column_name(c) in columns)
        return RowGroup(self.rows, self.bounds, kept)


def row_groups(path: str | os.PathLike[str]) -> list[RowGroup] | str:
    """The row groups of ``path``'s footer, or what is wrong with the footer, as text.

    Reads only the footer. Statistics are as a writer stored them: a reader
    that trusts them must check that the rows it reads agree.
    """
    with _mapped(path) as (data, length):
        return data if isinstance(data, str) else _row_groups(data, length)


def _row_groups(data: mmap.mmap, length: int) -> list[RowGroup] | str:
    meta = _footer(data, length)
    if isinstance(meta, str):
        return meta
    groups = []
    for group in meta[4]:
        listed = group.get(1)
        chunks = [chunk.get(3) for chunk in listed] if isinstance(listed, list) else None
        bounds = dict(_bounds(chunk) for chunk in chunks or [])
        groups.append(RowGroup(group[3], bounds, None if chunks is None else tuple(chunks)))
    return groups


def _bounds(meta: Any) -> tuple[str, tuple[int, bytes, bytes] | None]:
    """A column chunk's top-level column name and its bounds (see :class:`RowGroup`)."""
    name = _column_name(meta)
    if not isinstance(meta, dict):
        return name, None
    stats, kind = meta.get(12), meta.get(1)
    if not isinstance(stats, dict) or not isinstance(kind, int) or stats.get(3) != 0:
        return name, None  # no statistics, or a null (or no null count)
    if stats.get(7) is False or stats.get(8) is False:
        return name, None  # is_max_value_exact / is_min_value_exact: a truncated bound
    # min_value / max_value (fields 6, 5); else the deprecated min / max (2, 1): for
    # telling whether a chunk holds one value, any total order will do.
    low, high = (
        (stats.get(6), stats.get(5)) if 5 in stats and 6 in stats else (stats.get(2), stats.get(1))
    )
    if not isinstance(low, bytes) or not isinstance(high, bytes):
        return name, None
    return name, (kind, low, high)


def _column_name(meta: Any) -> str:
    """A column chunk's top-level column name ("" for a nested column, or none)."""
    path = meta.get(3) if isinstance(meta, dict) else None
    return path[0].decode(errors="replace") if isinstance(path, list) and len(path) == 1 else ""


@contextmanager
def _mapped(path: str | os.PathLike[str]) -> Iterator[tuple[mmap.mmap | str, int]]:
    """The file mapped, and its length; or, in place of the map, why it is not Parquet."""
    with open(path, "rb") as file:
        length = os.fstat(file.fileno()).st_size
        if length < 12:
            yield "the file is too short to be Parquet", length
            return
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if data[-4:] != b"PAR1" or data[:4] != b"PAR1":
                yield "it does not begin and end with Parquet's magic bytes", length
                return
            yield data, length


def _footer(data: mmap.mmap, length: int) -> dict[int, Any] | str:
    """The footer (``FileMetaData``) with sound row counts, or what is wrong with it."""
    footer = int.from_bytes(data[-8:-4], "little")
    if footer <= 0 or footer > length - 12:
        return "its footer length is damaged"
    try:
        meta = _Reader(data, length - 8 - footer, length - 8, keep_bytes=True).struct(0)
    except _Bad as exc:
        return f"its footer is damaged ({exc})"
    groups = meta.get(4)
    meta[4] = groups = groups if isinstance(groups, list) else []
    rows = [group.get(3) for group in groups]
    if not all(isinstance(n, int) and n >= 0 for n in rows) or sum(rows) != meta.get(3):
        return "its footer's row counts disagree"
    return meta


def _column(data: mmap.mmap, meta: Any, length: int, rows: int) -> str | None:
    """Check one column chunk of a row group of ``rows`` rows from its ``ColumnMetaData``."""
    if not isinstance(meta, dict):
        return "a column chunk has no metadata in the footer"
    values, size, start, dictionary = (meta.get(k) for k in (5, 7, 9, 11))
    if not (isinstance(values, int) and isinstance(size, int) and isinstance(start, int)):
        return "a column chunk's offsets in the footer are damaged"
    if values < rows:  # every row has a value (or a null) in every column
        return f"a column chunk holds {values} values for {rows} rows"
    if size == 0 and values == 0:  # an empty chunk of an empty row group: no pages
        return None
    # The chunk starts at its dictionary page when it has one. (A writer may leave
    # data_page_offset 0 in a row group of 0 rows, whose chunk holds a dictionary page.)
    if isinstance(dictionary, int) and dictionary >= 4 and (start < 4 or dictionary < start):
        start = dictionary
    if start < 4 or size < 0 or start + size > length - 8:
        return f"a column chunk (bytes {start} to {start + size}) lies outside the file's data"
    problem = _chunk_pages(data, start, start + size, values)
    return None if problem is None else f"column chunk at byte {start}: {problem}"
