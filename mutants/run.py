"""``make mutants``: plant each bug of ``mutants/mutants.toml`` and see a test catch it.

Each mutant names a file, an exact snippet of it, the snippet's replacement
and the test modules that should catch it. The repository's code and tests
are copied once to a temporary directory (the working tree is never
touched); each mutant is written into the copy, the tests it names run there
(``pytest -x``: the first failure kills it), and the file is restored before
the next one. A mutant the tests do not catch *survives*.

Survivors that no unit test can reach are listed, each with its reason, in
``mutants/accepted.toml``. The run exits 1 when a survivor is not accepted,
2 when a mutant no longer applies (its snippet is not in the file exactly
once: update the list after editing the code), and 0 otherwise.

    python mutants/run.py                 # every mutant
    python mutants/run.py ID ...          # only these
    python mutants/run.py --list          # list them
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
#: What the copy holds: the package, the tests and the data they read.
COPIED = ("warmfit", "tests", "traces", "notebooks", "conftest.py", "pyproject.toml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
PYTEST = ("-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0", "-m", "not slow and not gpu")
TIMEOUT_S = 900


@dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    what: str


def load(path: Path) -> list[Mutant]:
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    mutants = [
        Mutant(m["id"], m["file"], m["original"], m["replacement"], tuple(m["tests"]), m["what"])
        for m in doc["mutant"]
    ]
    ids = [m.id for m in mutants]
    duplicated = {i for i in ids if ids.count(i) > 1}
    if duplicated:
        raise SystemExit(f"mutants.toml: ids used twice: {', '.join(sorted(duplicated))}")
    return mutants


def load_accepted(path: Path) -> dict[str, str]:
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    return {a["id"]: a["reason"] for a in doc.get("accepted", [])}


def copy_tree(target: Path) -> None:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=IGNORED)
        else:
            shutil.copy2(source, target / name)


#: pytest's exit codes for a run that could not test anything: internal error,
#: usage error (a test path that does not exist), no test collected.
BROKEN_RUN = (3, 4, 5)


def run_tests(copy: Path, tests: tuple[str, ...]) -> tuple[bool, str]:
    """Run ``tests`` in the copy; (passed, last lines of the output).

    Exits when pytest could not run them at all (a test list to fix, not a kill).
    """
    env = {
        **os.environ,
        "PYTHONPATH": str(copy),  # the copy's warmfit, not the installed one
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *PYTEST, *tests],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT_S} s"
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-4:])
    if done.returncode in BROKEN_RUN:
        raise SystemExit(
            f"pytest could not run {' '.join(tests)} (exit {done.returncode}):\n{tail}"
        )
    return done.returncode == 0, tail


def check_copy_is_imported(copy: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    where = subprocess.run(
        [sys.executable, "-c", "import warmfit; print(warmfit.__file__)"],
        cwd=copy, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not Path(where).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"the copy's tests would import {where}, not the copy: cannot mutate")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--tests",
        action="append",
        help="run this test instead of each mutant's own (repeatable; to see which kill it)",
    )
    parser.add_argument(
        "--show", action="store_true", help="print the failing test of each killed mutant"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the unmutated run of every test named"
    )
    args = parser.parse_args(argv)
    mutants = load(HERE / "mutants.toml")
    accepted = load_accepted(HERE / "accepted.toml")
    unknown = sorted(set(accepted) - {m.id for m in mutants})
    if unknown:
        print(f"accepted.toml names mutants that do not exist: {', '.join(unknown)}")
        return 2
    if args.list:
        for m in mutants:
            print(f"{m.id:<40} {m.file}: {m.what}")
        return 0
    if args.ids:
        missing = sorted(set(args.ids) - {m.id for m in mutants})
        if missing:
            print(f"no such mutant: {', '.join(missing)}")
            return 2
        mutants = [m for m in mutants if m.id in args.ids]
    if args.tests:
        mutants = [
            Mutant(m.id, m.file, m.original, m.replacement, tuple(args.tests), m.what)
            for m in mutants
        ]

    stale = []
    for m in mutants:
        count = (ROOT / m.file).read_text(encoding="utf-8").count(m.original)
        if count != 1:
            stale.append(f"  {m.id}: its snippet is in {m.file} {count} times, not once")
    if stale:
        print("mutants that no longer apply (update mutants/mutants.toml):", *stale, sep="\n")
        return 2

    killed, survived, survived_accepted = [], [], []
    with tempfile.TemporaryDirectory(prefix="warmfit-mutants-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        check_copy_is_imported(copy)
        if not args.no_baseline:
            tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
            start = time.perf_counter()
            ok, tail = run_tests(copy, tests)
            print(f"baseline: the named tests {'pass' if ok else 'FAIL'} unmutated "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
            if not ok:
                print(tail)
                return 2
        for i, m in enumerate(mutants, 1):
            path = copy / m.file
            original = path.read_text(encoding="utf-8")
            start = time.perf_counter()
            try:
                path.write_text(original.replace(m.original, m.replacement, 1), encoding="utf-8")
                passed, tail = run_tests(copy, m.tests)
            finally:
                path.write_text(original, encoding="utf-8")
            took = time.perf_counter() - start
            if not passed:
                verdict = "killed"
                killed.append(m.id)
            elif m.id in accepted:
                verdict = "SURVIVED (accepted)"
                survived_accepted.append(m.id)
            else:
                verdict = "SURVIVED"
                survived.append(m.id)
            print(f"[{i:>2}/{len(mutants)}] {verdict:<19} {m.id:<40} {took:5.0f} s", flush=True)
            if args.show and not passed:
                failed = [
                    line for line in tail.splitlines() if line.startswith(("FAILED", "ERROR"))
                ]
                print(f"      {(failed or tail.splitlines() or [''])[0][:150]}")
            if passed:
                print(f"      {m.file}: {m.what}")
                if m.id in accepted:
                    print(f"      accepted: {accepted[m.id]}")
    print(
        f"\n{len(killed)} killed, {len(survived)} survived, "
        f"{len(survived_accepted)} survived but accepted (mutants/accepted.toml), "
        f"of {len(killed) + len(survived) + len(survived_accepted)}"
    )
    if survived:
        print("survivors outside mutants/accepted.toml: " + ", ".join(survived))
        print("Write a test that fails with the bug planted, or accept it with a reason.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
