"""``warmfit recommend`` against a brute-force oracle (issue 38, item 1).

The oracle here prices sizes with :mod:`tests.oracle`'s plain models of the
policies (which import nothing from warmfit) and follows the text of
spec-notes 23, not the code of ``warmfit/report/recommend.py``:

- each ``(run, rank, signature)`` profile learns every observed reading of the
  trace in ``seq`` order (SPEC §3 step 2);
- a size ``n`` is a flat wave of ``n * L // P`` logical tokens (``L``, ``P``: the
  run and signature's logical and packed tokens summed over its waves), with
  the output bytes and floor of the rank's last wave of the signature, priced
  by SPEC §3's estimate; it is admitted when ``estimate <= budget``;
- the admitted tokens are the largest admitted size, the smallest over the
  ranks that can price (no profile, no floor: cannot), the lowest rank on a tie;
- the measured limit: each size's largest actual bytes over the waves that did
  not run out of memory, sizes smallest first; the first over the budget did
  not fit; a straight line between it and the size before, rounded down. An
  OOM wave's size did not fit either (SPEC §9): the smallest OOM size above
  the largest size that fitted, when below the first size over the budget,
  is the first that did not fit; it measured no peak, so no line is drawn:
  the limit lies in [largest fitted, OOM size - 1] ("below an OOM").

warmfit's answer is read from the command line's JSON, so the test holds
whatever the code behind it becomes. The search is checked by brute force:
every size up to the admitted one is admitted and the next is not.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests import oracle
from tests.oracle import Row
from tests.strategies import examples, oracle_traces
from warmfit.cli import app
from warmfit.format.trace import readings_frame, write_trace

POLICIES = ["max-merge", "warm-fit", "warm-affine", "envelope"]
SAFETY = 1.1
#: Sizes scanned one by one below the admitted size (beyond it, the oracle checks
#: the two sizes around the answer only).
SCAN = 3000
ENV = {"_TYPER_FORCE_DISABLE_TERMINAL": "1", "COLUMNS": "200"}


# --------------------------------------------------------------------------- the oracle


class Rank:
    """One rank's profile of a signature after the whole trace, and its last wave."""

    def __init__(self, profile: oracle.MaxMerge, o: int, s: int | None) -> None:
        self.profile, self.o, self.s = profile, o, s

    def estimate(self, n: int, logical: int, packed: int, safety: float = SAFETY) -> int | None:
        """SPEC §3's estimate of a flat wave of ``n`` packed tokens (None: unpriced or
        past int64, which no replay reports)."""
        m = n * logical // packed
        try:
            return oracle.estimate(self.profile.price(n, m), self.o, self.s, safety)[0]
        except OverflowError:
            return None


def ranks_after(rows: Sequence[Row], policy: str) -> dict[tuple[str, str], dict[int, Rank]]:
    """Per (run, signature), per rank: the profile after every reading, and the
    constants of the rank's last wave of the signature (by its first reading)."""
    streams: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        streams.setdefault((str(row["run"]), int(row["rank"])), []).append(row)
    out: dict[tuple[str, str], dict[int, Rank]] = {}
    for (run, rank), readings in streams.items():
        profiles: dict[str, oracle.MaxMerge] = {}
        last: dict[str, tuple[int, int | None]] = {}
        seen_waves: set[int] = set()
        for row in sorted(readings, key=lambda r: r["seq"]):
            sig = str(row["signature"])
            profile = profiles.setdefault(sig, oracle.POLICIES[policy]())
            if row["wave"] not in seen_waves:  # a wave's first reading: the latest wave
                seen_waves.add(int(row["wave"]))
                s = row["static_floor_bytes"]
                last[sig] = (int(row["output_bytes"]), None if s is None else int(s))
            kind, phase, oom = str(row["kind"]), str(row["phase"]), bool(row["oom"])
            if oracle.observed(kind, phase, oom):
                delta = max(0, int(row["peak_bytes"]) - int(row["baseline_bytes"]))
                profile.observe(
                    oracle.Reading(
                        int(row["packed_tokens"]),
                        int(row["logical_tokens"]),
                        delta,
                        int(row["output_bytes"]),
                        bool(row["whole"]),
                        phase,
                        kind,
                    )
                )
        for sig, profile in profiles.items():
            out.setdefault((run, sig), {})[rank] = Rank(profile, *last[sig])
    return out


def sums(rows: Sequence[Row]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (run, signature): logical and packed tokens summed over its waves."""
    waves: dict[tuple[str, int, int], Row] = {}
    for row in rows:
        waves.setdefault((str(row["run"]), int(row["rank"]), int(row["wave"])), row)
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for (run, _, _), row in waves.items():
        key = (run, str(row["signature"]))
        logical, packed = out.get(key, (0, 0))
        out[key] = (logical + int(row["logical_tokens"]), packed + int(row["packed_tokens"]))
    return out


def measured(rows: Sequence[Row], run: str, sig: str, budget: int) -> dict[str, object]:
    """spec-notes 23's measured limit, from the waves' actual bytes."""
    actual: dict[tuple[int, int], int] = {}
    oom: set[tuple[int, int]] = set()
    size: dict[tuple[int, int], int] = {}
    for row in rows:
        if row["run"] != run or row["signature"] != sig:
            continue
        key = (int(row["rank"]), int(row["wave"]))
        delta = max(0, int(row["peak_bytes"]) - int(row["baseline_bytes"]))
        actual[key] = max(actual.get(key, 0), delta)
        size[key] = int(row["packed_tokens"])
        if row["oom"]:
            oom.add(key)
    peaks: dict[int, int] = {}
    for key, bytes_ in actual.items():
        if key not in oom:
            peaks[size[key]] = max(peaks.get(size[key], 0), bytes_)
    # SPEC §9: an OOM wave's size did not fit. The largest size that fitted (every
    # size below the first over the budget), then the smallest OOM size above it.
    fitted = 0
    for n in sorted(peaks):
        if peaks[n] > budget:
            break
        fitted = n
    oom_sizes = [size[key] for key in oom if size[key] > fitted]
    if oom_sizes:
        first_over = min((n for n in peaks if peaks[n] > budget), default=None)
        smallest_oom = min(oom_sizes)
        if first_over is None or smallest_oom < first_over:
            # the OOM size is the first that did not fit, and measured no peak: nothing
            # to interpolate to, the limit lies somewhere in [fitted, smallest_oom - 1]
            if not fitted:
                return {"measured": "budget below every peak", "measured_limit_tokens": None,
                        "largest_fitted_tokens": None,
                        "smallest_unfitted_tokens": smallest_oom}  # fmt: skip
            return {"measured": "below an OOM", "measured_limit_tokens": None,
                    "largest_fitted_tokens": fitted,
                    "smallest_unfitted_tokens": smallest_oom}  # fmt: skip
    if not peaks:
        return {"measured": "no measured wave", "measured_limit_tokens": None}
    sizes = sorted(peaks)
    for i, n in enumerate(sizes):
        if peaks[n] > budget:
            if i == 0:
                return {"measured": "budget below every peak", "measured_limit_tokens": None,
                        "largest_fitted_tokens": None, "smallest_unfitted_tokens": n}  # fmt: skip
            n0 = sizes[i - 1]
            a0, a1 = peaks[n0], peaks[n]
            # the line through (n0, a0) and (n, a1) at the budget, rounded down, in integers
            limit = n0 + ((budget - a0) * (n - n0)) // (a1 - a0)
            return {"measured": "interpolated", "measured_limit_tokens": limit,
                    "largest_fitted_tokens": n0, "smallest_unfitted_tokens": n}  # fmt: skip
    return {"measured": "budget above every peak", "measured_limit_tokens": None,
            "largest_fitted_tokens": sizes[-1], "smallest_unfitted_tokens": None}  # fmt: skip


# --------------------------------------------------------------------------- warmfit


def recommend_stdout(rows: Sequence[Row], budget: int, policy: str, *args: str) -> str:
    """``warmfit recommend`` of ``rows`` (written as a trace) under ``budget``: its stdout."""
    with tempfile.TemporaryDirectory() as folder:
        path = write_trace(readings_frame(list(rows)), Path(folder) / "t.parquet")
        command = ["recommend", str(path), "--budget", str(budget), "-p", policy, *args]
        result = CliRunner().invoke(app, command, env=ENV)
    assert result.exit_code == 0, result.output
    return result.stdout


def recommend_json(
    rows: Sequence[Row], budget: int, policy: str, *args: str
) -> list[dict[str, object]]:
    return json.loads(recommend_stdout(rows, budget, policy, "--format", "json", *args))["results"]


def check_admitted(
    got: object,
    ranks: dict[int, Rank],
    total: tuple[int, int],
    budget: int,
    safety: float = SAFETY,
) -> None:
    """``got`` is the largest size admitted on every rank that can price (brute force
    below :data:`SCAN` sizes; the two sizes around the answer beyond it)."""
    logical, packed = total
    # a rank can price when it has a profile or a floor (an estimate past int64 at one
    # token still prices: it admits nothing)
    pricing = {
        k: r for k, r in ranks.items()
        if r.profile.price(1, logical // packed) is not None or r.s is not None
    }  # fmt: skip
    if not pricing:
        assert got is None, f"no rank can price, yet {got!r} tokens admitted"
        return
    assert isinstance(got, int)

    def admitted_everywhere(n: int) -> bool:
        for r in pricing.values():
            est = r.estimate(n, logical, packed, safety)
            if est is None or est > budget:
                return False
        return True

    if got >= 1:
        assert admitted_everywhere(got), f"{got} tokens admitted but priced over the budget"
    if got < 2**40:
        assert not admitted_everywhere(got + 1), f"{got + 1} tokens also fit: not the largest"
    for n in range(1, min(got, SCAN) + 1):  # brute force: every smaller size fits too
        assert admitted_everywhere(n), f"{n} tokens refused below the admitted {got}"


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Row], int, str]:
    """A trace with no out-of-memory reading (their evidence is SPEC §9's, tested apart),
    a policy, and a budget: now and then exactly a size's estimate (the edge of
    admission), or exactly a measured wave's actual bytes, else any."""
    rows = draw(oracle_traces(max_waves=8))
    rows = [{**row, "oom": False} for row in rows]
    assume(rows)
    policy = draw(st.sampled_from(POLICIES))
    run_sig = draw(st.sampled_from(sorted({(str(r["run"]), str(r["signature"])) for r in rows})))
    ranks = ranks_after(rows, policy)[run_sig]
    logical, packed = sums(rows)[run_sig]
    edges = [
        est
        for r in ranks.values()
        for n in (1, 7, 100, 1000, 4096)
        if (est := r.estimate(n, logical, packed)) is not None
    ] + [max(0, int(r["peak_bytes"]) - int(r["baseline_bytes"])) for r in rows]
    budget = draw(
        st.sampled_from(edges) | st.integers(0, 2**40) if edges else st.integers(0, 2**40)
    )
    return rows, budget, policy


@settings(max_examples=examples(40))
@given(cases())
def test_recommend_is_the_brute_force_answer(case: tuple[list[Row], int, str]) -> None:
    rows, budget, policy = case
    results = recommend_json(rows, budget, policy)
    per_policy = ranks_after(rows, policy)
    totals = sums(rows)
    assert sorted((r["run"], r["signature"]) for r in results) == sorted(per_policy)
    for result in results:
        run, sig = str(result["run"]), str(result["signature"])
        where = f"run {run!r} signature {sig!r} {policy} budget {budget}"
        check_admitted(
            result["admitted_tokens"], per_policy[(run, sig)], totals[(run, sig)], budget
        )
        want = measured(rows, run, sig, budget)
        for key, value in want.items():
            assert result[key] == value, f"{where}: {key} {result[key]!r}, expected {value!r}"
        admitted, limit = result["admitted_tokens"], want["measured_limit_tokens"]
        if isinstance(admitted, int) and isinstance(limit, int):
            assert result["gap_tokens"] == limit - admitted, where
        else:
            assert result["gap_tokens"] is None, where
        fitted = want.get("largest_fitted_tokens")
        if want["measured"] in ("below an OOM", "budget above every peak") and isinstance(
            admitted, int
        ):  # every size up to the largest fitted fits: at least that many left unused
            assert isinstance(fitted, int), where
            unused = fitted - admitted
            assert result["gap_at_least_tokens"] == (unused if unused > 0 else None), where


def test_a_size_priced_exactly_at_the_budget_is_admitted() -> None:
    """One whole reading of 100 tokens at 1,000 bytes a token (100,000 bytes above a
    zero baseline, no outputs): max-merge prices n tokens at int(1000 n * 1.1) = 1100 n.
    At a budget of 110,000 bytes exactly, 100 tokens are priced 110,000 <= 110,000
    (admitted) and 101 at 111,100 (refused): 100. A byte less, 99."""
    rows: list[Row] = [
        dict(run="r", rank=0, seq=0, step=None, wave=0, signature="s", kind="flat",
             phase="caller", whole=True, packed_tokens=100, logical_tokens=100,
             output_bytes=0, baseline_bytes=0, peak_bytes=100_000,
             static_floor_bytes=None, oom=False),
    ]  # fmt: skip
    (at,) = recommend_json(rows, 110_000, "max-merge")
    assert at["admitted_tokens"] == 100 and at["estimate_bytes"] == 110_000
    (below,) = recommend_json(rows, 109_999, "max-merge")
    assert below["admitted_tokens"] == 99 and below["estimate_bytes"] == 108_900


@pytest.mark.parametrize("policy", POLICIES)
def test_every_rank_must_fit(policy: str) -> None:
    """Two ranks of one run: rank 0 learned 1,000 bytes a token, rank 1 2,000. Under
    220,000 bytes (safety 1.1), rank 0 admits 200 tokens and rank 1 100: the run admits
    100, set by rank 1."""
    rows: list[Row] = [
        dict(run="r", rank=rank, seq=0, step=None, wave=0, signature="s", kind="flat",
             phase="caller", whole=True, packed_tokens=100, logical_tokens=100,
             output_bytes=0, baseline_bytes=0, peak_bytes=rate * 100,
             static_floor_bytes=None, oom=False)
        for rank, rate in ((0, 1000), (1, 2000))
    ]  # fmt: skip
    (result,) = recommend_json(rows, 220_000, policy)
    assert result["admitted_tokens"] == 100 and result["rank"] == 1 and result["ranks"] == 2


def test_the_measured_limit_is_the_line_between_the_sizes_rounded_down() -> None:
    """Whole waves of 100 and 200 tokens at 1,000 and 2,000 bytes. A budget of 1,499
    bytes lies between them: 100 + (1,499 - 1,000) * (200 - 100) // (2,000 - 1,000)
    = 100 + 49,900 // 1,000 = 149 tokens (149.9 rounded down); at 1,500, 150."""
    rows: list[Row] = [
        dict(run="r", rank=0, seq=i, step=None, wave=i, signature="s", kind="flat",
             phase="caller", whole=True, packed_tokens=n, logical_tokens=n,
             output_bytes=0, baseline_bytes=0, peak_bytes=peak,
             static_floor_bytes=None, oom=False)
        for i, (n, peak) in enumerate([(100, 1000), (200, 2000)])
    ]  # fmt: skip
    for budget, limit in ((1499, 149), (1500, 150), (1000, 100), (1999, 199)):
        (result,) = recommend_json(rows, budget, "max-merge")
        assert result["measured"] == "interpolated"
        assert result["measured_limit_tokens"] == limit, budget
        assert result["largest_fitted_tokens"] == 100 and result["smallest_unfitted_tokens"] == 200


# --- issue 38, tests by pattern (s5) ---
#
# The property above draws one (run, signature) to put the budget's edges on, keeps every
# wave fitting (no OOM reading) and its ranks apart. The one below varies every deciding
# input of a result jointly, on small traces of whole flat waves: several runs and
# signatures, ranks that are copies of one another (ties: the lowest rank names the
# result) or pay other rates and share prefixes differently (the run's sharing L / P is
# pooled over its ranks, so a rank's own sharing is not it), output bytes and floors
# varying by wave (the LAST wave's count, by trace order: wave ids are shuffled), OOM
# waves at, just under and just over the largest measured size, and budgets exactly at a
# measured peak, a byte either side, or exactly a size's estimate. It checks the JSON's
# fields and every cell of the markdown table, word for word, against the oracle.

CAP = 2**40  # SEARCH_CAP_TOKENS: the search's largest size ("no limit")


def expected_cells(result: dict[str, object], want: dict[str, object]) -> list[str]:
    """The admitted, measured-limit, gap and note cells spec-notes 23 describes, from the
    oracle's measured limit (``want``) and the admitted tokens (checked apart)."""
    admitted, how = result["admitted_tokens"], want["measured"]
    fitted, unfitted = want.get("largest_fitted_tokens"), want.get("smallest_unfitted_tokens")
    limit = want["measured_limit_tokens"]
    if admitted is None:
        first = "no profile"
    elif admitted == CAP:
        first = "no limit"
    else:
        first = f"{admitted:,}"
    measured_cell = {
        "interpolated": f"{limit:,}" if isinstance(limit, int) else "",
        "budget above every peak": f"not measured (all fit, up to {fitted:,})"
        if isinstance(fitted, int)
        else "",
        "budget below every peak": "not measured (none fit)",
        "below an OOM": f"between {fitted:,} and {unfitted - 1:,} (OOM at {unfitted:,})"
        if isinstance(fitted, int) and isinstance(unfitted, int)
        else "",
        "no measured wave": "not measured (no wave)",
    }[str(how)]
    gap, note = "—", ""
    if isinstance(admitted, int):
        least = fitted - admitted if isinstance(fitted, int) else 0
        if how == "below an OOM" and isinstance(unfitted, int):
            at_most = unfitted - 1 - admitted
            gap = f"{least:+,} to {at_most:+,}" if least > 0 else f"at most {at_most:+,}"
        elif how == "budget above every peak" and least > 0:
            gap = f"at least {least:+,}"
        elif isinstance(limit, int):
            gap = f"{limit - admitted:+,} ({(limit - admitted) / limit * 100:+.1f}%)"
        if isinstance(unfitted, int) and admitted >= unfitted:
            note = "OOM risk: admits a size " + (
                "that ran out of memory" if how == "below an OOM" else "measured not to fit"
            )
        elif isinstance(limit, int) and admitted > limit:
            note = "OOM risk: admits more than fitted"
        elif how == "budget above every peak" and isinstance(fitted, int) and admitted > fitted:
            note = "beyond every size measured"
    return [first, measured_cell, gap, note]


def setting_rank(
    got: object, ranks: dict[int, Rank], total: tuple[int, int], budget: int, safety: float
) -> int | None:
    """The lowest rank whose own largest admitted size is ``got`` (the smallest over the
    ranks that can price): admitted at ``got`` and, below the cap, not at ``got + 1``."""
    if not isinstance(got, int):
        return None
    logical, packed = total

    def fits(r: Rank, n: int) -> bool:
        est = r.estimate(n, logical, packed, safety)
        return n == 0 or (est is not None and est <= budget)

    pricing = [
        k for k in sorted(ranks)
        if ranks[k].profile.price(1, logical // packed) is not None or ranks[k].s is not None
    ]  # fmt: skip
    setting = [
        k for k in pricing if fits(ranks[k], got) and (got >= CAP or not fits(ranks[k], got + 1))
    ]
    assert setting, f"no rank's own largest admitted size is {got}"
    return setting[0]


@st.composite
def joint_traces(draw: st.DrawFn) -> list[Row]:
    """Whole flat waves (one caller reading each) of 1-2 runs, 1-2 signatures, 1-3 ranks
    (a rank now and then a copy of rank 0: the same profile, a tie), per-wave outputs,
    floors and sharing, wave ids shuffled, and OOM waves near the largest measured size."""
    rows: list[Row] = []
    for run in draw(st.sampled_from([["A"], ["A", "B"]])):
        sigs = draw(st.sampled_from([["s"], ["s", "t"], ["t", "s"]]))
        fixed = {sig: draw(st.sampled_from([0, 4096, 100_000])) for sig in sigs}
        sizes = {sig: draw(st.lists(st.sampled_from([50, 64, 100, 128, 200]), min_size=1,
                                    max_size=3, unique=True)) for sig in sigs}  # fmt: skip
        streams: list[list[Row]] = []
        for rank in range(draw(st.integers(1, 3))):
            if streams and draw(st.booleans()):  # a copy of rank 0: the same profile
                streams.append([{**row, "rank": rank} for row in streams[0]])
                continue
            rate = draw(st.sampled_from([100, 1000, 1500]))
            waves: list[Row] = []
            for _ in range(draw(st.integers(1, 4))):
                sig = draw(st.sampled_from(sigs))
                n = draw(st.sampled_from(sizes[sig]))
                o = draw(st.sampled_from([0, 0, 1000, 4096]) | st.integers(0, 50_000))
                waves.append(dict(
                    signature=sig, packed_tokens=n,
                    logical_tokens=n * draw(st.sampled_from([1, 1, 2, 3])), output_bytes=o,
                    static_floor_bytes=draw(st.sampled_from([None, None, None, 0, 50_000])),
                    phase="caller", whole=True, oom=False,
                    peak_bytes=o + fixed[sig] + rate * n + draw(st.sampled_from([0, 0, 7])),
                ))  # fmt: skip
            largest = max(w["packed_tokens"] for w in waves)
            for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):  # OOM waves around it
                n = max(1, largest + draw(st.sampled_from([0, 1, -1, largest, -largest // 2])))
                at = draw(st.integers(0, len(waves)))
                waves.insert(at, dict(
                    signature=draw(st.sampled_from(sigs)), packed_tokens=n, logical_tokens=n,
                    output_bytes=draw(st.sampled_from([0, 2048])), static_floor_bytes=None,
                    phase="forward", whole=False, oom=True, peak_bytes=10**9,
                ))  # fmt: skip
            ids = draw(st.permutations(range(len(waves))))
            streams.append([
                {**w, "run": run, "rank": rank, "seq": i, "step": None, "wave": ids[i],
                 "kind": "flat", "baseline_bytes": 0}
                for i, w in enumerate(waves)
            ])  # fmt: skip
        rows += [row for stream in streams for row in stream]
    return rows


@st.composite
def joint_cases(draw: st.DrawFn) -> tuple[list[Row], int, str, float]:
    rows = draw(joint_traces())
    policy = draw(st.sampled_from(POLICIES))
    safety = draw(st.sampled_from([SAFETY, SAFETY, 1.0, 0.5, 1.25]))
    peaks = [int(r["peak_bytes"]) for r in rows if not r["oom"]]
    estimates = [
        est
        for key, ranks in ranks_after(rows, policy).items()
        for r in ranks.values()
        for n in {int(row["packed_tokens"]) for row in rows} | {1}
        if (est := r.estimate(n, *sums(rows)[key], safety)) is not None
    ]
    budget = draw(
        st.sampled_from(peaks).flatmap(lambda p: st.sampled_from([p - 1, p, p + 1]))
        | st.sampled_from(estimates or [0])
        | st.integers(0, 10**6)
    )
    return rows, budget, policy, safety


@settings(max_examples=examples(40))
@given(joint_cases())
def test_recommend_varies_every_deciding_input_jointly(
    case: tuple[list[Row], int, str, float],
) -> None:
    rows, budget, policy, safety = case
    results = recommend_json(rows, budget, policy, "--safety", str(safety))
    per_policy = ranks_after(rows, policy)
    totals = sums(rows)
    assert sorted((r["run"], r["signature"]) for r in results) == sorted(per_policy)
    lines = recommend_stdout(
        rows, budget, policy, "-f", "markdown", "--safety", str(safety)
    ).splitlines()
    assert f"safety factor {safety:g})" in lines[-1]
    for i, result in enumerate(results):
        run, sig = str(result["run"]), str(result["signature"])
        where = f"run {run!r} signature {sig!r} {policy} budget {budget} safety {safety}"
        ranks, (logical, packed) = per_policy[(run, sig)], totals[(run, sig)]
        got = result["admitted_tokens"]
        check_admitted(got, ranks, (logical, packed), budget, safety)
        assert result["ranks"] == len(ranks), where
        rank = setting_rank(got, ranks, (logical, packed), budget, safety)
        assert result["rank"] == rank, where
        if rank is not None:
            assert (result["output_bytes"], result["static_floor_bytes"]) == (
                ranks[rank].o, ranks[rank].s
            ), where  # fmt: skip
            assert result["admitted_logical_tokens"] == got * logical // packed, where
        assert result["sharing"] == logical / packed, where
        want = measured(rows, run, sig, budget)
        for key, value in want.items():
            assert result[key] == value, f"{where}: {key} {result[key]!r}, expected {value!r}"
        cells = [run or "", sig, policy, *expected_cells(result, want)]
        assert lines[2 + i] == "| " + " | ".join(cells) + " |", where


@settings(max_examples=examples(300))
@given(
    st.lists(st.tuples(st.sampled_from([1, 50, 100, 300]), st.sampled_from([0, 999, 1_000, 1_001, 3_000])), max_size=6),
    st.lists(st.sampled_from([1, 50, 100, 300]) | st.sampled_from([2, 49, 99, 101, 299, 301]), max_size=3),
    st.sampled_from([0, 999, 1_000, 1_001, 2_999, 3_000, 3_001]),
)  # fmt: skip
def test_measured_limit_on_its_edges_is_the_oracles(
    points: list[tuple[int, int]], ooms: list[int], budget: int
) -> None:
    """:func:`measured_limit` called directly, with repeated sizes in any order, peaks and
    budgets on a few values (a peak at the budget, a byte either side), OOM sizes at,
    below and above the measured ones: the oracle's :func:`measured` of the same waves."""
    from warmfit.report.recommend import measured_limit

    waves = [(n, peak, False) for n, peak in points] + [(n, 0, True) for n in ooms]
    rows: list[Row] = [
        dict(run="r", rank=0, seq=i, wave=i, signature="s", packed_tokens=n,
             baseline_bytes=0, peak_bytes=peak, oom=oom)
        for i, (n, peak, oom) in enumerate(waves)
    ]  # fmt: skip
    limit = measured_limit(points, budget, ooms)
    want = measured(rows, "r", "s", budget)
    got = {
        "measured": limit.measured,
        "measured_limit_tokens": limit.tokens,
        "largest_fitted_tokens": limit.largest_fitted,
        "smallest_unfitted_tokens": limit.smallest_unfitted,
    }
    assert {k: got[k] for k in want} == want
