"""Replay a trace of any size: a bounded batch of streams at a time, on every core.

:func:`replay_stream` is what ``warmfit replay`` runs. It plans the trace's
batches (:mod:`warmfit.format.batches`), replays each batch with the engine
:func:`warmfit.replay.replay` would use, and folds each batch's figures into
one :class:`~warmfit.replay.summary.SummaryFold` — medians exactly, spilled to
disk beyond a bound — while the per-wave rows, when wanted, go to a sink batch
by batch in canonical order. The summary and the per-wave rows are those of
:func:`~warmfit.replay.replay` on the whole trace, byte for byte, whatever the
batch size and the number of jobs.

Where the batches run:

- in this process (``jobs=1``, or a trace of one batch);
- in ``jobs`` worker processes of this machine (a fork server that has
  imported warmfit once, so a worker starts in milliseconds);
- on a Dask distributed cluster (``cluster="tcp://scheduler:8786"``, or a
  :class:`distributed.Client`): the same two functions, :func:`~warmfit.format.batches.index_file`
  and :func:`replay_chain`, submitted as tasks. Workers must see the trace's
  paths (a shared file system).

A task of this machine's workers replays up to :data:`CHAIN` consecutive
batches (:func:`replay_chain`): neighbours share a row group, which it then
decodes once (:class:`warmfit.format.batches.Tail`).

Memory: the parent holds the results of two tasks per worker in flight (up
to 4 batches each, a few kB without per-wave rows; one batch a task with
them, or on a cluster) and the fold's counts; each worker one batch, and
the row group it shares with the next. With a Parquet ``--per-wave`` file,
the parent also holds the batch its writer encodes, and the rows of the
batches waiting for it lie in a temporary folder (about 50 MB a batch; on a
cluster they are in the results).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from warmfit.errors import UsageError, no_room
from warmfit.format.batches import (
    Batch,
    Spool,
    Tail,
    default_batch_readings,
    index_file,
    plan,
    read_canonical,
    route,
)
from warmfit.format.schema import ESTIMATE_COLUMN
from warmfit.format.trace import find_trace_files, pairs_without_whole, reading_counts
from warmfit.policies import Policy
from warmfit.replay.engines import Priced, choose_engine, lineup_names, price, resolve_lineup
from warmfit.replay.perwave import PartEncoder, PerWaveWriter
from warmfit.replay.semantics import (
    DEFAULT_SAFETY_FACTOR,
    ProfileKey,
    check_budget,
    check_safety_factor,
)
from warmfit.replay.summary import (
    FoldPart,
    SummaryFold,
    fold_part,
    group_keys,
    number_groups,
    with_admitted,
)
from warmfit.run.tasks import Runner, here
from warmfit.run.workers import take_early_pool, wants_workers
from warmfit.show.progress import ProgressCallback, no_progress

#: A batch's median values (sorted by its workers) larger than this go to disk as
#: they come, as one sorted run; smaller ones wait in memory up to this size.
SPILL_BYTES = 4 * 2**20

#: Batches a task replays at most (:func:`chain_sizes`): each batch after the
#: first reads no row group twice; a task's results wait in the worker until its
#: last batch is done.
CHAIN = 4

#: Receives the per-wave rows of each batch, in canonical order.
PerWaveSink = Callable[[pl.DataFrame], None]


class Folded(Protocol):
    """The parent's half of a :class:`Fold`: takes each batch's part, in canonical order;
    :meth:`finish` gives what :attr:`StreamedReplay.folded` holds, once the summary is
    known. One that is a context manager is closed when the replay ends."""

    def add(self, part: Any) -> None: ...

    def finish(self, summary: pl.DataFrame) -> Any: ...


@dataclass(frozen=True)
class Lineup:
    """What every batch of a replay is priced with, as a :class:`Fold`'s part sees it."""

    classes: tuple[type[Policy], ...]
    safety_factor: float
    #: ``vectorized`` or ``scalar`` (:func:`~warmfit.replay.engines.choose_engine`).
    engine: str
    by: str
    #: The policy ``recorded`` is reported, last (SPEC §8).
    recorded: bool


class Fold(Protocol):
    """What a command folds from the one streamed replay besides the summary (issue 37):
    ``sweep``'s waves, ``recommend``'s profiles and measured waves. It travels with
    the task to the workers (keep it small and picklable): :meth:`part` runs where a
    batch is replayed, on what the engine priced, and its result comes back to what
    :meth:`start` made in this process, batch after batch in canonical order."""

    @property
    def wants_rows(self) -> bool:
        """The batch's per-wave rows (every policy's) are made for :meth:`part`."""
        ...

    @property
    def wants_profiles(self) -> bool:
        """Every profile as it stands after the batch's streams (whole: final) is kept
        for :meth:`part`, by (run, rank, signature, policy)."""
        ...

    def part(
        self,
        readings: pl.DataFrame,
        priced: Priced,
        profiles: dict[ProfileKey, Policy] | None,
        lineup: Lineup,
    ) -> Any: ...

    def start(self, policies: Sequence[str]) -> Folded: ...


@dataclass(frozen=True)
class StreamedReplay:
    """What :func:`replay_stream` produced: the summary and how it ran."""

    summary: pl.DataFrame
    policies: tuple[str, ...]
    safety_factor: float
    #: ``vectorized``, or ``scalar`` where any batch ran on the reference engine.
    engine: str
    by: str
    budget_bytes: int | None
    readings: int
    per_wave_rows: int
    batches: int
    #: Where the batches ran: ``1`` (this process), the worker processes, or the cluster.
    jobs: int | str
    #: The (run, signature) pairs with flat readings but no whole one
    #: (:func:`warmfit.format.trace.without_whole`).
    without_whole: pl.DataFrame
    #: Per policy that put a wave under its peak, the smallest safe factor
    #: (:meth:`~warmfit.replay.summary.SummaryFold.safe_factors`: None where no factor
    #: covers a wave; both engines keep the bytes before the factor, so no second pass).
    safe_factors: dict[str, float | None] = field(default_factory=dict)
    #: The rows of files whose streams interleave, decoded once and routed to their
    #: batches before they replayed (:func:`~warmfit.format.batches.route`); 0: none.
    routed_rows: int = 0
    #: What each of the replay's :class:`Fold` s folded (its :meth:`Folded.finish`), in order.
    folded: tuple[Any, ...] = ()
    #: The trace files replayed (found once), and those whose pages carry no checksums
    #: (judged from the footer each was indexed by: a command warns of them).
    files: tuple[str, ...] = ()
    without_checksums: tuple[str, ...] = ()


@dataclass(frozen=True)
class BatchResult:
    """One batch replayed: its figures ready to fold, and what else was asked for."""

    number: int
    engine: str
    readings: int
    part: FoldPart
    #: The per-wave rows: a frame, or a part of the file (:meth:`PartEncoder.encode`:
    #: CSV bytes, a ``pyarrow.Table`` in the file's schema, or an Arrow file).
    per_wave: pl.DataFrame | Any | None
    per_wave_rows: int
    #: :func:`warmfit.format.trace.reading_counts` of the batch's readings.
    counts: pl.DataFrame
    #: Each :class:`Fold`'s part of the batch.
    folded: tuple[Any, ...] = ()


def replay_batch(
    batch: Batch,
    policies: Sequence[type[Policy]],
    safety_factor: float,
    engine: str,
    by: str,
    per_wave: bool | PartEncoder,
    budget_bytes: int | None = None,
    recorded: bool = False,
    folds: Sequence[Fold] = (),
    runs: tuple[str, str] | None = None,
    tail: Tail | None = None,
) -> BatchResult:
    """Read, validate and replay one batch.

    ``recorded``: the policy ``recorded`` after ``policies`` (SPEC §8), as
    :func:`warmfit.replay.engines.price` takes it.

    ``engine`` is ``vectorized`` or ``scalar``; the vectorized engine hands a
    batch it cannot price exactly to the reference engine, as
    :func:`warmfit.replay.replay` does with a trace. ``runs``: where to write
    the medians' values (:meth:`~warmfit.replay.summary.SummaryFold.run_paths`).
    ``tail``: shared with the previous batch's read (:class:`warmfit.format.batches.Tail`).
    ``per_wave``: the per-wave rows as a frame (True), or made ready as a part
    of the file by a :class:`~warmfit.replay.perwave.PartEncoder`.
    """
    found = read_canonical(batch, tail=tail)
    readings = found.frame
    profiles: dict[ProfileKey, Policy] | None = {} if any(f.wants_profiles for f in folds) else None
    rows_wanted = per_wave is not False or any(f.wants_rows for f in folds)
    priced = price(
        readings, policies, safety_factor, engine, by, rows_wanted, profiles,
        checked=found, recorded=recorded,
    )  # fmt: skip
    lineup = Lineup(tuple(policies), safety_factor, engine, by, recorded)
    folded = tuple(f.part(readings, priced, profiles, lineup) for f in folds)
    code, distinct = number_groups(priced.groups)
    with _spilling():
        part = fold_part(
            code, distinct, priced.actual, priced.oom, priced.estimate, priced.set_by,
            priced.beyond, len(policies) + recorded, budget_bytes, runs, priced.unscaled,
        )  # fmt: skip
    rows = (
        None
        if priced.per_wave is None or per_wave is False
        else with_admitted(priced.per_wave, budget_bytes)
    )
    height = 0 if rows is None else rows.height
    encoded = (
        per_wave.encode(rows) if isinstance(per_wave, PartEncoder) and rows is not None else rows
    )
    counts = priced.counts if priced.counts is not None else reading_counts(readings)
    return BatchResult(
        batch.number, priced.engine, readings.height, part, encoded, height, counts, folded
    )


#: :func:`replay_batch`'s arguments from ``policies`` to ``folds``: the
#: same for every batch of a replay.
BatchTask = tuple[
    Sequence[type[Policy]], float, str, str, bool | PartEncoder, int | None, bool, Sequence[Fold]
]


def replay_chain(
    chain: Sequence[tuple[Batch, tuple[str, str] | None]],
    task: BatchTask,
    stop: str | None = None,
) -> list[BatchResult]:
    """Replay consecutive batches (a task: runs in a worker). ``chain`` holds each
    batch with where its medians' values go. The row group two neighbours share
    is read once. Once the file ``stop`` exists (the replay failed elsewhere, or
    was interrupted), the batches left are not replayed."""
    tail = Tail()
    done: list[BatchResult] = []
    for batch, runs in chain:
        if done and stop is not None and os.path.exists(stop):
            break
        done.append(replay_batch(batch, *task, runs, tail))
    return done


def chain_sizes(batches: int, workers: int) -> list[int]:
    """How many consecutive batches each task replays, in order: up to :data:`CHAIN`,
    shrinking to one towards the end (each task takes a ``2 * workers``-th of the
    batches left), so that the workers finish within about a batch of each other."""
    sizes = []
    left = batches
    while left:
        size = min(CHAIN, -(-left // (2 * max(1, workers))))
        sizes.append(size)
        left -= size
    return sizes


def replay_stream(
    paths: Sequence[str | os.PathLike[str]],
    policies: Sequence[str | type[Policy]] | None = None,
    safety_factor: float = DEFAULT_SAFETY_FACTOR,
    engine: str = "auto",
    by: str = "run",
    budget_bytes: int | None = None,
    *,
    jobs: int | None = 1,
    cluster: Any = None,
    batch_readings: int | None = None,
    per_wave: PerWaveSink | PerWaveWriter | None = None,
    progress: ProgressCallback | None = None,
    spill_bytes: int | None = None,
    folds: Sequence[Fold] = (),
    recorded: bool = True,
) -> StreamedReplay:
    """Replay the trace at ``paths`` batch by batch; the figures of :func:`~warmfit.replay.replay`.

    ``policies``, ``safety_factor``, ``engine``, ``by`` and ``budget_bytes``
    mean what they mean for :func:`~warmfit.replay.replay`. ``jobs`` worker
    processes replay batches at once (1, the default, runs them here; None:
    :func:`warmfit.run.workers.default_jobs`; a script that asks for workers
    needs the usual ``if __name__ == "__main__":`` guard of
    :mod:`multiprocessing`), or ``cluster`` (a Dask scheduler address or
    ``distributed.Client``) runs them. ``per_wave``, when given, receives
    each batch's per-wave rows, batches in canonical order: a callable
    receives them as a frame; a :class:`~warmfit.replay.perwave.PerWaveWriter` has
    them made ready for its file where they are made (by the workers: CSV
    encoded; Parquet as Arrow tables, or files from this machine's workers, that
    its writer's thread encodes) and appends them.
    ``progress(done, total)`` counts batches. ``folds`` (:class:`Fold`) fold
    what else a command needs from the same pass (:attr:`StreamedReplay.folded`).
    ``recorded=False``: the trainer's recorded prices (SPEC §8) are not reported.
    """
    safety_factor = check_safety_factor(safety_factor)
    check_budget(budget_bytes)
    if jobs is not None and jobs < 1:
        raise UsageError(f"must be at least 1; got {jobs!r}.", argument="jobs")
    if batch_readings is None:
        batch_readings = default_batch_readings()
    if batch_readings < 1:
        raise UsageError(f"must be at least 1; got {batch_readings!r}.", argument="batch_readings")
    group_keys(by)
    choose_engine(engine, resolve_lineup(policies, True)[0])  # checked before any file is read
    files = [str(f) for f in find_trace_files(paths)]
    shown = tuple(files)
    if cluster is not None:  # the workers run elsewhere, in another folder
        files = [os.path.abspath(f) for f in files]
    progress = progress or no_progress
    writer = per_wave if isinstance(per_wave, PerWaveWriter) else None
    engines: set[str] = set()
    readings = rows = 0
    counts: list[pl.DataFrame] = []
    spill = SPILL_BYTES if spill_bytes is None else spill_bytes
    # The pool is shut down (its tasks finished) before the fold (entered into `last`
    # once the files say which policies it folds) and the spool remove their files.
    with (
        contextlib.ExitStack() as last,
        Spool() as spool,
        Runner(jobs, cluster) as runner,
    ):
        # The files of a large trace are indexed by the workers (or the cluster's),
        # in parallel; a small trace, or one of one batch, replays here: starting
        # workers would cost more than they save.
        large = wants_workers(files, runner.jobs)
        early = take_early_pool(files, runner.jobs) if cluster is None and large else None
        if early is not None:  # started by prestart: the files are being indexed
            indexes: Iterable[Any] = runner.adopt(early)
        else:
            if cluster is not None:
                runner.check_readable(files)
            index = runner.run if cluster is not None or large else here
            indexes = index(index_file, [(f,) for f in files])
        indexes = list(indexes)
        # SPEC §8: the policy `recorded` where any file carries the trainer's prices
        carries = any(ESTIMATE_COLUMN in found.columns for found in indexes)
        classes, with_recorded = resolve_lineup(policies, carries)
        recorded = recorded and with_recorded
        chosen = choose_engine(engine, classes)
        names = lineup_names(classes, recorded)
        fold = last.enter_context(SummaryFold(names, by, budget_bytes, spill))
        batches = plan(indexes, batch_readings)
        elsewhere = cluster is not None or (large and len(batches) > 1)
        run = runner.run if elsewhere else here
        where = runner.where if elsewhere else 1
        if cluster is None:  # streams that interleave: their files decoded once, not by
            # every batch (a cluster's workers do not see this machine's TMPDIR)
            batches = spool.routed(batches, route(batches, batch_readings), run)
        # This machine's workers write a large batch's median values to the fold's
        # folder themselves, rather than send them here to be written.
        local = elsewhere and cluster is None
        # Their per-wave rows too: through a folder, not the pool's pipe.
        rows_as: bool | PartEncoder = per_wave is not None
        if writer is not None:
            rows_as = writer.spooling() if local else writer.encoder
        task: BatchTask = (
            classes, safety_factor, chosen, by, rows_as, budget_bytes, recorded, tuple(folds)
        )  # fmt: skip
        accumulators = [f.start(names) for f in folds]
        for accumulator in accumulators:
            if isinstance(accumulator, contextlib.AbstractContextManager):
                last.enter_context(accumulator)
        with _spilling():
            runs = [_runs(fold, b, len(names), spill) if local else None for b in batches]
        progress(0, len(batches))
        results: Iterable[BatchResult]
        if elsewhere:  # tasks of consecutive batches: neighbours share a row group
            # One batch a task with per-wave rows, written or folded (a batch's are
            # tens of megabytes, and tasks of 4 were no faster; plot's at 1e7 held
            # 1.2 GB a worker), and on a cluster, whose workers send their median
            # values back: the parent holds two tasks' results per worker.
            rows_folded = any(f.wants_rows for f in folds)
            sizes = (
                chain_sizes(len(batches), runner.workers())
                if per_wave is None and not rows_folded and local
                else [1] * len(batches)
            )
            pairs = iter(zip(batches, runs, strict=True))
            stop = fold.flag_path() if local else None
            chains = [(list(itertools.islice(pairs, k)), task, stop) for k in sizes]
            results = itertools.chain.from_iterable(run(replay_chain, chains))
        else:
            stop, tail = None, Tail()
            results = (replay_batch(b, *task, None, tail) for b in batches)
        try:
            for done, result in enumerate(results, 1):
                engines.add(result.engine)
                readings += result.readings
                counts.append(result.counts)
                with _spilling():
                    fold.add_part(result.part)
                for accumulator, folded_part in zip(accumulators, result.folded, strict=True):
                    accumulator.add(folded_part)
                if writer is not None and result.per_wave is not None:
                    writer.append(result.per_wave)
                elif callable(per_wave) and isinstance(result.per_wave, pl.DataFrame):
                    per_wave(result.per_wave)
                rows += result.per_wave_rows
                progress(done, len(batches))
        except BaseException:
            # the workers end after the batch each is on, not after their task's
            # others: nobody will see those figures
            if stop is not None:
                Path(stop).touch()
            raise
        runner.release()  # the workers exit while the figures are finished here
        with _spilling():
            summary = fold.finish()
            folded = tuple(accumulator.finish(summary) for accumulator in accumulators)
        safe = fold.safe_factors()
    ran = "scalar" if "scalar" in engines else chosen
    return StreamedReplay(
        summary, tuple(names), safety_factor, ran, by, budget_bytes, readings, rows,
        len(batches), where, _without_whole(counts), safe, spool.rows, folded, shown,
        tuple(f for f, found in zip(shown, indexes, strict=True) if found.checksums is False),
    )  # fmt: skip


@contextmanager
def _spilling() -> Iterator[None]:
    """A failure to write the medians' sorted runs (a full disk) as exit 2 naming the folder."""
    try:
        yield
    except OSError as exc:
        raise no_room(
            "the exact medians' temporary files",
            tempfile.gettempdir(),
            exc,
            "Free space there, or point TMPDIR at a folder with room (8 bytes per wave and "
            "policy, twice: about 1.7 GB at 1e8 readings).",
        ) from None


def _runs(fold: SummaryFold, batch: Batch, policies: int, spill: int) -> tuple[str, str] | None:
    """Files for a worker to write a batch's median values to, when they may reach
    ``spill`` bytes (16 a value, one value a reading and policy at most)."""
    return fold.run_paths() if batch.readings * policies * 16 >= spill else None


def _without_whole(counts: list[pl.DataFrame]) -> pl.DataFrame:
    if not counts:
        return pl.DataFrame(schema={"run": pl.String(), "signature": pl.String()})
    return pairs_without_whole(pl.concat(counts))
