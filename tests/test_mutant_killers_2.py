"""Tests that fail when the code is wrong (the mutant list refreshed for the replay package).

Each test here kills one or more planted bugs of ``mutants/mutants.toml``
that the rest of the suite let through; the mutant ids are named in each
test's docstring. The numbers are spelled out so that a reader can check
them by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from warmfit.format.files import write_atomically
from warmfit.format.pagecrc import verify
from warmfit.policies import Policy, PriceRequest, Reading, WarmAffine
from warmfit.policies.rule import RATE, DeclaredPolicy, Max
from warmfit.recorder.log import LOG_MARKER, LOG_VERSION, read_log
from warmfit.replay import PER_WAVE_SCHEMA, summarize
from warmfit.report.sweep import safe_factor
from warmfit.show.units import parse_bytes
from warmfit.testing.checks import check_engines_agree, check_price_is_pure

# --------------------------------------------------------------------------- warm-affine


def test_a_falling_line_is_flat_at_the_anchor() -> None:
    """Kills affine-negative-slope.

    Seed 100 tokens; anchor 200 tokens at 60,000 B; then 400 tokens at only
    40,000 B: the marginal rate (40,000 - 60,000) / (400 - 200) = -100 B/token
    is flattened to 0, so the line is 60,000 everywhere. A 300-token wave:
    warm-fit says 300 B/token * 300 = 90,000, the line 60,000 (not
    60,000 - 100 * 100 = 50,000).
    """
    profile = WarmAffine()
    for n, delta in ((100, 90_000), (200, 60_000), (400, 40_000)):
        profile.observe(Reading(n, n, delta, whole=True))
    assert profile.slope == -100.0
    assert profile.price(PriceRequest(300, 300)) == 60_000.0


# --------------------------------------------------------------------------- sweep


def test_the_safe_factor_steps_up_where_the_quotient_does_not_cover() -> None:
    """Kills sweep-safe-factor-not-stepped-up.

    1 / 49 rounds down: 49 * (1 / 49) is 0.9999999999999999, whose int is 0,
    so the quotient leaves the wave of 1 byte uncovered; the safe factor is
    the next double up.
    """
    assert int(49 * (1 / 49)) == 0
    f = safe_factor(np.array([49]), np.array([1]))
    assert f == np.nextafter(1 / 49, np.inf)
    assert int(49 * f) == 1


# --------------------------------------------------------------------------- summary


def _per_wave(*waves: tuple[int, int]) -> pl.DataFrame:
    """One run, one policy; waves as (estimate_bytes, actual_bytes)."""
    same = {"run": "r", "rank": 0, "signature": "s", "kind": "flat", "policy": "p"}
    tokens = {"packed_tokens": 10, "logical_tokens": 10, "output_bytes": 0}
    rows = [
        same
        | tokens
        | {"wave": i, "static_floor_bytes": None, "set_by": "profile", "oom": False}
        | {"actual_bytes": actual, "estimate_bytes": estimate}
        | {"over_estimate": estimate / actual - 1, "under_peak": estimate < actual}
        for i, (estimate, actual) in enumerate(waves)
    ]
    return pl.DataFrame(rows, schema=PER_WAVE_SCHEMA)


def test_median_excess_of_a_negative_odd_total_truncates_toward_zero() -> None:
    """Kills median-excess-floors: excesses -3 and 0, mean -1.5, reported -1 (not -2)."""
    summary = summarize(_per_wave((97, 100), (100, 100)), ["p"], pl.DataFrame({"run": ["r"]}))
    assert summary.get_column("median_excess_bytes").to_list() == [-1]


def test_a_wave_estimated_exactly_at_the_budget_is_admitted() -> None:
    """Kills admitted-below-budget-only.

    Budget 100 bytes; waves estimated 97 and 100 (both using 100): both are
    admitted, none refused although it fit, none admitted that did not fit.
    """
    per_wave = _per_wave((97, 100), (100, 100))
    summary = summarize(per_wave, ["p"], pl.DataFrame({"run": ["r"]}), budget_bytes=100)
    row = summary.select("admitted", "refused_fit", "admitted_oom").row(0)
    assert row == (2, 0, 0)


# --------------------------------------------------------------------------- page checksums

#: 77 as a Thrift compact i64 field one after the previous one: header 0x16,
#: then zigzag(77) = 154 as a varint (0x9A 0x01). A footer of one row group of
#: one column holds it three times, in field order: the file's num_rows, the
#: column chunk's num_values, the row group's num_rows.
ROWS_77 = b"\x16\x9a\x01"
ROWS_78 = b"\x16\x9c\x01"


def _footer_patched(tmp_path: Path, occurrence: int) -> Path:
    path = tmp_path / "x.parquet"
    table = pa.table({"x": pa.array(range(1_000, 1_077), pa.int64())})
    pq.write_table(table, path, write_page_checksum=True, use_dictionary=False)
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    footer = data[start:-8]
    assert verify(path) is None and footer.count(ROWS_77) == 3
    at = start - 1
    for _ in range(occurrence + 1):
        at = data.index(ROWS_77, at + 1)
    path.write_bytes(data[:at] + ROWS_78 + data[at + len(ROWS_78) :])
    return path


def test_a_footer_whose_row_count_disagrees_with_its_row_groups_fails(tmp_path: Path) -> None:
    """Kills pagecrc-row-counts-unchecked: the file says 78 rows, its one row group 77."""
    assert verify(_footer_patched(tmp_path, 0)) == "its footer's row counts disagree"


def test_a_column_chunk_whose_pages_hold_fewer_values_fails(tmp_path: Path) -> None:
    """Kills pagecrc-value-count-unchecked: the footer says 78 values, the pages hold 77."""
    problem = verify(_footer_patched(tmp_path, 1))
    assert problem is not None and problem.endswith(
        "its pages hold 77 values where the footer says 78"
    )


# --------------------------------------------------------------------------- units


def test_binary_units_are_powers_of_1024() -> None:
    """Kills units-kib-is-1000: 1 KiB is 1,024 bytes, 1.5 KiB 1,536."""
    assert parse_bytes("1KiB") == 1_024
    assert parse_bytes("1.5 KiB") == 1_536
    assert parse_bytes("2 KB") == 2_000


def test_a_fractional_size_is_rounded_down() -> None:
    """Kills units-round-half-up: 1.9 bytes is 1 byte, 0.0009 KB (0.9 bytes) is 0."""
    assert parse_bytes("1.9") == 1
    assert parse_bytes("0.0009 KB") == 0
    assert parse_bytes("1.0009 KB") == 1_000


# --------------------------------------------------------------------------- atomic outputs


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name descriptors")
def test_an_output_is_fsynced_before_it_is_renamed_over_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills files-no-fsync: the temporary file's bytes reach the disk before the rename.

    Whether bytes reached the disk cannot be seen from the file, so the calls
    are recorded: fsync(temporary file), rename(temporary, target), fsync(directory).
    """
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "out.bin"
    write_atomically(target, lambda sink: sink.write(b"12345"))
    assert target.read_bytes() == b"12345"
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"]
    temporary = events[1][1]
    assert events[0] == ("fsync", temporary)
    assert events[1] == ("replace", temporary, str(target))
    assert Path(temporary).name.startswith(".out.bin.") and temporary.endswith(".tmp")
    assert events[2] == ("fsync", str(tmp_path))


def test_a_write_that_fails_half_way_leaves_the_target_and_no_temporary_file(
    tmp_path: Path,
) -> None:
    """Kills files-written-in-place and files-temporary-kept-on-failure."""
    target = tmp_path / "out.bin"
    target.write_bytes(b"the old 17 bytes!")

    def half(sink: BinaryIO) -> None:
        sink.write(b"4 by")
        sink.flush()
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, half)
    assert target.read_bytes() == b"the old 17 bytes!"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


# --------------------------------------------------------------------------- public conformance checks


class CountsItsQuestions(Policy):
    """Broken on purpose: ``price`` counts how often it was asked (same answers)."""

    name = "counts-its-questions"
    summary = "broken on purpose: price() changes the profile"

    def __init__(self) -> None:
        self.rate: float | None = None
        self.asked = 0

    def observe(self, reading: Reading) -> None:
        self.rate = max(self.rate or 0.0, reading.rate)

    def price(self, request: PriceRequest) -> float | None:
        self.asked += 1
        return None if self.rate is None else self.rate * request.packed_tokens


def test_check_price_is_pure_sees_a_price_that_changes_the_profile() -> None:
    """Kills checks-purity-unchecked: the answers repeat, only the state changes."""
    profile = CountsItsQuestions()
    profile.observe(Reading(100, 100, 5_000))
    assert profile.price(PriceRequest(10, 10)) == profile.price(PriceRequest(10, 10)) == 500.0
    with pytest.raises(AssertionError, match="price\\(\\) changed the profile"):
        check_price_is_pure(CountsItsQuestions)


class ShapeSensitive(DeclaredPolicy):
    """Broken on purpose: the rule looks at its input's shape, not only its values.

    One number (the reference engine) is priced ``rate_max * n``; an array
    (the vectorized engine) ``2 * rate_max * n``, so the engines disagree.
    """

    name = "shape-sensitive"
    summary = "broken on purpose: not elementwise"
    rate_max = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rate_max * n * (1.0 + np.ndim(n))


def test_check_engines_agree_compares_the_bytes() -> None:
    """Kills checks-engines-never-compared."""
    profile = ShapeSensitive()
    profile.observe(Reading(100, 100, 5_000))
    assert profile.price(PriceRequest(10, 10)) == 500.0  # 50 B/token * 10, times (1 + 0)
    with pytest.raises(AssertionError, match="the engines disagree"):
        check_engines_agree(ShapeSensitive)


# --------------------------------------------------------------------------- write-ahead log


def test_a_marked_stream_with_other_columns_is_not_read_as_a_log() -> None:
    """Kills log-columns-unchecked: an Arrow stream that carries the log marker but
    one column, ``note``, of 3 rows is refused, its 3 rows not taken for readings."""
    schema = pa.schema([pa.field("note", pa.int64())], metadata={LOG_MARKER: LOG_VERSION})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.record_batch([pa.array([1, 2, 3])], schema=schema))
    data = sink.getvalue().to_pybytes()
    contents = read_log(Path("readings.arrows"), data)
    assert not contents.ours and contents.readings == 0 and contents.table is None
    assert contents.problem == "its columns are not those of a warmfit log (its schema is damaged)"
    assert contents.dropped_bytes == len(data)
