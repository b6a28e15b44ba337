"""Record a Lightning training run: ``Trainer(callbacks=[WarmfitCallback()])``.

Each training batch is one wave (SPEC §1):

- ``on_train_batch_start`` opens it: the signature from ``signature(module,
  batch)`` (default ``train/<LightningModule class>``), the token counts from
  ``tokens(batch)`` (default :func:`warmfit.integrations.tokens.default_token_counts`:
  non-padding tokens, packed = logical; ``tokens=padded_token_counts`` counts
  padding too); with either of these two, the wave also records the batch's
  tokens padding included and its sum of squared sequence lengths (the trace
  columns ``padded_tokens`` and ``sum_sq_tokens``);
- ``on_before_backward`` takes the ``forward`` reading (training_step and its
  loss have run, backward has not);
- ``on_after_backward`` takes the ``caller`` reading with automatic
  optimization; with manual optimization the wave runs to
  ``on_train_batch_end`` and so covers every backward and optimizer step of
  the batch;
- an optimizer step (``on_before_optimizer_step``) marks a recorder step at
  the end of its batch, so with ``accumulate_grad_batches=k`` one step holds
  k waves;
- an exception while a wave is open records the phase it interrupted
  (``oom`` for an out-of-memory error).

The recorder is ``Recorder.from_env(device=<the strategy's root device>)``,
created at ``on_train_start``, unless one is given: it records under
``warmfit record`` and costs nothing otherwise. Needs the extra
``lightning`` (the ``lightning`` package; ``pytorch_lightning`` trainers
need a callback of their own package).
See ``docs/how-to/integrations.md`` for what it cannot see.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError as exc:  # pragma: no cover - exercised by the core install
    raise ImportError(
        "warmfit.integrations.lightning needs Lightning: install the extra "
        "'warmfit[lightning]' (pin a CPU torch first on a CPU-only machine; see the README)."
    ) from exc

from warmfit.integrations._common import OutputBytesFn, SignatureFn, TokensFn, WaveSpec
from warmfit.recorder import Recorder


class WarmfitCallback(Callback):
    """A Lightning callback that records each training batch as a wave."""

    def __init__(
        self,
        recorder: Recorder | None = None,
        *,
        signature: str | SignatureFn | None = None,
        tokens: TokensFn | None = None,
        output_bytes: OutputBytesFn | None = None,
    ) -> None:
        super().__init__()
        self.recorder = recorder
        self._spec = WaveSpec(signature, tokens, output_bytes)
        self._wave: Any = None
        self._forward_taken = False
        self._stepped = False

    # ------------------------------------------------------------------ life cycle

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.recorder is None:  # now, not in setup(): the strategy has placed the module
            self.recorder = Recorder.from_env(device=trainer.strategy.root_device)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_wave()
        if self.recorder is not None:
            self.recorder.flush()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close_wave(exception)

    # ------------------------------------------------------------------ waves

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self._close_wave()  # one left open by a batch that ended without our hooks
        recorder = self.recorder
        if recorder is None or not recorder.enabled:
            return
        wave = self._spec.wave(recorder, pl_module, batch)
        if wave is None:
            return
        wave.__enter__()
        self._wave = wave
        self._forward_taken = False

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._wave is not None and not self._forward_taken:
            self._forward_taken = True
            self._wave.forward_done()

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if pl_module.automatic_optimization:
            self._close_wave()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._stepped = True

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._close_wave()
        if self._stepped and self.recorder is not None:
            self._stepped = False
            self.recorder.step()

    def _close_wave(self, exception: BaseException | None = None) -> None:
        wave, self._wave = self._wave, None
        if wave is None:
            return
        if exception is None:
            wave.__exit__(None, None, None)
        else:
            wave.__exit__(type(exception), exception, exception.__traceback__)


__all__ = ["WarmfitCallback"]
