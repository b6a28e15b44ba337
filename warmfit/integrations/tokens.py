"""The token counts of a training batch, the way the integrations read them by default.

A batch is a mapping such as ``{"input_ids": ..., "attention_mask": ...,
"position_ids": ..., "labels": ...}`` (what Hugging Face collators give), a
tensor of token ids, or a tuple or list whose first item is one.

- **packed tokens** are the tokens the model runs that are not padding: the
  non-zero entries of ``attention_mask`` when the batch has a 2-d one of the
  ids' shape, else every token of ``input_ids`` (or of ``inputs_embeds``' first
  two dims).
- **logical tokens** equal the packed tokens: a plain batch shares no prefix.
  A trainer that does share prefixes passes its own function.
- **sequences** are the rows with at least one real token; when the batch has
  ``position_ids`` (padding-free packing, as ``DataCollatorWithFlattening``
  gives) of shape ``[rows, tokens]``, or ``[tokens]`` or ``[1, tokens]`` for
  every row, every real token whose position id is 0 starts a new sequence,
  and so does the first real token of each row (position ids of another
  shape, such as a multimodal model's 3-d ones, are not read).
- **padded tokens** are every token of the batch's tensor, padding included
  (rows times width), what a padded batch's memory follows;
  :func:`padded_token_counts` counts them as the packed tokens.
- **the sum of squared sequence lengths** (``sum_sq_tokens``), in real tokens:
  attention without a fused kernel grows with it, so two batches of equal
  tokens (8 sequences of 32, 4 of 64) can differ in memory.

>>> import torch
>>> batch_tokens({"input_ids": torch.ones(2, 4, dtype=torch.long),
...               "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])})
BatchTokens(packed_tokens=6, logical_tokens=6, sequences=2, longest_sequence=4, \
padded_tokens=8, sum_sq_tokens=20)
>>> batch_tokens({"input_ids": torch.ones(1, 7, dtype=torch.long),
...               "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1]])})
BatchTokens(packed_tokens=7, logical_tokens=7, sequences=3, longest_sequence=3, \
padded_tokens=7, sum_sq_tokens=17)

This module imports torch only when it counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from warmfit.errors import UsageError


@dataclass(frozen=True)
class BatchTokens:
    """What a batch holds, in tokens (see the module docstring)."""

    packed_tokens: int
    logical_tokens: int
    sequences: int
    longest_sequence: int
    #: Every token of the batch's tensor, padding included (rows times width).
    padded_tokens: int = 0
    #: The sum over its sequences of their length squared, in real tokens.
    sum_sq_tokens: int = 0


def _first_tensor(batch: Any) -> tuple[Any, Any, Any]:
    """(token tensor [rows, tokens], attention mask or None, position ids or None)."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch, None, None
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids")
        if ids is None and batch.get("inputs_embeds") is not None:
            ids = batch["inputs_embeds"][..., 0]  # [rows, tokens, width] -> [rows, tokens]
        if ids is None:
            raise UsageError(
                "cannot count the tokens of a batch without 'input_ids' or 'inputs_embeds' "
                f"(its keys: {', '.join(map(str, batch)) or 'none'}); pass a token function "
                "that returns (packed_tokens, logical_tokens)."
            )
        return ids, batch.get("attention_mask"), batch.get("position_ids")
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0], None, None
    raise UsageError(
        f"cannot count the tokens of a batch of type {type(batch).__name__}; the default "
        "reads a tensor, a tuple whose first item is a tensor, or a mapping with 'input_ids'. "
        "Pass a token function that returns (packed_tokens, logical_tokens)."
    )


def batch_tokens(batch: Any) -> BatchTokens:
    """Count a batch's real tokens and sequences (see the module docstring)."""
    import torch

    ids, mask, positions = _first_tensor(batch)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2:
        raise UsageError(
            f"cannot count the tokens of input_ids with shape {tuple(ids.shape)}; the default "
            "reads [rows, tokens]. Pass a token function."
        )
    real = torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
    if mask is not None and mask.dim() == ids.dim() and mask.shape == ids.shape:
        real = mask != 0  # a 4-d (custom) mask says nothing about padding: ignored
    lengths: list[int] = []
    rows, width = ids.shape
    if (
        positions is not None
        and positions.dim() in (1, 2)
        and positions.shape[-1] == width
        and positions.numel() in (width, rows * width)
    ):  # [tokens], [1, tokens] (both for every row) or [rows, tokens]; other shapes (3-d
        # multimodal rope ids) say nothing of where sequences start: ignored
        positions = positions.expand(rows, width)
        for row_real, row_pos in zip(real.cpu(), positions.cpu(), strict=True):
            kept = row_pos[row_real]
            if kept.numel() == 0:
                continue
            starts = (kept == 0).nonzero().flatten().tolist()
            if not starts or starts[0] != 0:
                starts = [0, *starts]
            bounds = [*starts, kept.numel()]
            lengths += [b - a for a, b in pairwise(bounds) if b > a]
    else:
        lengths = [n for n in real.sum(dim=-1).tolist() if n > 0]
    packed = int(sum(lengths))
    return BatchTokens(
        packed, packed, len(lengths), max(lengths, default=0),
        padded_tokens=int(ids.numel()), sum_sq_tokens=int(sum(n * n for n in lengths)),
    )  # fmt: skip


def default_token_counts(batch: Any) -> tuple[int, int]:
    """``(packed_tokens, logical_tokens)`` of a batch: padding excluded, no prefix sharing."""
    counted = batch_tokens(batch)
    return counted.packed_tokens, counted.logical_tokens


def padded_token_counts(batch: Any) -> tuple[int, int]:
    """``(packed_tokens, logical_tokens)`` of a batch, padding included: every token of
    its tensor (rows times width), what a padded batch's memory follows. Pass it as the
    integrations' ``tokens=`` when a collator pads (``WarmfitCallback(tokens=...)``,
    ``record_trainer(trainer, tokens=...)``).

    >>> import torch
    >>> padded_token_counts({"input_ids": torch.ones(2, 5, dtype=torch.long),
    ...                      "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1] * 5])})
    (10, 10)
    """
    counted = batch_tokens(batch)
    return counted.padded_tokens, counted.padded_tokens
