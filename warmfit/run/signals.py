"""Signals around a moment that must not be cut short."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """Ctrl-C (SIGINT) ignored inside the block, then handled as before; processes
    started inside it inherit the ignoring. Outside the main thread, where no signal
    handler can be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
