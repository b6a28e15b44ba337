"""Doctest collection over warmfit/: skip the modules whose optional extras are absent."""

from __future__ import annotations

import importlib.util


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


collect_ignore = []
if _missing("torch"):
    collect_ignore += ["warmfit/samples/demo.py", "warmfit/recorder/meters.py"]
    collect_ignore += ["warmfit/integrations/tokens.py", "warmfit/integrations/sampler.py"]
if _missing("torch") or _missing("lightning"):
    collect_ignore += ["warmfit/integrations/lightning.py"]
if _missing("torch") or _missing("transformers"):
    collect_ignore += ["warmfit/integrations/huggingface.py", "warmfit/integrations/hf_demo.py"]
