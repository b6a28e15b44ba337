"""Where outputs go (issue 14, item 9): missing folders are created, a per-wave
file is never written where the next replay would read it as a trace, and one
left there anyway is named for what it is."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.command_line import warmfit_output
from warmfit.errors import TraceError
from warmfit.format.files import write_atomically
from warmfit.format.trace import read_trace

REPO = Path(__file__).resolve().parent.parent
PR991 = REPO / "traces" / "pr991"

OUTPUTS = {
    "per-wave": lambda trace, out: ["replay", str(trace), "--per-wave", str(out)],
    "write-expect": lambda trace, out: ["check", str(trace), "--write-expect", str(out)],
    "plot": lambda trace, out: ["plot", str(trace), "-o", str(out)],
    "sweep --plot": lambda trace, out: ["sweep", str(trace), "--plot", str(out)],
}
SUFFIX = {"per-wave": ".parquet", "write-expect": ".toml", "plot": ".png", "sweep --plot": ".png"}


@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_an_output_creates_its_missing_folders(tmp_path: Path, kind: str) -> None:
    if "plot" in kind:
        pytest.importorskip("matplotlib")
    out = tmp_path / "new" / "deeper" / f"result{SUFFIX[kind]}"
    code, output = warmfit_output(*OUTPUTS[kind](PR991, out))
    assert code == 0, output
    assert out.is_file() and out.stat().st_size > 0


ART = REPO / "traces" / "art-h200" / "source"
#: Every command that writes a file, import's included (it reads no trace: nothing to
#: guard against writing onto).
WRITERS = {
    **OUTPUTS,
    "import": lambda trace, out: [
        "import", "table", str(ART / "recompute_memory_final.csv"),
        "--map", str(ART / "map.toml"), "-o", str(out),
    ],
}  # fmt: skip


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["", "--force"])
@pytest.mark.parametrize("kind", list(WRITERS))
def test_an_output_that_is_a_folder_is_refused(tmp_path: Path, kind: str, force: list[str]) -> None:
    folder = tmp_path / f"out{SUFFIX.get(kind, '.parquet')}"  # a folder named as the file
    folder.mkdir()
    code, output = warmfit_output(*WRITERS[kind](PR991, folder), *force)
    assert (code, output) == (
        2,
        f"warmfit: error: {folder} is a directory; name a file to write.\n",
    )
    assert list(folder.iterdir()) == []


def test_import_keeps_an_existing_output_without_force(tmp_path: Path) -> None:
    out = tmp_path / "art.parquet"
    out.write_bytes(b"a file of the user's")
    code, output = warmfit_output(*WRITERS["import"](PR991, out))
    assert (code, output) == (2, f"warmfit: error: will not overwrite without --force: {out}\n")
    assert out.read_bytes() == b"a file of the user's"
    code, output = warmfit_output(*WRITERS["import"](PR991, out), "--force")
    assert code == 0, output
    assert read_trace([out]).height > 0


def test_a_failed_write_is_one_line_naming_the_file_and_why(tmp_path: Path) -> None:
    """The system's reason where the error has one (a full disk), else the error's text
    (pyarrow's OSError carries none)."""
    from warmfit.commands.options import writing
    from warmfit.errors import UsageError

    out = tmp_path / "w.parquet"
    advice = (
        ". No partial file was left; fix that (free space, permissions, the file-size "
        "limit) and run the command again."
    )
    with pytest.raises(UsageError) as full, writing(out):
        raise OSError(28, "No space left on device", str(out))
    assert str(full.value) == f"cannot write {out}: No space left on device" + advice
    with pytest.raises(UsageError) as arrow, writing(out):
        raise OSError("IOError: Failed to write 65536 bytes")
    assert str(arrow.value) == f"cannot write {out}: IOError: Failed to write 65536 bytes" + advice


def test_a_folder_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    code, output = warmfit_output(
        *OUTPUTS["per-wave"](PR991, tmp_path / "file" / "sub" / "w.parquet")
    )
    assert code == 2 and "is a file, not a folder" in output


def test_a_failed_write_removes_the_folders_it_created(tmp_path: Path) -> None:
    def fail(sink: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_atomically(tmp_path / "a" / "b" / "f.bin", fail)
    assert list(tmp_path.iterdir()) == []


def test_per_wave_inside_an_input_trace_directory_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    for f in PR991.rglob("*.parquet"):
        target = trace / f.relative_to(PR991)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    inside = trace / "sub" / "perwave.parquet"
    code, output = warmfit_output("replay", str(trace), "--per-wave", str(inside), "--force")
    assert code == 2 and "inside the trace directory" in output and str(trace) in output
    assert not inside.exists() and not inside.parent.exists()
    via_dots = tmp_path / "trace" / ".." / "trace" / "w.parquet"
    code, output = warmfit_output("replay", str(trace), "--per-wave", str(via_dots))
    assert code == 2 and "inside the trace directory" in output
    # beside the trace is fine, and so is a file that the next replay does not read
    assert warmfit_output("replay", str(trace), "--per-wave", str(tmp_path / "w.parquet"))[0] == 0
    assert warmfit_output("check", str(trace), "--write-expect", str(trace / "expect.toml"))[0] == 0


def per_wave_file(tmp_path: Path, metadata: bool) -> Path:
    """A per-wave file as 'warmfit replay --per-wave' writes it (with or without its mark)."""
    out = tmp_path / "w.parquet"
    assert warmfit_output("replay", str(PR991), "--per-wave", str(out))[0] == 0
    table = pq.read_table(out)
    meta = {b"warmfit.per_wave": b"1"} if metadata else {}
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, out)
    return out


@pytest.mark.parametrize("metadata", [True, False], ids=["marked", "by-columns"])
def test_a_per_wave_file_in_a_trace_directory_is_named_as_one(
    tmp_path: Path, metadata: bool
) -> None:
    per_wave = per_wave_file(tmp_path, metadata)
    with pytest.raises(TraceError) as caught:
        read_trace([per_wave])
    message = str(caught.value)
    assert "is a per-wave file written by 'warmfit replay --per-wave', not a trace" in message
    assert "Move it out of the trace directory" in message and "schema" not in message
    code, output = warmfit_output("replay", str(per_wave))
    assert code == 2 and "per-wave file" in output and str(per_wave) in output


def test_a_trace_with_extra_per_wave_like_columns_is_still_a_trace(tmp_path: Path) -> None:
    src = next(PR991.rglob("*.parquet"))
    table = pq.read_table(src)
    # a trace may carry estimate_bytes (SPEC §8, an integer column), policy and
    # over_estimate too (extra columns): with its reading columns it is no per-wave file
    for name, dtype in (("policy", pa.string()), ("estimate_bytes", pa.int64()),
                        ("over_estimate", pa.string())):  # fmt: skip
        table = table.append_column(name, pa.array([None] * table.num_rows, dtype))
    out = tmp_path / "t.parquet"
    pq.write_table(table, out)
    frame = read_trace([out], columns=None)
    assert isinstance(frame, pl.DataFrame) and frame.height == table.num_rows


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


def test_an_output_through_a_missing_folder_and_dots_never_writes_onto_its_input(
    tmp_path: Path,
) -> None:
    """``in/missing/../run.data`` names the input ``in/run.data`` once ``missing`` is
    made (write_atomically makes it): the check for the input looked only at outputs
    that existed already, and ``check --write-expect`` wrote its TOML over the trace."""
    trace = tmp_path / "in" / "run.data"  # a trace named directly: read whatever its suffix
    trace.parent.mkdir()
    trace.write_bytes(next(PR991.rglob("*.parquet")).read_bytes())
    before = trace.read_bytes()
    through = tmp_path / "in" / "missing" / ".." / "run.data"
    code, output = warmfit_output("check", str(trace), "--write-expect", str(through))
    assert code == 2 and "it is the input trace" in output, output
    assert trace.read_bytes() == before and sorted(os.listdir(trace.parent)) == ["run.data"]


@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_an_existing_output_is_kept_without_force(tmp_path: Path, kind: str) -> None:
    """Every command that writes a file refuses one already there (exit 2, its bytes as
    they were) unless --force is given."""
    out = tmp_path / f"result{SUFFIX[kind]}"
    out.write_bytes(b"someone's file")
    code, output = warmfit_output(*OUTPUTS[kind](PR991, out))
    assert code == 2 and f"will not overwrite without --force: {out}" in output
    assert out.read_bytes() == b"someone's file"


@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_an_output_named_as_the_input_trace_is_refused_even_with_force(
    tmp_path: Path, kind: str
) -> None:
    """A trace file named directly is read whatever its suffix: one named like the
    output (``trace.png``) and given as both is still never written over."""
    trace = tmp_path / f"trace{SUFFIX[kind]}"
    trace.write_bytes((PR991 / "EP1.parquet").read_bytes())
    before = trace.read_bytes()
    code, output = warmfit_output(*OUTPUTS[kind](trace, trace), "--force")
    assert code == 2 and "never writes onto its input" in output
    assert trace.read_bytes() == before
