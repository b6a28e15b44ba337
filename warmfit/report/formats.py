"""One report layer: every command's result shown by one dispatch (issue 37).

A command's result becomes a :class:`Report`: how it reads as a table for a
terminal, as markdown, as CSV (a header and rows, written by :func:`csv_text`,
the one CSV writer) and as JSON (a document, :func:`json_text`). :func:`render`
gives the one a ``--format`` names, from :data:`FORMATS`, the one list of formats
(a report that has no markdown form leaves it out). pytest-benchmark's and
memray's reporters are the model: the result knows its fields, the format
knows its syntax.

Nothing here imports polars or numpy: ``--help`` reads :class:`Format`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from warmfit.errors import UsageError


class Format(StrEnum):
    """The formats a report is shown in (``--format``)."""

    table = "table"
    markdown = "markdown"
    csv = "csv"
    json = "json"


#: Every format, in the order ``--help`` lists them.
FORMATS: tuple[str, ...] = tuple(f.value for f in Format)


def csv_cell(value: object) -> str:
    """A value as a CSV cell's text: empty for null, ``true``/``false``, a float in full
    precision (``repr``), anything else as ``str`` gives it; a numpy scalar as the Python
    value it holds (``repr`` of a ``numpy.float64`` is ``np.float64(0.1)``)."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():  # a numpy scalar
        value = item()
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_text(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """One header line and one line per row (``\\n`` line ends), cells by :func:`csv_cell`.

    >>> print(csv_text(["a", "b"], [[1, None], [0.1, True]]), end="")
    a,b
    1,
    0.1,true
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
    return buffer.getvalue()


def json_text(document: dict[str, Any]) -> str:
    """A JSON document, indented by two, with a final line end."""
    return json.dumps(document, indent=2) + "\n"


@dataclass(frozen=True)
class Report:
    """What a command shows, in each of its formats (computed when asked for)."""

    table: Callable[[], str]
    #: The CSV header, and the rows under it.
    header: Sequence[str]
    rows: Callable[[], Iterable[Sequence[object]]]
    #: The JSON document (``schema`` first).
    document: Callable[[], dict[str, Any]]
    #: None: the report has no markdown form.
    markdown: Callable[[], str] | None = None

    @property
    def formats(self) -> tuple[str, ...]:
        return tuple(f for f in FORMATS if f != Format.markdown or self.markdown is not None)


def render(report: Report, fmt: str) -> str:
    """``report`` in the format ``fmt`` (one of its :attr:`Report.formats`)."""
    if fmt not in report.formats:
        raise UsageError(
            f"must be one of {', '.join(report.formats)}; got {fmt!r}.", argument="fmt"
        )
    if fmt == Format.json:
        return json_text(report.document())
    if fmt == Format.csv:
        return csv_text(report.header, report.rows())
    if fmt == Format.markdown:
        assert report.markdown is not None
        return report.markdown()
    return report.table()
