"""``warmfit import table``'s messages, exactly (issue 38: the generated mutants of
warmfit/importers/table.py and mapping.py that changed a message and no test saw).

Each message is checked whole, from the how-to's promise (the file, the key or
row, the line, what to do), on tables sized at the edges the message cuts at:
40 columns shown, 10 duplicated names shown, a line counted across a blank
line and a quoted cell over two lines, a cell or expression cut at 40 or 60
characters; and each broken key of a mapping, named whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from warmfit.cli import app

MAPPING = """\
[run]
label = "r"
[fields]
signature = "s"
packed_tokens = "{tokens}"
peak_bytes = "peak"
baseline_bytes = 0
"""


def run_import(tmp_path: Path, table: str, tokens: str = "n") -> tuple[int, str, Path, Path]:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(table)
    mapping = tmp_path / "m.toml"
    mapping.write_text(MAPPING.format(tokens=tokens))
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert not out.exists()
    return result.exit_code, result.output, csv_path, mapping


@pytest.mark.parametrize("extra", [38, 39, 40])
def test_a_missing_column_names_the_first_40_columns_and_counts_the_rest(
    tmp_path: Path, extra: int
) -> None:
    header = ["n", "peak", *(f"c{i}" for i in range(extra))]
    code, output, csv_path, mapping = run_import(
        tmp_path, ",".join(header) + "\n" + ",".join("1" for _ in header) + "\n", tokens="nn"
    )
    shown = ", ".join(header[:40]) + (f" and {len(header) - 40} more" if len(header) > 40 else "")
    assert code == 2
    assert output == (
        f"warmfit: error: {mapping}: fields.packed_tokens: names the column 'nn', "
        f"which {csv_path} lacks (its columns: {shown}).\n"
    )
    assert ("more" in output) == (len(header) > 40)


@pytest.mark.parametrize("twice", [10, 11])
def test_a_header_naming_columns_twice_shows_ten_of_them(tmp_path: Path, twice: int) -> None:
    names = [f"d{i:02d}" for i in range(twice)]
    header = ["n", "peak", *names, *names]
    code, output, csv_path, _ = run_import(
        tmp_path, ",".join(header) + "\n" + ",".join("1" for _ in header) + "\n"
    )
    shown = ", ".join(names[:10]) + (" ..." if twice > 10 else "")
    assert code == 2
    assert output == f"warmfit: error: {csv_path}: names a column twice in its header: {shown}.\n"


def test_a_short_row_is_named_by_row_and_line_across_blank_lines_and_quoted_newlines(
    tmp_path: Path,
) -> None:
    # line 1 header, 2 a row, 3 blank, 4-5 one row (a quoted cell over two lines), 6 short
    code, output, csv_path, _ = run_import(tmp_path, 'n,peak\n1,5\n\n"2\n",5\n3\n')
    assert code == 2
    assert output == (
        f"warmfit: error: {csv_path}, row 3: has 1 cells where the header names 2 columns "
        "(line 6).\n"
    )


ROWS = """\
model,unit,gpu,n,peak
a,MB,h100,1,5
a,MB,h100,2,6
a,GB,a100,3,7
"""
FIELDS = """\
[fields]
signature = "s"
packed_tokens = "n"
peak_bytes = "peak"
baseline_bytes = 0
"""


@pytest.mark.parametrize(
    ("before", "run", "message"),
    [
        (
            '[require]\nunit = "MB"\n',
            "",
            "column 'unit', row 3: holds 'GB', where require.unit allows only 'MB' (line 4).",
        ),
        (
            "require = \"unit = 'MB'\"\n",
            "",
            "column 'unit', row 3: fails require (\"unit = 'MB'\": unit='GB') (line 4).",
        ),
        (
            '[derive.card]\ncases = [{ when = { gpu = "h100" }, value = "H" }]\n',
            "",
            "column 'gpu', row 3: matches no case of derive.card (gpu='a100') (line 4).",
        ),
        (
            "",
            'identity = ["gpu"]\n',
            "column 'gpu', row 3: gives the run label 'a' of row 1, but another gpu "
            "('a100', not 'h100'): run.label must tell the runs of run.identity apart (line 4).",
        ),
        (
            'order = { by = ["model"], distinct = true }\n',
            "",
            "column 'model', row 2: repeats the model of row 1 in the run 'a' "
            "(order.distinct): keep one, or tell them apart in run.label (line 3).",
        ),
    ],
)
def test_a_kept_row_that_breaks_a_rule_is_named_with_its_cell_and_line(
    tmp_path: Path, before: str, run: str, message: str
) -> None:
    """require (both forms), a derived value no case gives, run.identity and
    order.distinct: each refuses the first row that breaks it, naming it whole."""
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(ROWS)
    mapping = tmp_path / "m.toml"
    mapping.write_text(f'{before}[run]\nlabel = "{{model}}"\n{run}{FIELDS}')
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert result.output == f"warmfit: error: {csv_path}, {message}\n"
    assert not out.exists()
    # the same mapping on the rows that keep the rule imports them
    csv_path.write_text(ROWS.replace("a,GB,a100,3,7\n", "b,MB,h100,3,7\n"))
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert (result.exit_code == 0) == ("distinct" not in before), result.output


def test_a_column_whose_name_is_no_identifier_is_read_as_that_column(tmp_path: Path) -> None:
    """A value that is a column's name is that column, whatever the name ("seq len",
    "out-of-mem" would be a subtraction in SQL): the how-to's shorter form."""
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("seq len,peak,out-of-mem,gpu name\n10,5,no,h100\n20,6,yes,a100\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text(
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "seq len"\n'
        'peak_bytes = "peak"\nbaseline_bytes = 0\noom = "out-of-mem"\n'
        '[extra]\ngpu = "gpu name"\n'
    )
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).select(["packed_tokens", "oom", "gpu"]).to_pylist()
    assert rows == [
        {"packed_tokens": 10, "oom": False, "gpu": "h100"},
        {"packed_tokens": 20, "oom": True, "gpu": "a100"},
    ]


#: The how-to's ten-line table (docs/how-to/bring-your-own-measurements.md), nine rows.
TEAM = """\
model,seq_len,batch,peak_mem_MiB,weights_MiB
llama-8b,1024,2,20000,15000
llama-8b,2048,2,26000,15000
llama-8b,4096,2,OOM,15000
llama-8b,512,4,19000,15000
llama-8b,1024,4,24000,15000
llama-8b,2048,4,30000,15000
llama-8b,256,8,18000,15000
llama-8b,512,8,21000,15000
llama-8b,8192,2,OOM,15000
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # a typo'd peak: TRY_CAST makes it NULL; the cell is shown, not hidden
        (
            ("1024,2,20000", "1024,2,9k1"),
            "column 'peak_mem_MiB', row 1: peak_mem_MiB '9k1' gives no value (NULL), "
            "where fields.peak_bytes needs a number (line 2).",
        ),
        # a lowercase OOM: the mapping compares with 'OOM', so the row is no OOM reading
        (
            ("8192,2,OOM", "8192,2,oom"),
            "column 'peak_mem_MiB', row 9: peak_mem_MiB 'oom' gives no value (NULL), "
            "where fields.peak_bytes needs a number (line 10).",
        ),
        # a cell with a terminal escape is shown escaped, as every cell the importer shows
        (
            ("2048,4,30000", "2048,4,3\x1b[2J0"),
            "column 'peak_mem_MiB', row 6: peak_mem_MiB '3\\x1b[2J0' gives no value (NULL), "
            "where fields.peak_bytes needs a number (line 7).",
        ),
        # an empty peak: the oom test gives NULL first, and says which cell made it
        (
            ("512,4,19000", "512,4,"),
            "row 4: peak_mem_MiB '' gives no value (NULL), where fields.oom needs true or false "
            "(line 5).",
        ),
    ],
)
def test_a_null_from_the_how_tos_mapping_names_the_cell_that_gave_it(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    """Issue 41, the second try from a fresh clone: the how-to's TRY_CAST turns a non-empty typo into NULL; the refusal shows the
    raw cell of each column the expression reads on that row."""
    from tests.test_import_table import NEWCOMER_MAP

    csv_path = tmp_path / "team.csv"
    csv_path.write_text(TEAM)
    mapping = tmp_path / "team.toml"
    mapping.write_text(NEWCOMER_MAP)
    out = tmp_path / "o.parquet"
    args = ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output  # the table as the how-to has it imports
    out.unlink()
    csv_path.write_text(TEAM.replace(*change, 1))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.output == f"warmfit: error: {csv_path}, {message}\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            'packed_tokens = "TRY_CAST(n AS BIGINT) * TRY_CAST(m AS BIGINT)"\noom = false\n',
            "row 2: n '2' and m 'x' give no value (NULL), where fields.packed_tokens needs a "
            "number (line 3).",
        ),
        (
            "packed_tokens = \"n\"\noom = \"CASE WHEN m = '1' THEN false WHEN m = '2' THEN true "
            'END"\n',
            "row 2: m 'x' gives no value (NULL), where fields.oom needs true or false (line 3).",
        ),
    ],
)
def test_a_null_from_an_expression_over_several_columns_or_a_flag_names_each_cell(
    tmp_path: Path, field: str, message: str
) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("n,m,peak\n1,1,5\n2,x,6\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text(
        f'[run]\nlabel = "r"\n[fields]\nsignature = "s"\n{field}peak_bytes = "peak"\n'
        "baseline_bytes = 0\n"
    )
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert result.output == f"warmfit: error: {csv_path}, {message}\n"
    assert not out.exists()


@pytest.mark.parametrize("width", [10, 11])
def test_a_null_from_an_expression_over_many_columns_shows_nine_cells_and_counts_the_rest(
    tmp_path: Path, width: int
) -> None:
    names = [f"c{i}" for i in range(width)]
    csv_path = tmp_path / "t.csv"
    csv_path.write_text(",".join([*names, "peak"]) + "\n" + ",".join(["x"] * width) + ",5\n")
    product = " * ".join(f"TRY_CAST({c} AS BIGINT)" for c in names)
    mapping = tmp_path / "m.toml"
    mapping.write_text(
        f'[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "{product}"\n'
        'peak_bytes = "peak"\nbaseline_bytes = 0\n'
    )
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    shown = [f"c{i} 'x'" for i in range(width)]
    if width > 10:
        shown = [*shown[:9], f"{width - 9} more"]
    assert result.exit_code == 2
    assert result.output == (
        f"warmfit: error: {csv_path}, row 1: {', '.join(shown[:-1])} and {shown[-1]} give no "
        "value (NULL), where fields.packed_tokens needs a number (line 2).\n"
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("", "has no header row: the first line must name the columns."),
        ("\n1,5\n", "has no header row: the first line must name the columns."),
        # strict CSV: a quoted cell must end at its closing quote
        ('n,peak\n1,"5"x\n', "is not valid CSV near line 2: ',' expected after '\"'."),
        # the row after a blank line is counted from that line: 1 header, 2 a row, 3 blank
        ("n,peak\n1,5\n\n3\n", "row 2: has 1 cells where the header names 2 columns (line 4)."),
        (
            "n,peak\n1,5\n\n\nx,5\n",
            "column 'n', row 2: holds 'x', where fields.packed_tokens needs a number (line 5).",
        ),
        # a cell longer than 40 characters is shown cut to its first 40
        (
            f"n,peak\n{'y' * 41},5\n",
            f"column 'n', row 1: n '{'y' * 40}' gives no value (NULL), where "
            "fields.packed_tokens needs a number (line 2).",
        ),
    ],
)
def test_a_table_that_cannot_be_read_is_named_with_its_line(
    tmp_path: Path, table: str, message: str
) -> None:
    tokens = "TRY_CAST(n AS BIGINT)" if "NULL" in message else "n"
    code, output, csv_path, _ = run_import(tmp_path, table, tokens=tokens)
    assert code == 2
    sep = ", " if message.startswith(("row", "column")) else ": "
    assert output == f"warmfit: error: {csv_path}{sep}{message}\n"


def test_a_table_that_is_a_directory_is_named_as_one(tmp_path: Path) -> None:
    folder = tmp_path / "t.csv"
    folder.mkdir()
    mapping = tmp_path / "m.toml"
    mapping.write_text(MAPPING.format(tokens="n"))
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(folder), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert (
        result.output
        == f"warmfit: error: {folder}: the table is a directory, not a regular file.\n"
    )


@pytest.mark.parametrize("extra", [0, 1])
def test_an_expression_polars_cannot_parse_is_shown_cut_at_60_characters(
    tmp_path: Path, extra: int
) -> None:
    """The expression shows its first 60 characters (57 and '...' beyond), polars'
    reason its first line, cut at 200 characters (199 and '…' beyond)."""
    import polars as pl

    text = "n +* " + "x" * (55 + extra)  # 60 characters, then 61
    shown = repr(text if len(text) <= 60 else text[:57] + "...")
    with pytest.raises(pl.exceptions.PolarsError) as parsed:
        pl.sql_expr(text)
    reason = str(parsed.value).strip().splitlines()[0]
    assert len(reason) < 200  # cut only beyond 200: see the next test
    code, output, _, mapping = run_import(tmp_path, "n,peak\n1,5\n", tokens=text)
    assert code == 2
    assert output == (
        f"warmfit: error: {mapping}: fields.packed_tokens: {shown} is not a polars SQL "
        f"expression ({reason}) (its columns: n, peak).\n"
    )


def test_polars_reason_is_its_first_line_cut_at_200_characters() -> None:
    """A reason of 200 characters is shown whole, one of 201 as its first 199 and '…';
    a reason with no text is the error's name."""
    import polars as pl

    from warmfit.importers.table import _first_line

    assert _first_line(pl.exceptions.ComputeError("a" * 200 + "\nmore")) == "a" * 200
    assert _first_line(pl.exceptions.ComputeError("b" * 201)) == "b" * 199 + "…"
    assert _first_line(pl.exceptions.ComputeError("  \n")) == "ComputeError"


@pytest.mark.parametrize(
    ("table", "tokens", "cell"),
    [
        # 3 x 2**62 is past int64: the column of the largest cell is named
        ("a,b,peak\n3,4611686018427387904,5\n", "a * b", "4611686018427387904"),
        # largest by magnitude: -2**62 x 5
        ("a,b,peak\n5,-4611686018427387904,5\n", "a * b", "-4611686018427387904"),
        # a text cell counts as 0 beside a number, even one below 1
        (
            "s,b,peak\nx,4611686018427387904,5\n",
            "CASE WHEN s = 'x' THEN b * 4 END",
            "4611686018427387904",
        ),
        ("s,b,peak\nx,0.5,5\n", "CASE WHEN s = 'x' THEN b * 1e30 END", "0.5"),
    ],
)
def test_a_number_beyond_64_bits_names_the_column_of_the_largest_cell(
    tmp_path: Path, table: str, tokens: str, cell: str
) -> None:
    code, output, csv_path, _ = run_import(tmp_path, table, tokens=tokens)
    assert code == 2
    assert output == (
        f"warmfit: error: {csv_path}, column 'b', row 1: holds '{cell}', which gives "
        "fields.packed_tokens beyond 64 bits (a trace holds at most 9,223,372,036,854,775,807) "
        "(line 2).\n"
    )


def test_a_derived_value_named_as_a_column_is_refused(tmp_path: Path) -> None:
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("n,peak\n1,5\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text('[derive]\nn = "peak * 2"\n' + MAPPING.format(tokens="n"))
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert result.output == (
        f"warmfit: error: {mapping}: derive.n: 'n' is already a column of {csv_path}; name the "
        "derived value otherwise (its columns: n, peak).\n"
    )


@pytest.mark.parametrize(
    ("table", "tokens", "message"),
    [
        # text over two columns: no one column to name, the text given is shown
        ("a,b,peak\n1,x,5\n", "concat(a, b)", "row 1: gives '1x', where"),
        # NULL from no column at all
        ("a,peak\n1,5\n", "NULL", "row 1: gives no value (NULL), where"),
        # a constant past int64: no column to name, the value shown
        (
            "a,peak\n1,5\n",
            "1e19",
            "row 1: holds '1e+19', which gives fields.packed_tokens beyond 64 bits (a trace "
            "holds at most 9,223,372,036,854,775,807) (line 2).",
        ),
        ("a,peak\n1,5\n", "0 - 5", "row 1: gives fields.packed_tokens = -5, below 0 (line 2)."),
        # a cell of 40 characters is shown whole, one of 41 as 37 and '...'
        (
            f"a,peak\n1{'0' * 39},5\n",
            "a",
            f"column 'a', row 1: holds '1{'0' * 39}', which gives fields.packed_tokens beyond 64 "
            "bits (a trace holds at most 9,223,372,036,854,775,807) (line 2).",
        ),
        (
            f"a,peak\n1{'0' * 40},5\n",
            "a",
            f"column 'a', row 1: holds '1{'0' * 36}...', which gives fields.packed_tokens beyond "
            "64 bits (a trace holds at most 9,223,372,036,854,775,807) (line 2).",
        ),
        # 2**62 x 2.0 is 2**63 as a float, one past int64
        (
            "a,peak\n4611686018427387904,5\n",
            "a * 2.0",
            "column 'a', row 1: holds '4611686018427387904', which gives fields.packed_tokens "
            "beyond 64 bits (a trace holds at most 9,223,372,036,854,775,807) (line 2).",
        ),
    ],
)
def test_a_number_from_an_expression_that_is_no_number_is_named(
    tmp_path: Path, table: str, tokens: str, message: str
) -> None:
    code, output, csv_path, _ = run_import(tmp_path, table, tokens=tokens)
    assert code == 2
    if message.endswith("where"):
        message += " fields.packed_tokens needs a number (line 2)."
    assert output == f"warmfit: error: {csv_path}, {message}\n"


def test_a_number_from_an_expression_of_booleans_is_a_mapping_error(tmp_path: Path) -> None:
    code, output, _, mapping = run_import(tmp_path, "n,peak\n1,5\n", tokens="n > 1")
    assert code == 2
    assert output == (
        f"warmfit: error: {mapping}: fields.packed_tokens: gives Boolean values, where a "
        "number is needed (its columns: n, peak).\n"
    )


def test_require_refuses_a_row_its_expression_makes_null(tmp_path: Path) -> None:
    """NULL is not true: TRY_CAST('abc') > 1 refuses the row (where drops it:
    test_import_table.py)."""
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("x,peak\n5,5\nabc,6\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text('require = "TRY_CAST(x AS BIGINT) > 1"\n' + MAPPING.format(tokens="peak"))
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert result.output == (
        f"warmfit: error: {csv_path}, column 'x', row 2: fails require "
        "('TRY_CAST(x AS BIGINT) > 1': x='abc') (line 3).\n"
    )


def import_with(tmp_path: Path, table: str | bytes, mapping_text: str) -> tuple[int, str, Path]:
    """``import table`` of ``table`` (text, or bytes as written) as t.csv through the
    mapping ``mapping_text``: its exit code, output and the table's path."""
    csv_path = tmp_path / "t.csv"
    if isinstance(table, bytes):
        csv_path.write_bytes(table)
    else:
        csv_path.write_text(table)
    mapping = tmp_path / "m.toml"
    mapping.write_text(mapping_text)
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert not out.exists()
    return result.exit_code, result.output, csv_path


@pytest.mark.parametrize(
    ("table", "change", "message"),
    [
        # a rank is an int32: 2**31 is one past it
        (
            "n,r,peak\n1,2147483648,5\n",
            ("baseline_bytes = 0\n", 'baseline_bytes = 0\nrank = "r"\n'),
            "column 'r', row 1: holds '2147483648', which gives fields.rank beyond 32 bits "
            "(a trace holds at most 2,147,483,647) (line 2).",
        ),
        # a flag column's cell that is none of true/false, 1/0, yes/no
        (
            "n,o,peak\n1,no,5\n2,maybe,6\n",
            ("baseline_bytes = 0\n", 'baseline_bytes = 0\noom = "o"\n'),
            "column 'o', row 2: holds 'maybe', where fields.oom needs true or false (1/0, yes/no) "
            "(line 3).",
        ),
        # an empty cell of a flag column is no flag (its text, not a NULL)
        (
            "n,o,peak\n1,no,5\n2,,6\n",
            ("baseline_bytes = 0\n", 'baseline_bytes = 0\noom = "o"\n'),
            "column 'o', row 2: holds '', where fields.oom needs true or false (1/0, yes/no) "
            "(line 3).",
        ),
        (
            "n,s,peak\n1,,5\n",
            ('label = "r"', 'label = "{s}"'),
            "row 1: gives an empty run label (run.label) (line 2).",
        ),
        # the identity column that differs is named, not the first one
        (
            "n,g,c,peak\n1,h,x,5\n2,h,y,6\n",
            ('label = "r"', 'label = "r"\nidentity = ["g", "c"]'),
            "column 'c', row 2: gives the run label 'r' of row 1, but another c ('y', not "
            "'x'): run.label must tell the runs of run.identity apart (line 3).",
        ),
    ],
)
def test_a_row_that_breaks_a_fields_rule_is_named_with_its_column(
    tmp_path: Path, table: str, change: tuple[str, str], message: str
) -> None:
    code, output, csv_path = import_with(
        tmp_path, table, MAPPING.format(tokens="n").replace(*change)
    )
    assert code == 2
    assert output == f"warmfit: error: {csv_path}, {message}\n"


#: A mapping that imports t.csv (n,peak), for the mapping tests to break one key of.
GOOD = MAPPING.format(tokens="n")


def mapping_error(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> str:
    """The output of importing n,peak through the mapping ``text`` (m.toml), beside
    ``files`` (name: text): it must be one error naming m.toml."""
    for name, body in (files or {}).items():
        (tmp_path / name).write_text(body)
    code, output, _ = import_with(tmp_path, "n,peak\n1,5\n", text)
    assert code == 2, output
    prefix = f"warmfit: error: {tmp_path / 'm.toml'}: "
    assert output.startswith(prefix) and output.endswith("\n"), output
    return output[len(prefix) : -1]


def test_a_mapping_that_extends_another_is_one_level_of_strings(tmp_path: Path) -> None:
    assert mapping_error(tmp_path, "extends = 5\n" + GOOD) == (
        "extends: must be the path of another mapping file, as a string."
    )
    base = tmp_path / "base.toml"
    assert (
        mapping_error(
            tmp_path, 'extends = "base.toml"\n', {"base.toml": 'extends = "other.toml"\n' + GOOD}
        )
        == f"extends: {base} extends another mapping itself; one level only."
    )


def test_a_mapping_overrides_a_table_of_its_base_with_a_string(tmp_path: Path) -> None:
    """The base's require table (the cell's text is 5) is replaced whole by the extending
    mapping's expression, which refuses the row where n is 1; and the trace keeps the
    mapping resolved, without extends."""
    (tmp_path / "base.toml").write_text('[require]\npeak = "5"\n' + GOOD)
    code, output, csv_path = import_with(
        tmp_path, "n,peak\n1,5\n", 'extends = "base.toml"\nrequire = "n > 1"\n'
    )
    assert code == 2
    assert output == (
        f"warmfit: error: {csv_path}, column 'n', row 1: fails require ('n > 1': n='1') (line 2).\n"
    )
    mapping = tmp_path / "m.toml"
    mapping.write_text('extends = "base.toml"\ndescription = "d"\n')
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    resolved = json.loads(pq.read_schema(out).metadata[b"warmfit.import.mapping"])
    assert set(resolved) == {"description", "require", "run", "fields"}
    assert resolved["require"] == {"peak": "5"}


def test_a_mapping_that_is_a_directory_or_a_section_that_is_no_table_is_named(
    tmp_path: Path,
) -> None:
    (tmp_path / "m.toml").mkdir()
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("n,peak\n1,5\n")
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(tmp_path / "m.toml"), "-o", str(out)]
    )
    assert result.exit_code == 2
    assert result.output == (
        f"warmfit: error: {tmp_path / 'm.toml'}: the mapping is a directory, not a regular file.\n"
    )
    (tmp_path / "m.toml").rmdir()
    assert mapping_error(tmp_path, 'filter = "n"\n' + GOOD) == "filter: must be a table."


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("[run]", "where = 5\n[run]"), "where: must be a polars SQL expression, as a string."),
        (("[run]", 'where = "  "\n[run]'), "where: must be a polars SQL expression, as a string."),
        (
            ('signature = "s"', "signature = 5"),
            'fields.signature: must be a string, a template such as "{model}-tp{tp}".',
        ),
        (
            ("baseline_bytes = 0", "baseline_bytes = -1"),
            "fields.baseline_bytes: must not be negative; got -1.",
        ),
        (
            ("baseline_bytes = 0", "baseline_bytes = 0\nrank = 2147483648"),
            "fields.rank: must be at most 2,147,483,647; got 2,147,483,648.",
        ),
        # a constant of 40 digits is shown, one of 41 is counted
        (
            ("baseline_bytes = 0", f"baseline_bytes = 1{'0' * 39}"),
            f"fields.baseline_bytes: must be at most 9,223,372,036,854,775,807; got {10**39:,}.",
        ),
        (
            ("baseline_bytes = 0", f"baseline_bytes = 1{'0' * 40}"),
            "fields.baseline_bytes: must be at most 9,223,372,036,854,775,807; got a number of "
            "41 digits.",
        ),
        (
            ('peak_bytes = "peak"', 'peak_bytes = { column = "peak", units = "MiB" }'),
            "fields.peak_bytes.units: is not a key of a number; the keys are add, column, scale, "
            'subtract, unit (or write an expression, "a + b - c").',
        ),
        (
            ('peak_bytes = "peak"', 'peak_bytes = { unit = "MiB" }'),
            "fields.peak_bytes: give either column (one column) or add (a list of columns).",
        ),
        (
            ('peak_bytes = "peak"', "peak_bytes = { column = 5 }"),
            "fields.peak_bytes.column: must be a column name.",
        ),
        (
            ('peak_bytes = "peak"', 'peak_bytes = { column = "peak", unit = "MiB", scale = 2 }'),
            "fields.peak_bytes: give unit or scale, not both.",
        ),
        (
            ('peak_bytes = "peak"', 'peak_bytes = { column = "peak", scale = 0 }'),
            "fields.peak_bytes.scale: must be a positive number; got 0. To combine columns, "
            'write an expression: "seq_len * batch".',
        ),
        (
            ('peak_bytes = "peak"', 'peak_bytes = { column = "peak", scale = inf }'),
            "fields.peak_bytes.scale: must be a positive number; got inf. To combine columns, "
            'write an expression: "seq_len * batch".',
        ),
        (
            ('peak_bytes = "peak"', 'peak_bytes = { column = "peak", scale = "2" }'),
            "fields.peak_bytes.scale: must be a positive number; got '2'. To combine columns, "
            'write an expression: "seq_len * batch".',
        ),
    ],
)
def test_a_broken_value_of_a_mapping_is_named_whole(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    assert mapping_error(tmp_path, text) == message


_CASES_FORM = (
    "must be an expression (\"CASE WHEN gpu = 'A100' THEN 'a100' END\") or a table with one "
    'key, cases = [{ when = {...}, value = "..." }, ...].'
)
_CASE_FORM = (
    'must be { when = { column = value, ... }, value = "template" } (when may be left out).'
)


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        (
            "",
            "output_bytes = { add = [] }\n",
            "fields.output_bytes.add: must name at least one column.",
        ),
        (
            "",
            "oom = 5\n",
            "fields.oom: must be true, false, or a column or expression that gives true or false.",
        ),
        ("waves = [5]\n", "", "waves[0]: must be a table."),
        # a field set at a level that does not set it, and a name that is no field
        (
            "",
            '[[waves]]\nreadings = [{ signature = "x" }]\n',
            "waves[0].readings[0].signature: is not a field here: a reading sets only phase, "
            "whole, peak_bytes, baseline_bytes, oom.",
        ),
        (
            "",
            "[[waves]]\nrank = 1\n",
            "waves[0].rank: is not a field here: a wave sets only signature, kind, packed_tokens, "
            "logical_tokens, output_bytes, static_floor_bytes, phase, whole, peak_bytes, "
            "baseline_bytes, oom.",
        ),
        (
            "",
            "tokens = 1\n",
            "fields.tokens: is not a field here: the fields are rank, signature, kind, "
            "packed_tokens, logical_tokens, output_bytes, static_floor_bytes, phase, whole, "
            "peak_bytes, baseline_bytes, oom.",
        ),
        ("[derive]\nx = 5\n", "", f"derive.x: {_CASES_FORM}"),
        ("[derive.x]\nfoo = 1\n", "", f"derive.x: {_CASES_FORM}"),
        ("[derive.x]\ncases = 5\n", "", f"derive.x: {_CASES_FORM}"),
        ("[derive.x]\ncases = [5]\n", "", f"derive.x.cases[0]: {_CASE_FORM}"),
        (
            '[derive.x]\ncases = [{ when = { n = "1" } }]\n',
            "",
            f"derive.x.cases[0]: {_CASE_FORM}",
        ),
        (
            '[derive.x]\ncases = [{ value = "v", other = 1 }]\n',
            "",
            f"derive.x.cases[0]: {_CASE_FORM}",
        ),
        (
            '[derive.x]\ncases = [{ when = 5, value = "v" }]\n',
            "",
            "derive.x.cases[0].when: must be a table of tests, { column = value }.",
        ),
        ("[derive.x]\ncases = []\n", "", "derive.x: has no cases."),
        (
            "[run]\nfoo = 1\n",
            "",
            "run.foo: is not a key of [run]; the keys are label and identity.",
        ),
        ("order = { distinct = 1 }\n", "", "order.distinct: must be true or false."),
        (
            "order = { distinct = true }\n",
            "",
            "order.distinct: needs order.by: the columns that must differ.",
        ),
        (
            'order = { seed = "7" }\n',
            "",
            "order.seed: must be an integer from 0 to 2**32 - 1; got '7'.",
        ),
        (
            "order = { seed = -1 }\n",
            "",
            "order.seed: must be an integer from 0 to 2**32 - 1; got -1.",
        ),
        (
            "order = { seed = 4294967296 }\n",
            "",
            "order.seed: must be an integer from 0 to 2**32 - 1; got 4294967296.",
        ),
        (
            "waves = []\n",
            "",
            "waves: must be a list of tables, [[waves]], one per wave a row becomes.",
        ),
        (
            "waves = 5\n",
            "",
            "waves: must be a list of tables, [[waves]], one per wave a row becomes.",
        ),
        (
            "",
            "[[waves]]\nreadings = []\n",
            "waves[0].readings: must be a list of tables, one per reading of the wave.",
        ),
        (
            "",
            "[[waves]]\nreadings = 5\n",
            "waves[0].readings: must be a list of tables, one per reading of the wave.",
        ),
        (
            "",
            '[extra]\nsignature = "x"\n',
            "extra.signature: is a column of the trace format; set it under [fields], not [extra].",
        ),
        (
            "",
            "[extra]\nseq = 1\n",
            "extra.seq: is a column of the trace format; set it under [fields], not [extra].",
        ),
        # a brace in a number column of the trace format, even one that is no template
        (
            "",
            '[extra]\nestimate_bytes = "e{"\n',
            "extra.estimate_bytes: is a number column of the trace format (the price the trainer "
            'used, in bytes): give a whole number, a column or expression ("col * 1024") or '
            '{ column = "col", unit = "MiB" }, as [fields] takes, not the template \'e{\'.',
        ),
        (
            "",
            "[metadata]\nx = 5\n",
            'metadata.x: must be a string; quote a key with dots in it ("warmfit.device" = "...").',
        ),
        ("description = 5\n", "", "description: must be a string."),
    ],
)
def test_a_broken_key_of_a_mapping_is_named_whole(
    tmp_path: Path, before: str, after: str, message: str
) -> None:
    """``before`` goes above GOOD's [run] (a [run] there is merged into it: TOML
    refuses a table twice, so it replaces GOOD's first line), ``after`` below its
    [fields]."""
    text = GOOD + after
    text = text.replace("[run]\n", before, 1) if before.startswith("[run]") else before + text
    assert mapping_error(tmp_path, text) == message


def test_the_largest_seed_shuffles(tmp_path: Path) -> None:
    """order.seed 2**32 - 1 is the largest CRC-32 start: the run of 4 rows is shuffled by
    it to rows 1, 4, 2, 3 (2**32 is refused: test_a_broken_key_of_a_mapping_is_named_whole)."""
    from warmfit.importers.table import shuffled_order

    csv_path = tmp_path / "t.csv"
    csv_path.write_text("n,peak\n1,5\n2,6\n3,7\n4,8\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text("order = { shuffle = true, seed = 4294967295 }\n" + GOOD)
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(csv_path), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert shuffled_order("r", 4, 4294967295) == [0, 3, 1, 2]
    assert pq.read_table(out).column("packed_tokens").to_pylist() == [1, 4, 2, 3]


# --- issue 38, tests by pattern (s2) ---

_NO_TEST = (
    "must be a string or an integer (the cell equals it) or a list of them (the cell is one "
    'of them); for any other test write an expression, where = "...".'
)
_NO_TEMPLATE = (
    "is not a template: name a column or write an expression in braces, {column}; write {{ "
    "or }} for a brace."
)
_NO_NUMBER = (
    'must be an integer, a column or an expression ("seq_len * batch"), or a table such as '
    '{ column = "peak_mb", unit = "MiB" }.'
)
_UNITS = "must be one of B, KiB, MiB, GiB, TiB, KB, MB, GB, TB; got"
_PEAK = 'peak_bytes = "peak"'


def _readings(count: int) -> str:
    return "[[waves]]\nreadings = [" + ", ".join(["{}"] * count) + "]\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "sort = 1\n" + GOOD,
            "sort: is not a mapping key; the keys are description, where, filter, require, "
            "derive, run, order, fields, waves, extra, metadata.",
        ),
        # a test of a cell: a string, an integer or a non-empty list of them
        ("[filter]\nn = []\n" + GOOD, f"filter.n: {_NO_TEST}"),
        ("[filter]\nn = 1.5\n" + GOOD, f"filter.n: {_NO_TEST}"),
        ("[filter]\nn = true\n" + GOOD, f"filter.n: {_NO_TEST}"),
        ("[require]\npeak = [5, 2.5]\n" + GOOD, f"require.peak: {_NO_TEST}"),
        (
            '[derive.d]\ncases = [{ when = { n = [] }, value = "v" }]\n' + GOOD,
            f"derive.d.cases[0].when.n: {_NO_TEST}",
        ),
        # a template: an open brace, an empty one, a lone closing one
        (
            GOOD.replace('signature = "s"', 'signature = "{s"'),
            f"fields.signature: '{{s' {_NO_TEMPLATE}",
        ),
        (
            GOOD.replace('signature = "s"', 'signature = "{ }"'),
            f"fields.signature: '{{ }}' {_NO_TEMPLATE}",
        ),
        (GOOD.replace('label = "r"', 'label = "a}b"'), f"run.label: 'a}}b' {_NO_TEMPLATE}"),
        # a number that is neither an integer, a string nor a table: a float, a flag
        (GOOD.replace(_PEAK, "peak_bytes = 1.5"), f"fields.peak_bytes: {_NO_NUMBER}"),
        (GOOD.replace(_PEAK, "peak_bytes = true"), f"fields.peak_bytes: {_NO_NUMBER}"),
        (GOOD.replace(_PEAK, 'peak_bytes = ["peak"]'), f"fields.peak_bytes: {_NO_NUMBER}"),
        ('order = { by = "n" }\n' + GOOD, "order.by: must be a list of column names."),
        (
            GOOD.replace(_PEAK, 'peak_bytes = { add = ["peak"], subtract = "n" }'),
            "fields.peak_bytes.subtract: must be a list of column names.",
        ),
        # units are spelled as the how-to spells them: another letter case is refused
        (
            GOOD.replace(_PEAK, 'peak_bytes = { column = "peak", unit = "mib" }'),
            f"fields.peak_bytes.unit: {_UNITS} 'mib'.",
        ),
        (
            GOOD.replace(_PEAK, 'peak_bytes = { column = "peak", unit = "KIB" }'),
            f"fields.peak_bytes.unit: {_UNITS} 'KIB'.",
        ),
        (
            GOOD.replace(_PEAK, 'peak_bytes = { column = "peak", unit = "Mb" }'),
            f"fields.peak_bytes.unit: {_UNITS} 'Mb'.",
        ),
        (
            GOOD.replace('label = "r"', "identity = []"),
            'run.label: is missing: every mapping names its runs, e.g. label = "{model}-tp{tp}".',
        ),
        (
            "order = { sort = 1 }\n" + GOOD,
            "order.sort: is not a key of [order]; the keys are by, distinct, shuffle and seed.",
        ),
        ('order = { shuffle = "yes" }\n' + GOOD, "order.shuffle: must be true or false."),
        (
            "order = { seed = 1.0 }\n" + GOOD,
            "order.seed: must be an integer from 0 to 2**32 - 1; got 1.0.",
        ),
        (
            "order = { seed = true }\n" + GOOD,
            "order.seed: must be an integer from 0 to 2**32 - 1; got True.",
        ),
        # 1,000 readings a row at most, counted over every wave
        (
            GOOD + _readings(1001),
            "waves: makes 1,001 readings of each row; warmfit takes at most 1,000 (a row is "
            "one measurement of a few waves).",
        ),
        (
            GOOD + _readings(501) + _readings(501),
            "waves: makes 1,002 readings of each row; warmfit takes at most 1,000 (a row is "
            "one measurement of a few waves).",
        ),
        # a field every reading needs: missing, or set on one wave of two, one reading of two
        (
            GOOD.replace('signature = "s"\n', ""),
            "fields.signature: is missing: every reading needs it.",
        ),
        (
            GOOD.replace('packed_tokens = "n"\n', "")
            + '[[waves]]\npacked_tokens = "n"\n[[waves]]\n',
            "fields.packed_tokens: is missing: every reading needs it.",
        ),
        (
            GOOD.replace(_PEAK + "\n", "")
            + '[[waves]]\nreadings = [{ peak_bytes = "peak" }, { phase = "forward" }]\n',
            "fields.peak_bytes: is missing: every reading needs it.",
        ),
        *(
            (
                GOOD + f'[metadata]\n"{key}" = "x"\n',
                f"metadata.{key}: is written by warmfit itself; choose another key.",
            )
            for key in (
                "warmfit.schema",
                "warmfit.per_wave",
                "warmfit.import.mapping",
                "warmfit.import.source",
                "warmfit.import.source_sha256",
            )
        ),
        *(
            (
                GOOD + f'[extra]\n{name} = "n"\n',
                f"extra.{name}: is a column of the trace format; set it under [fields], not "
                "[extra].",
            )
            for name in ("run", "step", "wave", "rank", "whole")
        ),
        (
            GOOD + '[extra]\npadded_tokens = "{n}"\n',
            "extra.padded_tokens: is a number column of the trace format (the batch's tokens, "
            'padding included): give a whole number, a column or expression ("col * 1024") or '
            '{ column = "col", unit = "MiB" }, as [fields] takes, not the template \'{n}\'.',
        ),
        (
            GOOD + '[extra]\nsum_sq_tokens = "{n}"\n',
            "extra.sum_sq_tokens: is a number column of the trace format (the sum of the "
            'squared sequence lengths): give a whole number, a column or expression ("col * '
            '1024") or { column = "col", unit = "MiB" }, as [fields] takes, not the template '
            "'{n}'.",
        ),
    ],
)
def test_every_refusal_of_a_mapping_key_is_named_whole_with_exit_2(
    tmp_path: Path, text: str, message: str
) -> None:
    """Each refusal of mapping.py, through ``warmfit import table`` (exit 2, one line,
    nothing written): the key as written in the file, the value and what to write."""
    assert mapping_error(tmp_path, text) == message


@pytest.mark.parametrize(
    ("table", "text", "message"),
    [
        # the mapping's expressions against the table's header (MAP: KEY: ... (its columns))
        (
            "n,peak\n1,5\n",
            GOOD.replace('signature = "s"', 'signature = "{gpu}"'),
            "{map}: fields.signature: names 'gpu' in braces, which is neither a column of {csv} "
            "nor a value derived before it (its columns: n, peak).",
        ),
        (
            "n,peak\n1,5\n",
            'where = "n + 1"\n' + GOOD,
            "{map}: where: gives Int64 values, not true or false (its columns: n, peak).",
        ),
        (
            "n,peak\n1,5\n",
            'require = "n * 2"\n' + GOOD,
            "{map}: require: gives Int64 values, not true or false (its columns: n, peak).",
        ),
        # nothing kept: the mapping is named, with the rows read
        (
            "n,peak\n1,5\n2,6\n",
            '[filter]\nn = "9"\n' + GOOD,
            "{map}: no row of {csv} passes [filter] (2 rows read); nothing to write. Check the "
            "filter's columns and values.",
        ),
        (  # a count of rows with its thousands separated
            "n,peak\n" + "1,5\n" * 1000,
            '[filter]\nn = "9"\n' + GOOD,
            "{map}: no row of {csv} passes [filter] (1,000 rows read); nothing to write. Check "
            "the filter's columns and values.",
        ),
        (  # one row: "1 row read"
            "n,peak\n1,5\n",
            '[filter]\nn = "9"\n' + GOOD,
            "{map}: no row of {csv} passes [filter] (1 row read); nothing to write. Check the "
            "filter's columns and values.",
        ),
        (
            "n,peak\n1,5\n2,6\n3,7\n",
            'where = "n > 3"\n' + GOOD,
            "{map}: no row of {csv} passes [filter] (3 rows read); nothing to write. Check the "
            "filter's columns and values.",
        ),
        # a cell of blanks is empty, as an empty one
        (
            "n,peak\n1,5\n2,   \n",
            GOOD,
            "{csv}, column 'peak', row 2: is empty, where fields.peak_bytes needs a number "
            "(line 3).",
        ),
        (
            "n,peak\n1,5\n2, \t\n",
            GOOD.replace(_PEAK, 'peak_bytes = { column = "peak", unit = "MiB" }'),
            "{csv}, column 'peak', row 2: is empty, where fields.peak_bytes needs a number "
            "(line 3).",
        ),
        (
            "n,peak\n1,5\n2,6\n",
            "[derive]\nd = \"CASE WHEN n = 1 THEN 'a' END\"\n"
            + GOOD.replace('label = "r"', 'label = "{d}"'),
            "{csv}, column 'n', row 2: n '2' gives no value (NULL) for derive.d; end a CASE "
            "with ELSE (line 3).",
        ),
        # the rules of a reading (no column: the value given is named)
        (
            "n,peak\n1,5\n0,6\n",
            GOOD,
            "{csv}, row 2: gives packed_tokens = 0; a wave has at least one token (line 3).",
        ),
        (
            "n,peak\n1,5\n2,6\n",
            GOOD + "logical_tokens = 1\n",
            "{csv}, row 2: gives logical_tokens = 1, below packed_tokens = 2 (line 3).",
        ),
        # kinds and phases are spelled in lower case, as the trace format's
        (
            "n,peak\n1,5\n",
            GOOD + 'kind = "Flat"\n',
            "{csv}, row 1: gives kind 'Flat': flat, split_child or dp_rank_forward (line 2).",
        ),
        (
            "n,peak\n1,5\n",
            GOOD + 'phase = "Caller"\n',
            "{csv}, row 1: gives phase 'Caller': forward or caller (line 2).",
        ),
        (
            "n,k,peak\n1,flat,5\n2,split,6\n",
            GOOD + 'kind = "{k}"\n',
            "{csv}, row 2: gives kind 'split': flat, split_child or dp_rank_forward (line 3).",
        ),
        # every column a test reads is shown: a case's in name order, require's in its order
        (
            "n,g,c,peak\n1,h,x,5\n2,a,y,6\n",
            '[derive.d]\ncases = [{ when = { g = "h", c = "x" }, value = "H" }]\n'
            + GOOD.replace('label = "r"', 'label = "{d}"'),
            "{csv}, column 'c', row 2: matches no case of derive.d (c='y', g='a') (line 3).",
        ),
        (
            "n,peak\n2,6\n1,5\n",
            'require = "n > 1 AND peak > 5"\n' + GOOD,
            "{csv}, column 'n', row 2: fails require ('n > 1 AND peak > 5': n='1', peak='5') "
            "(line 3).",
        ),
        # a cell that is no number is shown without its blanks
        (
            "n,peak\n1,5\n2, 6x \n",
            GOOD,
            "{csv}, column 'peak', row 2: holds '6x', where fields.peak_bytes needs a number "
            "(line 3).",
        ),
        # an expression in braces that gives NULL is empty text: an empty label is refused
        (
            "n,peak\n1,5\n2,6\n",
            GOOD.replace('label = "r"', "label = \"{CASE WHEN n = 1 THEN 'a' END}\""),
            "{csv}, row 2: gives an empty run label (run.label) (line 3).",
        ),
        # a [require] test compares the cell's text as written: 01 is not 1
        (
            "n,peak\n1,5\n01,6\n",
            "[require]\nn = [2, 1]\n" + GOOD,
            "{csv}, column 'n', row 2: holds '01', where require.n allows only '1', '2' (line 3).",
        ),
        # the table itself: names given twice in name order, whatever the header's order
        (
            "n,peak,z,a,z,a\n1,5,1,1,1,1\n",
            GOOD,
            "{csv}: names a column twice in its header: a, z.",
        ),
        (
            b"n,peak\n1,\xff\n",
            GOOD,
            "{csv}: is not UTF-8 text (invalid start byte at byte 9).",
        ),
    ],
)
def test_every_refusal_of_a_table_row_or_expression_is_named_whole_with_exit_2(
    tmp_path: Path, table: str | bytes, text: str, message: str
) -> None:
    csv_path, mapping = tmp_path / "t.csv", tmp_path / "m.toml"
    code, output, _ = import_with(tmp_path, table, text)
    assert code == 2
    assert output == f"warmfit: error: {message.format(map=mapping, csv=csv_path)}\n"


def _baseline_warning(run: str, share: str, runs: str) -> str:
    return (
        "warning: every baseline_bytes is 0 (the mapping sets none), yet in the run "
        f"'{run}' the smallest peak is {share} of the largest ({runs} runs at 25% or more): "
        "the peaks likely include memory held before each wave, such as the weights, and "
        "every price will be too high. Set fields.baseline_bytes to a column or a constant "
        "(the weights' bytes), or to 0 to say the peaks hold only the wave's own memory.\n"
    )


@pytest.mark.parametrize(
    ("rows", "baseline", "warning"),
    [
        ("a,1,5\na,2,10\nb,1,8\nb,2,10\n", "", _baseline_warning("b", "80%", "2 of 2")),
        # a run of OOM readings only is no run of fitting readings: not counted
        (
            "a,1,5\na,2,10\nb,1,8\nb,2,10\nc,1,9,yes\nc,2,9,yes\n",
            "",
            _baseline_warning("b", "80%", "2 of 2"),
        ),
        # an OOM's peak is no peak of the share: a's fitting 8 of 10, not 1 of 10
        ("a,1,1,yes\na,2,8\na,3,10\n", "", _baseline_warning("a", "80%", "1 of 1")),
        # a's share 20% is below a quarter: one run of two counted
        ("a,1,2\na,2,10\nb,1,8\nb,2,10\n", "", _baseline_warning("b", "80%", "1 of 2")),
        # exactly a quarter warns; a fifth does not
        ("a,1,5\na,2,20\n", "", _baseline_warning("a", "25%", "1 of 1")),
        ("a,1,4\na,2,20\n", "", ""),
        # a mapping that sets baseline_bytes, even to 0, at any level, is not warned
        ("a,1,5\na,2,10\nb,1,8\nb,2,10\n", "baseline_bytes = 0\n", ""),
        ("a,1,5\na,2,10\n", "[[waves]]\nbaseline_bytes = 0\n", ""),
        ("a,1,5\na,2,10\n", "[[waves]]\nreadings = [{ baseline_bytes = 0 }]\n", ""),
    ],
)
def test_the_baseline_warning_is_named_whole_on_stderr_and_the_import_exits_0(
    tmp_path: Path, rows: str, baseline: str, warning: str
) -> None:
    from tests.command_line import warmfit_cli

    csv_path = tmp_path / "t.csv"
    lines = [line if line.count(",") == 3 else line + ",no" for line in rows.splitlines()]
    csv_path.write_text("job,n,peak,o\n" + "\n".join(lines) + "\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text(
        '[run]\nlabel = "{job}"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
        f'peak_bytes = "peak"\noom = "o"\n{baseline}'
    )
    out = tmp_path / "o.parquet"
    result = warmfit_cli("import", "table", csv_path, "--map", mapping, "-o", out)
    assert result.exit_code == 0, result.output
    assert result.stderr == warning
    assert out.exists()


@pytest.mark.parametrize(
    ("cells", "oom"),
    [
        # flags in any letter case, padded with blanks: the how-to's true/false, 1/0, yes/no
        (["TRUE", " Yes ", "1", "No", "FALSE", " 0"], [True, True, True, False, False, False]),
        (["yes", "false"], [True, False]),
    ],
)
def test_flags_in_any_letter_case_and_cells_padded_with_blanks_import(
    tmp_path: Path, cells: list[str], oom: list[bool]
) -> None:
    """The twin of the refusals above: a padded number (' 7 ') is 7, a padded flag in
    another letter case is read as the how-to says."""
    from tests.command_line import warmfit_cli

    csv_path = tmp_path / "t.csv"
    csv_path.write_text(
        "n,peak,o\n" + "".join(f"{i + 1}, {i + 7} ,{c}\n" for i, c in enumerate(cells))
    )
    mapping = tmp_path / "m.toml"
    mapping.write_text(GOOD + 'oom = "o"\n')
    out = tmp_path / "o.parquet"
    result = warmfit_cli("import", "table", csv_path, "--map", mapping, "-o", out)
    assert result.exit_code == 0, result.output
    written = pq.read_table(out).select(["peak_bytes", "oom", "whole"]).to_pylist()
    assert written == [{"peak_bytes": i + 7, "oom": o, "whole": not o} for i, o in enumerate(oom)]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # tomllib's reason is shown whole (its wording is tomllib's, computed here)
        ("[fields]\nx = 1\n[run\n", "toml"),
        ("x = " + "[" * 1500 + "]" * 1500 + "\n", "deep"),
    ],
)
def test_a_mapping_that_cannot_be_read_as_toml_is_named_whole(
    tmp_path: Path, text: str, reason: str
) -> None:
    import tomllib

    if reason == "toml":
        with pytest.raises(tomllib.TOMLDecodeError) as parsed:
            tomllib.loads(text)
        message = f"the mapping is not valid TOML ({parsed.value})."
    else:
        message = (
            "the mapping nests tables or lists too deeply to read; a mapping needs three "
            "levels at most."
        )
    assert mapping_error(tmp_path, text) == message


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("fields.packed_tokens", GOOD.replace('packed_tokens = "n"', 'packed_tokens = "n / s"')),
        ("where", 'where = "n / s > 1"\n' + GOOD),
        ("run.label", GOOD.replace('label = "r"', 'label = "{n / s}"')),
    ],
)
def test_an_expression_polars_cannot_evaluate_is_named_with_its_key_and_reason(
    tmp_path: Path, key: str, text: str
) -> None:
    import polars as pl

    frame = pl.DataFrame({"n": [1], "s": ["a"]})
    with pytest.raises(pl.exceptions.PolarsError) as failed:
        frame.select(pl.sql_expr("n / s"))
    reason = str(failed.value).strip().splitlines()[0]
    code, output, _ = import_with(tmp_path, "n,s,peak\n1,a,5\n", text)
    assert code == 2
    assert output == (
        f"warmfit: error: {tmp_path / 'm.toml'}: {key}: cannot be evaluated: {reason} "
        "(its columns: n, s, peak).\n"
    )


def test_an_output_that_is_no_trace_an_input_or_an_existing_file_is_refused_whole(
    tmp_path: Path,
) -> None:
    """-o names a .parquet file that is none of the inputs (the mapping read as one, even
    named like a trace) and, without --force, does not exist: each refusal whole, exit 2."""
    from tests.command_line import warmfit_output

    csv_path = tmp_path / "t.csv"
    csv_path.write_text("n,peak\n1,5\n")
    mapping = tmp_path / "m.parquet"  # a mapping is TOML whatever its name
    mapping.write_text(GOOD)
    args = ["import", "table", csv_path, "--map", mapping, "-o"]
    out = tmp_path / "o.csv"
    assert warmfit_output(*args, out) == (
        2,
        f"warmfit: error: -o {out}: name a .parquet file; warmfit reads a directory's "
        "*.parquet files as its trace.\n",
    )
    assert warmfit_output(*args, mapping, "--force") == (
        2,
        f"warmfit: error: will not write {mapping}: it is the input {mapping}, and warmfit "
        "never writes onto its input, not even with --force. Name another file.\n",
    )
    out = tmp_path / "o.parquet"
    out.write_bytes(b"x")
    code, output = warmfit_output(*args, out)
    assert (code, output) == (2, f"warmfit: error: will not overwrite without --force: {out}\n")
    assert out.read_bytes() == b"x"


# --- issue 38: the row past int64 named, not a whole number read as a float beside it ---


@pytest.mark.parametrize(
    ("table", "tokens", "row", "cell"),
    [
        # 2**63 - 1 fits; 2**63 in row 2 makes the column floats, where 2**63 - 1 is 2**63
        ("a,peak\n9223372036854775807,5\n9223372036854775808,5\n", "a", 2, "9223372036854775808"),
        # -(2**63 - 1) fits too (below 0 is refused later, by its own words)
        ("a,peak\n-9223372036854775807,5\n9223372036854775808,5\n", "a", 2, "9223372036854775808"),
        # the same two rows the other way round: the first row is the one past
        ("a,peak\n9223372036854775808,5\n9223372036854775807,5\n", "a", 1, "9223372036854775808"),
        # a decimal elsewhere makes the floats: 2**63 - 1 alone is never past, so no row is
        # clean of the rounding and the first flagged row stays named (as floats see it)
        ("a,peak\n9223372036854775807,5\n1.5,5\n", "a", 1, "9223372036854775807"),
        # row 1's whole number is past the limit in integers too (2**62 x 2): it is named
        (
            "a,peak\n4611686018427387904,5\n9223372036854775808,5\n",
            "a * 2",
            1,
            "4611686018427387904",
        ),
    ],
)
def test_a_whole_number_read_as_a_float_is_not_named_past_64_bits(
    tmp_path: Path, table: str, tokens: str, row: int, cell: str
) -> None:
    code, output, csv_path, _ = run_import(tmp_path, table, tokens=tokens)
    assert code == 2
    assert output == (
        f"warmfit: error: {csv_path}, column 'a', row {row}: holds '{cell}', which gives "
        "fields.packed_tokens beyond 64 bits (a trace holds at most 9,223,372,036,854,775,807) "
        f"(line {row + 1}).\n"
    )
