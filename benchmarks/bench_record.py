"""What recording costs: the recorder's bookkeeping per reading, and writing 1M readings.

    python benchmarks/bench_record.py          (or: make bench-record)

1. **Per reading.** A wave of the usual shape (enter, ``forward_done()``,
   exit: two readings) is timed with the recorder, and the same meter calls
   it makes (allocated, reset peak, peak, peak) are timed bare: the floor.
   The recorder's own cost is the difference, per reading. Measured with the
   real CPU meter (its calls are attribute reads, so the floor is the Python
   call overhead) and with no flush in the loop; a second row adds a
   ``step()`` (a flush to the log, fsynced) every 100 waves.
2. **1M readings.** One million reading tuples are appended to the
   write-ahead log in batches of 65,536 (fsynced), then compacted into
   Parquet; the target is under 5 s.

Prints a table and writes ``bench-results/bench_record.json`` (the latest run)
and one file per run, kept, under ``benchmarks/results/``
(``<UTC time>-<short commit>-record.json``; ``benchmarks/runinfo.py``).
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # so that runinfo is found however this runs
from runinfo import write_run  # noqa: E402  (one JSON file per run, benchmarks/results/)

WAVES = 100_000
MILLION = 1_000_000
TARGET_US_PER_READING = 10.0
TARGET_MILLION_S = 5.0


def _best_of(repeats: int, run) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def bench_per_reading(tmp: Path) -> dict[str, float]:
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import CpuMeter

    meter = CpuMeter()
    allocated, reset, peak = meter.allocated_bytes, meter.reset_peak, meter.peak_bytes

    def bare() -> None:
        for _ in range(WAVES):
            allocated()
            reset()
            peak()
            peak()

    floor_s = _best_of(5, bare)
    results = {"floor_us_per_reading": floor_s / WAVES / 2 * 1e6}

    for label, step_every in (("no_flush", 0), ("step_every_100_waves", 100)):
        timings = []
        for attempt in range(3):
            rec = Recorder(
                tmp / f"{label}-{attempt}", run="bench", meter=meter, flush_interval_s=3600
            )
            wave = rec.wave

            def recorded(rec: Recorder = rec, wave=wave, step_every: int = step_every) -> None:  # type: ignore[no-untyped-def]
                for i in range(WAVES):
                    with wave("sig", 512, 2048, 4096) as w:
                        w.forward_done()
                    if step_every and i % step_every == step_every - 1:
                        rec.step()

            started = time.perf_counter()
            recorded()
            timings.append(time.perf_counter() - started)
            rec._rows.clear()  # the benchmark measures the loop, not the final compaction
            rec.close()
        per_reading_us = min(timings) / WAVES / 2 * 1e6
        results[f"recorder_us_per_reading_{label}"] = per_reading_us
        results[f"overhead_us_per_reading_{label}"] = (
            per_reading_us - results["floor_us_per_reading"]
        )
    meter.close()
    return results


def bench_million(tmp: Path) -> dict[str, float]:
    from warmfit.format.trace import read_trace
    from warmfit.recorder.log import LogWriter, compact_log

    rows = [
        (
            *(i, i // 1000, i // 2, "train/d4096", "flat", "caller" if i % 2 else "forward"),
            *(bool(i % 2), 512 + i // 2 % 97, 2048 + i // 2 % 89, 4096),
            *(1_000_000 + i, 2_000_000 + i, None, False),
        )
        for i in range(MILLION)
    ]
    log = tmp / "million" / "readings.arrows"
    started = time.perf_counter()
    writer = LogWriter(log, "bench", 0, {"warmfit.meter": "bench"})
    for start in range(0, MILLION, 65_536):
        writer.append(rows[start : start + 65_536])
    writer.finish()
    written = time.perf_counter()
    done = compact_log(log, held_fd=writer.fd)  # as close() does: still holding the lock
    compacted = time.perf_counter()
    writer.release()
    assert done.trace is not None and read_trace([done.trace]).height == MILLION
    return {
        "million_write_s": written - started,
        "million_compact_s": compacted - written,
        "million_total_s": compacted - started,
        "million_parquet_bytes": float(done.trace.stat().st_size),
    }


def main() -> int:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        per_reading = bench_per_reading(Path(tmp))
        million = bench_million(Path(tmp))
    floor = per_reading["floor_us_per_reading"]
    print(f"warmfit recorder overhead ({platform.machine()}, torch {torch.__version__})")
    print(f"{'measure':<44} {'value':>10} {'floor':>10} {'target':>10}")
    print("-" * 77)
    for label, name in (
        ("per reading, bookkeeping only (µs)", "no_flush"),
        ("per reading, step() every 100 waves (µs)", "step_every_100_waves"),
    ):
        overhead = per_reading[f"overhead_us_per_reading_{name}"]
        print(f"{label:<44} {overhead:>10.2f} {floor:>10.2f} {TARGET_US_PER_READING:>10.1f}")
    print(f"{'1M readings: write the log (s)':<44} {million['million_write_s']:>10.2f}")
    print(f"{'1M readings: compact into Parquet (s)':<44} {million['million_compact_s']:>10.2f}")
    print(
        f"{'1M readings: total (s)':<44} {million['million_total_s']:>10.2f} {'':>10} "
        f"{TARGET_MILLION_S:>10.1f}"
    )
    print("floor = the bare meter calls a reading makes (CPU meter); value = above the floor")
    out = Path("bench-results")
    out.mkdir(exist_ok=True)
    report = {
        "schema": "warmfit.bench_record/1",
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),
        "waves_timed": WAVES,
        **per_reading,
        **million,
        "targets": {"us_per_reading": TARGET_US_PER_READING, "million_s": TARGET_MILLION_S},
    }
    (out / "bench_record.json").write_text(json.dumps(report, indent=2) + "\n")
    # and one file per run, kept: benchmarks/results/<UTC time>-<commit>-record.json
    figures = {k: v for k, v in report.items() if k not in ("schema", "machine", "python")}
    kept = write_run("record", {}, figures)
    print(f"wrote {out / 'bench_record.json'} and {kept.relative_to(ROOT)}")
    ok = (
        per_reading["overhead_us_per_reading_no_flush"] <= TARGET_US_PER_READING
        and million["million_total_s"] < TARGET_MILLION_S
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
