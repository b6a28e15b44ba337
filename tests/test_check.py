"""``warmfit check``: expectations files, the gate's verdicts and exit codes."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import tomllib
from pathlib import Path

import polars as pl
import pytest

from tests.command_line import Invoke, warmfit_cli, warmfit_ok
from tests.whole_waves import whole_wave, write_waves
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.replay import replay
from warmfit.report.gate import (
    LIMITS,
    CheckResult,
    ExpectationsError,
    UnderPeak,
    _round_limit,
    evaluate,
    expectations_from,
    parse_expectations,
    read_expectations,
    under_peak_message,
)

REPO = Path(__file__).resolve().parent.parent
#: The PR's two policies, named where a worked example gives their figures alone.
PR_TWO = ["max-merge", "warm-fit"]
PR_TWO_P = ("-p", "max-merge", "-p", "warm-fit")
PR991 = REPO / "traces" / "pr991"

# Two whole waves: the first unpriced, the second priced at 290 * 200 = 58_000 ->
# int(59_000 * 1.1) = 64_900 against an actual 50_000: over-estimate +29.8%.
ROWS = [
    dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=100, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=40_000, whole=True),
    dict(seq=1, wave=1, signature="s", packed_tokens=200, logical_tokens=200, output_bytes=1_000,
         baseline_bytes=10_000, peak_bytes=60_000, whole=True),
]  # fmt: skip


def small_trace(tmp_path: Path) -> Path:
    return write_trace(readings_frame(ROWS), tmp_path / "trace" / "R.parquet").parent


# --------------------------------------------------------------------------- the file


def test_parse_a_full_file() -> None:
    e = parse_expectations(
        "version = 1\nsafety_factor = 1.2\n"
        "[runs.EP1.warm-fit]\nmax_median_over_estimate = 0.18\nmax_under_peak = 0\n"
        '[runs."run two".max-merge]\nmin_priced_waves = 3\nmax_max_over_estimate = 1\n'
    )
    assert e.safety_factor == 1.2
    assert e.runs == ["EP1", "run two"] and e.policies == ["warm-fit", "max-merge"]
    assert e.limits[("EP1", "warm-fit")] == {"max_median_over_estimate": 0.18, "max_under_peak": 0}
    assert e.limits[("run two", "max-merge")] == {
        "min_priced_waves": 3,
        "max_max_over_estimate": 1.0,
    }


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[runs.EP1.warm-fit]\nmax_under_peak = \n", ["not valid TOML", "line 2"]),
        ("[runs.EP1.warm-fit]\nmax_median = 0.2\n", ["unknown key 'max_median'", "max_under_peak"]),
        ("[runs.EP1.warm-fit]\nmax_under_peak = 0.5\n", ["max_under_peak must be a whole number"]),
        ("[runs.EP1.warm-fit]\nmax_under_peak = -1\n", ["max_under_peak must be a whole number"]),
        ("[runs.EP1.warm-fit]\nmax_median_over_estimate = 'a'\n", ["must be a number"]),
        ("[runs.EP1.warm-fit]\nmax_median_over_estimate = true\n", ["must be a number"]),
        ("colour = 1\n[runs.EP1.warm-fit]\n", ["unknown top-level key 'colour'"]),
        ("version = 2\n[runs.EP1.warm-fit]\n", ["version 2", "version 1 only"]),
        ("safety_factor = 0\n[runs.EP1.warm-fit]\n", ["safety_factor must be a positive number"]),
        ("version = 1\n", ["holds no expectations"]),
        ("runs = 3\n", ["'runs' must hold tables"]),
        ("[runs]\nEP1 = 3\n", ["must hold one table per policy"]),
        ("[runs.EP1]\nwarm-fit = 3\n", ["is not a table of limits"]),
    ],
)
def test_bad_files_are_named_and_explained(text: str, words: list[str]) -> None:
    with pytest.raises(ExpectationsError) as caught:
        parse_expectations(text, "team/expect.toml")
    message = str(caught.value)
    assert message.startswith("team/expect.toml: ")
    assert caught.value.exit_code == 2
    for word in words:
        assert word in message


def test_a_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ExpectationsError, match="no such file"):
        read_expectations(tmp_path / "nope.toml")


def test_the_shipped_expectations_parse_and_name_the_stored_runs() -> None:
    e = read_expectations(REPO / "traces" / "expectations.toml")
    assert {"EP1", "EP2"} <= set(e.runs)
    assert {"max-merge", "warm-fit"} <= set(e.policies)


# --------------------------------------------------------------------------- verdicts


def test_limits_hold_at_equality_and_fail_beyond() -> None:
    result = replay(readings_frame(ROWS), engine="scalar")
    over = 64_900 / 50_000 - 1
    e = parse_expectations(
        f"[runs.run.max-merge]\nmax_median_over_estimate = {over!r}\nmin_priced_waves = 1\n"
        f"[runs.run.warm-fit]\nmax_median_over_estimate = {over - 1e-9!r}\nmin_priced_waves = 2\n"
    )
    report = evaluate(result, e)
    verdicts = [(r.policy, r.limit.key, r.holds) for r in report.results]
    assert verdicts == [
        ("max-merge", "max_median_over_estimate", True),
        ("max-merge", "min_priced_waves", True),
        ("warm-fit", "max_median_over_estimate", False),
        ("warm-fit", "min_priced_waves", False),
    ]
    assert not report.passed
    lines = [r.describe() for r in report.regressions]
    # Equal at one decimal, so shown with two.
    assert lines == [
        "run warm-fit: median over-estimate +29.80% > allowed +29.80%",
        "run warm-fit: priced waves 1 < allowed 2",
    ]


def test_a_missing_figure_is_a_regression() -> None:
    line = CheckResult("EP1", "warm-fit", LIMITS[0], 0.18, None, False).describe()
    assert line == (
        "EP1 warm-fit: median over-estimate is missing (no priced wave); allowed at most +18.0%"
    )


def test_runs_must_match_the_trace() -> None:
    result = replay(readings_frame(ROWS), engine="scalar")
    with pytest.raises(ExpectationsError, match="expects run 'EP9'"):
        evaluate(result, parse_expectations("[runs.EP9.warm-fit]\nmax_under_peak = 0\n"))
    two = readings_frame([*ROWS, *({**r, "run": "other"} for r in ROWS)]).sort("run", "seq")
    with pytest.raises(ExpectationsError, match="no expectations for run"):
        evaluate(replay(two, engine="scalar"), parse_expectations("[runs.run.warm-fit]\n"))


def test_expectations_from_round_up_to_hold() -> None:
    result = replay(readings_frame(ROWS), engine="scalar")
    limits = expectations_from(result)
    # 64_900 / 50_000 - 1 is 0.29800000000000004 in floating point: above 0.298, so the
    # limit rounds up to the next 0.01 percentage point, where the figure still holds.
    assert 64_900 / 50_000 - 1 > 0.298
    assert limits[("run", "warm-fit")] == {
        "max_median_over_estimate": 0.2981,
        "max_max_over_estimate": 0.2981,
        "max_under_peak": 0,
        "min_priced_waves": 1,
    }


# --------------------------------------------------------------------------- command


def test_write_expect_round_trip(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    target = tmp_path / "expect.toml"
    code, out, _ = invoke("check", str(trace), "--write-expect", str(target), "--engine", "scalar")
    assert code == 0 and "wrote expectations for 3 run/policy pairs" in out
    written = read_expectations(target)
    summary = replay(read_trace([trace]), engine="scalar").summary
    assert written.runs == ["run"] and written.policies == ["max-merge", "warm-fit", "envelope"]
    for row in summary.iter_rows(named=True):
        limits = written.limits[(row["run"], row["policy"])]
        assert limits["max_median_over_estimate"] >= row["median_over_estimate"]
        assert limits["max_median_over_estimate"] - row["median_over_estimate"] < 1e-4
        assert limits["max_under_peak"] == row["under_peak"]
        assert limits["min_priced_waves"] == row["priced_waves"]
    code, out, _ = invoke("check", str(trace), "--expect", str(target))
    assert code == 0, out
    assert "12 of 12 expectations hold" in out  # 3 policies x 4 limits
    # never overwrites without --force
    code, _, err = invoke("check", str(trace), "--write-expect", str(target))
    assert code == 2 and "will not overwrite without --force" in err
    code, _, _ = invoke("check", str(trace), "--write-expect", str(target), "--force")
    assert code == 0


def test_csv_and_json_outputs(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    target = tmp_path / "expect.toml"
    invoke("check", str(trace), "--write-expect", str(target))
    code, out, _ = invoke("check", str(trace), "--expect", str(target), "-f", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == [
        *("run", "policy", "expectation", "figure", "allowed", "actual", "holds"),
        *("verdict", "measured"),  # added at the end (issue 14)
    ]
    assert len(rows) == 12 and {r["holds"] for r in rows} == {"true"}
    assert {r["verdict"] for r in rows} == {"ok"} and all(r["measured"] for r in rows)
    code, out, _ = invoke("check", str(trace), "--expect", str(target), "-f", "json")
    doc = json.loads(out)
    assert doc["schema"] == "warmfit.check/1" and doc["passed"] is True
    assert doc["safety_factor"] == 1.1 and len(doc["results"]) == 12


def test_table_fits_80_columns(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    target = tmp_path / "expect.toml"
    invoke("check", str(trace), "--write-expect", str(target))
    code, out, _ = invoke("check", str(trace), "--expect", str(target))
    *table, verdict = out.splitlines()
    assert code == 0 and max(len(line) for line in table) <= 80
    # issue 29 item 10: no blank line first; the header starts the output as replay's does
    assert table[0].startswith("run ") and table[1].startswith("─")
    assert verdict == f"12 of 12 expectations hold ({target}, safety factor 1.1)"


def test_policy_option_restricts_the_check(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    target = tmp_path / "expect.toml"
    invoke("check", str(trace), "--write-expect", str(target), "-p", "warm-fit")
    assert read_expectations(target).policies == ["warm-fit"]
    code, out, _ = invoke("check", str(trace), "--expect", str(target), "-p", "warm-fit")
    assert code == 0 and "4 of 4" in out
    code, _, err = invoke("check", str(trace), "--expect", str(target), "-p", "max-merge")
    assert code == 2 and "holds no expectations for policy 'max-merge'" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((), "give exactly one of --expect FILE"),
        (("--expect", "a.toml", "--write-expect", "b.toml"), "give exactly one of"),
        (("--expect", "EXPECT", "--safety", "1.2"), "--safety applies to --write-expect only"),
    ],
)
def test_usage_errors_exit_2(
    tmp_path: Path, args: tuple[str, ...], words: str, invoke: Invoke
) -> None:
    trace = small_trace(tmp_path)
    target = tmp_path / "expect.toml"
    invoke("check", str(trace), "--write-expect", str(target))
    code, _, err = invoke("check", str(trace), *(str(target) if a == "EXPECT" else a for a in args))
    assert code == 2 and words in err


def test_bad_toml_exits_2_naming_the_file_and_line(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[runs.run.warm-fit]\nmax_under_peak = = 0\n")
    code, out, err = invoke("check", str(trace), "--expect", str(bad))
    assert code == 2 and out == ""
    assert str(bad) in err and "line 2" in err and "Traceback" not in err


def test_unknown_policy_in_the_file_exits_2(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[runs.run.nope]\nmax_under_peak = 0\n")
    code, _, err = invoke("check", str(trace), "--expect", str(bad))
    assert code == 2 and str(bad) in err and "unknown policy 'nope'" in err


def test_raised_later_peaks_fail_the_gate(tmp_path: Path, invoke: Invoke) -> None:
    """The CI gate's reason to exist: a stored trace whose later waves grow fails it."""
    copy = tmp_path / "pr991"
    shutil.copytree(PR991, copy)
    expect = tmp_path / "expect.toml"
    code, _, _ = invoke("check", str(copy), "--write-expect", str(expect))
    assert code == 0
    code, _, _ = invoke("check", str(copy), "--expect", str(expect))
    assert code == 0

    # Triple the compute peaks of EP1's last three waves: the first of them runs far above
    # anything the profile has seen, so it lands under its peak.
    ep1 = read_trace([copy / "EP1.parquet"])
    last = ep1.get_column("wave").max()
    assert isinstance(last, int)
    raised = pl.col("baseline_bytes") + (pl.col("peak_bytes") - pl.col("baseline_bytes")) * 3
    ep1 = ep1.with_columns(
        pl.when(pl.col("wave") > last - 3)
        .then(raised)
        .otherwise(pl.col("peak_bytes"))
        .cast(pl.Int64)
        .alias("peak_bytes")
    )
    write_trace(ep1, copy / "EP1.parquet")

    code, out, err = invoke("check", str(copy), "--expect", str(expect))
    assert code == 1, err
    assert "REGRESSED" in out
    assert f"expectations in {expect} regressed:" in err
    assert "EP1 warm-fit: waves under their peak" in err and "> allowed 0" in err
    assert "EP2" not in err  # EP2 is untouched
    assert "--write-expect" in err and "Traceback" not in err


def test_a_hand_tightened_limit_is_never_met_not_regressed(tmp_path: Path, invoke: Invoke) -> None:
    """Issue 14: a limit the figures never met is a target, not a regression."""
    expect = tmp_path / "expect.toml"
    code, _, _ = invoke("check", str(PR991), "--write-expect", str(expect))
    assert code == 0
    text = expect.read_text()
    assert "measured = { median_over_estimate = " in text
    # tighten one limit by hand, below the figure it was written from
    start = text.index("[runs.EP1.warm-fit]")
    line = next(x for x in text[start:].splitlines() if x.startswith("max_median_over_estimate"))
    expect.write_text(text.replace(line, "max_median_over_estimate = 0.10", 1))
    code, out, err = invoke("check", str(PR991), "--expect", str(expect))
    assert code == 1
    assert "regressed" not in err and "REGRESSED" not in out
    assert f"1 of 24 expectations in {expect} fail (1 never met):" in err
    assert "never met  EP1 warm-fit: median over-estimate +15.8% > allowed +10.0% " in err
    assert "(+15.8% when the file was written)" in err and "NEVER MET" in out
    doc = json.loads(invoke("check", str(PR991), "--expect", str(expect), "-f", "json")[1])
    failing = [r for r in doc["results"] if not r["holds"]]
    assert [(r["verdict"], r["measured"] > 0.15) for r in failing] == [("never met", True)]


def test_a_limit_without_a_recorded_figure_fails_without_a_claim() -> None:
    result = replay(readings_frame(ROWS), engine="scalar")
    report = evaluate(result, parse_expectations("[runs.run.warm-fit]\nmin_priced_waves = 9\n"))
    assert [r.verdict for r in report.results] == ["fails"]
    message = report.regression_message()
    assert "1 of 1 expectations in <expectations> fail (1 fails):" in message
    assert "regressed" not in message.splitlines()[0]


def test_measured_figures_are_checked_when_read() -> None:
    bad = "[runs.run.warm-fit]\nmax_under_peak = 0\nmeasured = { under_peek = 0 }\n"
    with pytest.raises(ExpectationsError, match="unknown figure 'under_peek'"):
        parse_expectations(bad)
    good = parse_expectations(
        "[runs.run.warm-fit]\nmax_under_peak = 0\nmeasured = { under_peak = 1 }\n"
    )
    assert good.measured == {("run", "warm-fit"): {"under_peak": 1}}


# --------------------------------------------------------------------------- under their peak

# ROWS with the second wave's peak raised: it is still priced at int(59_000 * 1.1) = 64_900
# (59_000 = 290 * 200 + 1_000 before the factor), now against an actual 80_000 - 10_000 =
# 70_000 in EP1 and 75_000 - 10_000 = 65_000 in EP2, so both policies put it under its peak.
UNDER_PEAKS = {"EP1": 80_000, "EP2": 75_000}


def under_trace(tmp_path: Path) -> Path:
    folder = tmp_path / "under"
    for run, peak in UNDER_PEAKS.items():
        rows = [{**ROWS[0], "run": run}, {**ROWS[1], "run": run, "peak_bytes": peak}]
        write_trace(readings_frame(rows), folder / f"{run}.parquet")
    return folder


def smallest_covering(unscaled: int, actual: int) -> float:
    """The smallest double f with int(unscaled * f) >= actual, found without numpy or
    warmfit: from the quotient, step up while it falls short, then down while it covers."""
    f = actual / unscaled
    while int(unscaled * f) < actual:
        f = math.nextafter(f, math.inf)
    while int(unscaled * math.nextafter(f, 0)) >= actual:
        f = math.nextafter(f, 0)
    return f


def test_write_expect_refuses_waves_under_their_peak(tmp_path: Path, invoke: Invoke) -> None:
    """Issue 25: a file allowing waves under their peak would pass a policy that ran out of
    memory, so --write-expect writes nothing and says why, which, and what to do."""
    trace = under_trace(tmp_path)
    # The per-wave rows the numbers above spell out: unscaled 59_000, 64_900 at 1.1.
    for factor, estimate in ((1.0, 59_000), (1.1, 64_900)):
        rows = replay(read_trace([trace]), PR_TWO, factor, engine="scalar").per_wave
        priced = rows.filter(pl.col("estimate_bytes").is_not_null())
        assert sorted(priced.select("run", "policy", "estimate_bytes", "actual_bytes").rows()) == [
            ("EP1", "max-merge", estimate, 70_000),
            ("EP1", "warm-fit", estimate, 70_000),
            ("EP2", "max-merge", estimate, 65_000),
            ("EP2", "warm-fit", estimate, 65_000),
        ]
    # Each policy's safe factor is the larger of its runs': EP1's, 70_000 / 59_000.
    safe = smallest_covering(59_000, 70_000)
    assert safe == 1.1864406779661016 and safe > smallest_covering(59_000, 65_000)
    assert int(59_000 * safe) == 70_000 and int(59_000 * math.nextafter(safe, 0)) == 69_999

    target = tmp_path / "expect.toml"
    code, out, err = invoke("check", str(trace), "--write-expect", str(target), *PR_TWO_P)
    assert code == 2 and out == "" and not target.exists()
    assert f"{target}: not written: at safety factor 1.1, waves are priced under their " in err
    assert "in 4 run/policy pairs:" in err
    for run in UNDER_PEAKS:
        for policy in ("max-merge", "warm-fit"):
            assert f"\n  {run} {policy}: 1 wave under its peak\n" in err
    assert "makes the gate pass a policy that would have run out of memory" in err
    assert f"{safe!r} for max-merge, {safe!r} for warm-fit)" in err
    assert "--safety" in err and "(-p)" in err and "--allow-under" in err
    assert "Traceback" not in err and len(err.splitlines()) == 6  # head, 4 pairs, paragraph

    # An existing file is left as it was, byte for byte, even with --force.
    before = b"# kept by hand\r\n[runs.EP1.warm-fit]\nmax_under_peak = 0\n"
    target.write_bytes(before)
    code, _, err = invoke("check", str(trace), "--write-expect", str(target), "--force", *PR_TWO_P)
    assert code == 2 and "not written" in err
    assert target.read_bytes() == before

    # At the safe factor no wave is under its peak, and the file is written.
    code, _, err = invoke(
        "check",
        str(trace),
        "--write-expect",
        str(target),
        "--force",
        "--safety",
        repr(safe),
        *PR_TWO_P,
    )
    assert code == 0 and err == ""
    assert {t["max_under_peak"] for t in read_expectations(target).limits.values()} == {0}


def test_allow_under_writes_the_count_and_warns(tmp_path: Path, invoke: Invoke) -> None:
    trace = under_trace(tmp_path)
    target = tmp_path / "expect.toml"
    code, out, err = invoke(
        "check", str(trace), "--write-expect", str(target), "--allow-under", *PR_TWO_P
    )
    assert code == 0 and "wrote expectations for 4 run/policy pairs" in out
    written = read_expectations(target)
    assert {key: t["max_under_peak"] for key, t in written.limits.items()} == {
        ("EP1", "max-merge"): 1,
        ("EP1", "warm-fit"): 1,
        ("EP2", "max-merge"): 1,
        ("EP2", "warm-fit"): 1,
    }
    assert err.splitlines() == [
        f"warning: {target} now allows 2 waves under their peak for {policy} (in 2 runs): "
        f"the gate will pass {policy} although it would have run out of memory on those waves."
        for policy in ("max-merge", "warm-fit")
    ]
    code, out, _ = invoke("check", str(trace), "--expect", str(target))
    assert code == 0 and "16 of 16 expectations hold" in out
    # --allow-under only says what --write-expect may write; a check takes the file's limits.
    code, _, err = invoke("check", str(trace), "--expect", str(target), "--allow-under")
    assert code == 2 and "--allow-under applies to --write-expect and --update only" in err


def test_no_wave_under_its_peak_writes_as_before_without_a_warning(
    tmp_path: Path, invoke: Invoke
) -> None:
    trace = small_trace(tmp_path)
    target = tmp_path / "expect.toml"
    code, out, err = invoke("check", str(trace), "--write-expect", str(target))
    assert code == 0 and err == "" and "wrote expectations for 3 run/policy pairs" in out
    assert {t["max_under_peak"] for t in read_expectations(target).limits.values()} == {0}
    again = tmp_path / "again.toml"
    code, _, err = invoke("check", str(trace), "--write-expect", str(again), "--allow-under")
    assert code == 0 and err == "" and again.read_bytes() == target.read_bytes()


def test_the_refusal_escapes_run_names_and_caps_its_lines(tmp_path: Path, invoke: Invoke) -> None:
    trace = tmp_path / "hostile"
    rows = [
        {**ROWS[0], "run": "EP\x1b[2J1"},
        {**ROWS[1], "run": "EP\x1b[2J1", "peak_bytes": 80_000},
    ]
    write_trace(readings_frame(rows), trace / "R.parquet")
    code, _, err = invoke("check", str(trace), "--write-expect", str(tmp_path / "e.toml"))
    assert code == 2 and "\x1b" not in err
    assert "\n  EP\\x1b[2J1 warm-fit: 1 wave under its peak\n" in err

    offenders = [UnderPeak(f"run{i:02}", "warm-fit", 3) for i in range(12)]
    offenders.append(UnderPeak("run12", "mine", 1))
    message = under_peak_message("e.toml", 1.1, offenders, {"warm-fit": 1.5, "mine": None})
    lines = message.splitlines()
    assert lines[1:11] == [f"  run{i:02} warm-fit: 3 waves under their peak" for i in range(10)]
    assert lines[11] == "  and 3 more" and len(lines) == 13
    assert (
        "(the smallest that puts no wave of these traces under its peak: 1.5 for warm-fit, "
        in (lines[12])
    )
    assert "no factor covers mine)" in lines[12]


# --------------------------------------------------------------------------- --update


def _runs_trace(folder: Path, peaks: dict[str, int]) -> Path:
    """One file per run: ROWS with the second wave's peak set per run."""
    for run, peak in peaks.items():
        rows = [{**ROWS[0], "run": run}, {**ROWS[1], "run": run, "peak_bytes": peak}]
        write_trace(readings_frame(rows), folder / f"{run}.parquet")
    return folder


def test_update_adds_the_runs_the_file_does_not_list_and_keeps_every_byte(
    tmp_path: Path,
    invoke: Invoke,
) -> None:
    """Issue 29 item 6: the gate grows with the traces.

    Run A (second wave actual 60_000 - 10_000 = 50_000, priced 64_900: +29.8%) has
    expectations, edited by hand; run B (55_000 - 10_000 = 45_000, priced 64_900:
    +44.2%) is new. A plain check names B and --update; --update appends B's tables
    (as --write-expect writes them), keeps the file's bytes before them, and checks.
    """
    target = tmp_path / "expect.toml"
    only_a = _runs_trace(tmp_path / "a", {"A": 60_000})
    assert invoke("check", str(only_a), "--write-expect", str(target), *PR_TWO_P)[0] == 0
    by_hand = target.read_text().replace(
        "max_max_over_estimate = 0.2981", "max_max_over_estimate = 0.35  # loosened by hand"
    )
    assert by_hand != target.read_text()
    target.write_text(by_hand)
    both = _runs_trace(tmp_path / "ab", {"A": 60_000, "B": 55_000})

    code, out, err = invoke("check", str(both), "--expect", str(target))
    assert code == 2 and out == ""
    assert "has no expectations for run 'B' of the trace" in err and "--update" in err
    assert target.read_text() == by_hand

    code, out, err = invoke("check", str(both), "--expect", str(target), "--update")
    assert code == 0, err
    assert err == (
        f"added run 'B' to {target}: max-merge median +44%, 0 waves under their peak; "
        "warm-fit median +44%, 0 waves under their peak\n"
    )
    assert "16 of 16 expectations hold" in out  # 2 runs x 2 policies x 4 limits
    text = target.read_text()
    raw = target.read_bytes()  # LF stays LF; one blank line, then the comment
    assert b"\r" not in raw
    assert raw.startswith(by_hand.encode() + b"\n# Added by 'warmfit check --update': 1 run ")
    assert "# Added by 'warmfit check --update': 1 run the file did not list" in text
    fresh = tmp_path / "fresh.toml"
    assert invoke("check", str(both), "--write-expect", str(fresh))[0] == 0
    written, made = read_expectations(target), read_expectations(fresh)
    for policy in ("max-merge", "warm-fit"):
        assert written.limits[("B", policy)] == made.limits[("B", policy)]
        assert written.limits[("B", policy)]["max_median_over_estimate"] == 0.4423
        assert written.measured[("B", policy)] == made.measured[("B", policy)]
    assert written.limits[("A", "max-merge")]["max_max_over_estimate"] == 0.35

    # Nothing new: the file stays byte for byte.
    code, out, err = invoke("check", str(both), "--expect", str(target), "--update")
    assert code == 0 and err == f"{target}: no new run to add.\n"
    assert target.read_text() == text


def test_update_refuses_a_new_run_under_its_peak_unless_allowed(
    tmp_path: Path, invoke: Invoke
) -> None:
    """A (priced 64_900 for 50_000) is written with no wave under its peak; EP2 (priced
    64_900 for 65_000 at the file's 1.1) is new and under its peak: refused, naming EP2
    alone, unless --allow-under."""
    target = tmp_path / "expect.toml"
    only_a = _runs_trace(tmp_path / "a", {"A": 60_000})
    assert invoke("check", str(only_a), "--write-expect", str(target), *PR_TWO_P)[0] == 0
    assert not read_expectations(target).allows_under
    before = target.read_bytes()
    both = _runs_trace(tmp_path / "a-ep2", {"A": 60_000, "EP2": 75_000})
    code, out, err = invoke("check", str(both), "--expect", str(target), "--update")
    assert code == 2 and out == ""
    assert (
        "not written: at safety factor 1.1, waves are priced under their peak in 2 run/policy "
        "pairs:\n  EP2 max-merge: 1 wave under its peak\n  EP2 warm-fit: 1 wave under its peak\n"
    ) in err
    assert "Pass --allow-under to record the figures anyway" in err
    assert target.read_bytes() == before
    code, _, err = invoke("check", str(both), "--expect", str(target), "--update", "--allow-under")
    assert code == 0, err
    assert err.splitlines()[1:] == [
        f"warning: {target} now allows 1 wave under its peak for {policy} (in 1 run): the "
        f"gate will pass {policy} although it would have run out of memory on that wave."
        for policy in ("max-merge", "warm-fit")
    ]
    assert err.startswith("added run 'EP2'") and "1 wave under its peak" in err
    assert read_expectations(target).limits[("EP2", "warm-fit")]["max_under_peak"] == 1


def test_update_of_a_file_written_with_allow_under_keeps_allowing(
    tmp_path: Path, invoke: Invoke
) -> None:
    """Issue 41, the second try from a fresh clone: a file written with --allow-under (EP1's max_under_peak is 1) records it, as
    it records its safety factor and grouping: --update takes the new EP2, under its
    peak too, without the flag being repeated, and says why it did."""
    target = tmp_path / "expect.toml"
    ep1 = _runs_trace(tmp_path / "one", {"EP1": 80_000})
    assert invoke("check", str(ep1), "--write-expect", str(target), "--allow-under")[0] == 0
    assert read_expectations(target).allows_under
    code, out, err = invoke(
        "check", str(under_trace(tmp_path)), "--expect", str(target), "--update"
    )
    assert code == 0, err
    assert "expectations hold" in out
    lines = err.splitlines()
    assert lines[0].startswith(f"added run 'EP2' to {target}: max-merge median ")
    assert lines[1:] == [
        f"warning: {target} now allows 1 wave under its peak for {policy} (in 1 run): the "
        f"gate will pass {policy} although it would have run out of memory on that wave. "
        "--update took them without --allow-under, as the file already allows waves under "
        "their peak (a max_under_peak above 0: written with --allow-under); rewrite it "
        "without --allow-under to refuse them."
        for policy in ("max-merge", "warm-fit", "envelope")
    ]
    written = read_expectations(target)
    assert {p: written.limits[("EP2", p)]["max_under_peak"] for p in written.policies} == {
        "max-merge": 1,
        "warm-fit": 1,
        "envelope": 1,
    }


def test_update_goes_with_expect_only(tmp_path: Path, invoke: Invoke) -> None:
    trace = small_trace(tmp_path)
    code, out, err = invoke(
        "check", str(trace), "--write-expect", str(tmp_path / "e.toml"), "--update"
    )
    assert code == 2 and out == "" and "--update adds new runs" in err
    assert not (tmp_path / "e.toml").exists()


def test_update_keeps_a_link_the_mode_and_the_line_endings(tmp_path: Path, invoke: Invoke) -> None:
    """--update appends to the file a link names (the link stays a link), keeps the
    file's mode (0640 here) and its CRLF line endings, byte for byte before the new
    tables; a read-only file is refused and left alone."""
    real = tmp_path / "real" / "e.toml"
    real.parent.mkdir()
    only_a = _runs_trace(tmp_path / "a", {"A": 60_000})
    assert invoke("check", str(only_a), "--write-expect", str(real))[0] == 0
    crlf = real.read_bytes().replace(b"\n", b"\r\n")
    real.write_bytes(crlf)
    real.chmod(0o640)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    both = _runs_trace(tmp_path / "ab", {"A": 60_000, "B": 55_000})
    code, _, err = invoke("check", str(both), "--expect", str(link), "--update")
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real
    data = real.read_bytes()
    assert data.startswith(crlf) and b"[runs.B.warm-fit]\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")  # no bare \n added
    assert real.stat().st_mode & 0o777 == 0o640
    assert read_expectations(real).runs == ["A", "B"]

    frozen = tmp_path / "frozen.toml"
    assert invoke("check", str(only_a), "--write-expect", str(frozen))[0] == 0
    frozen.chmod(0o444)
    before = frozen.read_bytes()
    code, _, err = invoke("check", str(both), "--expect", str(frozen), "--update")
    assert code == 2 and "is read-only, so --update leaves it as it is" in err
    assert frozen.read_bytes() == before


def test_update_writes_nothing_when_the_check_would_refuse_the_file(
    tmp_path: Path, invoke: Invoke
) -> None:
    """The file names run A, which the trace given does not hold; B is new. --update
    said it added B, then failed on A, having changed the file: now it refuses first."""
    target = tmp_path / "e.toml"
    assert invoke("check", str(_runs_trace(tmp_path / "a", {"A": 60_000})), "--write-expect",
                  str(target))[0] == 0  # fmt: skip
    before = target.read_bytes()
    only_b = _runs_trace(tmp_path / "b", {"B": 55_000})
    code, _, err = invoke("check", str(only_b), "--expect", str(target), "--update")
    assert code == 2 and "expects run 'A', which the trace does not hold" in err
    assert "added" not in err and target.read_bytes() == before


def _frame(*rows: dict[str, object]) -> pl.DataFrame:
    """Readings of one stream and signature, seq in the order given."""
    defaults = {"signature": "s", "packed_tokens": 100, "logical_tokens": 100}
    return readings_frame([{**defaults, "seq": i, **row} for i, row in enumerate(rows)])


# --------------------------------------------------------------------------- evaluate()


CHECK_ROWS = [
    # one unpriced seed wave, then waves priced at 300 B/token * 100 * 1.1 = 33_000:
    # over-estimates +10%, +10%, +65% (actuals 30_000, 30_000, 20_000): median +10%, max +65%
    {"wave": 0, "whole": True, "peak_bytes": 30_000},
    {"wave": 1, "whole": True, "peak_bytes": 30_000},
    {"wave": 2, "whole": True, "peak_bytes": 30_000},
    {"wave": 3, "whole": True, "peak_bytes": 20_000},
]


def test_max_over_estimate_is_checked_against_the_largest_not_the_median() -> None:
    result = replay(_frame(*CHECK_ROWS), ["max-merge"])
    row = result.summary.row(0, named=True)
    assert row["median_over_estimate"] == pytest.approx(0.1)
    assert row["max_over_estimate"] == pytest.approx(0.65)
    verdicts = evaluate(
        result,
        parse_expectations(
            "[runs.run.max-merge]\nmax_median_over_estimate = 0.3\nmax_max_over_estimate = 0.3\n"
        ),
    )
    assert [(r.limit.key, r.holds) for r in verdicts.results] == [
        ("max_median_over_estimate", True),  # +10% <= +30%
        ("max_max_over_estimate", False),  # +65% > +30%
    ]
    assert not verdicts.passed
    assert verdicts.regressions[0].describe() == (
        "run max-merge: largest over-estimate +65.0% > allowed +30.0%"
    )


def test_a_missing_figure_fails_the_real_check() -> None:
    # one wave, no floor: nothing prices it, so the run has no median, no max
    # and no priced wave; every limit on a missing figure regresses
    result = replay(_frame({"wave": 0, "whole": True, "peak_bytes": 30_000}), ["max-merge"])
    assert result.summary.row(0, named=True)["median_over_estimate"] is None
    report = evaluate(
        result,
        parse_expectations(
            "[runs.run.max-merge]\nmax_median_over_estimate = 1.0\nmax_max_over_estimate = 1.0\n"
            "max_under_peak = 0\n"
        ),
    )
    assert [(r.limit.key, r.actual, r.holds) for r in report.results] == [
        ("max_median_over_estimate", None, False),
        ("max_max_over_estimate", None, False),
        ("max_under_peak", 0, True),
    ]
    assert not report.passed and len(report.regressions) == 2


# --------------------------------------------------------------------------- 4, 5: check


def test_write_expect_keeps_an_exact_limit(tmp_path: Path) -> None:
    """Survivor 4 (stranger-round-limit-up-when-exact): a limit already on the
    0.01-point grid is written as it is, not one step up.

    Wave 0 (4 tokens, 400 B) teaches 100 B/token; wave 1 (4 tokens) is priced
    440 B and peaks at exactly 440 B: over-estimate 0.0. The file says
    ``max_median_over_estimate = 0.0``, not 0.0001.
    """
    assert _round_limit(0.0, True) == 0.0
    assert _round_limit(0.25, True) == 0.25
    assert _round_limit(-0.5, True) == -0.5
    assert _round_limit(0.0, False) == 0.0
    folder = write_waves(tmp_path / "trace", [whole_wave(0, 400, 4), whole_wave(1, 440, 4)])
    expect = tmp_path / "expect.toml"
    warmfit_ok("check", folder, "--write-expect", expect)
    tables = tomllib.loads(expect.read_text())["runs"]["run"]
    for policy in ("max-merge", "warm-fit"):
        assert tables[policy]["max_median_over_estimate"] == 0.0
        assert tables[policy]["max_max_over_estimate"] == 0.0
        assert tables[policy]["measured"]["median_over_estimate"] == 0.0
    warmfit_ok("check", folder, "--expect", expect)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("max_under_peak = false", "max_under_peak must be a whole number >= 0; got False"),
        ("min_priced_waves = true", "min_priced_waves must be a whole number >= 0; got True"),
    ],
)
def test_a_boolean_is_not_a_count_in_an_expectations_file(
    tmp_path: Path, line: str, words: str
) -> None:
    """Survivor 5 (stranger-expect-count-accepts-bool): TOML's ``false`` is no 0.

    Read as 0, ``max_under_peak = false`` would pass a trace with no wave under
    its peak: a wrong file would pass. It is refused, exit 2, naming the file.
    """
    text = f"version = 1\n[runs.run.warm-fit]\n{line}\n"
    with pytest.raises(ExpectationsError, match=words):
        parse_expectations(text, "e.toml")
    folder = write_waves(tmp_path / "trace", [whole_wave(0, 400, 4), whole_wave(1, 440, 4)])
    expect = tmp_path / "expect.toml"
    expect.write_text(text)
    result = warmfit_cli("check", folder, "--expect", expect, "-p", "warm-fit")
    assert result.exit_code == 2, result.output
    assert str(expect) in result.output and words in " ".join(result.output.split())


def test_check_says_which_expectations_a_narrowing_p_leaves_unchecked(tmp_path: Path) -> None:
    """Following the advice to name an own policy with -p must not shrink the gate silently."""
    expect = tmp_path / "exp.toml"
    wrote = warmfit_cli("check", "traces/pr991", "--write-expect", str(expect))
    assert wrote.exit_code == 0, wrote.output
    done = warmfit_cli("check", "traces/pr991", "--expect", str(expect), "-p", "warm-fit")
    assert done.exit_code == 0, done.output
    assert "max-merge" in done.stderr and "not checked" in done.stderr
    every = warmfit_cli(
        "check",
        "traces/pr991",
        "--expect",
        str(expect),
        *("-p", "warm-fit", "-p", "max-merge"),
        *("-p", "envelope"),
    )
    assert "not checked" not in every.stderr
