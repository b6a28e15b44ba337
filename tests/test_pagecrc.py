"""The Thrift reader and the footers of :mod:`warmfit.format.pagecrc`, on damaged and hostile bytes.

``_struct`` reads the fields a spec names (integers inline, for speed) and
skips the rest without building anything. This oracle reads the compact
protocol one byte at a time, all of it, as the specification puts it, then
keeps what the spec names: on real page headers and footers, whole and with
bytes changed or cut, both must give the same fields and the same end, or
both refuse the bytes. Footers are read against pyarrow's metadata too, and
hostile ones (a 30 MB footer, millions of row groups, chunks that overlap,
footers on which pyarrow's column metadata aborts the process) give an
answer in bounded memory, never a crash.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.command_line import warmfit_cli
from tests.strategies import examples
from tests.whole_waves import whole_wave, write_waves
from warmfit.format import pagecrc
from warmfit.format.pagecrc import verify

REPO = Path(__file__).resolve().parent.parent
EP1 = REPO / "traces/pr991/EP1.parquet"
TRACES = sorted((REPO / "traces").rglob("*.parquet"))


class Refused(Exception):
    pass


class Oracle:
    """The compact protocol, byte by byte: a struct as its ``(field, type, value)`` list."""

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data, self.pos, self.end = data, pos, end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise Refused
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        value = 0
        for shift in range(0, 64, 7):
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
        raise Refused

    def zigzag(self) -> int:
        n = self.varint()
        return -(n + 1) // 2 if n % 2 else n // 2

    def value(self, kind: int, level: int) -> Any:
        """One value of ``kind`` at nesting ``level`` (a struct's fields lie one level
        below it, as a list's elements do); a list, set, map or struct below level 32
        is refused."""
        if kind in (9, 10, 11, 12) and level > 32:
            raise Refused
        if kind in (1, 2):
            return kind == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.zigzag()
        if kind in (7, 8):
            n = 8 if kind == 7 else self.varint()
            if n > self.end - self.pos:
                raise Refused
            self.pos += n
            return self.data[self.pos - n : self.pos]
        if kind in (9, 10):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            element = 3 if head & 0x0F in (1, 2) else head & 0x0F  # a boolean: a byte
            return head & 0x0F, [self.value(element, level + 1) for _ in range(size)]
        if kind == 11:
            size = self.varint()
            types = self.byte() if size else 0
            key, value = (3 if t in (1, 2) else t for t in (types >> 4, types & 0x0F))
            for _ in range(size):
                self.value(key, level + 1)
                self.value(value, level + 1)
            return None
        if kind == 12:
            return self.struct(level + 1)
        raise Refused

    def struct(self, level: int = 0) -> list[tuple[int, int, Any]]:
        fields = []
        field = 0
        while True:
            head = self.byte()
            if head & 0x0F == 0:
                return fields
            field = field + (head >> 4) if head >> 4 else self.zigzag()
            fields.append((field, head & 0x0F, self.value(head & 0x0F, level)))


class Structs:
    """A spec's ``[read]``: a list of structs, each read by this spec with its fields at
    ``depth`` (the oracle's level for them)."""

    def __init__(self, spec: dict[int, Any], depth: int) -> None:
        self.spec, self.depth = spec, depth

    def __call__(self, data: bytes, pos: int, end: int) -> tuple[dict[int, Any], int]:
        return pagecrc._struct(data, pos, end, self.spec, self.depth)


def kept(fields: list[tuple[int, int, Any]], spec: dict[int, Any]) -> dict[int, Any]:
    """What ``_struct`` is to make of a struct the oracle read (its docstring's rules)."""
    found = {}
    for field, kind, value in fields:
        want = spec.get(field)
        if want is not None:
            found[field] = as_wanted(kind, value, want)
    return found


def as_wanted(kind: int, value: Any, want: Any) -> Any:
    if want in (int, bytes, bool):
        return value if kind in {int: (5, 6), bytes: (8,), bool: (1, 2)}[want] else None
    if isinstance(want, dict):
        return kept(value, want) if kind == 12 else None
    if kind != 9:
        return None
    element, items = value
    if want == [str]:
        return items[0].decode(errors="replace") if element == 8 and len(items) == 1 else ""
    return [kept(item, want[0].spec) for item in items] if element == 12 else []


#: The footer as pagecrc reads it, without its checks: FileMetaData's rows and row
#: groups, theirs (at level 2) and their column chunks' (at level 4).
FOOTER = {3: int, 4: [Structs({1: [Structs(pagecrc._CHUNK, 4)], 3: int}, 2)]}


def both(data: bytes, start: int, end: int, spec: dict[int, Any]) -> tuple[Any, Any]:
    """What ``_struct`` and the oracle make of ``data[start:end]`` by ``spec``."""
    try:
        fast: Any = pagecrc._struct(data, start, end, spec)
    except pagecrc._Bad:
        fast = "refused"
    oracle = Oracle(data, start, end)
    try:
        plain: Any = (kept(oracle.struct(), spec), oracle.pos)
    except Refused:
        plain = "refused"
    return fast, plain


def regions(path: Path) -> list[tuple[int, int, dict[int, Any]]]:
    """Where ``path``'s page headers start (with the bytes up to the end of their chunk),
    and its footer, with the spec each is read by."""
    data = path.read_bytes()
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str)
    found = []
    for chunk in (chunk for group in groups for chunk in group.chunks):
        pos, end = chunk.start, chunk.start + chunk.size
        while pos < end:
            header, body = pagecrc._struct(data, pos, end, pagecrc._PAGE_HEADER)
            found.append((pos, end, pagecrc._PAGE_HEADER))
            pos = body + header[3]
    footer = int.from_bytes(data[-8:-4], "little")
    return [*found, (len(data) - 8 - footer, len(data) - 8, FOOTER)]


DATA = EP1.read_bytes()
REGIONS = regions(EP1)


@settings(max_examples=examples(400))
@given(
    region=st.sampled_from(REGIONS),
    changes=st.lists(st.tuples(st.integers(0, 96), st.integers(0, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 96)),
)
def test_the_fast_reader_reads_what_the_plain_one_does(
    region: tuple[int, int, dict[int, Any]], changes: list[tuple[int, int]], cut: int | None
) -> None:
    start, end, spec = region
    data = bytearray(DATA)
    for at, value in changes:
        if start + at < end:
            data[start + at] = value
    if cut is not None:
        end = min(end, start + cut)
    fast, plain = both(bytes(data), start, end, spec)
    assert fast == plain


def test_the_oracle_reads_real_page_headers_and_footers() -> None:
    """The oracle is not vacuous: whole headers and footers read as such, with sizes."""
    assert len(REGIONS) > 16  # a page or two a column chunk, and the footer
    for start, end, spec in REGIONS:
        fast, plain = both(DATA, start, end, spec)
        assert fast == plain and fast != "refused"
        if spec is pagecrc._PAGE_HEADER:
            assert fast[0][1] in (0, 2, 3) and fast[0][3] > 0
        else:
            assert fast[0][3] == 52 and len(fast[0][4][0][1]) == 16  # rows, chunks


def test_every_cut_of_every_header_reads_alike() -> None:
    """Cut at each byte of each page header's first 160 (and of the footer): a field
    cut short must be refused by both readers at the same places."""
    for start, end, spec in REGIONS:
        for cut in range(min(end - start, 160) + 1):
            fast, plain = both(DATA, start, start + cut, spec)
            assert fast == plain, (start, cut)


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def field(number: int, kind: int) -> bytes:
    """A field header in the long form (any field number, any type)."""
    return bytes([kind]) + varint((number << 1) ^ (number >> 63))


def listed(kind: int, size: int) -> bytes:
    return bytes([0xF0 | kind]) + varint(size)


@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [b"\x00", b"\x01", b"\x14", b"\x15", b"\x19", b"\x1b", b"\x1c", b"\xf9"]
            ),
            st.binary(max_size=3),
        ),
        max_size=12,
    )
)
def test_handmade_thrift_reads_alike(parts: list[bytes]) -> None:
    """Bytes made of field headers, list and map headers and zeros: sets, maps, bools
    and doubles, long field ids: what the page headers of EP1 never hold."""
    data = b"".join(parts)
    for spec in (pagecrc._PAGE_HEADER, HANDMADE):
        fast, plain = both(data, 0, len(data), spec)
        assert fast == plain


#: Every kind of field a spec can name.
HANDMADE = {1: int, 2: bytes, 3: bool, 4: {1: int}, 5: [str], 6: [Structs({1: int}, 2)]}


def test_booleans_in_lists_and_maps_take_a_byte_each() -> None:
    """A list or map of booleans holds a byte each: a huge map of them that claims
    more than its bytes is refused (it was walked forever once), and a short list is
    skipped up to the field after it."""
    data = bytes.fromhex("7bc2f4a2e03b226bbd3531b53664382c01")
    assert both(data, 0, len(data), pagecrc._PAGE_HEADER) == ("refused", "refused")
    data = field(100, 9) + b"\x31\x01\x02\x01" + field(1, 5) + b"\x04\x00"
    assert both(data, 0, len(data), {1: int}) == (({1: 2}, len(data)),) * 2


def test_nesting_deeper_than_32_is_refused() -> None:
    """A skipped field of lists in lists (the last one empty): down to level 32 read, to
    level 33 refused, by both readers."""
    for deepest in (32, 33):
        data = field(100, 9) + b"\x19" * deepest + b"\x09" + b"\x00"
        fast, plain = both(data, 0, len(data), {1: int})
        assert fast == plain == ("refused" if deepest > 32 else ({}, len(data)))


def test_a_field_of_another_type_reads_as_absent() -> None:
    """A page header whose value count came as a struct, or as an i16 (a flipped bit
    in a field header; Parquet's integers are i32 and i64), has none: the last of a
    field's values counts, as the oracle reads it."""
    for other in (field(1, 12) + b"\x00", field(1, 4) + b"\x02"):  # a struct; an i16: 1
        data = b"\x15\x02" + other + b"\x00"  # field 1: an i32 of 1, then the other
        assert both(data, 0, len(data), {1: int}) == (({1: None}, len(data)),) * 2


# --------------------------------------------------------------------------- footers


def test_row_groups_agree_with_pyarrow(tmp_path: Path) -> None:
    """Rows, chunks (first page, bytes, values, column) and integer and string bounds,
    on the stored traces and on files other writers' settings make."""
    table = pq.read_table(EP1)
    made = {
        "v2.parquet": {"data_page_version": "2.0"},
        "plain.parquet": {"use_dictionary": False, "row_group_size": 20},
        "nostats.parquet": {"write_statistics": False},
    }
    for name, options in made.items():
        pq.write_table(table, tmp_path / name, **options)
    nested = pa.table({"s": [{"a": 1}, {"a": 2}], "rank": pa.array([3, 3], pa.int64())})
    pq.write_table(nested, tmp_path / "nested.parquet")
    for path in [*TRACES, *sorted(tmp_path.iterdir())]:
        groups, meta = pagecrc.row_groups(path), pq.read_metadata(path)
        assert not isinstance(groups, str) and len(groups) == meta.num_row_groups, path
        for group, g in zip(groups, range(meta.num_row_groups), strict=True):
            assert group.rows == meta.row_group(g).num_rows
            columns = [meta.row_group(g).column(c) for c in range(meta.num_columns)]
            assert group.chunks == tuple(_chunk(c) for c in columns)
            assert group.bounds == {_chunk(c).name: _bound(c) for c in columns}, path


def _chunk(column: Any) -> pagecrc.Chunk:
    path = column.path_in_schema
    start = column.dictionary_page_offset or column.data_page_offset
    name = "" if "." in path else path
    return pagecrc.Chunk(name, start, column.total_compressed_size, column.num_values)


def _bound(column: Any) -> tuple[int, bytes, bytes] | None:
    stats = column.statistics
    if stats is None or not stats.has_min_max or stats.null_count != 0:
        return None
    kind = ["BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY"]
    raw: list[Any] = [stats.min_raw, stats.max_raw]
    plain = {"BOOLEAN": "<?", "INT32": "<i", "INT64": "<q", "FLOAT": "<f", "DOUBLE": "<d"}
    if column.physical_type in plain:
        raw = [struct.pack(plain[column.physical_type], n) for n in raw]
    return (kind.index(column.physical_type), *raw)


def footer_tree(path: Path) -> list[tuple[int, int, Any]]:
    data = path.read_bytes()
    size = int.from_bytes(data[-8:-4], "little")
    return Oracle(data, len(data) - 8 - size, len(data) - 8).struct()


def encode(fields: list[tuple[int, int, Any]]) -> bytes:
    """A struct the oracle read (no maps), written back as a writer would."""
    out = bytearray()
    last = 0
    for number, kind, value in fields:
        kind = (1 if value else 2) if kind in (1, 2) else kind
        short = 0 < number - last < 16
        out += bytes([(number - last) << 4 | kind]) if short else field(number, kind)
        out += _encoded(kind, value)
        last = number
    return bytes(out) + b"\x00"


def _encoded(kind: int, value: Any) -> bytes:
    if kind in (1, 2):
        return b""
    if kind == 3:
        return bytes([value])
    if kind in (4, 5, 6):
        return varint((value << 1) ^ (value >> 63))
    if kind in (7, 8):
        return value if kind == 7 else varint(len(value)) + value
    if kind in (9, 10):
        element, items = value
        head = (
            bytes([len(items) << 4 | element]) if len(items) < 15 else listed(element, len(items))
        )
        return head + b"".join(
            bytes([item]) if element in (1, 2) else _encoded(element, item) for item in items
        )
    return encode(value)


def with_footer(path: Path, fields: list[tuple[int, int, Any]], out: Path) -> Path:
    data = path.read_bytes()
    size = int.from_bytes(data[-8:-4], "little")
    footer = encode(fields)
    out.write_bytes(
        data[: len(data) - 8 - size] + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    )
    return out


def value_of(fields: list[tuple[int, int, Any]], number: int) -> Any:
    return next(value for n, _, value in fields if n == number)


def test_the_footer_written_back_is_the_footer(tmp_path: Path) -> None:
    """The encoder the next tests change footers with writes EP1's footer back as it was."""
    assert with_footer(EP1, footer_tree(EP1), tmp_path / "t.parquet").read_bytes() == DATA


def test_empty_row_groups_are_one_object(tmp_path: Path) -> None:
    """A footer may list a row group per byte or two: those with no rows and no pages
    are one object (else a 30 MB footer would take gigabytes as row groups)."""
    tree = [(n, k, v) for n, k, v in footer_tree(EP1) if n not in (3, 4)]
    empty = [(1, 9, (12, [])), (2, 6, 0), (3, 6, 0)]
    tree += [(3, 6, 0), (4, 9, (12, [empty] * 100_000))]
    path = with_footer(EP1, sorted(tree), tmp_path / "t.parquet")
    groups = pagecrc.row_groups(path)
    assert isinstance(groups, list) and len(groups) == 100_000
    assert len({id(group) for group in groups}) == 1 and groups[0].chunks == ()
    assert pagecrc.verify(path) is None


def test_groups_read_before_the_file_was_cut_short_are_refused(tmp_path: Path) -> None:
    """``verify(path, groups)`` walks row groups read before: the file may have been
    cut short since (its ends still look like Parquet's)."""
    path = tmp_path / "t.parquet"
    path.write_bytes(DATA)
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str)
    path.write_bytes(DATA[:1000] + DATA[-8:])
    problem = pagecrc.verify(path, groups)
    assert problem is not None and problem.endswith("it lies past the end of the file")


def test_column_chunks_that_overlap_are_refused(tmp_path: Path) -> None:
    """Row groups listed twice claim their pages twice: the file holds fewer bytes."""
    tree = footer_tree(EP1)
    twice = [(n, k, v * 2 if n == 3 else (12, v[1] * 2) if n == 4 else v) for n, k, v in tree]
    path = with_footer(EP1, twice, tmp_path / "t.parquet")
    assert pagecrc.verify(path) == "its footer is damaged (column chunks overlap)"


def test_footers_pyarrow_aborts_on_are_answered(tmp_path: Path) -> None:
    """pyarrow's column metadata aborts the process (SIGABRT, past any except) on these
    footers: a statistic shorter than its type, a column type the schema contradicts,
    encrypted column metadata. pagecrc reads the pages; the bounds it keeps are the
    writer's bytes, which a reader checks (batches: by their width)."""
    tree = footer_tree(EP1)
    chunks = value_of(value_of(tree, 4)[1][0], 1)[1]
    rank = value_of(chunks[1], 3)  # the rank column's ColumnMetaData: INT32
    stats = value_of(rank, 12)
    stats[:] = [(n, k, v[:3] if n in (5, 6) else v) for n, k, v in stats]
    path = with_footer(EP1, tree, tmp_path / "short.parquet")
    assert pagecrc.verify(path) is None
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str) and groups[0].bounds["rank"] == (1, b"\0" * 3, b"\0" * 3)
    rank[:] = [(n, k, 6 if n == 1 else v) for n, k, v in rank]  # BYTE_ARRAY
    assert pagecrc.verify(with_footer(EP1, tree, tmp_path / "type.parquet")) is None
    chunks[0].append((8, 12, [(2, 12, [(1, 9, (8, [b"run"]))])]))  # ColumnCryptoMetaData
    assert pagecrc.verify(with_footer(EP1, tree, tmp_path / "crypto.parquet")) is None


_MEMORY = r"""
import sys
from warmfit.format import pagecrc

header = open(sys.argv[2], "rb").read()
print(repr(pagecrc.verify(sys.argv[1])))
groups = pagecrc.row_groups(sys.argv[1])
print(len(groups) if isinstance(groups, list) else repr(groups))
print(repr(pagecrc._struct(header, 0, len(header), pagecrc._PAGE_HEADER)[0]))
# this process's peak (ru_maxrss would count the parent's pages it was forked with)
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")))
"""


def test_a_30_mb_hostile_footer_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """EP1 with 30 MB more footer: 3M empty structs and a 27 MB string in fields no
    reader knows, then a page header with 1M empty structs in one. Each struct was
    a dict and the string a copy: 275 MiB at the peak; now they are skipped (18 MiB,
    the interpreter's own 13 included)."""
    size = int.from_bytes(DATA[-8:-4], "little")
    junk = field(100, 9) + listed(12, 3_000_000) + b"\x00" * 3_000_000
    junk += field(101, 8) + varint(27_000_000) + b"k" * 27_000_000
    footer = DATA[-8 - size : -9] + junk + b"\x00"  # before FileMetaData's stop
    path = tmp_path / "t.parquet"
    path.write_bytes(DATA[: -8 - size] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    # a data page (type 0, sizes 2) with the junk, then its header (field 5): 1 value, plain
    header = b"\x15\x00\x15\x04\x15\x04" + field(100, 9) + listed(12, 10**6) + b"\x00" * 10**6
    header += field(5, 12) + b"\x15\x02\x15\x00\x00\x00"
    (tmp_path / "header").write_bytes(header)
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY, str(path), str(tmp_path / "header")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    verdict, groups, parsed, peak_kib = done.stdout.splitlines()
    assert verdict == "None" and groups == "1"
    assert parsed == "{1: 0, 3: 2, 5: {1: 1, 2: 0}}"
    assert int(peak_kib) < 150 * 1024, f"a 30 MB footer took {int(peak_kib) // 1024} MiB"


# --------------------------------------------------------------------------- page checksums

#: 77 as a Thrift compact i64 field one after the previous one: header 0x16,
#: then zigzag(77) = 154 as a varint (0x9A 0x01). A footer of one row group of
#: one column holds it three times, in field order: the file's num_rows, the
#: column chunk's num_values, the row group's num_rows.
ROWS_77 = b"\x16\x9a\x01"
ROWS_78 = b"\x16\x9c\x01"


def _footer_patched(tmp_path: Path, occurrence: int) -> Path:
    path = tmp_path / "x.parquet"
    table = pa.table({"x": pa.array(range(1_000, 1_077), pa.int64())})
    pq.write_table(table, path, write_page_checksum=True, use_dictionary=False)
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    footer = data[start:-8]
    assert verify(path) is None and footer.count(ROWS_77) == 3
    at = start - 1
    for _ in range(occurrence + 1):
        at = data.index(ROWS_77, at + 1)
    path.write_bytes(data[:at] + ROWS_78 + data[at + len(ROWS_78) :])
    return path


def test_a_footer_whose_row_count_disagrees_with_its_row_groups_fails(tmp_path: Path) -> None:
    """Kills pagecrc-row-counts-unchecked: the file says 78 rows, its one row group 77."""
    assert verify(_footer_patched(tmp_path, 0)) == "its footer's row counts disagree"


def test_a_column_chunk_whose_pages_hold_fewer_values_fails(tmp_path: Path) -> None:
    """Kills pagecrc-value-count-unchecked: the footer says 78 values, the pages hold 77."""
    problem = verify(_footer_patched(tmp_path, 1))
    assert problem is not None and problem.endswith(
        "its pages hold 77 values where the footer says 78"
    )


# --------------------------------------------------------------------------- 14: footer values


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


class _Integers:
    """Where each integer of a Thrift compact struct lies: ``(path, start, end, value)``,
    the path being the field ids (and list positions) down to it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.found: list[tuple[tuple[int, ...], int, int, int]] = []

    def varint(self, pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = self.data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7

    def struct(self, pos: int, path: tuple[int, ...]) -> int:
        field = 0
        while True:
            head = self.data[pos]
            pos += 1
            if head & 0x0F == 0:
                return pos
            if head >> 4:
                field += head >> 4
            else:
                raw, pos = self.varint(pos)
                field = (raw >> 1) ^ -(raw & 1)
            pos = self.value(pos, head & 0x0F, (*path, field))

    def value(self, pos: int, kind: int, path: tuple[int, ...]) -> int:
        if kind in (1, 2):  # a boolean field: no bytes
            return pos
        if kind == 3:
            return pos + 1
        if kind in (4, 5, 6):
            raw, end = self.varint(pos)
            self.found.append((path, pos, end, (raw >> 1) ^ -(raw & 1)))
            return end
        if kind == 7:
            return pos + 8
        if kind == 8:
            size, pos = self.varint(pos)
            return pos + size
        if kind in (9, 10):
            size, element = self.data[pos] >> 4, self.data[pos] & 0x0F
            pos += 1
            if size == 15:
                size, pos = self.varint(pos)
            for i in range(size):
                pos = pos + 1 if element in (1, 2) else self.value(pos, element, (*path, i))
            return pos
        if kind == 12:
            return self.struct(pos, path)
        raise AssertionError(f"a footer of pyarrow's holds no Thrift type {kind}")


def _with_integers(path: Path, changes: dict[tuple[int, ...], int]) -> None:
    """Rewrite integers of ``path``'s footer in place (each keeps its varint's length)."""
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[-8:-4], "little")
    walker = _Integers(bytes(data))
    walker.struct(len(data) - 8 - size, ())
    where = {p: (start, end, value) for p, start, end, value in walker.found}
    for key, new in changes.items():
        start, end, _ = where[key]
        encoded = _varint((new << 1) ^ (new >> 63))
        assert len(encoded) == end - start
        data[start:end] = encoded
    path.write_bytes(bytes(data))


#: In a footer (FileMetaData): its rows; row group 0's rows; the values of row
#: group 0's column chunk ``c`` (ColumnChunk.meta_data.num_values).
FILE_ROWS, GROUP_ROWS = (3,), (4, 0, 3)


def _chunk_values(column: int) -> tuple[int, ...]:
    return (4, 0, 1, column, 3, 5)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        # every chunk holds 100 values (its pages too) for 101 rows
        ({FILE_ROWS: 101, GROUP_ROWS: 101}, "a column chunk holds 100 values for 101 rows"),
        # the peak_bytes chunk (column 13) claims 99 values for 100 rows
        ({_chunk_values(13): 99}, "a column chunk holds 99 values for 100 rows"),
    ],
)
def test_a_column_chunk_claiming_fewer_values_than_rows_is_refused(
    tmp_path: Path, changes: dict[tuple[int, ...], int], words: str
) -> None:
    """Survivor 14 (stranger-fewer-values-than-rows): a footer whose column chunk
    claims fewer values than its row group has rows describes rows that hold no
    value: ``warmfit validate`` exits 2, naming the file and the problem."""
    path = write_waves(tmp_path, [whole_wave(w, 400 + w) for w in range(100)]) / "t.parquet"
    assert pq.ParquetFile(path).schema_arrow.names[13] == "peak_bytes"
    _with_integers(path, changes)
    assert pagecrc.row_groups(path) == f"its footer is damaged ({words})"
    result = warmfit_cli("validate", tmp_path)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert str(path) in text and words in text and "Traceback" not in text


# --------------------------------------------------------------------------- real files, every kind of page

#: A table with a column of each physical type a trace may hold, nulls, a struct and a
#: list (nested columns: their chunks are named "").
_N = 1000
_TABLE = pa.table(
    {
        "i32": pa.array(range(_N), pa.int32()),
        "i64": pa.array([7 * i for i in range(_N)], pa.int64()),
        "f": pa.array([i / 3 for i in range(_N)], pa.float64()),
        "b": pa.array([i % 3 == 0 for i in range(_N)]),
        "s": pa.array([f"k{i % 17}" for i in range(_N)]),
        "o": pa.array([None if i % 4 == 0 else i for i in range(_N)], pa.int64()),
        "n": pa.array([{"a": i, "c": None if i % 5 == 0 else str(i)} for i in range(_N)]),
        "l": pa.array([[i, i + 1] if i % 6 else None for i in range(_N)], pa.list_(pa.int32())),
    }
)
#: pyarrow's settings, and the (page type, encoding) pairs their pages hold, by the
#: Parquet format (PageType: 0 data page, 2 dictionary page, 3 data page v2;
#: Encoding: 0 PLAIN, 2 PLAIN_DICTIONARY, 3 RLE, 5 DELTA_BINARY_PACKED,
#: 6 DELTA_LENGTH_BYTE_ARRAY, 7 DELTA_BYTE_ARRAY, 8 RLE_DICTIONARY, 9 BYTE_STREAM_SPLIT).
_WRITERS: dict[str, tuple[dict[str, Any], set[tuple[int, int]]]] = {
    "dictionary": ({}, {(0, 0), (0, 8), (2, 0)}),
    "v2": ({"data_page_version": "2.0"}, {(3, 3), (3, 8), (2, 0)}),
    "format-1.0": ({"version": "1.0"}, {(0, 0), (0, 2), (2, 2)}),
    "encodings": (
        {
            "use_dictionary": False,
            "column_encoding": {
                "i32": "DELTA_BINARY_PACKED",
                "i64": "DELTA_BINARY_PACKED",
                "s": "DELTA_LENGTH_BYTE_ARRAY",
                "f": "BYTE_STREAM_SPLIT",
                "b": "RLE",
            },
            "row_group_size": 400,
        },
        {(0, 0), (0, 3), (0, 5), (0, 6), (0, 9)},
    ),
    "v2-delta": (
        {
            "use_dictionary": False,
            "column_encoding": {"s": "DELTA_BYTE_ARRAY"},
            "data_page_version": "2.0",
            "data_page_size": 512,
        },
        {(3, 0), (3, 3), (3, 7)},
    ),
}


def _pages_of(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """A column chunk's pages, read by the oracle: ``(where, page type, values,
    encoding, where the body starts)``; the page header's own layout, from the
    format: type (1), compressed size (3), then data page (5: values 1, encoding 2),
    dictionary page (7: values 1, encoding 2) or data page v2 (8: values 1, encoding 4)."""
    pages = []
    while start < end:
        oracle = Oracle(data, start, end)
        header = {n: v for n, _, v in oracle.struct()}
        number, values, encoding = {0: (5, 1, 2), 2: (7, 1, 2), 3: (8, 1, 4)}[header[1]]
        sub = {n: v for n, _, v in header[number]}
        pages.append((start, header[1], sub[values], sub[encoding], oracle.pos))
        start = oracle.pos + header[3]
    assert start == end
    return pages


@pytest.mark.parametrize("writer", sorted(_WRITERS))
def test_files_of_every_page_kind_and_encoding_agree_with_pyarrow(
    tmp_path: Path, writer: str
) -> None:
    """Files pyarrow writes with dictionary pages, v1 and v2 data pages, format 1.0's
    PLAIN_DICTIONARY and the delta, RLE and byte-stream-split encodings, with nulls,
    a struct and a list: ``row_groups`` gives pyarrow's rows, chunks and bounds;
    ``verify`` walks every page (each chunk's pages sum to pyarrow's values) and,
    with one byte of any chunk's last page changed, names that page, found by the
    oracle's own walk of the headers."""
    options, kinds = _WRITERS[writer]
    path = tmp_path / f"{writer}.parquet"
    pq.write_table(_TABLE, path, write_page_checksum=True, **options)
    data, meta = path.read_bytes(), pq.read_metadata(path)
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str) and len(groups) == meta.num_row_groups
    assert verify(path) is None and pagecrc.has_checksums(path) is True
    seen: set[tuple[int, int]] = set()
    for group, g in zip(groups, range(meta.num_row_groups), strict=True):
        columns = [meta.row_group(g).column(c) for c in range(meta.num_columns)]
        assert group.rows == meta.row_group(g).num_rows
        assert group.chunks == tuple(_chunk(c) for c in columns)
        assert group.bounds == {_chunk(c).name: _bound(c) for c in columns}
        for chunk, column in zip(group.chunks, columns, strict=True):
            pages = _pages_of(data, chunk.start, chunk.start + chunk.size)
            seen |= {(kind, encoding) for _, kind, _, encoding, _ in pages}
            assert sum(n for _, kind, n, _, _ in pages if kind != 2) == column.num_values
            where, _, _, _, body = pages[-1]
            damaged = bytearray(data)
            damaged[body] ^= 0x01
            (tmp_path / "damaged.parquet").write_bytes(damaged)
            assert verify(tmp_path / "damaged.parquet") == (
                f"column chunk at byte {chunk.start}: the page at byte {where} fails its checksum"
            )
    assert kinds <= seen  # each kind the writer was asked for (a test of them all)


def _one_page_file(tmp_path: Path, **options: Any) -> tuple[Path, bytes, list[Any], int]:
    """A file of one int64 column, its pages with checksums; its bytes, the oracle's
    reading of its first page header, and where that header lies."""
    path = tmp_path / "one.parquet"
    table = pa.table({"x": pa.array([5, 6, 7, 5], pa.int64())})
    pq.write_table(table, path, write_page_checksum=True, **options)
    data = path.read_bytes()
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str)
    start = groups[0].chunks[0].start
    header = Oracle(data, start, len(data)).struct()
    return path, data, header, start


def _with_header(path: Path, data: bytes, old: list[Any], new: list[Any], at: int) -> Path:
    """``data`` with the page header ``old`` at ``at`` written as ``new`` (same length)."""
    before, after = encode(old), encode(new)
    assert data[at : at + len(before)] == before and len(after) == len(before)
    out = path.with_name("patched.parquet")
    out.write_bytes(data[:at] + after + data[at + len(before) :])
    return out


def _replaced(fields: list[Any], number: int, value: Any) -> list[Any]:
    return [(n, k, value if n == number else v) for n, k, v in fields]


def test_each_encoding_the_format_lists_is_accepted_and_no_other(tmp_path: Path) -> None:
    """A data page (v1 and v2) declaring each Parquet ``Encoding`` in turn: 0 and 2 to
    9 (BIT_PACKED, 4, too: pyarrow writes it nowhere) pass; 1 (unused) and 10 (none)
    are a damaged header. Only the value encoding counts: a v1 page's levels (fields
    3, 4) and a v2 page's level lengths (5, 6) are no encoding."""
    for options, sub, field_ in (({}, 5, 2), ({"data_page_version": "2.0"}, 8, 4)):
        path, data, header, at = _one_page_file(tmp_path, use_dictionary=False, **options)
        inner = value_of(header, sub)
        assert value_of(header, 1) == sub - 5 and value_of(inner, field_) == 0  # plain
        for encoding in range(11):
            patched = _with_header(
                path, data, header, _replaced(header, sub, _replaced(inner, field_, encoding)), at
            )
            problem = f"column chunk at byte {at}: the page header at byte {at} is damaged"
            expected = f"{problem} (values or encoding)" if encoding in (1, 10) else None
            assert verify(patched) == expected, (options, encoding)
        levels = (3, 4) if sub == 5 else (5, 6)
        odd = [(n, k, 21 if n in levels else v) for n, k, v in inner]
        assert [n for n, _, _ in odd if n in levels]  # the header holds them
        assert verify(_with_header(path, data, header, _replaced(header, sub, odd), at)) is None


def test_a_page_of_another_type_or_a_negative_count_is_damaged(tmp_path: Path) -> None:
    """Page types 1 (an index page, which no column chunk holds) and 4 (none) are a
    damaged header, named with the type; so is a dictionary page, whose values do not
    count toward the chunk's, claiming -1 values."""
    path, data, header, at = _one_page_file(tmp_path)
    assert value_of(header, 1) == 2  # the dictionary page
    where = f"column chunk at byte {at}: the page header at byte {at} is damaged"
    for kind in (1, 4):
        patched = _with_header(path, data, header, _replaced(header, 1, kind), at)
        assert verify(patched) == f"{where} (page type {kind})"
    dictionary = value_of(header, 7)
    assert value_of(dictionary, 1) == 3  # 5, 6, 7
    negative = _replaced(header, 7, _replaced(dictionary, 1, -1))
    assert verify(_with_header(path, data, header, negative, at)) == f"{where} (values or encoding)"


def test_sets_maps_doubles_and_booleans_are_skipped_to_the_next_field() -> None:
    """A page header with fields no reader asks for, of each compact type the page
    headers of EP1 lack: a set of two i32, a map of i32 to strings, a double (bytes
    that read as field headers) and a struct ending in a boolean. Each is skipped by
    its size: 1 byte of set header and 2 of items; a size, a key-value type byte and 5
    bytes of entries; 8 bytes; a boolean's field header only."""
    header = b"\x15\x00"  # field 1, i32: 0 (a data page)
    header += field(100, 10) + b"\x25\x02\x04"  # set<i32>{1, 2}
    header += field(101, 11) + b"\x02\x58" + b"\x02\x01a" + b"\x04\x00"  # map<i32, string>
    header += field(102, 7) + b"\x15\x04\x15\x06\x15\x08\x15\x0a"  # a double
    header += field(103, 12) + b"\x11\x00"  # struct {1: true}
    header += field(3, 5) + b"\x04"  # field 3, i32: 2 (the page's size; 103 came before)
    header += b"\x2c" + b"\x15\x02\x15\x00\x00" + b"\x00"  # field 5: 1 value, plain; stop
    read = ({1: 0, 3: 2, 5: {1: 1, 2: 0}}, len(header))
    assert both(header, 0, len(header), pagecrc._PAGE_HEADER) == (read, read)


def test_files_that_are_not_parquet_are_named_so(tmp_path: Path) -> None:
    """11 bytes are too short (Parquet's least: magic, footer length, magic); other
    magic bytes, or a footer length of 0 or longer than the bytes between the magics,
    are named; ``has_checksums`` cannot tell on any of them."""
    cases = {
        b"PAR1\x00\x00\x00PAR1": "the file is too short to be Parquet",
        b"PAR1\x00\x00\x00\x00PAR2": "it does not begin and end with Parquet's magic bytes",
        b"PAR0\x00\x00\x00\x00PAR1": "it does not begin and end with Parquet's magic bytes",
        b"PAR1\x00\x00\x00\x00PAR1": "its footer length is damaged",  # 0 bytes
        b"PAR1\x00\x02\x00\x00\x00PAR1": "its footer length is damaged",  # 2 of 1 byte
        # the 1 byte is a footer: a struct field (0x1c) cut short
        b"PAR1\x1c\x01\x00\x00\x00PAR1": "its footer is damaged (cut short)",
    }
    for data, problem in cases.items():
        path = tmp_path / "t.parquet"
        path.write_bytes(data)
        assert verify(path) == problem, data
        assert pagecrc.row_groups(path) == problem, data
        assert pagecrc.has_checksums(path) is None


def test_bounds_come_from_min_value_and_max_value_else_the_deprecated_pair(
    tmp_path: Path,
) -> None:
    """EP1's seq column (INT64) stores both pairs of statistics: min_value, max_value
    (fields 6, 5) and the deprecated min, max (2, 1), equal. With the deprecated pair
    changed to 1 and 7 the bounds stay 0 and 51; with min_value and max_value taken
    out they are the deprecated pair; a bound the writer marked inexact (fields 7,
    8: is_max_value_exact, is_min_value_exact) is none."""
    tree = footer_tree(EP1)
    chunks = value_of(value_of(tree, 4)[1][0], 1)[1]
    seq = value_of(chunks[2], 3)
    assert value_of(seq, 3) == (8, [b"seq"])
    stats = value_of(seq, 12)
    original = list(stats)

    def bounds(fields: list[Any], name: str) -> Any:
        stats[:] = fields
        groups = pagecrc.row_groups(with_footer(EP1, tree, tmp_path / name))
        assert not isinstance(groups, str)
        return groups[0].bounds["seq"]

    zero, top = (0).to_bytes(8, "little"), (51).to_bytes(8, "little")
    assert bounds(original, "as.parquet") == (2, zero, top)
    one, seven = (1).to_bytes(8, "little"), (7).to_bytes(8, "little")
    changed = [(n, k, {1: seven, 2: one}.get(n, v)) for n, k, v in original]
    assert bounds(changed, "deprecated-changed.parquet") == (2, zero, top)
    old_only = [(n, k, v) for n, k, v in changed if n not in (5, 6)]
    assert bounds(old_only, "deprecated-only.parquet") == (2, one, seven)
    for inexact in (7, 8):
        marked = [(n, k, False if n == inexact else v) for n, k, v in original]
        assert bounds(marked, f"inexact-{inexact}.parquet") is None


def test_a_row_of_a_chunk_with_no_values_and_no_pages_is_refused(tmp_path: Path) -> None:
    """A row group of 1 row whose second column chunk holds 0 values in 0 bytes (as an
    empty row group's chunks do) leaves that row without a value."""
    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"x": [1], "y": [2]}), path)
    tree = footer_tree(path)
    chunks = value_of(value_of(tree, 4)[1][0], 1)[1]
    meta = value_of(chunks[1], 3)
    meta[:] = [(n, k, 0 if n in (5, 7) else v) for n, k, v in meta]
    patched = with_footer(path, tree, tmp_path / "empty-chunk.parquet")
    assert pagecrc.row_groups(patched) == (
        "its footer is damaged (a column chunk holds 0 values for 1 rows)"
    )


# --- issue 38, generated pass of pagecrc.py (i38z) ---


def test_a_varint_takes_ten_bytes_at_most() -> None:
    """A varint holds 64 bits in 7 a byte: 9 continuation bytes (0x80) then 0x01 read
    as 2**63 in 10 bytes; a 10th continuation byte (the next would shift by 70) is
    refused as too long, by both readers, where an 11th byte would end it."""
    ten = b"\x80" * 9 + b"\x01"
    assert pagecrc._varint(ten, 0, len(ten)) == (2**63, 10)
    eleven = b"\x80" * 10 + b"\x01"
    with pytest.raises(pagecrc._Bad, match="varint too long"):
        pagecrc._varint(eleven, 0, len(eleven))
    data = b"\x16" + ten + b"\x00"  # field 1, an i64: zigzag 2**63 is 2**62
    assert both(data, 0, len(data), {1: int}) == (({1: 2**62}, 12),) * 2
    data = b"\x16" + eleven + b"\x00"
    assert both(data, 0, len(data), {1: int}) == ("refused", "refused")


def test_a_long_field_header_reads_its_id_zigzag() -> None:
    """A field header of type alone (0x05: an i32) is followed by its id as a zigzag
    varint: 1 is field -1, 2 is field 1. An i32 of 7 (zigzag 14) at field -1 is no field
    1; the next field, 2 ids on (0x25: an i32 of 2), is field 1."""
    data = field(-1, 5) + b"\x0e" + b"\x25\x04" + b"\x00"
    assert data[:2] == b"\x05\x01"
    assert both(data, 0, len(data), {1: int}) == (({1: 2}, len(data)),) * 2
    assert both(data, 0, len(data), {1: int, 3: int}) == (({1: 2}, len(data)),) * 2
    data = field(1, 5) + b"\x0e" + b"\x00"
    assert data[:2] == b"\x05\x02"
    assert both(data, 0, len(data), {1: int}) == (({1: 7}, len(data)),) * 2


def _chunk_meta(tree: list[tuple[int, int, Any]], column: int) -> list[Any]:
    """The ``ColumnMetaData`` fields of column ``column`` in the first row group of a
    footer tree (changed in place, written back by :func:`with_footer`)."""
    chunks = value_of(value_of(tree, 4)[1][0], 1)[1]
    meta: list[Any] = value_of(chunks[column], 3)
    return meta


def _set(meta: list[Any], number: int, value: Any, kind: int = 6) -> None:
    """Field ``number`` of ``meta`` set to ``value`` (added, in field order, if absent)."""
    kept = [(n, k, v) for n, k, v in meta if n != number]
    meta[:] = sorted([*kept, (number, kind, value)], key=lambda f: f[0])


def test_an_empty_row_groups_pages_are_checked_and_chunks_of_no_bytes_are_none(
    tmp_path: Path,
) -> None:
    """pyarrow writes an empty table as one row group of 0 rows whose two chunks (0
    values each) hold a dictionary page of a 1-byte body each, with a checksum, at
    data_page_offset 0 and dictionary_page_offset 4: the chunks start at their
    dictionary pages (4, then 4 + the first's size) and their pages are checked (the
    body byte changed fails the checksum). A chunk of 0 values in 0 bytes has no
    pages: both chunks so, the row group is the one empty object."""
    path = tmp_path / "empty.parquet"
    table = pa.table({"x": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    pq.write_table(table, path, write_page_checksum=True)
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str) and len(groups) == 1 and groups[0].rows == 0
    x, s = groups[0].chunks
    assert (x.name, x.start, x.values, s.name, s.start, s.values) == ("x", 4, 0, "s", 4 + x.size, 0)
    assert x.size > 0 and verify(path) is None
    data = path.read_bytes()
    ((at, kind, values, _, body),) = _pages_of(data, x.start, x.start + x.size)
    assert (at, kind, values, x.start + x.size - body) == (4, 2, 0, 1)  # a dictionary page
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(data[:body] + bytes([data[body] ^ 1]) + data[body + 1 :])
    assert verify(damaged) == "column chunk at byte 4: the page at byte 4 fails its checksum"
    tree = footer_tree(path)
    for column in (0, 1):
        _set(_chunk_meta(tree, column), 7, 0)  # total_compressed_size: 0 bytes
    none = pagecrc.row_groups(with_footer(path, tree, tmp_path / "none.parquet"))
    assert isinstance(none, list) and len(none) == 1 and none[0] is pagecrc._EMPTY


def _plain_pair(tmp_path: Path) -> tuple[Path, pagecrc.Chunk, pagecrc.Chunk]:
    """A file of x (INT64: 5, 6, 7) and y (INT32: 1, 2, 3), plain (no dictionary page),
    with checksums, and its two column chunks: x at byte 4, y right after it, the
    footer right after y."""
    path = tmp_path / "pair.parquet"
    table = pa.table({"x": pa.array([5, 6, 7], pa.int64()), "y": pa.array([1, 2, 3], pa.int32())})
    pq.write_table(table, path, use_dictionary=False, write_page_checksum=True)
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str)
    x, y = groups[0].chunks
    data = path.read_bytes()
    assert (x.start, y.start, y.start + y.size) == (4, 4 + x.size, len(data) - 8 - _footer(data))
    assert verify(path) is None
    return path, x, y


def _footer(data: bytes) -> int:
    return int.from_bytes(data[-8:-4], "little")


def test_a_column_chunk_lies_in_the_data_between_the_magic_and_the_footer(
    tmp_path: Path,
) -> None:
    """x's chunk (bytes 4 to 4 + size) and y's, which ends where the footer starts
    (``end``), changed in the footer: x starting at 3 (in the magic bytes), x of -1
    bytes, or y one byte longer (past ``end``) lie outside the data; x one byte
    longer (into y's first byte) claims more bytes than the data holds; x of 0 bytes
    lies inside, but holds no page for its 3 values."""
    path, x, y = _plain_pair(tmp_path)
    end = y.start + y.size
    outside = "its footer is damaged (a column chunk (bytes {} to {}) lies outside the data)"
    cases: list[tuple[int, int, int, str]] = [
        (0, 9, 3, outside.format(3, 3 + x.size)),  # data_page_offset
        (0, 7, -1, outside.format(4, 3)),  # total_compressed_size
        (1, 7, y.size + 1, outside.format(y.start, end + 1)),
        (0, 7, x.size + 1, "its footer is damaged (column chunks overlap)"),
    ]
    for column, number, value, problem in cases:
        tree = footer_tree(path)
        _set(_chunk_meta(tree, column), number, value)
        changed = with_footer(path, tree, tmp_path / f"{column}-{number}-{value}.parquet")
        assert pagecrc.row_groups(changed) == problem, (column, number, value)
        assert verify(changed) == problem
    tree = footer_tree(path)
    _set(_chunk_meta(tree, 0), 7, 0)
    empty = with_footer(path, tree, tmp_path / "x-empty.parquet")
    groups = pagecrc.row_groups(empty)
    assert not isinstance(groups, str) and groups[0].chunks[0] == ("x", 4, 0, 3)
    assert (
        verify(empty) == "column chunk at byte 4: its pages hold 0 values where the footer says 3"
    )


def test_a_dictionary_page_offset_past_the_first_data_page_is_not_the_start(
    tmp_path: Path,
) -> None:
    """A chunk starts at its dictionary page only when that lies before its first
    data page (or the data page's offset is no offset, below 4): x's first data page
    at byte 4 with a dictionary_page_offset of 14 (inside its page) still starts at
    4, and its pages check out."""
    path, x, y = _plain_pair(tmp_path)
    tree = footer_tree(path)
    _set(_chunk_meta(tree, 0), 11, 14)
    changed = with_footer(path, tree, tmp_path / "dictionary-after.parquet")
    groups = pagecrc.row_groups(changed)
    assert not isinstance(groups, str) and groups[0].chunks == (x, y)
    assert verify(changed) is None


def test_bounds_from_one_of_min_value_and_max_value_are_the_deprecated_pair(
    tmp_path: Path,
) -> None:
    """x's statistics with the deprecated min, max (fields 2, 1) changed to 1 and 9:
    with only one of min_value (6) and max_value (5) the bounds are the deprecated
    pair, 1 and 9; with both (and without the is_exact flags 7 and 8, which a writer
    may leave out) they are min_value and max_value, 5 and 7."""
    path, _, _ = _plain_pair(tmp_path)
    one, five, seven, nine = (n.to_bytes(8, "little") for n in (1, 5, 7, 9))
    for kept, bound in (((6,), (2, one, nine)), ((5,), (2, one, nine)), ((5, 6), (2, five, seven))):
        tree = footer_tree(path)
        stats = value_of(_chunk_meta(tree, 0), 12)
        stats[:] = [
            (n, k, {1: nine, 2: one}.get(n, v)) for n, k, v in stats if n in (1, 2, 3, *kept)
        ]
        groups = pagecrc.row_groups(with_footer(path, tree, tmp_path / f"{kept}.parquet"))
        assert not isinstance(groups, str) and groups[0].bounds["x"] == bound, kept


def test_a_row_groups_row_count_and_chunks_are_checked(tmp_path: Path) -> None:
    """EP1's one row group (52 rows, 16 column chunks) with its row count (field 3)
    left out or -1 is damaged; with its column chunks (field 1) left out, its 52 rows
    have no values; with 0 rows and no chunks it is the one empty object (the file
    then says 0 rows)."""
    damaged = "its footer is damaged ({})"
    cases: list[tuple[str, Any, str | None]] = [
        ("no-count", lambda n, k, v: n != 3, damaged.format("a row group's row count is damaged")),
        ("minus-one", -1, damaged.format("a row group's row count is damaged")),
        (
            "no-chunks",
            lambda n, k, v: n != 1,
            damaged.format("a row group of 52 rows lists no column chunks"),
        ),
    ]
    for name, change, problem in cases:
        tree = footer_tree(EP1)
        group = value_of(tree, 4)[1][0]
        if callable(change):
            group[:] = [f for f in group if change(*f)]
        else:
            _set(group, 3, change)
        path = with_footer(EP1, tree, tmp_path / f"{name}.parquet")
        assert pagecrc.row_groups(path) == problem, name
    tree = [(n, k, 0 if n == 3 else v) for n, k, v in footer_tree(EP1)]
    group = value_of(tree, 4)[1][0]
    group[:] = [(n, k, 0 if n == 3 else v) for n, k, v in group if n != 1]
    groups = pagecrc.row_groups(with_footer(EP1, tree, tmp_path / "empty.parquet"))
    assert isinstance(groups, list) and len(groups) == 1 and groups[0] is pagecrc._EMPTY


def test_a_row_groups_and_a_column_chunks_fields_nest_as_deep_as_the_footers_limit(
    tmp_path: Path,
) -> None:
    """A row group's fields are read at depth 2 (FileMetaData's at 0), a column chunk's
    at 4: a field of lists in lists no reader asks for, 31 lists deep in the row group
    or 29 in its first column chunk, puts its innermost list at depth 32, read; one
    list deeper is refused as nested too deeply, as the oracle reads the same footer."""
    for where, deepest in (("group", 31), ("chunk", 29)):
        for deep in (deepest, deepest + 1):
            nested: Any = (9, [])  # an empty list of lists, in lists
            for _ in range(deep - 1):
                nested = (9, [nested])
            tree = footer_tree(EP1)
            group = value_of(tree, 4)[1][0]
            (value_of(group, 1)[1][0] if where == "chunk" else group).append((100, 9, nested))
            path = with_footer(EP1, tree, tmp_path / f"{where}-{deep}.parquet")
            groups = pagecrc.row_groups(path)
            data = path.read_bytes()
            start, end = len(data) - 8 - _footer(data), len(data) - 8
            fast, plain = both(data, start, end, FOOTER)
            if deep == deepest:
                assert isinstance(groups, list) and groups[0].rows == 52, where
                assert fast == plain != "refused"
            else:
                assert groups == "its footer is damaged (nested too deeply)", where
                assert fast == plain == "refused"


def test_a_column_chunk_without_metadata_is_damaged(tmp_path: Path) -> None:
    """EP1's first column chunk with its ColumnMetaData (field 3) left out."""
    tree = footer_tree(EP1)
    chunk = value_of(value_of(tree, 4)[1][0], 1)[1][0]
    chunk[:] = [f for f in chunk if f[0] != 3]
    path = with_footer(EP1, tree, tmp_path / "no-meta.parquet")
    assert pagecrc.row_groups(path) == "its footer is damaged (a column chunk has no metadata)"
    assert verify(path) == "its footer is damaged (a column chunk has no metadata)"


def test_a_column_chunk_without_its_values_size_or_first_page_is_damaged(tmp_path: Path) -> None:
    """EP1's first column chunk with one of num_values (5), total_compressed_size (7)
    or data_page_offset (9) left out of its ColumnMetaData."""
    for number in (5, 7, 9):
        tree = footer_tree(EP1)
        meta = _chunk_meta(tree, 0)
        meta[:] = [f for f in meta if f[0] != number]
        path = with_footer(EP1, tree, tmp_path / f"no-{number}.parquet")
        problem = "its footer is damaged (a column chunk's offsets are damaged)"
        assert pagecrc.row_groups(path) == problem, number


def test_groups_read_before_hold_while_the_file_keeps_their_pages(tmp_path: Path) -> None:
    """EP1's pages end at byte 2787, where its footer starts: with the footer cut out
    (the last 8 bytes kept, so the file still ends like Parquet), the row groups read
    before still find every page whole; one byte fewer and the last chunk (at 2730)
    lies past the end of the file."""
    groups = pagecrc.row_groups(EP1)
    assert not isinstance(groups, str)
    last = max(chunk.start + chunk.size for group in groups for chunk in group.chunks)
    assert last == len(DATA) - 8 - _footer(DATA) == 2787
    path = tmp_path / "cut.parquet"
    path.write_bytes(DATA[:last] + DATA[-8:])
    assert verify(path, groups) is None
    path.write_bytes(DATA[: last - 1] + DATA[-8:])
    assert verify(path, groups) == "column chunk at byte 2730: it lies past the end of the file"


def test_a_footer_of_16_mib_or_more_is_found_by_all_four_bytes_of_its_length(
    tmp_path: Path,
) -> None:
    """EP1 with a string of 2**24 bytes in a footer field no reader asks for: the
    footer's length (its 4 little-endian bytes before the closing magic) is then
    2**24 and more, its fourth byte 1; the footer is found, read past the string,
    and its row groups are EP1's."""
    size = _footer(DATA)
    junk = field(101, 8) + varint(2**24) + b"k" * 2**24
    footer = DATA[-8 - size : -9] + junk + b"\x00"  # before FileMetaData's stop
    assert 2**24 < len(footer) < 2**25
    path = tmp_path / "big-footer.parquet"
    path.write_bytes(DATA[: -8 - size] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    assert path.read_bytes()[-5] == 1
    assert pagecrc.row_groups(path) == pagecrc.row_groups(EP1)
    assert verify(path) is None


def test_has_checksums_tells_by_the_first_page(tmp_path: Path) -> None:
    """EP1's pages carry checksums (True); a file pyarrow wrote without them does not
    (False). With EP1's first page header damaged (its first field header 0x15 made
    0x1F, a Thrift type 15 that does not exist), or a file with no page (an empty
    row group), it cannot tell (None). Given the row groups read before the footer
    was cut out, it reads just the first page header: True still."""
    assert pagecrc.has_checksums(EP1) is True
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": pa.array([5, 6, 7], pa.int64())}), plain)
    assert pagecrc.has_checksums(plain) is False
    damaged = tmp_path / "damaged.parquet"
    assert DATA[4] == 0x15
    damaged.write_bytes(DATA[:4] + b"\x1f" + DATA[5:])
    assert pagecrc.has_checksums(damaged) is None
    problem = "the page header at byte 4 is damaged (unknown Thrift type 15)"
    assert verify(damaged) == f"column chunk at byte 4: {problem}"
    tree = [(n, k, 0 if n == 3 else v) for n, k, v in footer_tree(EP1) if n != 4]
    empty = with_footer(
        EP1, [*tree, (4, 9, (12, [[(1, 9, (12, [])), (3, 6, 0)]]))], tmp_path / "e.parquet"
    )
    assert pagecrc.row_groups(empty) == [pagecrc._EMPTY]
    assert pagecrc.has_checksums(empty) is None
    groups = pagecrc.row_groups(EP1)
    assert not isinstance(groups, str)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(DATA[: len(DATA) - 8 - _footer(DATA)] + DATA[-8:])
    assert pagecrc.row_groups(cut) == "its footer length is damaged"
    assert pagecrc.has_checksums(cut) is None
    assert pagecrc.has_checksums(cut, groups) is True


def test_a_page_size_absent_negative_or_past_its_chunk_is_damaged(tmp_path: Path) -> None:
    """The first page of a one-column file (a dictionary page at byte 4, its body 23
    bytes) with compressed_page_size (field 3) -1, or sent as an i16 (of another type
    than Parquet's: absent), has a damaged size; so has it, whole, in a chunk the
    footer makes one byte too short for it."""
    path, data, header, at = _one_page_file(tmp_path)
    assert at == 4 and value_of(header, 3) == 23
    damaged = "column chunk at byte 4: the page at byte 4 has a damaged size"
    for name, new in (
        ("minus-one", _replaced(header, 3, -1)),
        ("i16", [(n, 4 if n == 3 else k, v) for n, k, v in header]),
    ):
        patched = _with_header(path, data, header, new, at)
        assert verify(patched) == damaged, name
    body = at + len(encode(header))
    tree = footer_tree(path)
    _set(_chunk_meta(tree, 0), 7, body + 23 - 1 - 4)  # the chunk ends a byte into the body
    assert verify(with_footer(path, tree, tmp_path / "short.parquet")) == damaged


def _page(kind: int, body: bytes, values: int, crc: bool = True) -> bytes:
    """A page: its header (type, compressed size, the CRC-32 of ``body`` as Thrift's
    signed i32, the page type's header with ``values`` in plain encoding), then ``body``."""
    sub, count, encoding = pagecrc._LAYOUT[kind]
    signed = zlib.crc32(body) - (1 << 32 if zlib.crc32(body) >= 1 << 31 else 0)
    fields = [(1, 5, kind), (2, 5, len(body)), (3, 5, len(body))]
    fields += [(4, 5, signed)] if crc else []
    return encode([*fields, (sub, 12, [(count, 5, values), (encoding, 5, 0)])]) + body


def _walk(pages: bytes, values: int) -> str | None:
    """``_pages`` on a column chunk of ``pages`` at byte 4 of a file (with 8 bytes after)."""
    data = b"PAR1" + pages + b"\0\0\0\0PAR1"
    with memoryview(data) as view:
        chunk = pagecrc.Chunk("x", 4, len(pages), values)
        return pagecrc._pages(data, view, chunk)  # type: ignore[arg-type]


def test_a_page_of_no_bytes_is_a_page() -> None:
    """A data page of 0 values in 0 bytes (its CRC, of nothing, 0), then one of 3 values
    in 3 bytes: the chunk's 3 values, whole; its sizes are no damage."""
    empty = _page(0, b"", 0)
    assert zlib.crc32(b"") == 0 and b"\x15\x00\x15\x00\x15\x00" in empty
    assert _walk(empty + _page(0, b"abc", 3), 3) is None
    assert _walk(_page(0, b"abc", 3) + empty, 3) is None
    assert (
        _walk(_page(0, b"abc", 3) + empty, 4) == "its pages hold 3 values where the footer says 4"
    )


def test_a_page_without_the_header_of_its_type_is_damaged() -> None:
    """A data page (type 0) whose header holds a dictionary page's header (field 7)
    in place of a data page's (5) has none: damaged, named with its type; as a
    dictionary page (type 2) the same header is sound."""
    dictionary = _page(2, b"abc", 3)
    assert _walk(dictionary + _page(0, b"de", 3), 3) is None
    as_data = b"\x15\x00" + dictionary[2:]  # field 1, the page type: 0
    assert dictionary[:2] == b"\x15\x04"
    assert _walk(as_data, 3) == "the page header at byte 4 is damaged (page type 0)"


def test_structs_in_skipped_structs_nest_to_the_same_limit() -> None:
    """A skipped field (100) of structs in structs (each the field 1 of the one around
    it, the innermost empty): 33 structs deep is read past, its innermost skipped at
    depth 32; 34 deep is refused, by both readers."""
    for deep in (33, 34):
        data = field(100, 12) + b"\x1c" * (deep - 1) + b"\x00" * deep + b"\x00"
        fast, plain = both(data, 0, len(data), {1: int})
        assert fast == plain == ("refused" if deep > 33 else ({}, len(data)))


def test_a_value_cut_short_in_a_map_is_named_so_before_what_follows_it() -> None:
    """A skipped map of one entry, a double key and a value of type 0 (no Thrift type):
    with the key's 8 bytes there (the bytes ending with them, or going on), the value's
    type is named; with 3 of them, the map is cut short, which is found at the key,
    before its value is looked at."""
    head = field(100, 11) + varint(1) + bytes([0x70])  # map<double, type 0>, 1 entry
    whole = head + b"\x00" * 8 + b"\x00\x00"
    for end in (len(whole), len(head) + 8):
        assert _problem(whole[:end]) == "unknown Thrift type 0"
    short = head + b"\x00" * 3
    assert _problem(short) == "cut short"
    assert both(short, 0, len(short), {1: int}) == ("refused", "refused")


def test_a_row_group_narrowed_to_some_columns_keeps_only_their_chunks() -> None:
    """EP1's row group (16 chunks, in column order: run, rank, seq, ...) narrowed to
    seq and rank keeps those two chunks, in the file's order, with its rows and bounds;
    narrowed to no column it keeps none; a name no column has adds nothing."""
    groups = pagecrc.row_groups(EP1)
    assert not isinstance(groups, str)
    group = groups[0]
    names = [chunk.name for chunk in group.chunks]
    assert len(names) == 16 and names[:3] == ["run", "rank", "seq"]
    narrowed = group.only({"seq", "rank", "no such column"})
    assert [chunk.name for chunk in narrowed.chunks] == ["rank", "seq"]
    assert narrowed.chunks == group.chunks[1:3]
    assert (narrowed.rows, narrowed.bounds) == (52, group.bounds)
    assert group.only(()).chunks == ()


def _problem(data: bytes) -> str:
    """What ``_struct`` finds wrong with ``data`` (all of it), read for field 1."""
    with pytest.raises(pagecrc._Bad) as refused:
        pagecrc._struct(data, 0, len(data), {1: int})
    return str(refused.value)


def test_lists_and_maps_claiming_more_elements_than_bytes_are_named_so() -> None:
    """Each element of a list or map takes a byte at least. A skipped list of bytes
    (0x_3) with 4 bytes left ("abc" and a stop): of 4 it fits, and the struct is then
    cut short (its stop was taken as an element); of 5, or 1000 (a long size), it is
    longer than its bytes. A map of 1 entry with no byte left for its types is longer
    than its bytes; one of 0 entries at the very end of the bytes, or an i32 or an i16
    (read inline, or skipped) with no byte left, is cut short (no byte past the end is
    looked at)."""
    skipped = field(100, 9)
    assert pagecrc._struct(skipped + b"\x33abc\x00", 0, 8, {1: int}) == ({}, 8)
    assert _problem(skipped + b"\x43abc\x00") == "cut short"
    assert _problem(skipped + b"\x53abc\x00") == "a list longer than its bytes"
    assert _problem(skipped + listed(3, 1000) + b"abc\x00") == "a list longer than its bytes"
    assert _problem(field(100, 11) + b"\x01") == "a list longer than its bytes"
    assert _problem(field(100, 11) + b"\x00") == "cut short"
    assert _problem(field(100, 5)) == "cut short"
    assert _problem(field(100, 4)) == "cut short"  # an i16, skipped


def test_a_struct_read_by_the_spec_nests_one_level_deeper() -> None:
    """A data page header (field 5 of a page header, read at depth 1) holding a field
    no reader asks for of lists in lists: 32 lists deep (the innermost at depth 32) is
    read, with the page's values and encoding; 33 deep is refused, by both readers."""
    for deep in (32, 33):
        nested: Any = (9, [])
        for _ in range(deep - 1):
            nested = (9, [nested])
        data = encode([(1, 5, 0), (3, 5, 0), (5, 12, [(1, 5, 1), (2, 5, 0), (100, 9, nested)])])
        read = ({1: 0, 3: 0, 5: {1: 1, 2: 0}}, len(data))
        fast, plain = both(data, 0, len(data), pagecrc._PAGE_HEADER)
        assert fast == plain == ("refused" if deep > 32 else read)


def test_lists_of_other_elements_than_asked_read_as_empty() -> None:
    """A spec's list of structs (field 6 of HANDMADE) sent as a list of two i32 (1,
    2), and its list of strings (field 5) sent as a list of one empty struct, read as
    no structs and no string, and are skipped to the next field (1: an i32 of 3)."""
    of_ints = field(6, 9) + b"\x25\x02\x04" + field(1, 5) + b"\x06\x00"
    assert both(of_ints, 0, len(of_ints), HANDMADE) == (({6: [], 1: 3}, len(of_ints)),) * 2
    of_structs = field(5, 9) + b"\x1c\x00" + field(1, 5) + b"\x06\x00"
    read = ({5: "", 1: 3}, len(of_structs))
    assert both(of_structs, 0, len(of_structs), HANDMADE) == (read, read)


def test_a_maps_types_byte_is_there_only_when_it_has_entries() -> None:
    """A skipped map<i32, i32> of one entry (size 1, types 0x55, key 1, value 2) and an
    empty map (size 0, no types byte), each followed by field 1, an i32 of 3: both
    skipped to the field, by both readers."""
    for skipped in (b"\x01\x55\x02\x04", b"\x00"):
        data = field(100, 11) + skipped + field(1, 5) + b"\x06\x00"
        assert both(data, 0, len(data), {1: int}) == (({1: 3}, len(data)),) * 2
