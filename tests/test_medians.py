"""Exact medians in bounded memory (warmfit.replay.medians): against numpy and polars."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import examples
from warmfit.errors import UsageError
from warmfit.replay import medians as medians_module
from warmfit.replay.medians import (
    ExactMedians,
    Middles,
    SortedValues,
    midpoint_int,
    sort_by_group,
    write_run,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INT_VALUES = INT64 | st.sampled_from([-(2**63), 2**63 - 1, 0, -1, 1, 2**53 + 1, -(2**53) - 1])
FLOAT_VALUES = st.floats(allow_nan=False, width=64) | st.sampled_from(
    [-0.0, 0.0, 5e-324, -5e-324, 2.2250738585072014e-308, np.inf, -np.inf, 1.7976931348623157e308]
)
#: Spill thresholds: everything spilled at once, a few values a run, never.
SPILLS = st.sampled_from([0, 16, 48, 160, 10**9])
#: Groups in several runs of at most this many values are read and partitioned, larger
#: ones bisected: every one, a few, none.
PARTITIONS = st.sampled_from([0, 1, 3, 10**9])


def check(result: Middles, groups: np.ndarray, values: np.ndarray) -> None:
    """The middles are the values at (n - 1) // 2 and n // 2 of each group's np.sort."""
    order = np.lexsort((values, groups))
    codes, starts = np.unique(groups[order], return_index=True)
    counts = np.diff(np.append(starts, groups.size))
    ordered = values[order]
    assert result.codes.dtype == np.int64 and result.counts.dtype == np.int64
    assert result.lower.dtype == values.dtype and result.upper.dtype == values.dtype
    assert np.array_equal(result.codes, codes)
    assert np.array_equal(result.counts, counts)
    # == as numpy compares: -0.0 and 0.0 are equal (see the module's docstring)
    assert np.array_equal(result.lower, ordered[starts + (counts - 1) // 2])
    assert np.array_equal(result.upper, ordered[starts + counts // 2])


@st.composite
def batches(draw: st.DrawFn, values: st.SearchStrategy[Any]) -> list[tuple[list[int], list[Any]]]:
    """A few batches of (group codes, values); codes from a small pool, some huge."""
    pool = draw(
        st.lists(st.integers(0, 6) | st.integers(0, 2**40), min_size=1, max_size=6, unique=True)
    )
    out = []
    for _ in range(draw(st.integers(0, 6))):
        n = draw(st.integers(0, 30))
        out.append(
            (
                draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)),
                draw(st.lists(values, min_size=n, max_size=n)),
            )
        )
    return out


def feed(
    into: ExactMedians, data: list[tuple[list[int], list[Any]]], how: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Add each batch (plainly, sorted, as a run a worker wrote, or through a merged
    instance that holds a run of its own); all values."""
    dtype = into.dtype
    for (group, value), way in zip(data, how, strict=False):
        g, v = np.array(group, dtype=np.int64), np.array(value, dtype=dtype)
        if way == "sorted":
            into.add_sorted(sort_by_group(g, v, dtype))
        elif way == "run":
            into.add_run(write_run(sort_by_group(g, v, dtype), into.run_path()))
        elif way == "merged":
            with ExactMedians(dtype, spill_bytes=32) as other:
                other.add(g[: g.size // 2], v[: v.size // 2])
                half = sort_by_group(g[g.size // 2 :], v[v.size // 2 :], dtype)
                other.add_run(write_run(half, other.run_path()))
                into.merge(other)
        else:
            into.add(g, v)
    for group, value in data[len(how) :]:
        into.add(np.array(group, dtype=np.int64), np.array(value, dtype=dtype))
    every = [np.array(g, dtype=np.int64) for g, _ in data]
    values = [np.array(v, dtype=dtype) for _, v in data]
    return (
        np.concatenate([np.empty(0, np.int64), *every]),
        np.concatenate([np.empty(0, dtype), *values]),
    )


WAYS = st.lists(st.sampled_from(["add", "sorted", "run", "merged"]), max_size=6)


def middles_are_numpy_sorts(
    dtype: Any, data: list[tuple[list[int], list[Any]]], spill: int, partition: int, how: list[str]
) -> None:
    with (
        mock.patch.object(medians_module, "_PARTITION_MAX", partition),
        ExactMedians(dtype, spill_bytes=spill) as m,
    ):
        groups, values = feed(m, data, how)
        check(m.middles(), groups, values)


@settings(max_examples=examples(150))
@given(batches(INT_VALUES), SPILLS, PARTITIONS, WAYS)
def test_int64_middles_are_numpy_sorts(
    data: list[tuple[list[int], list[int]]], spill: int, partition: int, how: list[str]
) -> None:
    middles_are_numpy_sorts(np.int64, data, spill, partition, how)


@settings(max_examples=examples(150))
@given(batches(FLOAT_VALUES), SPILLS, PARTITIONS, WAYS)
def test_float64_middles_are_numpy_sorts(
    data: list[tuple[list[int], list[float]]], spill: int, partition: int, how: list[str]
) -> None:
    middles_are_numpy_sorts("float64", data, spill, partition, how)


@pytest.mark.slow
@settings(max_examples=examples(2000))
@given(st.sampled_from([np.int64, np.float64]), st.data(), SPILLS, PARTITIONS, WAYS)
def test_middles_are_numpy_sorts_at_length(
    dtype: Any, draw: st.DataObject, spill: int, partition: int, how: list[str]
) -> None:
    data = draw.draw(batches(INT_VALUES if dtype is np.int64 else FLOAT_VALUES))
    middles_are_numpy_sorts(dtype, data, spill, partition, how)


@settings(max_examples=examples(100))
@given(
    batches(st.integers(-(2**53), 2**53) | st.floats(-1e300, 1e300, allow_nan=False)),
    SPILLS,
    PARTITIONS,
)
def test_middles_are_polars_lower_and_higher_quantiles(
    data: list[tuple[list[int], list[Any]]], spill: int, partition: int
) -> None:
    """What summarize computes today: quantile(0.5) lower and higher per group."""
    floats = [(g, [float(x) for x in v]) for g, v in data]
    every_int = all(isinstance(x, int) for _, v in data for x in v)
    for dtype, rows in ((np.float64, floats), (np.int64, data if every_int else None)):
        if rows is None:
            continue
        with (
            mock.patch.object(medians_module, "_PARTITION_MAX", partition),
            ExactMedians(dtype, spill_bytes=spill) as m,
        ):
            groups, values = feed(m, rows, [])
            result = m.middles()
        if not groups.size:
            assert result.codes.size == 0
            continue
        frame = pl.DataFrame({"g": groups, "v": values})
        want = (
            frame.group_by("g")
            .agg(
                pl.col("v").quantile(0.5, interpolation="lower").alias("lower"),
                pl.col("v").quantile(0.5, interpolation="higher").alias("upper"),
                pl.len().alias("n"),
            )
            .sort("g")
        )
        assert result.codes.tolist() == want["g"].to_list()
        assert result.counts.tolist() == want["n"].to_list()
        assert result.lower.tolist() == want["lower"].to_list()
        assert result.upper.tolist() == want["upper"].to_list()


@settings(max_examples=examples(300))
@given(INT64, INT64)
def test_midpoint_int_truncates_the_exact_mean_toward_zero(a: int, b: int) -> None:
    total = a + b
    mean = abs(total) // 2 * (1 if total >= 0 else -1)
    assert midpoint_int([a], [b]).tolist() == [mean]


def test_midpoint_int_of_a_half_just_above_zero_is_zero() -> None:
    # 0 and 1: halves 0 and 0, one odd: the floor is 0 and the exact mean 0.5 truncates to 0;
    # -1 and 2 (halves -1 and 1) the same; -2 and 1 (floor -1, mean -0.5) goes up to 0
    assert midpoint_int([0, -1, -2, 1], [1, 2, 1, 2]).tolist() == [0, 0, 0, 1]


def test_negative_zero_sorts_below_zero_and_nan_after_inf() -> None:
    for spill in (0, 10**9):
        with ExactMedians(np.float64, spill_bytes=spill) as m:
            m.add([0, 0, 1, 1, 1, 2, 2, 2], [0.0, -0.0, np.nan, 1.0, 2.0, -np.nan, np.nan, 1.0])
            result = m.middles()
        assert np.signbit(result.lower[0]) and not np.signbit(result.upper[0])
        assert result.lower[1] == 2.0 and result.upper[1] == 2.0
        # [1.0, nan, nan]: NaNs last, as np.sort places them
        assert np.isnan(result.lower[2]) and np.isnan(result.upper[2])


def larger_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Bigger arrays that reach every sort and selection path."""
    rng = np.random.default_rng(7)
    n = 60_000
    cases = [
        ("normal, few groups", rng.integers(0, 5, n), rng.standard_normal(n)),
        ("many groups", rng.integers(0, 20_000, n), rng.standard_normal(n)),
        ("codes past 2**16", rng.integers(0, 2**20, n), rng.standard_normal(n)),
        ("codes past 2**24", rng.integers(0, 2**62, n) | 1, rng.standard_normal(n)),
        ("ascending: each run its own range", rng.integers(0, 3, n), np.arange(n) * 0.5),
        ("descending", rng.integers(0, 3, n), -np.arange(n) * 1.0),
        ("ties", rng.integers(0, 4, n), rng.integers(0, 3, n).astype(np.float64)),
        ("one value", np.zeros(n, np.int64), np.full(n, 3.0)),
        ("two values, even split", np.zeros(n, np.int64), np.repeat([-1.0, 1.0], n // 2)),
        (
            "skewed sizes",
            np.minimum(rng.geometric(0.3, n), 40),
            rng.lognormal(0, 3, n) * rng.choice([-1, 1], n),
        ),
    ]
    ints = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)
    cases.append(("int64 over the whole range", rng.integers(0, 6, n), ints))
    return cases


@pytest.mark.parametrize("name, groups, values", larger_cases(), ids=lambda x: str(x)[:24])
def test_sort_by_group_of_long_arrays_is_numpys_lexsort(
    name: str, groups: np.ndarray, values: np.ndarray
) -> None:
    """Long stretches of a group are sorted by polars, short ones by numpy: the order is
    numpy's, key for key."""
    result = sort_by_group(groups, values, values.dtype)
    order = np.lexsort((values, groups))
    codes, counts = np.unique(groups, return_counts=True)
    assert result.codes.tolist() == codes.tolist()
    assert result.starts.tolist() == [0, *np.cumsum(counts).tolist()]
    want = values[order]
    got = result.values()
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))


def larger_bisected() -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    """Each larger case with groups in several runs bisected past 0 or 100 values, or
    read and partitioned (the default bound); of tens of thousands of groups, each
    bisected is slow (a map of each run that holds each), so only partitioned."""
    return [
        (name, groups, values, partition)
        for name, groups, values in larger_cases()
        for partition in (0, 100, medians_module._PARTITION_MAX)
        if partition == medians_module._PARTITION_MAX or np.unique(groups).size < 1000
    ]


@pytest.mark.parametrize(
    "name, groups, values, partition", larger_bisected(), ids=lambda x: str(x)[:24]
)
def test_larger_arrays_through_every_path(
    name: str, groups: np.ndarray, values: np.ndarray, partition: int
) -> None:
    with (
        mock.patch.object(medians_module, "_PARTITION_MAX", partition),
        ExactMedians(values.dtype, spill_bytes=16 * 1500) as m,
    ):
        for start in range(0, groups.size, 1000):
            m.add(groups[start : start + 1000], values[start : start + 1000])
        assert m.runs >= 30
        result = m.middles()
        check(result, groups, values)
        # asked again, and after more values
        check(m.middles(), groups, values)
        m.add(groups[:10], values[:10])
        check(
            m.middles(),
            np.concatenate([groups, groups[:10]]),
            np.concatenate([values, values[:10]]),
        )


@contextlib.contextmanager
def reads_counted() -> Iterator[tuple[list[int], mock.MagicMock]]:
    """The values each spilled read takes (stop - start, per call) and the mock that
    counts the runs' files mapped."""
    reads: list[int] = []
    read = medians_module._read

    def counted(run: Any, start: int, stop: int) -> np.ndarray:
        reads.append(stop - start)
        return read(run, start, stop)

    with (
        mock.patch.object(medians_module, "_read", counted),
        mock.patch.object(medians_module, "_mapped", wraps=medians_module._mapped) as mapped,
    ):
        yield reads, mapped


def test_a_large_group_is_bisected_never_read_whole(tmp_path: Path) -> None:
    """Past the bound, a group in several runs is bisected over its runs' files mapped
    (ties and all): no read of more keys than the bound; a smaller group is read whole,
    one in a single run at its middle keys only."""
    rng = np.random.default_rng(9)
    big = medians_module._PARTITION_MAX + 5000
    groups = np.repeat([0, 1, 2], [big, 3_000, 1])
    values = np.concatenate([rng.integers(-3, 3, big) * 0.5, rng.standard_normal(3_000), [7.0]])
    order = rng.permutation(groups.size)
    groups, values = groups[order], values[order]
    with (
        ExactMedians(np.float64, spill_bytes=16 * 4999, dir=tmp_path) as m,
        reads_counted() as (reads, mapped),
    ):
        for start in range(0, groups.size, 5000):
            m.add(groups[start : start + 5000], values[start : start + 5000])
        result, runs = m.middles(), m.runs
    check(result, groups, values)
    # the large group in 14 runs and the batch held, for each middle value
    assert runs == 14 and mapped.call_count == 2 * 15
    assert sum(reads) == 3_000 + 1  # the small group whole, the single one's middle


def test_in_memory_sort_paths() -> None:
    rng = np.random.default_rng(3)
    for top in (3, 70_000, 2**40):
        groups = rng.integers(0, top, 200_000)
        values = rng.standard_normal(groups.size)
        with ExactMedians(np.float64) as m:
            m.add(groups, values)
            assert m.runs == 0
            check(m.middles(), groups, values)


def test_the_directory_is_made_in_dir_and_removed_touching_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    (tmp_path / "run-0.bin").write_text("also mine")
    (tmp_path / "run-1.bin").write_text("mine too")
    before = sorted(p.name for p in tmp_path.iterdir())
    m = ExactMedians(np.int64, spill_bytes=64, dir=tmp_path)
    assert m.directory is None  # nothing spilled yet: nothing made
    m.add(np.arange(100) % 3, np.arange(100))
    directory = m.directory
    assert directory is not None and Path(directory).parent == tmp_path
    assert Path(directory).name.startswith("warmfit-medians-")
    assert sorted(p.name for p in Path(directory).iterdir()) == ["run-0.bin"]
    assert m.middles().counts.tolist() == [34, 33, 33]
    m.close()
    assert not Path(directory).exists() and m.directory is None and m.closed
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "keep.txt").read_text() == "mine"
    assert (tmp_path / "run-0.bin").read_text() == "also mine"
    m.close()  # again: nothing to do


def test_only_its_own_files_are_removed(tmp_path: Path) -> None:
    with ExactMedians(np.int64, spill_bytes=0, dir=tmp_path) as m:
        m.add([1, 2], [3, 4])
        directory = Path(str(m.directory))
        (directory / "someone-elses").write_text("x")
    assert sorted(p.name for p in directory.iterdir()) == ["someone-elses"]


def test_garbage_collection_removes_the_directory(tmp_path: Path) -> None:
    m = ExactMedians(np.float64, spill_bytes=0, dir=tmp_path)
    m.add([0], [1.0])
    directory = Path(str(m.directory))
    assert directory.exists()
    del m
    gc.collect()
    assert not directory.exists() and list(tmp_path.iterdir()) == []


def test_another_process_never_removes_the_files(tmp_path: Path) -> None:
    with ExactMedians(np.int64, spill_bytes=0, dir=tmp_path) as m:
        m.add([0], [1])
        directory = str(m.directory)
        files = [os.path.join(directory, name) for name in os.listdir(directory)]
        assert files
        medians_module._remove(files, os.getpid() + 1)  # as a forked child would
        assert all(os.path.exists(f) for f in files)
        assert m.middles().lower.tolist() == [1]


def test_an_empty_instance() -> None:
    for dtype in (np.int64, np.float64):
        with ExactMedians(dtype) as m:
            m.add(np.empty(0, np.int64), np.empty(0, dtype))
            m.add_sorted(sort_by_group([], np.empty(0, dtype), dtype))
            result = m.middles()
            assert len(m) == 0 and m.directory is None
        assert [a.size for a in result] == [0, 0, 0, 0]
        assert result.lower.dtype == dtype and result.upper.dtype == dtype
        assert result.codes.dtype == np.int64 and result.counts.dtype == np.int64


def test_a_closed_instance_refuses() -> None:
    m = ExactMedians(np.int64)
    m.close()
    with pytest.raises(ValueError, match="closed"):
        m.add([0], [1])
    with pytest.raises(ValueError, match="closed"):
        m.middles()


def test_bad_arguments_are_named() -> None:
    with pytest.raises(UsageError, match=r"^dtype must be int64 or float64"):
        ExactMedians(np.float32)
    with pytest.raises(UsageError, match=r"^dtype must be"):
        ExactMedians(None)
    with pytest.raises(UsageError, match=r"^spill_bytes must be"):
        ExactMedians(np.int64, spill_bytes=-1)
    with pytest.raises(UsageError, match=r"^spill_bytes must be"):
        ExactMedians(np.int64, spill_bytes=1.5)  # type: ignore[arg-type]
    with ExactMedians(np.int64) as m:
        with pytest.raises(UsageError, match=r"^group must be codes >= 0"):
            m.add([0, -1], [1, 2])
        with pytest.raises(UsageError, match=r"^group has 1 codes for 2 values"):
            m.add([0], [1, 2])
        with pytest.raises(UsageError, match=r"^group must be integer codes"):
            m.add([0.5], [1])
        with pytest.raises(UsageError, match=r"^values of dtype float64 do not cast"):
            m.add([0], [1.5])
        with pytest.raises(UsageError, match=r"^values of dtype uint64 do not cast"):
            m.add([0], np.array([2**64 - 1], np.uint64))
        with pytest.raises(UsageError, match=r"^batch holds float64"):
            m.add_sorted(sort_by_group([0], [1.0], np.float64))
        good = sort_by_group([0, 0, 1], [2, 1, 5], np.int64)
        with pytest.raises(UsageError, match=r"^batch keys must be sorted"):
            m.add_sorted(good._replace(keys=good.keys[::-1].copy()))
        with pytest.raises(UsageError, match=r"^batch codes must be"):
            m.add_sorted(good._replace(codes=good.codes[::-1].copy()))
        with (
            pytest.raises(UsageError, match=r"^other holds float64"),
            ExactMedians(np.float64) as f,
        ):
            m.merge(f)
        with pytest.raises(UsageError, match=r"^other must be another"):
            m.merge(m)
        assert len(m) == 0
    with ExactMedians(np.float64) as f, pytest.raises(UsageError, match=r"^values of dtype int64"):
        f.add([0], np.array([2**53 + 1]))


def test_sorted_values_travel_by_pickle_and_go_in_whole() -> None:
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 9, 5000)
    values = rng.standard_normal(5000)
    batch = pickle.loads(pickle.dumps(sort_by_group(groups, values, np.float64)))
    assert isinstance(batch, SortedValues)
    assert np.array_equal(np.sort(batch.values()), np.sort(values))
    assert batch.codes.tolist() == list(range(9)) and batch.starts[-1] == 5000
    for spill in (16, 10**9):  # written as a run as it stands, or held
        with ExactMedians(np.float64, spill_bytes=spill) as m:
            m.add_sorted(batch)
            m.add_sorted(batch)
            assert m.runs == (2 if spill == 16 else 0)
            check(m.middles(), np.tile(groups, 2), np.tile(values, 2))


def test_merge_leaves_the_other_as_it_was() -> None:
    rng = np.random.default_rng(11)
    g1, v1 = rng.integers(0, 4, 3000), rng.integers(-(2**62), 2**62, 3000)
    g2, v2 = rng.integers(2, 7, 2000), rng.integers(-5, 5, 2000)
    with (
        ExactMedians(np.int64, spill_bytes=8000) as a,
        ExactMedians(np.int64, spill_bytes=8000) as b,
    ):
        a.add(g1, v1)
        b.add(g2[:1990], v2[:1990])
        b.add(g2[1990:], v2[1990:])  # some held, some spilled
        assert b.runs > 0 and b.held_bytes > 0
        a.merge(b)
        check(a.middles(), np.concatenate([g1, g2]), np.concatenate([v1, v2]))
        check(b.middles(), g2, v2)
        assert len(a) == 5000 and len(b) == 2000


def test_many_runs_and_groups_at_scale(tmp_path: Path) -> None:
    """2e6 values, 40 runs, groups large and small: against a full sort."""
    rng = np.random.default_rng(2)
    n = 2_000_000
    groups = np.where(rng.random(n) < 0.9, rng.integers(0, 12, n), rng.integers(12, 50_000, n))
    values = rng.standard_normal(n) * rng.integers(1, 10**6, n)
    with ExactMedians(np.float64, spill_bytes=16 * 49_999, dir=tmp_path) as m:
        for start in range(0, n, 50_000):
            m.add(groups[start : start + 50_000], values[start : start + 50_000])
        result = m.middles()
        assert m.runs == 40
    check(result, groups, values)


def test_a_run_a_worker_wrote_is_taken_in_place_and_removed_at_close(tmp_path: Path) -> None:
    """write_run / add_run: the keys stay in the worker's file, which the instance
    removes at close with every file it named, taken, untaken or never written."""
    rng = np.random.default_rng(5)
    groups, values = rng.integers(0, 3, 5000), rng.standard_normal(5000)
    m = ExactMedians(np.float64, spill_bytes=1 << 20, dir=tmp_path)
    taken, untaken, unwritten = m.run_path(), m.run_path(), m.run_path()
    assert len({taken, untaken, unwritten}) == 3
    run = write_run(sort_by_group(groups, values, np.float64), taken)
    assert os.path.getsize(taken) == 8 * values.size
    write_run(sort_by_group([0], [1.0], np.float64), untaken)
    with pytest.raises(FileExistsError):  # never onto a file
        write_run(sort_by_group([0], [1.0], np.float64), taken)
    m.add_run(pickle.loads(pickle.dumps(run)))  # as it comes back from a worker
    # the keys were not copied: the instance wrote no file of its own
    assert m.runs == 1 and sorted(os.listdir(m.directory)) == ["run-0.bin", "run-1.bin"]
    check(m.middles(), groups, values)
    (Path(str(m.directory)) / "someone-elses").write_text("x")
    m.close()
    assert [p.name for p in tmp_path.iterdir()] == [Path(taken).parent.name]
    assert [p.name for p in Path(taken).parent.iterdir()] == ["someone-elses"]


def test_a_run_is_checked_before_it_is_taken(tmp_path: Path) -> None:
    with ExactMedians(np.int64, dir=tmp_path) as m:
        good = sort_by_group([0, 0, 1], [2, 1, 5], np.int64)
        stray = tmp_path / "stray.bin"
        with pytest.raises(UsageError, match=r"^run must be a run written to a file run_path"):
            m.add_run(write_run(good, str(stray)))
        run = write_run(good, m.run_path())
        with pytest.raises(UsageError, match=r"^run must have one start per code, and one more"):
            m.add_run(run._replace(starts=run.starts[1:]))
        run = write_run(good, m.run_path())
        with open(run.path, "ab") as out:
            out.write(b"\0" * 8)
        with pytest.raises(UsageError, match=r"holds 32 bytes, not 8 for each of its 3 keys"):
            m.add_run(run)
        run = write_run(good, m.run_path())
        m.add_run(run)
        with pytest.raises(UsageError, match=r"^run must be a run written"):  # taken once
            m.add_run(run)
        run = write_run(sort_by_group([0], [1.0], np.float64), m.run_path())
        with pytest.raises(UsageError, match=r"^run holds float64"):
            m.add_run(run)
        assert m.middles().lower.tolist() == [1, 5]


def test_a_spilled_run_is_never_taken_as_a_workers_run(tmp_path: Path) -> None:
    """add_run takes only a file run_path named: not the file of a run the instance
    spilled itself, nor its copy of a merged instance's, which would count their keys
    twice. Group 0 holds 1 and 2 (spilled at once, bound 0), group 1 holds 5 (merged):
    refused, the middles stay [1, 2] and [5, 5], 3 values."""
    with (
        ExactMedians(np.int64, spill_bytes=0, dir=tmp_path) as m,
        ExactMedians(np.int64, spill_bytes=0, dir=tmp_path) as other,
    ):
        m.add([0, 0], [2, 1])
        other.add([1], [5])
        m.merge(other)
        assert m.runs == 2 and sorted(os.listdir(str(m.directory))) == ["run-0.bin", "run-1.bin"]
        spilled = medians_module.SpilledRun(
            np.dtype(np.int64),
            np.array([0]),
            np.array([0, 2]),
            os.path.join(str(m.directory), "run-0.bin"),
        )
        copied = spilled._replace(
            codes=np.array([1]),
            starts=np.array([0, 1]),
            path=os.path.join(str(m.directory), "run-1.bin"),
        )
        for run in (spilled, copied):
            with pytest.raises(UsageError, match=r"^run must be a run written to a file run_path"):
                m.add_run(run)
        middles = m.middles()
        assert (middles.lower.tolist(), middles.upper.tolist()) == ([1, 5], [2, 5])
        assert len(m) == 3 and middles.counts.tolist() == [2, 1]


def test_the_default_bound_holds_64_mib_of_values_in_memory() -> None:
    """By default values are held in memory up to 64 MiB (16 B a value: 2**22 values),
    no file made; the value that reaches the bound sends the two batches held to disk.
    Group 0 then holds 0 .. 2**22 - 1: its middles are 2**21 - 1 and 2**21."""
    with ExactMedians(np.int64) as m:
        m.add(np.zeros(2**22 - 1, dtype=np.int64), np.arange(2**22 - 1))
        assert (m.runs, m.directory, m.held_bytes) == (0, None, 64 * 2**20 - 16)
        m.add([0], [2**22 - 1])
        assert (m.runs, m.held_bytes, len(m)) == (2, 0, 2**22)
        middles = m.middles()
        assert (middles.lower.tolist(), middles.upper.tolist()) == ([2**21 - 1], [2**21])


@pytest.mark.parametrize(("keys", "bisected"), [(2**16, False), (2**16 + 1, True)])
def test_a_group_in_several_runs_is_read_whole_up_to_2_16_keys(
    tmp_path: Path, keys: int, bisected: bool
) -> None:
    """The module's bound on the keys of a group read whole, exactly: a group of 2**16
    keys in two runs is read whole (its 2**16 keys) and partitioned; one of 2**16 + 1 is
    bisected over the runs' files mapped, no key read whole. Values 0 .. keys - 1, split
    between the runs: middles (keys - 1) // 2 and keys // 2."""
    values = np.arange(keys)
    with (
        ExactMedians(np.int64, spill_bytes=0, dir=tmp_path) as m,
        reads_counted() as (reads, mapped),
    ):
        for half in (values[::2], values[1::2]):
            m.add(np.zeros(half.size, dtype=np.int64), half)
        middles = m.middles()
    assert (middles.lower.tolist(), middles.upper.tolist()) == ([(keys - 1) // 2], [keys // 2])
    assert (sum(reads), mapped.call_count) == ((0, 2 * 2) if bisected else (keys, 0))


@settings(max_examples=examples(60))
@given(
    cells=st.integers(1, 40),
    values=st.integers(0, 300),
    conditions=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
)
def test_fold_counts_each_condition_per_cell(
    cells: int, values: int, conditions: int, seed: int
) -> None:
    """:func:`warmfit.replay.summary.condition_counts` (one bincount of packed condition bits,
    or, past 4096 (cell, bits) pairs such as 40 cells and 8 conditions, one a
    condition) against a plain count per cell and condition."""
    from warmfit.replay.summary import condition_counts

    rng = np.random.default_rng(seed)
    cell = rng.integers(0, cells, values)
    met = [rng.random(values) < rng.random() for _ in range(conditions)]
    expected = np.array(
        [[int((m & (cell == c)).sum()) for m in met] for c in range(cells)], dtype=np.int64
    ).reshape(cells, conditions)
    got = condition_counts(cell, cells, met)
    assert got.dtype == np.int64
    assert got.tolist() == expected.tolist()


def test_fold_counts_of_many_cells_hold_no_tally_of_every_bit_pattern() -> None:
    """50,000 cells (a replay by signature of a large fleet) and 8 conditions: a
    tally of every (cell, bit pattern) would take 100 MB; the counts take 3 MB."""
    import tracemalloc

    from warmfit.replay.summary import condition_counts

    cell = np.arange(50_000, dtype=np.int64)
    met = [cell % (i + 2) == 0 for i in range(8)]
    tracemalloc.start()
    try:
        got = condition_counts(cell, 50_000, met)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got[:, 0].sum() == 25_000
    assert peak < 20 * 2**20


# --- issue 38, generated pass of medians.py (session 20) ---


def test_group_codes_must_cast_to_int64_exactly() -> None:
    """Codes of uint64 (no safe cast to int64) and of bool (not integers) are refused,
    though each satisfies one of the two conditions (medians.py:106)."""
    for codes in (np.array([0, 1], np.uint64), np.array([False, True])):
        with pytest.raises(UsageError, match=rf"^group must be integer codes; got {codes.dtype}"):
            sort_by_group(codes, [1, 2], np.int64)
    small = sort_by_group(np.array([1, 0], np.uint32), [5, 7], np.int64)
    assert small.codes.tolist() == [0, 1]


def test_int32_values_go_into_float64_exactly() -> None:
    """int32 (4 bytes) casts exactly to float64, int64 does not (medians.py:108)."""
    values = np.array([2**31 - 1, -(2**31), 3], np.int32)
    with ExactMedians(np.float64) as m:
        m.add_sorted(sort_by_group([0, 0, 0, 0], np.append(values, 4).astype(np.int32), np.float64))
        got = m.middles()
    assert got.lower.tolist() == [3.0] and got.upper.tolist() == [4.0]
    with pytest.raises(UsageError, match=r"^values of dtype int64 do not cast"):
        sort_by_group([0], np.array([3], np.int64), np.float64)


def test_group_codes_at_and_above_2_16_sort_by_their_whole_value() -> None:
    """Codes below 2**16 are sorted as uint16; a code of exactly 2**16 (0 as uint16)
    must not be (medians.py:118)."""
    got = sort_by_group([2**16, 1, 2**16, 0], [5, 7, 3, 9], np.int64)
    assert got.codes.tolist() == [0, 1, 2**16]
    assert got.starts.tolist() == [0, 1, 2, 4]
    assert got.keys.tolist() == [9, 7, 3, 5]
    below = sort_by_group([2**16 - 1, 1], [5, 7], np.int64)
    assert below.codes.tolist() == [1, 2**16 - 1]


def test_a_run_of_no_start_is_refused_by_name(tmp_path: Path) -> None:
    """A run whose starts are empty (not even the 0 of no key) is refused with the
    run's own message, not an IndexError from reading its last start (medians.py:223)."""
    with ExactMedians(np.int64, dir=str(tmp_path)) as m:
        path = m.run_path()
        Path(path).write_bytes(b"")
        empty = np.empty(0, np.int64)
        with pytest.raises(UsageError, match=r"^run must have one start per code, and one more"):
            m.add_run(medians_module.SpilledRun(np.dtype(np.int64), empty, empty, path))


def test_closing_drops_the_count_of_held_bytes() -> None:
    """Values held in memory count 16 bytes each (held_bytes); close drops them, so
    held_bytes and len() are 0 after it (medians.py:178)."""
    m = ExactMedians(np.int64)
    m.add([0, 0, 1], [3, 1, 2])
    assert m.held_bytes == 48 and len(m) == 3
    m.close()
    assert m.held_bytes == 0 and len(m) == 0


def test_a_run_of_no_key_is_not_kept(tmp_path: Path) -> None:
    """A worker's run of no value (starts [0], no code) is taken (its file named and
    checked) but not kept as a run: ``runs`` stays 0 (medians.py:227)."""
    with ExactMedians(np.int64, dir=str(tmp_path)) as m:
        m.add_run(write_run(sort_by_group([], np.empty(0, np.int64), np.int64), m.run_path()))
        assert m.runs == 0 and len(m) == 0
        assert m.middles().codes.tolist() == []
        m.add_run(write_run(sort_by_group([3], [7], np.int64), m.run_path()))
        assert m.runs == 1 and m.middles().lower.tolist() == [7]


def test_a_batch_with_a_start_missing_is_refused() -> None:
    """Codes [0, 1] need three starts; starts [0, 3] rise from 0 to the 3 keys but
    are one short, and are refused (medians.py:338)."""
    good = sort_by_group([0, 0, 1], [2, 1, 5], np.int64)
    assert good.starts.tolist() == [0, 2, 3]
    with ExactMedians(np.int64) as m:
        short = good._replace(starts=np.array([0, 3]))
        with pytest.raises(UsageError, match=r"^batch must have one start per code, and one more"):
            m.add_sorted(short)
        flat = good._replace(codes=good.codes.reshape(1, 2))
        with pytest.raises(UsageError, match=r"^batch must have one start per code, and one more"):
            m.add_sorted(flat)
        assert len(m) == 0


def test_a_run_file_cut_short_is_an_error_naming_it(tmp_path: Path) -> None:
    """A run's file that lost keys after it was taken (something truncated it) is an
    OSError naming the file, not a median of the keys left (medians.py:305)."""
    with ExactMedians(np.int64, dir=str(tmp_path)) as m:
        run = write_run(sort_by_group([0, 0, 0, 0], [4, 1, 3, 2], np.int64), m.run_path())
        m.add_run(run)
        os.truncate(run.path, 8)
        with pytest.raises(OSError, match=rf"the run file {run.path} ends before key 3$"):
            m.middles()


def test_a_batch_with_a_group_of_no_key_is_refused() -> None:
    """Starts must rise strictly: code 1 with starts 2 to 2 would be a group of no
    value, whose middles do not exist (medians.py:339)."""
    good = sort_by_group([0, 0, 2], [2, 1, 5], np.int64)
    with ExactMedians(np.int64) as m:
        hollow = good._replace(codes=np.array([0, 1, 2]), starts=np.array([0, 2, 2, 3]))
        with pytest.raises(UsageError, match=r"^batch must have one start per code, and one more"):
            m.add_sorted(hollow)
        m.add_sorted(good)
        assert m.middles().counts.tolist() == [2, 1]


def test_a_batch_naming_one_code_twice_is_refused() -> None:
    """Codes must rise strictly: [0, 0] would hold group 0 in two stretches of one
    batch (medians.py:341)."""
    with ExactMedians(np.int64) as m:
        twice = SortedValues(
            np.dtype(np.int64), np.array([0, 0]), np.array([0, 1, 2]), np.array([1, 2])
        )
        with pytest.raises(UsageError, match=r"^batch codes must be >= 0 and strictly increasing"):
            m.add_sorted(twice)
        assert len(m) == 0
