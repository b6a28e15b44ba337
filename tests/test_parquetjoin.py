"""Parquet parts joined into one file without re-encoding (warmfit.format.parquetjoin).

The joined file must read as the parts' rows in order (pyarrow, with its own
page-checksum verification, and polars), keep every part's row group as it
was encoded (statistics, dictionaries), and pass warmfit's own page walk,
which follows every offset the footer gives.
"""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warmfit.format.pagecrc import _Reader, verify
from warmfit.format.parquetjoin import (
    _I16,
    _I64,
    JoinedParquet,
    PartError,
    _Field,
    _fields,
    _list_head,
    _moved,
    _row_group,
    _varint,
    _zigzag,
)
from warmfit.format.schema import PER_WAVE_KEY
from warmfit.format.trace import read_trace
from warmfit.replay import replay
from warmfit.replay.perwave import PartEncoder, PerWaveWriter


def _part(frame: pl.DataFrame, **options: object) -> bytes:
    """A part as pyarrow writes it (no page index: polars writes one, see below)."""
    buffer = io.BytesIO()
    pq.write_table(frame.to_arrow(), buffer, compression="zstd", **options)  # type: ignore[arg-type]
    return buffer.getvalue()


def _joined(parts: list[bytes]) -> bytes:
    sink = io.BytesIO()
    joined = JoinedParquet(sink)
    for part in parts:
        joined.append(part)
    joined.close()
    assert joined.position == len(sink.getvalue())
    return sink.getvalue()


def _checked(data: bytes, tmp: Path) -> pq.ParquetFile:
    """The joined file, after every check a reader can make of it."""
    path = tmp / "joined.parquet"
    path.write_bytes(data)
    assert verify(path) is None  # every page where the footer says, checksums whole
    pq.read_table(path, page_checksum_verification=True)
    return pq.ParquetFile(path)


def test_three_parts_make_one_file_of_their_row_groups(tmp_path: Path) -> None:
    a = pl.DataFrame({"run": ["r0"] * 3, "n": [1, 2, 3], "x": [0.5, None, 2.0]})
    b = pl.DataFrame({"run": ["r1"] * 2, "n": [40, 50], "x": [1.0, 1.5]})
    c = pl.DataFrame({"run": ["r2"], "n": [600], "x": [None]}, schema=a.schema)
    data = _joined([_part(a), _part(b), _part(c)])
    file = _checked(data, tmp_path)
    # 3 + 2 + 1 rows, one row group a part, numbered 0, 1, 2
    assert file.metadata.num_rows == 6
    assert [file.metadata.row_group(i).num_rows for i in range(3)] == [3, 2, 1]
    assert pl.read_parquet(io.BytesIO(data)).equals(pl.concat([a, b, c]))
    for i, part in enumerate((a, b, c)):
        assert pl.from_arrow(file.read_row_group(i)).equals(part)  # type: ignore[union-attr]
        # the statistics travel with the row group: r1's bounds are r1's
        stats = file.metadata.row_group(i).column(0).statistics
        assert (stats.min, stats.max) == (f"r{i}", f"r{i}")
        # the dictionary page moved with its chunk
        moved = file.metadata.row_group(i).column(0)
        assert moved.has_dictionary_page
        assert 4 <= moved.dictionary_page_offset < moved.data_page_offset
    # the second part's chunks now start after the first's: the offsets moved
    first = pq.ParquetFile(io.BytesIO(_part(b))).metadata.row_group(0).column(1)
    assert file.metadata.row_group(1).column(1).data_page_offset > first.data_page_offset


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "bb", "ccc", "é"]),
                st.integers(-(2**62), 2**62),
                st.none() | st.floats(allow_nan=False),
                st.booleans(),
            ),
            max_size=40,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_parts_join_to_their_rows_in_order(rows: list[list[tuple[object, ...]]]) -> None:
    schema = {"s": pl.String(), "i": pl.Int64(), "f": pl.Float64(), "b": pl.Boolean()}
    frames = [pl.DataFrame(part, schema=schema, orient="row") for part in rows]
    data = _joined([_part(frame) for frame in frames])
    got = pl.read_parquet(io.BytesIO(data))
    assert got.equals(pl.concat(frames))
    metadata = pq.ParquetFile(io.BytesIO(data)).metadata
    assert metadata.num_rows == sum(frame.height for frame in frames)


def test_row_groups_are_renumbered_and_many_a_part_keep_their_order(tmp_path: Path) -> None:
    frame = pl.DataFrame({"n": list(range(10)), "s": list("abcdefghij")})
    # row groups of 4, 4 and 2 rows, then 10 of 1
    data = _joined([_part(frame, row_group_size=4), _part(frame, row_group_size=1)])
    file = _checked(data, tmp_path)
    assert file.metadata.num_row_groups == 3 + 10
    assert pl.read_parquet(io.BytesIO(data)).equals(pl.concat([frame, frame]))
    # RowGroup.ordinal (pyarrow leaves it out; polars writes it): the file's numbering
    head = bytes([(7 - 3) << 4 | _I16])  # field 7 after field 3: a delta of 4; an i16
    group = [_Field(3, _I64, b"\x36", _varint(8)), _Field(7, _I16, head, _varint(0))]
    fields = _fields(_Reader(_row_group(group, 100, 12), 0, 64))
    assert [(f.number, _zigzag(f.value)) for f in fields] == [(3, 4), (7, 12)]


def test_a_part_with_a_page_index_or_after_the_footer_is_refused() -> None:
    """An offset index lists its pages' file offsets, inside the bytes the join
    copies as they are: a part with one (polars writes one) is refused, whole."""
    sink = io.BytesIO()
    joined = JoinedParquet(sink)
    joined.append(_part(pl.DataFrame({"n": [1]})))
    before = sink.getvalue()
    indexed = io.BytesIO()
    pl.DataFrame({"n": [2]}).write_parquet(indexed)
    untouched = io.BytesIO()
    with pytest.raises(PartError, match="offset index"):
        JoinedParquet(untouched).append(indexed.getvalue())
    assert untouched.getvalue() == b""
    with pytest.raises(PartError, match="offset index"):
        joined.append(_part(pl.DataFrame({"n": [2]}), write_page_index=True))
    assert sink.getvalue() == before and joined.rows == 1 and len(joined._groups) == 1
    joined.close()
    with pytest.raises(PartError, match="closed"):
        joined.append(_part(pl.DataFrame({"n": [3]})))
    with pytest.raises(PartError, match="closed"):
        joined.close()
    assert pl.read_parquet(io.BytesIO(sink.getvalue())).get_column("n").to_list() == [1]


def test_a_part_of_another_schema_or_not_parquet_is_refused() -> None:
    joined = JoinedParquet(io.BytesIO())
    joined.append(_part(pl.DataFrame({"n": [1]})))
    with pytest.raises(PartError, match="schema differs"):
        joined.append(_part(pl.DataFrame({"m": [1]})))
    with pytest.raises(PartError, match="not a Parquet file"):
        joined.append(b"PAR1 but not much else")
    part = bytearray(_part(pl.DataFrame({"n": [1]})))
    part[-8:-4] = (len(part) * 2).to_bytes(4, "little")
    with pytest.raises(PartError, match="footer length"):
        joined.append(bytes(part))
    with pytest.raises(PartError, match="no part"):
        JoinedParquet(io.BytesIO()).close()


def test_offsets_move_by_any_amount_and_lists_of_any_length_round_trip() -> None:
    offset = _Field(9, _I64, b"\x96", _varint(4000 << 1))
    for shift in (0, 1, 2**31, 2**40 + 7):
        assert _zigzag(_moved(offset, frozenset({9}), shift)) == 4000 + shift
    # an offset below the magic (arrow writes ColumnChunk.file_offset as 0) stays
    unset = _Field(2, _I64, b"\x26", _varint(0))
    assert _zigzag(_moved(unset, frozenset({2}), 2**20)) == 0
    for size in (0, 14, 15, 300):
        reader = _Reader(_list_head(size, 12), 0, 8)
        head = reader.byte()
        assert head & 0x0F == 12
        assert (head >> 4 if head >> 4 < 15 else reader.varint()) == size


def test_the_per_wave_writer_joins_parts_as_one_writer_would(tmp_path: Path) -> None:
    expected = replay(read_trace(["traces/pr991"], columns=())).per_wave
    thirds = [expected[: 100], expected[100:101], expected[101:]]  # fmt: skip
    sink = io.BytesIO()
    writer = PerWaveWriter(sink, "parquet")
    for third in thirds:
        writer.append(PartEncoder("parquet").encode(third))
    writer.close()
    file = _checked(sink.getvalue(), tmp_path)
    assert file.metadata.num_row_groups == 3
    assert file.schema_arrow.metadata[PER_WAVE_KEY.encode()] == b"1"
    assert pl.read_parquet(io.BytesIO(sink.getvalue())).equals(expected)
    # the same rows as CSV: one header, then each part's rows
    csv = io.BytesIO()
    writer = PerWaveWriter(csv, "csv")
    for third in thirds:
        writer.append(PartEncoder("csv").encode(third))
    writer.close()
    assert csv.getvalue().decode() == expected.write_csv()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_per_wave_file_of_no_rows_still_has_its_columns(fmt: str) -> None:
    sink = io.BytesIO()
    writer = PerWaveWriter(sink, fmt, admitted=True)
    writer.close()
    read = pl.read_parquet if fmt == "parquet" else pl.read_csv
    empty = read(io.BytesIO(sink.getvalue()))
    assert empty.height == 0
    assert empty.columns[-1] == "admitted"
