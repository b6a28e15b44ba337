"""The ``--per-wave`` file: one row per wave and policy, as Parquet or CSV by its suffix.

Rows arrive batch by batch (:func:`warmfit.replay.stream.replay_stream`) and
are appended to one open sink, so the file is never held in memory whole; the
command writes the sink through :func:`warmfit.files.write_atomically`, so a
failed replay leaves no partial file. Parquet files carry the key-value
metadata ``warmfit.per_wave = "1"`` (and page checksums), which tells a
reader it is a replay's output, not a trace.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import BinaryIO

import polars as pl

from warmfit.errors import UsageError
from warmfit.replay.semantics import PER_WAVE_SCHEMA
from warmfit.schema import PER_WAVE_KEY

#: Suffixes ``--per-wave`` understands, and the format each names.
PER_WAVE_FORMATS = {".parquet": "parquet", ".csv": "csv"}


def per_wave_format(path: Path) -> str:
    """The format the suffix of ``path`` names; exit 2 for any other suffix."""
    fmt = PER_WAVE_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"--per-wave {path}: the suffix {path.suffix or '(none)'!r} names no format "
            "warmfit writes; end the name in .parquet or .csv."
        )
    return fmt


class PerWaveWriter:
    """Append per-wave frames to an open binary sink in one format."""

    def __init__(self, sink: BinaryIO, fmt: str, admitted: bool = False) -> None:
        self.sink = sink
        self.fmt = fmt
        self._empty = pl.DataFrame(
            schema={**PER_WAVE_SCHEMA, **({"admitted": pl.Boolean()} if admitted else {})}
        )
        self._schema = self._empty.to_arrow().schema.with_metadata({PER_WAVE_KEY: "1"})
        self._parquet: object = None
        self._started = False

    def write(self, frame: pl.DataFrame) -> None:
        """Append rows (:data:`~warmfit.replay.semantics.PER_WAVE_SCHEMA`)."""
        if self.fmt == "csv":
            frame.write_csv(self.sink, include_header=not self._started)
            self._started = True
            return
        import pyarrow.parquet as pq

        if self._parquet is None:
            self._parquet = pq.ParquetWriter(
                self.sink, self._schema, compression="zstd", write_page_checksum=True
            )
        table = frame.to_arrow().cast(self._schema)
        self._parquet.write_table(table)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Finish the file (a file of no rows still has the header or schema)."""
        if not self._started and self.fmt == "csv":
            self._empty.write_csv(self.sink)
            self._started = True
        if self.fmt == "parquet":
            if self._parquet is None:
                self.write(self._empty)
            self._parquet.close()  # type: ignore[attr-defined]

    def abandon(self) -> None:
        """Let go of a file that will not be finished (the replay failed): the Parquet
        writer is closed now, while its sink is open, and any error of it dropped."""
        if self._parquet is not None:
            with contextlib.suppress(Exception):
                self._parquet.close()  # type: ignore[attr-defined]
            self._parquet = None
