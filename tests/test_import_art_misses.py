"""``warmfit import art-misses``: ART's planner-miss reports as a trace (issue 30).

Reports are written here from the documented fields (docs/how-to/
bring-your-own-measurements.md): a directory of good, malformed, truncated,
oversized and waveless reports imports the good ones, names every other and
prints the count of each.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.command_line import warmfit_cli
from tests.strategies import examples
from warmfit.cli import app
from warmfit.format.trace import read_trace
from warmfit.importers.art_misses import MAX_REPORT_BYTES, import_misses


def report(
    number: int,
    *,
    occurred: str,
    rank: int = 0,
    packed: int = 4096,
    logical: int = 8192,
    predicted: int = 10_000_000,
    observed: int | None = 13_000_000,
    oom: bool = False,
    partial: int | None = None,
    event: str | None = None,
    estimates: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An ART planner-miss report with the documented fields."""
    record: dict[str, Any] = {
        "format": 1 if event is None else 2,
        "kind": "art-planner-miss",
        "id": f"{number:032x}",
        "occurred_at": occurred,
        "phase": "train_step",
        "oom": oom,
        "threshold_pct": 5.0,
        "predicted_peak_bytes": predicted,
        "admission_peak_bytes": predicted + 1000,
        "observed_peak_bytes": None if oom else observed,
        "partial_peak_bytes": partial if oom else None,
        "error_pct": None,
        "replay_complete": True,
        "incomplete_reasons": [],
        "replay_scope": "cpu-memory-estimator",
        "replay": {
            "rank": rank,
            "model": "Qwen/Qwen3-1.7B",
            "device": "NVIDIA H200",
            "safety_factor": 1.1,
            "memory_replay": {
                "estimates": estimates
                or [
                    {
                        "signature": {"topology": [1, 2, 1, 1], "grad_modes": ["lora"]},
                        "profile": None,
                        "arguments": {
                            "packed_tokens": packed,
                            "logical_tokens": logical,
                            "output_bytes": 512,
                        },
                        "expected_required_bytes": predicted,
                    }
                ]
            },
        },
    }
    if event is not None:
        record["event"] = event
    return record


def canonical(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


def spool(tmp_path: Path) -> Path:
    """A directory as ART leaves it, good reports mixed with bad ones."""
    folder = tmp_path / "art-planner-misses-1000-42"
    folder.mkdir()
    good = [
        # rank 0, named out of time order: imported in occurred_at order
        report(1, occurred="2026-01-01T10:00:02+00:00", packed=2048, logical=2048),
        report(2, occurred="2026-01-01T10:00:00+00:00", packed=1024, logical=1024),
        report(3, occurred="2026-01-01T10:00:01+00:00", oom=True, partial=15_000_000),
        # rank 1
        report(4, occurred="2026-01-01T10:00:00+00:00", rank=1, predicted=9_000_000),
        # format 2 names its event
        report(5, occurred="2026-01-01T10:00:03+00:00", event="estimate_miss"),
    ]
    for i, record in enumerate(good):
        (folder / f"good-{i}.json").write_bytes(canonical(record))
    whole = canonical(report(9, occurred="2026-01-01T10:00:00+00:00"))
    (folder / "truncated.json").write_bytes(whole[: len(whole) // 2])
    (folder / "not-json.json").write_text("<html>502 Bad Gateway</html>\n")
    wrong = report(10, occurred="2026-01-01T10:00:00+00:00", predicted=-1)
    (folder / "negative.json").write_bytes(canonical(wrong))
    with (folder / "huge.json").open("wb") as handle:  # sparse: no 16 MiB written
        handle.truncate(MAX_REPORT_BYTES + 1)
    refused = report(11, occurred="2026-01-01T10:00:00+00:00", event="admission_refused")
    (folder / "refused.json").write_bytes(canonical(refused))
    blind = report(12, occurred="2026-01-01T10:00:00+00:00") | {"replay": None}
    (folder / "no-replay.json").write_bytes(canonical(blind))
    (folder / "notes.txt").write_text("not a report: ignored\n")
    return folder


def test_good_reports_are_imported_and_every_other_one_named(tmp_path: Path) -> None:
    folder = spool(tmp_path)
    out = tmp_path / "misses.parquet"
    result = CliRunner().invoke(app, ["import", "art-misses", str(folder), "-o", str(out)])
    # like 'warmfit recover': the trace holds the good reports, and exit 2 says some were refused
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "5 reports imported, 3 malformed, 1 oversized, 2 not a wave" in result.stdout
    for name, reason in [
        ("truncated.json", "(malformed): is cut short"),
        ("not-json.json", "(malformed): is not JSON"),
        ("negative.json", "(malformed): predicted_peak_bytes must be a whole number"),
        ("huge.json", "(oversized): is 16,777,217 bytes, over ART's cap"),
        ("refused.json", "(not a wave): records the event 'admission_refused'"),
        ("no-replay.json", "(not a wave): has no replay section"),
    ]:
        assert f"warmfit: refused {folder / name} {reason}" in result.output, name
    assert "notes.txt" not in result.output
    trace = read_trace([out]).sort("rank", "seq")
    assert trace.height == 5
    assert set(trace.get_column("run")) == {"Qwen/Qwen3-1.7B"}
    rank0 = trace.filter(pl.col("rank") == 0)
    # occurred_at order per rank: 10:00:00 (id 2), :01 (id 3, the OOM), :02 (id 1), :03 (id 5)
    assert [int(i, 16) for i in rank0.get_column("art_report_id")] == [2, 3, 1, 5]
    assert rank0.get_column("wave").to_list() == [0, 1, 2, 3] == rank0.get_column("seq").to_list()
    assert rank0.get_column("packed_tokens").to_list() == [1024, 4096, 2048, 4096]
    # the observed peak, or an OOM's partial peak; ART's prediction is the recorded price
    assert rank0.get_column("peak_bytes").to_list() == [13_000_000, 15_000_000] + [13_000_000] * 2
    assert rank0.get_column("oom").to_list() == [False, True, False, False]
    # the bytes admitted on (admission_peak_bytes here: no local figure), not the net prediction
    assert set(trace.get_column("estimate_bytes")) == {10_001_000, 9_001_000}
    assert set(trace.get_column("art_predicted_peak_bytes")) == {10_000_000, 9_000_000}
    assert set(trace.get_column("art_estimate_from")) == {"admission_peak_bytes"}
    assert "estimate_bytes (the bytes admitted on, replayed as 'recorded'): 5 from " in (
        result.stdout
    )
    # no whole reading: warm-fit learns nothing from misses
    assert set(trace.select("kind", "phase", "whole").rows()) == {("flat", "caller", False)}
    assert set(trace.get_column("output_bytes")) == {512}
    assert trace.get_column("signature").str.starts_with("art:").all()
    assert trace.get_column("signature").n_unique() == 1
    assert set(trace.get_column("art_safety_factor")) == {1.1}
    assert set(trace.get_column("art_device")) == {"NVIDIA H200"}
    metadata = pq.read_schema(out).metadata
    assert metadata[b"warmfit.import.source"] == folder.name.encode()
    assert metadata[b"warmfit.import.reports"] == b"5"
    assert len(metadata[b"warmfit.import.source_sha256"]) == 64


def test_several_candidates_take_the_one_that_matches_the_prediction(tmp_path: Path) -> None:
    folder = tmp_path / "spool"
    folder.mkdir()

    def candidate(packed: int, expected: int) -> dict[str, Any]:
        arguments = {"packed_tokens": packed, "logical_tokens": packed, "output_bytes": 0}
        return {"signature": "s", "arguments": arguments, "expected_required_bytes": expected}

    # expected_required_bytes carries the safety factor, as admission_peak_bytes does
    one = report(
        1, occurred="2026-01-01T00:00:00Z", estimates=[candidate(10, 5), candidate(20, 10_001_000)]
    )
    two = report(2, occurred="2026-01-01T00:00:01Z", estimates=[candidate(10, 5), candidate(20, 6)])
    (folder / "one.json").write_bytes(canonical(one))
    (folder / "two.json").write_bytes(canonical(two))
    misses = import_misses(folder)
    assert misses.imported == 1 and misses.readings.get_column("packed_tokens").to_list() == [20]
    assert misses.readings.get_column("signature").to_list() == ["s"]
    assert [(r.path.name, r.reason) for r in misses.refused] == [("two.json", "not a wave")]
    assert "0 of them match" in misses.refused[0].problem


def test_a_directory_with_no_good_report_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "spool"
    folder.mkdir()
    (folder / "a.json").write_text("{")
    out = tmp_path / "m.parquet"
    result = CliRunner().invoke(app, ["import", "art-misses", str(folder), "-o", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert "no report could be imported (0 reports imported, 1 malformed" in result.stderr
    # nothing on stdout: no line on where estimate_bytes came from, the refusal on stderr
    assert result.stdout == ""
    assert f"warmfit: refused {folder / 'a.json'} (malformed): " in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(app, ["import", "art-misses", str(empty), "-o", str(out)])
    assert result.exit_code == 2 and "holds no *.json report" in result.output
    result = CliRunner().invoke(
        app, ["import", "art-misses", str(tmp_path / "gone"), "-o", str(out)]
    )
    assert result.exit_code == 2 and "does not exist" in result.output
    assert "Traceback" not in result.output and not out.exists()


def test_an_existing_output_needs_force(tmp_path: Path) -> None:
    folder = tmp_path / "spool"
    folder.mkdir()
    (folder / "one.json").write_bytes(canonical(report(1, occurred="2026-01-01T00:00:00Z")))
    out = tmp_path / "m.parquet"
    out.write_bytes(b"someone's file")
    args = ["import", "art-misses", str(folder), "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and f"will not overwrite without --force: {out}" in result.stderr
    assert out.read_bytes() == b"someone's file"
    assert CliRunner().invoke(app, [*args, "--force"]).exit_code == 0
    assert out.read_bytes().startswith(b"PAR1")


def test_a_number_beyond_its_column_is_refused_as_malformed(tmp_path: Path) -> None:
    # a rank must fit the trace's int32, a byte count its int64; a number of thousands of
    # digits is not even read: each such report is refused, and the others imported
    folder = tmp_path / "spool"
    folder.mkdir()
    good = report(1, occurred="2026-01-01T00:00:00Z")
    (folder / "good.json").write_bytes(canonical(good))
    rank = report(2, occurred="2026-01-01T00:00:01Z", rank=2**40)
    (folder / "rank.json").write_bytes(canonical(rank))
    (folder / "peak.json").write_bytes(
        canonical(report(3, occurred="2026-01-01T00:00:02Z", observed=2**70))
    )
    (folder / "tokens.json").write_bytes(
        canonical(report(4, occurred="2026-01-01T00:00:03Z", packed=2**63, logical=2**63))
    )
    text = canonical(report(5, occurred="2026-01-01T00:00:04Z")).decode()
    (folder / "digits.json").write_text(text.replace("13000000", "9" * 5000))
    out = tmp_path / "m.parquet"
    result = CliRunner().invoke(app, ["import", "art-misses", str(folder), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "1 report imported, 4 malformed, 0 oversized, 0 not a wave" in result.stdout
    for name, problem in [
        ("rank.json", "replay.rank must be a whole number from 0 to 2**31 - 1, an int32; got"),
        ("peak.json", "observed_peak_bytes must be a whole number from 0 to 2**63 - 1; got"),
        (
            "tokens.json",
            "replay.memory_replay.estimates[0].arguments.packed_tokens must be a whole number "
            "from 0 to 2**63 - 1",
        ),
        ("digits.json", "holds a number too long to read"),
    ]:
        assert f"warmfit: refused {folder / name} (malformed): {problem}" in result.output, name
    assert len(result.output) < 2000  # no number printed in full
    trace = read_trace([out])
    assert trace.height == 1 and trace.get_column("art_report_id").to_list() == [f"{1:032x}"]


def test_the_recorded_price_is_the_bytes_the_rank_admitted_on(tmp_path: Path) -> None:
    """SPEC §9: a format-2 report with replay.local_admission_peak_bytes and two candidate
    estimates. ART admitted on local = 11,000,000 bytes (its predicted_peak_bytes is
    round(11,000,000 / 1.1) = 10,000,000, net of the factor); the candidate whose
    expected_required_bytes is 11,000,000 ran. The wave peaked at 13,000,000, so the
    recorded price is 2,000,000 under the peak, not 3,000,000."""
    folder = tmp_path / "spool"
    folder.mkdir()

    def candidate(packed: int, expected: int) -> dict[str, Any]:
        arguments = {"packed_tokens": packed, "logical_tokens": packed, "output_bytes": 0}
        return {"signature": "s", "arguments": arguments, "expected_required_bytes": expected}

    record = report(
        1,
        occurred="2026-01-01T00:00:00Z",
        event="estimate_miss",
        predicted=10_000_000,
        observed=13_000_000,
        estimates=[candidate(100, 10_000_000), candidate(200, 11_000_000)],
    )
    record["admission_peak_bytes"] = 12_000_000  # reduced over the ranks: another rank's
    record["replay"]["local_admission_peak_bytes"] = 11_000_000
    (folder / "one.json").write_bytes(canonical(record))
    # without the local figure, the net prediction times the factor: 11,000,000 again,
    # and the candidates compared net (round(11,000,000 / 1.1) == 10,000,000)
    bare = report(
        2,
        occurred="2026-01-01T00:00:01Z",
        predicted=10_000_000,
        observed=13_000_000,
        estimates=[candidate(100, 10_000_000), candidate(200, 11_000_000)],
    )
    del bare["admission_peak_bytes"]
    (folder / "two.json").write_bytes(canonical(bare))
    out = tmp_path / "m.parquet"
    result = CliRunner().invoke(app, ["import", "art-misses", str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert (
        "1 from replay.local_admission_peak_bytes, 1 from predicted_peak_bytes x "
        "replay.safety_factor" in result.stdout
    )
    trace = read_trace([out]).sort("seq")
    assert trace.get_column("estimate_bytes").to_list() == [11_000_000, 11_000_000]
    assert trace.get_column("packed_tokens").to_list() == [200, 200]
    assert trace.get_column("art_predicted_peak_bytes").to_list() == [10_000_000] * 2
    wave = tmp_path / "waves.csv"
    replayed = CliRunner().invoke(
        app, ["replay", str(out), "--policy", "max-merge", "--per-wave", str(wave)]
    )
    assert replayed.exit_code == 0, replayed.output
    rows = pl.read_csv(wave).filter(pl.col("policy") == "recorded")
    assert rows.get_column("estimate_bytes").to_list() == [11_000_000, 11_000_000]


def test_a_report_that_cannot_be_read_is_refused_and_the_others_imported(tmp_path: Path) -> None:
    """Issue 42: a lone surrogate, a report that is a directory or a FIFO, a report nested
    thousands deep: each refused and named, the good one imported, no traceback."""
    import os

    folder = tmp_path / "spool"
    folder.mkdir()
    (folder / "good.json").write_bytes(canonical(report(1, occurred="2026-01-01T00:00:00Z")))
    text = canonical(report(2, occurred="2026-01-01T00:00:01Z")).decode()
    (folder / "surrogate.json").write_text(text.replace("Qwen/Qwen3-1.7B", "Qwen\\ud800"))
    (folder / "dir.json").mkdir()
    os.mkfifo(folder / "fifo.json")
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    out = tmp_path / "m.parquet"
    result = CliRunner().invoke(app, ["import", "art-misses", str(folder), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "1 report imported, 4 malformed" in result.stdout
    for name, problem in [
        ("surrogate.json", "holds a lone surrogate ('\\ud800')"),
        ("dir.json", "is a directory"),
        ("fifo.json", "is a FIFO"),
        ("deep.json", "nests arrays or objects too deeply"),
    ]:
        assert f"warmfit: refused {folder / name} (malformed): {problem}" in result.output, name
    assert read_trace([out]).height == 1


def test_a_report_without_read_permission_is_refused(tmp_path: Path) -> None:
    """Issue 42: PermissionError was a traceback (root reads anything: skipped as root)."""
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads a file without read permission")
    folder = tmp_path / "spool"
    folder.mkdir()
    (folder / "good.json").write_bytes(canonical(report(1, occurred="2026-01-01T00:00:00Z")))
    locked = folder / "locked.json"
    locked.write_bytes(canonical(report(2, occurred="2026-01-01T00:00:01Z")))
    locked.chmod(0)
    misses = import_misses(folder)
    assert misses.imported == 1
    assert [(r.path.name, r.reason) for r in misses.refused] == [("locked.json", "malformed")]
    assert misses.refused[0].problem.startswith("cannot be read (Permission denied")


def _refusals(tmp_path: Path, files: dict[str, bytes]) -> tuple[Any, dict[str, tuple[str, str]]]:
    """Import a spool of ``files`` (name: bytes): the readings and each refusal's
    (reason, problem) by file name."""
    folder = tmp_path / "spool"
    folder.mkdir()
    for name, raw in files.items():
        (folder / name).write_bytes(raw)
    misses = import_misses(folder)
    return misses, {r.path.name: (r.reason, r.problem) for r in misses.refused}


def test_a_refusal_quotes_a_value_as_json_or_as_text_cut_at_40_characters(
    tmp_path: Path,
) -> None:
    """A value that is not text is shown as JSON (null, 0, a list), text as Python quotes
    it; what is longer than 40 characters shows its first 37 and '...'."""
    at = "2026-01-01T00:00:00Z"

    def changed(number: int, **fields: Any) -> bytes:
        return canonical(report(number, occurred=at) | fields)

    misses, refused = _refusals(
        tmp_path,
        {
            "oom-null.json": changed(1, oom=None),
            "oom-zero.json": changed(2, oom=0),
            "phase-list.json": changed(3, phase=list(range(20))),
            "kind-40.json": changed(4, kind="k" * 38),  # quoted: 40 characters
            "kind-41.json": changed(5, kind="k" * 39),  # quoted: 41 characters
            "good.json": changed(6),
        },
    )
    assert misses.imported == 1
    assert refused == {
        "oom-null.json": ("malformed", "oom must be true or false; got null."),
        # 0 is no boolean, though it is false: refused, not imported as a fitting wave
        "oom-zero.json": ("malformed", "oom must be true or false; got 0."),
        "phase-list.json": (
            "malformed",
            "phase must be a string; got [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11....",
        ),
        "kind-40.json": (
            "malformed",
            f"is not an ART planner-miss report (kind '{'k' * 38}', not 'art-planner-miss').",
        ),
        "kind-41.json": (
            "malformed",
            f"is not an ART planner-miss report (kind '{'k' * 36}..., not 'art-planner-miss').",
        ),
    }


def test_a_report_without_a_threshold_or_a_factor_imports_them_as_null(tmp_path: Path) -> None:
    """threshold_pct and replay.safety_factor are optional (null or absent): the wave is
    imported with the admitted bytes of admission_peak_bytes (10,001,000)."""
    record = report(1, occurred="2026-01-01T00:00:00Z")
    record["threshold_pct"] = None
    del record["replay"]["safety_factor"]
    misses, refused = _refusals(tmp_path, {"one.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert (row["art_threshold_pct"], row["art_safety_factor"]) == (None, None)
    assert row["estimate_bytes"] == 10_001_000
    assert row["art_estimate_from"] == "admission_peak_bytes"


def test_a_report_cut_inside_a_string_before_a_newline_is_cut_short(tmp_path: Path) -> None:
    """A report cut in the middle of a string and then ended with a newline: JSON fails on
    the newline itself (a control character in a string), at the end of the text, so it is
    cut short; a file that is not JSON before its end is named as such."""
    cut = b'{"kind": "art-planner-mi\n'
    _, refused = _refusals(tmp_path, {"cut.json": cut, "html.json": b"<html>502</html>\n"})
    assert refused["cut.json"] == (
        "malformed",
        "is cut short: 25 bytes of JSON that ends before it is complete.",
    )
    assert refused["html.json"] == (
        "malformed",
        "is not JSON (Expecting value at line 1, column 1).",
    )


def test_a_report_with_no_replay_section_says_what_art_gave_as_its_reasons(
    tmp_path: Path,
) -> None:
    at = "2026-01-01T00:00:00Z"
    said = report(1, occurred=at) | {"replay": None, "incomplete_reasons": ["no tokens", 7]}
    silent = report(2, occurred=at) | {"replay": None, "incomplete_reasons": []}
    _, refused = _refusals(
        tmp_path, {"said.json": canonical(said), "silent.json": canonical(silent)}
    )
    assert refused == {
        "said.json": (
            "not a wave",
            "has no replay section, so no tokens or signature (ART says: no tokens; 7).",
        ),
        "silent.json": ("not a wave", "has no replay section, so no tokens or signature."),
    }


def test_several_candidates_compared_net_under_a_safety_factor_of_one(tmp_path: Path) -> None:
    """With no admitted figure, a factor of exactly 1.0 still compares the candidates with
    the prediction: round(10,000,000 / 1.0) picks the first of 10 and 20 tokens."""

    def candidate(packed: int, expected: int) -> dict[str, Any]:
        arguments = {"packed_tokens": packed, "logical_tokens": packed, "output_bytes": 0}
        return {"signature": "s", "arguments": arguments, "expected_required_bytes": expected}

    record = report(
        1,
        occurred="2026-01-01T00:00:00Z",
        predicted=10_000_000,
        estimates=[candidate(10, 10_000_000), candidate(20, 20_000_000)],
    )
    del record["admission_peak_bytes"]
    record["replay"]["safety_factor"] = 1.0
    misses, refused = _refusals(tmp_path, {"one.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert (row["packed_tokens"], row["estimate_bytes"]) == (10, 10_000_000)
    assert row["art_estimate_from"] == "predicted_peak_bytes x replay.safety_factor"


def test_a_report_that_grows_past_the_cap_after_its_size_is_taken_is_oversized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size is checked before the read; a report that grows past 16 MiB between the
    two (os.stat says 100 bytes here, the file holds 16 MiB + 1) is refused by the read."""
    from types import SimpleNamespace

    from warmfit.importers import art_misses

    folder = tmp_path / "spool"
    folder.mkdir()
    with (folder / "growing.json").open("wb") as handle:  # sparse: no 16 MiB written
        handle.truncate(MAX_REPORT_BYTES + 1)
    monkeypatch.setattr(
        art_misses, "os", SimpleNamespace(stat=lambda _: SimpleNamespace(st_size=100))
    )
    misses = import_misses(folder)
    assert [(r.path.name, r.reason, r.problem) for r in misses.refused] == [
        ("growing.json", "oversized", "holds more than ART's cap of 16,777,216 bytes (16 MiB).")
    ]


# --- audit of 12-06g (audit2) ---


def test_each_rank_of_a_model_numbers_its_own_waves_from_0(tmp_path: Path) -> None:
    """One model, two ranks, two reports each: each (run, rank) stream's seq and wave count
    0, 1 in occurred_at order; rank 1's are not 2, 3 after rank 0's."""
    files = {
        "a.json": report(1, occurred="2026-01-01T10:00:01+00:00", rank=0, packed=101),
        "b.json": report(2, occurred="2026-01-01T10:00:00+00:00", rank=1, packed=201),
        "c.json": report(3, occurred="2026-01-01T10:00:00+00:00", rank=0, packed=100),
        "d.json": report(4, occurred="2026-01-01T10:00:02+00:00", rank=1, packed=202),
    }
    misses, refused = _refusals(tmp_path, {k: canonical(v) for k, v in files.items()})
    assert refused == {}
    rows = misses.readings.select("rank", "seq", "wave", "packed_tokens").rows()
    assert rows == [(0, 0, 0, 100), (0, 1, 1, 101), (1, 0, 0, 201), (1, 1, 1, 202)]


def test_reports_of_one_time_are_ordered_by_id_not_by_file_name(tmp_path: Path) -> None:
    """Two reports of one rank at the same occurred_at: the one with the smaller id
    (0...01, in b.json) is seq 0, though a.json (id 0...02) sorts first by name."""
    files = {
        "a.json": report(2, occurred="2026-01-01T10:00:00+00:00", packed=222),
        "b.json": report(1, occurred="2026-01-01T10:00:00+00:00", packed=111),
    }
    misses, _ = _refusals(tmp_path, {k: canonical(v) for k, v in files.items()})
    rows = misses.readings.select("seq", "packed_tokens", "art_report_id").rows()
    assert rows == [(0, 111, f"{1:032x}"), (1, 222, f"{2:032x}")]


def test_the_net_prediction_times_the_factor_is_rounded_to_nearest(tmp_path: Path) -> None:
    """Without admitted bytes, estimate_bytes is round(predicted x factor):
    10,000,007 x 1.1 = 11,000,007.7, so 11,000,008 bytes, not 11,000,007 cut down."""
    record = report(1, occurred="2026-01-01T00:00:00Z", predicted=10_000_007)
    del record["admission_peak_bytes"]
    misses, refused = _refusals(tmp_path, {"one.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert (row["estimate_bytes"], row["art_estimate_from"]) == (
        11_000_008,
        "predicted_peak_bytes x replay.safety_factor",
    )


def test_a_report_of_exactly_16_mib_is_read(tmp_path: Path) -> None:
    """ART's cap is 16 MiB = 16,777,216 bytes: a report of exactly that size (JSON padded
    with spaces before its newline) is imported (one byte more is oversized: the spool)."""
    whole = canonical(report(1, occurred="2026-01-01T00:00:00Z"))
    padded = whole[:-1] + b" " * (MAX_REPORT_BYTES - len(whole)) + b"\n"
    assert len(padded) == MAX_REPORT_BYTES == 16_777_216
    misses, refused = _refusals(tmp_path, {"exact.json": padded})
    assert refused == {}
    assert misses.imported == 1


def test_an_oom_without_a_partial_peak_is_not_a_wave_whatever_else_it_holds(
    tmp_path: Path,
) -> None:
    """An OOM's peak is partial_peak_bytes alone: an OOM report with observed_peak_bytes
    (13,000,000) but partial_peak_bytes null is refused, not imported with that peak."""
    record = report(1, occurred="2026-01-01T00:00:00Z", oom=True, partial=None)
    record["observed_peak_bytes"] = 13_000_000
    misses, refused = _refusals(tmp_path, {"oom.json": canonical(record)})
    assert misses.imported == 0
    assert refused == {
        "oom.json": ("not a wave", "is an OOM with no partial_peak_bytes: no peak to record.")
    }


@pytest.mark.parametrize("key", ["threshold_pct", "replay.safety_factor"])
def test_a_flag_where_a_number_belongs_is_malformed(tmp_path: Path, key: str) -> None:
    """JSON true is no number (though Python's bool is an int): threshold_pct = true or
    replay.safety_factor = true refuses the report, not reads it as 1.0."""
    record = report(1, occurred="2026-01-01T00:00:00Z")
    if key == "threshold_pct":
        record["threshold_pct"] = True
    else:
        record["replay"]["safety_factor"] = True
    misses, refused = _refusals(tmp_path, {"flag.json": canonical(record)})
    assert misses.imported == 0
    name = key.split(".")[-1]
    assert refused == {"flag.json": ("malformed", f"{name} must be a finite number; got true.")}


def test_an_empty_or_null_event_is_refused_not_taken_for_a_miss(tmp_path: Path) -> None:
    """Format 2 names its event: "" is an event no wave ran for, null is no string; only
    a report without the key takes its event from oom (estimate_miss here)."""
    empty = report(1, occurred="2026-01-01T00:00:00Z", event="")
    null = report(2, occurred="2026-01-01T00:00:01Z") | {"format": 2, "event": None}
    absent = report(3, occurred="2026-01-01T00:00:02Z")
    misses, refused = _refusals(
        tmp_path,
        {
            "empty.json": canonical(empty),
            "null.json": canonical(null),
            "absent.json": canonical(absent),
        },
    )
    assert refused == {
        "empty.json": ("not a wave", "records the event '': no wave ran, so there is no peak."),
        "null.json": ("malformed", "event must be a string; got null."),
    }
    assert misses.readings.get_column("art_event").to_list() == ["estimate_miss"]


def test_a_prediction_that_the_factor_lifts_past_int64_is_malformed(tmp_path: Path) -> None:
    """predicted_peak_bytes = 2**63 - 1 is a whole number a trace holds, but times the
    safety factor 1.1 it is about 1.01e19, past 2**63 - 1: the report is refused, named."""
    record = report(1, occurred="2026-01-01T00:00:00Z", predicted=2**63 - 1)
    del record["admission_peak_bytes"]
    misses, refused = _refusals(tmp_path, {"big.json": canonical(record)})
    assert misses.imported == 0
    assert refused == {
        "big.json": (
            "malformed",
            "predicted_peak_bytes x replay.safety_factor is beyond 2**63 - 1.",
        )
    }


def test_a_report_naming_a_key_twice_is_malformed(tmp_path: Path) -> None:
    """JSON lets a key come twice and Python keeps the last; a report with "phase" twice
    is refused, as which one ART meant is not known."""
    raw = b'{"phase":"other",' + canonical(report(1, occurred="2026-01-01T00:00:00Z"))[1:]
    misses, refused = _refusals(tmp_path, {"twice.json": raw})
    assert misses.imported == 0
    assert refused == {"twice.json": ("malformed", "names the key 'phase' twice.")}


@pytest.mark.parametrize("occurred", ["2026-01-01T00:00:00", "2026-01-01T01:00:00+01:00"])
def test_a_time_without_its_zone_or_in_another_is_not_utc(tmp_path: Path, occurred: str) -> None:
    """occurred_at must say UTC: a time with no zone is as unknown as one at +01:00."""
    record = report(1, occurred=occurred)
    misses, refused = _refusals(tmp_path, {"when.json": canonical(record)})
    assert misses.imported == 0
    assert refused == {"when.json": ("malformed", f"occurred_at {occurred!r} is not in UTC.")}


def test_an_estimate_of_no_tokens_or_no_estimate_at_all_is_refused(tmp_path: Path) -> None:
    """packed_tokens = 0 is no wave (malformed); an empty estimates list gives no tokens
    or signature (not a wave): each refused and named, never a traceback."""
    zero = report(1, occurred="2026-01-01T00:00:00Z", packed=0, logical=0)
    empty = report(2, occurred="2026-01-01T00:00:01Z")
    empty["replay"]["memory_replay"]["estimates"] = []
    misses, refused = _refusals(
        tmp_path, {"zero.json": canonical(zero), "empty.json": canonical(empty)}
    )
    assert misses.imported == 0
    assert refused == {
        "zero.json": (
            "malformed",
            "replay.memory_replay.estimates[0].arguments.packed_tokens is 0; a wave has at "
            "least one token.",
        ),
        "empty.json": (
            "not a wave",
            "has no replay.memory_replay.estimates, so no tokens or signature.",
        ),
    }


def test_a_signature_object_names_one_signature_whatever_its_key_order(tmp_path: Path) -> None:
    """{"a": 1, "b": 2} and {"b": 2, "a": 1} are one signature: art: and the first 16 hex
    digits of the SHA-256 of '{"a":1,"b":2}' (keys sorted), whatever order ART wrote."""
    files = {}
    for number, signature in ((1, {"a": 1, "b": 2}), (2, {"b": 2, "a": 1})):
        record = report(
            number, occurred=f"2026-01-01T00:00:0{number}Z",
            estimates=[_candidate(10_000_000, signature)],
        )  # fmt: skip
        raw = json.dumps(record) + "\n"  # keys in written order
        files[f"{number}.json"] = raw.encode()
    assert b'{"b": 2, "a": 1}' in files["2.json"]
    misses, refused = _refusals(tmp_path, files)
    assert refused == {}
    expected = "art:" + hashlib.sha256(b'{"a":1,"b":2}').hexdigest()[:16]
    assert misses.readings.get_column("signature").to_list() == [expected, expected]


# --- audit of 12-06g (audit3) ---


def _candidate(expected: int | None, signature: Any = "s") -> dict[str, Any]:
    arguments = {"packed_tokens": 8, "logical_tokens": 8, "output_bytes": 0}
    return {"signature": signature, "arguments": arguments, "expected_required_bytes": expected}


def test_each_refusal_is_named_with_its_own_reason_and_words(tmp_path: Path) -> None:
    """One report per refusal that no other test reaches alone: each is refused (never
    imported, never a traceback) with its reason and its message word for word."""
    at = "2026-01-01T00:00:00Z"

    def changed(number: int, **fields: Any) -> dict[str, Any]:
        return report(number, occurred=at) | fields

    no_kind = {k: v for k, v in changed(1).items() if k != "kind"}
    disagree = report(5, occurred=at, event="oom", oom=False)  # format 2: event and oom differ
    reasons = changed(6, replay=None, replay_complete=False, incomplete_reasons=["x" * 300])
    no_bytes = changed(8, admission_peak_bytes=None)  # no local figure, no factor either
    no_bytes["replay"]["safety_factor"] = None
    # both candidates equal admission_peak_bytes (10,001,000): which one ran is not known
    two = report(9, occurred=at, estimates=[_candidate(10_001_000), _candidate(10_001_000)])
    files = {
        "kind.json": canonical(no_kind),
        "format-true.json": canonical(changed(2, format=True)),  # true == 1 in Python
        "format-float.json": canonical(changed(3, format=1.0)),
        "when.json": canonical(changed(4, occurred_at="yesterday")),
        "disagree.json": canonical(disagree),
        "reasons.json": canonical(reasons),
        "replay-list.json": canonical(changed(7, replay=[1])),
        "no-bytes.json": canonical(no_bytes),
        "two-match.json": canonical(two),
        "sig-empty.json": canonical(report(10, occurred=at, estimates=[_candidate(1, "")])),
        "expected-null.json": canonical(report(11, occurred=at, estimates=[_candidate(None)])),
        "utf.json": b'{"kind": "\xff"}\n',  # the bad byte is byte 10, counted from 0
    }
    misses, refused = _refusals(tmp_path, files)
    assert misses.imported == 0
    estimates = "replay.memory_replay.estimates[0]."
    assert refused == {
        "kind.json": (
            "malformed",
            "is not an ART planner-miss report (kind null, not 'art-planner-miss').",
        ),
        "format-true.json": ("malformed", "has format true; warmfit reads formats 1 and 2."),
        "format-float.json": ("malformed", "has format 1.0; warmfit reads formats 1 and 2."),
        "when.json": ("malformed", "occurred_at 'yesterday' is not an ISO 8601 time."),
        "disagree.json": ("malformed", "event 'oom' disagrees with oom = false."),
        # ART's reasons, joined, cut at 200 characters
        "reasons.json": (
            "not a wave",
            f"has no replay section, so no tokens or signature (ART says: {'x' * 200}).",
        ),
        "replay-list.json": ("malformed", "replay must be an object; got [1]."),
        "no-bytes.json": (
            "malformed",
            "says no bytes admitted: neither replay.local_admission_peak_bytes, "
            "admission_peak_bytes nor a positive replay.safety_factor.",
        ),
        "two-match.json": (
            "not a wave",
            "lists 2 candidate estimates and 2 of them match the admitted bytes "
            "(10,001,000, admission_peak_bytes): which one ran is not known.",
        ),
        "sig-empty.json": (
            "malformed",
            f"{estimates}signature must be an object or a string; got ''.",
        ),
        "expected-null.json": (
            "malformed",
            f"{estimates}expected_required_bytes must be a whole number from 0 to 2**63 - 1; "
            "got null.",
        ),
        "utf.json": ("malformed", "is not UTF-8 text (byte 10)."),
    }


def test_a_repeated_id_names_the_first_file_that_had_it(tmp_path: Path) -> None:
    """Files are read in name order: b.json repeats a.json's id and is the one refused,
    naming a.json (not itself)."""
    record = canonical(report(1, occurred="2026-01-01T00:00:00Z"))
    misses, refused = _refusals(tmp_path, {"a.json": record, "b.json": record})
    assert misses.imported == 1
    assert refused == {"b.json": ("malformed", "repeats the id of a.json.")}


def test_the_source_digest_covers_each_imported_reports_bytes_and_name(tmp_path: Path) -> None:
    """source_sha256 is the SHA-256 of 'SHA256  NAME\\n' per imported report, in name
    order: like sha256sum's output, so renaming a report changes it."""
    raw = canonical(report(1, occurred="2026-01-01T00:00:00Z"))
    digests = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.json").write_bytes(raw)
        digests.append(import_misses(folder).metadata["warmfit.import.source_sha256"])
    line = f"{hashlib.sha256(raw).hexdigest()}  a.json\n"
    assert digests[0] == hashlib.sha256(line.encode()).hexdigest()
    assert digests[0] != digests[1]


def test_a_candidate_matches_the_net_prediction_rounded_not_truncated(tmp_path: Path) -> None:
    """predicted 10,000,001 under a factor of 1.1, no admitted bytes given: candidate
    11,000,001 / 1.1 = 10,000,000.909 rounds to 10,000,001 and is the one that ran;
    11,000,000 / 1.1 = 10,000,000 matches nothing. Truncating would match none."""
    record = report(
        1,
        occurred="2026-01-01T00:00:00Z",
        predicted=10_000_001,
        estimates=[_candidate(11_000_000), _candidate(11_000_001)],
    )
    record["admission_peak_bytes"] = None
    misses, refused = _refusals(tmp_path, {"r.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert row["art_expected_required_bytes"] == 11_000_001
    assert row["estimate_bytes"] == 11_000_001  # round(10,000,001 x 1.1)
    assert row["art_estimate_from"] == "predicted_peak_bytes x replay.safety_factor"


def test_the_local_admitted_bytes_pick_the_candidate_before_admission_peak_bytes(
    tmp_path: Path,
) -> None:
    """replay.local_admission_peak_bytes (12,000,000) matches the 16-token candidate and
    admission_peak_bytes (10,001,000) the 8-token one: the local figure is tried first
    (SPEC §9's order), so the 16-token candidate ran."""
    sixteen = _candidate(12_000_000)
    sixteen["arguments"] = {"packed_tokens": 16, "logical_tokens": 16, "output_bytes": 0}
    record = report(1, occurred="2026-01-01T00:00:00Z", estimates=[_candidate(10_001_000), sixteen])
    record["replay"]["local_admission_peak_bytes"] = 12_000_000
    misses, refused = _refusals(tmp_path, {"r.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert (row["packed_tokens"], row["art_expected_required_bytes"]) == (16, 12_000_000)
    assert row["estimate_bytes"] == 12_000_000
    assert row["art_estimate_from"] == "replay.local_admission_peak_bytes"


def test_a_bad_candidate_and_a_bad_local_figure_are_named_where_they_are(tmp_path: Path) -> None:
    """The second candidate's fault names estimates[1], not [0]; a bad local figure is
    named with its replay. prefix."""
    at = "2026-01-01T00:00:00Z"
    zero = _candidate(10_001_000)
    zero["arguments"] = {"packed_tokens": 0, "logical_tokens": 0, "output_bytes": 0}
    second = report(1, occurred=at, estimates=[_candidate(10_001_000), zero])
    local = report(2, occurred=at)
    local["replay"]["local_admission_peak_bytes"] = -1
    misses, refused = _refusals(
        tmp_path, {"second.json": canonical(second), "local.json": canonical(local)}
    )
    assert misses.imported == 0
    assert refused == {
        "second.json": (
            "malformed",
            "replay.memory_replay.estimates[1].arguments.packed_tokens is 0; a wave has at "
            "least one token.",
        ),
        "local.json": (
            "malformed",
            "replay.local_admission_peak_bytes must be a whole number from 0 to 2**63 - 1; got -1.",
        ),
    }


def test_an_id_refused_for_another_fault_does_not_block_a_good_report_of_that_id(
    tmp_path: Path,
) -> None:
    """a.json (id 1) records no wave and is refused for that; b.json (id 1 too) is good
    and imported: only an imported report's id counts as taken."""
    at = "2026-01-01T00:00:00Z"
    refusal = report(1, occurred=at, event="admission_refused")
    misses, refused = _refusals(
        tmp_path, {"a.json": canonical(refusal), "b.json": canonical(report(1, occurred=at))}
    )
    assert misses.imported == 1
    assert list(refused) == ["a.json"]
    assert refused["a.json"][0] == "not a wave"


def test_an_empty_device_is_kept_as_text_and_an_object_as_sorted_json(tmp_path: Path) -> None:
    """replay.device "" stays "" (not null); {"b": 1, "a": 2} is written with sorted keys."""
    at = "2026-01-01T00:00:0{}Z"
    empty = report(1, occurred=at.format(1))
    empty["replay"]["device"] = ""
    named = report(2, occurred=at.format(2))
    named["replay"]["device"] = {"b": 1, "a": 2}
    misses, refused = _refusals(tmp_path, {"1.json": canonical(empty), "2.json": canonical(named)})
    assert refused == {}
    assert misses.readings.get_column("art_device").to_list() == ["", '{"a": 2, "b": 1}']


# --- issue 38, tests by pattern (s1) ---

AT = "2026-01-01T00:00:00Z"
#: The message of a byte count out of its column, and of a rank out of int32.
INT64 = "must be a whole number from 0 to 2**63 - 1; got"
INT32 = "must be a whole number from 0 to 2**31 - 1, an int32; got"
ESTIMATES = "replay.memory_replay.estimates"


def _edited(
    number: int = 1,
    *,
    drop: tuple[str, ...] = (),
    in_replay: dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """report(number) with top-level ``fields`` set, the keys ``drop`` removed and
    ``in_replay``'s keys set in its replay section."""
    record = report(number, occurred=AT) | fields
    for key in drop:
        del record[key]
    if in_replay is not None:
        record["replay"] = record["replay"] | in_replay
    return record


def _tokens(packed: int, logical: int, expected: int = 10_001_000, **changes: Any) -> Any:
    """One candidate estimate of signature 's' with these arguments (output_bytes 0)."""
    arguments = {"packed_tokens": packed, "logical_tokens": logical, "output_bytes": 0}
    return {"signature": "s", "arguments": arguments, "expected_required_bytes": expected} | changes


def _listing(*items: Any, **fields: Any) -> dict[str, Any]:
    """A report whose replay.memory_replay.estimates is ``items``."""
    fields["in_replay"] = fields.get("in_replay", {}) | {
        "memory_replay": {"estimates": list(items)}
    }
    return _edited(**fields)


def _raw(record: Any) -> bytes:
    return canonical(record)


def _digits() -> bytes:
    return canonical(report(1, occurred=AT)).replace(b"13000000", b"9" * 5000)


def _surrogate() -> bytes:
    return canonical(report(1, occurred=AT)).replace(b"Qwen/Qwen3-1.7B", b"Qwen\\ud800")


def _sparse_over_cap(path: Path) -> None:
    with path.open("wb") as handle:  # sparse: no 16 MiB written
        handle.truncate(MAX_REPORT_BYTES + 1)


#: One report alone in a spool, and the one line that refuses it: (what the file is, its
#: reason, its problem word for word). Values quoted as JSON, text as Python quotes it.
REFUSALS = [
    pytest.param(b"[1]\n", "malformed", "is JSON but not an object.", id="json-list"),
    pytest.param(b"null\n", "malformed", "is JSON but not an object.", id="json-null"),
    pytest.param(b"  \xfe{}\n", "malformed", "is not UTF-8 text (byte 2).", id="utf8"),
    pytest.param(
        b'{"kind": "art',
        "malformed",
        "is cut short: 13 bytes of JSON that ends before it is complete.",
        id="cut-short",
    ),
    pytest.param(
        b'{\n  "a": 1,\n  oops\n}\n',
        "malformed",
        "is not JSON (Expecting property name enclosed in double quotes at line 3, column 3).",
        id="not-json-line-3",
    ),
    pytest.param(
        _digits(), "malformed", "holds a number too long to read (over 4,300 digits).", id="digits"
    ),
    pytest.param(
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "malformed",
        "nests arrays or objects too deeply to read.",
        id="deep",
    ),
    pytest.param(
        _surrogate(),
        "malformed",
        r"holds a lone surrogate ('\ud800'), which is not text.",
        id="surrogate",
    ),
    pytest.param(
        b'{"id": "x",' + canonical(report(1, occurred=AT))[1:],
        "malformed",
        "names the key 'id' twice.",
        id="key-twice",
    ),
    pytest.param(
        _raw(_edited(kind="art-planner-hit")),
        "malformed",
        "is not an ART planner-miss report (kind 'art-planner-hit', not 'art-planner-miss').",
        id="kind",
    ),
    pytest.param(
        _raw(_edited(format=3)),
        "malformed",
        "has format 3; warmfit reads formats 1 and 2.",
        id="format-3",
    ),
    pytest.param(
        _raw(_edited(format="2")),
        "malformed",
        "has format '2'; warmfit reads formats 1 and 2.",
        id="format-text",
    ),
    pytest.param(_raw(_edited(id=23)), "malformed", "id must be a string; got 23.", id="id"),
    pytest.param(
        _raw(_edited(occurred_at=None)),
        "malformed",
        "occurred_at must be a string; got null.",
        id="occurred-null",
    ),
    pytest.param(
        _raw(_edited(drop=("phase",))),
        "malformed",
        "phase must be a string; got null.",
        id="phase-absent",
    ),
    pytest.param(
        _raw(_edited(oom="yes")), "malformed", "oom must be true or false; got 'yes'.", id="oom"
    ),
    pytest.param(
        _raw(_edited(occurred_at="2026-13-01T00:00:00Z")),
        "malformed",
        "occurred_at '2026-13-01T00:00:00Z' is not an ISO 8601 time.",
        id="not-iso",
    ),
    pytest.param(
        _raw(_edited(occurred_at="2025-12-31T19:00:00-05:00")),
        "malformed",
        "occurred_at '2025-12-31T19:00:00-05:00' is not in UTC.",
        id="west-of-utc",
    ),
    pytest.param(
        _raw(_edited(occurred_at="2026-01-01T00:30:00+00:30")),
        "malformed",
        "occurred_at '2026-01-01T00:30:00+00:30' is not in UTC.",
        id="half-hour-east",
    ),
    pytest.param(
        _raw(_edited(format=2, event=5)),
        "malformed",
        "event must be a string; got 5.",
        id="event-number",
    ),
    pytest.param(
        _raw(_edited(format=2, event="admission_refused")),
        "not a wave",
        "records the event 'admission_refused': no wave ran, so there is no peak.",
        id="event-no-wave",
    ),
    pytest.param(
        _raw(report(1, occurred=AT, event="estimate_miss", oom=True, partial=15_000_000)),
        "malformed",
        "event 'estimate_miss' disagrees with oom = true.",
        id="miss-with-oom",
    ),
    pytest.param(
        _raw(report(1, occurred=AT, event="oom", oom=False)),
        "malformed",
        "event 'oom' disagrees with oom = false.",
        id="oom-event-without-oom",
    ),
    pytest.param(
        _raw(_edited(predicted_peak_bytes=1.5)),
        "malformed",
        f"predicted_peak_bytes {INT64} 1.5.",
        id="predicted-float",
    ),
    pytest.param(
        _raw(_edited(drop=("predicted_peak_bytes",))),
        "malformed",
        f"predicted_peak_bytes {INT64} null.",
        id="predicted-absent",
    ),
    pytest.param(
        _raw(_edited(admission_peak_bytes="12")),
        "malformed",
        f"admission_peak_bytes {INT64} '12'.",
        id="admission-text",
    ),
    pytest.param(
        _raw(_edited(observed_peak_bytes=2**63)),
        "malformed",
        f"observed_peak_bytes {INT64} 9223372036854775808.",
        id="observed-2**63",
    ),
    pytest.param(
        _raw(report(1, occurred=AT, oom=True, partial=-1)),
        "malformed",
        f"partial_peak_bytes {INT64} -1.",
        id="partial-negative",
    ),
    pytest.param(
        _raw(report(1, occurred=AT, oom=True, partial=None)),
        "not a wave",
        "is an OOM with no partial_peak_bytes: no peak to record.",
        id="oom-no-partial",
    ),
    pytest.param(
        _raw(_edited(threshold_pct="5")),
        "malformed",
        "threshold_pct must be a finite number; got '5'.",
        id="threshold-text",
    ),
    pytest.param(
        _raw(_edited(in_replay={"safety_factor": float("nan")})),
        "malformed",
        "safety_factor must be a finite number; got NaN.",
        id="factor-nan",
    ),
    pytest.param(
        _raw(_edited(in_replay={"safety_factor": float("-inf")})),
        "malformed",
        "safety_factor must be a finite number; got -Infinity.",
        id="factor-minus-infinity",
    ),
    pytest.param(
        # two reasons of 150 characters: joined by '; ', the whole cut at 200
        _raw(_edited(replay=None, incomplete_reasons=["a" * 150, "b" * 150])),
        "not a wave",
        f"has no replay section, so no tokens or signature (ART says: {'a' * 150}; {'b' * 48}).",
        id="no-replay-two-long-reasons",
    ),
    # ART's reasons null or absent: nothing said
    pytest.param(
        _raw(_edited(replay=None, incomplete_reasons=None)),
        "not a wave",
        "has no replay section, so no tokens or signature.",
        id="no-replay-reasons-null",
    ),
    pytest.param(
        _raw(_edited(replay=None, drop=("incomplete_reasons",))),
        "not a wave",
        "has no replay section, so no tokens or signature.",
        id="no-replay-reasons-absent",
    ),
    pytest.param(
        _raw(_edited(replay="x")),
        "malformed",
        "replay must be an object; got 'x'.",
        id="replay-text",
    ),
    pytest.param(
        _raw(_edited(in_replay={"rank": 2**31})),
        "malformed",
        f"replay.rank {INT32} 2147483648.",
        id="rank-2**31",
    ),
    pytest.param(
        _raw(_edited(in_replay={"rank": True})),
        "malformed",
        f"replay.rank {INT32} true.",
        id="rank-true",
    ),
    pytest.param(
        _raw(_edited(in_replay={"model": ""})),
        "malformed",
        "replay.model must be a non-empty string; got ''.",
        id="model-empty",
    ),
    pytest.param(
        _raw(_edited(in_replay={"model": None})),
        "malformed",
        "replay.model must be a non-empty string; got null.",
        id="model-null",
    ),
    pytest.param(
        _raw(_edited(in_replay={"local_admission_peak_bytes": 2**63})),
        "malformed",
        f"replay.local_admission_peak_bytes {INT64} 9223372036854775808.",
        id="local-2**63",
    ),
    pytest.param(
        _raw(_edited(admission_peak_bytes=None, in_replay={"safety_factor": 0})),
        "malformed",
        "says no bytes admitted: neither replay.local_admission_peak_bytes, "
        "admission_peak_bytes nor a positive replay.safety_factor.",
        id="no-bytes-factor-0",
    ),
    pytest.param(
        _raw(_edited(admission_peak_bytes=None, in_replay={"safety_factor": -1.1})),
        "malformed",
        "says no bytes admitted: neither replay.local_admission_peak_bytes, "
        "admission_peak_bytes nor a positive replay.safety_factor.",
        id="no-bytes-factor-negative",
    ),
    pytest.param(
        # 2**62 x 2.0 is 2**63 exactly: one past the column
        _raw(
            _edited(
                admission_peak_bytes=None,
                predicted_peak_bytes=2**62,
                in_replay={"safety_factor": 2.0},
            )
        ),
        "malformed",
        "predicted_peak_bytes x replay.safety_factor is beyond 2**63 - 1.",
        id="price-2**63",
    ),
    pytest.param(
        _raw(_edited(in_replay={"memory_replay": None})),
        "not a wave",
        "has no replay.memory_replay.estimates, so no tokens or signature.",
        id="memory-null",
    ),
    pytest.param(
        _raw(_edited(in_replay={"memory_replay": [{"estimates": [_tokens(8, 8)]}]})),
        "not a wave",
        "has no replay.memory_replay.estimates, so no tokens or signature.",
        id="memory-list",
    ),
    pytest.param(
        _raw(_edited(in_replay={"memory_replay": {"estimates": {"0": _tokens(8, 8)}}})),
        "not a wave",
        "has no replay.memory_replay.estimates, so no tokens or signature.",
        id="estimates-object",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8), 5)),
        "malformed",
        f"{ESTIMATES}[1] must be an object.",
        id="estimate-1-number",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, signature=5))),
        "malformed",
        f"{ESTIMATES}[0].signature must be an object or a string; got 5.",
        id="signature-number",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, signature=["s"]))),
        "malformed",
        f'{ESTIMATES}[0].signature must be an object or a string; got ["s"].',
        id="signature-list",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, arguments=[8, 8, 0]))),
        "malformed",
        f"{ESTIMATES}[0].arguments must be an object; got [8, 8, 0].",
        id="arguments-list",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, arguments={"packed_tokens": 8, "logical_tokens": 8}))),
        "malformed",
        f"{ESTIMATES}[0].arguments.output_bytes {INT64} null.",
        id="output-absent",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, 5), _tokens(8, 8, 6), _tokens(10, 9))),
        "malformed",
        f"{ESTIMATES}[2].arguments.logical_tokens is below packed_tokens.",
        id="logical-below-packed-in-2",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, -1))),
        "malformed",
        f"{ESTIMATES}[0].expected_required_bytes {INT64} -1.",
        id="expected-negative",
    ),
    pytest.param(
        _raw(_listing(_tokens(8, 8, 5), _tokens(16, 16, 6))),
        "not a wave",
        "lists 2 candidate estimates and 0 of them match the admitted bytes "
        "(10,001,000, admission_peak_bytes): which one ran is not known.",
        id="none-match",
    ),
    pytest.param(
        _raw(
            _listing(
                _tokens(8, 8, 12_000_000),
                _tokens(16, 16, 10_001_000),
                _tokens(32, 32, 12_000_000),
                in_replay={"local_admission_peak_bytes": 12_000_000},
            )
        ),
        "not a wave",
        "lists 3 candidate estimates and 2 of them match the admitted bytes "
        "(12,000,000, replay.local_admission_peak_bytes): which one ran is not known.",
        id="two-of-three-match-local",
    ),
    pytest.param(
        # no admitted figure: 11,000,000 / 1.1 rounds to predicted (10,000,000) for both
        _raw(
            _listing(
                _tokens(8, 8, 11_000_000), _tokens(16, 16, 11_000_000), admission_peak_bytes=None
            )
        ),
        "not a wave",
        "lists 2 candidate estimates and 2 of them match the admitted bytes "
        "(11,000,000, predicted_peak_bytes x replay.safety_factor): which one ran is not known.",
        id="two-match-net",
    ),
    pytest.param(
        lambda path: path.mkdir(), "malformed", "is a directory, not a regular file.", id="dir"
    ),
    pytest.param(
        lambda path: path.symlink_to(path.parent / "gone"),
        "malformed",
        "does not exist (or is a broken symbolic link).",
        id="broken-link",
    ),
    pytest.param(
        _sparse_over_cap,
        "oversized",
        "is 16,777,217 bytes, over ART's cap of 16,777,216 (16 MiB).",
        id="oversized",
    ),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("made", "reason", "problem"), REFUSALS)
def test_each_refusal_is_one_line_word_for_word_and_exits_2(
    tmp_path: Path, made: Any, reason: str, problem: str
) -> None:
    """A spool of one report that cannot be imported: stderr is its line, `warmfit:
    refused FILE (REASON): PROBLEM`, then the count of each reason; nothing is written,
    nothing on stdout, exit 2."""
    folder = tmp_path / "spool"
    folder.mkdir()
    path = folder / "r.json"
    if callable(made):
        made(path)
    else:
        path.write_bytes(made)
    out = tmp_path / "m.parquet"
    result = warmfit_cli("import", "art-misses", folder, "-o", out)
    counts = ", ".join(f"{int(r == reason)} {r}" for r in ("malformed", "oversized", "not a wave"))
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"warmfit: refused {path} ({reason}): {problem}\n"
        f"warmfit: error: {folder}: no report could be imported (0 reports imported, "
        f"{counts}); nothing written.\n",
    )
    assert not out.exists()


HINT = (
    "; name the directory of ART's planner-miss reports (art-planner-misses-UID-PID under "
    "the temporary folder, or where your sink puts them)."
)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: None, "does not exist (or is a broken symbolic link)" + HINT),
        (lambda path: path.write_bytes(canonical(report(1, occurred=AT))), "is a file" + HINT),
        (lambda path: os.mkfifo(path), "is a FIFO (named pipe), not a regular file" + HINT),
        (
            lambda path: path.mkdir(),
            "holds no *.json report; ART writes one <id>.json per planner miss.",
        ),
        (
            lambda path: (path.mkdir(), (path / "notes.txt").write_text("{}\n")),
            "holds no *.json report; ART writes one <id>.json per planner miss.",
        ),
    ],
    ids=["missing", "a-file", "a-fifo", "empty", "no-json-name"],
)
def test_a_spool_that_is_no_directory_of_reports_is_named_with_what_to_do(
    tmp_path: Path, make: Any, problem: str
) -> None:
    spool = tmp_path / "spool"
    make(spool)
    out = tmp_path / "m.parquet"
    result = warmfit_cli("import", "art-misses", spool, "-o", out)
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "",
        f"warmfit: error: {spool}: {problem}\n",
    )
    assert not out.exists()


def test_some_refused_the_trace_holds_the_others_and_every_line_is_exact(tmp_path: Path) -> None:
    """Two good reports (one priced by its local figure, one by the net prediction x 1.1) and
    one refusal of each reason: stdout names the two sources that were used (not the third,
    at 0) and what was written; stderr a line per refusal in name order, then their count."""
    folder = tmp_path / "spool"
    folder.mkdir()
    local = _edited(1, in_replay={"local_admission_peak_bytes": 0})  # 0 is a figure
    net = _edited(2, admission_peak_bytes=None)
    (folder / "a-local.json").write_bytes(canonical(local))
    (folder / "b-net.json").write_bytes(canonical(net))
    (folder / "c-list.json").write_bytes(b"[]\n")
    _sparse_over_cap(folder / "d-huge.json")
    (folder / "e-oom.json").write_bytes(canonical(report(5, occurred=AT, oom=True)))
    out = tmp_path / "m.parquet"
    result = warmfit_cli("import", "art-misses", folder, "-o", out)
    tally = "2 reports imported, 1 malformed, 1 oversized, 1 not a wave"
    assert (result.exit_code, result.stdout, result.stderr) == (
        2,
        "estimate_bytes (the bytes admitted on, replayed as 'recorded'): 1 from "
        "replay.local_admission_peak_bytes, 1 from predicted_peak_bytes x replay.safety_factor\n"
        f"wrote {out}: {tally}. Replay it: warmfit replay {out}\n",
        f"warmfit: refused {folder / 'c-list.json'} (malformed): is JSON but not an object.\n"
        f"warmfit: refused {folder / 'd-huge.json'} (oversized): is 16,777,217 bytes, over "
        "ART's cap of 16,777,216 (16 MiB).\n"
        f"warmfit: refused {folder / 'e-oom.json'} (not a wave): is an OOM with no "
        "partial_peak_bytes: no peak to record.\n"
        f"warmfit: error: {folder}: 3 reports refused ({tally}); the trace holds the others.\n",
    )
    trace = read_trace([out]).sort("seq")
    # both rank 0 of one model at one instant: id 1 (the local figure, 0 bytes) first
    assert trace.select("seq", "estimate_bytes", "art_report_id").rows() == [
        (0, 0, f"{1:032x}"),
        (1, 11_000_000, f"{2:032x}"),
    ]


# twins of worked examples that kept a second input fixed


def test_two_models_number_their_ranks_apart(tmp_path: Path) -> None:
    """Twin of test_each_rank_of_a_model_numbers_its_own_waves_from_0 with two models:
    model b's rank 0 counts 0, 1 of its own, not on from model a's rank 0."""
    files = {}
    for number, (model, second) in enumerate(
        [("a", 0), ("b", 1), ("a", 2), ("b", 3), ("b", 4)], start=1
    ):
        record = report(number, occurred=f"2026-01-01T00:00:0{second}Z", packed=number)
        record["replay"]["model"] = model
        files[f"{number}.json"] = canonical(record)
    misses, refused = _refusals(tmp_path, files)
    assert refused == {}
    rows = misses.readings.select("run", "rank", "seq", "wave", "packed_tokens").rows()
    assert rows == [
        ("a", 0, 0, 0, 1), ("a", 0, 1, 1, 3),
        ("b", 0, 0, 0, 2), ("b", 0, 1, 1, 4), ("b", 0, 2, 2, 5),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "spellings",
    [
        # one instant spelled three ways: ordered by id (1, 2, 3), not by the text
        ("2026-01-01T10:00:00Z", "2026-01-01T10:00:00+00:00", "20260101T100000Z"),
        ("2026-01-01 10:00:00-00:00", "2026-01-01T10:00:00Z", "2026-01-01T10:00:00.000+00:00"),
        # three instants whose text sorts the other way round (' ' < 'T' < '0' after '2026')
        ("20260101T095959Z", "2026-01-01T10:00:00Z", "2026-01-01 10:00:01+00:00"),
    ],
    ids=["one-instant", "one-instant-other-spellings", "text-order-is-not-time-order"],
)
def test_reports_are_ordered_by_their_instant_then_id_whatever_the_spelling(
    tmp_path: Path, spellings: tuple[str, str, str]
) -> None:
    """Twin of test_reports_of_one_time_are_ordered_by_id_not_by_file_name where occurred_at
    is written in different UTC spellings; files named in the reverse order."""
    files = {
        f"{9 - number}.json": canonical(report(number, occurred=when, packed=number))
        for number, when in enumerate(spellings, start=1)
    }
    misses, refused = _refusals(tmp_path, files)
    assert refused == {}
    assert misses.readings.select("seq", "packed_tokens", "art_occurred_at").rows() == [
        (0, 1, spellings[0]),
        (1, 2, spellings[1]),
        (2, 3, spellings[2]),
    ]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # each extra column from its own field, every value told apart from the others
        (
            {"threshold_pct": 12.5, "replay.safety_factor": 1.25, "admission_peak_bytes": 7,
             "replay.local_admission_peak_bytes": 9, "phase": "eval"},
            {"art_threshold_pct": 12.5, "art_safety_factor": 1.25, "art_admission_peak_bytes": 7,
             "estimate_bytes": 9, "art_estimate_from": "replay.local_admission_peak_bytes",
             "art_phase": "eval", "art_predicted_peak_bytes": 10_000_000},
        ),
        # 0 is a value, not an absent one: a local figure of 0, a threshold of 0
        (
            {"threshold_pct": 0, "replay.local_admission_peak_bytes": 0,
             "admission_peak_bytes": 0},
            {"art_threshold_pct": 0.0, "art_admission_peak_bytes": 0, "estimate_bytes": 0,
             "art_estimate_from": "replay.local_admission_peak_bytes"},
        ),
        (
            {"admission_peak_bytes": 0, "replay.local_admission_peak_bytes": None},
            {"art_admission_peak_bytes": 0, "estimate_bytes": 0,
             "art_estimate_from": "admission_peak_bytes"},
        ),
        # an OOM that failed at 0 bytes still has its peak
        (
            {"oom": True, "observed_peak_bytes": None, "partial_peak_bytes": 0},
            {"oom": True, "peak_bytes": 0, "art_event": "oom"},
        ),
    ],
    ids=["every-extra-apart", "zero-local", "zero-admission", "zero-partial"],
)  # fmt: skip
def test_each_field_lands_in_its_own_column(
    tmp_path: Path, changes: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Twin of test_a_report_without_a_threshold_or_a_factor_imports_them_as_null (both null
    there): the fields differ from each other here, and 0 is a value."""
    record = report(1, occurred=AT)
    for key, value in changes.items():
        place, name = (record["replay"], key[7:]) if key.startswith("replay.") else (record, key)
        place[name] = value
    misses, refused = _refusals(tmp_path, {"r.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert {key: row[key] for key in expected} == expected


# the oracle: a spool read a second, plain way, from the how-to's table and SPEC §9

LOCAL, ADMISSION, NET = (
    "replay.local_admission_peak_bytes",
    "admission_peak_bytes",
    "predicted_peak_bytes x replay.safety_factor",
)
#: Byte counts at their edges (0, 1, 2**63 - 1) among any.
EDGE_BYTES = st.sampled_from([0, 1, 10_000_000, 2**62, 2**63 - 1]) | st.integers(0, 2**40)
#: Instants a second or half a second apart (ties are drawn often), each with its UTC
#: spellings and the spellings of the same instant that are not UTC.
T = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC)
INSTANTS = [T, T + timedelta(seconds=0.5), T + timedelta(seconds=1)]


def _utc_spellings(instant: datetime) -> list[str]:
    iso = instant.isoformat()
    spelled = [
        iso,
        iso.replace("+00:00", "Z"),
        iso.replace("+00:00", "-00:00"),
        iso.replace("T", " "),
    ]
    if not instant.microsecond:
        spelled.append(instant.strftime("%Y%m%dT%H%M%SZ"))
    return spelled


def _other_spellings(instant: datetime) -> list[str]:
    return [
        instant.astimezone(timezone(timedelta(hours=1))).isoformat(),
        instant.astimezone(timezone(timedelta(hours=-5))).isoformat(),
        instant.replace(tzinfo=None).isoformat(),
    ]


@st.composite
def _drawn_report(
    draw: st.DrawFn, number: int, streams: list[tuple[str, int]]
) -> tuple[dict[str, Any], tuple[str, str] | None]:
    """A report whose every deciding field is drawn, and at most one fault put in it on
    purpose: the record and the fault's (reason, problem), or None."""
    oom = draw(st.booleans())
    model, rank = draw(st.sampled_from(streams))
    instant = draw(st.sampled_from(INSTANTS))
    predicted = draw(EDGE_BYTES)
    factor = draw(st.sampled_from([1.1, 1.0, 1.125, 2.0, None, 0]))
    # each admitted figure absent as often as present, so that each source is drawn
    admission = draw(st.sampled_from([EDGE_BYTES, None]))
    admission = admission if admission is None else draw(admission)
    local = draw(st.sampled_from([EDGE_BYTES, "absent", None]))
    local = draw(local) if isinstance(local, st.SearchStrategy) else local
    exact = None if not factor else round(predicted * Fraction(repr(factor)))
    targets = [v for v in (local, admission, exact) if isinstance(v, int) and v < 2**63]
    near = [v + d for v in targets for d in (-1, 0, 0, 0, 1) if 0 <= v + d < 2**63]

    def candidate(expected: st.SearchStrategy[int]) -> dict[str, Any]:
        packed = draw(st.sampled_from([1, 4096, 2**63 - 1]) | st.integers(1, 10**6))
        logical = min(packed + draw(st.sampled_from([0, 0, 1, 4096])), 2**63 - 1)
        signature = draw(st.sampled_from(["s", "t", {"topology": [1, 2]}, {"b": 2, "a": 1}]))
        return {
            "signature": signature,
            "profile": None,
            "arguments": {
                "packed_tokens": packed,
                "logical_tokens": logical,
                "output_bytes": draw(st.sampled_from([0, 512, 2**63 - 1])),
            },
            "expected_required_bytes": draw(expected),
        }

    # one candidate at an admitted figure, the others at or next to one (ties) or anywhere
    ran = candidate(st.sampled_from(targets) if targets else EDGE_BYTES)
    others = [
        candidate(st.sampled_from(near) | EDGE_BYTES if near else EDGE_BYTES)
        for _ in range(draw(st.sampled_from([0, 0, 1, 2])))
    ]
    candidates = draw(st.permutations([ran, *others]))

    replay: dict[str, Any] = {
        "rank": rank,
        "model": model,
        "device": draw(st.sampled_from([None, "NVIDIA H200", "", {"b": 1, "a": 2}])),
        "safety_factor": factor,
        "memory_replay": {"estimates": candidates},
    }
    if local != "absent":
        replay["local_admission_peak_bytes"] = local
    record: dict[str, Any] = {
        "format": 1,
        "kind": "art-planner-miss",
        "id": f"{number:032x}",
        "occurred_at": draw(st.sampled_from(_utc_spellings(instant))),
        "phase": draw(st.sampled_from(["train_step", "eval"])),
        "oom": oom,
        "threshold_pct": draw(st.sampled_from([None, 0, 5.0, 12.5])),
        "predicted_peak_bytes": predicted,
        "admission_peak_bytes": admission,
        "observed_peak_bytes": None if oom else draw(EDGE_BYTES),
        "partial_peak_bytes": draw(EDGE_BYTES | st.sampled_from([0, None])) if oom else None,
        "replay": replay,
    }
    if draw(st.booleans()):
        record |= {"format": 2, "event": "oom" if oom else "estimate_miss"}
    fault = draw(
        st.sampled_from([None] * 18 + ["not-utc", "disagree", "predicted", "peak", "rank", "local"])
    )
    if fault is None:
        return record, None
    if oom and record["partial_peak_bytes"] is None:
        record["partial_peak_bytes"] = 1  # the fault is the only thing wrong
    peak = "partial_peak_bytes" if oom else "observed_peak_bytes"
    if fault == "not-utc":
        record["occurred_at"] = draw(st.sampled_from(_other_spellings(instant)))
        return record, ("malformed", f"occurred_at {record['occurred_at']!r} is not in UTC.")
    if fault == "disagree":
        record |= {"format": 2, "event": "estimate_miss" if oom else "oom"}
        problem = f"event {record['event']!r} disagrees with oom = {json.dumps(oom)}."
        return record, ("malformed", problem)
    if fault == "rank":
        replay["rank"] = 2**31
        return record, ("malformed", f"replay.rank {INT32} 2147483648.")
    key = {"predicted": "predicted_peak_bytes", "peak": peak, "local": LOCAL}[fault]
    (replay if fault == "local" else record)[key.removeprefix("replay.")] = 2**63
    return record, ("malformed", f"{key} {INT64} 9223372036854775808.")


@st.composite
def _drawn_spools(draw: st.DrawFn) -> list[tuple[str, dict[str, Any], tuple[str, str] | None]]:
    """1 to 6 reports under names in any order, of 1 or 2 (model, rank) streams (so that
    most streams hold several); now and then an id repeats."""
    count = draw(st.integers(1, 6))
    names = draw(st.permutations([f"{i}.json" for i in range(count)]))
    stream = st.tuples(
        st.sampled_from(["Qwen/Qwen3-1.7B", "meta/llama", "m"]), st.sampled_from([0, 1, 2**31 - 1])
    )
    streams = draw(st.lists(stream, min_size=1, max_size=2))
    # a report now and then repeats an id taken before
    numbers = [
        draw(st.integers(1, i))
        if i and draw(st.sampled_from([False, False, False, True]))
        else i + 1
        for i in range(count)
    ]
    return [
        (name, *draw(_drawn_report(n, streams))) for name, n in zip(names, numbers, strict=True)
    ]


def _plain_reading(
    spool: list[tuple[str, dict[str, Any], tuple[str, str] | None]],
) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]], list[str]]:
    """What the how-to's table says the spool makes: the readings, the refusals by file
    name, and the names of the reports imported (in name order)."""
    kept: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    refused: dict[str, tuple[str, str]] = {}
    taken: dict[str, str] = {}
    for name, r, fault in sorted(spool, key=lambda entry: entry[0]):
        outcome = fault or _plain_wave(r)
        if isinstance(outcome, dict) and r["id"] in taken:
            outcome = ("malformed", f"repeats the id of {taken[r['id']]}.")
        if isinstance(outcome, tuple):
            refused[name] = outcome
            continue
        taken[r["id"]] = name
        kept.append((name, r, outcome))
    streams: dict[tuple[str, int], list[tuple[datetime, str, dict[str, Any]]]] = {}
    for _, r, row in kept:
        instant = datetime.fromisoformat(r["occurred_at"].replace("Z", "+00:00"))
        streams.setdefault((r["replay"]["model"], r["replay"]["rank"]), []).append(
            (instant, r["id"], row)
        )
    rows = []
    for (model, rank), stream in sorted(streams.items()):
        for place, (_, _, row) in enumerate(sorted(stream, key=lambda x: (x[0], x[1]))):
            rows.append({"run": model, "rank": rank, "seq": place, "wave": place} | row)
    return rows, refused, [name for name, _, _ in kept]


def _plain_wave(r: dict[str, Any]) -> dict[str, Any] | tuple[str, str]:
    """One report's row (less run, rank, seq, wave), or why it is refused."""
    replay, oom = r["replay"], r["oom"]
    if oom and r["partial_peak_bytes"] is None:
        return ("not a wave", "is an OOM with no partial_peak_bytes: no peak to record.")
    local, admission = replay.get("local_admission_peak_bytes"), r["admission_peak_bytes"]
    factor, predicted = replay["safety_factor"], r["predicted_peak_bytes"]
    if local is not None:
        price, source = local, LOCAL
    elif admission is not None:
        price, source = admission, ADMISSION
    elif factor:  # None and 0 give no price
        price, source = round(predicted * Fraction(repr(factor))), NET  # half to even
        if price > 2**63 - 1:
            return ("malformed", f"{NET} is beyond 2**63 - 1.")
    else:
        return (
            "malformed",
            f"says no bytes admitted: neither {LOCAL}, {ADMISSION} nor a positive "
            "replay.safety_factor.",
        )
    candidates = replay["memory_replay"]["estimates"]
    chosen = candidates
    if len(candidates) > 1:
        # like with like: local, then admission, then net round(expected / factor)
        tries = [lambda e: e == local, lambda e: e == admission]
        if factor:
            tries.append(lambda e: round(e / factor) == predicted)
        targets = [local, admission, predicted if factor else None]
        for target, matches in zip(targets, tries, strict=False):
            chosen = [c for c in candidates if matches(c["expected_required_bytes"])]
            if target is not None and chosen:
                break
        if len(chosen) != 1:
            return (
                "not a wave",
                f"lists {len(candidates)} candidate estimates and {len(chosen)} of them match "
                f"the admitted bytes ({price:,}, {source}): which one ran is not known.",
            )
    (estimate,) = chosen
    signature, device = estimate["signature"], replay["device"]
    if not isinstance(signature, str):
        text = json.dumps(signature, sort_keys=True, separators=(",", ":"))
        signature = "art:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    threshold = r["threshold_pct"]
    return {
        "step": None,
        "signature": signature,
        "kind": "flat",
        "phase": "caller",
        "whole": False,
        **estimate["arguments"],
        "baseline_bytes": 0,
        "peak_bytes": r["partial_peak_bytes"] if oom else r["observed_peak_bytes"],
        "static_floor_bytes": None,
        "oom": oom,
        "estimate_bytes": price,
        "art_report_id": r["id"],
        "art_occurred_at": r["occurred_at"],
        "art_event": r.get("event", "oom" if oom else "estimate_miss"),
        "art_phase": r["phase"],
        "art_device": device
        if not isinstance(device, dict)
        else json.dumps(device, sort_keys=True),
        "art_threshold_pct": None if threshold is None else float(threshold),
        "art_safety_factor": None if factor is None else float(factor),
        "art_admission_peak_bytes": admission,
        "art_expected_required_bytes": estimate["expected_required_bytes"],
        "art_estimate_from": source,
        "art_predicted_peak_bytes": predicted,
    }


@pytest.mark.timeout(120)
@settings(max_examples=examples(60))
@given(spool=_drawn_spools())
def test_import_misses_equals_a_plain_reading_of_every_deciding_field(
    spool: list[tuple[str, dict[str, Any], tuple[str, str] | None]],
) -> None:
    """Several models, ranks and candidates, times tied and spelled every UTC way (and
    not UTC), ids repeated, admitted figures present or not, 0 and 2**63 - 1 (and 2**63,
    a fault), factors of None, 0, 1.0, 1.1: every column of every reading, every refusal
    word for word and the metadata are those of the plain reading."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "spool"
        folder.mkdir()
        raws = {name: canonical(record) for name, record, _ in spool}
        for name, raw in raws.items():
            (folder / name).write_bytes(raw)
        misses = import_misses(folder)
    rows, refused, imported = _plain_reading(spool)
    assert {r.path.name: (r.reason, r.problem) for r in misses.refused} == refused
    assert misses.readings.rows(named=True) == rows
    assert misses.imported == len(rows)
    digest = "".join(f"{hashlib.sha256(raws[n]).hexdigest()}  {n}\n" for n in imported)
    assert misses.metadata["warmfit.import.source_sha256"] == (
        hashlib.sha256(digest.encode()).hexdigest()
    )
    assert misses.metadata["warmfit.import.reports"] == str(len(rows))


@pytest.mark.parametrize(
    ("predicted", "factor", "price"),
    [
        (2**63 - 1, 1.0, 2**63 - 1),  # exactly the column's largest: imported, not refused
        (2**62 - 1, 2.0, 2**63 - 2),
        (2**53 + 1, 1.0, 2**53 + 1),  # past a double's 53 bits: still to the byte
        (15, 1.1, 16),  # 16.5 as written: half to even
        (35, 1.1, 38),  # 38.5: half to even
        (3, 1.5, 4),  # 4.5
        (10_000_007, 1.1, 11_000_008),  # 11,000,007.7
        (55, 1.1, 60),  # 60.5 as written (the double 60.50000000000001 gave 61)
        (45, 0.7, 32),  # 31.5 as written (the double 31.499999999999996 gave 31)
    ],
)
def test_the_net_prediction_times_the_factor_is_exact_as_written(
    tmp_path: Path, predicted: int, factor: float, price: int
) -> None:
    """Product bug found by the oracle (s1): round(predicted x factor) in doubles made
    2**63 - 1 x 1.0 = 2**63, refused as 'beyond 2**63 - 1', and priced 2**53 + 1 x 1.0 at
    2**53. The product is now exact, of the numbers as the report writes them, rounded half
    to even."""
    record = _edited(
        predicted_peak_bytes=predicted,
        admission_peak_bytes=None,
        in_replay={"safety_factor": factor},
    )
    misses, refused = _refusals(tmp_path, {"r.json": canonical(record)})
    assert refused == {}
    row = misses.readings.row(0, named=True)
    assert (row["estimate_bytes"], row["art_estimate_from"]) == (price, NET)


# --- fresh audit of 12-06 (fa1) ---


@pytest.mark.timeout(30)
@pytest.mark.parametrize("number", [0, -1])
def test_a_format_below_1_is_malformed_word_for_word(tmp_path: Path, number: int) -> None:
    """ART writes formats 1 and 2: a format under the range (0, -1) is refused as a
    format 3 is, word for word and with exit 2; a check of the ceiling alone
    (`format > 2`) imported them (fa1)."""
    test_each_refusal_is_one_line_word_for_word_and_exits_2(
        tmp_path,
        _raw(_edited(format=number)),
        "malformed",
        f"has format {number}; warmfit reads formats 1 and 2.",
    )
