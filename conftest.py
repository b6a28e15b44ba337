"""Doctest collection over warmfit/: skip the modules that need torch when it is absent."""

from __future__ import annotations

import importlib.util

collect_ignore = (
    []
    if importlib.util.find_spec("torch") is not None
    else ["warmfit/demo.py", "warmfit/recorder/meters.py"]
)
