"""Every relative link of the README and docs/ leads somewhere: to a file of the
repository and, where it names one, to a heading of that file (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "traces").glob("*/README.md")]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.

    >>> anchor("## 4. Record your own trainer"), anchor("## `warmfit replay`")
    ('4-record-your-own-trainer', 'warmfit-replay')
    """
    text = heading.lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(line) for line in text.splitlines() if line.startswith("#")}


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [
        target
        for target in LINK.findall(text)
        if not re.match(r"^[a-z]+:", target)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading '#{fragment}' in {file.name}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# Title\n[a](p.md#title) [b](p.md#nope) [c](gone.md) [d](https://x.y)\n")
    assert links(page) == ["p.md#title", "p.md#nope", "gone.md"]
    assert anchors(page) == {"title"}
