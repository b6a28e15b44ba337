"""``--grid START:STOP:STEP`` at its edges, each with its numbers spelled out.

Each test kills survivors of the generated mutation pass over
``warmfit/report/sweep.py`` (``make mutants-generated``), named by the pass's
id in its docstring.
"""

from __future__ import annotations

import pytest

from warmfit.errors import UsageError
from warmfit.report.sweep import MAX_GRID_POINTS, parse_grid


def test_a_grid_of_one_point_is_allowed() -> None:
    """Kills sweep.py:49:13:Lt->LtE: STOP equal to START is one factor, not an error."""
    assert parse_grid("1.25:1.25:0.01") == [1.25]


@pytest.mark.parametrize("text", ["0:1:0.5", "1:2:0", "-1:2:0.5", "1:2:-0.5"])
def test_a_zero_or_negative_start_or_step_is_refused(text: str) -> None:
    """Kills sweep.py:47:85:LtE->Lt (START 0 accepted): a factor of 0 prices nothing."""
    with pytest.raises(UsageError, match="START and STEP must be positive"):
        parse_grid(text)


def test_the_grid_may_hold_exactly_the_most_points_and_no_more() -> None:
    """Kills sweep.py:34:19:Int->k+1 and sweep.py:52:14:Gt->GtE.

    1:100000:1 is 100,000 factors (1, 2, ..., 100000): allowed. 1:100001:1 is
    100,001: refused, naming the count.
    """
    assert MAX_GRID_POINTS == 100_000
    grid = parse_grid("1:100000:1")
    assert (len(grid), grid[0], grid[-1]) == (100_000, 1.0, 100_000.0)
    with pytest.raises(UsageError, match="100,001 points"):
        parse_grid("1:100001:1")


def test_factors_are_rounded_to_twelve_decimals() -> None:
    """Kills sweep.py:54:37:Int->k+1 (rounding to 13 decimals).

    1 + 1709 * 0.3 is 513.6999999999999 in doubles; rounded to 12 decimals it
    is the 513.7 the user meant (to 13 it stays 513.6999999999999).
    """
    grid = parse_grid("1:600:0.3")
    assert len(grid) == 1997  # floor(599 / 0.3) + 1
    assert grid[1709] == 513.7
    assert grid[1] == 1.3
