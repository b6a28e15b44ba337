"""A table of measurements (CSV) as a trace, through a declarative TOML mapping.

The mapping says which columns make each run's label and each wave's
signature, which give the tokens, peaks and other numbers (with a unit or a
scale), which rows are kept (equality and membership tests on columns, never
an expression that runs code), in which order each run's rows become waves
(by columns, ascending, or a fixed shuffle) and how many waves and readings a
row becomes. docs/how-to/bring-your-own-measurements.md describes every key;
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
import itertools
import json
import re
import tomllib
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation, Overflow, localcontext
from pathlib import Path
from typing import Any

from warmfit.errors import TraceError, UsageError
from warmfit.format.files import not_regular
from warmfit.format.schema import (
    ESTIMATE_COLUMN,
    OPTIONAL_COLUMNS,
    PADDED_COLUMN,
    SHAPE_COLUMNS,
    SUM_SQ_COLUMN,
)

#: The Parquet metadata keys an import writes (a mapping's ``[metadata]`` may not set them).
MAPPING_KEY = "warmfit.import.mapping"
SOURCE_KEY = "warmfit.import.source"
SHA256_KEY = "warmfit.import.source_sha256"
#: Metadata keys a mapping may not set: the schema's, the per-wave marker and the import's own.
RESERVED_METADATA = frozenset(
    {"warmfit.schema", "warmfit.per_wave", MAPPING_KEY, SOURCE_KEY, SHA256_KEY}
)

#: Units a number may be given in (``unit = "MiB"``), in bytes.
UNITS: dict[str, int] = {
    "B": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}

#: The reading fields, by the level that may set them: ``[fields]`` sets any, a
#: ``[[waves]]`` entry those of a wave and its readings, a reading its own.
NUMBER_FIELDS = (
    "rank",
    "packed_tokens",
    "logical_tokens",
    "output_bytes",
    "baseline_bytes",
    "peak_bytes",
    "static_floor_bytes",
)
TEXT_FIELDS = ("signature", "kind", "phase")
BOOL_FIELDS = ("whole", "oom")
READING_LEVEL = ("phase", "whole", "peak_bytes", "baseline_bytes", "oom")
WAVE_LEVEL = (
    "signature",
    "kind",
    "packed_tokens",
    "logical_tokens",
    "output_bytes",
    "static_floor_bytes",
    *READING_LEVEL,
)
ALL_FIELDS = ("rank", *WAVE_LEVEL)

_TOP_KEYS = (
    "extends",
    "description",
    "filter",
    "require",
    "derive",
    "run",
    "order",
    "fields",
    "waves",
    "extra",
    "metadata",
)
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_RENDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
#: The optional trace columns with a type and rules (SPEC §8, the batch's shape) that
#: ``[extra]`` may set: numbers only, as ``[fields]`` takes them, with what each holds.
TYPED_EXTRA = {
    ESTIMATE_COLUMN: "the price the trainer used, in bytes",
    PADDED_COLUMN: "the batch's tokens, padding included",
    SUM_SQ_COLUMN: "the sum of the squared sequence lengths",
}
assert set(TYPED_EXTRA) == {*OPTIONAL_COLUMNS, *SHAPE_COLUMNS}
#: The largest number a trace holds (int64); a rank must fit int32.
_LARGEST = 2**63 - 1
_LARGEST_RANK = 2**31 - 1
_TRUE = frozenset({"true", "1", "yes"})
_FALSE = frozenset({"false", "0", "no"})


# --------------------------------------------------------------------------- mapping


class _Keys:
    """Names a key of the mapping file in an error (``map.toml: fields.peak_bytes: ...``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, key: str, problem: str) -> UsageError:
        return UsageError(f"{self.path}: {key}: {problem}")


@dataclass(frozen=True)
class Template:
    """Text with ``{column}`` placeholders (``{{`` and ``}}`` are literal braces)."""

    text: str
    names: tuple[str, ...]

    def render(self, values: Mapping[str, str]) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            return match.group(0)[0] if name is None else values[name]

        return _RENDER.sub(one, self.text)


@dataclass(frozen=True)
class Number:
    """An integer: a constant, or the sum of columns less others, times a scale."""

    key: str
    constant: int | None = None
    add: tuple[str, ...] = ()
    subtract: tuple[str, ...] = ()
    scale: Decimal = Decimal(1)
    nullable: bool = False

    def columns(self) -> tuple[str, ...]:
        return (*self.add, *self.subtract)


@dataclass(frozen=True)
class Flag:
    """A boolean: a constant, or a column holding true/false, 1/0 or yes/no."""

    key: str
    constant: bool | None = None
    column: str | None = None


Spec = Number | Flag | Template


@dataclass(frozen=True)
class Case:
    when: dict[str, frozenset[str]]
    value: Template


@dataclass(frozen=True)
class TableMapping:
    """A mapping read and checked: every key known, every value of its kind."""

    path: Path
    resolved: dict[str, Any]
    filters: dict[str, frozenset[str]]
    require: dict[str, frozenset[str]]
    derive: dict[str, tuple[Case, ...]]
    label: Template
    identity: tuple[str, ...]
    order_by: tuple[str, ...]
    distinct: bool
    shuffle: bool
    seed: int
    fields: dict[str, Spec]
    waves: tuple[tuple[dict[str, Spec], tuple[dict[str, Spec], ...]], ...]
    extra: dict[str, Number | Template] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    def columns(self) -> dict[str, str]:
        """Every table column the mapping names, with the key that names it (first)."""
        named: dict[str, str] = {}

        def note(column: str, key: str) -> None:
            named.setdefault(column, key)

        for column in self.filters:
            note(column, f"filter.{column}")
        for column in self.require:
            note(column, f"require.{column}")
        for name, cases in self.derive.items():
            for i, case in enumerate(cases):
                for column in case.when:
                    note(column, f"derive.{name}.cases[{i}].when.{column}")
        for column in self.identity:
            note(column, "run.identity")
        for column in self.order_by:
            note(column, "order.by")
        specs: list[Spec] = [*self.fields.values(), *self.extra.values()]
        for wave, readings in self.waves:
            specs += [*wave.values()] + [s for r in readings for s in r.values()]
        for spec in specs:
            if isinstance(spec, Number):
                for column in spec.columns():
                    note(column, spec.key)
            elif isinstance(spec, Flag) and spec.column is not None:
                note(spec.column, spec.key)
        return named


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _read_toml(path: Path) -> dict[str, Any]:
    problem = not_regular(path)
    if problem is not None:
        raise UsageError(f"{path}: the mapping {problem}.")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: the mapping is not valid TOML ({exc}).") from None
    except OSError as exc:
        raise UsageError(f"{path}: the mapping cannot be read ({exc.strerror or exc}).") from None


def load_mapping(path: str | Path) -> TableMapping:
    """Read and check a mapping file (``extends`` resolved), before any row is read."""
    path = Path(path)
    keys = _Keys(path)
    raw = _read_toml(path)
    if "extends" in raw:
        base_name = raw["extends"]
        if not isinstance(base_name, str):
            raise keys.error("extends", "must be the path of another mapping file, as a string.")
        base_path = path.parent / base_name
        base = _read_toml(base_path)
        if "extends" in base:
            raise keys.error(
                "extends", f"{base_path} extends another mapping itself; one level only."
            )
        raw = _merge(base, {k: v for k, v in raw.items() if k != "extends"})
    for key in raw:
        if key not in _TOP_KEYS:
            raise keys.error(key, f"is not a mapping key; the keys are {', '.join(_TOP_KEYS[1:])}.")
    return _compile(raw, keys, path)


def _table(raw: dict[str, Any], key: str, keys: _Keys) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise keys.error(key, "must be a table.")
    return value


def _tests(table: dict[str, Any], where: str, keys: _Keys) -> dict[str, frozenset[str]]:
    tests: dict[str, frozenset[str]] = {}
    for column, value in table.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(type(v) in (str, int) for v in values):
            raise keys.error(
                f"{where}.{column}",
                "must be a string or an integer (the cell equals it) or a list of them "
                "(the cell is one of them); a test compares the cell's text, no expression "
                "is evaluated.",
            )
        tests[column] = frozenset(str(v) for v in values)
    return tests


def _template(value: Any, key: str, keys: _Keys) -> Template:
    if not isinstance(value, str):
        raise keys.error(key, 'must be a string, a template such as "{model}-tp{tp}".')
    bare = value.replace("{{", "").replace("}}", "")
    names = tuple(m.group(1) for m in _PLACEHOLDER.finditer(bare))
    if (
        any(not n for n in names)
        or "{" in _PLACEHOLDER.sub("", bare)
        or "}" in _PLACEHOLDER.sub("", bare)
    ):
        raise keys.error(
            key,
            f"{value!r} is not a template: name a column in braces, {{column}}; "
            "write {{ or }} for a brace.",
        )
    return Template(value, names)


def _number(value: Any, key: str, keys: _Keys, *, nullable: bool = False) -> Number:
    if type(value) is int:
        if value < 0:
            raise keys.error(key, f"must not be negative; got {value}.")
        return Number(key, constant=value, nullable=nullable)
    if isinstance(value, str):
        return Number(key, add=(value,), nullable=nullable)
    if not isinstance(value, dict):
        raise keys.error(
            key,
            "must be an integer, a column name, or a table such as "
            '{ column = "peak_mb", unit = "MiB" }.',
        )
    allowed = {"column", "add", "subtract", "unit", "scale"}
    for name in value:
        if name not in allowed:
            raise keys.error(
                f"{key}.{name}",
                f"is not a key of a number; the keys are {', '.join(sorted(allowed))}.",
            )
    if ("column" in value) == ("add" in value):
        raise keys.error(key, "give either column (one column) or add (a list of columns).")
    if "column" in value:
        if not isinstance(value["column"], str):
            raise keys.error(f"{key}.column", "must be a column name.")
        add: tuple[str, ...] = (value["column"],)
    else:
        add = _names(value["add"], f"{key}.add", keys)
    subtract = _names(value.get("subtract", []), f"{key}.subtract", keys, empty=True)
    scale = Decimal(1)
    if "unit" in value and "scale" in value:
        raise keys.error(key, "give unit or scale, not both.")
    if "unit" in value:
        if value["unit"] not in UNITS:
            raise keys.error(
                f"{key}.unit", f"must be one of {', '.join(UNITS)}; got {value['unit']!r}."
            )
        scale = Decimal(UNITS[value["unit"]])
    if "scale" in value:
        given = value["scale"]
        if type(given) not in (int, float) or not given > 0 or given == float("inf"):
            raise keys.error(f"{key}.scale", f"must be a positive number; got {given!r}.")
        scale = Decimal(str(given)) if isinstance(given, float) else Decimal(given)
    return Number(key, add=add, subtract=subtract, scale=scale, nullable=nullable)


def _names(value: Any, key: str, keys: _Keys, *, empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise keys.error(key, "must be a list of column names.")
    if not value and not empty:
        raise keys.error(key, "must name at least one column.")
    return tuple(value)


def _flag(value: Any, key: str, keys: _Keys) -> Flag:
    if isinstance(value, bool):
        return Flag(key, constant=value)
    if isinstance(value, str):
        return Flag(key, column=value)
    raise keys.error(key, "must be true, false, or a column holding true/false (1/0, yes/no).")


def _spec(name: str, value: Any, key: str, keys: _Keys) -> Spec:
    if name in NUMBER_FIELDS:
        return _number(value, key, keys, nullable=name == "static_floor_bytes")
    if name in BOOL_FIELDS:
        return _flag(value, key, keys)
    return _template(value, key, keys)


def _fields(table: Any, key: str, keys: _Keys, allowed: tuple[str, ...]) -> dict[str, Spec]:
    if not isinstance(table, dict):
        raise keys.error(key, "must be a table.")
    specs: dict[str, Spec] = {}
    for name, value in table.items():
        if name == "readings" and key.startswith("waves["):
            continue
        if name not in allowed:
            hint = (
                f"a {'reading' if allowed is READING_LEVEL else 'wave'} sets only "
                + ", ".join(allowed)
                if name in ALL_FIELDS
                else "the fields are " + ", ".join(ALL_FIELDS)
            )
            raise keys.error(f"{key}.{name}", f"is not a field here: {hint}.")
        specs[name] = _spec(name, value, f"{key}.{name}", keys)
    return specs


def _compile(raw: dict[str, Any], keys: _Keys, path: Path) -> TableMapping:
    filters = _tests(_table(raw, "filter", keys), "filter", keys)
    require = _tests(_table(raw, "require", keys), "require", keys)
    derive: dict[str, tuple[Case, ...]] = {}
    for name, spec in _table(raw, "derive", keys).items():
        where = f"derive.{name}"
        if (
            not isinstance(spec, dict)
            or set(spec) != {"cases"}
            or not isinstance(spec["cases"], list)
        ):
            raise keys.error(
                where,
                'must be a table with one key, cases = [{ when = {...}, value = "..." }, ...].',
            )
        cases = []
        for i, case in enumerate(spec["cases"]):
            at = f"{where}.cases[{i}]"
            if not isinstance(case, dict) or "value" not in case or set(case) - {"when", "value"}:
                raise keys.error(
                    at,
                    'must be { when = { column = value, ... }, value = "template" } (when may be left out).',
                )
            when = case.get("when", {})
            if not isinstance(when, dict):
                raise keys.error(f"{at}.when", "must be a table of tests, { column = value }.")
            cases.append(
                Case(
                    _tests(when, f"{at}.when", keys), _template(case["value"], f"{at}.value", keys)
                )
            )
        if not cases:
            raise keys.error(where, "has no cases.")
        derive[name] = tuple(cases)

    run = _table(raw, "run", keys)
    for name in run:
        if name not in ("label", "identity"):
            raise keys.error(
                f"run.{name}", "is not a key of [run]; the keys are label and identity."
            )
    if "label" not in run:
        raise keys.error(
            "run.label", 'is missing: every mapping names its runs, e.g. label = "{model}-tp{tp}".'
        )
    label = _template(run["label"], "run.label", keys)
    identity = _names(run.get("identity", []), "run.identity", keys, empty=True)

    order = _table(raw, "order", keys)
    for name in order:
        if name not in ("by", "distinct", "shuffle", "seed"):
            raise keys.error(
                f"order.{name}",
                "is not a key of [order]; the keys are by, distinct, shuffle and seed.",
            )
    order_by = _names(order.get("by", []), "order.by", keys, empty=True)
    for name in ("distinct", "shuffle"):
        if not isinstance(order.get(name, False), bool):
            raise keys.error(f"order.{name}", "must be true or false.")
    seed = order.get("seed", 0)
    if type(seed) is not int or not 0 <= seed < 2**32:
        raise keys.error("order.seed", f"must be an integer from 0 to 2**32 - 1; got {seed!r}.")
    if order.get("distinct", False) and not order_by:
        raise keys.error("order.distinct", "needs order.by: the columns that must differ.")

    fields = _fields(raw.get("fields", {}), "fields", keys, ALL_FIELDS)
    waves_raw = raw.get("waves", [{}])
    if not isinstance(waves_raw, list) or not waves_raw:
        raise keys.error(
            "waves", "must be a list of tables, [[waves]], one per wave a row becomes."
        )
    waves = []
    for i, wave in enumerate(waves_raw):
        at = f"waves[{i}]"
        wave_specs = _fields(wave, at, keys, WAVE_LEVEL)
        readings_raw = wave.get("readings", [{}]) if isinstance(wave, dict) else None
        if not isinstance(readings_raw, list) or not readings_raw:
            raise keys.error(
                f"{at}.readings", "must be a list of tables, one per reading of the wave."
            )
        readings = tuple(
            _fields(r, f"{at}.readings[{j}]", keys, READING_LEVEL)
            for j, r in enumerate(readings_raw)
        )
        waves.append((wave_specs, readings))
    for name in ("signature", "packed_tokens", "peak_bytes"):
        if name not in fields and not all(
            name in wave or all(name in r for r in readings) for wave, readings in waves
        ):
            raise keys.error(f"fields.{name}", "is missing: every reading needs it.")

    extra: dict[str, Number | Template] = {}
    for name, value in _table(raw, "extra", keys).items():
        at = f"extra.{name}"
        if name in ALL_FIELDS or name in ("run", "seq", "step", "wave"):
            raise keys.error(
                at, "is a column of the trace format; set it under [fields], not [extra]."
            )
        if name in TYPED_EXTRA:
            if isinstance(value, str) and ("{" in value or "}" in value):
                raise keys.error(
                    at,
                    f"is a number column of the trace format ({TYPED_EXTRA[name]}): give a "
                    'whole number, a column name ("col") or { column = "col", unit = "MiB" }, '
                    f"as [fields] takes, not the template {value[:40]!r}.",
                )
            extra[name] = _number(value, at, keys, nullable=True)
        elif isinstance(value, str):
            extra[name] = _template(value, at, keys)
        else:
            extra[name] = _number(value, at, keys, nullable=True)

    metadata: dict[str, str] = {}
    for name, value in _table(raw, "metadata", keys).items():
        if name in RESERVED_METADATA:
            raise keys.error(
                f"metadata.{name}", "is written by warmfit itself; choose another key."
            )
        if not isinstance(value, str):
            raise keys.error(
                f"metadata.{name}",
                'must be a string; quote a key with dots in it ("warmfit.device" = "...").',
            )
        metadata[name] = value
    if "description" in raw and not isinstance(raw["description"], str):
        raise keys.error("description", "must be a string.")

    return TableMapping(
        path=path,
        resolved=raw,
        filters=filters,
        require=require,
        derive=derive,
        label=label,
        identity=identity,
        order_by=order_by,
        distinct=bool(order.get("distinct", False)),
        shuffle=bool(order.get("shuffle", False)),
        seed=seed,
        fields=fields,
        waves=tuple(waves),
        extra=extra,
        metadata=metadata,
    )


def check_columns(mapping: TableMapping, header: list[str], table: Path) -> None:
    """Refuse a mapping that names a column the table lacks, or a template name that is
    neither a column nor a derived value (defined before it)."""
    known = set(header)
    for column, key in mapping.columns().items():
        if column not in known:
            raise mapping_error(
                mapping, key, f"names the column '{column}', which {table} lacks", header
            )
    available = set(header)
    for name, cases in mapping.derive.items():
        if name in known:
            raise mapping_error(
                mapping,
                f"derive.{name}",
                f"'{name}' is already a column of {table}; name the derived value otherwise",
                header,
            )
        for i, case in enumerate(cases):
            _check_template(
                mapping, case.value, f"derive.{name}.cases[{i}].value", available, table, header
            )
        available.add(name)
    _check_template(mapping, mapping.label, "run.label", available, table, header)
    for key, spec in _templates_with_keys(mapping):
        _check_template(mapping, spec, key, available, table, header)


def _templates_with_keys(mapping: TableMapping) -> Iterator[tuple[str, Template]]:
    for name, spec in mapping.fields.items():
        if isinstance(spec, Template):
            yield f"fields.{name}", spec
    for name, spec in mapping.extra.items():
        if isinstance(spec, Template):
            yield f"extra.{name}", spec
    for i, (wave, readings) in enumerate(mapping.waves):
        for name, spec in wave.items():
            if isinstance(spec, Template):
                yield f"waves[{i}].{name}", spec
        for j, reading in enumerate(readings):
            for name, spec in reading.items():
                if isinstance(spec, Template):
                    yield f"waves[{i}].readings[{j}].{name}", spec


def _check_template(
    mapping: TableMapping,
    template: Template,
    key: str,
    available: set[str],
    table: Path,
    header: list[str],
) -> None:
    for name in template.names:
        if name not in available:
            raise mapping_error(
                mapping,
                key,
                f"names '{name}' in braces, which is neither a column of {table} nor a value derived before it",
                header,
            )


def mapping_error(mapping: TableMapping, key: str, problem: str, header: list[str]) -> UsageError:
    shown = ", ".join(header[:40]) + (f" and {len(header) - 40} more" if len(header) > 40 else "")
    return UsageError(f"{mapping.path}: {key}: {problem} (its columns: {shown}).")


# --------------------------------------------------------------------------- rows


@dataclass
class _Row:
    number: int  # counted from 1, the first row under the header
    line: int  # the file's line where the row starts
    cells: dict[str, str]


def read_table(path: Path) -> tuple[list[str], list[_Row], str]:
    """The header and rows of a CSV file (UTF-8, a byte-order mark allowed), and the
    SHA-256 of the bytes they were read from."""
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
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if not header:
            raise TraceError("has no header row: the first line must name the columns.", path=path)
        duplicated = sorted({c for c in header if header.count(c) > 1})
        if duplicated:
            raise TraceError(
                f"names a column twice in its header: {', '.join(duplicated)}.", path=path
            )
        rows: list[_Row] = []
        line = reader.line_num + 1
        for cells in reader:
            number = len(rows) + 1
            if len(cells) != len(header):
                if not cells:  # a blank line
                    line = reader.line_num + 1
                    continue
                raise TraceError(
                    f"has {len(cells)} cells where the header names {len(header)} columns "
                    f"(line {line}).",
                    path=path,
                    row=number,
                )
            rows.append(_Row(number, line, dict(zip(header, cells, strict=True))))
            line = reader.line_num + 1
    except csv.Error as exc:
        raise TraceError(
            f"is not valid CSV near line {reader.line_num}: {exc}.", path=path
        ) from None
    return header, rows, hashlib.sha256(raw).hexdigest()


class _Refuse:
    """Raises the error for one cell of one row."""

    def __init__(self, table: Path) -> None:
        self.table = table

    def __call__(self, row: _Row, column: str | None, problem: str) -> TraceError:
        return TraceError(
            f"{problem} (line {row.line}).", path=self.table, column=column, row=row.number
        )


def _passes(cells: Mapping[str, str], tests: Mapping[str, frozenset[str]]) -> bool:
    return all(cells[column] in values for column, values in tests.items())


def _parse(text: str) -> Decimal | None:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def _evaluate(spec: Number, row: _Row, refuse: _Refuse) -> int | None:
    if spec.constant is not None:
        return spec.constant
    cells: list[tuple[int, str, str, Decimal]] = []  # sign, column, text, value
    for sign, columns in ((1, spec.add), (-1, spec.subtract)):
        for column in columns:
            text = row.cells[column].strip()
            if text == "":
                if spec.nullable and len(spec.columns()) == 1:
                    return None
                raise refuse(row, column, f"is empty, where {spec.key} needs a number")
            value = _parse(text)
            if value is None:
                raise refuse(row, column, f"holds {text[:40]!r}, where {spec.key} needs a number")
            cells.append((sign, column, text, value))
    rounded: Decimal | None
    try:
        # the default context, whatever the caller's: an exponent beyond its Emax overflows
        with localcontext(Context(prec=28, traps=[Overflow, InvalidOperation])):
            total = sum((sign * value for sign, _, _, value in cells), Decimal(0))
            rounded = (total * spec.scale).to_integral_value(rounding=ROUND_HALF_EVEN)
    except Overflow:
        rounded = None
    if rounded is None or rounded.copy_abs() > _LARGEST:
        # compared as a Decimal: never int() or print a number of thousands of digits
        _, column, text, _ = max(cells, key=lambda cell: cell[3].copy_abs())
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise refuse(
            row,
            column,
            f"holds {shown!r}, which gives {spec.key} beyond 64 bits (a trace holds at most "
            f"{_LARGEST:,})",
        )
    result = int(rounded)
    if result < 0:
        raise refuse(row, spec.columns()[0], f"gives {spec.key} = {result}, below 0")
    return result


def _truth(spec: Flag, row: _Row, refuse: _Refuse) -> bool:
    if spec.constant is not None:
        return spec.constant
    assert spec.column is not None
    text = row.cells[spec.column].strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise refuse(
        row, spec.column, f"holds {text[:40]!r}, where {spec.key} needs true or false (1/0, yes/no)"
    )


def _values(mapping: TableMapping, row: _Row, refuse: _Refuse) -> dict[str, str]:
    values = dict(row.cells)
    for name, cases in mapping.derive.items():
        for case in cases:
            if _passes(values, case.when):
                values[name] = case.value.render(values)
                break
        else:
            tested = sorted({c for case in mapping.derive[name] for c in case.when})
            column = tested[0] if tested else None
            shown = ", ".join(f"{c}={values[c]!r}" for c in tested)
            raise refuse(row, column, f"matches no case of derive.{name} ({shown})")
    return values


def _reading_fields(
    specs: Mapping[str, Spec], values: dict[str, str], row: _Row, refuse: _Refuse
) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, spec in specs.items():
        if isinstance(spec, Number):
            out[name] = _evaluate(spec, row, refuse)
        elif isinstance(spec, Flag):
            out[name] = _truth(spec, row, refuse)
        else:
            out[name] = spec.render(values)
    return out


def _sort_key(columns: tuple[str, ...], rows: list[_Row]) -> Any:
    numeric = {c: all(_parse(r.cells[c]) is not None for r in rows) for c in columns}

    def key(row: _Row) -> tuple[Any, ...]:
        return tuple(_parse(row.cells[c]) if numeric[c] else row.cells[c] for c in columns)

    return key


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
    """The readings of a table, and what was done with its rows."""

    readings: Any  # a polars DataFrame
    metadata: dict[str, str]
    rows: int
    kept: int
    runs: int


def import_table(table: str | Path, mapping: TableMapping) -> Imported:
    """The readings ``mapping`` makes of ``table``'s rows, and the trace's metadata."""
    import numpy as np
    import polars as pl

    from warmfit.format.trace import conform

    table = Path(table)
    header, rows, digest = read_table(table)
    check_columns(mapping, header, table)
    refuse = _Refuse(table)
    runs: dict[str, list[tuple[_Row, dict[str, str]]]] = {}
    identities: dict[str, tuple[_Row, tuple[str, ...]]] = {}
    kept = 0
    for row in rows:
        if not _passes(row.cells, mapping.filters):
            continue
        for column, allowed in mapping.require.items():
            if row.cells[column] not in allowed:
                shown = ", ".join(repr(v) for v in sorted(allowed))
                raise refuse(
                    row,
                    column,
                    f"holds {row.cells[column][:40]!r}, where require.{column} allows only {shown}",
                )
        kept += 1
        values = _values(mapping, row, refuse)
        label = mapping.label.render(values)
        if not label:
            raise refuse(row, None, "gives an empty run label (run.label)")
        identity = tuple(row.cells[c] for c in mapping.identity)
        first = identities.setdefault(label, (row, identity))
        if first[1] != identity:
            column = next(
                c for c, a, b in zip(mapping.identity, first[1], identity, strict=True) if a != b
            )
            raise refuse(
                row,
                column,
                f"gives the run label {label!r} of row {first[0].number}, but another {column} "
                f"({row.cells[column][:40]!r}, not {first[1][mapping.identity.index(column)][:40]!r}): "
                "run.label must tell the runs of run.identity apart",
            )
        runs.setdefault(label, []).append((row, values))

    readings: list[dict[str, object]] = []
    sources: list[int] = []  # per reading, its table row (counted from 1)
    for label in sorted(runs):
        members = runs[label]
        if mapping.order_by:
            key = _sort_key(mapping.order_by, [r for r, _ in members])
            members = sorted(members, key=lambda m: key(m[0]))
            if mapping.distinct:
                for (a, _), (b, _) in itertools.pairwise(members):
                    if key(a) == key(b):
                        raise refuse(
                            b,
                            mapping.order_by[0],
                            f"repeats the {', '.join(mapping.order_by)} of row {a.number} in the run "
                            f"{label!r} (order.distinct): keep one, or tell them apart in run.label",
                        )
        if mapping.shuffle:
            members = [members[i] for i in shuffled_order(label, len(members), mapping.seed)]
        seq = 0
        for index, (row, values) in enumerate(members):
            base = _reading_fields(mapping.fields, values, row, refuse)
            extras = _reading_fields(mapping.extra, values, row, refuse)
            for sample, (wave_specs, reading_specs) in enumerate(mapping.waves):
                wave = base | _reading_fields(wave_specs, values, row, refuse)
                for reading_spec in reading_specs:
                    reading = wave | _reading_fields(reading_spec, values, row, refuse)
                    readings.append(
                        _reading(
                            reading,
                            label,
                            index,
                            index * len(mapping.waves) + sample,
                            seq,
                            row,
                            refuse,
                        )
                        | extras
                    )
                    sources.append(row.number)
                    seq += 1
    schema: dict[str, Any] = {
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
    for name, spec in mapping.extra.items():
        schema[name] = pl.Int64 if isinstance(spec, Number) else pl.String
    frame = pl.DataFrame(readings, schema=schema)
    # the trace's own row rules (estimate_bytes >= 0, padded_tokens >= packed_tokens,
    # sum_sq_tokens > 0, ...), naming the table's row: nothing 'warmfit validate' refuses
    conform(frame, table, np.array(sources, dtype=np.int64))
    metadata = dict(mapping.metadata)
    metadata[MAPPING_KEY] = json.dumps(mapping.resolved, ensure_ascii=False, separators=(",", ":"))
    metadata[SOURCE_KEY] = table.name
    metadata[SHA256_KEY] = digest
    return Imported(frame, metadata, rows=len(rows), kept=kept, runs=len(runs))


def _reading(
    values: dict[str, object], run: str, step: int, wave: int, seq: int, row: _Row, refuse: _Refuse
) -> dict[str, object]:
    kind = values.get("kind", "flat")
    phase = values.get("phase", "caller")
    packed = values["packed_tokens"]
    logical = values.get("logical_tokens", packed)
    assert isinstance(packed, int) and isinstance(logical, int)
    if packed <= 0:
        raise refuse(row, None, f"gives packed_tokens = {packed}; a wave has at least one token")
    if logical < packed:
        raise refuse(row, None, f"gives logical_tokens = {logical}, below packed_tokens = {packed}")
    if kind not in ("flat", "split_child", "dp_rank_forward"):
        raise refuse(row, None, f"gives kind {kind!r}: flat, split_child or dp_rank_forward")
    if phase not in ("forward", "caller"):
        raise refuse(row, None, f"gives phase {phase!r}: forward or caller")
    rank = values.get("rank", 0)
    assert isinstance(rank, int)
    if rank > _LARGEST_RANK:
        raise refuse(row, None, f"gives rank = {rank}, beyond int32")
    whole = values.get("whole", phase == "caller" and kind == "flat")
    if whole and not (phase == "caller" and kind == "flat"):
        raise refuse(
            row, None, "gives a whole reading that is not the caller reading of a flat wave"
        )
    return {
        "run": run,
        "rank": rank,
        "step": step,
        "wave": wave,
        "signature": values["signature"],
        "kind": kind,
        "packed_tokens": packed,
        "logical_tokens": logical,
        "output_bytes": values.get("output_bytes", 0),
        "baseline_bytes": values.get("baseline_bytes", 0),
        "static_floor_bytes": values.get("static_floor_bytes"),
        "oom": values.get("oom", False),
        "seq": seq,
        "phase": phase,
        "whole": whole,
        "peak_bytes": values["peak_bytes"],
    }
