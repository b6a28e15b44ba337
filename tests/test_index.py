"""Indexing a trace for a replay in batches: footer statistics, checksums and the
fork server started early (:mod:`warmfit.format.batches`, :mod:`warmfit.run.workers`)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.strategies import examples
from warmfit.cli import app
from warmfit.errors import TraceError, UsageError
from warmfit.format import batches as streams
from warmfit.format import pagecrc
from warmfit.format.batches import Tail, index_file, plan, read_batch, read_canonical
from warmfit.format.trace import readings_frame, wanted_columns, write_trace
from warmfit.format.writer import to_arrow
from warmfit.replay.stream import chain_sizes, replay_stream

TRACES = Path(__file__).resolve().parent.parent / "traces"


def _two_streams(
    path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runs: tuple[str, str] = ("runA", "runB"),
    ranks: tuple[int, int] = (0, 1),
) -> None:
    """Streams (runs[0], ranks[0]) and (runs[1], ranks[1]) of 6 readings each, in row
    groups of 4: the second row group holds the end of one and the start of the other."""
    monkeypatch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 4)
    rows = [
        dict(run=run, rank=rank, seq=s, wave=s, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100 + s)
        for run, rank in zip(runs, ranks, strict=True) for s in range(6)
    ]  # fmt: skip
    write_trace(readings_frame(rows), path)


def _spy_on_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int | None]]:
    """The (start, length) of every slice the index reads, as it reads them."""
    read: list[tuple[int, int | None]] = []
    real = streams.read_rows

    def spy(path: Path, columns: list[str], start: int = 0, length: int | None = None) -> object:
        read.append((start, length))
        return real(path, columns, start, length)

    monkeypatch.setattr(streams, "read_rows", spy)
    return read


@pytest.mark.parametrize(
    "runs, ranks",
    [(("runA", "runB"), (0, 1)), (("runA", "runB"), (0, 0)), (("runA", "runA"), (0, 1))],
)
def test_row_groups_of_one_stream_are_indexed_from_the_footer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: tuple[str, str], ranks: tuple[int, int]
) -> None:
    """Only the row group holding two streams (differing in run, rank or both) has
    its run and rank read."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch, runs, ranks)
    read = _spy_on_reads(monkeypatch)
    index = index_file(path)
    assert index.stretches == ((runs[0], ranks[0], 0, 6), (runs[1], ranks[1], 6, 12))
    assert read == [(4, 4)]
    assert [start for start, _ in index.groups] == [0, 4, 8]


@pytest.mark.parametrize(
    "runs, columns", [(("runA", "runA"), ["rank"]), (("runA", "runB"), ["run", "rank"])]
)
def test_a_row_group_of_one_run_has_only_its_ranks_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs: tuple[str, str], columns: list[str]
) -> None:
    """A row group whose footer gives one run (a file of one run's ranks) but two
    ranks: its ranks alone are read to find the stretches."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch, runs, (0, 1))
    read: list[list[str]] = []
    real = streams.read_rows

    def spy(path: Path, names: list[str], start: int = 0, length: int | None = None) -> object:
        read.append(list(names))
        return real(path, names, start, length)

    monkeypatch.setattr(streams, "read_rows", spy)
    assert index_file(path).stretches == ((runs[0], 0, 0, 6), (runs[1], 1, 6, 12))
    assert read == [columns]


def test_footer_statistics_that_lie_are_caught_when_the_rows_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A footer whose statistics name the wrong run would split a stream between
    batches; the batch that reads the rows sees it and stops (exit 2)."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch)
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer
    # the footer's statistics: every "runB" becomes "runA" (same length, so the
    # footer still parses); the pages, and their checksums, are untouched
    data[start:-8] = bytes(data[start:-8]).replace(b"runB", b"runA")
    path.write_bytes(bytes(data))
    assert [s[:2] for s in index_file(path).stretches][-1] == ("runA", 1)  # as the footer says
    with pytest.raises(TraceError, match="statistics of its row groups") as caught:
        replay_stream([path])
    assert caught.value.path == str(path)
    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code == 2, result.output
    assert "statistics" in result.output and "Traceback" not in result.output


def test_a_damaged_page_is_found_by_the_batch_that_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checksums are checked batch by batch: a flipped byte in the last row group
    (read by the last batch) is still an error naming the file."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch)
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str)
    chunk = groups[-1].chunks[-1]
    last = chunk.start + chunk.size - 1  # the chunk's last byte: inside its last page's body
    data = bytearray(path.read_bytes())
    data[last] ^= 0xFF
    path.write_bytes(bytes(data))
    index_file(path)  # the footer is sound: indexing does not read that page
    with pytest.raises(TraceError, match="fails its checksum") as caught:
        replay_stream([path], batch_readings=6)
    assert caught.value.path == str(path)


@pytest.mark.parametrize("threshold, started", [(0, True), (2**62, False)])
def test_prestart_starts_the_fork_server_for_workers_without_polars(
    threshold: int, started: bool
) -> None:
    """``warmfit replay`` starts the workers' fork server before it imports polars,
    and only when the trace will use workers."""
    code = (
        "import sys, warmfit.run.workers as w\n"
        f"w.WORKER_BYTES = {threshold}\n"
        f"w.prestart([{str(TRACES)!r}], 2, None)\n"
        "from multiprocessing import forkserver\n"
        "print(forkserver._forkserver._forkserver_pid is not None, 'polars' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == [str(started), "False"]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
@pytest.mark.parametrize("given", [None, "3"])
def test_the_workers_share_the_cores_among_their_polars_threads(given: str | None) -> None:
    """Two workers on every core: each worker's polars gets cores // 2 threads (two
    workers with two threads each on 2 cores ran 10% slower); a user's
    POLARS_MAX_THREADS stays."""
    code = (
        "import os, sys, warmfit.run.workers as w\n"
        "w.WORKER_BYTES = 0\n"
        f"w.prestart([{str(TRACES)!r}], 2, None)\n"
        "from multiprocessing import forkserver\n"
        "pid = forkserver._forkserver._forkserver_pid\n"
        "import time\n"
        "for _ in range(500):  # until the fork server has been exec'd (its own environment)\n"
        "    if b'forkserver' in open(f'/proc/{pid}/cmdline', 'rb').read(): break\n"
        "    time.sleep(0.01)\n"
        "environ = open(f'/proc/{pid}/environ', 'rb').read().split(b'\\0')\n"
        "print([e.decode() for e in environ if e.startswith(b'POLARS_MAX_THREADS=')])\n"
        "print(os.environ.get('POLARS_MAX_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    if given is not None:
        env["POLARS_MAX_THREADS"] = given
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.splitlines()
    share = given or str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert out == [repr([f"POLARS_MAX_THREADS={share}"]), str(given)]  # this process: unchanged


def test_prestart_leaves_errors_to_the_replay() -> None:
    from warmfit.run.workers import prestart

    prestart(["/no/such/trace"], 2, None)  # no exception: replay names the path


@settings(max_examples=examples(40))
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    group=st.integers(1, 7),
    batch=st.integers(1, 12),
    order=st.permutations(range(6)),
)
def test_batches_read_with_a_tail_read_each_row_group_once_and_the_same_rows(
    lengths: list[int], group: int, batch: int, order: list[int]
) -> None:
    """Streams cut across row groups of ``group`` rows, in batches of ``batch``
    readings: read in order with one :class:`~warmfit.format.batches.Tail`, each batch
    holds the rows it holds read alone, and each row group's pages are checked
    once (when a batch holds at least a group). Read in any other order with one
    tail, the rows are the same."""
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder) / "t.parquet"
        patch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", group)
        rows = [
            dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
                 peak_bytes=100 + 10 * rank + s)
            for rank, n in enumerate(lengths) for s in range(n)
        ]  # fmt: skip
        write_trace(readings_frame(rows), path)
        batches = plan([index_file(path)], batch)
        alone = [read_batch(b) for b in batches]
        checked: list[int] = []
        real = streams.verify_pages

        def spy(path: Path, groups: list[pagecrc.RowGroup] | None = None) -> None:
            checked.extend(id(g) for g in groups or ())
            real(path, groups)

        patch.setattr(streams, "verify_pages", spy)
        tail = Tail()
        chained = [read_canonical(b, tail=tail).frame for b in batches]
        assert [f.to_dicts() for f in chained] == [f.to_dicts() for f in alone]
        if group <= batch:  # then no batch holds fewer rows than a group's rest
            assert len(checked) == len(set(checked)) == -(-sum(lengths) // group)
        tail = Tail()
        for i in [i for i in order if i < len(batches)]:
            assert read_canonical(batches[i], tail=tail).frame.equals(alone[i])


def reads_in_order(counts: list[int]) -> list[tuple[int, int | None]]:
    """The (start, length) of each row read, reading in order with one tail a trace of
    one row group of 10 rows whose rank i holds ``counts[i]`` readings, planned in
    batches of one stream each (asked for 2 readings)."""
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder) / "t.parquet"
        patch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 10)
        rows = [
            dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
                 peak_bytes=100)
            for rank, n in enumerate(counts) for s in range(n)
        ]  # fmt: skip
        write_trace(readings_frame(rows), path)
        batches = plan([index_file(path)], 2)
        assert [b.readings for b in batches] == counts
        read: list[tuple[int, int | None]] = []
        real = streams.read_rows

        def spy(path: Path, columns: list[str], start: int = 0, length: int | None = None,
                **options: bool) -> object:  # fmt: skip
            read.append((start, length))
            return real(path, columns, start, length, **options)

        patch.setattr(streams, "read_rows", spy)
        tail = Tail()
        for b in batches:
            read_canonical(b, tail=tail)
    return read


def test_a_tail_holds_no_more_rows_than_the_batch_read() -> None:
    """A batch of 2 readings at the start of a row group of 10 reads 2 rows, not
    the group's 10 (nor holds them): a huge row group is not held whole. The
    next batch, of 4, reads on to the group's end (4 more rows) and holds them."""
    # 0-2 alone; 2-6 on to the group's end (4 more rows at most), then held
    assert reads_in_order([2, 4, 4]) == [(0, 2), (2, 8)]


def test_a_tail_gives_its_rows_to_reads_of_its_own_file_only(tmp_path: Path) -> None:
    """Two files of the same layout: the rows the first file's read left in the
    tail are not taken for the second file's."""
    for name, peak in (("a", 100), ("b", 200)):
        rows = [
            dict(run=name, rank=rank, seq=s, wave=s, signature="s", packed_tokens=4,
                 logical_tokens=4, peak_bytes=peak)
            for rank in (0, 1) for s in range(6)
        ]  # fmt: skip
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 4)
            write_trace(readings_frame(rows), tmp_path / f"{name}.parquet")
    batches = plan([index_file(tmp_path / f"{name}.parquet") for name in "ab"], 6)
    assert [b.streams for b in batches] == [(("a", 0),), (("a", 1),), (("b", 0),), (("b", 1),)]
    tail = Tail()
    read_canonical(batches[0], tail=tail)  # leaves a.parquet's rows 6-8 in the tail
    peaks = read_canonical(batches[3], tail=tail).frame.get_column("peak_bytes")
    assert peaks.to_list() == [200] * 6


def write_negative_and_damaged(path: Path, ranks: int, negative_rank: int) -> None:
    """One row group of ``ranks`` ranks of 2000 readings each (seq and wave 0-1999,
    peak 100 + seq), no page checksums, small pages: ``negative_rank``'s reading 5 is
    -5, and 8 bytes inside the last page of ``peak_bytes`` (the last rank's rows) are
    overwritten, so that page cannot be read."""
    rows = [
        dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
             peak_bytes=-5 if (rank, s) == (negative_rank, 5) else 100 + s)
        for rank in range(ranks) for s in range(2000)
    ]  # fmt: skip
    pq.write_table(
        to_arrow(readings_frame(rows)), path, compression="zstd", row_group_size=2000 * ranks,
        data_page_size=512, write_page_checksum=False, use_dictionary=False,
    )  # fmt: skip
    chunk = next(
        c for c in (pq.ParquetFile(path).metadata.row_group(0).column(i) for i in range(16))
        if c.path_in_schema == "peak_bytes"
    )  # fmt: skip
    data = bytearray(path.read_bytes())
    end = chunk.data_page_offset + chunk.total_compressed_size
    data[end - 12 : end - 4] = b"\xff" * 8  # inside the chunk's last page
    path.write_bytes(bytes(data))


def first_error_row(path: Path, ranks: int, negative_rank: int) -> int:
    """The row the first error names when the file of :func:`write_negative_and_damaged`
    is read in order with a tail, a batch per rank (the last rank's batch, read alone,
    cannot be read: the damage is in its rows)."""
    write_negative_and_damaged(path, ranks=ranks, negative_rank=negative_rank)
    batches = plan([index_file(path)], 2000)
    assert [b.streams for b in batches] == [(("run", rank),) for rank in range(ranks)]
    with pytest.raises(TraceError, match="could not be read"):
        read_batch(batches[-1])
    with pytest.raises(TraceError, match="is negative") as caught:
        tail = Tail()
        for b in batches:
            read_canonical(b, tail=tail)
    row = caught.value.row
    assert row is not None
    return row


def test_rows_read_ahead_for_the_next_batch_do_not_take_its_errors(tmp_path: Path) -> None:
    """A file without page checksums, one row group: rank 0's reading at row 5 is
    negative, and the last page of ``peak_bytes`` (rank 1's rows) is damaged.
    Read with a tail, the first batch reads ahead into rank 1's rows, which
    cannot be read; it reads its own rows again, and reports row 5 first."""
    assert first_error_row(tmp_path / "t.parquet", ranks=2, negative_rank=0) == 5


@pytest.mark.parametrize(
    "batches, workers, sizes",
    [
        (32, 2, [4, 4, 4, 4, 4, 3, 3, 2, 1, 1, 1, 1]),
        (7, 2, [2, 2, 1, 1, 1]),
        (1, 8, [1]),
        (0, 2, []),
        # one worker: half the batches left (10 -> 4 at most, then 6 -> 3, 3 -> 2, 1);
        # and 0 workers count as one (never a division by zero)
        (10, 1, [4, 3, 2, 1]),
        (10, 0, [4, 3, 2, 1]),
    ],
)
def test_tasks_of_up_to_four_batches_shrink_to_one_towards_the_end(
    batches: int, workers: int, sizes: list[int]
) -> None:
    """Each task takes a quarter of the batches left (2 workers), at most 4: 32
    batches as 12 tasks, the last four of one batch each."""
    assert chain_sizes(batches, workers) == sizes
    assert sum(sizes) == batches


def test_statistics_marked_inexact_are_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that truncates a long string's bounds marks them inexact
    (is_min_value_exact / is_max_value_exact false): such a row group is read."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch)
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - footer
    # each run statistics' min_value (field 6) is followed by fields 7 and 8, both
    # true (compact protocol: 0x11 0x11), then the end of the struct: make them false
    for run in (b"runA", b"runB"):
        data[start:-8] = bytes(data[start:-8]).replace(run + b"\x11\x11\x00", run + b"\x12\x12\x00")
    path.write_bytes(bytes(data))
    groups = pagecrc.row_groups(path)
    assert not isinstance(groups, str) and all(g.bounds["run"] is None for g in groups)
    read = _spy_on_reads(monkeypatch)
    assert index_file(path).stretches == (("runA", 0, 0, 6), ("runB", 1, 6, 12))
    assert read == [(0, 4), (4, 4), (8, 4)]


def _in_server() -> bool:
    """In a worker: whether warmfit.replay.forkserver knew it was the fork server's preload."""
    import warmfit.replay.forkserver

    return warmfit.replay.forkserver.SERVER


def _server_flag() -> str | None:
    """In a worker: the fork server's flag, if it was left in the environment."""
    from warmfit.run.workers import FORK_SERVER

    return os.environ.get(FORK_SERVER)


def test_only_the_fork_server_ends_at_once() -> None:
    """warmfit.replay.forkserver makes the fork server skip Python's teardown at its exit
    (it holds the command's stdout and stderr: a pipeline waited 0.1 to 0.45 s for
    it); imported by any other process, it leaves that process's exit alone."""
    from concurrent.futures import ProcessPoolExecutor

    from warmfit.run.workers import FORK_SERVER, fork_context

    with ProcessPoolExecutor(1, mp_context=fork_context(1)) as pool:
        assert pool.submit(_in_server).result() is True  # forked from the server
        assert pool.submit(_server_flag).result() is None  # taken out of the environment
    assert _in_server() is False and FORK_SERVER not in os.environ
    code = (
        "import os, sys, warmfit.replay.forkserver as f\n"
        f"print(f.SERVER, {FORK_SERVER!r} in os.environ, flush=True)\n"
        "sys.exit(3)\n"
    )
    for flag, server in [(None, False), ("1", False), (f"{os.getpid()}+", True)]:
        env = {k: v for k, v in os.environ.items() if k != FORK_SERVER}
        if flag is not None:  # the flag names the process that started the server
            env[FORK_SERVER] = flag
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
        )
        assert done.stdout.split() == [str(server), "False"], done.stderr
        assert done.returncode == (0 if server else 3), done.stderr  # os._exit(0) at exit


def test_workers_started_early_index_the_files_and_a_changed_file_is_indexed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prestart starts the workers and has them index the files; the replay takes
    that index only for the same files, unchanged (size and time), and jobs."""
    from warmfit.run import workers

    monkeypatch.setattr(workers, "WORKER_BYTES", 0)
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch)
    workers.prestart([path], 2, None)
    early = workers.take_early_pool([str(path)], 2)
    assert early is not None and early.pool is not None
    assert early.index[0].result().stretches == index_file(path).stretches
    early.pool.shutdown()
    assert workers.take_early_pool([str(path)], 2) is None  # taken once

    workers.prestart([path], 2, None)
    rows = [
        dict(run="other", rank=5, seq=s, wave=s, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100 + s)
        for s in range(9)
    ]  # fmt: skip
    os.remove(path)
    write_trace(readings_frame(rows), path)  # the same name, other streams
    os.utime(path, ns=(1, 1))  # even within the clock's resolution
    assert workers.take_early_pool([str(path)], 2) is None
    result = replay_stream([path], jobs=2)
    assert result.readings == 9 and result.summary.get_column("run").to_list()[0] == "other"


def test_workers_started_early_for_nothing_are_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    from warmfit.run import workers

    monkeypatch.setattr(workers, "WORKER_BYTES", 0)
    workers.prestart([TRACES / "pr991"], 2, None)
    early = workers._early
    assert early is not None
    workers.discard_early_pool()
    assert workers._early is None and early.pool is not None
    with pytest.raises(RuntimeError):  # shut down: it takes no more work
        early.pool.submit(os.getpid)


def test_a_replay_that_ends_in_a_usage_error_starts_no_workers() -> None:
    """The command line is parsed before the replay starts its workers: an unknown
    option, even beside a trace that would use workers, starts no fork server."""
    code = (
        "import sys, warmfit.run.workers as w\n"
        "w.WORKER_BYTES = 0\n"
        f"sys.argv = ['warmfit', 'replay', {str(TRACES / 'pr991')!r}, '-j', '2', '--bogus']\n"
        "from warmfit.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "from multiprocessing import forkserver\n"
        "print('PROBE', code, forkserver._forkserver._forkserver_pid)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.split() == ["PROBE", "2", "None"], done.stdout + done.stderr
    assert "bogus" in done.stderr and "Traceback" not in done.stderr


# --------------------------------------------------------------------------- the edges


def test_the_batch_size_is_250000_readings_unless_the_environment_sets_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/reference/cli.md: ``WARMFIT_BATCH_READINGS`` (default 250,000), a whole
    number of readings, at least 1; blanks around it are ignored, anything else is
    refused naming the variable and the text given."""
    monkeypatch.delenv(streams.BATCH_READINGS, raising=False)
    assert streams.default_batch_readings() == 250_000
    for text, readings in (("", 250_000), ("  ", 250_000), ("1", 1), (" 300 ", 300)):
        monkeypatch.setenv(streams.BATCH_READINGS, text)
        assert streams.default_batch_readings() == readings, text
    for text in ("0", "00", "-5", "1e5", "100_000", "2.5", "ten"):
        monkeypatch.setenv(streams.BATCH_READINGS, text)
        with pytest.raises(UsageError) as caught:
            streams.default_batch_readings()
        assert str(caught.value) == (
            "WARMFIT_BATCH_READINGS must be a whole number of readings, such as 100000; "
            f"got {text!r}."
        )


@pytest.mark.parametrize("rows, mixed", [(64, False), (65, True)])
def test_a_row_group_of_more_than_64_stretches_is_indexed_by_stream(
    tmp_path: Path, rows: int, mixed: bool
) -> None:
    """docs/explanation/performance.md: a row group of more than 64 stretches is
    indexed by each stream's count in it. Ranks 0 and 1 of one run alternating row
    by row, in one row group: 64 rows are 64 stretches of one row each; 65 rows are
    rank 0's 33 readings and rank 1's 32, each among rows [0, 65)."""
    frame = readings_frame([
        dict(run="r", rank=row % 2, seq=row // 2, wave=row // 2, signature="s",
             packed_tokens=4, logical_tokens=4, peak_bytes=100)
        for row in range(rows)
    ])  # fmt: skip
    path = write_trace(frame, tmp_path / "t.parquet")
    index = index_file(path)
    assert len(index.groups) == 1 and index.rows == rows
    if mixed:
        assert index.stretches == ()
        assert index.mixed == (("r", 0, 0, 65, 33), ("r", 1, 0, 65, 32))
    else:
        assert index.mixed == ()
        assert index.stretches == tuple(("r", row % 2, row, row + 1) for row in range(64))
    for batch in plan([index], 1):  # either way, each batch reads its stream's rows alone
        assert read_batch(batch).get_column("rank").unique().to_list() == [batch.streams[0][1]]


def _hand_index(stretches: tuple[tuple[str, int, int, int], ...]) -> streams.FileIndex:
    """The index of a file "f" of 4 rows in one row group, with these stretches."""
    return streams.FileIndex("f", 4, stretches, ((0, pagecrc.RowGroup(4, {}, ())),))


def test_a_file_is_routed_when_its_batches_span_its_rows_one_and_a_half_times() -> None:
    """docs/explanation/performance.md: a file whose batches' rows cover its rows 1.5
    times or more is decoded once. Four rows, a batch a stream: streams a and b
    alternating (a: rows 0 and 2, b: rows 1 and 3) span rows [0, 3) and [1, 4), 6
    rows of 4, exactly 1.5 times: routed, each stream to its batch. Stream a at rows 0
    and 2, b at row 1 and c at row 3 span 3 + 1 + 1 = 5 rows of 4: not routed."""
    alternating = _hand_index((("a", 0, 0, 1), ("b", 0, 1, 2), ("a", 0, 2, 3), ("b", 0, 3, 4)))
    batches = plan([alternating], 1)
    assert [b.streams for b in batches] == [(("a", 0),), (("b", 0),)]
    (routed,) = streams.route(batches, 1)
    assert (routed.path, routed.start, routed.stop) == ("f", 0, 4)
    assert routed.streams == ((("a", 0), 0), (("b", 0), 1))
    apart = _hand_index((("a", 0, 0, 1), ("b", 0, 1, 2), ("a", 0, 2, 3), ("c", 0, 3, 4)))
    assert len(plan([apart], 1)) == 3
    assert streams.route(plan([apart], 1), 1) == []


def test_int64_ranks_are_indexed_from_the_footer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank stored as a 64-bit integer (8 bytes in the footer's statistics), as
    an int32 one: the row groups of one stream are read from the footer alone."""
    rows = [
        dict(run=run, rank=rank, seq=s, wave=s, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100 + s)
        for run, rank in (("runA", 0), ("runB", 1)) for s in range(6)
    ]  # fmt: skip
    table = to_arrow(readings_frame(rows))
    at = table.schema.get_field_index("rank")
    table = table.set_column(
        at, pa.field("rank", pa.int64(), False), table["rank"].cast(pa.int64())
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, write_page_checksum=True, row_group_size=4)
    assert pq.read_schema(path).field("rank").type == pa.int64()
    read = _spy_on_reads(monkeypatch)
    assert index_file(path).stretches == (("runA", 0, 0, 6), ("runB", 1, 6, 12))
    assert read == [(4, 4)]  # the row group of both streams only


def ranked_as(path: Path, rank: int, kind: pa.DataType) -> Path:
    """Three readings of run ``r`` whose rank column holds ``rank`` as ``kind``, an
    integer type another tool may write (warmfit writes int32)."""
    rows = [
        dict(run="r", rank=0, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
             peak_bytes=100)
        for s in range(3)
    ]  # fmt: skip
    table = to_arrow(readings_frame(rows))
    at = table.schema.get_field_index("rank")
    ranks = table.set_column(at, pa.field("rank", kind, False), pa.array([rank] * 3, kind))
    pq.write_table(ranks, path, write_page_checksum=True)
    return path


def test_an_unsigned_rank_is_indexed_by_its_value(tmp_path: Path) -> None:
    """A rank stored as uint32 (lenient integer encodings are accepted): the footer's
    4 bytes of 2**31 + 5 read as a signed int32 would be -2147483643; the index names
    the rank 2147483653, read from the rows, and the batch refuses it for not
    fitting Int32, naming the file, the column and the row."""
    for rank in (5, 2**31 + 5):
        path = ranked_as(tmp_path / f"{rank}.parquet", rank, pa.uint32())
        index = index_file(path)
        assert index.stretches == (("r", rank, 0, 3),)
    with pytest.raises(TraceError, match="value 2147483653 does not fit") as caught:
        read_batch(plan([index])[0])
    assert caught.value.path == str(path) and caught.value.row == 0


def test_a_rank_statistic_of_the_wrong_width_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A footer whose rank statistics are one byte (0x07) where the int32 column's
    values take four (a damaged footer): not read as rank 7; the ranks are read from
    the rows, rank 0 and rank 1."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch, ("runA", "runA"), (0, 1))
    real = streams.row_groups

    def damaged(path: Path) -> list[pagecrc.RowGroup]:
        return [
            pagecrc.RowGroup(g.rows, {**g.bounds, "rank": (1, b"\x07", b"\x07")}, g.chunks)
            for g in real(path)
        ]

    monkeypatch.setattr(streams, "row_groups", damaged)
    read = _spy_on_reads(monkeypatch)
    assert index_file(path).stretches == (("runA", 0, 0, 6), ("runA", 1, 6, 12))
    assert read == [(0, 4), (4, 4), (8, 4)]  # every group's ranks, none from the footer


@pytest.mark.parametrize(
    "bounds", [(6, b"\xff", b"\xff"), (1, b"runA", b"runA")], ids=["not utf-8", "not a string"]
)
def test_run_statistics_that_are_no_string_are_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounds: tuple[int, bytes, bytes]
) -> None:
    """A footer whose run statistics are bytes no UTF-8 decodes, or are given for a
    physical type other than BYTE_ARRAY (6), is damaged: every row group's run and
    rank are read from its rows."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch)
    real = streams.row_groups

    def damaged(path: Path) -> list[pagecrc.RowGroup]:
        return [pagecrc.RowGroup(g.rows, {**g.bounds, "run": bounds}, g.chunks) for g in real(path)]

    monkeypatch.setattr(streams, "row_groups", damaged)
    read = _spy_on_reads(monkeypatch)
    assert index_file(path).stretches == (("runA", 0, 0, 6), ("runB", 1, 6, 12))
    assert read == [(0, 4), (4, 4), (8, 4)]


def test_the_plan_of_hand_made_indexes_spelled_out() -> None:
    """Two files' indexes, made by hand (no file is read). File "x" (rows 0-9, row
    groups at 0 and 5, the optional column estimate_bytes): stream ("b", 10) rows
    0-4, ("b", 9) rows 5-6, ("a", None) rows 7-9. File "y" (rows 0-5, one group):
    ("b", 9) rows 0-1, ("a", 2) 2 readings among rows 2-6 (mixed), (None, 0) row 6.
    Canonical order: run, then rank as a number (9 before 10), a null after every
    value: ("a", 2), ("a", None), ("b", 9), ("b", 10), (None, 0), of 2, 3, 2 + 2, 5
    and 1 readings. In batches of 5: ("a", 2) + ("a", None) = 5 closes the first;
    ("b", 9) + ("b", 10) = 9 the second; (None, 0) is the third."""
    x_groups = ((0, pagecrc.RowGroup(5, {}, ())), (5, pagecrc.RowGroup(5, {}, ())))
    y_groups = ((0, pagecrc.RowGroup(7, {}, ())),)
    x = streams.FileIndex(
        "x", 10, (("b", 10, 0, 5), ("b", 9, 5, 7), ("a", None, 7, 10)), x_groups,
        columns=("estimate_bytes",),
    )  # fmt: skip
    y = streams.FileIndex("y", 7, (("b", 9, 0, 2), (None, 0, 6, 7)), y_groups, (("a", 2, 2, 6, 2),))
    first, second, third = plan([x, y], 5)
    assert first.streams == (("a", 2), ("a", None))
    assert first.readings == 5
    assert [(s.path, s.start, s.stop, s.readings) for s in first.segments] == [
        ("y", 2, 6, 2), ("x", 7, 10, 3)
    ]  # fmt: skip
    assert first.groups == {"y": y_groups, "x": x_groups[1:]}  # rows 7-9: the second group
    assert first.columns == {"x": ("estimate_bytes",)}
    assert second.streams == (("b", 9), ("b", 10))
    assert second.readings == 9
    assert second.groups == {"x": x_groups, "y": y_groups}  # rows 0-6 of x: both groups
    assert third.streams == ((None, 0),) and third.readings == 1
    assert [b.number for b in plan([x, y], 1)] == [0, 1, 2, 3, 4]
    assert [b.streams for b in plan([x, y], 10**9)] == [
        (("a", 2), ("a", None), ("b", 9), ("b", 10), (None, 0))
    ]
    with pytest.raises(ValueError, match="at least 1"):
        plan([x, y], 0)


def test_a_negative_rank_is_indexed_as_negative_and_refused_when_read(tmp_path: Path) -> None:
    """The footer's statistics of rank -1 are 0xffffffff, a signed int32: the index
    names rank -1 (not 4294967295) and the batch refuses it by its row."""
    rows = [
        dict(run="r", rank=-1, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
             peak_bytes=100)
        for s in range(3)
    ]  # fmt: skip
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    index = index_file(path)
    assert index.stretches == (("r", -1, 0, 3),)
    with pytest.raises(TraceError, match="is negative") as caught:
        read_batch(plan([index])[0])
    assert (caught.value.path, caught.value.column, caught.value.row) == (str(path), "rank", 0)


def test_a_rank_beyond_int64_is_indexed_as_null_and_refused_when_read(tmp_path: Path) -> None:
    """A uint64 rank of 2**63 fits no Int64: the index holds its stream as rank None
    (the rows' rule names it when the batch is read), rather than failing in polars."""
    path = ranked_as(tmp_path / "t.parquet", 2**63, pa.uint64())
    index = index_file(path)
    assert index.stretches == (("r", None, 0, 3),)
    with pytest.raises(TraceError, match="does not fit") as caught:
        read_batch(plan([index])[0])
    assert (caught.value.path, caught.value.column, caught.value.row) == (str(path), "rank", 0)


def _interleaved(path: Path) -> list[streams.Batch]:
    """Ranks 0 and 1 of run "r" alternating row by row over 66 rows in one row group
    (a collector's file): indexed here by plan_trace, a batch a stream."""
    frame = readings_frame([
        dict(run="r", rank=row % 2, seq=row // 2, wave=row // 2, signature="s",
             packed_tokens=4, logical_tokens=4, peak_bytes=100 + row)
        for row in range(66)
    ])  # fmt: skip
    write_trace(frame, path)
    batches = streams.plan_trace([path.parent], 1)
    assert batches == plan([index_file(path)], 1)
    assert [(b.streams, b.readings) for b in batches] == [((("r", 0),), 33), ((("r", 1),), 33)]
    return batches


def _here(task: object, arguments: list[tuple[object, ...]]) -> list[object]:
    return [task(*a) for a in arguments]  # type: ignore[operator]


def test_routed_rows_are_the_batches_rows_and_a_batch_whose_rows_are_gone_is_refused(
    tmp_path: Path,
) -> None:
    """The interleaved file is routed (its two batches span its 66 rows twice): run
    in this process, each batch reads from the spool the rows it reads from the file.
    With batch 1's spooled rows deleted, it finds 0 of the 33 readings of stream
    ("r", 1) it counted, and says so naming the file."""
    path = tmp_path / "t.parquet"
    batches = _interleaved(path)
    routes = streams.route(batches)
    assert [(r.start, r.stop, r.streams) for r in routes] == [
        (0, 66, ((("r", 0), 0), (("r", 1), 1)))
    ]
    with streams.Spool() as spool:
        routed = spool.routed(batches, routes, _here)
        assert spool.rows == 66 and spool.folder is not None
        for plain, by_route in zip(batches, routed, strict=True):
            assert by_route.routes == ((str(path), 0),) and by_route.spool == spool.folder
            assert read_batch(by_route).equals(read_batch(plain))
        os.remove(os.path.join(spool.folder, "route-0-batch-1.arrow"))
        with pytest.raises(TraceError) as caught:
            read_batch(routed[1])
        assert caught.value.path == str(path)
        assert "stream ('r', 1) has 0 where 33 were counted" in str(caught.value)
    assert not os.path.exists(str(spool.folder or routed[0].spool))


def test_a_route_that_cannot_be_spooled_or_reads_fewer_rows_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No temporary folder (a full disk) and a spool folder that is gone are usage
    errors naming the folder and what to do; a file that holds 40 of the route's 66
    rows when it is decoded changed since it was indexed: the file is named."""
    import errno

    path = tmp_path / "t.parquet"
    batches = _interleaved(path)
    (route,) = streams.route(batches)
    gone = tmp_path / "gone"
    with pytest.raises(UsageError) as caught:
        streams.route_rows(route, str(gone))
    words = "cannot write the temporary files of the rows of streams that interleave in"
    assert str(caught.value).startswith(f"{words} {gone} (")
    assert "point TMPDIR at a folder with room" in str(caught.value)

    def full(**_: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    with streams.Spool() as spool, pytest.raises(UsageError) as caught:
        spool.routed(batches, [route], _here)
    assert str(caught.value).startswith(
        f"{words} {tempfile.gettempdir()} (No space left on device); nothing was written."
    )
    real = streams.read_rows
    monkeypatch.setattr(streams, "read_rows", lambda *a, **k: real(*a, **k).head(40))
    with pytest.raises(TraceError) as caught:
        streams.route_rows(route, str(tmp_path))
    assert caught.value.path == str(path)
    assert "holds 40 rows where it held 66 when it was indexed" in str(caught.value)


# --- issue 38, generated pass of batches.py (i38y) ---


def test_a_tail_is_left_only_the_rows_read_ahead_of_a_batch() -> None:
    """One row group of 10 rows: ranks 0, 1, 2 of 2, 4 and 4 readings, a batch a
    stream. The first batch (rows 0-2) reads no further than its own rows (the
    group's 8 others are more than its 2), so it leaves nothing in the tail: asked
    for rows 0-2, the tail has none. The second batch (rows 2-6) reads on to the
    group's end and leaves rows 2-9 there: asked for rows 6-10, the tail gives the
    third stream's 4 readings, ranks 2; asked for rows from 10 on (past the group's
    end), it has none."""
    columns = tuple(wanted_columns(None, ()))
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        path = Path(folder) / "t.parquet"
        patch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 10)
        rows = [
            dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
                 peak_bytes=100 + 10 * rank + s)
            for rank, n in enumerate([2, 4, 4]) for s in range(n)
        ]  # fmt: skip
        write_trace(readings_frame(rows), path)
        first, second, _ = plan([index_file(path)], 2)
        tail = Tail()
        read_canonical(first, tail=tail)
        assert tail.take(str(path), columns, 0, 2) is None
        read_canonical(second, tail=tail)
        held = tail.take(str(path), columns, 6, 10)
        assert held is not None
        assert held.get_column("rank").to_list() == [2] * 4
        assert held.get_column("peak_bytes").to_list() == [120, 121, 122, 123]
        assert tail.take(str(path), columns, 2, 6) is not None  # from the second batch's first row
        assert tail.take(str(path), columns, 1, 6) is None  # the first batch's rows: not held
        assert tail.take(str(path), columns, 10, 12) is None  # past the group's end: none


def test_a_batch_takes_its_streams_rows_among_others_only_within_their_segments(
    tmp_path: Path,
) -> None:
    """A file of 14 rows in one row group: ("runA", 5) at rows 0-1; ("runA", 0) and
    ("runA", 1) alternating at rows 2-9 (4 readings each: indexed by their counts,
    as an interleaved group is); rows 10-11 hold ("runA", 0) again, but the index
    (as a footer whose statistics lie would give) names them ("runB", 0); then
    ("runA", 2) at rows 12-13. In batches of 10 readings, the first holds ("runA",
    0), ("runA", 1) and ("runA", 2), rows 2 to 13: it takes the rows of ("runA", 0)
    within rows 2-9 only, its 4 counted readings (peaks 1000 to 1003), not the two at
    rows 10-11 that another batch planned (which that batch refuses)."""
    stream = [("runA", 5)] * 2 + [("runA", 0), ("runA", 1)] * 4 + [("runA", 0)] * 2
    stream += [("runA", 2)] * 2
    seqs: dict[tuple[str, int], int] = {}
    rows = []
    for run, rank in stream:
        seq = seqs[(run, rank)] = seqs.get((run, rank), -1) + 1
        rows.append(
            dict(run=run, rank=rank, seq=seq, wave=seq, signature="s", packed_tokens=4,
                 logical_tokens=4, peak_bytes=1000 + 100 * rank + seq)
        )  # fmt: skip
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    groups = index_file(path).groups
    lying = streams.FileIndex(
        str(path), 14, (("runA", 5, 0, 2), ("runB", 0, 10, 12), ("runA", 2, 12, 14)), groups,
        (("runA", 0, 2, 10, 4), ("runA", 1, 2, 10, 4)),
    )  # fmt: skip
    first, second = plan([lying], 10)
    assert first.streams == (("runA", 0), ("runA", 1), ("runA", 2)) and first.readings == 10
    frame = read_batch(first)
    assert frame.select("rank", "peak_bytes").rows() == [
        (0, 1000), (0, 1001), (0, 1002), (0, 1003), (1, 1100), (1, 1101), (1, 1102), (1, 1103),
        (2, 1200), (2, 1201),
    ]  # fmt: skip
    assert second.streams == (("runA", 5), ("runB", 0))
    with pytest.raises(TraceError, match="statistics of its row groups"):
        read_batch(second)


@pytest.mark.parametrize(
    "counted, said",
    [((4, 3), "stream ('r', 1) has 4 where 3 were counted"),
     ((5, 3), "stream ('r', 0) has 4 where 5 were counted")],
    ids=["one stream miscounted", "both: the first named"],
)  # fmt: skip
def test_a_stream_counted_wrong_is_named_first_in_canonical_order(
    tmp_path: Path, counted: tuple[int, int], said: str
) -> None:
    """Ranks 0 and 1 of run "r" alternating over 8 rows (4 readings each), indexed
    by their counts in rows 0-8 as an interleaved group is, but counted (4, 3): rank
    1's count is wrong and the error names it, not rank 0 (whose 4 are right).
    Counted (5, 3), both are wrong: the first in canonical order, rank 0, is named."""
    rows = [
        dict(run="r", rank=row % 2, seq=row // 2, wave=row // 2, signature="s",
             packed_tokens=4, logical_tokens=4, peak_bytes=100)
        for row in range(8)
    ]  # fmt: skip
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    index = streams.FileIndex(
        str(path), 8, (), index_file(path).groups,
        (("r", 0, 0, 8, counted[0]), ("r", 1, 0, 8, counted[1])),
    )  # fmt: skip
    (batch,) = plan([index], 100)
    with pytest.raises(TraceError) as caught:
        read_batch(batch)
    assert caught.value.path == str(path)
    assert f"are not those it held when it was indexed: {said};" in str(caught.value)


@pytest.mark.parametrize("damaged", [0, 1])
def test_a_batch_checks_the_pages_of_its_own_row_groups_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damaged: int
) -> None:
    """Streams ("runA", 0) and ("runB", 1) of 4 readings each, in row groups of 4: a
    batch a stream, each holding exactly one row group (rows 0-3, rows 4-7). A
    flipped byte in one group's last page fails the batch that reads that group,
    and not the other batch, whose rows end (or begin) exactly at the group's edge."""
    monkeypatch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 4)
    path = tmp_path / "t.parquet"
    rows = [
        dict(run=run, rank=rank, seq=s, wave=s, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100 + s)
        for run, rank in (("runA", 0), ("runB", 1)) for s in range(4)
    ]  # fmt: skip
    write_trace(readings_frame(rows), path)
    index = index_file(path)
    batches = plan([index], 4)
    assert [b.streams for b in batches] == [(("runA", 0),), (("runB", 1),)]
    assert [b.groups for b in batches] == [
        {str(path): index.groups[:1]},
        {str(path): index.groups[1:]},
    ]
    chunk = index.groups[damaged][1].chunks[-1]
    data = bytearray(path.read_bytes())
    data[chunk.start + chunk.size - 1] ^= 0xFF  # inside the chunk's last page's body
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="fails its checksum"):
        read_batch(batches[damaged])
    assert read_batch(batches[1 - damaged]).height == 4


@pytest.mark.parametrize(
    "n, planned, read",
    [(3, "('runA', 0), ('runB', 0), ('runZ', 0)", "('runA', 0), ('runB', 0), ('runC', 0)"),
     (4, "('runA', 0), ('runB', 0), ('runC', 0) and 1 more",
      "('runA', 0), ('runB', 0), ('runC', 0) and 1 more")],
)  # fmt: skip
def test_the_streams_planned_and_read_are_named_three_at_most(
    tmp_path: Path, n: int, planned: str, read: str
) -> None:
    """A file of ``n`` streams ("runA", 0), ("runB", 0), ... of one reading each,
    whose index (as a lying footer would give) names the last one ("runZ", 0): the
    batch of all of them refuses the rows, naming the streams planned and read, the
    first three of each and how many more (3: all three, nothing after; 4: three
    and "1 more")."""
    runs = [f"run{chr(ord('A') + i)}" for i in range(n)]
    rows = [
        dict(run=run, rank=0, seq=0, wave=0, signature="s", packed_tokens=4, logical_tokens=4,
             peak_bytes=100)
        for run in runs
    ]  # fmt: skip
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    named = [*runs[:-1], "runZ"]
    index = streams.FileIndex(
        str(path), n, tuple((run, 0, i, i + 1) for i, run in enumerate(named)),
        index_file(path).groups,
    )  # fmt: skip
    (batch,) = plan([index], 100)
    with pytest.raises(TraceError) as caught:
        read_batch(batch)
    assert caught.value.path == str(path)
    assert f"streams than its rows hold (planned {planned}; read {read})." in str(caught.value)


def _alternating_index() -> streams.FileIndex:
    """A hand-made index of file "f": 8 rows in row groups of 2 (rows 0, 2, 4, 6);
    streams ("a", 0) and ("b", 0) alternating row by row in rows 0-3, ("c", 0) and
    ("d", 0) in rows 4-7 (stretches of one row)."""
    groups = tuple((start, pagecrc.RowGroup(2, {}, ())) for start in (0, 2, 4, 6))
    stretches = tuple((name, 0, row, row + 1) for row, name in enumerate("ababcdcd"))
    return streams.FileIndex("f", 8, stretches, groups)


def _alternating_pairs() -> list[streams.Batch]:
    """The file of :func:`_alternating_index` planned a batch a stream, whose rows
    span 3 + 3 + 3 + 3 = 12 rows of 8, 1.5 times: routed."""
    batches = plan([_alternating_index()], 1)
    assert [b.streams for b in batches] == [(("a", 0),), (("b", 0),), (("c", 0),), (("d", 0),)]
    return batches


def test_routes_are_cut_at_whole_row_groups_of_the_batch_size_spelled_out() -> None:
    """The file above, routed in routes of about 4 rows: the groups at rows 0 and 2
    make 4 rows, exactly the size, so the route ends there (rows 0-4: streams a and
    b, to batches 0 and 1) and the next begins (rows 4-8: c and d, batches 2 and 3);
    stream b's last row, row 3, is the first route's last, and b is in the first
    route only. In routes of about 5 rows, the first takes three groups (6 rows:
    4 is less than 5) and holds a row of each stream (c at row 4, d at row 5); the
    second, rows 6-8, holds c and d again."""
    batches = _alternating_pairs()
    four = [(r.number, r.path, r.start, r.stop, r.streams) for r in streams.route(batches, 4)]
    assert four == [
        (0, "f", 0, 4, ((("a", 0), 0), (("b", 0), 1))),
        (1, "f", 4, 8, ((("c", 0), 2), (("d", 0), 3))),
    ]
    five = streams.route(batches, 5)
    assert [(r.number, r.start, r.stop, r.streams) for r in five] == [
        (0, 0, 6, ((("a", 0), 0), (("b", 0), 1), (("c", 0), 2), (("d", 0), 3))),
        (1, 6, 8, ((("c", 0), 2), (("d", 0), 3))),
    ]
    assert [[start for start, _ in r.groups] for r in five] == [[0, 2, 4], [6]]
    one = streams.route(batches, 1)  # a group a route at least
    assert [(r.start, r.stop) for r in one] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [r.streams for r in one] == [
        ((("a", 0), 0), (("b", 0), 1)),
        ((("a", 0), 0), (("b", 0), 1)),
        ((("c", 0), 2), (("d", 0), 3)),
        ((("c", 0), 2), (("d", 0), 3)),
    ]


def test_a_routed_batch_read_with_other_columns_reads_them_from_the_file(
    tmp_path: Path,
) -> None:
    """The spool holds replay's columns only (``step`` is none of them): ranks 0 and
    1 of run "r" alternating over 66 rows, the reading at row i at step 1000 + i,
    routed a batch a rank; read with ``step``, each batch's 33 rows come from the
    file, their steps 1000, 1002, ... (rank 0) and 1001, 1003, ... (rank 1), as
    the batches not routed read them."""
    path = tmp_path / "t.parquet"
    frame = readings_frame([
        dict(run="r", rank=row % 2, seq=row // 2, step=1000 + row, wave=row // 2,
             signature="s", packed_tokens=4, logical_tokens=4, peak_bytes=100)
        for row in range(66)
    ])  # fmt: skip
    write_trace(frame, path)
    batches = plan([index_file(path)], 1)
    with streams.Spool() as spool:
        routed = spool.routed(batches, streams.route(batches), _here)
        for rank, (plain, by_route) in enumerate(zip(batches, routed, strict=True)):
            assert by_route.spool is not None and by_route.routes == ((str(path), 0),)
            read = read_batch(by_route, ["step"])
            assert read.get_column("step").to_list() == list(range(1000 + rank, 1066, 2))
            assert read.equals(read_batch(plain, ["step"]))


def test_a_batch_of_a_stretch_and_a_stream_among_others_keeps_its_rows_only(
    tmp_path: Path,
) -> None:
    """A file of 7 rows in one row group: ("r", 9) at rows 0-1, ("r", 0) at row 2,
    then ("r", 1) and ("r", 2) alternating at rows 3-6; indexed by hand as a plan
    sees it: ("r", 1) and ("r", 2) by their 2 readings each among rows 3-7. In
    batches of 3 readings the first holds ("r", 0) (1 reading, a stretch) and ("r",
    1) (2 readings among others): rows 2 to 6, of which it keeps row 2 and rows 3 and
    5 (ranks 0, 1, 1; peaks 102, 103, 105), not ("r", 2)'s rows 4 and 6."""
    ranks = [9, 9, 0, 1, 2, 1, 2]
    seqs = [0, 1, 0, 0, 0, 1, 1]
    rows = [
        dict(run="r", rank=rank, seq=seq, wave=seq, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100 + row)
        for row, (rank, seq) in enumerate(zip(ranks, seqs, strict=True))
    ]  # fmt: skip
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    index = streams.FileIndex(
        str(path), 7, (("r", 9, 0, 2), ("r", 0, 2, 3)), index_file(path).groups,
        (("r", 1, 3, 7, 2), ("r", 2, 3, 7, 2)),
    )  # fmt: skip
    first, second = plan([index], 3)
    assert first.streams == (("r", 0), ("r", 1)) and second.streams == (("r", 2), ("r", 9))
    assert read_batch(first).select("rank", "peak_bytes").rows() == [(0, 102), (1, 103), (1, 105)]
    assert read_batch(second).select("rank", "peak_bytes").rows() == [
        (2, 104), (2, 106), (9, 100), (9, 101)
    ]  # fmt: skip


def test_a_batch_of_files_with_and_without_an_optional_column_reads_nulls_there(
    tmp_path: Path,
) -> None:
    """File a.parquet holds run "a" with estimate_bytes (90 and 91), b.parquet run
    "b" without the column: one batch of both reads the four readings in canonical
    order, estimate_bytes 90, 91 for run "a" and null for run "b"."""
    for run, more in (("a", True), ("b", False)):
        rows = [
            dict(run=run, rank=0, seq=s, wave=s, signature="s", packed_tokens=4,
                 logical_tokens=4, peak_bytes=100 + s, **({"estimate_bytes": 90 + s} if more else {}))
            for s in range(2)
        ]  # fmt: skip
        write_trace(readings_frame(rows), tmp_path / f"{run}.parquet")
    (batch,) = plan([index_file(tmp_path / f"{run}.parquet") for run in "ab"], 100)
    frame = read_batch(batch)
    assert frame.select("run", "peak_bytes", "estimate_bytes").rows() == [
        ("a", 100, 90), ("a", 101, 91), ("b", 100, None), ("b", 101, None)
    ]  # fmt: skip


def test_a_batch_past_the_first_reads_its_own_rows_again_when_reading_ahead_fails(
    tmp_path: Path,
) -> None:
    """As above, from a batch that starts past row 0: one row group of ranks 0, 1 and
    2 of 2000 readings each, no page checksums; rank 1's reading at row 2005 is
    negative and the last page of ``peak_bytes`` (rank 2's rows) is damaged. Read in
    order with a tail, the first batch (rows 0-2000) reads no further (the 4000 rows
    after it are more than its 2000); the second (rows 2000-4000) reads on to the
    group's end, cannot, and reads rows 2000-4000 alone again: its own error, row
    2005, first."""
    assert first_error_row(tmp_path / "t.parquet", ranks=3, negative_rank=1) == 2005


def test_a_batch_reads_ahead_no_more_rows_than_it_holds_wherever_it_starts() -> None:
    """One row group of 10 rows: ranks 0, 1, 2 of 4, 2 and 4 readings, a batch a
    stream, read in order with one tail. The first batch (rows 0-4) would read 6
    more to the group's end, more than its 4: it reads rows 0-4 only. The second
    (rows 4-6) would read 4 more, more than its 2: rows 4-6 only, and leaves nothing
    in the tail. The third reads its rows 6-10."""
    assert reads_in_order([4, 2, 4]) == [(0, 4), (4, 2), (6, 4)]


def test_a_file_that_holds_fewer_rows_than_indexed_is_named_when_its_batch_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams ("runA", 0) and ("runB", 1) of 6 readings each (rows 0-6 and 6-12):
    when the file gives 3 rows where the batch of ("runB", 1) reads rows 6-12 (it was
    cut short since it was indexed), the batch stops, naming the file and the 9 rows
    it holds (6 + 3) where it held 12."""
    path = tmp_path / "t.parquet"
    _two_streams(path, monkeypatch)
    batches = plan([index_file(path)], 6)
    assert [b.streams for b in batches] == [(("runA", 0),), (("runB", 1),)]
    real = streams.read_rows
    monkeypatch.setattr(streams, "read_rows", lambda *a, **k: real(*a, **k).head(3))
    with pytest.raises(TraceError) as caught:
        read_batch(batches[1])
    assert caught.value.path == str(path)
    assert "holds 9 rows where it held 12 when it was indexed" in str(caught.value)


def test_a_spool_makes_one_folder_only_for_routes_and_removes_it_even_when_emptied(
    tmp_path: Path,
) -> None:
    """The interleaved file's two batches: with no route, a spool makes no folder and
    hands the batches back as they are; routed twice, it decodes the 66 rows twice
    (132 in all) into the one folder it made first, and the batches read from it are
    the same both times. A folder emptied by someone else (a cleaner of the
    temporary folder) is no error when the spool closes."""
    import shutil

    path = tmp_path / "t.parquet"
    batches = _interleaved(path)
    routes = streams.route(batches)
    with streams.Spool() as spool:
        assert spool.routed(batches, [], _here) == batches
        assert spool.folder is None and spool.rows == 0
        first = spool.routed(batches, routes, _here)
        folder = spool.folder
        assert folder is not None and os.path.isdir(folder)
        second = spool.routed(batches, routes, _here)
        assert spool.folder == folder and spool.rows == 132
        assert second == first and [b.spool for b in first] == [folder, folder]
        shutil.rmtree(folder)
    assert spool.folder is None


def test_a_route_names_only_the_streams_of_its_own_file() -> None:
    """The file "f" of _alternating_index beside a file "g" holding ("e", 0) at rows 0-8, one
    stretch: g is not routed (its batch spans its 8 rows once), and f's routes name
    f's streams only, though e's rows in g lie at the same row numbers."""
    g = streams.FileIndex("g", 8, (("e", 0, 0, 8),), ((0, pagecrc.RowGroup(8, {}, ())),))
    both = plan([_alternating_index(), g], 1)
    assert both[:4] == _alternating_pairs() and both[4].streams == (("e", 0),)
    assert [(r.path, r.start, r.stop, r.streams) for r in streams.route(both, 4)] == [
        ("f", 0, 4, ((("a", 0), 0), (("b", 0), 1))),
        ("f", 4, 8, ((("c", 0), 2), (("d", 0), 3))),
    ]


def test_routed_rows_of_a_null_rank_reach_their_batch_and_are_refused_by_row(
    tmp_path: Path,
) -> None:
    """Ranks 0 and null of run "r" alternating over 66 rows (a rank column that allows
    nulls, written by another tool): indexed by stream as ("r", 0) and ("r", None), 33
    readings each, and routed. The null-rank rows reach their batch through the
    spool, whose rules refuse them by the first one, row 1, column rank."""
    rows = [
        dict(run="r", rank=0, seq=row // 2, wave=row // 2, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100)
        for row in range(66)
    ]  # fmt: skip
    table = to_arrow(readings_frame(rows))
    ranks = pa.array([None if row % 2 else 0 for row in range(66)], pa.int32())
    table = table.set_column(
        table.schema.get_field_index("rank"), pa.field("rank", pa.int32(), True), ranks
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, write_page_checksum=True)
    batches = plan([index_file(path)], 1)
    assert [(b.streams, b.readings) for b in batches] == [((("r", 0),), 33), ((("r", None),), 33)]
    routes = streams.route(batches)
    assert [(r.start, r.stop, r.streams) for r in routes] == [
        (0, 66, ((("r", 0), 0), (("r", None), 1)))
    ]
    with streams.Spool() as spool:
        first, second = spool.routed(batches, routes, _here)
        assert read_batch(first).height == 33
        with pytest.raises(TraceError, match="is null") as caught:
            read_batch(second)
    assert (caught.value.path, caught.value.column, caught.value.row) == (str(path), "rank", 1)


def test_rank_0_is_planned_before_rank_1_whatever_the_file_order() -> None:
    """A hand-made index of file "f" (4 rows, one row group): ("r", 1) at rows 0-1
    and ("r", 0) at rows 2-3. Canonical order puts rank 0 first: a batch a stream,
    ("r", 0) is batch 0 and ("r", 1) batch 1."""
    index = streams.FileIndex(
        "f", 4, (("r", 1, 0, 2), ("r", 0, 2, 4)), ((0, pagecrc.RowGroup(4, {}, ())),)
    )
    assert [b.streams for b in plan([index], 1)] == [(("r", 0),), (("r", 1),)]
