"""The mapping of ``warmfit import table``: a TOML file read and checked, before any row.

Each value becomes a :class:`Spec` (a constant, a column or polars SQL
expression, an earlier table form, or a template); :mod:`warmfit.importers.table`
compiles them into polars expressions against the table's header and evaluates
them. docs/how-to/bring-your-own-measurements.md describes every key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warmfit.errors import UsageError
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
UNITS = {"B": 1} | {f"{p}iB": 2 ** (10 * i) for i, p in enumerate("KMGT", 1)}
UNITS |= {f"{p}B": 10 ** (3 * i) for i, p in enumerate("KMGT", 1)}

#: The reading fields, by the level that may set them: ``[fields]`` sets any, a
#: ``[[waves]]`` entry those of a wave and its readings, a reading its own.
NUMBER_FIELDS = tuple(
    [
        "rank",
        "packed_tokens",
        "logical_tokens",
        "output_bytes",
        "baseline_bytes",
        "peak_bytes",
        "static_floor_bytes",
    ]
)
TEXT_FIELDS = ("signature", "kind", "phase")
BOOL_FIELDS = ("whole", "oom")
READING_LEVEL = ("phase", "whole", "peak_bytes", "baseline_bytes", "oom")
WAVE_LEVEL = (
    *["signature", "kind", "packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes"],
    *READING_LEVEL,
)
ALL_FIELDS = ("rank", *WAVE_LEVEL)

_TOP_KEYS = tuple(
    [
        "extends",
        "description",
        "where",
        "filter",
        "require",
        "derive",
        "run",
        "order",
        "fields",
        "waves",
        "extra",
        "metadata",
    ]
)
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]|[^{}]+")
_NAME = re.compile(r"\w+")
#: A cell that is a decimal number (``1.5e3`` too; no ``inf`` or ``nan``).
_NUMBER = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
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
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")
#: Limits that keep an import's time and memory in proportion to its table: a row
#: becomes at most this many readings, and a table at most this many in all.
MAX_READINGS_PER_ROW = 1_000
MAX_READINGS = 20_000_000
#: The prefix of a column's text, as written in the table, in the working frame.
TEXT = "\x00text:"
_ROW = "\x00row"


# --------------------------------------------------------------------------- mapping


class _Keys:
    """Names a key of the mapping file in an error (``map.toml: fields.peak_bytes: ...``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, key: str, problem: str) -> UsageError:
        return UsageError(f"{self.path}: {key}: {problem}")


@dataclass(frozen=True)
class Spec:
    """One value of the mapping: a constant, a column or expression, or a template.

    ``kind`` is what the value must give: ``number``, ``flag``, ``text`` or
    ``value`` (an ``[extra]`` column, of the expression's own type). A number in
    the table form is ``(sum of add - sum of subtract) * scale``.
    """

    key: str
    kind: str
    constant: int | bool | None = None
    expression: str | None = None
    add: tuple[str, ...] = ()
    subtract: tuple[str, ...] = ()
    scale: int | float = 1
    parts: tuple[tuple[str, bool], ...] = ()  # a template: (text, is a placeholder)


@dataclass(frozen=True)
class Derived:
    """A named value: an expression, or the first of ``cases`` whose tests hold."""

    name: str
    expression: str | None
    cases: tuple[tuple[dict[str, frozenset[str]], Spec], ...] = ()


@dataclass(frozen=True)
class TableMapping:
    """A mapping read and checked: every key known, every value of its kind."""

    path: Path
    sources: tuple[Path, ...]  # the files read: the mapping and the one it extends
    resolved: dict[str, Any]
    where: str | None
    filters: dict[str, frozenset[str]]
    require: dict[str, frozenset[str]]
    require_sql: str | None
    derive: tuple[Derived, ...]
    label: Spec
    identity: tuple[str, ...]
    order_by: tuple[str, ...]
    distinct: bool
    shuffle: bool
    seed: int
    fields: dict[str, Spec]
    waves: tuple[tuple[dict[str, Spec], tuple[dict[str, Spec], ...]], ...]
    extra: dict[str, Spec] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)

    def readings_per_row(self) -> int:
        return sum(len(readings) for _, readings in self.waves)

    def baseline_given(self) -> bool:
        """Whether the mapping sets ``baseline_bytes`` anywhere."""
        levels = [self.fields, *(w for w, _ in self.waves)]
        levels += [r for _, readings in self.waves for r in readings]
        return any("baseline_bytes" in level for level in levels)


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
    except RecursionError:
        raise UsageError(
            f"{path}: the mapping nests tables or lists too deeply to read; a mapping "
            "needs three levels at most."
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: the mapping cannot be read ({exc.strerror or exc}).") from None


def load_mapping(path: str | Path) -> TableMapping:
    """Read and check a mapping file (``extends`` resolved), before any row is read."""
    path = Path(path)
    keys = _Keys(path)
    raw = _read_toml(path)
    sources = [path]
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
        sources.append(base_path)
    for key in raw:
        if key not in _TOP_KEYS:
            raise keys.error(key, f"is not a mapping key; the keys are {', '.join(_TOP_KEYS[1:])}.")
    return _compile(raw, keys, path, tuple(sources))


def _table(raw: dict[str, Any], key: str, keys: _Keys) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise keys.error(key, "must be a table.")
    return value


def _sql(value: Any, key: str, keys: _Keys) -> str:
    if not isinstance(value, str) or not value.strip():
        raise keys.error(key, "must be a polars SQL expression, as a string.")
    return value


def _tests(table: dict[str, Any], where: str, keys: _Keys) -> dict[str, frozenset[str]]:
    tests: dict[str, frozenset[str]] = {}
    for column, value in table.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(type(v) in (str, int) for v in values):
            raise keys.error(
                f"{where}.{column}",
                "must be a string or an integer (the cell equals it) or a list of them "
                "(the cell is one of them); for any other test write an expression, "
                'where = "...".',
            )
        tests[column] = frozenset(str(v) for v in values)
    return tests


def _template(value: Any, key: str, keys: _Keys) -> Spec:
    if not isinstance(value, str):
        raise keys.error(key, 'must be a string, a template such as "{model}-tp{tp}".')
    parts: list[tuple[str, bool]] = []
    for match in _TOKEN.finditer(value):
        token = match.group(0)
        if token in ("{", "}") or (match.group(1) is not None and not match.group(1).strip()):
            raise keys.error(
                key,
                f"{value!r} is not a template: name a column or write an expression in "
                "braces, {column}; write {{ or }} for a brace.",
            )
        if match.group(1) is not None:
            parts.append((match.group(1).strip(), True))
        else:
            parts.append((token[0] if token in ("{{", "}}") else token, False))
    return Spec(key, "text", parts=tuple(parts))


def _integer(value: int, key: str, keys: _Keys, largest: int = _LARGEST) -> int:
    if value < 0:
        raise keys.error(key, f"must not be negative; got {value}.")
    if value > largest:
        shown = f"{value:,}" if len(str(value)) <= 40 else f"a number of {len(str(value))} digits"
        raise keys.error(key, f"must be at most {largest:,}; got {shown}.")
    return value


def _number(value: Any, key: str, keys: _Keys) -> Spec:
    largest = _LARGEST_RANK if key.endswith(".rank") else _LARGEST
    if type(value) is int:
        return Spec(key, "number", constant=_integer(value, key, keys, largest))
    if isinstance(value, str):
        return Spec(key, "number", expression=_sql(value, key, keys))
    if not isinstance(value, dict):
        raise keys.error(
            key,
            'must be an integer, a column or an expression ("seq_len * batch"), or a table '
            'such as { column = "peak_mb", unit = "MiB" }.',
        )
    allowed = {"column", "add", "subtract", "unit", "scale"}
    for name in value:
        if name not in allowed:
            raise keys.error(
                f"{key}.{name}",
                f"is not a key of a number; the keys are {', '.join(sorted(allowed))} "
                '(or write an expression, "a + b - c").',
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
    scale: int | float = 1
    if "unit" in value and "scale" in value:
        raise keys.error(key, "give unit or scale, not both.")
    if "unit" in value:
        if value["unit"] not in UNITS:
            raise keys.error(
                f"{key}.unit", f"must be one of {', '.join(UNITS)}; got {value['unit']!r}."
            )
        scale = UNITS[value["unit"]]
    if "scale" in value:
        scale = value["scale"]
        if type(scale) not in (int, float) or not 0 < scale < float("inf"):
            raise keys.error(
                f"{key}.scale",
                f"must be a positive number; got {scale!r}. To combine columns, write an "
                'expression: "seq_len * batch".',
            )
    return Spec(key, "number", add=add, subtract=subtract, scale=scale)


def _names(value: Any, key: str, keys: _Keys, *, empty: bool = False) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise keys.error(key, "must be a list of column names.")
    if not value and not empty:
        raise keys.error(key, "must name at least one column.")
    return tuple(value)


def _spec(name: str, value: Any, key: str, keys: _Keys) -> Spec:
    if name in NUMBER_FIELDS:
        return _number(value, key, keys)
    if name in BOOL_FIELDS:
        if isinstance(value, bool):
            return Spec(key, "flag", constant=value)
        if isinstance(value, str):
            return Spec(key, "flag", expression=_sql(value, key, keys))
        raise keys.error(
            key, "must be true, false, or a column or expression that gives true or false."
        )
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


def _derive(raw: dict[str, Any], keys: _Keys) -> tuple[Derived, ...]:
    derived = []
    for name, spec in _table(raw, "derive", keys).items():
        where = f"derive.{name}"
        if isinstance(spec, str):
            derived.append(Derived(name, _sql(spec, where, keys)))
            continue
        if (
            not isinstance(spec, dict)
            or set(spec) != {"cases"}
            or not isinstance(spec["cases"], list)
        ):
            raise keys.error(
                where,
                "must be an expression (\"CASE WHEN gpu = 'A100' THEN 'a100' END\") or a table "
                'with one key, cases = [{ when = {...}, value = "..." }, ...].',
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
                (_tests(when, f"{at}.when", keys), _template(case["value"], f"{at}.value", keys))
            )
        if not cases:
            raise keys.error(where, "has no cases.")
        derived.append(Derived(name, None, tuple(cases)))
    return tuple(derived)


def _compile(
    raw: dict[str, Any], keys: _Keys, path: Path, sources: tuple[Path, ...]
) -> TableMapping:
    where = _sql(raw["where"], "where", keys) if "where" in raw else None
    filters = _tests(_table(raw, "filter", keys), "filter", keys)
    require_raw = raw.get("require", {})
    require_sql = _sql(require_raw, "require", keys) if isinstance(require_raw, str) else None
    require = (
        {} if require_sql is not None else _tests(_table(raw, "require", keys), "require", keys)
    )
    derive = _derive(raw, keys)

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
    per_row = sum(len(readings) for _, readings in waves)
    if per_row > MAX_READINGS_PER_ROW:
        raise keys.error(
            "waves",
            f"makes {per_row:,} readings of each row; warmfit takes at most "
            f"{MAX_READINGS_PER_ROW:,} (a row is one measurement of a few waves).",
        )
    for name in ("signature", "packed_tokens", "peak_bytes"):
        if name not in fields and not all(
            name in wave or all(name in r for r in readings) for wave, readings in waves
        ):
            raise keys.error(f"fields.{name}", "is missing: every reading needs it.")

    extra: dict[str, Spec] = {}
    for name, value in _table(raw, "extra", keys).items():
        at = f"extra.{name}"
        if name in ALL_FIELDS or name in ("run", "seq", "step", "wave"):
            raise keys.error(
                at, "is a column of the trace format; set it under [fields], not [extra]."
            )
        template = isinstance(value, str) and _PLACEHOLDER.search(value) is not None
        if name in TYPED_EXTRA:
            if template or (isinstance(value, str) and "{" in value):
                raise keys.error(
                    at,
                    f"is a number column of the trace format ({TYPED_EXTRA[name]}): give a "
                    'whole number, a column or expression ("col * 1024") or { column = "col", '
                    f'unit = "MiB" }}, as [fields] takes, not the template {value[:40]!r}.',
                )
            extra[name] = _number(value, at, keys)
        elif template:
            extra[name] = _template(value, at, keys)
        elif isinstance(value, str):
            extra[name] = Spec(at, "value", expression=_sql(value, at, keys))
        else:
            extra[name] = _number(value, at, keys)

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
        sources=sources,
        resolved=raw,
        where=where,
        filters=filters,
        require=require,
        require_sql=require_sql,
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
