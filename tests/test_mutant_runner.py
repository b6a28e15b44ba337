"""``mutants/run.py``'s kill order: the tests that killed a module's mutants run first
for its next ones (issue 38: a survivor costs every test; a kill should cost few)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "mutants"))

from run import KillOrder, Plan  # noqa: E402  (mutants/ is no package)

MODULE = "warmfit/recorder/recorder.py"
#: fastest first, as plan() gives them, then the tests left out
PLAN = Plan(
    args=[
        "warmfit/recorder/recorder.py",
        "tests/test_recorded.py::test_prices",
        "tests/test_recorder.py",
        "--deselect",
        "tests/test_recorder.py::test_fails_unmutated",
    ],
    expected_s=40.0,
    how="covering",
    tests=30,
)


def listed(plan: Plan) -> list[str]:
    return plan.args[: plan.args.index("--deselect")]


def test_a_plan_keeps_its_order_until_a_test_kills():
    order = KillOrder()
    assert order.ordered(MODULE, PLAN).args == PLAN.args


def test_the_file_that_killed_runs_first_for_the_next_mutant_of_its_module():
    order = KillOrder()
    order.killed(MODULE, PLAN, "FAILED tests/test_recorder.py::test_rank[-1-RANK] - Assert")
    again = order.ordered(MODULE, PLAN)
    assert listed(again) == [
        "tests/test_recorder.py",
        "warmfit/recorder/recorder.py",
        "tests/test_recorded.py::test_prices",
    ]
    # the left-out tests stay left out, after the tests
    assert again.args[3:] == ["--deselect", "tests/test_recorder.py::test_fails_unmutated"]
    assert (again.expected_s, again.how, again.tests) == (40.0, "covering", 30)


def test_more_kills_come_first_and_a_single_test_is_credited_by_its_cases():
    order = KillOrder()
    order.killed(MODULE, PLAN, "FAILED tests/test_recorder.py::test_a - AssertionError")
    for case in ("[1]", "[2]"):
        order.killed(MODULE, PLAN, f"FAILED tests/test_recorded.py::test_prices{case} - x")
    assert listed(order.ordered(MODULE, PLAN)) == [
        "tests/test_recorded.py::test_prices",  # 2 kills
        "tests/test_recorder.py",  # 1
        "warmfit/recorder/recorder.py",  # 0
    ]


def test_a_kill_counts_for_its_module_only_and_a_line_without_a_test_for_none():
    order = KillOrder()
    order.killed("warmfit/recorder/log.py", PLAN, "FAILED tests/test_recorder.py::t - x")
    order.killed(MODULE, PLAN, "pytest died of signal 9")
    # a test named like the start of another is not it
    order.killed(MODULE, PLAN, "FAILED tests/test_recorded.py::test_prices_again - x")
    assert order.ordered(MODULE, PLAN).args == PLAN.args
    assert order.ordered("warmfit/recorder/log.py", PLAN).args[0] == "tests/test_recorder.py"
