"""The trainer's memory budgets (warmfit/trainer/budget.py): a budget argument as bytes,
and the device's budget from torch's counters, the smallest over a process group's ranks.

torch's CUDA counters and ``torch.distributed`` are stood in for (no GPU here); the
two-process gloo group is tests/test_pricer_admission.py's slow test."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from warmfit.errors import UsageError
from warmfit.trainer.budget import _min_over_ranks, budget_bytes

torch = pytest.importorskip("torch")

from warmfit.trainer import device_budget  # noqa: E402

GB = 10**9


def test_a_numpy_integer_budget_is_its_bytes() -> None:
    assert budget_bytes(np.int64(5)) == 5
    assert type(budget_bytes(np.int64(5))) is int
    with pytest.raises(UsageError, match=r"^budget_bytes must be a number of bytes >= 0"):
        budget_bytes(np.int64(-1))
    with pytest.raises(UsageError, match=r"got True"):
        budget_bytes(True)


@pytest.mark.parametrize("reserve", ["0.1", None, True, 1, 1.0, -0.01])
def test_a_reserve_not_a_fraction_below_1_is_refused_before_torch_is_asked(reserve: Any) -> None:
    with pytest.raises(UsageError, match=r"^reserve must be a fraction in \[0, 1\)"):
        device_budget(reserve=reserve)


#: Each device's free bytes in :func:`two_devices`.
FREE = {0: 3 * GB, 1: 5 * GB}


class Devices:
    """torch.cuda's counters, each device's own: ``free``, ``total``, ``reserved`` and
    ``allocated`` bytes by index; the current device is ``current``."""

    def __init__(self, current: int, **counters: dict[int, int]) -> None:
        self.current = current
        self.counters = counters

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        c = self.counters
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (c["free"][i], c["total"][i]))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: c["reserved"][i])
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i: c["allocated"][i])


def two_devices(allocated: int) -> Devices:
    """Two devices, the current one device 1: 10 GB each; device 0 has 3 GB free, device 1
    5 GB; both hold 2 GB reserved, of which ``allocated`` is in use."""
    both = {0: 2 * GB, 1: 2 * GB}
    return Devices(
        1, free=FREE, total={0: 10 * GB, 1: 10 * GB}, reserved=both,
        allocated={0: allocated, 1: allocated},
    )  # fmt: skip


def test_the_device_asked_is_the_one_named_else_the_current_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    two_devices(GB // 2).apply(monkeypatch)
    # free + (2 GB reserved - 0.5 GB allocated) - 3% of 10 GB
    assert device_budget() == 5 * GB + 1_500_000_000 - 300_000_000
    assert device_budget(device="cuda") == device_budget()  # no index: the current one
    assert device_budget(device="cuda:1") == device_budget()
    assert device_budget(device="cuda:0") == 3 * GB + 1_500_000_000 - 300_000_000
    assert device_budget(device=torch.device("cuda", 0)) == device_budget(device="cuda:0")


def test_no_reusable_memory_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    two_devices(2 * GB).apply(monkeypatch)  # every reserved byte in use
    assert device_budget(reserve=0) == 5 * GB
    two_devices(3 * GB).apply(monkeypatch)  # more allocated than reserved: not less
    assert device_budget(reserve=0) == 5 * GB


class FakeGroup:
    """What ``_min_over_ranks`` uses of torch: a tensor on a device and a default process
    group whose other ranks' budget is ``others`` (an all-reduce with MIN)."""

    def __init__(self, backend: str | None, others: int) -> None:
        self.devices: list[Any] = []
        self.reduced: list[Any] = []

        def tensor(data: list[int], dtype: Any, device: Any) -> Any:
            self.devices.append(device)
            made = SimpleNamespace(data=list(data))
            made.item = lambda: made.data[0]
            return made

        def all_reduce(value: Any, op: Any) -> None:
            self.reduced.append(op)
            value.data[0] = min(value.data[0], others)

        self.torch = SimpleNamespace(
            tensor=tensor,
            int64="int64",
            device=lambda kind, index: (kind, index),
            cuda=SimpleNamespace(current_device=lambda: 3),
            distributed=SimpleNamespace(
                is_available=lambda: backend is not None,
                is_initialized=lambda: backend is not None,
                get_backend=lambda: backend,
                all_reduce=all_reduce,
                ReduceOp=SimpleNamespace(MIN="MIN"),
            ),
        )


def test_without_a_process_group_the_budget_is_this_ranks() -> None:
    group = FakeGroup(None, others=1)
    assert _min_over_ranks(group.torch, 7 * GB) == 7 * GB
    assert group.reduced == []


@pytest.mark.parametrize(
    ("backend", "device"), [("gloo", "cpu"), ("nccl", ("cuda", 3)), ("mpi", "cpu")]
)
def test_a_process_groups_budget_is_the_smallest_of_its_ranks(backend: str, device: Any) -> None:
    group = FakeGroup(backend, others=4 * GB)
    found = _min_over_ranks(group.torch, 7 * GB)
    assert found == 4 * GB and type(found) is int
    assert group.reduced == ["MIN"]
    # nccl reduces tensors on the rank's current GPU; the others on the CPU
    assert group.devices == [device]
    assert _min_over_ranks(FakeGroup(backend, others=9 * GB).torch, 7 * GB) == 7 * GB


# --- audit of 12-06g (audit1) ---


@pytest.mark.parametrize("argument", ["budget_bytes", "budget"])
def test_a_size_that_does_not_parse_names_the_argument_it_was_given_as(argument: str) -> None:
    """ "lots" is not a size: the error names the argument ("budget_bytes" by default, or
    the one given), then the value, as every other refusal of budget_bytes does."""
    with pytest.raises(UsageError, match=rf"^{argument} 'lots' is not a size: give bytes") as e:
        budget_bytes("lots", argument)
    assert e.value.argument == argument


def test_a_reserve_larger_than_what_is_free_leaves_a_budget_of_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Device 1 has 5 GB free of 10 GB, every reserved byte in use: a reserve of 60% (6
    GB) is more than is free, so the budget is 0 bytes (5 - 6 = -1 GB is no budget),
    and at 50% exactly 0 too (5 - 5); at 40%, 1 GB."""
    two_devices(2 * GB).apply(monkeypatch)
    assert device_budget(reserve=0.6) == 0
    assert device_budget(reserve=0.5) == 0
    assert device_budget(reserve=0.4) == GB


# --- issue 38, tests by pattern (s3) ---


@pytest.mark.parametrize(
    ("value", "bytes_"),
    [(0, 0), ("0", 0), ("0GB", 0), (1, 1), ("1", 1), (np.uint8(0), 0), ("1.5KiB", 1_536),
     ("128.8GB", 128_800_000_000), ("1.0000001KB", 1_000)],
)  # fmt: skip
def test_a_budget_of_0_bytes_and_the_edges_of_a_size_are_bytes(value: Any, bytes_: int) -> None:
    """0 bytes is a budget (>= 0: nothing fits but a wave priced 0); a size's fraction of
    a byte is dropped (1.0000001KB is 1,000 bytes)."""
    found = budget_bytes(value)
    assert found == bytes_ and type(found) is int


@pytest.mark.parametrize(
    ("value", "argument", "message"),
    [
        (-1, "budget_bytes",
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got -1."),
        (np.int64(-3), "budget",
         "budget must be a number of bytes >= 0 or a size such as '70GiB'; got -3."),
        (True, "budget_bytes",
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got True."),
        (1.5, "budget_bytes",
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got 1.5."),
        (None, "max_budget",
         "max_budget must be a number of bytes >= 0 or a size such as '70GiB'; got None."),
        ("lots", "budget_bytes",
         "budget_bytes 'lots' is not a size: give bytes, or a number with KB, MB, GB, TB, KiB, "
         "MiB, GiB or TiB (e.g. 128.8GB)."),
    ],
)  # fmt: skip
def test_each_refusal_of_a_budget_word_for_word(value: Any, argument: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        budget_bytes(value, argument)
    assert str(refused.value) == message and refused.value.argument == argument


@pytest.mark.parametrize("reserve", ["0.1", None, True, 1, 1.0, -0.01, float("nan")])
def test_a_reserve_refusal_word_for_word(reserve: Any) -> None:
    with pytest.raises(UsageError) as refused:
        device_budget(reserve=reserve)
    assert str(refused.value) == f"reserve must be a fraction in [0, 1); got {reserve!r}."


def test_no_cuda_device_is_refused_word_for_word(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as refused:
        device_budget()
    assert str(refused.value) == (
        "device_budget(): no CUDA device to read a budget from; give the budget in bytes (or "
        "a size such as '70GiB') instead."
    )


#: Device 0: 80 GB, 10 GB free, 6 GB reserved of which 1 GB allocated; device 1: 40 GB
#: and 3 bytes, 20 GB free, 2 GB reserved, all of it allocated.
TWO = dict(
    free={0: 10 * GB, 1: 20 * GB},
    total={0: 80 * GB, 1: 40 * GB + 3},
    reserved={0: 6 * GB, 1: 2 * GB},
    allocated={0: GB, 1: 2 * GB},
)


@pytest.mark.parametrize(
    ("current", "device", "reserve", "budget"),
    [
        (0, None, 0.03, 10 * GB + 5 * GB - 2_400_000_000),  # 3% of device 0's 80 GB
        (1, None, 0.03, 20 * GB + 0 - 1_200_000_000),  # int(1,200,000,000.09)
        (1, "cuda:0", 0.03, 10 * GB + 5 * GB - 2_400_000_000),  # asked, not current
        (0, "cuda:1", 0.5, 0),  # 20 GB - 20,000,000,001 bytes: no budget, not -1
        (0, "cuda:1", 0.25, 20 * GB - 10 * GB),  # int(10,000,000,000.75): rounded down
        (0, None, 0, 15 * GB),
    ],
)  # fmt: skip
def test_each_counter_is_the_devices_asked_and_the_reserve_a_fraction_of_its_total(
    monkeypatch: pytest.MonkeyPatch, current: int, device: str | None, reserve: float, budget: int
) -> None:
    """Free plus reserved-but-unallocated less the reserve of the TOTAL, every counter of
    the device asked (or the current one), never another device's."""
    Devices(current, **TWO).apply(monkeypatch)
    found = device_budget(reserve=reserve, device=device)
    assert found == budget and type(found) is int


@pytest.mark.parametrize(
    ("backend", "others", "budget"),
    [("gloo", [30 * GB, 9 * GB], 9 * GB), ("gloo", [30 * GB, 31 * GB], 12_600_000_000),
     ("gloo", [0], 0), ("mpi", [12_600_000_000], 12_600_000_000)],
)  # fmt: skip
def test_device_budget_is_the_smallest_over_several_ranks(
    monkeypatch: pytest.MonkeyPatch, backend: str, others: list[int], budget: int
) -> None:
    """This rank (device 0 of TWO, 3% kept: 12.6 GB) and the other ranks' budgets: a
    default process group's budget is the smallest of all of them, this rank's own when
    it is the smallest, 0 when a rank has none; reduced on the CPU for gloo and mpi."""
    Devices(0, **TWO).apply(monkeypatch)
    dist = torch.distributed
    reduced: list[Any] = []

    def all_reduce(value: Any, op: Any) -> None:
        reduced.append((op, value.device.type, value.dtype))
        value.fill_(min([int(value.item()), *others]))

    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda: backend)
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    found = device_budget()
    assert found == budget and type(found) is int
    assert reduced == [(dist.ReduceOp.MIN, "cpu", torch.int64)]


# --- issue 38, Pricer oracles round 3 (s7) ---


@pytest.mark.parametrize(
    ("value", "shown"),
    [(torch.tensor(1.5), "tensor(1.5000)"), (torch.tensor([3, 4]), "tensor([3, 4])")],
    ids=["float tensor", "two elements"],
)
def test_a_tensor_that_is_not_one_integer_is_a_usage_error(value: Any, shown: str) -> None:
    """A tensor has __index__, but a float tensor's or a tensor of two elements' raises
    TypeError: the budget is refused as a UsageError naming it (was the TypeError)."""
    with pytest.raises(UsageError) as caught:
        budget_bytes(value)
    assert str(caught.value) == (
        f"budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got {shown}."
    )
