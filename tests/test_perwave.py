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
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.command_line import warmfit_ok
from tests.strategies import examples
from tests.whole_waves import whole_wave, write_waves
from warmfit.errors import UsageError
from warmfit.format import pagecrc
from warmfit.format.pagecrc import verify
from warmfit.format.schema import PER_WAVE_KEY
from warmfit.format.trace import read_trace
from warmfit.replay import replay
from warmfit.replay.perwave import QUEUED, ArrowFile, PartEncoder, PerWaveWriter
from warmfit.replay.semantics import PER_WAVE_SCHEMA
from warmfit.replay.stream import replay_stream

ROOT = Path(__file__).resolve().parent.parent


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


def test_a_replay_that_fails_before_any_row_writes_nothing() -> None:
    """The writer is abandoned, not closed: a file that will not be finished gets no
    header (close gives a file of no rows its header)."""
    sink = io.BytesIO()
    with pytest.raises(ValueError, match="the replay failed"), PerWaveWriter(sink, "csv"):
        raise ValueError("the replay failed")
    assert sink.getvalue() == b""


def test_close_then_abandon_again_and_again_returns(expected: pl.DataFrame) -> None:
    """Cleanup may abandon a writer already closed (a failed close is abandoned, and a
    caller may abandon on its own failure): each call returns, the file unchanged."""
    sink = io.BytesIO()
    writer = PerWaveWriter(sink, "parquet")
    writer.write(expected[:5])
    writer.close()
    closed = sink.getvalue()
    again = threading.Thread(target=lambda: [writer.abandon() for _ in range(3)], daemon=True)
    again.start()
    again.join(60)  # bounds a hang only
    assert not again.is_alive(), "abandon() after close() waited for a thread that has ended"
    assert sink.getvalue() == closed and not _threads()


def test_a_writer_left_open_does_not_keep_python_from_exiting() -> None:
    """The writer's thread waits for parts as a daemon: a program that never closes
    its writer (a crash of the caller's own) still exits."""
    with PerWaveWriter(io.BytesIO(), "parquet"):  # here, its thread runs until close
        assert _threads() == ["warmfit-per-wave"]
    assert not _threads()
    code = (
        "import io\n"
        "from warmfit.replay.perwave import PerWaveWriter\n"
        "writer = PerWaveWriter(io.BytesIO(), 'parquet')\n"
        "print(writer._parquet._thread.is_alive())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert (done.returncode, done.stdout) == (0, "True\n"), done.stderr


def test_parts_wait_for_the_writer_a_few_at_a_time(expected: pl.DataFrame) -> None:
    """While the sink is slow, the writer holds the part it writes and QUEUED = 1 more
    (a batch's rows are about 50 MB): the third append waits (the replay's memory
    stays bounded), then the file has the 3 parts."""
    sink = _Sink()
    encoder = PartEncoder("parquet")
    part = encoder.encode(expected[:10])
    with PerWaveWriter(sink, "parquet") as writer:
        sink.wait = threading.Event()  # after the magic: the thread waits in its first write
        for _ in range(2):  # the part being written, and the one queued
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
    assert pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.num_row_groups == 3


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


def test_spooling_makes_one_folder_for_parquet_none_for_csv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CSV rows come back from the workers as they are (no folder); a Parquet writer
    makes one temporary folder however often it is asked, and close removes it, also
    when it is gone already (a cleaner of TMPDIR), and so does a failed replay,
    whose error stays its own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    csv = PerWaveWriter(io.BytesIO(), "csv")
    assert csv.spooling() is csv.encoder and csv.encoder.folder is None
    csv.close()
    assert list(tmp_path.iterdir()) == []
    with PerWaveWriter(io.BytesIO(), "parquet") as writer:
        first, second = writer.spooling(), writer.spooling()
        assert first == second and first.folder is not None
        assert list(tmp_path.iterdir()) == [Path(first.folder)]
    assert list(tmp_path.iterdir()) == []
    with PerWaveWriter(io.BytesIO(), "parquet") as writer:
        shutil.rmtree(str(writer.spooling().folder))
    with (
        pytest.raises(ValueError, match="the replay failed"),
        PerWaveWriter(io.BytesIO(), "parquet") as writer,
    ):
        shutil.rmtree(str(writer.spooling().folder))
        raise ValueError("the replay failed")
    assert list(tmp_path.iterdir()) == [] and not _threads()


# --------------------------------------------------------------------------- 8, 9: per-wave Parquet
#
# The per-wave file was once joined from parts by hand (parquetjoin.py, gone):
# a varint of 128 was written wrongly (64 rows gave an unreadable file) and row
# groups kept stale offsets. Today one pyarrow ParquetWriter writes it, a row
# group a batch; the risk left is rows lost, repeated or reordered between the
# batches (in worker processes with --jobs 2) and bytes the footer does not
# account for.

#: (rows, streams): one policy, one reading a wave, each (run, rank) stream a batch.
PER_WAVE_SIZES = [(63, 1), (64, 2), (127, 1), (128, 4), (129, 3), (300, 6)]


def _streams_trace(folder: Path, rows: int, streams: int) -> Path:
    """``streams`` ranks of ``rows // streams`` waves each, peaks all different."""
    per = rows // streams
    assert per * streams == rows
    return write_waves(folder, [
        whole_wave(w, 1_000 + 37 * w + 1_000 * rank, 3 + (w * 7) % 11, rank=rank)
        for rank in range(streams) for w in range(per)
    ])  # fmt: skip


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The command cuts the trace into batches of one stream (each of at most 300
    readings here), and uses worker processes with ``--jobs 2`` even so; the list
    gets the number of tasks each call to the worker pool was given."""
    import warmfit.replay.stream as stream
    import warmfit.run.tasks as tasks

    real_plan, real_in_pool = stream.plan, tasks.Runner._in_pool
    monkeypatch.setattr(stream, "plan", lambda indexes, batch_readings: real_plan(indexes, 1))
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)
    pooled: list[int] = []

    def in_pool(self: object, function: object, calls: list[object]) -> object:
        pooled.append(len(calls))
        return real_in_pool(self, function, calls)  # type: ignore[arg-type]

    monkeypatch.setattr(tasks.Runner, "_in_pool", in_pool)
    return pooled


def _per_wave_file(trace: Path, out: Path, jobs: int) -> Path:
    warmfit_ok("replay", trace, "-p", "warm-fit", "--per-wave", out, "--jobs", jobs)
    return out


@pytest.mark.parametrize(("rows", "streams"), PER_WAVE_SIZES)
def test_per_wave_parquet_reads_back_through_pyarrow_and_polars(
    tmp_path: Path, small_batches: list[int], rows: int, streams: int
) -> None:
    """Survivor 8 (stranger-per-wave-parts-out-of-order): 63, 64, 127, 128, 129 and
    300 rows, in 1 to 6 row groups, read back as the replay's rows through pyarrow
    and polars alike, and ``--jobs 2`` writes the very rows ``--jobs 1`` does."""
    trace = _streams_trace(tmp_path / "trace", rows, streams)
    expected = replay(read_trace([trace]), ["warm-fit"]).per_wave
    assert expected.height == rows
    files = [_per_wave_file(trace, tmp_path / f"j{jobs}.parquet", jobs) for jobs in (1, 2)]
    # --jobs 2 replayed the batches in worker processes (a trace of one batch replays here)
    assert streams == 1 or streams in small_batches
    for path in files:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_rows == rows
        assert meta.num_row_groups == streams
        assert [meta.row_group(g).num_rows for g in range(streams)] == [rows // streams] * streams
        through_pyarrow = pl.from_arrow(pq.read_table(path))
        through_polars = pl.read_parquet(path)
        assert isinstance(through_pyarrow, pl.DataFrame)
        assert through_pyarrow.equals(expected), path.name
        assert through_polars.equals(expected), path.name
    assert pq.read_table(files[1]).equals(pq.read_table(files[0]))


def _chunks(path: Path) -> list[tuple[int, int, int, int | None, int]]:
    """Per column chunk of the footer (pyarrow's metadata): where its pages start, its
    bytes, its data page offset, its dictionary page offset and its values."""
    meta = pq.ParquetFile(path).metadata
    found = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            chunk = meta.row_group(g).column(c)
            dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            start = chunk.data_page_offset if dictionary is None else dictionary
            found.append(
                (start, chunk.total_compressed_size, chunk.data_page_offset, dictionary,
                 chunk.num_values)
            )  # fmt: skip
    return found


def _page_type(data: bytes, at: int, end: int) -> int:
    header, _ = pagecrc._struct(data, at, end, pagecrc._PAGE_HEADER)
    return int(header[1])


def test_per_wave_footer_offsets_point_at_the_pages(
    tmp_path: Path, small_batches: list[int]
) -> None:
    """Survivor 9 (stranger-per-wave-stray-bytes): every column chunk's offsets in
    the per-wave file's footer lie inside the file, the chunks tile the bytes
    between the leading magic and the footer without gap or overlap, each
    offset points at a page header of its kind (a dictionary page, type 2, at
    the dictionary offset; a data page, type 0 or 3, at the data offset), and
    warmfit's own footer reader finds the same chunks. Readers other than
    pyarrow and polars trust exactly these numbers."""
    trace = _streams_trace(tmp_path / "trace", 300, 6)
    for jobs in (1, 2):
        path = _per_wave_file(trace, tmp_path / f"j{jobs}.parquet", jobs)
        data = path.read_bytes()
        assert data[:4] == b"PAR1" and data[-4:] == b"PAR1"
        footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
        chunks = sorted(_chunks(path))
        assert len(chunks) == 6 * pq.ParquetFile(path).metadata.num_columns
        at = 4
        for start, size, data_page, dictionary, _ in chunks:
            assert start == at, f"column chunk at byte {start}: expected one at byte {at}"
            assert 4 <= start < start + size <= footer
            if dictionary is not None:
                assert dictionary == start < data_page < start + size
                assert _page_type(data, dictionary, start + size) == 2
            assert _page_type(data, data_page, start + size) in (0, 3)
            at = start + size
        assert at == footer, "bytes between the last column chunk and the footer"
        groups = pagecrc.row_groups(path)
        assert not isinstance(groups, str), groups
        ours = sorted((c.start, c.size, c.values) for g in groups for c in g.chunks)
        assert ours == [(start, size, values) for start, size, _, _, values in chunks]
        assert pagecrc.verify(path) is None
