"""Record a Hugging Face ``Trainer`` (and TRL's trainers): ``record_trainer(trainer)``.

A ``TrainerCallback`` alone cannot record a wave: the Trainer calls no hook
between a micro-batch's forward and its backward, nor around one micro-batch
of gradient accumulation (``on_step_begin`` fires once per optimizer step).
So :func:`record_trainer` wraps two methods of the one trainer instance it is
given, whatever class defined them (a TRL trainer's own ``compute_loss``
included), and adds a callback for the steps:

- ``training_step`` (one per micro-batch) becomes one wave: the signature
  from ``signature(model, inputs)`` (default ``train/<model class>``), the
  counts from ``tokens(inputs)`` (default
  :func:`warmfit.integrations.tokens.default_token_counts`: non-padding
  tokens; packed sequences in ``position_ids`` understood;
  ``tokens=padded_token_counts`` counts padding too), counted on the batch as
  the data loader gave it; with either of these two, each wave also records
  the batch's tokens padding included and its sum of squared sequence lengths
  (the trace columns ``padded_tokens`` and ``sum_sq_tokens``);
- the first ``compute_loss`` to return inside it takes the ``forward``
  reading (the model's forward and its loss have run, backward has not);
- leaving ``training_step`` (after ``accelerator.backward``) takes the
  ``caller`` reading;
- ``on_optimizer_step`` marks a recorder step, so with
  ``gradient_accumulation_steps=k`` one step holds k waves; ``on_train_end``
  flushes the log.

The recorder is ``Recorder.from_env(device=trainer.args.device)`` unless one
is given: it records under ``warmfit record``, and when it is disabled the
trainer is left untouched. Needs the extra ``transformers``. See
``docs/how-to/integrations.md`` for what it cannot see.
"""

from __future__ import annotations

from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised by the core install
    raise ImportError(
        "warmfit.integrations.huggingface needs transformers: install the extra "
        "'warmfit[transformers]' (pin a CPU torch first on a CPU-only machine; see the README)."
    ) from exc

from warmfit.errors import UsageError
from warmfit.integrations._common import OutputBytesFn, SignatureFn, TokensFn, WaveSpec
from warmfit.recorder import Recorder

_MARK = "_warmfit_recording"


class WarmfitStepCallback(TrainerCallback):
    """Marks a recorder step at each optimizer step; flushes at the end of training."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.flush()


class _Recording:
    """The wave open inside the trainer's current ``training_step``, if any, and what
    opens each wave: the recorder (:func:`record_trainer`), or the sampler's pricer
    (:func:`warmfit.integrations.sampler.use_sampler`), which takes its own readings
    or the recorder's and survives an out-of-memory wave."""

    def __init__(self, recorder: Recorder | None, spec: WaveSpec | None) -> None:
        self.recorder = recorder
        self.spec = spec
        self.sampler: Any = None
        self.wave: Any = None
        self.forward_taken = False

    def open(self, model: Any, inputs: Any) -> Any:
        """The wave of one ``training_step``, not entered yet (None: not measured)."""
        sampler = self.sampler
        if sampler is None:
            assert self.recorder is not None and self.spec is not None
            return self.spec.wave(self.recorder, model, inputs)
        padded = sum_sq = None
        if self.spec is not None and sampler.waves:  # the batch's shape, when counts agree
            packed, _, p, q = self.spec.counts(inputs)
            if packed == sampler.waves[-1].packed_tokens:
                padded, sum_sq = p, q
        return sampler.wave(padded_tokens=padded, sum_sq_tokens=sum_sq)


def _instrument(trainer: Any, recording: _Recording) -> None:
    """Wrap ``trainer``'s ``training_step`` (one wave each) and ``compute_loss`` (the
    forward reading); a wave that ran out of memory in a pricer's wave is survived:
    its gradients are dropped and the step's loss is 0."""
    setattr(trainer, _MARK, recording)
    inner_step = trainer.training_step
    inner_loss = trainer.compute_loss

    def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if recording.wave is not None:  # re-entered: record the outer call only
            return inner_step(model, inputs, *args, **kwargs)
        opened = recording.open(trainer.model, inputs)
        if opened is None:  # no real token: nothing to price
            return inner_step(model, inputs, *args, **kwargs)
        result = None
        with opened as wave:
            recording.wave, recording.forward_taken = wave, False
            try:
                result = inner_step(model, inputs, *args, **kwargs)
            finally:
                recording.wave = None
        if getattr(wave, "oom", False):  # survived: drop what its backward left
            import torch

            model.zero_grad(set_to_none=True)
            return torch.zeros((), device=trainer.args.device)
        return result

    def compute_loss(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        result = inner_loss(model, inputs, *args, **kwargs)
        if recording.wave is not None and not recording.forward_taken:
            recording.forward_taken = True
            recording.wave.forward_done()
        return result

    trainer.training_step = training_step
    trainer.compute_loss = compute_loss


def record_trainer(
    trainer: Any,
    recorder: Recorder | None = None,
    *,
    signature: str | SignatureFn | None = None,
    tokens: TokensFn | None = None,
    output_bytes: OutputBytesFn | None = None,
) -> Recorder:
    """Record every training micro-batch of ``trainer`` as a wave; return the recorder.

    Call it once, before ``trainer.train()``. ``signature``, ``tokens`` and
    ``output_bytes`` are described in the module docstring. With
    :func:`~warmfit.integrations.sampler.use_sampler` (before or after), give the
    recorder the sampler's pricer (``Recorder(pricer=sampler.pricer)``): the
    sampler's waves are then recorded, priced as they were packed.
    """
    existing = getattr(trainer, _MARK, None)
    rec = recorder if recorder is not None else Recorder.from_env(device=trainer.args.device)
    if existing is not None and existing.recorder is None:  # use_sampler came first
        if not rec.enabled:
            return rec
        if rec.pricer is not existing.sampler.pricer:
            raise UsageError(
                "record_trainer(): the trainer packs its waves with a BudgetSampler "
                "(use_sampler): record it with that sampler's pricer, "
                "Recorder(..., pricer=sampler.pricer), so that its waves are recorded "
                "priced as they were packed."
            )
        existing.recorder, existing.spec = rec, WaveSpec(signature, tokens, output_bytes)
        trainer.add_callback(WarmfitStepCallback(rec))
        return rec
    if existing is not None:
        raise UsageError("record_trainer(): this trainer is already recorded; call it once.")
    if not rec.enabled:
        return rec
    _instrument(trainer, _Recording(rec, WaveSpec(signature, tokens, output_bytes)))
    trainer.add_callback(WarmfitStepCallback(rec))
    return rec


def measure_with_sampler(trainer: Any, sampler: Any) -> None:
    """Open each ``training_step`` of ``trainer`` as ``sampler.wave()`` (what
    :func:`~warmfit.integrations.sampler.use_sampler` calls): the sampler's pricer
    takes each wave's readings (the recorder's, when the trainer is recorded with it)
    and survives an out-of-memory wave."""
    recording = getattr(trainer, _MARK, None)
    if recording is None:
        recording = _Recording(None, None)
        recording.sampler = sampler
        _instrument(trainer, recording)
        return
    if recording.recorder is not None and recording.recorder.pricer is not sampler.pricer:
        raise UsageError(
            "use_sampler(): the trainer is recorded with another pricer (or none): give the "
            "recorder the sampler's pricer, Recorder(..., pricer=sampler.pricer), so that "
            "its waves are recorded priced as they were packed."
        )
    recording.sampler = sampler


__all__ = ["WarmfitStepCallback", "measure_with_sampler", "record_trainer"]
