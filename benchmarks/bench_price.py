"""What pricing in the trainer costs: ``Pricer.price`` per call, beside the recorder's cost.

    python benchmarks/bench_price.py [--waves N]      (make bench runs it)

1. **price**: a :class:`warmfit.Pricer` of each built-in policy is warmed on
   40 whole readings (4 signatures of mixed sizes), then ``price(signature,
   n)`` is timed over a cycle of 64 sizes (measured ones, sizes between them
   and beyond them, with outputs and logical tokens): the best of 7 runs of
   200,000 calls, per call. Target: 5 µs.
2. **observe_row**: one reading taught to the same Pricer (a row as the
   recorder writes it), per call.
3. **the recorder, per reading**: ``benchmarks/bench_record.py``'s figure
   (its bookkeeping above the bare meter calls, with the CPU meter, wall
   time), then the same loop in CPU time without and with
   ``Recorder(pricer=...)`` (warm-fit): one ``price`` per wave and one
   ``observe_row`` per reading added.

The Pricer's figures are this process's CPU time (``time.process_time``),
not wall time: on a shared machine the load of other processes inflates
wall time several times over.

Prints a table and writes ``bench-results/bench_price.json`` (the latest run)
and one file per run, kept, under ``benchmarks/results/``
(``<UTC time>-<short commit>-price.json``; ``benchmarks/runinfo.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # so that runinfo is found however this runs
import bench_record  # noqa: E402  (the recorder's per-reading figure, measured as it measures it)
from runinfo import write_run  # noqa: E402  (one JSON file per run, benchmarks/results/)

POLICIES = ("max-merge", "warm-fit", "warm-affine", "envelope")
CALLS = 200_000
REPEATS = 7
TARGET_PRICE_US = 5.0


def _row(signature: str, n: int, peak: int, **extra: Any) -> dict[str, Any]:
    return {
        "run": "bench", "rank": 0, "seq": 0, "step": 0, "wave": 0, "signature": signature,
        "kind": "flat", "phase": "caller", "whole": True, "packed_tokens": n,
        "logical_tokens": n, "output_bytes": 4_096, "baseline_bytes": 1_000_000,
        "peak_bytes": peak, "static_floor_bytes": None, "oom": False, **extra,
    }  # fmt: skip


def _warm(policy: str) -> Any:
    from warmfit import Pricer

    pricer = Pricer(policy)
    for i in range(40):
        n = 512 * (1 + (i * 7) % 10)
        pricer.observe_row(_row(f"sig{i % 4}", n, 1_000_000 + 4_096 + 600 * n + 50_000 * (i % 3)))
    return pricer


def _per_call(run: Any, calls: int) -> float:
    """µs of this process's CPU time per call, the best of :data:`REPEATS` runs (CPU time,
    not wall time: on a shared machine other processes' load inflates wall time)."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.process_time()
        run(calls)
        best = min(best, time.process_time() - started)
    return best / calls * 1e6


def bench_price(policy: str) -> dict[str, float]:
    pricer = _warm(policy)
    price = pricer.price
    # measured sizes, sizes between and beyond them, some with sharing and outputs
    asks = [
        (f"sig{k % 4}", 256 * (1 + k % 24), 256 * (1 + k % 24) * (1 + k % 3), 4_096 * (k % 2))
        for k in range(64)
    ]
    assert all(price(s, n, m, output_bytes=o) is not None for s, n, m, o in asks)

    def prices(calls: int) -> None:
        for i in range(calls):
            s, n, m, o = asks[i & 63]
            price(s, n, m, output_bytes=o)

    def loop_only(calls: int) -> None:  # the loop and the unpacking, without the call
        for i in range(calls):
            _s, _n, _m, _o = asks[i & 63]

    observe = pricer.observe_row
    rows = [_row(s, n, 1_000_000 + 600 * n) for s, n, _, _ in asks]

    def observes(calls: int) -> None:
        for i in range(calls):
            observe(rows[i & 63])

    floor = _per_call(loop_only, CALLS)
    return {
        "price_us": _per_call(prices, CALLS) - floor,
        "observe_row_us": _per_call(observes, CALLS // 4) - floor,
    }


def bench_recorder_cpu(tmp: Path, waves: int, priced: bool) -> float:
    """CPU µs per reading of bench_record's loop (enter, forward_done, exit) with the CPU
    meter, with or without a warm-fit Pricer, above the same meter calls made bare."""
    from warmfit import Pricer
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import CpuMeter

    meter = CpuMeter()
    allocated, reset, peak = meter.allocated_bytes, meter.reset_peak, meter.peak_bytes

    def bare(count: int) -> None:
        for _ in range(count):
            allocated()
            reset()
            peak()
            peak()

    floor = _per_call(bare, waves) / 2
    timings = []
    for attempt in range(3):
        rec = Recorder(
            tmp / f"{'priced' if priced else 'plain'}-{attempt}", run="bench", meter=meter,
            flush_interval_s=3600, pricer=Pricer("warm-fit") if priced else None,
        )  # fmt: skip
        wave = rec.wave
        started = time.process_time()
        for _ in range(waves):
            with wave("sig", 512, 2048, 4096) as w:
                w.forward_done()
        timings.append(time.process_time() - started)
        rec._rows.clear()  # the loop is measured, not the final compaction
        rec.close()
    meter.close()
    return min(timings) / waves / 2 * 1e6 - floor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waves", type=int, default=bench_record.WAVES,
                        help="waves the recorder figures time (default %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    bench_record.WAVES = args.waves
    figures: dict[str, Any] = {}
    for policy in POLICIES:
        for key, value in bench_price(policy).items():
            figures[f"{key}_{policy}"] = value
    with tempfile.TemporaryDirectory() as tmp:
        recorder = bench_record.bench_per_reading(Path(tmp))
        plain_cpu = bench_recorder_cpu(Path(tmp), args.waves, priced=False)
        priced_cpu = bench_recorder_cpu(Path(tmp), args.waves, priced=True)
    floor = recorder["floor_us_per_reading"]
    figures["recorder_overhead_us_per_reading"] = recorder["overhead_us_per_reading_no_flush"]
    figures["meter_floor_us_per_reading"] = floor
    figures["recorder_cpu_us_per_reading"] = plain_cpu
    figures["recorder_with_pricer_cpu_us_per_reading"] = priced_cpu

    machine = f"{platform.machine()}, Python {platform.python_version()}"
    print(f"warmfit pricing in the trainer ({machine})")
    print(f"{'measure':<56} {'µs':>8} {'target':>8}")
    print("-" * 74)
    for policy in POLICIES:
        label = f"Pricer.price, {policy} (CPU per call)"
        print(f"{label:<56} {figures[f'price_us_{policy}']:>8.2f} {TARGET_PRICE_US:>8.1f}")
    for policy in POLICIES:
        label = f"Pricer.observe_row, {policy} (CPU per reading)"
        print(f"{label:<56} {figures[f'observe_row_us_{policy}']:>8.2f}")
    target = f"{bench_record.TARGET_US_PER_READING:>8.1f}"
    rows = (
        ("recorder per reading, bench_record.py (wall)", "recorder_overhead_us_per_reading", target),
        ("recorder per reading, the same loop (CPU)", "recorder_cpu_us_per_reading", ""),
        ("recorder per reading, a warm-fit Pricer (CPU)", "recorder_with_pricer_cpu_us_per_reading", ""),
    )  # fmt: skip
    for label, key, goal in rows:
        print(f"{label:<56} {figures[key]:>8.2f} {goal}")
    print(
        f"recorder: its bookkeeping above the bare CPU meter calls ({floor:.2f} µs a reading); "
        "a pricer adds one price a wave and one observe_row a reading"
    )

    out = ROOT / "bench-results"
    out.mkdir(exist_ok=True)
    report = {
        "schema": "warmfit.bench_price/1",
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "calls_timed": CALLS,
        "waves_timed": args.waves,
        **figures,
        "targets": {"price_us": TARGET_PRICE_US},
    }
    (out / "bench_price.json").write_text(json.dumps(report, indent=2) + "\n")
    figures_kept = {k: v for k, v in report.items() if k not in ("schema", "machine", "python")}
    kept = write_run("price", {"waves": args.waves}, figures_kept)
    print(f"wrote {out.relative_to(ROOT) / 'bench_price.json'} and {kept.relative_to(ROOT)}")
    worst = max(figures[f"price_us_{p}"] for p in POLICIES)
    return 0 if worst <= TARGET_PRICE_US else 1


if __name__ == "__main__":
    sys.exit(main())
