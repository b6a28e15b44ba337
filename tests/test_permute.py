"""Order robustness (SPEC §8): waves in random orders, and the figures over the orders.

:func:`warmfit.replay.permute.permuted` must keep every reading (only ``seq``
changes), keep each signature's first wave first and each wave's readings in
their order, and give each stream the same order whatever else is in the
frame; :class:`~warmfit.replay.permute.OrderFold` must give the same figures
whatever the batches, and what N plain replays of the orders give.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oracle
from tests.command_line import Invoke
from tests.strategies import examples, traces
from warmfit.errors import UsageError
from warmfit.format.trace import readings_frame, write_trace
from warmfit.replay import replay, resolve_policies, result_groups
from warmfit.replay.permute import (
    MAX_PERMUTATIONS,
    ORDER_COLUMNS,
    OrderFold,
    PermuteFold,
    Waves,
    median_ignoring_nan,
    order_robustness,
    permuted,
    run_hash,
    seed_words,
    stream_generator,
)

POLICIES = ["max-merge", "warm-fit"]
STREAM = ["run", "rank"]
CANONICAL = ["run", "rank", "seq"]
PROPERTY = settings(max_examples=examples(60))
seeds = st.integers(0, 2**64 - 1)
indices = st.integers(0, 50)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    """A trace as replay takes it, each row numbered in that order (``orig``)."""
    return frame.sort(CANONICAL).with_row_index("orig")


def _streams(frame: pl.DataFrame) -> list[pl.DataFrame]:
    return frame.partition_by(STREAM, maintain_order=True)


def _first_waves(frame: pl.DataFrame) -> pl.DataFrame:
    """Per (run, rank, signature), the wave of its first reading."""
    return (
        frame.sort(CANONICAL)
        .group_by("run", "rank", "signature")
        .agg(pl.col("wave").first())
        .sort("run", "rank", "signature")
    )


def _wave_order(frame: pl.DataFrame) -> list[int]:
    """A stream's waves in the order of their first readings."""
    return frame.sort("seq").get_column("wave").unique(maintain_order=True).to_list()


# --------------------------------------------------------------------------- a worked example


def _example() -> pl.DataFrame:
    """One stream, waves 100 (A), 101 (B), 102 (A), 103 (A), 104 (B) by first reading;
    100 and 101 interleave, so do 103 and 104."""
    layout = [
        (100, "A", "forward"),
        (101, "B", "forward"),
        (100, "A", "caller"),
        (101, "B", "caller"),
        (102, "A", "forward"),
        (102, "A", "caller"),
        (103, "A", "forward"),
        (104, "B", "forward"),
        (103, "A", "caller"),
        (104, "B", "caller"),
    ]
    rows = [
        dict(seq=10 + 3 * s, wave=w, signature=g, phase=p, packed_tokens=4, logical_tokens=4,
             peak_bytes=1000 + s)
        for s, (w, g, p) in enumerate(layout)
    ]  # fmt: skip
    return readings_frame(rows).with_columns(orig=pl.Series(range(len(rows))))


def test_a_worked_example_with_the_rule_spelled_out() -> None:
    frame = _example()
    # The stream's generator is seeded by six words: seed 1 (low, high), index 0,
    # the 64-bit BLAKE2b of "run" (low, high) and rank 0.
    digest = run_hash("run")
    assert seed_words(1, 0, "run", 0) == [1, 0, 0, digest % 2**32, digest // 2**32, 0]
    # Step 1: numpy's permutation of the five waves (numbered by first reading:
    # 0=100 A, 1=101 B, 2=102 A, 3=103 A, 4=104 B) gives each wave a place.
    assert stream_generator(1, 0, "run", 0).permutation(5).tolist() == [4, 3, 0, 2, 1]
    # Step 2: A's waves 0, 2, 3 got places 4, 0, 2: the earliest, 0, went to wave 2,
    # which swaps with A's first wave 0 (0 -> place 0, 2 -> place 4). B's waves 1, 4
    # got 3, 1: wave 4 swaps with B's first wave 1 (1 -> place 1, 4 -> place 3).
    # Wave 3 keeps place 2. Places 0..4 hold waves 100, 101, 103, 104, 102.
    out = permuted(frame, 1, 0)
    assert _wave_order(out) == [100, 101, 103, 104, 102]
    # Step 3: a wave's readings together, in their order (forward, caller);
    # seq renumbered; the other columns as they were.
    assert out.get_column("orig").to_list() == [0, 2, 1, 3, 6, 8, 7, 9, 4, 5]
    assert out.get_column("seq").to_list() == list(range(10))
    assert out.get_column("phase").to_list() == ["forward", "caller"] * 5
    assert out.get_column("peak_bytes").to_list() == [1000 + i for i in out["orig"]]
    assert out.columns == frame.columns and out.schema == frame.schema


def test_each_order_is_drawn_again_for_each_index_and_seed() -> None:
    """One signature, eight waves: the first stays first, the other seven move, and
    fifty (seed, index) pairs give (nearly) fifty different orders."""
    rows = [
        dict(seq=s, wave=s, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=5)
        for s in range(8)
    ]
    frame = readings_frame(rows)
    orders = {tuple(_wave_order(permuted(frame, seed, 0))) for seed in range(50)}
    assert len(orders) >= 45 and {order[0] for order in orders} == {0}
    by_index = {tuple(_wave_order(permuted(frame, 7, index))) for index in range(50)}
    assert len(by_index) >= 45
    assert permuted(frame, 7, 3).equals(permuted(frame, 7, 3))


# --------------------------------------------------------------------------- properties


@PROPERTY
@given(traces(), seeds, indices)
def test_every_reading_is_kept_and_only_seq_changes(
    trace: pl.DataFrame, seed: int, index: int
) -> None:
    frame = _sorted(trace)
    out = permuted(frame, seed, index)
    assert out.schema == frame.schema and out.height == frame.height
    # sorted by run, rank, seq, and seq is 0 .. k-1 in each stream
    assert out.equals(out.sort(CANONICAL))
    renumbered = out.select(pl.col("seq") == pl.int_range(pl.len()).over(STREAM))
    assert renumbered.to_series().all()
    # (a) each stream holds the same readings: the same rows apart from seq
    others = [c for c in frame.columns if c != "seq"]
    assert out.select(others).sort("orig").equals(frame.select(others))
    assert out.select("run", "rank").equals(frame.select("run", "rank"))


@PROPERTY
@given(traces(), seeds, indices)
def test_first_waves_stay_first_and_waves_keep_their_readings_in_order(
    trace: pl.DataFrame, seed: int, index: int
) -> None:
    frame = _sorted(trace)
    out = permuted(frame, seed, index)
    # (b) each signature's first wave is still its first
    assert _first_waves(out).equals(_first_waves(frame))
    # (c) a wave's readings come together, in their order
    blocks = out.select(
        (pl.col("wave") != pl.col("wave").shift(1)).over(STREAM).fill_null(True).sum()
    ).item()
    assert blocks == frame.select("run", "rank", "wave").n_unique()
    in_order = out.select(
        (pl.col("orig").diff().over("run", "rank", "wave").fill_null(1) > 0).all()
    ).item()
    assert in_order


@PROPERTY
@given(traces(), seeds, indices, st.randoms(use_true_random=False))
def test_a_streams_order_depends_on_the_stream_alone(
    trace: pl.DataFrame, seed: int, index: int, random: object
) -> None:
    """(d) the same order alone, in any batch, in any row order, and again."""
    frame = _sorted(trace)
    whole = permuted(frame, seed, index)
    alone = [permuted(stream, seed, index) for stream in _streams(frame)]
    assert pl.concat([whole.clear(), *alone]).equals(whole)
    streams = _streams(frame)
    random.shuffle(streams)  # type: ignore[attr-defined]
    cut = random.randint(0, len(streams))  # type: ignore[attr-defined]
    batches = [pl.concat(part) for part in (streams[:cut], streams[cut:]) if part]
    out = pl.concat([whole.clear(), *(permuted(b, seed, index) for b in batches)])
    assert out.sort(CANONICAL).equals(whole)
    # rows in any order are sorted first; the same seed gives the same bytes
    rows = list(range(frame.height))
    random.shuffle(rows)  # type: ignore[attr-defined]
    assert permuted(frame[rows], seed, index).equals(whole)
    assert permuted(frame, seed, index).equals(whole)


def test_rows_out_of_order_are_sorted_first() -> None:
    """The worked example's rows reversed (and swapped in pairs) give the worked
    example's order: the readings are taken by run, rank and seq, not as they lie."""
    frame = _example()
    want = permuted(frame, 1, 0)
    assert want.get_column("orig").to_list() == [0, 2, 1, 3, 6, 8, 7, 9, 4, 5]
    assert permuted(frame.reverse(), 1, 0).equals(want)
    assert permuted(frame[[1, 0, 3, 2, 5, 4, 7, 6, 9, 8]], 1, 0).equals(want)


def test_an_empty_frame_stays_empty() -> None:
    frame = readings_frame([])
    assert permuted(frame, 0, 0).equals(frame)
    with OrderFold(POLICIES, "run", 2) as fold:
        fold.add(frame, resolve_policies(POLICIES))
        result = fold.finish(pl.DataFrame({"run": ["r"]}))
    assert result.rows() == [("r", p, 2, 0.0, 0, None) for p in POLICIES]


# --------------------------------------------------------------------------- the figures


def _expected(frame: pl.DataFrame, by: str, permutations: int, seed: int) -> pl.DataFrame:
    """The figures from N plain replays of the orders, with the statistics module."""
    summaries = [
        replay(permuted(frame, seed, i), POLICIES, by=by).summary for i in range(permutations)
    ]
    keys = [*result_groups(frame, by).columns, "policy"]
    rows = []
    for cells in zip(*(s.select(*keys, "under_peak", "median_over_estimate").rows() for s in summaries), strict=True):  # fmt: skip
        under = [cell[-2] for cell in cells]
        medians = [cell[-1] for cell in cells if cell[-1] is not None]
        rows.append(
            (*cells[0][: len(keys)], permutations, sum(under) / permutations, max(under),
             statistics.median(medians) if medians else None)
        )  # fmt: skip
    return pl.DataFrame(
        rows,
        schema={**dict.fromkeys(keys, pl.String), "permutations": pl.Int64,
                "under_peak_mean": pl.Float64, "under_peak_worst": pl.Int64,
                "median_over_estimate_median": pl.Float64},
        orient="row",
    )  # fmt: skip


@settings(max_examples=examples(40))
@given(traces(), st.sampled_from(["run", "signature"]), st.integers(1, 4), seeds)
def test_the_figures_are_those_of_n_plain_replays(
    trace: pl.DataFrame, by: str, permutations: int, seed: int
) -> None:
    frame = trace.sort(CANONICAL)
    result = order_robustness(frame, POLICIES, 1.1, "auto", by, permutations, seed)
    expected = _expected(frame, by, permutations, seed)
    assert result.columns == [*result_groups(frame, by).columns, "policy", *ORDER_COLUMNS]
    assert result.equals(expected)
    # rows in SummaryFold.finish's order: a plain replay's summary rows
    keys = [*result_groups(frame, by).columns, "policy"]
    assert result.select(keys).equals(replay(frame, POLICIES, by=by).summary.select(keys))
    scalar = order_robustness(frame, POLICIES, 1.1, "scalar", by, permutations, seed)
    assert scalar.equals(result)


# A fixed budget: an example replays the trace's orders three times, once spilled to
# disk stream by stream (up to 0.3 s an example).
@settings(max_examples=40)
@given(traces(), st.sampled_from(["run", "signature"]), seeds, st.randoms(use_true_random=False))
def test_batches_of_streams_give_the_figures_of_the_whole(
    trace: pl.DataFrame, by: str, seed: int, random: object
) -> None:
    frame = trace.sort(CANONICAL)
    classes = resolve_policies(POLICIES)
    groups = result_groups(frame, by)
    whole = order_robustness(frame, POLICIES, 1.1, "auto", by, 3, seed)
    streams = _streams(frame)
    random.shuffle(streams)  # type: ignore[attr-defined]
    cut = random.randint(0, len(streams))  # type: ignore[attr-defined]
    with OrderFold(POLICIES, by, 3, seed) as fold:
        for part in (streams[cut:], streams[:cut]):
            if part:
                fold.add(pl.concat(part).sort(CANONICAL), classes, 1.1, "vectorized")
        assert fold.finish(groups).equals(whole)
    # no memory share: every order's medians spilled to disk, stream by stream
    with OrderFold(POLICIES, by, 3, seed, spill_bytes=0) as fold:
        for stream in streams:
            fold.add(stream, classes, 1.1)
        assert fold.finish(groups).equals(whole)
        assert fold.finish().equals(whole)  # groups as the orders found them, sorted


def _one_wave_per_signature(trace: pl.DataFrame) -> pl.DataFrame:
    """The trace with each wave its own signature (its readings agree on it)."""
    return trace.with_columns(
        signature=pl.col("signature") + "#" + pl.col("wave").cast(pl.String)
    ).sort(CANONICAL)


@settings(max_examples=examples(40))
@given(traces(), st.sampled_from(["run", "signature"]), st.integers(1, 4), seeds)
def test_with_one_wave_per_signature_every_order_gives_the_plain_figures(
    trace: pl.DataFrame, by: str, permutations: int, seed: int
) -> None:
    """Every wave is priced from an empty profile whatever the order (and with one
    wave per signature, every order keeps each signature's first wave first)."""
    frame = _one_wave_per_signature(trace)
    result = order_robustness(frame, POLICIES, 1.1, "auto", by, permutations, seed)
    plain = replay(frame, POLICIES, by=by).summary
    assert result.get_column("permutations").to_list() == [permutations] * plain.height
    assert result["under_peak_worst"].equals(plain["under_peak"], check_names=False)
    assert result["under_peak_mean"].equals(plain["under_peak"].cast(pl.Float64), check_names=False)
    assert result["median_over_estimate_median"].equals(
        plain["median_over_estimate"], check_names=False
    )


def test_one_order_of_streams_with_one_wave_per_signature_is_a_plain_replay() -> None:
    """N=1 on a trace whose streams have one wave per signature: the plain figures."""
    rows: list[dict[str, object]] = [
        dict(rank=rank, seq=s, wave=s, signature=f"s{s}", phase=phase, whole=phase == "caller",
             packed_tokens=100 * (s + 1), logical_tokens=150 * (s + 1),
             peak_bytes=10_000 * (s + 1) + 7 * rank, static_floor_bytes=5_000 if s % 2 else None)
        for rank in range(2) for s in range(6) for phase in ("forward", "caller")
    ]  # fmt: skip
    frame = readings_frame(rows).with_columns(seq=pl.int_range(pl.len()).over("rank"))
    result = order_robustness(frame, POLICIES, 1.1, "auto", "run", 1, 42)
    plain = replay(frame, POLICIES).summary
    assert result.select("run", "policy").equals(plain.select("run", "policy"))
    assert result["under_peak_worst"].to_list() == plain["under_peak"].to_list()
    assert result["median_over_estimate_median"].to_list() == (
        plain["median_over_estimate"].to_list()
    )


def test_the_median_of_the_orders_is_the_mean_of_the_two_middle_ones() -> None:
    """Four orders of a stream whose order matters: the median over the four orders
    is (b + c) / 2 of their sorted medians, the mean and worst of under_peak too."""
    rows = [
        dict(seq=s, wave=s, signature="s", phase="caller", whole=True, packed_tokens=n,
             logical_tokens=n, peak_bytes=p)
        for s, (n, p) in enumerate([(10, 5000), (40, 9000), (20, 4000), (80, 30000), (5, 900)])
    ]  # fmt: skip
    frame = readings_frame(rows)
    result = order_robustness(frame, ["warm-fit"], 1.0, "auto", "run", 4, 3)
    each = [replay(permuted(frame, 3, i), ["warm-fit"], 1.0).summary.row(0, named=True)
            for i in range(4)]  # fmt: skip
    medians = sorted(row["median_over_estimate"] for row in each)
    under = [row["under_peak"] for row in each]
    row = result.row(0, named=True)
    assert row["median_over_estimate_median"] == (medians[1] + medians[2]) / 2
    assert row["under_peak_mean"] == sum(under) / 4
    assert row["under_peak_worst"] == max(under)


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("value", [0, -1, MAX_PERMUTATIONS + 1, 1.5, True, "3", None])
def test_permutations_must_be_an_integer_from_1_to_the_cap(value: object) -> None:
    frame = _example()
    with pytest.raises(UsageError, match=r"^permutations must be an integer") as error:
        order_robustness(frame, POLICIES, 1.1, "auto", "run", value, 0)  # type: ignore[arg-type]
    if isinstance(value, int) and not isinstance(value, bool):
        assert "from 1 to 10000" in str(error.value) and "whole replay" in str(error.value)
    with pytest.raises(UsageError, match=r"^permutations must be"):
        OrderFold(POLICIES, "run", value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 2**64, 0.0, False, "1", None])
def test_the_seed_must_be_a_non_negative_64_bit_integer(value: object) -> None:
    frame = _example()
    with pytest.raises(UsageError, match=r"^seed must be an integer"):
        permuted(frame, value, 0)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^seed must be an integer"):
        order_robustness(frame, POLICIES, 1.1, "auto", "run", 2, value)  # type: ignore[arg-type]


def test_other_arguments_are_checked_too() -> None:
    frame = _example()
    numpy_ints = permuted(frame, np.int64(5), np.uint8(1))  # type: ignore[arg-type]
    assert numpy_ints.equals(permuted(frame, 5, 1))
    with OrderFold(POLICIES, "run", MAX_PERMUTATIONS, 2**64 - 1) as fold:
        assert fold.permutations == 10_000
    with pytest.raises(UsageError, match=r"^index must be an integer"):
        permuted(frame, 0, -1)
    with pytest.raises(UsageError, match=r"^by must be one of"):
        OrderFold(POLICIES, "rank", 2)
    with pytest.raises(UsageError, match=r"^safety_factor must be"):
        order_robustness(frame, POLICIES, 0, "auto", "run", 2)
    with pytest.raises(UsageError, match=r"^engine must be one of"):
        order_robustness(frame, POLICIES, 1.1, "fast", "run", 2)
    with OrderFold(["warm-fit"], "run", 2) as fold, pytest.raises(ValueError, match="policies"):
        fold.add(frame, resolve_policies(POLICIES))


def test_the_waves_of_an_empty_frame_have_no_places() -> None:
    """No stream, no wave: every order places nothing (an empty array of places)."""
    waves = Waves.of(readings_frame([]))
    for seed, index in ((0, 0), (7, 3)):
        places = waves.places(seed, index)
        assert places.shape == (0,) and places.dtype == np.int64


def test_the_index_fills_one_word_and_the_seed_is_0_unless_given() -> None:
    """The order's index is one 32-bit word of the generator's seed: 2**32 - 1 is the
    largest, 2**32 is refused by name. OrderFold, PermuteFold and order_robustness without a seed
    take seed 0: the figures of order_robustness(..., seed=0)."""
    frame = _example()
    assert permuted(frame, 1, 2**32 - 1).height == frame.height
    with pytest.raises(UsageError, match=r"^index must be an integer from 0 to 4294967295;"):
        permuted(frame, 1, 2**32)
    # eight waves of one signature at 1,000 to 8,000 bytes a token: the figures
    # depend on the order (seeds 0 and 1 give 2.67 and 2.0 waves under their peak)
    rising = readings_frame(
        [
            dict(seq=i, wave=i, signature="s", packed_tokens=10, logical_tokens=10,
                 peak_bytes=10_000 * (i + 1), whole=True)
            for i in range(8)
        ]
    )  # fmt: skip
    classes = resolve_policies(POLICIES)
    with OrderFold(POLICIES, "run", 3) as fold:
        fold.add(rising, classes)
        default = fold.finish(result_groups(rising, "run"))
    assert fold.seed == 0
    with PermuteFold(3).start(POLICIES) as orders:
        assert orders.fold.seed == 0
    seed_0 = order_robustness(rising, POLICIES, 1.1, "auto", "run", 3, seed=0)
    assert not seed_0.equals(order_robustness(rising, POLICIES, 1.1, "auto", "run", 3, seed=1))
    assert default.equals(seed_0)
    assert order_robustness(rising, POLICIES, 1.1, "auto", "run", 3).equals(seed_0)


def test_the_streamed_orders_are_their_own_context() -> None:
    """PermuteFold.start's accumulator, used as a context manager, is itself: it holds
    an OrderFold of the PermuteFold's orders, seed and policies."""
    with PermuteFold(2, seed=5).start(POLICIES) as orders:
        assert orders.fold.permutations == 2 and orders.fold.seed == 5
        assert orders.fold.policies == tuple(POLICIES)


def test_order_robustness_takes_parts_groups_and_recorded_as_given() -> None:
    """Two runs given as two parts (whole streams) give the whole frame's figures;
    groups given are the rows' order, a group without waves a row of its own; recorded
    given False leaves the trainer's own prices out though the frame carries them."""
    rows = [
        dict(seq=i, wave=i, run=run, signature="s", packed_tokens=10, logical_tokens=10,
             peak_bytes=10_000 * (i + 1), whole=True, estimate_bytes=50_000)
        for run in ("a", "b") for i in range(4)
    ]  # fmt: skip
    frame = readings_frame(rows)
    whole = order_robustness(frame, POLICIES, 1.1, "auto", "run", 3, seed=4)
    assert whole.get_column("policy").to_list() == [*POLICIES, "recorded"] * 2
    parts = [frame.filter(pl.col("run") == run) for run in ("a", "b")]
    by_parts = order_robustness(iter(parts), POLICIES, 1.1, "auto", "run", 3, seed=4,
                                recorded=True)  # fmt: skip
    assert by_parts.equals(whole)
    groups = pl.DataFrame({"run": ["b", "z", "a"]})
    given = order_robustness(frame, POLICIES, 1.1, "auto", "run", 3, seed=4, groups=groups)
    assert given.get_column("run").to_list() == ["b"] * 3 + ["z"] * 3 + ["a"] * 3
    assert given.filter(pl.col("run") == "z").get_column("under_peak_worst").to_list() == [0] * 3
    plain = order_robustness(frame, POLICIES, 1.1, "auto", "run", 3, seed=4, recorded=False)
    assert plain.get_column("policy").to_list() == POLICIES * 2
    assert plain.equals(whole.filter(pl.col("policy") != "recorded"))


def test_a_trace_of_one_reading_has_order_figures(tmp_path: Path, invoke: Invoke) -> None:
    """One whole reading, one wave, one batch of one reading: every order is the trace's
    own, priced from an empty profile (no estimate): no wave under its peak."""
    rows = [dict(seq=0, wave=0, signature="s", packed_tokens=10, logical_tokens=10,
                 peak_bytes=10_000, whole=True)]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "one.parquet")
    code, out, err = invoke("replay", str(tmp_path), "-p", "max-merge", "--permute", "3",
                            "-f", "json")  # fmt: skip
    assert code == 0, err
    text = json.dumps(json.loads(out))
    assert '"permutations": 3' in text and '"under_peak_worst": 0' in text


def test_the_seed_of_permute_is_taken_and_refused_alone(tmp_path: Path, invoke: Invoke) -> None:
    """``--permute 3 --seed 7`` replays (the seed chooses the orders); ``--seed 7``
    without ``--permute`` is refused, naming what to add."""
    trace = str(Path(__file__).resolve().parent.parent / "traces" / "pr991")
    code, out, err = invoke("replay", trace, "-p", "max-merge", "--permute", "3", "--seed", "7",
                            "-f", "json")  # fmt: skip
    assert code == 0, err
    assert '"permutations": 3' in json.dumps(json.loads(out))
    code, out, err = invoke("replay", trace, "-p", "max-merge", "--seed", "7")
    assert (code, out) == (2, "")
    assert "--seed chooses the orders of --permute; give --permute N with it." in err


def test_permute_by_signature_gives_each_result_its_own_orders(
    tmp_path: Path, invoke: Invoke
) -> None:
    """--by signature --permute: one row per run, signature and policy, as without
    --permute, each joined to the orders of its own signature."""
    rows = [
        dict(seq=i, wave=i, signature=s, packed_tokens=100 * (i + 1), logical_tokens=100 * (i + 1),
             peak_bytes=(7 if s == "a" else 3) * 1000 * (i + 1) + 50_000, whole=True)
        for i, s in enumerate("abab")
    ]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    base = ["replay", str(tmp_path), "-p", "max-merge", "--by", "signature", "-f", "json"]
    code, plain, err = invoke(*base)
    assert code == 0, err
    code, out, err = invoke(*base, "--permute", "2")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert [(r["run"], r["signature"]) for r in results] == [("run", "a"), ("run", "b")]
    assert len(results) == len(json.loads(plain)["results"])


# --- issue 38, tests by pattern (s5) ---


def _plain_orders(frame: pl.DataFrame, seed: int, index: int) -> dict[tuple[str, int], list[int]]:
    """Per (run, rank) stream, its wave ids in the ``index``-th order for ``seed``, computed
    from the module docstring alone: six words (the seed's low and high 32 bits, the
    index, the low and high 32 bits of the run's 8-byte BLAKE2b read little-endian, the
    rank) seed numpy's generator; its permutation gives each wave (numbered by first
    reading) a place; each signature's first wave swaps places with the one of its
    signature that got the earliest."""
    import hashlib

    orders = {}
    for (run, rank), stream in frame.sort(CANONICAL).group_by(STREAM, maintain_order=True):
        firsts = stream.unique("wave", keep="first", maintain_order=True)
        waves, sigs = firsts["wave"].to_list(), firsts["signature"].to_list()
        h = int.from_bytes(hashlib.blake2b(str(run).encode(), digest_size=8).digest(), "little")
        words = [seed & 0xFFFF_FFFF, seed >> 32, index, h & 0xFFFF_FFFF, h >> 32, int(rank)]
        slot = np.random.default_rng(np.random.SeedSequence(words)).permutation(len(waves))
        for sig in dict.fromkeys(sigs):
            mine = [j for j, s in enumerate(sigs) if s == sig]
            earliest = min(mine, key=lambda j: slot[j])
            slot[mine[0]], slot[earliest] = slot[earliest], slot[mine[0]]
        orders[(str(run), int(rank))] = [waves[j] for j in np.argsort(slot)]
    return orders


@st.composite
def _rank_streams(draw: st.DrawFn) -> pl.DataFrame:
    """1-2 runs of 1-3 ranks; a rank now and then a copy of another (the same waves:
    only the rank tells their orders apart), now and then of one wave; 1-2 signatures;
    a wave's one or two readings interleaved with the others'."""
    rows: list[dict[str, object]] = []
    for run in draw(st.sampled_from([["A"], ["A", "ü"], ["run"]])):
        streams: list[list[dict[str, object]]] = []
        for rank in draw(st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)):
            if streams and draw(st.booleans()):
                streams.append([{**row, "rank": rank} for row in streams[0]])
                continue
            count = draw(st.sampled_from([1, 1, 2]) | st.integers(1, 7))
            readings = [
                (w, r, draw(st.sampled_from(["s", "t"])))
                for w in range(count)
                for r in range(draw(st.integers(1, 2)))
            ]
            sig = {w: s for w, _, s in readings if _ == 0}
            ids = draw(st.permutations(range(count)))
            rates = [draw(st.sampled_from([500, 1_000, 1_500])) for _ in range(count)]
            placed = draw(st.permutations(readings))
            streams.append([
                dict(run=run, rank=rank, seq=i, wave=ids[w] * 3 + 1, signature=sig[w],
                     phase="forward" if r == 0 else "caller", packed_tokens=1 + w,
                     logical_tokens=1 + w, peak_bytes=rates[w] * (1 + w) + r)
                for i, (w, r, _) in enumerate(placed)
            ])  # fmt: skip
        rows += [row for stream in streams for row in stream]
    return readings_frame(rows)


@PROPERTY
@given(
    _rank_streams(),
    seeds | st.sampled_from([0, 2**32 - 1, 2**32, 2**32 + 1, 2**64 - 1]),
    st.integers(0, 3) | st.sampled_from([2**32 - 1]),
)
def test_each_streams_order_is_the_docstrings_rule_computed_plainly(
    frame: pl.DataFrame, seed: int, index: int
) -> None:
    """Seeds at the word edges, the last index, several ranks of a run (copies of one
    another too: each rank its own order), one-wave streams: every stream's waves come
    in the order the rule gives, each wave's readings together."""
    out = permuted(frame, seed, index)
    want = _plain_orders(frame, seed, index)
    for (run, rank), stream in out.group_by(STREAM, maintain_order=True):
        waves = stream["wave"].to_list()
        assert waves == sorted(waves, key=waves.index), "a wave's readings apart"
        assert _wave_order(stream) == want[(str(run), int(rank))], (run, rank)


def test_two_copies_of_a_stream_on_two_ranks_get_their_own_orders() -> None:
    """Ranks 0 and 1 hold the same six waves of one signature: with seed 0, index 0 their
    orders differ (the rank is a word of the seed), each as the rule gives it."""
    rows = [
        dict(rank=rank, seq=s, wave=s, signature="s", packed_tokens=1, logical_tokens=1,
             peak_bytes=5)
        for rank in (0, 1) for s in range(6)
    ]  # fmt: skip
    frame = readings_frame(rows)
    out = permuted(frame, 0, 0)
    orders = {rank: _wave_order(out.filter(pl.col("rank") == rank)) for rank in (0, 1)}
    want = _plain_orders(frame, 0, 0)
    assert orders == {0: want[("run", 0)], 1: want[("run", 1)]}
    assert orders[0] != orders[1] and orders[0][0] == orders[1][0] == 0


@given(
    st.integers(1, 6).flatmap(
        lambda width: st.lists(
            st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.5, 2.5]) | st.just(np.nan),
                     min_size=width, max_size=width),
            min_size=1, max_size=4,
        )
    )
)  # fmt: skip
def test_the_median_ignoring_nan_is_statistics_median(rows: list[list[float]]) -> None:
    """Each row's count of values (not NaN) even or odd, ties, all NaN: the median of
    what is there (for an even count the mean of the lower and upper middle values,
    neither one alone), null where nothing is."""
    got = median_ignoring_nan(np.array(rows)).to_list()
    want = []
    for row in rows:
        values = [v for v in row if not np.isnan(v)]
        want.append(statistics.median(values) if values else None)
    assert got == want


def _null_or_not() -> pl.DataFrame:
    """One stream of one signature: wave 0 ran out of memory (no profile learned), then
    a wave of 1,000 bytes and one whose peak stays at its baseline (actual 0, rate 0).
    Wave 0 stays first; the orders of 1 and 2 differ: with 1 before 2, wave 1 is
    unpriced and wave 2 priced but actual 0, so no wave is a figure (median null); with
    2 before 1, wave 1 is priced at 0 bytes (rate 0): over-estimate -1.0."""
    rows = [
        dict(seq=0, wave=0, signature="s", phase="forward", packed_tokens=10,
             logical_tokens=10, peak_bytes=5_000, oom=True),
        dict(seq=1, wave=1, signature="s", phase="caller", whole=True, packed_tokens=10,
             logical_tokens=10, peak_bytes=1_000),
        dict(seq=2, wave=2, signature="s", phase="caller", whole=True, packed_tokens=10,
             logical_tokens=10, baseline_bytes=500, peak_bytes=500),
    ]  # fmt: skip
    return readings_frame(rows)


@pytest.mark.parametrize(
    ("permutations", "seed", "medians"),
    [(4, 0, [None, None, -1.0, -1.0]), (5, 3, [None, None, None, -1.0, None])],
)
def test_orders_with_no_median_are_left_out_of_the_median_over_orders(
    permutations: int, seed: int, medians: list[float | None]
) -> None:
    """Among the orders of :func:`_null_or_not` some have no median over-estimate (null)
    and some -1.0: the median over the orders is -1.0, of the orders that have one (nulls
    counted as 0 would give -0.5 of the four orders, 0.0 of the five)."""
    frame = _null_or_not()
    each = [
        replay(permuted(frame, seed, i), ["max-merge"]).summary["median_over_estimate"][0]
        for i in range(permutations)
    ]
    assert each == medians
    result = order_robustness(frame, ["max-merge"], 1.0, "auto", "run", permutations, seed)
    assert result["median_over_estimate_median"].to_list() == [-1.0]


#: The word-for-word refusals of the order arguments: (function's value, the message).
_WHOLE = " (each order is one more whole replay of the trace, and keeps its own summary until the end)"  # fmt: skip
_SEED = " (it is taken as a 64-bit number)"
REFUSALS = [
    ("permutations", 0, f"permutations must be an integer from 1 to 10000{_WHOLE}; got 0."),
    ("permutations", 10_001, f"permutations must be an integer from 1 to 10000{_WHOLE}; got 10001."),
    ("permutations", 1.5, "permutations must be an integer; got 1.5."),
    ("permutations", True, "permutations must be an integer; got True."),
    ("seed", -1, f"seed must be an integer from 0 to 18446744073709551615{_SEED}; got -1."),
    ("seed", 2**64, f"seed must be an integer from 0 to 18446744073709551615{_SEED}; got 18446744073709551616."),
    ("seed", "1", "seed must be an integer; got '1'."),
    ("index", -1, "index must be an integer from 0 to 4294967295; got -1."),
    ("index", 2**32, "index must be an integer from 0 to 4294967295; got 4294967296."),
    ("index", None, "index must be an integer; got None."),
]  # fmt: skip


@pytest.mark.parametrize(("argument", "value", "message"), REFUSALS)
def test_each_order_argument_is_refused_word_for_word(
    argument: str, value: object, message: str
) -> None:
    """The whole message, naming the argument, its range and why, and the value given;
    and the same on the command line for --permute and --seed, exit 2, nothing printed."""
    frame = _example()
    calls = {
        "permutations": lambda: order_robustness(frame, POLICIES, 1.1, "auto", "run", value, 0),
        "seed": lambda: permuted(frame, value, 0),  # type: ignore[arg-type]
        "index": lambda: permuted(frame, 0, value),  # type: ignore[arg-type]
    }
    with pytest.raises(UsageError) as error:
        calls[argument]()
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--permute", "0"], f"--permute must be an integer from 1 to 10000{_WHOLE}; got 0."),
        (["--permute", "10001"], f"--permute must be an integer from 1 to 10000{_WHOLE}; got 10001."),
        (["--permute", "2", "--seed", "-1"],
         f"--seed must be an integer from 0 to 18446744073709551615{_SEED}; got -1."),
        (["--permute", "2", "--seed", str(2**64)],
         f"--seed must be an integer from 0 to 18446744073709551615{_SEED}; got 18446744073709551616."),
    ],
)  # fmt: skip
def test_permute_and_seed_are_refused_word_for_word_on_the_command_line(
    args: list[str], message: str, invoke: Invoke
) -> None:
    trace = str(Path(__file__).resolve().parent.parent / "traces" / "pr991")
    code, out, err = invoke("replay", trace, "-p", "max-merge", *args)
    assert (code, out, err) == (2, "", f"warmfit: error: {message}\n")


def test_a_fold_refuses_other_policies_naming_both() -> None:
    with OrderFold(["warm-fit"], "run", 2) as fold, pytest.raises(ValueError) as error:
        fold.add(_example(), resolve_policies(POLICIES))
    assert str(error.value) == "policies ('max-merge', 'warm-fit') are not the fold's ('warm-fit',)"


@settings(max_examples=examples(30))
@given(_rank_streams(), st.sampled_from([2, 4]) | st.integers(1, 5), seeds)
def test_the_order_figures_are_plain_replays_of_the_plainly_computed_orders(
    frame: pl.DataFrame, permutations: int, seed: int
) -> None:
    """Each order laid out from :func:`_plain_orders` and replayed by :mod:`tests.oracle`
    (no warmfit code): the mean and the worst of under_peak over the orders, and the
    median (an even count of orders as often as an odd) of their medians, nulls left out."""
    rows = frame.to_dicts()
    per_order = []
    for index in range(permutations):
        laid: list[dict[str, object]] = []
        for (run, rank), waves in _plain_orders(frame, seed, index).items():
            mine = sorted(
                (r for r in rows if r["run"] == run and r["rank"] == rank),
                key=lambda r: int(r["seq"]),  # type: ignore[call-overload]
            )
            stream = [r for w in waves for r in mine if r["wave"] == w]
            laid += [{**r, "seq": place} for place, r in enumerate(stream)]
        summary = oracle.replay(laid, POLICIES, 1.1).summary
        per_order.append({(s["run"], s["policy"]): s for s in summary})
    result = order_robustness(frame, POLICIES, 1.1, "auto", "run", permutations, seed)
    assert result.height == len(per_order[0])
    for row in result.iter_rows(named=True):
        each = [order[(row["run"], row["policy"])] for order in per_order]
        under = [int(s["under_peak"]) for s in each]
        medians = [s["median_over_estimate"] for s in each if s["median_over_estimate"] is not None]
        assert row["permutations"] == permutations
        assert row["under_peak_mean"] == sum(under) / permutations, row
        assert row["under_peak_worst"] == max(under), row
        if medians:
            assert row["median_over_estimate_median"] == pytest.approx(
                statistics.median(medians), rel=1e-12
            ), row
        else:
            assert row["median_over_estimate_median"] is None, row


# --- fresh audit of 12-06 (fa6) ---


def test_replay_permute_on_the_command_line_takes_orders_from_index_0(
    tmp_path: Path, invoke: Invoke
) -> None:
    """``replay --permute 1 --seed 7`` replays each batch's orders where the batch is
    (PermuteFold, not OrderFold.add): its one order is ``permuted(frame, 7, 0)``, as
    order_robustness takes it. One stream of six waves of one signature: order 0 of seed
    7 has a median over-estimate of 0.7286 (51/70) for both policies, order 1 one of
    0.5714 (4/7), so an off-by-one in the streamed path's indices shows."""
    sizes = [(100, 150_000), (400, 420_000), (200, 330_000), (800, 700_000), (300, 310_000),
             (600, 900_000)]  # fmt: skip
    rows = [dict(seq=i, wave=i, signature="a", packed_tokens=n, logical_tokens=n,
                 peak_bytes=peak, whole=True) for i, (n, peak) in enumerate(sizes)]  # fmt: skip
    frame = readings_frame(rows)
    write_trace(frame, tmp_path / "t.parquet")
    medians = [
        replay(permuted(frame, 7, index), POLICIES, 1.1, "auto", "run")
        .summary.get_column("median_over_estimate")
        .to_list()
        for index in (0, 1)
    ]
    assert medians[0] == [pytest.approx(51 / 70, rel=1e-12)] * 2
    assert medians[1] == [pytest.approx(4 / 7, rel=1e-12)] * 2
    code, out, err = invoke("replay", str(tmp_path), "-p", "max-merge", "-p", "warm-fit",
                            "--permute", "1", "--seed", "7", "-f", "json")  # fmt: skip
    assert code == 0, err
    results = json.loads(out)["results"]
    expected = order_robustness(frame, POLICIES, 1.1, "auto", "run", 1, 7)
    assert [r["policy"] for r in results] == POLICIES
    for result, row in zip(results, expected.to_dicts(), strict=True):
        assert {k: result[k] for k in ORDER_COLUMNS} == {k: row[k] for k in ORDER_COLUMNS}
        assert result["median_over_estimate_median"] == pytest.approx(51 / 70, rel=1e-12)
        assert (result["permutations"], result["under_peak_worst"]) == (1, 0)
