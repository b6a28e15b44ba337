"""Hostile input and failing outputs, caused for real (issue 9 items 6-10, issue 14 item 2).

Every test here feeds warmfit something a careless or hostile user could:
damaged traces (bit flips and truncations at many offsets), names that are
markup, mathtext, terminal escapes or TOML-breaking characters, FIFOs,
unreadable folders, an expectations file that names a module, a full disk
(a child process under ``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored). The
answer is always exit 0 with the right output or exit 2 with one paragraph
naming the file: never a traceback, a hang, a partial file or a changed
figure.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from tests.command_line import invoke
from warmfit.format.trace import write_trace

REPO = Path(__file__).resolve().parent.parent
PR991 = REPO / "traces/pr991"
EP1 = PR991 / "EP1.parquet"

# A child warmfit: optional file-size limit (SIGXFSZ ignored, so a write past it
# fails with EFBIG as on a full disk) and an optional drop of the power to read past
# permission bits (tests run as root, who may read anything). The child keeps its
# user: it still reads its Python, the venv and the checkout wherever they lie (a
# checkout in a folder of mode 700, say), where another user such as nobody could not.
_CHILD = r"""
import os, resource, signal, sys
limit = int(os.environ.get("WF_FSIZE", "0"))
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
import warmfit.cli, warmfit.report.gate, warmfit.show.progress, warmfit.replay, warmfit.report.table, warmfit.format.trace
if os.environ.get("WF_WORKERS") == "1":  # worker processes however small the trace
    import warmfit.run.workers
    warmfit.run.workers.WORKER_BYTES = 0
import rich.console, rich.progress, rich.table, rich.text, secrets
if os.environ.get("WF_NO_DAC") == "1":
    # capset(2) without CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2), held or not
    import ctypes
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class Sets(ctypes.Structure):
        _fields_ = [(f, ctypes.c_uint32) for f in ("effective", "permitted", "inheritable")]
    libc = ctypes.CDLL(None, use_errno=True)
    header, sets = Header(0x20080522, 0), (Sets * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), sets) != 0:
        sys.exit(f"DAC: capget failed: {os.strerror(ctypes.get_errno())}")
    for field in ("effective", "permitted", "inheritable"):
        setattr(sets[0], field, getattr(sets[0], field) & ~0b110)
    if libc.capset(ctypes.byref(header), sets) != 0:
        sys.exit(f"DAC: capset failed: {os.strerror(ctypes.get_errno())}")
sys.argv = ["warmfit", *sys.argv[1:]]
warmfit.cli.main()
"""


def child(
    *args: str | Path,
    fsize: int = 0,
    bits_only: bool = False,
    cwd: Path | None = None,
    timeout: float = 60,
    workers: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``warmfit *args`` in a child process; ``bits_only``: one that reads only what
    permission bits let it (skips the test where it cannot drop the power to do more);
    ``workers``: batches replay in worker processes whatever the trace's size (with
    ``--jobs 2`` and more than one batch)."""
    env = {**os.environ, "WF_FSIZE": str(fsize), "WF_NO_DAC": str(int(bits_only)), "COLUMNS": "80"}
    env["WF_WORKERS"] = str(int(workers))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )
    if bits_only and done.stderr.startswith("DAC: "):
        pytest.skip(
            f"the child cannot give up reading past permission bits ({done.stderr.strip()})"
        )
    return done


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1, 2), (done.returncode, done.stderr)


def trace_named(directory: Path, run: str, name: str = "t.parquet") -> Path:
    """EP1 of traces/pr991 with its run renamed: priced waves under a hostile label."""
    frame = pl.read_parquet(EP1).with_columns(pl.lit(run).alias("run"))
    return write_trace(frame, directory / name, {})


# --------------------------------------------------------------------------- item 6


def test_an_expectations_file_never_imports_a_module(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nclass X: pass\n", encoding="utf-8"
    )
    toml = tmp_path / "expect.toml"
    toml.write_text(
        '[runs.EP1."evilmod:X"]\nmax_under_peak = 0\n[runs.EP2."evilmod:X"]\nmax_under_peak = 0\n',
        encoding="utf-8",
    )
    done = child("check", PR991, "--expect", toml, cwd=tmp_path)
    no_traceback(done)
    assert not marker.exists(), "warmfit check imported a module named by an expectations file"
    assert done.returncode == 2
    assert "evilmod:X" in done.stderr and "registered" in done.stderr and "-p" in done.stderr


# --------------------------------------------------------------------------- item 7


@pytest.mark.parametrize("run", ["[/bold]", "[link=https://example.com]EP1[/link]", "[red]x"])
def test_rich_markup_in_a_run_name_is_shown_literally(tmp_path: Path, run: str) -> None:
    trace_named(tmp_path, run)
    code, out, err = invoke("replay", tmp_path)
    assert code == 0, err
    assert run in out
    toml = tmp_path / "e.toml"
    assert invoke("check", tmp_path, "--write-expect", toml)[0] == 0
    code, out, err = invoke("check", tmp_path, "--expect", toml)
    assert code == 0 and run in out, err


def test_mathtext_in_a_run_name_does_not_crash_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    trace_named(tmp_path, "$\\undefinedcommand$")
    out = tmp_path / "p.png"
    code, _, err = invoke("plot", tmp_path, "-o", out)
    assert code == 0, err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_extra_column_with_conflicting_types_is_named(tmp_path: Path) -> None:
    frame = pl.read_parquet(EP1)
    write_trace(frame.with_columns(pl.lit(1).alias("note")), tmp_path / "a.parquet", {})
    write_trace(
        frame.with_columns(pl.lit("x").alias("note"), pl.lit("B").alias("run")),
        tmp_path / "b.parquet",
        {},
    )
    code, _, err = invoke("validate", tmp_path)
    assert code == 2
    assert "b.parquet" in err and "'note'" in err and "a.parquet" in err


def test_a_deeply_nested_toml_exits_2(tmp_path: Path) -> None:
    toml = tmp_path / "deep.toml"
    toml.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    code, _, err = invoke("check", PR991, "--expect", toml)
    assert code == 2 and str(toml) in err and "nested" in err


# --------------------------------------------------------------------------- item 8

_OUTPUTS = {
    "per-wave": lambda trace, out: ("replay", trace, "--per-wave", out),
    "write-expect": lambda trace, out: ("check", trace, "--write-expect", out),
    "plot": lambda trace, out: ("plot", trace, "-o", out),
}


def _suffix(kind: str) -> str:
    return {"per-wave": ".parquet", "write-expect": ".toml", "plot": ".png"}[kind]


@pytest.mark.parametrize("kind", list(_OUTPUTS))
def test_a_full_disk_leaves_no_partial_output_and_a_rerun_works(tmp_path: Path, kind: str) -> None:
    if kind == "plot":
        pytest.importorskip("matplotlib")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / f"result{_suffix(kind)}"
    done = child(*_OUTPUTS[kind](PR991, out), fsize=300)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    # plot's per-run files in TMPDIR come first: the line names their folder
    named = "the figure's temporary files in" if kind == "plot" else str(out)
    assert named in done.stderr and "cannot write" in done.stderr
    assert list(out_dir.iterdir()) == [], "a partial or temporary file was left behind"
    code, _, err = invoke(*_OUTPUTS[kind](PR991, out))  # no --force needed: nothing was left
    assert code == 0, err
    assert out.stat().st_size > 300


def test_a_full_disk_in_the_workers_of_a_plot_names_the_folder(tmp_path: Path) -> None:
    """Plot's workers write each batch's frames to its temporary folder themselves: a
    full disk there is the same one line (exit 2) naming the folder, from the worker,
    and the folder is gone."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "out.png"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    args = ("plot", PR991, "-o", out, "--jobs", "2")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(temporary))
        patch.setenv("WARMFIT_BATCH_READINGS", "40")  # several batches: workers replay them
        done = child(*args, fsize=300, workers=True)
    no_traceback(done)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the figure's temporary files in" in lines[0], lines
    assert str(temporary) in lines[0]
    assert not out.exists() and list(temporary.iterdir()) == []


def test_a_full_disk_while_writing_a_trace_leaves_nothing(tmp_path: Path) -> None:
    script = (
        "import resource, signal, polars as pl\n"
        "from warmfit.format.trace import write_trace\n"
        f"frame = pl.read_parquet({str(EP1)!r})\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (500, 500))\n"
        "try:\n"
        f"    write_trace(frame, {str(tmp_path / 't.parquet')!r}, {{}})\n"
        "except OSError as exc:\n"
        "    print('failed', exc.errno)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.startswith("failed"), done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", list(_OUTPUTS))
@pytest.mark.parametrize("how", ["same path", "via ..", "symlink", "hard link"])
def test_an_output_is_never_written_onto_an_input_trace(
    tmp_path: Path, kind: str, how: str
) -> None:
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    trace = trace_named(trace_dir, "EP1", name=f"t{_suffix(kind)}")
    before = trace.read_bytes()
    target = {
        "same path": trace,
        "via ..": trace_dir / ".." / "trace" / trace.name,
        "symlink": tmp_path / f"link{_suffix(kind)}",
        "hard link": tmp_path / f"hard{_suffix(kind)}",
    }[how]
    if how == "symlink":
        target.symlink_to(trace)
    elif how == "hard link":
        os.link(trace, target)
    code, _, err = invoke(*_OUTPUTS[kind](trace, target), "--force")
    assert code == 2 and "input" in err, err
    assert trace.read_bytes() == before


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize("kind", [*_OUTPUTS, "trace"])
def test_outputs_get_the_umask_mode(tmp_path: Path, kind: str, umask_022: None) -> None:
    if kind == "plot":
        pytest.importorskip("matplotlib")
    out = tmp_path / f"o{_suffix(kind) if kind != 'trace' else '.parquet'}"
    if kind == "trace":
        write_trace(pl.read_parquet(EP1), out, {})
    else:
        code, _, err = invoke(*_OUTPUTS[kind](PR991, out))
        assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


# --------------------------------------------------------------------------- item 9


def test_validate_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    for args in (("validate", fifo), ("validate", tmp_path), ("replay", tmp_path)):
        done = child(*args)  # child()'s 60 s bounds a hang on the FIFO
        no_traceback(done)
        assert done.returncode == 2 and str(fifo) in done.stderr and "FIFO" in done.stderr


def test_an_expectations_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "expect.toml"
    os.mkfifo(fifo)
    done = child("check", PR991, "--expect", fifo)  # child()'s 60 s bounds a hang on it
    no_traceback(done)
    assert done.returncode == 2 and str(fifo) in done.stderr


def test_a_device_is_refused() -> None:
    code, _, err = invoke("validate", "/dev/null")
    assert code == 2 and "/dev/null" in err and "regular file" in err


@pytest.fixture
def locked_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder whose files a test makes unreadable; their modes are given back after,
    so that the folder can be removed."""
    yield tmp_path
    for p in tmp_path.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


linux_only = pytest.mark.skipif(sys.platform != "linux", reason="capset(2) is Linux's")


@linux_only
def test_an_unreadable_subfolder_is_an_error_not_a_skip(locked_dir: Path) -> None:
    trace_named(locked_dir, "EP1", "a.parquet")
    hidden = locked_dir / "sub"
    trace_named(hidden, "EP2", "b.parquet")
    hidden.chmod(0o000)
    done = child("replay", locked_dir, bits_only=True)
    no_traceback(done)
    assert done.returncode == 2, done.stdout
    assert str(hidden) in done.stderr and "cannot be listed" in done.stderr


@linux_only
def test_an_unreadable_file_is_an_error(locked_dir: Path) -> None:
    trace_named(locked_dir, "EP1", "a.parquet")
    locked = trace_named(locked_dir, "EP2", "b.parquet")
    locked.chmod(0o000)
    done = child("validate", locked_dir, bits_only=True)
    no_traceback(done)
    assert done.returncode == 2 and str(locked) in done.stderr


# --------------------------------------------------------------------------- item 10


def test_markdown_escapes_pipes_and_newlines(tmp_path: Path) -> None:
    trace_named(tmp_path, "a|b\nc")
    code, out, err = invoke("replay", tmp_path, "--format", "markdown")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3
    assert all(line.count("|") - line.count("\\|") == 7 for line in lines)  # 3 policies
    assert lines[2].startswith("| a\\|b\\nc |")


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_terminal_escapes_in_names_are_shown_escaped(tmp_path: Path, fmt: str) -> None:
    trace_named(tmp_path, "EP\x1b[2J\x1b]0;pwned\x07\u202e1")
    code, out, err = invoke("replay", tmp_path, "--format", fmt)
    assert code == 0, err
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", out)
    assert "EP\\x1b[2J" in out


def test_check_escapes_terminal_escapes_in_names(tmp_path: Path) -> None:
    trace_named(tmp_path, "EP\x1b[31m")
    toml = tmp_path / "e.toml"
    assert invoke("check", tmp_path, "--write-expect", toml)[0] == 0
    code, out, err = invoke("check", tmp_path, "--expect", toml)
    assert code == 0, err
    assert "\x1b" not in out and "EP\\x1b[31m" in out


@pytest.mark.parametrize("run", ["EP\x7f1", "tab\there", 'quote"and\\back', "nl\nx", "ünï"])
def test_write_expect_round_trips_any_run_name(tmp_path: Path, run: str) -> None:
    trace_named(tmp_path, run)
    toml = tmp_path / "e.toml"
    code, _, err = invoke("check", tmp_path, "--write-expect", toml)
    assert code == 0, err
    code, out, err = invoke("check", tmp_path, "--expect", toml)
    assert code == 0, err
    assert out.splitlines()[-1].startswith("12 of 12 expectations hold")  # 3 policies x 4


# --------------------------------------------------------------------------- checksums


def _figures(path: Path) -> tuple[int, str]:
    code, out, _ = invoke("replay", path, "--format", "json")
    return code, out


@pytest.mark.parametrize("which", ["written now", "pr991/EP1", "pr991/EP2", "cpu-demo"])
def test_traces_warmfit_writes_carry_page_checksums(tmp_path: Path, which: str) -> None:
    """A flipped bit inside a data page's compressed bytes fails its CRC, naming the file."""
    import pyarrow.parquet as pq

    committed = {
        "pr991/EP1": EP1,
        "pr991/EP2": PR991 / "EP2.parquet",
        "cpu-demo": next((REPO / "traces/cpu-demo").rglob("*.parquet")),
    }
    trace = trace_named(tmp_path, "EP1") if which == "written now" else committed[which]
    data = trace.read_bytes()
    column = pq.ParquetFile(trace).metadata.row_group(0).column(12)  # peak_bytes
    end = column.data_page_offset + column.total_compressed_size
    bad = tmp_path / "bad" / "t.parquet"
    bad.parent.mkdir()
    # the last bytes of the chunk are its last page's compressed data, past any header
    for offset in range(end - 1, end - 4, -1):
        flipped = bytearray(data)
        flipped[offset] ^= 0x10
        bad.write_bytes(bytes(flipped))
        code, _, err = invoke("replay", bad)
        assert code == 2 and str(bad) in err and "fails its checksum" in err, (offset, err)


def _damaged_copies(source: bytes, offsets: list[int], mode: str) -> Iterator[tuple[int, bytes]]:
    for offset in offsets:
        if mode == "flip":
            damaged = bytearray(source)
            damaged[offset] ^= 1 << (offset % 8)
            yield offset, bytes(damaged)
        else:
            yield offset, source[:offset]


def _fuzz(tmp_path: Path, mode: str, step: int) -> None:
    trace_dir = tmp_path / "trace"
    trace_dir.mkdir()
    target = trace_dir / "EP1.parquet"
    source = EP1.read_bytes()
    target.write_bytes(source)
    code, expected = _figures(trace_dir)
    assert code == 0
    changed = []
    for offset, damaged in _damaged_copies(source, list(range(0, len(source), step)), mode):
        target.write_bytes(damaged)
        code, out, err = invoke("replay", trace_dir, "--format", "json")
        if code == 2:
            assert str(target) in err, (offset, err)
        else:
            assert code == 0, (offset, err)
            if out != expected:
                changed.append(offset)
    assert changed == [], f"{mode} at these offsets changed the figures unnoticed: {changed}"


@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_damage_at_many_offsets_is_an_error_or_harmless(tmp_path: Path, mode: str) -> None:
    _fuzz(tmp_path, mode, step=37)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_damage_at_every_offset_is_an_error_or_harmless(tmp_path: Path, mode: str) -> None:
    _fuzz(tmp_path, mode, step=1)


# --------------------------------------------------------------------------- table widths

LONG = "qwen3.5-35b-a3b-tp4-ep4-compiled-selective-core_attn-long-lb"


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_tables_never_break_a_label(tmp_path: Path, columns: str) -> None:
    assert len(LONG) == 60
    trace_named(tmp_path, LONG)
    env = {"COLUMNS": columns}
    code, out, err = invoke("replay", tmp_path, env=env)
    assert code == 0, err
    assert sum(LONG in line for line in out.splitlines()) == 1
    for policy in ("max-merge", "warm-fit", "envelope"):
        assert sum(policy in line for line in out.splitlines()) == 1
    toml = tmp_path / "e.toml"
    assert invoke("check", tmp_path, "--write-expect", toml)[0] == 0
    code, out, err = invoke("check", tmp_path, "--expect", toml, env=env)
    assert code == 0, err
    assert sum(LONG in line for line in out.splitlines()) == 1
    assert sum("median over-estimate" in line for line in out.splitlines()) == 3


def test_files_without_checksums_are_read_as_before(tmp_path: Path) -> None:
    """Checksums are optional in the format: another writer's file is read unverified."""
    import pyarrow.parquet as pq

    table = pq.read_table(EP1)
    pq.write_table(table, tmp_path / "plain.parquet", write_page_checksum=False)
    pq.write_table(table, tmp_path / "v2.parquet", data_page_version="2.0")
    pq.write_table(
        table, tmp_path / "v2-crc.parquet", data_page_version="2.0", write_page_checksum=True
    )
    for name in ("plain.parquet", "v2.parquet", "v2-crc.parquet"):
        code, out, err = invoke("replay", tmp_path / name, "--format", "json")
        assert code == 0, err
        assert out == _figures(PR991 / "EP1.parquet")[1]


def test_a_damaged_page_header_is_named(tmp_path: Path) -> None:
    """A page header is not covered by the CRC; warmfit still checks it before polars reads."""
    import pyarrow.parquet as pq

    column = pq.ParquetFile(EP1).metadata.row_group(0).column(8)
    start = column.dictionary_page_offset or column.data_page_offset
    data = bytearray(EP1.read_bytes())
    data[start + 2] ^= 0x7F  # the page header's uncompressed size
    data[start + 1] ^= 0x05  # and its page type
    bad = tmp_path / "t.parquet"
    bad.write_bytes(bytes(data))
    code, _, err = invoke("validate", bad)
    assert code == 2 and str(bad) in err and "damaged" in err


def test_a_file_name_with_terminal_escapes_is_shown_escaped(tmp_path: Path) -> None:
    bad = tmp_path / "evil\x1b[2J.parquet"
    bad.write_bytes(b"not parquet")
    code, _, err = invoke("validate", tmp_path)
    assert code == 2 and "\x1b" not in err and "evil\\x1b[2J.parquet" in err


def test_an_empty_trace_passes_the_page_walk(tmp_path: Path) -> None:
    """A row group of 0 rows has chunks with offset 0 and no pages: not damage."""
    from warmfit.format.trace import readings_frame

    write_trace(readings_frame([]), tmp_path / "empty.parquet", {})
    code, out, err = invoke("validate", tmp_path)
    assert code == 0 and "readings" in out, err
