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

Footer and page headers are read by :func:`_struct`, which takes the fields
a spec names and skips the rest without building anything: any footer or
header costs time in proportion to its bytes, and memory for the column
chunks it lists, which must lie, without overlapping, in the file's data.
Not through pyarrow, whose column metadata aborts the process, past any
``except``, on some damaged footers (a statistic shorter than its type, a
column type the schema contradicts, encrypted column metadata).

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
from typing import Any, NamedTuple

# Thrift compact protocol type ids.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = range(9)
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_INTS = (_I16, _I32, _I64)
#: Types read inline as a varint: Parquet's integers (i32, i64; an i16 is skipped), a length.
_VARINTS = (_I32, _I64, _BINARY)
#: Bytes a value of each fixed-width type takes (a boolean in a list or map: one).
_WIDTH = {_TRUE: 0, _FALSE: 0, _BYTE: 1, _DOUBLE: 8}
_MAX_DEPTH = 32


class _Bad(Exception):
    """Thrift bytes that cannot be read, or a footer that describes an impossible file."""


_PAST = "cut short"


def _varint(data: mmap.mmap | bytes, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at ``pos``, and where it ends."""
    value = shift = 0
    while True:
        if pos >= end:
            raise _Bad(_PAST)
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Bad("varint too long")


def _struct(
    data: mmap.mmap | bytes, pos: int, end: int, spec: dict[int, Any], depth: int = 0
) -> tuple[dict[int, Any], int]:
    """The fields of the Thrift struct at ``pos`` that ``spec`` names, and where it ends.

    Per field id, the spec says what to read: ``int``, ``bytes``, ``bool``; a
    dict: a struct, read by that spec; ``[str]``: a list of strings, as its one
    string (else ""); ``[read]``: a list of structs, each read by ``read(data,
    pos, end) -> (value, pos)``. A field of another type is None; any other
    field is skipped (:func:`_skip`). The hot path of checking a trace's pages
    (about 10,000 page headers for 1e7 readings): field headers and one-byte
    integers are read here inline.
    """
    found: dict[int, Any] = {}
    field = 0
    while True:
        if pos >= end:
            raise _Bad(_PAST)
        head = data[pos]
        pos += 1
        kind = head & 0x0F
        if kind == _STOP:
            return found, pos
        delta = head >> 4
        if delta:
            field += delta
        else:
            varint, pos = _varint(data, pos, end)
            field = (varint >> 1) ^ -(varint & 1)
        want = spec.get(field)
        value: Any = None
        if kind in _VARINTS:  # the integer, or the string's length
            if pos < end and data[pos] < 0x80:
                varint = data[pos]
                pos += 1
            else:
                varint, pos = _varint(data, pos, end)
            if kind == _BINARY:
                if varint > end - pos:
                    raise _Bad(_PAST)
                if want is bytes:
                    value = bytes(data[pos : pos + varint])
                pos += varint
            elif want is int:
                value = (varint >> 1) ^ -(varint & 1)
        elif kind in (_TRUE, _FALSE):
            if want is bool:
                value = kind == _TRUE
        elif kind == _STRUCT and isinstance(want, dict):
            value, pos = _struct(data, pos, end, want, depth + 1)
        elif kind == _LIST and isinstance(want, list):
            value, pos = _list(data, pos, end, want[0], depth)
        else:
            pos = _skip(data, pos, end, kind, depth)
        if want is not None:  # (None: of another type than the spec's, as if absent)
            found[field] = value


def _list(data: mmap.mmap | bytes, pos: int, end: int, read: Any, depth: int) -> tuple[Any, int]:
    """The list at ``pos`` as a list of strings (``read`` is ``str``: its one string, else
    "") or of structs, each read by ``read`` (see :func:`_struct`), and where it ends."""
    size, (element,), at = _container(data, pos, end, _LIST)
    if read is str and size == 1 and element == _BINARY:
        length, at = _varint(data, at, end)
        if length > end - at:
            raise _Bad(_PAST)
        return bytes(data[at : at + length]).decode(errors="replace"), at + length
    if read is str or element != _STRUCT:  # a list of anything else: none
        return ("" if read is str else []), _skip(data, pos, end, _LIST, depth)
    items = []
    for _ in range(size):
        item, at = read(data, at, end)
        items.append(item)
    return items, at


def _container(
    data: mmap.mmap | bytes, pos: int, end: int, kind: int
) -> tuple[int, list[int], int]:
    """The header of the list, set or map at ``pos``: its size, its element types (a
    map's key and value; a boolean element is a byte) and where its elements start."""
    if kind == _MAP:  # size, then (when not empty) the key and value types
        size, pos = _varint(data, pos, end)
        head = data[pos] if size and pos < end else 0
        pos += 1 if size else 0
        elements = [head >> 4, head & 0x0F]
    else:  # size (15: a varint follows) and element type
        if pos >= end:
            raise _Bad(_PAST)
        size, elements, pos = data[pos] >> 4, [data[pos] & 0x0F], pos + 1
        if size == 15:
            size, pos = _varint(data, pos, end)
    if size > end - pos:  # each element takes a byte at least (pos past end: map cut off)
        raise _Bad("a list longer than its bytes")
    return size, [_BYTE if e in (_TRUE, _FALSE) else e for e in elements], pos


def _skip(data: mmap.mmap | bytes, pos: int, end: int, kind: int, depth: int = 0) -> int:
    """Where the value of Thrift type ``kind`` at ``pos`` ends, read without building
    anything. Each element of a list, set or map takes a byte at least, so the time
    goes with the bytes; lists and structs nested deeper than 32 are refused."""
    if kind in _INTS:  # (one byte under 0x80, as most are, or more)
        pos = pos + 1 if pos < end and data[pos] < 0x80 else _varint(data, pos, end)[1]
    elif kind == _BINARY:
        size, pos = _varint(data, pos, end)  # read before pos: += would add to the old pos
        pos += size
    elif kind in _WIDTH:
        pos += _WIDTH[kind]
    elif kind in (_LIST, _SET, _MAP, _STRUCT) and depth > _MAX_DEPTH:
        raise _Bad("nested too deeply")
    elif kind == _STRUCT:  # field headers (a long one: a varint follows) and values
        while True:
            if pos >= end:
                raise _Bad(_PAST)
            head = data[pos]
            pos += 1
            if head & 0x0F == _STOP:
                break
            if not head >> 4:
                pos = _varint(data, pos, end)[1]
            pos = _skip(data, pos, end, head & 0x0F, depth + 1)
    elif kind in (_LIST, _SET, _MAP):
        size, elements, pos = _container(data, pos, end, kind)
        if all(e in _WIDTH for e in elements):
            pos += size * sum(_WIDTH[e] for e in elements)
        else:
            for _ in range(size):
                for element in elements:
                    pos = _skip(data, pos, end, element, depth + 1)
    else:
        raise _Bad(f"unknown Thrift type {kind}")
    if pos > end:
        raise _Bad(_PAST)
    return pos


#: Where each page type (Thrift PageType: 0 data page, 2 dictionary page, 3 data page
#: v2) keeps its header, and the field numbers of its value count and encoding in it.
_LAYOUT = {0: (5, 1, 2), 2: (7, 1, 2), 3: (8, 1, 4)}
_DICTIONARY = 2
#: Encodings a page may declare (Thrift Encoding, 1 is unused).
_ENCODINGS = frozenset({0, 2, 3, 4, 5, 6, 7, 8, 9})
#: What is read of a page header (see :func:`_struct`): its type, size and CRC,
#: and its page type's header.
_PAGE_HEADER = {1: int, 3: int, 4: int} | {p: {n: int, e: int} for p, n, e in _LAYOUT.values()}


class Chunk(NamedTuple):
    """One column chunk with pages, as the footer describes it: its top-level column
    ("" for a nested one), where its first page starts (its dictionary page, when it
    has one), how many bytes its pages take and how many values they hold."""

    name: str
    start: int
    size: int
    values: int


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group as the footer describes it."""

    rows: int
    #: Per top-level column: its physical type (Thrift ``Type``: 1 INT32, 2 INT64,
    #: 6 BYTE_ARRAY, ...) and, when the writer stored them, its least and largest
    #: value (plain encoding) with no null among the rows; else None.
    bounds: dict[str, tuple[int, bytes, bytes] | None]
    #: Its column chunks that hold pages (an empty row group's may hold none).
    chunks: tuple[Chunk, ...]

    def only(self, columns: Collection[str]) -> RowGroup:
        """This row group with only the chunks of these top-level columns (to check
        the pages of just the columns about to be read)."""
        return RowGroup(self.rows, self.bounds, tuple(c for c in self.chunks if c.name in columns))


def verify(path: str | os.PathLike[str], groups: Sequence[RowGroup] | None = None) -> str | None:
    """The first damaged page of ``path`` as text, or ``None`` when every checksum holds.

    ``groups``: check only the pages of these row groups, as :func:`row_groups`
    found them in this file's footer (the footer is not read again);
    otherwise the footer is read here and every page is checked.
    """
    with _mapped(path) as (data, length):
        if isinstance(data, str):
            return data
        if groups is None:
            found = _row_groups(data, length)
            if isinstance(found, str):
                return found
            groups = found
        with memoryview(data) as view:  # pages are checked in place, not copied
            for chunk in (chunk for group in groups for chunk in group.chunks):
                problem = _pages(data, view, chunk)
                if problem is not None:
                    return f"column chunk at byte {chunk.start}: {problem}"
    return None


def row_groups(path: str | os.PathLike[str]) -> list[RowGroup] | str:
    """The row groups of ``path``'s footer, or what is wrong with the footer, as text.

    Reads only the footer. Statistics are as a writer stored them: a reader
    that trusts them must check that the rows it reads agree.
    """
    with _mapped(path) as (data, length):
        return data if isinstance(data, str) else _row_groups(data, length)


def has_checksums(
    path: str | os.PathLike[str], groups: Sequence[RowGroup] | None = None
) -> bool | None:
    """Whether ``path``'s pages carry checksums, judged by its first page (a writer
    stores them for every page or for none); None when the file has no page, or is
    not sound enough to tell (:func:`verify` says what is wrong with it). ``groups``:
    its footer's row groups, where already read (:func:`row_groups`): only the first
    page's header is read then."""
    with _mapped(path) as (data, length):
        if isinstance(data, str):
            return None
        found = _row_groups(data, length) if groups is None else groups
        if isinstance(found, str):
            return None
        for chunk in (chunk for group in found for chunk in group.chunks):
            try:
                header, _ = _struct(data, chunk.start, chunk.start + chunk.size, _PAGE_HEADER)
            except _Bad:
                return None
            return isinstance(header.get(4), int)
    return None


def _pages(data: mmap.mmap, view: memoryview, chunk: Chunk) -> str | None:
    """Walk one column chunk's pages: they must tile it, and hold its values."""
    pos, end = chunk.start, chunk.start + chunk.size
    if end > len(data) - 8:  # the file changed since its footer was read
        return "it lies past the end of the file"
    seen = 0
    while pos < end:
        try:
            header, body = _struct(data, pos, end, _PAGE_HEADER)
        except _Bad as exc:
            return f"the page header at byte {pos} is damaged ({exc})"
        kind, size, crc = header.get(1), header.get(3), header.get(4)
        if size is None or size < 0 or body + size > end:
            return f"the page at byte {pos} has a damaged size"
        layout = _LAYOUT.get(kind)  # type: ignore[arg-type]
        sub = header.get(layout[0]) if layout else None
        if layout is None or sub is None:
            return f"the page header at byte {pos} is damaged (page type {kind!r})"
        count, encoding = sub.get(layout[1]), sub.get(layout[2])
        if count is None or count < 0 or encoding not in _ENCODINGS:
            return f"the page header at byte {pos} is damaged (values or encoding)"
        if kind != _DICTIONARY:
            seen += count
        if isinstance(crc, int) and zlib.crc32(view[body : body + size]) != crc & 0xFFFFFFFF:
            return f"the page at byte {pos} fails its checksum"
        pos = body + size
    if seen != chunk.values:
        return f"its pages hold {seen} values where the footer says {chunk.values}"
    return None


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


def _row_groups(data: mmap.mmap, length: int) -> list[RowGroup] | str:
    """The row groups of a mapped file's footer (``FileMetaData``: its rows, field 3,
    and row groups, 4), or what is wrong with it."""
    size = int.from_bytes(data[-8:-4], "little")
    if size <= 0 or size > length - 12:
        return "its footer length is damaged"
    try:
        spec = {3: int, 4: [_Footer(length - 8 - size).group]}
        meta = _struct(data, length - 8 - size, length - 8, spec)[0]
    except _Bad as exc:
        return f"its footer is damaged ({exc})"
    groups: list[RowGroup] = meta.get(4) or []
    if sum(group.rows for group in groups) != meta.get(3):
        return "its footer's row counts disagree"
    return groups


#: What is read of a column chunk (``ColumnChunk``): its ``ColumnMetaData`` (3):
#: type (1), path (3), values (5), size (7), first data page (9), dictionary page
#: (11) and ``Statistics`` (12): max, min (deprecated: 1, 2), null count (3),
#: max_value, min_value (5, 6), is_max_value_exact, is_min_value_exact (7, 8).
_CHUNK = {
    3: {
        **dict.fromkeys((1, 5, 7, 9, 11), int),
        3: [str],
        12: {1: bytes, 2: bytes, 3: int, 5: bytes, 6: bytes, 7: bool, 8: bool},
    }
}
#: A column chunk of an empty row group, with no pages: its values, chunk and bounds.
_NO_PAGES = (0, None, None)
#: Every row group of no rows and no pages (a footer may list millions: one object).
_EMPTY = RowGroup(0, {}, ())


class _Footer:
    """Reads a footer's row groups and column chunks (each as :func:`_struct` reads its
    list elements, at the depth their fields lie at), checking that the chunks lie in
    the file's data."""

    def __init__(self, data_end: int) -> None:
        #: The pages lie in bytes 4 to ``data_end``; the chunks read so far take ``claimed``.
        self.data_end, self.claimed = data_end, 0

    def group(self, data: mmap.mmap | bytes, pos: int, end: int) -> tuple[RowGroup, int]:
        """``RowGroup``: its column chunks (field 1), whose values cover its rows (3)."""
        found, pos = _struct(data, pos, end, {1: [self.chunk], 3: int}, 2)
        rows, listed = found.get(3), found.get(1) or []
        if rows is None or rows < 0:
            raise _Bad("a row group's row count is damaged")
        if rows and not listed:
            raise _Bad(f"a row group of {rows} rows lists no column chunks")
        least = min((values for values, _, _ in listed), default=rows)
        if least < rows:  # every row has a value (or a null) in every column
            raise _Bad(f"a column chunk holds {least} values for {rows} rows")
        chunks = tuple(chunk for _, chunk, _ in listed if chunk is not None)
        bounds = {chunk.name: bound for _, chunk, bound in listed if chunk is not None}
        return RowGroup(rows, bounds, chunks) if chunks or rows else _EMPTY, pos

    def chunk(self, data: mmap.mmap | bytes, pos: int, end: int) -> tuple[tuple[Any, ...], int]:
        """``ColumnChunk``: its values, where its pages lie (None: an empty chunk of an
        empty row group, with no pages) and its bounds (see :class:`RowGroup`)."""
        found, pos = _struct(data, pos, end, _CHUNK, 4)
        meta = found.get(3)
        if meta is None:
            raise _Bad("a column chunk has no metadata")
        values, size, start, dictionary = (meta.get(k) for k in (5, 7, 9, 11))
        if values is None or size is None or start is None:
            raise _Bad("a column chunk's offsets are damaged")
        if size == 0 and values == 0:  # an empty chunk of an empty row group: no pages
            return _NO_PAGES, pos
        # The chunk starts at its dictionary page when it has one. (A writer may leave
        # data_page_offset 0 in a row group of 0 rows, whose chunk holds a dictionary page.)
        if dictionary is not None and dictionary >= 4 and (start < 4 or dictionary < start):
            start = dictionary
        if start < 4 or size < 0 or start + size > self.data_end:
            raise _Bad(f"a column chunk (bytes {start} to {start + size}) lies outside the data")
        self.claimed += size
        if self.claimed > self.data_end - 4:
            raise _Bad("column chunks overlap")
        chunk = Chunk(meta.get(3) or "", start, size, values)
        # Bounds: none with a null (or no null count), or one cut short (not exact).
        # min_value / max_value (fields 6, 5); else the deprecated min / max (2, 1): for
        # telling whether a chunk holds one value, any total order will do.
        stats, kind = meta.get(12) or {}, meta.get(1)
        low, high = (6, 5) if 5 in stats and 6 in stats else (2, 1)
        bound = (kind, stats.get(low), stats.get(high))
        if None in bound or stats.get(3) != 0 or False in (stats.get(7), stats.get(8)):
            return (values, chunk, None), pos
        return (values, chunk, bound), pos
