"""GPU-only checks of the accelerator meter and a CUDA recording (``-m gpu``).

Skipped on machines without CUDA; run on a GPU machine with
``.venv/bin/python -m pytest -m gpu tests/test_gpu.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def test_the_accelerator_meter_agrees_with_torch_cuda() -> None:
    from warmfit.recorder.meters import AcceleratorMeter

    meter = AcceleratorMeter("cuda")
    try:
        torch.cuda.synchronize()
        before = meter.allocated_bytes()
        assert before == torch.cuda.memory_allocated()
        x = torch.empty(1000, dtype=torch.float32, device="cuda")  # 4000 B -> one 4096 B block
        assert meter.allocated_bytes() - before == 4096
        meter.reset_peak()
        y = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        del y
        assert meter.peak_bytes() == torch.cuda.max_memory_allocated() >= before + 4096 + (1 << 20)
        del x
    finally:
        meter.close()


def test_warmfit_record_of_the_demo_on_cuda_is_a_valid_trace(tmp_path: Path) -> None:
    from warmfit.format.trace import read_trace

    out = tmp_path / "cuda-demo"
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", "record", "-o", str(out), "--", sys.executable,
         "-m", "warmfit.samples.demo", "--steps", "3", "--device", "cuda"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    readings = read_trace([out])
    assert readings.height > 0
    assert (readings["logical_tokens"] > readings["packed_tokens"]).any()


def test_a_cuda_recording_carries_the_reserved_peak(tmp_path: Path) -> None:
    from warmfit.format.trace import read_trace
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import AcceleratorMeter

    meter = AcceleratorMeter("cuda")
    assert meter.has_reserved
    meter.reset_peak()
    assert meter.reserved_peak_bytes() == torch.cuda.max_memory_reserved()
    rec = Recorder(tmp_path / "out", run="gpu", device="cuda")
    for n in (1 << 16, 1 << 20):
        with rec.wave("sig", n, n) as wave:
            x = torch.empty(n, device="cuda")
            wave.forward_done()
            y = x * 2
            del x, y
    rec.close()
    readings = read_trace([tmp_path / "out"])
    reserved = readings["reserved_peak_bytes"]
    assert reserved.null_count() == 0
    assert (reserved >= readings["peak_bytes"]).all()  # the pool holds every allocation
