"""Trace format v1: the columns, their types and the file metadata (SPEC §2).

This module only describes the format; :mod:`warmfit.format.trace` reads and
validates it, and the recorder writes it.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

#: Parquet key-value metadata key that every trace file must carry.
SCHEMA_KEY: Final = "warmfit.schema"
#: The one schema version this release reads and writes.
SCHEMA_VERSION: Final = "1"

#: Parquet key-value metadata that marks a per-wave file (``warmfit replay
#: --per-wave``): ``warmfit.per_wave = "1"``. Such a file is an output, not a
#: trace; the trace reader names it as one.
PER_WAVE_KEY: Final = "warmfit.per_wave"
#: Columns that tell a per-wave file apart when it lacks that metadata (one
#: written before it existed): it has all three and no reading column
#: (:data:`READING_MARKERS`). A trace may carry ``estimate_bytes`` too
#: (:data:`ESTIMATE_COLUMN`, SPEC §8), never without its reading columns.
PER_WAVE_MARKERS: Final = ("policy", "estimate_bytes", "over_estimate")
#: Columns every trace has and a per-wave file has not.
READING_MARKERS: Final = ("seq", "phase", "peak_bytes")

#: The largest value of a trace's integer columns (every one is int64): a larger count
#: or byte size cannot be written, so whatever takes one in refuses it there.
LARGEST_INT: Final = 2**63 - 1

KINDS: Final = ("flat", "split_child", "dp_rank_forward")
PHASES: Final = ("forward", "caller")

#: The required columns, in the order warmfit writes them.
COLUMNS: Final[dict[str, pa.DataType]] = {
    "run": pa.string(),
    "rank": pa.int32(),
    "seq": pa.int64(),
    "step": pa.int64(),
    "wave": pa.int64(),
    "signature": pa.string(),
    "kind": pa.string(),
    "phase": pa.string(),
    "whole": pa.bool_(),
    "packed_tokens": pa.int64(),
    "logical_tokens": pa.int64(),
    "output_bytes": pa.int64(),
    "baseline_bytes": pa.int64(),
    "peak_bytes": pa.int64(),
    "static_floor_bytes": pa.int64(),
    "oom": pa.bool_(),
}

#: Columns that may hold nulls; every other required column may not.
NULLABLE: Final = frozenset({"step", "static_floor_bytes"})

#: The columns every reading of one wave must agree on.
WAVE_CONSTANT: Final = (
    "signature",
    "kind",
    "packed_tokens",
    "logical_tokens",
    "output_bytes",
    "static_floor_bytes",
)

#: An optional extra column: the peak of the allocator's reserved pool during the
#: reading, recorded where the device has one (docs/reference/recorder.md). Replay ignores it.
RESERVED_COLUMN: Final = "reserved_peak_bytes"

#: An optional column with a meaning (SPEC §8): the price the trainer itself used
#: for the wave (nullable; on any reading of the wave, the first non-null one in
#: ``seq`` order counts). Replay reports it as the policy ``recorded``.
ESTIMATE_COLUMN: Final = "estimate_bytes"

#: The optional columns warmfit checks and reads when a file has them, with their types
#: (nullable, ``>= 0`` when present).
OPTIONAL_COLUMNS: Final[dict[str, pa.DataType]] = {ESTIMATE_COLUMN: pa.int64()}

#: An optional column that describes a wave's batch: its tokens padding included (the
#: batch's token tensor, rows times width), beside ``packed_tokens`` (real tokens).
#: Nullable; ``>= packed_tokens`` when present. The integrations write it.
PADDED_COLUMN: Final = "padded_tokens"
#: An optional column that describes a wave's batch: the sum over its sequences of their
#: length squared, in real tokens (attention without a fused kernel grows so).
#: Nullable; positive when present. The integrations write it.
SUM_SQ_COLUMN: Final = "sum_sq_tokens"
#: The optional columns that describe a wave's batch, with their types. Their types are
#: checked in every file that has them, their values where they are read (``warmfit
#: validate``, ``read_trace`` of every column); replay never reads them.
SHAPE_COLUMNS: Final[dict[str, pa.DataType]] = {
    PADDED_COLUMN: pa.int64(),
    SUM_SQ_COLUMN: pa.int64(),
}

#: The columns replay needs (everything but ``step``).
REPLAY_COLUMNS: Final = tuple(c for c in COLUMNS if c != "step")


def arrow_schema(metadata: dict[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of a v1 trace file, with the schema-version metadata.

    >>> arrow_schema().metadata[b"warmfit.schema"]
    b'1'
    """
    fields = [pa.field(name, dtype, nullable=name in NULLABLE) for name, dtype in COLUMNS.items()]
    meta = {SCHEMA_KEY: SCHEMA_VERSION, **(metadata or {})}
    return pa.schema(fields, metadata=meta)
