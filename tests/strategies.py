"""Hypothesis strategies: the one place that builds generated readings and traces.

Every property test draws from here, so that what "a valid history" or "a
valid trace" means is written once.
"""

from __future__ import annotations

import itertools

import polars as pl
from hypothesis import settings
from hypothesis import strategies as st

from warmfit.format.schema import KINDS
from warmfit.format.trace import readings_frame
from warmfit.policies import PriceRequest, Reading

#: Token counts: small enough to be fast, large enough to reach real shapes.
tokens = st.integers(min_value=1, max_value=200_000)
byte_counts = st.integers(min_value=0, max_value=2**40)


@st.composite
def readings(draw: st.DrawFn, whole: bool | None = None) -> Reading:
    """One policy-level reading: any kind, phase, sharing, outputs and delta,
    as replay feeds them (only a flat wave's caller reading may be whole)."""
    n = draw(tokens)
    m = draw(st.integers(min_value=n, max_value=n * 8))
    phase = draw(st.sampled_from(["forward", "caller"]))
    is_whole = (phase == "caller" and draw(st.booleans())) if whole is None else whole
    # only a flat wave's caller reading may be whole (SPEC §1)
    kind = "flat" if is_whole else draw(st.sampled_from(KINDS))
    if is_whole:
        phase = "caller"
    return Reading(
        packed_tokens=n,
        logical_tokens=m,
        delta_bytes=draw(byte_counts),
        output_bytes=draw(st.integers(min_value=0, max_value=2**30)),
        whole=is_whole,
        phase=phase,
        kind=kind,
        static_floor_bytes=draw(st.none() | byte_counts),
    )


histories = st.lists(readings(), max_size=12)


@st.composite
def requests(draw: st.DrawFn) -> PriceRequest:
    """A wave to price."""
    n = draw(tokens)
    return PriceRequest(
        packed_tokens=n,
        logical_tokens=draw(st.integers(min_value=n, max_value=n * 8)),
        output_bytes=draw(st.integers(min_value=0, max_value=2**30)),
        kind=draw(st.sampled_from(KINDS)),
        static_floor_bytes=draw(st.none() | byte_counts),
    )


# --------------------------------------------------------------------------- traces
#
# Valid v1 traces with everything the format allows: several runs, ranks and
# signatures; waves nested and interleaved within a rank; flat, split-child and
# forward-only waves; interrupted caller phases (caller readings that are not
# whole); out-of-memory readings; floors and outputs; deep sharing; peaks below
# baseline; wave ids and seq numbers that are neither dense nor ordered alike;
# rows in any order, split across any number of files.

#: Token counts for traces: few distinct values, so that ties (equal rates,
#: equal warm tokens) are common, plus the occasional large one.
trace_tokens = st.sampled_from([1, 2, 3, 7, 64, 100, 4096]) | st.integers(1, 300_000)
#: Byte counts for traces: zeros, small values that tie, and up to 1 TiB.
trace_bytes = st.sampled_from([0, 1, 1000, 65_536]) | st.integers(0, 2**40)
run_names = st.sampled_from(["run", "ep1", "ep2/cp2", "", "ünïcode run"])
signature_names = st.sampled_from(["sig", "qwen/L40/cp2", "other", "s:3"])


@st.composite
def _wave(draw: st.DrawFn, signatures: list[str]) -> dict[str, object]:
    """One wave: its constants and the readings taken on it."""
    n = draw(trace_tokens)
    kind = draw(st.sampled_from(KINDS))
    wave: dict[str, object] = {
        "signature": draw(st.sampled_from(signatures)),
        "kind": kind,
        "packed_tokens": n,
        # from no sharing up to deep sharing (64x)
        "logical_tokens": draw(st.just(n) | st.integers(n, n * 64)),
        "output_bytes": draw(st.just(0) | trace_bytes),
        "static_floor_bytes": draw(st.none() | trace_bytes),
    }
    if kind == "dp_rank_forward":
        phases = ["forward"]
    else:
        phases = draw(
            st.sampled_from(
                [["forward", "caller"], ["caller"], ["forward"], ["forward", "caller", "caller"]]
            )
        )
    readings = []
    for phase in phases:
        baseline = draw(trace_bytes)
        # a peak above the baseline most often; below it (delta 0) now and then
        peak = draw(st.integers(baseline, baseline + 2**36) | trace_bytes)
        readings.append(
            {
                "phase": phase,
                # a caller reading that is not whole is an interrupted caller phase;
                # only a flat wave's caller reading may be whole (SPEC §1)
                "whole": phase == "caller"
                and kind == "flat"
                and draw(st.booleans() | st.just(True)),
                "baseline_bytes": baseline,
                "peak_bytes": peak,
                "oom": draw(st.booleans()) if draw(st.integers(0, 9)) == 0 else False,
            }
        )
    wave["readings"] = readings
    return wave


@st.composite
def _stream(draw: st.DrawFn, run: str, rank: int, max_waves: int) -> list[dict[str, object]]:
    """The readings of one (run, rank) stream, in seq order, waves interleaved."""
    signatures = draw(st.lists(signature_names, min_size=1, max_size=3, unique=True))
    waves = draw(st.lists(_wave(signatures), max_size=max_waves))
    ids = draw(
        st.lists(
            st.integers(-(2**40), 2**40), min_size=len(waves), max_size=len(waves), unique=True
        )
    )
    # Each reading gets a time: a wave starts at some time and its readings
    # follow; sorting by time nests and interleaves waves.
    timed = []
    for w, (wave, wave_id) in enumerate(zip(waves, ids, strict=True)):
        t = draw(st.integers(0, 2 * len(waves)))
        wave_readings: list[dict[str, object]] = wave["readings"]  # type: ignore[assignment]
        for r, reading in enumerate(wave_readings):
            t += draw(st.integers(0, 3))
            constants = {k: v for k, v in wave.items() if k != "readings"}
            timed.append((t, w, r, {**constants, **reading, "wave": wave_id}))
    timed.sort(key=lambda x: x[:3])
    start = draw(st.integers(-5, 5))
    stride = draw(st.sampled_from([1, 1, 2, 7]))
    step = draw(st.none() | st.integers(0, 3))
    return [
        {**row, "run": run, "rank": rank, "seq": start + i * stride, "step": step}
        for i, (_, _, _, row) in enumerate(timed)
    ]


@st.composite
def traces(draw: st.DrawFn, max_waves: int = 12) -> pl.DataFrame:
    """A valid v1 trace as one frame of readings, rows in any order."""
    runs = draw(st.lists(run_names, min_size=1, max_size=3, unique=True))
    rows: list[dict[str, object]] = []
    for run in runs:
        ranks = draw(st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True))
        for rank in ranks:
            rows += draw(_stream(run, rank, max_waves))
    order = draw(st.permutations(range(len(rows))))
    return readings_frame([rows[i] for i in order])


@st.composite
def trace_parts(draw: st.DrawFn, max_waves: int = 12) -> list[pl.DataFrame]:
    """A valid trace split into the contents of one to four files (some may be empty)."""
    frame = draw(traces(max_waves))
    cuts = sorted(draw(st.lists(st.integers(0, frame.height), max_size=3)))
    bounds = [0, *cuts, frame.height]
    return [frame[a:b] for a, b in itertools.pairwise(bounds)]


def examples(count: int) -> int:
    """``count`` examples under the default profile, scaled by the profile loaded:
    twice as many under ``ci`` (``make test``), see tests/conftest.py."""
    return max(1, count * settings.default.max_examples // 100)


# --------------------------------------------------------------------------- oracle traces
#
# Traces for the independent oracle (tests/oracle.py, tests/test_oracle.py), as
# plain rows (dicts of the SPEC §2 columns), rows in any order. Memory is modelled
# per signature as a fixed cost plus a per-token rate (now and then a quadratic
# term), the first flat wave of a signature paying a cold extra, with noise, so
# that every policy's fit moves: warm-fit's seed and warm waves, warm-affine's
# anchor, slope and waves smaller than the anchor, envelope's points, chords and
# growth beyond them. And every case the figures single out: priced and unpriced
# out-of-memory waves, floors absent, zero, below and above the learned price,
# waves whose peak stays at or below the baseline (actual 0), profiles that price
# 0 bytes, split children with caller readings above their forward ones,
# forward-only calls, interrupted caller phases, waves interleaved, several runs,
# ranks and signatures.

#: Packed tokens: a few sizes that recur (so warm sizes repeat and tie), and any.
oracle_sizes = st.sampled_from([8, 16, 32, 50, 64, 100, 128, 200, 256, 400]) | st.integers(1, 5000)
_fixed_costs = st.sampled_from([0, 4096, 1_000_000]) | st.integers(0, 10**8)
_rates = st.sampled_from([0, 1, 100, 1000, 4096]) | st.integers(0, 100_000)
_baselines = st.sampled_from([0, 2**20]) | st.integers(0, 2**36)


@st.composite
def _oracle_stream(draw: st.DrawFn, run: str, rank: int, max_waves: int) -> list[dict[str, object]]:
    """One (run, rank) stream's readings, in seq order."""
    names = draw(st.permutations(["s", "t", "moe/L8", "ü"]))
    signatures = names[: draw(st.sampled_from([1, 1, 2, 3]))]
    models = {
        sig: (
            draw(_fixed_costs),
            draw(_rates),
            draw(st.sampled_from([0, 0, 1, 64, 1024])),  # bytes per token squared
            draw(st.sampled_from([0, 10**6]) | st.integers(0, 10**8)),  # a cold wave's extra
            # the sizes its waves come in: a few, so that sizes recur and waves come
            # smaller than the warm ones as often as larger
            draw(st.lists(oracle_sizes, min_size=3, max_size=5, unique=True)),
        )
        for sig in signatures
    }
    cold = set(signatures)
    count = draw(st.integers(0, max_waves) | st.integers(max_waves // 2, max_waves))
    ids = draw(st.permutations(range(count)))
    id_stride, id_start = draw(st.sampled_from([1, 3])), draw(st.integers(-3, 3))
    timed = []
    for w in range(count):
        sig = draw(st.sampled_from(signatures))
        fixed, rate, quad, extra, sizes = models[sig]
        kind = draw(st.sampled_from(["flat"] * 4 + ["split_child", "dp_rank_forward"]))
        n = draw(st.sampled_from(sizes))
        m = draw(st.sampled_from([n, n, n, 2 * n]) | st.integers(n, 8 * n))
        o = draw(st.sampled_from([0, 0, 4096]) | st.integers(0, 10**6))
        compute = fixed + rate * n + quad * n * n
        if kind == "flat" and sig in cold:
            cold.discard(sig)
            compute += extra
        compute = max(0, compute + draw(st.integers(-(compute // 8), compute // 8)))
        # no floor most often; else zero, below the compute, above it, or anywhere
        floor = draw(
            st.sampled_from([None, None, None, 0, compute // 2, 2 * compute + 1])
            | st.integers(0, 2 * compute + 1)
        )
        if kind == "flat":
            phases = draw(
                st.sampled_from(
                    [
                        ["forward", "caller"],
                        ["caller"],
                        ["forward"],
                        ["forward", "caller", "caller"],
                    ]
                )
            )
        elif kind == "split_child":
            phases = draw(st.sampled_from([["forward", "caller"], ["forward"]]))
        else:
            phases = ["forward"]
        zero = draw(st.integers(0, 7)) == 0  # every peak at or below its baseline
        oom_at = draw(st.integers(0, 11))  # the reading that ran out of memory, if any
        t = 2 * w + draw(st.sampled_from([0, 0, 0, 1, 3]))
        constants = {"signature": sig, "kind": kind, "packed_tokens": n, "logical_tokens": m,
                     "output_bytes": o, "static_floor_bytes": floor,
                     "wave": id_start + id_stride * ids[w]}  # fmt: skip
        for r, phase in enumerate(phases):
            baseline = draw(_baselines)
            if zero:
                peak = baseline - draw(st.integers(0, min(baseline, 4096)))
            elif phase == "forward":
                peak = baseline + o + compute * draw(st.sampled_from([1, 2, 3, 4])) // 4
            else:  # the caller's loss and backward on top of the forward
                peak = baseline + o + compute + draw(st.sampled_from([0, 0, 512]))
            reading = {
                "phase": phase,
                # an interrupted caller phase is not whole; only a flat wave's caller may be
                "whole": phase == "caller" and kind == "flat" and draw(st.integers(0, 3)) > 0,
                "baseline_bytes": baseline,
                "peak_bytes": peak,
                "oom": oom_at == r or (oom_at == 11 and r == len(phases) - 1),
            }
            t += draw(st.sampled_from([0, 1, 1, 2]))
            timed.append((t, w, r, {**constants, **reading}))
    timed.sort(key=lambda x: x[:3])  # waves now and then interleaved
    start, stride = draw(st.integers(-5, 5)), draw(st.sampled_from([1, 1, 2, 7]))
    return [
        {**row, "run": run, "rank": rank, "seq": start + i * stride, "step": None}
        for i, (_, _, _, row) in enumerate(timed)
    ]


@st.composite
def oracle_traces(draw: st.DrawFn, max_waves: int = 12) -> list[dict[str, object]]:
    """A valid v1 trace of modelled memory as plain rows (SPEC §2 columns), in any order."""
    runs = draw(
        st.lists(st.sampled_from(["A", "B", "ep2/cp2", ""]), min_size=1, max_size=3, unique=True)
    )
    rows: list[dict[str, object]] = []
    for run in runs:
        for rank in draw(st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True)):
            rows += draw(_oracle_stream(run, rank, max_waves))
    if draw(st.integers(0, 2)) == 0:  # SPEC §8: the prices the trainer used, now and then
        rows = [{**row, "estimate_bytes": draw(_recorded_prices(row))} for row in rows]
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


def _recorded_prices(row: dict[str, object]) -> st.SearchStrategy[int | None]:
    """A reading's ``estimate_bytes``: none most often (a wave's readings may disagree;
    the first non-null one counts), else near its delta (at it, a byte under, above),
    0, or any."""
    delta = max(0, int(row["peak_bytes"]) - int(row["baseline_bytes"]))  # type: ignore[call-overload]
    near = [delta, max(0, delta - 1), delta + 1, delta + delta // 10, delta - delta // 10]
    return st.sampled_from([None, None, None, 0]) | st.sampled_from(near) | st.integers(0, 2**40)
