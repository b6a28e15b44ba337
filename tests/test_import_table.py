"""``warmfit import table``: a user's own CSV through a declarative mapping (issue 30).

A table with its own column names imports with a ten-line mapping; a broken
mapping is refused naming its key and column, a bad row naming the file,
column and row; both exit 2 with one message and write nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.command_line import warmfit_output
from warmfit.cli import app
from warmfit.format.trace import read_trace
from warmfit.importers.table import (
    MAPPING_KEY,
    SHA256_KEY,
    SOURCE_KEY,
    import_table,
    load_mapping,
    shuffled_order,
)

#: A user's own table: its own column names, GiB, a column to filter on.
TABLE = """\
job,card,seq_tokens,padded_tokens,peak_gib,status
llama-8b,h100,2048,2048,10.5,done
llama-8b,h100,1024,1024,7.25,done
llama-8b,h100,4096,4096,16,done
llama-8b,h100,8192,8192,0,crashed
mistral-7b,a100,512,640,3.5,done
mistral-7b,a100,1536,2048,5.75,done
"""

#: The ten-line mapping the how-to promises.
MAPPING = """\
order = { by = ["seq_tokens"] }
[filter]
status = "done"
[run]
label = "{job}-{card}"
[fields]
signature = "{job}"
packed_tokens = "seq_tokens"
logical_tokens = "padded_tokens"
peak_bytes = { column = "peak_gib", unit = "GiB" }
"""


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(TABLE)
    return path


def write_map(tmp_path: Path, text: str, name: str = "map.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_users_own_table_imports_with_a_ten_line_mapping(table: Path, tmp_path: Path) -> None:
    mapping = write_map(tmp_path, MAPPING)
    assert len(MAPPING.splitlines()) == 10
    out = tmp_path / "out" / "runs.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert "5 readings in 2 runs from 5 of 6 rows" in output
    trace = read_trace([out])  # a valid v1 trace
    llama = trace.filter(pl.col("run") == "llama-8b-h100").sort("seq")
    # smallest first; one flat wave of one whole caller reading per row; GiB are 2**30 bytes
    assert llama.get_column("packed_tokens").to_list() == [1024, 2048, 4096]
    assert llama.get_column("peak_bytes").to_list() == [7.25 * 2**30, 10.5 * 2**30, 16 * 2**30]
    assert llama.select("wave", "step", "seq").rows() == [(0, 0, 0), (1, 1, 1), (2, 2, 2)]
    assert set(trace.select("kind", "phase", "whole", "oom", "rank").rows()) == {
        ("flat", "caller", True, False, 0)
    }
    assert set(trace.get_column("baseline_bytes")) == {0}
    assert trace.get_column("static_floor_bytes").null_count() == trace.height
    mistral = trace.filter(pl.col("run") == "mistral-7b-a100").sort("seq")
    assert mistral.select("packed_tokens", "logical_tokens").rows() == [(512, 640), (1536, 2048)]
    # provenance: the mapping as read, the table's name and checksum
    metadata = pq.read_schema(out).metadata
    assert metadata[SOURCE_KEY.encode()] == b"runs.csv"
    assert metadata[SHA256_KEY.encode()] == hashlib.sha256(table.read_bytes()).hexdigest().encode()
    assert json.loads(metadata[MAPPING_KEY.encode()])["run"] == {"label": "{job}-{card}"}
    # it replays
    code, output = warmfit_output("replay", str(out), "--format", "json")
    assert code == 0 and len(json.loads(output)["results"]) == 6  # 2 runs, 3 policies


def test_the_output_is_never_the_input_and_needs_force_to_overwrite(
    table: Path, tmp_path: Path
) -> None:
    mapping = write_map(tmp_path, MAPPING)
    out = tmp_path / "runs.parquet"
    args = ["import", "table", str(table), "--map", str(mapping), "-o", str(out)]
    assert warmfit_output(*args)[0] == 0
    first = out.read_bytes()
    code, output = warmfit_output(*args)
    assert code == 2 and "will not overwrite without --force" in output
    assert warmfit_output(*args, "--force")[0] == 0 and out.read_bytes() == first  # deterministic
    # a table named like a trace is still an input: never written over, even with --force
    disguised = tmp_path / "table.parquet"
    disguised.write_text(TABLE)
    code, output = warmfit_output(
        "import", "table", str(disguised), "--map", str(mapping), "-o", str(disguised), "--force"
    )
    assert code == 2 and "never writes onto its input" in output
    assert disguised.read_text() == TABLE
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", "t.csv"
    )
    assert code == 2 and "name a .parquet file" in output
    # a hard link to the table, under another name, is the same file: refused too
    linked = tmp_path / "linked.parquet"
    os.link(disguised, linked)
    code, output = warmfit_output(
        "import", "table", str(disguised), "--map", str(mapping), "-o", str(linked), "--force"
    )
    assert code == 2 and f"will not write {linked}: it is the input {disguised}" in output
    assert linked.read_text() == TABLE and os.path.samefile(linked, disguised)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        # a column the table lacks: the key and the column are named, with the table's columns
        (('by = ["seq_tokens"]', 'by = ["seq_token"]'), "order.by: names the column 'seq_token'"),
        (('"peak_gib"', '"peak_gb"'), "fields.peak_bytes: names the column 'peak_gb'"),
        (('status = "done"', 'state = "done"'), "filter.state: names the column 'state'"),
        (("{job}-{card}", "{job}-{gpu}"), "run.label: names 'gpu' in braces"),
        # a key that is not a key, a value of the wrong kind
        (("order = {", "sort = {"), "sort: is not a mapping key"),
        (('unit = "GiB"', 'unit = "gigs"'), "fields.peak_bytes.unit: must be one of"),
        (('status = "done"', "status = 1.5"), "filter.status: must be a string or an integer"),
        (('status = "done"', 'status = { op = "!=" }'), "filter.status: must be a string"),
        (
            ('signature = "{job}"', 'signature = "{job"'),
            "fields.signature: '{job' is not a template",
        ),
        (('signature = "{job}"', 'sig = "{job}"'), "fields.sig: is not a field here"),
        (('signature = "{job}"', ""), "fields.signature: is missing"),
        (('label = "{job}-{card}"', ""), "run.label: is missing"),
        (("[filter]", "[filter]\n[metadata]\n'warmfit.schema' = '2'"), "metadata.warmfit.schema"),
        (('"seq_tokens"] }', '"seq_tokens"], x = 1 }'), "order.x: is not a key of [order]"),
        (("[fields]", "[fields]\nrun = 'r'"), "fields.run: is not a field here"),
        (("[run]", "[run]\nidentity = 'job'"), "run.identity: must be a list of column names"),
    ],
)
def test_a_broken_mapping_is_refused_naming_its_key_and_column(
    table: Path, tmp_path: Path, change: tuple[str, str], named: str
) -> None:
    text = MAPPING.replace(*change)
    assert text != MAPPING
    mapping = write_map(tmp_path, text)
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2, output
    assert output.startswith(f"warmfit: error: {mapping}: ") and named in output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_mapping_that_is_not_toml_is_refused(table: Path, tmp_path: Path) -> None:
    mapping = write_map(tmp_path, "[filter\nstatus = 'done'\n")
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and f"{mapping}: the mapping is not valid TOML" in output


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (
            ("10.5,done", "ten,done"),
            "column 'peak_gib', row 1: holds 'ten', where fields.peak_bytes",
        ),
        (("10.5,done", ",done"), "column 'peak_gib', row 1: is empty"),
        (("2048,2048,10.5", "2048,1024,10.5"), "row 1: gives logical_tokens = 1024, below"),
        (("a100,512,640", "a100,0,640"), "row 5: gives packed_tokens = 0"),
        (("7.25,done", "-7.25,done"), "column 'peak_gib', row 2: gives fields.peak_bytes ="),
        (("1024,1024,7.25,done", "1024,1024,7.25"), "row 2: has 5 cells where the header names 6"),
    ],
)
def test_a_bad_row_is_refused_naming_file_column_and_row(
    tmp_path: Path, change: tuple[str, str], where: str
) -> None:
    table = tmp_path / "runs.csv"
    table.write_text(TABLE.replace(*change, 1))
    mapping = write_map(tmp_path, MAPPING)
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2, output
    assert output.startswith(f"warmfit: error: {table}, ") and where in output
    assert "(line " in output and "Traceback" not in output and not out.exists()


def test_rows_outside_the_filter_are_not_checked(table: Path, tmp_path: Path) -> None:
    # the crashed row's peak is not a number, but the filter leaves it out
    table.write_text(TABLE.replace("8192,0,crashed", "8192,n/a,crashed"))
    imported = import_table(table, load_mapping(write_map(tmp_path, MAPPING)))
    assert imported.readings.height == 5 and (imported.rows, imported.kept) == (6, 5)


MULTI = """\
[filter]
status = ["done", "crashed"]
[require]
card = ["h100", "a100"]
[derive.size]
cases = [
  { when = { job = "llama-8b" }, value = "8b" },
  { when = { job = ["mistral-7b", "other"] }, value = "7b" },
]
[derive.tail]
cases = [{ when = { status = "crashed" }, value = "-x{{1}}" }, { value = "" }]
[run]
label = "{size}/{card}"
identity = ["job", "card"]
[order]
by = ["seq_tokens"]
[fields]
signature = "{job}"
packed_tokens = "seq_tokens"
rank = 3
static_floor_bytes = 100
oom = "crashed_flag"
[[waves]]
readings = [
  { phase = "forward", peak_bytes = { column = "peak_gib", scale = 1000 } },
  { phase = "caller", peak_bytes = { add = ["peak_gib", "peak_gib"], scale = 1000 } },
]
[[waves]]
kind = "flat"
readings = [{ peak_bytes = 7, baseline_bytes = 2, whole = false }]
[extra]
note = "{job}{tail}"
estimate_bytes = { column = "padded_tokens", scale = 10 }
[metadata]
"mine.source" = "my lab"
"""


def test_derived_values_several_waves_per_row_and_extra_columns(tmp_path: Path) -> None:
    table = tmp_path / "runs.csv"
    table.write_text(
        TABLE.replace(",status\n", ",status,crashed_flag\n")
        .replace("done\n", "done,no\n")
        .replace("crashed\n", "crashed,yes\n")
    )
    imported = import_table(table, load_mapping(write_map(tmp_path, MULTI)))
    frame = imported.readings
    assert imported.runs == 2 and frame.height == 6 * 3
    llama = frame.filter(pl.col("run") == "8b/h100").sort("seq")
    # each row: wave 2i (forward, then a whole caller reading), wave 2i+1 (one reading)
    assert llama.get_column("wave").to_list()[:6] == [0, 0, 1, 2, 2, 3]
    assert llama.get_column("step").to_list()[:6] == [0, 0, 0, 1, 1, 1]
    first = llama.head(3).select("phase", "whole", "peak_bytes", "baseline_bytes").rows()
    assert first == [
        ("forward", False, 7250, 0),
        ("caller", True, 14500, 0),
        ("caller", False, 7, 2),
    ]
    assert set(frame.get_column("rank")) == {3} and set(frame.get_column("static_floor_bytes")) == {
        100
    }
    crashed = frame.filter(pl.col("packed_tokens") == 8192)
    assert set(crashed.get_column("oom")) == {True} and set(crashed.get_column("note")) == {
        "llama-8b-x{1}"
    }
    assert set(frame.filter(pl.col("packed_tokens") == 512).get_column("estimate_bytes")) == {6400}
    assert imported.metadata["mine.source"] == "my lab"


def test_a_row_no_derive_case_matches_is_refused(tmp_path: Path) -> None:
    table = tmp_path / "runs.csv"
    table.write_text(TABLE.replace("mistral-7b,a100,512", "phi-3,a100,512"))
    mapping = write_map(
        tmp_path,
        MAPPING.replace("{job}-{card}", "{size}").replace(
            "[run]", '[derive.size]\ncases = [{ when = { job = "llama-8b" }, value = "8b" }]\n[run]'
        ),
    )
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert (
        code == 2 and "column 'job', row 5: matches no case of derive.size (job='phi-3')" in output
    )


def test_one_label_for_two_identities_and_a_repeated_size_are_refused(
    table: Path, tmp_path: Path
) -> None:
    mapping = write_map(tmp_path, MAPPING.replace('"{job}-{card}"', '"all"\nidentity = ["job"]'))
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and "column 'job', row 5: gives the run label 'all' of row 1" in output
    table.write_text(TABLE + "llama-8b,h100,1024,1024,7.5,done\n")
    mapping = write_map(
        tmp_path, MAPPING.replace('by = ["seq_tokens"]', 'by = ["seq_tokens"], distinct = true')
    )
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and "column 'seq_tokens', row 7: repeats the seq_tokens of row 2" in output


def test_a_shuffle_is_fixed_by_the_run_label_and_the_seed(table: Path, tmp_path: Path) -> None:
    rows = "".join(f"big,h100,{n},{n},{n / 1000},done\n" for n in range(100, 1100, 100))
    table.write_text(TABLE + rows)
    base = write_map(tmp_path, MAPPING)
    shuffled = write_map(tmp_path, 'extends = "map.toml"\n[order]\nshuffle = true\n', "s.toml")
    seeded = write_map(
        tmp_path, 'extends = "map.toml"\n[order]\nshuffle = true\nseed = 7\n', "t.toml"
    )

    def tokens(mapping: Path) -> list[int]:
        frame = import_table(table, load_mapping(mapping)).readings
        return (
            frame.filter(pl.col("run") == "big-h100")
            .sort("seq")
            .get_column("packed_tokens")
            .to_list()
        )

    ascending = tokens(base)
    assert ascending == list(range(100, 1100, 100))
    order = shuffled_order("big-h100", 10)
    assert tokens(shuffled) == [ascending[i] for i in order] != ascending
    assert tokens(seeded) == [ascending[i] for i in shuffled_order("big-h100", 10, 7)]
    assert tokens(seeded) != tokens(shuffled)
    # the extended mapping travels resolved, without its extends key
    resolved = import_table(table, load_mapping(shuffled)).metadata[MAPPING_KEY]
    assert json.loads(resolved)["order"] == {"by": ["seq_tokens"], "shuffle": True}


def test_a_filter_that_keeps_nothing_writes_nothing(table: Path, tmp_path: Path) -> None:
    mapping = write_map(tmp_path, MAPPING.replace('status = "done"', 'status = "queued"'))
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2 and "no row of" in output and not out.exists()


def test_import_starts_without_torch_or_matplotlib(table: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    mapping = write_map(tmp_path, MAPPING)
    probe = (
        "import sys\n"
        "from warmfit.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "heavy = sorted({n.split('.')[0] for n in sys.modules} & {'torch', 'matplotlib'})\n"
        "print('PROBE', code, heavy)\n"
    )
    args = ["import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")]
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.argv = ['warmfit', *{args!r}]\n" + probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "PROBE 0 []" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("cell", "shown"),
    [
        ("1e200000", "holds '1e200000', which gives fields.peak_bytes beyond 64 bits"),
        ("1e20000000", "holds '1e20000000', which gives fields.peak_bytes beyond 64 bits"),
        ("-1e20000000", "holds '-1e20000000', which gives fields.peak_bytes beyond 64 bits"),
        ("9" * 5000, f"holds '{'9' * 37}...', which gives fields.peak_bytes beyond 64 bits"),
        ("8589934592", "holds '8589934592', which gives fields.peak_bytes beyond 64 bits"),
    ],
)
def test_a_huge_number_is_refused_and_never_printed_in_full(
    tmp_path: Path, cell: str, shown: str
) -> None:
    table = tmp_path / "runs.csv"
    table.write_text(TABLE.replace("10.5,done", f"{cell},done", 1))
    mapping = write_map(tmp_path, MAPPING)
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2, output
    assert output.startswith(f"warmfit: error: {table}, column 'peak_gib', row 1: {shown}")
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert len(output) < 400 and not out.exists()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        # a template where the trace holds a number: refused with the mapping's key
        ('estimate_bytes = "{job}"', "extra.estimate_bytes: is a number column"),
        ('padded_tokens = "{padded_tokens}"', "extra.padded_tokens: is a number column"),
        (
            "sum_sq_tokens = 1.5",
            "extra.sum_sq_tokens: must be an integer, a column or an expression",
        ),
        # a number that breaks the trace's own rule for the column: the table's row is
        # named (the first in the order of the runs and their waves: row 2 has the fewest tokens)
        ("sum_sq_tokens = 0", "column 'sum_sq_tokens', row 2: value 0 is not positive"),
        ("padded_tokens = 600", "column 'padded_tokens', row 2: value 600 is below packed_tokens"),
        (
            'padded_tokens = { column = "seq_tokens", subtract = ["card_n"] }',
            "column 'padded_tokens', row 5: value 511 is below packed_tokens",
        ),
    ],
)
def test_extra_columns_of_the_trace_format_hold_numbers_that_keep_its_rules(
    tmp_path: Path, extra: str, named: str
) -> None:
    table = tmp_path / "runs.csv"
    table.write_text(
        TABLE.replace(",status\n", ",status,card_n\n")
        .replace("done\n", "done,0\n")
        .replace("crashed\n", "crashed,0\n")
        .replace("512,640,3.5,done,0", "512,640,3.5,done,1")
    )
    mapping = write_map(tmp_path, MAPPING + f"[extra]\n{extra}\n")
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2, output
    assert named in output, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1
    assert not out.exists()


def test_extra_columns_of_the_trace_format_take_numbers_as_fields_does(
    table: Path, tmp_path: Path
) -> None:
    extra = (
        "[extra]\n"
        'estimate_bytes = { column = "peak_gib", unit = "GiB" }\n'
        'padded_tokens = "padded_tokens"\n'
        "sum_sq_tokens = 7\n"
    )
    mapping = write_map(tmp_path, MAPPING + extra)
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert warmfit_output("validate", str(out))[0] == 0
    trace = read_trace([out]).sort("run", "seq")
    assert trace.get_column("padded_tokens").to_list() == [1024, 2048, 4096, 640, 2048]
    assert set(trace.get_column("sum_sq_tokens")) == {7}
    assert trace.get_column("estimate_bytes").to_list() == trace.get_column("peak_bytes").to_list()


def test_an_output_that_cannot_be_written_is_one_line(table: Path, tmp_path: Path) -> None:
    """-o below a file: exit 2 naming the output, not a traceback from the atomic write."""
    mapping = write_map(tmp_path, MAPPING)
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    out = blocker / "runs.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2 and "Traceback" not in output
    assert output.startswith(f"warmfit: error: cannot write {out}: ")


#: The table a team keeps (issue 40): sizes as two columns, MiB, an OOM cell, the weights.
NEWCOMER = """\
model,seq_len,batch,peak_mem_MiB,weights_MiB
llama-8b,1024,2,20000,15000
llama-8b,2048,2,26000,15000
llama-8b,4096,2,OOM,15000
llama-8b,512,4,19000,15000
"""

NEWCOMER_MAP = """\
order = { by = ["seq_len", "batch"] }
[run]
label = "{model}"
[fields]
signature = "{model}"
packed_tokens = "seq_len * batch"
oom = "peak_mem_MiB = 'OOM'"
peak_bytes = "TRY_CAST(peak_mem_MiB AS DOUBLE) * 1048576"
baseline_bytes = "weights_MiB * 1048576"
"""


def test_the_newcomers_table_imports_with_expressions_and_an_oom_reading(tmp_path: Path) -> None:
    assert len(NEWCOMER_MAP.splitlines()) <= 10
    table = tmp_path / "team.csv"
    table.write_text(NEWCOMER)
    mapping = write_map(tmp_path, NEWCOMER_MAP)
    out = tmp_path / "team.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert "warning" not in output  # the baselines are set
    trace = read_trace([out]).sort("seq")
    # sorted by seq_len then batch: 512x4, 1024x2, 2048x2, 4096x2 (the OOM)
    assert trace.get_column("packed_tokens").to_list() == [2048, 2048, 4096, 8192]
    assert trace.get_column("peak_bytes").to_list() == [
        19000 * 2**20,
        20000 * 2**20,
        26000 * 2**20,
        15000 * 2**20,  # no peak: the OOM reading's peak is its baseline, a lower bound
    ]
    assert set(trace.get_column("baseline_bytes")) == {15000 * 2**20}
    assert trace.get_column("oom").to_list() == [False, False, False, True]
    assert trace.get_column("whole").to_list() == [True, True, True, False]
    # a missing peak is refused where the reading is not an OOM
    table.write_text(NEWCOMER.replace("2048,2,26000", "2048,2,n/a"))
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out), "--force"
    )
    assert (
        code == 2
        and "row 2: peak_mem_MiB 'n/a' gives no value (NULL), where fields.peak_bytes needs a "
        "number"
        in output
    )


def test_all_zero_baselines_under_flat_peaks_are_warned_about(tmp_path: Path) -> None:
    table = tmp_path / "team.csv"
    table.write_text(NEWCOMER)
    mapping = write_map(
        tmp_path, NEWCOMER_MAP.replace('baseline_bytes = "weights_MiB * 1048576"\n', "")
    )
    out = tmp_path / "team.parquet"
    result = CliRunner().invoke(
        app, ["import", "table", str(table), "--map", str(mapping), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    # 19000 / 26000 = 73%: the peaks hold the weights
    assert (
        "warning: every baseline_bytes is 0 (the mapping sets none), yet in the run 'llama-8b'"
        in result.output
    )
    assert "smallest peak is 73% of the largest" in result.output
    assert "warning" in result.stderr and "warning" not in result.stdout  # stdout: the summary
    # saying baseline_bytes = 0 plainly is heard: no warning
    mapping.write_text(mapping.read_text() + "baseline_bytes = 0\n")
    result = CliRunner().invoke(
        app, ["import", "table", str(table), "--map", str(mapping), "-o", str(out), "--force"]
    )
    assert result.exit_code == 0 and "warning" not in result.output


def test_where_derive_and_templates_take_expressions(table: Path, tmp_path: Path) -> None:
    mapping = write_map(
        tmp_path,
        "where = \"status = 'done' AND seq_tokens >= 1024\"\n"
        "[derive]\nsize = \"CASE WHEN job = 'llama-8b' THEN '8b' ELSE '7b' END\"\n"
        '[run]\nlabel = "{size}-{upper(card)}"\n[fields]\nsignature = "{job}"\n'
        'packed_tokens = "seq_tokens"\npeak_bytes = "CAST(peak_gib * 1024 AS BIGINT) * 1048576"\n'
        '[extra]\nratio = "padded_tokens / seq_tokens"\n',
    )
    imported = import_table(table, load_mapping(mapping))
    frame = imported.readings.sort("run", "seq")
    assert frame.get_column("run").to_list() == ["7b-A100", "8b-H100", "8b-H100", "8b-H100"]
    assert frame.get_column("peak_bytes").to_list()[0] == 5888 * 2**20
    assert frame.get_column("ratio").to_list()[0] == 2048 / 1536
    # a NULL derived value names the row; an expression polars cannot parse names the key
    mapping.write_text(mapping.read_text().replace(" ELSE '7b'", ""))
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert (
        code == 2
        and "column 'job', row 6: job 'mistral-7b' gives no value (NULL) for derive.size; end a CASE "
        "with ELSE"
        in output
    )
    mapping.write_text(mapping.read_text().replace('"seq_tokens"', '"seq_tokens +* 2"'))
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert (
        code == 2
        and "fields.packed_tokens: 'seq_tokens +* 2' is not a polars SQL expression" in output
    )
    # an expression polars cannot evaluate, or one that is no test, names the key
    mapping.write_text(
        mapping.read_text()
        .replace("seq_tokens +* 2", "seq_tokens")
        .replace("seq_tokens >= 1024", "seq_tokens = 'x'")
    )
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and "where: cannot be evaluated: cannot compare string with numeric" in output
    mapping.write_text(
        mapping.read_text().replace("status = 'done' AND seq_tokens = 'x'", "seq_tokens + 1")
    )
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and "where: gives Int64 values, not true or false" in output


def test_an_output_never_lands_on_the_mapping_it_extends(table: Path, tmp_path: Path) -> None:
    """Issue 42: -o BASE --force, where the mapping extends BASE, is refused."""
    base = write_map(tmp_path, MAPPING, "base.parquet")  # a TOML file named like a trace
    mapping = write_map(tmp_path, 'extends = "base.parquet"\n', "m.toml")
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(base), "--force"
    )
    assert code == 2 and "never writes onto its input" in output
    assert base.read_text() == MAPPING


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("x = " + "[" * 1500 + "]" * 1500 + "\n", "nests tables or lists too deeply"),
        ("a = " + "{ b = " * 700 + "1" + " }" * 700 + "\n", "nests tables or lists too deeply"),
        (MAPPING + f"rank = {2**63}\n", "fields.rank: must be at most 2,147,483,647"),
        (
            MAPPING + f"output_bytes = {2**63}\n",
            "fields.output_bytes: must be at most 9,223,372,036,854,775,807",
        ),
    ],
)
def test_a_mapping_too_deep_or_a_constant_too_large_is_one_line(
    table: Path, tmp_path: Path, text: str, said: str
) -> None:
    """Issue 42: RecursionError and a constant of 2**63 were tracebacks."""
    mapping = write_map(tmp_path, text)
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and said in output, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1


def test_a_wide_header_is_checked_in_linear_time(tmp_path: Path) -> None:
    """Issue 42: the duplicate check counted each name with list.count (quadratic: 20,000
    columns took 15 s). 200,000 columns: a duplicate is named, and a table that holds
    none imports (quadratically, about 25 minutes)."""
    names = [f"c{i}" for i in range(200_000)]
    table = tmp_path / "wide.csv"
    table.write_text(",".join([*names, "c7"]) + "\n" + ",".join(["1"] * 200_001) + "\n")
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "c1"\npeak_bytes = "c2"\n',
    )
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2 and "names a column twice in its header: c7." in output
    table.write_text(",".join(names) + "\n" + ",".join(["1"] * 200_000) + "\n")
    assert import_table(table, load_mapping(mapping)).readings.height == 1


def test_a_mapping_that_makes_too_many_readings_is_refused(table: Path, tmp_path: Path) -> None:
    """Issue 42: a mapping expanding each row into many readings is capped, early."""
    readings = ", ".join(["{ peak_bytes = 1 }"] * 1001)
    mapping = write_map(tmp_path, MAPPING + f"[[waves]]\nreadings = [{readings}]\n")
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert (
        code == 2
        and "waves: makes 1,001 readings of each row; warmfit takes at most 1,000" in output
    )


def _import_measured(tmp_path: Path, table: Path, mapping: str) -> tuple[int, str, int]:
    """Run the import in its own process: exit code, output and peak memory in KiB."""
    import resource
    import subprocess
    import sys

    path = write_map(tmp_path, mapping, "big.toml")
    out = tmp_path / "big.parquet"
    args = ["-m", "warmfit", "import", "table", str(table), "--map", str(path), "-o", str(out)]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return done.returncode, done.stdout + done.stderr, peak


@pytest.mark.slow
def test_a_million_rows_import_in_memory_linear_in_the_table(tmp_path: Path) -> None:
    """Issue 42: 1,000,000 rows (22 MB of CSV) within 1 GiB (a 2-core VM: 8 s, 563 MiB)."""
    table = tmp_path / "rows.csv"
    with table.open("w") as handle:
        handle.write("model,seq_len,batch,peak_mem_MiB,note\n")
        for i in range(1_000_000):
            handle.write(f"m{i % 50},{i % 4000 + 1},{i % 7 + 1},{1000 + i % 9999}.5,done\n")
    code, output, peak = _import_measured(
        tmp_path,
        table,
        '[run]\nlabel = "{model}"\n[fields]\nsignature = "{model}"\n'
        'packed_tokens = "seq_len * batch"\npeak_bytes = "peak_mem_MiB * 1048576"\n'
        "baseline_bytes = 0\n",
    )
    assert code == 0, output
    assert "1,000,000 readings in 50 runs" in output
    assert peak < 2**20  # KiB: 1 GiB


@pytest.mark.slow
def test_a_million_columns_import_in_memory_linear_in_the_table(tmp_path: Path) -> None:
    """Issue 42: a header of 1,000,000 columns within 1 GiB (a 2-core VM: 3 s, 340 MiB)."""
    table = tmp_path / "cols.csv"
    names = [f"c{i}" for i in range(1_000_000)]
    table.write_text(",".join(names) + "\n" + ",".join(["1"] * 1_000_000) + "\n")
    code, output, peak = _import_measured(
        tmp_path,
        table,
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "c1"\npeak_bytes = "c999999"\n',
    )
    assert code == 0 and "1 reading in 1 run" in output, output
    assert peak < 2**20


_CELL = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(str),
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False).map(str),
)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(_CELL, _CELL, _CELL), min_size=1, max_size=8))
def test_the_shorter_forms_are_the_expressions_they_stand_for(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, str, str]]
) -> None:
    """{ add, subtract, unit } and a bare column give exactly the readings of the
    expressions the how-to says they stand for, on any table of numbers."""
    folder = tmp_path_factory.mktemp("forms")
    table = folder / "t.csv"
    body = "".join(f"r,{i + 1},{a},{b},{c}\n" for i, (a, b, c) in enumerate(rows))
    table.write_text("run,tokens,a,b,c\n" + body)
    common = '[run]\nlabel = "{run}"\n[fields]\nsignature = "s"\npacked_tokens = "tokens"\n'
    forms = {
        "short": common + 'peak_bytes = { add = ["a", "b"], unit = "KiB" }\n'
        '[extra]\nfloor = { column = "c", scale = 3 }\n',
        "expression": common + 'peak_bytes = "(a + b) * 1024"\n[extra]\nfloor = "ROUND(c * 3)"\n',
    }
    frames = {}
    for name, text in forms.items():
        frames[name] = import_table(table, load_mapping(write_map(folder, text, f"{name}.toml")))
    short, expression = frames["short"].readings, frames["expression"].readings
    assert short.get_column("peak_bytes").to_list() == expression.get_column("peak_bytes").to_list()
    assert short.get_column("floor").to_list() == [
        round(v) for v in expression.get_column("floor").cast(pl.Float64).to_list()
    ]


def test_a_derived_value_is_a_name_in_later_expressions_but_no_column(tmp_path: Path) -> None:
    """[derive] d = n * 2 on n = 1: packed_tokens = "d" is 2, logical_tokens = "d + 1" is 3.
    order.by and a case's test name the table's columns: a derived name there is refused
    as a column the table lacks."""
    path = tmp_path / "t.csv"
    path.write_text("n,peak\n1,5\n")
    fields = (
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "d"\n'
        'logical_tokens = "d + 1"\npeak_bytes = "peak"\nbaseline_bytes = 0\n'
    )
    out = tmp_path / "o.parquet"
    mapping = write_map(tmp_path, '[derive]\nd = "n * 2"\n' + fields)
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["packed_tokens", "logical_tokens"]).to_pylist()
    assert rows == [{"packed_tokens": 2, "logical_tokens": 3}]
    for before, key in [
        ('order = { by = ["d"] }\n[derive]\nd = "n * 2"\n', "order.by"),
        (
            '[derive]\nd = "n * 2"\n[derive.e]\ncases = [{ when = { d = "2" }, value = "x" }]\n',
            "derive.e.cases[0].when.d",
        ),
    ]:
        mapping = write_map(tmp_path, before + fields)
        code, output = warmfit_output(
            "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "x.parquet")
        )
        assert code == 2
        assert output == (
            f"warmfit: error: {mapping}: {key}: names the column 'd', which {path} lacks "
            "(its columns: n, peak).\n"
        )


def test_a_flag_and_an_extra_column_take_expressions(tmp_path: Path) -> None:
    """oom = "s = 'b'" makes the second row an OOM reading (so not whole); the extra
    column x = "n + peak" holds 1 + 5 = 6 and 2 + 0 = 2."""
    path = tmp_path / "t.csv"
    path.write_text("n,peak,s\n1,5,a\n2,0,b\n")
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\n[fields]\nsignature = "sig"\npacked_tokens = "n"\n'
        'peak_bytes = "peak"\nbaseline_bytes = 0\noom = "s = \'b\'"\n'
        '[extra]\nx = "n + peak"\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["packed_tokens", "oom", "whole", "x"]).to_pylist()
    assert rows == [
        {"packed_tokens": 1, "oom": False, "whole": True, "x": 6},
        {"packed_tokens": 2, "oom": True, "whole": False, "x": 2},
    ]


def test_a_table_of_only_a_header_has_no_row_to_keep(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job,card,seq_tokens,padded_tokens,peak_gib,status\n")
    mapping = write_map(tmp_path, MAPPING)
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2
    assert output == (
        f"warmfit: error: {mapping}: no row of {path} passes [filter] (0 rows read); nothing "
        "to write. Check the filter's columns and values.\n"
    )


def test_text_numbers_null_floors_and_null_where_as_the_how_to_says(tmp_path: Path) -> None:
    """A text result is read as a number (a CASE of '10' and '20'); a floor of NULL is no
    floor; where's NULL is false, so the row where TRY_CAST('abc') > 1 is NULL is dropped."""
    path = tmp_path / "t.csv"
    path.write_text("s,x,peak\na,5,5\nb,7,6\nc,abc,7\n")
    mapping = write_map(
        tmp_path,
        'where = "TRY_CAST(x AS BIGINT) > 1"\n[run]\nlabel = "r"\n[fields]\nsignature = "sig"\n'
        "packed_tokens = \"CASE WHEN s = 'a' THEN '10' ELSE '20' END\"\n"
        'peak_bytes = "peak"\nbaseline_bytes = 0\nstatic_floor_bytes = "NULL"\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["packed_tokens", "peak_bytes", "static_floor_bytes"])
    assert rows.to_pylist() == [
        {"packed_tokens": 10, "peak_bytes": 5, "static_floor_bytes": None},
        {"packed_tokens": 20, "peak_bytes": 6, "static_floor_bytes": None},
    ]


def test_order_by_puts_empty_cells_first_and_keeps_equal_rows_in_table_order(
    tmp_path: Path,
) -> None:
    """order.by b: an empty b first, then b ascending; 40 rows alternating b = 0, 1 keep
    the table's order within each value (polars sorts 30 rows or more by two keys out of
    order unless told to keep it)."""
    path = tmp_path / "t.csv"
    rows = [f"{i + 1},{i % 2},{i + 1}" for i in range(40)]
    path.write_text("n,b,peak\n" + "\n".join(rows) + "\n41,,5\n")
    mapping = write_map(
        tmp_path,
        'order = { by = ["b"] }\n[run]\nlabel = "r"\n[fields]\nsignature = "s"\n'
        'packed_tokens = "n"\npeak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    trace = pq.read_table(out).to_pydict()
    assert trace["packed_tokens"] == [41, *range(1, 41, 2), *range(2, 41, 2)]
    assert trace["step"] == list(range(41))


def test_int64_arithmetic_exact_past_a_float_imports_to_the_token(tmp_path: Path) -> None:
    """a * 3 with a = 2**60 + 100 is 3,458,764,513,820,541,228 exactly; as floats it is
    512 off (2**60 * 3 against the float nearest the product): the check for int64
    arithmetic that wraps must not take that for a wrap."""
    path = tmp_path / "t.csv"
    path.write_text(f"a,peak\n{2**60 + 100},5\n")
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "a * 3"\n'
        'peak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert pq.read_table(out).column("packed_tokens").to_pylist() == [3_458_764_513_820_541_228]
    assert 3 * (2**60 + 100) == 3_458_764_513_820_541_228


def test_order_distinct_allows_one_size_in_each_of_two_runs(tmp_path: Path) -> None:
    """order.distinct refuses a size twice in one run only: runs a and b both measured
    sizes 1 and 2, and import."""
    path = tmp_path / "t.csv"
    path.write_text("job,n,peak\na,1,5\na,2,6\nb,1,7\nb,2,8\n")
    mapping = write_map(
        tmp_path,
        'order = { by = ["n"], distinct = true }\n[run]\nlabel = "{job}"\n[fields]\n'
        'signature = "s"\npacked_tokens = "n"\npeak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert pq.read_table(out).column("peak_bytes").to_pylist() == [5, 6, 7, 8]


def test_a_run_of_two_rows_is_shuffled_too(tmp_path: Path) -> None:
    """shuffled_order('a', 2) is [1, 0]: the run's two rows swap."""
    assert shuffled_order("a", 2) == [1, 0]
    path = tmp_path / "t.csv"
    path.write_text("n,peak\n1,5\n2,6\n")
    mapping = write_map(
        tmp_path,
        'order = { shuffle = true }\n[run]\nlabel = "a"\n[fields]\nsignature = "s"\n'
        'packed_tokens = "n"\npeak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert pq.read_table(out).column("packed_tokens").to_pylist() == [2, 1]


@pytest.mark.parametrize(("small", "warned"), [(4, True), (3, False)])
def test_the_absolute_peak_warning_starts_at_a_quarter(
    tmp_path: Path, small: int, warned: bool
) -> None:
    """Peaks of 4 and 16 bytes (25%) with no baseline set are warned about; 3 and 16
    (19%) are not."""
    path = tmp_path / "t.csv"
    path.write_text(f"n,peak\n1,{small}\n2,16\n")
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "n"\npeak_bytes = "peak"\n',
    )
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 0, output
    said = "yet in the run 'r' the smallest peak is 25% of the largest (1 of 1 runs at 25% or more)"
    assert (said in output) == warned
    assert ("every baseline_bytes is 0" in output) == warned


@pytest.mark.parametrize(("rows", "capped"), [(20_000, False), (20_001, True)])
def test_a_table_of_more_than_20_million_readings_is_refused_before_any_is_made(
    tmp_path: Path, rows: int, capped: bool
) -> None:
    """1,000 readings a row: 20,000 rows make 20,000,000 readings, the most an import makes
    (then the next check refuses row 2, which breaks run.identity, before any reading
    is made); 20,001 rows are refused whole."""
    path = tmp_path / "t.csv"
    path.write_text("n,g,peak\n" + "1,x,5\n" + "1,y,5\n" * (rows - 1))
    readings = ", ".join(["{}"] * 1000)
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\nidentity = ["g"]\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
        f'peak_bytes = "peak"\nbaseline_bytes = 0\n[[waves]]\nreadings = [{readings}]\n',
    )
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2
    if capped:
        assert output == (
            f"warmfit: error: {mapping}: 20,001 rows of {path} kept, 1,000 readings each, make "
            "20,001,000 readings; warmfit imports at most 20,000,000 at once. Import part of "
            "the table (where = ...), or fewer readings per row.\n"
        )
    else:
        assert output.startswith(f"warmfit: error: {path}, column 'g', row 2: gives the run label")


def test_a_table_that_keeps_no_row_imports_no_run(table: Path, tmp_path: Path) -> None:
    """import_table itself (the CLI then refuses to write): 6 rows read, none kept, 0 runs."""
    mapping = load_mapping(write_map(tmp_path, MAPPING.replace('"done"', '"lost"')))
    imported = import_table(table, mapping)
    assert (imported.rows, imported.kept, imported.runs) == (6, 0, 0)
    assert imported.readings.height == 0 and imported.warnings == []


def test_two_readings_a_row_are_written_row_by_row(tmp_path: Path) -> None:
    """Two rows of one wave of two readings (forward, then caller): the readings of row 1,
    then those of row 2, seq 0 to 3; an empty estimate_bytes in [extra] is null."""
    path = tmp_path / "t.csv"
    path.write_text("n,f,c,e\n1,10,11,7\n2,20,21,\n")
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "n"\nbaseline_bytes = 0\n'
        '[[waves]]\nreadings = [{ phase = "forward", whole = false, peak_bytes = "f" }, '
        '{ phase = "caller", peak_bytes = "c" }]\n[extra]\nestimate_bytes = "e"\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["seq", "wave", "phase", "peak_bytes", "estimate_bytes"])
    assert rows.to_pylist() == [
        {"seq": 0, "wave": 0, "phase": "forward", "peak_bytes": 10, "estimate_bytes": 7},
        {"seq": 1, "wave": 0, "phase": "caller", "peak_bytes": 11, "estimate_bytes": 7},
        {"seq": 2, "wave": 1, "phase": "forward", "peak_bytes": 20, "estimate_bytes": None},
        {"seq": 3, "wave": 1, "phase": "caller", "peak_bytes": 21, "estimate_bytes": None},
    ]


def test_the_mapping_is_kept_as_written_beyond_ascii(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("n,peak\n1,5\n")
    mapping = write_map(
        tmp_path,
        'description = "mesures de l\'équipe, 10 µs"\n[run]\nlabel = "r"\n[fields]\n'
        'signature = "s"\npacked_tokens = "n"\npeak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    stored = pq.read_schema(out).metadata[MAPPING_KEY.encode()].decode()
    assert '"description":"mesures de l\'équipe, 10 µs"' in stored


def test_a_whole_reading_must_be_the_caller_reading_of_a_flat_wave(tmp_path: Path) -> None:
    """whole = true on a forward reading of a flat wave is refused, as on a caller
    reading of a split child."""
    path = tmp_path / "t.csv"
    path.write_text("n,peak\n1,5\n")
    for change in ['phase = "forward"\n', 'kind = "split_child"\n']:
        mapping = write_map(
            tmp_path,
            '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
            f'peak_bytes = "peak"\nbaseline_bytes = 0\nwhole = true\n{change}',
        )
        code, output = warmfit_output(
            "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
        )
        assert code == 2
        assert output == (
            f"warmfit: error: {path}, row 1: gives a whole reading that is not the caller "
            "reading of a flat wave (line 2).\n"
        )


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        # a run of one reading says nothing about held memory
        ("a,1,5\n", None),
        # the largest share is named: b's 80%, above a's 50%
        (
            "a,1,5\na,2,10\nb,1,8\nb,2,10\n",
            "in the run 'b' the smallest peak is 80% of the largest (2 of 2",
        ),
        # equal shares: the first run by name
        (
            "b,1,5\nb,2,10\na,1,5\na,2,10\n",
            "in the run 'a' the smallest peak is 50% of the largest (2 of 2",
        ),
    ],
)
def test_the_absolute_peak_warning_names_the_run_of_the_largest_share(
    tmp_path: Path, rows: str, said: str | None
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("job,n,peak\n" + rows)
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "{job}"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
        'peak_bytes = "peak"\n',
    )
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 0, output
    if said is None:
        assert "every baseline_bytes is 0" not in output
    else:
        assert said in output


def test_order_distinct_refuses_a_run_of_two_rows_of_one_size(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("n,peak\n1,5\n1,6\n")
    mapping = write_map(
        tmp_path,
        'order = { by = ["n"], distinct = true }\n[run]\nlabel = "r"\n[fields]\n'
        'signature = "s"\npacked_tokens = "n"\npeak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(tmp_path / "o.parquet")
    )
    assert code == 2
    assert output == (
        f"warmfit: error: {path}, column 'n', row 2: repeats the n of row 1 in the run 'r' "
        "(order.distinct): keep one, or tell them apart in run.label (line 3).\n"
    )


def test_a_scale_below_one_and_the_largest_rank_import(tmp_path: Path) -> None:
    """scale = 0.5 halves 5 bytes to 2.5, rounded half to even: 2; a rank of 2**31 - 1,
    the largest an int32 holds, is taken as written."""
    path = tmp_path / "t.csv"
    path.write_text("n,peak\n1,5\n")
    mapping = write_map(
        tmp_path,
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
        'peak_bytes = { column = "peak", scale = 0.5 }\nbaseline_bytes = 0\nrank = 2147483647\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    row = pq.read_table(out).select(["peak_bytes", "rank"]).to_pylist()
    assert row == [{"peak_bytes": 2, "rank": 2_147_483_647}]


# --- audit of 12-06g (audit2) ---


def test_the_cap_on_readings_counts_the_kept_rows_not_the_tables(tmp_path: Path) -> None:
    """20,001 rows at 1,000 readings a row would be 20,001,000 readings, past the cap of
    20,000,000; the filter keeps one row, so 1,000 readings are made and written."""
    path = tmp_path / "t.csv"
    path.write_text("n,g,peak\n" + "1,x,5\n" + "1,y,5\n" * 20_000)
    readings = ", ".join(["{}"] * 1000)
    mapping = write_map(
        tmp_path,
        '[filter]\ng = "x"\n[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
        f'peak_bytes = "peak"\nbaseline_bytes = 0\n[[waves]]\nreadings = [{readings}]\n',
    )
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert pq.read_metadata(out).num_rows == 1000


# --- issue 38, tests by pattern (s2) ---

_BASE = '[run]\nlabel = "{job}"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'


def _import_rows(tmp_path: Path, rows: str, mapping: str) -> tuple[int, str, Path]:
    path = tmp_path / "t.csv"
    path.write_text(rows)
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import", "table", str(path), "--map", str(write_map(tmp_path, mapping)), "-o", str(out)
    )
    return code, output, out


@pytest.mark.parametrize(
    ("unit", "peaks"),
    [
        # (a - b) x unit: 3 - 1 = 2 units; 2.5 - 0.5 = 2 units: the unit multiplies the
        # difference, never the added columns alone
        ("KiB", [2048, 2048]),
        ("KB", [2000, 2000]),
        ("B", [2, 2]),
        ("MiB", [2 * 2**20, 2 * 2**20]),
    ],
)
def test_subtract_is_taken_before_the_unit_in_every_unit(
    tmp_path: Path, unit: str, peaks: list[int]
) -> None:
    code, output, out = _import_rows(
        tmp_path,
        "job,n,a,b\nj,1,3,1\nj,2,2.5,0.5\n",
        _BASE + f'peak_bytes = {{ add = ["a"], subtract = ["b"], unit = "{unit}" }}\n'
        "baseline_bytes = 0\n",
    )
    assert code == 0, output
    assert pq.read_table(out).column("peak_bytes").to_pylist() == peaks


def test_a_wave_overrides_fields_and_a_reading_overrides_its_wave(tmp_path: Path) -> None:
    """[fields] sets signature s and kind flat; the second wave sets t and split_child, its
    second reading phase forward: each level wins over the one above, reading by reading."""
    code, output, out = _import_rows(
        tmp_path,
        "job,n,peak\nj,1,5\n",
        _BASE + 'kind = "flat"\npeak_bytes = "peak"\nbaseline_bytes = 0\n[[waves]]\n'
        '[[waves]]\nsignature = "t"\nkind = "split_child"\nphase = "caller"\n'
        'readings = [{}, { phase = "forward" }]\n',
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["wave", "seq", "signature", "kind", "phase", "whole"])
    assert rows.to_pylist() == [
        {"wave": 0, "seq": 0, "signature": "s", "kind": "flat", "phase": "caller", "whole": True},
        {
            "wave": 1,
            "seq": 1,
            "signature": "t",
            "kind": "split_child",
            "phase": "caller",
            "whole": False,
        },
        {
            "wave": 1,
            "seq": 2,
            "signature": "t",
            "kind": "split_child",
            "phase": "forward",
            "whole": False,
        },
    ]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        # two empty cells of order.by in one run are equal: refused, naming both rows
        (
            "job,n,pos,peak\nj,1,,5\nj,2,,6\n",
            "column 'pos', row 2: repeats the pos of row 1 in the run 'j' (order.distinct): "
            "keep one, or tell them apart in run.label (line 3).",
        ),
        # an empty cell sorts first: the repeat named is row 3's 1 after row 1's 1
        (
            "job,n,pos,peak\nj,1,1,5\nj,2,,6\nj,3,1,7\n",
            "column 'pos', row 3: repeats the pos of row 1 in the run 'j' (order.distinct): "
            "keep one, or tell them apart in run.label (line 4).",
        ),
        # one empty cell in each of two runs: no repeat
        ("job,n,pos,peak\nj,1,,5\nk,2,,6\n", None),
    ],
)
def test_order_distinct_counts_two_empty_cells_as_equal(
    tmp_path: Path, rows: str, message: str | None
) -> None:
    code, output, out = _import_rows(
        tmp_path,
        rows,
        'order = { by = ["pos"], distinct = true }\n' + _BASE + 'peak_bytes = "peak"\n'
        "baseline_bytes = 0\n",
    )
    if message is None:
        assert code == 0, output
        return
    assert (code, output) == (2, f"warmfit: error: {tmp_path / 't.csv'}, {message}\n")
    assert not out.exists()


def test_empty_cells_of_order_by_come_first_in_each_run(tmp_path: Path) -> None:
    code, output, out = _import_rows(
        tmp_path,
        "job,n,pos,peak\nj,1,2,5\nk,2,1,6\nj,3,,7\nk,4,,8\nj,4,10,9\n",
        'order = { by = ["pos"] }\n' + _BASE + 'peak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["run", "step", "packed_tokens"]).to_pylist()
    assert [(r["run"], r["step"], r["packed_tokens"]) for r in rows] == [
        ("j", 0, 3),
        ("j", 1, 1),
        ("j", 2, 4),
        ("k", 0, 4),
        ("k", 1, 2),
    ]


@pytest.mark.parametrize("kind", ["flat", "split_child", "dp_rank_forward"])
def test_every_kind_imports_and_only_a_flat_caller_reading_is_whole(
    tmp_path: Path, kind: str
) -> None:
    code, output, out = _import_rows(
        tmp_path,
        "job,n,peak,o\nj,1,5,no\nj,2,6,yes\n",
        _BASE + f'kind = "{kind}"\npeak_bytes = "peak"\nbaseline_bytes = 0\noom = "o"\n',
    )
    assert code == 0, output
    assert pq.read_table(out).column("whole").to_pylist() == [kind == "flat", False]


@pytest.mark.parametrize(
    "form", ['"floor + 0"', '"floor"', '{ column = "floor" }', '{ add = ["floor"], unit = "B" }']
)
def test_an_integer_column_with_empty_cells_stays_exact_in_every_form(
    tmp_path: Path, form: str
) -> None:
    """2**53 + 1 is no float: a column of integers and empty cells is integers, so an
    expression, the bare column and the table form keep it to the byte, and 2**63 - 1 too;
    an empty cell is no floor."""
    code, output, out = _import_rows(
        tmp_path,
        f"job,n,floor\nj,1,{2**53 + 1}\nj,2,\nj,3,{2**63 - 1}\n",
        _BASE + f"peak_bytes = 5\nbaseline_bytes = 0\nstatic_floor_bytes = {form}\n",
    )
    assert code == 0, output
    floors = pq.read_table(out).column("static_floor_bytes").to_pylist()
    assert floors == [9_007_199_254_740_993, None, 9_223_372_036_854_775_807]


def test_a_template_shows_each_cell_as_written_not_as_its_number(tmp_path: Path) -> None:
    """{column} is the cell as written (the how-to): 01 stays 01, 1.50 stays 1.50, while
    an expression in braces gives its value ({r + 0} is 1)."""
    code, output, out = _import_rows(
        tmp_path,
        "job,r,v,n,peak\nj,01,1.50,1,5\nj,2,3,2,6\n",
        '[run]\nlabel = "{job}-{r}"\n[fields]\nsignature = "{v}/{r + 0}"\npacked_tokens = "n"\n'
        'peak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    assert code == 0, output
    rows = pq.read_table(out).select(["run", "signature"]).to_pylist()
    assert rows == [
        {"run": "j-01", "signature": "1.50/1"},
        {"run": "j-2", "signature": "3/2"},
    ]


def test_a_table_that_starts_with_a_byte_order_mark_imports_and_keeps_its_bytes_digest(
    tmp_path: Path,
) -> None:
    """UTF-8 with a byte-order mark (as spreadsheets save CSV): the first column is 'job',
    not '\\ufeffjob'; the SHA-256 kept is of the bytes read, the mark included."""
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfjob,n,peak\nj,1,5\n")
    out = tmp_path / "o.parquet"
    code, output = warmfit_output(
        "import",
        "table",
        str(path),
        "--map",
        str(write_map(tmp_path, _BASE + 'peak_bytes = "peak"\nbaseline_bytes = 0\n')),
        "-o",
        str(out),
    )
    assert code == 0, output
    assert pq.read_table(out).column("run").to_pylist() == ["j"]
    digest = pq.read_schema(out).metadata[SHA256_KEY.encode()].decode()
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_decimal_column_with_empty_cells_is_numbers_in_an_expression(tmp_path: Path) -> None:
    """10.5 and an empty cell: the column is numbers (the empty cell NULL), so "peak * 1024"
    is 10,752 bytes, and the OOM row with no peak holds its baseline, 0."""
    code, output, out = _import_rows(
        tmp_path,
        "job,n,peak,o\nj,1,10.5,no\nj,2,,yes\n",
        _BASE + 'peak_bytes = "peak * 1024"\nbaseline_bytes = 0\noom = "o"\n',
    )
    assert code == 0, output
    assert pq.read_table(out).column("peak_bytes").to_pylist() == [10_752, 0]


# --- fresh audit of 12-06 (fa3) ---


@pytest.mark.parametrize(
    ("keep", "refusal"),
    [
        # where and [filter] drop the V100 row (row 2) before [require] looks at it
        ("where = \"gpu <> 'V100'\"\n", None),
        ('[filter]\ngpu = "A100"\n', None),
        # nothing drops it: [require] refuses it, naming its row
        ("", "column 'gpu', row 2: holds 'V100', where require.gpu allows only 'A100' (line 3)"),
    ],
)
def test_require_checks_only_the_rows_where_and_filter_keep(
    tmp_path: Path, keep: str, refusal: str | None
) -> None:
    code, output, out = _import_rows(
        tmp_path,
        "job,n,gpu,peak\nj,1,A100,5\nj,2,V100,6\n",
        keep + '[require]\ngpu = "A100"\n' + _BASE + 'peak_bytes = "peak"\nbaseline_bytes = 0\n',
    )
    if refusal is None:
        assert code == 0, output
        assert pq.read_table(out).column("peak_bytes").to_pylist() == [5]
    else:
        assert (code, output) == (2, f"warmfit: error: {tmp_path / 't.csv'}, {refusal}.\n")


@pytest.mark.parametrize(
    ("peak", "cells", "column"),
    [
        # one column: the cell that is negative
        ('"a"', "-4,5", "a"),
        # an expression over two columns: the first it names, whichever cell is larger
        ('"a - b"', "1,5", "a"),
        ('"b - a"', "5,1", "b"),
        ('{ add = ["a"], subtract = ["b"] }', "1,5", "a"),
    ],
)
def test_a_number_below_0_names_the_first_column_its_expression_reads(
    tmp_path: Path, peak: str, cells: str, column: str
) -> None:
    """Every case makes peak_bytes -4 on row 1: the refusal names the row, the first
    column the value reads and the value."""
    code, output, _ = _import_rows(
        tmp_path,
        f"job,n,a,b\nj,1,{cells}\n",
        _BASE + f"peak_bytes = {peak}\nbaseline_bytes = 0\n",
    )
    assert (code, output) == (
        2,
        f"warmfit: error: {tmp_path / 't.csv'}, column '{column}', row 1: gives "
        "fields.peak_bytes = -4, below 0 (line 2).\n",
    )


@pytest.mark.parametrize(
    ("base", "mine", "peaks"),
    [
        # the base's column, replaced by the mapping's table form: 5 KiB
        ('"p"', '{ column = "p", unit = "KiB" }', [5120]),
        # the base's table form, replaced by the mapping's column: 5 B
        ('{ column = "p", unit = "KiB" }', '"p"', [5]),
        # two table forms: merged key by key (the base's column, the mapping's unit)
        ('{ column = "p", unit = "KiB" }', '{ column = "p", unit = "MB" }', [5_000_000]),
    ],
)
def test_a_mapping_replaces_a_value_of_its_base_whatever_the_forms(
    tmp_path: Path, base: str, mine: str, peaks: list[int]
) -> None:
    (tmp_path / "base.toml").write_text(_BASE + f"peak_bytes = {base}\nbaseline_bytes = 0\n")
    code, output, out = _import_rows(
        tmp_path, "job,n,p\nj,1,5\n", f'extends = "base.toml"\n[fields]\npeak_bytes = {mine}\n'
    )
    assert code == 0, output
    assert pq.read_table(out).column("peak_bytes").to_pylist() == peaks
