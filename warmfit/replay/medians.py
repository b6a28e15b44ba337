"""Exact medians of many groups in bounded memory: values spill to sorted runs on disk.

The streaming engine folds a summary batch by batch, but a median cannot be
folded: :class:`ExactMedians` keeps every value, in memory up to
``spill_bytes`` and on disk beyond, and finds each group's two middle values
exactly, by selection, at the end.

Values and order
----------------
An instance holds values of one dtype, ``int64`` or ``float64``, each tagged
with a group code (any non-negative integer; one code per result group and
policy). Values are stored as int64 *order keys*: an int64 is its own key; a
float64's bits are folded (``bits ^ ((bits >> 63) & 0x7FFF...)``) so that
integer order is the IEEE total order: ``-inf < ... < -0.0 < 0.0 < ... <
inf``. This is the order :func:`numpy.sort` gives, except that numpy holds
``-0.0`` and ``0.0`` equal and may place them either way: a middle value here
always compares equal (``==``) to numpy's, and is ``-0.0`` exactly when the
position falls among the negative zeros. NaN is not expected; should one
come, every NaN (any sign or payload) is kept as one canonical NaN that sorts
after ``inf``, as :func:`numpy.sort` and polars place NaNs, and a middle value
that lands on one is NaN.

For a group of ``n`` values, :meth:`ExactMedians.middles` gives the sorted
values at positions ``(n - 1) // 2`` and ``n // 2``: what polars'
``quantile(0.5, interpolation="lower")`` and ``"higher"`` give (for int64
without the rounding to doubles polars does beyond 2**53). The caller makes
the median of them; :func:`midpoint_int` is the integer one of SPEC §7 (the
mean truncated toward zero), exact over the whole int64 range.

Algorithm
---------
*Adding.* :meth:`~ExactMedians.add` copies the batch (keys and codes, 16
bytes a value) into memory. When what is held exceeds ``spill_bytes``, it is
sorted by (group, key) and appended to ``keys.bin`` as one *run*; every
256th key of each group's stretch (its first included) is appended to
``fences.bin`` as a *fence post*, and the run's index (the codes it holds,
where each starts in the keys and in the posts) to ``index.bin``. The three
files live in a directory the instance makes with :func:`tempfile.mkdtemp`
(prefix ``warmfit-medians-``, under ``dir`` when given) at the first spill,
and removes at :meth:`~ExactMedians.close`, at the end of a ``with`` block,
or when garbage collected (in the process that made it, not a forked
child); only the files it wrote are deleted, and the directory only if
nothing else was put there. The sort partitions by group with a stable
radix argsort of the codes (16 bits a pass; none when they come in order),
then sorts each group's keys (a long stretch by polars, about three times as
fast as numpy on one core); with many short groups it argsorts the keys
first and partitions stably after.

*Middles.* With nothing spilled, the held values are sorted and the middles
read off. Otherwise the held values are spilled as one more run, and each
group is answered one of two ways:

- a group of at most ``select_above`` values is read whole: consecutive
  small groups are batched (up to ``spill_bytes // 16`` values), and since
  every run is sorted by group a batch is one contiguous stretch of each run,
  read, sorted in memory, and its middles read off;
- a larger group is found from its fence posts first, without reading its
  keys: in a run, ``c`` posts below a value ``t`` bound the keys below it by
  ``256 c``, and ``c`` posts at most ``t`` mean at least ``256 (c - 1) + 1``
  keys at most ``t``. Summed over the runs, these bounds give ``low``, the
  largest post with at most ``(n - 1) // 2`` keys surely below it, and
  ``high``, the least post with more than ``n // 2`` keys surely at most it:
  both middles lie in ``[low, high]`` (one value if they are equal). In each
  run only the blocks from its last post at most ``low`` to its first post at
  least ``high`` can hold keys strictly between; at most ``runs`` posts
  lie strictly between ``low`` and ``high`` in all the runs together, so at
  most ``3 x runs`` blocks of 256 keys are read in all (one read a run), and
  the middles are selected among them (:func:`numpy.partition`), counting
  the keys skipped before (all at most ``low``) and after (all at least
  ``high``).

Keys are read with ordinary file reads, never memory-mapped, so the pages
read do not count in the process's resident memory; the index and the posts
are mapped, and let go of (``MADV_DONTNEED``) after each batch or group.

Costs
-----
- Memory: the held values, at most ``spill_bytes`` plus the last batch given
  (16 bytes a value), and while sorting them for a spill about three times
  that in all; per group seen, its code and count (16 bytes).
  :meth:`~ExactMedians.middles` holds one batch of small groups (about
  ``spill_bytes`` and sorting space), or for a large group its posts (8 bytes
  per 256 values) and about ``3 x 256 x runs`` keys.
- Disk: 8 bytes a spilled value, plus 8 per 256 values (the posts), plus 24
  per group present in a run (the index).
- Time: adding is dominated by the spill sorts, O(n log(n / runs)) in all;
  a large group's middles cost O(runs) searches over its posts and reads of
  about 6 KiB; small groups are read once and sorted again.

Workers in other processes sort their own values with :func:`sort_by_group`
and hand back the picklable :class:`SortedValues`; the parent takes them with
:meth:`~ExactMedians.add_sorted` (a large one is written as a run as it
stands, without sorting again). A worker on the same machine can write them
itself: :meth:`~ExactMedians.run_path` names a file in the instance's folder,
:func:`write_run` writes the sorted keys there and hands back a small
:class:`SpilledRun` (codes, starts, fence posts), and
:meth:`~ExactMedians.add_run` takes the file as a run where it lies, so the
keys are neither sent to the parent nor copied (the spilled keys are
numbered across ``keys.bin`` and such files). Every file named is removed
with the folder, taken or not. Two instances in one process combine with
:meth:`~ExactMedians.merge`.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import itertools
import mmap
import os
import tempfile
import weakref
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import polars as pl

from warmfit.errors import UsageError

Int64Array = npt.NDArray[np.int64]

#: Bytes of held values (keys and group codes, 16 bytes a value) past which
#: they are spilled to disk as a sorted run.
DEFAULT_SPILL_BYTES = 64 * 2**20
#: Groups of more values than this are found from the runs' fence posts and
#: a few blocks read; smaller ones are read whole and sorted.
DEFAULT_SELECT_ABOVE = 1 << 15
#: The dtypes an instance can hold.
DTYPES = (np.dtype(np.int64), np.dtype(np.float64))

_HELD_BYTES_PER_VALUE = 16
_MAGNITUDE = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_NAN_KEY = np.int64(0x7FF8_0000_0000_0000)
# Codes up to this are used as they are for counting sorts; larger ones are
# renumbered densely first.
_DENSE_CODES = 1 << 24
# Partition by group, then sort each group, while groups average this many values.
_SEGMENT_MIN = 256
# Arrays of at least this many keys are sorted by polars (see _sorted).
_POLARS_SORT_MIN = 1 << 13
# Every this many keys of a group in a run, its key is kept as a fence post.
_FENCE = 256
_KEYS_FILE = "keys.bin"
_INDEX_FILE = "index.bin"
_FENCES_FILE = "fences.bin"
_FILES = (_KEYS_FILE, _INDEX_FILE, _FENCES_FILE)
# Key files open at once while the middles are found.
_OPEN_FILES = 64


class SortedValues(NamedTuple):
    """Values sorted by group, then value: what a worker hands back (picklable).

    ``codes`` are the groups, strictly increasing; group ``codes[i]`` holds
    ``keys[starts[i]:starts[i + 1]]``, sorted, at least one. ``keys`` are
    order keys (see the module's docstring); :meth:`values` decodes them.
    """

    dtype: np.dtype[Any]
    codes: Int64Array
    starts: Int64Array
    keys: Int64Array

    def values(self) -> npt.NDArray[Any]:
        """The values themselves, in the order of ``keys``."""
        return _from_keys(self.keys, self.dtype)


class SpilledRun(NamedTuple):
    """A sorted batch whose keys a worker wrote to a file (:func:`write_run`), for
    :meth:`ExactMedians.add_run` to take as a run without reading them (picklable).

    ``codes`` and ``starts`` are those of the :class:`SortedValues` written;
    ``posts`` are its fence posts (every 256th key of each group's stretch);
    ``path`` is a file :meth:`ExactMedians.run_path` named.
    """

    dtype: np.dtype[Any]
    codes: Int64Array
    starts: Int64Array
    posts: Int64Array
    path: str


class Middles(NamedTuple):
    """Per group seen, in increasing ``codes``: the sorted values at positions
    ``(counts - 1) // 2`` (``lower``) and ``counts // 2`` (``upper``), and how
    many values each group has."""

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
    a = np.asarray(lower, dtype=np.int64)
    b = np.asarray(upper, dtype=np.int64)
    half_a, odd_a = np.divmod(a, 2)
    half_b, odd_b = np.divmod(b, 2)
    odd = odd_a + odd_b  # 0, 1 or 2
    floor = half_a + half_b + odd // 2
    # floor((a + b) / 2) rounds a negative half down: truncation moves it up by one
    return floor + ((odd == 1) & (floor < 0))


def sort_by_group(group: npt.ArrayLike, values: npt.ArrayLike, dtype: Any) -> SortedValues:
    """Sort ``values`` by ``group`` code, then value, into :class:`SortedValues`.

    The form in which a worker hands its values to :meth:`ExactMedians.add_sorted`.
    """
    kind = _check_dtype(dtype)
    codes, keys = _checked_batch(group, values, kind)
    return SortedValues(kind, *_sort_pairs(codes, keys))


def write_run(batch: SortedValues, path: str) -> SpilledRun:
    """Write the keys of ``batch`` to ``path`` (a new file) as one run: what a worker
    hands back instead of the keys, so that they are not sent to the parent and
    written by it (see :meth:`ExactMedians.add_run`)."""
    _, posts = _fence_posts(batch.starts, batch.keys)
    with open(path, "xb") as out:  # never onto an existing file
        out.write(np.ascontiguousarray(batch.keys).data)
    return SpilledRun(batch.dtype, batch.codes, batch.starts, posts, path)


def read_run(run: SpilledRun) -> SortedValues:
    """The sorted values a worker wrote (:func:`write_run`), read back into memory."""
    keys = np.fromfile(run.path, dtype=np.int64)
    if keys.size != int(run.starts[-1]):
        raise OSError(f"the run file {run.path} holds {keys.size} keys, not {int(run.starts[-1])}")
    return SortedValues(run.dtype, run.codes, run.starts, keys)


class ExactMedians:
    """Exact middle values per group, memory bounded by ``spill_bytes``.

    ``dtype`` is ``int64`` or ``float64``. Values are held in memory until
    they take more than ``spill_bytes`` (16 bytes a value), then spilled to a
    temporary directory made under ``dir`` (the system's default when None);
    groups of more than ``select_above`` values are found from the spilled
    runs' fence posts and a few blocks read, smaller ones by reading them. Close the instance (or use
    it as a context manager) to remove what it wrote; garbage collection does
    it too. See the module's docstring for the algorithm and its costs.
    """

    def __init__(
        self,
        dtype: Any,
        *,
        spill_bytes: int = DEFAULT_SPILL_BYTES,
        dir: str | os.PathLike[str] | None = None,
        select_above: int = DEFAULT_SELECT_ABOVE,
    ) -> None:
        self._dtype = _check_dtype(dtype)
        if isinstance(spill_bytes, bool) or not isinstance(spill_bytes, int) or spill_bytes < 0:
            raise UsageError(
                f"must be a non-negative integer; got {spill_bytes!r}.", argument="spill_bytes"
            )
        if isinstance(select_above, bool) or not isinstance(select_above, int) or select_above < 0:
            raise UsageError(
                f"must be a non-negative integer; got {select_above!r}.", argument="select_above"
            )
        self._spill_bytes = spill_bytes
        self._select_above = select_above
        self._parent = None if dir is None else os.fspath(dir)
        self._closed = False
        # held in memory: chunks of (codes, keys)
        self._held: list[tuple[Int64Array, Int64Array]] = []
        self._held_bytes = 0
        # spilled: runs of keys.bin, each (index offset, number of codes), in
        # values of 8 bytes; per group, its code and the count spilled
        self._directory: str | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        # the files written, or named for a worker to write (see run_path), removed at close
        self._files: list[str] = []
        self._named: set[str] = set()  # named by run_path, not yet taken
        self._run_files = 0
        # where the spilled keys lie: (first key, file name, offset in the file), in
        # order of the keys, which are numbered across the files
        self._segments: list[tuple[int, str, int]] = []
        self._keys_length = 0  # keys in keys.bin
        self._runs: list[tuple[int, int]] = []
        self._spilled = 0
        self._fenced = 0
        self._index_length = 0
        self._codes: Int64Array = np.empty(0, dtype=np.int64)
        self._counts: Int64Array = np.empty(0, dtype=np.int64)

    # ------------------------------------------------------------------ state

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of the values, and of the middles."""
        return self._dtype

    @property
    def spill_bytes(self) -> int:
        return self._spill_bytes

    @property
    def directory(self) -> str | None:
        """The temporary directory, once something was spilled, until closed."""
        return self._directory

    @property
    def runs(self) -> int:
        """How many sorted runs are on disk."""
        return len(self._runs)

    @property
    def held_bytes(self) -> int:
        """Bytes of values held in memory (16 a value)."""
        return self._held_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """How many values were added."""
        return self._spilled + self._held_bytes // _HELD_BYTES_PER_VALUE

    def __enter__(self) -> ExactMedians:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Drop the held values and remove the files written (idempotent)."""
        self._closed = True
        self._held = []
        self._held_bytes = 0
        if self._finalizer is not None:
            self._finalizer()
        self._directory = None

    # ------------------------------------------------------------------ adding

    def add(self, group: npt.ArrayLike, values: npt.ArrayLike) -> None:
        """Add ``values``, ``values[i]`` to group ``group[i]`` (a code >= 0).

        Both are one-dimensional and of one length; ``values`` must cast
        safely and exactly to the instance's dtype: an int64 instance refuses
        floats, and a float64 one refuses 64-bit integers. Copies them.
        """
        self._check_open()
        codes, keys = _checked_batch(group, values, self._dtype)
        if keys.size:
            self._hold(codes, keys)

    def add_sorted(self, batch: SortedValues) -> None:
        """Add the values of ``batch`` (see :func:`sort_by_group`).

        A batch of at least ``spill_bytes`` is written as a run as it stands;
        a smaller one is held like :meth:`add`'s.
        """
        self._check_open()
        codes, starts, keys = _checked_sorted(batch, self._dtype)
        if not keys.size:
            return
        if keys.size * _HELD_BYTES_PER_VALUE >= self._spill_bytes:
            self._write_run(codes, starts, keys)
        else:
            self._hold(np.repeat(codes, np.diff(starts)), keys.copy())

    def merge(self, other: ExactMedians) -> None:
        """Add every value of ``other`` (same dtype), which is left as it was."""
        self._check_open()
        other._check_open()
        if other is self:
            raise UsageError("must be another instance than the one merged into.", argument="other")
        if other._dtype != self._dtype:
            raise UsageError(
                f"holds {other._dtype} values; this instance holds {self._dtype}.", argument="other"
            )
        if other._runs:
            assert other._directory is not None
            self._copy_runs(other)
        for codes, keys in other._held:
            self._hold(codes.copy(), keys.copy())

    def run_path(self) -> str:
        """A new file name in this instance's folder, for a worker to write a sorted
        run into (:func:`write_run`) and :meth:`add_run` to take; the file is removed
        at :meth:`close`, taken or not."""
        self._check_open()
        directory = self._open_directory()
        path = str(directory / f"run-{self._run_files}.bin")
        self._run_files += 1
        self._named.add(path)
        self._files.append(path)
        return path

    def add_run(self, run: SpilledRun) -> None:
        """Take the run a worker wrote (:func:`write_run`) to a file :meth:`run_path`
        named, as it lies: its keys are neither read nor copied.

        The worker's sort is trusted (it is warmfit's own, :func:`sort_by_group`);
        the run's shape, and the file's length, are checked.
        """
        self._check_open()
        if not isinstance(run, SpilledRun) or run.path not in self._named:
            raise UsageError("must be a run written to a file run_path named.", argument="run")
        self._named.discard(run.path)  # taken once
        size = int(np.asarray(run.starts)[-1]) if len(run.starts) else -1
        codes, starts = _checked_groups(run, self._dtype, size, "run")
        fence_starts, expected = _fence_counts(starts)
        posts = np.asarray(run.posts, dtype=np.int64)
        if posts.shape != (expected,):
            raise UsageError(
                f"has {posts.size} fence posts; its groups need {expected}.", argument="run"
            )
        if os.path.getsize(run.path) != 8 * int(starts[-1]):
            raise UsageError(
                f"file {run.path} holds {os.path.getsize(run.path)} bytes, not 8 for each of "
                f"its {int(starts[-1])} keys.",
                argument="run",
            )
        if codes.size:
            self._add_run(codes, starts, fence_starts, posts, os.path.basename(run.path), 0)

    # ------------------------------------------------------------------ middles

    def middles(self) -> Middles:
        """Per group seen: its code, the two middle values, the count.

        Codes come in increasing order; ``lower`` and ``upper`` are the sorted
        values at positions ``(counts - 1) // 2`` and ``counts // 2`` (equal for
        an odd count). Values may be added after, and middles asked again.
        """
        self._check_open()
        if not self._runs:
            codes, keys = self._held_arrays()
            sorted_codes, starts, ordered = _sort_pairs(codes, keys)
            count = np.diff(starts)
            lower = ordered[starts[:-1] + (count - 1) // 2]
            upper = ordered[starts[:-1] + count // 2]
            return Middles(
                sorted_codes,
                _from_keys(lower, self._dtype),
                _from_keys(upper, self._dtype),
                count,
            )
        self._spill()
        assert self._directory is not None
        lower, upper = self._middles_on_disk(Path(self._directory))
        return Middles(
            self._codes.copy(),
            _from_keys(lower, self._dtype),
            _from_keys(upper, self._dtype),
            self._counts.copy(),
        )

    # ------------------------------------------------------------------ inside

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("ExactMedians is closed.")

    def _hold(self, codes: Int64Array, keys: Int64Array) -> None:
        self._held.append((codes, keys))
        self._held_bytes += keys.size * _HELD_BYTES_PER_VALUE
        if self._held_bytes > self._spill_bytes:
            self._spill()

    def _held_arrays(self) -> tuple[Int64Array, Int64Array]:
        if not self._held:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if len(self._held) == 1:
            return self._held[0]
        codes = np.concatenate([c for c, _ in self._held])
        keys = np.concatenate([k for _, k in self._held])
        return codes, keys

    def _spill(self) -> None:
        if not self._held:
            return
        codes, keys = self._held_arrays()
        self._held = []
        self._held_bytes = 0
        sorted_codes, starts, ordered = _sort_pairs(codes, keys)
        del codes, keys
        self._write_run(sorted_codes, starts, ordered)

    def _open_directory(self) -> Path:
        if self._directory is None:
            directory = tempfile.mkdtemp(prefix="warmfit-medians-", dir=self._parent)
            self._files += [os.path.join(directory, name) for name in _FILES]
            self._finalizer = weakref.finalize(self, _remove, directory, self._files, os.getpid())
            self._directory = directory
        return Path(self._directory)

    def _write_run(self, codes: Int64Array, starts: Int64Array, keys: Int64Array) -> None:
        directory = self._open_directory()
        fence_starts, posts = _fence_posts(starts, keys)
        with open(directory / _KEYS_FILE, "ab") as out:
            out.write(np.ascontiguousarray(keys).data)
        self._add_run(codes, starts, fence_starts, posts, _KEYS_FILE, self._keys_length)
        self._keys_length += keys.size

    def _add_run(
        self,
        codes: Int64Array,
        starts: Int64Array,
        fence_starts: Int64Array,
        posts: Int64Array,
        name: str,
        offset: int,
    ) -> None:
        """Take a run whose keys lie in file ``name`` of the folder from key ``offset``."""
        directory = self._open_directory()
        with open(directory / _FENCES_FILE, "ab") as out:
            out.write(np.ascontiguousarray(posts).data)
        with open(directory / _INDEX_FILE, "ab") as out:
            out.write(np.ascontiguousarray(codes).data)
            out.write((starts + self._spilled).data)
            out.write((fence_starts + self._fenced).data)
        last = self._segments[-1] if self._segments else None
        if last is None or (last[1], last[2] + self._spilled - last[0]) != (name, offset):
            self._segments.append((self._spilled, name, offset))  # else: the last one goes on
        self._runs.append((self._index_length, codes.size))
        self._index_length += 3 * codes.size + 2
        self._spilled += int(starts[-1])
        self._fenced += posts.size
        self._add_counts(codes, np.diff(starts))

    def _add_counts(self, codes: Int64Array, counts: Int64Array) -> None:
        if not self._codes.size:
            self._codes, self._counts = codes.copy(), counts.copy()
            return
        every = np.concatenate([self._codes, codes])
        order = np.argsort(every, kind="stable")
        every = every[order]
        summed = np.concatenate([self._counts, counts])[order]
        first = np.flatnonzero(np.concatenate([[True], every[1:] != every[:-1]]))
        self._codes = every[first]
        self._counts = np.add.reduceat(summed, first)

    def _copy_runs(self, other: ExactMedians) -> None:
        assert other._directory is not None
        source = Path(other._directory)
        directory = self._open_directory()
        with open(directory / _KEYS_FILE, "ab") as out:  # other's keys, in their order
            for first, stop, name, offset in other._segment_spans():
                with open(source / name, "rb") as inp:
                    inp.seek(8 * offset)
                    left = 8 * (stop - first)
                    while left and (chunk := inp.read(min(left, 1 << 24))):
                        out.write(chunk)
                        left -= len(chunk)
        self._segments.append((self._spilled, _KEYS_FILE, self._keys_length))
        self._keys_length += other._spilled
        with open(source / _FENCES_FILE, "rb") as inp, open(directory / _FENCES_FILE, "ab") as out:
            while chunk := inp.read(1 << 24):
                out.write(chunk)
        index = np.fromfile(source / _INDEX_FILE, dtype=np.int64)
        with open(directory / _INDEX_FILE, "ab") as out:
            for offset, n in other._runs:
                codes, starts, fence_starts = _run_index(index, offset, n)
                out.write(np.ascontiguousarray(codes).data)
                out.write((starts + self._spilled).data)
                out.write((fence_starts + self._fenced).data)
                self._runs.append((self._index_length, n))
                self._index_length += 3 * n + 2
        self._spilled += other._spilled
        self._fenced += other._fenced
        self._add_counts(other._codes, other._counts)

    def _segment_spans(self) -> list[tuple[int, int, str, int]]:
        """The spilled keys' segments: (first key, key after the last, file, offset)."""
        bounds = [first for first, _, _ in self._segments[1:]] + [self._spilled]
        return [
            (first, stop, name, offset)
            for (first, name, offset), stop in zip(self._segments, bounds, strict=True)
        ]

    def _middles_on_disk(self, directory: Path) -> tuple[Int64Array, Int64Array]:
        counts = self._counts
        lower = np.empty(counts.size, dtype=np.int64)
        upper = np.empty(counts.size, dtype=np.int64)
        large = counts > self._select_above
        budget = max(self._spill_bytes // _HELD_BYTES_PER_VALUE, 1)
        # The index and the fence posts are mapped (small: 24 bytes per group
        # in a run, 8 per _FENCE keys); keys are read, never mapped, so that
        # the pages read do not stay in the process.
        with (
            _Mapped(directory / _INDEX_FILE) as index,
            _Mapped(directory / _FENCES_FILE) as fences,
            _Keys(directory, self._segment_spans()) as reader,
        ):
            runs = [_run_index(index.array, offset, n) for offset, n in self._runs]
            for first, stop in _small_batches(counts, large, budget):
                lower[first:stop], upper[first:stop] = self._read_small(reader, runs, first, stop)
                index.release()
            picked = np.flatnonzero(large)
            step = max((1 << 20) // max(len(runs), 1), 1)
            for start in range(0, picked.size, step):
                chosen = picked[start : start + step]
                spans = _spans(runs, self._codes[chosen])
                index.release()
                for row, at in enumerate(chosen.tolist()):
                    lower[at], upper[at] = _fenced_middles(
                        reader, fences.array, spans[row], int(counts[at])
                    )
                    fences.release()
            del runs
        return lower, upper

    def _read_small(
        self,
        reader: Any,
        runs: list[tuple[Int64Array, Int64Array, Int64Array]],
        first: int,
        stop: int,
    ) -> tuple[Int64Array, Int64Array]:
        """The middles of groups ``first:stop`` (of the codes seen), read whole."""
        low_code, high_code = self._codes[first], self._codes[stop - 1]
        codes_parts: list[Int64Array] = []
        keys_parts: list[Int64Array] = []
        for run_codes, run_starts, _ in runs:
            a = int(np.searchsorted(run_codes, low_code, side="left"))
            b = int(np.searchsorted(run_codes, high_code, side="right"))
            if a == b:
                continue
            keys_parts.append(reader.read(int(run_starts[a]), int(run_starts[b])))
            codes_parts.append(np.repeat(run_codes[a:b], np.diff(run_starts[a : b + 1])))
        codes, starts, ordered = _sort_pairs(
            np.concatenate(codes_parts), np.concatenate(keys_parts)
        )
        assert np.array_equal(codes, self._codes[first:stop])
        count = np.diff(starts)
        return ordered[starts[:-1] + (count - 1) // 2], ordered[starts[:-1] + count // 2]

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} values, {self.runs} runs"
        return f"ExactMedians({self._dtype}, {state})"


# ---------------------------------------------------------------------- helpers


def _remove(directory: str, files: Iterable[str], owner: int) -> None:
    """Delete the files an instance wrote, then its directory if empty.

    Only in the process that made them: a forked child's copy of an
    instance must not remove its parent's runs.
    """
    if os.getpid() != owner:
        return
    for path in files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    with contextlib.suppress(OSError):  # something else was put there: leave it
        os.rmdir(directory)


def _check_dtype(dtype: Any) -> np.dtype[Any]:
    try:
        kind = None if dtype is None else np.dtype(dtype)
    except TypeError:
        kind = None
    if kind is None or kind not in DTYPES:  # (None == np.dtype(float) holds)
        raise UsageError(f"must be int64 or float64; got {dtype!r}.", argument="dtype")
    return kind


def _checked_batch(
    group: npt.ArrayLike, values: npt.ArrayLike, dtype: np.dtype[Any]
) -> tuple[Int64Array, Int64Array]:
    """The group codes and order keys of a batch, as new int64 arrays."""
    group_array = np.asarray(group)
    value_array = np.asarray(values)
    if group_array.ndim != 1 or value_array.ndim != 1:
        raise UsageError("and values must be one-dimensional.", argument="group")
    if group_array.shape != value_array.shape:
        raise UsageError(
            f"has {group_array.size} codes for {value_array.size} values.", argument="group"
        )
    if group_array.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    if group_array.dtype.kind not in "iu" or not np.can_cast(group_array.dtype, np.int64):
        raise UsageError(f"must be integer codes; got {group_array.dtype}.", argument="group")
    # numpy holds int64 -> float64 safe; it is not exact beyond 2**53
    exact = value_array.dtype.kind == "f" or value_array.dtype.itemsize <= 4
    if not np.can_cast(value_array.dtype, dtype) or (dtype.kind == "f" and not exact):
        raise UsageError(
            f"of dtype {value_array.dtype} do not cast safely to {dtype}.", argument="values"
        )
    codes = np.array(group_array, dtype=np.int64)
    if codes.min() < 0:
        raise UsageError("must be codes >= 0.", argument="group")
    return codes, _to_keys(value_array, dtype)


def _checked_sorted(
    batch: SortedValues, dtype: np.dtype[Any]
) -> tuple[Int64Array, Int64Array, Int64Array]:
    if not isinstance(batch, SortedValues):
        raise UsageError("must be SortedValues (see sort_by_group).", argument="batch")
    keys = np.asarray(batch.keys, dtype=np.int64)
    if keys.ndim != 1:
        raise UsageError("must have one start per code, and one more.", argument="batch")
    codes, starts = _checked_groups(batch, dtype, keys.size, "batch")
    falls = np.flatnonzero(keys[1:] < keys[:-1]) + 1
    if not np.isin(falls, starts).all():
        raise UsageError("keys must be sorted within each group.", argument="batch")
    return codes, starts, keys


def _checked_groups(
    batch: SortedValues | SpilledRun, dtype: np.dtype[Any], size: int, argument: str
) -> tuple[Int64Array, Int64Array]:
    """The codes and starts of a sorted batch of ``size`` keys, checked."""
    if np.dtype(batch.dtype) != dtype:
        raise UsageError(
            f"holds {batch.dtype} values; this instance holds {dtype}.", argument=argument
        )
    codes = np.asarray(batch.codes, dtype=np.int64)
    starts = np.asarray(batch.starts, dtype=np.int64)
    if codes.ndim != 1 or starts.shape != (codes.size + 1,):
        raise UsageError("must have one start per code, and one more.", argument=argument)
    if starts[0] != 0 or starts[-1] != size or np.any(np.diff(starts) <= 0):
        raise UsageError("starts must rise from 0 to the number of keys.", argument=argument)
    if codes.size and (codes[0] < 0 or np.any(np.diff(codes) <= 0)):
        raise UsageError("codes must be >= 0 and strictly increasing.", argument=argument)
    return codes, starts


def _to_keys(values: npt.NDArray[Any], dtype: np.dtype[Any]) -> Int64Array:
    """Order keys of ``values`` (a new array): int64 order is the values' order."""
    if dtype.kind == "i":
        return np.array(values, dtype=np.int64)
    floats = np.array(values, dtype=np.float64)
    nan = np.isnan(floats)
    keys = floats.view(np.int64)
    keys ^= (keys >> 63) & _MAGNITUDE
    if nan.any():
        keys[nan] = _NAN_KEY
    return keys


def _from_keys(keys: Int64Array, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The values of order ``keys`` (a new array)."""
    if dtype.kind == "i":
        return np.array(keys, dtype=np.int64)
    bits = np.array(keys, dtype=np.int64)
    bits ^= (bits >> 63) & _MAGNITUDE
    return bits.view(np.float64)


def _stable_order(codes: Int64Array, top: int) -> npt.NDArray[np.intp]:
    """A stable argsort of codes in ``0..top`` (< 2**32): radix, 16 bits a pass."""
    if top < 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    order = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
    high = (codes[order] >> 16).astype(np.uint16)
    return order[np.argsort(high, kind="stable")]


def _sort_pairs(codes: Int64Array, keys: Int64Array) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Sort by (code, key): the codes present, where each starts, the keys."""
    if not keys.size:
        return np.empty(0, dtype=np.int64), np.zeros(1, dtype=np.int64), keys.copy()
    top = int(codes.max())
    names: Int64Array | None = None
    if top >= _DENSE_CODES:
        names, dense = np.unique(codes, return_inverse=True)
        codes, top = dense.astype(np.int64).ravel(), names.size - 1
    tally = np.bincount(codes, minlength=top + 1)
    present = np.flatnonzero(tally)
    starts = np.zeros(present.size + 1, dtype=np.int64)
    np.cumsum(tally[present], out=starts[1:])
    if present.size * _SEGMENT_MIN <= keys.size:
        in_order = bool((codes[1:] >= codes[:-1]).all())  # then each group is one stretch
        ordered = keys.copy() if in_order else keys[_stable_order(codes, top)]
        for begin, end in itertools.pairwise(starts.tolist()):
            ordered[begin:end] = _sorted(ordered[begin:end])
    else:
        by_key = _argsorted(keys)
        ordered = keys[by_key[_stable_order(codes[by_key], top)]]
    found = present.astype(np.int64) if names is None else names[present].astype(np.int64)
    return found, starts, ordered


def _sorted(keys: Int64Array) -> Int64Array:
    """``keys`` sorted (a new array, or ``keys`` itself when small and then sorted in place).

    Polars sorts int64 about three times as fast as numpy on one core (the
    order is the same: keys are integers, so equal keys are identical); for a
    short array its call costs more than numpy's sort.
    """
    if keys.size < _POLARS_SORT_MIN:
        keys.sort()
        return keys
    return pl.Series(keys).sort().to_numpy()


def _argsorted(keys: Int64Array) -> npt.NDArray[Any]:
    """Positions that sort ``keys`` (not stable: equal keys are identical), by
    polars for a long array, as :func:`_sorted`."""
    if keys.size < _POLARS_SORT_MIN:
        return np.argsort(keys)
    return pl.Series(keys).arg_sort().to_numpy()


class _Keys:
    """The spilled keys, numbered across the files that hold them, read (not mapped).

    At most ``_OPEN_FILES`` files are open at once (the least recently read is
    closed): a fleet's replay has one run file per batch, thousands of them.
    """

    def __init__(self, directory: Path, spans: list[tuple[int, int, str, int]]) -> None:
        self._directory = directory
        self._spans = spans
        self._firsts = [first for first, _, _, _ in spans]
        self._open: collections.OrderedDict[str, Any] = collections.OrderedDict()

    def read(self, start: int, stop: int) -> Int64Array:
        """Keys ``start:stop`` (of one run: they lie in one file)."""
        out = np.empty(stop - start, dtype=np.int64)
        if stop <= start:
            return out
        first, end, name, offset = self._spans[bisect.bisect_right(self._firsts, start) - 1]
        if stop > end:
            raise OSError(f"keys {start}:{stop} run past their file {name}")
        reader = self._open.get(name)
        if reader is None:
            if len(self._open) >= _OPEN_FILES:
                self._open.popitem(last=False)[1].close()
            reader = self._open[name] = open(self._directory / name, "rb")  # noqa: SIM115
        self._open.move_to_end(name)
        view = out.data.cast("B")
        reader.seek(8 * (offset + start - first))
        done = 0
        while done < len(view):
            got = reader.readinto(view[done:])
            if not got:
                raise OSError(f"the runs file ended early: {reader.name}")
            done += got
        return out

    def __enter__(self) -> _Keys:
        return self

    def __exit__(self, *error: object) -> None:
        for reader in self._open.values():
            reader.close()


def _small_batches(
    counts: Int64Array, large: npt.NDArray[np.bool_], budget: int
) -> list[tuple[int, int]]:
    """Stretches ``first:stop`` of consecutive small groups of at most
    ``budget`` values (or one group)."""
    batches: list[tuple[int, int]] = []
    total = np.concatenate([[0], np.cumsum(np.where(large, 0, counts))])
    # stretches between large groups
    edges = np.flatnonzero(np.diff(np.concatenate([[True], large, [True]]).astype(np.int8)))
    for begin, end in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        first = begin
        while first < end:
            stop = int(np.searchsorted(total, total[first] + budget, side="right")) - 1
            stop = min(max(stop, first + 1), end)
            batches.append((first, stop))
            first = stop
    return batches


class _Mapped:
    """A file of int64 mapped read-only, whose pages can be let go."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 (closed in __exit__)
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self.array: Int64Array = np.frombuffer(self._map, dtype=np.int64)

    def release(self) -> None:
        """Unmap the pages touched so far (they are read again when touched)."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)

    def __enter__(self) -> _Mapped:
        return self

    def __exit__(self, *error: object) -> None:
        del self.array
        # a view that escaped (in an error's traceback) leaves the map to the collector
        with contextlib.suppress(BufferError):
            self._map.close()
        self._file.close()


def _fence_counts(starts: Int64Array) -> tuple[Int64Array, int]:
    """Where each group's fence posts start among a run's (and one more), and how
    many there are: one every ``_FENCE`` keys of a group's stretch, its first included."""
    posts = (np.diff(starts) + _FENCE - 1) // _FENCE
    fence_starts = np.zeros(posts.size + 1, dtype=np.int64)
    np.cumsum(posts, out=fence_starts[1:])
    return fence_starts, int(fence_starts[-1])


def _fence_posts(starts: Int64Array, keys: Int64Array) -> tuple[Int64Array, Int64Array]:
    """A sorted run's fence posts (see :func:`_fence_counts`): where each group's
    start, and the posts themselves, each group's keys at 0, _FENCE, 2 * _FENCE, ..."""
    fence_starts, total = _fence_counts(starts)
    at = np.repeat(starts[:-1] - fence_starts[:-1] * _FENCE, np.diff(fence_starts))
    at += np.arange(total, dtype=np.int64) * _FENCE
    return fence_starts, keys[at]


def _run_index(index: Int64Array, offset: int, n: int) -> tuple[Int64Array, Int64Array, Int64Array]:
    """A run's codes, key starts and fence starts (absolute), from the index."""
    return (
        index[offset : offset + n],
        index[offset + n : offset + 2 * n + 1],
        index[offset + 2 * n + 1 : offset + 3 * n + 2],
    )


def _spans(runs: list[tuple[Int64Array, Int64Array, Int64Array]], codes: Int64Array) -> Int64Array:
    """Per group of ``codes`` and run: its stretch of keys and of fence posts,
    ``(key start, key end, post start, post end)`` (all 0 where absent)."""
    spans = np.zeros((codes.size, len(runs), 4), dtype=np.int64)
    for column, (run_codes, starts, fence_starts) in enumerate(runs):
        if not run_codes.size:
            continue
        at = np.searchsorted(run_codes, codes)
        inside = np.minimum(at, run_codes.size - 1)
        present = (at < run_codes.size) & (run_codes[inside] == codes)
        here = at[present]
        spans[present, column] = np.stack(
            [starts[here], starts[here + 1], fence_starts[here], fence_starts[here + 1]], axis=1
        )
    return spans


def _fenced_middles(
    reader: Any, fences: Int64Array, spans: Int64Array, count: int
) -> tuple[int, int]:
    """The keys at ranks ``(count - 1) // 2`` and ``count // 2`` of one group,
    whose keys lie in ``spans`` of the runs (see :func:`_spans`): bounded by
    the fence posts, then read (see the module's docstring).

    A run's stretch is cut in blocks of ``_FENCE`` keys, each starting at a
    post. For a value ``t``: ``c`` posts below it bound the keys below it by
    ``c * _FENCE`` (by the stretch's length for the last block); ``c >= 1``
    posts at most ``t`` mean at least ``(c - 1) * _FENCE + 1`` keys at most
    ``t``. The sums over runs are computed for every post at once, over the
    posts of all runs sorted together.
    """
    spans = spans[spans[:, 1] > spans[:, 0]]
    wanted = ((count - 1) // 2, count // 2)
    key_start, key_end, post_start, post_end = spans.T
    runs = spans.shape[0]
    lengths = post_end - post_start  # posts a run, each at least 1
    offsets = np.zeros(runs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    at = np.repeat(post_start - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
    order = np.argsort(fences[at], kind="stable")
    posts = fences[at][order]
    run_of = np.repeat(np.arange(runs), lengths)[order]
    place = np.empty_like(order)
    place[order] = np.arange(order.size)
    # the sorted places of each run's last post (with the run's shortfall of
    # its last block), and of each run's first post
    last = place[offsets[1:] - 1]
    by_last = np.argsort(last)
    last = last[by_last]
    shortfall = np.zeros(runs + 1, dtype=np.int64)
    np.cumsum((lengths * _FENCE - (key_end - key_start))[by_last], out=shortfall[1:])
    first = np.sort(place[offsets[:-1]])
    candidates, below = np.unique(posts, return_index=True)  # posts below each candidate
    at_most = np.append(below[1:], posts.size)  # posts at most each candidate
    surely_below = _FENCE * below - shortfall[np.searchsorted(last, below)]
    surely_at_most = _FENCE * at_most - (_FENCE - 1) * np.searchsorted(first, at_most)
    # low: the largest post with at most the lower rank's keys surely below it
    # (the least post has none below it); high: the least post with more
    # than the upper rank's keys surely at most it, if any
    i = int(np.searchsorted(surely_below, wanted[0], side="right")) - 1
    j = int(np.searchsorted(surely_at_most, wanted[1] + 1, side="left"))
    low = int(candidates[i])
    high = int(candidates[j]) if j < candidates.size else None
    if low == high:
        return low, low
    # per run: from its last block starting at most low, to its first block
    # starting at least high; keys before are at most low, after at least high
    first_block = np.maximum(np.bincount(run_of[: at_most[i]], minlength=runs) - 1, 0)
    if high is None:
        stop_block = lengths
    else:
        stop_block = np.minimum(np.bincount(run_of[: below[j]], minlength=runs) + 1, lengths)
    window = np.concatenate(
        [
            reader.read(int(k0 + f * _FENCE), int(min(k0 + s * _FENCE, k1)))
            for k0, k1, f, s in zip(
                key_start.tolist(),
                key_end.tolist(),
                first_block.tolist(),
                stop_block.tolist(),
                strict=True,
            )
        ]
    )
    skipped = int(first_block.sum()) * _FENCE + int(np.count_nonzero(window <= low))
    inside = window > low
    if high is not None:
        inside &= window <= high
    between = window[inside]
    ranks = [k - skipped for k in wanted if 0 <= k - skipped < between.size]
    if ranks:
        between.partition(ranks)
    out = []
    for k in wanted:
        if k < skipped:  # at most low, and at least low (k is at least the keys below low)
            out.append(low)
        elif k - skipped < between.size:
            out.append(int(between[k - skipped]))
        else:  # beyond the windows: keys equal to high
            assert high is not None
            out.append(high)
    return out[0], out[1]
