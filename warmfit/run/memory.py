"""Keep freed memory in the process for the next batch of a long replay.

A replay batch allocates a few hundred MB and frees it. By default both
allocators hand large freed blocks back to the system at once (glibc) or
within a second (polars' jemalloc, as polars configures it), and the next
batch faults every page in again: on a VM that costs more than the
arithmetic (a 1e7 replay in one process: 0.8M page faults, 2.8 s of system
time, against 0.2M and 0.9 s when freed memory is kept). Keeping it bounds
memory by the largest batch, as before.

Nothing here imports polars: :func:`polars_keeps_freed_memory` must act before
polars is imported, because jemalloc reads its settings once, at start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

#: The environment variable polars' jemalloc reads its settings from.
JEMALLOC_CONF = "_RJEM_MALLOC_CONF"
#: Never return freed pages to the system (the process is short-lived).
KEEP = "dirty_decay_ms:-1,muzzy_decay_ms:-1"


def keep_freed_memory() -> None:
    """Let this process's glibc malloc keep freed memory (nothing without glibc)."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (ImportError, OSError, AttributeError):  # not glibc, or no ctypes here
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_mmap_threshold, 512 * 2**20)  # blocks below 512 MiB from the reusable heap
    mallopt(m_trim_threshold, 2**30)  # give back only above 1 GiB free
    mallopt(m_top_pad, 64 * 2**20)


def polars_keeps_freed_memory() -> AbstractContextManager[None]:
    """Within the block, a process that imports polars afresh (this one, if it has
    not yet, or a child started here) keeps its freed pages; the environment is
    restored afterwards, so later children are not affected."""
    return environment(JEMALLOC_CONF, KEEP)


@contextmanager
def environment(name: str, value: str) -> Iterator[None]:
    """Within the block, the environment variable ``name`` is ``value`` (for a child
    started there); it is restored afterwards."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved


def before_polars() -> None:
    """For a command's own process: keep freed memory in glibc and, if polars is
    not imported yet, in polars too (its setting stays in this process's
    environment, so the command must not start other programs afterwards)."""
    keep_freed_memory()
    if "polars" not in sys.modules:
        os.environ.setdefault(JEMALLOC_CONF, KEEP)  # a setting of the user's stays
