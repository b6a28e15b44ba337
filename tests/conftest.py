from __future__ import annotations

import os
from pathlib import Path

import pytest

# Typer's rich output must not carry colour codes when CI forces a terminal.
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ.setdefault("NO_COLOR", "1")


def torch_script(folder: Path, source: str) -> Path:
    """``source`` as ``folder/trainer.py``, for a test that runs a torch trainer (the
    test is skipped where torch is not installed)."""
    pytest.importorskip("torch")
    path = folder / "trainer.py"
    path.write_text(source)
    return path
