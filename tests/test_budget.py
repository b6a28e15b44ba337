"""Budgets as people type them: every one is a size warmfit can count, or one line.

Issue 42: ``recommend --budget`` with 5,000 digits ended in Python's
int-string-limit traceback, and ``replay --budget`` beyond 2**63 in polars' i64
overflow traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.command_line import warmfit_cli, warmfit_json, warmfit_output
from tests.whole_waves import policy_column, whole_wave, write_waves
from warmfit.format.trace import read_trace
from warmfit.replay import replay
from warmfit.show.units import LARGEST, UNITS, parse_bytes

REPO = Path(__file__).resolve().parent.parent


@given(
    digits=st.text("0123456789", min_size=1, max_size=6000),
    fraction=st.text("0123456789", max_size=30),
    unit=st.sampled_from(sorted(UNITS)),
)
def test_a_budget_is_a_count_within_int64_or_a_value_error(digits, fraction, unit):
    text = f"{digits}.{fraction}{unit}" if fraction else f"{digits}{unit}"
    try:
        size = parse_bytes(text)
    except ValueError as exc:
        assert "above the largest size" in str(exc) and len(str(exc)) < 400
    else:
        assert 0 <= size <= LARGEST


def test_the_largest_budget_is_exact_and_one_more_byte_is_refused():
    assert parse_bytes(str(2**63 - 1)) == 2**63 - 1
    with pytest.raises(ValueError, match="above the largest size"):
        parse_bytes(str(2**63))
    with pytest.raises(ValueError, match="above the largest size"):
        parse_bytes("8388608 TiB")  # exactly 2**63 bytes


@pytest.mark.parametrize("command", ["recommend", "replay"])
@pytest.mark.parametrize("budget", ["9" * 5000, str(2**63), str(2**64), "1" + "0" * 30 + "GB"])
def test_a_budget_too_large_is_one_line_and_exit_2(command, budget):
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", command, "traces/pr991", "--budget", budget],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--budget" in lines[0] and "above the largest size" in lines[0]
    assert len(lines[0]) < 400  # the 5,000 digits are not echoed


@pytest.mark.parametrize(
    ("command", "words", "written"),
    [
        ("recommend", ["--budget", "8", "MiB"], "8MiB"),
        ("replay", ["--budget", "8", "MiB"], "8MiB"),
        ("recommend", ["--budget", "128.8", "gb"], "128.8gb"),
        ("replay", ["8MiB"], "8MiB"),  # the size as a path: --budget left out
        ("replay", ["16MiB"], "16MiB"),  # its number, not the example's 8
        ("replay", ["KB"], "8KB"),  # no number given: an example
    ],
)
def test_a_budget_split_by_a_space_is_named_as_one(tmp_path, monkeypatch, command, words, written):
    """Issue 41, the second try from a fresh clone: `recommend T --budget 8 MiB` read MiB as a trace path and said only "no such
    file or directory"; a missing path that reads as a size says how to write --budget."""
    monkeypatch.chdir(tmp_path)
    missing = words[-1]
    code, output = warmfit_output(command, str(REPO / "traces/pr991"), *words)
    assert code == 2
    assert output == (
        f"warmfit: error: {missing}: no such file or directory. Check the path. "
        f"(a --budget with a space? write it as --budget {written})\n"
    )


@pytest.mark.parametrize(
    ("args", "missing"),
    [
        (["validate", "MiB"], "MiB"),  # validate takes no --budget
        (["replay", "nope.parquet", "MiB"], "nope.parquet"),  # the first missing path
        (["replay", "B"], "B"),  # a byte count's B is too likely a file's name
        (["replay", "8MiB.parquet"], "8MiB.parquet"),
    ],
)
def test_a_missing_path_that_is_no_size_or_a_command_without_budget_gets_no_hint(
    tmp_path, monkeypatch, args, missing
):
    monkeypatch.chdir(tmp_path)
    code, output = warmfit_output(*args)
    assert code == 2
    assert output == f"warmfit: error: {missing}: no such file or directory. Check the path.\n"


def test_a_trace_folder_named_like_a_size_is_a_trace(tmp_path, monkeypatch):
    """A trace folder named by its device's memory (``80GiB``) exists: it is read, with or
    without --budget, and no hint about a split --budget is given."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(REPO / "traces/pr991", tmp_path / "80GiB")
    assert warmfit_json("replay", "80GiB", "--budget", "8GiB")
    assert warmfit_json("replay", "80GiB") == warmfit_json("replay", str(REPO / "traces/pr991"))


@given(
    number=st.from_regex(r"([0-9]{1,5}(\.[0-9]{0,3})?)?", fullmatch=True),
    unit=st.sampled_from(sorted(u for u in UNITS if len(u) > 1)),
    upper=st.booleans(),
)
def test_a_size_with_a_unit_reads_as_one_and_parses_as_a_budget(number, unit, upper):
    from warmfit.show.units import size_unit

    unit = unit if upper else unit.lower()
    assert size_unit(number + unit) == (number, unit)
    assert size_unit(number + unit + ".parquet") is None
    assert parse_bytes((number or "8") + unit) >= 0  # the hint's form is a budget


# --------------------------------------------------------------------------- units


def test_binary_units_are_powers_of_1024() -> None:
    """Kills units-kib-is-1000: 1 KiB is 1,024 bytes, 1.5 KiB 1,536."""
    assert parse_bytes("1KiB") == 1_024
    assert parse_bytes("1.5 KiB") == 1_536
    assert parse_bytes("2 KB") == 2_000


def test_a_fractional_size_is_rounded_down() -> None:
    """Kills units-round-half-up: 1.9 bytes is 1 byte, 0.0009 KB (0.9 bytes) is 0."""
    assert parse_bytes("1.9") == 1
    assert parse_bytes("0.0009 KB") == 0
    assert parse_bytes("1.0009 KB") == 1_000


# --------------------------------------------------------------------------- 3: budget


def test_a_wave_priced_exactly_at_the_budget_is_admitted_in_the_per_wave_file(
    tmp_path: Path,
) -> None:
    """Survivor 3 (stranger-per-wave-admitted-strict): SPEC §7 admits a wave when
    ``estimate <= budget``, in the summary and in the per-wave file alike.

    Wave 0 (4 tokens, 400 B) teaches 100 B/token. Wave 1 (4 tokens) is priced
    int(400 * 1.1) = 440 B: with ``--budget 440`` it is admitted. Wave 2
    (5 tokens, 500 B) is priced 550 B: refused. Per-wave ``admitted`` is
    [null, true, false] for each policy, and the summary's ``admitted`` is 1.
    """
    folder = write_waves(
        tmp_path / "trace", [whole_wave(0, 400, 4), whole_wave(1, 400, 4), whole_wave(2, 500, 5)]
    )
    out = tmp_path / "waves.parquet"
    rows = warmfit_json("replay", folder, "--budget", "440", "--per-wave", out)
    assert [(r["admitted"], r["refused_fit"], r["admitted_oom"]) for r in rows] == [(1, 0, 0)] * 3
    per_wave = pl.read_parquet(out)
    for policy in ("max-merge", "warm-fit"):
        assert policy_column(per_wave, policy, "estimate_bytes") == [None, 440, 550]
        assert policy_column(per_wave, policy, "admitted") == [None, True, False]
    result = replay(read_trace([folder]), budget_bytes=440)
    assert policy_column(result.per_wave, "warm-fit", "admitted") == [None, True, False]
    assert result.summary.get_column("admitted").to_list() == [1, 1, 1]  # 3 default policies


def test_a_budget_tables_counts_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """admitted + refused = waves in every row; fits (refused although they fit) is
    among the refused; the columns shown are the ones the caption defines."""
    monkeypatch.setenv("COLUMNS", "200")
    done = warmfit_cli(
        "replay", "traces/art-h200", "-p", "max-merge", "-p", "warm-affine", "--budget", "60GB"
    )
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert lines[0].split()[-5:] == ["excess", "admitted", "refused", "fits", "ooms"]
    refused_some = False
    for line in lines[2:]:
        tokens = line.split()
        if len(tokens) < 11 or not tokens[-1].isdigit():
            break  # the caption
        ooms, fits, refused, admitted = (int(t) for t in tokens[-1:-5:-1])
        waves = int(tokens[-11])  # before: median, max, under, beyond, excess (2 tokens)
        assert admitted + refused == waves and fits <= refused and ooms <= admitted, line
        refused_some |= refused > fits
    assert refused_some  # a 60 GB budget refuses waves that do not fit either
    caption = " ".join(lines)
    assert "set by profile / floor" not in caption  # not a column of this table
    markdown = warmfit_cli("replay", "traces/pr991", "--budget", "100GB", "-f", "markdown")
    assert "budget's counts are in --format table, csv and json" in markdown.stdout
