"""What warmfit's errors say (warmfit/errors.py): where a trace breaks the format, and
the exit code each kind of error gives."""

from __future__ import annotations

from pathlib import Path

from warmfit.errors import RegressionFound, TraceError, UsageError, WarmfitError


def test_a_trace_error_names_file_column_and_row_then_the_problem_and_the_fix() -> None:
    error = TraceError(
        "seq goes down.", path=Path("t/a.parquet"), column="seq", row=3, fix="Sort by seq."
    )
    assert str(error) == "t/a.parquet, column 'seq', row 3: seq goes down. Sort by seq."
    assert (error.path, error.column, error.row, error.fix) == (
        "t/a.parquet",
        "seq",
        3,
        "Sort by seq.",
    )


def test_a_trace_error_says_only_what_it_knows() -> None:
    bare = TraceError("no readings.")
    assert str(bare) == "no readings." and bare.path is None
    assert str(TraceError("no readings.", path="a.parquet")) == "a.parquet: no readings."
    assert str(TraceError("bad.", column="wave")) == "column 'wave': bad."
    assert str(TraceError("bad.", row=0)) == "row 0: bad."  # row 0 is a row
    assert str(TraceError("bad.", fix="")) == "bad."


def test_a_file_name_with_terminal_escapes_is_shown_escaped() -> None:
    shown = str(TraceError("bad.", path="a\x1b[31m.parquet"))
    assert "\x1b" not in shown and shown.endswith(": bad.")


def test_usage_and_trace_errors_exit_2_a_regression_1() -> None:
    assert WarmfitError("x").exit_code == 2
    assert UsageError("x").exit_code == TraceError("x").exit_code == 2
    assert RegressionFound("worse").exit_code == 1
