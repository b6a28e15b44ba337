"""The sixteen planted bugs of issue 31 that survived the whole suite, one test each.

A stranger planted plausible bugs; these survived every test then. Each test
below is named for its survivor (the ``stranger-*`` mutants of
``mutants/mutants.toml`` plant them again) and spells its numbers out, so
that a reader can check them by hand. Where the code a survivor lived in is
gone (the hand-made Parquet join of the per-wave file), the test guards the
same risk in today's code.

Every wave below is a whole caller reading of a flat wave with a zero
baseline, unless it says otherwise; its delta is its peak.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.errors import PolicyError
from warmfit.format import pagecrc
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import MaxMerge, PriceRequest, Reading, WarmAffine
from warmfit.policies.rule import COMPUTE, OUTPUT, RATE, WHOLE, Count, DeclaredPolicy, First, Max
from warmfit.recorder.log import LOG_NAME, LogWriter, read_log, recover_all
from warmfit.replay import replay
from warmfit.replay.stream import replay_stream
from warmfit.report.gate import ExpectationsError, _round_limit, parse_expectations
from warmfit.report.sweep import sweep

# --------------------------------------------------------------------------- helpers


def _wave(wave: int, peak: int, tokens: int = 100, **extra: object) -> dict[str, object]:
    """One reading: by default the whole caller reading of flat wave ``wave`` (seq = wave)."""
    row: dict[str, object] = dict(
        seq=wave, wave=wave, signature="s", packed_tokens=tokens, logical_tokens=tokens,
        peak_bytes=peak, whole=True,
    )  # fmt: skip
    return row | extra


def _trace(folder: Path, rows: list[dict[str, object]], name: str = "t.parquet") -> Path:
    """``rows`` written as a one-file trace in ``folder``; the folder."""
    write_trace(readings_frame(rows), folder / name)
    return folder


def _cli(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def _ok(*args: object) -> Any:
    result = _cli(*args)
    assert result.exit_code == 0, result.output
    return result


def _json(*args: object) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = json.loads(_ok(*args, "--format", "json").stdout)["results"]
    return results


def _column(frame: pl.DataFrame, policy: str, name: str) -> list[Any]:
    return frame.filter(pl.col("policy") == policy).get_column(name).to_list()


# --------------------------------------------------------------------------- 1, 2: summary counts


def test_oom_waves_counts_only_priced_waves(tmp_path: Path) -> None:
    """Survivor 1 (stranger-oom-waves-counts-unpriced): SPEC §3 ``oom_waves`` = priced
    waves with an oom reading.

    Wave 0 (100 tokens, 20,000 B) runs out of memory before any profile exists:
    it is unpriced, and not learned from. Wave 1 (20,000 B) is unpriced too (still
    no profile) and teaches 200 B/token. Wave 2 is priced 22,000 B and runs out
    of memory at 30,000 B. Wave 3 is priced 22,000 B for 20,000 B (+10%).
    ``oom_waves`` is 1 (wave 2), not 2: wave 0 was never priced.
    """
    folder = _trace(tmp_path, [
        _wave(0, 20_000, oom=True), _wave(1, 20_000), _wave(2, 30_000, oom=True),
        _wave(3, 20_000),
    ])  # fmt: skip
    expected = {"oom_waves": 1, "priced_waves": 1, "under_peak": 0}
    for row in _json("replay", folder):
        assert {k: row[k] for k in expected} == expected, row["policy"]
        assert row["median_over_estimate"] == pytest.approx(0.1)
    summary = replay(read_trace([folder])).summary
    assert summary.get_column("oom_waves").to_list() == [1, 1, 1]  # the 3 default policies


def test_set_by_floor_counts_only_figure_waves(tmp_path: Path) -> None:
    """Survivor 2 (stranger-set-by-floor-counts-outside-figures): ``set_by_floor``
    counts the waves of the figures only (priced, no oom, actual > 0).

    Wave 0 (20,000 B) teaches 200 B/token. Waves 1 and 2 carry a floor of
    30,000 B, above the 20,000 B learned: both are set by the floor at
    33,000 B; wave 1 runs out of memory, wave 2 peaks at 0 B (both forward
    readings, so warm-fit has no warm fit). Wave 3, without a floor, is set by
    the profile at 22,000 B. ``set_by_floor`` is 0 (not 2), ``set_by_profile`` 1.
    """
    floor: dict[str, Any] = {"static_floor_bytes": 30_000, "phase": "forward", "whole": False}
    folder = _trace(tmp_path, [
        _wave(0, 20_000), _wave(1, 40_000, oom=True, **floor), _wave(2, 0, **floor),
        _wave(3, 20_000),
    ])  # fmt: skip
    result = replay(read_trace([folder]))
    assert _column(result.per_wave, "max-merge", "set_by") == [None, "floor", "floor", "profile"]
    assert _column(result.per_wave, "max-merge", "estimate_bytes") == [None, 33_000, 33_000, 22_000]
    expected = {"set_by_floor": 0, "set_by_profile": 1, "priced_waves": 1, "oom_waves": 1}
    for row in _json("replay", folder):
        assert {k: row[k] for k in expected} == expected, row["policy"]


# --------------------------------------------------------------------------- 3: budget


def test_a_wave_priced_exactly_at_the_budget_is_admitted_in_the_per_wave_file(
    tmp_path: Path,
) -> None:
    """Survivor 3 (stranger-per-wave-admitted-strict): SPEC §7 admits a wave when
    ``estimate <= budget``, in the summary and in the per-wave file alike.

    Wave 0 (4 tokens, 400 B) teaches 100 B/token. Wave 1 (4 tokens) is priced
    int(400 * 1.1) = 440 B: with ``--budget 440`` it is admitted. Wave 2
    (5 tokens, 500 B) is priced 550 B: refused. Per-wave ``admitted`` is
    [null, true, false] for each policy, and the summary's ``admitted`` is 1.
    """
    folder = _trace(tmp_path / "trace", [_wave(0, 400, 4), _wave(1, 400, 4), _wave(2, 500, 5)])
    out = tmp_path / "waves.parquet"
    rows = _json("replay", folder, "--budget", "440", "--per-wave", out)
    assert [(r["admitted"], r["refused_fit"], r["admitted_oom"]) for r in rows] == [(1, 0, 0)] * 3
    per_wave = pl.read_parquet(out)
    for policy in ("max-merge", "warm-fit"):
        assert _column(per_wave, policy, "estimate_bytes") == [None, 440, 550]
        assert _column(per_wave, policy, "admitted") == [None, True, False]
    result = replay(read_trace([folder]), budget_bytes=440)
    assert _column(result.per_wave, "warm-fit", "admitted") == [None, True, False]
    assert result.summary.get_column("admitted").to_list() == [1, 1, 1]  # 3 default policies


# --------------------------------------------------------------------------- 4, 5: check


def test_write_expect_keeps_an_exact_limit(tmp_path: Path) -> None:
    """Survivor 4 (stranger-round-limit-up-when-exact): a limit already on the
    0.01-point grid is written as it is, not one step up.

    Wave 0 (4 tokens, 400 B) teaches 100 B/token; wave 1 (4 tokens) is priced
    440 B and peaks at exactly 440 B: over-estimate 0.0. The file says
    ``max_median_over_estimate = 0.0``, not 0.0001.
    """
    assert _round_limit(0.0, True) == 0.0
    assert _round_limit(0.25, True) == 0.25
    assert _round_limit(-0.5, True) == -0.5
    assert _round_limit(0.0, False) == 0.0
    folder = _trace(tmp_path / "trace", [_wave(0, 400, 4), _wave(1, 440, 4)])
    expect = tmp_path / "expect.toml"
    _ok("check", folder, "--write-expect", expect)
    tables = tomllib.loads(expect.read_text())["runs"]["run"]
    for policy in ("max-merge", "warm-fit"):
        assert tables[policy]["max_median_over_estimate"] == 0.0
        assert tables[policy]["max_max_over_estimate"] == 0.0
        assert tables[policy]["measured"]["median_over_estimate"] == 0.0
    _ok("check", folder, "--expect", expect)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("max_under_peak = false", "max_under_peak must be a whole number >= 0; got False"),
        ("min_priced_waves = true", "min_priced_waves must be a whole number >= 0; got True"),
    ],
)
def test_a_boolean_is_not_a_count_in_an_expectations_file(
    tmp_path: Path, line: str, words: str
) -> None:
    """Survivor 5 (stranger-expect-count-accepts-bool): TOML's ``false`` is no 0.

    Read as 0, ``max_under_peak = false`` would pass a trace with no wave under
    its peak: a wrong file would pass. It is refused, exit 2, naming the file.
    """
    text = f"version = 1\n[runs.run.warm-fit]\n{line}\n"
    with pytest.raises(ExpectationsError, match=words):
        parse_expectations(text, "e.toml")
    folder = _trace(tmp_path / "trace", [_wave(0, 400, 4), _wave(1, 440, 4)])
    expect = tmp_path / "expect.toml"
    expect.write_text(text)
    result = _cli("check", folder, "--expect", expect, "-p", "warm-fit")
    assert result.exit_code == 2, result.output
    assert str(expect) in result.output and words in " ".join(result.output.split())


# --------------------------------------------------------------------------- 6: warm-affine


def test_warm_affine_prices_a_small_wave_at_the_warm_tokens(tmp_path: Path) -> None:
    """Survivor 6 (stranger-affine-drops-warm-tokens): warm-affine's ``n_eff`` is
    ``max(warm_tokens, n, m / warm_sharing)``, as warm-fit's.

    Seed 100 tokens at 90,000 B; the anchor 150 tokens at 45,000 B (300
    B/token; warm_tokens 150); then 250 tokens at 60,000 B: slope (60,000 -
    45,000) / 100 = 150 B/token. A 50-token wave: n_eff = 150, the line L(150)
    = 45,000 B = warm-fit's 300 * 150 (and max-merge's 900 * 50): priced
    int(45,000 * 1.1) = 49,500 B. Dropping warm_tokens, L(50) = 45,000 - 150 *
    100 = 30,000 B, priced 33,000 B. It peaks at 60,000 B.
    """
    waves = [(100, 90_000), (150, 45_000), (250, 60_000), (50, 60_000)]
    profile = WarmAffine()
    for n, delta in waves[:3]:
        profile.observe(Reading(n, n, delta, whole=True))
    assert profile.price(PriceRequest(50, 50)) == 45_000.0
    folder = _trace(tmp_path, [_wave(i, peak, n) for i, (n, peak) in enumerate(waves)])
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), ["warm-affine"], engine=engine)
        assert result.engine == engine
        assert result.per_wave.get_column("estimate_bytes").to_list() == [
            None, 148_500, 82_500, 49_500,
        ]  # fmt: skip
        assert result.per_wave.get_column("actual_bytes").to_list()[3] == 60_000


# --------------------------------------------------------------------------- 7: sweep


def test_the_safe_factor_ignores_waves_that_ran_out_of_memory(tmp_path: Path) -> None:
    """Survivor 7 (stranger-sweep-counts-oom-waves): SPEC §7's safe factor is over
    the figure waves, which leave out waves that ran out of memory.

    Wave 0 (100 tokens, 10,000 B) teaches 100 B/token. Wave 1 is priced 10,000
    B before the factor and peaks at 10,000 B: it needs f = 1.0. Wave 2 is
    priced 10,000 B too and runs out of memory at 22,500 B: it would need
    2.25, but it is not a figure wave. The safe factor is 1.0, not 2.25.
    """
    folder = _trace(tmp_path, [_wave(0, 10_000), _wave(1, 10_000), _wave(2, 22_500, oom=True)])
    found = sweep(read_trace([folder]), grid=[1.0])
    assert [(r["policy"], r["safe_factor"]) for r in found.results] == [
        ("max-merge", 1.0), ("warm-fit", 1.0), ("envelope", 1.0),
    ]  # fmt: skip
    rows = json.loads(_ok("sweep", folder, "--format", "json").stdout)["results"]
    assert [(r["safe_factor"], r["under_peak_at_1"]) for r in rows] == [(1.0, 0)] * 3


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
    return _trace(folder, [
        _wave(w, 1_000 + 37 * w + 1_000 * rank, 3 + (w * 7) % 11, rank=rank)
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
    _ok("replay", trace, "-p", "warm-fit", "--per-wave", out, "--jobs", jobs)
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


# --------------------------------------------------------------------------- 10: engine fallback


def test_the_streamed_replay_reports_the_scalar_engine_after_a_fallback(tmp_path: Path) -> None:
    """Survivor 10 (stranger-stream-reports-vectorized): a batch with a value of
    2**53 bytes or more replays on the reference engine (doubles are exact below
    2**53 only), and the streamed replay, as the command runs it, says so.

    Rank 0 (2 waves of 400 B) is one batch, vectorized; rank 1, whose first
    wave peaks at 2**53 B, is the second and falls back: the replay ran
    ``scalar``. Its figures are the scalar engine's, in the command too.
    """
    rows = [_wave(0, 400, 4), _wave(1, 400, 4)]
    rows += [_wave(0, 2**53, 4, rank=1), _wave(1, 2**53, 4, rank=1)]
    folder = _trace(tmp_path / "both", rows)
    small = _trace(tmp_path / "small", rows[:2])
    assert replay_stream([small]).engine == "vectorized"
    for batch_readings in (1, 100):  # two batches, the second falls back; one batch
        streamed = replay_stream([folder], batch_readings=batch_readings)
        assert streamed.batches == (2 if batch_readings == 1 else 1)
        assert streamed.engine == "scalar"
    assert replay(read_trace([folder])).engine == "scalar"
    scalar = _ok("replay", folder, "-f", "json", "--engine", "scalar").stdout
    assert _ok("replay", folder, "-f", "json", "--engine", "vectorized").stdout == scalar
    # each rank's wave 1 is priced int(peak * 1.1) for its peak: +10%
    assert json.loads(scalar)["results"][0]["max_over_estimate"] == pytest.approx(0.1)


# --------------------------------------------------------------------------- 11: no-whole warning


def _no_whole_trace(folder: Path) -> Path:
    """Four streams, four batches of two readings: run A signature cold has no whole
    reading (first batch only); run B signature late has none on rank 0 (second
    batch) and whole ones on rank 1 (third); run C (last batch) has whole ones."""
    not_whole: dict[str, Any] = {"whole": False}
    rows = [
        _wave(0, 400, run="A", signature="cold", **not_whole),
        _wave(1, 400, run="A", signature="cold", **not_whole),
        _wave(0, 400, run="B", signature="late", **not_whole),
        _wave(1, 400, run="B", signature="late", **not_whole),
        _wave(0, 400, run="B", signature="late", rank=1),
        _wave(1, 400, run="B", signature="late", rank=1),
        _wave(0, 400, run="C", signature="ok"),
        _wave(1, 400, run="C", signature="ok"),
    ]
    return _trace(folder, rows)


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
    warned = _ok("replay", folder).stderr
    assert "no whole reading in run 'A' signature 'cold'" in warned
    assert "late" not in warned


# --------------------------------------------------------------------------- 12: redeclared aggregate


def test_a_redeclared_aggregate_takes_its_place_in_the_subclass(tmp_path: Path) -> None:
    """Survivor 12 (stranger-redeclared-aggregate-keeps-place): a subclass that
    redeclares a parent's aggregate declares it anew, after the aggregates it
    reads, and both engines fold and price it as declared.

    ``rate_max`` is redeclared to skip the seed (readings up to the first whole
    one). Wave 0 (100 tokens, 30,000 B) is the seed: not learned. Wave 1 (100
    tokens, 20,000 B) is unpriced (nothing learned yet), then teaches 200
    B/token. Wave 2, a forward-only call of 100 tokens at 25,000 B, is priced
    200 * 100 = 20,000 B, int(20,000 * 1.1) = 22,000 B, then teaches 250
    B/token. Wave 3 (200 tokens) is priced 250 * 200 * 1.1 = 55,000 B.
    (Plain max-merge would price them 33,000, 33,000 and 66,000 B.)
    """

    class SeedlessMaxMerge(MaxMerge):
        name = "seedless-max-merge"
        summary = "max-merge that leaves the seed out"
        wholes = Count(WHOLE)
        rate_max = Max(RATE, where=(wholes - WHOLE) >= 1)

    assert [a.name for a in SeedlessMaxMerge.aggregates] == ["sharing_max", "wholes", "rate_max"]
    forward: dict[str, Any] = {"kind": "dp_rank_forward", "phase": "forward", "whole": False}
    folder = _trace(tmp_path, [
        _wave(0, 30_000), _wave(1, 20_000), _wave(2, 25_000, **forward), _wave(3, 50_000, 200),
    ])  # fmt: skip
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), [SeedlessMaxMerge, MaxMerge], engine=engine)
        assert result.engine == engine
        assert _column(result.per_wave, "seedless-max-merge", "estimate_bytes") == [
            None, None, 22_000, 55_000,
        ]  # fmt: skip
        assert _column(result.per_wave, "max-merge", "estimate_bytes") == [
            None, 33_000, 33_000, 66_000,
        ]  # fmt: skip


# --------------------------------------------------------------------------- 13: x / 0


class PerOutputByte(DeclaredPolicy):
    """Compute bytes per output byte, times the packed tokens: a policy whose
    aggregates divide by the outputs, which are 0 on most waves.

    ``ratio`` divides 0 by 0 on a wave with neither compute nor outputs;
    ``spread`` divides NaN (no whole reading yet) by 0. Both are NaN, as numpy
    has them, and a maximum skips NaN, on both engines.
    """

    name = "per-output-byte"
    summary = "compute bytes per output byte (a test policy)"
    first_whole = First(COMPUTE, where=WHOLE)
    ratio = Max(COMPUTE / OUTPUT)
    spread = Max(first_whole / OUTPUT)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return np.fmax(state.ratio, state.spread) * n


def _divisions(folder: Path, then_priced: bool) -> Path:
    """Wave 0 (10 tokens, no outputs, 0 B, forward): 0 / 0 and NaN / 0. Wave 1 (the
    same) is unpriced. Wave 2 (100 B of outputs, 600 B, whole): 500 / 100 = 5 for
    both. Wave 3 (no outputs, 0 B) is priced 5 * 10 = 50 B, int(50 * 1.1) = 55 B;
    its reading divides 500 / 0 = inf into ``spread``, so a wave 4 would be priced
    inf, which no engine may take as bytes."""
    empty: dict[str, Any] = {"phase": "forward", "whole": False}
    rows = [
        _wave(0, 0, 10, **empty), _wave(1, 0, 10, **empty), _wave(2, 600, 10, output_bytes=100),
        _wave(3, 0, 10, **empty),
    ]  # fmt: skip
    if then_priced:
        rows.append(_wave(4, 0, 10, **empty))
    return _trace(folder, rows)


def test_dividing_nan_or_zero_by_zero_is_nan_on_both_engines(tmp_path: Path) -> None:
    """Survivor 13 (stranger-nan-over-zero-is-inf, stranger-zero-over-zero-is-inf):
    IEEE division as numpy does it, on the reference engine too: 0 / 0 and NaN / 0
    are NaN (a maximum skips them), x / 0 is ±inf.

    Priced [unpriced, unpriced, unpriced, 55 B] on both engines. A price that is
    not a finite number is refused naming the policy (docs/reference/policy-api.md),
    on both engines alike: with wave 4 priced inf, exit 2.
    """
    folder = _divisions(tmp_path / "trace", then_priced=False)
    frames = []
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), [PerOutputByte], engine=engine)
        assert result.engine == engine
        assert result.per_wave.get_column("estimate_bytes").to_list() == [None, None, None, 55]
        frames.append(result.per_wave)
    assert frames[0].equals(frames[1])
    infinite = _divisions(tmp_path / "infinite", then_priced=True)
    for engine in ("scalar", "vectorized"):
        with pytest.raises(PolicyError, match="'per-output-byte' priced a wave at inf"):
            replay(read_trace([infinite]), [PerOutputByte], engine=engine)
    result = _cli("replay", infinite, "-p", f"{__name__}:PerOutputByte")
    assert result.exit_code == 2, result.output
    assert "per-output-byte" in result.output and "Traceback" not in result.output


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
    path = _trace(tmp_path, [_wave(w, 400 + w) for w in range(100)]) / "t.parquet"
    assert pq.ParquetFile(path).schema_arrow.names[13] == "peak_bytes"
    _with_integers(path, changes)
    assert pagecrc.row_groups(path) == f"its footer is damaged ({words})"
    result = _cli("validate", tmp_path)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert str(path) in text and words in text and "Traceback" not in text


# --------------------------------------------------------------------------- 15, 16: recover


def _readings(seqs: range, peak: int = 200) -> list[tuple[Any, ...]]:
    """Reading tuples of a log (the v1 columns but run and rank), one wave each."""
    return [
        (s, 0, s, "sig", "flat", "caller", True, 10, 10, 0, 100, peak, None, False) for s in seqs
    ]


def _log(root: Path, batches: list[list[tuple[Any, ...]]]) -> Path:
    path = root / "run=r" / "rank=0" / LOG_NAME
    writer = LogWriter(path, "r", 0, {"warmfit.meter": "test"}, fsync=False)
    for rows in batches:
        writer.append(rows)
    writer.release()
    return path


def _recovered(root: Path) -> tuple[Any, pl.DataFrame | None]:
    result = _cli("recover", root)
    traces = list(root.rglob("*.parquet"))
    return result, (read_trace(traces) if traces else None)


@pytest.mark.parametrize("bad", ["torn", "damaged", "breaks-the-format"])
def test_recover_keeps_every_good_batch_before_a_bad_one(tmp_path: Path, bad: str) -> None:
    """Survivor 15 (stranger-recover-keeps-one-batch-fewer): 3 good batches of 4
    readings, then a bad one — torn (cut off by a kill), damaged (bytes
    overwritten), or valid Arrow whose first reading has a negative peak
    (against the format) — recover keeps exactly the 3 batches, 12 readings,
    and says so."""
    good = [_readings(range(b * 4, b * 4 + 4)) for b in range(3)]
    last = _readings(range(12, 16), peak=-5 if bad == "breaks-the-format" else 200)
    log = _log(tmp_path, [*good, last])
    size = read_log(log).batch_ends[2]  # where the third batch ends
    data = log.read_bytes()
    if bad == "torn":
        log.write_bytes(data[: size + (len(data) - size) // 2])
    elif bad == "damaged":
        log.write_bytes(data[: size + 8] + b"\x5a" * (len(data) - size - 8))
    result, trace = _recovered(tmp_path)
    assert trace is not None and trace.get_column("seq").to_list() == list(range(12))
    assert "kept 12 readings in 3 batches" in " ".join(result.output.split())
    assert result.exit_code == (0 if bad == "torn" else 2), result.output
    assert log.exists() == (bad != "torn")  # a log with damage is kept for a person


def test_a_log_whose_batches_are_out_of_seq_order_is_compacted(tmp_path: Path) -> None:
    """Survivor 16 (stranger-compaction-refuses-out-of-order-log): a log holds
    readings in the order they were flushed, which need not be ``seq`` order
    (docs: the trace is read back and compared with the log, sorted as a trace
    is read). Batches of seq 4..7, then 0..3, then 8..11: recover keeps all 12
    readings, exit 0, and removes the log."""
    log = _log(tmp_path, [_readings(range(4, 8)), _readings(range(4)), _readings(range(8, 12))])
    recovery = recover_all(tmp_path)
    assert recovery.problems == []
    assert [(c.readings, c.batches, c.note) for c in recovery.compactions] == [(12, 3, "complete")]
    assert not log.exists()
    trace = read_trace(list(tmp_path.rglob("*.parquet")))
    assert trace.get_column("seq").to_list() == list(range(12))


def test_recover_names_the_out_of_order_log_kept_in_the_command(tmp_path: Path) -> None:
    """Survivor 16 through the command: exit 0, 12 readings kept in 3 batches."""
    _log(tmp_path, [_readings(range(8, 12)), _readings(range(4)), _readings(range(4, 8))])
    result, trace = _recovered(tmp_path)
    assert result.exit_code == 0, result.output
    assert "kept 12 readings in 3 batches" in result.output
    assert trace is not None and trace.height == 12
