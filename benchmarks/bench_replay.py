"""Benchmark replay end to end: Parquet -> validated readings -> per-wave rows -> summary.

For each size (1e5, 1e6, 1e7 readings; traces made by ``benchmarks/generate.py``
under ``bench-results/traces/``, once) and each case, a fresh interpreter runs
the case ``--repeat`` times and reports its best wall time and its peak
resident memory (``ru_maxrss``):

- ``scan``: ``polars.read_parquet`` of the columns replay reads, nothing else
  (the floor no replay can beat);
- ``vectorized``: :func:`warmfit.trace.read_trace` (every rule checked, rows
  sorted) then :func:`warmfit.replay.replay` with max-merge and warm-fit on
  the vectorized engine, summary included;
- ``scalar``: the same on the reference engine (up to 1e6 readings: it is slow);
- ``vectorized:example`` and ``scalar:example``: the README's example user
  policy (``LastWhole``, declared once) on each engine.

Best-of-N flatters: the interpreter has imported polars and numpy, and the
allocator has already grown to the replay's size. A user runs the command
once, so each size is also replayed **cold**: a fresh ``warmfit replay PATH
--engine E`` process per run (interpreter start, imports, read, validate,
replay, print the table), ``--cold-runs`` times, timed from outside
(wall) with the child's CPU time (user + system) and peak memory; the
median is reported with the range. CPU seconds vary less than wall seconds
when other jobs share the machine. "Cold" is a fresh process, not a cold disk cache: the trace files
are in the page cache after the first run (the machine has RAM for them).

Prints a table and writes ``bench-results/replay.json``. Not a test: run it
with ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench-results"
SIZES = {"1e5": 100_000, "1e6": 1_000_000, "1e7": 10_000_000}
SCALAR_MAX = 1_000_000
#: The README's example user policy, declared once (tests/example_policy.py).
EXAMPLE = "tests.example_policy:LastWhole"

_CASE = r"""
import json, resource, sys, time
from pathlib import Path
import polars as pl
from warmfit.schema import REPLAY_COLUMNS
from warmfit.trace import find_trace_files, read_trace
from warmfit.replay import replay

case, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = find_trace_files([path])
times, cpus = [], []
for _ in range(repeat):
    start, cpu = time.perf_counter(), time.process_time()
    if case == "scan":
        frame = pl.concat([pl.read_parquet(f, columns=list(REPLAY_COLUMNS)) for f in files])
        readings = frame.height
    else:
        frame = read_trace(files, columns=())
        engine, _, spec = case.partition(":")  # "vectorized" or "vectorized:module:Class"
        result = replay(frame, [spec] if spec else None, 1.1, engine)
        readings = frame.height
        del result  # one replay's memory at a time: the next repeat must not add to it
    times.append(time.perf_counter() - start)
    cpus.append(time.process_time() - cpu)
    columns_bytes = frame.select(REPLAY_COLUMNS).estimated_size()
    del frame
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"readings": readings, "wall_s": min(times), "walls_s": times,
                  "cpu_s": min(cpus),
                  "peak_bytes": peak, "columns_bytes": columns_bytes}))
"""


def ensure_trace(label: str, readings: int) -> Path:
    folder = RESULTS / "traces" / label
    if not any(folder.glob("*.parquet")):
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(folder),
             "--readings", str(readings)],
            check=True,
        )  # fmt: skip
    return folder


def run_case(case: str, folder: Path, repeat: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CASE, case, str(folder), str(repeat)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_COLD = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - start
if done.returncode != 0:
    sys.exit(done.stderr)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "peak_bytes": usage.ru_maxrss * 1024}))
"""


def warmfit_command() -> list[str]:
    """The ``warmfit`` command a user runs: the script beside this interpreter."""
    script = Path(sys.executable).parent / "warmfit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "warmfit"]


def run_cold(engine: str, folder: Path, runs: int) -> dict[str, Any]:
    """``warmfit replay FOLDER --engine ENGINE`` in a fresh process, ``runs`` times."""
    walls, cpus, peaks = [], [], []
    for _ in range(runs):
        command = [*warmfit_command(), "replay", str(folder), "--engine", engine]
        done = subprocess.run(
            [sys.executable, "-c", _COLD, *command],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        one = json.loads(done.stdout.strip().splitlines()[-1])
        walls.append(one["wall_s"])
        cpus.append(one["cpu_s"])
        peaks.append(one["peak_bytes"])
    return {
        "wall_s": statistics.median(walls),
        "walls_s": walls,
        "cpu_s": statistics.median(cpus),
        "peak_bytes": max(peaks),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is kept)")
    parser.add_argument(
        "--cold-runs", type=int, default=3, help="fresh 'warmfit replay' processes per case"
    )
    args = parser.parse_args(argv)
    rows = []
    for label in args.sizes:
        folder = ensure_trace(label, SIZES[label])
        for case in ("scan", "vectorized", "scalar", "cold vectorized", "cold scalar",
                     f"vectorized:{EXAMPLE}", f"scalar:{EXAMPLE}"):  # fmt: skip
            if case.endswith("scalar") and SIZES[label] > SCALAR_MAX:
                continue
            if case.startswith("scalar:") and SIZES[label] > SCALAR_MAX:
                continue
            if case.startswith("cold "):
                result = run_cold(case.removeprefix("cold "), folder, args.cold_runs)
                done = [r for r in rows if r["size"] == label and "columns_bytes" in r]
                result["columns_bytes"] = done[0]["columns_bytes"]
                result["readings"] = done[0]["readings"]
                spread = "-".join(f"{w:.2f}" for w in (min(result["walls_s"]),
                                                        max(result["walls_s"])))  # fmt: skip
                how = f"median of {len(result['walls_s'])} fresh processes: {spread} s"
            else:
                repeat = 1 if case.startswith("scalar") else args.repeat
                result = run_case(case, folder, repeat)
                how = f"best of {repeat}" if repeat > 1 else "1 run"
            result.update(size=label, case=case.replace(EXAMPLE, "example"))
            result["readings_per_s"] = result["readings"] / result["wall_s"]
            rows.append(result)
            print(
                f"{label:>4} {result['case']:<18} {result['wall_s']:8.2f} s "
                f"(cpu {result['cpu_s']:6.2f} s) "
                f"{result['readings_per_s']:14,.0f} readings/s "
                f"peak {result['peak_bytes'] / 2**20:8,.0f} MiB "
                f"(columns {result['columns_bytes'] / 2**20:,.0f} MiB; {how})",
                flush=True,
            )
    checks = targets(rows)
    print()
    for name, (ok, detail) in checks.items():
        print(f"  {'met ' if ok else 'MISSED'}  {name}: {detail}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "replay.json"
    out.write_text(
        json.dumps(
            {
                "schema": "warmfit.bench.replay/1",
                "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "machine": f"{platform.machine()}, {platform.processor() or platform.system()}",
                "python": platform.python_version(),
                "results": rows,
                "targets": {k: {"met": ok, "detail": d} for k, (ok, d) in checks.items()},
            },
            indent=2,
        )
    )
    print(f"\nwritten: {out.relative_to(ROOT)}")
    return 0


def targets(rows: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    """The targets of issue 4, where the measured sizes allow checking them."""
    at = {(r["size"], r["case"]): r for r in rows}
    out: dict[str, tuple[bool, str]] = {}
    if v7 := at.get(("1e7", "vectorized")):
        out["1e7 end to end < 3 s"] = (v7["wall_s"] < 3, f"{v7['wall_s']:.2f} s")
        scan = at[("1e7", "scan")]
        ratio = v7["wall_s"] / scan["wall_s"]
        out["within 4x of the bare scan (1e7)"] = (ratio <= 4, f"{ratio:.1f}x")
        mem = v7["peak_bytes"] / v7["columns_bytes"]
        out["peak memory < 3x the columns (1e7)"] = (mem < 3, f"{mem:.1f}x")
        if v6 := at.get(("1e6", "vectorized")):
            growth = v7["wall_s"] / v6["wall_s"]
            out["1e7 within 12x of 1e6"] = (growth <= 12, f"{growth:.1f}x")
    for size in ("1e6", "1e5"):
        if (s := at.get((size, "scalar"))) and (v := at.get((size, "vectorized"))):
            speedup = v["readings_per_s"] / s["readings_per_s"]
            out[f">= 20x the scalar engine ({size}, best of N)"] = (
                speedup >= 20,
                f"{speedup:.1f}x",
            )
            if (cs := at.get((size, "cold scalar"))) and (cv := at.get((size, "cold vectorized"))):
                cold = cs["wall_s"] / cv["wall_s"]
                out[f">= 20x the scalar engine ({size}, cold commands)"] = (
                    cold >= 20,
                    f"{cold:.1f}x",
                )
            break
    for size in ("1e6", "1e5"):
        scalar, vectorized = at.get((size, "scalar:example")), at.get((size, "vectorized:example"))
        if scalar and vectorized:
            speedup = scalar["wall_s"] / vectorized["wall_s"]
            out[f">= 20x the scalar engine for a declared user policy ({size}, best of N)"] = (
                speedup >= 20,
                f"{speedup:.1f}x",
            )
            break
    if c7 := at.get(("1e7", "cold vectorized")):
        out["1e7 end to end < 3 s (cold command)"] = (c7["wall_s"] < 3, f"{c7['wall_s']:.2f} s")
    return out


if __name__ == "__main__":
    sys.exit(main())
