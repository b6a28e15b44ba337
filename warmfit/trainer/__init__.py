"""The chosen policy inside the trainer: price each wave before it runs, learn as it runs.

- :mod:`warmfit.trainer.pricer`: :class:`~warmfit.trainer.pricer.Pricer`, one
  trainer rank's profiles under one policy and safety factor; it prices a
  wave as replay would price it now, learns from each reading the recorder
  takes (or takes its own, :meth:`~warmfit.trainer.pricer.Pricer.wave`), says
  whether a wave fits a memory budget and the largest that does
  (:meth:`~warmfit.trainer.pricer.Pricer.max_tokens`), and survives and learns
  from an out-of-memory wave. Also ``warmfit.Pricer``.
- :mod:`warmfit.trainer.budget`: a budget as bytes or ``"70GiB"``, and
  :func:`~warmfit.trainer.budget.device_budget`, the device's own.

The sampler that packs waves under a budget with it lives with the other
torch integrations: :mod:`warmfit.integrations.sampler`. Nothing here imports
torch.
"""

from warmfit.trainer.budget import budget_bytes, device_budget
from warmfit.trainer.pricer import OomWave, Pricer, PricerWarning, PricerWave

__all__ = ["OomWave", "Pricer", "PricerWarning", "PricerWave", "budget_bytes", "device_budget"]
