"""The CI gate (``warmfit check``) and the safe factor at their edges, numbers spelled out.

Each test kills survivors of the generated mutation pass over
``warmfit/report/gate.py`` and ``warmfit/report/sweep.py`` (``make
mutants-generated``), named in its docstring by the pass's id
(``FILE:LINE:COL:KIND``, lines as the files stood when the tests were written).

Worked trace (``tests/test_check.py``'s ``ROWS``): run ``run``, two whole
waves; the second is priced at 290 B/token * 200 + 1_000 = 59_000 bytes before
the factor, against an actual 60_000 - 10_000 = 50_000. At the default safety
factor 1.1 it is priced int(59_000 * 1.1) = 64_900: over-estimate +29.8%, one
priced wave, no wave under its peak.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.command_line import invoke
from tests.strategies import examples
from tests.test_check import ROWS, small_trace
from warmfit.format.trace import readings_frame, write_trace
from warmfit.replay import replay
from warmfit.report.gate import (
    LIMITS,
    CheckReport,
    CheckResult,
    ExpectationsError,
    _round_limit,
    evaluate,
    parse_expectations,
    read_expectations,
)
from warmfit.report.sweep import safe_factors

FIX = "See docs/how-to/ci-gate.md for the format of an expectations file."
MEDIAN, LARGEST, UNDER, PRICED = LIMITS  # the four limits, in file order


#: The PR's two policies, named where a worked example gives their figures alone.
PR_TWO = ["max-merge", "warm-fit"]


def check(trace: Path, expect: Path, *args: str) -> tuple[int, str, str]:
    return invoke("check", str(trace), "--expect", str(expect), *args)


# --------------------------------------------------------------------------- messages


def test_an_error_without_a_fix_ends_at_its_problem() -> None:
    """Kills gate.py:96:12:If->False (the fix dropped) and gate.py:96:12:If->True (a
    trailing space after a problem given no fix)."""
    assert str(ExpectationsError("e.toml", "is bad.")) == "e.toml: is bad."
    assert str(ExpectationsError("e.toml", "is bad.", "Do this.")) == "e.toml: is bad. Do this."


def test_an_unreadable_file_says_why_and_nothing_more(tmp_path: Path) -> None:
    """Kills gate.py:96:12:If->True, end to end: a file that is not UTF-8 cannot be read,
    and its one line ends at the reason (no fix, no trailing space)."""
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    expect.write_bytes(b"\xff\xfe[runs]\n")
    code, out, err = check(trace, expect)
    assert (code, out) == (2, "")
    assert err == (
        f"warmfit: error: {expect}: cannot be read ('utf-8' codec can't decode byte 0xff in "
        "position 0: invalid start byte).\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[runs]\nEP1 = 3\n",
            "[runs.EP1] must hold one table per policy, like [runs.EP1.warm-fit].",
        ),
        (
            '[runs."run 1"]\nwarm-fit = 3\n',
            '[runs."run 1"] warm-fit = 3 is not a table of limits; write it as '
            '[runs."run 1".warm-fit] followed by its limits.',
        ),
        (
            "[runs.EP1.warm-fit]\nmax_under_peak = -1\n",
            "[runs.EP1.warm-fit] max_under_peak must be a whole number >= 0; got -1.",
        ),
        (
            "[runs.EP1.max-merge]\nmeasured = { under_peak = true }\n",
            "[runs.EP1.max-merge] measured under_peak must be a number; got True.",
        ),
    ],
)
def test_a_bad_table_is_named_as_it_is_written(text: str, message: str) -> None:
    """Kills gate.py:144:12:Return->None ("None must hold ...") and
    gate.py:144:47:IfExp->True (every table named [runs.RUN], its policy dropped).

    A run's table is named ``[runs.RUN]``, a run and policy's ``[runs.RUN.POLICY]``,
    a key that is not bare quoted as TOML quotes it.
    """
    with pytest.raises(ExpectationsError) as caught:
        parse_expectations(text, "e.toml")
    assert str(caught.value) == f"e.toml: {message} {FIX}"


# --------------------------------------------------------------------------- the file


@pytest.mark.parametrize(("value", "shown"), [("true", "True"), ('"1.1"', "'1.1'")])
def test_a_safety_factor_that_is_not_a_number_is_refused(
    tmp_path: Path, value: str, shown: str
) -> None:
    """Kills gate.py:181:8:If->False and gate.py:181:33:Or->And.

    ``safety_factor = true`` is a TOML boolean, not the number 1 (Python's
    ``float(True)`` is 1.0); ``safety_factor = "1.1"`` is a string (``float("1.1")``
    is 1.1). Either is refused with exit 2, naming the value, never taken as a
    factor: a gate that passed at some factor the file does not say would be no gate.
    """
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    expect.write_text(f"safety_factor = {value}\n[runs.run.warm-fit]\nmax_under_peak = 0\n")
    code, out, err = check(trace, expect)
    assert (code, out) == (2, "")
    assert err == f"warmfit: error: {expect}: safety_factor must be a number; got {shown}. {FIX}\n"


def test_measured_must_be_a_table(tmp_path: Path) -> None:
    """Kills gate.py:257:8:If->False (``measured = 3`` read with ``.items()``: a traceback)."""
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    expect.write_text("[runs.run.warm-fit]\nmax_under_peak = 0\nmeasured = 3\n")
    code, out, err = check(trace, expect)
    assert (code, out) == (2, "")
    assert err == (
        f"warmfit: error: {expect}: [runs.run.warm-fit] measured must be a table of figures "
        f"like {{ under_peak = 0 }}. {FIX}\n"
    )


@pytest.mark.parametrize(
    ("figure", "value", "shown"),
    [
        ("under_peak", "true", "True"),  # a boolean is no count, though bool is an int
        ("median_over_estimate", "false", "False"),
        ("median_over_estimate", '"0.1"', "'0.1'"),  # a string is no number
        ("median_over_estimate", "nan", "nan"),  # TOML's nan and inf are floats
        ("max_over_estimate", "inf", "inf"),
        ("max_over_estimate", "-inf", "-inf"),
        ("priced_waves", "[1]", "[1]"),
    ],
)
def test_a_measured_figure_must_be_a_finite_number(figure: str, value: str, shown: str) -> None:
    """Kills gate.py:271:46:And->Or (a boolean accepted; a string reaches ``isfinite``: a
    TypeError), gate.py:272:12:If->False (nothing refused) and gate.py:272:19:Or->And
    (a boolean, nan or inf accepted; a string a TypeError)."""
    text = f"[runs.EP1.warm-fit]\nmax_under_peak = 0\nmeasured = {{ {figure} = {value} }}\n"
    with pytest.raises(ExpectationsError) as caught:
        parse_expectations(text, "e.toml")
    assert str(caught.value) == (
        f"e.toml: [runs.EP1.warm-fit] measured {figure} must be a number; got {shown}. {FIX}"
    )


def test_a_measured_count_stays_a_whole_number(tmp_path: Path) -> None:
    """Kills gate.py:274:40:IfExp->True (every measured figure read as a float).

    The counts ``under_peak = 0`` and ``priced_waves = 1`` are read as the ints 0
    and 1, and a check's JSON and CSV give them as written (``0``, not ``0.0``); a
    fraction written ``0`` is read as the float 0.0.
    """
    e = parse_expectations(
        "[runs.run.warm-fit]\nmax_under_peak = 0\n"
        "measured = { under_peak = 0, priced_waves = 1, median_over_estimate = 0 }\n"
    )
    figures = e.measured[("run", "warm-fit")]
    assert [(k, type(v)) for k, v in figures.items()] == [
        ("under_peak", int),
        ("priced_waves", int),
        ("median_over_estimate", float),
    ]
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    expect.write_text("[runs.run.warm-fit]\nmax_under_peak = 0\nmeasured = { under_peak = 0 }\n")
    code, out, _ = check(trace, expect, "-f", "json")
    assert code == 0
    assert '"measured": 0\n' in out
    (result,) = json.loads(out)["results"]
    assert type(result["measured"]) is int
    code, out, _ = check(trace, expect, "-f", "csv")
    assert (
        code == 0 and out.splitlines()[1] == "run,warm-fit,max_under_peak,under_peak,0,0,true,ok,0"
    )


def test_a_directory_given_as_the_file_is_named_as_such(tmp_path: Path) -> None:
    """Kills gate.py:281:8:If->False (the directory read as a file: "cannot be read
    ([Errno 21] Is a directory ...)", with no word of what to do)."""
    trace = small_trace(tmp_path)
    folder = tmp_path / "expect"
    folder.mkdir()
    code, out, err = check(trace, folder)
    assert (code, out) == (2, "")
    assert err == (
        f"warmfit: error: {folder}: is a directory, not a regular file. "
        "Name the TOML file itself.\n"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_fifo_given_as_the_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    """Kills gate.py:281:8:If->False (the FIFO opened for reading: it waits for a writer
    for ever). The read runs in a thread; should it block, the test opens and closes the
    FIFO's writing end so that it ends, and fails."""
    fifo = tmp_path / "expect.toml"
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []

    def read() -> None:
        try:
            outcome.append(read_expectations(fifo))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # blocked on the FIFO: give it an end of file
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("read_expectations opened the FIFO and waited for a writer")
    (error,) = outcome
    assert isinstance(error, ExpectationsError)
    assert (
        str(error)
        == f"{fifo}: is a FIFO (named pipe), not a regular file. Name the TOML file itself."
    )


# --------------------------------------------------------------------------- -p


def test_restricted_to_keeps_only_the_policies_named() -> None:
    """Kills gate.py:139:61:CompIf->True (every policy's limits kept)."""
    e = parse_expectations(
        "[runs.EP1.warm-fit]\nmax_under_peak = 0\n[runs.EP1.max-merge]\nmax_under_peak = 1\n"
    )
    kept = e.restricted_to(["warm-fit"])
    assert dict(kept.limits) == {("EP1", "warm-fit"): {"max_under_peak": 0}}
    assert kept.policies == ["warm-fit"] and kept.safety_factor == e.safety_factor


def test_minus_p_checks_that_policy_of_a_file_of_two(tmp_path: Path) -> None:
    """Kills gate.py:139:61:CompIf->True, end to end: a file written for max-merge and
    warm-fit, checked with ``-p warm-fit``, checks warm-fit's 4 limits only (else it
    expects max-merge, which ``-p`` did not replay: exit 2)."""
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    two = ("-p", "max-merge", "-p", "warm-fit")
    assert invoke("check", str(trace), "--write-expect", str(expect), *two)[0] == 0
    assert read_expectations(expect).policies == ["max-merge", "warm-fit"]
    code, out, err = check(trace, expect, "-p", "warm-fit")
    assert code == 0, err
    assert out.splitlines()[-1] == f"4 of 4 expectations hold ({expect}, safety factor 1.1)"
    assert "the expectations of max-merge" in err and "are not checked" in err


def test_a_policy_of_the_file_not_replayed_is_named() -> None:
    """Kills gate.py:456:12:If->False (old 454; ``row`` None read: a TypeError).

    The file bounds max-merge and warm-fit in run ``run``; the replay was of
    warm-fit only.
    """
    result = replay(readings_frame(ROWS), ["warm-fit"], engine="scalar")
    e = parse_expectations(
        "[runs.run.warm-fit]\nmax_under_peak = 0\n[runs.run.max-merge]\nmax_under_peak = 0\n",
        "e.toml",
    )
    with pytest.raises(ExpectationsError) as caught:
        evaluate(result, e)
    assert str(caught.value) == (
        "e.toml: expects policy 'max-merge' for run 'run', but it was not replayed "
        "(replayed: warm-fit). Drop the -p options, or add that policy to them."
    )


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize(
    ("limit", "allowed", "actual", "holds", "line"),
    [
        (MEDIAN, 0.18, 0.15, True, "median over-estimate +15.0% <= allowed +18.0%"),
        (MEDIAN, 0.18, 0.214, False, "median over-estimate +21.4% > allowed +18.0%"),
        (PRICED, 2, 3, True, "priced waves 3 >= allowed 2"),
        (PRICED, 2, 1, False, "priced waves 1 < allowed 2"),
    ],
)
def test_describe_gives_the_comparison_that_holds_or_fails(
    limit: object, allowed: float, actual: float, holds: bool, line: str
) -> None:
    """Kills gate.py:333:22:IfExp->False and ->True (a held upper limit shown ``>=``, a
    held lower one ``<=``) and gate.py:334:16:IfExp->False and ->True (a held limit
    shown with the failing sign, a failing one with the holding sign)."""
    assert isinstance(limit, type(MEDIAN))
    result = CheckResult("EP1", "warm-fit", limit, allowed, actual, holds)
    assert result.describe() == f"EP1 warm-fit: {line}"


@pytest.mark.parametrize(
    ("measured", "verdict"),
    [(2, "regressed"), (3, "regressed"), (1, "never met")],
)
def test_a_lower_limit_the_written_figure_met_regressed(measured: int, verdict: str) -> None:
    """Kills gate.py:361:55:GtE->Gt (a figure of 2 written beside ``min_priced_waves =
    2`` met it exactly: regressed, not never met) and gate.py:361:32:IfExp->True (a
    lower limit compared as an upper: 3 priced waves then would never have met 2, 1
    would have).

    Now 1 priced wave against at least 2.
    """
    result = CheckResult("EP1", "warm-fit", PRICED, 2, 1, False, measured)
    assert result.verdict == verdict


def test_min_priced_waves_met_exactly_when_written_regressed(tmp_path: Path) -> None:
    """Kills gate.py:361:55:GtE->Gt end to end: the file says 2 priced waves were
    measured against ``min_priced_waves = 2``; the trace has 1 now: that is a
    regression (exit 1), with the advice to rewrite the file if intended."""
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    expect.write_text(
        "[runs.run.warm-fit]\nmin_priced_waves = 2\nmeasured = { priced_waves = 2 }\n"
        "[runs.run.max-merge]\nmax_under_peak = 0\n"
    )
    code, out, err = check(trace, expect)
    assert code == 1 and "REGRESSED" in out
    assert err == (
        f"warmfit: error: 1 of 2 expectations in {expect} regressed:\n"
        "  regressed  run warm-fit: priced waves 1 < allowed 2 (2 when the file was written)\n"
        "If the change is intended, rewrite the expectations with\n"
        f"  warmfit check {trace} --write-expect {expect} --force -p warm-fit -p max-merge\n"
        "and commit them with the change.\n"
    )


def test_the_regression_message_aligns_every_verdict_and_advises_per_kind() -> None:
    """Kills gate.py:408:17:max->min (the verdict column as wide as the shortest verdict,
    ``fails``, not the longest, ``regressed`` and ``never met``), gate.py:410:12:If->True
    (the never-met paragraph without a limit never met) and gate.py:415:12:If->False
    (no advice to rewrite the file after a regression).

    Three of four limits fail: one regressed (1 wave under its peak against 0, 0
    when written), one never met (+21.4% against +18.0%, +20.0% when written), one
    with no figure written (1 priced wave against 9).
    """
    report = CheckReport(
        "e.toml",
        1.1,
        (
            CheckResult("EP1", "warm-fit", UNDER, 0, 1, False, 0),
            CheckResult("EP1", "warm-fit", MEDIAN, 0.18, 0.214, False, 0.20),
            CheckResult("EP1", "warm-fit", PRICED, 9, 1, False),
            CheckResult("EP1", "max-merge", UNDER, 0, 0, True, 0),
        ),
    )
    assert report.regression_message().splitlines() == [
        "3 of 4 expectations in e.toml fail (1 regressed, 1 never met, 1 fails):",
        "  regressed  EP1 warm-fit: waves under their peak 1 > allowed 0 (0 when the file "
        "was written)",
        "  never met  EP1 warm-fit: median over-estimate +21.4% > allowed +18.0% (+20.0% when "
        "the file was written)",
        "  fails      EP1 warm-fit: priced waves 1 < allowed 9",
        "A limit never met is tighter than the figures the file was written from (set by "
        "hand, a target): improve the policy, or loosen the limit to the figure.",
        "If the change is intended, rewrite the expectations with",
        "  warmfit check PATH... --write-expect e.toml --force",
        "and commit them with the change.",
    ]


def test_only_limits_never_met_ask_for_no_rewrite() -> None:
    """Kills gate.py:410:12:If->False (no word on a limit never met) and
    gate.py:415:12:If->True (advice to rewrite the file although nothing regressed:
    rewriting would only loosen a target set by hand)."""
    report = CheckReport(
        "e.toml", 1.1, (CheckResult("EP1", "warm-fit", MEDIAN, 0.10, 0.158, False, 0.158),)
    )
    assert report.regression_message().splitlines() == [
        "1 of 1 expectations in e.toml fail (1 never met):",
        "  never met  EP1 warm-fit: median over-estimate +15.8% > allowed +10.0% (+15.8% when "
        "the file was written)",
        "A limit never met is tighter than the figures the file was written from (set by "
        "hand, a target): improve the policy, or loosen the limit to the figure.",
    ]


# --------------------------------------------------------------------------- rounding

SCALE = 10_000  # DECIMALS = 4: limits in steps of 0.0001 (0.01 percentage points)


def smallest_at_or_above(value: float) -> float:
    """The smallest double k / 10_000 (k whole) that is >= value, by counting up."""
    k = math.floor(value * SCALE) - 2
    while k / SCALE < value:
        k += 1
    return k / SCALE


def largest_at_or_below(value: float) -> float:
    """The largest double k / 10_000 (k whole) that is <= value, by counting down."""
    k = math.ceil(value * SCALE) + 2
    while k / SCALE > value:
        k -= 1
    return k / SCALE


@pytest.mark.parametrize(
    ("value", "upper", "limit"),
    [
        # value * 10_000 is not whole: ceil and floor find the limit at once
        (0.158312, True, 0.1584),
        (0.158312, False, 0.1583),
        (-0.158312, True, -0.1583),
        (-0.158312, False, -0.1584),
        # 0.10250000000000001 * 10_000 rounds down to 1025.0 in doubles, and 1025 / 10_000
        # is 0.1025 < 0.10250000000000001: ceil stops one short; the loop steps up once
        (0.10250000000000001, True, 0.1026),
        (0.0009000000000000001, True, 0.001),  # likewise: 9.0, and 0.0009 below it
        # 0.10289999999999999 * 10_000 rounds up to 1029.0, and 0.1029 > 0.10289999999999999:
        # floor stops one short; the loop steps down once
        (0.10289999999999999, False, 0.1028),
        (0.0036999999999999997, False, 0.0036),  # likewise: 37.0, and 0.0037 above it
    ],
)
def test_round_limit_worked_cases(value: float, upper: bool, limit: float) -> None:
    """Kills gate.py:502:11:While->False (old 500; the limit left on the failing side:
    0.1025 allowed for a figure of 0.10250000000000001, 0.1029 for 0.10289999999999999),
    gate.py:503:14:Int->k+1 (old 501; the loop steps up by two: 0.1027) and
    gate.py:503:11:Add->Sub (old 501; the loop steps the wrong way, for ever: a timeout).

    (Swapping ceil and floor is no change on these: the loop steps on from the other
    side to the same limit; see test_a_four_decimal_figure_is_its_own_limit.)"""
    if value in (0.10250000000000001, 0.0009000000000000001):
        assert math.ceil(value * SCALE) / SCALE < value  # the loop must step
    if value in (0.10289999999999999, 0.0036999999999999997):
        assert math.floor(value * SCALE) / SCALE > value
    assert _round_limit(value, upper) == limit


# A figure near a limit, as a replay computes it: k / 10_000 moved a few doubles either
# way (where the product with 10_000 rounds the wrong way), or a double drawn anywhere.
near_a_step = st.builds(
    lambda k, steps: _nudged(k / SCALE, steps),
    st.integers(-20_000, 200_000),
    st.integers(-3, 3).filter(bool),
)
anywhere = st.floats(-2.0, 20.0, allow_nan=False)


def _nudged(value: float, steps: int) -> float:
    for _ in range(abs(steps)):
        value = math.nextafter(value, math.copysign(math.inf, steps))
    return value


@settings(max_examples=examples(300))
@given(st.one_of(near_a_step, anywhere))
def test_a_limit_is_the_nearest_step_on_the_holding_side(value: float) -> None:
    """Kills gate.py:502:11:While->False, gate.py:503:14:Int->k+1 and gate.py:503:11:Add->Sub
    wherever the product value * 10_000 rounds the wrong way in doubles.

    An upper limit is the smallest 4-decimal double >= the figure, a lower one
    the largest <= it (a 4-decimal figure is its own limit).
    """
    assert _round_limit(value, True) == smallest_at_or_above(value) >= value
    assert _round_limit(value, False) == largest_at_or_below(value) <= value


@pytest.mark.parametrize(
    ("value", "upper"),
    [(0.1584, True), (0.139, True), (0.0051, True), (0.0003, False), (0.102, False)],
)
def test_a_four_decimal_figure_is_its_own_limit(value: float, upper: bool) -> None:
    """Kills the mutants that start an upper limit from the ceiling (floor->ceil,
    IfExp->True) or a lower one from the floor (ceil->floor, IfExp->False) of
    value * 10_000: the bug this test found, fixed (the generated pass's baseline
    once read the expected failure this was (before the fix) as skipped.

    A figure of exactly 0.1584 (the module docstring's +15.84%) should be written
    as the limit 0.1584 (the smallest 4-decimal value >= it); it is written 0.1585,
    because 0.1584 * 10_000 is 1584.0000000000002 in doubles and its ceiling 1585.
    Likewise 0.0003 * 10_000 is 2.9999999999999996: a lower limit of 0.0002.
    """
    assert _round_limit(value, upper) == value


def test_write_expect_keeps_a_four_decimal_figure_as_its_limit(tmp_path: Path) -> None:
    """Kills, end to end, the mutants that start an upper limit from the ceiling of
    value * 10_000 (the bug this test found, fixed).

    At safety factor 0.9652542372881356 (the smallest double with int(59_000 * f) >=
    56_950) the second wave is priced 56_950 against 50_000: over-estimate
    56_950 / 50_000 - 1 = 0.139 exactly as a double, so the file's ``measured`` says
    0.139 and its limit should be 0.139, not 0.1391.
    """
    factor = 0.9652542372881356
    assert int(59_000 * factor) == 56_950 and 56_950 / 50_000 - 1 == 0.139
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    code, _, err = invoke(
        "check", str(trace), "--write-expect", str(expect), "--safety", repr(factor)
    )
    assert code == 0, err
    written = read_expectations(expect)
    assert written.measured[("run", "warm-fit")]["median_over_estimate"] == 0.139
    assert written.limits[("run", "warm-fit")]["max_median_over_estimate"] == 0.139


# --------------------------------------------------------------------------- safe factors

# Runs built from ROWS, each named by what its second wave does at factor 1.0:
LONE = [{**ROWS[0], "run": "lone"}]  # one wave, unpriced: no priced wave at all
OVER = [{**r, "run": "over"} for r in ROWS]  # 59_000 for 50_000: safe from 0.8474...
UNDER_RUN = [{**ROWS[0], "run": "under"}, {**ROWS[1], "run": "under", "peak_bytes": 80_000}]
# the first wave's peak is its baseline and no wave has output: 0 B/token, so the
# second is priced 0 bytes before the factor against 50_000: no factor covers it
ZERO = [
    {**ROWS[0], "run": "zero", "output_bytes": 0, "peak_bytes": 10_000},
    {**ROWS[1], "run": "zero", "output_bytes": 0},
]
SAFE_UNDER = 1.1864406779661016  # the smallest f with int(59_000 * f) >= 70_000
SAFE_OVER = 0.847457627118644  # the smallest f with int(59_000 * f) >= 50_000


def frame(*runs: list[dict[str, object]]) -> pl.DataFrame:
    return readings_frame([row for run in runs for row in run]).sort("run", "seq")


def test_a_run_with_no_priced_wave_asks_for_no_factor() -> None:
    """Kills sweep.py:171:12:If->False, sweep.py:171:19:Is->IsNot and
    sweep.py:171:31:Not->drop (old 155; run ``lone``, with no priced wave, taken for one
    no factor covers: None) and sweep.py:171:12:If->True (every run skipped: {}).

    Run ``under`` puts its second wave (59_000 before the factor, 70_000 actual)
    under its peak at 1.0 and is covered from 1.1864406779661016; run ``lone`` has
    one unpriced wave, which every factor covers.
    """
    assert int(59_000 * SAFE_UNDER) == 70_000 > int(59_000 * math.nextafter(SAFE_UNDER, 0))
    both = safe_factors(frame(LONE, UNDER_RUN), PR_TWO, engine="scalar")
    assert both == {"max-merge": SAFE_UNDER, "warm-fit": SAFE_UNDER}


def test_a_policy_whose_runs_need_no_factor_is_left_out() -> None:
    """Kills sweep.py:171:12:If->False (old 155; ``lone``'s no priced wave read as no
    factor covering it: {"max-merge": None, ...})."""
    assert safe_factors(frame(LONE), engine="scalar") == {}


def test_a_run_over_its_peak_at_1_still_gives_its_factor() -> None:
    """Kills sweep.py:171:27:And->Or (old 155; a run with no wave under its peak at 1.0
    skipped, though its factor is finite: the policy left out).

    Run ``over`` prices 59_000 for 50_000 at 1.0: safe from 0.847457627118644, below 1.
    """
    assert int(59_000 * SAFE_OVER) == 50_000 > int(59_000 * math.nextafter(SAFE_OVER, 0))
    assert safe_factors(frame(OVER), PR_TWO, engine="scalar") == {
        "max-merge": SAFE_OVER,
        "warm-fit": SAFE_OVER,
    }


def test_one_run_no_factor_covers_makes_the_policy_uncoverable(tmp_path: Path) -> None:
    """Kills sweep.py:176:25:IfExp->False (old 160; the largest finite factor,
    1.1864406779661016 from run ``under``, given although run ``zero`` prices a wave
    at 0 bytes, which no factor scales up to its 50_000).

    End to end: ``--write-expect`` refuses, saying no factor covers either policy.
    """
    assert safe_factors(frame(ZERO, UNDER_RUN), PR_TWO, engine="scalar") == {
        "max-merge": None,
        "warm-fit": None,
    }
    folder = tmp_path / "traces"
    for run in (ZERO, UNDER_RUN):
        write_trace(readings_frame(run), folder / f"{run[0]['run']}.parquet")
    target = tmp_path / "e.toml"
    code, out, err = invoke(
        "check", str(folder), "--write-expect", str(target), "-p", "max-merge", "-p", "warm-fit"
    )
    assert (code, out) == (2, "") and not target.exists()
    assert "(the smallest that puts no wave of these traces under its peak: no factor " in err
    assert "no factor covers max-merge, no factor covers warm-fit)" in err
    assert str(SAFE_UNDER) not in err and "Traceback" not in err
