"""The CPU meter counts live tensor-storage bytes exactly (worked numbers)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

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
