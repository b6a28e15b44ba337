"""What both integrations share: how a batch becomes a wave's signature and counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from warmfit.errors import UsageError
from warmfit.integrations.tokens import default_token_counts

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

    def arguments(self, module: Any, batch: Any) -> tuple[str, int, int, int] | None:
        """``(signature, packed_tokens, logical_tokens, output_bytes)`` of a batch.

        ``None`` for a batch without a real token (all padding): it runs
        unrecorded, since a wave needs ``packed_tokens > 0``.
        """
        packed, logical = self.tokens(batch)
        if packed == 0:
            return None
        out = self.output_bytes(batch) if self.output_bytes is not None else 0
        return self.signature(module, batch), packed, logical, out
