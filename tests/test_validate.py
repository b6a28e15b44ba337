"""``warmfit validate``'s summary, whole: the counts, what the files' metadata says
about how the trace was recorded, and the table per run and signature."""

from __future__ import annotations

from pathlib import Path

from tests.command_line import warmfit_stdout
from warmfit.format.trace import readings_frame, write_trace

ROW = dict(seq=0, wave=0, signature="s", packed_tokens=10, logical_tokens=10, peak_bytes=1000)
RECORDED = {"warmfit.torch_version": "2.13.0", "warmfit.recorder": "warmfit 0.1.0"}


def test_files_recorded_differently_are_counted_per_value_none_last(tmp_path: Path) -> None:
    """Values sorted by name, files without the key ("none") after them; a key every
    file agrees on is shown once."""
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(readings_frame([dict(ROW, whole=True)]), first, {
        **RECORDED, "warmfit.meter": "cuda", "warmfit.device": "NVIDIA H100",
    })  # fmt: skip
    write_trace(readings_frame([dict(ROW, run="b", whole=True)]), second, {
        **RECORDED, "warmfit.meter": "cpu",
    })  # fmt: skip
    out = warmfit_stdout("validate", first, second)
    assert out.splitlines()[:12] == [
        f"valid warmfit trace (format v1): {first}, {second}",
        "  files                2",
        "  runs                 2",
        "  ranks                2  (run, rank) streams",
        "  signatures           1  distinct signatures",
        "  waves                2",
        "  readings             2",
        "  meter       cpu (1 of 2 files); cuda (1 of 2 files)",
        "  device      NVIDIA H100 (1 of 2 files); none (1 of 2 files)",
        "  torch       2.13.0",
        "  recorder    warmfit 0.1.0",
        "  recovered   no",
    ]
    assert out.splitlines()[12].split() == ["run", "signature", "waves", "readings", "whole", "oom"]
    assert out.endswith("memory\n")  # the table's caption, then nothing


def test_a_trace_of_no_readings_has_no_table(tmp_path: Path) -> None:
    write_trace(readings_frame([ROW]).clear(), tmp_path / "e.parquet")
    assert warmfit_stdout("validate", tmp_path).splitlines() == [
        f"valid warmfit trace (format v1): {tmp_path}",
        "  files                1",
        "  runs                 0",
        "  ranks                0  (run, rank) streams",
        "  signatures           0  distinct signatures",
        "  waves                0",
        "  readings             0",
        "  not known   meter, device, torch, recorder (no warmfit.meter, warmfit.device, "
        "warmfit.torch_version, warmfit.recorder metadata: written by another tool or imported)",
        "  recovered   no",
    ]


def test_a_recovered_trace_says_so_with_its_tallies_and_reserved_peaks(tmp_path: Path) -> None:
    """One of two files recovered; the readings lost added over the files (3 + 1), the
    waves skipped (2); a reserved-peak column gets its own column and caption."""
    import polars as pl

    def frame(run: str, reserved: int) -> pl.DataFrame:
        rows = [dict(ROW, run=run, whole=True)]
        return readings_frame(rows).with_columns(reserved_peak_bytes=pl.lit(reserved, pl.Int64))

    write_trace(frame("run", 3 * 2**30), tmp_path / "a.parquet", {
        "warmfit.recovered": "true", "warmfit.readings_lost": "3", "warmfit.skipped_waves": "2",
    })  # fmt: skip
    write_trace(frame("b", 2**30), tmp_path / "b.parquet", {"warmfit.readings_lost": "1"})
    lines = warmfit_stdout("validate", tmp_path).splitlines()
    assert lines[8:11] == [
        "  recovered   yes, 1 of 2 files (written by 'warmfit recover' or after a rank did not "
        "close: readings after its last flush may be missing)",
        "              4 readings lost (the recorder could not write them)",
        "              2 waves skipped by the recorder (arguments it cannot record)",
    ]
    assert lines[11].split() == [
        "run", "signature", "waves", "readings", "whole", "oom", "reserved", "peak",
    ]  # fmt: skip
    assert lines[13].split() == ["b", "s", "1", "1", "1", "0", "1.07", "GB"]
    assert lines[14].split() == ["run", "s", "1", "1", "1", "0", "3.22", "GB"]
    caption = " ".join(lines[15:])
    assert caption.endswith("; reserved peak = the largest allocator reserved pool (not priced)")
