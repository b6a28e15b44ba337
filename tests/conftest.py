from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from tests.command_line import Invoke

# Typer's rich output must not carry colour codes when CI forces a terminal.
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ.setdefault("NO_COLOR", "1")

# Hypothesis profiles, chosen on purpose. Property tests do real work (they write
# Parquet, start processes), so no example has a deadline, and "too slow" is no
# health failure on a loaded machine; every other health check stays on.
# ``dev`` (the default, ``make test-fast``) keeps each test's own budget;
# ``ci`` (``make test``: ``--hypothesis-profile=ci``) draws twice as many examples
# wherever a test sizes its budget with ``tests.strategies.examples`` (three times
# took make test past 10 minutes on a loaded 2-core machine).
settings.register_profile(
    "dev", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("ci", settings.get_profile("dev"), max_examples=200)
settings.load_profile("dev")


def torch_script(folder: Path, source: str) -> Path:
    """``source`` as ``folder/trainer.py``, for a test that runs a torch trainer (the
    test is skipped where torch is not installed)."""
    pytest.importorskip("torch")
    path = folder / "trainer.py"
    path.write_text(source)
    return path


@pytest.fixture
def invoke() -> Invoke:
    """``invoke("check", trace, "--expect", path)``: warmfit's command line in-process,
    without a terminal's colours; (exit code, stdout, stderr). Arguments may be paths
    or numbers; ``env=`` adds variables (``COLUMNS``)."""
    from tests import command_line

    return command_line.invoke
