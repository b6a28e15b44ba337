"""The Thrift reader of :mod:`warmfit.format.pagecrc` against a plain one, on damaged bytes.

``_Reader.struct`` reads field headers, integers and skipped strings with the
position in a local variable, for speed. This oracle reads the compact
protocol one byte at a time, as the specification puts it; on real page
headers and footers, whole and with bytes changed or cut, both must give the
same fields, or both refuse the bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from warmfit.format import pagecrc

REPO = Path(__file__).resolve().parent.parent
EP1 = REPO / "traces/pr991/EP1.parquet"


class Refused(Exception):
    pass


class Oracle:
    """The compact protocol, byte by byte (what ``_Reader.struct`` keeps and skips)."""

    def __init__(self, data: bytes, pos: int, end: int, keep_bytes: bool) -> None:
        self.data, self.pos, self.end, self.keep = data, pos, end, keep_bytes

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

    def string(self) -> bytes:
        n = self.varint()
        if n > self.end - self.pos:
            raise Refused
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def value(self, kind: int, depth: int, kept: bool) -> Any:
        """One value of ``kind`` in a struct at ``depth``; ``kept``: as the struct keeps
        it (else it is skipped, elements of lists one level deeper)."""
        if not kept and depth > 32:
            raise Refused
        if kind in (1, 2):
            return kind == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.zigzag() if kept else self.varint()
        if kind == 7:
            self.pos += 8
            if self.pos > self.end:
                raise Refused
            return None
        if kind == 8:
            return self.string()
        if kind in (9, 10):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            element = head & 0x0F
            if kept and size > self.end - self.pos:
                raise Refused
            if kept:
                return [self.value(element, depth, True) for _ in range(size)]
            return [
                self.value(3 if element in (1, 2) else element, depth + 1, False)
                for _ in range(size)
            ]
        if kind == 11:
            size = self.varint()
            types = self.byte() if size else 0
            key, value = (3 if t in (1, 2) else t for t in (types >> 4, types & 0x0F))
            for _ in range(size):
                self.value(key, depth + 1, False)
                self.value(value, depth + 1, False)
            return None
        if kind == 12:
            return self.struct(depth + 1)
        raise Refused

    def struct(self, depth: int) -> dict[int, Any]:
        if depth > 32:
            raise Refused
        found: dict[int, Any] = {}
        field = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == 0:
                return found
            field = field + (head >> 4) if head >> 4 else self.zigzag()
            nxt = self.data[self.pos] & 0x0F if self.pos < self.end else None
            keep = (
                kind in (5, 6, 12)
                or (kind in (1, 2, 8) and self.keep)
                or (kind == 9 and nxt == 12)
                or (kind == 9 and nxt == 8 and self.keep)
            )
            value = self.value(kind, depth, keep)
            if keep:
                found[field] = value


def _parse(reader: Any) -> tuple[str, Any]:
    try:
        return "ok", reader.struct(0)
    except (Refused, pagecrc._Bad):
        return "refused", None


def _both(data: bytes, start: int, end: int, keep: bool) -> tuple[Any, Any]:
    """What the fast reader and the oracle make of ``data[start:end]``."""
    fast = _parse(pagecrc._Reader(data, start, end, keep_bytes=keep))
    return fast, _parse(Oracle(data, start, end, keep))


def _regions() -> list[tuple[int, int, bool]]:
    """Where EP1's page headers start (with the bytes up to the next page) and its footer."""
    data = EP1.read_bytes()
    meta = pq.ParquetFile(EP1).metadata
    regions = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            column = meta.row_group(g).column(c)
            start = column.dictionary_page_offset or column.data_page_offset
            regions.append((start, start + column.total_compressed_size, False))
    footer = int.from_bytes(data[-8:-4], "little")
    regions.append((len(data) - 8 - footer, len(data) - 8, True))
    return regions


DATA = EP1.read_bytes()
REGIONS = _regions()


@settings(max_examples=400, deadline=None)
@given(
    region=st.sampled_from(REGIONS),
    changes=st.lists(st.tuples(st.integers(0, 96), st.integers(0, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 96)),
)
def test_the_fast_reader_reads_what_the_plain_one_does(
    region: tuple[int, int, bool], changes: list[tuple[int, int]], cut: int | None
) -> None:
    start, end, keep = region
    data = bytearray(DATA)
    for at, value in changes:
        if start + at < end:
            data[start + at] = value
    if cut is not None:
        end = min(end, start + cut)
    fast, plain = _both(bytes(data), start, end, keep)
    assert fast == plain


def test_the_oracle_reads_a_real_page_header() -> None:
    """The oracle is not vacuous: a whole page header reads as one, with its sizes."""
    start, end, _ = REGIONS[0]
    kind, header = _parse(Oracle(DATA, start, end, False))
    assert kind == "ok" and header[1] in (0, 2, 3) and header[3] > 0


def test_every_cut_of_every_header_reads_alike() -> None:
    """Cut at each byte of each page header's first 160 (and of the footer): a field
    cut short must be refused by both readers at the same places."""
    for start, end, keep in REGIONS:
        for cut in range(min(end - start, 160) + 1):
            fast, plain = _both(DATA, start, start + cut, keep)
            assert fast == plain, (start, cut)


def test_a_map_of_booleans_is_read_byte_by_byte() -> None:
    """A map whose keys and values are booleans holds one byte each: a huge one
    that claims more than its bytes is refused (it was walked forever before)."""
    data = bytes.fromhex("7bc2f4a2e03b226bbd3531b53664382c01")
    assert _both(data, 0, len(data), False) == (("refused", None), ("refused", None))
    assert _both(data, 0, len(data), True) == (("refused", None), ("refused", None))
