"""What a newcomer meets first: the README, one screen that states the recorder's cost,
and ``make test``, which says what it installs before it installs it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_make_test_says_what_it_installs() -> None:
    """Each install step of the venv is announced before it runs (about 4 minutes)."""
    text = (REPO / "Makefile").read_text()
    recipe = text.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0].splitlines()
    for i, line in enumerate(recipe):
        if "pip install" in line or "-m venv" in line:
            assert recipe[i - 1].lstrip().startswith("@echo "), line


# --------------------------------------------------------------------------- 6 and 7. README


def test_the_readme_is_one_screen_and_states_the_recorders_cpu_cost() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 60
    for words in ("make demo", "make test", "warmfit record", "envelope"):
        assert words in text
    record = text.split("## Record", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"about \d+ µs per torch operator", record), record
