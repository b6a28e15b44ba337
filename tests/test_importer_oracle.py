"""Both importers against a second, plain reading of the same input (issue 38).

The oracle here is written from docs/how-to/bring-your-own-measurements.md and
SPEC §9, never from warmfit's code: a table is read with the ``csv`` module, its
mapping with ``tomllib``; ART's reports with ``json``; the units are their
definitions (``MB`` = 10**6, ``MiB`` = 2**20) and rounding is half to even
(``decimal``). The trace the CLI writes is read back with pyarrow alone. Each
test compares every column of every reading, so one byte, one token or one
flag off fails it.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import tempfile
import tomllib
import zlib
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.command_line import warmfit_output
from tests.strategies import examples

#: The units' definitions (not warmfit's table of them).
UNIT_BYTES = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}
#: The flags the how-to names, as text (true/false, 1/0, yes/no).
TRUE_TEXT = ("true", "1", "yes")
FALSE_TEXT = ("false", "0", "no")
COMPARED = (
    "run",
    "step",
    "wave",
    "seq",
    "rank",
    "kind",
    "phase",
    "signature",
    "packed_tokens",
    "logical_tokens",
    "peak_bytes",
    "baseline_bytes",
    "output_bytes",
    "oom",
    "whole",
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def written(path: Path) -> list[dict[str, Any]]:
    """The trace's readings in file order, the compared columns only (pyarrow)."""
    rows = pq.read_table(path).to_pylist()
    return [{k: row.get(k) for k in COMPARED} for row in rows]


def half_even(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


# --------------------------------------------------------------------- import table


@st.composite
def tables(draw: st.DrawFn) -> dict[str, Any]:
    """A table and its mapping, in one of the forms the how-to lists for each key."""
    unit = draw(st.sampled_from(sorted(UNIT_BYTES)))
    scale = UNIT_BYTES[unit]
    n = draw(st.integers(min_value=1, max_value=8))
    seqs = draw(st.lists(st.integers(1, 100_000), min_size=n, max_size=n, unique=True))
    # peaks: whole or quarter units, small enough that value x unit is exact in a float
    largest = max(1, 2**50 // scale)
    rows = []
    for seq in seqs:
        whole_part = draw(st.integers(0, largest))
        fraction = draw(st.sampled_from(["", ".25", ".5", ".75"]))
        oom_text = draw(st.sampled_from([*TRUE_TEXT, *FALSE_TEXT]))
        oom_text = draw(st.sampled_from([oom_text, oom_text.upper(), oom_text.title()]))
        oom = oom_text.lower() in TRUE_TEXT
        empty_peak = oom and draw(st.booleans())
        w = draw(st.integers(0, 1_000_000))
        rows.append(
            {
                "model": draw(st.sampled_from(["llama", "qwen", "mistral"])),
                "seq": str(seq),
                "batch": str(draw(st.integers(1, 8))),
                # never integral: a float column, and w * 2 ends in .5, 1 or .5: ties
                "w": f"{w}{draw(st.sampled_from(['.25', '.5', '.75']))}",
                "peak": "" if empty_peak else f"{whole_part}{fraction}",
                "flag": oom_text,
            }
        )
    tokens_form = draw(st.sampled_from(["expr", "column", "add-scale", "add-subtract"]))
    peak_form = draw(st.sampled_from(["shorthand", "expr"]))
    filter_form = draw(st.sampled_from(["none", "filter", "where"]))
    kept_models = draw(
        st.lists(st.sampled_from(["llama", "qwen", "mistral"]), min_size=1, unique=True)
    )
    signature_form = draw(st.sampled_from(["{model}", "{model}-{upper(model)}"]))
    return {
        "rows": rows,
        "unit": unit,
        "tokens_form": tokens_form,
        "peak_form": peak_form,
        "filter_form": filter_form,
        "kept_models": kept_models,
        "signature_form": signature_form,
    }


def mapping_text(case: dict[str, Any]) -> str:
    unit = case["unit"]
    tokens = {
        "expr": '"seq * batch"',
        "column": '"seq"',
        "add-scale": '{ add = ["seq", "batch"], scale = 2 }',
        "add-subtract": '{ add = ["seq", "batch"], subtract = ["batch"] }',
    }[case["tokens_form"]]
    peak = (
        f'{{ column = "peak", unit = "{unit}" }}'
        if case["peak_form"] == "shorthand"
        else f'"peak * {UNIT_BYTES[unit]}"'
    )
    kept = ", ".join(f'"{m}"' for m in case["kept_models"])
    kept_sql = ", ".join(f"'{m}'" for m in case["kept_models"])
    head = 'order = { by = ["seq"] }\n'
    if case["filter_form"] == "where":
        head += f'where = "model IN ({kept_sql})"\n'
    elif case["filter_form"] == "filter":
        head += f"[filter]\nmodel = [{kept}]\n"
    return (
        head
        + '[run]\nlabel = "run-{model}"\n[fields]\n'
        + f'signature = "{case["signature_form"]}"\n'
        + f"packed_tokens = {tokens}\n"
        + f"peak_bytes = {peak}\n"
        + 'baseline_bytes = "w * 2"\n'
        + 'oom = "flag"\n'
    )


def table_oracle(csv_path: Path, map_path: Path, unit: str) -> list[dict[str, Any]]:
    """The readings the how-to says the table and mapping make, read plainly."""
    mapping = tomllib.loads(map_path.read_text())
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    kept_models: set[str] | None = None
    if "filter" in mapping:
        kept_models = set(mapping["filter"]["model"])
    elif "where" in mapping:
        inside = mapping["where"].split("(", 1)[1].rstrip(")")
        kept_models = {part.strip().strip("'") for part in inside.split(",")}
    runs: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        if kept_models is None or row["model"] in kept_models:
            runs[f"run-{row['model']}"].append(row)
    tokens = mapping["fields"]["packed_tokens"]
    out = []
    for label in sorted(runs):  # runs sorted by label
        ordered = sorted(runs[label], key=lambda r: int(r["seq"]))  # order.by, as numbers
        for step, row in enumerate(ordered):
            seq, batch = int(row["seq"]), int(row["batch"])
            if tokens == "seq * batch":
                packed = seq * batch
            elif tokens == "seq":
                packed = seq
            elif tokens.get("scale") == 2:
                packed = (seq + batch) * 2
            else:
                packed = seq + batch - batch
            baseline = half_even(Decimal(row["w"]) * 2)
            oom = row["flag"].lower() in TRUE_TEXT  # in any case (spec-notes 30)
            if row["peak"] == "":
                assert oom
                peak = baseline  # an OOM reading with no peak holds its baseline
            else:
                peak = half_even(Decimal(row["peak"]) * UNIT_BYTES[unit])
            signature = row["model"]
            if "upper" in mapping["fields"]["signature"]:
                signature = f"{row['model']}-{row['model'].upper()}"
            out.append(
                {
                    "run": label,
                    "step": step,
                    "wave": step,
                    "seq": step,
                    "rank": 0,
                    "kind": "flat",
                    "phase": "caller",
                    "signature": signature,
                    "packed_tokens": packed,
                    "logical_tokens": packed,
                    "peak_bytes": peak,
                    "baseline_bytes": baseline,
                    "output_bytes": 0,
                    "oom": oom,
                    "whole": not oom,
                }
            )
    return out


def write_table(folder: Path, rows: list[dict[str, str]]) -> Path:
    path = folder / "runs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@SETTINGS
@given(tables())
def test_import_table_equals_a_plain_reading_of_the_csv_and_mapping(case: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table = write_table(folder, case["rows"])
        mapping = folder / "map.toml"
        mapping.write_text(mapping_text(case))
        want = table_oracle(table, mapping, case["unit"])
        out = folder / "out.parquet"
        code, output = warmfit_output(
            "import", "table", str(table), "--map", str(mapping), "-o", str(out)
        )
        if not want:  # every row filtered out
            assert code == 2, output
            return
        assert code == 0, output
        assert written(out) == want


def test_units_are_their_definitions_megabytes_are_not_mebibytes(tmp_path: Path) -> None:
    """One worked row per unit: 3 of each unit is 3 x its definition, exactly."""
    rows = [
        {"model": "m", "seq": str(i + 1), "batch": "1", "w": "0.25", "peak": "3", "flag": "no"}
        for i in range(1)
    ]
    table = write_table(tmp_path, rows)
    for unit, scale in UNIT_BYTES.items():
        case = {
            "unit": unit,
            "tokens_form": "column",
            "peak_form": "shorthand",
            "filter_form": "none",
            "kept_models": ["m"],
            "signature_form": "{model}",
        }
        mapping = tmp_path / "map.toml"
        mapping.write_text(mapping_text(case))
        out = tmp_path / f"{unit}.parquet"
        code, output = warmfit_output(
            "import", "table", str(table), "--map", str(mapping), "-o", str(out)
        )
        assert code == 0, output
        (reading,) = written(out)
        assert reading["peak_bytes"] == 3 * scale, unit
        assert reading["baseline_bytes"] == 0  # 0.25 x 2 = 0.5: half to even is 0


def test_half_to_even_rounding_in_both_directions(tmp_path: Path) -> None:
    """0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4 bytes: a half goes to the even neighbour."""
    rows = [
        {"model": "m", "seq": str(i + 1), "batch": "1", "w": w, "peak": "1", "flag": "0"}
        for i, w in enumerate(["0.25", "0.75", "1.25", "1.75"])
    ]
    table = write_table(tmp_path, rows)
    case = {
        "unit": "GiB",
        "tokens_form": "column",
        "peak_form": "expr",
        "filter_form": "none",
        "kept_models": ["m"],
        "signature_form": "{model}",
    }
    mapping = tmp_path / "map.toml"
    mapping.write_text(mapping_text(case))
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    assert [r["baseline_bytes"] for r in written(out)] == [0, 2, 2, 4]
    assert [r["peak_bytes"] for r in written(out)] == [2**30] * 4


def test_the_largest_size_imports_exactly_and_one_more_is_refused(tmp_path: Path) -> None:
    """2**63 - 1 bytes is the column's largest value: kept to the byte; 2**63 exits 2."""
    mapping = tmp_path / "map.toml"
    mapping.write_text(
        '[run]\nlabel = "r"\n[fields]\nsignature = "s"\npacked_tokens = "n"\n'
        'peak_bytes = "peak"\nbaseline_bytes = "base"\n'
    )
    table = tmp_path / "t.csv"
    table.write_text(f"n,peak,base\n1,{2**63 - 1},{2**63 - 2}\n")
    out = tmp_path / "out.parquet"
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 0, output
    (reading,) = written(out)
    assert (reading["peak_bytes"], reading["baseline_bytes"]) == (2**63 - 1, 2**63 - 2)
    table.write_text(f"n,peak,base\n1,{2**63},0\n")
    out.unlink()
    code, output = warmfit_output(
        "import", "table", str(table), "--map", str(mapping), "-o", str(out)
    )
    assert code == 2, output
    assert "Traceback" not in output and "'peak'" in output and "row 1" in output
    assert not out.exists()


# ------------------------------------------------------------------ import art-misses

T0 = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)
MAX_REPORT = 16 * 2**20  # ART's cap on a report, 16 MiB


@st.composite
def art_reports(draw: st.DrawFn, number: int) -> dict[str, Any]:
    """One report with the documented fields; which admitted figures it carries is drawn."""
    predicted = draw(st.integers(1, 2**40))
    # factors a binary float holds exactly: predicted x factor is then exact, ties included
    factor = draw(st.sampled_from([1.0, 1.125, 1.25, 1.5, 2.0]))
    admitted = draw(st.integers(1, 2**41))
    local = draw(st.integers(1, 2**41))
    carries = draw(st.sampled_from(["local", "admission", "predicted"]))
    oom = draw(st.booleans())
    packed = draw(st.integers(1, 100_000))
    seconds = draw(st.integers(0, 50))
    # the same instant written in UTC as 'Z' or '+00:00'
    occurred = (T0 + timedelta(seconds=seconds)).isoformat()
    if draw(st.booleans()):
        occurred = occurred.replace("+00:00", "Z")
    replay: dict[str, Any] = {
        "rank": draw(st.integers(0, 2)),
        "model": draw(st.sampled_from(["Qwen/Qwen3-1.7B", "meta/llama"])),
        "device": "NVIDIA H200",
        "safety_factor": factor,
        "memory_replay": {
            "estimates": [
                {
                    "signature": draw(st.sampled_from(["s", {"topology": [1, 2]}])),
                    "profile": None,
                    "arguments": {
                        "packed_tokens": packed,
                        "logical_tokens": packed + draw(st.integers(0, 100)),
                        "output_bytes": draw(st.integers(0, 4096)),
                    },
                    "expected_required_bytes": predicted,
                }
            ]
        },
    }
    if carries == "local":
        replay["local_admission_peak_bytes"] = local
    return {
        "format": 1,
        "kind": "art-planner-miss",
        "id": f"{number:032x}",
        "occurred_at": occurred,
        "phase": "train_step",
        "oom": oom,
        "threshold_pct": 5.0,
        "predicted_peak_bytes": predicted,
        "admission_peak_bytes": admitted if carries in ("local", "admission") else None,
        "observed_peak_bytes": None if oom else draw(st.integers(0, 2**41)),
        "partial_peak_bytes": draw(st.integers(0, 2**41)) if oom else None,
        "error_pct": None,
        "replay_complete": True,
        "incomplete_reasons": [],
        "replay_scope": "cpu-memory-estimator",
        "replay": replay,
    }


@st.composite
def spools(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 8))
    return [draw(art_reports(i + 1)) for i in range(count)]


def art_oracle(folder: Path) -> list[dict[str, Any]]:
    """The readings the how-to's table says the reports make, read with json."""
    reports = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in reports:
        groups[(r["replay"]["model"], r["replay"]["rank"])].append(r)
    out = []
    for (model, rank), group in groups.items():
        group.sort(
            key=lambda r: (datetime.fromisoformat(r["occurred_at"].replace("Z", "+00:00")), r["id"])
        )
        for place, r in enumerate(group):
            (estimate,) = r["replay"]["memory_replay"]["estimates"]
            signature = estimate["signature"]
            local = r["replay"].get("local_admission_peak_bytes")
            if local is not None:
                est, source = local, "replay.local_admission_peak_bytes"
            elif r["admission_peak_bytes"] is not None:
                est, source = r["admission_peak_bytes"], "admission_peak_bytes"
            else:
                est = half_even(
                    Decimal(r["predicted_peak_bytes"]) * Decimal(repr(r["replay"]["safety_factor"]))
                )
                source = "predicted_peak_bytes x replay.safety_factor"
            out.append(
                {
                    "run": model,
                    "rank": rank,
                    "wave": place,
                    "seq": place,
                    "kind": "flat",
                    "phase": "caller",
                    "whole": False,
                    "oom": r["oom"],
                    "peak_bytes": r["partial_peak_bytes"] if r["oom"] else r["observed_peak_bytes"],
                    "baseline_bytes": 0,
                    "packed_tokens": estimate["arguments"]["packed_tokens"],
                    "logical_tokens": estimate["arguments"]["logical_tokens"],
                    "output_bytes": estimate["arguments"]["output_bytes"],
                    "signature": signature if isinstance(signature, str) else digest(signature),
                    "estimate_bytes": est,
                    "art_estimate_from": source,
                    "art_report_id": r["id"],
                }
            )
    return sorted(out, key=lambda row: (row["run"], row["rank"], row["wave"]))


ART_COMPARED = (
    "run",
    "rank",
    "wave",
    "seq",
    "kind",
    "phase",
    "whole",
    "oom",
    "peak_bytes",
    "baseline_bytes",
    "packed_tokens",
    "logical_tokens",
    "output_bytes",
    "signature",
    "estimate_bytes",
    "art_estimate_from",
    "art_report_id",
)


def digest(signature: object) -> str:
    """An object signature: 'art:' + 16 hex digits of the SHA-256 of its canonical JSON."""
    text = json.dumps(signature, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "art:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def art_written(path: Path) -> list[dict[str, Any]]:
    rows = [{k: row.get(k) for k in ART_COMPARED} for row in pq.read_table(path).to_pylist()]
    return sorted(rows, key=lambda row: (row["run"], row["rank"], row["wave"]))


def write_reports(folder: Path, reports: list[dict[str, Any]]) -> None:
    for i, record in enumerate(reports):
        # file names in reverse: the order comes from occurred_at, never from names
        name = f"{len(reports) - i:04d}.json"
        (folder / name).write_text(json.dumps(record, sort_keys=True) + "\n")


@SETTINGS
@given(spools())
def test_import_art_misses_equals_a_plain_reading_of_the_reports(
    reports: list[dict[str, Any]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "spool"
        folder.mkdir()
        write_reports(folder, reports)
        out = Path(tmp) / "misses.parquet"
        code, output = warmfit_output("import", "art-misses", str(folder), "-o", str(out))
        assert code == 0, output
        assert art_written(out) == art_oracle(folder)


def test_a_time_outside_utc_is_malformed_and_the_rest_imported(tmp_path: Path) -> None:
    """10:00 at +02:00 is 08:00 UTC: ART writes UTC, so another offset is refused by name."""
    folder = tmp_path / "spool"
    folder.mkdir()
    good = plain_report(0, id="a" * 32)  # at +00:00
    east = plain_report(0, id="b" * 32, occurred_at="2026-01-01T10:00:00+02:00")
    (folder / "good.json").write_text(json.dumps(good) + "\n")
    (folder / "east.json").write_text(json.dumps(east) + "\n")
    out = tmp_path / "misses.parquet"
    code, output = warmfit_output("import", "art-misses", str(folder), "-o", str(out))
    assert code == 2, output
    assert "east.json" in output and "malformed" in output and "good.json" not in output
    assert [r["art_report_id"] for r in art_written(out)] == ["a" * 32]


def test_the_16_mib_cap_is_exact(tmp_path: Path) -> None:
    """A report of exactly 16 MiB is read; one byte more is refused unread (oversized)."""
    folder = tmp_path / "spool"
    folder.mkdir()
    record = plain_report(0, id="c" * 32, incomplete_reasons=[])
    text = json.dumps(record) + "\n"
    pad = MAX_REPORT - len(text.encode())
    # pad inside the JSON (a long string in a list nobody reads) to exactly the cap
    padded = json.dumps(record | {"incomplete_reasons": ["x" * (pad - 2)]}) + "\n"
    assert len(padded.encode()) == MAX_REPORT
    (folder / "at-cap.json").write_text(padded)
    # complete JSON with no final newline, at the cap too: every byte of it is read
    bare = json.dumps(record | {"id": "e" * 32, "incomplete_reasons": ["x" * (pad - 1)]})
    assert len(bare.encode()) == MAX_REPORT
    (folder / "at-cap-bare.json").write_text(bare)
    out = tmp_path / "a.parquet"
    code, output = warmfit_output("import", "art-misses", str(folder), "-o", str(out))
    assert code == 0, output
    assert len(art_written(out)) == 2
    over = json.dumps(record | {"id": "d" * 32, "incomplete_reasons": ["x" * (pad - 1)]}) + "\n"
    assert len(over.encode()) == MAX_REPORT + 1
    (folder / "over-cap.json").write_text(over)
    out2 = tmp_path / "b.parquet"
    code, output = warmfit_output("import", "art-misses", str(folder), "-o", str(out2))
    assert code == 2, output
    assert "over-cap.json" in output and "oversized" in output
    assert [r["art_report_id"] for r in art_written(out2)] == ["c" * 32, "e" * 32]


def plain_report(number: int, **changes: Any) -> dict[str, Any]:
    """A format-1 report with the documented fields; ``replay_*`` keys change ``replay``."""
    record: dict[str, Any] = {
        "format": 1,
        "kind": "art-planner-miss",
        "id": f"{number:032x}",
        "occurred_at": "2026-01-01T10:00:00+00:00",
        "phase": "train_step",
        "oom": False,
        "threshold_pct": 5.0,
        "predicted_peak_bytes": 1000,
        "admission_peak_bytes": 1100,
        "observed_peak_bytes": 1500,
        "partial_peak_bytes": None,
        "replay": {
            "rank": 0,
            "model": "m",
            "safety_factor": 1.1,
            "memory_replay": {
                "estimates": [
                    {
                        "signature": "s",
                        "arguments": {"packed_tokens": 10, "logical_tokens": 10, "output_bytes": 0},
                        "expected_required_bytes": 1000,
                    }
                ]
            },
        },
    }
    for key, value in changes.items():
        if key.startswith("replay_"):
            record["replay"][key.removeprefix("replay_")] = value
        else:
            record[key] = value
    return record


def test_art_fields_at_the_trace_columns_limits(tmp_path: Path) -> None:
    """Bytes up to 2**63 - 1 and a rank up to 2**31 - 1 are imported to the byte; one
    more, a boolean or a float for bytes, a negative rank, a safety factor that is
    not finite, is malformed and named (the others still imported)."""
    folder = tmp_path / "spool"
    folder.mkdir()
    good = {
        "bytes": plain_report(1, observed_peak_bytes=2**63 - 1, admission_peak_bytes=2**63 - 1),
        "rank": plain_report(2, replay_rank=2**31 - 1),
    }
    bad = {
        "bytes-over": plain_report(3, observed_peak_bytes=2**63),
        "rank-over": plain_report(4, replay_rank=2**31),
        "rank-negative": plain_report(5, replay_rank=-1),
        "bytes-bool": plain_report(6, observed_peak_bytes=True),
        "bytes-float": plain_report(7, observed_peak_bytes=1500.0),
        "factor-inf": plain_report(8, admission_peak_bytes=None, replay_safety_factor=1e400),
    }
    for name, record in {**good, **bad}.items():
        (folder / f"{name}.json").write_text(json.dumps(record) + "\n")
    out = tmp_path / "misses.parquet"
    code, output = warmfit_output("import", "art-misses", str(folder), "-o", str(out))
    assert code == 2, output
    for name in bad:
        (line,) = [x for x in output.splitlines() if f"{name}.json" in x]
        assert "malformed" in line, line
    for name in good:
        assert f"{name}.json" not in output
    rows = {r["art_report_id"]: r for r in pq.read_table(out).to_pylist()}
    assert set(rows) == {f"{1:032x}", f"{2:032x}"}
    assert rows[f"{1:032x}"]["peak_bytes"] == 2**63 - 1
    assert rows[f"{1:032x}"]["estimate_bytes"] == 2**63 - 1
    assert rows[f"{2:032x}"]["rank"] == 2**31 - 1
    assert "2 reports imported, 6 malformed" in output


def _with_replay(number: int, **replay: Any) -> dict[str, Any]:
    record = plain_report(number)
    record["replay"] = record["replay"] | replay
    return record


def _estimate(number: int, **changes: Any) -> dict[str, Any]:
    record = plain_report(number)
    record["replay"]["memory_replay"]["estimates"][0] |= changes
    return record


def _several(number: int, *, local: int | None, admission: int, factor: float) -> dict[str, Any]:
    """Two candidate estimates, of 10 and 20 tokens, expecting 1,100 and 1,200 bytes."""
    record = plain_report(number, admission_peak_bytes=admission)
    record["replay"]["safety_factor"] = factor
    if local is not None:
        record["replay"]["local_admission_peak_bytes"] = local
    one = record["replay"]["memory_replay"]["estimates"][0]
    record["replay"]["memory_replay"]["estimates"] = [
        one | {"expected_required_bytes": 1100},
        one | {"expected_required_bytes": 1200,
               "arguments": {"packed_tokens": 20, "logical_tokens": 20, "output_bytes": 0}},
    ]  # fmt: skip
    return record


#: Reports the how-to says are refused, each with its reason (name: (record, reason)).
REFUSED: dict[str, tuple[Any, str]] = {
    "a-list": ([1, 2], "malformed"),
    "other-kind": (plain_report(20, kind="art-planner-hit"), "malformed"),
    "format-text": (plain_report(21, format="1"), "malformed"),
    "format-3": (plain_report(22, format=3), "malformed"),
    "id-number": (plain_report(23, id=23), "malformed"),
    "oom-text": (plain_report(24, oom="yes"), "malformed"),
    "event-number": (plain_report(25, format=2, event=5), "malformed"),
    "event-disagrees": (
        plain_report(26, format=2, event="estimate_miss", oom=True, partial_peak_bytes=9),
        "malformed",
    ),
    "oom-no-partial": (plain_report(27, oom=True, observed_peak_bytes=None), "not a wave"),
    "replay-list": (plain_report(28, replay=[]), "malformed"),
    "model-empty": (_with_replay(29, model=""), "malformed"),
    "model-number": (_with_replay(30, model=7), "malformed"),
    "no-estimates": (_with_replay(31, memory_replay={"estimates": []}), "not a wave"),
    "estimate-number": (_with_replay(32, memory_replay={"estimates": [5]}), "malformed"),
    "arguments-list": (_estimate(33, arguments=[10, 10, 0]), "malformed"),
    "zero-tokens": (
        _estimate(34, arguments={"packed_tokens": 0, "logical_tokens": 0, "output_bytes": 0}),
        "malformed",
    ),
    "logical-below": (
        _estimate(35, arguments={"packed_tokens": 10, "logical_tokens": 9, "output_bytes": 0}),
        "malformed",
    ),
    "factor-zero": (
        plain_report(36, admission_peak_bytes=None)
        | {"replay": plain_report(36)["replay"] | {"safety_factor": 0}},
        "malformed",
    ),
    "price-past-int64": (
        plain_report(37, admission_peak_bytes=None, predicted_peak_bytes=2**62)
        | {"replay": plain_report(37)["replay"] | {"safety_factor": 2.0}},
        "malformed",
    ),
    "same-id": (plain_report(1), "malformed"),  # repeats good.json's id
    "no-observed": (plain_report(41, observed_peak_bytes=None), "malformed"),
    "signature-number": (_estimate(42, signature=5), "malformed"),
    "memory-list": (_with_replay(43, memory_replay=[]), "not a wave"),
    # two candidates, no admitted figure to match and no factor to compare net with
    "several-no-factor": (_several(44, local=None, admission=1150, factor=0), "not a wave"),
}


def test_every_report_the_how_to_refuses_is_named_with_its_reason(tmp_path: Path) -> None:
    folder = tmp_path / "spool"
    folder.mkdir()
    good = plain_report(1)
    good["replay"]["device"] = {"name": "H200", "index": 0}  # an object: canonical JSON
    good["replay"]["memory_replay"]["estimates"][0]["signature"] = {"z": 1, "a": [2]}
    (folder / "good.json").write_text(json.dumps(good) + "\n")
    # local matches no candidate: the admission figure (reduced over ranks) is tried next
    several = _several(2, local=1000, admission=1200, factor=1.1)
    (folder / "several.json").write_text(json.dumps(several) + "\n")
    for name, (record, _) in REFUSED.items():
        (folder / f"{name}.json").write_text(json.dumps(record) + "\n")
    (folder / "key-twice.json").write_text(
        json.dumps(plain_report(40)).replace('"kind"', '"id": "x", "kind"', 1) + "\n"
    )
    out = tmp_path / "misses.parquet"
    code, output = warmfit_output("import", "art-misses", str(folder), "-o", str(out))
    assert code == 2, output
    reasons = {**{name: reason for name, (_, reason) in REFUSED.items()}, "key-twice": "malformed"}
    for name, reason in reasons.items():
        (line,) = [x for x in output.splitlines() if f"/{name}.json" in x]
        assert f"({reason})" in line, line
    assert "/good.json" not in output and "/several.json" not in output
    row, other = pq.read_table(out).to_pylist()
    assert (other["art_report_id"], other["packed_tokens"]) == (f"{2:032x}", 20)
    assert other["estimate_bytes"] == 1000  # the local figure, though no candidate matched it
    assert row["art_device"] == '{"index": 0, "name": "H200"}'
    assert row["signature"] == digest({"z": 1, "a": [2]})
    malformed = sum(r == "malformed" for r in reasons.values())
    waveless = sum(r == "not a wave" for r in reasons.values())
    assert (
        f"2 reports imported, {malformed} malformed, 0 oversized, {waveless} not a wave" in output
    )


# --- issue 38, tests by pattern (s2) ---
#
# The table oracle above keeps every deciding input but one fixed per example (one unit,
# one run per model, rank 0, one flat caller wave per row, no empty cells but an OOM's
# peak). Here they vary jointly in one table: three units at once (MB beside MiB...),
# ties at exactly .5 byte, flags in any letter case and padded with spaces, several
# models, ranks (up to 2**31 - 1) and signatures in one table, kinds and phases per row,
# a [fields] value that [[waves]] overrides, order.by over a column with empty cells and
# equal values, a shuffle under several seeds, order.distinct, and an integer column with
# empty cells reaching 2**63 - 1 (one cell of 2**63 refused, naming its row).

#: The columns compared here: those above and the static floor.
JOINT_COMPARED = (*COMPARED, "static_floor_bytes")
_MODELS = ("llama", "qwen", "Mistral")
_FLAG_TEXT = st.sampled_from([*TRUE_TEXT, *FALSE_TEXT]).flatmap(
    lambda t: st.sampled_from([t, t.upper(), t.title(), f" {t} "])
)


def _amount(draw: st.DrawFn, unit: str, largest: int) -> str:
    """A size in ``unit`` as a table writes it: whole, a quarter, or half a byte past a
    whole byte (a tie), exactly representable in a float when scaled (below 2**52)."""
    scale = UNIT_BYTES[unit]
    whole = draw(st.integers(0, max(1, largest // scale)))
    form = draw(st.sampled_from(["whole", "quarter", "tie"]))
    if form == "whole":
        return str(whole)
    if form == "quarter" or (scale % 2 == 0 and scale & (scale - 1) != 0):
        # a decimal unit: quarters of it are whole bytes (no tie lands on .5 exactly in a float)
        return f"{whole}{draw(st.sampled_from(['.25', '.5', '.75']))}"
    # a binary unit (or B): (2j + 1) / (2 x scale) of it is j + .5 bytes, exactly
    j = draw(st.integers(0, scale - 1))
    bits = (2 * scale).bit_length() - 1  # 2 x scale = 2**bits: that many decimal places
    halves = whole * 2 * scale + 2 * j + 1
    return format(Decimal(f"{halves * 5**bits}E-{bits}"), "f")  # exact, not rounded to 28 digits


@st.composite
def joint_tables(draw: st.DrawFn) -> dict[str, Any]:
    units = [draw(st.sampled_from(sorted(UNIT_BYTES))) for _ in range(3)]
    n = draw(st.integers(min_value=1, max_value=9))
    big = st.sampled_from(["0", "7", str(2**53 + 1), str(2**62), str(2**63 - 1), ""])
    # a few ranks per table, so that runs hold several rows (ties, shuffles, repeats)
    ranks = draw(st.lists(st.sampled_from(["0", "1", "3", str(2**31 - 1)]), min_size=1, max_size=2))
    rows = []
    for _ in range(n):
        flag = draw(_FLAG_TEXT)
        oom = flag.strip().lower() in TRUE_TEXT
        rows.append(
            {
                "model": draw(st.sampled_from(_MODELS)),
                "r": draw(st.sampled_from(ranks)),
                "sig": draw(st.sampled_from(["a", "b"])),
                "k": draw(st.sampled_from(["flat", "flat", "split_child", "dp_rank_forward"])),
                "ph": draw(st.sampled_from(["caller", "caller", "forward"])),
                "seq": draw(st.sampled_from([" 3", "5 ", "8"])) if draw(st.booleans()) else "2",
                "batch": str(draw(st.integers(1, 4))),
                "pos": draw(st.sampled_from(["", "", "1", "2", "10"])),
                "peak": "" if oom and draw(st.booleans()) else _amount(draw, units[0], 2**50),
                "base": _amount(draw, units[1], 2**50),
                "ob": _amount(draw, units[2], 2**40),
                "floor": draw(big),
                "flag": flag,
            }
        )
    if draw(st.integers(0, 4)) == 0:  # now and then one cell past int64: refused
        for row in rows:  # (2**63 - 1 in a column of floats is 2**63 too: not drawn then)
            row["floor"] = row["floor"].replace(str(2**63 - 1), str(2**62))
        rows[draw(st.integers(0, n - 1))]["floor"] = str(2**63)
    return {
        "rows": rows,
        "units": units,
        "filter_form": draw(st.sampled_from(["none", "filter", "where"])),
        "kept_models": draw(st.lists(st.sampled_from(_MODELS), min_size=1, unique=True)),
        "two_waves": draw(st.booleans()),
        "shuffle": draw(st.sampled_from([None, 0, 1, 2**32 - 1])),
        "distinct": draw(st.integers(0, 3)) == 0,
    }


def joint_mapping_text(case: dict[str, Any]) -> str:
    peak_unit, base_unit, out_unit = case["units"]
    order = 'by = ["pos"]'
    if case["shuffle"] is not None:
        order += f", shuffle = true, seed = {case['shuffle']}"
    if case["distinct"]:
        order += ", distinct = true"
    text = f"order = {{ {order} }}\n"
    kept = ", ".join(f'"{m}"' for m in case["kept_models"])
    if case["filter_form"] == "where":
        text += 'where = "model IN ({})"\n'.format(", ".join(f"'{m}'" for m in case["kept_models"]))
    elif case["filter_form"] == "filter":
        text += f"[filter]\nmodel = [{kept}]\n"
    text += (
        '[run]\nlabel = "{model}/r{r}"\n[fields]\n'
        'rank = "r"\nsignature = "{sig}"\nkind = "{k}"\nphase = "{ph}"\n'
        'packed_tokens = "seq"\n'
        'logical_tokens = { add = ["seq", "batch"], subtract = ["batch"], scale = 2 }\n'
        f'peak_bytes = {{ column = "peak", unit = "{peak_unit}" }}\n'
        f'baseline_bytes = {{ column = "base", unit = "{base_unit}" }}\n'
        f'output_bytes = {{ add = ["ob", "batch"], subtract = ["batch"], unit = "{out_unit}" }}\n'
        'static_floor_bytes = "floor + 0"\n'
        'oom = "flag"\n'
    )
    if case["two_waves"]:
        text += (
            "[[waves]]\n[[waves]]\n"
            'signature = "{sig}-tail"\nkind = "split_child"\n'
            f'readings = [{{ phase = "forward", peak_bytes = {{ column = "base", '
            f'unit = "{base_unit}" }} }}, {{}}]\n'
        )
    return text


def joint_oracle(csv_path: Path, map_path: Path) -> list[dict[str, Any]] | str:
    """The readings the how-to says the table and mapping make, or the refusal's text
    after ``warmfit: error: ``."""
    mapping = tomllib.loads(map_path.read_text())
    fields, order = mapping["fields"], mapping["order"]
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for number, row in enumerate(rows, 1):
        row["#"] = number
    kept_models = set(mapping.get("filter", {}).get("model", _MODELS))
    if "where" in mapping:
        kept_models = {m for m in _MODELS if f"'{m}'" in mapping["where"]}
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["model"] in kept_models:
            runs[f"{row['model']}/r{row['r']}"].append(row)
    if not runs:
        return f"{map_path}: no row of {csv_path} passes [filter] ({len(rows)} rows read); nothing to write. Check the filter's columns and values."

    def position(row: dict[str, Any]) -> tuple[int, int]:  # empty first, then as numbers
        return (0, 0) if row["pos"] == "" else (1, int(row["pos"]))

    ordered: list[tuple[str, dict[str, Any]]] = []
    for label in sorted(runs):  # runs by label (code points: 'M' before 'l')
        run = sorted(runs[label], key=position)  # stable: equal positions keep table order
        if order.get("distinct"):
            for before, row in itertools.pairwise(run):
                if position(before) == position(row):
                    return (
                        f"{csv_path}, column 'pos', row {row['#']}: repeats the pos of row "
                        f"{before['#']} in the run {label!r} (order.distinct): keep one, or "
                        f"tell them apart in run.label (line {row['#'] + 1})."
                    )
        if order.get("shuffle") and len(run) > 1:
            seed = zlib.crc32(label.encode(), order.get("seed", 0))
            run = [run[i] for i in np.random.default_rng(seed).permutation(len(run))]
        ordered += [(label, row) for row in run]
    for _, row in ordered:  # the first in the trace's order is named
        if row["floor"] == str(2**63):
            return (
                f"{csv_path}, column 'floor', row {row['#']}: holds '{2**63}', which gives "
                "fields.static_floor_bytes beyond 64 bits (a trace holds at most "
                f"9,223,372,036,854,775,807) (line {row['#'] + 1})."
            )

    # a column is integers (exact) when every non-empty cell of the table is an int64, else
    # 64-bit floats (the how-to): a cell of 2**63, even in a row the filter drops, makes
    # 2**53 + 1 in another row 2**53
    floats = any(row["floor"] == str(2**63) for row in rows)

    def floor(text: str) -> int | None:
        return None if not text else int(float(text)) if floats else int(text)

    def size(text: str, key: str) -> int:
        return half_even(Decimal(text.strip()) * UNIT_BYTES[fields[key]["unit"]])

    two = "waves" in mapping
    out: list[dict[str, Any]] = []
    steps: dict[str, int] = defaultdict(int)
    for label, row in ordered:
        step = steps[label]
        steps[label] += 1
        oom = row["flag"].strip().lower() in TRUE_TEXT
        baseline = size(row["base"], "baseline_bytes")
        seq = int(row["seq"])
        common = {
            "run": label,
            "step": step,
            "rank": int(row["r"]),
            "packed_tokens": seq,
            "logical_tokens": 2 * seq,
            "baseline_bytes": baseline,
            "output_bytes": size(row["ob"], "output_bytes"),
            "static_floor_bytes": floor(row["floor"]),
            "oom": oom,
        }
        peak = baseline if row["peak"] == "" else size(row["peak"], "peak_bytes")
        readings = [(0, row["sig"], row["k"], row["ph"], peak)]
        if two:
            tail = f"{row['sig']}-tail"
            readings += [(1, tail, "split_child", "forward", baseline)]
            readings += [(1, tail, "split_child", row["ph"], peak)]
        for index, (sample, signature, kind, phase, peak_bytes) in enumerate(readings):
            reading = {
                **common,
                "wave": step * (2 if two else 1) + sample,
                "seq": step * len(readings) + index,
                "kind": kind,
                "phase": phase,
                "signature": signature,
                "peak_bytes": peak_bytes,
                "whole": phase == "caller" and kind == "flat" and not oom,
            }
            out.append({k: reading[k] for k in JOINT_COMPARED})
    return out


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(joint_tables())
def test_import_table_equals_the_oracle_with_every_deciding_input_varied_at_once(
    case: dict[str, Any],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table = write_table(folder, case["rows"])
        mapping = folder / "map.toml"
        mapping.write_text(joint_mapping_text(case))
        want = joint_oracle(table, mapping)
        out = folder / "out.parquet"
        code, output = warmfit_output(
            "import", "table", str(table), "--map", str(mapping), "-o", str(out)
        )
        if isinstance(want, str):
            assert (code, output) == (2, f"warmfit: error: {want}\n")
            assert not out.exists()
            return
        assert code == 0, output
        rows = pq.read_table(out).to_pylist()
        assert [{k: r.get(k) for k in JOINT_COMPARED} for r in rows] == want
