"""``warmfit recommend``: the tokens each policy admits under a budget, beside the measured limit."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.command_line import invoke
from tests.strategies import examples, traces
from warmfit.errors import UsageError
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.replay.admission import SEARCH_CAP_TOKENS, largest_admitted
from warmfit.report.recommend import (
    ABOVE_EVERY_PEAK,
    BELOW_AN_OOM,
    BELOW_EVERY_PEAK,
    FIELDS,
    INTERPOLATED,
    JSON_SCHEMA,
    NO_MEASURED_WAVE,
    MeasuredWaves,
    Recommendation,
    RecommendFold,
    measured_limit,
    measured_waves,
    recommend,
    render_recommendation,
)

REPO = Path(__file__).resolve().parent.parent
ART = REPO / "traces" / "art-h200" / "recompute_memory_final.parquet"
EAGER = "qwen3.8-27b-tp4-eager-core_attn"


def cli(*args: str) -> tuple[int, str, str]:
    """``warmfit recommend ARGS``, 200 columns wide."""
    return invoke("recommend", *args, env={"COLUMNS": "200"})


def row_of(rec: Recommendation, run: str, policy: str) -> dict[str, object]:
    (row,) = [r for r in rec.results if r["run"] == run and r["policy"] == policy]
    return row


# --------------------------------------------------------------------------- by hand


def test_one_row_by_hand_qwen3_8_27b_tp4_eager_max_merge() -> None:
    """Run qwen3.8-27b-tp4-eager-core_attn of traces/art-h200 (rank 0, one signature,
    outputs 0, no floor, baseline 0), policy max-merge, safety factor 1.1.

    Admitted. max-merge keeps the largest rate of any reading: the cold 128-token
    wave's caller peak, 938,049,536 bytes / 128 tokens = 7,328,512 bytes per token
    (every other reading's rate is lower: 22,261,475,840 / 4,096 = 5,434,930, ...),
    and the deepest sharing 24,576 / 20,892 = 1.17634. The trace's own sharing,
    summed logical over summed packed tokens, is 2 × (128 + 4,096 + 8,192 + 16,384
    + 24,576) / 2 × (128 + 4,096 + 6,964 + 13,928 + 20,892) = 106,752 / 92,016 =
    1.16015, below the deepest, so ``max(n, m / sharing) = n`` and the estimate is
    ``int(int(7,328,512 × n) × 1.1)``. Within 100 GB: n <= 100e9 / 1.1 / 7,328,512
    = 12,404.85, so 12,404 (priced 99,993,149,132 bytes; 12,405 is priced
    100,001,210,496). Within 128.8 GB: 128.8e9 / 1.1 / 7,328,512 = 15,977.45, so
    15,977.

    Measured limit at 100 GB: the largest actual bytes at each size are 938,049,536
    (128), 22,261,475,840 (4,096), 38,078,323,200 (6,964), 75,923,593,216 (13,928)
    and 113,769,913,344 (20,892). 100 GB lies between the last two: 13,928 +
    (100,000,000,000 − 75,923,593,216) × 6,964 / (113,769,913,344 − 75,923,593,216)
    = 13,928 + 4,430.24 = 18,358.24, so 18,358; the gap is 18,358 − 12,404 = 5,954
    tokens, 32.4% of the limit. At 128.8 GB every measured wave fits (the largest
    peaks 113.8 GB): not measured, and at least 20,892 − 15,977 = 4,915 tokens unused.
    """
    frame = read_trace([ART])
    # the numbers above, as the trace holds them
    mine = frame.filter(pl.col("run") == EAGER)
    assert mine.get_column("peak_bytes").max() == 113_769_913_344
    rates = (mine.get_column("peak_bytes") / mine.get_column("packed_tokens")).to_list()
    assert max(rates) == 938_049_536 / 128 == 7_328_512
    assert mine.get_column("logical_tokens").sum() == 2 * 106_752  # two readings a wave
    assert mine.get_column("packed_tokens").sum() == 2 * 92_016

    rate, f = 7_328_512, 1.1
    admitted = int(100_000_000_000 / f / rate)
    assert admitted == 12_404
    assert int(int(rate * admitted) * f) <= 100_000_000_000 < int(int(rate * (admitted + 1)) * f)
    limit = 13_928 + (100_000_000_000 - 75_923_593_216) * 6_964 // (
        113_769_913_344 - 75_923_593_216
    )
    assert limit == 18_358

    row = row_of(recommend(frame, 100_000_000_000, ["max-merge"]), EAGER, "max-merge")
    assert row["admitted_tokens"] == admitted
    assert row["estimate_bytes"] == 99_993_149_132 and row["set_by"] == "profile"
    assert row["measured_limit_tokens"] == limit and row["measured"] == INTERPOLATED
    assert row["largest_fitted_tokens"] == 13_928 and row["smallest_unfitted_tokens"] == 20_892
    assert row["gap_tokens"] == limit - admitted == 5_954
    assert row["gap_fraction"] == pytest.approx(5_954 / 18_358)
    assert row["sharing"] == 106_752 / 92_016

    row = row_of(recommend(frame, 128_800_000_000, ["max-merge"]), EAGER, "max-merge")
    assert row["admitted_tokens"] == int(128_800_000_000 / f / rate) == 15_977
    assert row["measured"] == ABOVE_EVERY_PEAK and row["measured_limit_tokens"] is None
    assert row["gap_tokens"] is None and row["gap_at_least_tokens"] == 20_892 - 15_977


def test_the_issue_command_shows_the_tp4_runs() -> None:
    code, out, _ = cli(
        str(ART.parent), "--budget", "128.8GB",
        "-p", "max-merge", "-p", "warm-fit", "-p", "warm-affine", "-p", "envelope",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(EAGER))
    assert "max-merge" in lines[start] and "15,977" in lines[start]
    assert "not measured (all fit, up to 20,892)" in lines[start]
    assert "at least +4,915" in lines[start]
    assert [line.split()[0] for line in lines[start + 1 : start + 4]] == [
        "warm-fit", "warm-affine", "envelope",
    ]  # fmt: skip
    # warm-affine admits 21,479 tokens: more than the 20,892 measured, which all fitted
    assert "21,479" in lines[start + 2] and "beyond every size measured" in lines[start + 2]


# --------------------------------------------------------------------------- formats


def test_every_format_end_to_end() -> None:
    args = (str(ART), "--budget", "100GB", "-p", "max-merge", "-p", "warm-fit")
    code, table, _ = cli(*args)
    assert code == 0
    (line,) = [x for x in table.splitlines() if x.startswith(EAGER)]
    assert line.split()[2:6] == ["max-merge", "12,404", "18,358", "+5,954"]
    assert "budget of 100,000,000,000 bytes" in " ".join(table.split())

    code, markdown, _ = cli(*args, "--format", "markdown")
    assert code == 0
    assert markdown.startswith(
        "| run | signature | policy | admitted | measured limit | gap | note |\n|---|"
    )
    assert f"| {EAGER} | Qwen/Qwen3.8-27B | max-merge | 12,404 | 18,358 | +5,954 (+32.4%) |" in (
        markdown
    )
    # the caption's first letter raised, the rest as written (not "100 gb", "oom")
    assert "\nAdmitted = the most packed tokens" in markdown and "(100 GB;" in markdown
    assert "(an OOM risk)" in markdown

    code, text, _ = cli(*args, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == FIELDS
    (mine,) = [r for r in rows if r["run"] == EAGER and r["policy"] == "max-merge"]
    assert (mine["admitted_tokens"], mine["measured_limit_tokens"], mine["gap_tokens"]) == (
        "12404", "18358", "5954",
    )  # fmt: skip
    assert mine["static_floor_bytes"] == "" and mine["measured"] == INTERPOLATED

    code, text, _ = cli(*args, "--format", "json", "--safety", "1.2")
    assert code == 0
    doc = json.loads(text)
    assert doc["schema"] == JSON_SCHEMA == "warmfit.recommend/1"
    assert doc["budget_bytes"] == 100_000_000_000 and doc["safety_factor"] == 1.2
    (mine_json,) = [r for r in doc["results"] if r["run"] == EAGER and r["policy"] == "max-merge"]
    assert mine_json["admitted_tokens"] == int(100_000_000_000 / 1.2 / 7_328_512)


def test_the_json_fields() -> None:
    code, text, _ = cli(str(ART), "--budget", "100GB", "--format", "json")
    assert code == 0
    doc = json.loads(text)
    assert list(doc) == ["schema", "budget_bytes", "safety_factor", "search_cap_tokens", "results"]
    assert doc["search_cap_tokens"] == SEARCH_CAP_TOKENS == 2**40
    assert {r["policy"] for r in doc["results"]} == {"max-merge", "warm-fit", "envelope"}
    assert len(doc["results"]) == 3 * 11  # one per run, signature and policy (the defaults)
    for result in doc["results"]:
        assert tuple(result) == FIELDS
    assert FIELDS == (
        "run", "signature", "policy", "budget_bytes", "ranks", "sharing", "admitted_tokens",
        "admitted_logical_tokens", "estimate_bytes", "set_by", "rank", "output_bytes",
        "static_floor_bytes", "measured_limit_tokens", "measured", "largest_fitted_tokens",
        "smallest_unfitted_tokens", "gap_tokens", "gap_fraction", "gap_at_least_tokens",
    )  # fmt: skip


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("budget", ["12parsecs", "lots", "-5", ""])
def test_a_bad_budget_is_one_line_and_exit_2(budget: str) -> None:
    code, out, err = cli(str(ART), "--budget", budget)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("warmfit: error: ")
    assert "--budget" in err and "is not a size" in err and "Traceback" not in err


def test_a_missing_budget_and_a_bad_trace_are_exit_2(tmp_path: Path) -> None:
    code, _, err = cli(str(ART))
    assert code == 2 and "--budget" in err
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    code, out, err = cli(str(bad), "--budget", "1GB")
    assert code == 2 and out == "" and "bad.parquet" in err and "Traceback" not in err
    frame = readings_frame(
        [dict(seq=0, wave=0, signature="s", packed_tokens=10, logical_tokens=5, peak_bytes=1)]
    )
    write_trace(frame, tmp_path / "rule.parquet")  # logical below packed: a broken rule
    code, out, err = cli(str(tmp_path / "rule.parquet"), "--budget", "1GB")
    assert code == 2 and "logical_tokens" in err and "row 0" in err


def test_a_bad_safety_factor_names_the_flag() -> None:
    code, _, err = cli(str(ART), "--budget", "1GB", "--safety", "0")
    assert code == 2 and "--safety must be a positive number" in err


# --------------------------------------------------------------------------- synthetic traces


def _trace(waves: list[tuple[int, int]], **extra: object) -> pl.DataFrame:
    """One whole caller reading per ``(packed_tokens, peak_bytes)`` wave, in order."""
    return readings_frame(
        [
            dict(
                seq=i,
                wave=i,
                signature="s",
                packed_tokens=n,
                logical_tokens=n,
                peak_bytes=peak,
                whole=True,
                **extra,
            )
            for i, (n, peak) in enumerate(waves)
        ]
    )


def test_not_measured_when_no_wave_comes_near_the_budget() -> None:
    frame = _trace([(100, 100_000), (200, 200_000)])  # 1,000 bytes a token
    (above,) = recommend(frame, 10**9, ["max-merge"]).results
    assert above["measured"] == ABOVE_EVERY_PEAK and above["measured_limit_tokens"] is None
    assert above["largest_fitted_tokens"] == 200 and above["gap_tokens"] is None
    assert above["admitted_tokens"] == int(10**9 / 1.1 / 1000)  # 909,090
    assert above["gap_at_least_tokens"] is None  # it admits more than every size measured
    (below,) = recommend(frame, 50_000, ["max-merge"]).results
    assert below["measured"] == BELOW_EVERY_PEAK and below["measured_limit_tokens"] is None
    assert below["largest_fitted_tokens"] is None and below["gap_tokens"] is None
    assert below["admitted_tokens"] == 45  # int(int(1000 n) * 1.1) <= 50,000
    out = _table(frame, "50000")
    assert "not measured (none fit)" in out and "45" in out


def _table(frame: pl.DataFrame, budget: str, *args: str) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = write_trace(frame, Path(folder) / "t.parquet")
        code, out, err = cli(str(path), "--budget", budget, *args)
    assert code == 0, err
    return out


def test_a_trace_with_no_profile() -> None:
    """Every reading ran out of memory: no policy learned anything, there is no floor, and
    no wave fitted (SPEC §9: the smallest OOM size, 100, did not fit)."""
    frame = _trace([(100, 100_000), (200, 200_000)], oom=True)
    for row in recommend(frame, 10**9, ["max-merge", "warm-fit", "envelope"]).results:
        assert row["admitted_tokens"] is None and row["estimate_bytes"] is None
        assert row["rank"] is None and row["gap_tokens"] is None
        assert row["measured"] == BELOW_EVERY_PEAK and row["smallest_unfitted_tokens"] == 100
    out = _table(frame, "1GB")
    assert "no profile" in out and "not measured (none fit)" in out
    markdown = _table(frame, "1GB", "-p", "max-merge", "-f", "markdown")
    assert "| run | s | max-merge | no profile | not measured (none fit) | — |  |\n" in markdown


def test_a_floor_alone_admits_any_size_or_none() -> None:
    frame = _trace([(100, 100_000)], oom=True, static_floor_bytes=5_000)
    (row,) = recommend(frame, 5_500, ["max-merge"]).results  # int(5,000 * 1.1) = 5,500
    assert row["admitted_tokens"] == SEARCH_CAP_TOKENS and row["set_by"] == "floor"
    assert "no limit" in _table(frame, "5500", "-p", "max-merge")
    (row,) = recommend(frame, 5_499, ["max-merge"]).results
    assert row["admitted_tokens"] == 0 and row["estimate_bytes"] is None


def test_a_policy_that_admits_more_than_fitted_is_an_oom_risk() -> None:
    """200,000 bytes at 100 tokens, 2,000,000 at 1,000: 2,000 bytes a token. Within
    1,000,000 bytes the waves show 100 + 800,000 × 900 / 1,800,000 = 500 tokens fit;
    max-merge at safety factor 0.5 prices int(2,000 n × 0.5) = 1,000 n and admits 1,000."""
    frame = _trace([(100, 200_000), (1_000, 2_000_000)])
    (row,) = recommend(frame, 1_000_000, ["max-merge"], safety_factor=0.5).results
    assert (row["admitted_tokens"], row["measured_limit_tokens"]) == (1_000, 500)
    assert row["gap_tokens"] == -500 and row["gap_fraction"] == -1.0
    out = _table(frame, "1000000", "-p", "max-merge", "--safety", "0.5")
    assert "-500 (-100.0%)" in out and "OOM risk: admits a size measured not to fit" in out
    (row,) = recommend(frame, 1_000_000, ["max-merge"], safety_factor=0.9).results
    assert (row["admitted_tokens"], row["gap_tokens"]) == (555, -55)  # int(1,800 n) <= 1e6
    out = _table(frame, "1000000", "-p", "max-merge", "--safety", "0.9")
    assert "-55 (-11.0%)" in out and "OOM risk: admits more than fitted" in out
    # at safety factor 1, int(2,000 n) <= 1e6 admits 500: exactly the limit, no risk
    (row,) = recommend(frame, 1_000_000, ["max-merge"], safety_factor=1.0).results
    assert (row["admitted_tokens"], row["gap_tokens"], row["gap_fraction"]) == (500, 0, 0.0)
    out = _table(frame, "1000000", "-p", "max-merge", "--safety", "1")
    assert "+0 (+0.0%)" in out and "OOM risk:" not in out


def test_ranks_combine_to_the_smallest_admitted() -> None:
    """Rank 1 pays 2,000 bytes a token, rank 0 1,000: a wave must fit on both."""
    rows = [
        dict(seq=0, wave=0, rank=rank, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=rate * 100, whole=True)
        for rank, rate in ((0, 1_000), (1, 2_000))
    ]  # fmt: skip
    (row,) = recommend(readings_frame(rows), 1_100_000, ["max-merge"]).results
    assert row["ranks"] == 2 and row["rank"] == 1
    assert row["admitted_tokens"] == 500  # int(int(2,000 n) * 1.1) <= 1,100,000
    # the measured waves of both ranks are pooled: 100 tokens peaked at 200,000 bytes
    assert row["measured"] == ABOVE_EVERY_PEAK and row["largest_fitted_tokens"] == 100


def test_names_from_traces_are_shown_escaped() -> None:
    rows = [
        dict(seq=0, wave=0, run="evil\x1b[31m|[bold]", signature="a|b\n", packed_tokens=10,
             logical_tokens=10, peak_bytes=1_000, whole=True)
    ]  # fmt: skip
    frame = readings_frame(rows)
    table = _table(frame, "1MB")
    assert "evil\\x1b[31m|[bold]" in table and "a|b\\n" in table and "\x1b" not in table
    markdown = _table(frame, "1MB", "--format", "markdown")
    assert "evil\\x1b[31m\\|[bold]" in markdown and "a\\|b\\n" in markdown


# --------------------------------------------------------------------------- properties


@given(threshold=st.integers(-5, 3 * 2**20), cap=st.integers(1, 2**20))
def test_the_search_finds_the_threshold_exactly(threshold: int, cap: int) -> None:
    calls: list[int] = []

    def admits(n: int) -> bool:
        calls.append(n)
        assert 1 <= n <= cap
        return n <= threshold

    assert largest_admitted(admits, cap) == max(0, min(threshold, cap))
    assert len(calls) <= 2 * cap.bit_length() + 2


@settings(max_examples=examples(40))
@given(
    frame=traces(max_waves=8),
    budget=st.integers(0, 2**44)  # any, or of any magnitude (most waves are priced there)
    | st.integers(0, 44).flatmap(lambda e: st.integers(2**e, 2 ** (e + 1))),
    safety=st.sampled_from([0.5, 1.0, 1.1, 1.7]),
)
def test_the_admitted_size_is_priced_within_the_budget_and_the_next_above(
    frame: pl.DataFrame, budget: int, safety: float
) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    policies = ["max-merge", "warm-fit", "warm-affine", "envelope"]
    rec = recommend(readings, budget, policies, safety)
    for row in rec.results:
        n = row["admitted_tokens"]
        profile = rec.profiles[(str(row["run"]), str(row["signature"]), str(row["policy"]))]
        if n is None:
            assert profile is None
            continue
        assert isinstance(n, int) and profile is not None
        if n > 0:
            estimate, _ = profile.estimate(n, safety)
            assert estimate is not None and estimate <= budget
            assert estimate == row["estimate_bytes"]
        if n < SEARCH_CAP_TOKENS:
            above, _ = profile.estimate(n + 1, safety)
            assert above is None or above > budget
        limit = row["measured_limit_tokens"]
        if limit is not None:
            assert row["gap_tokens"] == limit - n


@given(
    points=st.lists(st.tuples(st.integers(1, 10_000), st.integers(0, 10**9)), max_size=8),
    budget=st.integers(0, 10**9),
)
def test_the_measured_limit_lies_between_the_sizes_around_the_budget(
    points: list[tuple[int, int]], budget: int
) -> None:
    limit = measured_limit(points, budget)
    peaks = {n: max(a for m, a in points if m == n) for n, _ in points}
    if limit.tokens is None:
        assert limit.measured in (ABOVE_EVERY_PEAK, BELOW_EVERY_PEAK, NO_MEASURED_WAVE)
        return
    fitted = [n for n in sorted(peaks) if n <= limit.tokens]
    assert fitted and all(peaks[n] <= budget for n in fitted)  # every size up to it fitted
    larger = [n for n in sorted(peaks) if n > limit.tokens]
    assert larger and peaks[larger[0]] > budget  # the next size measured did not
    assert limit.largest_fitted == fitted[-1]


def test_both_engines_recommend_the_same() -> None:
    frame = read_trace([ART])
    policies = ["max-merge", "warm-fit", "warm-affine", "envelope"]
    scalar = recommend(frame, 90_000_000_000, policies, engine="scalar")
    vectorized = recommend(frame, 90_000_000_000, policies, engine="vectorized")
    assert scalar.results == vectorized.results


def test_the_recorded_prices_are_refused_with_their_own_reason() -> None:
    """-p recorded names the trainer's own prices, which price no other size: not
    'unknown policy' (replay knows the name), but why recommend has no answer."""
    code, out, err = cli(str(ART), "--budget", "100GB", "-p", "recorded")
    assert (code, out) == (2, "")
    assert "policy 'recorded' is the trainer's own prices" in err and "unknown" not in err


def test_an_oom_wave_is_evidence_the_measured_limit_lies_below_it() -> None:
    """SPEC §9, the case of issue 39: waves of 4,096, 8,192 and 16,384 tokens fitted at
    10 bytes a token, and one of 32,768 ran out of memory. Within 1,000,000 bytes the
    measured limit is no longer "all fit, up to 16,384", but nothing was measured
    between 16,384 and 32,768 (an OOM reading measures no peak): the limit is known
    only to lie in [16,384, 32,767], and is not made up by interpolating (it used to
    be 32,767, from a line to the OOM size at one byte over the budget)."""
    waves = [(4_096, 40_960), (8_192, 81_920), (16_384, 163_840)]
    rows = [dict(seq=i, wave=i, signature="s", packed_tokens=n, logical_tokens=n,
                 peak_bytes=peak, whole=True) for i, (n, peak) in enumerate(waves)]  # fmt: skip
    rows.append(dict(seq=3, wave=3, signature="s", packed_tokens=32_768, logical_tokens=32_768,
                     peak_bytes=200_000, phase="forward", oom=True))  # fmt: skip
    frame = readings_frame(rows)
    (row,) = recommend(frame, 1_000_000, ["envelope"]).results
    assert row["measured"] == BELOW_AN_OOM and row["measured_limit_tokens"] is None
    assert (row["largest_fitted_tokens"], row["smallest_unfitted_tokens"]) == (16_384, 32_768)
    assert row["gap_tokens"] is None and row["gap_fraction"] is None
    # a budget the fitting sizes already exceed: the OOM above them changes nothing
    (row,) = recommend(frame, 100_000, ["envelope"]).results
    # 8,192 + 18,080 * 8,192 // 81,920 = 10,000
    assert row["measured"] == INTERPOLATED
    assert (row["measured_limit_tokens"], row["smallest_unfitted_tokens"]) == (10_000, 16_384)
    # without the OOM wave: every size fitted
    (row,) = recommend(frame.filter(~pl.col("oom")), 1_000_000, ["envelope"]).results
    assert row["measured"] == ABOVE_EVERY_PEAK
    out = _table(frame, "1000000", "-p", "envelope")
    assert "between 16,384 and 32,767 (OOM at 32,768)" in out
    assert "32,767" not in out.replace("and 32,767", "") and "not measured" not in out


def _newcomer_trace() -> pl.DataFrame:
    """The newcomer's table: 8,192 tokens fitted at 17,976 MiB (4,096 at 8,988 MiB), and
    16,384 tokens ran out of memory, with no peak."""
    mib = 1 << 20
    rows = [dict(seq=i, wave=i, signature="s", packed_tokens=n, logical_tokens=n,
                 peak_bytes=peak, whole=True)
            for i, (n, peak) in enumerate([(4_096, 8_988 * mib), (8_192, 17_976 * mib)])]  # fmt: skip
    rows.append(dict(seq=2, wave=2, signature="s", packed_tokens=16_384, logical_tokens=16_384,
                     peak_bytes=20_000 * mib, phase="forward", oom=True))  # fmt: skip
    return readings_frame(rows)


def test_an_oom_limit_is_a_range_in_every_format() -> None:
    """Within 24 GiB: the limit lies in [8,192, 16,383], not at 16,383 (the made-up
    line to one byte over the budget used to say 16,383 and a gap of +8,727, +53.3%).
    max-merge at safety factor 1 prices ~2.19 MiB a token and admits 11,202 < 16,384,
    so its gap lies between 8,192 - admitted (negative: an "at most") and 16,383 - admitted."""
    frame = _newcomer_trace()
    budget = 24 << 30
    (row,) = recommend(frame, budget, ["max-merge"], safety_factor=1.0).results
    admitted = row["admitted_tokens"]
    assert isinstance(admitted, int) and 8_192 < admitted < 16_384
    assert row["measured"] == BELOW_AN_OOM and row["measured_limit_tokens"] is None
    assert (row["largest_fitted_tokens"], row["smallest_unfitted_tokens"]) == (8_192, 16_384)
    assert row["gap_tokens"] is None and row["gap_at_least_tokens"] is None
    args = ("-p", "max-merge", "--safety", "1")
    out = _table(frame, "24GiB", *args)
    assert "16,383" in out and "between 8,192 and 16,383 (OOM at 16,384)" in out
    assert f"at most {16_383 - admitted:+,}" in out
    assert "(+53.3%)" not in out
    assert "does not say under which budget" in " ".join(out.split())
    markdown = _table(frame, "24GiB", *args, "-f", "markdown")
    assert "| between 8,192 and 16,383 (OOM at 16,384) |" in markdown
    document = json.loads(_table(frame, "24GiB", *args, "-f", "json"))
    (result,) = document["results"]
    assert result["measured"] == "below an OOM" and result["measured_limit_tokens"] is None
    assert (result["largest_fitted_tokens"], result["smallest_unfitted_tokens"]) == (8_192, 16_384)
    csv = _table(frame, "24GiB", *args, "-f", "csv").splitlines()
    fields = dict(zip(csv[0].split(","), csv[1].split(","), strict=True))
    assert fields["measured"] == "below an OOM" and fields["measured_limit_tokens"] == ""
    assert (fields["largest_fitted_tokens"], fields["smallest_unfitted_tokens"]) == (
        "8192",
        "16384",
    )
    # a policy admitting fewer than fitted: at least that many left unused, at most up to the OOM
    (row,) = recommend(frame, budget, ["max-merge"], safety_factor=3.0).results
    low = row["admitted_tokens"]
    assert isinstance(low, int) and low < 8_192 and row["gap_at_least_tokens"] == 8_192 - low
    out = _table(frame, "24GiB", "-p", "max-merge", "--safety", "3")
    assert f"{8_192 - low:+,} to {16_383 - low:+,}" in out


def test_a_budget_far_above_the_fitted_peaks_does_not_overclaim_the_oom() -> None:
    """With --budget far above every fitted peak, the OOM row at 16,384 is taken to mean
    that size does not fit, though the trace does not say under which budget it ran out
    of memory: a policy admitting it "admits a size that ran out of memory", not one
    "measured not to fit"."""
    frame = _newcomer_trace()
    (row,) = recommend(frame, 1 << 40, ["max-merge"]).results
    assert isinstance(row["admitted_tokens"], int) and row["admitted_tokens"] >= 16_384
    out = _table(frame, "1TiB", "-p", "max-merge")
    assert "OOM risk: admits a size that ran out of memory" in out
    assert "measured not to fit" not in out and "at most -" in out


def test_an_oom_below_the_largest_fitting_size_is_not_the_limit() -> None:
    """An OOM at 100 tokens, below sizes that fitted (200 and 300), bounds nothing: the
    smallest OOM size *above* the largest fitting one does (SPEC §9)."""
    assert measured_limit([(200, 2_000), (300, 3_000)], 10_000, [100]).measured == ABOVE_EVERY_PEAK
    limit = measured_limit([(200, 2_000), (300, 3_000)], 10_000, [100, 500, 400])
    assert (limit.tokens, limit.measured) == (None, BELOW_AN_OOM)  # somewhere in [300, 399]
    assert (limit.largest_fitted, limit.smallest_unfitted) == (300, 400)


def test_an_oom_at_a_size_that_also_fitted_bounds_nothing() -> None:
    """SPEC §9 bounds the limit by the smallest OOM size *above* the largest fitting
    one: a wave of 200 tokens that fitted (2,000 bytes) and another of 200 that ran out
    of memory leave 200 the largest fitted size, every size measured fitting 10,000
    bytes; an OOM at 300 is then the bound, the limit in [200, 299]."""
    limit = measured_limit([(100, 1_000), (200, 2_000)], 10_000, [200])
    assert (limit.measured, limit.largest_fitted, limit.smallest_unfitted) == (
        ABOVE_EVERY_PEAK, 200, None,
    )  # fmt: skip
    limit = measured_limit([(100, 1_000), (200, 2_000)], 10_000, [200, 300])
    assert (limit.measured, limit.largest_fitted, limit.smallest_unfitted) == (
        BELOW_AN_OOM, 200, 300,
    )  # fmt: skip


def test_an_oom_at_the_first_size_over_the_budget_keeps_its_measured_line() -> None:
    """A size measured over the budget (200 tokens at 3,000 bytes) that also ran out of
    memory in another wave: the OOM is no smaller than the first size that did not fit,
    whose peak was measured, so the limit is still the line between 100 and 200 at
    2,000 bytes: 100 + (2,000 - 1,000) * 100 // (3,000 - 1,000) = 150."""
    limit = measured_limit([(100, 1_000), (200, 3_000)], 2_000, [200])
    assert (limit.tokens, limit.measured) == (150, INTERPOLATED)
    assert (limit.largest_fitted, limit.smallest_unfitted) == (100, 200)
    # an OOM below it, at 199, is the first size that did not fit: no line to draw
    limit = measured_limit([(100, 1_000), (200, 3_000)], 2_000, [200, 199])
    assert (limit.tokens, limit.measured, limit.smallest_unfitted) == (None, BELOW_AN_OOM, 199)


def test_an_oom_of_one_token_is_the_smallest_size_that_did_not_fit() -> None:
    """Nothing fitted, and a wave of a single packed token ran out of memory: not even
    one token fits (SPEC §9), whether or not a larger size was measured."""
    assert measured_limit([], 10**9, [1]) == measured_limit([(5, 100)], 50, [1])
    limit = measured_limit([(5, 100)], 50, [1])
    assert (limit.tokens, limit.measured, limit.largest_fitted, limit.smallest_unfitted) == (
        None, BELOW_EVERY_PEAK, None, 1,
    )  # fmt: skip
    frame = _trace([(1, 1_000)], oom=True)
    (row,) = recommend(frame, 10**9, ["max-merge"]).results
    assert (row["measured"], row["smallest_unfitted_tokens"]) == (BELOW_EVERY_PEAK, 1)


def test_a_price_past_int64_at_one_token_admits_none() -> None:
    """One token peaked at 2**63 - 1 bytes: max-merge prices a token at that rate, and
    times the safety factor 1.1 the estimate is past int64, which replay refuses to
    report: the rank can price, but admits no token (0, not "no profile")."""
    frame = _trace([(1, 2**63 - 1)])
    (row,) = recommend(frame, 10**9, ["max-merge"]).results
    assert (row["admitted_tokens"], row["rank"], row["estimate_bytes"]) == (0, 0, None)
    out = _table(frame, "1GB", "-p", "max-merge")
    assert "no profile" not in out
    document = json.loads(_table(frame, "1GB", "-p", "max-merge", "-f", "json"))
    assert document["results"][0]["admitted_tokens"] == 0


def test_a_runs_ranks_replayed_in_separate_batches_sum_their_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two ranks of one run and signature, each its own batch of the streamed replay
    (WARMFIT_BATCH_READINGS=1): rank 0's waves hold 100 packed and 150 logical tokens,
    rank 1's 100 and 120. The run's sharing sums both: L / P = 270 / 200 = 1.35, and
    max-merge (safety 1.1, no floor) prices n packed tokens with n * 270 // 200 logical
    ones, as the trace read whole does."""
    rows = [
        dict(seq=0, wave=0, rank=rank, signature="s", packed_tokens=100,
             logical_tokens=logical, peak_bytes=100_000, whole=True)
        for rank, logical in ((0, 150), (1, 120))
    ]  # fmt: skip
    frame = readings_frame(rows)
    path = write_trace(frame, tmp_path / "t.parquet")
    monkeypatch.setenv("WARMFIT_BATCH_READINGS", "1")
    code, out, err = cli(str(path), "--budget", "1MB", "-p", "max-merge", "-f", "json")
    assert code == 0, err
    (streamed,) = json.loads(out)["results"]
    assert streamed["sharing"] == 270 / 200
    admitted = streamed["admitted_tokens"]
    assert isinstance(admitted, int)
    assert streamed["admitted_logical_tokens"] == admitted * 270 // 200
    (whole,) = recommend(frame, 10**6, ["max-merge"]).results
    assert streamed == json.loads(json.dumps(whole))


def test_a_signature_with_no_wave_has_no_points_and_no_ooms() -> None:
    """An empty fold (what :class:`RecommendFold` starts from) asked about a (run,
    signature) it holds no wave of: no measured point, no OOM size."""
    empty = RecommendFold("max-merge").start(["max-merge"])
    assert empty.points(("r", "s")) == [] and empty.ooms(("r", "s")) == []


def test_points_are_one_a_size_its_largest_bytes_without_the_ooms() -> None:
    """Waves of 200, 100, 200, 200 and 300 tokens (the one of 300 ran out of memory):
    one point a size, smallest first, each its largest bytes over the waves that did
    not run out of memory; the OOM's size apart."""
    waves = MeasuredWaves(
        {},
        {("r", "s"): [
            (np.array([200, 100, 200]), np.array([5, 1, 7]), np.array([False, False, False])),
            (np.array([200, 300]), np.array([6, 9]), np.array([False, True])),
        ]},
        {}, {},
    )  # fmt: skip
    assert waves.points(("r", "s")) == [(100, 1), (200, 7)]
    assert waves.ooms(("r", "s")) == [300]


@pytest.mark.parametrize("policy", ["max-merge", "envelope"])
def test_the_scalar_engine_recommends_one_policy_as_the_vectorized_does(
    policy: str, tmp_path: Path
) -> None:
    """One policy named: the streamed scalar replay's per-wave rows hold that policy's
    waves alone, and recommend reads its waves from them (on traces/art-h200, 80 GB)."""
    outs = []
    for engine in ("scalar", "vectorized"):
        code, out, err = cli(str(ART), "--budget", "80GB", "-p", policy, "--engine", engine,
                             "-f", "json")  # fmt: skip
        assert code == 0, err
        outs.append(json.loads(out)["results"])
    assert outs[0] == outs[1] and len(outs[0]) > 1
    assert all(isinstance(row["admitted_tokens"], int) for row in outs[0])


def test_measured_waves_keeps_the_profiles_of_its_own_waves_only() -> None:
    """Given the profiles of a replay of two ranks and the waves of rank 0 alone, the
    measured waves keep rank 0's profiles: those of ranks they hold no wave of are left."""
    from warmfit.replay import replay

    rows = [
        dict(seq=0, wave=0, rank=rank, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=100_000, whole=True)
        for rank in (0, 1)
    ]  # fmt: skip
    result = replay(readings_frame(rows), ["max-merge"], by="signature")
    (run,) = {key[0] for key in result.profiles}
    assert sorted(result.profiles) == [(run, 0, "s", "max-merge"), (run, 1, "s", "max-merge")]
    mine = result.per_wave.filter((pl.col("policy") == "max-merge") & (pl.col("rank") == 0))
    found = measured_waves(mine, result.profiles)
    assert list(found.profiles) == [(run, 0, "s", "max-merge")]
    assert found.last == {(run, "s"): {0: (0, 0, None)}}


def test_a_budget_of_none_is_refused_by_name() -> None:
    """recommend needs a budget: None (no budget, which replay takes) is a UsageError
    naming budget_bytes, not a comparison with None deep in the search."""
    frame = _trace([(100, 100_000)])
    with pytest.raises(
        UsageError, match=r"^budget_bytes must be a number of bytes >= 0; got None\.$"
    ):
        recommend(frame, None, ["max-merge"])  # type: ignore[arg-type]


def test_the_at_least_gap_at_exactly_the_largest_measured_size() -> None:
    """One wave of 100 tokens peaked at 100,000 bytes: max-merge prices n tokens at
    int(int(1,000 n) * 1.1) = 1,100 n. Every measured wave fits either budget below, so
    the gap is "at least" the largest measured size (100) minus the admitted tokens:
    within 110,000 bytes 100 tokens are admitted, exactly the largest size, and no
    token is left unused (no "at least" gap); within 108,900 bytes 99 are, one token
    left unused. Within 111,100 bytes, 101 tokens: beyond every size measured."""
    frame = _trace([(100, 100_000)])
    (row,) = recommend(frame, 110_000, ["max-merge"]).results
    assert (row["admitted_tokens"], row["measured"], row["largest_fitted_tokens"]) == (
        100, ABOVE_EVERY_PEAK, 100,
    )  # fmt: skip
    assert row["gap_at_least_tokens"] is None and row["gap_tokens"] is None
    out = _table(frame, "110000", "-p", "max-merge")
    assert "at least +" not in out and "beyond every size measured" not in out
    # a byte short of 101 tokens' 111,100: still 100; at 111,100, 101 tokens, beyond
    assert "beyond every size measured" not in _table(frame, "111099", "-p", "max-merge")
    assert "beyond every size measured" in _table(frame, "111100", "-p", "max-merge")
    (row,) = recommend(frame, 108_900, ["max-merge"]).results
    assert (row["admitted_tokens"], row["gap_at_least_tokens"]) == (99, 1)
    assert "at least +1" in _table(frame, "108900", "-p", "max-merge")


def test_a_result_with_no_measured_wave_is_rendered_as_such() -> None:
    """A result whose (run, signature) has no measured wave (``measured_limit`` of no
    point and no OOM, which no trace's summary holds, packed_tokens being > 0) renders
    as "not measured (no wave)" in the table and markdown, and as itself in JSON."""
    row = dict.fromkeys(FIELDS) | dict(
        run="r", signature="s", policy="max-merge", budget_bytes=1_000, ranks=1,
        sharing=1.0, admitted_tokens=5, measured=NO_MEASURED_WAVE,
    )  # fmt: skip
    rec = Recommendation([row], 1_000, 1.1, ("max-merge",), {("r", "s", "max-merge"): None})
    for fmt in ("table", "markdown"):
        assert "not measured (no wave)" in render_recommendation(rec, fmt), fmt
    (result,) = json.loads(render_recommendation(rec, "json"))["results"]
    assert result["measured"] == "no measured wave" and result["admitted_tokens"] == 5


# --- audit of 12-06g (audit1) ---


def test_measured_limit_takes_a_sizes_largest_peak_wherever_it_comes() -> None:
    """Size 100 is measured twice, 1,200 B first, then 1,000 B: its peak is 1,200 B,
    whichever comes last. Under 2,000 B between (100, 1,200) and (300, 3,000): 100 +
    800 x 200 // 1,800 = 188 (1,000 B would give 100 + 1,000 x 200 // 2,000 = 200)."""
    limit = measured_limit([(100, 1_200), (300, 3_000), (100, 1_000)], 2_000)
    assert (limit.tokens, limit.measured) == (188, INTERPOLATED)
    assert (limit.largest_fitted, limit.smallest_unfitted) == (100, 300)


def test_ranks_that_admit_the_same_tokens_name_the_lowest_rank() -> None:
    """Ranks 0 and 1 both pay 1,000 B a token: both admit int(int(1,000 n) x 1.1) <=
    1,100,000, n = 1,000. The tie is set by the lowest rank, 0."""
    rows = [
        dict(seq=0, wave=0, rank=rank, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=100_000, whole=True)
        for rank in (0, 1)
    ]  # fmt: skip
    (row,) = recommend(readings_frame(rows), 1_100_000, ["max-merge"]).results
    assert (row["ranks"], row["admitted_tokens"], row["rank"]) == (2, 1_000, 0)


def test_the_caption_explains_between_when_any_row_lies_below_an_oom() -> None:
    """Signature 'a' fitted 100 tokens (1,000 B) and ran out of memory at 300; 'b' fitted
    100 tokens. Under 10,000 B, 'a' lies between 100 and 299 (below an OOM), 'b' above
    every peak: one row below an OOM is enough for the caption to say what 'between'
    means, in every format that has a caption."""
    rows = [
        dict(seq=0, wave=0, signature="a", packed_tokens=100, logical_tokens=100,
             peak_bytes=1_000, whole=True),
        dict(seq=1, wave=1, signature="a", packed_tokens=300, logical_tokens=300,
             peak_bytes=2_000, phase="forward", oom=True),
        dict(seq=2, wave=2, signature="b", packed_tokens=100, logical_tokens=100,
             peak_bytes=1_000, whole=True),
    ]  # fmt: skip
    rec = recommend(readings_frame(rows), 10_000, ["max-merge"])
    assert [r["measured"] for r in rec.results] == [BELOW_AN_OOM, ABOVE_EVERY_PEAK]
    for fmt in ("markdown", "table"):
        out = " ".join(render_recommendation(rec, fmt).split())
        assert "between 100 and 299 (OOM at 300)" in out, fmt
        assert "between = the first size that did not fit ran out of memory" in out, fmt


def test_the_search_checks_the_cap_before_answering_it() -> None:
    """Sizes up to 5 are admitted, the cap is 6: doubling reaches 4, then 8 is past the
    cap, so 6 itself must be asked (refused), and the answer is 5, not the cap. Up to
    1,000 under a cap of 1,500: 1,000 (doubling reaches 512, then 1,024 is refused)."""
    assert largest_admitted(lambda n: n <= 5, cap=6) == 5
    assert largest_admitted(lambda n: n <= 1_000, cap=1_500) == 1_000
    assert largest_admitted(lambda n: n <= 6, cap=6) == 6


@given(st.integers(1, 2**20).flatmap(lambda cap: st.tuples(st.just(cap), st.integers(0, cap))))
def test_the_search_finds_a_threshold_at_or_below_the_cap(case: tuple[int, int]) -> None:
    """As test_the_search_finds_the_threshold_exactly, with the threshold drawn within
    [0, cap], where a search that answers the cap unasked is wrong."""
    cap, threshold = case
    assert largest_admitted(lambda n: n <= threshold, cap) == threshold


# --- audit of 12-06g (audit4) ---


def test_a_table_groups_only_the_rows_of_one_run_and_signature() -> None:
    """One run, signatures 'a' and 'b' (two policies each): each signature's first row
    names its run and signature, its second only its policy. A row of 'b' that followed
    'a' without naming 'b' would read as a's."""
    rows = [
        dict(seq=i, wave=i, signature=sig, packed_tokens=100, logical_tokens=100,
             peak_bytes=1_000, whole=True)
        for i, sig in enumerate(["a", "b"])
    ]  # fmt: skip
    rec = recommend(readings_frame(rows), 10_000, ["max-merge", "warm-fit"])
    assert [(r["signature"], r["policy"]) for r in rec.results] == [
        ("a", "max-merge"), ("a", "warm-fit"), ("b", "max-merge"), ("b", "warm-fit"),
    ]  # fmt: skip
    lines = [line.split() for line in render_recommendation(rec, "table").splitlines()]
    named = [cells[:3] for cells in lines if "max-merge" in cells or "warm-fit" in cells]
    assert [c for c in named if c[:2] in (["run", "a"], ["run", "b"])] == [
        ["run", "a", "max-merge"], ["run", "b", "max-merge"],
    ]  # fmt: skip


# --- issue 38, tests by pattern (s5) ---

#: The caption's first sentence, for a budget of 1,500,000 bytes at safety factor 1.25
#: (``:g``: 1.25, not 1.2 or 1.250000), word for word.
CAPTION = (
    "admitted = the most packed tokens each policy prices within the budget of 1,500,000 "
    "bytes (1.50 MB; estimate <= budget, safety factor 1.25) after learning the whole "
    "trace, the smallest over the ranks, logical tokens at the trace's own sharing; "
    "measured limit = the packed tokens the measured waves show would fit, interpolated "
    "between the two measured sizes around the budget (never extrapolated); gap = measured "
    "limit - admitted, tokens (% of the limit) a policy leaves unused, negative: it admits "
    "more than fitted (an OOM risk); at least = every measured wave fitted, up to the "
    "largest size, and the policy admits fewer"
)
#: The clause added when any row lies below an OOM.
BETWEEN = (
    "; between = the first size that did not fit ran out of memory (an OOM reading is "
    "taken to mean that size does not fit this budget, though the trace does not say "
    "under which budget it ran) and measured no peak, so the limit lies somewhere below "
    "it and is not interpolated; the gap is then a range"
)


def _result(**fields: object) -> dict[str, object]:
    """A result of run 'r', signature 's', policy max-merge, with ``fields`` set (the
    rest None), as :func:`recommend` leaves one."""
    return dict.fromkeys(FIELDS) | dict(
        run="r", signature="s", policy="max-merge", budget_bytes=1_500_000, ranks=1,
        sharing=1.0,
    ) | fields  # fmt: skip


def _rec(*results: dict[str, object]) -> Recommendation:
    profiles = {(str(r["run"]), str(r["signature"]), "max-merge"): None for r in results}
    return Recommendation(list(results), 1_500_000, 1.25, ("max-merge",), profiles)


INTERP, ABOVE, BELOW, OOM = INTERPOLATED, ABOVE_EVERY_PEAK, BELOW_EVERY_PEAK, BELOW_AN_OOM
#: (result fields, the admitted, measured limit, gap and note cells): every text a cell
#: can hold, each beside a twin that moves one deciding field across its edge.
CELLS = [
    # interpolated limit 188 between 100 and 300: the gap over the limit, the note by
    # the admitted size against the limit and the first size over the budget
    (dict(admitted_tokens=150, measured=INTERP, measured_limit_tokens=188, largest_fitted_tokens=100,
          smallest_unfitted_tokens=300, gap_tokens=38, gap_fraction=38 / 188),
     ["150", "188", "+38 (+20.2%)", ""]),
    (dict(admitted_tokens=188, measured=INTERP, measured_limit_tokens=188, largest_fitted_tokens=100,
          smallest_unfitted_tokens=300, gap_tokens=0, gap_fraction=0.0),
     ["188", "188", "+0 (+0.0%)", ""]),
    (dict(admitted_tokens=189, measured=INTERP, measured_limit_tokens=188, largest_fitted_tokens=100,
          smallest_unfitted_tokens=300, gap_tokens=-1, gap_fraction=-1 / 188),
     ["189", "188", "-1 (-0.5%)", "OOM risk: admits more than fitted"]),
    (dict(admitted_tokens=299, measured=INTERP, measured_limit_tokens=188, largest_fitted_tokens=100,
          smallest_unfitted_tokens=300, gap_tokens=-111, gap_fraction=-111 / 188),
     ["299", "188", "-111 (-59.0%)", "OOM risk: admits more than fitted"]),
    (dict(admitted_tokens=300, measured=INTERP, measured_limit_tokens=188, largest_fitted_tokens=100,
          smallest_unfitted_tokens=300, gap_tokens=-112, gap_fraction=-112 / 188),
     ["300", "188", "-112 (-59.6%)", "OOM risk: admits a size measured not to fit"]),
    (dict(admitted_tokens=1_234_567, measured=INTERP, measured_limit_tokens=2_000_000,
          largest_fitted_tokens=1_500_000, smallest_unfitted_tokens=4_000_000,
          gap_tokens=765_433, gap_fraction=765_433 / 2_000_000),
     ["1,234,567", "2,000,000", "+765,433 (+38.3%)", ""]),
    # every measured wave fitted, up to 100: at least the unused tokens, or beyond
    (dict(admitted_tokens=99, measured=ABOVE, largest_fitted_tokens=100, gap_at_least_tokens=1),
     ["99", "not measured (all fit, up to 100)", "at least +1", ""]),
    (dict(admitted_tokens=100, measured=ABOVE, largest_fitted_tokens=100),
     ["100", "not measured (all fit, up to 100)", "—", ""]),
    (dict(admitted_tokens=101, measured=ABOVE, largest_fitted_tokens=100),
     ["101", "not measured (all fit, up to 100)", "—", "beyond every size measured"]),
    (dict(admitted_tokens=2**40, measured=ABOVE, largest_fitted_tokens=12_345),
     ["no limit", "not measured (all fit, up to 12,345)", "—", "beyond every size measured"]),
    (dict(admitted_tokens=2**40 - 1, measured=ABOVE, largest_fitted_tokens=12_345),
     ["1,099,511,627,775", "not measured (all fit, up to 12,345)", "—",
      "beyond every size measured"]),
    # no size fitted: the first measured (or OOM) size is the smallest that did not
    (dict(admitted_tokens=99, measured=BELOW, smallest_unfitted_tokens=100),
     ["99", "not measured (none fit)", "—", ""]),
    (dict(admitted_tokens=100, measured=BELOW, smallest_unfitted_tokens=100),
     ["100", "not measured (none fit)", "—", "OOM risk: admits a size measured not to fit"]),
    (dict(admitted_tokens=0, measured=BELOW, smallest_unfitted_tokens=1),
     ["0", "not measured (none fit)", "—", ""]),
    # the first size that did not fit ran out of memory at 300, 100 fitted: a range
    (dict(admitted_tokens=50, measured=OOM, largest_fitted_tokens=100, smallest_unfitted_tokens=300,
          gap_at_least_tokens=50),
     ["50", "between 100 and 299 (OOM at 300)", "+50 to +249", ""]),
    (dict(admitted_tokens=100, measured=OOM, largest_fitted_tokens=100, smallest_unfitted_tokens=300),
     ["100", "between 100 and 299 (OOM at 300)", "at most +199", ""]),
    (dict(admitted_tokens=299, measured=OOM, largest_fitted_tokens=100, smallest_unfitted_tokens=300),
     ["299", "between 100 and 299 (OOM at 300)", "at most +0", ""]),
    (dict(admitted_tokens=300, measured=OOM, largest_fitted_tokens=100, smallest_unfitted_tokens=300),
     ["300", "between 100 and 299 (OOM at 300)", "at most -1",
      "OOM risk: admits a size that ran out of memory"]),
    (dict(admitted_tokens=5_000, measured=OOM, largest_fitted_tokens=1_000,
          smallest_unfitted_tokens=1_001),
     ["5,000", "between 1,000 and 1,000 (OOM at 1,001)", "at most -4,000",
      "OOM risk: admits a size that ran out of memory"]),
    # no rank can price; no measured wave
    (dict(admitted_tokens=None, measured=OOM, largest_fitted_tokens=100,
          smallest_unfitted_tokens=300),
     ["no profile", "between 100 and 299 (OOM at 300)", "—", ""]),
    (dict(admitted_tokens=None, measured=BELOW, smallest_unfitted_tokens=100),
     ["no profile", "not measured (none fit)", "—", ""]),
    (dict(admitted_tokens=7, measured=NO_MEASURED_WAVE),
     ["7", "not measured (no wave)", "—", ""]),
]  # fmt: skip


@pytest.mark.parametrize(("fields", "cells"), CELLS)
def test_every_cell_and_note_word_for_word(fields: dict[str, object], cells: list[str]) -> None:
    """Each result's four cells in markdown (one row) and in the table (the same texts,
    in columns), with the caption's 'between' clause exactly where the row lies below an
    OOM."""
    rec = _rec(_result(**fields))
    markdown = render_recommendation(rec, "markdown").splitlines()
    assert markdown[:2] == [
        "| run | signature | policy | admitted | measured limit | gap | note |",
        "|---|---|---|---|---|---|---|",
    ]
    assert markdown[2] == "| " + " | ".join(["r", "s", "max-merge", *cells]) + " |"
    caption = CAPTION + (BETWEEN if fields["measured"] == OOM else "")
    assert markdown[3:] == ["", caption[0].upper() + caption[1:] + "."]
    (line,) = [t for t in render_recommendation(rec, "table").splitlines() if "max-merge" in t]
    assert [c.strip() for c in line.split("  ") if c.strip()] == [
        "r", "s", "max-merge", *[c for c in cells if c]
    ]  # fmt: skip


def test_the_caption_word_for_word_and_its_between_clause_for_any_row() -> None:
    """The caption names the budget with commas and in units, the safety factor as
    given (1.25); the 'between' clause comes when any one row, first or last, lies
    below an OOM, and not when none does."""
    above = _result(signature="a", admitted_tokens=5, measured=ABOVE, largest_fitted_tokens=10)
    oom = _result(signature="b", admitted_tokens=5, measured=OOM, largest_fitted_tokens=10,
                  smallest_unfitted_tokens=20)  # fmt: skip
    for results, clause in (([above], ""), ([above, oom], BETWEEN), ([oom, above], BETWEEN)):
        markdown = render_recommendation(_rec(*results), "markdown").splitlines()
        assert markdown[-1] == "A" + (CAPTION + clause)[1:] + ".", len(results)
        table = " ".join(render_recommendation(_rec(*results), "table").split())
        assert " ".join((CAPTION + clause).split()) in table
    other = Recommendation([above], 24 << 30, 1.0, ("max-merge",), {})
    assert (
        render_recommendation(other, "markdown")
        .splitlines()[-1]
        .startswith(
            "Admitted = the most packed tokens each policy prices within the budget of "
            "25,769,803,776 bytes (25.8 GB; estimate <= budget, safety factor 1) after"
        )
    )


@pytest.mark.parametrize("policies", [["recorded"], ["max-merge", "recorded"]])
def test_the_recorded_refusal_word_for_word(policies: list[str]) -> None:
    """-p recorded, alone or after another policy: exit 2, nothing on stdout, one line
    saying why and what to do instead."""
    code, out, err = cli(str(ART), "--budget", "100GB", *[a for p in policies for a in ("-p", p)])
    assert (code, out, err) == (
        2,
        "",
        "warmfit: error: policy 'recorded' is the trainer's own prices (a trace's "
        "estimate_bytes, SPEC §8): it has no profile to price another size with, so it "
        "admits no token count. Leave -p recorded out; 'warmfit replay' reports its "
        "figures.\n",
    )


def test_a_groups_second_policy_shows_its_own_cells_but_not_the_groups() -> None:
    """Signature 'a' with two policies, then 'b': in the table, a's second row names its
    policy and its own admitted, gap and note cells, leaving the run, signature and
    measured limit (the group's) blank; 'b' names its run and signature again. Markdown
    repeats every cell on every row."""
    shared = dict(signature="a", measured=INTERP, measured_limit_tokens=188,
                  largest_fitted_tokens=100, smallest_unfitted_tokens=300)  # fmt: skip
    rec = Recommendation(
        [
            _result(**shared, admitted_tokens=150, gap_tokens=38, gap_fraction=38 / 188),
            _result(**shared, policy="warm-fit", admitted_tokens=300, gap_tokens=-112,
                    gap_fraction=-112 / 188),
            _result(signature="b", admitted_tokens=50, measured=OOM, largest_fitted_tokens=100,
                    smallest_unfitted_tokens=300, gap_at_least_tokens=50),
        ],
        1_500_000, 1.25, ("max-merge", "warm-fit"), {},
    )  # fmt: skip
    lines = render_recommendation(rec, "table").splitlines()
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines if "max-merge" in line or "warm-fit" in line]  # fmt: skip
    assert rows == [
        ["r", "a", "max-merge", "150", "188", "+38 (+20.2%)"],
        ["warm-fit", "300", "-112 (-59.6%)", "OOM risk: admits a size measured not to fit"],
        ["r", "b", "max-merge", "50", "between 100 and 299 (OOM at 300)", "+50 to +249"],
    ]
    second = next(line for line in lines if "warm-fit" in line)
    assert second.index("warm-fit") == lines[2].index("max-merge")  # the policy column
    assert render_recommendation(rec, "markdown").splitlines()[2:5] == [
        "| r | a | max-merge | 150 | 188 | +38 (+20.2%) |  |",
        "| r | a | warm-fit | 300 | 188 | -112 (-59.6%) | OOM risk: admits a size measured not to fit |",
        "| r | b | max-merge | 50 | between 100 and 299 (OOM at 300) | +50 to +249 |  |",
    ]
