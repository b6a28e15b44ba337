"""Trace format v1 (SPEC §2): every rule, and the message a person gets when
a trace breaks it — through the library and end to end through the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.command_line import Invoke
from warmfit.cli import app
from warmfit.errors import TraceError
from warmfit.format.trace import TraceSummary, read_trace, readings_frame, write_trace

ROWS = [
    dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=150, peak_bytes=5_000, phase="forward"),
    dict(seq=1, wave=0, signature="s", packed_tokens=100, logical_tokens=150, peak_bytes=9_000, whole=True),
    dict(seq=2, wave=1, signature="s", packed_tokens=120, logical_tokens=120, peak_bytes=9_500,
         whole=True, static_floor_bytes=1_000, step=3),
    dict(seq=0, wave=0, rank=1, signature="t", packed_tokens=100, logical_tokens=100, peak_bytes=1_000),
]  # fmt: skip


def valid() -> pl.DataFrame:
    return readings_frame(ROWS)


def write(
    path: Path, frame: pl.DataFrame | pa.Table, metadata: dict[str, bytes] | None = None
) -> Path:
    """Write a frame as Parquet with exactly the given metadata (no validation)."""
    table = frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame
    table = table.replace_schema_metadata(
        {b"warmfit.schema": b"1"} if metadata is None else metadata
    )
    pq.write_table(table, path)
    return path


def test_a_valid_trace_reads_back_in_canonical_order(tmp_path: Path) -> None:
    write_trace(valid().reverse(), tmp_path / "t.parquet")
    frame = read_trace([tmp_path])
    assert frame.select("rank", "seq").rows() == [(0, 0), (0, 1), (0, 2), (1, 0)]
    summary = TraceSummary.of(frame, files=1)
    assert (summary.runs, summary.ranks, summary.signatures, summary.waves, summary.readings) == (
        1, 2, 2, 3, 4,
    )  # fmt: skip


def test_extra_columns_are_carried_along(tmp_path: Path) -> None:
    write_trace(valid().with_columns(pl.lit("x").alias("host")), tmp_path / "t.parquet")
    assert read_trace([tmp_path])["host"].to_list() == ["x"] * 4


def test_lenient_integer_and_string_encodings_are_accepted(tmp_path: Path) -> None:
    # pandas writes int64 ranks; polars may write categorical (dictionary) strings
    frame = valid().with_columns(
        pl.col("rank").cast(pl.Int64),
        pl.col("run").cast(pl.Categorical),
        pl.col("seq").cast(pl.UInt16),
    )
    write(tmp_path / "t.parquet", frame)
    assert read_trace([tmp_path]).schema["rank"] == pl.Int32


Mutation = Callable[[pl.DataFrame], pl.DataFrame]

RULES: list[tuple[str, Mutation, str, int | None]] = [
    # (column, mutation, words the message must hold, row it must name)
    ("rank", lambda f: f.with_columns(pl.when(pl.col("seq") == 2).then(-1).otherwise(pl.col("rank")).alias("rank")), "is negative", 2),
    ("kind", lambda f: f.with_columns(pl.lit("flatt").alias("kind")), "must be one of flat, split_child, dp_rank_forward", 0),
    ("phase", lambda f: f.with_columns(pl.lit("backward").alias("phase")), "'forward' or 'caller'", 0),
    ("whole", lambda f: f.with_columns(pl.lit(True).alias("whole")), "only a caller reading may be whole", 0),
    ("packed_tokens", lambda f: f.with_columns(pl.lit(0).alias("packed_tokens")), "not positive", 0),
    ("logical_tokens", lambda f: f.with_columns((pl.col("packed_tokens") - 1).alias("logical_tokens")), "below packed_tokens", 0),
    ("output_bytes", lambda f: f.with_columns(pl.lit(-5).alias("output_bytes")), "is negative", 0),
    ("baseline_bytes", lambda f: f.with_columns(pl.lit(-5).alias("baseline_bytes")), "is negative", 0),
    ("peak_bytes", lambda f: f.with_columns(pl.lit(-5).alias("peak_bytes")), "is negative", 0),
    ("static_floor_bytes", lambda f: f.with_columns(pl.lit(-5).alias("static_floor_bytes")), "is negative", 0),
    ("signature", lambda f: f.with_columns(pl.when(pl.col("seq") == 1).then(None).otherwise(pl.col("signature")).alias("signature")), "is null", 1),
    ("oom", lambda f: f.with_columns(pl.lit(None, dtype=pl.Boolean).alias("oom")), "is null", 0),
    ("seq", lambda f: f.with_columns(pl.when(pl.col("seq") == 2).then(1).otherwise(pl.col("seq")).alias("seq")), "seq 1 appears more than once", 1),
    ("packed_tokens", lambda f: f.with_columns(pl.when(pl.col("seq") == 1).then(101).otherwise(pl.col("packed_tokens")).alias("packed_tokens")), "disagree on packed_tokens", None),
    ("signature", lambda f: f.with_columns(pl.when(pl.col("seq") == 1).then(pl.lit("u")).otherwise(pl.col("signature")).alias("signature")), "disagree on signature", None),
    ("static_floor_bytes", lambda f: f.with_columns(pl.when(pl.col("seq") == 1).then(7).otherwise(None).alias("static_floor_bytes")), "disagree on static_floor_bytes", None),
    ("kind", lambda f: f.with_columns(pl.when(pl.col("seq") == 1).then(pl.lit("split_child")).otherwise(pl.col("kind")).alias("kind"), pl.when(pl.col("seq") == 1).then(False).otherwise(pl.col("whole")).alias("whole")), "disagree on kind", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("column", "mutate", "words", "row"), RULES, ids=[f"{r[0]}-{i}" for i, r in enumerate(RULES)]
)
def test_every_rule_is_enforced_with_file_column_and_row(
    tmp_path: Path, column: str, mutate: Mutation, words: str, row: int | None
) -> None:
    path = write(tmp_path / "bad.parquet", mutate(valid()))
    with pytest.raises(TraceError) as info:
        read_trace([path])
    err = info.value
    assert str(path) in str(err)
    assert err.column == column
    assert words in str(err)
    if row is not None:
        assert f"row {row}" in str(err)


@pytest.mark.parametrize("kind", ["split_child", "dp_rank_forward"])
def test_a_whole_reading_on_a_split_child_or_forward_only_wave_is_refused(
    tmp_path: Path, kind: str
) -> None:
    # SPEC §1: only the caller reading of a flat wave may be whole.
    rows = [
        dict(seq=0, wave=0, signature="s", packed_tokens=100, logical_tokens=100,
             peak_bytes=30_000, whole=True),
        dict(seq=1, wave=1, signature="s", kind=kind, packed_tokens=400, logical_tokens=400,
             peak_bytes=60_000, phase="forward"),
        dict(seq=2, wave=1, signature="s", kind=kind, packed_tokens=400, logical_tokens=400,
             peak_bytes=200_000, whole=True),
    ]  # fmt: skip
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert str(path) in text and "column 'whole'" in text and "row 2" in text
    assert "only the caller reading of a flat wave may be whole" in text


def test_the_cli_reports_a_broken_rule_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.parquet", valid().with_columns(pl.lit(0).alias("packed_tokens")))
    for command in (["replay", str(path)], ["validate", str(path)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert f"{path}, column 'packed_tokens', row 0: value 0 is not positive" in result.output


FILE_PROBLEMS: list[tuple[str, Callable[[Path], Path], str]] = [
    ("missing path", lambda d: d / "nope.parquet", "no such file or directory"),
    ("empty directory", lambda d: (d / "empty").mkdir() or d / "empty", "holds no *.parquet trace files"),
    ("not parquet", lambda d: _text(d / "t.parquet", "run,rank\nx,0\n"), "is not a readable Parquet file"),
    ("truncated", lambda d: _truncate(write(d / "t.parquet", valid())), "is not a readable Parquet file"),
    ("no schema metadata", lambda d: write(d / "t.parquet", valid(), metadata={}), "has no 'warmfit.schema' metadata"),
    ("unknown version", lambda d: write(d / "t.parquet", valid(), metadata={b"warmfit.schema": b"2"}), "has schema version '2'"),
    ("missing column", lambda d: write(d / "t.parquet", valid().drop("oom")), "column 'oom': required column is missing"),
    ("mistyped column", lambda d: write(d / "t.parquet", valid().with_columns(pl.col("peak_bytes").cast(pl.Float64))), "column 'peak_bytes': has type double; it must be an integer"),
    ("string for bool", lambda d: write(d / "t.parquet", valid().with_columns(pl.col("whole").cast(pl.String))), "column 'whole': has type"),
    ("rank too wide", lambda d: write(d / "t.parquet", valid().with_columns(pl.lit(2**40).alias("rank"))), "column 'rank', row 0: value 1099511627776 does not fit"),
    ("huge unsigned", lambda d: write(d / "t.parquet", valid().with_columns(pl.Series("seq", [0, 1, 2**64 - 1, 0], dtype=pl.UInt64))), "column 'seq', row 2: value 18446744073709551615 does not fit"),
    ("duplicate column", lambda d: write(d / "t.parquet", pa.Table.from_arrays([*valid().to_arrow().columns, pa.array([1, 2, 3, 4])], names=[*valid().columns, "seq"])), "column 'seq': appears 2 times"),
]  # fmt: skip


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _truncate(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize(
    ("label", "make", "words"), FILE_PROBLEMS, ids=[p[0] for p in FILE_PROBLEMS]
)
def test_every_bad_file_gets_exit_2_a_named_file_and_no_traceback(
    tmp_path: Path, label: str, make: Callable[[Path], Path], words: str
) -> None:
    path = make(tmp_path)
    result = CliRunner().invoke(app, ["replay", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert str(path) in result.output
    assert words in result.output


def test_a_directory_of_unrecovered_logs_says_to_recover(tmp_path: Path) -> None:
    (tmp_path / "run=x/rank=0").mkdir(parents=True)
    (tmp_path / "run=x/rank=0/readings.arrows").write_bytes(b"")
    with pytest.raises(TraceError, match="warmfit recover"):
        read_trace([tmp_path])


def test_duplicate_seq_across_files_names_both_places(tmp_path: Path) -> None:
    write_trace(valid(), tmp_path / "a.parquet")
    write_trace(valid().filter(pl.col("seq") == 2), tmp_path / "b.parquet")
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    assert f"{tmp_path / 'a.parquet'} row 2" in str(info.value)
    assert f"{tmp_path / 'b.parquet'} row 0" in str(info.value)


def test_validate_lists_the_problem_of_every_bad_file(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", valid().with_columns(pl.lit(-1).alias("peak_bytes")))
    write(tmp_path / "b.parquet", valid(), metadata={})
    result = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert "2 trace files are invalid" in result.output
    assert "a.parquet, column 'peak_bytes'" in result.output
    assert "b.parquet: has no 'warmfit.schema' metadata" in result.output


def test_write_trace_is_atomic_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = write_trace(valid(), tmp_path / "deep/t.parquet", {"warmfit.meter": "cpu"})
    assert [p.name for p in path.parent.iterdir()] == ["t.parquet"]
    meta = pq.read_schema(path).metadata
    assert meta[b"warmfit.schema"] == b"1" and meta[b"warmfit.meter"] == b"cpu"


def test_an_extra_column_named_like_an_internal_one_is_just_carried(tmp_path: Path) -> None:
    frame = valid().with_columns(pl.lit(1).alias("__row"), pl.lit(-1).alias("rank"))
    path = write(tmp_path / "t.parquet", frame)
    with pytest.raises(TraceError, match="row 0: value -1 is negative"):
        read_trace([path])


REPO = Path(__file__).resolve().parent.parent


def test_validate_says_in_one_line_what_an_imported_trace_does_not_record(invoke: Invoke) -> None:
    code, out, _ = invoke("validate", str(REPO / "traces" / "art-h200"))
    assert code == 0
    assert "not recorded" not in out
    lines = [line for line in out.splitlines() if "metadata" in line]
    assert lines == [
        "  not known   meter, torch, recorder (no warmfit.meter, warmfit.torch_version, "
        "warmfit.recorder metadata: written by another tool or imported)"
    ]
    assert "  device      NVIDIA H200" in out  # what is recorded is still shown


def test_two_recordings_of_one_run_label_are_told_apart_from_a_bad_numbering(
    tmp_path: Path,
) -> None:
    row = dict(seq=0, wave=0, signature="s", packed_tokens=4, logical_tokens=4, peak_bytes=9)
    write_trace(readings_frame([row]), tmp_path / "a" / "run=mine" / "rank=0" / "r.parquet")
    write_trace(readings_frame([row]), tmp_path / "b" / "run=mine" / "rank=0" / "r.parquet")
    with pytest.raises(Exception, match="record one again with --run NAME"):
        read_trace([tmp_path / "a", tmp_path / "b"])


def test_columns_beside_replays_load_replays_columns_and_those_named_only(
    tmp_path: Path,
) -> None:
    """Replay's columns are every required one but ``step`` (SPEC §2: replay never uses it);
    ``columns=()`` loads those and no more, ``columns=("step",)`` adds it."""
    write_trace(valid().with_columns(pl.lit("x").alias("host")), tmp_path / "t.parquet")
    required = [
        "run", "rank", "seq", "step", "wave", "signature", "kind", "phase", "whole",
        "packed_tokens", "logical_tokens", "output_bytes", "baseline_bytes", "peak_bytes",
        "static_floor_bytes", "oom",
    ]  # fmt: skip
    replays = [c for c in required if c != "step"]
    assert read_trace([tmp_path], columns=()).columns == replays
    with_step = read_trace([tmp_path], columns=("step",))
    assert with_step.columns == [*replays, "step"]
    assert with_step["step"].to_list() == [None, None, 3, None]
    assert read_trace([tmp_path]).columns == [*required, "host"]


def test_write_trace_takes_an_arrow_table_as_a_polars_frame(tmp_path: Path) -> None:
    write_trace(valid(), tmp_path / "polars" / "t.parquet")
    write_trace(valid().to_arrow(), tmp_path / "arrow" / "t.parquet")
    assert read_trace([tmp_path / "arrow"]).equals(read_trace([tmp_path / "polars"]))


def test_written_optional_columns_take_their_types_and_other_extras_keep_theirs(
    tmp_path: Path,
) -> None:
    frame = valid().with_columns(
        pl.lit(7, pl.Int32).alias("estimate_bytes"),
        pl.lit(200, pl.UInt16).alias("padded_tokens"),
        pl.lit(900, pl.Int32).alias("sum_sq_tokens"),
        pl.lit(3, pl.Int16).alias("host_id"),
    )
    schema = pq.read_schema(write_trace(frame, tmp_path / "t.parquet"))
    types = {name: schema.field(name).type for name in schema.names}
    assert types["estimate_bytes"] == types["padded_tokens"] == pa.int64()
    assert types["sum_sq_tokens"] == pa.int64()
    assert types["host_id"] == pa.int16()  # no meaning to warmfit: as it came
    assert types["rank"] == pa.int32() and types["peak_bytes"] == pa.int64()


def test_writing_without_required_columns_names_them_in_the_formats_order(
    tmp_path: Path,
) -> None:
    with pytest.raises(TraceError, match=r"required columns peak_bytes, oom\.") as caught:
        write_trace(valid().drop("oom", "peak_bytes"), tmp_path / "t.parquet")
    assert "docs/reference/trace-format.md" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_a_written_trace_has_row_groups_of_2_to_the_17_readings(tmp_path: Path) -> None:
    """2**17 + 1 readings: one row group of 131,072 and one of 1."""
    n = 2**17 + 1
    frame = pl.select(seq=pl.int_range(0, n, dtype=pl.Int64)).with_columns(
        run=pl.lit("r"), rank=pl.lit(0), step=pl.lit(None, pl.Int64), wave=pl.col("seq"),
        signature=pl.lit("s"), kind=pl.lit("flat"), phase=pl.lit("caller"),
        whole=pl.lit(True), packed_tokens=pl.lit(1), logical_tokens=pl.lit(1),
        output_bytes=pl.lit(0), baseline_bytes=pl.lit(0), peak_bytes=pl.lit(1),
        static_floor_bytes=pl.lit(None, pl.Int64), oom=pl.lit(False),
    )  # fmt: skip
    meta = pq.ParquetFile(write_trace(frame, tmp_path / "t.parquet")).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [131_072, 1]


def test_a_write_that_fails_leaves_no_file_and_no_folder_it_made(tmp_path: Path) -> None:
    """Parquet has no interval type, so pyarrow refuses the column once writing has begun."""
    gap = pa.array([pa.MonthDayNano([0, 1, 0])] * 4, pa.month_day_nano_interval())
    table = valid().to_arrow().append_column("gap", gap)
    with pytest.raises(pa.ArrowNotImplementedError):
        write_trace(table, tmp_path / "new" / "deeper" / "t.parquet")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- edges, in-process


@pytest.mark.parametrize(
    ("shape", "words"),
    [
        ({"padded_tokens": 100, "sum_sq_tokens": 1}, None),  # padded = packed; sum_sq 1
        ({"padded_tokens": 99, "sum_sq_tokens": 1}, "value 99 is below packed_tokens"),
        ({"padded_tokens": 100, "sum_sq_tokens": 0}, "value 0 is not positive"),
    ],
)
def test_padded_and_sum_sq_tokens_at_their_edges(
    tmp_path: Path, shape: dict[str, int], words: str | None
) -> None:
    """A wave's padded tokens may equal its packed tokens (no padding: 100 and 100) but
    not fall below (99); a sum of squared lengths of 1 (one sequence of 1 token) is
    the least, 0 is refused. Row 0 (100 packed tokens) holds the values, the others
    sound ones."""
    rows = [dict(row, padded_tokens=200, sum_sq_tokens=10_000) for row in ROWS]
    rows[0] = dict(rows[0], **shape)
    path = write(tmp_path / "t.parquet", readings_frame(rows))
    if words is None:
        frame = read_trace([path])
        assert frame.get_column("padded_tokens").to_list() == [100, 200, 200, 200]
        return
    with pytest.raises(TraceError) as info:
        read_trace([path])
    assert words in str(info.value) and "row 0" in str(info.value)
    assert info.value.column == next(c for c, v in shape.items() if v in (99, 0))


def test_an_exception_text_is_cut_to_300_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error the page walk raises is shown on one line: whitespace runs as one
    space, and text longer than 300 characters as its first 299 and "…" (300 in all)."""
    from warmfit.format import pagecrc, trace

    path = write(tmp_path / "t.parquet", valid())
    for text, shown in (
        ("a\n  b " + "c" * 296, "a b " + "c" * 296),  # 300 once spaced: whole
        ("d" * 301, "d" * 299 + "…"),
        ("e" * 400, "e" * 299 + "…"),
    ):

        def walk(*_: object, text: str = text) -> None:
            raise ValueError(text)

        monkeypatch.setattr(pagecrc, "verify", walk)
        with pytest.raises(TraceError) as info:
            trace.verify_pages(path)
        assert f"its pages cannot be walked (ValueError: {shown})." in str(info.value)


def test_a_slice_of_rows_comes_in_one_chunk_unless_asked_otherwise(tmp_path: Path) -> None:
    """``read_rows`` from row 3 of a file of row groups of 2 rows: 4 rows over three
    groups, one buffer a column by default, one chunk a row group with
    ``rechunk=False``; from row 0 with no length, every row."""
    from warmfit.format.trace import read_rows

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=2)
    frame = read_rows(path, ["x"], 3, 4)
    assert frame.get_column("x").to_list() == [3, 4, 5, 6]
    assert frame.get_column("x").n_chunks() == 1
    assert read_rows(path, ["x"], 3, 4, rechunk=False).get_column("x").n_chunks() == 3
    assert read_rows(path, ["x"]).get_column("x").to_list() == list(range(10))


def test_a_trace_reports_its_progress_from_0_files_and_its_first_problem(tmp_path: Path) -> None:
    """``progress`` hears 0 of 2 files done, then 1 and 2; a bad file is a plain
    :class:`TraceError` (its first rule broken), not the every-file list, unless asked."""
    from warmfit.format.trace import TraceProblems

    write_trace(valid().filter(pl.col("rank") == 0), tmp_path / "a.parquet")
    write_trace(valid().filter(pl.col("rank") == 1), tmp_path / "b.parquet")
    heard: list[tuple[int, int]] = []
    read_trace([tmp_path], progress=lambda done, total: heard.append((done, total)))
    assert heard == [(0, 2), (1, 2), (2, 2)]
    write(tmp_path / "b.parquet", valid().with_columns(pl.lit(0).alias("packed_tokens")))
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    assert type(info.value) is TraceError and info.value.column == "packed_tokens"
    with pytest.raises(TraceProblems):
        read_trace([tmp_path], all_problems=True)


def test_the_order_by_stream_and_wave_of_rows_in_seq_order() -> None:
    """``check_across_rows`` gives the stable order of rows by (stream, wave): rows
    in seq order whose waves go 1, 0, 1 in stream 0 (and 0 in stream 1) are taken as
    rows 1, 0, 2, 3; with no wave-constant column to compare, the same. Codes that
    tell rows apart where their strings do not (a quick check may over-report) send
    it to the slow check, which finds them agreeing, and the same order comes back."""
    from warmfit.format.trace import check_across_rows, stream_numbers

    frame = readings_frame(
        [
            dict(seq=0, wave=1, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9),
            dict(seq=1, wave=0, signature="s", packed_tokens=2, logical_tokens=2, peak_bytes=9),
            dict(seq=2, wave=1, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9),
            dict(seq=0, wave=0, signature="s", rank=1, packed_tokens=1, logical_tokens=1,
                 peak_bytes=9),
        ]
    )  # fmt: skip
    stream = stream_numbers(frame)
    assert stream.tolist() == [0, 0, 0, 1]
    order = check_across_rows(frame, stream, [])
    assert order is not None and order.tolist() == [1, 0, 2, 3]
    bare = frame.select("run", "rank", "seq", "wave")
    order = check_across_rows(bare, stream, [])
    assert order is not None and order.tolist() == [1, 0, 2, 3]
    over = {"signature": np.array([0, 0, 1, 0])}  # rows 0 and 2: wave 1, signature "s"
    order = check_across_rows(frame, stream, [], over)
    assert order is not None and order.tolist() == [1, 0, 2, 3]


def test_wave_ids_too_far_apart_for_one_key_are_sorted_by_both() -> None:
    """Stream 1 times the span of wave ids 0 to 2**62 does not fit an int64 key: the
    rows are sorted by stream, then wave (stable) all the same."""
    from warmfit.format.trace import wave_order

    stream = np.array([0, 0, 1, 1, 1])
    wave = np.array([2**62, 0, 5, 1, 5])
    order = wave_order(stream, wave)
    assert order is not None and order.tolist() == [1, 0, 3, 2, 4]


def test_signature_counts_keep_each_signatures_largest_reserved_peak() -> None:
    """reserved_peak_bytes 10 and 30 on signature s's two waves, 7 on t's: 30 and 7."""
    from warmfit.format.trace import signature_counts

    frame = readings_frame(
        [
            dict(seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9),
            dict(seq=1, wave=1, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9),
            dict(seq=2, wave=2, signature="t", packed_tokens=1, logical_tokens=1, peak_bytes=9),
        ]
    ).with_columns(pl.Series("reserved_peak_bytes", [10, 30, 7], pl.Int64))
    counts = signature_counts(frame)
    assert counts.select("signature", "waves", "reserved_peak_bytes").rows() == [
        ("s", 2, 30),
        ("t", 1, 7),
    ]


def test_the_no_whole_warning_names_five_pairs_and_counts_the_rest() -> None:
    """Six pairs: the first five named, "and 1 more"; five: all named, no count."""
    from warmfit.format.trace import no_whole_warning

    pairs = [("r", f"s{i}") for i in range(6)]
    six = no_whole_warning(pairs)
    assert "run 'r' signature 's4' and 1 more:" in six and "s5" not in six
    five = no_whole_warning(pairs[:5])
    assert "run 'r' signature 's4':" in five and "more" not in five
    assert no_whole_warning([]) == ""


def test_a_reading_given_only_what_it_needs_takes_the_formats_defaults() -> None:
    """Run "run", rank 0, no step, a flat caller reading, not whole, no output bytes,
    a zero baseline, no floor, no OOM."""
    row = readings_frame(
        [dict(seq=3, wave=2, signature="s", packed_tokens=4, logical_tokens=8, peak_bytes=100)]
    ).row(0, named=True)
    assert {k: v for k, v in row.items() if k not in ("seq", "wave", "signature")} == {
        "run": "run", "rank": 0, "step": None, "kind": "flat", "phase": "caller",
        "whole": False, "packed_tokens": 4, "logical_tokens": 8, "output_bytes": 0,
        "baseline_bytes": 0, "peak_bytes": 100, "static_floor_bytes": None, "oom": False,
    }  # fmt: skip


# --- issue 38, generated pass of trace.py (i38x) ---


def test_reading_counts_count_whole_readings_that_did_not_run_out_of_memory() -> None:
    """Run "r", four signatures, their counts spelled out:

    - "a": a whole caller reading and a forward one: 2 readings, 2 flat, 1 whole, 0 OOM;
    - "b": one whole reading that ran out of memory: 1, 1 flat, 0 whole (an OOM
      reading is never whole here), 1 OOM;
    - "c": two split-child readings: 2, 0 flat, 0 whole, 0 OOM;
    - "d": whole with OOM unknown (null: not OOM, so whole), then whole unknown
      (null: not whole) without OOM: 2, 2 flat, 1 whole, 0 OOM.

    Only "b" has flat readings and no whole one ("c" has no flat reading to fix).
    Without a ``kind`` column every reading counts as flat: "c" has 2, and is named."""
    from warmfit.format.trace import pairs_without_whole, reading_counts

    def reading(seq: int, signature: str, **extra: object) -> dict[str, object]:
        return dict(seq=seq, wave=seq, run="r", signature=signature, packed_tokens=1,
                    logical_tokens=1, peak_bytes=9, **extra)  # fmt: skip

    frame = readings_frame(
        [
            reading(0, "a", whole=True),
            reading(1, "a", phase="forward"),
            reading(2, "b", whole=True, oom=True),
            reading(3, "c", kind="split_child", phase="forward"),
            reading(4, "c", kind="split_child", phase="forward"),
            reading(5, "d", whole=True, oom=None),
            reading(6, "d", whole=None, oom=False),
        ]
    )
    columns = ["signature", "readings", "flat_readings", "whole_readings", "oom_readings"]
    counts = reading_counts(frame).sort("signature")
    assert counts.select(columns).rows() == [
        ("a", 2, 2, 1, 0),
        ("b", 1, 1, 0, 1),
        ("c", 2, 0, 0, 0),
        ("d", 2, 2, 1, 0),
    ]
    assert pairs_without_whole(counts).rows() == [("r", "b")]
    kindless = reading_counts(frame.drop("kind")).sort("signature")
    assert kindless.get_column("flat_readings").to_list() == [2, 1, 2, 2]
    assert pairs_without_whole(kindless).rows() == [("r", "b"), ("r", "c")]


def test_wave_order_is_none_for_rows_in_order_and_sorts_any_that_are_not() -> None:
    """One stream's waves 0, 0, 1 (a forward and a caller reading of wave 0): in
    order already, so None; so are waves 0 to 199 (a key of 200 a stream fits
    int64 easily). Waves 0, 2, 1: wave 1 comes after wave 2, though every
    wave is above the first: rows 0, 2, 1."""
    from warmfit.format.trace import wave_order

    assert wave_order(np.array([0, 0, 0]), np.array([0, 0, 1])) is None
    assert wave_order(np.zeros(200, dtype=np.int64), np.arange(200)) is None  # span 200
    order = wave_order(np.array([0, 0, 0]), np.array([0, 2, 1]))
    assert order is not None and order.tolist() == [0, 2, 1]


def test_wave_order_keys_waves_from_the_lowest_id_so_ids_near_2_to_the_63_fit() -> None:
    """Wave ids 2**62 - 1 and 2**62 + 2 (span 4: one int64 key fits) in one stream,
    in order: None. Keyed by the id minus the lowest (0 and 3); the ids plus the lowest
    would pass 2**63 - 1 for the second and wrap below the first. In reverse order,
    rows 1, 0."""
    from warmfit.format.trace import wave_order

    low = 2**62 - 1
    stream = np.array([0, 0])
    assert wave_order(stream, np.array([low, low + 3])) is None
    order = wave_order(stream, np.array([low + 3, low]))
    assert order is not None and order.tolist() == [1, 0]


def test_a_duplicate_seq_error_takes_the_first_file_as_its_path(tmp_path: Path) -> None:
    """seq 2 of rank 0 in a.parquet (row 2) and b.parquet (row 0): the error's path
    is a.parquet, the first place named."""
    write_trace(valid(), tmp_path / "a.parquet")
    write_trace(valid().filter(pl.col("seq") == 2), tmp_path / "b.parquet")
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    assert info.value.path == str(tmp_path / "a.parquet")
    assert info.value.column == "seq"


def test_a_duplicate_seq_names_only_its_own_rows_and_counts_those_past_four(
    tmp_path: Path,
) -> None:
    """Rank 0's seq 2 written in a.parquet (row 2 of 4: rank 1 and other seqs beside
    it) and in b to e.parquet (row 0 each): five places. The first four are named,
    "and 1 more" counts the fifth; with four places, all four, no count. Rows of
    other ranks or seqs (a.parquet's rows 0, 1 and 3) are never named."""
    write_trace(valid(), tmp_path / "a.parquet")
    for name in "bcde":
        write_trace(valid().filter(pl.col("seq") == 2), tmp_path / f"{name}.parquet")
    at = ", ".join(
        f"{tmp_path / n}.parquet row {r}" for n, r in zip("abcd", (2, 0, 0, 0), strict=True)
    )
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    assert f"(at {at} and 1 more); seq must be unique" in str(info.value)
    (tmp_path / "e.parquet").unlink()
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    assert f"(at {at}); seq must be unique" in str(info.value)


def test_a_duplicate_seq_found_without_files_names_no_path() -> None:
    """``check_across_rows`` given no files (readings from elsewhere): seq 0 twice in
    rank 0 is still refused, with no place and no path."""
    from warmfit.format.trace import check_across_rows, stream_numbers

    frame = readings_frame(
        [dict(seq=0, wave=w, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9)
         for w in (0, 1)]
    )  # fmt: skip
    with pytest.raises(TraceError) as info:
        check_across_rows(frame, stream_numbers(frame), [])
    assert info.value.path is None and info.value.column == "seq"
    assert "seq 0 appears more than once in run 'run', rank 0 (at );" in str(info.value)


def test_the_summary_of_one_reading_and_of_none() -> None:
    """One reading: 1 run, 1 rank, 1 signature, 1 wave, 1 reading (of 2 files); no
    reading: all 0 (of 1 file)."""
    frame = readings_frame(
        [dict(seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9)]
    )
    assert TraceSummary.of(frame, files=2) == TraceSummary(2, 1, 1, 1, 1, 1)
    assert TraceSummary.of(frame.clear(), files=1) == TraceSummary(1, 0, 0, 0, 0, 0)


def _reading(seq: int, wave: int, rank: int = 0, **extra: object) -> dict[str, object]:
    """A sound flat caller reading of 100 packed tokens, 200 logical ones (of run "run",
    signature "s")."""
    row: dict[str, object] = dict(seq=seq, wave=wave, rank=rank, signature="s",
                                  packed_tokens=100, logical_tokens=200, peak_bytes=9)  # fmt: skip
    return {**row, **extra}


def refused(path: Path, rows: list[dict[str, object]]) -> str:
    """The message of the TraceError that reading ``rows``, written to ``path``, raises."""
    write(path, readings_frame(rows))
    with pytest.raises(TraceError) as info:
        read_trace([path])
    return str(info.value)


@pytest.mark.parametrize(
    ("rows", "where"),
    [
        # the stream's only wave: no other wave beside it to compare with
        ([_reading(0, 0), _reading(1, 0, packed_tokens=101)], "wave 0 (run 'run', rank 0"),
        # a wave after the first row's wave
        ([_reading(0, 0), _reading(1, 1), _reading(2, 1, packed_tokens=101)],
         "wave 1 (run 'run', rank 0"),
        # the same, its second reading back at the stream's first value (100)
        ([_reading(0, 0), _reading(1, 1, packed_tokens=101), _reading(2, 1)],
         "wave 1 (run 'run', rank 0"),
        # a wave of the second stream (rank 1)
        ([_reading(0, 0), _reading(0, 0, rank=1), _reading(1, 0, rank=1, packed_tokens=101)],
         "wave 0 (run 'run', rank 1"),
    ],
)  # fmt: skip
def test_two_readings_of_one_wave_that_disagree_are_found_wherever_the_wave_lies(
    tmp_path: Path, rows: list[dict[str, object]], where: str
) -> None:
    """A wave's readings with 100 and 101 packed tokens are refused whether the wave
    is its stream's only one, a later one (whichever of its readings has the 100 the
    stream began with), or in rank 1."""
    path = tmp_path / "t.parquet"
    message = refused(path, rows)
    assert f"the readings of {where}" in message
    assert "disagree on packed_tokens" in message


def test_a_floor_recorded_on_one_reading_of_a_wave_and_not_the_other_disagrees(
    tmp_path: Path,
) -> None:
    """static_floor_bytes null on seq 0 and 1 on seq 1 of wave 0: the wave's readings
    disagree (a null is no value, not 1); null on both, or 1 on both, agree."""
    rows = [_reading(0, 0, static_floor_bytes=None), _reading(1, 0, static_floor_bytes=1)]
    path = tmp_path / "t.parquet"
    message = refused(path, rows)
    assert "disagree on static_floor_bytes" in message
    for floor in (None, 1):
        same = [_reading(0, 0, static_floor_bytes=floor), _reading(1, 0, static_floor_bytes=floor)]
        write(path, readings_frame(same))
        assert read_trace([path]).get_column("static_floor_bytes").to_list() == [floor, floor]


def test_floors_of_one_wave_one_apart_near_2_to_the_60_disagree_beside_a_null(
    tmp_path: Path,
) -> None:
    """Wave 0's floors 2**60 and 2**60 + 1 (one byte apart; as float64 both read
    1.152921504606847e18), wave 1's floor null: wave 0 disagrees on
    static_floor_bytes. The comparison is of the integers, nulls standing apart."""
    rows = [
        _reading(0, 0, static_floor_bytes=2**60),
        _reading(1, 0, static_floor_bytes=2**60 + 1),
        _reading(2, 1, static_floor_bytes=None),
    ]
    path = tmp_path / "t.parquet"
    message = refused(path, rows)
    assert "the readings of wave 0 (run 'run', rank 0" in message
    assert "disagree on static_floor_bytes" in message


def test_a_disagreement_is_found_among_a_waves_readings_in_wave_order(tmp_path: Path) -> None:
    """In seq order the waves go 1, 0, 1, with 100, 101 and 101 packed tokens: side by
    side in seq order no two readings of one wave differ (seq 1 and 2 both have 101),
    but wave 1's readings (seq 0 and 2) do: 100 and 101."""
    rows = [_reading(0, 1), _reading(1, 0, packed_tokens=101), _reading(2, 1, packed_tokens=101)]
    path = tmp_path / "t.parquet"
    message = refused(path, rows)
    assert "the readings of wave 1 (run 'run', rank 0" in message
    assert "disagree on packed_tokens" in message


def test_no_rows_and_one_row_are_in_wave_order() -> None:
    """No rows (an empty part of a trace), or one: nothing to sort, None."""
    from warmfit.format.trace import wave_order

    empty = np.array([], dtype=np.int64)
    assert wave_order(empty, empty) is None
    assert wave_order(np.array([3]), np.array([7])) is None


def test_three_streams_of_wave_ids_too_far_apart_for_one_key_are_sorted_by_both() -> None:
    """Streams 0, 1, 2 and wave ids spanning 0 to 2**62 (span 2**62 + 1): the last
    stream, 2, times the span is past 2**63 and would wrap in one int64 key (the
    second row's stream, 0, would not tell). By stream, then wave: rows 1, 0 (waves
    0, 1 of stream 0), 3, 2 (0, 2**62 of stream 1), 5, 4 (1, 2**62 of stream 2).

    Ids 0 to 3 * 2**60 - 1 (span 3 * 2**60) in rows of streams 0, 1, 1, 2: the
    last stream's key, 2 * 3 * 2**60 + 3 * 2**60 - 1 = 9 * 2**60 - 1, is past 2**63
    (8 * 2**60), though 1 * span + span is not (the stream before, and the second
    row's, would not tell): rows 0, 2, 1, 3."""
    from warmfit.format.trace import wave_order

    order = wave_order(np.array([0, 0, 1, 1, 2, 2]), np.array([1, 0, 2**62, 0, 2**62, 1]))
    assert order is not None and order.tolist() == [1, 0, 3, 2, 5, 4]
    top = 3 * 2**60 - 1
    order = wave_order(np.array([0, 1, 1, 2]), np.array([0, top, 0, top]))
    assert order is not None and order.tolist() == [0, 2, 1, 3]


def test_a_duplicate_seq_of_rank_0_does_not_name_rank_1s_reading_of_that_seq(
    tmp_path: Path,
) -> None:
    """Rank 0's seq 0 in a.parquet (row 0) and b.parquet (row 0); rank 1's own seq 0
    (a.parquet row 3, same run) is no duplicate and is not named."""
    write_trace(valid(), tmp_path / "a.parquet")
    first = (pl.col("seq") == 0) & (pl.col("rank") == 0)
    write_trace(valid().filter(first), tmp_path / "b.parquet")
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert f"rank 0 (at {a} row 0, {b} row 0); seq must be unique" in str(info.value)


def test_two_readings_of_one_wave_that_differ_on_every_wave_constant_disagree(
    tmp_path: Path,
) -> None:
    """Wave 0's readings differ in all six constants: signature s and t, kind flat and
    split_child, 100 and 101 packed tokens, 200 and 201 logical ones, output bytes 0
    and 1, no floor and a floor of 1. Refused, on the first of them, signature."""
    rows = [
        _reading(0, 0),
        _reading(1, 0, signature="t", kind="split_child", phase="forward", packed_tokens=101,
                 logical_tokens=201, output_bytes=1, static_floor_bytes=1),
    ]  # fmt: skip
    path = tmp_path / "t.parquet"
    message = refused(path, rows)
    assert "the readings of wave 0 (run 'run', rank 0" in message
    assert "disagree on signature" in message


def test_readings_written_out_of_order_come_back_in_canonical_order(tmp_path: Path) -> None:
    """seq 1 then seq 0 of one stream: read back as seq 0, 1. seq 0, 2, 1 (each
    above the first, 2 then 1 out of order): 0, 1, 2. Rank 1's seq 0 then rank
    0's seq 1 (seq rising, ranks not): rank 0 first."""
    path = tmp_path / "t.parquet"
    write(path, readings_frame([_reading(1, 1, peak_bytes=11), _reading(0, 0, peak_bytes=10)]))
    assert read_trace([path]).select("seq", "peak_bytes").rows() == [(0, 10), (1, 11)]
    write(path, readings_frame([_reading(0, 0), _reading(2, 2), _reading(1, 1)]))
    assert read_trace([path]).select("seq", "wave").rows() == [(0, 0), (1, 1), (2, 2)]
    write(path, readings_frame([_reading(0, 0, rank=1), _reading(1, 0, rank=0)]))
    assert read_trace([path]).select("rank", "seq").rows() == [(0, 1), (1, 0)]


_STREAM_ROWS = st.lists(
    st.tuples(st.sampled_from("ab"), st.integers(0, 2), st.integers(0, 3)),
    min_size=1, max_size=6, unique=True,
)  # fmt: skip


@settings(max_examples=80)
@given(_STREAM_ROWS)
@example([("a", 1, 0), ("b", 1, 3), ("b", 0, 0)])  # rank 0's only reading after rank 1's
@example([("a", 2, 0), ("b", 2, 1), ("b", 2, 2), ("b", 1, 3)])  # run b's rank 1 last
@example([("b", 0, 0), ("a", 1, 3)])  # run a after run b, its rank higher
@example([("b", 1, 2), ("b", 0, 2)])  # rank 1 before rank 0, one seq
@example([("a", 0, 0), ("a", 2, 0), ("a", 1, 0), ("a", 1, 1)])  # rank 2 between 0 and 1
def test_readings_in_any_order_are_put_in_run_rank_seq_order(
    keys: list[tuple[str, int, int]],
) -> None:
    """Readings given as (run, rank, seq), in any order, each its own wave: canonical()
    gives them sorted by run, then rank, then seq, and numbers each (run, rank) stream
    0, 1, ... in that order (the frame is sorted only when it is not in order already)."""
    from warmfit.format.trace import canonical

    frame = readings_frame([_reading(seq, seq, rank=rank, run=run) for run, rank, seq in keys])
    found = canonical(frame, [])
    assert found.frame.select("run", "rank", "seq").rows() == sorted(keys)
    streams = [k[:2] for k in sorted(keys)]
    numbers = [sorted(set(streams)).index(k) for k in streams]
    assert found.stream.tolist() == numbers


def test_waves_are_checked_on_the_constants_a_frame_has_without_a_kind_column() -> None:
    """``check_across_rows`` on readings without a ``kind`` column (the other wave
    constants there): wave 0's two readings with 100 and 101 packed tokens disagree;
    with 100 and 100 they agree, and rows in wave order give the order None."""
    from warmfit.format.trace import check_across_rows, stream_numbers

    frame = readings_frame([_reading(0, 0), _reading(1, 0, packed_tokens=101)]).drop("kind")
    with pytest.raises(TraceError) as info:
        check_across_rows(frame, stream_numbers(frame), [])
    assert info.value.column == "packed_tokens"
    agreeing = readings_frame([_reading(0, 0), _reading(1, 0), _reading(2, 1)]).drop("kind")
    assert check_across_rows(agreeing, stream_numbers(agreeing), []) is None


@pytest.mark.parametrize(
    ("change", "column", "words"),
    [
        (lambda f: f.drop("run"), "run", "required column is missing. Add it as a string."),
        (lambda f: f.drop("rank"), "rank",
         "required column is missing. Add it as an integer (int32)."),
        (lambda f: f.drop("whole"), "whole", "required column is missing. Add it as bool."),
        (lambda f: f.with_columns(pl.col("signature").cast(pl.Int64, strict=False)),
         "signature", "has type int64; it must be a string."),
        (lambda f: f.with_columns(pl.col("oom").cast(pl.Int8)), "oom",
         "has type int8; it must be bool."),
    ],
)  # fmt: skip
def test_a_missing_or_mistyped_required_column_is_named_with_the_type_it_needs(
    tmp_path: Path, change: Mutation, column: str, words: str
) -> None:
    """The type a required column needs, in words: "a string" (run, signature), "an
    integer (int32)" (rank: any integer type is read), and an Arrow type's own name,
    "bool", for the flags (whole, oom)."""
    path = write(tmp_path / "t.parquet", change(valid()))
    with pytest.raises(TraceError) as info:
        read_trace([path])
    assert info.value.column == column
    assert words in str(info.value)


def test_a_per_wave_file_is_told_by_its_mark_or_else_by_its_columns() -> None:
    """By the ``warmfit.per_wave`` mark "1" (reading columns or not); a mark "0" says
    nothing, and then the columns decide: exactly policy, estimate_bytes and
    over_estimate (nothing else), or those with others, is a per-wave file; with a
    reading column (seq) beside them, two of them, or none and no reading column,
    it is not."""
    from warmfit.format.trace import is_per_wave_file

    def schema(names: str, mark: bytes | None = None) -> pa.Schema:
        fields = [pa.field(n, pa.int64()) for n in names.split()]
        return pa.schema(fields, metadata=None if mark is None else {b"warmfit.per_wave": mark})

    markers = "policy estimate_bytes over_estimate"
    assert is_per_wave_file(schema("seq phase peak_bytes", b"1"))
    assert not is_per_wave_file(schema("seq phase peak_bytes", b"0"))
    assert is_per_wave_file(schema(markers))
    assert is_per_wave_file(schema(markers + " run wave", b"0"))
    assert not is_per_wave_file(schema(markers + " seq"))
    assert not is_per_wave_file(schema("policy estimate_bytes run"))
    assert not is_per_wave_file(schema("run wave"))


def test_a_duplicate_seq_in_the_second_stream_is_refused() -> None:
    """Rank 0's seq 0, then rank 1's seq 0 twice (waves 0 and 1): refused in rank 1."""
    from warmfit.format.trace import check_across_rows, stream_numbers

    frame = readings_frame([_reading(0, 0), _reading(0, 0, rank=1), _reading(0, 1, rank=1)])
    with pytest.raises(TraceError) as info:
        check_across_rows(frame, stream_numbers(frame), [])
    assert "seq 0 appears more than once in run 'run', rank 1" in str(info.value)


def test_rows_without_a_seq_or_wave_column_are_checked_on_what_they_have() -> None:
    """``check_across_rows`` on readings without seq (run, rank, wave and the packed
    tokens): nothing to number, the waves still compared (100 against 101 disagree)
    and ordered (waves 1, 0: rows 1, 0); without wave either, no order at all (None)."""
    from warmfit.format.trace import check_across_rows, stream_numbers

    rows = [_reading(0, 1), _reading(1, 0)]
    frame = readings_frame(rows).select("run", "rank", "wave", "packed_tokens")
    order = check_across_rows(frame, stream_numbers(frame), [])
    assert order is not None and order.tolist() == [1, 0]
    frame = readings_frame([*rows, _reading(2, 0, packed_tokens=101)])
    frame = frame.select("run", "rank", "wave", "packed_tokens")
    with pytest.raises(TraceError, match="disagree on packed_tokens"):
        check_across_rows(frame, stream_numbers(frame), [])
    assert check_across_rows(frame.drop("wave"), stream_numbers(frame), []) is None


def test_a_broken_rule_names_its_first_row_and_counts_the_other_rows_that_break_it(
    tmp_path: Path,
) -> None:
    """peak_bytes -1 on rows 1 and 3: row 1 named, "(1 more rows break this rule.)";
    on row 1 alone, no count."""
    path = tmp_path / "t.parquet"
    negative = pl.when(pl.col("seq").is_in([1, 3])).then(-1).otherwise(pl.col("peak_bytes"))
    write(path, readings_frame([_reading(s, s) for s in range(4)]).with_columns(
        negative.alias("peak_bytes")))  # fmt: skip
    with pytest.raises(TraceError) as info:
        read_trace([path])
    assert info.value.row == 1
    assert "value -1 is negative. (1 more rows break this rule.)" in str(info.value)
    write(path, readings_frame([_reading(s, s, peak_bytes=-1 if s == 1 else 9) for s in range(4)]))
    with pytest.raises(TraceError) as info:
        read_trace([path])
    assert info.value.row == 1 and "value -1 is negative. Byte counts" in str(info.value)


def test_columns_beside_replays_also_load_the_optional_columns_a_file_has(
    tmp_path: Path,
) -> None:
    """A trace with estimate_bytes (SPEC §8: 500 on seq 1, null elsewhere) and an
    extra "host": ``columns=()`` loads replay's columns and estimate_bytes, not host;
    ``wanted_columns`` without a schema names replay's and the asked ones only."""
    from warmfit.format.schema import REPLAY_COLUMNS
    from warmfit.format.trace import wanted_columns

    estimate = pl.when(pl.col("seq") == 1).then(500).otherwise(None).alias("estimate_bytes")
    frame = valid().with_columns(estimate.cast(pl.Int64), pl.lit("x").alias("host"))
    write_trace(frame, tmp_path / "t.parquet")
    found = read_trace([tmp_path], columns=())
    assert found.columns == [*REPLAY_COLUMNS, "estimate_bytes"]
    assert found["estimate_bytes"].to_list() == [None, 500, None, None]
    assert wanted_columns(None, ["host"]) == [*REPLAY_COLUMNS, "host"]


def test_a_trace_file_of_no_readings_reads_as_no_rows(tmp_path: Path) -> None:
    """A valid file with the trace's columns and no row (a recording stopped before its
    first wave): 0 readings, every column there, nothing to sort or check."""
    write_trace(valid().clear(), tmp_path / "t.parquet")
    frame = read_trace([tmp_path])
    assert frame.height == 0 and frame.columns == valid().columns


def test_rows_from_a_start_to_the_end_of_a_file(tmp_path: Path) -> None:
    """``read_rows`` from row 3, or row 1, with no length: rows 3 (1) to 9 of a file of
    10 rows."""
    from warmfit.format.trace import read_rows

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=2)
    assert read_rows(path, ["x"], 3).get_column("x").to_list() == list(range(3, 10))
    assert read_rows(path, ["x"], 1).get_column("x").to_list() == list(range(1, 10))


@pytest.mark.parametrize("name", ["t[0].parquet", "t*.parquet", "t?.parquet"])
def test_a_file_name_with_pattern_characters_is_read_as_that_name(
    tmp_path: Path, name: str
) -> None:
    """``read_rows`` of a file named t[0].parquet, t*.parquet or t?.parquet reads that
    file (rows 0 to 9, or 2 to 3), not the pattern's matches: t0.parquet and tx.parquet
    (rows 100 to 109) lie beside it."""
    from warmfit.format.trace import read_rows

    for other in ("t0.parquet", "tx.parquet"):
        pq.write_table(pa.table({"x": list(range(100, 110))}), tmp_path / other)
    path = tmp_path / name
    pq.write_table(pa.table({"x": list(range(10))}), path, row_group_size=2)
    assert read_rows(path, ["x"]).get_column("x").to_list() == list(range(10))
    assert read_rows(path, ["x"], 2, 2).get_column("x").to_list() == [2, 3]


def test_an_extra_column_of_one_type_or_of_numbers_in_every_file_is_combined(
    tmp_path: Path,
) -> None:
    """Rank 0 in a.parquet, rank 1 in b.parquet, both with a string "host" and a
    number "n" (int32 in one, int64 in the other): read as one trace, host "x" and
    "y", n 1 to 4 (numbers widen). A host of strings in a.parquet and integers in
    b.parquet is refused, naming the column and both files."""
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    ranks = (valid().filter(pl.col("rank") == 0), valid().filter(pl.col("rank") == 1))
    write(a, ranks[0].with_columns(pl.lit("x").alias("host"), pl.Series("n", [1, 2, 3], pl.Int32)))
    write(b, ranks[1].with_columns(pl.lit("y").alias("host"), pl.Series("n", [4], pl.Int64)))
    frame = read_trace([tmp_path])
    assert frame.select("rank", "host", "n").rows() == [
        (0, "x", 1), (0, "x", 2), (0, "x", 3), (1, "y", 4),
    ]  # fmt: skip
    write(b, ranks[1].with_columns(pl.lit(7).alias("host")))
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    assert info.value.column == "host" and info.value.path == str(b)
    assert f"has type Int32 here but String in {a}" in str(info.value)


def test_a_duplicate_seq_is_named_by_its_own_stream_not_where_two_streams_meet(
    tmp_path: Path,
) -> None:
    """Rank 0's seqs 0 and 1, then rank 1's seqs 1, 2 and 2: rank 1's seq 1 follows
    rank 0's seq 1 but is no duplicate (another stream); rank 1's seq 2 is."""
    rows = [_reading(0, 0), _reading(1, 1), _reading(1, 1, rank=1), _reading(2, 2, rank=1),
            _reading(2, 3, rank=1)]  # fmt: skip
    path = tmp_path / "t.parquet"
    message = refused(path, rows)
    assert f"seq 2 appears more than once in run 'run', rank 1 (at {path} row 3, {path} row 4)" in (
        message
    )


_COUNTED_ROWS = st.lists(
    st.fixed_dictionaries({
        "run": st.sampled_from(["r", "q"]),
        "signature": st.sampled_from(["a", "b", "c"]),
        "kind": st.sampled_from(["flat", "split_child", "dp_rank_forward"]),
        "whole": st.sampled_from([True, False, None]),
        "oom": st.sampled_from([True, False, None]),
    }),
    min_size=1, max_size=12,
)  # fmt: skip


@settings(max_examples=60)
@given(_COUNTED_ROWS)
def test_reading_counts_agree_with_counting_the_rows_one_by_one(
    rows: list[dict[str, object]],
) -> None:
    """Per (run, signature), counted by hand: readings; flat ones (kind "flat"; every
    one without a kind column); whole ones, whole and not OOM, a null counting as
    neither; OOM ones. pairs_without_whole: the pairs with a flat reading and no
    whole one, sorted."""
    from warmfit.format.trace import pairs_without_whole, reading_counts

    frame = readings_frame(
        [_reading(i, i, **row) for i, row in enumerate(rows)]  # type: ignore[arg-type]
    )
    for kinded in (True, False):
        want: dict[tuple[object, object], list[int]] = {}
        for row in rows:
            n = want.setdefault((row["run"], row["signature"]), [0, 0, 0, 0])
            n[0] += 1
            n[1] += row["kind"] == "flat" or not kinded
            n[2] += row["whole"] is True and row["oom"] is not True
            n[3] += row["oom"] is True
        counts = reading_counts(frame if kinded else frame.drop("kind"))
        got = {
            (r["run"], r["signature"]): [r["readings"], r["flat_readings"],
                                         r["whole_readings"], r["oom_readings"]]
            for r in counts.iter_rows(named=True)
        }  # fmt: skip
        assert got == want
        named = sorted(k for k, n in want.items() if n[1] > 0 and n[2] == 0)
        assert pairs_without_whole(counts).rows() == named


def test_a_duplicate_seq_in_a_folder_named_with_row_names_the_first_file(
    tmp_path: Path,
) -> None:
    """seq 0 of rank 0 in x.parquet and y.parquet of a folder "t.parquet row b", beside
    t.parquet (rank 1) and a-much-longer-file-name.parquet (rank 2): the error's path,
    and the start of its message, is that folder's x.parquet, the first place named;
    not the text before the first " row " (".../t.parquet", a file that is there too),
    nor the longest file name."""
    folder = tmp_path / "t.parquet row b"
    folder.mkdir()
    for name in ("x", "y"):
        write_trace(readings_frame([_reading(0, 0)]), folder / f"{name}.parquet")
    write_trace(readings_frame([_reading(0, 0, rank=1)]), tmp_path / "t.parquet")
    longer = tmp_path / "a-much-longer-file-name.parquet"
    write_trace(readings_frame([_reading(0, 0, rank=2)]), longer)
    with pytest.raises(TraceError) as info:
        read_trace([tmp_path])
    first = folder / "x.parquet"
    assert info.value.path == str(first)
    assert str(info.value).startswith(f"{first}, column 'seq': seq 0 appears more than once")
