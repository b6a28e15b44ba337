"""What both integrations share: how a batch becomes a wave's signature and counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warmfit.errors import UsageError
from warmfit.integrations.tokens import batch_tokens, default_token_counts, padded_token_counts

if TYPE_CHECKING:
    from warmfit.recorder import Recorder
    from warmfit.recorder.recorder import Wave, _NullWave

#: ``signature(module, batch) -> str``: the profile key of a batch's wave.
SignatureFn = Callable[[Any, Any], str]
#: ``tokens(batch) -> (packed_tokens, logical_tokens)``.
TokensFn = Callable[[Any], tuple[int, int]]
#: ``output_bytes(batch) -> int``: bytes the wave returns to its caller.
OutputBytesFn = Callable[[Any], int]


def default_signature(module: Any, batch: Any) -> str:
    """``train/<the module's class name>``: one profile for every batch of one model."""
    return f"train/{type(module).__name__}"


class WaveSpec:
    """Turns a batch into the arguments of ``Recorder.wave``."""

    def __init__(
        self,
        signature: str | SignatureFn | None,
        tokens: TokensFn | None,
        output_bytes: OutputBytesFn | None,
    ) -> None:
        if isinstance(signature, str):
            fixed = signature
            self.signature: SignatureFn = lambda module, batch: fixed
        elif signature is None:
            self.signature = default_signature
        elif callable(signature):
            self.signature = signature
        else:
            raise UsageError(
                f"signature must be a str or a function (module, batch) -> str; "
                f"got {type(signature).__name__}."
            )
        self.tokens: TokensFn = tokens if tokens is not None else default_token_counts
        self.output_bytes = output_bytes

    def counts(self, batch: Any) -> tuple[int, int, int | None, int | None]:
        """``(packed_tokens, logical_tokens, padded_tokens, sum_sq_tokens)`` of a batch.

        The last two come from :func:`~warmfit.integrations.tokens.batch_tokens`,
        counted once with the packed tokens, when ``tokens`` is one of warmfit's
        own (:func:`~warmfit.integrations.tokens.default_token_counts`,
        :func:`~warmfit.integrations.tokens.padded_token_counts`); a function of
        your own gives None for both, since warmfit cannot know what it counts.
        """
        if self.tokens is default_token_counts or self.tokens is padded_token_counts:
            counted = batch_tokens(batch)
            padded, sum_sq = counted.padded_tokens, counted.sum_sq_tokens
            if self.tokens is padded_token_counts:
                return padded, padded, padded, sum_sq or None
            return counted.packed_tokens, counted.logical_tokens, padded, sum_sq or None
        packed, logical = self.tokens(batch)
        return packed, logical, None, None

    def wave(self, recorder: Recorder, module: Any, batch: Any) -> Wave | _NullWave | None:
        """``recorder.wave(...)`` for a batch, not entered yet.

        ``None`` for a batch whose count is 0 (all padding, by default): it runs
        unrecorded, since a wave needs ``packed_tokens > 0``.
        """
        packed, logical, padded, sum_sq = self.counts(batch)
        if packed == 0:
            return None
        out = self.output_bytes(batch) if self.output_bytes is not None else 0
        return recorder.wave(
            self.signature(module, batch), packed, logical, out,
            padded_tokens=padded, sum_sq_tokens=sum_sq,
        )  # fmt: skip
