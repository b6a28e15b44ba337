"""The ``--per-wave`` file: one row per wave and policy, as Parquet or CSV by its suffix.

Rows arrive batch by batch (:func:`warmfit.replay.stream.replay_stream`) and
are appended to one open sink, so the file is never held in memory whole; the
command writes the sink through :func:`warmfit.format.files.write_atomically`, so a
failed replay leaves no partial file. Parquet files carry the key-value
metadata ``warmfit.per_wave = "1"`` (and page checksums), which tells a
reader it is a replay's output, not a trace.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from warmfit.errors import UsageError
from warmfit.format.parquetjoin import JoinedParquet
from warmfit.format.schema import PER_WAVE_KEY
from warmfit.replay.semantics import PER_WAVE_SCHEMA

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


@dataclass(frozen=True)
class PartEncoder:
    """How a batch's per-wave rows are encoded where they are made (in a worker):
    the format, and whether the rows carry ``admitted`` (``--budget``)."""

    fmt: str
    admitted: bool = False

    def empty(self) -> pl.DataFrame:
        """No rows, with the file's columns."""
        extra = {"admitted": pl.Boolean()} if self.admitted else {}
        return pl.DataFrame(schema={**PER_WAVE_SCHEMA, **extra})

    def encode(self, frame: pl.DataFrame) -> bytes:
        """A part of the file: CSV rows without the header, or a whole Parquet file
        (zstd, page checksums, dictionaries for the string columns only: the
        integer columns' values are nearly all distinct, and their dictionaries
        were a third slower to write and made the file 65 % larger)."""
        buffer = io.BytesIO()
        if self.fmt == "csv":
            frame.write_csv(buffer, include_header=False)
            return buffer.getvalue()
        import pyarrow.parquet as pq

        schema, strings = self._parquet_schema
        pq.write_table(
            frame.to_arrow().cast(schema),
            buffer,
            compression="zstd",
            write_page_checksum=True,
            use_dictionary=strings,
            write_page_index=False,  # its page offsets would not survive the join
        )
        return buffer.getvalue()

    @cached_property
    def _parquet_schema(self) -> tuple[Any, list[str]]:
        """The Parquet file's Arrow schema (marked as per-wave) and its string
        columns: the same for every part, found once."""
        schema = self.empty().to_arrow().schema.with_metadata({PER_WAVE_KEY: "1"})
        return schema, [field.name for field in schema if field.type in ("string", "large_string")]


class PerWaveWriter:
    """Append per-wave rows to an open binary sink in one format, as frames
    (:meth:`write`) or as parts a worker encoded with :attr:`encoder` (:meth:`append`)."""

    def __init__(self, sink: BinaryIO, fmt: str, admitted: bool = False) -> None:
        self.sink = sink
        self.fmt = fmt
        self.encoder = PartEncoder(fmt, admitted)
        self._parquet = JoinedParquet(sink) if fmt == "parquet" else None
        self._started = False

    def write(self, frame: pl.DataFrame) -> None:
        """Append rows (:data:`~warmfit.replay.semantics.PER_WAVE_SCHEMA`)."""
        self.append(self.encoder.encode(frame))

    def append(self, part: bytes) -> None:
        """Append a part (:meth:`PartEncoder.encode` of this writer's :attr:`encoder`)."""
        if self._parquet is not None:
            self._parquet.append(part)
        else:
            if not self._started:
                self.sink.write(self._header())
            self.sink.write(part)
        self._started = True

    def close(self) -> None:
        """Finish the file (a file of no rows still has the header or schema)."""
        if not self._started:
            self.write(self.encoder.empty())
        if self._parquet is not None:
            self._parquet.close()

    def _header(self) -> bytes:
        buffer = io.BytesIO()
        self.encoder.empty().write_csv(buffer)
        return buffer.getvalue()
