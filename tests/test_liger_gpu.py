"""traces/liger-gpu: Liger-Kernel's published GPU memory curves as runs, in two
orders, imported by the mappings beside them (warmfit import table) and checked
number by number against the CSV they are built from."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.format.trace import read_trace
from warmfit.importers.table import MAPPING_KEY, import_table, load_mapping
from warmfit.replay import replay
from warmfit.report.gate import expectations_toml, parse_expectations

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "traces" / "liger-gpu"
SOURCE = TRACE / "source" / "all_benchmark_data.csv"
ORDERS = ("ascending", "shuffled")
#: The mapping of each order, committed beside the CSV.
MAPS = {"ascending": TRACE / "source" / "map.toml", "shuffled": TRACE / "source" / "shuffled.toml"}


def liger_gpu_readings(order: str, source: Path = SOURCE) -> pl.DataFrame:
    return import_table(source, load_mapping(MAPS[order])).readings


def stored(order: str) -> pl.DataFrame:
    return read_trace([TRACE / f"{order}.parquet"])


def series(frame: pl.DataFrame) -> dict[str, list[tuple[int, int]]]:
    """Each run's (tokens, peak) in wave order, by its label without the order's prefix."""
    runs: dict[str, list[tuple[int, int]]] = {}
    for run, tokens, peak in (
        frame.sort("run", "seq").select("run", "packed_tokens", "peak_bytes").rows()
    ):
        runs.setdefault(run.split("/", 1)[1], []).append((tokens, peak))
    return runs


@pytest.mark.parametrize("order", ORDERS)
def test_the_stored_trace_is_what_the_import_writes(order: str, tmp_path: Path) -> None:
    written = tmp_path / f"{order}.parquet"
    args = ["import", "table", str(SOURCE), "--map", str(MAPS[order]), "-o", str(written)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert written.read_bytes() == (TRACE / written.name).read_bytes()


def test_the_trace_carries_its_mapping_and_the_csv_checksum() -> None:
    import hashlib

    import pyarrow.parquet as pq

    metadata = pq.read_schema(TRACE / "shuffled.parquet").metadata
    assert metadata[b"warmfit.import.source"] == b"all_benchmark_data.csv"
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()
    assert metadata[b"warmfit.import.source_sha256"] == digest.encode()
    mapping = json.loads(metadata[MAPPING_KEY.encode()])
    # the mapping as resolved: shuffled.toml's own keys over map.toml's
    base = tomllib.loads(MAPS["ascending"].read_text())
    assert mapping["order"] == base["order"] | {"shuffle": True}
    assert mapping["filter"] == base["filter"] and "extends" not in mapping


def test_the_source_and_its_licence_travel_with_the_trace() -> None:
    with SOURCE.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # the whole published file, unchanged: 1,649 speed and 799 memory rows
    assert Counter(r["metric_name"] for r in rows) == {"speed": 1649, "memory": 799}
    licence = (TRACE / "source" / "LICENSE").read_text()
    assert "BSD 2-CLAUSE" in licence and "LinkedIn Corporation" in licence
    readme = (TRACE / "README.md").read_text()
    assert "2120862ba532c9449e72d603ba6324310ae756e7" in readme and "BSD-2-Clause" in readme


@pytest.mark.parametrize("order", ORDERS)
def test_one_run_per_series_one_whole_reading_per_size(order: str) -> None:
    readings = stored(order)
    # 402 memory rows swept over tokens (T, BT, seq_len, L) make 72 series of 4 to 9 sizes
    assert readings.height == 402
    runs = readings.group_by("run").agg(pl.len().alias("sizes"))
    assert runs.height == 72
    assert Counter(runs.get_column("sizes").to_list()) == {4: 18, 5: 28, 6: 4, 7: 16, 9: 6}
    assert all(run.startswith(f"{order}/") for run in runs.get_column("run"))
    # one wave per size, one whole caller reading per wave, nothing but the peak priced
    assert readings.select(pl.struct("run", "wave").n_unique()).item() == 402
    assert set(readings.select("kind", "phase", "whole", "oom").rows()) == {
        ("flat", "caller", True, False)
    }
    assert set(readings.select("rank", "baseline_bytes", "output_bytes").rows()) == {(0, 0, 0)}
    assert readings.get_column("static_floor_bytes").null_count() == 402
    assert (readings.get_column("packed_tokens") == readings.get_column("logical_tokens")).all()
    assert (readings.get_column("seq") == readings.get_column("wave")).all()
    # one signature per run: the kernel
    assert (readings.get_column("signature") == readings.get_column("kernel")).all()
    assert (
        readings.group_by("run")
        .agg(pl.col("signature").n_unique())
        .get_column("signature")
        .to_list()
        == [1] * 72
    )


def test_readings_carry_the_csv_numbers() -> None:
    # MB are 2**20 bytes; each row of the CSV, by its line number there:
    readings = stored("ascending")

    def peak(run: str, tokens: int) -> int:
        row = readings.filter((pl.col("run") == run) & (pl.col("packed_tokens") == tokens))
        assert row.height == 1
        return int(row.get_column("peak_bytes").item())

    # line 386: rope, liger, full, A100, T = 1024: 49.13330078125 MB
    assert peak("ascending/rope-liger-full-a100", 1024) == 51_520_000
    # line 198: fused_linear_cross_entropy, liger, full, A100, BT = 4096: 4245.5478515625 MB
    assert peak("ascending/fused_linear_cross_entropy-liger-full-a100", 4096) == 4_451_779_584
    # lines 2076 and 2084: fused_moe, liger, full, H100, T = 128 and 32768:
    # 5061.021484375 and 8261.533203125 MB
    assert peak("ascending/fused_moe-liger-full-h100", 128) == 5_306_865_664
    assert peak("ascending/fused_moe-liger-full-h100", 32768) == 8_662_845_440
    # line 748: multi_token_attention, torch, full, RTX 3090, L = 32: 0.9599609375 MB
    assert peak("ascending/multi_token_attention-torch-full-rtx3090", 32) == 1_006_592
    # line 1321: fused_neighborhood_attention, torch, full, H100, hidden_size 512,
    # dilation 2, seq_len = 4096: 4332.0234375 MB
    run = "ascending/fused_neighborhood_attention-torch-full-h100-hidden_size512-dilation2"
    assert peak(run, 4096) == 4_542_455_808
    # the extra columns say which series a run is
    first = readings.filter(pl.col("run") == run).row(0, named=True)
    assert (first["kernel"], first["provider"], first["mode"], first["x_name"]) == (
        "fused_neighborhood_attention",
        "torch",
        "full",
        "seq_len",
    )
    assert first["gpu"] == "NVIDIA H100 80GB HBM3"
    assert json.loads(first["config"])["dilation"] == 2


def test_ascending_runs_grow() -> None:
    for points in series(stored("ascending")).values():
        tokens = [n for n, _ in points]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_some_published_series_repeat_another_s_numbers() -> None:
    # as published: 72 series, 49 distinct curves (backward = full for geglu, the tiled
    # kernels and liger's fused_moe; tiled_geglu = tiled_swiglu; dilation 1 = 2 at 512)
    curves: dict[tuple[tuple[int, int], ...], list[str]] = {}
    for label, points in series(stored("ascending")).items():
        curves.setdefault(tuple(points), []).append(label)
    assert len(curves) == 49
    assert ["fused_moe-liger-backward-h100", "fused_moe-liger-full-h100"] in curves.values()


def test_each_shuffled_run_holds_its_ascending_twin_in_another_order() -> None:
    ascending, shuffled = series(stored("ascending")), series(stored("shuffled"))
    assert ascending.keys() == shuffled.keys()
    for label, points in ascending.items():
        assert Counter(shuffled[label]) == Counter(points), label
    # the fixed seeds happen to move every one of the 72 series
    assert sum(shuffled[label] != points for label, points in ascending.items()) == 72


def test_the_shuffle_is_fixed_by_the_label() -> None:
    # two builds in one process give the same order (the seed is the label's CRC-32)
    again = liger_gpu_readings("shuffled")
    assert again.equals(liger_gpu_readings("shuffled"))
    assert (
        series(again)["rope-liger-full-a100"] == series(stored("shuffled"))["rope-liger-full-a100"]
    )


def test_labels_are_usable_as_keys_of_an_expectations_file() -> None:
    result = replay(read_trace([TRACE]), ["max-merge"])
    runs = set(parse_expectations(expectations_toml(result)).runs)
    labels = set(read_trace([TRACE]).get_column("run"))
    assert runs == labels and len(labels) == 2 * 72
    # characters that need no escaping in a TOML string
    assert all(set(label) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-/") for label in labels)


def test_a_size_measured_twice_in_one_series_is_refused(tmp_path: Path) -> None:
    lines = SOURCE.read_text().splitlines(keepends=True)
    # line 386 again, as if a later run had measured rope at T = 1024 once more
    source = tmp_path / "twice.csv"
    source.write_text("".join([*lines, lines[385]]))
    out = tmp_path / "out.parquet"
    args = ["import", "table", str(source), "--map", str(MAPS["ascending"]), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output
    # the repeated row is the file's last: row 2449 under the header, line 2450
    assert f"{source}, column 'x_value', row 2449: repeats the x_value of row 385" in result.output
    assert "(line 2450)" in result.output and not out.exists()


#: The PR's two policies: the figures below are theirs.
PR_TWO_P = ("-p", "max-merge", "-p", "warm-fit")


@pytest.mark.parametrize(
    ("order", "under_peak"),
    [
        ("ascending", {"max-merge": 28, "warm-fit": 47}),
        ("shuffled", {"max-merge": 92, "warm-fit": 94}),
    ],
)
def test_replay_prices_every_wave_but_each_run_s_first(
    order: str, under_peak: dict[str, int]
) -> None:
    result = CliRunner().invoke(
        app,
        ["replay", str(TRACE / f"{order}.parquet"), "--format", "json", *PR_TWO_P],
    )
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    totals: dict[str, Counter[str]] = {}
    for r in results:
        totals.setdefault(r["policy"], Counter()).update(
            priced=r["priced_waves"], under=r["under_peak"]
        )
    # 402 waves, the first of each of the 72 runs unpriced (no profile, no floor)
    assert {p: t["priced"] for p, t in totals.items()} == {"max-merge": 330, "warm-fit": 330}
    assert {p: t["under"] for p, t in totals.items()} == under_peak


def test_the_trace_writer_answers_help_and_writes_nothing(tmp_path: Path) -> None:
    """``python -m warmfit.samples.synthetic --help`` once wrote two traces into a folder named
    ``--help``: the trace writer parses its command line (issue 29, item 4)."""
    module = "warmfit.samples.synthetic"
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m {module}")
    assert list(tmp_path.iterdir()) == []


def test_an_import_of_a_table_that_is_not_there_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    args = ["import", "table", "nothere.csv", "--map", str(MAPS["ascending"]), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "nothere.csv" in result.output
    assert "Traceback" not in result.output and list(tmp_path.iterdir()) == []
