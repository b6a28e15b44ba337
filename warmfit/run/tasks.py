"""Where the tasks of a streamed replay run, results in the order of the calls: here,
in this machine's worker processes (:mod:`warmfit.run.workers`), or on a Dask
distributed cluster; each wait has an end (a stopped worker, a task past its
deadline, a lost cluster: an exit-2 error saying what happened).

Moved here from :mod:`warmfit.replay.stream` (issue 37): the stream plans and
folds, this runs. Nothing here imports polars, numpy or pyarrow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from warmfit.errors import UsageError
from warmfit.run.cluster import ANSWER_SECONDS, connect, short_message
from warmfit.run.workers import (
    PATIENCE,
    EarlyPool,
    default_jobs,
    end_workers,
    new_pool,
    patience,
    stopped_workers,
)
from warmfit.show.names import printable

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


def here(function: Callable[..., Any], calls: list[tuple[Any, ...]]) -> Iterator[Any]:
    """``function(*args)`` for each of ``calls``, in this process, as they are asked for."""
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
                f"as the cluster retries one ({short_message(exc)}); nothing was written. Check the "
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
            f"{short_message(exc) or 'a task was cancelled'}); nothing was written. Check the "
            "scheduler and its workers, and run again."
        ) from None


def _quiet_dask_logs() -> None:
    """Silence Dask's own logs (a lost connection logged with its tracebacks) and those
    of the asyncio loop its client runs (a task of the client's that failed as the
    cluster was lost: "Task exception was never retrieved", a traceback): the replay
    says what happened, in one line (:func:`_result`)."""
    names = [n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]
    for name in ["distributed", "asyncio", *names]:
        logger = logging.getLogger(name)
        logger.setLevel(logging.CRITICAL)
        for handler in logger.handlers:
            handler.setLevel(logging.CRITICAL)


class Runner:
    """Where tasks run: a process pool or a Dask cluster, started when first used;
    :meth:`run` yields results in the order of the calls."""

    def __init__(self, jobs: int | None, cluster: Any) -> None:
        self.jobs = default_jobs() if jobs is None else jobs
        self.cluster = cluster
        self._pool: ProcessPoolExecutor | None = None
        self._release: threading.Thread | None = None
        self._client: Any = None
        self._own_client = False

    def __enter__(self) -> Runner:
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
            return here(function, calls)
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
