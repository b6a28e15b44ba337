"""The prices the trainer itself used (SPEC §8 "Recorded prices", issue 26 item 4).

A trace may carry an optional nullable ``estimate_bytes`` column; replay then
reports one more policy, ``recorded`` (last), whose estimate of a wave is the
first non-null ``estimate_bytes`` of its readings, as recorded: no safety factor
scales it and no floor raises it (spec-notes 24). The recorder writes the
column from ``wave(estimate_bytes=...)`` or from a pricer (``Recorder(pricer=...)``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.command_line import warmfit_stdout
from warmfit.cli import app
from warmfit.errors import TraceError, UsageError
from warmfit.format.trace import is_per_wave_file, read_trace, readings_frame, write_trace
from warmfit.policies import MaxMerge
from warmfit.recorder import Recorder
from warmfit.recorder.recorder import RecorderWarning
from warmfit.replay import replay
from warmfit.replay.permute import order_robustness
from warmfit.replay.stream import replay_stream
from warmfit.report.sweep import safe_factors, sweep
from warmfit.run import workers

ROOT = Path(__file__).resolve().parent.parent
PR991 = ROOT / "traces" / "pr991"


def r(seq: int, wave: int, n: int, peak: int, price: int | None, **more: Any) -> dict[str, Any]:
    """A whole caller reading of a flat wave of signature "s" (``more`` overrides)."""
    row = dict(seq=seq, wave=wave, signature="s", phase="caller", whole=True,
               packed_tokens=n, logical_tokens=n, peak_bytes=peak, estimate_bytes=price)  # fmt: skip
    return {**row, **more}


#: The worked trace, run "R", rank 0, one signature. Wave 0's forward reading has no
#: price and its caller reading 2,500 (the first non-null one counts); wave 1 is the
#: largest yet (beyond the 10 tokens seen) and priced under its 3,000 B (2,900 on its
#: forward reading counts, not 3,100 on its caller reading); wave 2 has
#: no price (unpriced for recorded); wave 3 ran out of memory; wave 4 used nothing
#: (actual 0); wave 5 is priced 1,200 for 1,000. A floor of 9,999 on wave 5 does not
#: raise the recorded price.
WORKED = [
    r(0, 0, 10, 1_000, None, phase="forward", whole=False),
    r(1, 0, 10, 2_000, 2_500),
    r(2, 1, 20, 2_000, 2_900, phase="forward", whole=False),
    r(3, 1, 20, 3_000, 3_100),
    r(4, 2, 15, 1_500, None),
    r(5, 3, 5, 9_999, 800, oom=True, whole=False),
    r(6, 4, 5, 0, 100),
    r(7, 5, 10, 1_000, 1_200, static_floor_bytes=9_999),
]

#: The recorded row of WORKED, by hand: figure waves 0 (+0.25, excess 500),
#: 1 (2900/3000 - 1, excess -100, beyond, under) and 5 (+0.2, excess 200).
RECORDED_ROW = {
    "run": "R",
    "policy": "recorded",
    "priced_waves": 3,
    "median_over_estimate": 1_200 / 1_000 - 1,
    "min_over_estimate": 2_900 / 3_000 - 1,
    "max_over_estimate": 2_500 / 2_000 - 1,
    "under_peak": 1,
    "set_by_profile": 0,
    "set_by_floor": 0,
    "oom_waves": 1,
    "median_excess_bytes": 200,
    "priced_beyond": 1,
    "under_peak_beyond": 1,
}
#: With a budget of 2,600 B: waves 0 and 5 admitted, wave 1 (2,900) refused and did
#: not fit (3,000 > 2,600), nothing admitted that ran out.
BUDGET = 2_600
BUDGET_FIGURES = {"budget_bytes": BUDGET, "admitted": 2, "refused_fit": 0, "admitted_oom": 0}

#: The per-wave rows of recorded: (wave, estimate, set_by, over, under, beyond).
RECORDED_WAVES = [
    (0, 2_500, "recorded", 0.25, False, False),
    (1, 2_900, "recorded", 2_900 / 3_000 - 1, True, True),
    (2, None, None, None, None, None),
    (3, 800, "recorded", 800 / 9_999 - 1, True, False),
    (4, 100, "recorded", None, False, False),
    (5, 1_200, "recorded", 1_200 / 1_000 - 1, False, False),  # 0.19999999999999996
]


def worked_frame() -> pl.DataFrame:
    return readings_frame([{"run": "R", **row} for row in WORKED])


def write_worked(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_trace(worked_frame(), folder / "rank0.parquet")
    return folder


def recorded_rows(per_wave: pl.DataFrame) -> list[tuple[Any, ...]]:
    return (
        per_wave.filter(pl.col("policy") == "recorded")
        .select("wave", "estimate_bytes", "set_by", "over_estimate", "under_peak", "beyond")
        .rows()
    )


# --------------------------------------------------------------------------- replay


@pytest.mark.parametrize("engine", ["scalar", "vectorized"])
@pytest.mark.parametrize("safety", [1.1, 2.0])
def test_the_worked_trace_gives_the_recorded_row_by_hand(
    tmp_path: Path, engine: str, safety: float
) -> None:
    """Every figure of SPEC §3, §7 and §8, at any safety factor (it never scales them)."""
    frame = read_trace([write_worked(tmp_path)])
    got = replay(frame, None, safety, engine, budget_bytes=BUDGET)
    assert got.policies == ("max-merge", "warm-fit", "envelope", "recorded")
    row = got.summary.filter(pl.col("policy") == "recorded").row(0, named=True)
    assert row == {**RECORDED_ROW, **BUDGET_FIGURES}
    assert recorded_rows(got.per_wave) == RECORDED_WAVES
    admitted = got.per_wave.filter(pl.col("policy") == "recorded").get_column("admitted")
    assert admitted.to_list() == [True, False, None, True, True, True]


def test_by_signature_and_alone(tmp_path: Path) -> None:
    """``--by signature`` gives the same row per signature; ``-p recorded`` alone gives it
    alone; the other policies' rows do not change with the column."""
    frame = read_trace([write_worked(tmp_path)])
    by_signature = replay(frame, None, by="signature")
    row = by_signature.summary.filter(pl.col("policy") == "recorded").row(0, named=True)
    assert row == {**RECORDED_ROW, "signature": "s"} and list(row)[:3] == [
        "run", "signature", "policy",
    ]  # fmt: skip
    alone = replay(frame, ["recorded"])
    assert alone.policies == ("recorded",)
    assert alone.summary.row(0, named=True) == RECORDED_ROW
    without = replay(frame.drop("estimate_bytes"), None)
    both = replay(frame, None)
    assert both.summary.filter(pl.col("policy") != "recorded").equals(without.summary)


def test_a_trace_without_the_column_has_no_recorded_row() -> None:
    frame = read_trace([PR991])
    assert "estimate_bytes" not in frame.columns
    result = replay(frame, ["max-merge", "warm-fit", "envelope"])
    assert result.policies == ("max-merge", "warm-fit", "envelope")
    assert "recorded" not in result.summary.get_column("policy").to_list()
    assert "recorded" not in replay_stream([PR991]).policies


def test_naming_recorded_without_the_column_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no such column"):
        replay(read_trace([PR991]), ["warm-fit", "recorded"])
    with pytest.raises(UsageError, match="no such column"):
        replay_stream([PR991], ["recorded"])
    with pytest.raises(UsageError, match="named twice"):
        replay(worked_frame(), ["recorded", "recorded"])


class _NamedRecorded(MaxMerge):
    """A policy of one's own that takes the name the trainer's prices report under."""

    name = "recorded"


def test_a_policy_of_ones_own_may_not_be_named_recorded() -> None:
    # With or without the column: the name is the trainer's prices' (SPEC §8), so the
    # class is refused, not reported as a second "recorded" row (or as the only one).
    for frame in (worked_frame(), read_trace([PR991])):
        with pytest.raises(UsageError, match="may not be named 'recorded'"):
            replay(frame, [_NamedRecorded])
        with pytest.raises(UsageError, match="may not be named 'recorded'"):
            replay(frame, ["max-merge", _NamedRecorded])
    with pytest.raises(UsageError, match="may not be named 'recorded'"):
        replay_stream([PR991], [_NamedRecorded])


def test_a_wave_whose_readings_all_lack_a_price_is_unpriced() -> None:
    frame = worked_frame().with_columns(estimate_bytes=pl.lit(None, pl.Int64))
    got = replay(frame, None)
    row = got.summary.filter(pl.col("policy") == "recorded").row(0, named=True)
    assert (row["priced_waves"], row["median_over_estimate"], row["oom_waves"]) == (0, None, 0)
    recorded = got.per_wave.filter(pl.col("policy") == "recorded")
    assert recorded.get_column("estimate_bytes").null_count() == recorded.height == 6


@pytest.mark.parametrize("batch", [1, 3, 10**6])
def test_the_streamed_replay_gives_the_same_rows_in_any_batches(tmp_path: Path, batch: int) -> None:
    """Files with and without the column (null where a file lacks it), one batch a
    stream or all in one; the rows are those of the replay in memory."""
    write_worked(tmp_path / "t")
    other = worked_frame().with_columns(run=pl.lit("Q")).drop("estimate_bytes")
    write_trace(other, tmp_path / "t" / "other.parquet")
    whole = replay(read_trace([tmp_path / "t"]), None, budget_bytes=BUDGET, by="signature")
    parts: list[pl.DataFrame] = []
    got = replay_stream(
        [tmp_path / "t"], None, budget_bytes=BUDGET, by="signature", batch_readings=batch,
        per_wave=parts.append,
    )  # fmt: skip
    assert got.policies == ("max-merge", "warm-fit", "envelope", "recorded")
    assert got.summary.equals(whole.summary)
    assert pl.concat(parts).equals(whole.per_wave)
    q = got.summary.filter((pl.col("run") == "Q") & (pl.col("policy") == "recorded"))
    assert q.get_column("priced_waves").to_list() == [0]


def test_streams_that_interleave_are_routed_with_their_prices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose streams alternate row by row is decoded once and its rows routed
    to their batches (spec-notes 19): the prices travel with them."""
    monkeypatch.setattr("warmfit.format.writer.ROW_GROUP_ROWS", 100)
    rows = []
    for seq in range(300):  # per stream 150 waves of two readings, a price on the caller
        for run in ("A", "B", "C"):
            n = 10 + (seq // 2 * 7 + ord(run)) % 50
            rows.append(dict(run=run, seq=seq, wave=seq // 2, signature="s", packed_tokens=n,
                             logical_tokens=n, phase=("forward", "caller")[seq % 2],
                             whole=seq % 2 == 1, peak_bytes=100 * n + seq,
                             estimate_bytes=None if seq % 2 == 0 else 105 * n))  # fmt: skip
    frame = readings_frame(rows)  # rows alternate between the three runs
    write_trace(frame, tmp_path / "t" / "interleaved.parquet")
    whole = replay(read_trace([tmp_path / "t"]), None, by="signature")
    parts: list[pl.DataFrame] = []
    got = replay_stream([tmp_path / "t"], None, by="signature", batch_readings=300,
                        per_wave=parts.append)  # fmt: skip
    assert got.routed_rows > 0
    assert got.summary.equals(whole.summary) and pl.concat(parts).equals(whole.per_wave)
    assert whole.summary.filter(pl.col("policy") == "recorded").get_column(
        "priced_waves"
    ).to_list() == [150, 150, 150]


def test_worker_processes_give_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_worked(tmp_path / "t")
    write_trace(worked_frame().with_columns(run=pl.lit("Q")), tmp_path / "t" / "q.parquet")
    whole = replay(read_trace([tmp_path / "t"]), None)
    monkeypatch.setattr(workers, "WORKER_BYTES", 0)
    got = replay_stream([tmp_path / "t"], None, jobs=2, batch_readings=1)
    assert got.jobs == 2
    assert got.summary.equals(whole.summary)


def test_a_dask_cluster_gives_the_same_rows(tmp_path: Path) -> None:
    """The cluster's workers index the files (which say which carry prices) and replay
    the batches: the same summary."""
    distributed = pytest.importorskip("distributed")
    write_worked(tmp_path / "t")
    write_trace(worked_frame().with_columns(run=pl.lit("Q")), tmp_path / "t" / "q.parquet")
    whole = replay(read_trace([tmp_path / "t"]), None, by="signature")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        got = replay_stream(
            [tmp_path / "t"], None, by="signature", cluster=cluster.scheduler_address,
            batch_readings=1,
        )  # fmt: skip
    assert got.jobs == cluster.scheduler_address and got.batches == 2
    assert got.summary.equals(whole.summary)


def test_the_orders_carry_each_waves_price_with_it(tmp_path: Path) -> None:
    """``--permute``: the price travels with its wave, so every order prices the same
    waves the same; only ``beyond`` may change."""
    frame = read_trace([write_worked(tmp_path)])
    orders = order_robustness(frame, None, 1.1, "auto", "run", 4, 7)
    row = orders.filter(pl.col("policy") == "recorded").row(0, named=True)
    assert row["permutations"] == 4
    assert row["median_over_estimate_median"] == RECORDED_ROW["median_over_estimate"]
    assert row["under_peak_mean"] == 1.0 and row["under_peak_worst"] == 1
    scalar = order_robustness(frame, None, 1.1, "scalar", "run", 4, 7)
    assert scalar.equals(orders)


def test_the_sweep_leaves_recorded_out(tmp_path: Path) -> None:
    """No safety factor scales the trainer's prices: nothing to sweep."""
    frame = read_trace([write_worked(tmp_path)])
    assert {row["policy"] for row in sweep(frame).results} == {"max-merge", "warm-fit", "envelope"}
    with pytest.raises(UsageError, match="nothing to sweep"):
        sweep(frame, ["warm-fit", "recorded"])
    assert safe_factors(frame, ["recorded"]) == {}
    assert "recorded" not in safe_factors(frame, ["max-merge", "recorded"])


# --------------------------------------------------------------------------- the format


def test_a_negative_price_is_refused_naming_file_column_and_row(tmp_path: Path) -> None:
    frame = worked_frame().with_columns(
        estimate_bytes=pl.when(pl.col("seq") == 3).then(-5).otherwise(pl.col("estimate_bytes"))
    )
    write_trace(frame, tmp_path / "bad.parquet")
    with pytest.raises(TraceError) as caught:
        read_trace([tmp_path])
    text = str(caught.value)
    assert "bad.parquet" in text and "'estimate_bytes'" in text and "row 3" in text
    result = CliRunner().invoke(app, ["replay", str(tmp_path)])
    assert result.exit_code == 2 and "estimate_bytes" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "array",
    [pa.array(["1"] * 8, pa.string()), pa.array([1.5] * 8, pa.float64())],
    ids=["string", "float"],
)
def test_a_price_column_of_the_wrong_type_is_refused(tmp_path: Path, array: pa.Array) -> None:
    table = pq.read_table(write_worked(tmp_path / "t") / "rank0.parquet")
    at = table.column_names.index("estimate_bytes")
    table = table.set_column(at, "estimate_bytes", array)
    pq.write_table(table, tmp_path / "wrong.parquet")
    with pytest.raises(TraceError, match=r"estimate_bytes.*must be an integer"):
        read_trace([tmp_path / "wrong.parquet"])
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "wrong.parquet")])
    assert result.exit_code == 2


def test_a_price_too_large_for_int64_is_refused(tmp_path: Path) -> None:
    table = pq.read_table(write_worked(tmp_path / "t") / "rank0.parquet")
    at = table.column_names.index("estimate_bytes")
    table = table.set_column(at, "estimate_bytes", pa.array([2**63] * 8, pa.uint64()))
    pq.write_table(table, tmp_path / "huge.parquet")
    with pytest.raises(TraceError, match="does not fit"):
        read_trace([tmp_path / "huge.parquet"])


def test_the_column_and_the_per_wave_marker_coexist(tmp_path: Path) -> None:
    """A trace's ``estimate_bytes`` does not make it a per-wave file (it keeps its reading
    columns), and a per-wave file, which has ``estimate_bytes`` too, is still named as
    one, with or without its metadata."""
    trace = write_worked(tmp_path / "t") / "rank0.parquet"
    assert not is_per_wave_file(pq.read_schema(trace))
    per_wave = tmp_path / "waves.parquet"
    result = CliRunner().invoke(app, ["replay", str(trace), "--per-wave", str(per_wave)])
    assert result.exit_code == 0, result.output
    assert is_per_wave_file(pq.read_schema(per_wave))
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(per_wave).replace_schema_metadata(None), bare)
    for path in (per_wave, bare):
        with pytest.raises(TraceError, match="per-wave file"):
            read_trace([path])


# --------------------------------------------------------------------------- the CLI


def test_the_command_line_reports_the_recorded_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = str(write_worked(tmp_path / "t"))
    doc = json.loads(warmfit_stdout("replay", trace, "--format", "json", "--budget", str(BUDGET)))
    assert doc["results"][-1] == {**RECORDED_ROW, **BUDGET_FIGURES}
    csv = warmfit_stdout("replay", trace, "--format", "csv", "--by", "signature").splitlines()
    assert csv[-1] == (
        "R,s,recorded,3,0.19999999999999996,-0.033333333333333326,0.25,1,0,0,1,200,1,1"
    )
    table = warmfit_stdout("replay", trace, "-p", "recorded")
    assert "recorded" in table and "+20.0%" in table and "1/1" in table
    markdown = warmfit_stdout("replay", trace, "--format", "markdown")
    assert "recorded median (min)" in markdown and "+20% (-3%)" in markdown
    per_wave = tmp_path / "waves.parquet"
    warmfit_stdout("replay", trace, "--per-wave", str(per_wave), "--budget", str(BUDGET))
    assert recorded_rows(pl.read_parquet(per_wave)) == RECORDED_WAVES
    orders = json.loads(warmfit_stdout("replay", trace, "--permute", "3", "--format", "json"))
    assert orders["results"][-1]["permutations"] == 3
    # the same bytes on two worker processes, one batch a stream
    monkeypatch.setattr(workers, "WORKER_BYTES", 0)
    monkeypatch.setenv("WARMFIT_BATCH_READINGS", "1")
    write_trace(worked_frame().with_columns(run=pl.lit("Q")), tmp_path / "t" / "q.parquet")
    one = warmfit_stdout("replay", trace, "--format", "json", "--jobs", "1", "--by", "signature")
    two = warmfit_stdout("replay", trace, "--format", "json", "--jobs", "2", "--by", "signature")
    assert one == two


def test_the_command_line_warns_of_recorded_waves_under_their_peak(tmp_path: Path) -> None:
    trace = str(write_worked(tmp_path / "t"))
    result = CliRunner().invoke(app, ["replay", trace, "-p", "recorded"])
    assert result.exit_code == 0
    assert "warning: recorded put 1 wave under its peak, 1 of them beyond" in result.stderr
    assert "no safety factor scales" in result.stderr


def test_the_command_line_refuses_recorded_without_the_column() -> None:
    result = CliRunner().invoke(app, ["replay", str(PR991), "-p", "recorded"])
    assert result.exit_code == 2
    assert "estimate_bytes" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["sweep", str(PR991), "-p", "recorded"])
    assert result.exit_code == 2 and "nothing to sweep" in result.output


def test_the_gate_checks_recorded_like_any_policy(tmp_path: Path) -> None:
    """``check --write-expect`` lists ``recorded`` where the trace carries prices (its
    waves under their peak refused like any policy's unless --allow-under), and a check
    against the file holds."""
    trace = str(write_worked(tmp_path / "t"))
    expect = tmp_path / "expect.toml"
    refused = CliRunner().invoke(app, ["check", trace, "--write-expect", str(expect)])
    assert refused.exit_code == 2 and "R recorded: 1 wave under its peak" in refused.output
    result = CliRunner().invoke(
        app, ["check", trace, "--write-expect", str(expect), "--allow-under"]
    )
    assert result.exit_code == 0, result.output
    assert "[runs.R.recorded]" in expect.read_text()
    result = CliRunner().invoke(app, ["check", trace, "--expect", str(expect)])
    assert result.exit_code == 0, result.output
    assert "recorded" in result.stdout


# --------------------------------------------------------------------------- the recorder


class ListPricer:
    """A small pricer: 1,000 bytes a packed token, none for a 1-token wave; it keeps
    every question and every reading it is told of."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, ...]] = []
        self.rows: list[dict[str, Any]] = []

    def price(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int,
        *,
        output_bytes: int,
        static_floor_bytes: int | None,
        kind: str,
    ) -> int | None:
        self.asked.append(
            (signature, packed_tokens, logical_tokens, output_bytes, static_floor_bytes, kind)
        )
        return None if packed_tokens == 1 else 1_000 * packed_tokens

    def observe_row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)


def test_the_recorder_writes_the_price_it_is_given(tmp_path: Path) -> None:
    with Recorder(tmp_path, run="r", device="cpu", rank=0) as rec:
        with rec.wave("s", 4, 8, 16, estimate_bytes=5_000) as wave:
            wave.forward_done()
        assert wave.estimate_bytes == 5_000
        with rec.wave("s", 4, 8) as unpriced:
            pass
        assert unpriced.estimate_bytes is None
    frame = read_trace([tmp_path])
    assert frame.select("wave", "phase", "estimate_bytes").rows() == [
        (0, "forward", 5_000), (0, "caller", 5_000), (1, "caller", None),
    ]  # fmt: skip
    assert "recorded" in replay(frame, None).policies


def test_a_recording_without_prices_has_no_column(tmp_path: Path) -> None:
    """No wave priced: no column, so the trace replays as before (no recorded row)."""
    with Recorder(tmp_path, run="r", device="cpu", rank=0) as rec, rec.wave("s", 4, 8) as wave:
        wave.forward_done()
    assert "estimate_bytes" not in pq.read_schema(next(tmp_path.rglob("*.parquet"))).names


def test_the_recorder_asks_its_pricer_and_tells_it_each_reading(tmp_path: Path) -> None:
    pricer = ListPricer()
    with Recorder(tmp_path, run="r", device="cpu", rank=0, pricer=pricer) as rec:
        with rec.wave("s", 1, 1) as first:  # the pricer has no price: None
            first.forward_done()
        with rec.wave("s", 3, 6, 10, static_floor_bytes=7, kind="flat") as second:
            second.forward_done()
        with rec.wave("s", 5, 5, estimate_bytes=42) as given:  # given: not asked
            pass
        rec.step()
    assert (first.estimate_bytes, second.estimate_bytes, given.estimate_bytes) == (None, 3_000, 42)
    assert pricer.asked == [("s", 1, 1, 0, None, "flat"), ("s", 3, 6, 10, 7, "flat")]
    frame = read_trace([tmp_path])
    assert frame.get_column("estimate_bytes").to_list() == [None, None, 3_000, 3_000, 42]
    # each reading as the trace holds it, in order, once it was written
    assert len(pricer.rows) == 5
    # the trace leaves out a column null in every reading (padded_tokens, sum_sq_tokens here)
    names = [c for c in pricer.rows[0] if c in frame.columns]
    assert [{c: r[c] for c in names} for r in pricer.rows] == frame.select(names).to_dicts()
    assert {c for c in pricer.rows[0] if c not in names} == {"padded_tokens", "sum_sq_tokens"}
    assert all(r[c] is None for r in pricer.rows for c in r if c not in names)
    assert list(pricer.rows[0])[:3] == ["run", "rank", "seq"]


def test_a_disabled_recorder_asks_no_pricer() -> None:
    pricer = ListPricer()
    rec = Recorder(None, enabled=False, pricer=pricer)
    with rec.wave("s", 3, 3) as wave:
        wave.forward_done()
    with rec.wave("s", 3, 3, estimate_bytes=9) as given:
        pass
    assert (wave.estimate_bytes, given.estimate_bytes) == (None, 9)
    assert pricer.asked == [] and pricer.rows == []


def test_from_env_passes_the_pricer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pricer = ListPricer()
    monkeypatch.delenv("WARMFIT_RECORD_DIR", raising=False)
    assert Recorder.from_env(pricer=pricer).pricer is pricer
    monkeypatch.setenv("WARMFIT_RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("WARMFIT_RECORD_RUN", "env")
    monkeypatch.setenv("RANK", "0")
    rec = Recorder.from_env(device="cpu", pricer=pricer)
    try:
        with rec.wave("s", 2, 2):
            pass
    finally:
        rec.close()
    assert read_trace([tmp_path]).get_column("estimate_bytes").to_list() == [2_000]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_price_that_cannot_be_recorded_skips_the_wave(tmp_path: Path, enabled: bool) -> None:
    """A negative price: the wave runs unrecorded, one warning, counted (as a negative
    byte size); a float price is a programming error, recording or not."""
    rec = Recorder(tmp_path if enabled else None, run="r", device="cpu", rank=0, enabled=enabled)
    try:
        with (
            pytest.warns(RecorderWarning, match="estimate_bytes=-1 is negative"),
            rec.wave("s", 2, 2, estimate_bytes=-1),
        ):
            pass
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with rec.wave("s", 2, 2, estimate_bytes=-2):  # counted, no second warning
                pass
        assert rec.skipped_waves == 2
        with pytest.raises(UsageError, match="estimate_bytes must be an integer"):
            rec.wave("s", 2, 2, estimate_bytes=1.0)  # type: ignore[arg-type]
    finally:
        rec.close()


def test_a_pricer_price_that_cannot_be_recorded(tmp_path: Path) -> None:
    class Negative(ListPricer):
        def price(self, *args: Any, **kwargs: Any) -> int | None:
            return -7

    class Floating(ListPricer):
        def price(self, *args: Any, **kwargs: Any) -> int | None:
            return 1.5  # type: ignore[return-value]

    with Recorder(tmp_path / "a", run="r", device="cpu", rank=0, pricer=Negative()) as rec:
        with (
            pytest.warns(RecorderWarning, match="the pricer's price -7 is negative"),
            rec.wave("s", 2, 2),
        ):
            pass
        assert rec.skipped_waves == 1
    with (
        Recorder(tmp_path / "b", run="r", device="cpu", rank=0, pricer=Floating()) as rec,
        pytest.raises(UsageError, match=r"Floating\.price\(\) returned 1\.5"),
    ):
        rec.wave("s", 2, 2)


def test_a_recording_priced_by_the_trainers_pricer_replays_as_its_policy(
    tmp_path: Path,
) -> None:
    """End to end: a rank priced by ``warmfit.trainer.Pricer("warm-fit")`` through the
    recorder's hook records, wave for wave, the bytes replay's warm-fit gives."""
    torch = pytest.importorskip("torch")
    pricer_module = pytest.importorskip("warmfit.trainer.pricer")
    model = torch.nn.Linear(32, 32)
    pricer = pricer_module.Pricer("warm-fit", 1.1)
    with Recorder(tmp_path, run="e2e", device="cpu", rank=0, pricer=pricer) as rec:
        for _ in range(3):
            for n in (16, 32, 24, 48, 8):
                with rec.wave("lin", n, n) as wave:
                    out = model(torch.randn(n, 32))
                    wave.forward_done()
                    out.square().sum().backward()
            rec.step()
    per_wave = replay(read_trace([tmp_path]), ["warm-fit"]).per_wave
    ours = per_wave.filter(pl.col("policy") == "warm-fit").get_column("estimate_bytes")
    recorded = per_wave.filter(pl.col("policy") == "recorded").get_column("estimate_bytes")
    assert recorded.to_list() == ours.to_list() and recorded.null_count() == 1
