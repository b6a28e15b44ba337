"""Join Parquet files of one schema into one file, without decoding a page.

The per-wave rows of a replay are encoded where they are made: each worker
writes its batch's rows as a whole Parquet file in memory (a *part*), and the
command joins the parts, in order, into the one ``--per-wave`` file. Encoding
(dictionaries, statistics, zstd, page checksums) costs about 0.1 s of CPU a
batch of 333k rows, more than replaying the batch; done in the command, one
core, it bounded a 1e7 replay with ``--per-wave`` at 7.8 s while the workers
waited.

A Parquet file is ``PAR1``, its column chunks, a Thrift ``FileMetaData``
(compact protocol), the footer's length and ``PAR1``. :class:`JoinedParquet`
copies each part's bytes between the magic and its footer to the output, and
keeps the part's ``RowGroup`` structs with every offset the footer gives
into the file moved by where the part's bytes now start (and each row
group's ordinal renumbered). Everything else in them is copied byte for
byte: statistics, encodings, sizes. On :meth:`~JoinedParquet.close` it
writes one footer: the first part's, with the total row count and every
part's row groups.

The parts must come from one writer configuration (one schema, one
``key_value_metadata``); a part whose schema differs is refused. So is a part
with an offset index (a page index: polars writes one, pyarrow does with
``write_page_index=True``), whose page locations are file offsets inside the
copied bytes, which this join does not move; and an encrypted part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

# One Thrift reader for the package: pagecrc's (it reads footers and page headers).
from warmfit.format.pagecrc import _I16, _I64, _LIST, _STRUCT, _Bad, _Reader

MAGIC = b"PAR1"

#: Fields that hold an offset into the file (an i64), by struct: in
#: ``RowGroup`` file_offset; in ``ColumnChunk`` file_offset,
#: offset_index_offset and column_index_offset; in ``ColumnMetaData``
#: data_page_offset, index_page_offset, dictionary_page_offset and
#: bloom_filter_offset. A value below 4 (arrow writes ``ColumnChunk.file_offset``
#: as 0) points nowhere and is kept.
_ROW_GROUP_OFFSETS = frozenset({5})
_CHUNK_OFFSETS = frozenset({2, 6})
_META_OFFSETS = frozenset({9, 10, 11, 14})
#: ``RowGroup.columns``, ``ColumnChunk.meta_data``, ``RowGroup.ordinal``.
_COLUMNS, _META_DATA, _ORDINAL = 1, 3, 7
#: ``ColumnChunk`` fields a part may not have: ``offset_index_offset`` (an
#: offset index lists its pages' file offsets), ``crypto_metadata`` and
#: ``encrypted_column_metadata``.
_REFUSED = {4: "an offset index (a page index)", 8: "encryption", 9: "encryption"}
#: ``FileMetaData.schema``, ``.num_rows``, ``.row_groups``.
_SCHEMA, _NUM_ROWS, _ROW_GROUPS = 2, 3, 4


class PartError(ValueError):
    """A part that is not a Parquet file of the schema of the first part."""


@dataclass(frozen=True)
class _Field:
    """One field of a Thrift struct as it lies in its bytes."""

    number: int
    kind: int
    #: The field's header bytes (type and field number).
    head: bytes
    #: The field's value bytes.
    value: bytes


class JoinedParquet:
    """One Parquet file written to ``sink`` from parts (whole Parquet files, as bytes).

    ``sink`` is written from where it stands, and must start a new file. A file
    of no parts is not Parquet: write at least one (a part of no rows will do).
    """

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        #: Bytes written (the file's offsets count from its first byte).
        self.position = 0
        #: The first part's ``FileMetaData`` fields: the footer's template.
        self._template: list[_Field] | None = None
        self._groups: list[bytes] = []
        self.rows = 0
        self._closed = False

    def append(self, part: bytes) -> None:
        """Append a part's row groups: its column chunks now, its footer's row groups
        (offsets moved) at :meth:`close`. A refused part leaves the file as it was."""
        if self._closed:
            raise PartError("the file is closed: no part can follow its footer")
        fields, footer_start = _file_metadata(part)
        schema = _one(fields, _SCHEMA)
        if self._template is not None and schema != _one(self._template, _SCHEMA):
            raise PartError("a part's schema differs from the first part's")
        # A byte at offset o of the part lands at o - 4 + position in the file.
        position = self.position if self._template is not None else len(MAGIC)
        shift = position - len(MAGIC)
        try:
            groups = [
                _row_group(group, shift, len(self._groups) + i)
                for i, group in enumerate(_list_of_structs(_one(fields, _ROW_GROUPS)))
            ]
        except _Bad as exc:
            raise PartError(f"a part's footer is damaged ({exc})") from None
        if self._template is None:
            self._template = fields
            self.sink.write(MAGIC)
            self.position = len(MAGIC)
        self._groups += groups
        self.rows += _zigzag(_one(fields, _NUM_ROWS))
        with memoryview(part) as view:
            self.sink.write(view[len(MAGIC) : footer_start])
        self.position += footer_start - len(MAGIC)

    def close(self) -> None:
        """Write the footer (the first part's, with every row group and the total rows)."""
        if self._template is None:
            raise PartError("no part to join: a Parquet file needs its schema")
        if self._closed:
            raise PartError("the file is closed already")
        self._closed = True
        footer = bytearray()
        for field in self._template:
            footer += field.head
            if field.number == _NUM_ROWS and field.kind == _I64:
                footer += _varint(_to_zigzag(self.rows))
            elif field.number == _ROW_GROUPS and field.kind == _LIST:
                footer += _list_head(len(self._groups), _STRUCT)
                footer += b"".join(self._groups)
            else:
                footer += field.value
        footer += b"\x00"  # the struct's stop
        self.sink.write(bytes(footer))
        self.sink.write(len(footer).to_bytes(4, "little"))
        self.sink.write(MAGIC)
        self.position += len(footer) + 4 + len(MAGIC)


def _file_metadata(part: bytes) -> tuple[list[_Field], int]:
    """A part's ``FileMetaData`` fields, and where its footer starts."""
    if len(part) < 12 or part[:4] != MAGIC or part[-4:] != MAGIC:
        raise PartError("a part is not a Parquet file (no magic bytes)")
    length = int.from_bytes(part[-8:-4], "little")
    start = len(part) - 8 - length
    if length <= 0 or start < len(MAGIC):
        raise PartError("a part's footer length is damaged")
    try:
        reader = _Reader(part, start, len(part) - 8)
        fields = _fields(reader)
    except _Bad as exc:
        raise PartError(f"a part's footer is damaged ({exc})") from None
    if reader.pos != len(part) - 8:
        raise PartError("a part's footer does not end where its length says")
    for number, kind in ((_SCHEMA, _LIST), (_NUM_ROWS, _I64), (_ROW_GROUPS, _LIST)):
        if not any(f.number == number and f.kind == kind for f in fields):
            raise PartError(f"a part's footer lacks field {number}")
    return fields, start


def _fields(reader: _Reader) -> list[_Field]:
    """The fields of the struct at ``reader``'s position, read to its stop."""
    data = reader.data
    fields: list[_Field] = []
    number = 0
    while True:
        head_start = reader.pos
        head = reader.byte()
        kind = head & 0x0F
        if kind == 0:
            return fields
        delta = head >> 4
        number = number + delta if delta else reader.zigzag()
        value_start = reader.pos
        reader.skip(kind, 1)
        fields.append(
            _Field(
                number,
                kind,
                bytes(data[head_start:value_start]),
                bytes(data[value_start : reader.pos]),
            )
        )


def _one(fields: list[_Field], number: int) -> bytes:
    for field in fields:
        if field.number == number:
            return field.value
    raise PartError(f"a part's footer lacks field {number}")


def _list_of_structs(value: bytes) -> list[list[_Field]]:
    """The structs of a list of structs (its value bytes)."""
    reader = _Reader(value, 0, len(value))
    head = reader.byte()
    size, element = head >> 4, head & 0x0F
    if size == 15:
        size = reader.varint()
    if size and element != _STRUCT:
        raise PartError("a part's footer holds a list of non-structs where structs belong")
    return [_fields(reader) for _ in range(size)]


def _row_group(fields: list[_Field], shift: int, ordinal: int) -> bytes:
    """A ``RowGroup`` struct's bytes with its offsets moved by ``shift``."""
    out = bytearray()
    for field in fields:
        out += field.head
        if field.number == _COLUMNS and field.kind == _LIST:
            chunks = _list_of_structs(field.value)
            out += _list_head(len(chunks), _STRUCT)
            for chunk in chunks:
                out += _column_chunk(chunk, shift)
        elif field.number == _ORDINAL and field.kind == _I16:
            out += _varint(_to_zigzag(ordinal))
        else:
            out += _moved(field, _ROW_GROUP_OFFSETS, shift)
    return bytes(out + b"\x00")


def _column_chunk(fields: list[_Field], shift: int) -> bytes:
    out = bytearray()
    for field in fields:
        if field.number in _REFUSED:
            raise PartError(f"a part has {_REFUSED[field.number]}, which the join cannot move")
        out += field.head
        if field.number == _META_DATA and field.kind == _STRUCT:
            reader = _Reader(field.value, 0, len(field.value))
            for inner in _fields(reader):
                out += inner.head + _moved(inner, _META_OFFSETS, shift)
            out += b"\x00"
        else:
            out += _moved(field, _CHUNK_OFFSETS, shift)
    return bytes(out + b"\x00")


def _moved(field: _Field, offsets: frozenset[int], shift: int) -> bytes:
    """A field's value bytes; an offset into the file (>= 4) moved by ``shift``."""
    if field.number not in offsets or field.kind != _I64 or not shift:
        return field.value
    value = _zigzag(field.value)
    if value < len(MAGIC):  # no offset: arrow writes ColumnChunk.file_offset as 0
        return field.value
    return _varint(_to_zigzag(value + shift))


def _zigzag(value: bytes) -> int:
    return _Reader(value, 0, len(value)).zigzag()


def _to_zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _list_head(size: int, element: int) -> bytes:
    return bytes([size << 4 | element]) if size < 15 else bytes([0xF0 | element]) + _varint(size)
