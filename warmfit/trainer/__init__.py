"""The chosen policy inside the trainer: price each wave before it runs, learn as it runs.

- :mod:`warmfit.trainer.pricer`: :class:`~warmfit.trainer.pricer.Pricer`, one
  trainer rank's profiles under one policy and safety factor; it prices a
  wave as replay would price it now, learns from each reading the recorder
  takes, and says whether a wave fits a memory budget. Also ``warmfit.Pricer``.

The sampler that packs waves under a budget with it lives with the other
torch integrations: :mod:`warmfit.integrations.sampler`. Nothing here imports
torch.
"""

from warmfit.trainer.pricer import Pricer

__all__ = ["Pricer"]
