"""Record the trainers people already use: Lightning and the Hugging Face Trainer.

- :mod:`warmfit.integrations.lightning`: ``WarmfitCallback``, a Lightning
  ``Callback`` (extra ``lightning``);
- :mod:`warmfit.integrations.huggingface`: ``record_trainer(trainer)`` for the
  Hugging Face ``Trainer`` and the trainers built on it, such as TRL's (extra
  ``transformers``);
- :mod:`warmfit.integrations.tokens`: the token counts both take from a batch
  by default (padding excluded; packed sequences read from ``position_ids``);
- :mod:`warmfit.integrations.sampler`: ``BudgetSampler``, a batch sampler that
  packs samples into waves whose ``warmfit.Pricer`` price fits a memory
  budget, and ``use_sampler(trainer, sampler)`` for the Hugging Face
  ``Trainer`` (extra ``torch``).

Each turns one micro-batch into one wave. What each can and cannot see is in
``docs/how-to/integrations.md``. Importing this package imports neither framework,
nor torch.
"""
