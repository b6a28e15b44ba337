"""``warmfit check --update`` on a file with more than one name, or another user's.

Issue 42: on a hard link the update replaced this name's file alone (the other
name kept the old expectations), and run as root on another user's file it made
root the owner. Now a file with several names is refused (exit 2, one line,
both names as they were), and the owner and group are kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_signals import REPO, TRACES, base  # noqa: F401  (the fixture, shared)


def update(expect: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmfit", "check", *TRACES, "-e", str(expect), "--update",
         "--allow-under"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_hard_linked_expectations_file_is_refused_and_left_as_it_was(
    base: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    expect, other = tmp_path / "e.toml", tmp_path / "other.toml"
    shutil.copy(base, expect)
    os.link(expect, other)
    before = expect.read_bytes()
    done = update(expect)
    assert done.returncode == 2, done.stderr
    assert "has 2 names (hard links)" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert expect.read_bytes() == other.read_bytes() == before
    assert os.path.samefile(expect, other)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the file to another user: needs root")
def test_root_updating_another_users_file_keeps_its_owner(
    base: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    expect = tmp_path / "e.toml"
    shutil.copy(base, expect)
    os.chown(expect, 12345, 23456)
    done = update(expect)
    assert done.returncode == 0, done.stderr
    assert "added run 'cpu-demo'" in done.stderr
    status = expect.stat()
    assert (status.st_uid, status.st_gid) == (12345, 23456)


def test_an_update_by_signature_says_each_signatures_figures(tmp_path: Path) -> None:
    """cpu-demo's two signatures added, each line with its own figures (the training
    signature's warm-fit median +70% with a wave under its peak, the scoring one's +10%)."""
    from tests.command_line import warmfit_cli

    expect = tmp_path / "e.toml"
    pr991, demo = TRACES
    args = ["--allow-under", "--by", "signature"]
    assert warmfit_cli("check", pr991, "--write-expect", expect, *args).exit_code == 0
    result = warmfit_cli("check", pr991, demo, "-e", expect, "--update", *args)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[:2] == [
        f"added run 'cpu-demo' signature 'score/d64-l2-v64' to {expect}: max-merge median "
        "+10%, 0 waves under their peak; warm-fit median +10%, 0 waves under their peak; "
        "envelope median +10%, 0 waves under their peak",
        f"added run 'cpu-demo' signature 'train/d64-l2-v64' to {expect}: max-merge median "
        "+70%, 1 wave under its peak; warm-fit median +70%, 1 wave under its peak; envelope "
        "median +10%, 0 waves under their peak",
    ]


def test_an_update_narrowed_by_p_checks_that_policy_alone(tmp_path: Path) -> None:
    """-p warm-fit: the new run is added for warm-fit alone, and the check after the
    update reads the file again but checks warm-fit's figures alone."""
    from tests.command_line import warmfit_cli

    expect = tmp_path / "e.toml"
    pr991, demo = TRACES
    assert warmfit_cli("check", pr991, "--write-expect", expect, "--allow-under").exit_code == 0
    result = warmfit_cli(
        "check", pr991, demo, "-e", expect, "--update", "--allow-under", "-p", "warm-fit"
    )
    assert result.exit_code == 0, result.output
    assert "cpu-demo" in result.stdout and "warm-fit" in result.stdout
    assert "max-merge" not in result.stdout and "envelope" not in result.stdout
    written = expect.read_text()
    assert "[runs.cpu-demo.warm-fit]" in written and "[runs.cpu-demo.max-merge]" not in written


def test_force_without_write_expect_is_refused(tmp_path: Path) -> None:
    from tests.command_line import warmfit_output

    code, output = warmfit_output("check", TRACES[0], "-e", tmp_path / "e.toml", "--force")
    assert (code, output) == (2, (
        "warmfit: error: --force overwrites the --write-expect file; give --write-expect "
        "FILE, or drop --force.\n"
    ))  # fmt: skip
