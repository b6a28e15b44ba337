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
    three times as many under ``ci`` (``make test``), see tests/conftest.py."""
    return max(1, count * settings.default.max_examples // 100)
