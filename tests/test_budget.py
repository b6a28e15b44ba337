"""Budgets as people type them: every one is a size warmfit can count, or one line.

Issue 42: ``recommend --budget`` with 5,000 digits ended in Python's
int-string-limit traceback, and ``replay --budget`` beyond 2**63 in polars' i64
overflow traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def run_cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from warmfit.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("command", "words", "written"),
    [
        ("recommend", ["--budget", "8", "MiB"], "8MiB"),
        ("replay", ["--budget", "8", "MiB"], "8MiB"),
        ("recommend", ["--budget", "128.8", "gb"], "128.8gb"),
        ("replay", ["8MiB"], "8MiB"),  # the size as a path: --budget left out
        ("replay", ["KB"], "8KB"),  # no number given: an example
    ],
)
def test_a_budget_split_by_a_space_is_named_as_one(tmp_path, monkeypatch, command, words, written):
    """nc2: `recommend T --budget 8 MiB` read MiB as a trace path and said only "no such
    file or directory"; a missing path that reads as a size says how to write --budget."""
    monkeypatch.chdir(tmp_path)
    missing = words[-1]
    code, output = run_cli(command, str(REPO / "traces/pr991"), *words)
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
    code, output = run_cli(*args)
    assert code == 2
    assert output == f"warmfit: error: {missing}: no such file or directory. Check the path.\n"


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
