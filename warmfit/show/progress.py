"""Progress bars for long work, shown only to a person watching a terminal.

Library functions that take a while accept an optional ``progress`` callback,
``progress(done, total)``, called once before the work with ``done == 0`` and
then after each unit (a file read, a log compacted). They know nothing of
terminals. A command wraps its call in :func:`progress_bar`, which turns the
callback into a rich progress bar on stderr when stderr is a terminal, and
into a no-op otherwise, so logs, pipes and CI output stay clean.

>>> import io
>>> with progress_bar("reading traces", stream=io.StringIO()) as update:
...     update(0, 3); update(3, 3)      # not a terminal: silent
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

#: ``progress(done, total)``: ``done`` units of ``total`` are finished.
ProgressCallback = Callable[[int, int], None]


def no_progress(done: int, total: int) -> None:
    """A progress callback that reports nothing."""


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (false for pipes, files, CI logs)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


@contextmanager
def progress_bar(
    description: str,
    *,
    stream: TextIO | None = None,
    unit: str = "files",
    min_total: int = 2,
) -> Iterator[ProgressCallback]:
    """Yield a :data:`ProgressCallback` that draws a transient bar on ``stream``.

    ``stream`` defaults to stderr. Nothing is drawn unless the stream is a
    terminal, and nothing until ``total`` reaches ``min_total`` (one file
    needs no bar). The bar disappears when the block ends. Rich is imported
    only when a bar is drawn.
    """
    target = sys.stderr if stream is None else stream
    if not is_terminal(target):
        yield no_progress
        return

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=target, force_terminal=True)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task(description, total=None, visible=False)
    started = False

    def update(done: int, total: int) -> None:
        nonlocal started
        if total < min_total:
            return
        if not started:
            bar.start()
            started = True
        bar.update(task, completed=done, total=total, visible=True)

    try:
        yield update
    finally:
        if started:
            bar.stop()
