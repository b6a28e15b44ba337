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
