"""What ``warmfit check`` writes, every character spelled out: its table, CSV and JSON,
the expectations file ``--write-expect`` writes, and its refusal of waves under
their peak.

Each test kills survivors of the generated mutation pass over
``warmfit/report/gate.py`` (``make mutants-generated``), named in its docstring by
the pass's id (``FILE:LINE:COL:KIND``, lines as the file stood when the tests were
written); ``tests/test_gate_edges.py`` holds the first batch, and its runs.

Worked check (``tests/test_check.py``'s ``ROWS``, run ``run``): one priced wave,
priced int(59_000 * 1.1) = 64_900 against an actual 50_000 (over-estimate
0.29800000000000004, +29.8%), no wave under its peak, for max-merge and warm-fit
alike. The file bounds, for warm-fit, the median over-estimate at +25.0% (an upper
limit that fails; +20.0% measured when written: regressed) and the priced waves at
least 1 (a lower limit that holds); for max-merge, the waves under their peak at
most 0 (an upper limit that holds) and the priced waves at least 2 (a lower limit
that fails; no figure written: fails). Two of four hold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.command_line import invoke
from tests.test_check import small_trace
from tests.test_gate_edges import LONE, OVER, SAFE_UNDER, UNDER_RUN, frame
from warmfit.errors import UsageError
from warmfit.format.trace import readings_frame, write_trace
from warmfit.replay import replay
from warmfit.report.formats import csv_cell
from warmfit.report.gate import (
    UnderPeak,
    UnderPeakError,
    evaluate,
    expectations_toml,
    parse_expectations,
    read_expectations,
    render,
    under_peak_message,
    update_expectations,
    write_expectations,
)

EXPECT = (
    "[runs.run.warm-fit]\n"
    "max_median_over_estimate = 0.25\n"
    "min_priced_waves = 1\n"
    "measured = { median_over_estimate = 0.2 }\n"
    "[runs.run.max-merge]\n"
    "max_under_peak = 0\n"
    "min_priced_waves = 2\n"
)


def worked_check(tmp_path: Path, fmt: str, columns: int = 80) -> tuple[Path, str]:
    """``warmfit check`` of the worked trace against :data:`EXPECT`: the file and stdout."""
    trace = small_trace(tmp_path)
    expect = tmp_path / "e.toml"
    expect.write_text(EXPECT)
    code, out, err = invoke(
        "check", str(trace), "--expect", str(expect), "-f", fmt, env={"COLUMNS": str(columns)}
    )
    assert code == 1, err
    assert err.startswith(f"warmfit: error: 2 of 4 expectations in {expect} fail ")
    return expect, out


# --------------------------------------------------------------------------- table


@pytest.mark.parametrize("columns", [80, 20])
def test_the_table_spelled_out(tmp_path: Path, columns: int) -> None:
    """Kills gate.py:817:19:IfExp->False (each row names its policy), ->True (no row
    does) and gate.py:817:23:Eq->NotEq (only the rows after the first of a group do);
    gate.py:819:22:IfExp->False (every limit shown ``≥``) and ->True (``≤``);
    gate.py:821:26:IfExp->False (a holding limit shown ``OK``) and ->True (a failing one
    ``regressed``, in lower case like the ones that hold); gate.py:825:32:Sub->Add
    ("6 of 4 expectations hold").

    A policy's name is shown on the first row of its group only, as the run's is;
    each allowed figure is preceded by its side (``≤`` for a ``max_`` limit, ``≥``
    for a ``min_`` one); a failing verdict is in capitals.

    At 20 columns the table is the same: ``table_text`` widens a table to its natural
    width (measured up to 100,000 columns), so no cell ever wraps, which makes
    gate.py:805..810 ``no_wrap=True`` -> False equivalent: they survive this test.
    (Only a row wider than 100,000 columns, a run name of 100,000 characters, is cut
    differently, as either form must cut it.)
    """
    expect, out = worked_check(tmp_path, "table", columns)
    assert out.splitlines() == [
        "run  policy     figure                   allowed  actual",
        "─" * 67,
        "run  warm-fit   median over-estimate    ≤ +25.0%  +29.8%  REGRESSED",
        "                priced waves                 ≥ 1       1  ok",
        "     max-merge  waves under their peak       ≤ 0       0  ok",
        "                priced waves                 ≥ 2       1  FAILS",
        f"2 of 4 expectations hold ({expect}, safety factor 1.1)",
    ]
    assert out.endswith(")\n")


def test_the_default_format_is_the_table(tmp_path: Path) -> None:
    """The table is what ``warmfit check`` prints without ``-f`` (as with ``-f table``)."""
    expect, table = worked_check(tmp_path, "table")
    code, out, _ = invoke(
        "check", str(small_trace(tmp_path)), "--expect", str(expect), env={"COLUMNS": "80"}
    )
    assert (code, out) == (1, table)


def test_render_refuses_a_format_it_does_not_know(tmp_path: Path) -> None:
    """Kills gate.py:839:8:If->True (any format that is neither json nor csv rendered
    as the table, instead of refused)."""
    result = replay(readings_frame(OVER), ["warm-fit"], engine="scalar")
    report = evaluate(result, parse_expectations("[runs.over.warm-fit]\nmax_under_peak = 0\n"))
    assert render(report, "table").splitlines()[-1] == (
        "1 of 1 expectations hold (<expectations>, safety factor 1.1)"
    )
    with pytest.raises(UsageError) as caught:
        render(report, "markdown")
    assert str(caught.value) == "fmt must be one of table, csv, json; got 'markdown'."


# --------------------------------------------------------------------------- csv, json


def test_the_csv_spelled_out(tmp_path: Path) -> None:
    """Kills gate.py:792:8:If->False (a figure not recorded written ``None``, not left
    empty) and gate.py:795:26:IfExp->True (a failing limit's ``holds`` written
    ``true``).

    Fractions in full precision (``0.29800000000000004``), counts as whole numbers,
    ``holds`` as ``true``/``false``, a ``measured`` figure not recorded empty.
    """
    _, out = worked_check(tmp_path, "csv")
    assert out == (
        "run,policy,expectation,figure,allowed,actual,holds,verdict,measured\n"
        "run,warm-fit,max_median_over_estimate,median_over_estimate,0.25,0.29800000000000004,"
        "false,regressed,0.2\n"
        "run,warm-fit,min_priced_waves,priced_waves,1,1,true,ok,\n"
        "run,max-merge,max_under_peak,under_peak,0,0,true,ok,\n"
        "run,max-merge,min_priced_waves,priced_waves,2,1,false,fails,\n"
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (2, "2"),
        (0.29800000000000004, "0.29800000000000004"),
        (0.25, "0.25"),
        ("warm-fit", "warm-fit"),
        # numpy scalars as the values they hold (repr would give 'np.float64(0.1)')
        (np.float64(0.1), "0.1"),
        (np.float64(0.29800000000000004), "0.29800000000000004"),
        (np.int64(3), "3"),
        (np.bool_(True), "true"),
    ],
)
def test_a_csv_cell_is_text(value: object, text: str) -> None:
    """(The one CSV writer's cells, warmfit.report.formats.csv_cell, since issue 37.) Kills gate.py:793:16:Return->None (a missing figure's cell None, not "": the
    csv module happens to write None as an empty field, so the CSV does not tell;
    the function's contract does), gate.py:792:8:If->False and gate.py:795:26:IfExp->True.
    """
    assert csv_cell(value) == text


JSON = """{
  "schema": "warmfit.check/1",
  "expect": "EXPECT",
  "by": "run",
  "safety_factor": 1.1,
  "passed": false,
  "results": [
    {
      "run": "run",
      "policy": "warm-fit",
      "expectation": "max_median_over_estimate",
      "figure": "median_over_estimate",
      "allowed": 0.25,
      "actual": 0.29800000000000004,
      "holds": false,
      "verdict": "regressed",
      "measured": 0.2
    },
    {
      "run": "run",
      "policy": "warm-fit",
      "expectation": "min_priced_waves",
      "figure": "priced_waves",
      "allowed": 1,
      "actual": 1,
      "holds": true,
      "verdict": "ok",
      "measured": null
    },
    {
      "run": "run",
      "policy": "max-merge",
      "expectation": "max_under_peak",
      "figure": "under_peak",
      "allowed": 0,
      "actual": 0,
      "holds": true,
      "verdict": "ok",
      "measured": null
    },
    {
      "run": "run",
      "policy": "max-merge",
      "expectation": "min_priced_waves",
      "figure": "priced_waves",
      "allowed": 2,
      "actual": 1,
      "holds": false,
      "verdict": "fails",
      "measured": null
    }
  ]
}
"""


def test_the_json_spelled_out(tmp_path: Path) -> None:
    """Kills gate.py:778:35:Int->k+1 (indented by 3 spaces, not 2)."""
    expect, out = worked_check(tmp_path, "json")
    assert out == JSON.replace("EXPECT", str(expect))


# --------------------------------------------------------------------------- --write-expect


def test_the_expectations_file_spelled_out() -> None:
    """Kills gate.py:551:12:If->True (the "no priced wave" comment in every table),
    gate.py:551:40:Is->IsNot (in the tables of a priced run only) and
    gate.py:557:16:CompIf->True (``measured`` given a missing figure:
    ``median_over_estimate = None``, which is not TOML).

    Run ``lone`` has one unpriced wave: no over-estimate, 0 priced waves; run ``over``
    is the worked trace. (gate.py:559:12:If->True, a ``measured = {  }`` line where no
    figure is known, is equivalent: ``under_peak`` and ``priced_waves`` are counts,
    never missing from a summary, so every table has figures.)
    """
    result = replay(frame(LONE, OVER), ["max-merge", "warm-fit"], engine="scalar")
    text = expectations_toml(result, ["traces"])
    head = (
        "# warmfit expectations: the CI gate of 'warmfit check' (docs/how-to/ci-gate.md).\n"
        "# Written by 'warmfit check --write-expect' from traces. Over-estimates are fractions\n"
        "# (0.16 means +16%), rounded up to 0.01 percentage points; loosen a limit by hand,\n"
        "# or rewrite the file with --write-expect --force when a change is intended.\n"
        "# 'measured' holds the figures the limits were taken from (a limit they did not\n"
        "# meet, set by hand, is reported as 'never met' rather than 'regressed').\n"
        "version = 1\n"
        "safety_factor = 1.1\n"
        'by = "run"\n'
    )
    lone = (
        "# no priced wave: no over-estimate figures to bound\n"
        "max_under_peak = 0\n"
        "min_priced_waves = 0\n"
        "measured = { under_peak = 0, priced_waves = 0 }\n"
    )
    over = (
        "max_median_over_estimate = 0.2981\n"
        "max_max_over_estimate = 0.2981\n"
        "max_under_peak = 0\n"
        "min_priced_waves = 1\n"
        "measured = { median_over_estimate = 0.29800000000000004, "
        "max_over_estimate = 0.29800000000000004, under_peak = 0, priced_waves = 1 }\n"
    )
    assert text == (
        head
        + f"\n[runs.lone.max-merge]\n{lone}\n[runs.lone.warm-fit]\n{lone}"
        + f"\n[runs.over.max-merge]\n{over}\n[runs.over.warm-fit]\n{over}"
    )
    read = parse_expectations(text)  # and it reads back
    assert read.measured[("lone", "warm-fit")] == {"under_peak": 0, "priced_waves": 0}


def under_refusal(path: Path, policy: str, factor: str, update: bool = False) -> str:
    smallest = (
        f"the smallest that puts no wave of these traces under its peak: {factor} for {policy}"
    )
    advice = (
        "--update keeps the file's safety factor. Pass --allow-under to record the figures "
        "anyway, choose another policy (-p), or rewrite the whole file at a larger factor "
        f"with --write-expect FILE --safety F --force ({smallest})."
        if update
        else f"Raise the safety factor with --safety ({smallest}), choose another policy "
        "(-p), or pass --allow-under to record the figures anyway."
    )
    return (
        f"{path}: not written: at safety factor 1.1, waves are priced under their peak in "
        f"1 run/policy pair:\n  under {policy}: 1 wave under its peak\nAn expectation that "
        "allows waves under their peak makes the gate pass a policy that would have run out "
        f"of memory on those waves. {advice}"
    )


def test_write_expectations_refuses_waves_under_their_peak_by_default(tmp_path: Path) -> None:
    """Kills gate.py:613:25:False->True (``allow_under`` on unless told: the library
    writes a file that passes a policy that ran out of memory) and
    gate.py:574:25:False->True (likewise ``update_expectations``).

    Run ``under`` prices its second wave int(59_000 * 1.1) = 64_900 against 70_000.
    """
    result = replay(frame(UNDER_RUN), ["warm-fit"], engine="scalar")
    target = tmp_path / "e.toml"
    with pytest.raises(UnderPeakError) as caught:
        write_expectations(result, target)
    assert str(caught.value) == under_refusal(target, "warm-fit", repr(SAFE_UNDER))
    assert not target.exists()
    # --update: a file listing run ``over`` only; ``under`` is new and refused
    target.write_text("[runs.over.warm-fit]\nmax_under_peak = 0\n")
    both = replay(frame(OVER, UNDER_RUN), ["warm-fit"], engine="scalar")
    with pytest.raises(UnderPeakError) as caught:
        update_expectations(both, read_expectations(target))
    # --update keeps the file's factor: the advice is to rewrite the file, not --safety
    assert str(caught.value) == under_refusal(target, "warm-fit", repr(SAFE_UNDER), update=True)
    assert target.read_text() == "[runs.over.warm-fit]\nmax_under_peak = 0\n"


@pytest.mark.parametrize("update", [False, True])
def test_the_refusal_gives_the_factor_of_the_policy_replayed(tmp_path: Path, update: bool) -> None:
    """Kills gate.py:632:47:IfExp->False and gate.py:632:56:Is->IsNot (the safe factors
    of the default policies, max-merge and warm-fit, sought for a replay of envelope:
    "no factor covers envelope") and their twins in ``update_expectations``,
    gate.py:592:47:IfExp->False and gate.py:592:56:Is->IsNot.

    Envelope prices run ``under``'s second wave as warm-fit does: 29_000 compute bytes
    at 100 tokens, times 2, plus 1_000 output bytes: 59_000 before the factor, safe
    from 1.1864406779661016.
    """
    target = tmp_path / "e.toml"
    if update:
        target.write_text("[runs.over.envelope]\nmax_under_peak = 0\n")
        result = replay(frame(OVER, UNDER_RUN), ["envelope"], engine="scalar")
        with pytest.raises(UnderPeakError) as caught:
            update_expectations(result, read_expectations(target))
    else:
        result = replay(frame(UNDER_RUN), ["envelope"], engine="scalar")
        with pytest.raises(UnderPeakError) as caught:
            write_expectations(result, target)
    assert caught.value.safe == {"envelope": SAFE_UNDER}
    assert str(caught.value) == under_refusal(target, "envelope", repr(SAFE_UNDER), update)


@pytest.mark.parametrize("update", [False, True])
def test_the_refusal_replays_a_policy_given_as_module_and_class(
    tmp_path: Path, update: bool
) -> None:
    """Kills gate.py:632:47:IfExp->True and its twin gate.py:592:47:IfExp->True (the safe
    factors sought for the replay's policy *names*: ``last-whole``, which is no
    registered policy, instead of the ``-p tests.example_policy:LastWhole`` given).

    LastWhole prices at the rate of the last whole wave: 290 B/token, as warm-fit.
    """
    folder = tmp_path / "traces"
    for run in (OVER, UNDER_RUN):
        write_trace(readings_frame(run), folder / f"{run[0]['run']}.parquet")
    target = tmp_path / "e.toml"
    mode = ["--expect", str(target), "--update"] if update else ["--write-expect", str(target)]
    if update:
        target.write_text("[runs.over.last-whole]\nmax_under_peak = 0\n")
    code, out, err = invoke(
        "check", str(folder), *mode, "-p", "tests.example_policy:LastWhole", env={"COLUMNS": "80"}
    )
    assert (code, out) == (2, "")
    assert (
        err == f"warmfit: error: {under_refusal(target, 'last-whole', repr(SAFE_UNDER), update)}\n"
    )


# --------------------------------------------------------------------------- the refusal's text


def offenders(count: int) -> list[UnderPeak]:
    return [UnderPeak(f"r{i}", "warm-fit", 1) for i in range(count)]


REASON = (
    "An expectation that allows waves under their peak makes the gate pass a policy that "
    "would have run out of memory on those waves. Raise the safety factor with --safety "
    "(the smallest that puts no wave of these traces under its peak: 1.25 for warm-fit), "
    "choose another policy (-p), or pass --allow-under to record the figures anyway."
)


def test_ten_offenders_are_all_named() -> None:
    """Kills gate.py:711:23:Gt->GtE (exactly 10 offenders followed by "and 0 more").

    :data:`SHOWN_OFFENDERS` is 10: ten are all named, the eleventh is counted.
    """
    message = under_peak_message("e.toml", 1.1, offenders(10), {"warm-fit": 1.25})
    assert message.splitlines() == [
        "e.toml: not written: at safety factor 1.1, waves are priced under their peak in "
        "10 run/policy pairs:",
        *[f"  r{i} warm-fit: 1 wave under its peak" for i in range(10)],
        REASON,
    ]
    message = under_peak_message("e.toml", 1.1, offenders(11), {"warm-fit": 1.25})
    assert message.splitlines() == [
        "e.toml: not written: at safety factor 1.1, waves are priced under their peak in "
        "11 run/policy pairs:",
        *[f"  r{i} warm-fit: 1 wave under its peak" for i in range(10)],
        "  and 1 more",
        REASON,
    ]


def test_only_the_offending_policies_factors_are_named() -> None:
    """Kills gate.py:714:33:CompIf->True (max-merge's factor named too, though none of
    its waves is under its peak: "1.2 for max-merge, 1.25 for warm-fit")."""
    message = under_peak_message("e.toml", 1.1, offenders(1), {"max-merge": 1.2, "warm-fit": 1.25})
    assert message.splitlines()[-1] == REASON


# --------------------------------------------------------------------------- --update, the API


def test_update_expectations_as_a_library_call(tmp_path: Path) -> None:
    """Kills the survivors of update_expectations and the file's header:
    gate.py 'return []' -> None (nothing new: an empty list, as documented), the
    safety-factor guard dropped (a replay at another factor would write figures the
    file's factor does not give), the missing final newline not supplied (the new
    tables glued to the last line), and the header's ' from SOURCES' written with no
    source given.

    Runs: OVER (priced 59_000 for 50_000 at factor 1.0) is in the file; LONE is new.
    """
    path = tmp_path / "e.toml"
    at_1 = replay(frame(OVER), ["warm-fit"], 1.0)
    write_expectations(at_1, path)
    header = path.read_text().splitlines()[1]
    assert header == "# Written by 'warmfit check --write-expect'. Over-estimates are fractions"
    expectations = read_expectations(path)
    assert update_expectations(at_1, expectations) == []  # nothing new: the empty list
    both = replay(frame(OVER, LONE), ["warm-fit"], 1.1)
    with pytest.raises(ValueError, match="safety factor"):
        update_expectations(both, expectations)
    text = path.read_text()
    path.write_text(text.rstrip("\n"))  # a file whose last line has no newline
    both = replay(frame(OVER, LONE), ["warm-fit"], 1.0)
    assert update_expectations(both, read_expectations(path)) == [("lone",)]
    grown = path.read_text()
    assert grown.startswith(text.rstrip("\n") + "\n\n# Added by 'warmfit check --update'")
    assert read_expectations(path).runs == ["over", "lone"]


def test_the_refusal_names_no_factor_for_the_recorded_prices() -> None:
    """Kills gate.py's 'if policy == RECORDED' dropped in under_peak_message: the
    trainer's own prices get no safety factor to raise, and the message says so."""
    text = under_peak_message(
        "e.toml", 1.1, [UnderPeak("EP1", "recorded", 2), UnderPeak("EP1", "warm-fit", 1)],
        {"recorded": None, "warm-fit": 1.25},
    )  # fmt: skip
    assert "none for recorded, the trainer's own prices, which no factor scales" in text
    assert "1.25 for warm-fit" in text and "no factor covers recorded" not in text
