"""Progress bars: drawn on a terminal, silent everywhere else."""

from __future__ import annotations

import io
from pathlib import Path

from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.show.progress import is_terminal, no_progress, progress_bar


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def two_files(tmp_path: Path) -> Path:
    row = dict(seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=1)
    for run in ("a", "b"):
        write_trace(readings_frame([{**row, "run": run}]), tmp_path / f"{run}.parquet")
    return tmp_path


def test_read_trace_reports_each_file(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    read_trace([two_files(tmp_path)], progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 2), (1, 2), (2, 2)]


def test_silent_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with progress_bar("reading traces", stream=stream) as update:
        assert update is no_progress
        update(0, 10)
        update(10, 10)
    assert stream.getvalue() == "" and not is_terminal(stream)


def test_drawn_on_a_terminal(tmp_path: Path) -> None:
    stream = FakeTerminal()
    with progress_bar("reading traces", stream=stream) as update:
        read_trace([two_files(tmp_path)], progress=update)
    assert "reading traces" in stream.getvalue()


def test_one_file_needs_no_bar() -> None:
    stream = FakeTerminal()
    with progress_bar("reading traces", stream=stream) as update:
        update(0, 1)
        update(1, 1)
    assert stream.getvalue() == ""
