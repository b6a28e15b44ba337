"""Order robustness (SPEC §8): replay each stream with its waves in random orders.

A policy whose figures hold only for the order the trace happened to come in
is fragile. :func:`permuted` gives the readings with each ``(run, rank)``
stream's waves in a random order; :class:`OrderFold` replays N such orders
and folds, per result and policy, how many waves came under their peak (the
mean and the worst over the orders) and the median over the orders of the
median over-estimate; :func:`order_robustness` does both for a trace in
memory.

The order of one stream
-----------------------

The waves of a stream are numbered ``0 .. k-1`` in the order of their first
readings. The stream's generator is
``numpy.random.default_rng(SeedSequence(words))``, ``words`` six 32-bit
numbers: the seed's low and high halves, the permutation's index, the two
halves of a stable 64-bit hash of the run label (BLAKE2b, 8-byte digest, of
its UTF-8 bytes) and the rank. Each number fills one word, so no two
``(seed, index, run, rank)`` give the same words unless two labels share a
hash. The order therefore depends on those four alone: never on which other
streams are in the frame, so that a replay in batches of streams, in any
grouping, on any number of processes, gives the same bytes.

1. ``slot = rng.permutation(k)``: the wave numbered ``j`` goes to place
   ``slot[j]``.
2. **First wave stays first**: for each signature, its first wave (the wave
   holding the signature's first reading in the stream) swaps places with
   whichever of the signature's waves got the earliest place among them
   (with itself, when it got it already). Places of other signatures' waves
   do not move, so the signature's first wave comes before its other waves
   again, while where a signature starts among other signatures' waves is
   random.
3. The readings are laid out wave after wave in place order, a wave's
   readings in their own order (a wave's readings were interleaved with
   other waves' in the original stream, as forwards nest in a training
   loop; here each wave's readings come together), and ``seq`` is
   renumbered ``0 .. n-1`` in the stream. Every other column is unchanged.

With one wave per signature in a stream, step 2 changes nothing and any
order gives the same figures as the trace's own: each wave is priced from
an empty profile of its signature.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from warmfit.errors import UsageError
from warmfit.format.schema import ESTIMATE_COLUMN
from warmfit.format.trace import in_canonical_order, signature_codes, stream_numbers, wave_order
from warmfit.policies import Policy
from warmfit.replay.engines import (
    choose_engine,
    fold_priced,
    lineup_names,
    price,
    resolve_lineup,
)
from warmfit.replay.medians import DEFAULT_SPILL_BYTES
from warmfit.replay.semantics import DEFAULT_SAFETY_FACTOR, check_safety_factor
from warmfit.replay.summary import (
    FoldPart,
    SummaryFold,
    fold_part,
    group_keys,
    number_groups,
    result_groups,
)

#: The most orders one replay may take: each order is one more whole replay
#: of the trace and keeps one more summary (its medians' values) until the end.
MAX_PERMUTATIONS = 10_000
#: Seeds are taken as 64-bit numbers (two words of the generator's seed).
MAX_SEED = 2**64 - 1
#: Columns :meth:`OrderFold.finish` adds after the group keys and ``policy``.
ORDER_COLUMNS = (
    "permutations",
    "under_peak_mean",
    "under_peak_worst",
    "median_over_estimate_median",
)

_WORD = 2**32
#: The least memory share of one order's median, by default (see :class:`OrderFold`).
_LEAST_SHARE = 64 * 2**10


def _integer(value: object, argument: str, low: int, high: int, why: str = "") -> int:
    """``value`` as an int in ``[low, high]``, or a UsageError naming ``argument``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise UsageError(f"must be an integer; got {value!r}.", argument=argument)
    number = int(value)
    if not low <= number <= high:
        raise UsageError(
            f"must be an integer from {low} to {high}{why}; got {number}.", argument=argument
        )
    return number


def check_permutations(permutations: object) -> int:
    """The number of orders, checked: an integer from 1 to :data:`MAX_PERMUTATIONS`.

    >>> check_permutations(20)
    20
    >>> check_permutations(0)
    Traceback (most recent call last):
    ...
    warmfit.errors.UsageError: permutations must be an integer from 1 to 10000 (each order is one more whole replay of the trace, and keeps its own summary until the end); got 0.
    """
    return _integer(
        permutations,
        "permutations",
        1,
        MAX_PERMUTATIONS,
        " (each order is one more whole replay of the trace, and keeps its own summary "
        "until the end)",
    )


def check_seed(seed: object) -> int:
    """The seed, checked: an integer from 0 to 2**64 - 1 (it fills two 32-bit words)."""
    return _integer(seed, "seed", 0, MAX_SEED, " (it is taken as a 64-bit number)")


def run_hash(run: str) -> int:
    """A stable 64-bit hash of a run label (BLAKE2b of its UTF-8 bytes, 8 bytes).

    >>> run_hash("run")
    10773672743070944251
    """
    digest = hashlib.blake2b(run.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def seed_words(seed: int, index: int, run: str, rank: int) -> list[int]:
    """The six 32-bit words that seed the generator of one stream's order.

    >>> seed_words(2**32 + 5, 3, "run", 7)
    [5, 1, 3, 1225608187, 2508441159, 7]
    """
    return _words(seed, index, run_hash(run), rank)


def _words(seed: int, index: int, hashed: int, rank: int) -> list[int]:
    return [seed % _WORD, seed // _WORD, index, hashed % _WORD, hashed // _WORD, rank]


def stream_generator(seed: int, index: int, run: str, rank: int) -> np.random.Generator:
    """The generator of the ``index``-th order of stream ``(run, rank)`` for ``seed``."""
    return np.random.default_rng(np.random.SeedSequence(seed_words(seed, index, run, rank)))


@dataclass(frozen=True)
class Waves:
    """How the readings of whole streams lie in waves, found once for every order.

    Waves are numbered stream by stream, within a stream in the order of their
    first readings.
    """

    #: The readings, sorted by run, rank, seq.
    readings: pl.DataFrame
    #: Per reading, its wave's number.
    wave: np.ndarray
    #: Per wave, its stream's number and its signature's code.
    stream: np.ndarray
    signature: np.ndarray
    #: Per stream, its run and rank, its first wave and its first reading.
    runs: list[str]
    ranks: list[int]
    first_wave: np.ndarray
    first_reading: np.ndarray
    #: Per (stream, signature) group of waves: its waves, by stream, signature
    #: and wave number, and where each group starts in that order.
    by_group: np.ndarray
    group_starts: np.ndarray

    @classmethod
    def of(cls, readings: pl.DataFrame) -> Waves:
        """The waves of ``readings`` (sorted by run, rank, seq here where they are not)."""
        stream = stream_numbers(readings).astype(np.int64)
        if not in_canonical_order(readings, stream):
            readings = readings.sort(["run", "rank", "seq"], maintain_order=True)
            stream = stream_numbers(readings).astype(np.int64)
        height = readings.height
        ids = readings.get_column("wave").cast(pl.Int64).to_numpy()
        order = wave_order(stream, ids)
        if order is None:
            order = np.arange(height)
        sorted_stream, sorted_ids = stream[order], ids[order]
        new = np.ones(height, dtype=bool)
        new[1:] = (sorted_stream[1:] != sorted_stream[:-1]) | (sorted_ids[1:] != sorted_ids[:-1])
        # the order is stable: a wave's first row in it is the wave's first reading
        first_row = order[new]
        by_first = np.argsort(first_row, kind="stable")
        number = np.empty(len(first_row), dtype=np.int64)
        number[by_first] = np.arange(len(first_row))
        wave = np.empty(height, dtype=np.int64)
        wave[order] = number[np.cumsum(new) - 1]
        first_row = first_row[by_first]
        wave_stream = stream[first_row]
        wave_signature = signature_codes(readings)[first_row] if height else first_row
        heads = np.flatnonzero(np.diff(stream, prepend=-1)) if height else first_row
        keys = readings.select("run", "rank")[heads]
        first_wave = np.flatnonzero(np.diff(wave_stream, prepend=-1))
        by_group = np.lexsort((wave_signature, wave_stream))  # stable: by wave within
        grouped = wave_stream[by_group] * (int(wave_signature.max(initial=0)) + 1)
        grouped += wave_signature[by_group]
        group_starts = np.flatnonzero(np.diff(grouped, prepend=-1))
        return cls(
            readings, wave, wave_stream, wave_signature,
            keys.get_column("run").to_list(), keys.get_column("rank").to_list(),
            first_wave, heads, by_group, group_starts,
        )  # fmt: skip

    def places(self, seed: int, index: int) -> np.ndarray:
        """Per wave, its place within the frame in the ``index``-th order (steps 1
        and 2): the places of a stream's waves are its first wave's number onwards."""
        counts = np.diff(np.append(self.first_wave, len(self.stream)))
        hashes = {run: run_hash(run) for run in set(self.runs)}  # each run hashed once
        parts = []
        for run, rank, count in zip(self.runs, self.ranks, counts, strict=True):
            words = _words(seed, index, hashes[run], rank)  # as seed_words gives them
            rng = np.random.default_rng(np.random.SeedSequence(words))
            parts.append(rng.permutation(int(count)))
        place = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        place += self.first_wave[self.stream]
        # the wave at each place; each (stream, signature) group's earliest place
        # and its first wave (the group's first by wave number)
        at = np.empty_like(place)
        at[place] = np.arange(len(place))
        earliest = at[np.minimum.reduceat(place[self.by_group], self.group_starts)]
        first = self.by_group[self.group_starts]
        fixed = place.copy()
        fixed[first] = place[earliest]
        fixed[earliest] = place[first]
        return fixed

    def permuted(self, seed: int, index: int) -> pl.DataFrame:
        """The readings in the ``index``-th order for ``seed`` (step 3)."""
        if self.readings.height == 0:
            return self.readings
        rows = np.argsort(self.places(seed, index)[self.wave], kind="stable")
        seq = np.arange(len(rows), dtype=np.int64)
        seq -= np.repeat(self.first_reading, np.diff(np.append(self.first_reading, len(rows))))
        dtype = self.readings.schema["seq"]
        return self.readings[rows].with_columns(pl.Series("seq", seq).cast(dtype))


def permuted(readings: pl.DataFrame, seed: int, index: int) -> pl.DataFrame:
    """Validated readings with each ``(run, rank)`` stream's waves in the ``index``-th
    random order for ``seed`` (SPEC §8; the rule is in this module's docstring).

    Each signature's first wave stays its first; a wave's readings keep their
    order; ``seq`` is renumbered ``0 .. n-1`` per stream; rows come sorted by
    run, rank, seq; every other column is unchanged. A stream's order depends
    on ``seed``, ``index``, its run and its rank only.

    >>> from warmfit.format.trace import readings_frame
    >>> frame = readings_frame([dict(seq=s, wave=w, signature=g, packed_tokens=1,
    ...     logical_tokens=1, peak_bytes=1) for s, (w, g) in enumerate(
    ...     [(10, "a"), (11, "b"), (12, "a"), (13, "a")])])
    >>> stream_generator(0, 0, "run", 0).permutation(4).tolist()  # step 1: places
    [0, 3, 1, 2]
    >>> permuted(frame, 0, 0).select("seq", "wave").rows()  # no swap: 10 came earliest of "a"
    [(0, 10), (1, 12), (2, 13), (3, 11)]
    """
    seed = check_seed(seed)
    index = _integer(index, "index", 0, _WORD - 1)
    return Waves.of(readings).permuted(seed, index)


class OrderFold:
    """SPEC §8's order figures over ``permutations`` orders, folded part by part.

    A part is a frame of whole ``(run, rank)`` streams; parts may come in any
    order and any grouping, and :meth:`finish` gives the same frame. Each
    order ``i`` has its own :class:`SummaryFold`; :meth:`add` replays
    :func:`permuted` ``(part, seed, i)`` into it. Use it as a context manager,
    or call :meth:`close`.

    ``spill_bytes`` bounds the medians' values held in memory by all the
    orders together, each order's two medians getting an equal share, as
    :class:`SummaryFold`'s bounds one summary's. By default the orders
    together hold what one replay's summary holds (twice
    :data:`~warmfit.replay.medians.DEFAULT_SPILL_BYTES`), each median at
    least 64 KiB (so that thousands of orders do not spill tiny runs).
    """

    def __init__(
        self,
        policies: Sequence[str],
        by: str,
        permutations: int,
        seed: int = 0,
        spill_bytes: int | None = None,
    ) -> None:
        self.policies = tuple(policies)
        self.by = by
        self.keys = group_keys(by)
        self.permutations = check_permutations(permutations)
        self.seed = check_seed(seed)
        if spill_bytes is None:  # what one replay's two medians hold, shared out
            share = max(2 * DEFAULT_SPILL_BYTES // (2 * self.permutations), _LEAST_SHARE)
        else:
            share = spill_bytes // (2 * self.permutations)
        self._folds: list[SummaryFold] = []
        try:
            for _ in range(self.permutations):
                self._folds.append(SummaryFold(self.policies, by, None, share))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> OrderFold:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove what every order's medians spilled to disk."""
        for fold in self._folds:
            fold.close()

    def add(
        self,
        readings: pl.DataFrame,
        classes: Sequence[type[Policy]],
        safety_factor: float = DEFAULT_SAFETY_FACTOR,
        engine: str = "auto",
        recorded: bool = False,
    ) -> None:
        """Replay each order of ``readings`` (whole streams, validated) through
        ``classes`` (the fold's policies, in its order; with ``recorded``, the policy
        ``recorded`` last: the trainer's prices travel with their waves)
        and fold its waves in.
        ``engine``: ``auto``, ``scalar`` or ``vectorized`` (:func:`choose_engine`)."""
        names = tuple(lineup_names(classes, recorded))
        if names != self.policies:
            raise ValueError(f"policies {names} are not the fold's {self.policies}")
        safety_factor = check_safety_factor(safety_factor)
        chosen = choose_engine(engine, classes)
        if readings.height == 0:
            return
        waves = Waves.of(readings)
        for index, fold in enumerate(self._folds):
            order = waves.permuted(self.seed, index)
            priced = price(order, classes, safety_factor, chosen, self.by, False, recorded=recorded)
            fold_priced(fold, priced)

    def add_parts(self, parts: Sequence[FoldPart]) -> None:
        """Fold in each order's :func:`~warmfit.replay.summary.fold_part` of some streams
        (:class:`PermuteFold`: made where their batch was replayed)."""
        for fold, part in zip(self._folds, parts, strict=True):
            fold.add_part(part)

    def finish(self, groups: pl.DataFrame | None = None) -> pl.DataFrame:
        """Per group and policy, in :meth:`SummaryFold.finish`'s row order: the group
        keys, ``policy`` and :data:`ORDER_COLUMNS`.

        ``under_peak_mean`` is the mean over the orders of the group's
        ``under_peak``, ``under_peak_worst`` the largest;
        ``median_over_estimate_median`` the median (the mean of the two
        middle values for an even count) of its ``median_over_estimate`` over
        the orders where it is not null, null where it is null in all.
        """
        summaries = []
        for fold in self._folds:
            summary = fold.finish(groups)
            if groups is None:  # every order has the same waves, so the same groups
                groups = summary.select(self.keys).unique(maintain_order=True)
            summaries.append(summary)
        first = summaries[0]
        under = np.column_stack([s.get_column("under_peak").to_numpy() for s in summaries])
        medians = np.column_stack(
            [
                s.get_column("median_over_estimate").cast(pl.Float64).fill_null(np.nan).to_numpy()
                for s in summaries
            ]
        )
        return first.select(*self.keys, "policy").with_columns(
            permutations=pl.lit(self.permutations, dtype=pl.Int64),
            under_peak_mean=pl.Series(under.sum(axis=1) / self.permutations, dtype=pl.Float64),
            under_peak_worst=pl.Series(under.max(axis=1), dtype=pl.Int64),
            median_over_estimate_median=median_ignoring_nan(medians),
        )


@dataclass(frozen=True)
class PermuteFold:
    """``--permute`` as a part of the one streamed replay (:class:`warmfit.replay.stream.Fold`):
    each batch's streams replayed in each of ``permutations`` orders where the batch is
    replayed (a worker), their figures folded per order here (:class:`StreamedOrders`).
    ``by``: the replay's grouping."""

    permutations: int
    seed: int = 0
    by: str = "run"
    wants_rows: bool = False
    wants_profiles: bool = False

    def part(
        self, readings: pl.DataFrame, priced: Any, profiles: Any, lineup: Any
    ) -> list[FoldPart]:
        if readings.height == 0:
            return []
        waves = Waves.of(readings)
        count = len(lineup.classes) + lineup.recorded
        parts = []
        for index in range(self.permutations):
            order = waves.permuted(self.seed, index)
            p = price(
                order, lineup.classes, lineup.safety_factor, lineup.engine, lineup.by, False,
                recorded=lineup.recorded,
            )  # fmt: skip
            group, keys = number_groups(p.groups)
            part = fold_part(
                group, keys, p.actual, p.oom, p.estimate, p.set_by, p.beyond, count,
                unscaled=p.unscaled,
            )  # fmt: skip
            parts.append(part)
        return parts

    def start(self, policies: Sequence[str]) -> StreamedOrders:
        return StreamedOrders(OrderFold(policies, self.by, self.permutations, self.seed))


class StreamedOrders:
    """:class:`PermuteFold`'s parts folded per order into an :class:`OrderFold`, closed
    (its spilled medians removed) when the replay ends."""

    def __init__(self, fold: OrderFold) -> None:
        self.fold = fold

    def __enter__(self) -> StreamedOrders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fold.close()

    def add(self, parts: list[FoldPart]) -> None:
        self.fold.add_parts(parts)

    def finish(self, summary: pl.DataFrame) -> pl.DataFrame:
        """The order figures, per result of ``summary`` (:meth:`OrderFold.finish`)."""
        return self.fold.finish(summary.select(self.fold.keys).unique(maintain_order=True))


def median_ignoring_nan(values: np.ndarray) -> pl.Series:
    """Per row of a 2-D array, the median of its values that are not NaN (the mean
    of the two middle ones, ``(a + b) / 2``, for an even count); null where none is.

    >>> median_ignoring_nan(np.array([[1.0, np.nan, 3.0, 2.0, 10.0], [np.nan] * 5])).to_list()
    [2.5, None]
    """
    ordered = np.sort(values, axis=1)  # NaN sorts last
    count = (~np.isnan(ordered)).sum(axis=1)
    rows = np.arange(len(ordered))
    lower = ordered[rows, np.maximum(count - 1, 0) // 2]
    upper = ordered[rows, count // 2]
    median = (lower + upper) / 2
    return pl.Series(median, dtype=pl.Float64).scatter(np.flatnonzero(count == 0), None)


def order_robustness(
    readings: pl.DataFrame | Iterable[pl.DataFrame],
    policies: Sequence[str | type[Policy]] | None,
    safety_factor: float,
    engine: str,
    by: str,
    permutations: int,
    seed: int = 0,
    *,
    groups: pl.DataFrame | None = None,
    spill_bytes: int | None = None,
    recorded: bool | None = None,
) -> pl.DataFrame:
    """:class:`OrderFold`'s frame for a trace: validated readings in memory, or parts of
    whole ``(run, rank)`` streams one after another (``warmfit replay --permute`` reads
    them batch by batch). Per result and policy, the order figures of SPEC §8 over
    ``permutations`` orders for ``seed``; results as ``groups`` lists them (default: a
    frame's :func:`result_groups`, sorted; the parts' groups in the order met).
    ``spill_bytes``: as :class:`OrderFold` takes it. ``recorded``: whether the trace
    carries ``estimate_bytes`` (SPEC §8), so that the policy ``recorded`` is reported;
    None: a frame's columns say, parts say no."""
    safety_factor = check_safety_factor(safety_factor)
    if isinstance(readings, pl.DataFrame):
        groups = result_groups(readings, by) if groups is None else groups
        if recorded is None:
            recorded = ESTIMATE_COLUMN in readings.columns
        readings = [readings]
    classes, with_recorded = resolve_lineup(policies, bool(recorded))
    chosen = choose_engine(engine, classes)
    names = lineup_names(classes, with_recorded)
    with OrderFold(names, by, permutations, seed, spill_bytes) as fold:
        for part in readings:
            fold.add(part, classes, safety_factor, chosen, with_recorded)
        return fold.finish(groups)
