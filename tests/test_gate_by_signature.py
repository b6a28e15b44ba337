"""``warmfit check --by signature`` (SPEC §9): the gate per signature, the grouping an
expectations file records, the rewrite hint, and files without ``recorded``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.command_line import invoke
from warmfit.format.trace import readings_frame, write_trace
from warmfit.report.gate import parse_expectations, read_expectations

# One run, two signatures, max-merge at safety factor 1.0, no outputs, baseline 0, so
# a wave's estimate is int(rate_max * 100) with rate_max = the largest peak / 100 seen.
#
# train: seed 10_000 (rate 100), then five waves of 100 tokens priced 10_000 each,
#        against actuals 10_000 x4 (+0%) and 8_000 (+25%).
# eval:  seed EVAL_SEED, then two waves of 100 tokens whose actual is 5_000.
#        before: seed 5_000 -> priced 5_000: +0%, +0%.
#        after:  seed 6_000 -> priced 6_000: +20%, +20%   (eval regressed).
#
# --by run pools the 7 priced waves: before [0, 0, 0, 0, .25, 0, 0], after
# [0, 0, 0, 0, .25, .2, .2]: median +0% and largest +25% both times, 0 under their
# peak, 7 priced waves: every limit holds, the regression hides.
# --by signature: eval's median and largest go from +0% to +20%: both regress.
TRAIN = [10_000, 10_000, 10_000, 10_000, 10_000, 8_000]


def rows(eval_seed: int, run: str = "R") -> list[dict[str, object]]:
    waves = [("train", peak) for peak in TRAIN] + [("eval", p) for p in (eval_seed, 5_000, 5_000)]
    return [
        dict(run=run, seq=i, wave=i, signature=sig, packed_tokens=100, logical_tokens=100,
             peak_bytes=peak, whole=True)
        for i, (sig, peak) in enumerate(waves)
    ]  # fmt: skip


def trace(path: Path, eval_seed: int) -> Path:
    return write_trace(readings_frame(rows(eval_seed)), path / "R.parquet").parent


def write(traces: Path, expect: Path, *options: str) -> tuple[int, str, str]:
    return invoke(
        "check", str(traces), "--write-expect", str(expect), "-p", "max-merge",
        "--safety", "1.0", *options,
    )  # fmt: skip


def test_by_signature_catches_a_regression_of_eval_that_by_run_misses(tmp_path: Path) -> None:
    before = trace(tmp_path / "before", 5_000)
    after = trace(tmp_path / "after", 6_000)
    by_run, by_sig = tmp_path / "run.toml", tmp_path / "sig.toml"
    assert write(before, by_run)[0] == 0
    assert write(before, by_sig, "--by", "signature")[0] == 0
    run_file, sig_file = read_expectations(by_run), read_expectations(by_sig)
    assert run_file.by == "run" and sig_file.by == "signature"
    assert run_file.limits[("R", "max-merge")] == {
        "max_median_over_estimate": 0.0,
        "max_max_over_estimate": 0.25,
        "max_under_peak": 0,
        "min_priced_waves": 7,
    }
    assert sig_file.limits[("R", "eval", "max-merge")] == {
        "max_median_over_estimate": 0.0,
        "max_max_over_estimate": 0.0,
        "max_under_peak": 0,
        "min_priced_waves": 2,
    }
    assert sig_file.limits[("R", "train", "max-merge")]["max_max_over_estimate"] == 0.25

    code, out, _ = invoke("check", str(after), "--expect", str(by_run))
    assert code == 0, out  # pooled with train's waves, eval's regression hides
    assert "4 of 4 expectations hold" in out

    code, out, err = invoke("check", str(after), "--expect", str(by_sig), "--by", "signature")
    assert code == 1
    assert "6 of 8 expectations hold" in out
    assert err.splitlines()[:3] == [
        f"warmfit: error: 2 of 8 expectations in {by_sig} regressed:",
        "  regressed  R eval max-merge: median over-estimate +20.0% > allowed +0.0% "
        "(+0.0% when the file was written)",
        "  regressed  R eval max-merge: largest over-estimate +20.0% > allowed +0.0% "
        "(+0.0% when the file was written)",
    ]
    # the hint repeats what the file was written with: -p, --by and --safety
    assert (
        f"  warmfit check {after} --write-expect {by_sig} --force -p max-merge "
        "--by signature --safety 1.0" in err
    )


def test_a_file_of_one_grouping_is_refused_against_figures_of_the_other(
    tmp_path: Path,
) -> None:
    traces = trace(tmp_path / "t", 5_000)
    by_run, by_sig = tmp_path / "run.toml", tmp_path / "sig.toml"
    write(traces, by_run)
    write(traces, by_sig, "--by", "signature")
    code, out, err = invoke("check", str(traces), "--expect", str(by_sig))
    assert code == 2 and out == ""
    assert err == (
        f"warmfit: error: {by_sig}: was written --by signature (one table per run, signature "
        "and policy), and these figures are grouped --by run: they cannot be compared. Check "
        "with --by signature, or write a file --by run with 'warmfit check PATH... --by run "
        "--write-expect FILE'.\n"
    )
    code, _, err = invoke("check", str(traces), "--expect", str(by_run), "--by", "signature")
    assert code == 2 and "was written --by run" in err and "grouped --by signature" in err
    code, _, err = invoke(
        "check", str(traces), "--expect", str(by_run), "--by", "signature", "--update"
    )
    assert code == 2 and "was written --by run" in err


def test_a_file_without_the_by_key_was_written_by_run(tmp_path: Path) -> None:
    """Files written before SPEC §9 stay readable: no ``by`` means ``run``."""
    traces = trace(tmp_path / "t", 5_000)
    old = tmp_path / "old.toml"
    old.write_text("[runs.R.max-merge]\nmax_under_peak = 0\nmin_priced_waves = 7\n")
    assert read_expectations(old).by == "run"
    code, out, _ = invoke("check", str(traces), "--expect", str(old))
    assert code == 0 and "2 of 2 expectations hold" in out
    code, _, err = invoke("check", str(traces), "--expect", str(old), "--by", "signature")
    assert code == 2 and "was written --by run" in err


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('by = "wave"\n[runs.R.max-merge]\n', "by must be one of 'run', 'signature'"),
        ('by = "signature"\n[runs.R.max-merge]\nmax_under_peak = 0\n', "[runs.R.max-merge]"),
        ('by = "signature"\n[runs.R]\n', "[runs.R] must hold one table per signature"),
    ],
)
def test_a_bad_grouping_is_named(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "e.toml"
    path.write_text(text)
    code, out, err = invoke("check", str(tmp_path), "--expect", str(path))
    assert code == 2 and out == "" and words in err and len(err.splitlines()) == 1


def test_update_by_signature_adds_new_signatures_and_keeps_the_rest(tmp_path: Path) -> None:
    """--update --by signature adds a signature the file does not list (a new one of a
    listed run too: it must not go unchecked), leaving every byte already there."""
    traces = trace(tmp_path / "t", 5_000)
    expect = tmp_path / "sig.toml"
    expect.write_text(
        'by = "signature"\nsafety_factor = 1.0\n'
        "[runs.R.train.max-merge]\nmax_max_over_estimate = 0.3  # by hand\n"
    )
    before = expect.read_text()
    code, out, _ = invoke("check", str(traces), "--expect", str(expect), "--by", "signature")
    assert code == 2  # eval is not listed
    code, out, err = invoke(
        "check", str(traces), "--expect", str(expect), "--by", "signature", "--update"
    )
    assert code == 0, err
    assert "added run 'R' signature 'eval' to" in err
    assert "max-merge median +0%, 0 waves under their peak" in err
    text = expect.read_text()
    assert text.startswith(before)
    assert "[runs.R.eval.max-merge]\n" in text and "min_priced_waves = 2\n" in text
    read = parse_expectations(text)
    assert read.groups == [("R", "train"), ("R", "eval")]
    assert "5 of 5 expectations hold" in out  # train's 1 limit, eval's 4


def test_allow_under_and_minus_p_by_signature(tmp_path: Path) -> None:
    """At safety 0.9 eval's two waves are priced 4_500 for 5_000 and train's four of 10_000
    at 9_000: under their peak.
    --write-expect --by signature refuses them naming the signature; --allow-under
    writes them; the hint of a regression then repeats --allow-under."""
    traces = trace(tmp_path / "t", 5_000)
    expect = tmp_path / "sig.toml"
    args = ["check", str(traces), "--write-expect", str(expect), "-p", "max-merge"]
    args += ["--by", "signature", "--safety", "0.9"]
    code, _, err = invoke(*args)
    assert code == 2 and "  R eval max-merge: 2 waves under their peak" in err
    assert "under their peak in 2 run/signature/policy tables:\n" in err  # not "pairs"
    code, out, err = invoke(*args, "--allow-under")
    assert code == 0, err
    assert "now allows 6 waves under their peak for max-merge (in 2 run/signature pairs)" in err
    assert "wrote expectations for 2 run/signature/policy tables (max-merge)" in out
    assert read_expectations(expect).limits[("R", "eval", "max-merge")]["max_under_peak"] == 2
    worse = trace(tmp_path / "worse", 6_000)  # at 0.9: eval priced 5_400: now +8%
    code, _, err = invoke(
        "check", str(worse), "--expect", str(expect), "--by", "signature", "-p", "max-merge"
    )
    assert code == 1
    assert (
        f"--write-expect {expect} --force -p max-merge --allow-under --by signature "
        "--safety 0.9" in err
    )


def test_update_by_signature_refuses_new_tables_under_their_peak_counting_tables(
    tmp_path: Path,
) -> None:
    """Issue 41, the second try from a fresh clone: at safety 0.9 eval's two waves of 5_000 are priced 4_500. The file lists
    train alone and allows no wave under its peak: --update refuses eval's tables,
    counted as the run/signature/policy tables it lists, as --write-expect counts what
    it writes."""
    traces = trace(tmp_path / "t", 5_000)
    expect = tmp_path / "sig.toml"
    expect.write_text(
        'by = "signature"\nsafety_factor = 0.9\n[runs.R.train.max-merge]\n[runs.R.train.envelope]\n'
    )
    args = ["check", str(traces), "--expect", str(expect), "--by", "signature", "--update"]
    code, out, err = invoke(*args)
    assert code == 2 and out == ""
    assert err.startswith(
        f"warmfit: error: {expect}: not written: at safety factor 0.9, waves are priced "
        "under their peak in 2 run/signature/policy tables:\n"
        "  R eval max-merge: 2 waves under their peak\n"
        "  R eval envelope: 2 waves under their peak\n"
    )


def test_a_file_allowing_waves_under_their_peak_says_so_whatever_policies_are_kept() -> None:
    """The allowance is the file's (written with --allow-under), not one policy's: -p
    narrowing to a policy whose tables allow none keeps it, for --update and the rewrite."""
    text = (
        'by = "signature"\n[runs.R.eval.envelope]\nmax_under_peak = 1\n'
        "[runs.R.eval.max-merge]\nmax_under_peak = 0\n"
    )
    read = parse_expectations(text)
    assert read.allows_under
    narrowed = read.restricted_to(["max-merge"])
    assert narrowed.allows_under and "--allow-under" in narrowed.rewrite_options()
    assert not parse_expectations(text.replace("= 1", "= 0")).allows_under


# --------------------------------------------------------------------------- recorded


def priced_rows(run: str, prices: bool) -> list[dict[str, object]]:
    """Two waves of one signature; with ``prices``, the trainer's own: 9_000 for the
    second, whose actual is 10_000 (one wave under its peak)."""
    out = []
    for i, peak in enumerate((10_000, 10_000)):
        row: dict[str, object] = dict(
            run=run, seq=i, wave=i, signature="s", packed_tokens=100, logical_tokens=100,
            peak_bytes=peak, whole=True,
        )  # fmt: skip
        if prices:
            row["estimate_bytes"] = 20_000 if i == 0 else 9_000
        out.append(row)
    return out


def test_recorded_can_be_left_out_and_update_adds_no_empty_recorded_table(
    tmp_path: Path,
) -> None:
    traces = tmp_path / "t"
    write_trace(readings_frame(priced_rows("tx", True)), traces / "tx.parquet")
    expect = tmp_path / "e.toml"
    # Without -p, recorded is in the file, and its wave under the peak is refused; the
    # refusal says how to leave it out.
    code, _, err = invoke("check", str(traces), "--write-expect", str(expect))
    assert code == 2
    assert (
        "To leave recorded, the trainer's own prices, out of the file, name the other "
        "policies alone: -p max-merge -p warm-fit -p envelope." in err
    )
    code, _, err = invoke(
        "check", str(traces), "--write-expect", str(expect),
        "-p", "max-merge", "-p", "warm-fit", "-p", "envelope",
    )  # fmt: skip
    assert code == 0, err
    assert read_expectations(expect).policies == ["max-merge", "warm-fit", "envelope"]
    code, out, _ = invoke("check", str(traces), "--expect", str(expect), "-f", "csv")
    assert code == 0 and {line.split(",")[1] for line in out.splitlines()[1:]} == {
        "max-merge", "warm-fit", "envelope",
    }  # fmt: skip
    # A new run without prices: --update adds no recorded table for it.
    write_trace(readings_frame(priced_rows("ty", False)), traces / "ty.parquet")
    code, _, err = invoke("check", str(traces), "--expect", str(expect), "--update")
    assert code == 0, err
    assert "recorded]" not in expect.read_text() and "[runs.ty.max-merge]" in expect.read_text()


def test_update_of_a_file_with_recorded_adds_none_for_a_run_without_prices(
    tmp_path: Path,
) -> None:
    traces = tmp_path / "t"
    write_trace(readings_frame(priced_rows("tx", True)), traces / "tx.parquet")
    expect = tmp_path / "e.toml"
    code, _, err = invoke(
        "check", str(traces), "--write-expect", str(expect), "--allow-under", "-p", "max-merge",
        "-p", "recorded",
    )  # fmt: skip
    assert code == 0, err
    assert read_expectations(expect).policies == ["max-merge", "recorded"]
    write_trace(readings_frame(priced_rows("ty", False)), traces / "ty.parquet")
    code, _, err = invoke("check", str(traces), "--expect", str(expect), "--update")
    assert code == 0, err
    text = expect.read_text()
    assert "[runs.ty.max-merge]" in text and "[runs.ty.recorded]" not in text
    assert "[runs.tx.recorded]" in text
