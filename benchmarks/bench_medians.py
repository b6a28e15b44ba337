"""Exact medians in bounded memory: 1e8 float64 values, 48 groups, spilled to disk.

    .venv/bin/python benchmarks/bench_medians.py [--values N] [--batch N]
        [--groups N] [--spill-bytes N] [--check]

Adds ``--values`` standard-normal float64 values (times a per-group scale)
in batches of ``--batch``, each value to one of ``--groups`` groups, to a
:class:`warmfit.replay.medians.ExactMedians` with ``--spill-bytes`` (the
default spill unless given), then asks the middles once. Reports the time
to add (generating the batches excluded), the time of ``middles()``, the
runs and bytes on disk, the values still held in memory, and the process's
peak RSS (``ru_maxrss``: the generated batch is counted in it). ``--check``
compares with a full sort in memory afterwards (needs about 40 bytes a
value; for ``--values`` up to about 1e7). Not run by the tests.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

import numpy as np

from warmfit.replay.medians import DEFAULT_SPILL_BYTES, ExactMedians


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=float, default=1e8)
    parser.add_argument("--batch", type=float, default=1e6)
    parser.add_argument("--groups", type=int, default=48)
    parser.add_argument("--spill-bytes", type=int, default=DEFAULT_SPILL_BYTES)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    total, batch = int(args.values), int(args.batch)
    rng = np.random.default_rng(0)
    scale = rng.lognormal(0, 2, args.groups)
    print(
        f"{total:.3g} float64 values, batches of {batch:.3g}, {args.groups} groups, "
        f"spill_bytes {args.spill_bytes / 2**20:g} MiB; peak RSS at start {peak_rss_mib():.0f} MiB"
    )
    adding = 0.0
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    with ExactMedians(np.float64, spill_bytes=args.spill_bytes) as medians:
        for start in range(0, total, batch):
            n = min(batch, total - start)
            groups = rng.integers(0, args.groups, n)
            values = rng.standard_normal(n) * scale[groups]
            if args.check:
                kept.append((groups, values))
            began = time.perf_counter()
            medians.add(groups, values)
            adding += time.perf_counter() - began
        runs, held, directory = medians.runs, medians.held_bytes, medians.directory
        began = time.perf_counter()
        result = medians.middles()
        asking = time.perf_counter() - began
        disk = sum(f.stat().st_size for f in Path(directory).iterdir()) if directory else 0
    print(f"add:       {adding:7.2f} s  ({adding / total * 1e9:.0f} ns a value)")
    print(f"middles(): {asking:7.3f} s  over {runs} runs and {held / 2**20:.0f} MiB held")
    print(f"disk:      {disk / 2**20:7.0f} MiB")
    print(f"peak RSS:  {peak_rss_mib():7.0f} MiB")
    print(f"groups:    {result.codes.size}, counts {result.counts.min()}..{result.counts.max()}")
    if args.check:
        groups = np.concatenate([g for g, _ in kept])
        values = np.concatenate([v for _, v in kept])
        order = np.lexsort((values, groups))
        codes, starts = np.unique(groups[order], return_index=True)
        counts = np.diff(np.append(starts, groups.size))
        ordered = values[order]
        assert np.array_equal(result.codes, codes) and np.array_equal(result.counts, counts)
        assert np.array_equal(result.lower, ordered[starts + (counts - 1) // 2])
        assert np.array_equal(result.upper, ordered[starts + counts // 2])
        print("check:     the middles equal a full sort's")
    if os.environ.get("BENCH_PROFILE"):
        print(resource.getrusage(resource.RUSAGE_SELF))


if __name__ == "__main__":
    main()
