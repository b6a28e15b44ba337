"""Read, validate and write warmfit traces (trace format v1, SPEC §2).

A trace is one or more Parquet files; a directory is read recursively, every
``*.parquet`` in it. :func:`read_trace` returns one polars frame of readings
in canonical order (``run``, ``rank``, ``seq``) after checking every rule of
the format, and raises :class:`~warmfit.errors.TraceError` naming the file,
column and row of the first broken rule otherwise.

Checking is vectorized: one pass computes whether any rule is broken, and
only then does a second pass find where, so a valid trace pays little.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from warmfit.errors import TraceError
from warmfit.format import pagecrc
from warmfit.format.files import find_trace_files
from warmfit.format.schema import (
    COLUMNS,
    ESTIMATE_COLUMN,
    KINDS,
    NULLABLE,
    OPTIONAL_COLUMNS,
    PADDED_COLUMN,
    PER_WAVE_KEY,
    PER_WAVE_MARKERS,
    PHASES,
    READING_MARKERS,
    REPLAY_COLUMNS,
    RESERVED_COLUMN,
    SCHEMA_KEY,
    SCHEMA_VERSION,
    SHAPE_COLUMNS,
    SUM_SQ_COLUMN,
    WAVE_CONSTANT,
)
from warmfit.format.writer import to_arrow as to_arrow  # re-exported: the one writer
from warmfit.format.writer import write_trace as write_trace
from warmfit.show.names import counted, printable

#: Canonical polars dtypes of the required columns.
POLARS_DTYPES: dict[str, pl.DataType] = {
    "run": pl.String(),
    "rank": pl.Int32(),
    "seq": pl.Int64(),
    "step": pl.Int64(),
    "wave": pl.Int64(),
    "signature": pl.String(),
    "kind": pl.String(),
    "phase": pl.String(),
    "whole": pl.Boolean(),
    "packed_tokens": pl.Int64(),
    "logical_tokens": pl.Int64(),
    "output_bytes": pl.Int64(),
    "baseline_bytes": pl.Int64(),
    "peak_bytes": pl.Int64(),
    "static_floor_bytes": pl.Int64(),
    "oom": pl.Boolean(),
}
#: Canonical polars dtypes of the optional columns (:data:`~warmfit.format.schema.OPTIONAL_COLUMNS`).
OPTIONAL_DTYPES: dict[str, pl.DataType] = {ESTIMATE_COLUMN: pl.Int64()}
#: Canonical polars dtypes of the columns that describe a wave's batch
#: (:data:`~warmfit.format.schema.SHAPE_COLUMNS`): checked where read, never read by replay.
SHAPE_DTYPES: dict[str, pl.DataType] = {PADDED_COLUMN: pl.Int64(), SUM_SQ_COLUMN: pl.Int64()}

_FIX_FORMAT = "See docs/reference/trace-format.md for the rules of trace format v1."


# --------------------------------------------------------------------------- file schema


def _string_like(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _string_like(t.value_type)
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _type_ok(expected: pa.DataType, actual: pa.DataType) -> bool:
    if pa.types.is_integer(expected):
        return bool(pa.types.is_integer(actual))
    if pa.types.is_string(expected):
        return _string_like(actual)
    return bool(actual == expected)


def _type_word(expected: pa.DataType) -> str:
    if pa.types.is_integer(expected):
        return f"an integer ({expected})"
    if pa.types.is_string(expected):
        return "a string"
    return str(expected)


def is_per_wave_file(schema: pa.Schema) -> bool:
    """Whether a Parquet schema is that of a ``--per-wave`` output, not a trace.

    By its ``warmfit.per_wave`` metadata, or else by its columns: every
    per-wave marker (``policy``, ``estimate_bytes``, ``over_estimate``) and
    no reading column (``seq``, ``phase``, ``peak_bytes``). A trace may carry
    ``estimate_bytes`` (SPEC §8), ``policy`` and ``over_estimate`` too (extra
    columns), but always with its reading columns.
    """
    if (schema.metadata or {}).get(PER_WAVE_KEY.encode()) == b"1":
        return True
    names = set(schema.names)
    return set(PER_WAVE_MARKERS) <= names and not names & set(READING_MARKERS)


def check_file_schema(path: Path) -> pa.Schema:
    """Open one file's footer and check its metadata and required columns."""
    try:
        schema = pq.read_schema(path)
    except (Exception, pl.exceptions.PanicException) as exc:  # damaged footers raise many kinds
        raise TraceError(
            f"is not a readable Parquet file ({type(exc).__name__}: {_short(exc)}).",
            path=path,
            fix="It may be truncated or not Parquet at all: re-export it, or run "
            "'warmfit recover' on the directory of a recording that crashed.",
        ) from None
    if is_per_wave_file(schema):
        raise TraceError(
            "is a per-wave file written by 'warmfit replay --per-wave', not a trace.",
            path=path,
            fix="Move it out of the trace directory (or name the trace files themselves); "
            "warmfit reads every *.parquet below a directory it is given.",
        )
    version = (schema.metadata or {}).get(SCHEMA_KEY.encode())
    if version is None:
        raise TraceError(
            f"has no '{SCHEMA_KEY}' metadata, so it is not a warmfit trace.",
            path=path,
            fix=f'Write it with the Parquet key-value metadata {SCHEMA_KEY}="{SCHEMA_VERSION}". '
            + _FIX_FORMAT,
        )
    if version.decode(errors="replace") != SCHEMA_VERSION:
        raise TraceError(
            f"has schema version {version.decode(errors='replace')!r}; this warmfit reads "
            f"version {SCHEMA_VERSION} only.",
            path=path,
            fix="Upgrade warmfit, or rewrite the trace as version 1.",
        )
    names = set(schema.names)
    for name in names:
        count = len(schema.get_all_field_indices(name))
        if count > 1:
            raise TraceError(
                f"appears {count} times; every column name must be unique.",
                path=path,
                column=name,
                fix="Drop or rename the duplicates when writing the trace.",
            )
    for column, expected in COLUMNS.items():
        if column not in names:
            raise TraceError(
                "required column is missing.",
                path=path,
                column=column,
                fix=f"Add it as {_type_word(expected)}. " + _FIX_FORMAT,
            )
        actual = schema.field(column).type
        if not _type_ok(expected, actual):
            raise TraceError(
                f"has type {actual}; it must be {_type_word(expected)}.",
                path=path,
                column=column,
                fix="Cast the column when writing the trace. " + _FIX_FORMAT,
            )
    for column, expected in (*OPTIONAL_COLUMNS.items(), *SHAPE_COLUMNS.items()):
        found = schema.field(column).type if column in names else None
        if found is not None and not (_type_ok(expected, found) or pa.types.is_null(found)):
            raise TraceError(
                f"has type {found}; this optional column must be "
                f"{_type_word(expected)} (nullable) when a trace carries it.",
                path=path,
                column=column,
                fix="Cast the column when writing the trace, or drop it. " + _FIX_FORMAT,
            )
    return schema


def optional_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The optional columns with a meaning (:data:`~warmfit.format.schema.OPTIONAL_COLUMNS`)
    a file's schema has, which a replay reads beside the required ones."""
    return tuple(c for c in OPTIONAL_COLUMNS if c in schema.names)


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class _RowRule:
    column: str
    broken: pl.Expr
    problem: str
    fix: str


def _row_rules(optional: Sequence[str] = ()) -> list[_RowRule]:
    """The rules one row must keep; those of the ``optional`` columns a frame has too."""
    rules = [
        _RowRule(
            c,
            pl.col(c).is_null(),
            "is null; every reading needs a value here.",
            "Fill the value, or drop the reading.",
        )
        for c in COLUMNS
        if c not in NULLABLE
    ]
    nonneg = "Byte counts and ranks are never negative: check how the trainer measured it."
    rules += [
        _RowRule("rank", pl.col("rank") < 0, "is negative; ranks are >= 0.", nonneg),
        _RowRule(
            "kind",
            _none_of("kind", KINDS),
            "is not a known kind; it must be one of " + ", ".join(KINDS) + ".",
            _FIX_FORMAT,
        ),
        _RowRule(
            "phase",
            _none_of("phase", PHASES),
            "is not a known phase; it must be 'forward' or 'caller'.",
            _FIX_FORMAT,
        ),
        _RowRule(
            "whole",
            pl.col("whole") & (pl.col("phase") != "caller"),
            "is true on a forward reading; only a caller reading may be whole.",
            "Set whole=false on forward readings.",
        ),
        _RowRule(
            "whole",
            pl.col("whole") & (pl.col("kind") != "flat"),
            "is true on a split_child or dp_rank_forward wave; only the caller reading of a "
            "flat wave may be whole (split children and forward-only calls observe forward "
            "only, so their peaks never cover a whole wave).",
            "Set whole=false on readings of split_child and dp_rank_forward waves.",
        ),
        _RowRule(
            "packed_tokens",
            pl.col("packed_tokens") <= 0,
            "is not positive; every wave runs at least one packed token.",
            "Drop empty waves before writing the trace.",
        ),
        _RowRule(
            "logical_tokens",
            pl.col("logical_tokens") < pl.col("packed_tokens"),
            "is below packed_tokens; logical tokens (before prefix sharing) are never "
            "fewer than packed tokens.",
            "Check that the two columns are not swapped.",
        ),
    ]
    rules += [
        _RowRule(c, pl.col(c) < 0, "is negative.", nonneg)
        for c in ("output_bytes", "baseline_bytes", "peak_bytes", "static_floor_bytes")
    ]
    if ESTIMATE_COLUMN in optional:
        rules.append(
            _RowRule(
                ESTIMATE_COLUMN,
                pl.col(ESTIMATE_COLUMN) < 0,
                "is negative; the price a trainer used for a wave is a number of bytes >= 0 "
                "(null where it recorded none).",
                "Write null for a wave the trainer did not price. " + _FIX_FORMAT,
            )
        )
    if PADDED_COLUMN in optional:
        rules.append(
            _RowRule(
                PADDED_COLUMN,
                pl.col(PADDED_COLUMN) < pl.col("packed_tokens"),
                "is below packed_tokens; the tokens of a wave's batch, padding included, are "
                "never fewer than its packed tokens (null where unknown).",
                "Write the batch's rows times its width, or null. " + _FIX_FORMAT,
            )
        )
    if SUM_SQ_COLUMN in optional:
        rules.append(
            _RowRule(
                SUM_SQ_COLUMN,
                pl.col(SUM_SQ_COLUMN) <= 0,
                "is not positive; the sum of a wave's squared sequence lengths is at least 1 "
                "(null where unknown).",
                "Write the sum over the wave's sequences of their length squared, or null. "
                + _FIX_FORMAT,
            )
        )
    return rules


def _none_of(column: str, values: Sequence[str]) -> pl.Expr:
    """Whether ``column`` is none of a few strings (null where it is null).

    The same truth as ``~is_in(values)``; one comparison a value costs polars
    less than ``is_in`` on a string column (1.2 ms against 1.8 ms for three
    values on 312k readings).
    """
    return ~pl.any_horizontal(pl.col(column) == value for value in values)


def _check_rows(frame: pl.DataFrame, path: Path, rows: np.ndarray | None = None) -> None:
    """Raise on the first broken row rule; ``rows`` numbers the frame's rows in the
    file when the frame is a part of it (else row i is the file's row i)."""
    rules = _row_rules([c for c in (*OPTIONAL_DTYPES, *SHAPE_DTYPES) if c in frame.columns])
    broken = frame.select(
        [r.broken.fill_null(False).any().alias(str(i)) for i, r in enumerate(rules)]
    ).row(0)
    for rule, is_broken in zip(rules, broken, strict=True):
        if not is_broken:
            continue
        hits = frame.select(rule.broken.fill_null(False).arg_true()).to_series()
        row = int(hits[0])
        value = frame.get_column(rule.column)[row]
        more = f" ({len(hits) - 1} more rows break this rule.)" if len(hits) > 1 else ""
        raise TraceError(
            f"value {value!r} {rule.problem}{more}",
            path=path,
            column=rule.column,
            row=row if rows is None else int(rows[row]),
            fix=rule.fix,
        )


def _read_file(path: Path, columns: Sequence[str] | None) -> pl.DataFrame:
    wanted = wanted_columns(check_file_schema(path), columns)
    return conform(_read_columns(path, wanted), path)


def wanted_columns(schema: pa.Schema | None, columns: Sequence[str] | None) -> list[str]:
    """The columns to load of a file: all (``columns`` None: the file's ``schema``
    says which), or replay's and ``columns``, and the optional columns with a meaning
    the file has (:func:`optional_columns`; none without a ``schema``)."""
    if columns is None:
        assert schema is not None, "all columns: give the file's schema"
        return list(COLUMNS) + [n for n in schema.names if n not in COLUMNS]
    optional = optional_columns(schema) if schema is not None else ()
    return list(dict.fromkeys([*REPLAY_COLUMNS, *columns, *optional]))


def conform(frame: pl.DataFrame, path: Path, rows: np.ndarray | None = None) -> pl.DataFrame:
    """Cast a file's columns to the v1 dtypes and check every row rule.

    ``frame`` holds some of ``path``'s rows (all of them, or those ``rows``
    numbers); a value that does not fit or breaks a rule raises
    :class:`TraceError` naming the file, column and row.
    """
    for name in frame.columns:
        target = POLARS_DTYPES.get(name) or OPTIONAL_DTYPES.get(name) or SHAPE_DTYPES.get(name)
        if target is None or frame.schema[name] == target:
            continue
        try:
            frame = frame.with_columns(pl.col(name).cast(target, strict=True))
        except pl.exceptions.PolarsError:
            fits = pl.col(name).cast(target, strict=False).is_not_null() | pl.col(name).is_null()
            row = int(frame.select((~fits).arg_true().first()).item())
            raise TraceError(
                f"value {frame.get_column(name)[row]!r} does not fit the column's type ({target}).",
                path=path,
                column=name,
                row=row if rows is None else int(rows[row]),
                fix="Check how the trainer measured it; " + _FIX_FORMAT,
            ) from None
    _check_rows(frame, path, rows)
    return frame


def _short(exc: BaseException, limit: int = 300) -> str:
    """An exception's text on one line, cut to ``limit`` characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _read_columns(path: Path, columns: Sequence[str]) -> pl.DataFrame:
    """Read columns of one file after verifying every Parquet page checksum it carries.

    The checksums are verified by :mod:`warmfit.format.pagecrc` (CRC-32 of each
    page, no decoding), then polars reads the columns. Any error from either,
    a polars panic included, is a :class:`TraceError` naming the file.
    """
    verify_pages(path)
    return read_rows(path, columns)


_DAMAGED = (
    "The file is damaged (a flipped bit, a truncated copy): restore it from a good copy "
    "or re-export it, or run 'warmfit recover' on the directory of a recording that "
    "crashed."
)


def verify_pages(path: Path, groups: Sequence[pagecrc.RowGroup] | None = None) -> None:
    """Raise :class:`TraceError` unless every Parquet page checksum of ``path`` (of
    its row ``groups``, when given) holds."""
    try:
        problem = pagecrc.verify(path, groups)
    except (Exception, pl.exceptions.PanicException) as exc:
        problem = f"its pages cannot be walked ({type(exc).__name__}: {_short(exc)})"
    if problem is not None:
        raise TraceError(f"is damaged: {problem}.", path=path, fix=_DAMAGED)


def row_groups(path: Path) -> list[pagecrc.RowGroup]:
    """The row groups ``path``'s footer describes (:func:`warmfit.format.pagecrc.row_groups`);
    a damaged footer is a :class:`TraceError`."""
    try:
        groups = pagecrc.row_groups(path)
    except (Exception, pl.exceptions.PanicException) as exc:
        groups = f"its footer cannot be read ({type(exc).__name__}: {_short(exc)})"
    if isinstance(groups, str):
        raise TraceError(f"is damaged: {groups}.", path=path, fix=_DAMAGED)
    return groups


def read_rows(
    path: Path,
    columns: Sequence[str],
    start: int = 0,
    length: int | None = None,
    *,
    rechunk: bool = True,
) -> pl.DataFrame:
    """Columns of rows ``[start, start + length)`` of a file whose pages were verified
    (:func:`verify_pages`); any error reading them is a :class:`TraceError`.
    ``rechunk=False`` leaves a slice in one chunk per row group."""
    try:
        # glob=False: a file name with * or [ is a name, not a pattern.
        if start == 0 and length is None:
            return pl.read_parquet(path, columns=list(columns), glob=False)
        scan = pl.scan_parquet(path, glob=False).select(columns)
        # one buffer a column (a slice comes in one chunk per row group): gathers
        # and numpy conversions of chunked columns cost more than this copy
        frame = scan.slice(start, length).collect()
        return frame.rechunk() if rechunk else frame
    except (Exception, pl.exceptions.PanicException) as exc:  # damaged data raises many kinds
        raise TraceError(
            f"could not be read ({type(exc).__name__}: {_short(exc)}).", path=path, fix=_DAMAGED
        ) from None


# --------------------------------------------------------------------------- trace


class TraceProblems(TraceError):
    """Several files of one trace are invalid; ``problems`` holds one error each."""

    def __init__(self, problems: list[TraceError]) -> None:
        self.problems = problems
        super().__init__(
            f"{counted(len(problems), 'trace file')} {'is' if len(problems) == 1 else 'are'} invalid:\n"
            + "\n".join(f"  {p}" for p in problems)
        )


def read_trace(
    paths: Iterable[str | os.PathLike[str]],
    columns: Sequence[str] | None = None,
    *,
    all_problems: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """Read and validate a trace; return its readings sorted by run, rank, seq.

    ``columns`` names columns to load beside those replay needs (every
    required column is still checked in each file's footer); by default all
    columns are loaded, extra ones included. Raises :class:`TraceError` on the first broken rule, or
    with ``all_problems`` :class:`TraceProblems` naming the first broken rule
    of every invalid file. ``progress(done, total)``, when given, is called
    with 0 files done and then after each file (see :mod:`warmfit.show.progress`).
    """
    files = find_trace_files(paths)
    frames = []
    problems: list[TraceError] = []
    if progress is not None:
        progress(0, len(files))
    for done, f in enumerate(files, 1):
        try:
            frames.append(_read_file(f, columns))
        except TraceError as exc:
            if not all_problems:
                raise
            problems.append(exc)
        if progress is not None:
            progress(done, len(files))
    if problems:
        raise TraceProblems(problems)
    return canonical(_concat(frames, files) if len(frames) > 1 else frames[0], files).frame


class Canonical(NamedTuple):
    """Readings in canonical order, checked, and how their rows lie (for the pricing)."""

    frame: pl.DataFrame
    #: Per row, the number of its (run, rank) stream (:func:`stream_numbers`).
    stream: np.ndarray
    #: A stable order of the rows by (stream, wave) (:func:`wave_order`); None
    #: where they are in that order already.
    by_wave: np.ndarray | None
    #: Per row, a number for its signature (:func:`signature_codes`).
    signature: np.ndarray


def canonical(frame: pl.DataFrame, files: list[Path]) -> Canonical:
    """Readings of whole streams from ``files``, sorted by run, rank and seq, after
    the rules that span rows (:func:`check_across_rows`), with their stream numbers
    and their order by wave."""
    stream = stream_numbers(frame)
    if not in_canonical_order(frame, stream):
        frame = frame.sort(["run", "rank", "seq"], maintain_order=True)
        stream = stream_numbers(frame)
    signature = signature_codes(frame)
    by_wave = check_across_rows(frame, stream, files, {"signature": signature})
    return Canonical(frame, stream, by_wave, signature)


def signature_codes(frame: pl.DataFrame) -> np.ndarray:
    """Per row, a number for its signature: equal numbers, equal signatures (int64)."""
    codes = frame.get_column("signature").cast(pl.Categorical).to_physical().cast(pl.Int64)
    return codes.to_numpy()


def _concat(frames: list[pl.DataFrame], files: list[Path]) -> pl.DataFrame:
    """The files' readings as one frame; an extra column must have one type in all files."""
    first: dict[str, tuple[pl.DataType, Path]] = {}
    for frame, path in zip(frames, files, strict=True):
        for name, dtype in frame.schema.items():
            if name in POLARS_DTYPES:
                continue
            seen = first.setdefault(name, (dtype, path))
            if seen[0] != dtype and not (seen[0].is_numeric() and dtype.is_numeric()):
                raise TraceError(
                    f"has type {dtype} here but {seen[0]} in {seen[1]}; an extra column must "
                    "have one type across the files of a trace.",
                    path=path,
                    column=name,
                    fix="Write the column with one type in every file, or rename it in one "
                    "of them.",
                )
    try:
        return pl.concat(frames, how="diagonal_relaxed")
    except (Exception, pl.exceptions.PanicException) as exc:
        raise TraceError(
            f"the files {', '.join(map(str, files[:4]))} cannot be combined into one trace "
            f"({type(exc).__name__}: {_short(exc)}).",
            fix="Give each extra column one type across the files.",
        ) from None


def check_across_rows(
    frame: pl.DataFrame,
    stream: np.ndarray,
    files: list[Path],
    codes: dict[str, np.ndarray] | None = None,
) -> np.ndarray | None:
    """Rules that span rows: unique seq per stream, wave constants agree.

    ``frame`` is in canonical order, its row rules checked (:func:`conform`),
    and ``stream`` numbers its (run, rank) streams; ``codes``: per string
    column, a number per row, equal where the strings are. Returns the stable
    order of the rows by (stream, wave) (:func:`wave_order`: None where they
    are in it already).
    """
    same_stream = (pl.col("run") == pl.col("run").shift(1)) & (
        pl.col("rank") == pl.col("rank").shift(1)
    )
    if "seq" in frame.columns and frame.height > 1:
        seq = _numpy(frame.get_column("seq").cast(pl.Int64))
        dup = bool(((stream[1:] == stream[:-1]) & (seq[1:] == seq[:-1])).any())
        del seq
        if dup:
            hit = frame.filter(same_stream & (pl.col("seq") == pl.col("seq").shift(1))).row(
                0, named=True
            )
            places = _locate(files, hit["run"], hit["rank"], "seq", hit["seq"])
            raise TraceError(
                f"seq {hit['seq']} appears more than once in run {hit['run']!r}, rank "
                f"{hit['rank']} (at {places}); seq must be unique within (run, rank).",
                column="seq",
                path=_first_path(places, files),
                fix="Number the readings of each rank once, or remove the duplicated file. "
                "Two recordings with one run label (warmfit record names a run after its -o "
                "folder) collide like this: record one again with --run NAME.",
            )
    constant = [c for c in WAVE_CONSTANT if c in frame.columns]
    if "wave" not in frame.columns:
        return None
    if not constant:
        return wave_order(stream, _numpy(frame.get_column("wave").cast(pl.Int64)))
    may_disagree, by_wave = _waves_may_disagree(frame, constant, stream, codes or {})
    if not may_disagree:
        return by_wave
    disagree = (
        frame.group_by(["run", "rank", "wave"])
        .agg([(pl.col(c).n_unique() > 1).alias(c) for c in constant])
        .filter(pl.any_horizontal(constant))
    )
    if disagree.height:
        hit = disagree.sort(["run", "rank", "wave"]).row(0, named=True)
        column = next(c for c in constant if hit[c])
        places = _locate(files, hit["run"], hit["rank"], "wave", hit["wave"])
        raise TraceError(
            f"the readings of wave {hit['wave']} (run {hit['run']!r}, rank {hit['rank']}, at "
            f"{places}) disagree on {column}; all readings of one wave must agree on "
            + ", ".join(WAVE_CONSTANT)
            + ".",
            column=column,
            path=_first_path(places, files),
            fix="Give the wave's readings the same values, or distinct wave ids if they are "
            "different waves.",
        )
    return by_wave


def stream_numbers(frame: pl.DataFrame) -> np.ndarray:
    """Per row, the number of its run of equal (run, rank): a stream, on a sorted frame."""
    return frame.select(pl.struct("run", "rank").rle_id()).to_series().to_numpy()


def in_canonical_order(frame: pl.DataFrame, stream: np.ndarray) -> bool:
    """Whether rows are already sorted by run, rank, seq (then sorting is skipped).

    Within a stretch of equal (run, rank), seq must not decrease (numpy, on
    the column's buffers); where (run, rank) changes, it must increase,
    which is checked on those few rows only.
    """
    if frame.height < 2:
        return True
    same = stream[1:] == stream[:-1]
    seq = _numpy(frame.get_column("seq").cast(pl.Int64))
    if (same & (seq[1:] < seq[:-1])).any():
        return False
    del seq
    heads = np.concatenate(([0], np.flatnonzero(~same) + 1))
    run, rank = pl.col("run"), pl.col("rank")
    after = (run > run.shift(1)) | ((run == run.shift(1)) & (rank > rank.shift(1)))
    return bool(frame.select("run", "rank")[heads].select(after.fill_null(True).all()).item())


#: Whether the known kinds differ in length in bytes: then, once the row rules
#: let only them through, a kind's length names it.
_KINDS_DIFFER_IN_LENGTH = len({len(k.encode()) for k in KINDS}) == len(KINDS)


def _waves_may_disagree(
    frame: pl.DataFrame, constant: Sequence[str], stream: np.ndarray, codes: dict[str, np.ndarray]
) -> tuple[bool, np.ndarray | None]:
    """Quick check, on a frame sorted by run, rank, seq: may a wave's readings disagree?
    And the stable order of the rows by (stream, wave) (:func:`wave_order`; None:
    they were in it already).

    Sorting the readings by (stream, wave) puts each wave's readings side by
    side; a wave disagrees when two neighbours of one wave differ. Recorders
    number waves in order, so this sort is nearly free, where grouping by
    wave is not, and it is skipped when the readings are in that order
    already. ``True`` sends the caller to the slow path that names the wave.
    """
    if frame.height < 2:
        return False, None
    # Strings as the numbers given, a kind as its length (the known kinds, the
    # only ones the row rules let through, differ in length), others as 64-bit
    # hashes (two different strings share one with odds of 2**-64, and then
    # this quick check would miss them); integers straight from polars'
    # buffers: few temporaries, so little memory is held afterwards.
    strings = [c for c in constant if frame.schema[c] == pl.String() and c not in codes]
    codes = dict(codes)
    if "kind" in strings and _KINDS_DIFFER_IN_LENGTH:
        codes["kind"] = _numpy(frame.get_column("kind").str.len_bytes().cast(pl.Int64))
        strings.remove("kind")
    hashed = frame.select(pl.col(c).hash() for c in strings)
    for c in strings:
        codes[c] = hashed.get_column(c).to_numpy()
    wave = _numpy(frame.get_column("wave").cast(pl.Int64))
    order = wave_order(stream, wave)
    if order is not None:
        stream = stream[order]
        wave = wave[order]
    same_wave = (stream[1:] == stream[:-1]) & (wave[1:] == wave[:-1])
    del stream, wave
    for c in constant:
        if c in codes:
            values = codes[c]
        else:
            # negative values were rejected, so -1 stands for null
            column = frame.get_column(c).cast(pl.Int64)
            values = _numpy(column.fill_null(-1) if column.null_count() else column)
        if order is not None:
            values = values[order]
        if (same_wave & (values[1:] != values[:-1])).any():
            return True, order
    return False, order


def wave_order(stream: np.ndarray, wave: np.ndarray) -> np.ndarray | None:
    """A stable order of rows by (stream, wave), ``stream`` numbering them in
    increasing order; None where the one-key pass finds the rows in that order.

    Recorders number waves in order, so one pass over one integer key usually
    finds them in order; else a stable sort of that key, or of both columns (an
    order even for rows in order) when the wave ids span too much for one int64.
    """
    if len(stream) < 2:
        return None
    low, span = int(wave.min()), int(wave.max()) - int(wave.min()) + 1
    if int(stream[-1]) * span + span >= 2**63:
        return np.lexsort((wave, stream))
    key = stream.astype(np.int64) * span
    key += wave - low
    if bool((key[1:] >= key[:-1]).all()):
        return None
    return np.argsort(key, kind="stable")


def _numpy(series: pl.Series) -> np.ndarray:
    """A non-null numeric column as one numpy array, chunk by chunk (no polars copy)."""
    parts = [chunk.to_numpy() for chunk in series.get_chunks()]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _first_path(places: str, files: list[Path]) -> str | None:
    return max((str(f) for f in files if places.startswith(f"{f} row ")), key=len, default=None)


def _locate(files: list[Path], run: str, rank: int, column: str, value: int) -> str:
    """Where (file and row) the readings with ``column == value`` of a stream are."""
    found = []
    for path in files:
        hits = (
            _read_columns(path, ["run", "rank", column])
            .with_row_index("__row")
            .filter(
                (pl.col("run").cast(pl.String) == run)
                & (pl.col("rank") == rank)
                & (pl.col(column) == value)
            )
        )
        found += [f"{path} row {r}" for r in hits["__row"].to_list()]
    return ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")


# --------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class TraceSummary:
    """What ``warmfit validate`` reports about a valid trace."""

    files: int
    runs: int
    ranks: int
    signatures: int
    waves: int
    readings: int

    @classmethod
    def of(cls, frame: pl.DataFrame, files: int) -> TraceSummary:
        if frame.height == 0:
            return cls(files, 0, 0, 0, 0, 0)
        row = frame.select(
            pl.col("run").n_unique().alias("runs"),
            pl.struct("run", "rank").n_unique().alias("ranks"),
            pl.col("signature").n_unique().alias("signatures"),
            pl.struct("run", "rank", "wave").n_unique().alias("waves"),
        ).row(0, named=True)
        return cls(files=files, readings=frame.height, **row)


def signature_counts(frame: pl.DataFrame) -> pl.DataFrame:
    """Per ``(run, signature)``, sorted: waves, readings, whole and OOM readings.

    Adds ``reserved_peak_bytes`` (the largest; null where none was recorded)
    when the frame has that column as integers.
    """
    waves = frame.group_by("run", "signature").agg(
        pl.struct("rank", "wave").n_unique().cast(pl.Int64).alias("waves")
    )
    counts = reading_counts(frame).join(waves, on=["run", "signature"])
    if RESERVED_COLUMN in frame.columns and frame.schema[RESERVED_COLUMN].is_integer():
        reserved = frame.group_by("run", "signature").agg(
            pl.col(RESERVED_COLUMN).max().cast(pl.Int64)
        )
        counts = counts.join(reserved, on=["run", "signature"])
    return counts.sort("run", "signature")


def file_metadata(files: Iterable[Path]) -> list[dict[str, str]]:
    """Each file's Parquet key-value metadata (what the recorder wrote there), as text."""
    found = []
    for path in files:
        try:
            raw = pq.read_schema(path).metadata or {}
        except (Exception, pl.exceptions.PanicException):  # read_trace checked it already
            raw = {}
        found.append(
            {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
        )
    return found


def metadata_total(metadata: Iterable[dict[str, str]], key: str) -> int:
    """The sum of a count the files' metadata carry under ``key`` (a non-number counts 0).

    >>> metadata_total([{"warmfit.skipped_waves": "3"}, {}, {"warmfit.skipped_waves": "x"}],
    ...                "warmfit.skipped_waves")
    3
    """
    total = 0
    for meta in metadata:
        text = meta.get(key, "0")
        total += int(text) if text.isdecimal() else 0
    return total


# --------------------------------------------------------------------------- whole readings

#: Where the fix for a run without whole readings is documented.
WHOLE_DOCS = "docs/reference/recorder.md, 'What \"whole\" means here'"


def reading_counts(frame: pl.DataFrame) -> pl.DataFrame:
    """Per ``(run, signature)``: readings, flat readings, whole readings and OOM readings.

    A whole reading counts only when it did not run out of memory (``whole &
    ~oom``): replay never learns from an OOM reading. Works on any frame with
    the columns ``run``, ``signature``, ``whole`` and ``oom`` (and ``kind``:
    without it every reading counts as flat); the
    counts are sums, so the counts of parts of a trace, concatenated, give the
    trace's (:func:`pairs_without_whole` adds them up).
    """
    whole = pl.col("whole").fill_null(False) & ~pl.col("oom").fill_null(False)
    flat = (pl.col("kind") == "flat") if "kind" in frame.columns else pl.repeat(True, pl.len())
    return frame.group_by("run", "signature").agg(
        pl.len().cast(pl.Int64).alias("readings"),
        flat.sum().cast(pl.Int64).alias("flat_readings"),
        whole.sum().cast(pl.Int64).alias("whole_readings"),
        pl.col("oom").fill_null(False).sum().cast(pl.Int64).alias("oom_readings"),
    )


def pairs_without_whole(counts: pl.DataFrame) -> pl.DataFrame:
    """The sorted ``(run, signature)`` pairs of :func:`reading_counts` with no whole reading.

    ``counts`` may hold several rows per pair (the counts of parts of a
    trace, concatenated): they are added up first. Only pairs with a flat
    reading are named: split children and forward-only calls never record a
    whole reading, so a signature of those alone has nothing to fix.
    """
    return (
        counts.group_by("run", "signature")
        .agg(pl.col("flat_readings").sum(), pl.col("whole_readings").sum())
        .filter((pl.col("flat_readings") > 0) & (pl.col("whole_readings") == 0))
        .select("run", "signature")
        .sort("run", "signature")
    )


def without_whole(frame: pl.DataFrame) -> pl.DataFrame:
    """The sorted ``(run, signature)`` pairs that have flat readings but no whole one.

    A whole reading is ``whole & ~oom``. warm-fit learns its warm rate from
    whole readings only, so on these pairs it prices exactly as max-merge:
    usually the trainer never calls ``wave.forward_done()``. The frame may be
    a part of a trace; to combine parts, concatenate their
    :func:`reading_counts` and pass that to :func:`pairs_without_whole`.

    >>> frame = readings_frame([dict(seq=0, wave=0, signature="s", packed_tokens=1,
    ...                              logical_tokens=1, peak_bytes=9)])
    >>> without_whole(frame).rows()
    [('run', 's')]
    """
    return pairs_without_whole(reading_counts(frame))


def no_whole_warning(pairs: pl.DataFrame | Iterable[tuple[str, str]], shown: int = 5) -> str:
    """The warning for pairs from :func:`without_whole` (``""`` when there are none).

    Names the run and signature of up to ``shown`` pairs (escaped with
    :func:`warmfit.show.names.printable`), what it means and the fix.
    """
    rows = pairs.rows() if isinstance(pairs, pl.DataFrame) else list(pairs)
    if not rows:
        return ""
    named = ", ".join(
        f"run '{printable(str(run))}' signature '{printable(str(sig))}'"
        for run, sig in rows[:shown]
    )
    if len(rows) > shown:
        named += f" and {len(rows) - shown} more"
    return (
        f"warmfit: warning: no whole reading in {named}: warm-fit and envelope have "
        "nothing to learn from there and price exactly as max-merge. A caller reading is whole only when "
        "the trainer calls wave.forward_done() between the forward and the backward "
        f"(see {WHOLE_DOCS})."
    )


# --------------------------------------------------------------------------- write


# --------------------------------------------------------------------------- build

_DEFAULTS: dict[str, object] = {
    "run": "run",
    "rank": 0,
    "step": None,
    "kind": "flat",
    "phase": "caller",
    "whole": False,
    "output_bytes": 0,
    "baseline_bytes": 0,
    "static_floor_bytes": None,
    "oom": False,
}


def readings_frame(rows: Sequence[dict[str, object]]) -> pl.DataFrame:
    """Build a frame of readings from dicts, with v1 dtypes and defaults.

    Each dict needs ``seq``, ``wave``, ``signature``, ``packed_tokens``,
    ``logical_tokens`` and ``peak_bytes``; the rest default to run ``"run"``,
    rank 0, a flat caller reading that is not whole, no outputs, a zero
    baseline, no floor, no step and no OOM. A dict may give ``estimate_bytes``
    (SPEC §8, the price the trainer used), ``padded_tokens`` or ``sum_sq_tokens``:
    the frame then has that column, null where a dict lacks it. Nothing is
    validated here.

    >>> readings_frame([dict(seq=0, wave=0, signature="s", packed_tokens=4,
    ...                      logical_tokens=8, peak_bytes=100)]).row(0)[:4]
    ('run', 0, 0, None)
    """
    filled = [{**_DEFAULTS, **row} for row in rows]
    dtypes = dict(POLARS_DTYPES)
    for name, dtype in (*OPTIONAL_DTYPES.items(), *SHAPE_DTYPES.items()):
        if any(name in row for row in rows):
            dtypes[name] = dtype
    return pl.DataFrame({name: [row.get(name) for row in filled] for name in dtypes}, schema=dtypes)
