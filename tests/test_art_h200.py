"""traces/art-h200: ART's real H200 measurements arranged into waves by the mappings
beside them (warmfit import table), checked number by number against the CSV."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.format.trace import read_trace
from warmfit.importers.table import import_table, load_mapping
from warmfit.replay import replay

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "traces" / "art-h200"
SOURCE = TRACE / "source" / "recompute_memory_final.csv"
#: The file as first shipped (shapes smallest first); shuffled.parquet holds the other order.
SHIPPED = TRACE / "recompute_memory_final.parquet"
SHUFFLED = TRACE / "shuffled.parquet"
#: The mapping of each file, committed beside the CSV.
MAPS = {
    SHIPPED.name: TRACE / "source" / "map.toml",
    SHUFFLED.name: TRACE / "source" / "shuffled.toml",
}


def source_rows() -> list[dict[str, str]]:
    with SOURCE.open(newline="") as handle:
        return list(csv.DictReader(handle))


def run_label(row: dict[str, str]) -> str:
    """A configuration's label as the converter that first wrote the trace made it, in
    Python: model, parallelism, compile, recompute (the mapping must agree)."""
    parts = [row["model"].rpartition("/")[2].lower(), f"tp{row['tp']}"]
    parts += [f"{key}{row[key]}" for key in ("ep", "etp") if row[key] != "1"]
    parts.append("compiled" if row["compiled"] == "True" else "eager")
    if row["mode"] != "selective":
        parts.append(row["mode"])
    parts.append(row["modules"])
    if row["concentrated_routing"] == "True":
        parts.append("concentrated")
    if row["memory_minimal"] == "True":
        parts.append("minimal")
    return "-".join(parts)


def art_h200_readings(name: str = SHIPPED.name) -> pl.DataFrame:
    return import_table(SOURCE, load_mapping(MAPS[name])).readings


@pytest.mark.parametrize("name", sorted(MAPS))
def test_the_stored_trace_is_what_the_import_writes(name: str, tmp_path: Path) -> None:
    written = tmp_path / name
    args = ["import", "table", str(SOURCE), "--map", str(MAPS[name]), "-o", str(written)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert written.read_bytes() == (TRACE / name).read_bytes()


def test_the_shipped_file_labels_every_configuration_that_ran() -> None:
    assert read_trace([SHIPPED]).get_column("run").unique().sort().to_list() == sorted(
        {run_label(r) for r in source_rows() if r["refused_rank_samples"] == "0"}
    )


def test_the_source_and_its_notice_travel_with_the_trace() -> None:
    rows = source_rows()
    assert len(rows) == 45 and {r["phase"] for r in rows} == {"final"}
    notice = " ".join((TRACE / "source" / "NOTICE.md").read_text().split())
    assert "Apache License 2.0" in notice and "OpenPipe" in notice
    assert "Apache License" in (TRACE / "source" / "LICENSE-APACHE-2.0").read_text()


def test_one_run_per_configuration_that_ran() -> None:
    rows = source_rows()
    ran = {run_label(r) for r in rows if r["refused_rank_samples"] == "0"}
    refused = {run_label(r) for r in rows} - ran
    readings = art_h200_readings()
    assert set(readings.get_column("run").unique()) == ran
    assert len(ran) == 11
    # the 27B TP4 memory-minimal configuration's only shape was refused by admission
    assert refused == {"qwen3.8-27b-tp4-compiled-core_attn-minimal"}
    # each shape that ran gives two waves of two readings
    measured = sum(r["refused_rank_samples"] == "0" for r in rows)
    assert readings.height == measured * 4


def test_readings_carry_the_csv_numbers() -> None:
    # Qwen3-1.7B, TP2, compiled, core_attn; its two shapes, smallest first:
    # 4096+4096: 6964 packed / 8192 logical; first forward 9,483,472,896, repeat
    # forward 9,414,886,400, forward peak (max of the two) 9,483,472,896,
    # forward+backward 9,604,248,576 (rise over the forward peak: 120,775,680).
    run = art_h200_readings().filter(pl.col("run") == "qwen3-1.7b-tp2-compiled-core_attn")
    assert run.get_column("packed_tokens").to_list() == [6964] * 4 + [13928] * 4
    first_shape = run.head(4).select("wave", "phase", "whole", "peak_bytes").rows()
    assert first_shape == [
        (0, "forward", False, 9_483_472_896),  # cold forward
        (0, "caller", True, 9_604_248_576),  # cold forward+backward
        (1, "forward", False, 9_414_886_400),  # warm forward
        (1, "caller", True, 9_414_886_400 + 120_775_680),  # warm forward + the same rise
    ]
    assert run.get_column("seq").to_list() == list(range(8))
    assert set(run.get_column("baseline_bytes")) == {0}
    assert set(run.get_column("art_estimate_bytes").head(4)) == {13_069_429_964}


def test_the_warm_caller_peak_lies_between_measured_bounds() -> None:
    readings = art_h200_readings()
    warm = readings.filter((pl.col("wave") % 2 == 1) & (pl.col("phase") == "caller"))
    for row in source_rows():
        if row["refused_rank_samples"] != "0":
            continue
        peak = warm.filter(
            (pl.col("run") == run_label(row))
            & (pl.col("packed_tokens") == int(row["packed_tokens"]))
        ).get_column("peak_bytes")
        assert peak.len() == 1
        assert int(row["repeat_forward_peak_max_bytes"]) <= peak[0]
        assert peak[0] <= int(row["forward_backward_peak_max_bytes"])


def test_replay_prints_one_row_per_configuration_and_policy() -> None:
    result = CliRunner().invoke(app, ["replay", str(SHIPPED), "--format", "json"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.output)["results"]
    assert len(results) == 11 * 3  # the default policies: max-merge, warm-fit, envelope
    # no wave of a real H200 run is priced under its peak by any of them
    assert all(r["under_peak"] == 0 for r in results)


def test_warm_fit_never_prices_above_max_merge_on_real_measurements() -> None:
    per_wave = replay(read_trace([SHIPPED])).per_wave
    wide = per_wave.pivot(on="policy", index=["run", "wave"], values="estimate_bytes")
    priced = wide.drop_nulls()
    # 44 shapes ran, two waves each; the first wave of each of the 11 runs is unpriced
    assert priced.height == 44 * 2 - 11
    assert (priced.get_column("warm-fit") <= priced.get_column("max-merge")).all()
    # ... and strictly below it on most waves: the PR's effect on real GPU memory
    assert (priced.get_column("warm-fit") < priced.get_column("max-merge")).sum() == 66


# --------------------------------------------------------------------------- shuffled


def shapes_in_order(frame: pl.DataFrame) -> dict[str, list[tuple[int, int]]]:
    """Each run's shapes (packed, logical) in the order its cold waves come, by bare label."""
    cold = frame.filter((pl.col("wave") % 2 == 0) & (pl.col("phase") == "caller")).sort(
        "run", "seq"
    )
    runs: dict[str, list[tuple[int, int]]] = {}
    for run, packed, logical in cold.select("run", "packed_tokens", "logical_tokens").rows():
        runs.setdefault(run.removeprefix("shuffled/"), []).append((packed, logical))
    return runs


def test_shuffled_runs_are_the_shipped_runs_prefixed() -> None:
    shipped = set(read_trace([SHIPPED]).get_column("run"))
    shuffled = set(read_trace([SHUFFLED]).get_column("run"))
    assert len(shuffled) == 11
    assert shuffled == {f"shuffled/{run}" for run in shipped}


def test_shuffled_holds_the_same_readings_per_run() -> None:
    columns = ["packed_tokens", "logical_tokens", "phase", "whole", "peak_bytes"]
    columns += ["signature", "kind", "art_estimate_bytes", "art_available_bytes"]

    def multisets(frame: pl.DataFrame) -> dict[str, Counter[tuple[object, ...]]]:
        runs: dict[str, Counter[tuple[object, ...]]] = {}
        # the cold or warm sample travels with its readings: wave parity
        rows = frame.with_columns(sample=pl.col("wave") % 2).select("run", "sample", *columns)
        for run, *rest in rows.rows():
            runs.setdefault(run.removeprefix("shuffled/"), Counter())[tuple(rest)] += 1
        return runs

    shipped, shuffled = read_trace([SHIPPED]), read_trace([SHUFFLED])
    assert shuffled.height == shipped.height == 44 * 4
    assert multisets(shuffled) == multisets(shipped)


def test_every_shuffled_shape_runs_cold_then_warm() -> None:
    shuffled = read_trace([SHUFFLED]).sort("run", "seq")
    for (run,), stream in shuffled.group_by(["run"], maintain_order=True):
        # seq follows the waves; each shape is waves 2i (cold) then 2i+1 (warm), two readings each
        assert stream.get_column("seq").to_list() == list(range(stream.height)), run
        assert stream.get_column("wave").to_list() == [i // 2 for i in range(stream.height)], run
        assert stream.get_column("step").to_list() == [i // 4 for i in range(stream.height)], run
        shapes = stream.select("packed_tokens", "logical_tokens").rows()
        assert all(len(set(shapes[i : i + 4])) == 1 for i in range(0, len(shapes), 4)), run
    # the cold wave is the one with the published forward+backward maximum:
    # qwen3-1.7b's 4096+4096 shape again (see test_readings_carry_the_csv_numbers)
    run = shuffled.filter(
        (pl.col("run") == "shuffled/qwen3-1.7b-tp2-compiled-core_attn")
        & (pl.col("packed_tokens") == 6964)
    )
    assert run.select("phase", "peak_bytes").rows() == [
        ("forward", 9_483_472_896),
        ("caller", 9_604_248_576),
        ("forward", 9_414_886_400),
        ("caller", 9_414_886_400 + 120_775_680),
    ]


def test_shuffled_order_differs_from_smallest_first_in_most_runs() -> None:
    shipped = shapes_in_order(read_trace([SHIPPED]))
    shuffled = shapes_in_order(read_trace([SHUFFLED]))
    assert shipped.keys() == shuffled.keys()
    for run, shapes in shipped.items():
        assert shapes == sorted(shapes) and sorted(shuffled[run]) == shapes
    moved = {run for run in shipped if shuffled[run] != shipped[run]}
    # the fixed seeds leave two runs smallest first: the 2-shape 1.7B run and the 3-shape 27B TP2
    assert len(moved) == 9
    assert set(shipped) - moved == {
        "qwen3-1.7b-tp2-compiled-core_attn",
        "qwen3.8-27b-tp2-eager-core_attn",
    }
    # e.g. Qwen3.5-4B: its 64+64 pair, the smallest, comes fourth of five
    assert [p for p, _ in shuffled["qwen3.5-4b-tp2-compiled-core_attn+mlp"]] == [
        256,
        10240,
        4096,
        128,
        15360,
    ]


def test_a_small_shape_after_large_ones_is_priced_under_its_peak() -> None:
    # Shuffled, a fixed cost that a large wave's per-token rate cannot cover: in 4 runs
    # one wave each is priced under its peak, by max-merge and warm-fit alike.
    summary = replay(read_trace([SHUFFLED]), ["max-merge", "warm-fit"]).summary
    under = summary.filter(pl.col("under_peak") > 0)
    assert under.height == 4 * 2
    assert set(under.get_column("under_peak")) == {1}
    assert summary.get_column("priced_waves").sum() == 2 * 77
