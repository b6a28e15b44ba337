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

``--generate`` runs the *generated* pass instead (``make mutants-generated``):
``mutants/generate.py`` walks each module's syntax tree and makes every small
mutant of the kinds it lists (an operator, a comparison's boundary, a
condition, a constant, ``max``/``min``, a returned value), each with an id
``FILE:LINE:COL:KIND`` such as ``summary.py:123:18:Lt->LtE``. One unmutated
run of each module's killer tests (:data:`KILLERS`, plus the module's own
doctests) records which test runs which line; each mutant then runs, with
``pytest -x``, the tests that ran its line (the whole file where a fixture
did; for a line run at import time, such as a class attribute, a default or a
constant, the tests that ran its class, function or module), fastest first,
under a timeout of five times their unmutated time. It is *killed*, *survives*, times out (counted as caught) or
does not compile. Survivors that are equivalent (no behaviour can tell them
apart) are listed with their reason in ``mutants/generated.toml``, matched on
the file, the mutated line's text and the kind, so an unrelated edit does not
unmatch them; the run exits 1 on any other survivor, and writes a JSON report
(``--report``).

    python mutants/run.py --generate --module warmfit/report/sweep.py   # one module
    python mutants/run.py --generate --module warmfit/report/sweep.py --list
    python mutants/run.py --generate --sample 40 --seed 1 --workers 2  # a random 40
    python mutants/run.py --generate 'sweep.py:51:18:floor->ceil' --show  # some, by id
    python mutants/run.py --generate --confirm  # survivors re-run on all killer tests
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generate import Accepted, Generated

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
#: What the copy holds: the package, the tests and the data they read.
COPIED = ("warmfit", "tests", "traces", "notebooks", "benchmarks", "conftest.py", "pyproject.toml")
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
    generated = parser.add_argument_group("the generated pass (--generate)")
    generated.add_argument(
        "--generate",
        action="store_true",
        help="generate mutants from the modules' syntax trees instead of mutants.toml",
    )
    generated.add_argument(
        "--module",
        action="append",
        metavar="PATH",
        help="mutate this module (repeatable; default: the modules of DEFAULT_MODULES)",
    )
    generated.add_argument("--workers", type=int, default=2, help="mutants run at once (2)")
    generated.add_argument("--sample", type=int, metavar="K", help="run K mutants drawn at random")
    generated.add_argument("--seed", type=int, default=0, help="the draw's seed (0)")
    generated.add_argument("--report", metavar="PATH", help="write the JSON report here")
    generated.add_argument(
        "--confirm",
        action="store_true",
        help="run each survivor again on every killer test of its module",
    )
    generated.add_argument(
        "--timeout-factor",
        type=float,
        default=5.0,
        help="a mutant's timeout: its tests' time x (5)",
    )
    generated.add_argument(
        "--no-fork",
        action="store_true",
        help="start a new Python for each mutant instead of forking a warm one",
    )
    generated.add_argument(
        "--skip-accepted",
        action="store_true",
        help=f"do not run the survivors accepted in {GENERATED_ACCEPTED_NAME} (quicker)",
    )
    generated.add_argument(
        "--baseline",
        metavar="PATH",
        help="reuse the unmutated run saved beside an earlier report (REPORT.baseline.json) "
        "while no module or test has changed since",
    )
    generated.add_argument(
        "--resume",
        action="store_true",
        help="go on with an interrupted run of the same --report: the mutants its "
        "REPORT.partial.jsonl holds are not run again (its baseline is reused while valid)",
    )
    generated.add_argument(
        "--stubs",
        metavar="REPORT",
        help=f"print {GENERATED_ACCEPTED_NAME} entries for the unaccepted survivors of a report "
        "(the reason left to write) and exit",
    )
    args = parser.parse_args(argv)
    if args.generate:
        return generated_main(args)
    only_generated = ("module", "sample", "report", "confirm", "no_fork", "skip_accepted",
                      "baseline", "stubs", "resume")  # fmt: skip
    given = [f"--{o.replace('_', '-')}" for o in only_generated if getattr(args, o)]
    if given:
        parser.error(f"{', '.join(given)}: only with --generate")
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


# --------------------------------------------------------------------------- generated pass

#: The modules ``make mutants-generated`` mutates.
DEFAULT_MODULES: tuple[str, ...] = (
    "warmfit/replay/summary.py",
    "warmfit/report/sweep.py",
    "warmfit/report/gate.py",
    "warmfit/policies/max_merge.py",
    "warmfit/policies/warm_fit.py",
    "warmfit/policies/warm_affine.py",
    "warmfit/policies/envelope.py",
    "warmfit/replay/semantics.py",
    # issue 38: every product module (importers, trainer, integrations, report, replay,
    # format, policies, recorder)
    "warmfit/importers/table.py",
    "warmfit/importers/mapping.py",
    "warmfit/importers/art_misses.py",
    "warmfit/trainer/pricer.py",
    "warmfit/integrations/_common.py",
    "warmfit/integrations/hf_demo.py",
    "warmfit/integrations/huggingface.py",
    "warmfit/integrations/lightning.py",
    "warmfit/integrations/sampler.py",
    "warmfit/integrations/tokens.py",
    "warmfit/report/plot.py",
    "warmfit/report/recommend.py",
    "warmfit/report/table.py",
    "warmfit/replay/engines.py",
    "warmfit/replay/forkserver.py",
    "warmfit/replay/medians.py",
    "warmfit/replay/permute.py",
    "warmfit/replay/perwave.py",
    "warmfit/replay/reference.py",
    "warmfit/replay/stream.py",
    "warmfit/replay/vectorized.py",
    "warmfit/replay/admission.py",
    "warmfit/format/batches.py",
    "warmfit/format/files.py",
    "warmfit/format/pagecrc.py",
    "warmfit/format/schema.py",
    "warmfit/format/shape.py",
    "warmfit/format/trace.py",
    "warmfit/format/writer.py",
    "warmfit/policies/base.py",
    "warmfit/policies/rule.py",
    "warmfit/recorder/launch.py",
    "warmfit/recorder/log.py",
    "warmfit/recorder/meters.py",
    "warmfit/recorder/recorder.py",
)
_POLICY_TESTS = (
    "tests/test_policies.py",
    "tests/test_warm_affine.py",
    "tests/test_envelope.py",
    "tests/test_rule.py",
    "tests/test_conformance.py",
    "tests/test_replay.py",
    "tests/test_engines.py",
    "tests/test_seen_range.py",
    "tests/test_decisions.py",
    "tests/test_vectorized.py",
    "tests/test_pricer.py",  # the rules' float form (plain_floats), exact and never falling back
)
#: Issue 31's stranger survivors, one test each (issue 38 moved them into the files of
#: the code they test).
_STRANGER_TESTS = (
    "tests/test_replay.py::test_oom_waves_counts_only_priced_waves",
    "tests/test_replay.py::test_set_by_floor_counts_only_figure_waves",
    "tests/test_budget.py::test_a_wave_priced_exactly_at_the_budget_is_admitted_in_the_per_wave_file",
    "tests/test_check.py::test_write_expect_keeps_an_exact_limit",
    "tests/test_check.py::test_a_boolean_is_not_a_count_in_an_expectations_file",
    "tests/test_warm_affine.py::test_warm_affine_prices_a_small_wave_at_the_warm_tokens",
    "tests/test_sweep_grid.py::test_the_safe_factor_ignores_waves_that_ran_out_of_memory",
    "tests/test_perwave.py::test_per_wave_parquet_reads_back_through_pyarrow_and_polars",
    "tests/test_perwave.py::test_per_wave_footer_offsets_point_at_the_pages",
    "tests/test_stream.py::test_the_streamed_replay_reports_the_scalar_engine_after_a_fallback",
    "tests/test_stream.py::test_the_no_whole_warning_counts_every_batch",
    "tests/test_rule.py::test_a_redeclared_aggregate_takes_its_place_in_the_subclass",
    "tests/test_rule.py::test_dividing_nan_or_zero_by_zero_is_nan_on_both_engines",
    "tests/test_pagecrc.py::test_a_column_chunk_claiming_fewer_values_than_rows_is_refused",
    "tests/test_hostile_log.py::test_recover_keeps_every_good_batch_before_a_bad_one",
    "tests/test_hostile_log.py::test_a_log_whose_batches_are_out_of_seq_order_is_compacted",
    "tests/test_hostile_log.py::test_recover_names_the_out_of_order_log_kept_in_the_command",
)
#: Tests added to every module's killers (issue 31's oracle and survivors; SPEC §8's
#: recorded prices, which every figure module handles).
NEW_TESTS = ("tests/test_oracle.py", *_STRANGER_TESTS, "tests/test_recorded.py")
#: Per module, the test files that should kill its mutants (its own doctests are added).
KILLERS: dict[str, tuple[str, ...]] = {
    "warmfit/replay/summary.py": (
        "tests/test_replay.py",
        "tests/test_medians.py",
        "tests/test_perwave.py",
        "tests/test_seen_range.py",
        "tests/test_check.py",
        "tests/test_decisions.py",
        "tests/test_engines.py",
        "tests/test_conformance.py",
        "tests/test_stream.py",
        "tests/test_vectorized.py",
        "tests/test_plot.py",  # wave_roles: the plot's colours
        "tests/test_summary_fold.py",
    ),
    "warmfit/report/sweep.py": (
        "tests/test_decisions.py",
        "tests/test_sweep_grid.py",
        "tests/test_seen_range.py",
        "tests/test_check.py",
        "tests/test_cli.py",
        "tests/test_gate_edges.py",  # safe_factors' runs with no priced wave or no factor
    ),
    "warmfit/report/gate.py": (
        "tests/test_check.py",
        "tests/test_hostile_input.py",
        "tests/test_cli.py",
        "tests/test_gate_edges.py",
        "tests/test_gate_output.py",  # check's table, CSV and JSON; --write-expect's text
    ),
    "warmfit/policies/max_merge.py": _POLICY_TESTS,
    "warmfit/policies/warm_fit.py": _POLICY_TESTS,
    "warmfit/policies/warm_affine.py": _POLICY_TESTS,
    "warmfit/policies/envelope.py": _POLICY_TESTS,
    "warmfit/replay/semantics.py": (
        "tests/test_replay.py",
        "tests/test_policies.py",
        "tests/test_perwave.py",
        "tests/test_seen_range.py",
        "tests/test_decisions.py",
        "tests/test_conformance.py",
        "tests/test_engines.py",
        "tests/test_sweep_grid.py",
        "tests/test_check.py",
        "tests/test_stream.py",
        "tests/test_vectorized.py",
    ),
}
_IMPORTER_TESTS = (
    "tests/test_import_table.py",
    "tests/test_import_art_misses.py",
    "tests/test_importer_oracle.py",  # issue 38: a plain reading of the same CSV/JSON
    "tests/test_import_messages.py",  # issue 38: the messages, whole
)
_REPLAY_TESTS = (
    "tests/test_replay.py",
    "tests/test_stream.py",
    "tests/test_perwave.py",
    "tests/test_layouts.py",
    "tests/test_index.py",
    "tests/test_faults.py",
    "tests/test_medians.py",
    "tests/test_summary_fold.py",
    "tests/test_vectorized.py",
    "tests/test_permute.py",
    "tests/test_permute_oracle.py",  # issue 38
    "tests/test_replay_edges.py",  # issue 38
    "tests/test_seen_range.py",
    "tests/test_engines.py",
)
_FORMAT_TESTS = (
    "tests/test_trace.py",
    "tests/test_pagecrc.py",
    "tests/test_outputs.py",
    "tests/test_index.py",
    "tests/test_layouts.py",
    "tests/test_stream.py",
    "tests/test_perwave.py",
    "tests/test_faults.py",
    "tests/test_hostile_input.py",
)
_RECORDER_TESTS = (
    "tests/test_recorder.py",
    "tests/test_record_cli.py",
    "tests/test_meters.py",
    "tests/test_hostile_log.py",
    "tests/test_recording_traps.py",
    "tests/test_integrations.py",
)
_INTEGRATION_TESTS = (
    "tests/test_integrations.py",
    "tests/test_sampler.py",
    "tests/test_wave_shapes.py",
    "tests/test_hf_trace.py",
)
KILLERS.update({
    **dict.fromkeys(("warmfit/importers/table.py", "warmfit/importers/mapping.py",
                     "warmfit/importers/art_misses.py"), _IMPORTER_TESTS),
    "warmfit/trainer/pricer.py": ("tests/test_pricer.py", "tests/test_pricer_oracle.py",
                                  "tests/test_pricer_admission.py",  # wave(), OOMs, max_tokens
                                  "tests/test_sampler.py", "tests/test_recorded.py"),
    **dict.fromkeys(("warmfit/integrations/_common.py", "warmfit/integrations/hf_demo.py",
                     "warmfit/integrations/huggingface.py", "warmfit/integrations/lightning.py",
                     "warmfit/integrations/sampler.py", "warmfit/integrations/tokens.py"),
                    _INTEGRATION_TESTS),
    # test_one_replay.py: the data plot and sweep --plot draw, pinned in every case, with
    # the drawing left out (in-process, no matplotlib: quick beside test_plot.py's figures)
    "warmfit/report/plot.py": ("tests/test_plot.py", "tests/test_plot_caption.py",
                               "tests/test_decisions.py", "tests/test_one_replay.py"),
    # test_one_replay.py: recommend's golden outputs, byte for byte, in every format
    "warmfit/report/recommend.py": ("tests/test_recommend.py", "tests/test_recommend_oracle.py",
                                    "tests/test_one_replay.py"),
    # the one search of recommend and the Pricer's max_tokens
    "warmfit/replay/admission.py": ("tests/test_recommend.py", "tests/test_recommend_oracle.py",
                                    "tests/test_pricer_admission.py"),
    # test_one_replay.py: replay's golden outputs in every format; test_sweep_grid.py: sweep's
    "warmfit/report/table.py": ("tests/test_layouts.py", "tests/test_stream.py",
                                "tests/test_hostile_input.py", "tests/test_cli.py",
                                "tests/test_one_replay.py", "tests/test_sweep_grid.py",
                                "tests/test_table.py"),
    # test_workers.py: the fork server's excepthook, and its exit, tested directly
    "warmfit/replay/forkserver.py": (*_REPLAY_TESTS, "tests/test_workers.py"),
    **dict.fromkeys(("warmfit/replay/engines.py",
                     "warmfit/replay/medians.py",
                     "warmfit/replay/perwave.py", "warmfit/replay/reference.py",
                     "warmfit/replay/stream.py"),
                    _REPLAY_TESTS),
    # test_rule.py: declared rules on arrays (a rule that fails there, the segmented path)
    "warmfit/replay/vectorized.py": (*_REPLAY_TESTS, "tests/test_rule.py"),
    # test_one_replay.py: replay --permute's golden output; test_seen_range.py is in already
    "warmfit/replay/permute.py": (*_REPLAY_TESTS, "tests/test_one_replay.py"),
    **dict.fromkeys(("warmfit/format/batches.py",
                     "warmfit/format/pagecrc.py", "warmfit/format/trace.py",
                     "warmfit/format/writer.py"), _FORMAT_TESTS),
    # test_files.py: each function on real files (a FIFO, a socket, links), spelled out
    "warmfit/format/files.py": (*_FORMAT_TESTS, "tests/test_files.py"),
    # the padding and equal-tokens warnings, as validate prints them
    "warmfit/format/shape.py": (*_FORMAT_TESTS, "tests/test_wave_shapes.py"),
    # LARGEST_INT: the recorder refuses a count above it (test_recorder_values.py)
    "warmfit/format/schema.py": (*_FORMAT_TESTS, "tests/test_recorder_values.py"),
    "warmfit/policies/base.py": _POLICY_TESTS,
    "warmfit/policies/rule.py": _POLICY_TESTS,
    **dict.fromkeys(("warmfit/recorder/launch.py", "warmfit/recorder/meters.py"),
                    _RECORDER_TESTS),
    # test_recorder_log.py: the log's paths the child processes of test_hostile_log.py
    # run (a torn tail's limits, a forked child, recovery's rarer cases), in this process
    "warmfit/recorder/log.py": (*_RECORDER_TESTS, "tests/test_recorder_log.py"),
    # test_recorder_values.py: what wave() takes in (int64's edge, a reading the log
    # refuses); test_recorded.py: the prices wave() and a pricer give, as recorded
    "warmfit/recorder/recorder.py": (*_RECORDER_TESTS, "tests/test_recorder_values.py",
                                     "tests/test_recorded.py",
                                     "tests/test_pricer_admission.py"),  # meter_only
})  # fmt: skip
_CLI_TESTS = (
    "tests/test_cli.py",
    "tests/test_cli_help.py",
    "tests/test_startup.py",
    "tests/test_getting_started.py",
    "tests/test_limits.py",
    "tests/test_hostile_input.py",
)
_RUN_TESTS = (
    "tests/test_workers.py",
    "tests/test_index.py",
    "tests/test_faults.py",
    "tests/test_signals.py",
    "tests/test_limits.py",
    "tests/test_stream.py",
    "tests/test_cluster.py",
    "tests/test_tasks.py",
)
#: Issue 38: the modules in no list before (the commands, the command line, errors, the
#: report formats, the worker code, the samples, what is shown, the conformance checks,
#: the device budget, every package's ``__init__``), each with the tests of its subject.
MORE_MODULES: dict[str, tuple[str, ...]] = {
    "warmfit/__init__.py": (*_CLI_TESTS, "tests/test_pricer.py"),
    "warmfit/__main__.py": (*_CLI_TESTS, "tests/test_signals.py"),
    # test_record_cli.py: record's arguments as cli.py declares them (the trainer's own options)
    "warmfit/cli.py": (*_CLI_TESTS, "tests/test_signals.py", "tests/test_record_cli.py"),
    "warmfit/errors.py": ("tests/test_errors.py", *_CLI_TESTS, "tests/test_check.py",
                          "tests/test_hostile_log.py"),
    "warmfit/commands/__init__.py": _CLI_TESTS,
    "warmfit/commands/check.py": ("tests/test_check.py", "tests/test_check_update.py",
                                  "tests/test_gate_output.py", "tests/test_gate_by_signature.py",
                                  "tests/test_one_replay.py", "tests/test_outputs.py",
                                  "tests/test_signals.py"),
    "warmfit/commands/import_.py": (*_IMPORTER_TESTS, "tests/test_outputs.py"),
    # test_budget.py: --budget and a missing path that reads as a size (budget_bytes);
    # test_validate.py, test_wave_shapes.py: validate's warnings, printed here
    "warmfit/commands/options.py": (*_CLI_TESTS, "tests/test_one_replay.py",
                                    "tests/test_cluster.py", "tests/test_outputs.py",
                                    "tests/test_budget.py", "tests/test_validate.py",
                                    "tests/test_wave_shapes.py"),
    "warmfit/commands/plot.py": ("tests/test_plot.py", "tests/test_plot_caption.py",
                                 "tests/test_one_replay.py", "tests/test_hostile_input.py",
                                 "tests/test_outputs.py"),
    "warmfit/commands/policies.py": ("tests/test_cli.py", "tests/test_policies.py"),
    "warmfit/commands/recommend.py": ("tests/test_recommend.py", "tests/test_recommend_oracle.py",
                                      "tests/test_one_replay.py"),
    "warmfit/commands/record.py": ("tests/test_record_cli.py", *_RECORDER_TESTS),
    "warmfit/commands/recover.py": ("tests/test_hostile_log.py", "tests/test_record_cli.py"),
    "warmfit/commands/replay.py": ("tests/test_cli.py", "tests/test_replay.py",
                                   "tests/test_one_replay.py", "tests/test_layouts.py",
                                   "tests/test_permute.py", "tests/test_budget.py",
                                   "tests/test_outputs.py"),
    "warmfit/commands/sweep.py": ("tests/test_decisions.py", "tests/test_sweep_grid.py",
                                  "tests/test_one_replay.py", "tests/test_cli.py",
                                  "tests/test_outputs.py"),
    "warmfit/commands/validate.py": ("tests/test_validate.py", "tests/test_cli.py",
                                     "tests/test_hostile_input.py",
                                     "tests/test_trace.py", "tests/test_pagecrc.py"),
    "warmfit/format/__init__.py": _FORMAT_TESTS,
    "warmfit/importers/__init__.py": _IMPORTER_TESTS,
    "warmfit/integrations/__init__.py": _INTEGRATION_TESTS,
    "warmfit/policies/__init__.py": _POLICY_TESTS,
    "warmfit/recorder/__init__.py": _RECORDER_TESTS,
    "warmfit/replay/__init__.py": _REPLAY_TESTS,
    "warmfit/report/__init__.py": ("tests/test_one_replay.py",),
    "warmfit/report/formats.py": ("tests/test_one_replay.py", "tests/test_gate_output.py",
                                  "tests/test_cli.py"),
    "warmfit/run/__init__.py": _RUN_TESTS,
    "warmfit/run/cluster.py": _RUN_TESTS,
    "warmfit/run/memory.py": (*_RUN_TESTS, "tests/test_memory.py"),
    "warmfit/run/signals.py": _RUN_TESTS,
    "warmfit/run/tasks.py": _RUN_TESTS,
    "warmfit/run/workers.py": _RUN_TESTS,
    "warmfit/samples/__init__.py": ("tests/test_demo.py",),
    "warmfit/samples/demo.py": ("tests/test_demo.py",),
    "warmfit/samples/synthetic.py": ("tests/test_replay.py", "tests/test_plot_caption.py",
                                     "tests/test_recommend.py", "tests/test_liger_gpu.py"),
    "warmfit/show/__init__.py": ("tests/test_progress.py",),
    "warmfit/show/names.py": ("tests/test_names.py", "tests/test_hostile_input.py",
                              "tests/test_cli.py"),
    "warmfit/show/progress.py": ("tests/test_progress.py",),
    "warmfit/show/units.py": ("tests/test_units.py", "tests/test_budget.py", "tests/test_cli.py"),
    "warmfit/testing/__init__.py": ("tests/test_conformance.py",),
    "warmfit/testing/checks.py": ("tests/test_conformance.py", "tests/test_rule.py"),
    "warmfit/trainer/__init__.py": ("tests/test_pricer.py", "tests/test_pricer_admission.py"),
    "warmfit/trainer/budget.py": ("tests/test_trainer_budget.py", "tests/test_pricer_admission.py"),
}  # fmt: skip
KILLERS.update(MORE_MODULES)
DEFAULT_MODULES += tuple(MORE_MODULES)
GENERATED_ACCEPTED_NAME = "generated.toml"
GENERATED_ACCEPTED = HERE / GENERATED_ACCEPTED_NAME
#: The baseline runs every test (no -x): a test failing unmutated is deselected.
BASELINE_PYTEST = tuple(a for a in PYTEST if a != "-x")
#: A test slower than this (unmutated) that runs no line of a module is left out of
#: the runs of the module's import-time and uncovered mutants (every killer file).
SLOW_UNRELATED_S = 10.0
#: A test's own limit in a mutant's run is at least this (test_timeouts).
MIN_TEST_LIMIT_S = 30.0
#: A mutant's timeout is at least this, whatever its tests took unmutated.
MIN_TIMEOUT_S = 60.0
#: Verdicts of the generated pass. A timeout counts as caught (the mutant hangs).
CAUGHT = ("killed", "timeout")


def killers(module: str, tests: Sequence[str] | None = None) -> list[str]:
    """The module's doctests and its killer test files that exist (in the repository)."""
    chosen = list(tests) if tests else [*KILLERS.get(module, ()), *NEW_TESTS]
    return [module, *(t for t in dict.fromkeys(chosen) if (ROOT / t.split("::")[0]).exists())]


def _base(nodeid: str) -> str:
    """A test's node id without its parameters (``t[1-2]`` -> ``t``): every case runs."""
    head, sep, last = nodeid.rpartition("::")
    return head + sep + last.split("[", 1)[0]


@dataclass
class Baseline:
    """The unmutated run: per test, its file, time and the lines it ran (by module)."""

    tests: dict[str, dict] = field(default_factory=dict)
    file_time: dict[str, float] = field(default_factory=dict)
    broken_files: dict[str, str] = field(default_factory=dict)  # file -> why it is left out
    failed: list[str] = field(default_factory=list)  # tests failing unmutated: deselected
    overhead_s: float = 3.0  # a pytest process's start, collection and end

    def file_of(self, nodeid: str) -> str:
        return nodeid.split("::", 1)[0]


def _pytest_env(copy: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(copy), str(HERE)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        **(extra or {}),
    }


def _forget_examples(copy: Path) -> None:
    """Remove Hypothesis's example database, so that no run replays another's failure."""
    for folder in (copy / ".hypothesis", copy / "tests" / ".hypothesis"):
        shutil.rmtree(folder, ignore_errors=True)


def run_baseline(
    copies: queue.Queue[Path], files: list[str], modules: list[str], workers: int
) -> Baseline:
    """Run each test file unmutated (tracing the modules' lines), ``workers`` at once."""
    baseline = Baseline()
    overheads: list[float] = []
    lock = threading.Lock()

    def one(file: str) -> None:
        copy = copies.get()
        try:
            out = copy / f".trace-{abs(hash(file))}.json"
            env = _pytest_env(
                copy,
                {
                    "WARMFIT_MUTANTS_TRACE": os.pathsep.join(modules),
                    "WARMFIT_MUTANTS_TRACE_OUT": str(out),
                },
            )
            start = time.perf_counter()
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "pytest", *BASELINE_PYTEST, "-p", "trace_plugin", file],
                    cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                with lock:
                    baseline.broken_files[file] = f"timed out after {TIMEOUT_S} s unmutated"
                return
            took = time.perf_counter() - start
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-6:])
            if done.returncode not in (0, 1) or not out.exists():
                with lock:
                    baseline.broken_files[file] = f"pytest exit {done.returncode}:\n{tail}"
                return
            found = json.loads(out.read_text(encoding="utf-8"))
            out.unlink()
            with lock:
                for nodeid, entry in found.items():
                    entry["file"] = file
                    baseline.tests[nodeid] = entry
                    if entry.get("outcome") == "failed":
                        baseline.failed.append(nodeid)
                spent = sum(e.get("duration", 0.0) for e in found.values())
                baseline.file_time[file] = spent
                overheads.append(max(0.0, took - spent))
            print(f"  baseline {file}: {len(found)} tests, {took:.0f} s", flush=True)
        finally:
            _forget_examples(copy)
            copies.put(copy)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for future in as_completed([pool.submit(one, f) for f in files]):
            future.result()
    if overheads:
        baseline.overhead_s = statistics.median(overheads)
    return baseline


def print_stubs(report: Path) -> int:
    """``[[accepted]]`` entries for a report's unaccepted survivors, reasons to write."""
    doc = json.loads(report.read_text(encoding="utf-8"))
    for m in doc["mutants"]:
        if m["verdict"] != "survived" or m["accepted"] is not None:
            continue
        line = " ".join(m["before"].split())  # the line(s) mutated, whitespace collapsed
        print("[[accepted]]")
        print(f"id = {json.dumps(m['id'])}")
        print(f"file = {json.dumps(m['file'])}")
        print(f"line = {_toml_literal(line)}")
        print(f"kind = {json.dumps(m['kind'])}")
        if m["occurrence"]:
            print(f"occurrence = {m['occurrence']}")
        print(f"# + {m['after'].strip()}")
        print('reason = """\nTODO\n"""\n')
    return 0


def _toml_literal(text: str) -> str:
    """``text`` as a TOML string: literal (single quotes) where it can be."""
    return f"'{text}'" if "'" not in text else json.dumps(text)


def tree_fingerprint(files: list[str]) -> str:
    """A digest of the package, the tests' helpers and the test files ``files``: a
    saved baseline holds while it is unchanged."""
    paths = sorted((ROOT / "warmfit").rglob("*.py"))
    paths += sorted(p for p in (ROOT / "tests").rglob("*.py") if not p.name.startswith("test_"))
    paths += [ROOT / f for f in sorted(files) if f.startswith("tests/")] + [ROOT / "conftest.py"]
    digest = hashlib.sha256()
    for path in paths:
        if path.exists():
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def save_baseline(baseline: Baseline, modules: list[str], files: list[str], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "modules": modules,
        "files": files,
        "fingerprint": tree_fingerprint(files),
        **dataclasses.asdict(baseline),
    }
    path.write_text(json.dumps(doc), encoding="utf-8")


def load_baseline(path: Path, modules: list[str], files: list[str]) -> Baseline | None:
    """A saved baseline that traced these modules and ran these files (or more), or
    None, said why, when it did not or the tree has changed since."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"--baseline {path}: cannot be read ({exc}); running the baseline")
        return None
    saved_modules, saved_files = doc.pop("modules", []), doc.pop("files", [])
    if not (set(modules) <= set(saved_modules) and set(files) <= set(saved_files)):
        print(f"--baseline {path}: made for other modules or tests; running the baseline")
        return None
    if doc.pop("fingerprint", None) != tree_fingerprint(saved_files):
        print(f"--baseline {path}: the package or the tests changed since; running the baseline")
        return None
    return Baseline(**doc)


@dataclass
class Plan:
    """What one mutant runs: pytest arguments, what they took unmutated, and why."""

    args: list[str]
    expected_s: float
    how: str  # "covering", "import-time", "uncovered"
    tests: int


def plan(m: Generated, files: list[str], baseline: Baseline, every: bool = False) -> Plan:
    """The tests to run against ``m``: those that ran its lines unmutated, fastest first.

    A test whose *set-up* ran them (a fixture another test of its file may share)
    brings its whole file. A line run at import time (a default value, a module
    constant) is run against the tests that ran any line of its function or its
    module. A mutant no test ran (code run only in worker processes, or by no test
    at all) is run against every killer file, fastest file first, but a slow test
    that ran none of the module; so is any mutant with ``every`` (to confirm a
    survivor), and a class attribute's (its class body ran once, at the import, in
    whichever test imported the module first; the attribute is read wherever the
    class is used)."""
    usable = [f for f in files if f not in baseline.broken_files]
    wanted = set(m.lines)
    whole: set[str] = set()
    single: dict[str, float] = {}
    if m.import_time:
        # run when the module is imported: the tests that ran its function, class or module
        first, last = m.scope if m.scope != (0, 0) else (1, m.original.count("\n") + 1)
        wanted = set(range(first, last + 1))
        if m.original.splitlines()[first - 1].lstrip().startswith("class "):
            every = True  # a class attribute (a dataclass field's default): see above
    if not every:
        for nodeid, entry in baseline.tests.items():
            if entry["file"] not in usable or entry.get("outcome") == "skipped":
                continue
            if wanted & set(entry.get("setup_lines", {}).get(m.file, ())):
                whole.add(entry["file"])
            elif entry.get("outcome") == "failed":
                continue  # deselected
            elif wanted & set(entry.get("lines", {}).get(m.file, ())):
                base = _base(nodeid)
                single[base] = single.get(base, 0.0) + entry.get("duration", 0.0)
    far: set[str] = set()
    if every or not (whole or single):
        whole, single = set(usable), {}
        # a slow test that runs none of the module's code is left out of these runs
        far = {
            n for n, e in baseline.tests.items()
            if e["file"] in whole and e.get("duration", 0.0) > SLOW_UNRELATED_S
            and not (e.get("lines", {}).get(m.file) or e.get("setup_lines", {}).get(m.file))
        }  # fmt: skip
    timed = [(baseline.file_time.get(f, 0.0), f) for f in whole]
    timed += [(t, n) for n, t in single.items() if baseline.file_of(n) not in whole]
    timed.sort()
    args = [name for _, name in timed]
    chosen = [
        n for n in baseline.tests
        if (baseline.file_of(n) in whole or _base(n) in single) and n not in far
    ]  # fmt: skip
    deselect = [n for n in baseline.failed if n in chosen] + sorted(far)
    for nodeid in deselect:
        args += ["--deselect", nodeid]
    count = len(chosen) - len(set(baseline.failed) & set(chosen))
    left_out = {n for n in deselect if baseline.file_of(n) in whole}  # counted in file_time
    saved = sum(baseline.tests[n].get("duration", 0.0) for n in left_out)
    expected = sum(t for t, _ in timed) - saved + baseline.overhead_s
    return Plan(args, expected, "every killer" if every else _how(m, whole, single, usable), count)


def _how(m: Generated, whole: set[str], single: dict[str, float], usable: list[str]) -> str:
    if not single and whole == set(usable):
        return "uncovered"
    return "import-time" if m.import_time else "covering"


class KillOrder:
    """The tests that killed a module's mutants so far run first for its next ones.

    A plan lists its tests fastest first, so a mutant only the module's slow own test
    file kills runs every faster test before it, mutant after mutant (recorder.py's
    kills took 15 s on average, most of it in tests that passed). Neighbouring mutants
    die to the same tests: each plan's tests are put in order of the kills they made
    in this run (most first), ties kept fastest first. A survivor runs every test
    either way; only where a kill comes sooner changes."""

    def __init__(self) -> None:
        self.kills: dict[tuple[str, str], int] = {}
        self.lock = threading.Lock()

    def ordered(self, module: str, the_plan: Plan) -> Plan:
        """``the_plan`` with its tests (not its --deselect options) in kill order."""
        cut = next((i for i, a in enumerate(the_plan.args) if a.startswith("--")), None)
        tests = the_plan.args[:cut] if cut is not None else the_plan.args
        rest = the_plan.args[len(tests) :]
        with self.lock:
            rank = {t: -self.kills.get((module, t), 0) for t in tests}
        ordered = sorted(tests, key=lambda t: rank[t])  # sorted() is stable: ties keep order
        return dataclasses.replace(the_plan, args=[*ordered, *rest])

    def killed(self, module: str, the_plan: Plan, detail: str) -> None:
        """Count a kill for the plan's test that failed (named in ``detail``, pytest's
        ``FAILED tests/x.py::test_y[...] - ...`` line)."""
        found = re.match(r"(?:FAILED|ERROR) (\S+)", detail)
        if found is None:
            return
        nodeid = found.group(1)
        for test in the_plan.args:
            if test.startswith("--"):
                break
            if nodeid == test or nodeid.startswith((test + "::", test + "[")):
                with self.lock:
                    self.kills[(module, test)] = self.kills.get((module, test), 0) + 1
                return


@dataclass
class Outcome:
    mutant: Generated
    verdict: str  # killed, survived, timeout, not compiling, error
    took: float
    plan: Plan
    detail: str = ""
    accepted: str | None = None
    confirmed: bool = False

    def record(self) -> dict[str, object]:
        m = self.mutant
        return {
            "id": m.id,
            "file": m.file,
            "line": m.line,
            "col": m.col,
            "kind": m.kind,
            "occurrence": m.occurrence,
            "before": m.before,
            "after": m.after,
            "import_time": m.import_time,
            "verdict": self.verdict,
            "accepted": self.accepted,
            "seconds": round(self.took, 2),
            "expected_s": round(self.plan.expected_s, 2),
            "selection": self.plan.how,
            "tests_run": self.plan.tests,
            "test_args": [a for a in self.plan.args if not a.startswith("--")],
            "confirmed_on_every_killer": self.confirmed,
            "detail": self.detail,
        }


def resumed(
    partial: Path, mutants: list[Generated], matched: dict[str, Accepted]
) -> dict[str, Outcome]:
    """The outcomes an interrupted run wrote, of the mutants that are still the same."""
    by_id = {m.id: m for m in mutants}
    found: dict[str, Outcome] = {}
    for line in partial.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by the interruption
        m = by_id.get(record.get("id"))
        if m is None or record.get("after") != m.after or record.get("before") != m.before:
            continue
        done = Plan(record["test_args"], record["expected_s"], record["selection"],
                    record["tests_run"])  # fmt: skip
        outcome = Outcome(m, record["verdict"], record["seconds"], done, record["detail"])
        outcome.accepted = matched[m.id].reason if m.id in matched else None
        found[m.id] = outcome
    return found


def _failure_line(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED", "ERROR")):
            return line[:300]
    lines = output.strip().splitlines()
    return lines[-1][:300] if lines else ""


class PytestServer:
    """A ``mutants/pytest_server.py`` process in one copy of the tree: pytest runs forked
    from a process that has imported the libraries already (see that module)."""

    def __init__(self, copy: Path, env: dict[str, str]) -> None:
        self.copy = copy
        self.env = env
        self.out = copy / ".mutant-run.txt"
        self.process: subprocess.Popen[str] | None = None
        self.running: int | None = None  # the pid of the run in progress

    def _start(self) -> subprocess.Popen[str]:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, str(HERE / "pytest_server.py")],
                cwd=self.copy, env=self.env, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            )  # fmt: skip
        return self.process

    def run(self, args: list[str], timeout: float) -> tuple[int | None, str]:
        """pytest's exit code (None: timed out, its tests killed) and its output."""
        process = self._start()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps({"args": args, "out": str(self.out)}) + "\n")
        process.stdin.flush()
        pid = self.running = json.loads(process.stdout.readline())["pid"]
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            _kill_group(pid)

        timer = threading.Timer(timeout, expire)
        timer.start()
        try:
            answer = process.stdout.readline()
        finally:
            timer.cancel()
            self.running = None
        if not answer:  # the server died: start another next time
            self.close()
            return -9, "the pytest server died"
        rc = json.loads(answer)["rc"]
        output = self.out.read_text(encoding="utf-8", errors="replace")
        return (None if fired.is_set() and rc < 0 else rc), output

    def close(self) -> None:
        if self.running is not None:  # interrupted: end its tests too
            _kill_group(self.running)
        if self.process is not None and self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None


def test_limits(baseline: Baseline, factor: float) -> dict[str, float]:
    """Each test's limit in a mutant's run: ``factor`` times its unmutated time, at least
    :data:`MIN_TEST_LIMIT_S`; a parametrized test's base id gets its slowest case's."""
    limits: dict[str, float] = {}
    for nodeid, entry in baseline.tests.items():
        limit = max(MIN_TEST_LIMIT_S, factor * entry.get("duration", 0.0))
        limits[nodeid] = limit
        base = nodeid.split("[", 1)[0]
        limits[base] = max(limits.get(base, 0.0), limit)
    return limits


def _kill_group(pid: int) -> None:
    """Kill a timed-out run's process group (its tests' worker processes too)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def run_mutant(
    m: Generated,
    copy: Path,
    the_plan: Plan,
    timeout_factor: float,
    server: PytestServer | None = None,
    env: dict[str, str] | None = None,
) -> tuple[str, float, str]:
    """Plant ``m`` in ``copy``, run its tests, restore the file: (verdict, seconds, detail).

    The tests run forked from ``server``, or in a new process without one."""
    source = m.source()
    try:
        compile(source, m.file, "exec")
    except SyntaxError as exc:
        return "not compiling", 0.0, str(exc)
    path = copy / m.file
    original = path.read_text(encoding="utf-8")
    timeout = max(MIN_TIMEOUT_S, timeout_factor * the_plan.expected_s)
    start = time.perf_counter()
    try:
        path.write_text(source, encoding="utf-8")
        args = [*PYTEST, "-p", "test_timeouts", *the_plan.args]
        if server is not None:
            rc, output = server.run(args, timeout)
        else:
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "pytest", *args],
                    cwd=copy, env=env or _pytest_env(copy), capture_output=True, text=True,
                    timeout=timeout,
                )  # fmt: skip
                rc, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                rc, output = None, ""
    finally:
        path.write_text(original, encoding="utf-8")
        _forget_examples(copy)
    took = time.perf_counter() - start
    if rc is None:
        return "timeout", took, f"over {timeout:.0f} s"
    hung = re.search(r"^Timeout \((\d+:\d\d:\d\d)(\.\d+)?\)!$", output, re.MULTILINE)
    if hung:  # test_timeouts: one test ran past its own limit
        return "timeout", took, f"a test ran over its limit ({hung.group(1)})"
    if rc == 0:  # the detail: pytest's last line ("N passed in S s")
        return "survived", took, (output.strip().splitlines() or [""])[-1][:300]
    if rc in (1, 2, 3):  # failed; collection or import broken; internal error
        return "killed", took, _failure_line(output)
    if rc < 0:  # the tests crashed (memory exhausted, say)
        return "killed", took, f"pytest died of signal {-rc}"
    tail = " | ".join(output.strip().splitlines()[-3:])
    return "error", took, f"pytest exit {rc}: {tail}"[:500]


def _module_table(outcomes: list[Outcome], pragma: dict[str, int]) -> list[str]:
    rows = []
    header = f"  {'module':<34} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'accepted':>8} {'rate':>6} {'skipped':>7}"
    rows.append(header)
    by_module: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_module.setdefault(o.mutant.file, []).append(o)
    for module, mine in by_module.items():
        count = {v: sum(o.verdict == v for o in mine) for v in ("killed", "timeout", "survived")}
        accepted = sum(o.verdict == "survived" and o.accepted is not None for o in mine)
        ran = count["killed"] + count["timeout"] + count["survived"]
        rate = f"{100 * count['survived'] / ran:.1f}%" if ran else "-"
        skipped = sum(o.verdict == "not compiling" for o in mine) + pragma.get(module, 0)
        rows.append(
            f"  {module:<34} {len(mine):>7} {count['killed']:>6} {count['timeout']:>7} "
            f"{count['survived']:>8} {accepted:>8} {rate:>6} {skipped:>7}"
        )
    return rows


def generated_main(args: argparse.Namespace) -> int:
    from generate import (  # mutants/ is on sys.path
        generate,
        load_accepted,
        match_accepted,
        wrong_occurrences,
    )

    if args.no_baseline:
        print("--no-baseline: the generated pass picks each mutant's tests from the baseline run")
        return 2
    if args.stubs:
        return print_stubs(Path(args.stubs))
    modules = list(dict.fromkeys(args.module or DEFAULT_MODULES))
    for module in modules:
        if not (ROOT / module).is_file() or not module.endswith(".py"):
            print(f"--module {module}: no such Python file (a path from the repository root)")
            return 2
        if module not in KILLERS and not args.tests:
            print(f"--module {module}: no killer tests known (KILLERS in mutants/run.py); "
                  "name them with --tests")  # fmt: skip
            return 2
    start_all = time.perf_counter()
    mutants: list[Generated] = []
    pragma: dict[str, int] = {}
    for module in modules:
        made = generate(ROOT, module)
        mutants += made
        pragma[module] = made.pragma_skipped + made.equivalent_skipped
    generated_count = len(mutants)
    accepted_entries = load_accepted(GENERATED_ACCEPTED)
    matched, unmatched = match_accepted(mutants, accepted_entries)
    slips = wrong_occurrences(mutants, accepted_entries)
    if slips:
        print("mutants/generated.toml: entries that would accept another mutant of their line:",
              *slips, sep="\n")  # fmt: skip
        return 2
    if args.ids:
        known = {m.id for m in mutants}
        missing = sorted(set(args.ids) - known)
        if missing:
            print(f"no such generated mutant: {', '.join(missing)}")
            return 2
        mutants = [m for m in mutants if m.id in args.ids]
    if args.sample is not None and args.sample < len(mutants):
        chosen = set(random.Random(args.seed).sample(range(len(mutants)), args.sample))
        mutants = [m for i, m in enumerate(mutants) if i in chosen]
    if args.list:
        for m in mutants:
            where = " (accepted)" if m.id in matched else ""
            print(f"{m.id:<44} {m.before.strip()}\n{'':<44} {m.after.strip()}{where}")
        print(f"{len(mutants)} of {generated_count} generated mutants")
        return 0
    report_path = (
        Path(args.report)
        if args.report
        else Path(tempfile.gettempdir())
        / (f"warmfit-mutants-generated-{time.strftime('%Y%m%d-%H%M%S')}.json")
    )
    print(f"{len(mutants)} of {generated_count} generated mutants in {len(modules)} modules; "
          f"report: {report_path}", flush=True)  # fmt: skip
    files_of = {module: killers(module, args.tests) for module in modules}
    for module in files_of:
        absent = [
            t
            for t in (*KILLERS.get(module, ()), *NEW_TESTS)
            if not (ROOT / t.split("::")[0]).exists()
        ]
        if absent and not args.tests:
            print(f"  {module}: no {', '.join(absent)} (left out)")
    all_files = list(dict.fromkeys(f for m in modules for f in files_of[m]))
    workers = max(1, args.workers)
    outcomes: list[Outcome] = []
    with (
        tempfile.TemporaryDirectory(prefix="warmfit-mutants-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        copies: queue.Queue[Path] = queue.Queue()
        servers: dict[Path, PytestServer] = {}
        for i in range(workers):
            copy = Path(tmp) / f"w{i}"
            copy.mkdir()
            copy_tree(copy)
            check_copy_is_imported(copy)
            copies.put(copy)
        start = time.perf_counter()
        baseline_path = report_path.with_suffix(".baseline.json")
        saved = args.baseline or (
            str(baseline_path) if args.resume and baseline_path.exists() else None
        )
        reused = load_baseline(Path(saved), modules, all_files) if saved else None
        if reused is not None:
            baseline = reused
            print(f"baseline: reused {saved}", flush=True)
        else:
            print(f"baseline: {len(all_files)} test files unmutated, tracing the modules' "
                  "lines", flush=True)  # fmt: skip
            baseline = run_baseline(copies, all_files, modules, workers)
            save_baseline(baseline, modules, all_files, baseline_path)
            print(f"baseline: saved as {baseline_path} (--baseline)", flush=True)
        baseline_s = time.perf_counter() - start
        print(f"baseline: {len(baseline.tests)} tests, {baseline_s:.0f} s", flush=True)
        for file, why in baseline.broken_files.items():
            print(f"  left out: {file}: {why}")
        for nodeid in baseline.failed:
            print(f"  deselected, fails unmutated: {nodeid}")
        if not baseline.tests:
            print("no killer test ran unmutated: nothing can be tested")
            return 2
        if args.skip_accepted:  # before resuming: an outcome of one accepted since goes too
            mutants = [m for m in mutants if m.id not in matched]
        earlier: dict[str, Outcome] = {}
        partial_path = report_path.with_suffix(".partial.jsonl")
        if args.resume and partial_path.exists():
            earlier = resumed(partial_path, mutants, matched)
            print(f"resumed: {len(earlier)} mutants done before ({partial_path})")
        limits = Path(tmp) / "limits.json"
        limits.write_text(json.dumps(test_limits(baseline, args.timeout_factor)), "utf-8")
        run_env = {
            copy: _pytest_env(copy, {"WARMFIT_MUTANTS_LIMITS": str(limits)})
            for copy in list(copies.queue)
        }
        for copy in run_env if not args.no_fork else ():
            servers[copy] = PytestServer(copy, run_env[copy])
            stack.callback(servers[copy].close)
        plans = {m.id: plan(m, files_of[m.file], baseline) for m in mutants}
        lock = threading.Lock()
        done_count = len(earlier)
        # each outcome as it comes, for a long run to be read (or be resumed); a resumed
        # run appends, even when none of the mutants it runs now is among those there
        if not (args.resume and partial_path.exists()):
            partial_path.write_text("", encoding="utf-8")
        kill_order = KillOrder()

        def one(m: Generated) -> Outcome:
            nonlocal done_count
            copy = copies.get()
            the_plan = kill_order.ordered(m.file, plans[m.id])
            try:
                verdict, took, detail = run_mutant(
                    m, copy, the_plan, args.timeout_factor, servers.get(copy), run_env[copy]
                )
            finally:
                copies.put(copy)
            if verdict == "killed":
                kill_order.killed(m.file, the_plan, detail)
            outcome = Outcome(m, verdict, took, the_plan, detail)
            entry = matched.get(m.id)
            if entry is not None:
                outcome.accepted = entry.reason
            with lock:
                done_count += 1
                label = verdict.upper() if verdict == "survived" and entry is None else verdict
                if verdict == "survived" and entry is not None:
                    label = "survived (accepted)"
                print(f"[{done_count:>4}/{len(mutants)}] {label:<19} {m.id:<44} "
                      f"{took:5.0f} s  {plans[m.id].tests} tests ({plans[m.id].how})",
                      flush=True)  # fmt: skip
                if args.show and verdict == "killed":
                    print(f"      {detail[:150]}")
                with partial_path.open("a", encoding="utf-8") as partial:
                    partial.write(json.dumps(outcome.record()) + "\n")
            return outcome

        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            futures = [pool.submit(one, m) for m in mutants if m.id not in earlier]
            outcomes = [*earlier.values(), *(f.result() for f in as_completed(futures))]
        except BaseException:  # interrupted: run nothing more, end the runs in progress
            pool.shutdown(wait=False, cancel_futures=True)
            for server in servers.values():
                server.close()
            raise
        pool.shutdown()
        order = {m.id: i for i, m in enumerate(mutants)}
        outcomes.sort(key=lambda o: order[o.mutant.id])
        if args.confirm:
            again = [o for o in outcomes if o.verdict == "survived" and o.plan.how == "covering"]
            if again:
                print(f"confirming {len(again)} survivors on every killer test of their module",
                      flush=True)  # fmt: skip

            def confirm(o: Outcome) -> None:
                full = plan(o.mutant, files_of[o.mutant.file], baseline, every=True)
                copy = copies.get()
                try:
                    verdict, took, detail = run_mutant(
                        o.mutant, copy, full, args.timeout_factor, servers.get(copy),
                        run_env[copy],
                    )  # fmt: skip
                finally:
                    copies.put(copy)
                o.confirmed = True
                if verdict != "survived":
                    o.verdict, o.detail, o.plan = verdict, f"on confirming: {detail}", full
                o.took += took
                print(f"  confirm {o.mutant.id}: {verdict} ({took:.0f} s)", flush=True)

            with ThreadPoolExecutor(max_workers=workers) as pool:
                for future in as_completed([pool.submit(confirm, o) for o in again]):
                    future.result()

    elapsed = time.perf_counter() - start_all
    survivors = [o for o in outcomes if o.verdict == "survived"]
    unaccepted = [o for o in survivors if o.accepted is None]
    if survivors:
        print("\nsurvivors:")
    for o in survivors:
        m = o.mutant
        state = "accepted" if o.accepted else "NOT ACCEPTED"
        print(f"  {m.id}  [{state}; {o.plan.tests} tests, {o.plan.how}]")
        print(f"      - {m.before.strip()}")
        print(f"      + {m.after.strip()}")
        shown = [a for a in o.plan.args if not a.startswith("--")]
        print(f"      tests: {' '.join(shown[:6])}{' ...' if len(shown) > 6 else ''}")
    errors = [o for o in outcomes if o.verdict == "error"]
    for o in errors:
        print(f"  ERROR {o.mutant.id}: {o.detail}")
    count = {v: sum(o.verdict == v for o in outcomes) for v in ("killed", "timeout", "survived")}
    skipped = sum(o.verdict == "not compiling" for o in outcomes) + sum(pragma.values())
    ran = count["killed"] + count["timeout"] + count["survived"]
    rate = 100 * count["survived"] / ran if ran else 0.0
    print()
    print(*_module_table(outcomes, pragma), sep="\n")
    print(
        f"\n{len(outcomes)} generated, {count['killed'] + count['timeout']} killed "
        f"({count['timeout']} by a timeout), {count['survived']} survived ({rate:.1f}%; "
        f"{count['survived'] - len(unaccepted)} accepted in {GENERATED_ACCEPTED.name}), "
        f"{skipped} not compiling/equivalent-skipped, {len(errors)} errors; "
        f"{elapsed / 60:.1f} min with {workers} workers"
    )
    stale = (
        [e for e in unmatched if e.file in modules] if args.sample is None and not args.ids else []
    )
    for entry in stale:
        print(
            f"  {GENERATED_ACCEPTED.name}: {entry.id} matches no mutant now (update or remove it)"
        )
    report = {
        "schema": "warmfit.mutants-generated/1",
        "modules": modules,
        "killers": files_of,
        "workers": workers,
        "sample": args.sample,
        "seed": args.seed,
        "generated": generated_count,
        "run": len(outcomes),
        "seconds": round(elapsed, 1),
        "baseline": {
            "seconds": round(baseline_s, 1),
            "tests": len(baseline.tests),
            "left_out": baseline.broken_files,
            "deselected": baseline.failed,
            "overhead_s": round(baseline.overhead_s, 2),
        },
        "counts": {**count, "not_compiling": skipped, "errors": len(errors)},
        "stale_accepted": [e.id for e in stale],
        "mutants": [o.record() for o in outcomes],
    }
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"report: {report_path}")
    if unaccepted:
        print(f"{len(unaccepted)} survivors outside mutants/{GENERATED_ACCEPTED.name}: write a "
              "test that kills each, or accept it there with a reason.")  # fmt: skip
        return 1
    return 2 if errors else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
