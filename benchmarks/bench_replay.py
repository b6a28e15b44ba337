"""Benchmark replay end to end: Parquet -> validated readings -> per-wave rows -> summary.

For each size (1e5, 1e6, 1e7 readings; traces made by ``benchmarks/generate.py``
under ``bench-results/traces/``, once) and each case, a fresh interpreter runs
the case ``--repeat`` times and reports its best wall time and its peak
resident memory (``ru_maxrss``):

- ``scan``: ``polars.read_parquet`` of the columns replay reads, nothing else
  (the floor no replay can beat);
- ``vectorized``: :func:`warmfit.format.trace.read_trace` (every rule checked, rows
  sorted) then :func:`warmfit.replay.replay` with max-merge and warm-fit on
  the vectorized engine, summary included;
- ``scalar``: the same on the reference engine (up to 1e6 readings: it is slow);
- ``vectorized:example`` and ``scalar:example``: the README's example user
  policy (``LastWhole``, declared once) on each engine;
- ``replay:vectorized:envelope`` and ``replay:scalar:envelope`` (up to 1e6
  readings, as ``scalar``): :func:`warmfit.replay.replay` alone, the
  ``envelope`` policy on each engine, on readings read and validated before
  the clock starts (the scalar one runs once: about 20 s per 1e6 readings).
  Their ratio is a target: the vectorized engine at least 10x the reference
  one at 1e6.

Best-of-N flatters: the interpreter has imported polars and numpy, and the
allocator has already grown to the replay's size. A user runs the command
once, so each size is also replayed **cold**: a fresh ``warmfit replay PATH
--engine E`` process per run (interpreter start, imports, read, validate,
replay, print the table), ``--cold-runs`` times, timed from outside
(wall) with the child's CPU time (user + system) and peak memory; the
median is reported with the range. CPU seconds vary less than wall seconds
when other jobs share the machine. "Cold" is a fresh process, not a cold disk cache: the trace files
are in the page cache after the first run (the machine has RAM for them).

Two more cold cases: ``cold scan``, the bare scan in a fresh process
(interpreter start, ``import polars``, the same columns read): the floor of
a cold command, as ``scan`` is the floor in process; and ``cold per-wave``,
the default replay writing its per-wave file too (up to 1e7 readings).
And ``cold envelope``, ``warmfit replay PATH -p envelope``, at every size,
measured in turn with ``cold`` (default, envelope, default, envelope, ...)
so that load which comes and goes falls on both alike: the envelope's best
run over the built-ins' (max-merge and warm-fit) best run is a target, at
most 2x at 1e7. And ``cold interleaved -j1`` and ``cold interleaved -j2``
(up to 1e7), measured in turn: ``warmfit replay`` with ``--jobs 1`` and
``--jobs 2`` of a trace of the same size whose two runs alternate row by row
in one file (``generate.py --layout interleaved``: every row group holds
both runs, so every batch spans the whole file; issue 28, item 6). That
``--jobs 2`` is no slower than ``--jobs 1`` there is a target at 1e7 (smaller
traces replay in one process whatever ``--jobs`` says).
Before the cold cases, warmfit's modules are byte-compiled, as ``pip
install`` does: where ``PYTHONDONTWRITEBYTECODE`` is set (as on the
development VM), an editable install would otherwise compile every module
from source in each fresh process, the command's and its fork server's.

Prints a table and writes ``bench-results/replay.json`` (the latest run) and
one file per run, kept, under ``benchmarks/results/``
(``<UTC time>-<short commit>-replay.json``: the machine, the commit, the
arguments and the figures; ``benchmarks/runinfo.py``). Not a test: run it
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
sys.path.insert(0, str(ROOT / "benchmarks"))  # so that runinfo is found however this runs
from runinfo import write_run  # noqa: E402  (one JSON file per run, benchmarks/results/)

RESULTS = ROOT / "bench-results"
SIZES = {"1e5": 100_000, "1e6": 1_000_000, "1e7": 10_000_000, "1e8": 100_000_000}
#: Sizes measured unless --sizes says otherwise (1e8 takes minutes and 2 GB of disk).
DEFAULT_SIZES = ["1e5", "1e6", "1e7"]
#: The in-memory engine (the whole trace and every wave held at once) up to this size.
MEMORY_MAX = 10_000_000
SCALAR_MAX = 1_000_000
#: The README's example user policy, declared once (tests/example_policy.py).
EXAMPLE = "tests.example_policy:LastWhole"
#: The built-in policy whose engines and cold command are measured beside the defaults.
ENVELOPE = "envelope"

#: Peak resident memory of a process and all its descendants (worker processes
#: included), summed, sampled every 20 ms from /proc: shared pages count once per
#: process, so the figure is an upper bound.
_SAMPLER = r"""
import os, threading, time

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")

def _tree(root):
    # every process below root, from one scan of /proc (about 1 ms here)
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found

def _rss(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total

class TreePeak:
    # The tree is rescanned every 100 ms and its resident memory summed every
    # 20 ms: about 1.5 % of one core. (Scanning /proc every 5 ms took a quarter
    # of a core, which a 2-core replay felt: 1e7 cold read 4.4 s, against 3.3 s
    # by hand.)
    # Each process's CPU time is read at each rescan too: the workers a fork server
    # starts are its children, not the command's, and getrusage(RUSAGE_CHILDREN)
    # misses those the server does not wait for (a replay with --jobs 2 read 0.7 s).
    def __init__(self, root):
        self.root, self.peak, self._stop = root, 0, threading.Event()
        self._pids = [root]
        self._cpu = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
    def _run(self):
        scanned = 0.0
        while not self._stop.is_set():
            if time.monotonic() - scanned >= 0.1:
                self._pids, scanned = _tree(self.root), time.monotonic()
                self._times(self._pids)
            self.peak = max(self.peak, _rss(self._pids))
            time.sleep(0.02)
    def _times(self, pids):
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                self._cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS
            except (OSError, IndexError, ValueError):
                pass
    def stop(self):
        self._stop.set(); self._thread.join()
        pids = _tree(self.root)
        self._times(pids)
        self.peak = max(self.peak, _rss(pids))
        return self.peak
    def cpu(self):
        # the last reading of every process seen (up to 0.1 s of each one's end missed)
        return sum(self._cpu.values())
"""

_CASE = (
    _SAMPLER
    + r"""
import json, os, sys
from pathlib import Path

def main():
    import polars as pl
    from warmfit.format.schema import REPLAY_COLUMNS
    from warmfit.format.trace import find_trace_files, read_trace
    from warmfit.replay import replay
    from warmfit.replay.stream import replay_stream

    case, path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
    files = find_trace_files([path])
    times, cpus, peaks = [], [], []
    readings = 0
    # replay:ENGINE:POLICY times replay() alone: the readings are read before the clock starts
    validated = read_trace(files, columns=()) if case.startswith("replay:") else None
    for _ in range(repeat):
        sampler = TreePeak(os.getpid())
        start, cpu = time.perf_counter(), time.process_time()
        kind, _, rest = case.partition(":")
        if kind == "scan":  # every file's replay columns read, and dropped
            readings = sum(pl.read_parquet(f, columns=list(REPLAY_COLUMNS)).height for f in files)
        elif kind == "memory":  # the whole trace and every wave held at once
            frame = read_trace(files, columns=())
            result = replay(frame, [rest] if rest else PR_TWO, 1.1, "vectorized")
            readings = frame.height
            del result, frame
        elif kind == "replay":  # replay() alone, on the readings read above
            engine, _, spec = rest.partition(":")
            result = replay(validated, [spec], 1.1, engine)
            if result.engine != engine:
                sys.exit(f"{case}: the {result.engine} engine ran, not the {engine} one")
            readings = validated.height
            del result
        else:  # stream:JOBS[:module:Class] or scalar[:module:Class]
            jobs, _, spec = rest.partition(":") if kind == "stream" else ("1", "", rest)
            engine = "scalar" if kind == "scalar" else "auto"
            result = replay_stream(files, [spec] if spec else None, 1.1, engine, jobs=int(jobs))
            readings = result.readings
            del result
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        peaks.append(sampler.stop())
    columns_bytes = 0.0  # in memory, estimated from each file's first 100k rows
    for f in files:
        rows = pl.scan_parquet(f).select(pl.len()).collect().item()
        head = pl.scan_parquet(f).select(REPLAY_COLUMNS).head(100_000).collect()
        columns_bytes += head.estimated_size() * rows / max(head.height, 1)
    print(json.dumps({"readings": readings, "wall_s": min(times), "walls_s": times,
                      "cpu_s": min(cpus), "peak_bytes": max(peaks),
                      "columns_bytes": columns_bytes}))

if __name__ == "__main__":
    main()
"""
)


def ensure_trace(label: str, readings: int) -> Path:
    """The benchmark trace of a size, generated once: 4 runs x 8 ranks, or at 1e8 a
    fleet of 40 runs x 8 ranks written run by run (it does not fit in memory at once)."""
    folder = RESULTS / "traces" / label
    if not any(folder.glob("*.parquet")):
        fleet = ["--runs", "40", "--run-by-run"] if readings > MEMORY_MAX else []
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(folder),
             "--readings", str(readings), *fleet],
            check=True,
        )  # fmt: skip
    return folder


def ensure_interleaved(label: str, readings: int) -> Path:
    """The interleaved trace of a size, generated once: 2 runs x 8 ranks in one file,
    the runs' rows alternating row by row."""
    folder = RESULTS / "traces" / f"{label}-interleaved"
    if not any(folder.glob("*.parquet")):
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(folder),
             "--readings", str(readings), "--runs", "2", "--layout", "interleaved"],
            check=True,
        )  # fmt: skip
    return folder


def trace_rows(folder: Path) -> int:
    """The readings of the trace in ``folder`` (from the files' footers)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(folder.glob("*.parquet")))


def run_case(case: str, folder: Path, repeat: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CASE, case, str(folder), str(repeat)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


_COLD = (
    _SAMPLER
    + r"""
import json, resource, subprocess, sys
start = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
sampler = TreePeak(child.pid)
_, err = child.communicate()
wall = time.perf_counter() - start
peak = sampler.stop()
if child.returncode != 0:
    sys.exit(err)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall_s": wall,
                  "cpu_s": max(usage.ru_utime + usage.ru_stime, sampler.cpu()),
                  "peak_bytes": max(peak, usage.ru_maxrss * 1024)}))
"""
)


def warmfit_command() -> list[str]:
    """The ``warmfit`` command a user runs: the script beside this interpreter."""
    script = Path(sys.executable).parent / "warmfit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "warmfit"]


#: The policies every case replays unless it names its own: the PR's two, as measured
#: before the default lineup gained envelope (SPEC §9).
PR_TWO = ["max-merge", "warm-fit"]
PR_TWO_OPTIONS = ["-p", "max-merge", "-p", "warm-fit"]
#: Where the ``cold per-wave`` case writes (removed after each size).
PER_WAVE = RESULTS / "per-wave.parquet"
#: Cold cases: a fresh ``warmfit replay`` with these options (and ``cold scan``).
COLD = {
    "cold": [],
    "cold -j1": ["--jobs", "1"],
    "cold per-wave": ["--per-wave", str(PER_WAVE), "--force"],
    "cold scalar": ["--engine", "scalar", "--jobs", "1"],
    "cold envelope": ["-p", ENVELOPE],
    # of the interleaved trace (ensure_interleaved), not the size's
    "cold interleaved -j1": ["--jobs", "1"],
    "cold interleaved -j2": ["--jobs", "2"],
}
#: Cold cases measured in turn with the first one, run by run (their ratio is a target).
IN_TURN = {"cold": ["cold envelope"], "cold interleaved -j1": ["cold interleaved -j2"]}


#: The bare scan in a fresh process: ``python -c _SCAN COLUMNS FILE...`` (COLUMNS
#: comma-separated). It imports polars and nothing of warmfit.
_SCAN = r"""
import sys
import polars as pl
columns = sys.argv[1].split(",")
for f in sys.argv[2:]:
    pl.read_parquet(f, columns=columns)
"""


def cold_command(case: str, folder: Path) -> list[str]:
    """The fresh process of a cold case: ``warmfit replay FOLDER OPTIONS``, or the bare scan."""
    if case == "cold scan":
        from warmfit.format.schema import REPLAY_COLUMNS
        from warmfit.format.trace import find_trace_files

        files = [str(f) for f in find_trace_files([folder])]
        return [sys.executable, "-c", _SCAN, ",".join(REPLAY_COLUMNS), *files]
    options = COLD[case]
    if "-p" not in options:  # the PR's two, named: the figures stay comparable with before
        options = [*PR_TWO_OPTIONS, *options]
    return [*warmfit_command(), "replay", str(folder), *options]


def compile_bytecode() -> None:
    """Byte-compile warmfit's modules (see the module's docstring); a no-op when done."""
    import compileall

    import warmfit

    compileall.compile_dir(Path(warmfit.__file__).parent, quiet=1)


def run_cold(commands: dict[str, list[str]], runs: int) -> dict[str, dict[str, Any]]:
    """Each of ``commands`` (case: :func:`cold_command`) in a fresh process, ``runs``
    times, in turn (a, b, a, b, ...): load that comes and goes falls on each alike."""
    walls: dict[str, list[float]] = {case: [] for case in commands}
    cpus: dict[str, list[float]] = {case: [] for case in commands}
    peaks: dict[str, list[int]] = {case: [] for case in commands}
    for _ in range(runs):
        for case, command in commands.items():
            done = subprocess.run(
                [sys.executable, "-c", _COLD, *command],
                capture_output=True, text=True, check=True, cwd=ROOT,
            )  # fmt: skip
            one = json.loads(done.stdout.strip().splitlines()[-1])
            walls[case].append(one["wall_s"])
            cpus[case].append(one["cpu_s"])
            peaks[case].append(one["peak_bytes"])
    return {
        case: {
            "wall_s": statistics.median(walls[case]),
            "walls_s": walls[case],
            "cpu_s": statistics.median(cpus[case]),
            "cpus_s": cpus[case],
            "peak_bytes": max(peaks[case]),
            "in_turn_with": [other for other in commands if other != case],
        }
        for case in commands
    }


def cases(readings: int) -> list[str]:
    """The cases measured at a size."""
    out = ["scan", "stream:1", "stream:2"]
    if readings <= MEMORY_MAX:
        out.append("memory")
    out += ["cold scan", "cold", "cold envelope", "cold -j1"]
    if readings <= MEMORY_MAX:
        out.append("cold per-wave")
        out += ["cold interleaved -j1", "cold interleaved -j2"]
    if readings <= SCALAR_MAX:
        out += ["scalar", "cold scalar", f"stream:1:{EXAMPLE}", f"scalar:{EXAMPLE}"]
        out += [f"replay:vectorized:{ENVELOPE}", f"replay:scalar:{ENVELOPE}"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=DEFAULT_SIZES, choices=list(SIZES))
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is kept)")
    parser.add_argument(
        "--cold-runs", type=int, default=3, help="fresh 'warmfit replay' processes per case"
    )
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    compile_bytecode()
    for label in args.sizes:
        folder = ensure_trace(label, SIZES[label])
        measured: dict[str, dict[str, Any]] = {}  # cold cases run in turn with an earlier one
        for case in (size_cases := cases(SIZES[label])):
            if case.startswith("cold"):
                if case not in measured:
                    runs = args.cold_runs if SIZES[label] <= MEMORY_MAX else 1
                    group = [case, *(c for c in IN_TURN.get(case, []) if c in size_cases)]
                    where = {
                        c: ensure_interleaved(label, SIZES[label]) if "interleaved" in c else folder
                        for c in group
                    }
                    measured.update(run_cold({c: cold_command(c, where[c]) for c in group}, runs))
                    PER_WAVE.unlink(missing_ok=True)
                result = measured.pop(case)
                done = [r for r in rows if r["size"] == label and "columns_bytes" in r]
                result["columns_bytes"] = done[0]["columns_bytes"]
                result["readings"] = done[0]["readings"]
                if "interleaved" in case:  # its own trace: 2 runs, about as many readings
                    result["readings"] = trace_rows(ensure_interleaved(label, SIZES[label]))
                spread = "-".join(f"{w:.2f}" for w in (min(result["walls_s"]),
                                                        max(result["walls_s"])))  # fmt: skip
                how = f"median of {len(result['walls_s'])} fresh processes: {spread} s"
                if result["in_turn_with"]:
                    how += ", in turn with " + " and ".join(result["in_turn_with"])
            else:
                slow = case.startswith(("scalar", "replay:scalar")) or SIZES[label] > MEMORY_MAX
                repeat = 1 if slow else args.repeat
                result = run_case(case, folder, repeat)
                how = f"best of {repeat}" if repeat > 1 else "1 run"
            result.update(size=label, case=case.replace(EXAMPLE, "example"))
            result["readings_per_s"] = result["readings"] / result["wall_s"]
            rows.append(result)
            print(
                f"{label:>4} {result['case']:<26} {result['wall_s']:8.2f} s "
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
    target_doc = {k: {"met": ok, "detail": d} for k, (ok, d) in checks.items()}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "replay.json"  # the latest run, as before (git-ignored)
    out.write_text(
        json.dumps(
            {
                "schema": "warmfit.bench.replay/1",
                "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "machine": f"{platform.machine()}, {platform.processor() or platform.system()}",
                "python": platform.python_version(),
                "results": rows,
                "targets": target_doc,
            },
            indent=2,
        )
    )
    # and one file per run, kept: benchmarks/results/<UTC time>-<commit>-replay.json
    kept = write_run("replay", vars(args), {"results": rows, "targets": target_doc})
    print(f"\nwritten: {out.relative_to(ROOT)} and {kept.relative_to(ROOT)}")
    return 0


def targets(rows: list[dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    """The targets of issue 13, where the measured sizes allow checking them."""
    at = {(r["size"], r["case"]): r for r in rows}
    out: dict[str, tuple[bool, str]] = {}
    gib = 2**30
    if (c7 := at.get(("1e7", "cold"))) and (scan := at.get(("1e7", "scan"))):
        out["1e7 end to end <= 3 s (cold command)"] = (c7["wall_s"] <= 3, f"{c7['wall_s']:.2f} s")
        ratio = c7["wall_s"] / scan["wall_s"]
        if s2 := at.get(("1e7", "stream:2")):
            ratio = s2["wall_s"] / scan["wall_s"]
            out["1e7 <= 6x the bare scan (in process, 2 jobs)"] = (ratio <= 6, f"{ratio:.1f}x")
        if cold_scan := at.get(("1e7", "cold scan")):
            # like for like: each in a fresh process (the in-process scan is beside it)
            ratio = c7["wall_s"] / cold_scan["wall_s"]
            mixed = c7["wall_s"] / scan["wall_s"]
            out["1e7 <= 6x the bare scan (cold command / cold scan)"] = (
                ratio <= 6,
                f"{ratio:.1f}x ({mixed:.1f}x the in-process scan)",
            )
    for size in ("1e7", "1e8"):
        if c := at.get((size, "cold")):
            peak = c["peak_bytes"] / gib
            out[f"peak memory <= 1.5 GiB at {size} (cold command, all processes)"] = (
                peak <= 1.5,
                f"{peak:.2f} GiB",
            )
    if (c7 := at.get(("1e7", "cold"))) and (c6 := at.get(("1e6", "cold"))):
        growth = c7["wall_s"] / c6["wall_s"]
        out["1e7 costs <= 11x 1e6 (cold command)"] = (growth <= 11, f"{growth:.1f}x")
    if (s1 := at.get(("1e7", "stream:1"))) and (s2 := at.get(("1e7", "stream:2"))):
        speedup = s1["wall_s"] / s2["wall_s"]
        out["--jobs 2 >= 1.6x --jobs 1 at 1e7 (in process)"] = (speedup >= 1.6, f"{speedup:.2f}x")
    if (c1 := at.get(("1e7", "cold -j1"))) and (c2 := at.get(("1e7", "cold"))):
        speedup = c1["wall_s"] / c2["wall_s"]
        out["--jobs 2 >= 1.6x --jobs 1 at 1e7 (cold command)"] = (
            speedup >= 1.6,
            f"{speedup:.2f}x",
        )
    for size in SIZES:  # streams that interleave: more jobs, no slower (issue 28, item 6)
        one, two = at.get((size, "cold interleaved -j1")), at.get((size, "cold interleaved -j2"))
        if one and two:
            best_1, best_2 = min(one["walls_s"]), min(two["walls_s"])
            detail = (
                f"{best_2 / best_1:.2f}x ({best_2:.2f} s / {best_1:.2f} s, best of "
                f"{len(one['walls_s'])} in turn; medians {two['wall_s'] / one['wall_s']:.2f}x; "
                f"peak {two['peak_bytes'] / 2**20:,.0f} / {one['peak_bytes'] / 2**20:,.0f} MiB)"
            )
            if size == "1e7":
                name = "interleaved layout at 1e7: --jobs 2 no slower than --jobs 1 (cold)"
                out[name] = (best_2 <= best_1, detail)
            else:  # a trace this small replays in one process whatever --jobs says
                out[f"interleaved layout at {size}: --jobs 2 / --jobs 1 (cold)"] = (True, detail)
    if (c8 := at.get(("1e8", "cold"))) is not None:
        out["1e8 replays (cold command)"] = (True, f"{c8['wall_s']:.1f} s")
    for size in ("1e6", "1e5"):
        if (cs := at.get((size, "cold scalar"))) and (cv := at.get((size, "cold"))):
            out[f"the reference engine / the default ({size}, cold commands)"] = (
                True,
                f"{cs['wall_s'] / cv['wall_s']:.1f}x",
            )
            break
    for size in SIZES:  # envelope: the vectorized engine against the reference one
        vec = at.get((size, f"replay:vectorized:{ENVELOPE}"))
        ref = at.get((size, f"replay:scalar:{ENVELOPE}"))
        if vec and ref:
            speedup = ref["wall_s"] / vec["wall_s"]
            detail = (
                f"{speedup:.1f}x ({ref['wall_s']:.2f} s / {vec['wall_s']:.2f} s; "
                f"cpu {ref['cpu_s'] / vec['cpu_s']:.1f}x)"
            )
            if size == "1e6":
                name = f"{ENVELOPE} vectorized >= 10x the reference engine at 1e6 (replay())"
                out[name] = (speedup >= 10, detail)
            else:
                out[f"{ENVELOPE}: the reference engine / vectorized at {size} (replay())"] = (
                    True,
                    detail,
                )
    for size in SIZES:  # envelope against the built-ins, cold commands run in turn
        if (ce := at.get((size, "cold envelope"))) and (cd := at.get((size, "cold"))):
            # best run over best run (runs in turn); the medians and CPU seconds beside
            best_e, best_d = min(ce["walls_s"]), min(cd["walls_s"])
            ratio = best_e / best_d
            cpu = min(ce["cpus_s"]) / min(cd["cpus_s"])
            detail = (
                f"{ratio:.2f}x ({best_e:.2f} s / {best_d:.2f} s, best of {len(ce['walls_s'])} "
                f"in turn; medians {ce['wall_s'] / cd['wall_s']:.2f}x, cpu {cpu:.2f}x)"
            )
            if size == "1e7":
                name = f"-p {ENVELOPE} <= 2x the built-ins at 1e7 (cold commands)"
                out[name] = (ratio <= 2, detail)
            else:
                out[f"-p {ENVELOPE} / the built-ins at {size} (cold commands)"] = (True, detail)
    return out


if __name__ == "__main__":
    sys.exit(main())
