"""Replay at any size (issue 13): batches of streams, every core, a Dask cluster.

Every path must give exactly what :func:`warmfit.replay.replay` gives on the
whole trace in memory: the summary (JSON byte for byte) and the per-wave rows,
whatever the batch size, the files' layout and the number of jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.command_line import warmfit_ok
from tests.strategies import examples, trace_parts
from tests.whole_waves import whole_wave, write_waves
from warmfit.cli import app
from warmfit.errors import TraceError, UsageError
from warmfit.format.batches import index_file, plan, read_batch
from warmfit.format.pagecrc import verify
from warmfit.format.schema import PER_WAVE_KEY
from warmfit.format.trace import find_trace_files, read_trace, readings_frame, write_trace
from warmfit.policies import MaxMerge, WarmFit
from warmfit.replay import GROUPINGS, IN_FIGURES, replay
from warmfit.replay.perwave import PerWaveWriter
from warmfit.replay.stream import Lineup, chain_sizes, replay_stream
from warmfit.replay.summary import SummaryFold
from warmfit.report.table import render

POLICIES = ["max-merge", "warm-fit", "warm-affine"]
TRACES = [
    "traces/pr991",
    "traces/art-h200/recompute_memory_final.parquet",
    "traces/cpu-demo",
    "traces/hf-qwen3moe-cpu",
]


def _write_parts(parts: list[pl.DataFrame], folder: Path) -> None:
    for i, part in enumerate(parts):
        # nested folders, names that do not sort like the rows, rows in any order
        write_trace(part, folder / f"d{i % 2}" / f"part-{len(parts) - i}.parquet")


def _negative_peak_at(path: Path, ranks: int, readings: int, at: tuple[int, int]) -> None:
    """A trace of ``ranks`` streams of ``readings`` readings each, whose reading
    ``at`` (rank, seq) has a negative peak: a broken rule in that stream's batch."""
    rows = [
        dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
             peak_bytes=-5 if (rank, s) == at else 100)
        for rank in range(ranks) for s in range(readings)
    ]  # fmt: skip
    write_trace(readings_frame(rows), path)


def _streamed(paths: list[str | Path], **options: object) -> tuple[object, pl.DataFrame]:
    frames: list[pl.DataFrame] = []
    result = replay_stream(paths, per_wave=frames.append, **options)  # type: ignore[arg-type]
    rows = pl.concat(frames) if frames else None
    return result, rows  # type: ignore[return-value]


# A fixed budget: each example writes a trace's files, replays it whole and streams it
# (up to 0.3 s an example; the ci profile's three times would add half a minute).
@settings(max_examples=80)
@given(
    trace_parts(),
    st.integers(1, 40),
    st.sampled_from(GROUPINGS),
    st.sampled_from([None, 0, 50_000, 10**12]),
    st.sampled_from(["auto", "scalar"]),
)
def test_batches_give_the_whole_trace_replay(
    parts: list[pl.DataFrame], batch: int, by: str, budget: int | None, engine: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _write_parts(parts, Path(tmp))
        expected = replay(read_trace([tmp], columns=()), POLICIES, 1.1, engine, by, budget)
        got, rows = _streamed(
            [tmp], policies=POLICIES, engine=engine, by=by, budget_bytes=budget,
            batch_readings=batch, spill_bytes=64,
        )  # fmt: skip
    assert render(got, "json") == render(expected, "json")  # type: ignore[arg-type]
    assert render(got, "csv") == render(expected, "csv")  # type: ignore[arg-type]
    assert got.summary.to_dicts() == expected.summary.to_dicts()  # type: ignore[attr-defined]
    if expected.per_wave.height:
        assert rows.to_dicts() == expected.per_wave.to_dicts()
    assert got.readings == sum(p.height for p in parts)  # type: ignore[attr-defined]


def _oracle(per_wave: pl.DataFrame, by: str) -> dict[tuple[object, ...], dict[str, object]]:
    """The figures of SPEC §3 and §7 computed the plain way, group by group."""
    keys = ["run"] if by == "run" else ["run", "signature"]
    figures: dict[tuple[object, ...], dict[str, object]] = {}
    for key, group in per_wave.group_by([*keys, "policy"]):
        waves = group.filter(IN_FIGURES)
        over = waves.get_column("over_estimate").to_list()
        estimate, actual = waves["estimate_bytes"].to_list(), waves["actual_bytes"].to_list()
        excess = sorted(e - a for e, a in zip(estimate, actual, strict=True))
        middle = None
        if excess:  # the mean of the two middle values, truncated toward zero, in integers
            total = excess[(len(excess) - 1) // 2] + excess[len(excess) // 2]
            middle = abs(total) // 2 * (1 if total >= 0 else -1)
        figures[key] = {
            "priced_waves": len(over),
            "median_over_estimate": statistics.median(over) if over else None,
            "min_over_estimate": min(over) if over else None,
            "max_over_estimate": max(over) if over else None,
            "median_excess_bytes": middle,
        }
    return figures


@settings(max_examples=examples(60))
@given(trace_parts(max_waves=20), st.sampled_from(GROUPINGS))
def test_the_fold_agrees_with_figures_computed_the_plain_way(
    parts: list[pl.DataFrame], by: str
) -> None:
    frame = pl.concat(parts).sort("run", "rank", "seq")
    result = replay(frame, POLICIES, 1.1, "auto", by)
    expected = _oracle(result.per_wave, by)
    keys = ["run"] if by == "run" else ["run", "signature"]
    got = {(*(r[k] for k in keys), r["policy"]): r for r in result.summary.iter_rows(named=True)}
    assert set(got) == set(expected)  # every group and policy, none missing or extra
    for key, figures in expected.items():
        for name, value in figures.items():
            assert got[key][name] == value, (key, name)


def test_a_fold_in_parts_equals_a_fold_at_once() -> None:
    """Parts in any order, medians spilled to disk: the same summary."""
    per_wave = replay(read_trace(TRACES, columns=()), POLICIES).per_wave
    with SummaryFold(POLICIES, "signature", 10**11) as whole:
        whole.add_per_wave(per_wave)
        once = whole.finish()
    step = 3 * len(POLICIES)  # whole waves per part
    chunks = [per_wave[i : i + step] for i in range(0, per_wave.height, step)]
    with SummaryFold(POLICIES, "signature", 10**11, spill_bytes=128) as parts:
        for chunk in reversed(chunks):
            parts.add_per_wave(chunk)
        assert parts.finish().to_dicts() == once.to_dicts()


def test_every_stored_trace_in_small_batches_and_two_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    import warmfit.run.tasks as tasks

    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)  # workers even for small traces
    chains: list[list[int]] = []  # per use of the pool, the batches of each replay task
    real_in_pool = tasks.Runner._in_pool

    def in_pool(self: object, function: object, calls: list[Any]) -> object:
        if getattr(function, "__name__", "") == "replay_chain":
            chains.append([len(chain) for chain, _, _ in calls])
        return real_in_pool(self, function, calls)  # type: ignore[arg-type]

    monkeypatch.setattr(tasks.Runner, "_in_pool", in_pool)
    expected = replay(read_trace(TRACES, columns=()), POLICIES, 1.1, "auto", "signature", 10**11)
    for jobs in (1, 2):
        got, rows = _streamed(
            TRACES, policies=POLICIES, by="signature", budget_bytes=10**11, jobs=jobs,
            batch_readings=40,
        )  # fmt: skip
        assert got.batches > 4  # type: ignore[attr-defined]
        assert got.jobs == jobs  # type: ignore[attr-defined]
        if jobs == 2:  # with per-wave rows, one batch a task
            assert chains.pop() == [1] * got.batches  # type: ignore[attr-defined]
        assert render(got, "json") == render(expected, "json")  # type: ignore[arg-type]
        assert rows.to_dicts() == expected.per_wave.to_dicts()
        # without per-wave rows, workers replay tasks of consecutive batches
        summary_only = replay_stream(
            TRACES, POLICIES, by="signature", budget_bytes=10**11, jobs=jobs, batch_readings=40
        )
        assert chain_sizes(summary_only.batches, 2) == [2, 2, 1, 1, 1]
        assert render(summary_only, "json") == render(expected, "json")  # type: ignore[arg-type]


def test_a_batch_holds_whole_streams_in_canonical_order(tmp_path: Path) -> None:
    """Streams are never split; a batch closes once it reaches the size asked for."""
    rows = [
        dict(run=run, rank=rank, seq=s, wave=s, signature="s", packed_tokens=4,
             logical_tokens=4, peak_bytes=100)
        for run, rank, n in (("b", 0, 5), ("a", 1, 3), ("a", 0, 2))
        for s in range(n)
    ]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    index = index_file(tmp_path / "t.parquet")
    assert [s[:2] for s in index.stretches] == [("b", 0), ("a", 1), ("a", 0)]
    batches = plan([index], batch_readings=4)
    assert [b.streams for b in batches] == [(("a", 0), ("a", 1)), (("b", 0),)]
    assert [b.readings for b in batches] == [5, 5]
    # a batch that reaches the size exactly closes there
    assert [b.streams for b in plan([index], batch_readings=5)] == [
        (("a", 0), ("a", 1)),
        (("b", 0),),
    ]
    first = read_batch(batches[0])
    assert first.select("run", "rank", "seq").rows() == [
        ("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("a", 1, 1), ("a", 1, 2)
    ]  # fmt: skip


def test_a_broken_rule_is_named_by_its_row_in_the_file(tmp_path: Path) -> None:
    """The bad reading is in the second of two batches, in the middle of the file."""
    rows = [
        dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=4, logical_tokens=4,
             peak_bytes=-5 if (rank, s) == (1, 2) else 100)
        for rank in (0, 1) for s in range(4)
    ]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    with pytest.raises(TraceError) as caught:
        replay_stream([tmp_path], batch_readings=4)
    assert caught.value.path == str(tmp_path / "t.parquet")
    assert caught.value.column == "peak_bytes"
    assert caught.value.row == 6


def test_a_duplicated_seq_across_files_is_found_in_a_batch(tmp_path: Path) -> None:
    row = dict(seq=3, wave=0, signature="s", packed_tokens=4, logical_tokens=4, peak_bytes=100)
    write_trace(readings_frame([row]), tmp_path / "a.parquet")
    write_trace(readings_frame([row]), tmp_path / "b.parquet")
    with pytest.raises(TraceError, match="seq 3 appears more than once"):
        replay_stream([tmp_path])


def test_a_small_trace_replays_here_a_large_one_in_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import warmfit.run.tasks as tasks

    pooled: list[int] = []  # the calls given to worker processes, per use of the pool
    real_in_pool = tasks.Runner._in_pool

    def in_pool(self: object, function: object, calls: list[object]) -> object:
        pooled.append(len(calls))
        return real_in_pool(self, function, calls)  # type: ignore[arg-type]

    monkeypatch.setattr(tasks.Runner, "_in_pool", in_pool)
    small = replay_stream(TRACES, jobs=2, batch_readings=40)
    assert small.batches > 1 and small.jobs == 1  # starting workers would cost more
    assert pooled == []  # nor are they asked anything (no cluster: no readable check)
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 1)
    large = replay_stream(TRACES, jobs=2, batch_readings=40)
    assert large.jobs == 2
    # the workers index the files first (a task a file), then replay the batches
    assert pooled[0] == len(large.files) and len(pooled) == 2, pooled
    # a large trace of one batch: the workers index its files, the batch replays here
    one = replay_stream(TRACES, jobs=2, batch_readings=10**9)
    assert (one.batches, one.jobs, pooled[2:]) == (1, 1, [len(large.files)])
    assert large.summary.equals(small.summary)
    # without jobs, even a large trace replays here (jobs=1 is the default)
    assert replay_stream(TRACES, batch_readings=40).jobs == 1


def test_bad_options_are_usage_errors(tmp_path: Path) -> None:
    for options in ({"jobs": 0}, {"batch_readings": 0}, {"by": "rank"}, {"budget_bytes": -1}):
        with pytest.raises(UsageError):
            replay_stream(["traces/pr991"], **options)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- command line


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("_TYPER_FORCE_DISABLE_TERMINAL", "1")
    return CliRunner()


def _small_batches_in_workers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the command cut the stored traces into batches of 40 readings and replay
    them in worker processes; the list gets the number of tasks of each call to the
    pool (the files to index, then the batches)."""
    import warmfit.replay.stream as stream
    import warmfit.run.tasks as tasks

    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)
    real_plan, real_in_pool = stream.plan, tasks.Runner._in_pool
    monkeypatch.setattr(stream, "plan", lambda indexes, batch_readings: real_plan(indexes, 40))
    pooled: list[int] = []

    def in_pool(self: object, function: object, calls: list[object]) -> object:
        pooled.append(len(calls))
        return real_in_pool(self, function, calls)  # type: ignore[arg-type]

    monkeypatch.setattr(tasks.Runner, "_in_pool", in_pool)
    return pooled


def test_jobs_do_not_change_the_output(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """-j 2: the command starts the workers first (warmfit.run.workers.prestart), they
    index the files, then replay the batches; the output is -j 1's."""
    import warmfit.replay.stream as stream

    pooled = _small_batches_in_workers(monkeypatch)
    taken: list[object] = []
    real_take = stream.take_early_pool
    monkeypatch.setattr(
        stream, "take_early_pool", lambda *a: taken.append(real_take(*a)) or taken[-1]
    )
    outputs = []
    for jobs in ("1", "2"):
        result = runner.invoke(app, ["replay", *TRACES, "-j", jobs, "-f", "json", "--by",
                                     "signature"])  # fmt: skip
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    # -j 2 indexed the files in the workers prestart started, then ran the batches there
    assert len(taken) == 1 and taken[0] is not None
    assert len(taken[0].index) == len(find_trace_files(TRACES))  # type: ignore[attr-defined]
    assert len(pooled) == 1 and pooled[0] > 4
    expected = replay(read_trace(TRACES, columns=()), by="signature")
    assert outputs == [render(expected, "json")] * 2


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("error::ResourceWarning")
def test_a_replay_failing_in_a_later_batch_leaves_no_per_wave_file(
    runner: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The first batches are written to the temporary file; the error in a later one
    removes it, and the unfinished Parquet writer says nothing on the way out."""
    import gc

    _small_batches_in_workers(monkeypatch)
    _negative_peak_at(tmp_path / "trace" / "t.parquet", 4, 30, (3, 1))
    out = tmp_path / "out" / "w.parquet"
    result = runner.invoke(
        app, ["replay", str(tmp_path / "trace"), "--per-wave", str(out), "-j", "1"]
    )
    code, err = result.exit_code, result.stderr
    del result  # its traceback holds the writer: let it go now, inside this test
    gc.collect()
    assert code == 2
    assert "row 91" in err and "peak_bytes" in err
    assert not out.exists() and not list(out.parent.glob("*"))
    assert "Exception ignored" not in capfd.readouterr().err


def test_per_wave_parts_encoded_by_workers_make_the_same_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With a PerWaveWriter, each batch's rows are encoded where they are replayed
    and joined here: the file is the same, byte for byte, with one job or two."""
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)  # workers even for small traces
    expected = replay(read_trace(TRACES, columns=()), POLICIES, 1.1, "auto", "run", 10**11)
    files = {}
    for jobs, fmt in [(1, "parquet"), (2, "parquet"), (1, "csv"), (2, "csv")]:
        sink = io.BytesIO()
        writer = PerWaveWriter(sink, fmt, admitted=True)
        got = replay_stream(
            TRACES, POLICIES, budget_bytes=10**11, jobs=jobs, batch_readings=40, per_wave=writer
        )
        writer.close()
        assert (got.batches > 4, got.jobs) == (True, jobs)
        assert got.per_wave_rows == expected.per_wave.height
        files[jobs, fmt] = sink.getvalue()
    assert files[1, "parquet"] == files[2, "parquet"]
    assert files[1, "csv"] == files[2, "csv"] == expected.per_wave.write_csv().encode()
    rows = pl.read_parquet(io.BytesIO(files[2, "parquet"]))
    assert rows.to_dicts() == expected.per_wave.to_dicts()
    path = tmp_path / "w.parquet"
    path.write_bytes(files[2, "parquet"])
    assert verify(path) is None


def test_a_malformed_cluster_address_is_a_clear_error(runner: CliRunner) -> None:
    pytest.importorskip("distributed")
    result = runner.invoke(app, ["replay", "traces/pr991", "--cluster", "no address at all"])
    assert result.exit_code == 2
    assert "cannot reach the Dask scheduler" in result.stderr


def test_per_wave_is_written_in_the_format_its_suffix_names(
    runner: CliRunner, tmp_path: Path
) -> None:
    expected = replay(read_trace(["traces/pr991"], columns=())).per_wave
    for name in ("w.csv", "w.parquet", "W.CSV"):
        result = runner.invoke(app, ["replay", "traces/pr991", "--per-wave", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    assert (tmp_path / "w.csv").read_text() == expected.write_csv()
    assert pl.read_csv(tmp_path / "W.CSV", schema=expected.schema).equals(expected)
    assert pl.read_parquet(tmp_path / "w.parquet").equals(expected)

    metadata = pq.read_schema(tmp_path / "w.parquet").metadata
    assert metadata[PER_WAVE_KEY.encode()] == b"1"


def test_an_unknown_per_wave_suffix_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["replay", "traces/pr991", "--per-wave", str(tmp_path / "w.txt")])
    assert result.exit_code == 2
    assert "'.txt'" in result.stderr and ".parquet or .csv" in result.stderr
    assert not os.listdir(tmp_path)


def test_a_failed_replay_leaves_no_per_wave_file(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    out = tmp_path / "out" / "w.csv"
    out.parent.mkdir()
    result = runner.invoke(app, ["replay", str(bad), "--per-wave", str(out)])
    assert result.exit_code == 2
    assert not os.listdir(out.parent)


def test_jobs_must_be_positive(runner: CliRunner) -> None:
    result = runner.invoke(app, ["replay", "traces/pr991", "--jobs", "0"])
    assert result.exit_code == 2
    assert "--jobs must be at least 1" in result.stderr


# --------------------------------------------------------------------------- cluster


def test_a_dask_cluster_gives_the_local_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real Dask scheduler and two worker processes, started and stopped here. A
    cluster's workers see neither this machine's TMPDIR nor its current folder: a trace
    whose streams interleave is not routed through the TMPDIR (each batch reads its rows
    itself), no task names a file there (the medians' runs, a stop flag: the workers send
    their values back, however large; plot's workers their frames), and a relative path
    is made absolute."""
    distributed = pytest.importorskip("distributed")
    expected = replay(read_trace(TRACES, columns=()), POLICIES, by="signature")
    interleaved = _interleaved_trace(tmp_path / "interleaved", monkeypatch)
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        here = tmp_path / "this-machine-only"
        here.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(here))  # this process's, not the workers'
        seen = _cluster_traffic(monkeypatch)
        got = replay_stream(
            [os.path.abspath(t) for t in TRACES], POLICIES, by="signature",
            cluster=cluster.scheduler_address, batch_readings=40, spill_bytes=1,
        )  # fmt: skip
        assert got.batches > 4
        assert got.jobs == cluster.scheduler_address
        assert len(client.scheduler_info()["workers"]) == 2
        assert len(seen) > 2 * got.batches  # the files' indexes, the batches, their results
        assert not [s for s in _strings(seen) if s.startswith(str(here))]
        seen.clear()  # plot's frames come back too: the workers write no file here
        warmfit_ok(
            "plot", *TRACES, "--cluster", cluster.scheduler_address, "-o", tmp_path / "p.png"
        )
        results = [r for r in seen if not isinstance(r, tuple)]
        assert results and not [s for s in _strings(results) if s.startswith(str(here))]
        monkeypatch.chdir(tmp_path)  # the workers' current folder is not this one
        mixed = replay_stream(["interleaved"], cluster=cluster.scheduler_address, batch_readings=40)
        assert (mixed.batches, mixed.routed_rows) == (3, 0)
        assert mixed.summary.equals(replay(read_trace([interleaved])).summary)
    assert render(got, "json") == render(expected, "json")
    assert json.loads(render(got, "json"))["results"]


def _cluster_traffic(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every call :class:`warmfit.run.tasks.Runner` is given to run, and every result it
    gives back, from now on."""
    from warmfit.run.tasks import Runner

    seen: list[object] = []
    run = Runner.run

    def spy(self: Runner, function: Any, calls: list[tuple[Any, ...]]) -> Iterator[Any]:
        seen.extend(calls)
        for result in run(self, function, calls):
            seen.append(result)
            yield result

    monkeypatch.setattr(Runner, "run", spy)
    return seen


def _strings(value: object) -> Iterator[str]:
    """The strings in ``value``, through tuples, lists and dataclasses."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _strings(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from _strings(getattr(value, item.name))


def test_an_unreachable_cluster_is_a_clear_error(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens at the address: Dask's client retries for its whole deadline
    (10 s, times the patience: 1 s here) before the one line."""
    pytest.importorskip("distributed")
    monkeypatch.setenv("WARMFIT_WORKER_PATIENCE", "0.1")
    result = runner.invoke(app, ["replay", "traces/pr991", "--cluster", "tcp://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "cannot reach the Dask scheduler" in result.stderr


@settings(max_examples=examples(60))
@given(trace_parts(max_waves=20))
def test_the_engines_reading_counts_are_the_traces(parts: list[pl.DataFrame]) -> None:
    """The vectorized batch counts readings per profile itself; summed per run and
    signature they are warmfit.format.trace.reading_counts, so the no-whole warning is the same."""
    from warmfit.format.trace import reading_counts
    from warmfit.replay.engines import resolve_policies
    from warmfit.replay.vectorized import price_waves

    frame = pl.concat(parts).sort("run", "rank", "seq")
    priced = price_waves(frame, resolve_policies(None), 1.1)
    assert priced is not None
    if frame.height == 0:
        return
    assert priced.counts is not None
    keys = ["run", "signature"]
    got = priced.counts.group_by(keys).sum().sort(keys)
    assert got.to_dicts() == reading_counts(frame).sort(keys).select(got.columns).to_dicts()


# --------------------------------------------------------------------------- faults, caused


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_full_temporary_disk_for_the_medians_is_exit_2_and_leaves_nothing(
    tmp_path: Path, jobs: int
) -> None:
    """The medians' sorted runs hit a file-size limit (as a full disk would): a clear
    error naming the folder, no traceback, and the folder warmfit made is gone. With
    2 jobs the workers write the runs (and hit the limit) themselves."""
    import subprocess
    import sys

    spill = tmp_path / "tmp"
    spill.mkdir()
    (spill / "not-ours.txt").write_text("a user's file")
    limit = 64  # every run is a file of its own, the parent's as the workers'
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
        "from warmfit.errors import UsageError\n"
        "from warmfit.replay.stream import replay_stream\n"
        "import warmfit.run.workers\n"
        "warmfit.run.workers.WORKER_BYTES = 0  # workers for a small trace\n"
        "try:\n"
        f"    replay_stream(sys.argv[1:], batch_readings=20, spill_bytes=64, jobs={jobs})\n"
        "except UsageError as exc:\n"
        "    print(exc); sys.exit(2)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *TRACES], capture_output=True, text=True,
        env={**os.environ, "TMPDIR": str(spill)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "cannot write the exact medians' temporary files" in done.stdout
    assert str(spill) in done.stdout
    assert sorted(p.name for p in spill.iterdir()) == ["not-ours.txt"]  # ours gone, theirs kept


def test_a_worker_that_dies_is_exit_2_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed (as the kernel kills one out of memory) breaks the pool: the
    replay says so and what to do."""
    (tmp_path / "killer_policy.py").write_text(
        "import os, signal\n"
        "from warmfit.policies.rule import RATE, DeclaredPolicy, Max\n"
        f"PARENT = {os.getpid()}\n"
        "class Killer(DeclaredPolicy):\n"
        "    name = 'killer'\n"
        "    summary = 'SIGKILLs any worker process that prices with it'\n"
        "    rate = Max(RATE)\n"
        "    @staticmethod\n"
        "    def rule(state, n, m):\n"
        "        if os.getpid() != PARENT:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "        return state.rate * n\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)
    with pytest.raises(UsageError, match="a worker process died while replaying"):
        replay_stream(TRACES, ["killer_policy:Killer"], jobs=2, batch_readings=40)


def test_a_failed_batch_stops_the_workers_after_the_batch_they_are_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch breaks a rule while the other worker is on the first batch of a
    task of several. The replay tells the workers to stop (a flag file in the medians'
    folder): each ends after the batch it is on, so no batch but the first of a task is
    priced, and the replay is exit 2. The workers are not killed: one killed while
    sending its results would leave the pool waiting forever.

    No clock: a worker prices a batch only once the flag is there (the first file in
    the medians' folders, where workers write only after pricing), so the batches
    priced are those the workers were on when the replay failed, whatever the load."""
    log = tmp_path / "priced.txt"
    flag = tmp_path / "tmp" / "warmfit-medians-*" / "*"
    (tmp_path / "waiting_policy.py").write_text(
        "import glob, os, time\n"
        "import numpy as np\n"
        "from warmfit.policies.rule import RATE, DeclaredPolicy, Max\n"
        f"PARENT, FLAG, LOG = {os.getpid()}, {str(flag)!r}, {str(log)!r}\n"
        "GAVE_UP = []  # a bound on a hang only: the flag comes when the parent reads the failure\n"
        "class Waiting(DeclaredPolicy):\n"
        "    name = 'waiting'\n"
        "    summary = 'in a worker, prices a batch once the replay told its workers to stop'\n"
        "    rate = Max(RATE)\n"
        "    @staticmethod\n"
        "    def rule(state, n, m):\n"
        "        if os.getpid() != PARENT:\n"
        "            deadline = time.monotonic() + 60\n"
        "            while not (GAVE_UP or glob.glob(FLAG)):\n"
        "                if time.monotonic() > deadline:\n"
        "                    GAVE_UP.append(True)\n"
        "                time.sleep(0.01)\n"
        "            with open(LOG, 'a') as out:  # the batch's rank, and whether it was told\n"
        "                out.write(f'{int(np.max(n)) - 1000} {not GAVE_UP}\\n')\n"
        "        return state.rate * n\n"
    )
    ranks, readings = 10, 8
    rows = [
        dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=1000 + rank,
             logical_tokens=1000 + rank, peak_bytes=-5 if (rank, s) == (0, 2) else 100)
        for rank in range(ranks) for s in range(readings)
    ]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "trace" / "t.parquet")
    assert len(plan([index_file(tmp_path / "trace" / "t.parquet")], readings)) == ranks
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # TMPDIR is read again
    try:
        with pytest.raises(TraceError, match="is negative") as caught:
            replay_stream(
                [tmp_path / "trace"], ["waiting_policy:Waiting"], jobs=2, batch_readings=readings
            )
    finally:
        tempfile.tempdir = None
    assert caught.value.row == 2
    # batch i holds rank i; tasks hold consecutive batches: the first of each task
    sizes = chain_sizes(ranks, 2)
    assert max(sizes) > 1  # some task holds batches that must not be priced
    firsts = {sum(sizes[:i]) for i in range(len(sizes))}
    priced = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert priced, "no worker was on a batch when the replay failed"
    assert {told for _, told in priced} == {"True"}, "the workers were never told to stop"
    assert {int(rank) for rank, _ in priced} <= firsts - {0}
    # the medians' folder, flag and all, is removed (multiprocessing's own stays)
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("warmfit")] == []


@pytest.mark.parametrize("by", GROUPINGS)
def test_workers_write_the_medians_runs_and_the_figures_hold(
    by: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Workers write each batch's median values to the fold's folder (the parent
    takes the file as a run, or reads it back when its cells come out of order):
    the figures are those of the whole-trace replay."""
    import warmfit.replay.summary as summary

    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)
    taken: list[str] = []
    read_back: list[str] = []
    real_add_run, real_read_run = summary.ExactMedians.add_run, summary.read_run

    def add_run(self: object, run: summary.SpilledRun) -> None:
        taken.append(run.path)
        real_add_run(self, run)  # type: ignore[arg-type]

    def read_run(run: summary.SpilledRun) -> summary.SortedValues:
        read_back.append(run.path)
        return real_read_run(run)

    monkeypatch.setattr(summary.ExactMedians, "add_run", add_run)
    monkeypatch.setattr(summary, "read_run", read_run)
    # rank 1's signatures come "a" first, after rank 0 made "b" the first one seen
    rows = [
        dict(rank=rank, seq=s, wave=s, signature=sig, packed_tokens=4 + s, logical_tokens=20,
             peak_bytes=100 + 7 * s * (rank + 1), whole=True)
        for rank, sigs in ((0, "bb"), (1, "ab")) for s, sig in enumerate(sigs * 6)
    ]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    for traces in (TRACES, [tmp_path]):
        result = replay_stream(traces, by=by, jobs=2, batch_readings=12, spill_bytes=64)
        expected = replay(read_trace(traces, columns=()), by=by)
        assert result.summary.equals(expected.summary)
    assert len(taken) > 10
    # by signature, the second batch's cells come out of order: its run is read back
    assert bool(read_back) == (by == "signature")


# --------------------------------------------------------------------------- 10: engine fallback


def test_the_streamed_replay_reports_the_scalar_engine_after_a_fallback(tmp_path: Path) -> None:
    """Survivor 10 (stranger-stream-reports-vectorized): a batch with a value of
    2**53 bytes or more replays on the reference engine (doubles are exact below
    2**53 only), and the streamed replay, as the command runs it, says so.

    Rank 0 (2 waves of 400 B) is one batch, vectorized; rank 1, whose first
    wave peaks at 2**53 B, is the second and falls back: the replay ran
    ``scalar``. Its figures are the scalar engine's, in the command too.
    """
    rows = [whole_wave(0, 400, 4), whole_wave(1, 400, 4)]
    rows += [whole_wave(0, 2**53, 4, rank=1), whole_wave(1, 2**53, 4, rank=1)]
    folder = write_waves(tmp_path / "both", rows)
    small = write_waves(tmp_path / "small", rows[:2])
    assert replay_stream([small]).engine == "vectorized"
    for batch_readings in (1, 100):  # two batches, the second falls back; one batch
        streamed = replay_stream([folder], batch_readings=batch_readings)
        assert streamed.batches == (2 if batch_readings == 1 else 1)
        assert streamed.engine == "scalar"
    assert replay(read_trace([folder])).engine == "scalar"
    scalar = warmfit_ok("replay", folder, "-f", "json", "--engine", "scalar").stdout
    assert warmfit_ok("replay", folder, "-f", "json", "--engine", "vectorized").stdout == scalar
    # each rank's wave 1 is priced int(peak * 1.1) for its peak: +10%
    assert json.loads(scalar)["results"][0]["max_over_estimate"] == pytest.approx(0.1)


# --------------------------------------------------------------------------- 11: no-whole warning


def _no_whole_trace(folder: Path) -> Path:
    """Four streams, four batches of two readings: run A signature cold has no whole
    reading (first batch only); run B signature late has none on rank 0 (second
    batch) and whole ones on rank 1 (third); run C (last batch) has whole ones."""
    not_whole: dict[str, Any] = {"whole": False}
    rows = [
        whole_wave(0, 400, run="A", signature="cold", **not_whole),
        whole_wave(1, 400, run="A", signature="cold", **not_whole),
        whole_wave(0, 400, run="B", signature="late", **not_whole),
        whole_wave(1, 400, run="B", signature="late", **not_whole),
        whole_wave(0, 400, run="B", signature="late", rank=1),
        whole_wave(1, 400, run="B", signature="late", rank=1),
        whole_wave(0, 400, run="C", signature="ok"),
        whole_wave(1, 400, run="C", signature="ok"),
    ]
    return write_waves(folder, rows)


def test_the_no_whole_warning_counts_every_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Survivor 11 (stranger-no-whole-last-batch-only): the pairs without a whole
    reading are counted over every batch of the trace: (A, cold), whose readings
    are all in the first of four batches, is named; (B, late), whose whole
    readings come only in a later batch than its others, is not."""
    folder = _no_whole_trace(tmp_path)
    for engine in ("scalar", "vectorized"):
        streamed = replay_stream([folder], engine=engine, batch_readings=2)
        assert streamed.batches == 4
        assert streamed.without_whole.rows() == [("A", "cold")]
    import warmfit.replay.stream as stream

    real_plan = stream.plan
    monkeypatch.setattr(stream, "plan", lambda indexes, batch_readings: real_plan(indexes, 2))
    warned = warmfit_ok("replay", folder).stderr
    assert "no whole reading in run 'A' signature 'cold'" in warned
    assert "late" not in warned


# --------------------------------------------------------------------------- folds (issue 37)


@dataclass(frozen=True)
class _SeenFold:
    """A :class:`~warmfit.replay.stream.Fold` that keeps, per batch, what its part was given:
    the readings, the per-wave rows (or None), the profiles' keys (or None), the lineup."""

    wants_rows: bool = False
    wants_profiles: bool = False
    #: One entry a replay whose accumulator was closed (it is a context manager).
    closed: list[str] = field(default_factory=list)

    def part(
        self, readings: pl.DataFrame, priced: Any, profiles: Any, lineup: Lineup
    ) -> tuple[int, int | None, list[Any] | None, Lineup]:
        rows = None if priced.per_wave is None else priced.per_wave.height
        return readings.height, rows, None if profiles is None else sorted(profiles), lineup

    def start(self, policies: Sequence[str]) -> _SeenParts:
        return _SeenParts(tuple(policies), self.closed)


class _SeenParts(contextlib.AbstractContextManager["_SeenParts"]):
    def __init__(self, policies: tuple[str, ...], closed: list[str]) -> None:
        self.policies = policies
        self.parts: list[Any] = []
        self.closed = closed

    def __exit__(self, *exc: object) -> None:
        self.closed.append("closed")

    def add(self, part: Any) -> None:
        self.parts.append(part)

    def finish(self, summary: pl.DataFrame) -> tuple[tuple[str, ...], list[Any]]:
        return self.policies, self.parts


def test_each_fold_is_given_what_it_wants_and_nothing_more(tmp_path: Path) -> None:
    """Two batches (rank 0: 3 waves of s; rank 1: 2 waves, s then z), two policies. A
    replay whose fold wants neither rows nor profiles makes neither (None for both);
    one that wants profiles gets each batch's, as (run, rank, signature, policy); one
    that wants rows gets each batch's (waves x 2 policies), and none is counted as a
    per-wave row written. Each sees the lineup and, at the start, the reported names."""
    rows = [whole_wave(w, 1_000 * (w + 1)) for w in range(3)]
    rows += [whole_wave(0, 500, rank=1), whole_wave(1, 700, rank=1, signature="z")]
    folder = write_waves(tmp_path, rows)
    lineup = Lineup((MaxMerge, WarmFit), 1.5, "vectorized", "run", False)
    keys = [("run", 0, "s", "max-merge"), ("run", 0, "s", "warm-fit")]
    more = [("run", 1, "s", "max-merge"), ("run", 1, "s", "warm-fit"),
            ("run", 1, "z", "max-merge"), ("run", 1, "z", "warm-fit")]  # fmt: skip
    for fold, parts in [
        (_SeenFold(), [(3, None, None, lineup), (2, None, None, lineup)]),
        (_SeenFold(wants_profiles=True), [(3, None, keys, lineup), (2, None, more, lineup)]),
        (_SeenFold(wants_rows=True), [(3, 6, None, lineup), (2, 4, None, lineup)]),
    ]:
        counted: list[tuple[int, int]] = []
        got = replay_stream(
            [folder], ["max-merge", "warm-fit"], 1.5, "vectorized", batch_readings=3,
            folds=[fold], progress=lambda done, total: counted.append((done, total)),  # noqa: B023
        )  # fmt: skip
        assert got.batches == 2
        assert counted == [(0, 2), (1, 2), (2, 2)]  # none done, then each batch
        assert got.folded == ((("max-merge", "warm-fit"), parts),), fold
        assert got.per_wave_rows == 0  # the rows a fold was given are no per-wave output
        assert fold.closed == ["closed"]  # an accumulator that is a context manager is closed


def test_a_small_trace_whose_streams_interleave_is_routed_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runs whose rows alternate in one file of row groups of 20 rows, 40 readings
    each, in batches of 40: the file's rows are decoded once and routed to the batches,
    in this process even with jobs=2 (a small trace starts no worker); the figures are
    the whole trace's."""
    import warmfit.run.tasks as tasks

    pooled: list[int] = []
    monkeypatch.setattr(tasks.Runner, "_in_pool", lambda self, f, calls: pooled.append(0))
    folder = _interleaved_trace(tmp_path, monkeypatch)
    got = replay_stream([folder], jobs=2, batch_readings=40)
    assert (got.batches, got.jobs, pooled) == (3, 1, [])
    assert got.routed_rows > 0
    assert got.summary.equals(replay(read_trace([folder])).summary)


def _interleaved_trace(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs A, B and C of 40 whole waves each, alternating row by row in one file of row
    groups of 20 rows."""
    monkeypatch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 20)
    rows = [
        whole_wave(seq, 100 * (10 + seq % 7) + seq, 10 + seq % 7, run=run)
        for seq in range(40)
        for run in "ABC"
    ]
    folder.mkdir(parents=True, exist_ok=True)
    write_trace(readings_frame(rows), folder / "interleaved.parquet")
    return folder
