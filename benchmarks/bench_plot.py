"""Benchmark ``warmfit plot`` end to end: a fresh process per run, PNG and SVG.

For each trace (by default a generated one of 100,000 waves, made once by
``benchmarks/generate.py`` under ``bench-results/traces/plot-1e5w/``, and
the stored ``traces/pr991`` and ``traces/art-h200``) and each case, a fresh
process runs ``--runs`` times, timed from outside (wall) with the child's
CPU time (user + system) and peak resident memory (``ru_maxrss``); the
median is reported with the range, the cases in turn (replay, png, svg,
replay, ...) so that load which comes and goes falls on each alike:

- ``replay``: ``warmfit replay TRACE``: read, validate, replay, print the
  table; the floor a plot of the same trace cannot beat;
- ``png`` and ``svg``: ``warmfit plot TRACE -o FILE`` (the file's size is
  reported too).

The targets (issue 28, item 5): at 1e5 waves a PNG in under 10 s and an SVG in
under 30 s. A trace of more than ``warmfit.report.plot.THIN_ABOVE`` waves in a
run is drawn thinned to what its pixels can show; below, point by point.

Prints a table and writes ``bench-results/plot.json`` (the latest run) and
one file per run, kept, under ``benchmarks/results/``
(``<UTC time>-<short commit>-plot.json``; ``benchmarks/runinfo.py``). Not a
test: ``make bench`` runs it after the replay benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # so that runinfo is found however this runs
from runinfo import write_run  # noqa: E402  (one JSON file per run, benchmarks/results/)

RESULTS = ROOT / "bench-results"
#: The generated trace: 32 streams (4 runs x 8 ranks) of 3,125 waves, 15/8 readings a wave.
WAVES = 100_000
READINGS = WAVES * 15 // 8
GENERATED = RESULTS / "traces" / "plot-1e5w"
STORED = [ROOT / "traces" / "pr991", ROOT / "traces" / "art-h200"]
#: Seconds each format may take at 1e5 waves (a fresh ``warmfit plot`` process).
TARGETS = {"png": 10.0, "svg": 30.0}


def ensure_trace() -> Path:
    """The generated trace of :data:`WAVES` waves, made once."""
    if not any(GENERATED.glob("*.parquet")):
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(GENERATED),
             "--readings", str(READINGS)],
            check=True,
        )  # fmt: skip
    return GENERATED


def warmfit_command() -> list[str]:
    """The ``warmfit`` command a user runs: the script beside this interpreter."""
    script = Path(sys.executable).parent / "warmfit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "warmfit"]


def waves_of(trace: Path) -> int:
    """Waves in a trace: distinct (run, rank, wave)."""
    import polars as pl

    from warmfit.format.trace import find_trace_files

    files = [str(f) for f in find_trace_files([trace])]
    frame = pl.scan_parquet(files).select("run", "rank", "wave").unique().select(pl.len())
    return int(frame.collect().item())


def timed(command: list[str]) -> dict[str, Any]:
    """One fresh process: its wall and CPU seconds (user + system) and peak resident memory."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            err.seek(0)
            message = err.read().decode(errors="replace")
            sys.exit(f"{' '.join(command)} failed ({child.returncode}):\n{message}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": wall, "cpu_s": cpu, "maxrss_bytes": usage.ru_maxrss * 1024}


def measure(trace: Path, runs: int, out: Path) -> list[dict[str, Any]]:
    """The cases of one trace, ``runs`` times each, in turn."""
    two = ["-p", "max-merge", "-p", "warm-fit"]  # as measured before envelope was a default
    commands = {
        "replay": [*warmfit_command(), "replay", str(trace), *two],
        **{
            fmt: [
                *warmfit_command(), "plot", str(trace), "-o", str(out / f"x.{fmt}"), "--force",
                *two,
            ]
            for fmt in ("png", "svg")
        },
    }  # fmt: skip
    walls: dict[str, list[float]] = {case: [] for case in commands}
    cpus: dict[str, list[float]] = {case: [] for case in commands}
    peaks: dict[str, list[int]] = {case: [] for case in commands}
    for _ in range(runs):
        for case, command in commands.items():
            one = timed(command)
            walls[case].append(one["wall_s"])
            cpus[case].append(one["cpu_s"])
            peaks[case].append(one["maxrss_bytes"])
    rows = []
    for case in commands:
        row: dict[str, Any] = {
            "case": case,
            "wall_s": statistics.median(walls[case]),
            "walls_s": walls[case],
            "cpu_s": statistics.median(cpus[case]),
            "cpus_s": cpus[case],
            "maxrss_bytes": max(peaks[case]),
        }
        if case in ("png", "svg"):
            row["file_bytes"] = (out / f"x.{case}").stat().st_size
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case")
    parser.add_argument(
        "--traces",
        nargs="*",
        type=Path,
        default=None,
        help="traces to plot (default: the generated 1e5-wave trace, traces/pr991, "
        "traces/art-h200)",
    )
    args = parser.parse_args(argv)
    import warmfit.report.plot as plot

    traces = args.traces if args.traces is not None else [ensure_trace(), *STORED]
    rows: list[dict[str, Any]] = []
    print(f"warmfit plot, a fresh process per run (thinned above {plot.THIN_ABOVE:,} waves a run)")
    with tempfile.TemporaryDirectory(prefix="bench-plot-") as tmp:
        for trace in traces:
            waves = waves_of(trace)
            name = trace.name if trace != GENERATED else f"generated {waves:,} waves"
            floor = None
            for row in measure(trace, args.runs, Path(tmp)):
                row.update(trace=str(trace.relative_to(ROOT) if trace.is_relative_to(ROOT)
                                      else trace), waves=waves)  # fmt: skip
                rows.append(row)
                floor = row["wall_s"] if row["case"] == "replay" else floor
                spread = f"{min(row['walls_s']):.2f}-{max(row['walls_s']):.2f}"
                size = f" file {row['file_bytes'] / 2**20:7.2f} MiB" if "file_bytes" in row else ""
                beside = (
                    f" {row['wall_s'] / floor:5.1f}x the replay"
                    if floor and row["case"] != "replay"
                    else " (the floor)".ljust(20)
                )
                print(
                    f"{name:<28} {row['case']:<7} {row['wall_s']:7.2f} s "
                    f"(cpu {row['cpu_s']:6.2f} s){beside} peak "
                    f"{row['maxrss_bytes'] / 2**20:6,.0f} MiB{size} "
                    f"(median of {len(row['walls_s'])}: {spread} s)",
                    flush=True,
                )
    checks = targets(rows)
    print()
    for label, (ok, detail) in checks.items():
        print(f"  {'met ' if ok else 'MISSED'}  {label}: {detail}")
    target_doc = {k: {"met": ok, "detail": d} for k, (ok, d) in checks.items()}
    try:
        matplotlib = version("matplotlib")
    except PackageNotFoundError:
        matplotlib = None
    figures = {"matplotlib": matplotlib, "thin_above": plot.THIN_ABOVE, "results": rows,
               "targets": target_doc}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "plot.json"  # the latest run (git-ignored)
    out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"), **figures}, indent=2))
    arguments = {"runs": args.runs, "traces": [str(t) for t in traces]}
    kept = write_run("plot", arguments, figures)
    print(f"\nwritten: {out.relative_to(ROOT)} and {kept.relative_to(ROOT)}")
    return 0


def targets(rows: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    """The targets of issue 28 (item 5), on the traces of at least 1e5 waves measured."""
    out: dict[str, tuple[bool, str]] = {}
    for row in rows:
        limit = TARGETS.get(row["case"])
        if limit is not None and row["waves"] >= WAVES:
            detail = f"{row['wall_s']:.2f} s (cpu {row['cpu_s']:.2f} s), {row['waves']:,} waves"
            out[f"{row['case']} < {limit:g} s at 1e5 waves ({row['trace']})"] = (
                row["wall_s"] < limit,
                detail,
            )
    return out


if __name__ == "__main__":
    sys.exit(main())
