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
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from warmfit.errors import UsageError
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
from warmfit.replay.engines import choose_engine, lineup_names, price, resolve_lineup
from warmfit.replay.perwave import PartEncoder, PerWaveWriter
from warmfit.replay.semantics import DEFAULT_SAFETY_FACTOR, check_budget, check_safety_factor
from warmfit.replay.summary import (
    FoldPart,
    SummaryFold,
    fold_part,
    group_keys,
    number_groups,
    with_admitted,
)
from warmfit.run.cluster import ANSWER_SECONDS, connect
from warmfit.run.workers import (
    PATIENCE,
    EarlyPool,
    default_jobs,
    end_workers,
    new_pool,
    patience,
    stopped_workers,
    take_early_pool,
    wants_workers,
)
from warmfit.show.names import printable
from warmfit.show.progress import ProgressCallback, no_progress

#: A batch's median values (sorted by its workers) larger than this go to disk as
#: they come, as one sorted run; smaller ones wait in memory up to this size.
SPILL_BYTES = 4 * 2**20

#: Batches a task replays at most (:func:`chain_sizes`): each batch after the
#: first reads no row group twice; a task's results wait in the worker until its
#: last batch is done.
CHAIN = 4

#: A task given to a worker may take this long, plus :data:`SECONDS_PER_READING`
#: per reading it replays, before the command gives up on it (:func:`task_seconds`):
#: 30 times what a reading takes here, so that only a worker that stopped making
#: progress (deadlocked, swapped out, a cluster with no worker) runs past it.
TASK_SECONDS = 60.0
SECONDS_PER_READING = 20e-6
#: A cluster with no worker is given this long for one to join.
NO_WORKER_SECONDS = 10.0
#: A worker process stopped (SIGSTOP, job control) this long is given up on.
STOPPED_SECONDS = 5.0

#: Receives the per-wave rows of each batch, in canonical order.
PerWaveSink = Callable[[pl.DataFrame], None]


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
    #: covers a wave, NaN where the reference engine priced a batch).
    safe_factors: dict[str, float | None] = field(default_factory=dict)
    #: The rows of files whose streams interleave, decoded once and routed to their
    #: batches before they replayed (:func:`~warmfit.format.batches.route`); 0: none.
    routed_rows: int = 0


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


def replay_batch(
    batch: Batch,
    policies: Sequence[type[Policy]],
    safety_factor: float,
    engine: str,
    by: str,
    per_wave: bool | PartEncoder,
    budget_bytes: int | None = None,
    recorded: bool = False,
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
    priced = price(
        readings, policies, safety_factor, engine, by, per_wave is not False,
        checked=found, recorded=recorded,
    )  # fmt: skip
    code, distinct = number_groups(priced.groups)
    with _spilling():
        part = fold_part(
            code, distinct, priced.actual, priced.oom, priced.estimate, priced.set_by,
            priced.beyond, len(policies) + recorded, budget_bytes, runs, priced.unscaled,
        )  # fmt: skip
    rows = None if priced.per_wave is None else with_admitted(priced.per_wave, budget_bytes)
    height = 0 if rows is None else rows.height
    encoded = (
        per_wave.encode(rows) if isinstance(per_wave, PartEncoder) and rows is not None else rows
    )
    counts = priced.counts if priced.counts is not None else reading_counts(readings)
    return BatchResult(batch.number, priced.engine, readings.height, part, encoded, height, counts)


#: :func:`replay_batch`'s arguments from ``policies`` to ``recorded``: the
#: same for every batch of a replay.
BatchTask = tuple[Sequence[type[Policy]], float, str, str, bool | PartEncoder, int | None, bool]


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
    ``progress(done, total)`` counts batches.
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
        _Runner(jobs, cluster) as runner,
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
            index = runner.run if cluster is not None or large else _here
            indexes = index(index_file, [(f,) for f in files])
        indexes = list(indexes)
        # SPEC §8: the policy `recorded` where any file carries the trainer's prices
        carries = any(ESTIMATE_COLUMN in found.columns for found in indexes)
        classes, recorded = resolve_lineup(policies, carries)
        chosen = choose_engine(engine, classes)
        names = lineup_names(classes, recorded)
        fold = last.enter_context(SummaryFold(names, by, budget_bytes, spill))
        batches = plan(indexes, batch_readings)
        elsewhere = cluster is not None or (large and len(batches) > 1)
        run = runner.run if elsewhere else _here
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
        task: BatchTask = (classes, safety_factor, chosen, by, rows_as, budget_bytes, recorded)
        with _spilling():
            runs = [_runs(fold, b, len(names), spill) if local else None for b in batches]
        progress(0, len(batches))
        results: Iterable[BatchResult]
        if elsewhere:  # tasks of consecutive batches: neighbours share a row group
            # One batch a task with per-wave rows (a batch's are tens of megabytes,
            # and tasks of 4 were no faster), and on a cluster, whose
            # workers send their median values back: the parent holds two tasks'
            # results per worker.
            sizes = (
                chain_sizes(len(batches), runner.workers())
                if per_wave is None and local
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
        safe = fold.safe_factors()
    ran = "scalar" if "scalar" in engines else chosen
    return StreamedReplay(
        summary, tuple(names), safety_factor, ran, by, budget_bytes, readings, rows,
        len(batches), where, _without_whole(counts), safe, spool.rows,
    )  # fmt: skip


@contextmanager
def _spilling() -> Iterator[None]:
    """A failure to write the medians' sorted runs (a full disk) as exit 2 naming the folder."""
    try:
        yield
    except OSError as exc:
        raise UsageError(
            f"cannot write the exact medians' temporary files in {tempfile.gettempdir()} "
            f"({exc.strerror or exc}); nothing was written. Free space there, or point "
            "TMPDIR at a folder with room (8 bytes per wave and policy, twice: about 1.7 GB "
            "at 1e8 readings)."
        ) from None


def _runs(fold: SummaryFold, batch: Batch, policies: int, spill: int) -> tuple[str, str] | None:
    """Files for a worker to write a batch's median values to, when they may reach
    ``spill`` bytes (16 a value, one value a reading and policy at most)."""
    return fold.run_paths() if batch.readings * policies * 16 >= spill else None


def _without_whole(counts: list[pl.DataFrame]) -> pl.DataFrame:
    if not counts:
        return pl.DataFrame(schema={"run": pl.String(), "signature": pl.String()})
    return pairs_without_whole(pl.concat(counts))


def _here(function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> Iterator[Any]:
    return (function(*args) for args in calls)


def _in_order(
    submit: Callable[[tuple[Any, ...]], Any],
    calls: list[tuple[Any, ...]],
    window: int,
    watch: Callable[[], list[int]] | None = None,
) -> Iterator[Any]:
    """Results of ``submit(args)`` futures in the order of ``calls``, at most ``window``
    in flight: results that finish early wait, so memory is bounded by the window.
    Each wait has an end (:func:`_result`); ``watch`` names the worker processes that
    are stopped."""
    pending: deque[tuple[Any, float]] = deque()
    for args in calls:
        pending.append((submit(args), task_seconds(args)))
        if len(pending) >= window:
            yield _result(*pending.popleft(), watch)
    while pending:
        yield _result(*pending.popleft(), watch)


class WorkersStuck(UsageError):
    """A worker stopped, or a task past its deadline: its workers are killed, not
    waited for."""


def task_seconds(args: tuple[Any, ...]) -> float:
    """How long a task may take, its wait included, before the command gives up on
    it: :data:`TASK_SECONDS` plus :data:`SECONDS_PER_READING` for each reading it
    replays, times :func:`~warmfit.run.workers.patience`."""
    pairs = args[0] if args and isinstance(args[0], list) else []
    readings = sum(batch.readings for batch, _ in pairs)
    return patience() * (TASK_SECONDS + SECONDS_PER_READING * readings)


def _result(future: Any, seconds: float, watch: Callable[[], list[int]] | None) -> Any:
    """A task's result once it has finished (a Dask future is released once read).

    A task that has not finished after ``seconds``, or whose worker process has
    been stopped for :data:`STOPPED_SECONDS` (``watch``), is given up on, as is a
    task whose worker or cluster was lost: each an exit-2 error saying what
    happened (the caller's clean-up then ends the workers).
    """
    began = time.monotonic()
    stopped_since: float | None = None
    while True:
        try:
            value = future.result(timeout=min(1.0, seconds))
            break
        except TimeoutError:
            now = time.monotonic()
            stopped = watch() if watch is not None else []
            stopped_since = (stopped_since or now) if stopped else None
            if stopped_since is not None and now - stopped_since >= STOPPED_SECONDS:
                raise WorkersStuck(
                    f"worker process {stopped[0]} was stopped (SIGSTOP, a debugger, job "
                    f"control) for {STOPPED_SECONDS:g} s while replaying; nothing was "
                    "written. Let it continue (kill -CONT) next time, or run with --jobs 1."
                ) from None
            if now - began >= seconds:
                raise WorkersStuck(
                    f"a task of the replay did not finish within {seconds:.0f} s (a worker "
                    "deadlocked or swapped out, or a cluster with no worker to run it); "
                    "nothing was written. Run again with --jobs 1, or on a cluster that has "
                    f"workers; {PATIENCE} (now {patience():g}) multiplies the time allowed."
                ) from None
        except BrokenProcessPool:
            raise UsageError(
                "a worker process died while replaying (killed for memory, or by a signal); "
                "nothing was written. A batch holds at least one whole (run, rank) stream: run "
                "again with --jobs 1, or where there is more memory."
            ) from None
        except Exception as exc:
            if type(exc).__name__ != "KilledWorker":  # distributed's, not imported here
                raise
            raise UsageError(
                "the Dask cluster's workers died running a task of the replay, as many times "
                f"as the cluster retries one ({_short(exc)}); nothing was written. Check the "
                "workers' memory and logs, or run without --cluster."
            ) from None
    release = getattr(future, "release", None)
    if release is not None:
        release()
    return value


def _cluster_failures(results: Iterator[Any]) -> Iterator[Any]:
    """``results`` of tasks on a Dask cluster; a cluster that failed under them (its
    scheduler stopped, the connection broke, a task cancelled) as an exit-2 error."""
    try:
        yield from results
    except (OSError, CancelledError) as exc:
        raise UsageError(
            f"the Dask cluster failed while replaying ({type(exc).__name__}: "
            f"{_short(exc) or 'a task was cancelled'}); nothing was written. Check the "
            "scheduler and its workers, and run again."
        ) from None


def _quiet_dask_logs() -> None:
    """Silence Dask's own logs (a lost connection logged with its tracebacks): the
    replay says what happened, in one line (:func:`_result`)."""
    names = [n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]
    for name in ["distributed", *names]:
        logger = logging.getLogger(name)
        logger.setLevel(logging.CRITICAL)
        for handler in logger.handlers:
            handler.setLevel(logging.CRITICAL)


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Runner:
    """Where tasks run: a process pool or a Dask cluster, started when first used;
    :meth:`run` yields results in the order of the calls."""

    def __init__(self, jobs: int | None, cluster: Any) -> None:
        self.jobs = default_jobs() if jobs is None else jobs
        self.cluster = cluster
        self._pool: ProcessPoolExecutor | None = None
        self._release: threading.Thread | None = None
        self._client: Any = None
        self._own_client = False

    def __enter__(self) -> _Runner:
        return self

    @property
    def where(self) -> int | str:
        """The number of worker processes, or the cluster's scheduler address."""
        if self.cluster is None:
            return self.jobs
        info = getattr(self._client, "scheduler_info", None)
        address = info().get("address") if info is not None else None
        return str(address or self.cluster)

    def workers(self) -> int:
        """How many tasks run at once: the worker processes, or the cluster's workers."""
        if self.cluster is None:
            return self.jobs
        return max(1, len(self._connect().scheduler_info().get("workers", {})))

    def run(self, function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> Iterator[Any]:
        if self.cluster is not None:
            return self._on_cluster(function, calls)
        if self.jobs == 1:
            return _here(function, calls)
        return self._in_pool(function, calls)

    def adopt(self, early: EarlyPool) -> Iterator[Any]:
        """Take the pool :func:`warmfit.run.workers.prestart` started; its index results."""
        pool = self._pool = early.pool
        assert pool is not None
        watch = lambda: stopped_workers(pool)  # noqa: E731
        return (_result(future, task_seconds(()), watch) for future in early.index)

    def release(self, cancel: bool = False) -> None:
        """Let the worker processes exit now that every task is done (``cancel``: once
        the batch each is on is, its other tasks cancelled), while this process goes
        on; :meth:`__exit__` waits for them."""
        if self._pool is not None and self._release is None:
            self._release = threading.Thread(
                target=self._pool.shutdown, kwargs={"cancel_futures": cancel},
                name="warmfit-release",
            )  # fmt: skip
            self._release.start()

    def _in_pool(self, function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> Iterator[Any]:
        if self._pool is None:
            self._pool = new_pool(self.jobs)
        pool = self._pool
        watch = lambda: stopped_workers(pool)  # noqa: E731
        return _in_order(lambda args: pool.submit(function, *args), calls, 2 * self.jobs, watch)

    def check_readable(self, files: list[str]) -> None:
        """An exit-2 error naming the first of ``files`` the cluster's workers cannot read."""
        answers = self.run(os.access, [(f, os.R_OK) for f in files])
        for path, readable in zip(files, answers, strict=True):
            if not readable:
                raise UsageError(
                    f"the cluster's workers cannot read {printable(path)}: give a path on a "
                    "file system they share with this machine."
                )

    def _connect(self) -> Any:
        if self._client is not None:
            return self._client
        try:
            from distributed import Client
        except ImportError:
            raise UsageError(
                "a cluster needs Dask distributed: pip install 'warmfit[cluster]'."
            ) from None
        if isinstance(self.cluster, Client):
            self._client = self.cluster
            return self._client
        _quiet_dask_logs()
        self._client = connect(Client, self.cluster, patience() * ANSWER_SECONDS)
        self._own_client = True
        return self._client

    def _on_cluster(
        self, function: Callable[..., Any], calls: list[tuple[Any, ...]]
    ) -> Iterator[Any]:
        return _cluster_failures(self._cluster_results(function, calls))

    def _cluster_results(
        self, function: Callable[..., Any], calls: list[tuple[Any, ...]]
    ) -> Iterator[Any]:
        client = self._connect()
        if not client.scheduler_info().get("workers"):
            try:  # a cluster starting up: its workers may be on their way
                client.wait_for_workers(1, timeout=patience() * NO_WORKER_SECONDS)
            except TimeoutError:
                raise UsageError(
                    f"the Dask scheduler at {self.where} has no worker (waited "
                    f"{patience() * NO_WORKER_SECONDS:g} s); nothing was written. Start one "
                    "('dask worker ADDRESS'), or run without --cluster."
                ) from None
        window = 2 * self.workers()
        submit = lambda args: client.submit(function, *args, pure=False)  # noqa: E731
        yield from _in_order(submit, calls, window)

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        pool = self._pool
        if pool is not None and kind is not None:  # nobody will see the figures
            if issubclass(kind, (KeyboardInterrupt, WorkersStuck)):
                end_workers(pool)  # stopped by a person, or stuck: at once
            # any other failure: each worker ends after the batch it is on (told by
            # the replay's stop flag), rather than be killed while sending its results
            self.release(cancel=True)
        if self._release is not None:
            stopped_since = None
            while self._release.is_alive():  # the workers exit; a stopped one cannot
                self._release.join(timeout=0.5)
                stopped = stopped_workers(pool) if pool is not None else []
                now = time.monotonic()
                stopped_since = (stopped_since or now) if stopped else None
                if stopped_since is not None and now - stopped_since >= STOPPED_SECONDS:
                    assert pool is not None
                    end_workers(pool)  # it has no task left: its work is done
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if self._own_client:
            with contextlib.suppress(Exception):  # a lost scheduler: nothing to close
                self._client.close()
