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
