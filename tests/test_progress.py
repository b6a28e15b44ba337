"""Progress bars: drawn on a terminal, silent everywhere else."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

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


def test_the_bar_is_erased_when_the_work_ends() -> None:
    """Transient: the last thing written moves the cursor up over the bar's line and
    erases it (``ESC[1A ESC[2K``), so the command's own output starts on a clean line."""
    stream = FakeTerminal()
    with progress_bar("reading traces", stream=stream) as update:
        update(0, 2)
        update(2, 2)
    assert "2/2" in stream.getvalue()
    assert stream.getvalue().endswith("\r\x1b[1A\x1b[2K")


def test_no_frame_is_drawn_before_the_first_count() -> None:
    """The bar appears with its first count: never a frame of unknown total (``0/?``)."""
    stream = FakeTerminal()
    with progress_bar("reading traces", stream=stream) as update:
        update(0, 3)
        update(3, 3)
    assert "?" not in stream.getvalue().replace("\x1b[?25l", "").replace("\x1b[?25h", "")
    assert "3/3" in stream.getvalue()


def test_the_bar_goes_to_stderr_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    with progress_bar("reading traces") as update:
        update(1, 2)
    assert "reading traces" in stderr.getvalue() and "1/2" in stderr.getvalue()


def test_a_closed_stream_is_not_a_terminal() -> None:
    """``isatty`` on a closed stream raises ValueError: not a terminal, no crash."""
    closed = io.StringIO()
    closed.close()
    assert is_terminal(closed) is False
    with progress_bar("reading traces", stream=closed) as update:
        assert update is no_progress
