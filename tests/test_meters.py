"""The CPU meter counts live tensor-storage bytes exactly (worked numbers)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from warmfit.errors import UsageError  # noqa: E402
from warmfit.recorder.meters import CpuMeter, make_meter  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture
def meter():
    m = CpuMeter()
    yield m
    m.close()


def test_a_float32_tensor_of_1000_adds_4000_bytes_and_freeing_it_removes_them(meter):
    before = meter.allocated_bytes()
    x = torch.empty(1000, dtype=torch.float32)
    assert meter.allocated_bytes() - before == 4000
    del x
    assert meter.allocated_bytes() == before


def test_views_and_in_place_results_add_nothing(meter):
    x = torch.zeros(10, 100, dtype=torch.float64)  # 8000 bytes
    before = meter.allocated_bytes()
    v = x.view(100, 10)
    x.add_(1)
    t = x.t()
    assert meter.allocated_bytes() == before
    del v, t


def test_an_operator_result_counts_its_own_storage(meter):
    a = torch.ones(30, 40)
    b = torch.ones(40, 50)
    before = meter.allocated_bytes()
    c = a @ b  # 30 x 50 float32
    assert meter.allocated_bytes() - before == 30 * 50 * 4
    del c


def test_the_peak_holds_the_largest_live_total_until_reset(meter):
    base = meter.allocated_bytes()
    meter.reset_peak()
    x = torch.empty(2500)  # +10_000
    y = torch.empty(500, dtype=torch.int16)  # +1_000
    del x
    assert meter.allocated_bytes() - base == 1000
    assert meter.peak_bytes() - base == 11_000
    meter.reset_peak()
    assert meter.peak_bytes() == meter.allocated_bytes() == base + 1000
    del y


def test_a_storage_resized_in_place_is_recounted(meter):
    out = torch.empty(0)
    before = meter.allocated_bytes()
    torch.add(torch.ones(100), 1, out=out)  # out= resizes it to 100 floats; ones() is freed
    assert meter.allocated_bytes() - before == 400


def test_tensors_alive_when_the_meter_opens_are_in_its_baseline():
    weights = torch.empty(12_345, dtype=torch.uint8)
    m = CpuMeter()
    try:
        assert m.allocated_bytes() >= 12_345
        before = m.allocated_bytes()
        del weights
        assert before - m.allocated_bytes() == 12_345
    finally:
        m.close()


def test_backward_allocations_are_seen(meter):
    w = torch.randn(64, 64, requires_grad=True)
    before = meter.allocated_bytes()
    meter.reset_peak()
    (w @ w).sum().backward()
    assert w.grad is not None
    assert meter.allocated_bytes() - before >= 64 * 64 * 4  # the gradient stays alive
    assert meter.peak_bytes() > meter.allocated_bytes()  # temporaries came and went


def test_make_meter_picks_cpu_storages_for_the_cpu():
    m = make_meter("cpu")
    try:
        assert m.name == CpuMeter.name
        assert "cpu" in m.device_name
    finally:
        m.close()


# --------------------------------------------------------------------------- accelerators
# AcceleratorMeter's logic (which API it reads, which device, whether the raw statistics
# dict is trusted) checked on a CPU, against a fake allocator put in torch's place.


class FakeAllocator:
    """A GPU allocator's counters per device index, as ``torch.accelerator`` and
    ``torch.cuda`` expose them, and the raw nested statistics dict behind them (``raw``:
    what it adds to the public figures, a torch whose raw dict says otherwise)."""

    def __init__(self, kind: str = "xpu", current: int = 0) -> None:
        self.kind = kind
        self.current = current
        self.allocated = {0: 1_000, 1: 5_000, 2: 9_000}
        self.peak = {0: 1_500, 1: 7_000, 2: 9_500}
        self.reserved = {0: 2_048, 1: 8_192, 2: 10_240}
        self.raw_offset = {"allocated": 0, "peak": 0, "reserved": 0}
        self.resets: list[int] = []

    def is_available(self) -> bool:
        return True

    def current_accelerator(self):
        return torch.device(self.kind)

    def current_device_index(self) -> int:
        return self.current

    def memory_allocated(self, index: int) -> int:
        return self.allocated[index]

    def max_memory_allocated(self, index: int) -> int:
        return self.peak[index]

    def max_memory_reserved(self, index: int) -> int:
        return self.reserved[index]

    def reset_peak_memory_stats(self, index: int) -> None:
        self.resets.append(index)
        self.peak[index] = self.allocated[index]

    def get_device_name(self, index: int) -> str:
        return f"Fake GPU {index}"

    def raw(self, index: int) -> dict:
        off = self.raw_offset
        return {
            "allocated_bytes": {
                "all": {
                    "current": self.allocated[index] + off["allocated"],
                    "peak": self.peak[index] + off["peak"],
                }
            },
            "reserved_bytes": {"all": {"peak": self.reserved[index] + off["reserved"]}},
        }


@pytest.fixture
def fake_accelerator(monkeypatch):
    """A fake ``torch.accelerator`` (an ``xpu``) with its raw statistics call."""
    fake = FakeAllocator()
    monkeypatch.setattr(torch, "accelerator", fake)
    monkeypatch.setattr(torch._C, "_accelerator_getDeviceStats", fake.raw, raising=False)
    monkeypatch.setattr(torch.xpu, "get_device_name", fake.get_device_name, raising=False)
    return fake


@pytest.fixture
def fake_cuda(monkeypatch):
    """A fake ``torch.cuda`` on a torch without ``torch.accelerator``'s memory calls."""
    fake = FakeAllocator("cuda", current=1)
    monkeypatch.setattr(torch, "accelerator", None)
    for name in (
        "is_available",
        "memory_allocated",
        "max_memory_allocated",
        "max_memory_reserved",
        "reset_peak_memory_stats",
        "get_device_name",
    ):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))  # fmt: skip
    monkeypatch.setattr(torch.cuda, "current_device", fake.current_device_index)
    monkeypatch.setattr(torch._C, "_cuda_memoryStats", fake.raw, raising=False)
    return fake


def test_the_accelerator_meter_reads_the_current_devices_counters(fake_accelerator):
    from warmfit.recorder.meters import AcceleratorMeter

    fake_accelerator.current = 1
    meter = AcceleratorMeter()
    assert (meter.name, meter.index, meter.device_name) == (
        "torch.accelerator",
        1,
        "Fake GPU 1 (xpu:1)",
    )
    assert (meter.allocated_bytes(), meter.peak_bytes(), meter.reserved_peak_bytes()) == (
        5_000, 7_000, 8_192,
    )  # fmt: skip
    assert meter.has_reserved
    fake_accelerator.allocated[1] = 6_000
    meter.reset_peak()
    assert fake_accelerator.resets == [1]
    assert (meter.allocated_bytes(), meter.peak_bytes()) == (6_000, 6_000)
    meter.close()


def test_the_accelerator_meter_reads_the_device_it_was_given(fake_accelerator):
    from warmfit.recorder.meters import AcceleratorMeter

    meter = AcceleratorMeter("xpu:2")  # the current device is 0
    assert (meter.index, meter.allocated_bytes(), meter.peak_bytes()) == (2, 9_000, 9_500)
    assert meter.device_name == "Fake GPU 2 (xpu:2)"
    plain = AcceleratorMeter("xpu")  # no index: the current device
    assert (plain.index, plain.allocated_bytes()) == (0, 1_000)


def test_the_accelerator_meter_refuses_another_kind_of_device(fake_accelerator):
    from warmfit.recorder.meters import AcceleratorMeter

    with pytest.raises(
        UsageError, match="asked to measure cuda:0, but the accelerator here is xpu"
    ):
        AcceleratorMeter("cuda:0")


def test_the_raw_statistics_are_read_only_where_they_agree_at_the_start(fake_accelerator):
    """Each raw figure is read after the meter opens only if it agreed with the public
    call then; the figures below move the raw dict away afterwards, to see which is read."""
    from warmfit.recorder.meters import AcceleratorMeter

    agreeing = AcceleratorMeter()
    fake_accelerator.raw_offset.update(allocated=1, peak=2, reserved=3)
    assert (agreeing.allocated_bytes(), agreeing.peak_bytes(), agreeing.reserved_peak_bytes()) == (
        1_001, 1_502, 2_051,
    )  # fmt: skip
    for off in ({"allocated": 1, "peak": 0}, {"allocated": 0, "peak": 2}):
        # one of the two disagrees: neither is read raw; the reserved figure agreed
        fake_accelerator.raw_offset.update(reserved=0, **off)
        meter = AcceleratorMeter()
        fake_accelerator.raw_offset["reserved"] = 3
        assert (meter.allocated_bytes(), meter.peak_bytes()) == (1_000, 1_500), off
        assert meter.reserved_peak_bytes() == 2_051, off
    fake_accelerator.raw_offset.update(allocated=0, peak=0, reserved=0)
    fake_accelerator.raw_offset.update(reserved=3)
    meter = AcceleratorMeter()  # the reserved figure alone disagrees
    fake_accelerator.raw_offset.update(allocated=10, peak=20)
    assert (meter.allocated_bytes(), meter.peak_bytes(), meter.reserved_peak_bytes()) == (
        1_010, 1_520, 2_048,
    )  # fmt: skip


def test_a_raw_dict_of_another_shape_keeps_the_public_calls(fake_accelerator, monkeypatch):
    from warmfit.recorder.meters import AcceleratorMeter

    monkeypatch.setattr(torch._C, "_accelerator_getDeviceStats", lambda index: {}, raising=False)
    meter = AcceleratorMeter()
    assert (meter.allocated_bytes(), meter.peak_bytes(), meter.reserved_peak_bytes()) == (
        1_000, 1_500, 2_048,
    )  # fmt: skip
    # a raw dict with the allocated figures but no reserved ones: those two are read raw
    monkeypatch.setattr(
        torch._C, "_accelerator_getDeviceStats",
        lambda index: {"allocated_bytes": {"all": {"current": 1_000, "peak": 1_500}}},
        raising=False,
    )  # fmt: skip
    meter = AcceleratorMeter()
    fake_accelerator.allocated[0] = 3
    assert (meter.allocated_bytes(), meter.reserved_peak_bytes()) == (1_000, 2_048)


def test_without_a_raw_call_the_public_calls_are_read(fake_accelerator, monkeypatch):
    from warmfit.recorder.meters import AcceleratorMeter

    monkeypatch.setattr(torch._C, "_accelerator_getDeviceStats", None)
    meter = AcceleratorMeter()
    fake_accelerator.allocated[0] = 4_321
    assert meter.allocated_bytes() == 4_321


def test_an_accelerator_without_a_reserved_peak_has_none(fake_accelerator, monkeypatch):
    from warmfit.recorder.meters import AcceleratorMeter

    monkeypatch.delattr(FakeAllocator, "max_memory_reserved")
    meter = AcceleratorMeter()
    assert not meter.has_reserved
    assert (meter.allocated_bytes(), meter.peak_bytes()) == (1_000, 1_500)


def test_the_cuda_api_is_read_where_torch_accelerator_has_no_memory_calls(fake_cuda):
    from warmfit.recorder.meters import AcceleratorMeter

    meter = AcceleratorMeter()
    assert (meter.name, meter.index, meter.device_name) == ("torch.cuda", 1, "Fake GPU 1 (cuda:1)")
    assert (meter.allocated_bytes(), meter.peak_bytes(), meter.reserved_peak_bytes()) == (
        5_000, 7_000, 8_192,
    )  # fmt: skip
    fake_cuda.raw_offset.update(allocated=1, peak=2, reserved=3)  # read raw: they agreed
    assert (meter.allocated_bytes(), meter.peak_bytes(), meter.reserved_peak_bytes()) == (
        5_001, 7_002, 8_195,
    )  # fmt: skip
    meter.reset_peak()
    assert fake_cuda.resets == [1]
    assert AcceleratorMeter("cuda:2").allocated_bytes() == 9_000  # raw disagrees now: public


def test_a_torch_accelerator_that_is_not_available_falls_back_to_cuda(fake_cuda, monkeypatch):
    from warmfit.recorder.meters import AcceleratorMeter

    absent = FakeAllocator()
    monkeypatch.setattr(absent, "is_available", lambda: False)
    monkeypatch.setattr(torch, "accelerator", absent)
    assert AcceleratorMeter().name == "torch.cuda"
    monkeypatch.setattr(torch, "accelerator", object())  # an older torch.accelerator
    assert AcceleratorMeter().name == "torch.cuda"


def test_no_accelerator_at_all_is_a_usage_error(monkeypatch):
    from warmfit.recorder.meters import AcceleratorMeter

    monkeypatch.setattr(torch, "accelerator", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match="no GPU or other accelerator"):
        AcceleratorMeter()


def test_a_device_name_that_cannot_be_read_is_kind_and_index(fake_accelerator, monkeypatch):
    from warmfit.recorder.meters import AcceleratorMeter

    def broken(index: int) -> str:
        raise RuntimeError("no name")

    monkeypatch.setattr(torch.xpu, "get_device_name", broken)
    assert AcceleratorMeter().device_name == "xpu:0"
    monkeypatch.delattr(torch.xpu, "get_device_name")
    assert AcceleratorMeter().device_name == "xpu:0"


def test_make_meter_picks_the_accelerator_when_one_is_available(fake_accelerator, fake_cuda):
    meter = make_meter()
    assert meter.name == "torch.cuda"  # fake_cuda took torch.accelerator away
    assert make_meter("cuda:2").allocated_bytes() == 9_000


def test_make_meter_picks_torch_accelerator_first(fake_accelerator):
    assert make_meter().name == "torch.accelerator"
    assert make_meter("xpu:1").allocated_bytes() == 5_000
    cpu = make_meter("cpu")
    try:
        assert cpu.name == CpuMeter.name
    finally:
        cpu.close()


# --------------------------------------------------------------------------- cpu, exactly


def test_the_baseline_is_every_live_cpu_storage_counted_once():
    """Read through the garbage collector independently: each CPU tensor's storage once
    (a view shares its base's), by its bytes; the meter opens at exactly that sum."""
    import gc
    import warnings

    base = torch.empty(1000)  # 4,000 bytes, and a view of them that adds nothing
    view = base[10:]
    gc.collect()
    storages: dict[int, int] = {}
    with warnings.catch_warnings():  # some modules warn when their attributes are read
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor):
                try:
                    if obj.device.type == "cpu":
                        storage = obj.untyped_storage()
                        storages[storage._cdata] = storage.nbytes()
                except Exception:  # sparse or meta: no storage of its own
                    continue
    del storage
    meter = CpuMeter()
    try:
        assert meter.allocated_bytes() == meter.peak_bytes() == sum(storages.values())
        assert base.untyped_storage()._cdata in storages
    finally:
        meter.close()
    del view


def test_a_closed_meter_counts_no_more_and_can_be_closed_again():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    on_top = _get_current_dispatch_mode()
    meter = CpuMeter()
    assert _get_current_dispatch_mode() is not on_top
    meter.close()
    assert _get_current_dispatch_mode() is on_top  # its mode is off the stack
    before = meter.allocated_bytes()
    x = torch.empty(1000)
    assert meter.allocated_bytes() == meter.peak_bytes() == before
    meter.close()
    del x


def test_closing_under_another_mode_leaves_it_on_top_and_stops_counting():
    from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode

    class Counting(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    meter = CpuMeter()
    other = Counting()
    with other:
        meter.close()  # not on top: the stack is left alone
        assert _get_current_dispatch_mode() is other
        before = meter.allocated_bytes()
        x = torch.ones(500)  # runs through the meter's mode, which counts no more
        assert meter.allocated_bytes() == before
        assert Counting.calls >= 1
    del x


def test_operators_returning_several_tensors_count_each_storage():
    x = torch.arange(100, dtype=torch.float32)
    meter = CpuMeter()
    try:
        before = meter.allocated_bytes()
        values, indices = torch.sort(x)  # a tuple: 400 bytes of values, 800 of int64 indices
        assert meter.allocated_bytes() - before == 1_200
        parts = torch._foreach_add([x, x[:10]], 1.0)  # a list: 400 and 40 bytes
        assert meter.allocated_bytes() - before == 1_640
        # lists in a tuple: the functional fused Adam's new parameters, gradients and
        # moments, 4 x 400 bytes (its state step is an input, not an output)
        p, g, m, v = (torch.rand(100) for _ in range(4))
        step = torch.tensor(1.0)
        before = meter.allocated_bytes()
        stepped = torch.ops.aten._fused_adam(
            [p], [g], [m], [v], [], [step], lr=0.1, beta1=0.9, beta2=0.999,
            weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
        )  # fmt: skip
        assert [len(part) for part in stepped] == [1, 1, 1, 1, 0]
        assert meter.allocated_bytes() - before == 1_600
        del values, indices, parts, stepped
    finally:
        meter.close()


def test_a_capped_meter_refuses_a_cap_that_is_not_a_number_of_bytes():
    from warmfit.recorder.meters import CappedCpuMeter

    for cap in (True, 1.5, -1, "100"):
        with pytest.raises(UsageError, match="must be a number of bytes >= 0"):
            CappedCpuMeter(cap)


def test_a_capped_meter_runs_out_of_memory_one_byte_past_its_cap():
    from warmfit.recorder.meters import CappedCpuMeter, meter_live

    meter = CappedCpuMeter(meter_live() + 4_000)
    try:
        ok = torch.empty(1_000)  # 4,000 bytes: exactly at the cap
        assert meter.ooms == 0
        said = ""
        try:
            torch.empty(1, dtype=torch.uint8)
        except torch.OutOfMemoryError as oom:  # (its frames, which hold the output, go after)
            said = str(oom)
        live = meter.cap_bytes + 1
        assert said == (
            f"Simulated CPU out of memory. 1 bytes more would hold {live:,} bytes of CPU "
            f"tensors, over the cap of {meter.cap_bytes:,} (warmfit CappedCpuMeter, a simulation)."
        )
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(2, dtype=torch.uint8)
        assert meter.ooms == 2
        assert meter.allocated_bytes() == meter.cap_bytes  # the failed outputs were dropped
        del ok
    finally:
        meter.close()
    zero = CappedCpuMeter(0)  # a cap of 0 bytes is a cap
    zero.close()
    assert zero.cap_bytes == 0


def test_the_cpu_name_is_the_first_model_name_of_cpuinfo(monkeypatch):
    import io
    import os
    import platform

    from warmfit.recorder import meters

    info = "processor\t: 0\nmodel name\t: Fake: CPU @ 3.0GHz \nmodel name\t: Second\n"
    monkeypatch.setattr(meters, "open", lambda *a, **k: io.StringIO(info), raising=False)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    assert meters._cpu_name() == "cpu: Fake: CPU @ 3.0GHz (12 logical cores, x86_64)"

    def missing(*args, **kwargs):
        raise FileNotFoundError("/proc/cpuinfo")

    monkeypatch.setattr(meters, "open", missing, raising=False)
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert meters._cpu_name() == "cpu: arm (12 logical cores, x86_64)"
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert meters._cpu_name() == "cpu: x86_64 (12 logical cores, x86_64)"


def test_a_meter_that_says_it_has_a_reserved_peak_can_read_it(fake_accelerator, monkeypatch):
    """The Meter protocol's promise (docs/reference/recorder.md): ``has_reserved`` only
    where ``reserved_peak_bytes()`` answers. CPU storages have no reserved pool."""
    from warmfit.recorder.meters import AcceleratorMeter, CappedCpuMeter

    cpu, capped = CpuMeter(), CappedCpuMeter(10**12)
    try:
        for meter in (cpu, capped, AcceleratorMeter()):
            if meter.has_reserved:
                assert isinstance(meter.reserved_peak_bytes(), int)
        assert (cpu.has_reserved, capped.has_reserved) == (False, False)
    finally:
        cpu.close()
        capped.close()


def test_a_storage_grown_in_place_counts_only_its_growth(meter):
    out = torch.empty(10)  # 40 bytes
    before = meter.allocated_bytes()
    out.resize_(100)  # grown in place to 400 bytes
    assert meter.allocated_bytes() - before == 360
    out.resize_(20)  # smaller: the storage keeps its 400 bytes
    assert meter.allocated_bytes() - before == 360
    del out
    assert meter.allocated_bytes() - before == -40


def test_tensors_off_the_cpu_are_not_counted(meter):
    before = meter.allocated_bytes()
    x = torch.empty(1_000, device="meta")
    y = x * 2
    assert meter.allocated_bytes() == before
    del x, y


def test_a_tensor_freed_after_its_meter_is_gone_is_quiet(monkeypatch):
    """The meter's weak references can outlive it (here it was closed under another
    mode and freed at once): freeing a storage it counted, once the meter is gone, must
    raise nothing (an error in a weakref callback is only printed)."""
    import gc
    import sys

    from torch.utils._python_dispatch import TorchDispatchMode

    raised: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    gc.disable()  # the meter's references go with the next collection: free x before it
    try:
        m = CpuMeter()
        x = torch.empty(100)  # counted: 400 bytes
        counted = m.allocated_bytes()
        with TorchDispatchMode():
            m.close()  # another mode on top: the meter's mode lets go of the meter
        del m
        del x
    finally:
        gc.enable()
    gc.collect()
    assert counted >= 400 and raised == []


def test_a_capped_meter_counts_all_of_an_operators_outputs_before_it_fails():
    """torch.sort of 100 floats returns 400 bytes of values and 800 of indices: with
    100 bytes left, the message counts all 1,200 (1,100 past the cap), not the values'
    400 alone."""
    from warmfit.recorder.meters import CappedCpuMeter, meter_live

    x = torch.arange(100, dtype=torch.float32)
    meter = CappedCpuMeter(meter_live() + 100)
    try:
        said = ""
        try:
            torch.sort(x)
        except torch.OutOfMemoryError as oom:
            said = str(oom)
        assert said.startswith(
            f"Simulated CPU out of memory. 1,100 bytes more would hold "
            f"{meter.cap_bytes + 1_100:,} bytes of CPU tensors"
        )
        assert meter.ooms == 1
    finally:
        meter.close()


def test_make_meter_picks_cpu_storages_without_an_accelerator(monkeypatch):
    absent = FakeAllocator()
    monkeypatch.setattr(absent, "is_available", lambda: False)
    monkeypatch.setattr(torch, "accelerator", absent)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for meter in (make_meter(), make_meter(None)):
        try:
            assert meter.name == CpuMeter.name
        finally:
            meter.close()
    monkeypatch.setattr(torch, "accelerator", None)  # an older torch: torch.cuda is asked
    meter = make_meter()
    meter.close()
    assert meter.name == CpuMeter.name
