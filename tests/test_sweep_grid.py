"""``--grid START:STOP:STEP`` at its edges, each with its numbers spelled out.

Each test kills survivors of the generated mutation pass over
``warmfit/report/sweep.py`` (``make mutants-generated``), named by the pass's
id in its docstring.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.command_line import warmfit_ok
from tests.whole_waves import whole_wave, write_waves
from warmfit.errors import UsageError
from warmfit.format.trace import read_trace
from warmfit.report.sweep import MAX_GRID_POINTS, parse_grid, safe_factor, sweep


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


# --------------------------------------------------------------------------- sweep


def test_the_safe_factor_steps_up_where_the_quotient_does_not_cover() -> None:
    """Kills sweep-safe-factor-not-stepped-up.

    1 / 49 rounds down: 49 * (1 / 49) is 0.9999999999999999, whose int is 0,
    so the quotient leaves the wave of 1 byte uncovered; the safe factor is
    the next double up.
    """
    assert int(49 * (1 / 49)) == 0
    f = safe_factor(np.array([49]), np.array([1]))
    assert f == np.nextafter(1 / 49, np.inf)
    assert int(49 * f) == 1


# --------------------------------------------------------------------------- 7: sweep


def test_the_safe_factor_ignores_waves_that_ran_out_of_memory(tmp_path: Path) -> None:
    """Survivor 7 (stranger-sweep-counts-oom-waves): SPEC §7's safe factor is over
    the figure waves, which leave out waves that ran out of memory.

    Wave 0 (100 tokens, 10,000 B) teaches 100 B/token. Wave 1 is priced 10,000
    B before the factor and peaks at 10,000 B: it needs f = 1.0. Wave 2 is
    priced 10,000 B too and runs out of memory at 22,500 B: it would need
    2.25, but it is not a figure wave. The safe factor is 1.0, not 2.25.
    """
    folder = write_waves(
        tmp_path, [whole_wave(0, 10_000), whole_wave(1, 10_000), whole_wave(2, 22_500, oom=True)]
    )
    found = sweep(read_trace([folder]), grid=[1.0])
    assert [(r["policy"], r["safe_factor"]) for r in found.results] == [
        ("max-merge", 1.0), ("warm-fit", 1.0), ("envelope", 1.0),
    ]  # fmt: skip
    rows = json.loads(warmfit_ok("sweep", folder, "--format", "json").stdout)["results"]
    assert [(r["safe_factor"], r["under_peak_at_1"]) for r in rows] == [(1.0, 0)] * 3
