"""SPEC §8 from the command line: the seen range, order robustness, and the warnings."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.command_line import Invoke
from warmfit.format.trace import readings_frame, write_trace
from warmfit.policies import MaxMerge
from warmfit.replay import replay, replay_scalar

#: One stream, one signature, one whole caller reading per wave: (packed tokens, peak).
#: max-merge learns 1,000 B/token from wave 0 and prices wave 1 (2,000 tokens, beyond
#: 1,000) at 2,000,000 * 1.1 = 2,200,000 against 3,000,000: under its peak, beyond.
#: Wave 2 (1,500 tokens) is within the seen sizes: 1,500 B/token (wave 1's) * 1,500 *
#: 1.1 = 2,475,000 against 1,400,000: over. Wave 3 (3,000 tokens) is beyond 2,000:
#: 1,500 * 3,000 * 1.1 = 4,950,000 against 4,000,000: over.
WAVES = [(1_000, 1_000_000), (2_000, 3_000_000), (1_500, 1_400_000), (3_000, 4_000_000)]


def waves(sizes: list[tuple[int, int]], run: str = "run", **per_wave: list[object]) -> pl.DataFrame:
    """One stream of waves, each one whole caller reading of (packed tokens, peak) in
    signature "s"; ``per_wave`` gives other columns wave by wave (``oom=[...]``)."""
    rows = [
        dict(run=run, seq=i, wave=i, signature="s", packed_tokens=n, logical_tokens=n,
             peak_bytes=peak, whole=True) | {k: v[i] for k, v in per_wave.items()}
        for i, (n, peak) in enumerate(sizes)
    ]  # fmt: skip
    return readings_frame(rows)


def worked(run: str = "run") -> pl.DataFrame:
    return waves(WAVES, run)


def test_beyond_worked_example_on_both_engines() -> None:
    for engine in ("scalar", "vectorized"):
        result = replay(worked(), ["max-merge"], 1.1, engine)
        rows = result.per_wave
        assert rows.get_column("beyond").to_list() == [None, True, False, True], engine
        assert rows.get_column("estimate_bytes").to_list() == [
            None, 2_200_000, 2_475_000, 4_950_000
        ]  # fmt: skip
        figures = result.summary.row(0, named=True)
        assert (figures["priced_beyond"], figures["under_peak_beyond"]) == (2, 1), engine
        assert figures["under_peak"] == 1


def test_beyond_is_false_for_a_wave_priced_by_the_floor_alone() -> None:
    # no reading observed yet: the floor prices the first wave, which is not beyond
    frame = worked().with_columns(static_floor_bytes=pl.lit(10, dtype=pl.Int64))
    rows = replay_scalar(frame, [MaxMerge])
    assert rows.get_column("beyond").to_list() == [False, True, False, True]


def test_beyond_counts_only_what_the_profile_observed() -> None:
    # an out-of-memory reading is never learned from: wave 1 stays beyond 1,000 tokens;
    # wave 3 is the first of another signature
    frame = waves(
        [(1_000, 10), (5_000, 10), (3_000, 10), (9_000, 10)],
        oom=[False, True, False, False],
        whole=[True, False, True, True],
        signature=["s", "s", "s", "t"],
    )
    for engine in ("scalar", "vectorized"):
        result = replay(frame, ["max-merge"], 1.1, engine)
        assert result.per_wave.get_column("beyond").to_list() == [None, True, True, None]
        # the out-of-memory wave is beyond but not a figure wave: only wave 2 counts
        assert result.summary.row(0, named=True)["priced_beyond"] == 1, engine


def test_a_wave_as_large_as_the_largest_seen_is_not_beyond() -> None:
    frame = waves([(2_000, 10), (2_000, 10), (1_000, 10), (2_001, 10)])
    for engine in ("scalar", "vectorized"):
        rows = replay(frame, ["envelope"], 1.1, engine).per_wave
        assert rows.get_column("beyond").to_list() == [None, False, False, True], engine


def test_per_wave_file_and_json_carry_beyond(tmp_path: Path, invoke: Invoke) -> None:
    write_trace(worked(), tmp_path / "t" / "t.parquet")
    out = tmp_path / "rows.parquet"
    code, stdout, err = invoke(
        "replay", str(tmp_path / "t"), "-p", "max-merge", "--per-wave", str(out), "-f", "json"
    )
    assert code == 0, err
    assert pl.read_parquet(out).get_column("beyond").to_list() == [None, True, False, True]
    result = json.loads(stdout)["results"][0]
    assert (result["priced_beyond"], result["under_peak_beyond"]) == (2, 1)


def test_a_policy_under_its_peak_is_named_in_a_warning(tmp_path: Path, invoke: Invoke) -> None:
    write_trace(worked(), tmp_path / "t.parquet")
    code, stdout, err = invoke("replay", str(tmp_path), "-p", "max-merge", "-p", "envelope")
    assert code == 0
    # Both price wave 1 from wave 0 alone, 1,000 B/token * 2,000 (envelope: one size
    # seen, so k = 1): 2,200,000 against 3,000,000. The smallest safe factor: 1.5 exactly.
    assert err.splitlines()[-2:] == [
        f"warning: {policy} put 1 wave under its peak, 1 of them beyond every size its "
        "profile had seen; the smallest safety factor that puts none under on these traces "
        "is 1.5000 (exactly 1.5)."
        for policy in ("max-merge", "envelope")
    ]
    assert "warning" not in stdout


def test_no_warning_when_no_wave_is_under_its_peak(invoke: Invoke) -> None:
    code, _, err = invoke("replay", "traces/pr991")
    assert code == 0 and "warning" not in err


def test_permute_is_reproducible_and_the_same_whatever_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)  # workers even for small traces
    args = ["replay", "traces/art-h200", "-p", "warm-fit", "-p", "envelope", "-f", "json"]
    first = invoke(*args, "--permute", "7", "--seed", "11", "--jobs", "1")
    again = invoke(*args, "--permute", "7", "--seed", "11", "--jobs", "2")
    other = invoke(*args, "--permute", "7", "--seed", "12", "--jobs", "1")
    assert first[0] == again[0] == other[0] == 0
    assert first[1] == again[1]
    assert first[1] != other[1]
    results = json.loads(first[1])["results"]
    assert {r["permutations"] for r in results} == {7}
    assert all(r["under_peak_worst"] >= r["under_peak_mean"] >= 0 for r in results)


@pytest.mark.parametrize("bad", [["--permute", "0"], ["--permute", "7", "--seed", "-1"]])
def test_permute_refuses_bad_values(bad: list[str], invoke: Invoke) -> None:
    code, _, err = invoke("replay", "traces/pr991", *bad)
    assert code == 2
    assert "Traceback" not in err


def test_permute_on_an_empty_trace_and_seed_without_permute(tmp_path: Path, invoke: Invoke) -> None:
    write_trace(worked().head(0), tmp_path / "empty.parquet")
    for fmt in ("table", "markdown", "csv", "json"):
        code, _, err = invoke("replay", str(tmp_path), "--permute", "3", "-f", fmt)
        assert code == 0, (fmt, err)
    code, _, err = invoke("replay", "traces/pr991", "--seed", "5")
    assert code == 2 and "--permute" in err and "Traceback" not in err
    code, _, err = invoke("replay", "traces/pr991", "--permute", "0")
    assert code == 2 and "--permute" in err  # the flag, not the library's argument


def test_the_safe_factor_is_folded_by_the_streamed_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, invoke: Invoke
) -> None:
    """The warning's factor comes from the replay's own fold, batch by batch in the
    workers, never from a second replay of the trace in memory."""
    write_trace(worked("a"), tmp_path / "a.parquet")
    write_trace(
        worked("b").with_columns(peak_bytes=pl.col("peak_bytes") * 2), tmp_path / "b.parquet"
    )
    monkeypatch.setattr("warmfit.run.workers.WORKER_BYTES", 0)  # workers even for small traces

    def no_second_replay(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trace was replayed again for the safe factor")

    monkeypatch.setattr("warmfit.report.sweep.safe_factors", no_second_replay)
    code, _, err = invoke("replay", str(tmp_path), "-p", "max-merge", "--jobs", "2")
    assert code == 0, err
    # run a as WAVES says; run b's peaks doubled: wave 1 at 2,000 B/token * 2,000 =
    # 4,000,000 before the factor against 6,000,000 (1.5 again, beyond); waves 2 and 3 at
    # 3,000 B/token: 4,500,000 against 2,800,000 and 9,000,000 against 8,000,000
    assert "is 1.5000 (exactly 1.5)." in err.splitlines()[-1]
    assert "put 2 waves under their peak, 2 of them beyond" in err


def test_summarize_reads_per_wave_rows_written_before_beyond() -> None:
    from warmfit.replay import result_groups, summarize

    rows = replay(worked(), ["max-merge"]).per_wave.drop("beyond")
    summary = summarize(rows, ["max-merge"], result_groups(worked()))
    assert summary.row(0, named=True)["priced_beyond"] == 0


@pytest.mark.parametrize("trace", ["traces/liger-gpu", "traces/hf-qwen3moe-cpu", "traces/cpu-demo"])
def test_the_folded_safe_factor_is_the_sweeps(trace: str) -> None:
    """The oracle: warmfit.report.sweep replays at 1.0 and searches each wave's factor from the
    per-wave rows; the replay folds it from the waves under their peak at 1.1."""
    from warmfit.format.trace import read_trace
    from warmfit.replay.stream import replay_stream
    from warmfit.report.sweep import safe_factors

    policies = ["max-merge", "warm-fit", "warm-affine", "envelope"]
    folded = replay_stream([trace], policies).safe_factors
    swept = safe_factors(read_trace([trace]), policies)
    assert folded == {p: f for p, f in swept.items() if p in folded}
    assert folded  # every policy puts a wave under its peak on these traces at 1.1
