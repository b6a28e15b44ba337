"""``warmfit.run.memory``: freed memory kept in the process between replay batches.

glibc's ``mallopt`` parameters are spelled out from ``<malloc.h>``: M_TRIM_THRESHOLD
is -1, M_TOP_PAD -2, M_MMAP_THRESHOLD -3; polars' jemalloc reads
``_RJEM_MALLOC_CONF`` once, when polars is first imported.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from tests.command_line import python_env
from warmfit.run import memory
from warmfit.run.memory import JEMALLOC_CONF, KEEP, keep_freed_memory, polars_keeps_freed_memory

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20


class FakeLibc:
    """The C library as ``ctypes.CDLL(None)`` gives it, recording ``mallopt``'s calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_glibc_is_told_to_keep_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks under 512 MiB from the reusable heap, not mmap; freed memory given back
    only above 1 GiB free; the heap grown 64 MiB at a time."""
    libc = FakeLibc()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: libc)
    keep_freed_memory()
    assert libc.calls == [(-3, 512 * MiB), (-1, 1024 * MiB), (-2, 64 * MiB)]


@pytest.mark.parametrize("missing", [OSError("no C library"), AttributeError("no mallopt")])
def test_without_glibc_nothing_is_set_and_nothing_fails(
    monkeypatch: pytest.MonkeyPatch, missing: Exception
) -> None:
    def cdll(name: Any) -> Any:
        raise missing

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert keep_freed_memory() is None


#: Allocates 100 MiB with malloc and prints how many bytes glibc mmapped for it.
MMAPPED = textwrap.dedent(
    """
    import ctypes, sys
    from warmfit.run.memory import keep_freed_memory

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Info
    libc.malloc.restype = ctypes.c_void_p
    if sys.argv[1] == "keep":
        keep_freed_memory()
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(100 * 2**20)
    print(libc.mallinfo2().hblkhd - before)
    """
)


@pytest.mark.skipif(
    not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc 2.33 or later (mallinfo2)"
)
def test_a_100_mib_block_comes_from_the_heap_once_told(tmp_path: Path) -> None:
    """Real glibc: by default a 100 MiB malloc is mmapped (and unmapped when freed);
    after ``keep_freed_memory`` it comes from the heap, which keeps it when freed."""
    env = python_env()
    mapped = {
        how: int(subprocess.run(
            [sys.executable, "-c", MMAPPED, how], env=env, capture_output=True, text=True,
            check=True,
        ).stdout)
        for how in ("default", "keep")
    }  # fmt: skip
    assert mapped["default"] >= 100 * MiB
    assert mapped["keep"] == 0


def test_freed_memory_settings_touch_only_what_they_say(monkeypatch: pytest.MonkeyPatch) -> None:
    keep_freed_memory()  # glibc's mallopt, or nothing: never an error
    monkeypatch.setenv(JEMALLOC_CONF, "polars-default")
    with polars_keeps_freed_memory():
        assert os.environ[JEMALLOC_CONF] == KEEP
    assert os.environ[JEMALLOC_CONF] == "polars-default"
    monkeypatch.delenv(JEMALLOC_CONF)
    with polars_keeps_freed_memory():
        assert os.environ[JEMALLOC_CONF] == KEEP
    assert JEMALLOC_CONF not in os.environ


def test_a_command_sets_polars_memory_only_before_polars_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """jemalloc reads its setting once: set after polars is imported it would only
    leak into the programs the command starts. A user's own setting stays."""
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: None)
    monkeypatch.delenv(JEMALLOC_CONF, raising=False)
    monkeypatch.setitem(sys.modules, "polars", types.ModuleType("polars"))  # imported already
    memory.before_polars()
    assert JEMALLOC_CONF not in os.environ
    monkeypatch.delitem(sys.modules, "polars")  # not imported yet
    memory.before_polars()
    assert os.environ[JEMALLOC_CONF] == KEEP
    monkeypatch.setenv(JEMALLOC_CONF, "narenas:2")
    memory.before_polars()
    assert os.environ[JEMALLOC_CONF] == "narenas:2"
