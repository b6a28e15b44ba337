"""A table of measurements (CSV) as a trace, through a TOML mapping of polars expressions.

The mapping says which rows are kept (``where``), which expressions give each
run's label and each wave's signature, tokens, peaks and other numbers, in
which order each run's rows become waves (by columns, ascending, or a fixed
shuffle) and how many waves and readings a row becomes. A value is a polars
SQL expression over the table's columns (:func:`polars.sql_expr`: arithmetic,
``CASE WHEN``, string functions, casts), evaluated by polars on the whole
table at once; text (labels, signatures) is a template whose ``{...}`` holds a
column or an expression. The shorter forms of earlier mappings (``[filter]``,
``[require]`` tests, ``[derive.NAME]`` cases, ``{ column, unit, scale, add,
subtract }``) are read as the expressions they stand for.
docs/how-to/bring-your-own-measurements.md describes every key;
``traces/art-h200/source/*.toml`` and ``traces/liger-gpu/source/*.toml`` are
two real mappings.

A broken mapping is a :class:`~warmfit.errors.UsageError` naming the mapping
file, the key and the column; a row that cannot become readings is a
:class:`~warmfit.errors.TraceError` naming the table, the column and the row.
Nothing is written then. The written trace carries, as Parquet metadata, the
mapping as read (:data:`MAPPING_KEY`, JSON), the table's file name
(:data:`SOURCE_KEY`) and its SHA-256 (:data:`SHA256_KEY`), beside the
mapping's own ``[metadata]``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import zlib
from array import array
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from warmfit.errors import TraceError, UsageError
from warmfit.format.files import not_regular
from warmfit.importers.mapping import (
    _FALSE,
    _LARGEST,
    _LARGEST_RANK,
    _NAME,
    _NUMBER,
    _ROW,
    _TRUE,
    MAPPING_KEY,
    MAX_READINGS,
    SHA256_KEY,
    SOURCE_KEY,
    TEXT,
    TYPED_EXTRA,
    Derived,
    Spec,
    TableMapping,
    load_mapping,
)

__all__ = ["MAPPING_KEY", "SHA256_KEY", "SOURCE_KEY", "Imported", "import_table", "load_mapping"]

# --------------------------------------------------------------------------- compiling


def mapping_error(mapping: TableMapping, key: str, problem: str, header: list[str]) -> UsageError:
    shown = ", ".join(header[:40]) + (f" and {len(header) - 40} more" if len(header) > 40 else "")
    return UsageError(f"{mapping.path}: {key}: {problem} (its columns: {shown}).")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:199] + "…"


class _Compiler:
    """Turns the mapping's values into polars expressions over one table's columns.

    A column's text as written is the column ``TEXT + name``; its typed value (a
    number where every cell of the table is one, else text) is ``name``; a derived
    value is both, once defined.
    """

    def __init__(self, mapping: TableMapping, header: list[str], table: Path) -> None:
        self.mapping = mapping
        self.header = header
        self.columns = set(header)
        self.table = table
        self.derived: set[str] = set()
        self.used: dict[str, None] = {}  # the table's columns the mapping reads, in order

    def error(self, key: str, problem: str) -> UsageError:
        return mapping_error(self.mapping, key, problem, self.header)

    def column(self, name: str, key: str, *, derived: bool = False) -> str:
        if derived and name in self.derived:
            return name
        if name not in self.columns:
            raise self.error(key, f"names the column '{name}', which {self.table} lacks")
        self.used[name] = None
        return name

    def sql(self, text: str, key: str) -> pl.Expr:
        if text in self.columns or text in self.derived:  # a column, whatever its name
            return pl.col(self.column(text, key, derived=True))
        try:
            expr = pl.sql_expr(text)
            names = expr.meta.root_names()
        except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
            raise self.error(
                key, f"{_cut(text)} is not a polars SQL expression ({_first_line(exc)})"
            ) from None
        for name in names:
            self.column(name, key, derived=True)
        return expr

    def tests(self, tests: Mapping[str, frozenset[str]], key: str) -> pl.Expr:
        held = pl.lit(True)
        for name, values in tests.items():
            self.column(name, f"{key}.{name}")
            held = held & pl.col(TEXT + name).is_in(sorted(values))
        return held

    def template(self, spec: Spec) -> pl.Expr:
        pieces: list[pl.Expr] = []
        for text, placeholder in spec.parts:
            if not placeholder:
                pieces.append(pl.lit(text))
            elif text in self.columns or text in self.derived:
                pieces.append(pl.col(TEXT + self.column(text, spec.key, derived=True)))
            elif _NAME.fullmatch(text):
                raise self.error(
                    spec.key,
                    f"names '{text}' in braces, which is neither a column of {self.table} "
                    "nor a value derived before it",
                )
            else:
                pieces.append(self.sql(text, spec.key).cast(pl.String).fill_null(""))
        return pl.concat_str(pieces) if pieces else pl.lit("")

    def spec(self, spec: Spec) -> pl.Expr:
        """The expression of a value (numbers and flags as given, before their checks)."""
        if spec.kind == "text":
            return self.template(spec)
        if spec.constant is not None:
            return pl.lit(spec.constant, dtype=pl.Boolean if spec.kind == "flag" else pl.Int64)
        if spec.expression is not None and not (
            spec.kind == "number" and spec.expression in self.columns
        ):
            return self.sql(spec.expression, spec.key)
        # a column, or the table form: the cells' text read as numbers (row by row checks)
        terms = spec.add or (spec.expression or "",)
        for name in (*terms, *spec.subtract):
            self.column(name, spec.key)
        total = pl.col(terms[0])  # null when a cell is empty
        for name in terms[1:]:
            total = total + pl.col(name)
        for name in spec.subtract:
            total = total - pl.col(name)
        return total if spec.scale == 1 else total * spec.scale

    def parsed(self, spec: Spec) -> bool:
        """Whether a number reads its columns' text cell by cell (a column, the table form)."""
        return spec.kind == "number" and bool(spec.add or spec.expression in self.columns)


#: The most cells a NULL's refusal shows; the rest are counted.
_CELLS_SHOWN = 10


def _cell(value: Any) -> str:
    """A table's cell as an error shows it: its first 40 characters, quoted and escaped
    (``repr``: a control or bidi character is written out, never sent to the terminal)."""
    return repr(str(value)[:40])


def _cut(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def read_table(
    path: Path, choose: Callable[[list[str]], list[str]]
) -> tuple[list[str], dict[str, pl.Series], array[int], str]:
    """The header, the cells of the columns ``choose(header)`` names, the line each row
    starts on and the SHA-256 of the bytes read (UTF-8, a byte-order mark allowed).

    Time and memory grow with the table: a blank line is skipped, a row of another
    width is refused naming its line."""
    problem = not_regular(path)
    if problem is not None:
        raise TraceError(f"the table {problem}.", path=path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(
            f"is not UTF-8 text ({exc.reason} at byte {exc.start}).", path=path
        ) from None
    except OSError as exc:
        raise TraceError(f"cannot be read ({exc.strerror or exc}).", path=path) from None
    digest = hashlib.sha256(raw).hexdigest()
    del raw
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if not header:
            raise TraceError("has no header row: the first line must name the columns.", path=path)
        duplicated = sorted(c for c, n in Counter(header).items() if n > 1)
        if duplicated:
            shown = ", ".join(duplicated[:10]) + (" ..." if len(duplicated) > 10 else "")
            raise TraceError(f"names a column twice in its header: {shown}.", path=path)
        wanted = choose(header)
        index = {name: i for i, name in enumerate(header)}
        picks = [index[name] for name in wanted]
        cells: list[list[str]] = [[] for _ in wanted]  # the rows not yet in chunks
        chunks: list[list[pl.Series]] = [[] for _ in wanted]  # polars holds text compactly
        lines = array("q")  # the line each row starts on: 8 bytes a row
        line = reader.line_num + 1
        for row in reader:
            if len(row) != len(header):
                if not row:  # a blank line
                    line = reader.line_num + 1
                    continue
                raise TraceError(
                    f"has {len(row)} cells where the header names {len(header)} columns "
                    f"(line {line}).",
                    path=path,
                    row=len(lines) + 1,
                )
            for column, i in zip(cells, picks, strict=True):
                column.append(row[i])
            lines.append(line)
            line = reader.line_num + 1
            if len(lines) % _CHUNK == 0:
                _flush(cells, chunks)
    except csv.Error as exc:
        raise TraceError(
            f"is not valid CSV near line {reader.line_num}: {exc}.", path=path
        ) from None
    _flush(cells, chunks)
    columns = {
        n: pl.concat(c) if c else pl.Series([], dtype=pl.String)
        for n, c in zip(wanted, chunks, strict=True)
    }
    return header, columns, lines, digest


_CHUNK = 65_536


def _flush(cells: list[list[str]], chunks: list[list[pl.Series]]) -> None:
    for column, chunk in zip(cells, chunks, strict=True):
        if column:
            chunk.append(pl.Series(column, dtype=pl.String))
            column.clear()


class _Plan:
    """Every expression of a mapping, compiled against a table's header before a row is
    read: a column the table lacks, or an expression polars cannot parse, is refused
    naming its key."""

    def __init__(self, compiler: _Compiler) -> None:
        mapping = compiler.mapping
        self.compiler = compiler
        self.keep = [("filter", compiler.tests(mapping.filters, "filter"))]
        if mapping.where is not None:
            self.keep.append(("where", compiler.sql(mapping.where, "where")))
        for name in mapping.require:
            compiler.column(name, f"require.{name}")
        self.require = (
            None if mapping.require_sql is None else compiler.sql(mapping.require_sql, "require")
        )
        self.derive: list[tuple[Derived, pl.Expr]] = []
        for derived in mapping.derive:
            key = f"derive.{derived.name}"
            if derived.name in compiler.columns:
                raise compiler.error(
                    key,
                    f"'{derived.name}' is already a column of {compiler.table}; name the "
                    "derived value otherwise",
                )
            if derived.expression is not None:
                expr = compiler.sql(derived.expression, key)
            else:
                expr = pl.lit(None, dtype=pl.String)
                for i, (tests, value) in reversed(list(enumerate(derived.cases))):
                    held = compiler.tests(tests, f"{key}.cases[{i}].when")
                    expr = pl.when(held).then(compiler.template(value)).otherwise(expr)
            self.derive.append((derived, expr))
            compiler.derived.add(derived.name)
        self.label = compiler.template(mapping.label)
        for name in mapping.identity:
            compiler.column(name, "run.identity")
        for name in mapping.order_by:
            compiler.column(name, "order.by")
        self.specs: dict[str, pl.Expr] = {}
        levels = [mapping.fields, mapping.extra]
        for wave, readings in mapping.waves:
            levels += [wave, *readings]
        for level in levels:
            for spec in level.values():
                self.specs[spec.key] = compiler.spec(spec)


def _typed(text: pl.Series) -> pl.Series:
    """A column's cells as numbers when every non-empty one is (integers exact), else text;
    an empty cell is null."""
    stripped = text.str.strip_chars()
    empty = stripped == ""
    integers = stripped.cast(pl.Int64, strict=False)
    if (integers.is_not_null() | empty).all():
        return integers
    if (stripped.str.contains(_NUMBER) | empty).all():
        return stripped.cast(pl.Float64, strict=False)
    frame = pl.DataFrame({"t": text, "e": empty})
    return frame.select(pl.when(pl.col("e")).then(None).otherwise(pl.col("t")).alias("t"))["t"]


def _float(value: Any) -> float:
    try:
        return abs(float(value))
    except (TypeError, ValueError):
        return 0.0


class _Rows:
    """Evaluates a plan on the kept rows of a table; raises the error of one row, naming
    the table, the column and the row (counted from 1 under the header) and its line."""

    def __init__(self, table: Path, lines: array[int], plan: _Plan) -> None:
        self.table = table
        self.lines = lines
        self.plan = plan
        self.compiler = plan.compiler

    def refuse(self, frame: pl.DataFrame, at: int, column: str | None, problem: str) -> TraceError:
        row = int(frame[_ROW][at])
        return TraceError(
            f"{problem} (line {self.lines[row - 1]}).", path=self.table, column=column, row=row
        )

    def evaluate(self, frame: pl.DataFrame, expr: pl.Expr, key: str) -> pl.Series:
        try:
            return frame.with_columns(expr.alias("\x00value"))["\x00value"]
        except (pl.exceptions.PolarsError, pl.exceptions.PanicException) as exc:
            raise self.compiler.error(key, f"cannot be evaluated: {_first_line(exc)}") from None

    def truth(self, frame: pl.DataFrame, expr: pl.Expr, key: str) -> pl.Series:
        held = self.evaluate(frame, expr, key)
        if held.dtype != pl.Boolean:
            raise self.compiler.error(key, f"gives {held.dtype} values, not true or false")
        return held.fill_null(False)

    def null(self, frame: pl.DataFrame, at: int, roots: list[str]) -> str:
        """What a row's expression gave when it gave NULL, naming the raw cells of the columns
        it reads on that row (``peak_mem_MiB '9k1' gives no value (NULL)``): a typo'd cell
        that ``TRY_CAST`` turned into NULL is shown, not hidden."""
        cells = [f"{c} {_cell(frame[TEXT + c][at])}" for c in roots if TEXT + c in frame.columns]
        if not cells:
            return "gives no value (NULL)"
        if len(cells) == 1:
            return f"{cells[0]} gives no value (NULL)"
        if len(cells) > _CELLS_SHOWN:  # an expression over many columns: a line, not a page
            cells = [*cells[: _CELLS_SHOWN - 1], f"{len(cells) - _CELLS_SHOWN + 1} more"]
        return f"{', '.join(cells[:-1])} and {cells[-1]} give no value (NULL)"

    def first(self, mask: pl.Series) -> int | None:
        hits = mask.fill_null(False).arg_true()
        return int(hits[0]) if len(hits) else None

    def numeric(
        self, frame: pl.DataFrame, text: pl.Series, column: str | None, key: str
    ) -> pl.Series:
        """Text as numbers (integers exact, an empty cell null), or the first that is not one
        refused."""
        stripped = text.str.strip_chars().replace("", None)
        at = self.first(~stripped.str.contains(_NUMBER))
        if at is not None:
            said = f"holds {text[at].strip()[:40]!r}" if column else f"gives {text[at][:40]!r}"
            raise self.refuse(frame, at, column, f"{said}, where {key} needs a number")
        integers = stripped.cast(pl.Int64, strict=False)
        exact = integers.null_count() == stripped.null_count()
        return (integers if exact else stripped.cast(pl.Float64, strict=False)).alias(text.name)

    def number(
        self, frame: pl.DataFrame, spec: Spec, allowed: pl.Series | bool = False
    ) -> pl.Series:
        """A whole number per row within int64 (int32 for a rank), or the row refused;
        null only where ``allowed``."""
        expr, key = self.plan.specs[spec.key], spec.key
        roots = list(dict.fromkeys(expr.meta.root_names()))
        one = roots[0] if len(roots) == 1 else None
        base = frame
        if self.compiler.parsed(spec):  # a column, the table form: each cell's text as written
            base = pl.DataFrame(
                [self.numeric(frame, frame[TEXT + c].alias(c), c, key) for c in roots]
            )
        values = self.evaluate(base, expr, key)
        if values.dtype == pl.String:  # text that holds numbers (a text column, a CASE)
            values = self.numeric(frame, values, one, key)
        elif not (values.dtype.is_numeric() or values.dtype == pl.Null):
            raise self.compiler.error(key, f"gives {values.dtype} values, where a number is needed")
        floating = values.cast(pl.Float64)
        ints = [c for c in roots if base.schema[c].is_integer()]
        if values.dtype.is_integer() and ints:  # int64 arithmetic wraps: redo it in floats
            shadow = self.evaluate(base.with_columns(pl.col(ints).cast(pl.Float64)), expr, key)
            beyond = (shadow.cast(pl.Float64) - floating).abs() > 2.0**62
        else:
            beyond = floating.abs() >= 2.0**63  # the float nearest 2**63 - 1 is 2**63
        largest = _LARGEST_RANK if key.endswith(".rank") else _LARGEST
        flagged = floating.is_nan() | beyond | (floating.abs() > largest)
        at = self.first(flagged)
        bare = self.compiler.parsed(spec) and not spec.add  # each cell is its row's value
        if at is not None and bare and values.dtype.is_float():
            # a column read as floats for another cell's sake rounds 2**63 - 1 up to 2**63:
            # name a row whose own cell is past the limit where one is
            whole = frame[TEXT + roots[0]].str.strip_chars().cast(pl.Int64, strict=False)
            past = flagged & ~whole.is_between(-largest, largest).fill_null(False)
            at = self.first(past) if past.any() else at
        if at is not None:
            hit: int = at
            column = max(roots, key=lambda c: _float(base[c][hit]), default=None)
            cell = str(frame[TEXT + column][at]).strip() if column else str(values[at])
            shown = cell if len(cell) <= 40 else cell[:37] + "..."
            bits = 64 if largest == _LARGEST else 32
            raise self.refuse(
                frame,
                at,
                column,
                f"holds {shown!r}, which gives {key} beyond {bits} bits "
                f"(a trace holds at most {largest:,})",
            )
        values = values.round(0, mode="half_to_even") if values.dtype.is_float() else values
        values = values.cast(pl.Int64)
        at = self.first(values < 0)
        if at is not None:
            column = roots[0] if roots else None
            raise self.refuse(frame, at, column, f"gives {key} = {values[at]}, below 0")
        missing = values.is_null() & (~allowed if isinstance(allowed, pl.Series) else not allowed)
        at = self.first(missing)
        if at is not None:
            empty = one is not None and not str(frame[TEXT + one][at] or "").strip()
            said = "is empty" if empty else self.null(frame, at, roots)
            raise self.refuse(frame, at, one, f"{said}, where {key} needs a number")
        return values

    def flag(self, frame: pl.DataFrame, spec: Spec) -> pl.Series:
        """True or false per row: a boolean, or true/false, 1/0, yes/no."""
        column = spec.expression if spec.expression in self.compiler.columns else None
        if column is not None:  # a column's text as written
            values = frame[TEXT + column]
        else:
            values = self.evaluate(frame, self.plan.specs[spec.key], spec.key)
        if values.dtype != pl.Boolean:
            text = values.cast(pl.String).str.strip_chars().str.to_lowercase()
            truth = text.is_in(list(_TRUE))
            at = self.first(text.is_not_null() & ~truth & ~text.is_in(list(_FALSE)))
            if at is not None:
                raise self.refuse(
                    frame,
                    at,
                    column,
                    f"holds {text[at][:40]!r}, where {spec.key} needs true or false (1/0, yes/no)",
                )
            values = truth
        at = self.first(values.is_null())
        if at is not None:
            roots = list(dict.fromkeys(self.plan.specs[spec.key].meta.root_names()))
            said = self.null(frame, at, roots)
            raise self.refuse(frame, at, column, f"{said}, where {spec.key} needs true or false")
        return values

    def value(
        self, frame: pl.DataFrame, spec: Spec, allowed: pl.Series | bool = False
    ) -> pl.Series:
        """A value of any kind: a number, a flag, a text, or an extra column as it comes."""
        if spec.kind == "number":
            return self.number(frame, spec, allowed)
        if spec.kind == "flag":
            return self.flag(frame, spec)
        if spec.kind == "value" and spec.expression in self.compiler.columns:
            return frame[spec.expression]
        return self.evaluate(frame, self.plan.specs[spec.key], spec.key)

    def kept(self, frame: pl.DataFrame) -> pl.DataFrame:
        """The rows ``where`` and ``[filter]`` keep, checked by ``require``, with the
        derived values and each row's run label (``LABEL``), in the table's order."""
        mapping, plan = self.compiler.mapping, self.plan
        for key, expr in plan.keep:
            frame = frame.filter(self.truth(frame, expr, key))
        for column, allowed in mapping.require.items():
            at = self.first(~frame[TEXT + column].is_in(sorted(allowed)))
            if at is not None:
                shown = ", ".join(repr(v) for v in sorted(allowed))
                raise self.refuse(
                    frame,
                    at,
                    column,
                    f"holds {frame[TEXT + column][at][:40]!r}, where require.{column} allows only {shown}",
                )
        if plan.require is not None:
            at = self.first(~self.truth(frame, plan.require, "require"))
            if at is not None:
                roots = list(dict.fromkeys(plan.require.meta.root_names()))
                cells = ", ".join(f"{c}={_cell(frame[TEXT + c][at])}" for c in roots)
                raise self.refuse(
                    frame,
                    at,
                    roots[0] if roots else None,
                    f"fails require ({_cut(mapping.require_sql or '')}: {cells})",
                )
        for derived, expr in plan.derive:
            values = self.evaluate(frame, expr, f"derive.{derived.name}")
            at = self.first(values.is_null())
            if at is not None:
                if derived.cases:
                    tested = sorted({c for tests, _ in derived.cases for c in tests})
                    shown = ", ".join(f"{c}={frame[TEXT + c][at]!r}" for c in tested)
                    problem = f"matches no case of derive.{derived.name} ({shown})"
                else:
                    tested = list(dict.fromkeys(expr.meta.root_names()))
                    problem = (
                        f"{self.null(frame, at, tested)} for derive.{derived.name}; "
                        "end a CASE with ELSE"
                    )
                raise self.refuse(frame, at, tested[0] if tested else None, problem)
            frame = frame.with_columns(
                values.alias(derived.name), values.cast(pl.String).alias(TEXT + derived.name)
            )
        labels = self.evaluate(frame, plan.label, "run.label")
        at = self.first(labels == "")
        if at is not None:
            raise self.refuse(frame, at, None, "gives an empty run label (run.label)")
        return frame.with_columns(labels.alias(LABEL))

    def check_identity(self, frame: pl.DataFrame) -> None:
        """Refuse two rows of one label that differ in a column of ``run.identity``."""
        identity = self.compiler.mapping.identity
        if not identity or frame.height == 0:
            return
        differs = frame.select(
            (pl.col(TEXT + c) != pl.col(TEXT + c).first().over(LABEL)).alias(c) for c in identity
        )
        at = self.first(differs.select(pl.any_horizontal(pl.all())).to_series())
        if at is None:
            return
        column = next(c for c in identity if differs[c][at])
        label = frame[LABEL][at]
        first = frame.filter(pl.col(LABEL) == label).row(0, named=True)
        raise self.refuse(
            frame,
            at,
            column,
            f"gives the run label {label!r} of row {first[_ROW]}, but another {column} "
            f"({frame[TEXT + column][at][:40]!r}, not {first[TEXT + column][:40]!r}): "
            "run.label must tell the runs of run.identity apart",
        )

    def ordered(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Runs sorted by label, each run's rows by ``order.by`` (numbers as numbers) and
        then shuffled if asked, with each row's ``step`` in its run."""
        mapping = self.compiler.mapping
        frame = frame.sort([LABEL, *mapping.order_by], maintain_order=True, nulls_last=False)
        if mapping.distinct and frame.height > 1:
            same = pl.col(LABEL) == pl.col(LABEL).shift(1)
            for name in mapping.order_by:
                same = same & pl.col(name).eq_missing(pl.col(name).shift(1))
            at = self.first(frame.select(same).to_series())
            if at is not None:
                raise self.refuse(
                    frame,
                    at,
                    mapping.order_by[0],
                    f"repeats the {', '.join(mapping.order_by)} of row {frame[_ROW][at - 1]} in "
                    f"the run {frame[LABEL][at]!r} (order.distinct): keep one, or tell them "
                    "apart in run.label",
                )
        if mapping.shuffle and frame.height:
            import numpy as np

            runs = frame.select(pl.col(LABEL).rle()).unnest(LABEL)
            index = np.arange(frame.height, dtype=np.int64)
            start = 0
            for count, label in runs.iter_rows():
                if count > 1:  # a run of one row stays as it is
                    order = shuffled_order(label, count, mapping.seed)
                    index[start : start + count] = start + np.array(order, dtype=np.int64)
                start += count
            frame = frame[index]
        return frame.with_columns(pl.int_range(pl.len()).over(LABEL).alias(STEP))


LABEL = "\x00label"
STEP = "\x00step"


def shuffled_order(label: str, count: int, seed: int = 0) -> list[int]:
    """A fixed permutation of ``range(count)`` for the run ``label``: numpy's
    ``default_rng(zlib.crc32(label as UTF-8, seed)).permutation(count)``.

    The seed is the CRC-32 of the label, started from ``seed`` (0: the plain
    CRC-32), the same in every process and Python version.

    >>> shuffled_order("shuffled/qwen3.5-4b-tp2-compiled-core_attn+mlp", 5)
    [1, 3, 2, 0, 4]
    """
    import numpy as np

    rng = np.random.default_rng(zlib.crc32(label.encode(), seed))
    return [int(i) for i in rng.permutation(count)]


@dataclass
class Imported:
    """The readings of a table, what was done with its rows, and what to warn about."""

    readings: Any  # a polars DataFrame
    metadata: dict[str, str]
    rows: int
    kept: int
    runs: int
    warnings: list[str] = field(default_factory=list)


#: The trace's columns, in the order an import writes them, with their types.
_SCHEMA: dict[str, Any] = {
    "run": pl.String,
    "rank": pl.Int64,
    "step": pl.Int64,
    "wave": pl.Int64,
    "signature": pl.String,
    "kind": pl.String,
    "packed_tokens": pl.Int64,
    "logical_tokens": pl.Int64,
    "output_bytes": pl.Int64,
    "baseline_bytes": pl.Int64,
    "static_floor_bytes": pl.Int64,
    "oom": pl.Boolean,
    "seq": pl.Int64,
    "phase": pl.String,
    "whole": pl.Boolean,
    "peak_bytes": pl.Int64,
}
_DEFAULTS: dict[str, Any] = {
    "rank": 0,
    "kind": "flat",
    "phase": "caller",
    "output_bytes": 0,
    "baseline_bytes": 0,
    "static_floor_bytes": None,
    "oom": False,
}
#: The share of a run's largest peak above which a smallest peak, with every baseline 0,
#: says the peaks include memory held before each wave (the weights).
BASELINE_SHARE = 0.25


def import_table(table: str | Path, mapping: TableMapping) -> Imported:
    """The readings ``mapping`` makes of ``table``'s rows, and the trace's metadata."""
    import numpy as np

    from warmfit.format.trace import conform

    table = Path(table)
    plans: list[_Plan] = []

    def choose(header: list[str]) -> list[str]:
        plans.append(_Plan(_Compiler(mapping, header, table)))
        return list(plans[0].compiler.used)

    _, cells, lines, digest = read_table(table, choose)
    plan = plans[0]
    rows = _Rows(table, lines, plan)
    frame = pl.DataFrame({_ROW: pl.int_range(1, len(lines) + 1, eager=True)})
    texts = [values.alias(TEXT + name) for name, values in cells.items()]
    del cells
    frame = frame.with_columns(texts).with_columns(
        _typed(t).alias(t.name[len(TEXT) :]) for t in texts
    )
    frame = rows.kept(frame)
    kept = frame.height
    per_row = mapping.readings_per_row()
    if kept * per_row > MAX_READINGS:
        raise UsageError(
            f"{mapping.path}: {kept:,} rows of {table} kept, {per_row:,} readings each, make "
            f"{kept * per_row:,} readings; warmfit imports at most {MAX_READINGS:,} at once. "
            "Import part of the table (where = ...), or fewer readings per row."
        )
    rows.check_identity(frame)
    frame = rows.ordered(frame)

    cache: dict[str, pl.Series] = {}

    def value(spec: Spec, allowed: pl.Series | bool = False) -> pl.Series:
        key = f"{spec.key}\x00{allowed if isinstance(allowed, bool) else id(allowed)}"
        if key not in cache:
            cache[key] = rows.value(frame, spec, allowed)
        return cache[key]

    parts = []
    fits = pl.repeat(False, kept, eager=True)  # no oom given: every reading fitted
    waves = len(mapping.waves)
    index = 0
    for sample, (wave_specs, readings) in enumerate(mapping.waves):
        for reading_specs in readings:
            specs = {**mapping.fields, **wave_specs, **reading_specs}
            got: dict[str, pl.Series] = {}
            got["oom"] = value(specs["oom"]) if "oom" in specs else fits
            for name in (
                "rank",
                "packed_tokens",
                "logical_tokens",
                "output_bytes",
                "baseline_bytes",
            ):
                if name in specs:
                    got[name] = value(specs[name])
            if "static_floor_bytes" in specs:
                got["static_floor_bytes"] = value(specs["static_floor_bytes"], True)
            for name in ("signature", "kind", "phase"):
                if name in specs:
                    got[name] = value(specs[name])
            # an OOM reading may lack its peak (the size did not fit): its peak is then
            # the memory held before the wave, its baseline, a lower bound
            peak = value(specs["peak_bytes"], got["oom"])
            part = pl.DataFrame(got).with_columns(
                peak.alias("peak_bytes"),
                frame[LABEL].alias("run"),
                frame[STEP].alias("step"),
                (frame[STEP] * waves + sample).alias("wave"),
                (frame[STEP] * per_row + index).alias("seq"),
                frame[_ROW],
                pl.int_range(kept, eager=True).alias("\x00at"),
            )
            part = part.with_columns(
                pl.lit(v, dtype=_SCHEMA[k]).alias(k) for k, v in _DEFAULTS.items() if k not in got
            )
            if "logical_tokens" not in got:
                part = part.with_columns(pl.col("packed_tokens").alias("logical_tokens"))
            part = part.with_columns(
                pl.col("peak_bytes").fill_null(pl.col("baseline_bytes")),
                (
                    value(specs["whole"])
                    if "whole" in specs
                    else (pl.col("phase") == "caller") & (pl.col("kind") == "flat") & ~pl.col("oom")
                ).alias("whole"),
            )
            _check_readings(rows, frame, part)
            extras = [value(spec, True).alias(name) for name, spec in mapping.extra.items()]
            parts.append(
                part.select(*_SCHEMA, *extras, _ROW, "\x00at").with_columns(
                    pl.lit(index).alias("\x00c")
                )
            )
            index += 1
    trace = pl.concat(parts).sort("\x00at", "\x00c") if len(parts) > 1 else parts[0]
    sources = trace[_ROW].to_numpy().astype(np.int64)
    trace = trace.drop(_ROW, "\x00at", "\x00c")
    for name, spec in mapping.extra.items():
        if name in TYPED_EXTRA or spec.kind == "number":
            trace = trace.with_columns(pl.col(name).cast(pl.Int64))
    # the trace's own row rules (estimate_bytes >= 0, padded_tokens >= packed_tokens,
    # sum_sq_tokens > 0, ...), naming the table's row: nothing 'warmfit validate' refuses
    conform(trace, table, sources)
    metadata = dict(mapping.metadata)
    metadata[MAPPING_KEY] = json.dumps(mapping.resolved, ensure_ascii=False, separators=(",", ":"))
    metadata[SOURCE_KEY] = table.name
    metadata[SHA256_KEY] = digest
    warnings = [] if mapping.baseline_given() else _baseline_warning(trace)
    runs = trace["run"].n_unique() if trace.height else 0
    return Imported(trace, metadata, rows=len(lines), kept=kept, runs=runs, warnings=warnings)


def _check_readings(rows: _Rows, frame: pl.DataFrame, part: pl.DataFrame) -> None:
    """The rules of one reading a mapping can break (the trace's others: conform)."""
    checks = [
        (
            pl.col("packed_tokens") <= 0,
            "gives packed_tokens = {packed_tokens}; a wave has at least one token",
        ),
        (
            pl.col("logical_tokens") < pl.col("packed_tokens"),
            "gives logical_tokens = {logical_tokens}, below packed_tokens = {packed_tokens}",
        ),
        (
            ~pl.col("kind").is_in(["flat", "split_child", "dp_rank_forward"]),
            "gives kind {kind!r}: flat, split_child or dp_rank_forward",
        ),
        (~pl.col("phase").is_in(["forward", "caller"]), "gives phase {phase!r}: forward or caller"),
        (
            pl.col("whole") & ((pl.col("phase") != "caller") | (pl.col("kind") != "flat")),
            "gives a whole reading that is not the caller reading of a flat wave",
        ),
    ]
    for broken, problem in checks:
        at = rows.first(part.select(broken).to_series())
        if at is not None:
            raise rows.refuse(frame, at, None, problem.format(**part.row(at, named=True)))


def _baseline_warning(readings: pl.DataFrame) -> list[str]:
    """A warning when every baseline is 0 and a run's smallest peak is a large share of its
    largest: the peaks then likely include memory held before each wave (the weights)."""
    fitting = readings.filter(~pl.col("oom"))
    if fitting.height == 0 or fitting["baseline_bytes"].max() != 0:
        return []
    shares = (
        fitting.group_by("run")
        .agg(
            pl.len().alias("n"),
            (pl.col("peak_bytes").min() / pl.col("peak_bytes").max()).alias("share"),
        )
        .filter((pl.col("n") > 1) & (pl.col("share") >= BASELINE_SHARE))
        .sort("share", "run", descending=[True, False])
    )
    if shares.height == 0:
        return []
    run, _, share = shares.row(0)
    return [
        f"every baseline_bytes is 0 (the mapping sets none), yet in the run {run!r} the smallest "
        f"peak is {share:.0%} of the largest ({shares.height} of "
        f"{fitting['run'].n_unique()} runs at {BASELINE_SHARE:.0%} or more): the peaks likely "
        "include memory held before each wave, such as the weights, and every price will be "
        "too high. Set fields.baseline_bytes to a column or a constant (the weights' bytes), "
        "or to 0 to say the peaks hold only the wave's own memory."
    ]
