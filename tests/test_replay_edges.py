"""Replay at its edges, from the command line, against :mod:`tests.oracle` (issue 38).

- ``--budget`` exactly at a wave's estimate, exactly at its measured peak, and a
  byte either side: a wave is admitted when ``estimate <= budget`` (SPEC §7);
  ``refused_fit`` and ``admitted_oom`` turn on the same bytes;
- the point queries of warm-affine and envelope where they have no answer: a wave
  above every measured size (beyond, SPEC §8), below every one, with computes
  past 2**53 (where the extrapolation's ceiling is) up to 2**61 bytes; both
  engines give the oracle's per-wave bytes, and envelope never prices a wave
  below the compute already measured at a size not above it (its docstring's
  promise, docs/reference/policy-api.md);
- sizes at 2**63 - 1: a wave whose peak is the column's largest value is kept
  to the byte.

warmfit is run as a user runs it (``python -m warmfit`` through typer's runner)
and read back from its JSON and per-wave Parquet only.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests import oracle
from tests.strategies import oracle_traces
from warmfit.cli import app
from warmfit.format.trace import readings_frame, write_trace
from warmfit.policies.rule import COMPUTE, PACKED, WHOLE, DeclaredPolicy, Points

POLICIES = ("max-merge", "warm-fit", "warm-affine", "envelope")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUDGET_FIELDS = ("budget_bytes", "admitted", "refused_fit", "admitted_oom")


def cli_replay(
    rows: Sequence[dict[str, Any]], *args: str, policies: Sequence[str] = POLICIES
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The JSON results and the per-wave rows of ``warmfit replay`` on ``rows``."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = write_trace(readings_frame(list(rows)), Path(tmp) / "trace" / "t.parquet")
        per_wave = Path(tmp) / "waves.parquet"
        policy_args = [a for p in policies for a in ("-p", p)]
        result = CliRunner().invoke(
            app,
            ["replay", str(trace.parent), *policy_args, "--format", "json",
             "--per-wave", str(per_wave), *args],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["results"], pq.read_table(per_wave).to_pylist()


def wave_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["run"], row["rank"], row["wave"], row["policy"])


@SETTINGS
@given(rows=oracle_traces(max_waves=8), data=st.data())
def test_a_budget_exactly_at_an_estimate_or_a_peak(
    rows: list[dict[str, Any]], data: st.DataObject
) -> None:
    try:
        waves = oracle.replay_waves(rows, oracle.with_recorded(rows, POLICIES), 1.1)
    except OverflowError:
        return
    policies = oracle.with_recorded(rows, POLICIES)
    edges = sorted(
        {oracle.estimate_of(w, p) for w in waves for p in policies if oracle.is_figure(w, p)}
        | {w.actual for w in waves}
    )
    at = data.draw(st.sampled_from(edges) if edges else st.just(0), label="edge")
    budget = max(0, at + data.draw(st.sampled_from([0, 0, 0, -1, 1]), label="offset"))
    results, per_wave = cli_replay(rows, "--budget", str(budget))
    want = oracle.replay(rows, POLICIES, 1.1, "run", budget)
    assert [{k: r[k] for k in ("run", "policy", *BUDGET_FIELDS)} for r in results] == [
        {k: r[k] for k in ("run", "policy", *BUDGET_FIELDS)} for r in want.summary
    ]
    got = {wave_key(r): (r["estimate_bytes"], r["actual_bytes"], r["admitted"]) for r in per_wave}
    expected = {
        wave_key(r): (r["estimate_bytes"], r["actual_bytes"], r["admitted"]) for r in want.per_wave
    }
    assert got == expected


def test_a_budget_at_the_estimate_admits_and_a_byte_less_refuses() -> None:
    """Worked: the second wave of 100 tokens is priced at 100 x 1,000 x 1.1 = 110,000
    bytes by max-merge and used 120,000: a budget of 110,000 admits it (and it runs
    out: admitted_oom 1), 109,999 refuses it; 120,000 admits it and it fits."""
    rows = [
        reading(0, "s", 100, 100_000),
        reading(1, "s", 100, 120_000),
    ]
    figures = {}
    for budget in (109_999, 110_000, 119_999, 120_000):
        results, _ = cli_replay(rows, "--budget", str(budget))
        (mm,) = [r for r in results if r["policy"] == "max-merge"]
        figures[budget] = (mm["admitted"], mm["refused_fit"], mm["admitted_oom"])
    assert figures == {
        109_999: (0, 0, 0),  # refused, and it would not have fit
        110_000: (1, 0, 1),  # admitted at its estimate exactly; 120,000 > budget: an OOM
        119_999: (1, 0, 1),
        120_000: (1, 0, 0),  # its peak exactly at the budget fits
    }


def reading(
    wave: int,
    signature: str,
    n: int,
    peak: int,
    *,
    run: str = "A",
    whole: bool = True,
    baseline: int = 0,
) -> dict[str, Any]:
    """One flat wave of one caller reading (seq = wave)."""
    return {
        "run": run,
        "rank": 0,
        "step": None,
        "wave": wave,
        "seq": wave,
        "signature": signature,
        "kind": "flat",
        "phase": "caller",
        "packed_tokens": n,
        "logical_tokens": n,
        "output_bytes": 0,
        "static_floor_bytes": None,
        "baseline_bytes": baseline,
        "peak_bytes": peak,
        "whole": whole,
        "oom": False,
    }


computes = st.one_of(
    st.integers(0, 2**30),
    st.integers(2**53 - 4, 2**53 + 4),
    st.integers(2**53, 2**61),
)


@st.composite
def point_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Waves whose sizes fall above every measured size, below every one, or anywhere,
    with computes about the extrapolation's ceiling (2**53)."""
    count = draw(st.integers(2, 7))
    sizes = draw(st.lists(st.integers(1, 10_000), min_size=count, max_size=count))
    shape = draw(st.sampled_from(["ascending", "descending", "any"]))
    if shape == "ascending":
        sizes = sorted(set(sizes))
    elif shape == "descending":
        sizes = sorted(set(sizes), reverse=True)
    return [
        reading(
            i,
            draw(st.sampled_from(["s", "s", "t"])),
            n,
            draw(computes),
            whole=draw(st.integers(0, 4)) > 0,
        )
        for i, n in enumerate(sizes)
    ]


@SETTINGS
@given(rows=point_streams(), engine=st.sampled_from(["scalar", "vectorized"]))
def test_point_queries_with_no_point_give_the_oracles_bytes(
    rows: list[dict[str, Any]], engine: str
) -> None:
    try:
        want = oracle.replay(rows, POLICIES, 1.0)
    except OverflowError:  # a price past 2**63: refused, as test_oracle checks
        assume(False)
    _, per_wave = cli_replay(rows, "--safety", "1.0", "--engine", engine)
    got = {wave_key(r): (r["estimate_bytes"], r["set_by"], r["beyond"]) for r in per_wave}
    expected = {wave_key(r): (r["estimate_bytes"], r["set_by"], r["beyond"]) for r in want.per_wave}
    assert got == expected
    # envelope: never below the compute measured at a size not above the wave's
    seen: dict[str, list[tuple[int, int]]] = {}
    by_wave = {(r["wave"]): r for r in per_wave if r["policy"] == "envelope"}
    for row in rows:
        mine = seen.setdefault(row["signature"], [])
        price = by_wave[row["wave"]]["estimate_bytes"]
        # the compute as the double the policies hold it (2**53 + 1 is 2**53)
        floor = max((int(float(c)) for n, c in mine if n <= row["packed_tokens"]), default=None)
        if floor is not None and price is not None:
            assert price >= floor, (row, mine, price)
        if row["whole"]:
            mine.append((row["packed_tokens"], row["peak_bytes"]))


def test_beyond_the_measured_range_a_price_past_the_ceiling_keeps_the_cost_seen() -> None:
    """Worked: 2**60 bytes at 100 tokens, then a wave of 200 tokens: envelope's line
    would give 2**61, above its ceiling of 2**53; the ceiling is never below the
    cost measured (2**60), so the price is 2**60, not 2**53."""
    rows = [reading(0, "s", 100, 2**60), reading(1, "s", 200, 2**60)]
    for engine in ("scalar", "vectorized"):
        _, per_wave = cli_replay(rows, "--safety", "1.0", "--engine", engine)
        (second,) = [r for r in per_wave if r["policy"] == "envelope" and r["wave"] == 1]
        assert (second["estimate_bytes"], second["beyond"]) == (2**60, True), engine


def test_a_peak_of_2_63_minus_1_bytes_is_kept_to_the_byte() -> None:
    rows = [reading(0, "s", 100, 1000), reading(1, "s", 100, 2**63 - 1, baseline=2**63 - 2)]
    _, per_wave = cli_replay(rows, "--safety", "1.0")
    assert {r["actual_bytes"] for r in per_wave if r["wave"] == 1} == {1}
    rows = [reading(0, "s", 100, 1000), reading(1, "s", 100, 2**63 - 1)]
    _, per_wave = cli_replay(rows, "--safety", "1.0")
    assert {r["actual_bytes"] for r in per_wave if r["wave"] == 1} == {2**63 - 1}


class AboveTop(DeclaredPolicy):
    """A user's policy asking the point queries where they may have no answer: the
    largest compute at a size not above the nearest measured size at or above the
    wave's (``top(above(x))``), and below it (``top(below(x))``); NaN (no profile)
    where there is no such point (docs/reference/policy-api.md)."""

    name = "above-top"
    summary = "top(above(x)) + top(below(x)) / 2**20 (a test's probe of the point queries)"
    points = Points(COMPUTE, at=PACKED, where=WHOLE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        points = state.points
        x = n * 1.0
        return points.top(points.above(x)) + points.top(points.below(x)) / 2.0**20


@SETTINGS
@given(rows=point_streams())
def test_a_user_policy_sees_nan_where_no_point_answers_on_both_engines(
    rows: list[dict[str, Any]],
) -> None:
    """A wave above every measured size has no ``above``: the policy's price is NaN
    and the wave unpriced, on the vectorized engine as on the scalar one; elsewhere
    both give the bytes the points give."""
    for row in rows:
        row["peak_bytes"] = row["peak_bytes"] % 2**40  # far from int64's end
    per_engine = {}
    for engine in ("scalar", "vectorized"):
        _, per_wave = cli_replay(
            rows, "--safety", "1.0", "--engine", engine,
            policies=("tests.test_replay_edges:AboveTop",),
        )  # fmt: skip
        per_engine[engine] = [(r["wave"], r["estimate_bytes"], r["set_by"]) for r in per_wave]
    assert per_engine["scalar"] == per_engine["vectorized"]
    # the oracle of the queries: the whole readings seen before each wave, by signature
    seen: dict[str, list[tuple[int, int]]] = {}
    want = []
    for row in rows:
        mine = seen.setdefault(row["signature"], [])
        n = row["packed_tokens"]
        ups = [size for size, _ in mine if size >= n]
        downs = [size for size, _ in mine if size <= n]
        if ups and downs:
            above, below = min(ups), max(downs)
            top_above = max(float(c) for size, c in mine if size <= above)
            top_below = max(float(c) for size, c in mine if size <= below)
            want.append((row["wave"], int(top_above + top_below / 2.0**20), "profile"))
        else:
            want.append((row["wave"], None, None))
        if row["whole"]:
            mine.append((n, row["peak_bytes"]))
    assert per_engine["vectorized"] == want
