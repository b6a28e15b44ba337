"""One JSON file per benchmark run under ``benchmarks/results/``, as pytest-benchmark keeps them.

Each file is named ``<UTC timestamp>-<short commit>-<bench>.json`` (for example
``20261130T232301Z-541099b-replay.json``) and holds the machine (CPU model,
cores, memory, OS, Python and the packages that set the figures), the commit
and whether the tree had uncommitted changes, the command's arguments, and
the figures. It is written atomically: a temporary file beside it, flushed
and fsynced, then renamed, so a killed bench leaves no partial result.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SCHEMA = "warmfit.bench/1"
#: The packages whose versions are recorded with every run.
PACKAGES = ("warmfit", "polars", "pyarrow", "numpy")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def machine(extra_packages: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    packages: dict[str, str | None] = {}
    for name in (*PACKAGES, *extra_packages):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return {
        "cpu": _cpu_model(),
        "arch": platform.machine(),
        "cores": os.cpu_count(),
        "cores_usable": usable,
        "memory_bytes": _memory_bytes(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": packages,
    }


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # read only: never touch the index
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def commit() -> dict[str, Any]:
    """The commit measured, and whether tracked files differed from it (``dirty``)."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "sha": sha,
        "short": sha[:7] if sha else None,
        "dirty": None if status is None else bool(status),
        "branch": _git("rev-parse", "--abbrev-ref", "HEAD"),
    }


def _script() -> str:
    """The script as run, relative to the repository when it lies there."""
    script = Path(sys.argv[0]).resolve()
    try:
        return str(script.relative_to(ROOT))
    except ValueError:
        return str(script)


def write_run(bench: str, arguments: dict[str, Any], figures: dict[str, Any]) -> Path:
    """Write one run's result file under ``benchmarks/results/``; return its path.

    ``figures`` is merged into the document (``results``, ``targets``, ...).
    """
    now = time.gmtime()
    info = commit()
    doc = {
        "schema": SCHEMA,
        "bench": bench,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", now),
        "commit": info,
        "machine": machine(("torch",) if bench == "record" else ()),
        "command": {"argv": [_script(), *sys.argv[1:]], "arguments": arguments},
        **figures,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y%m%dT%H%M%SZ', now)}-{info['short'] or 'nocommit'}-{bench}"
    path = RESULTS / f"{stem}.json"
    n = 1
    while path.exists():  # two runs in one second: never overwrite a result
        n += 1
        path = RESULTS / f"{stem}-{n}.json"
    fd, tmp = tempfile.mkstemp(dir=RESULTS, prefix=f".{stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the mode any new file gets here
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
