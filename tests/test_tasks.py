"""``warmfit.run.tasks``: where a streamed replay's tasks run, results in call order, and
every wait with an end.

The replays of tests/test_stream.py, tests/test_faults.py and tests/test_cluster.py
run real workers and clusters; here the runner's own rules are checked in this
process, with futures, pools and clients that say what they were asked, and a clock
that moves only when a wait times out (so that each deadline is checked at its exact
edge, without waiting for it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from warmfit.errors import UsageError
from warmfit.run import tasks
from warmfit.run.tasks import Runner, WorkersStuck


class Clock:
    """``time.monotonic`` for :mod:`warmfit.run.tasks`: it starts at 100 s and moves on
    only when a :class:`Waiting` future's wait times out (by that wait's timeout), or by
    ``step`` at each reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.now = 100.0
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(tasks, "time", SimpleNamespace(monotonic=made.monotonic))
    monkeypatch.delenv("WARMFIT_WORKER_PATIENCE", raising=False)
    return made


class Waiting:
    """A task's future that finishes after ``waits`` timed-out waits (None: never), each
    moving the clock by its timeout; ``release`` as a Dask future has."""

    def __init__(self, clock: Clock, waits: int | None = None, value: object = "done") -> None:
        self.clock = clock
        self.waits = waits
        self.value = value
        self.timeouts: list[float] = []
        self.released = 0

    def result(self, timeout: float) -> object:
        if self.waits is not None and len(self.timeouts) == self.waits:
            return self.value
        self.timeouts.append(timeout)
        self.clock.now += timeout
        raise TimeoutError

    def release(self) -> None:
        self.released += 1


class Failing:
    """A future whose result raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def result(self, timeout: float) -> object:
        raise self.error


def done(value: object) -> Future[object]:
    future: Future[object] = Future()
    future.set_result(value)
    return future


# --------------------------------------------------------------------------- one task's wait


def test_a_finished_task_is_read_and_released(clock: Clock) -> None:
    future = Waiting(clock, waits=2, value=42)
    assert tasks._result(future, 60.0, None) == 42
    assert future.timeouts == [1.0, 1.0] and future.released == 1
    assert tasks._result(done("plain"), 60.0, None) == "plain"  # no release: none called


@pytest.mark.parametrize(("seconds", "waits"), [(3.0, [1.0, 1.0, 1.0]), (0.25, [0.25])])
def test_a_task_is_given_up_on_at_its_deadline_exactly(
    clock: Clock, seconds: float, waits: list[float]
) -> None:
    """Waits of at most 1 s, until ``seconds`` have gone since the first: then an error
    naming the deadline (no later wait)."""
    future = Waiting(clock)
    with pytest.raises(WorkersStuck) as raised:
        tasks._result(future, seconds, lambda: [])
    assert future.timeouts == waits
    said = str(raised.value)
    assert f"did not finish within {seconds:.0f} s" in said
    assert "WARMFIT_WORKER_PATIENCE (now 1)" in said and future.released == 0


@pytest.mark.parametrize(
    ("stopped", "waits"),
    [
        ([[7]] * 10, 6),  # stopped at the first look: 5 s later, at the 6th
        ([[7], [7], [], [7], [7], [7], [7], [7], [7], [7]], 9),  # running again: anew
        ([[], [], [9, 7], [9], [9], [9], [9], [9]], 8),
    ],
)
def test_a_stopped_worker_is_given_up_on_after_5_s_stopped(
    clock: Clock, stopped: list[list[int]], waits: int
) -> None:
    looks = iter(stopped)
    future = Waiting(clock)
    with pytest.raises(WorkersStuck) as raised:
        tasks._result(future, 600.0, lambda: next(looks))
    assert len(future.timeouts) == waits
    first = next(s for s in reversed(stopped[:waits]) if s)[0]
    assert f"worker process {first} was stopped (SIGSTOP" in str(raised.value)
    assert "for 5 s while replaying" in str(raised.value)


def test_without_a_watch_only_the_deadline_ends_the_wait(clock: Clock) -> None:
    future = Waiting(clock)
    with pytest.raises(WorkersStuck, match="did not finish within 30 s"):
        tasks._result(future, 30.0, None)
    assert len(future.timeouts) == 30


def test_a_dead_worker_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="a worker process died while replaying"):
        tasks._result(Failing(BrokenProcessPool("gone")), 60.0, None)


def test_a_task_the_cluster_gave_up_on_is_a_usage_error_any_other_error_itself() -> None:
    class KilledWorker(Exception):  # distributed's, by its name
        pass

    with pytest.raises(UsageError) as raised:
        tasks._result(Failing(KilledWorker("task x\n marked  failed")), 60.0, None)
    assert "as many times as the cluster retries one (task x marked failed)" in str(raised.value)
    with pytest.raises(ValueError, match="a bug"):
        tasks._result(Failing(ValueError("a bug")), 60.0, None)


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        ((), 60.0),
        (("not a list",), 60.0),
        (([],), 60.0),
        (([(SimpleNamespace(readings=10**6), "fold"), (SimpleNamespace(readings=5 * 10**5), 1)],
          "other"), 90.0),  # 60 s + 20 us a reading
    ],
)  # fmt: skip
def test_a_tasks_deadline_is_60_s_and_20_us_a_reading_times_the_patience(
    monkeypatch: pytest.MonkeyPatch, args: tuple[Any, ...], seconds: float
) -> None:
    monkeypatch.delenv("WARMFIT_WORKER_PATIENCE", raising=False)
    assert tasks.task_seconds(args) == pytest.approx(seconds, rel=1e-12)
    monkeypatch.setenv("WARMFIT_WORKER_PATIENCE", "2.5")
    assert tasks.task_seconds(args) == pytest.approx(2.5 * seconds, rel=1e-12)


# --------------------------------------------------------------------------- many tasks, in order


def test_results_come_in_call_order_with_at_most_window_in_flight() -> None:
    submitted: list[tuple[Any, ...]] = []

    def submit(args: tuple[Any, ...]) -> Future[object]:
        submitted.append(args)
        return done(args[0] * 10)

    results = tasks._in_order(submit, [(1,), (2,), (3,), (4,), (5,)], 2)
    assert submitted == []  # nothing before the first result is asked for
    assert next(results) == 10 and len(submitted) == 2
    assert next(results) == 20 and len(submitted) == 3
    assert list(results) == [30, 40, 50] and len(submitted) == 5
    assert list(tasks._in_order(submit, [(6,)], 4)) == [60]  # fewer calls than the window


def test_here_runs_the_calls_in_this_process_as_they_are_asked_for() -> None:
    ran: list[int] = []

    def function(a: int, b: int) -> int:
        ran.append(a)
        return a + b

    results = tasks.here(function, [(1, 2), (3, 4)])
    assert ran == []
    assert list(results) == [3, 7] and ran == [1, 3]


def test_a_cluster_that_fails_under_the_tasks_is_a_usage_error() -> None:
    def results(error: BaseException) -> Iterator[int]:
        yield 1
        raise error

    with pytest.raises(UsageError) as raised:
        list(tasks._cluster_failures(results(OSError("stream\n closed"))))
    assert "(OSError: stream closed); nothing was written" in str(raised.value)
    with pytest.raises(UsageError, match=r"\(CancelledError: a task was cancelled\)"):
        list(tasks._cluster_failures(results(CancelledError())))
    assert list(tasks._cluster_failures(iter([1, 2]))) == [1, 2]


def test_dasks_own_logs_are_silenced_and_no_other() -> None:
    """Dask's loggers and asyncio's (its client's loop logged a task that failed as the
    cluster was lost, "Task exception was never retrieved", once in a CI run of the lost
    worker test), no other."""
    names = [
        "distributed", "distributed.warmfit_test", "asyncio", "distributedx",
        "warmfit_test.other", "asyncio_x",
    ]  # fmt: skip
    loggers = [logging.getLogger(n) for n in names]
    handlers = [logging.StreamHandler() for _ in names]
    saved = [(lg.level, list(lg.handlers)) for lg in loggers]
    try:
        for logger, handler in zip(loggers, handlers, strict=True):
            logger.setLevel(logging.INFO)
            logger.addHandler(handler)
        tasks._quiet_dask_logs()
        assert [lg.level for lg in loggers] == [logging.CRITICAL] * 3 + [logging.INFO] * 3
        assert [h.level for h in handlers] == [logging.CRITICAL] * 3 + [logging.NOTSET] * 3
    finally:
        for logger, handler, (level, _) in zip(loggers, handlers, saved, strict=True):
            logger.setLevel(level)
            logger.removeHandler(handler)


# --------------------------------------------------------------------------- the runner


class Pool:
    """A process pool that runs each task at once, here, and says what it was asked."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Any, ...]] = []
        self.shutdowns: list[dict[str, object]] = []
        self.free = threading.Event()
        self.free.set()

    def submit(self, function: Any, *args: Any) -> Future[object]:
        self.submitted.append(args)
        return done(function(*args))

    def shutdown(self, **how: object) -> None:
        self.shutdowns.append(how)
        self.free.wait(30)


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Pool]]:
    """The pools the runner starts (jobs, pool), and no real worker process."""
    made: list[tuple[int, Pool]] = []

    def new_pool(jobs: int) -> Pool:
        made.append((jobs, Pool()))
        return made[-1][1]

    monkeypatch.setattr(tasks, "new_pool", new_pool)
    return made


def add(a: int, b: int) -> int:
    return a + b


def test_a_runner_without_jobs_takes_the_free_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "default_jobs", lambda: 7)
    assert Runner(None, None).jobs == 7
    runner = Runner(3, None)
    assert (runner.jobs, runner.where, runner.workers()) == (3, 3, 3)
    with runner as entered:
        assert entered is runner


def test_one_job_runs_here_more_run_in_one_pool_with_twice_the_jobs_in_flight(
    pools: list[tuple[int, Pool]],
) -> None:
    calls = [(i, 100) for i in range(8)]
    results = Runner(1, None).run(add, calls)
    assert list(results) == [100 + i for i in range(8)] and pools == []
    runner = Runner(3, None)
    results = runner.run(add, calls)
    assert next(results) == 100
    assert len(pools) == 1 and pools[0][0] == 3
    pool = pools[0][1]
    assert len(pool.submitted) == 6  # 2 x 3 jobs in flight
    assert list(results) == [100 + i for i in range(1, 8)]
    assert list(runner.run(add, [(1, 1)])) == [2]
    assert len(pools) == 1 and len(pool.submitted) == 9  # the same pool again


def test_the_runner_takes_the_pool_started_early_and_its_index(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmfit.run.workers import EarlyPool

    pool = Pool()
    future = Waiting(clock, waits=1, value="index")
    early = EarlyPool(2, ("a",), ((1, 1),), pool=pool, index=[future])  # type: ignore[arg-type]
    runner = Runner(2, None)
    assert list(runner.adopt(early)) == ["index"] and runner._pool is pool
    stuck = EarlyPool(2, ("a",), ((1, 1),), pool=pool, index=[Waiting(clock)])  # type: ignore[arg-type]
    with pytest.raises(WorkersStuck, match="within 60 s"):  # a task of no batch: 60 s
        list(Runner(2, None).adopt(stuck))
    monkeypatch.setattr(tasks, "stopped_workers", lambda p: [31] if p is pool else [])
    stopped = EarlyPool(2, ("a",), ((1, 1),), pool=pool, index=[Waiting(clock)])  # type: ignore[arg-type]
    with pytest.raises(WorkersStuck, match="worker process 31 was stopped"):
        list(Runner(2, None).adopt(stopped))


def test_a_pools_stopped_worker_ends_its_tasks_wait(
    clock: Clock, pools: list[tuple[int, Pool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Slow(Pool):
        def submit(self, function: Any, *args: Any) -> Any:
            self.submitted.append(args)
            return Waiting(clock)

    monkeypatch.setattr(
        tasks, "new_pool", lambda jobs: pools.append((jobs, Slow())) or pools[-1][1]
    )
    seen: list[object] = []
    monkeypatch.setattr(tasks, "stopped_workers", lambda p: seen.append(p) or [12])
    with pytest.raises(WorkersStuck, match="worker process 12 was stopped"):
        list(Runner(2, None).run(add, [(1, 2)]))
    assert seen and all(p is pools[0][1] for p in seen)


def test_check_readable_names_the_first_file_the_workers_cannot_read(tmp_path: Path) -> None:
    readable = tmp_path / "here.parquet"
    readable.write_bytes(b"")
    runner = Runner(1, None)
    assert runner.check_readable([str(readable)]) is None
    with pytest.raises(UsageError) as raised:
        runner.check_readable([str(readable), str(tmp_path / "gone\n.parquet"), "/nope"])
    said = str(raised.value)
    assert said.startswith("the cluster's workers cannot read ") and "gone" in said
    assert "\n" not in said and "/nope" not in said


def test_release_lets_the_workers_exit_once(pools: list[tuple[int, Pool]]) -> None:
    runner = Runner(2, None)
    runner.release()  # no pool yet: nothing
    assert runner._release is None
    list(runner.run(add, [(1, 2)]))
    pool = pools[0][1]
    runner.release()
    runner.release(cancel=True)  # once
    assert runner._release is not None
    runner._release.join()
    assert pool.shutdowns == [{"cancel_futures": False}]


@pytest.mark.parametrize(
    ("error", "killed", "released"),
    [
        (None, False, []),
        (ValueError, False, [{"cancel_futures": True}]),  # each ends after its batch
        (KeyboardInterrupt, True, [{"cancel_futures": True}]),
        (WorkersStuck, True, [{"cancel_futures": True}]),
    ],
)
def test_the_runners_end_waits_for_the_workers_or_kills_them(
    pools: list[tuple[int, Pool]],
    monkeypatch: pytest.MonkeyPatch,
    error: type[BaseException] | None,
    killed: bool,
    released: list[dict[str, object]],
) -> None:
    ended: list[object] = []
    monkeypatch.setattr(tasks, "end_workers", ended.append)
    monkeypatch.setattr(tasks, "stopped_workers", lambda pool: [])
    runner = Runner(2, None)
    list(runner.run(add, [(1, 2)]))
    pool = pools[0][1]
    runner.__exit__(error, None, None)
    assert ended == ([pool] if killed else [])
    assert pool.shutdowns == [*released, {"wait": True, "cancel_futures": True}]


def test_the_runners_end_without_a_pool_closes_only_its_own_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ended: list[object] = []
    monkeypatch.setattr(tasks, "end_workers", ended.append)
    closed: list[str] = []

    class Client:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)
            raise OSError("the scheduler is gone")  # nothing to close: no error

    given = Runner(None, "tcp://10.0.0.7:8786")
    given._client = Client("given")
    given.__exit__(KeyboardInterrupt, None, None)
    own = Runner(None, "tcp://10.0.0.7:8786")
    own._client, own._own_client = Client("own"), True
    own.__exit__(None, None, None)
    assert closed == ["own"] and ended == []


def test_a_worker_stopped_while_the_workers_exit_is_killed_after_5_s(
    pools: list[tuple[int, Pool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Released workers exit after their batch; one stopped (SIGSTOP) cannot: after
    STOPPED_SECONDS (2 here) of looks that find it stopped, the workers are killed."""
    clock = Clock(step=1.0)  # a second a look
    monkeypatch.setattr(tasks, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(tasks, "STOPPED_SECONDS", 2.0)
    runner = Runner(2, None)
    list(runner.run(add, [(1, 2)]))
    pool = pools[0][1]
    pool.free.clear()  # its workers do not exit
    looks: list[object] = []
    ended: list[object] = []
    answers = iter([[5], [], [5], [5], [5], [5], [5], [5]])

    def stopped_workers(p: object) -> list[int]:
        looks.append(p)
        return [] if ended else next(answers)

    def end_workers(p: object) -> None:
        ended.append(p)
        pool.free.set()

    monkeypatch.setattr(tasks, "stopped_workers", stopped_workers)
    monkeypatch.setattr(tasks, "end_workers", end_workers)
    runner.release()
    runner.__exit__(None, None, None)
    # stopped at the 1st look, running at the 2nd, stopped again from the 3rd: 2 s later,
    # at the 5th look, the workers are killed (once)
    assert ended == [pool] and list(answers) == [[5]] * 3
    assert all(p is pool for p in looks)


# --------------------------------------------------------------------------- on a cluster


class Client:
    """A Dask client that runs each task at once, here, and says what it was asked."""

    def __init__(self, workers: list[dict[str, object]], fail: BaseException | None = None) -> None:
        self.infos = iter(workers)
        self.info: dict[str, object] = {}
        self.waited: list[tuple[int, float]] = []
        self.submitted: list[tuple[Any, ...]] = []
        self.fail = fail

    def scheduler_info(self) -> dict[str, object]:
        self.info = next(self.infos, self.info)
        return self.info

    def wait_for_workers(self, n: int, timeout: float) -> None:
        self.waited.append((n, timeout))
        if not self.scheduler_info().get("workers"):
            raise TimeoutError

    def submit(self, function: Any, *args: Any, **options: object) -> object:
        self.submitted.append((*args, options))
        if self.fail is not None:
            return Failing(self.fail)
        return done(function(*args))


def on(client: Client, monkeypatch: pytest.MonkeyPatch) -> Runner:
    """A runner for a cluster at an address, which ``client`` answers."""
    pytest.importorskip("distributed")
    connected: list[tuple[object, ...]] = []
    monkeypatch.setattr(tasks, "connect", lambda *a: connected.append(a) or client)
    runner = Runner(None, "tcp://10.0.0.7:8786")
    runner.connected = connected  # type: ignore[attr-defined]
    return runner


def test_a_cluster_address_is_connected_once_with_10_s_times_the_patience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from distributed import Client as DaskClient

    monkeypatch.setenv("WARMFIT_WORKER_PATIENCE", "3")
    client = Client([{"workers": {"a": 1, "b": 2}, "address": "tcp://sched:1"}])
    runner = on(client, monkeypatch)
    assert runner.where == "tcp://10.0.0.7:8786"  # not connected yet: as given
    assert runner.workers() == 2 and runner.workers() == 2
    assert runner.connected == [(DaskClient, "tcp://10.0.0.7:8786", 30.0)]  # type: ignore[attr-defined]
    assert runner._own_client and runner.where == "tcp://sched:1"
    client.info = {}
    assert runner.where == "tcp://10.0.0.7:8786"  # no address said: the one given


def test_a_client_given_is_used_as_it_is_and_not_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    from distributed import Client as DaskClient

    monkeypatch.setattr(tasks, "connect", lambda *a: pytest.fail("connected again"))
    given = DaskClient.__new__(DaskClient)  # an instance, never started
    runner = Runner(None, given)
    assert runner._connect() is given and not runner._own_client
    assert Runner(4, None)._own_client is False


@pytest.mark.parametrize(
    ("workers", "window"), [({"a": 1}, 2), ({}, 2), ({"a": 1, "b": 1, "c": 1}, 6)]
)
def test_a_cluster_runs_twice_its_workers_in_flight_each_task_impure(
    monkeypatch: pytest.MonkeyPatch, workers: dict[str, int], window: int
) -> None:
    client = Client([{"workers": {"x": 0}}, {"workers": workers}])
    runner = on(client, monkeypatch)
    results = runner.run(add, [(i, 1) for i in range(8)])
    assert next(results) == 1 and len(client.submitted) == window
    assert list(results) == list(range(2, 9))
    assert client.submitted[0] == (0, 1, {"pure": False}) and client.waited == []


def test_a_cluster_without_a_worker_is_waited_on_10_s_times_the_patience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WARMFIT_WORKER_PATIENCE", "0.5")
    client = Client([{"workers": {}}])
    runner = on(client, monkeypatch)
    with pytest.raises(UsageError) as raised:
        list(runner.run(add, [(1, 2)]))
    assert client.waited == [(1, 5.0)] and client.submitted == []
    assert "at tcp://10.0.0.7:8786 has no worker (waited 5 s)" in str(raised.value)
    late = Client([{"workers": {}}, {"workers": {"a": 1}}])  # one joins while waited on
    assert list(on(late, monkeypatch).run(add, [(1, 2)])) == [3] and late.waited == [(1, 5.0)]


def test_a_cluster_that_fails_under_a_task_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = on(Client([{"workers": {"a": 1}}], fail=OSError("connection reset")), monkeypatch)
    with pytest.raises(UsageError, match=r"failed while replaying \(OSError: connection reset\)"):
        list(runner.run(add, [(1, 2)]))
