"""Exact medians of many groups: in memory below a bound, spilled to disk above it.

:class:`ExactMedians` keeps every value of every group (a code >= 0, one per result
group and policy) and gives a group of ``n`` its sorted values at ``(n - 1) // 2`` and
``n // 2`` (polars' ``quantile(0.5, "lower")`` and ``"higher"``, less its rounding of
int64 to doubles): the median is their mean for floats, :func:`midpoint_int` for integers
(SPEC §7). Values are kept as int64 *order keys*: a float64's bits folded (``bits ^
((bits >> 63) & 0x7FFF...)``) so that integer order is the IEEE total order (``-0.0 <
0.0``, one NaN last for all): a middle value is numpy's sort's, ``-0.0`` exactly there.

Each batch, sorted by group, is held in memory (16 bytes a value) up to ``spill_bytes``,
the bound; beyond it the batches held are written to disk, each a *run*: a file of its
keys (8 bytes a value), its codes and group starts kept in memory. A worker writes its
batch as a run (:func:`write_run`, to a file :meth:`~ExactMedians.run_path` named)
that :meth:`~ExactMedians.add_run` takes where it lies. :meth:`~ExactMedians.close`, a
``with`` block's end or garbage collection removes, in the process that made them, the
files named and their folder (``warmfit-medians-*``, under ``dir`` or ``TMPDIR``).

Each group's stretches in the runs are sorted. A group in one run has its middle keys
read off; one of at most ``2**16`` keys is read and partitioned; a larger one is bisected:
its key at a rank is the least ``t`` with more keys at most ``t`` than the rank, counted by
a binary search in each stretch, its file mapped so that only the pages searched are read
(and let go after). Memory stays that of the batches held, whatever the size of a group.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
import weakref
from itertools import groupby, pairwise
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from warmfit.errors import UsageError

Int64Array = npt.NDArray[np.int64]

#: Bytes of values held in memory while adding (16 a value) past which they go to disk.
DEFAULT_SPILL_BYTES = 64 * 2**20
_MAGNITUDE = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_NAN_KEY = np.int64(0x7FF8_0000_0000_0000)
_PARTITION_MAX = 1 << 16  # keys of a group in several runs read whole, at most
_POLARS_MIN = 1 << 13  # keys of a group sorted by polars: three times numpy's speed


class SortedValues(NamedTuple):
    """Values sorted by group, then value (picklable): group ``codes[i]`` (strictly
    increasing) holds ``keys[starts[i]:starts[i + 1]]``, at least one order key."""

    dtype: np.dtype[Any]
    codes: Int64Array
    starts: Int64Array
    keys: Int64Array

    def values(self) -> npt.NDArray[Any]:
        """The values themselves, in the order of ``keys``."""
        return _from_keys(self.keys, self.dtype)


class SpilledRun(NamedTuple):
    """:class:`SortedValues` whose keys lie in the file ``path`` (picklable)."""

    dtype: np.dtype[Any]
    codes: Int64Array
    starts: Int64Array
    path: str


class Middles(NamedTuple):
    """Per group (``codes`` increasing), its values at ``(counts - 1) // 2`` and ``counts // 2``."""

    codes: Int64Array
    lower: npt.NDArray[Any]
    upper: npt.NDArray[Any]
    counts: Int64Array


def midpoint_int(lower: npt.ArrayLike, upper: npt.ArrayLike) -> Int64Array:
    """The mean of two int64 arrays truncated toward zero, exact for any int64
    (no overflow): the integer median of SPEC §7 from the two middle values.

    >>> midpoint_int([1, -1, 2**63 - 1, -(2**63)], [2, -2, 2**63 - 1, -(2**63) + 1]).tolist()
    [1, -1, 9223372036854775807, -9223372036854775807]
    """
    half_a, odd_a = np.divmod(np.asarray(lower, dtype=np.int64), 2)
    half_b, odd_b = np.divmod(np.asarray(upper, dtype=np.int64), 2)
    odd = odd_a + odd_b  # 0, 1 or 2
    floor = half_a + half_b + odd // 2
    return floor + ((odd == 1) & (floor < 0))  # truncated: a negative half goes up


def sort_by_group(group: npt.ArrayLike, values: npt.ArrayLike, dtype: Any) -> SortedValues:
    """``values`` sorted by ``group`` code (>= 0), then value, as a worker hands them over:
    of one length, ``values`` cast exactly to ``dtype`` (int64 takes no float)."""
    dtype, codes, given = _check_dtype(dtype), np.asarray(group), np.asarray(values)
    _check(codes.ndim == given.ndim == 1, "group", "and values must be one-dimensional.")
    _check(codes.shape == given.shape, "group", f"has {codes.size} codes for {given.size} values.")
    empty = not codes.size  # (of any dtype)
    integers = codes.dtype.kind in "iu" and np.can_cast(codes.dtype, np.int64)
    _check(empty or integers, "group", f"must be integer codes; got {codes.dtype}.")
    exact = dtype.kind == "i" or given.dtype.kind == "f" or given.dtype.itemsize <= 4
    cast = np.can_cast(given.dtype, dtype) and exact  # (numpy casts int64 to float64 "safely")
    _check(empty or cast, "values", f"of dtype {given.dtype} do not cast safely to {dtype}.")
    _check(empty or codes.min() >= 0, "group", "must be codes >= 0.")
    codes, keys = codes.astype(np.int64), np.array(given, dtype=dtype).view(np.int64)
    if dtype.kind == "f":
        nan = np.isnan(keys.view(np.float64))
        keys ^= (keys >> 63) & _MAGNITUDE
        keys[nan] = _NAN_KEY
    if not np.all(codes[1:] >= codes[:-1]):  # a stable argsort, by radix for small codes
        by = codes.astype(np.uint16) if codes.max() < 1 << 16 else codes  # radix-sorted then
        order = np.argsort(by, kind="stable")
        codes, keys = codes[order], keys[order]
    first = np.flatnonzero(np.diff(codes, prepend=-1))
    starts = np.append(first, codes.size)
    for begin, end in pairwise(starts.tolist()):  # each group's keys, sorted
        part = keys[begin:end]
        part[:] = np.sort(part) if part.size < _POLARS_MIN else pl.Series(part).sort().to_numpy()
    return SortedValues(dtype, codes[first], starts, keys)


def write_run(batch: SortedValues, path: str) -> SpilledRun:
    """Write the keys of ``batch`` to ``path`` (a new file); a worker hands this back."""
    with open(path, "xb") as out:  # never onto an existing file
        out.write(np.ascontiguousarray(batch.keys).data)
    return SpilledRun(batch.dtype, batch.codes, batch.starts, path)


def read_run(run: SpilledRun) -> SortedValues:
    """The sorted values a worker wrote (:func:`write_run`), read back into memory."""
    return SortedValues(run.dtype, run.codes, run.starts, _read(run, 0, int(run.starts[-1])))


class ExactMedians(contextlib.AbstractContextManager["ExactMedians"]):
    """The middle values of each group of ``dtype`` (``int64`` or ``float64``) values.
    Close it (or use it as a context manager) to remove its files; the collector does too."""

    def __init__(
        self,
        dtype: Any,
        *,
        spill_bytes: int = DEFAULT_SPILL_BYTES,
        dir: str | os.PathLike[str] | None = None,
    ) -> None:
        ok = isinstance(spill_bytes, int) and not isinstance(spill_bytes, bool) and spill_bytes >= 0
        _check(ok, "spill_bytes", f"must be a non-negative integer; got {spill_bytes!r}.")
        self.dtype = _check_dtype(dtype)  # of the values and the middles
        self._spill_bytes, self._dir = spill_bytes, dir
        self.closed, self.held_bytes = False, 0  # bytes of the values held (16 a value)
        self._held: list[SortedValues] = []
        self._runs: list[SpilledRun] = []
        self.directory: str | None = None  # the folder, from its first file until closed
        self._files: list[str] = []  # every file named, removed at close
        self._named: set[str] = set()  # named by run_path, not taken yet
        self._cleanup = weakref.finalize(self, _remove, self._files, os.getpid())

    @property
    def runs(self) -> int:
        """How many runs are on disk."""
        return len(self._runs)

    def __len__(self) -> int:
        """How many values were added."""
        return sum(int(run.starts[-1]) for run in self._runs) + self.held_bytes // 16

    def __exit__(self, *error: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the values held and remove the files named (idempotent)."""
        self.closed, self._held, self.held_bytes, self._runs, self.directory = True, [], 0, [], None
        self._cleanup()

    def add(self, group: npt.ArrayLike, values: npt.ArrayLike) -> None:
        """Add ``values[i]`` to group ``group[i]`` (copied; see :func:`sort_by_group`)."""
        self.add_sorted(sort_by_group(group, values, self.dtype))

    def add_sorted(self, batch: SortedValues) -> None:
        """Add the values of ``batch`` (:func:`sort_by_group`), kept as they are."""
        self._check_open()
        _check(isinstance(batch, SortedValues), "batch", "must be SortedValues.")
        keys = np.asarray(batch.keys, dtype=np.int64).ravel()
        codes, starts = _checked_groups(batch, self.dtype, keys.size, "batch")
        falls = np.flatnonzero(keys[1:] < keys[:-1]) + 1
        _check(np.isin(falls, starts).all(), "batch", "keys must be sorted within each group.")
        self._held.append(SortedValues(self.dtype, codes, starts, keys))
        self.held_bytes += keys.size * 16
        if self.held_bytes and self.held_bytes >= self._spill_bytes:
            held, self._held, self.held_bytes = self._held, [], 0
            self._runs += [write_run(batch, self._new_path()) for batch in held]

    def merge(self, other: ExactMedians) -> None:
        """Add every value of ``other`` (same dtype), which is left as it was."""
        self._check_open()
        other._check_open()
        _check(other is not self, "other", "must be another instance than the one merged into.")
        kind = f"holds {other.dtype} values; this instance holds {self.dtype}."
        _check(other.dtype == self.dtype, "other", kind)
        for run in other._runs:  # copied: each instance removes its own files
            self._runs.append(run._replace(path=shutil.copyfile(run.path, self._new_path())))
        for batch in other._held:  # never changed: shared
            self.add_sorted(batch)

    def run_path(self) -> str:
        """A new file in the folder for a worker's run, for :meth:`add_run`; removed at close."""
        self._check_open()
        return self._new_path(named=True)

    def add_run(self, run: SpilledRun) -> None:
        """Take the run a worker wrote (:func:`write_run`) to a file :meth:`run_path` named,
        where it lies: its sort is trusted (warmfit's own), its shape and length checked."""
        self._check_open()
        named = isinstance(run, SpilledRun) and run.path in self._named
        _check(named, "run", "must be a run written to a file run_path named.")
        self._named.discard(run.path)  # taken once
        size = int(np.asarray(run.starts)[-1]) if len(run.starts) else -1
        codes, starts = _checked_groups(run, self.dtype, size, "run")
        length = f"file {run.path} holds {os.path.getsize(run.path)} bytes, not 8 for each"
        _check(os.path.getsize(run.path) == 8 * size, "run", f"{length} of its {size} keys.")
        if codes.size:
            self._runs.append(SpilledRun(self.dtype, codes, starts, run.path))

    def middles(self) -> Middles:
        """Per group seen, in increasing codes: the two middle values, and the count."""
        self._check_open()
        runs: list[SpilledRun | SortedValues] = [*self._runs, *self._held]
        stretches = sorted(  # of every group in every run that holds it, by group
            (code, at, span)
            for at, run in enumerate(runs)
            for code, span in zip(run.codes.tolist(), pairwise(run.starts.tolist()), strict=True)
        )
        found = []
        for code, group in groupby(stretches, key=lambda stretch: stretch[0]):
            parts = [(runs[at], start, stop) for _, at, (start, stop) in group]
            n = sum(stop - start for _, start, stop in parts)
            ranks = [(n - 1) // 2, n // 2]
            if len(parts) == 1:  # one stretch, sorted: its middle keys
                run, start, _ = parts[0]
                middle = _read(run, start + ranks[0], start + ranks[1] + 1)[[0, -1]].tolist()
            elif n <= _PARTITION_MAX:  # a few keys: read, and partitioned
                keys = np.concatenate([_read(*part) for part in parts])
                keys.partition(ranks)
                middle = keys[ranks].tolist()
            else:  # sorted stretches, mapped: a bisection reads a few pages of each
                middle = [_bisect([_mapped(*part) for part in parts], rank) for rank in ranks]
            found.append((code, n, *middle))
        codes, counts, lower, upper = np.array(found, dtype=np.int64).reshape(-1, 4).T.copy()
        return Middles(codes, _from_keys(lower, self.dtype), _from_keys(upper, self.dtype), counts)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("ExactMedians is closed.")

    def _new_path(self, named: bool = False) -> str:
        """A new file name in the folder (made for the first), removed at close."""
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="warmfit-medians-", dir=self._dir)
        path = os.path.join(self.directory, f"run-{len(self._files)}.bin")
        self._files.append(path)
        if named:
            self._named.add(path)
        return path


def _bisect(stretches: list[Int64Array], rank: int) -> int:
    """The key at ``rank`` among sorted ``stretches``: the least key ``t`` with more
    than ``rank`` keys at most ``t``, found by halving the range of keys (64 times at most)."""
    low, high = min(int(keys[0]) for keys in stretches), max(int(keys[-1]) for keys in stretches)
    while low < high:
        middle = (low + high) // 2
        if sum(_count(keys, middle) for keys in stretches) > rank:
            high = middle
        else:
            low = middle + 1
    return low


def _count(keys: Int64Array, value: int) -> int:
    """How many sorted ``keys`` are at most ``value``; the pages of a map let go after."""
    count, pages = int(np.searchsorted(keys, value, side="right")), keys.base
    if isinstance(pages, mmap.mmap):  # (the kernel maps pages around each one read)
        pages.madvise(mmap.MADV_DONTNEED)
    return count


def _mapped(run: SortedValues | SpilledRun, start: int, stop: int) -> Int64Array:
    """Keys ``start:stop`` of a run: in memory, or its file mapped (no page read yet)."""
    if isinstance(run, SortedValues):
        return run.keys[start:stop]
    return np.memmap(run.path, dtype=np.int64, mode="r", offset=8 * start, shape=(stop - start,))


def _read(run: SortedValues | SpilledRun, start: int, stop: int) -> Int64Array:
    """Keys ``start:stop`` of a run: in memory, or read from its file."""
    if isinstance(run, SortedValues):
        return run.keys[start:stop]
    keys = np.fromfile(run.path, dtype=np.int64, count=stop - start, offset=8 * start)
    if keys.size != stop - start:
        raise OSError(f"the run file {run.path} ends before key {stop}")
    return keys


def _remove(files: list[str], owner: int) -> None:
    """Delete the files an instance named, then their folder if empty, in the process
    that made them only: a forked child's copy must not remove its parent's."""
    if os.getpid() == owner and files:
        for path in files:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        with contextlib.suppress(OSError):  # something else was put there: leave it
            os.rmdir(os.path.dirname(files[0]))


def _check(ok: object, argument: str, message: str) -> None:
    """A :class:`UsageError` naming ``argument`` unless ``ok``."""
    if not ok:
        raise UsageError(message, argument=argument)


def _check_dtype(dtype: Any) -> np.dtype[Any]:
    found = [kind for kind in (np.dtype(np.int64), np.dtype(np.float64)) if kind == dtype]
    _check(dtype is not None and found, "dtype", f"must be int64 or float64; got {dtype!r}.")
    return found[0]  # (numpy holds None equal to float64)


def _checked_groups(batch: Any, dtype: np.dtype[Any], size: int, argument: str) -> tuple[Any, Any]:
    """The codes and starts of sorted values of ``size`` keys, checked."""
    kind = f"holds {batch.dtype} values; this instance holds {dtype}."
    _check(np.dtype(batch.dtype) == dtype, argument, kind)
    codes, starts = np.asarray(batch.codes, np.int64), np.asarray(batch.starts, np.int64)
    shape = codes.ndim == 1 and starts.shape == (codes.size + 1,)
    rise = shape and starts[0] == 0 and starts[-1] == size and np.all(np.diff(starts) > 0)
    _check(rise, argument, "must have one start per code, and one more, rising from 0 to its keys.")
    increasing = not codes.size or (codes[0] >= 0 and np.all(np.diff(codes) > 0))
    _check(increasing, argument, "codes must be >= 0 and strictly increasing.")
    return codes, starts


def _from_keys(keys: Int64Array, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The values of order ``keys`` (a new array): the fold undoes itself."""
    bits = np.array(keys, dtype=np.int64)
    bits ^= (bits >> 63) & _MAGNITUDE if dtype.kind == "f" else 0
    return bits.view(dtype)
