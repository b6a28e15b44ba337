"""Generate large, valid warmfit traces for the replay benchmarks.

The trace is shaped like a fleet of real recordings, only bigger: ``runs``
runs of ``ranks`` ranks each; every rank cycles through ``signatures``
profiles (some with a static floor); waves of 1k-32k packed tokens with a
sharing ratio between 1 and 4 follow the warm model memory = fixed + rate *
tokens (plus jitter), and each signature's first wave pays a one-time cost.
Readings come as a training loop takes them:

- a ``flat`` wave has a ``forward`` reading and a whole ``caller`` reading;
  consecutive waves nest (forward i, forward i+1, caller i, caller i+1), so
  every second caller reading is not whole (its peak counter was reset);
- one wave in 8 is ``dp_rank_forward`` (one forward reading), one in 8 is a
  ``split_child`` (forward and an interrupted caller phase);
- one reading in 1000 runs out of memory.

Everything is drawn from a seeded numpy generator, so a given size and seed
always give the same trace. Files: one Parquet file per run (trace format v1,
written with :func:`warmfit.format.trace.write_trace`), rows in (rank, seq) order;
or, with ``--layout interleaved``, one file whose rows alternate between the runs
row by row (each run's rows still in (rank, seq) order: every row group then
holds every run), as a collector that appends readings as they arrive writes.

    python benchmarks/generate.py bench-results/traces/1e6 --readings 1000000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

from warmfit.format.trace import write_trace

KINDS = np.array(["flat", "split_child", "dp_rank_forward"])


def generate(
    readings: int, runs: int = 4, ranks: int = 8, signatures: int = 6, seed: int = 0
) -> pl.DataFrame:
    """About ``readings`` readings (exactly, give or take one wave per stream) as one frame."""
    rng = np.random.default_rng(seed)
    streams = runs * ranks
    # A flat or split wave has two readings, a forward-only wave one: 15/8 on average.
    waves_per_stream = max(1, round(readings / streams / (15 / 8)))
    w = streams * waves_per_stream
    stream = np.repeat(np.arange(streams), waves_per_stream)
    index_in_stream = np.tile(np.arange(waves_per_stream), streams)
    kind = rng.choice(3, size=w, p=[6 / 8, 1 / 8, 1 / 8])
    signature = rng.integers(0, signatures, size=w)
    n = rng.integers(1_000, 32_768, size=w)
    sharing = rng.uniform(1.0, 4.0, size=w)
    m = np.maximum(n, (n * sharing).astype(np.int64))
    output = n * 8
    fixed = (1 + signature) * 2_000_000_000
    per_token = 150_000 + 20_000 * signature
    jitter = rng.uniform(0.97, 1.03, size=w)
    cold = np.zeros(w, dtype=bool)
    first = np.unique(stream * signatures + signature, return_index=True)[1]
    cold[first] = True
    caller_peak = ((fixed + per_token * n) * jitter * np.where(cold, 1.25, 1.0)).astype(np.int64)
    floor = np.where(signature % 3 == 0, (n * 120_000).astype(np.int64), -1)

    # Readings: forward (always) and caller (unless forward-only).
    count = np.where(kind == 2, 1, 2)
    wave_of = np.repeat(np.arange(w), count)
    is_caller = np.zeros(len(wave_of), dtype=bool)
    is_caller[np.cumsum(count)[count == 2] - 1] = True
    r = len(wave_of)
    baseline = 60_000_000_000 + rng.integers(0, 1_000_000, size=r)
    peak_over = np.where(
        is_caller, caller_peak[wave_of], (caller_peak[wave_of] * 0.42).astype(np.int64)
    )
    # Nested waves: forward i, forward i+1, caller i, caller i+1, ...
    order_key = 2 * index_in_stream[wave_of] + np.where(is_caller, 3, 0)
    order = np.lexsort((is_caller, order_key, stream[wave_of]))
    wave_of, is_caller, baseline, peak_over = (
        wave_of[order],
        is_caller[order],
        baseline[order],
        peak_over[order],
    )
    s = stream[wave_of]
    seq = np.arange(r) - np.searchsorted(s, s)
    # The caller of a wave whose next wave's forward came between is not whole.
    interrupted = (index_in_stream[wave_of] % 2 == 0) | (kind[wave_of] == 1)
    whole = is_caller & ~interrupted
    oom = rng.random(r) < 0.001
    floor_r = floor[wave_of]
    frame = pl.DataFrame(
        {
            "run": pl.Series(np.array([f"run{i}" for i in range(runs)])[s // ranks]),
            "rank": (s % ranks).astype(np.int32),
            "seq": seq,
            "step": index_in_stream[wave_of] // 64,
            "wave": index_in_stream[wave_of] * 10 + 7,
            "signature": pl.Series(
                np.array([f"model/L40/cp2/mix{i}" for i in range(signatures)])[signature[wave_of]]
            ),
            "kind": pl.Series(KINDS[kind[wave_of]]),
            "phase": pl.Series(np.where(is_caller, "caller", "forward")),
            "whole": whole,
            "packed_tokens": n[wave_of],
            "logical_tokens": m[wave_of],
            "output_bytes": output[wave_of],
            "baseline_bytes": baseline,
            "peak_bytes": baseline + peak_over,
            "static_floor_bytes": floor_r,
            "oom": oom,
        }
    )
    # -1 marks "no floor": make it null.
    floor_col = pl.col("static_floor_bytes")
    return frame.with_columns(pl.when(floor_col >= 0).then(floor_col).alias("static_floor_bytes"))


def write(frame: pl.DataFrame, directory: Path) -> list[Path]:
    """Write one v1 trace file per run into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_trace(part, directory / f"{run}.parquet")
        for (run,), part in frame.partition_by("run", as_dict=True, maintain_order=True).items()
    ]


def interleave(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``frame`` alternating between its runs (in order of first
    appearance), one row of each in turn; each run's own rows keep their order."""
    runs = frame.get_column("run").unique(maintain_order=True)
    turn = pl.col("run").replace_strict(runs, list(range(len(runs))), return_dtype=pl.Int64)
    return (
        frame.with_columns(_at=pl.int_range(pl.len()).over("run"), _turn=turn)
        .sort("_at", "_turn", maintain_order=True)
        .drop("_at", "_turn")
    )


def write_interleaved(frame: pl.DataFrame, directory: Path) -> list[Path]:
    """Write one v1 trace file into ``directory``, its rows alternating between the runs."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_trace(interleave(frame), directory / "interleaved.parquet")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where to write the trace (one file per run)")
    parser.add_argument("--readings", type=float, default=1e6, help="about how many readings")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=8, help="ranks per run")
    parser.add_argument("--signatures", type=int, default=6, help="signatures per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--run-by-run",
        action="store_true",
        help="generate and write one run at a time (run i seeded seed + i), so a trace "
        "larger than memory (1e8 readings) can be made",
    )
    parser.add_argument(
        "--layout",
        choices=["blocked", "interleaved"],
        default="blocked",
        help="blocked: one file per run; interleaved: one file, rows alternating between the runs",
    )
    args = parser.parse_args(argv)
    if args.run_by_run and args.layout != "blocked":
        parser.error("--run-by-run writes one file per run: the blocked layout")
    if args.run_by_run:
        total = files = 0
        for i in range(args.runs):
            frame = generate(
                int(args.readings) // args.runs, 1, args.ranks, args.signatures, args.seed + i
            ).with_columns(run=pl.lit(f"run{i:04d}"))
            total += frame.height
            files += len(write(frame, args.directory))
            del frame
        print(f"{total:,} readings in {files} files under {args.directory}")
        return 0
    frame = generate(int(args.readings), args.runs, args.ranks, args.signatures, args.seed)
    writer = write_interleaved if args.layout == "interleaved" else write
    files_written = writer(frame, args.directory)
    print(f"{frame.height:,} readings in {len(files_written)} files under {args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
