"""Write trace format v1 with pyarrow alone.

The one writer of trace files: :func:`warmfit.format.trace` re-exports it, and the
recorder calls it directly, so that a trainer that records never imports
polars (``python -c "import warmfit.recorder"`` loads pyarrow only).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from warmfit.errors import TraceError
from warmfit.format.files import write_atomically
from warmfit.format.schema import COLUMNS, OPTIONAL_COLUMNS, SHAPE_COLUMNS, arrow_schema

_FIX_FORMAT = "See docs/reference/trace-format.md for the rules of trace format v1."


def to_arrow(frame: Any, metadata: dict[str, str] | None = None) -> pa.Table:
    """Cast readings (an Arrow table, or a frame with ``to_arrow()``, such as a polars
    DataFrame) to the v1 Arrow schema: required columns first, extras after (an
    optional column with a meaning, such as ``estimate_bytes`` or ``padded_tokens``,
    cast to its type)."""
    table = frame if isinstance(frame, pa.Table) else frame.to_arrow()
    schema = arrow_schema(metadata)
    extras = [n for n in table.column_names if n not in COLUMNS]
    missing = [n for n in COLUMNS if n not in table.column_names]
    if missing:
        raise TraceError(
            "cannot write a trace without the required columns " + ", ".join(missing) + ".",
            fix=_FIX_FORMAT,
        )
    arrays = [table.column(n).cast(schema.field(n).type) for n in COLUMNS]
    fields = list(schema)
    for name in extras:
        field = table.schema.field(name)
        typed = OPTIONAL_COLUMNS.get(name) or SHAPE_COLUMNS.get(name)
        if typed is not None:
            field = pa.field(name, typed)
        arrays.append(table.column(name).cast(field.type))
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


#: Readings per Parquet row group of a written trace (pyarrow's default is 2**20):
#: a reader of a slice decodes whole row groups.
ROW_GROUP_ROWS = 2**17


def write_trace(
    frame: Any,
    path: str | os.PathLike[str],
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write readings as one v1 trace file, atomically.

    The file is written to a temporary name in the same directory, fsynced and
    then renamed over ``path`` (:func:`warmfit.format.files.write_atomically`), so a
    reader never sees half a file; it gets the umask's mode. Every data page
    carries a CRC checksum, verified when warmfit reads it, so a flipped bit
    is an error rather than a changed figure. Extra ``metadata`` is stored
    beside ``warmfit.schema``. Row groups hold :data:`ROW_GROUP_ROWS` readings,
    so a replay reading one batch of streams decodes little beyond them.
    """
    table = to_arrow(frame, metadata)
    target = Path(path)  # write_atomically makes its missing folders, and unmakes them on failure

    def write(sink: BinaryIO) -> None:
        pq.write_table(
            table,
            sink,
            compression="zstd",
            write_page_checksum=True,
            row_group_size=ROW_GROUP_ROWS,
        )

    return write_atomically(target, write)
