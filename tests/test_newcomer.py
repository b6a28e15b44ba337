"""What the second newcomer pass (a fresh clone, an own script, the README only) tripped on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.errors import PolicyError
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies.rule import RATE, DeclaredPolicy, Max
from warmfit.replay import replay


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("_TYPER_FORCE_DISABLE_TERMINAL", "1")
    return CliRunner()


def test_check_says_which_expectations_a_narrowing_p_leaves_unchecked(
    runner: CliRunner, tmp_path: Path
) -> None:
    """Following the advice to name an own policy with -p must not shrink the gate silently."""
    expect = tmp_path / "exp.toml"
    wrote = runner.invoke(app, ["check", "traces/pr991", "--write-expect", str(expect)])
    assert wrote.exit_code == 0, wrote.output
    done = runner.invoke(app, ["check", "traces/pr991", "--expect", str(expect), "-p", "warm-fit"])
    assert done.exit_code == 0, done.output
    assert "max-merge" in done.stderr and "not checked" in done.stderr
    every = runner.invoke(
        app,
        [
            "check",
            "traces/pr991",
            "--expect",
            str(expect),
            *("-p", "warm-fit", "-p", "max-merge"),
            *("-p", "envelope"),
        ],
    )
    assert "not checked" not in every.stderr


def test_two_recordings_of_one_run_label_are_told_apart_from_a_bad_numbering(
    tmp_path: Path,
) -> None:
    row = dict(seq=0, wave=0, signature="s", packed_tokens=4, logical_tokens=4, peak_bytes=9)
    write_trace(readings_frame([row]), tmp_path / "a" / "run=mine" / "rank=0" / "r.parquet")
    write_trace(readings_frame([row]), tmp_path / "b" / "run=mine" / "rank=0" / "r.parquet")
    with pytest.raises(Exception, match="record one again with --run NAME"):
        read_trace([tmp_path / "a", tmp_path / "b"])


def test_a_default_run_label_that_cannot_be_a_folder_points_at_run(
    runner: CliRunner, tmp_path: Path
) -> None:
    done = runner.invoke(app, ["record", "-o", str(tmp_path / "run 1"), "--", "true"])
    assert done.exit_code == 2
    assert "-o folder's name" in done.stderr and "--run" in done.stderr
    assert not (tmp_path / "run 1").exists()


class Typo(DeclaredPolicy):
    """Broken on purpose: the rule reads a field the state does not have."""

    name = "typo"
    summary = "broken on purpose"
    rate = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rat * n


def test_a_typo_in_a_rule_is_not_blamed_on_arrays() -> None:
    from warmfit.testing.checks import random_trace, read_trace_frame

    trace = read_trace_frame(random_trace(1))
    with pytest.raises(PolicyError, match="'typo': its rule failed") as caught:
        replay(trace, [Typo], engine="vectorized")
    assert "np.maximum" not in str(caught.value) and "rat" in str(caught.value)


def test_a_where_that_is_not_a_condition_is_named() -> None:
    with pytest.raises(PolicyError, match=r"Max\(\.\.\., where=3\)"):
        Max(RATE + 1, where=3)  # type: ignore[arg-type]


def test_recover_of_a_file_says_it_is_a_file(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "pw.csv"
    path.write_text("run\n")
    done = runner.invoke(app, ["recover", str(path)])
    assert done.exit_code == 2
    assert "is a file, not a directory" in done.stderr


def test_a_misspelt_policy_gets_a_suggestion() -> None:
    from warmfit.policies import get_policy

    with pytest.raises(PolicyError, match=r"\(did you mean 'warm-fit'\?\); registered"):
        get_policy("warmfit")
    with pytest.raises(PolicyError, match="not its file: mypol:MeanWhole"):
        get_policy("mypol.py:MeanWhole")


def test_a_budget_tables_counts_add_up(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """admitted + refused = waves in every row; fits (refused although they fit) is
    among the refused; the columns shown are the ones the caption defines."""
    monkeypatch.setenv("COLUMNS", "200")
    done = runner.invoke(
        app,
        ["replay", "traces/art-h200", "-p", "max-merge", "-p", "warm-affine", "--budget", "60GB"],
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
    markdown = runner.invoke(app, ["replay", "traces/pr991", "--budget", "100GB", "-f", "markdown"])
    assert "budget's counts are in --format table, csv and json" in markdown.stdout
