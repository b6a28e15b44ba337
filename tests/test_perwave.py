"""The ``--per-wave`` file as its writer makes it (warmfit.replay.perwave).

Parquet rows reach the writer as Arrow tables, a batch at a time, and one
pyarrow ``ParquetWriter`` in a thread of its own encodes them: the file must
read as the parts' rows in order (pyarrow, with its own page-checksum
verification, and polars), a row group a part, with the file's mark, zstd,
page checksums and dictionaries for the string columns only. A failure of
the thread (a full disk) reaches the replay as the ``OSError`` it was; a
replay that fails lets the writer go without writing the parts still queued.
"""

from __future__ import annotations

import errno
import io
import tempfile
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import examples
from warmfit.errors import UsageError
from warmfit.format.pagecrc import verify
from warmfit.format.schema import PER_WAVE_KEY
from warmfit.format.trace import read_trace
from warmfit.replay import replay
from warmfit.replay.perwave import QUEUED, ArrowFile, PartEncoder, PerWaveWriter
from warmfit.replay.semantics import PER_WAVE_SCHEMA
from warmfit.replay.stream import replay_stream


@pytest.fixture(scope="module")
def expected() -> pl.DataFrame:
    """The per-wave rows of a stored trace."""
    return replay(read_trace(["traces/pr991"], columns=())).per_wave


def _written(fmt: str, parts: list[pl.DataFrame], admitted: bool = False) -> bytes:
    """A per-wave file of ``parts``, each made ready as a worker makes it."""
    sink = io.BytesIO()
    encoder = PartEncoder(fmt, admitted)
    with PerWaveWriter(sink, fmt, admitted) as writer:
        for part in parts:
            writer.append(encoder.encode(part))
    return sink.getvalue()


def _threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "warmfit-per-wave"]


def test_parts_make_one_parquet_file_of_a_row_group_each(
    expected: pl.DataFrame, tmp_path: Path
) -> None:
    thirds = [expected[:40], expected[40:41], expected[41:]]
    data = _written("parquet", thirds)
    path = tmp_path / "w.parquet"
    path.write_bytes(data)
    assert verify(path) is None  # every page where the footer says
    pq.read_table(path, page_checksum_verification=True)
    file = pq.ParquetFile(path)
    assert file.metadata.num_rows == expected.height
    assert [file.metadata.row_group(i).num_rows for i in range(3)] == [40, 1, expected.height - 41]
    assert pl.read_parquet(path).equals(expected)
    for i, third in enumerate(thirds):
        assert pl.from_arrow(file.read_row_group(i)).equals(third)  # type: ignore[union-attr]
    assert file.schema_arrow.metadata[PER_WAVE_KEY.encode()] == b"1"
    group = file.metadata.row_group(0)
    for i, (name, dtype) in enumerate(PER_WAVE_SCHEMA.items()):
        chunk = group.column(i)
        assert chunk.path_in_schema == name
        assert chunk.compression == "ZSTD"
        # dictionaries for the string columns only
        assert chunk.has_dictionary_page == (dtype == pl.String()), name
        assert chunk.is_stats_set, name
    assert group.column(2).statistics.has_min_max  # wave
    assert not _threads()


def test_the_pages_carry_checksums(expected: pl.DataFrame, tmp_path: Path) -> None:
    """A byte changed inside a page is found by its checksum (without one, zstd
    would decode the page to other values, or fail for another reason)."""
    data = bytearray(_written("parquet", [expected]))
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(2)  # wave
    assert not chunk.has_dictionary_page
    last = chunk.data_page_offset + chunk.total_compressed_size - 1  # the last page's last byte
    data[last] ^= 0xFF
    path = tmp_path / "damaged.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(path, page_checksum_verification=True)


@settings(max_examples=examples(25))
@given(st.lists(st.integers(0, 30), min_size=1, max_size=7))
def test_any_parts_give_their_rows_in_order(sizes: list[int]) -> None:
    """Parts pass through the writer's queue and thread in the order they came."""
    rows = replay(read_trace(["traces/pr991"], columns=())).per_wave
    starts = [sum(sizes[:i]) % rows.height for i in range(len(sizes))]
    parts = [rows[start : start + size] for start, size in zip(starts, sizes, strict=True)]
    data = _written("parquet", parts)
    assert pl.read_parquet(io.BytesIO(data)).equals(pl.concat(parts))
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_row_groups == len(parts)


def test_csv_parts_make_one_header_then_each_parts_rows(expected: pl.DataFrame) -> None:
    thirds = [expected[:40], expected[40:41], expected[41:]]
    assert _written("csv", thirds).decode() == expected.write_csv()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_per_wave_file_of_no_rows_still_has_its_columns(fmt: str) -> None:
    read = pl.read_parquet if fmt == "parquet" else pl.read_csv
    empty = read(io.BytesIO(_written(fmt, [], admitted=True)))
    assert empty.height == 0
    assert empty.columns == [*PER_WAVE_SCHEMA, "admitted"]


class _Sink(io.BytesIO):
    """A sink whose next writes fail (as on a full disk, freed again after), or wait,
    once told to."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = 0
        self.wait: threading.Event | None = None

    def write(self, data: Any) -> int:
        if self.wait is not None:
            self.wait.wait()
        if self.failing:
            self.failing -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_write_that_fails_in_the_thread_is_raised_in_the_replay(
    expected: pl.DataFrame,
) -> None:
    """The thread's OSError reaches the caller (the command turns it into exit 2
    naming the file) at the next part or at close, even when the disk has room
    again by then, and the thread ends."""
    for more in (True, False):
        sink = _Sink()
        encoder = PartEncoder("parquet")
        with (
            pytest.raises(OSError, match="No space left") as raised,
            PerWaveWriter(sink, "parquet") as writer,
        ):
            sink.failing = 1
            writer.append(encoder.encode(expected))
            if more:  # the thread failed meanwhile: the next parts raise, or close does
                for _ in range(2 * QUEUED + 3):
                    writer.append(encoder.encode(expected[:5]))
        assert raised.value.errno == errno.ENOSPC
        assert not _threads()


def test_a_failed_replay_lets_the_writer_go(expected: pl.DataFrame) -> None:
    """The replay's own error passes through unchanged, and the thread ends."""
    sink = _Sink()
    with (
        pytest.raises(ValueError, match="the replay failed"),
        PerWaveWriter(sink, "parquet") as writer,
    ):
        writer.write(expected)
        writer.write(expected)
        raise ValueError("the replay failed")
    assert not _threads()
    del writer  # nothing is written when it is collected, either
    sink.close()


def test_an_abandoned_writer_drops_the_parts_still_queued(expected: pl.DataFrame) -> None:
    """Parts queued when the replay fails are not encoded: the writer closes (quietly)
    after the part it was writing."""
    sink = _Sink()
    part = PartEncoder("parquet").encode(expected[:10])
    writer = PerWaveWriter(sink, "parquet")
    sink.wait = threading.Event()  # after the magic: the thread waits in its first write
    for _ in range(1 + QUEUED):  # the last append returns once the thread took the first
        writer.append(part)
    abandoning = threading.Thread(target=writer.abandon)
    abandoning.start()
    for _ in range(6000):  # until abandon() has begun (60 s at most: bounds a hang only)
        if writer._parquet._dropping:  # type: ignore[union-attr]
            break
        threading.Event().wait(0.01)
    sink.wait.set()
    abandoning.join()
    assert not _threads()
    assert pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.num_row_groups == 1


def test_parts_wait_for_the_writer_a_few_at_a_time(expected: pl.DataFrame) -> None:
    """While the sink is slow, the writer holds the part it writes and QUEUED more:
    the next append waits (the replay's memory stays bounded)."""
    sink = _Sink()
    encoder = PartEncoder("parquet")
    part = encoder.encode(expected[:10])
    with PerWaveWriter(sink, "parquet") as writer:
        sink.wait = threading.Event()  # after the magic: the thread waits in its first write
        for _ in range(1 + QUEUED):
            writer.append(part)
        appended = threading.Event()

        def append() -> None:
            writer.append(part)
            appended.set()

        late = threading.Thread(target=append)
        late.start()
        held = not appended.wait(0.5)
        sink.wait.set()
        late.join()
    assert held, "an append went ahead while the writer had its fill"
    assert pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.num_row_groups == 2 + QUEUED


def test_a_workers_rows_come_as_an_arrow_file_the_writer_reads_and_removes(
    expected: pl.DataFrame, tmp_path: Path
) -> None:
    encoder = PartEncoder("parquet", folder=str(tmp_path))
    thirds = [expected[:40], expected[40:41], expected[41:]]
    parts = [encoder.encode(third) for third in thirds]
    assert all(isinstance(part, ArrowFile) for part in parts)
    assert sorted(tmp_path.iterdir()) == sorted(Path(part.path) for part in parts)
    sink = io.BytesIO()
    with PerWaveWriter(sink, "parquet") as writer:
        for part in parts:
            writer.append(part)
    assert list(tmp_path.iterdir()) == []
    assert sink.getvalue() == _written("parquet", thirds)


def test_a_full_folder_for_the_workers_rows_is_exit_2_naming_it(
    expected: pl.DataFrame, tmp_path: Path
) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(UsageError, match="per-wave rows' temporary files") as raised:
        PartEncoder("parquet", folder=str(missing)).encode(expected)
    assert str(missing) in str(raised.value) and "TMPDIR" in str(raised.value)


def test_workers_leave_their_rows_in_a_folder_that_goes_away(
    expected: pl.DataFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Worker processes of this machine hand their Parquet rows over through the
    writer's temporary folder, not the pool's pipe; the file is the one a replay
    in this process writes, and the folder is gone after close (and abandon)."""
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)  # workers for a small trace
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: set[str] = set()

    def progress(done: int, total: int) -> None:
        seen.update(p.name for p in tmp_path.glob("warmfit-per-wave-*"))

    files = []
    for jobs in (1, 2):
        sink = io.BytesIO()
        with PerWaveWriter(sink, "parquet") as writer:
            got = replay_stream(
                ["traces/pr991"], jobs=jobs, batch_readings=20, per_wave=writer, progress=progress
            )
        assert got.jobs == jobs and got.batches > 1
        assert (len(seen), list(tmp_path.glob("warmfit-per-wave-*"))) == (jobs - 1, [])
        files.append(sink.getvalue())
    assert files[0] == files[1]
    assert pl.read_parquet(io.BytesIO(files[1])).equals(expected)
    with pytest.raises(ValueError, match="failed"), PerWaveWriter(io.BytesIO(), "parquet") as w:
        w.spooling()
        raise ValueError("the replay failed")
    assert list(tmp_path.glob("warmfit-per-wave-*")) == []
