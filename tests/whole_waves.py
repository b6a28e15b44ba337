"""Traces of whole waves, written in a line.

A reading from :func:`whole_wave` is, unless told otherwise, the whole caller
reading of flat wave ``wave`` (seq = wave) with a zero baseline: its delta is its
peak, so a test's numbers can be checked by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from warmfit.format.trace import readings_frame, write_trace


def whole_wave(wave: int, peak: int, tokens: int = 100, **extra: object) -> dict[str, object]:
    """One reading: by default the whole caller reading of flat wave ``wave`` (seq = wave)."""
    row: dict[str, object] = dict(
        seq=wave, wave=wave, signature="s", packed_tokens=tokens, logical_tokens=tokens,
        peak_bytes=peak, whole=True,
    )  # fmt: skip
    return row | extra


def write_waves(folder: Path, rows: list[dict[str, object]], name: str = "t.parquet") -> Path:
    """``rows`` written as a one-file trace in ``folder``; the folder."""
    write_trace(readings_frame(rows), folder / name)
    return folder


def policy_column(frame: pl.DataFrame, policy: str, name: str) -> list[Any]:
    """Column ``name`` of ``policy``'s rows of a per-wave frame."""
    return frame.filter(pl.col("policy") == policy).get_column(name).to_list()
