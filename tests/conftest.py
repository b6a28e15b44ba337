from __future__ import annotations

import os

# Typer's rich output must not carry colour codes when CI forces a terminal.
os.environ["_TYPER_FORCE_DISABLE_TERMINAL"] = "1"
os.environ.setdefault("NO_COLOR", "1")
