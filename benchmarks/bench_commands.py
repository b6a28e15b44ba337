"""Benchmark every command that prices waves beside ``warmfit replay`` on one trace (issue 37).

Each command folds what it needs from the one streamed replay, so each should
cost about what ``replay`` costs. For each size (traces made by
``benchmarks/generate.py`` under ``bench-results/traces/``, as ``bench_replay.py``
makes them), a fresh process of each command runs ``--runs`` times, the commands
in turn (replay, check --write-expect, check --expect, ...: load that comes and
goes falls on each alike), timed from outside: wall, CPU of the whole process
tree (user + system, workers included) and the peak resident memory of the
tree (sampled from /proc, as ``bench_replay.py``'s cold cases). Medians are
reported, and each command's ratio to ``replay``'s.

Targets (issue 37's Done-when), at 1e7 readings: every command at most 1.5x
``replay``'s wall time and at most 1 GiB for the whole tree; ``replay -p
envelope`` at most 2x the CPU of ``replay -p warm-fit``.

    python benchmarks/bench_commands.py --sizes 1e6 --runs 1

Prints a table and writes one file under ``benchmarks/results/``
(``<UTC time>-<short commit>-commands.json``). Not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # so that bench_replay and runinfo are found
from bench_replay import (  # noqa: E402
    RESULTS,
    SIZES,
    compile_bytecode,
    ensure_trace,
    run_cold,
    warmfit_command,
)
from runinfo import write_run  # noqa: E402

#: Where the commands write (the files are replaced each run).
OUT = RESULTS / "commands"
EXPECT = OUT / "expectations.toml"
POLICIES = ["-p", "max-merge", "-p", "warm-fit"]
#: case -> arguments after ``warmfit`` (``{T}``: the trace).
COMMANDS: dict[str, list[str]] = {
    "replay": ["replay", "{T}", *POLICIES],
    "check --write-expect": [
        "check",
        "{T}",
        *POLICIES,
        "--write-expect",
        str(EXPECT),
        "--force",
        "--allow-under",
    ],
    "check --expect": ["check", "{T}", *POLICIES, "--expect", str(EXPECT)],
    "sweep": ["sweep", "{T}", *POLICIES],
    "recommend --budget 80GB": ["recommend", "{T}", *POLICIES, "--budget", "80GB"],
    "plot": ["plot", "{T}", *POLICIES, "-o", str(OUT / "plot.png"), "--force"],
    "replay -p warm-fit": ["replay", "{T}", "-p", "warm-fit"],
    "replay -p envelope": ["replay", "{T}", "-p", "envelope"],
}
#: Each command's wall time over replay's, and its peak, at most these (at 1e7).
WALL_RATIO, PEAK_BYTES, ENVELOPE_CPU_RATIO = 1.5, 2**30, 2.0


def measure(folder: Path, runs: int, skip: list[str]) -> dict[str, dict[str, Any]]:
    """Every command on the trace at ``folder`` but those of ``skip``, ``runs`` times in turn."""
    OUT.mkdir(parents=True, exist_ok=True)
    commands = {
        case: [*warmfit_command(), *(str(folder) if a == "{T}" else a for a in args)]
        for case, args in COMMANDS.items()
        if case.split()[0] not in skip
    }
    # --expect needs the file: written once before the clock starts
    run_cold({"write": commands["check --write-expect"]}, 1)
    return run_cold(commands, runs)


def ratios(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each command's wall and CPU over replay's, its peak, and whether it meets the targets."""
    base = found["replay"]
    rows = {}
    for case, one in found.items():
        rows[case] = {
            **one,
            "wall_ratio": one["wall_s"] / base["wall_s"],
            "cpu_ratio": one["cpu_s"] / base["cpu_s"],
            "meets": one["wall_s"] <= WALL_RATIO * base["wall_s"]
            and one["peak_bytes"] <= PEAK_BYTES,
        }
    envelope = found["replay -p envelope"]["cpu_s"] / found["replay -p warm-fit"]["cpu_s"]
    rows["replay -p envelope"]["envelope_cpu_over_warm_fit"] = envelope
    rows["replay -p envelope"]["meets"] = envelope <= ENVELOPE_CPU_RATIO
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1e7"], choices=list(SIZES))
    parser.add_argument("--runs", type=int, default=3, help="Fresh processes per command.")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["plot", "sweep", "recommend"],
        help="Commands left out (plot holds every wave's row: about 1 GB per 1e6 readings).",
    )  # fmt: skip
    args = parser.parse_args(argv)
    compile_bytecode()
    results: dict[str, Any] = {}
    for label in args.sizes:
        rows = ratios(measure(ensure_trace(label, SIZES[label]), args.runs, args.skip))
        results[label] = rows
        print(f"\n{label} readings ({args.runs} runs each, medians; ratios to replay's)")
        print(
            f"{'command':26} {'wall s':>8} {'x':>6} {'cpu s':>8} {'x':>6} {'peak MiB':>9}  target"
        )
        for case, row in rows.items():
            extra = (
                f"  (cpu {row['envelope_cpu_over_warm_fit']:.2f}x warm-fit's)"
                if "envelope_cpu_over_warm_fit" in row
                else ""
            )
            print(
                f"{case:26} {row['wall_s']:8.2f} {row['wall_ratio']:6.2f} {row['cpu_s']:8.2f} "
                f"{row['cpu_ratio']:6.2f} {row['peak_bytes'] / 2**20:9.0f}  "
                f"{'met' if row['meets'] else 'NOT MET'}{extra}"
            )
    arguments = {"sizes": args.sizes, "runs": args.runs, "skip": args.skip}
    path = write_run("commands", arguments, {"results": results})
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
