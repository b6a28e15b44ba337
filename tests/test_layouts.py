"""Layouts that interleave streams (issue 28, item 6): the same output, each row group
decoded once.

A collector that appends readings as they arrive writes the streams of a file
interleaved: every row group holds rows of many streams, so every batch of
whole streams spans most of the file. The plan then indexes those row groups by
each stream's readings in them (``FileIndex.mixed``), and :func:`route` has the
file decoded once, its rows routed to their batches, instead of once a batch.
Whatever the layout, the batch size and the number of jobs, the output is the
whole trace's replay in memory, byte for byte. The decisions are checked from the
plan itself; no test here times anything.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest

from warmfit.errors import TraceError
from warmfit.format import batches as batches_module
from warmfit.format.batches import (
    MIXED_STRETCHES,
    Spool,
    index_file,
    plan,
    read_batch,
    read_canonical,
    route,
    route_rows,
    routed_batches,
)
from warmfit.format.trace import find_trace_files, read_trace, write_trace
from warmfit.replay import replay
from warmfit.replay.perwave import PerWaveWriter
from warmfit.replay.stream import replay_stream
from warmfit.report.table import render

POLICIES = ["max-merge", "warm-fit", "warm-affine"]
#: Rows per row group of the traces written here (a recorder's are 2**17 rows):
#: a few thousand readings make several groups.
GROUP_ROWS = 400


def _generator() -> object:
    """benchmarks/generate.py, which writes the benchmark's interleaved trace too."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "generate.py"
    spec = importlib.util.spec_from_file_location("warmfit_bench_generate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


generate = _generator()


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", GROUP_ROWS)


def _readings() -> pl.DataFrame:
    """3 runs of 2 ranks, about 1000 readings a stream, rows in (run, rank, seq) order."""
    frame: pl.DataFrame = generate.generate(6000, runs=3, ranks=2, signatures=3, seed=7)  # type: ignore[attr-defined]
    return frame


def _by_stream(frame: pl.DataFrame) -> pl.DataFrame:
    """Every stream's rows alternating with every other stream's, row by row."""
    return (
        frame.with_columns(_at=pl.int_range(pl.len()).over("run", "rank"))
        .sort("_at", "run", "rank", maintain_order=True)
        .drop("_at")
    )


def _in_blocks(frame: pl.DataFrame, rows: int) -> pl.DataFrame:
    """The runs' rows alternating in blocks of ``rows`` (a few stretches a row group)."""
    return (
        frame.with_columns(_at=pl.int_range(pl.len()).over("run") // rows)
        .sort("_at", "run", maintain_order=True)
        .drop("_at")
    )


def _blocked(frame: pl.DataFrame, folder: Path) -> None:
    write_trace(frame, folder / "all.parquet")


def _two_files_blocked(frame: pl.DataFrame, folder: Path) -> None:
    generate.write(frame, folder)  # type: ignore[attr-defined]


def _interleaved(frame: pl.DataFrame, folder: Path) -> None:
    generate.write_interleaved(frame, folder)  # type: ignore[attr-defined]


def _interleaved_by_stream(frame: pl.DataFrame, folder: Path) -> None:
    write_trace(_by_stream(frame), folder / "streams.parquet")


def _coarse(frame: pl.DataFrame, folder: Path) -> None:
    write_trace(_in_blocks(frame, 50), folder / "coarse.parquet")


def _mixed(frame: pl.DataFrame, folder: Path) -> None:
    """One file of a stream side by side, then two runs' rows alternating (row groups
    of each kind, and one of both); and one stream in a file of its own."""
    alone = (pl.col("run") == "run0") & (pl.col("rank") == 1)
    first = frame.filter((pl.col("run") == "run0") & ~alone)
    rest = frame.filter(pl.col("run") != "run0")
    write_trace(pl.concat([first, generate.interleave(rest)]), folder / "a.parquet")  # type: ignore[attr-defined]
    write_trace(frame.filter(alone), folder / "b.parquet")


LAYOUTS: dict[str, Callable[[pl.DataFrame, Path], None]] = {
    "blocked": _blocked,
    "blocked, a file a run": _two_files_blocked,
    "interleaved": _interleaved,
    "interleaved by stream": _interleaved_by_stream,
    "interleaved in blocks": _coarse,
    "mixed": _mixed,
}
#: The layouts whose every file :func:`route` routes (at batch sizes below a run's readings).
ROUTED = {"interleaved", "interleaved by stream", "interleaved in blocks"}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    frame = _readings()
    folder = tmp_path_factory.mktemp("layouts")
    made = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", GROUP_ROWS)
        for name, write in LAYOUTS.items():
            made[name] = folder / name.replace(" ", "-").replace(",", "")
            write(frame, made[name])
    yield made


def _plan(folder: Path, batch_readings: int) -> list[batches_module.Batch]:
    return plan([index_file(f) for f in find_trace_files([folder])], batch_readings)


# --------------------------------------------------------------------------- the plan


def test_interleaved_row_groups_are_indexed_by_each_streams_readings(
    traces: dict[str, Path],
) -> None:
    """A row group whose rows change stream at every row is one entry a stream, not
    one a row; a recorder's blocked file keeps its stretches."""
    index = index_file(traces["interleaved"] / "interleaved.parquet")
    assert index.stretches == ()
    assert len(index.mixed) == 6  # one a stream: each runs on from one group to the next
    assert sum(entry[4] for entry in index.mixed) == index.rows
    assert all(stop - start > 2 * count for _, _, start, stop, count in index.mixed)
    blocked = index_file(traces["blocked"] / "all.parquet")
    assert blocked.mixed == () and len(blocked.stretches) == 6
    coarse = index_file(traces["interleaved in blocks"] / "coarse.parquet")
    assert coarse.mixed == ()  # blocks of 50 rows: a few stretches a group
    assert len(coarse.stretches) > MIXED_STRETCHES  # not merged across groups


@pytest.mark.parametrize("batch_readings", [300, 1000, 2500])
def test_the_plan_routes_the_files_whose_streams_interleave(
    traces: dict[str, Path], batch_readings: int
) -> None:
    """Routed: a file whose batches would each decode most of it; its row groups are
    cut into routes of whole groups, each group in exactly one route, and every
    stream's rows go to its own batch. Not routed: files of streams side by side."""
    for name, folder in traces.items():
        batches = _plan(folder, batch_readings)
        routes = route(batches, batch_readings)
        files = {r.path for r in routes}
        if name in ROUTED:
            assert len(batches) > 1
            (path,) = find_trace_files([folder])
            assert files == {str(path)}
            groups = [start for r in routes for start, _ in r.groups]
            index = index_file(path)
            assert groups == [start for start, _ in index.groups]  # each group once
            assert [r.start for r in routes] == sorted(r.start for r in routes)
            for r in routes:
                assert r.stop - r.start >= min(batch_readings, GROUP_ROWS) or r is routes[-1]
            home = {key: b.number for b in batches for key in b.streams}
            for r in routes:
                assert r.streams and all(home[key] == number for key, number in r.streams)
        elif name == "mixed":
            # the file of interleaved runs is routed while several batches span most
            # of it (in batches of 2500, two span it 1.4 times); the file of one
            # stream never is
            assert all(Path(p).name == "a.parquet" for p in files)
            assert bool(files) == (batch_readings <= 1000)
        else:
            assert routes == [], name


def test_one_batch_is_never_routed(traces: dict[str, Path]) -> None:
    """A batch that holds every stream decodes each row group once already."""
    for folder in traces.values():
        batches = _plan(folder, 10**9)
        assert len(batches) == 1
        assert route(batches, 10**9) == []


# --------------------------------------------------------------------------- the output


def _expected(folder: Path) -> tuple[str, list[dict[str, object]]]:
    result = replay(read_trace([folder], columns=()), POLICIES, 1.1, "auto", "signature", 10**11)
    return render(result, "json"), result.per_wave.to_dicts()


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_gives_the_whole_trace_replay(
    traces: dict[str, Path], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs 1 and 2 (in worker processes), several batch sizes: the summary and the
    per-wave rows of the whole trace in memory; the routed rows are the file's."""
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)  # workers even for small traces
    folder = traces[name]
    json, per_wave = _expected(folder)
    rows = read_trace([folder], columns=()).height
    for batch_readings in (300, 1000, 2500, 10**6):
        for jobs in (1, 2):
            frames: list[pl.DataFrame] = []
            got = replay_stream(
                [folder], POLICIES, by="signature", budget_bytes=10**11, jobs=jobs,
                batch_readings=batch_readings, per_wave=frames.append,
            )  # fmt: skip
            assert render(got, "json") == json, (batch_readings, jobs)
            assert pl.concat(frames).to_dicts() == per_wave, (batch_readings, jobs)
            many = got.batches > 1
            assert got.jobs == (jobs if many else 1)
            routed = route(_plan(folder, batch_readings), batch_readings)
            assert got.routed_rows == sum(r.stop - r.start for r in routed)
            if name in ROUTED and many:
                assert got.routed_rows == rows
            # without per-wave rows: tasks of consecutive batches
            alone = replay_stream(
                [folder], POLICIES, by="signature", budget_bytes=10**11, jobs=jobs,
                batch_readings=batch_readings,
            )  # fmt: skip
            assert render(alone, "json") == json, (batch_readings, jobs)


@pytest.mark.parametrize("name", ["interleaved", "mixed"])
def test_the_per_wave_file_is_the_same_bytes_routed_or_not(
    traces: dict[str, Path], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Parquet per-wave file, routed in one process, routed in workers, and read
    batch by batch from the file as before routing: the same bytes."""
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)
    folder = traces[name]
    files = []
    for jobs, span in ((1, batches_module.ROUTE_SPAN), (2, batches_module.ROUTE_SPAN), (1, 1e9)):
        monkeypatch.setattr(batches_module, "ROUTE_SPAN", span)
        sink = io.BytesIO()
        with PerWaveWriter(sink, "parquet") as writer:
            got = replay_stream([folder], POLICIES, jobs=jobs, batch_readings=500, per_wave=writer)
        assert (got.routed_rows > 0) == (span < 1e9)
        files.append(sink.getvalue())
    assert files[0] == files[1] == files[2]


def test_a_batch_reads_its_streams_among_others_without_routing(
    traces: dict[str, Path],
) -> None:
    """Unrouted (the plan alone, as --permute reads it), a batch of an interleaved file
    reads its streams' rows and no other's, in the order read_trace gives."""
    whole = read_trace([traces["interleaved by stream"]], columns=())
    for batch in _plan(traces["interleaved by stream"], 1500):
        got = read_batch(batch)
        keys = pl.DataFrame(list(batch.streams), schema=["run", "rank"], orient="row")
        want = whole.join(keys.cast({"rank": pl.Int32}), on=["run", "rank"], maintain_order="left")
        assert got.equals(want)


# --------------------------------------------------------------------------- faults


def test_the_routed_rows_leave_no_file_behind(
    traces: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The spool lies in TMPDIR while the replay runs, and is gone after it, whether
    it succeeded or failed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got = replay_stream([traces["interleaved"]], POLICIES, batch_readings=500)
    assert got.routed_rows > 0
    assert not list(tmp_path.glob("warmfit-routed-*"))

    def fail(*args: object) -> object:
        raise TraceError("planted", path="x")

    monkeypatch.setattr(batches_module, "canonical", fail)
    with pytest.raises(TraceError, match="planted"):
        replay_stream([traces["interleaved"]], POLICIES, batch_readings=500)
    assert not list(tmp_path.glob("warmfit-routed-*"))


def test_rows_that_do_not_hold_the_streams_indexed_are_an_error(tmp_path: Path) -> None:
    """Rows of interleaved streams are told apart by their (run, rank): rows that do
    not hold each stream as many times as the index counted (footer statistics
    that lie, a file rewritten meanwhile) are an error naming the file, whether
    routed or read batch by batch, never other figures."""
    frame = _readings().filter(pl.col("rank") == 0)
    path = tmp_path / "t.parquet"
    write_trace(generate.interleave(frame), path)  # type: ignore[attr-defined]
    index = index_file(path)
    assert {entry[:2] for entry in index.mixed} == {("run0", 0), ("run1", 0), ("run2", 0)}
    # an index that counts one reading of run1 as run2's
    lying = dataclasses.replace(
        index,
        mixed=tuple(
            (*entry[:4], entry[4] + {"run1": -1, "run2": 1}.get(str(entry[0]), 0))
            for entry in index.mixed
        ),
    )
    batches = plan([lying], 1000)
    routes = route(batches, 1000)
    assert routes
    with Spool() as spool:
        routed = spool.routed(batches, routes, lambda f, calls: (f(*c) for c in calls))
        with pytest.raises(TraceError, match="not those it held when it was indexed") as error:
            for batch in routed:
                read_canonical(batch)
        assert str(path) in str(error.value)
        folder = spool.folder
        assert folder is not None and os.listdir(folder)
    assert not os.path.exists(folder)
    with pytest.raises(TraceError, match="not those it held when it was indexed"):
        for batch in batches:
            read_canonical(batch)


def test_route_rows_writes_each_batchs_rows_once(traces: dict[str, Path], tmp_path: Path) -> None:
    """Every row of a routed file is written once, to its stream's batch, with its row
    number in the file."""
    batches = _plan(traces["interleaved by stream"], 1000)
    routes = route(batches, 1000)
    assert sum(route_rows(r, str(tmp_path)) for r in routes) == sum(b.readings for b in batches)
    numbers = []
    for batch in routed_batches(batches, routes, str(tmp_path)):
        for _, number in batch.routes:
            spooled = tmp_path / f"route-{number}-batch-{batch.number}.arrow"
            numbers += pl.read_ipc(spooled).get_column("__warmfit_row").to_list()
    assert sorted(numbers) == list(range(sum(b.readings for b in batches)))
