"""The Pricer as an admission controller (issue 39) and its value checks (issue 42).

- ``max_tokens``: the largest admitted wave, exact to the token, by the one search
  ``recommend`` runs: equal to ``recommend``'s admitted tokens on every stored trace;
- ``wave()``: the Pricer's own readings, with or without a trace being written, the
  same readings either way; an out-of-memory wave survived and learned (SPEC §9);
- ``device_budget``: torch's counters, the MIN over a process group's ranks;
- every value the Pricer takes is checked by the trace's column rules.
"""

from __future__ import annotations

import gc
import math
import socket
import warnings
import weakref
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import polars as pl
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from warmfit.errors import EstimateOverflowError, PolicyError, UsageError
from warmfit.format.schema import KINDS
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import PriceRequest, WarmFit
from warmfit.recorder import Recorder, RecorderWarning
from warmfit.recorder.meters import CappedCpuMeter, CpuMeter, meter_live
from warmfit.replay import replay
from warmfit.replay.admission import SEARCH_CAP_TOKENS, max_admitted, oom_bound
from warmfit.report.recommend import logical_tokens, recommend
from warmfit.trainer import device_budget
from warmfit.trainer.pricer import OomWave, Pricer, PricerWarning

from .fixed_meter import FixedMeter
from .oracle import unknown_signature_warning
from .strategies import examples, traces

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted(p for p in (REPO / "traces").iterdir() if p.is_dir() and any(p.rglob("*.parquet")))
BUILT_IN = ["max-merge", "warm-fit", "warm-affine", "envelope"]


def row(n: int, peak: int, **fields: Any) -> dict[str, Any]:
    """One reading as the recorder writes it (baseline 0, flat caller, whole)."""
    base = dict(signature="train", kind="flat", phase="caller", whole=True, packed_tokens=n,
                logical_tokens=n, output_bytes=0, baseline_bytes=0, peak_bytes=peak,
                static_floor_bytes=None, oom=False)  # fmt: skip
    return {**base, **fields}


# --------------------------------------------------------------------------- max_tokens


def test_max_tokens_worked_example_and_budget_strings() -> None:
    pricer = Pricer("warm-fit", safety_factor=1.1)
    assert pricer.max_tokens("train", 66_000) is None  # no profile, no floor: no price
    pricer.observe_row(row(100, 30_000))  # 300 B/token: int(300 n * 1.1) <= 66,000 up to n = 200
    assert pricer.max_tokens("train", 66_000) == 200
    assert pricer.price("train", 200) == 66_000 and pricer.price("train", 201) == 66_330
    assert pricer.max_tokens("train", 65_999) == 199
    assert pricer.max_tokens("train", "66KB") == 200  # the one parser: 66 KB = 66,000 bytes
    assert pricer.admits("train", 200, budget_bytes="66KB")
    assert not pricer.admits("train", 201, budget_bytes="66KB")
    # outputs as a function of the size: int((300 n + 10 n) * 1.1) <= 66,000 up to n = 193
    assert pricer.max_tokens("train", 66_000, output_bytes=lambda n: 10 * n) == 193
    assert pricer.max_tokens("train", 0) == 0  # not even one token
    assert pricer.max_tokens("x", 10, static_floor_bytes=0) == SEARCH_CAP_TOKENS  # a floor of 0


def stream_pricers(readings: pl.DataFrame, policy: str) -> dict[tuple[str, int], Pricer]:
    """A Pricer per (run, rank) that observed that stream's readings in trace order."""
    pricers: dict[tuple[str, int], Pricer] = {}
    for r in readings.iter_rows(named=True):
        key = (r["run"], r["rank"])
        if key not in pricers:
            pricers[key] = Pricer(policy, safety_factor=1.1)
        pricers[key].observe_row(r)
    return pricers


def pricer_admitted(readings: pl.DataFrame, pricers: dict, run: str, sig: str, budget: int) -> Any:
    """The smallest over the ranks of ``max_tokens`` at the trace's own sharing (the sum
    of the waves' logical over packed tokens) with the outputs and floor of each rank's
    last wave (the last begun, in trace order): what recommend documents it computes."""
    waves = readings.filter(run=run, signature=sig).unique(["rank", "wave"], keep="first")
    total_m, total_n = int(waves["logical_tokens"].sum()), int(waves["packed_tokens"].sum())
    best = None
    for (r, rank), pricer in sorted(pricers.items(), key=lambda kv: kv[0]):
        if r != run:
            continue
        mine = readings.filter(run=run, rank=rank, signature=sig)
        if mine.is_empty():
            continue
        # the last wave begun (the one whose first reading comes last), at that reading
        last = mine.unique("wave", keep="first", maintain_order=True).row(-1, named=True)
        admitted = pricer.max_tokens(
            sig, budget, logical_tokens=lambda n: logical_tokens(n, total_m, total_n),
            output_bytes=last["output_bytes"], static_floor_bytes=last["static_floor_bytes"],
        )  # fmt: skip
        if admitted is not None and (best is None or admitted < best):
            best = admitted
    return best


def check_equal(readings: pl.DataFrame, policy: str, budgets: list[int]) -> None:
    pricers = stream_pricers(readings, policy)
    for budget in budgets:
        for result in recommend(readings, budget, [policy]).results:
            run, sig = result["run"], result["signature"]
            ours = pricer_admitted(readings, pricers, run, sig, budget)  # type: ignore[arg-type]
            assert ours == result["admitted_tokens"], (run, sig, budget)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
@pytest.mark.parametrize("policy", BUILT_IN)
def test_max_tokens_is_recommends_admitted_tokens_on_every_stored_trace(
    trace: Path, policy: str
) -> None:
    readings = read_trace([trace]).sort("run", "rank", "seq", maintain_order=True)
    deltas = (readings["peak_bytes"] - readings["baseline_bytes"]).clip(0)
    budgets = [int(deltas.median()), int(deltas.max()) * 3, 12_345]  # type: ignore[arg-type]
    check_equal(readings, policy, budgets)


@settings(max_examples=examples(25), deadline=None)
@given(frame=traces(max_waves=12), policy=st.sampled_from(BUILT_IN), budget=st.integers(0, 10**7))
def test_max_tokens_is_recommends_on_generated_traces_with_oom_split_and_floors(
    frame: pl.DataFrame, policy: str, budget: int
) -> None:
    check_equal(frame.sort("run", "rank", "seq", maintain_order=True), policy, [budget])


# --------------------------------------------------------------------------- the Pricer's own readings


class Workload:
    """A deterministic CPU wave: a linear layer's forward and backward on n rows."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(32, 32)

    def run(self, wave: Any, n: int) -> None:
        x = torch.ones(n, 32)
        y = self.model(x).relu().sum()
        wave.forward_done()
        y.backward()
        self.model.zero_grad(set_to_none=True)


SIZES = [8, 16, 40, 24, 64, 12]


def test_the_pricer_learns_from_its_own_readings_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No recorder at all: the Pricer measures each wave itself (its meter is the
    recorder's CpuMeter); the first wave has no price, every later one has."""
    monkeypatch.chdir(tmp_path)
    work = Workload()
    pricer = Pricer("warm-fit", meter=CpuMeter())
    prices = []
    for n in SIZES:
        with pricer.wave("train", n) as w:
            work.run(w, n)
        prices.append(w.estimate_bytes)
        assert not w.oom
    pricer.close()
    assert prices[0] is None and all(isinstance(p, int) and p > 0 for p in prices[1:])
    assert set(pricer.profiles) == {"train"}
    assert list(tmp_path.iterdir()) == []  # no trace, no log, no file


def test_with_an_enabled_recorder_the_two_share_readings_and_the_trace_replays_to_the_prices(
    tmp_path: Path,
) -> None:
    """The same waves measured by the Pricer alone and through an enabled
    Recorder(pricer=): the same readings, so the same prices; the trace holds one wave
    per Pricer wave (no second meter, no nested wave) and replays to those prices."""
    alone = Pricer("warm-fit", meter=CpuMeter())
    work = Workload()
    prices_alone = []
    for n in SIZES:
        with alone.wave("train", n) as w:
            work.run(w, n)
        prices_alone.append(w.estimate_bytes)
    alone.close()

    shared = Pricer("warm-fit")
    work = Workload()
    recorder = Recorder(tmp_path / "t", run="r", device="cpu", pricer=shared)
    prices = []
    for n in SIZES:
        with shared.wave("train", n) as w:
            work.run(w, n)
        prices.append(w.estimate_bytes)
    recorder.close()
    assert shared._metering is None  # the recorder's meter took the readings
    assert prices == prices_alone
    readings = read_trace([tmp_path / "t"])
    assert readings["wave"].n_unique() == len(SIZES) and readings.height == 2 * len(SIZES)
    per_wave = replay(readings, ["warm-fit"], 1.1).per_wave.filter(policy="warm-fit").sort("wave")
    assert per_wave["estimate_bytes"].to_list() == prices
    recorded = readings.group_by("wave").agg(pl.col("estimate_bytes").first()).sort("wave")
    assert recorded["estimate_bytes"].to_list() == prices


def test_an_out_of_memory_wave_is_survived_and_learned(tmp_path: Path) -> None:
    """Under a capped meter (a simulated device) a wave too large runs out of memory:
    the block's error is survived, the reading is an OOM reading in the trace, and no
    wave at or above that size is admitted under a budget not larger than its own."""
    work = Workload()
    meter = CappedCpuMeter(meter_live() + 60_000)
    pricer = Pricer("max-merge")
    recorder = Recorder(tmp_path / "t", run="r", meter=meter, pricer=pricer)
    with pricer.wave("train", 16, budget_bytes=50_000) as w:
        work.run(w, 16)
    assert not w.oom and pricer.admits("train", 2_000, budget_bytes=10**9)
    with pricer.wave("train", 2_000, budget_bytes=50_000) as w:  # 2,000 x 32 x 4 B: over the cap
        work.run(w, 2_000)
        raise AssertionError("not reached: the forward ran out of memory")
    assert w.oom and meter.ooms == 1
    assert pricer.ooms == [OomWave("train", "flat", 2_000, 50_000)]
    assert pricer.oom_tokens("train", 50_000) == 2_000
    assert pricer.oom_tokens("train", 50_001) is None  # a larger budget: no evidence
    assert not pricer.admits("train", 2_000, budget_bytes=50_000)
    assert not pricer.admits("train", 5_000, budget_bytes=40_000)
    assert pricer.admits("train", 2_000, budget_bytes=10**9)
    assert pricer.max_tokens("train", 10**9) > 2_000  # type: ignore[operator]
    assert pricer.max_tokens("train", 50_000) < 2_000  # type: ignore[operator]
    with pricer.wave("train", 16, budget_bytes=50_000) as w:  # the loop goes on
        work.run(w, 16)
    assert not w.oom
    recorder.close()
    readings = read_trace([tmp_path / "t"])
    ooms = readings.filter(pl.col("oom"))
    assert ooms["packed_tokens"].to_list() == [2_000] and ooms["phase"].to_list() == ["forward"]


def test_a_size_that_ran_out_of_memory_is_refused_though_its_price_fits() -> None:
    """Worked example: 100 B/token learned, so 150 tokens price at 15,000 B, far within a
    1 MB budget; a wave of 150 tokens ran out of memory under that budget, so admits()
    refuses 150 (and above) under it, admits 149, and admits 150 under a larger budget."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    pricer.observe_row(row(100, 10_000))
    assert pricer.admits("train", 150, budget_bytes=1_000_000)
    with pricer.wave("train", 150, budget_bytes=1_000_000) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and pricer.price("train", 150) == 15_000
    assert not pricer.admits("train", 150, budget_bytes=1_000_000)
    assert not pricer.admits("train", 151, budget_bytes=999_999)
    assert pricer.admits("train", 149, budget_bytes=1_000_000)
    assert pricer.admits("train", 150, budget_bytes=1_000_001)
    assert pricer.max_tokens("train", 1_000_000) == 149
    # the evidence is of 'train' flat waves alone: another signature or kind has none
    assert pricer.oom_tokens("train", 1_000_000) == 150
    assert pricer.oom_tokens("eval", 1_000_000) is None
    assert pricer.oom_tokens("train", 1_000_000, kind="split_child") is None
    assert pricer.admits("eval", 150, static_floor_bytes=0, budget_bytes=1_000_000)


def test_a_budget_of_zero_bytes_as_a_float_is_a_budget() -> None:
    """replay's --budget takes a float: 0.0 bytes is a budget (nothing above the floor
    fits), as 0 is; only NaN and negatives are refused."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(100, 10_000))
    assert pricer.max_tokens("train", 0.0) == pricer.max_tokens("train", 0) == 0
    assert pricer.admits("x", 1, static_floor_bytes=0, budget_bytes=0.0)
    assert pricer.max_tokens("train", 0.5) == 0 and pricer.max_tokens("train", 100.0) == 1
    assert pricer.oom_tokens("train", 0.0) is None


def test_max_tokens_takes_logical_tokens_and_a_cap_of_one() -> None:
    """max-merge learned 100 B/token at a sharing of 2 (200 logical over 100 packed): a
    wave prices at 100 x max(n, m / 2). With m = 4n that is 200n, so 20,000 B admit 100
    tokens (m = n would admit 200). A cap of 1 is a search of one size; 0 is refused."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(100, 10_000, logical_tokens=200))
    assert pricer.max_tokens("train", 20_000, logical_tokens=lambda n: 4 * n) == 100
    assert pricer.max_tokens("train", 20_000) == 200
    assert pricer.max_tokens("train", 20_000, cap=1) == 1
    assert pricer.max_tokens("train", 50, cap=1) == 0
    with pytest.raises(UsageError, match=r"^cap must be >= 1; got 0\."):
        pricer.max_tokens("train", 20_000, cap=0)


def test_max_tokens_names_a_bad_kind_before_a_bad_cap() -> None:
    with pytest.raises(UsageError, match=r"^kind must be one of .*; got 'fused'"):
        Pricer().max_tokens("s", 10, kind="fused", cap=0)


def test_an_error_that_is_not_out_of_memory_passes() -> None:
    pricer = Pricer("max-merge", meter=CpuMeter())
    with pytest.raises(ValueError, match="bad batch"), pricer.wave("train", 4):
        raise ValueError("bad batch")
    assert pricer.ooms == []
    pricer.close()


# --------------------------------------------------------------------------- wave(): its
# counts, its meter, close() and what an out-of-memory wave gives back (issue 38's pass)


def dispatch_modes() -> int:
    """How many torch dispatch modes are on this thread's stack (an open CpuMeter
    keeps one there, watching every operator)."""
    return int(torch._C._len_torch_dispatch_stack())


def test_wave_refuses_a_bool_count_and_keeps_a_numpy_count_as_an_int() -> None:
    """``wave()`` takes its count as the trace's columns do: a bool is refused (the
    recorder's ``operator.index`` would take True as 1), a numpy integer becomes an
    int, in the wave and in the OOM evidence it leaves."""
    np = pytest.importorskip("numpy")
    pricer = Pricer("max-merge", meter=CpuMeter())
    try:
        with pytest.raises(
            UsageError, match=r"^packed_tokens must be an integer; got True of type bool"
        ):
            pricer.wave("train", True)
        with pricer.wave("train", np.int64(150)) as w:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    finally:
        pricer.close()
    assert w.oom and type(w.packed_tokens) is int and w.packed_tokens == 150
    assert pricer.ooms == [OomWave("train", "flat", 150, None)]
    assert type(pricer.ooms[0].packed_tokens) is int


def test_an_out_of_memory_wave_without_a_budget_counts_under_every_budget() -> None:
    """A wave run with no ``budget_bytes`` that runs out of memory leaves evidence with
    no budget (SPEC §9: it counts under any budget), not an error of its own."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    pricer.observe_row(row(100, 10_000))
    with pricer.wave("train", 300) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and w.budget_bytes is None
    assert pricer.ooms == [OomWave("train", "flat", 300, None)]
    assert pricer.oom_tokens("train", 1) == pricer.oom_tokens("train", 10**18) == 300
    assert pricer.max_tokens("train", 10**18) == 299  # 100 B/token fits; the OOM bounds it


def test_a_wave_given_no_outputs_is_learned_with_none() -> None:
    """``output_bytes`` defaults to 0: a 100-token wave that rose 10,000 bytes above its
    baseline teaches max-merge 100 B/token ((10,000 - 0) / 100), the same as the
    reading given with ``output_bytes=0``; one output byte would make it 99.99."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(1_000, 11_000))
    with pricer.wave("train", 100):
        pass
    pricer.close()
    assert pricer.price("train", 100) == 10_000
    told = Pricer("max-merge", safety_factor=1.0)
    told.observe_row(row(100, 11_000, baseline_bytes=1_000, output_bytes=0))
    assert pricer.price("train", 1_000) == told.price("train", 1_000) == 100_000


def test_the_pricers_own_meter_is_made_once_and_close_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no meter given, the Pricer makes one (a CpuMeter here, which keeps a
    dispatch mode open) for its first wave and measures every later wave with it;
    ``close()`` stops it, so no mode is left watching operators, and closing again
    (or closing a Pricer that never measured) does nothing."""
    import warmfit.recorder.recorder as recorder_module

    made: list[Any] = []
    make_meter = recorder_module.make_meter

    def counted(device: Any = None) -> Any:
        made.append(make_meter(device))
        return made[-1]

    monkeypatch.setattr(recorder_module, "make_meter", counted)
    Pricer("max-merge").close()  # never measured: nothing to stop
    before = dispatch_modes()
    work = Workload()
    pricer = Pricer("max-merge", device="cpu")
    for n in (8, 16, 24):
        with pricer.wave("train", n) as w:
            work.run(w, n)
    assert len(made) == 1 and isinstance(made[0], CpuMeter)
    assert dispatch_modes() == before + 1
    pricer.close()
    assert dispatch_modes() == before
    pricer.close()  # again: nothing
    assert dispatch_modes() == before


def test_close_stops_a_meter_given_to_the_pricer() -> None:
    """A CpuMeter counts the storages operators return while open; after the Pricer's
    ``close()`` a new tensor is no longer counted."""
    meter = CpuMeter()
    pricer = Pricer("max-merge", meter=meter)
    with pricer.wave("train", 4):
        pass
    pricer.close()
    counted = meter.allocated_bytes()
    x = torch.ones(1_000)  # 4,000 bytes the closed meter does not see
    assert meter.allocated_bytes() == counted
    del x


def test_a_wave_after_close_is_refused_when_the_meter_given_is_closed() -> None:
    """close() closes the meter a Pricer was given, for good: a closed CpuMeter counts no
    new storage, so a later wave would read 0 bytes and teach 0 B/token (every size then
    fits). Such a wave is refused; a Pricer that makes its own meter makes a new one and
    learns 100 x 100 float32s = 40,000 bytes over 100 tokens, after a close() as before."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    with pricer.wave("other", 4):
        pass
    pricer.close()
    with pytest.raises(UsageError, match=r"^wave\(\): this Pricer's meter was closed by close\(\)"):
        pricer.wave("train", 100)
    assert pricer.price("train", 100) is None  # learned nothing
    own = Pricer("max-merge", safety_factor=1.0, device="cpu")
    for size in (100, 100):
        with own.wave("train", size) as w:
            x = torch.ones(size, 100)
            w.forward_done()
            del x
        own.close()
        assert own.price("train", 100) == 40_000


def test_the_frames_an_out_of_memory_wave_unwound_are_cleared() -> None:
    """The locals of the frames an OOM unwound (their tensors) are released even while
    the error is still held (a logger, a debugger, ``sys.last_exc``): the wave clears
    those frames, so a weak reference to a tensor in one of them is dead after the
    block, though the error's traceback is still there."""
    pricer = Pricer("max-merge", meter=CpuMeter())
    error = torch.OutOfMemoryError("CUDA out of memory (simulated)")
    refs: list[weakref.ref[torch.Tensor]] = []

    def forward() -> None:
        activations = torch.ones(1_000)
        refs.append(weakref.ref(activations))
        raise error

    with pricer.wave("train", 4) as w:
        forward()
    pricer.close()
    assert w.oom and error.__traceback__ is not None  # the error still holds its traceback
    assert refs[0]() is None  # but the tensor its frame held is freed


def test_an_out_of_memory_wave_empties_the_cuda_allocators_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where CUDA is available, the allocator's cached blocks are given back after an
    OOM (``torch.cuda.empty_cache``), once, after the collector ran; a wave that did
    not run out of memory leaves the cache alone. (torch.cuda stood in for on CPU.)"""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    pricer = Pricer("max-merge", meter=CpuMeter())
    with pricer.wave("train", 4):
        pass
    assert calls == []
    with pricer.wave("train", 8) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and calls == ["empty_cache"]


def test_max_tokens_is_zero_when_even_one_token_prices_past_int64() -> None:
    """One token learned at 2**63 - 1 bytes, times 1.1, prices past int64: no size is
    admitted under any budget, so the answer is 0 tokens (None would say the
    signature has no price at all)."""
    pricer = Pricer("max-merge", safety_factor=1.1)
    pricer.observe_row(row(1, 2**63 - 1))
    with pytest.raises(EstimateOverflowError):
        pricer.price("train", 1)
    assert pricer.max_tokens("train", 2**63 - 1) == 0
    assert pricer.max_tokens("train", 1e30) == 0


def test_a_never_seen_signature_is_said_once_naming_the_known_ones() -> None:
    pricer = Pricer("max-merge")
    pricer.observe_row(row(10, 1_000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pricer.price("trian", 10) is None  # asked once: perhaps a new signature
        assert pricer.price("trian", 10) is None  # again, with no reading since: still perhaps
        pricer.observe_row(row(10, 1_000, signature="eval"))  # a new one, taught at once
    pricer.observe_row(row(10, 1_000))
    with pytest.warns(
        PricerWarning,
        match=r"taught 3 readings, none of signature 'trian'.*It knows 'eval', 'train'",
    ):
        assert not pricer.admits("trian", 10, budget_bytes=10**9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        assert pricer.max_tokens("trian", 10**9) is None


@pytest.mark.parametrize(("known", "more"), [(10, ""), (11, " (and 1 more)")])
def test_the_warning_names_ten_known_signatures_then_how_many_more(known: int, more: str) -> None:
    pricer = Pricer("max-merge")
    for i in range(known):
        pricer.observe_row(row(10, 1_000, signature=f"s{i:02d}"))
    assert pricer.price("trian", 10) is None  # asked once: perhaps a new signature
    pricer.observe_row(row(10, 1_000, signature="s00"))
    shown = ", ".join(f"'s{i:02d}'" for i in range(10))
    with pytest.warns(PricerWarning) as caught:
        pricer.price("trian", 10)
    (warning,) = caught
    assert (
        f"none of signature 'trian': it has no price for it and admits none of its waves. "
        f"It knows {shown}{more}. Is the signature mistyped" in str(warning.message)
    )
    assert f"taught {known + 1} readings" in str(warning.message)


def test_a_signature_first_asked_before_any_reading_is_warned_of_after_one() -> None:
    pricer = Pricer("max-merge")
    assert pricer.price("trian", 10) is None  # no reading yet: nothing to tell it from
    pricer.observe_row(row(10, 1_000))
    with pytest.warns(PricerWarning, match=r"taught 1 readings, none of signature 'trian'"):
        assert pricer.price("trian", 10) is None


def test_a_signature_named_only_by_an_oom_reading_is_never_warned_of() -> None:
    pricer = Pricer("max-merge")
    pricer.observe_row(row(10, 1_000))
    pricer.observe_row(row(10, 10**9, signature="oomed", oom=True))  # named: not mistyped
    assert pricer.price("oomed", 10) is None
    pricer.observe_row(row(10, 1_000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pricer.price("oomed", 10) is None


def test_past_ten_thousand_new_signatures_a_further_one_is_never_warned_of() -> None:
    """The Pricer keeps the first ask of at most 10,000 signatures it has no profile of (a
    bound on what a stream of new names costs), counting those named only by a reading it
    does not learn from (an OOM one: never warned of), not a taught one's OOM reading: the
    10,000th kept is warned of when asked again after a reading; the 10,001st is not kept,
    so never warned of."""
    pricer = Pricer("max-merge")
    pricer.observe_row(row(10, 1_000))
    pricer.observe_row(row(10, 10**9, oom=True))  # 'train' has a profile: nothing kept
    pricer.observe_row(row(10, 10**9, signature="oomed", oom=True))  # kept, never warned of
    for i in range(9_999):
        assert pricer.price(f"n{i}", 10) is None
    assert pricer.price("late", 10) is None  # the 10,001st: not kept
    pricer.observe_row(row(10, 1_000))
    with pytest.warns(PricerWarning, match="signature 'n9998'"):
        pricer.price("n9998", 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pricer.price("late", 10) is None
        assert pricer.price("oomed", 10) is None


def test_past_ten_thousand_asks_a_warm_started_pricer_warns_of_no_more(tmp_path: Path) -> None:
    """Warm-started from a trace, the Pricer warns at the first ask of a signature the
    trace lacks, while fewer than 10,000 asks are kept: the 10,000th is warned of, the
    10,001st is not (each warning is kept so as to be said once)."""
    trace = tmp_path / "one.parquet"
    write_trace(readings_frame([dict(seq=0, wave=0, signature="s", packed_tokens=10,
                                     logical_tokens=10, peak_bytes=1_000, whole=True)]), trace)  # fmt: skip
    pricer = Pricer.from_trace(trace, "max-merge")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(9_999):
            pricer.price(f"n{i}", 10)
    with pytest.warns(PricerWarning, match="signature 'n9999'"):
        pricer.price("n9999", 10)
    pricer.observe_row(row(10, 1_000, signature="s"))  # more readings: said once all the same
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pricer.price("late", 10) is None
        assert pricer.price("n9999", 10) is None


# --------------------------------------------------------------------------- device_budget


class FakeCuda:
    """torch.cuda's counters, patched: 10 GB total, 3 GB free, 2 GB reserved of which
    0.5 GB allocated."""

    def __init__(self, free: int = 3 * 10**9) -> None:
        self.free = free

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (self.free, 10 * 10**9))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=0: 2 * 10**9)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i=0: 5 * 10**8)


def test_device_budget_from_torchs_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeCuda().apply(monkeypatch)
    # free 3 GB + reusable 1.5 GB - 3% of 10 GB = 4.2 GB
    assert device_budget() == 4_200_000_000
    assert device_budget(reserve=0) == 4_500_000_000
    assert device_budget(reserve=0.5) == 0  # never below 0
    with pytest.raises(UsageError, match=r"^reserve must be a fraction"):
        device_budget(reserve=1.5)
    with pytest.raises(UsageError, match=r"^reserve must be a fraction"):
        device_budget(reserve=float("nan"))


def test_device_budget_without_a_gpu_says_to_give_one() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(UsageError, match="no CUDA device"):
        device_budget()


def _rank_budget(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    FakeCuda(free=(3 + rank) * 10**9).apply(pytest.MonkeyPatch())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        budget = device_budget()
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}").write_text(str(budget))


@pytest.mark.slow
def test_device_budget_is_the_min_over_a_gloo_groups_ranks(tmp_path: Path) -> None:
    """Two processes on CPU with gloo: rank 0 has 3 GB free, rank 1 4 GB; both get
    rank 0's budget, 4.2 GB."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    procs = [context.Process(target=_rank_budget, args=(r, port, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["4200000000"] * 2


# --------------------------------------------------------------------------- values (issue 42)

#: The refusal of a count of 2**63, one past a trace's int64 column.
PAST_INT64 = r"must be below 2\*\*63 \(a trace's int64 column\); got 9223372036854775808\."
BAD_ROWS = [
    (row(float("nan"), 1_000), r"^observe_row\(\): packed_tokens must be an integer; got nan"),
    (row(-5, 1_000), r"^observe_row\(\): packed_tokens must be > 0; got -5"),
    (row(10.0, 1_000), r"^observe_row\(\): packed_tokens must be an integer; got 10\.0"),
    (row(True, 1_000), r"^observe_row\(\): packed_tokens must be an integer; got True .*bool"),
    (row(10, 1_000, logical_tokens=5), r"logical_tokens must be >= packed_tokens \(10\); got 5"),
    (row(10, -1), r"^observe_row\(\): peak_bytes must be >= 0; got -1"),
    (row(10, 2**63), r"^observe_row\(\): peak_bytes must be below 2\*\*63"),
    # one count a float, every other an int (the usual path checks each count's type)
    (row(10.0, 1_000, logical_tokens=10), r"^observe_row\(\): packed_tokens must be an integer"),
    (row(10, 1_000, logical_tokens=20.0), r"^observe_row\(\): logical_tokens must be an integer"),
    (row(10, 1_000, output_bytes=0.0), r"^observe_row\(\): output_bytes must be an integer"),
    (row(10, 1_000, baseline_bytes=0.0), r"^observe_row\(\): baseline_bytes must be an integer"),
    (row(10, 1_000.0), r"^observe_row\(\): peak_bytes must be an integer; got 1000\.0"),
    (row(10, 1_000, static_floor_bytes=0.0), r"static_floor_bytes must be an integer; got 0\.0"),
    # each count just past the int64 column, and a zero count: refused, never learned
    (row(0, 1_000), r"^observe_row\(\): packed_tokens must be > 0; got 0"),
    (row(2**63, 1_000, logical_tokens=2**63), r"packed_tokens " + PAST_INT64),
    (row(10, 1_000, logical_tokens=2**63), r"logical_tokens " + PAST_INT64),
    (row(10, 1_000, output_bytes=2**63), r"output_bytes " + PAST_INT64),
    (row(10, 1_000, baseline_bytes=2**63), r"baseline_bytes " + PAST_INT64),
    (row(10, 1_000, static_floor_bytes=2**63), r"static_floor_bytes must be below 2\*\*63"),
    (row(10, 1_000, output_bytes=-1), r"^observe_row\(\): output_bytes must be >= 0; got -1"),
    (row(10, 1_000, baseline_bytes=-1), r"^observe_row\(\): baseline_bytes must be >= 0; got -1"),
    (row(10, 1_000, static_floor_bytes=-1), r"static_floor_bytes must be >= 0 or None; got -1"),
    (row(10, 1_000, output_bytes=True), r"output_bytes must be an integer; got True"),
    (row(10, 1_000, static_floor_bytes=True), r"static_floor_bytes must be an integer; got True"),
    (row(10, 1_000, kind="fused"), r"^observe_row\(\): kind must be one of flat, split_child"),
    (row(10, 1_000, phase="backward"), r"^observe_row\(\): phase must be one of forward, caller"),
    (row(10, 1_000, whole=1), r"^observe_row\(\): whole must be a bool; got 1"),
    (row(10, 1_000, oom="no"), r"^observe_row\(\): oom must be a bool; got 'no'"),
    (row(10, 1_000, signature=7), r"^observe_row\(\): signature must be a str; got 7"),
    ([1, 2, 3], r"^observe_row\(\): a reading is a mapping .* got list"),
    ("signature", r"^observe_row\(\): a reading is a mapping .* got str"),
    (b"signature", r"^observe_row\(\): a reading is a mapping .* got bytes"),
    (None, r"^observe_row\(\): a reading is a mapping .* got NoneType"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_ROWS)
def test_observe_row_refuses_what_a_trace_could_not_hold_and_learns_nothing(
    bad: Any, message: str
) -> None:
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(10, 1_000))
    with pytest.raises(UsageError, match=message):
        pricer.observe_row(bad)
    assert pricer.price("train", 10) == 1_000  # unchanged


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.price("s", True), r"^packed_tokens must be an integer; got True"),
        (lambda p: p.price("s", 5, static_floor_bytes=True), r"^static_floor_bytes must be an int"),
        (lambda p: p.price("s", 5, output_bytes=False), r"^output_bytes must be an integer"),
        (lambda p: p.price("s", 2**64), r"^packed_tokens must be below 2\*\*63"),
        (lambda p: p.admits("s", True, budget_bytes=10), r"^packed_tokens must be an integer"),
        (lambda p: p.admits("s", 5, budget_bytes=True), r"^budget_bytes must be a number"),
        (lambda p: p.max_tokens("s", float("nan")), r"^budget_bytes must be a number"),
        (lambda p: p.max_tokens("s", 10, kind="fused"), r"^kind must be one of"),
        (lambda p: p.wave("s", 5, budget_bytes="lots"), r"^budget_bytes 'lots' is not a size"),
    ],
)  # fmt: skip
def test_price_admits_and_max_tokens_refuse_bools_and_values_past_int64(
    call: Any, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        call(Pricer("max-merge"))


@pytest.mark.parametrize(
    "factor", [2**1100, -(2**1100), 10**5000], ids=["2**1100", "-2**1100", "1e5000"]
)
def test_a_safety_factor_past_a_float_is_one_line(factor: int) -> None:
    with pytest.raises(UsageError, match=r"^safety_factor must be a positive number .* bits"):
        Pricer("max-merge", safety_factor=factor)


def test_a_wave_priced_past_int64_runs_the_same_recorded_or_not(tmp_path: Path) -> None:
    """2**61 tokens at 300 B/token price past 2**63 bytes: recording must not change
    what the trainer does, so the wave runs both ways (recorded: unrecorded, warned)."""
    ran = []
    for enabled in (False, True):
        pricer = Pricer("max-merge")
        pricer.observe_row(row(100, 30_000))
        out = tmp_path / f"t{enabled}" if enabled else None
        recorder = Recorder(out, run="r", device="cpu", pricer=pricer, enabled=enabled)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with recorder.wave("train", 2**61):
                ran.append(enabled)
            with recorder.wave("train", 10) as wave:
                wave.forward_done()
        recorder.close()
        if enabled:
            assert any(issubclass(w.category, RecorderWarning) for w in caught)
            assert read_trace([out])["packed_tokens"].to_list() == [10, 10]  # type: ignore[list-item]
    assert ran == [False, True]


@pytest.mark.parametrize("budget", [2**63 - 1, 1e30], ids=["2**63-1", "1e30"])
def test_max_tokens_never_admits_a_wave_priced_past_int64(budget: float) -> None:
    """2**30 B/token x 1.1: 7,809,031,447 tokens price 9,223,372,036,532,654,080 bytes,
    one more past 2**63 - 1. A budget at (or past) int64 admits the former, never a wave
    past int64 (the search's OVERFLOW is no price), so the answer is not the search cap."""
    pricer = Pricer("max-merge")
    pricer.observe_row(row(1, 2**30))
    assert pricer.max_tokens("train", budget) == 7_809_031_447
    assert pricer.price("train", 7_809_031_447) == 9_223_372_036_532_654_080
    with pytest.raises(EstimateOverflowError):
        pricer.price("train", 7_809_031_448)


# --- audit of 12-06g (audit1) ---


def test_an_oom_of_one_kind_does_not_bound_another_kinds_admission() -> None:
    """Worked example: 100 B/token learned (safety factor 1), a flat wave of 150 tokens
    ran out of memory under 1 MB. admits() refuses a flat wave of 150 under that budget,
    but the OOM is of kind flat: a split_child wave of 150 tokens (priced 15,000 B, no
    OOM of its kind) is admitted, as oom_tokens and max_tokens of that kind agree."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    pricer.observe_row(row(100, 10_000))
    with pricer.wave("train", 150, budget_bytes=1_000_000) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and pricer.ooms == [OomWave("train", "flat", 150, 1_000_000)]
    assert not pricer.admits("train", 150, budget_bytes=1_000_000)
    assert pricer.oom_tokens("train", 1_000_000, kind="split_child") is None
    assert pricer.price("train", 150, kind="split_child") == 15_000
    assert pricer.admits("train", 150, budget_bytes=1_000_000, kind="split_child")
    assert pricer.max_tokens("train", 1_000_000, kind="split_child") == 10_000


def test_max_tokens_is_zero_when_a_wave_of_one_token_ran_out_of_memory() -> None:
    """Worked example: 100 B/token learned (safety factor 1), so one token prices 100 B,
    well within 1 MB; but a wave of 1 token ran out of memory under 1 MB, so no size is
    admitted under it: max_tokens is 0 (the search's cap is 1 - 1 = 0, no size is asked
    about, not even 0 tokens, which price() refuses), and 1 under a larger budget."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    pricer.observe_row(row(100, 10_000))
    with pricer.wave("train", 1, budget_bytes=1_000_000) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and pricer.oom_tokens("train", 1_000_000) == 1
    assert pricer.price("train", 1) == 100
    assert not pricer.admits("train", 1, budget_bytes=1_000_000)
    assert pricer.max_tokens("train", 1_000_000) == 0
    assert pricer.max_tokens("train", 1_000_001) == 10_000


# --- audit of 12-06g (audit4) ---


def test_an_oom_wave_of_another_kind_is_recorded_with_its_kind_and_bounds_only_it() -> None:
    """Worked example: 100 B/token learned (safety factor 1); a split_child wave of 150
    tokens runs out of memory under 1 MB. It is recorded as split_child's OOM: a
    split_child wave of 150 is refused under 1 MB (max_tokens 149), a flat one of 150
    (15,000 B, no OOM of its kind) is admitted (max_tokens 10,000: 1 MB / 100 B)."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    pricer.observe_row(row(100, 10_000))
    with pricer.wave("train", 150, budget_bytes=1_000_000, kind="split_child") as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and pricer.ooms == [OomWave("train", "split_child", 150, 1_000_000)]
    assert pricer.oom_tokens("train", 1_000_000, kind="split_child") == 150
    assert pricer.oom_tokens("train", 1_000_000) is None
    assert not pricer.admits("train", 150, budget_bytes=1_000_000, kind="split_child")
    assert pricer.max_tokens("train", 1_000_000, kind="split_child") == 149
    assert pricer.admits("train", 150, budget_bytes=1_000_000)
    assert pricer.max_tokens("train", 1_000_000) == 10_000


def test_the_oom_bound_is_the_smallest_size_whatever_order_the_ooms_came_in() -> None:
    """Worked example: 100 B/token learned (safety factor 1); waves of 200 then 100
    tokens run out of memory under 1 MB, in that order. The bound is the smaller, 100,
    not the first: 100 tokens are refused, 99 admitted (max_tokens 99)."""
    assert oom_bound([(200, None), (100, None)], 1_000) == 100
    assert oom_bound([(200, 1_000), (100, 1_000), (50, 999)], 1_000) == 100
    pricer = Pricer("max-merge", safety_factor=1.0, meter=CpuMeter())
    pricer.observe_row(row(100, 10_000))
    for n in (200, 100):
        with pricer.wave("train", n, budget_bytes=1_000_000):
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert [o.packed_tokens for o in pricer.ooms] == [200, 100]
    assert pricer.oom_tokens("train", 1_000_000) == 100
    assert not pricer.admits("train", 100, budget_bytes=1_000_000)
    assert pricer.max_tokens("train", 1_000_000) == 99


# --- issue 38, tests by pattern (s4) ---

#: Sizes OOM waves come in: ties, neighbours, one token.
OOM_SIZES = [1, 2, 99, 100, 101, 150]


def model_price(rate: int | None, o: int, s: int | None, n: int) -> int | None:
    """SPEC §3's estimate at a safety factor of 1 of max-merge having learned ``rate``
    bytes a token (None: no profile): ``o + max(floor, rate * n)``; the floor alone
    with no profile; None with neither."""
    if rate is None:
        return None if s is None else o + s
    return o + max(0 if s is None else s, rate * n)


def model_bound(
    ooms: list[tuple[str, str, int, float | None]], sig: str, kind: str, budget: float
) -> int | None:
    """SPEC §9: the smallest size of that signature and kind that ran out of memory under
    a budget at least this one (an OOM with no budget counts under every budget)."""
    sizes = [n for g, k, n, b in ooms if g == sig and k == kind and (b is None or budget <= b)]
    return min(sizes) if sizes else None


def model_max_tokens(
    rate: int | None, o: int, s: int | None, bound: int | None, budget: float, cap: int
) -> int | None:
    """The largest n in 1..cap below the bound whose model price is <= budget, solved
    by hand: the price is o + max(floor, rate * n), non-decreasing in n."""
    if model_price(rate, o, s, 1) is None:
        return None
    top = cap if bound is None else min(cap, bound - 1)
    if o + (0 if s is None else s) > budget:
        return 0
    most = top if not rate else int((budget - o) // rate)
    return max(0, min(top, most))


def budget_forms(budget: int) -> list[tuple[object, float]]:
    """A budget in each form an argument takes (bytes, a float, a size string), and half
    a byte more as a float: (the argument, the bytes it is)."""
    return [(budget, budget), (float(budget), budget), (str(budget), budget),
            (budget + 0.5, budget + 0.5)]  # fmt: skip


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_admits_oom_tokens_and_max_tokens_equal_a_plain_model_drawn_jointly(
    data: st.DataObject,
) -> None:
    """Every deciding input drawn at once: two signatures, each taught a rate (max-merge,
    safety factor 1, so a price is exactly outputs + max(floor, rate * n)) or not at
    all; OOM waves run through wave() of either signature and any kind, sizes that tie
    and neighbour, budgets none, one below, at or above the budget asked (given as
    bytes, a float or a string), in any order; then a wave of a drawn signature and
    kind, at an OOM size, one below or above it, or at the price's edge (the budget is
    drawn now and then to be met exactly by a price), with as many logical tokens or
    more (the OOM bound is of packed tokens, the price rises with the logical ones),
    outputs, a floor (none, 0, pricing the wave at the budget or a byte past it),
    unpriced or not, and a cap. admits, oom_tokens and max_tokens answer what the plain
    model of SPEC §3, §7 and §9 says."""
    rates = {
        sig: data.draw(st.none() | st.sampled_from([0, 1, 100, 4096]) | st.integers(0, 10**5))
        for sig in ("train", "eval")
    }
    o = data.draw(st.sampled_from([0, 0, 1, 50]))
    # a budget that a price meets exactly (outputs + rate x an OOM size or a neighbour), or any
    exact = [o + (rate or 0) * k for rate in rates.values() for k in (1, 99, 100, 150)]
    budget = data.draw(st.sampled_from([0, 1, 100, 10_000, 15_000, *exact]) | st.integers(0, 10**7))
    near = st.sampled_from([None, max(0, budget - 1), budget, budget + 1])
    budgets = st.one_of(near, near, near, st.integers(0, 10**7))  # near the budget, mostly
    ooms = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(["train", "eval"]), st.sampled_from(KINDS),
                st.sampled_from(OOM_SIZES) | st.integers(1, 300), budgets,
            ),
            max_size=5,
        )
    )  # fmt: skip
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    for sig, rate in rates.items():
        if rate is not None:
            k = data.draw(st.sampled_from([1, 7, 100]))
            pricer.observe_row(row(k, k * rate, signature=sig))
    # each OOM runs the collector (0.2 s with hypothesis' objects about): stood in for here
    with warnings.catch_warnings(), mock.patch.object(gc, "collect", lambda: 0):
        warnings.simplefilter("ignore")  # unpriced signatures asked: not the point here
        ran = []  # the OOM waves as run: (signature, kind, size, the budget's bytes)
        for sig, kind, n, b in ooms:
            given, bytes_ = (
                (None, None) if b is None else data.draw(st.sampled_from(budget_forms(b)))
            )
            with pricer.wave(sig, n, kind=kind, budget_bytes=given) as w:  # type: ignore[arg-type]
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
            assert w.oom
            ran.append((sig, kind, n, bytes_))
        pricer.close()
        assert pricer.ooms == [OomWave(*oom) for oom in ran]
        # the wave asked about: most often of a signature and kind that ran out of memory
        any_wave = st.tuples(st.sampled_from(["train", "eval"]), st.sampled_from(KINDS))
        sig, kind = data.draw(
            st.sampled_from([(g, k) for g, k, _, _ in ooms]) | any_wave if ooms else any_wave
        )
        rate = rates[sig]
        # no floor, 0, one that prices the wave exactly at the budget, one byte past, any
        s = data.draw(
            st.sampled_from([None, None, 0, max(0, budget - o), max(0, budget - o + 1)])
            | st.integers(0, 10**7)
        )
        asked, budget = data.draw(st.sampled_from(budget_forms(budget)))  # as given, in bytes
        bound = model_bound(ran, sig, kind, budget)  # type: ignore[arg-type]
        assert pricer.oom_tokens(sig, asked, kind=kind) == bound  # type: ignore[arg-type]
        edges = [1, *(n + d for g, k, n, _ in ooms for d in (-1, 0, 1) if g == sig and k == kind)]
        if rate:
            edges += [int(budget - o) // rate + d for d in (0, 1)]
        n = data.draw(st.sampled_from([e for e in edges if e >= 1]))
        unpriced = data.draw(st.booleans())
        # logical tokens: none shared, or more (max-merge, taught a sharing of 1, prices m)
        m = data.draw(st.sampled_from([n, n, n + 1, 2 * n]))
        price = model_price(rate, o, s, m)
        fits = unpriced if price is None else price <= budget
        want = fits and (bound is None or n < bound)
        got = pricer.admits(
            sig, n, m, budget_bytes=asked, output_bytes=o, static_floor_bytes=s,  # type: ignore[arg-type]
            kind=kind, unpriced=unpriced,
        )  # fmt: skip
        assert got == want, (sig, kind, n, price, bound)
        cap = data.draw(st.sampled_from([SEARCH_CAP_TOKENS, 1, 7, 100, 150, 257]))
        assert pricer.max_tokens(
            sig,
            asked,
            output_bytes=o,
            static_floor_bytes=s,
            kind=kind,
            cap=cap,  # type: ignore[arg-type]
        ) == model_max_tokens(rate, o, s, bound, budget, cap)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("budget", "larger"), [(999_999.5, 1_000_000), (float("inf"), None)], ids=["fraction", "inf"]
)
def test_an_oom_under_a_fractional_or_infinite_float_budget_bounds_that_budget(
    budget: float, larger: int | None
) -> None:
    """A float budget is a budget (replay's --budget takes one). 100 B/token learned
    (safety factor 1); a wave of 150 tokens runs out of memory under 999,999.5 B (or an
    infinite budget): it is survived and bounds that very budget: 150 refused, 149
    admitted, max_tokens 149, under 999,999.5 B; under 1,000,000 B (larger) no bound.
    (It was kept as int(999,999.5) = 999,999, so it bounded 999,999 B but not the budget
    it ran under; an infinite one raised OverflowError from the wave, the OOM lost.)"""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    with pricer.wave("train", 150, budget_bytes=budget) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom and pricer.ooms == [OomWave("train", "flat", 150, budget)]
    assert pricer.oom_tokens("train", budget) == 150
    assert not pricer.admits("train", 150, budget_bytes=budget)
    assert pricer.admits("train", 149, budget_bytes=budget)
    assert pricer.max_tokens("train", budget) == 149
    assert pricer.oom_tokens("train", 999_999) == 150
    if larger is not None:
        assert pricer.oom_tokens("train", larger) is None
        assert pricer.admits("train", 150, budget_bytes=larger)


@pytest.mark.parametrize(
    "naming",
    [
        dict(oom=True),
        dict(kind="split_child", phase="caller", whole=False),
        dict(kind="split_child", phase="forward", whole=False, oom=True),
        dict(kind="dp_rank_forward", phase="forward", whole=False, oom=True),
    ],
    ids=["flat OOM", "split child's caller", "split child's OOM forward", "dp forward OOM"],
)
def test_a_signature_named_only_by_a_reading_it_does_not_learn_from_is_never_warned_of(
    naming: dict[str, Any],
) -> None:
    """Twin of the OOM example with the kind and phase varied: any reading that teaches
    nothing (an OOM of any kind, a split child's caller reading) still names its
    signature, so 'named' asked before and after more readings is never warned of, and
    stays unpriced; 'trian', asked the same way and named by none, is warned of."""
    pricer = Pricer("max-merge")
    pricer.observe_row(row(10, 1_000))
    pricer.observe_row(row(10, 10**9, signature="named", **naming))
    assert pricer.price("named", 10) is None and pricer.price("trian", 10) is None
    pricer.observe_row(row(10, 1_000))
    with pytest.warns(PricerWarning) as caught:
        assert pricer.price("named", 10) is None
        assert pricer.price("trian", 10) is None
    assert ["'trian'" in str(w.message) for w in caught] == [True]
    assert set(pricer.profiles) == {"train"}


def oom_at(pricer: Pricer, signature: str, n: int, budget: int | None, kind: str = "flat") -> None:
    """A wave of ``n`` tokens that runs out of memory under ``budget``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unpriced signature's wave: not the point here
        with pricer.wave(signature, n, kind=kind, budget_bytes=budget) as w:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    assert w.oom


def test_an_unpriced_wave_admitted_when_told_is_still_bounded_by_its_oom() -> None:
    """Twin of the unpriced example with OOM evidence: 'eval' has no profile and no floor;
    a wave of 100 of it ran out of memory under 1 MB. admits(unpriced=True) takes a wave
    with no price as fitting, but not one the evidence refuses: 100 and 101 refused
    under 1 MB, 99 admitted; under 1,000,001 B (no evidence) 100 admitted; unpriced=False
    admits none of them."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    oom_at(pricer, "eval", 100, 1_000_000)
    pricer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        told = [
            pricer.admits("eval", n, budget_bytes=b, unpriced=True)
            for n, b in ((99, 1_000_000), (100, 1_000_000), (101, 1_000_000), (100, 1_000_001))
        ]
        assert told == [True, False, False, True]
        assert not pricer.admits("eval", 99, budget_bytes=1_000_000)
        assert pricer.admits("train", 100, budget_bytes=1_000_000)  # another signature: free


def test_max_tokens_of_an_unpriced_signature_is_none_whatever_its_oom_evidence() -> None:
    """Twin of the one-token OOM example with the signature unpriced: 'eval' has no
    profile; a wave of 1 token of it ran out of memory under 1 MB. It still has no price
    (None, not 0 tokens); given a floor of 0 it has one, and the evidence admits 0 tokens
    under 1 MB, the cap (100) under a larger budget."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    oom_at(pricer, "eval", 1, 1_000_000)
    pricer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert pricer.max_tokens("eval", 1_000_000) is None
        assert pricer.max_tokens("eval", 1_000_000, static_floor_bytes=0) == 0
        assert pricer.max_tokens("eval", 1_000_001, static_floor_bytes=0, cap=100) == 100


@pytest.mark.parametrize(
    ("oom", "budget", "admitted"),
    [
        (None, 2**63 - 1, 7_809_031_447),
        ((7_809_031_447, None), 2**63 - 1, 7_809_031_446),  # the OOM size itself: one below
        ((7_809_031_448, None), 2**63 - 1, 7_809_031_447),  # one past: the price bounds first
        ((7_809_031_447, 2**63 - 2), 2**63 - 1, 7_809_031_447),  # under a smaller budget
        ((7_809_031_447, 2**63 - 1), 2**63 - 1, 7_809_031_446),  # under exactly this one
    ],
    ids=["no OOM", "OOM at the last", "OOM one past", "OOM, smaller budget", "OOM, this budget"],
)
def test_max_tokens_near_int64_with_oom_evidence(
    oom: tuple[int, int | None] | None, budget: int, admitted: int
) -> None:
    """Twin of the past-int64 example with OOM evidence beside it: 2**30 B/token x 1.1
    prices 7,809,031,447 tokens at 9,223,372,036,532,654,080 B (within int64), one more
    past it (never admitted). An OOM at that last size (no budget, or exactly this one)
    lowers the answer by one; one a token past it, or under a smaller budget, does not."""
    pricer = Pricer("max-merge", meter=FixedMeter(0, 0))
    pricer.observe_row(row(1, 2**30))
    if oom is not None:
        oom_at(pricer, "train", *oom)
    pricer.close()
    assert pricer.max_tokens("train", budget) == admitted
    assert pricer.admits("train", admitted, budget_bytes=budget)
    if oom is not None and admitted < 7_809_031_447:
        assert not pricer.admits("train", admitted + 1, budget_bytes=budget)


@pytest.mark.parametrize(
    ("n", "m", "admitted"),
    [(149, 149, True), (149, 150, True), (149, 300, True), (150, 150, False), (150, 300, False)],
)
def test_the_oom_bound_is_of_packed_tokens_whatever_the_logical_ones(
    n: int, m: int, admitted: bool
) -> None:
    """Twin of the OOM example with logical tokens varied: 100 B/token learned (safety
    factor 1, no sharing, so a wave prices 100 B x its logical tokens: 30,000 B at most
    here, within 1 MB); a wave of 150 packed tokens ran out of memory under 1 MB. The
    bound is of packed tokens: 149 packed are admitted whatever their logical tokens
    (150 or 300 of them), 150 packed refused whatever theirs."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    oom_at(pricer, "train", 150, 1_000_000)
    pricer.close()
    assert pricer.price("train", n, m) == 100 * m
    assert pricer.admits("train", n, m, budget_bytes=1_000_000) is admitted


@pytest.mark.parametrize(("budget", "kept"), [(1_000_000.0, "1000000"), (999_999.5, "999999.5")])
def test_an_oom_waves_budget_is_a_whole_number_of_bytes_where_it_is_one(
    budget: float, kept: str
) -> None:
    """Twin of the fractional budget: a float budget that is a whole number of bytes is
    kept as an int (``OomWave.budget_bytes``' doc: a float only where it is not whole),
    so ``pricer.ooms`` reads 1000000, not 1000000.0; 999,999.5 stays the float."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    with pricer.wave("train", 150, budget_bytes=budget):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert repr(pricer.ooms[0].budget_bytes) == kept


# --- fresh audit of 12-06 (fa4) ---


@pytest.mark.parametrize(
    ("logical", "admitted"),
    [(None, 181), (lambda n: 2 * n, 95), (lambda n: 3 * n, 64)],
    ids=["m=n", "m=2n", "m=3n"],
)
def test_max_tokens_asks_the_outputs_at_the_packed_size_whatever_the_logical_tokens(
    logical: Any, admitted: int
) -> None:
    """Twin of the worked example's outputs-by-size with logical tokens varied: 100
    B/token learned (max-merge, sharing 1, safety factor 1), so a wave prices at 100 B x
    its logical tokens plus its outputs, output_bytes(n) = 10 B x its PACKED tokens.
    Under 20,000 B: m = n prices 110 n (181 tokens: 19,910 B; 182: 20,020 B), m = 2n
    prices 210 n (95: 19,950 B; 96: 20,160 B), m = 3n prices 310 n (64: 19,840 B; 65:
    20,150 B). (Outputs asked at the logical size, 10 m, admitted 90 and 60.)"""
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(100, 10_000))
    m = (lambda n: n) if logical is None else logical
    assert (
        pricer.max_tokens("train", 20_000, logical_tokens=logical, output_bytes=lambda n: 10 * n)
        == admitted
    )
    assert pricer.price("train", admitted, m(admitted), output_bytes=10 * admitted) <= 20_000
    top = admitted + 1
    assert pricer.price("train", top, m(top), output_bytes=10 * top) > 20_000


@pytest.mark.parametrize("budget", [0, 0.0, "0"], ids=["int", "float", "str"])
def test_an_oom_under_a_budget_of_zero_bytes_bounds_that_budget_alone(budget: object) -> None:
    """Twin of the OOM example with the budget at 0: a budget of 0 bytes is a budget,
    not "none given". 100 B/token learned (safety factor 1); a wave of 150 tokens ran
    out of memory under 0 B. It is kept with the budget 0, and bounds a budget of 0 B
    (150) but not one of half a byte or 1 MB: there 150 is admitted (15,000 B fits)
    and max_tokens is 10,000 (1,000,000 B / 100 B). (Taken as no budget, it bounded
    every budget: 150 refused under 1 MB, max_tokens 149.)"""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    oom_at(pricer, "train", 150, budget)  # type: ignore[arg-type]
    pricer.close()
    assert pricer.ooms == [OomWave("train", "flat", 150, 0)]
    assert pricer.oom_tokens("train", 0) == 150
    assert pricer.oom_tokens("train", 0.5) is None
    assert pricer.oom_tokens("train", 1_000_000) is None
    assert pricer.admits("train", 150, budget_bytes=1_000_000)
    assert pricer.max_tokens("train", 1_000_000) == 10_000


@pytest.mark.parametrize(
    ("oom", "cap", "admitted"),
    [(None, 1_000, 1_000), (5_000, 1_000, 1_000), (5_000, 10_000, 4_999), (1_001, 1_000, 1_000)],
    ids=["no OOM", "OOM past the cap", "OOM below the cap", "OOM one past the cap"],
)
def test_the_cap_and_the_oom_bound_each_lower_max_tokens_whichever_is_lower(
    oom: int | None, cap: int, admitted: int
) -> None:
    """Twin of the cap-of-one and OOM examples with both at once: 100 B/token learned
    (safety factor 1), under 1,000,000,000 B every size up to 10,000,000 fits. A wave of
    5,000 tokens that ran out of memory (no budget: under every one) bounds the answer
    at 4,999 under a cap of 10,000, but a cap of 1,000 is lower and answers; so does an
    OOM at 1,001. max_admitted, which recommend runs, answers the same. (The OOM size
    taken as the cap, whatever the cap, answered 4,999 and 1,000 past a cap of 1,000.)"""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    if oom is not None:
        oom_at(pricer, "train", oom, None)
    pricer.close()
    assert pricer.max_tokens("train", 1_000_000_000, cap=cap) == admitted
    assert max_admitted(lambda n: 100 * n, 1_000_000_000, oom, cap) == admitted


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_max_tokens_with_sharing_outputs_by_size_a_cap_and_ooms_drawn_on_each_others_edges(
    data: st.DataObject,
) -> None:
    """The joint oracle above passes max_tokens neither a logical_tokens nor an
    output_bytes function, and draws caps and OOM sizes apart; here they meet. max-merge
    taught ``rate`` B/token (sharing 1, safety factor 1) prices a wave of n packed
    tokens, m = share x n logical, outputs o + per x n at o + per n + max(floor, rate m).
    OOM waves of 'train' at a size, one below or above it, under no budget, 0 B, or the
    budget asked, one byte below or above; a cap at those sizes, one or 2**40; a budget
    that a price at those sizes meets exactly, or any. max_tokens is the largest n in
    1..min(cap, bound - 1) whose model price fits, solved by hand; admits agrees there
    and one token past it."""
    rate = data.draw(st.sampled_from([0, 1, 100]) | st.integers(0, 10_000))
    share, per = data.draw(st.sampled_from([1, 2, 3])), data.draw(st.sampled_from([0, 1, 10]))
    o = data.draw(st.sampled_from([0, 0, 50]))
    s = data.draw(st.sampled_from([None, None, 0]) | st.integers(0, 10**6))
    floor = 0 if s is None else s

    def price(n: int) -> int:
        return o + per * n + max(floor, rate * share * n)

    size = data.draw(st.sampled_from(OOM_SIZES) | st.integers(1, 300))
    budget = data.draw(
        st.sampled_from([0, 10**9, *(price(k) for k in (size - 1, size, size + 1) if k >= 1)])
        | st.integers(0, 10**7)
    )
    ooms = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from([size - 1, size, size + 1]).filter(lambda n: n >= 1)
                | st.integers(1, 300),
                st.sampled_from([None, 0, max(0, budget - 1), budget, budget + 1]),
            ),
            max_size=3,
        )
    )  # fmt: skip
    cap = data.draw(st.sampled_from([SEARCH_CAP_TOKENS, 1, max(1, size - 1), size, size + 1]))
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    k = data.draw(st.sampled_from([1, 7, 100]))
    pricer.observe_row(row(k, k * rate))
    with mock.patch.object(gc, "collect", lambda: 0):  # as the joint oracle: no collector
        for n, b in ooms:
            oom_at(pricer, "train", n, b)
    pricer.close()
    bound = model_bound([("train", "flat", n, b) for n, b in ooms], "train", "flat", budget)
    top = cap if bound is None else min(cap, bound - 1)
    if top < 1 or price(1) > budget:
        want = 0
    else:
        most = [top]
        if per:
            most.append((budget - o - floor) // per)
        if per + rate * share:
            most.append((budget - o) // (per + rate * share))
        want = min(most)
    logical = None if share == 1 and data.draw(st.booleans()) else (lambda n: share * n)
    outputs = o if per == 0 and data.draw(st.booleans()) else (lambda n: o + per * n)
    got = pricer.max_tokens(
        "train", budget, logical_tokens=logical, output_bytes=outputs, static_floor_bytes=s,
        cap=cap,
    )  # fmt: skip
    assert got == want, (rate, share, per, o, s, ooms, bound, cap, budget)
    for n in (want, want + 1):  # admits agrees at the answer and one past it
        if n >= 1:
            fits = price(n) <= budget and (bound is None or n < bound)
            admitted = pricer.admits(
                "train", n, share * n, budget_bytes=budget, output_bytes=o + per * n,
                static_floor_bytes=s,
            )  # fmt: skip
            assert admitted is fits, (n, price(n), bound, budget)


# --- fresh audit of 12-06 (fa5) ---


class PricedBelow100(WarmFit):
    """Warm-fit's price below 100 packed tokens; no price (None) from 100 on."""

    name = "priced-below-100"

    def price(self, request: PriceRequest) -> float | None:
        return None if request.packed_tokens >= 100 else super().price(request)


@pytest.mark.parametrize(
    ("unpriced_from", "budget", "largest"),
    [
        (100, 66_000, 99),  # 99 * 300 = 29,700 fits; 100 has no price: not admitted
        (100, 20_000, 66),  # 66 * 300 = 19,800 fits, 67 * 300 = 20,100 does not
        (1_000, 66_000, 220),  # 220 * 300 = 66,000, at the budget; 221 is past it
        (2, 66_000, 1),
    ],
)
def test_a_size_with_no_price_is_not_admitted_though_a_smaller_one_is(
    unpriced_from: int, budget: int, largest: int
) -> None:
    """SPEC §7 admits a wave whose estimate is <= the budget: a size the policy gives no
    price (None) has no estimate, so it is not admitted, even after smaller sizes were;
    max_admitted stops below it (or below the budget, whichever comes first)."""
    assert max_admitted(lambda n: 300 * n if n < unpriced_from else None, budget) == largest


@pytest.mark.parametrize(("budget", "largest"), [(66_000, 99), (20_000, 66)])
def test_max_tokens_stops_below_the_first_size_its_policy_gives_no_price(
    budget: int, largest: int
) -> None:
    """The same through a Pricer: taught 300 B/token (30,000 B over 100 tokens, safety
    factor 1.0) under a policy that prices no wave of 100 tokens or more."""
    pricer = Pricer(PricedBelow100, safety_factor=1.0)
    pricer.observe_row(row(100, 30_000))
    assert (pricer.price("train", 99), pricer.price("train", 100)) == (29_700, None)
    assert pricer.max_tokens("train", budget) == largest
    assert pricer.admits("train", largest, budget_bytes=budget)
    assert not pricer.admits("train", 100, budget_bytes=budget)


# --- fresh audit of 12-06 (fa7) ---


@pytest.mark.parametrize(
    ("n", "m", "message"),
    [
        (0, -1, "observe_row(): packed_tokens must be > 0; got 0."),
        (-3, -5, "observe_row(): packed_tokens must be > 0; got -3."),
        (0, 0, "observe_row(): packed_tokens must be > 0; got 0."),
        (10, 9, "observe_row(): logical_tokens must be >= packed_tokens (10); got 9."),
    ],
)
def test_a_reading_of_no_packed_tokens_is_refused_for_them_whatever_its_logical_ones(
    n: int, m: int, message: str
) -> None:
    """Twin of the zero-count refusal with the logical tokens varied: a reading of 0 (or
    -3) packed tokens is refused for its packed tokens, first, even where its logical
    tokens (-1, -5) are fewer still; only a positive packed count is then held against
    its logical one (10 packed, 9 logical). price() says the same of the same counts."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    with pytest.raises(UsageError) as caught:
        pricer.observe_row(row(n, 1_000, logical_tokens=m))
    assert str(caught.value) == message
    with pytest.raises(UsageError) as priced:
        pricer.price("train", n, m)
    assert "observe_row(): " + str(priced.value) == message
    assert pricer.profiles == {}  # nothing learned


@pytest.mark.parametrize("m", [None, 150, 300])
def test_an_oom_wave_bounds_its_packed_tokens_whatever_its_own_logical_ones(
    m: int | None,
) -> None:
    """Twin of the OOM example with the OOM wave's OWN logical tokens varied: 100 B/token
    learned (safety factor 1), a wave of 150 packed tokens (and 150 or 300 logical ones)
    runs out of memory under 1 MB. It is recorded as 150 packed tokens: 149 is admitted,
    150 is not, and max_tokens is 149 (its prices, 14,900 B and 15,000 B, fit 1 MB)."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 10_000))
    with pricer.wave("train", 150, m, budget_bytes=1_000_000) as w:
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
    pricer.close()
    assert w.oom
    assert pricer.ooms == [OomWave("train", "flat", 150, 1_000_000)]
    assert pricer.oom_tokens("train", 1_000_000) == 150
    assert pricer.admits("train", 149, budget_bytes=1_000_000)
    assert not pricer.admits("train", 150, budget_bytes=1_000_000)
    assert pricer.max_tokens("train", 1_000_000) == 149


# --- issue 38, tests by pattern round 2 (s6) ---

#: The columns a reading holds, as observe_row's refusals list them.
LISTED = (
    "signature, kind, phase, whole, packed_tokens, logical_tokens, output_bytes, "
    "baseline_bytes, peak_bytes, static_floor_bytes, oom"
)
NOT_INT = "must be an integer; got {} of type {} (an int, or a 0-d integer tensor)."
A_BOOL = "must be an integer; got {} of type bool (a bool is not a count)."
PAST = "must be below 2**63 (a trace's int64 column); got 9223372036854775808."


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (row(float("nan"), 1_000), "packed_tokens " + NOT_INT.format("nan", "float")),
        (row(-5, 1_000), "packed_tokens must be > 0; got -5."),
        (row(10.0, 1_000), "packed_tokens " + NOT_INT.format("10.0", "float")),
        (row(True, 1_000), "packed_tokens " + A_BOOL.format("True")),
        (row(10, 1_000, logical_tokens=5), "logical_tokens must be >= packed_tokens (10); got 5."),
        (row(10, -1), "peak_bytes must be >= 0; got -1."),
        (row(10, 2**63), "peak_bytes " + PAST),
        (row(10.0, 1_000, logical_tokens=10), "packed_tokens " + NOT_INT.format("10.0", "float")),
        (row(10, 1_000, logical_tokens=20.0), "logical_tokens " + NOT_INT.format("20.0", "float")),
        (row(10, 1_000, output_bytes=0.0), "output_bytes " + NOT_INT.format("0.0", "float")),
        (row(10, 1_000, baseline_bytes=0.0), "baseline_bytes " + NOT_INT.format("0.0", "float")),
        (row(10, 1_000.0), "peak_bytes " + NOT_INT.format("1000.0", "float")),
        (row(10, 1_000, static_floor_bytes=0.0),
         "static_floor_bytes " + NOT_INT.format("0.0", "float")),
        (row(0, 1_000), "packed_tokens must be > 0; got 0."),
        (row(2**63, 1_000, logical_tokens=2**63), "packed_tokens " + PAST),
        (row(10, 1_000, logical_tokens=2**63), "logical_tokens " + PAST),
        (row(10, 1_000, output_bytes=2**63), "output_bytes " + PAST),
        (row(10, 1_000, baseline_bytes=2**63), "baseline_bytes " + PAST),
        (row(10, 1_000, static_floor_bytes=2**63), "static_floor_bytes " + PAST),
        (row(10, 1_000, output_bytes=-1), "output_bytes must be >= 0; got -1."),
        (row(10, 1_000, baseline_bytes=-1), "baseline_bytes must be >= 0; got -1."),
        (row(10, 1_000, static_floor_bytes=-1), "static_floor_bytes must be >= 0 or None; got -1."),
        (row(10, 1_000, output_bytes=True), "output_bytes " + A_BOOL.format("True")),
        (row(10, 1_000, static_floor_bytes=True), "static_floor_bytes " + A_BOOL.format("True")),
        (row(10, 1_000, kind="fused"),
         "kind must be one of flat, split_child, dp_rank_forward; got 'fused'."),
        (row(10, 1_000, kind=None),
         "kind must be one of flat, split_child, dp_rank_forward; got None."),
        (row(10, 1_000, phase="backward"), "phase must be one of forward, caller; got 'backward'."),
        (row(10, 1_000, phase=0), "phase must be one of forward, caller; got 0."),
        (row(10, 1_000, whole=1), "whole must be a bool; got 1."),
        (row(10, 1_000, whole=None), "whole must be a bool; got None."),
        (row(10, 1_000, oom="no"), "oom must be a bool; got 'no'."),
        (row(10, 1_000, oom=np.int64(0)), "oom must be a bool; got np.int64(0)."),
        (row(10, 1_000, signature=7), "signature must be a str; got 7."),
        (row(10, 1_000, signature=b"train"), "signature must be a str; got b'train'."),
        ([1, 2, 3], f"a reading is a mapping of trace v1 column names to values ({LISTED}); "
                    "got list."),
        ("signature", f"a reading is a mapping of trace v1 column names to values ({LISTED}); "
                      "got str."),
        (b"signature", f"a reading is a mapping of trace v1 column names to values ({LISTED}); "
                       "got bytes."),
        (None, f"a reading is a mapping of trace v1 column names to values ({LISTED}); "
               "got NoneType."),
        ({k: v for k, v in row(10, 1_000).items() if k != "static_floor_bytes"},
         f"the reading has no 'static_floor_bytes' column; a reading maps trace v1 column names "
         f"to values ({LISTED})."),
    ],
)  # fmt: skip
def test_every_observe_row_refusal_is_whole_and_teaches_nothing(bad: Any, message: str) -> None:
    """BAD_ROWS' refusals (matched there by a prefix or a fragment), whole, with twins of
    other types: each names the call, the column, the value's repr and the rule."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(10, 1_000))
    with pytest.raises(UsageError) as caught:
        pricer.observe_row(bad)
    assert str(caught.value) == "observe_row(): " + message
    assert pricer.price("train", 10) == 1_000  # unchanged


#: Each count column of a reading: the 30,000 B reading of 100 tokens it is set in (max-merge,
#: f 1.0), then what the reading teaches at 3,300 and at 0 (as price("train", 100, 200,
#: output_bytes=7, static_floor_bytes=5) after it; a str: the refusal), and its refusal of a
#: negative value (``{}``).
ROW_COUNTS: dict[str, tuple[dict[str, Any], int, Any, str]] = {
    "packed_tokens": (row(100, 30_000, logical_tokens=10_000), 916,
                      "packed_tokens must be > 0; got 0.", "packed_tokens must be > 0; got {}."),
    "logical_tokens": (row(100, 30_000), 30_007,
                       "logical_tokens must be >= packed_tokens (100); got 0.",
                       "logical_tokens must be >= packed_tokens (100); got {}."),
    "output_bytes": (row(100, 30_000), 53_407, 60_007, "output_bytes must be >= 0; got {}."),
    "baseline_bytes": (row(100, 30_000), 53_407, 60_007, "baseline_bytes must be >= 0; got {}."),
    "peak_bytes": (row(100, 30_000), 6_607, 12, "peak_bytes must be >= 0; got {}."),
    "static_floor_bytes": (row(100, 30_000), 60_007, 60_007,
                           "static_floor_bytes must be >= 0 or None; got {}."),
}  # fmt: skip
ROW_VALUES = {
    "3300": 3300, "np.int64(3300)": np.int64(3300), "0": 0, "np.int64(0)": np.int64(0),
    "-3300": -3300, "np.int64(-3300)": np.int64(-3300), "-2**63": -(2**63), "2**63": 2**63,
    "3300.0": 3300.0, "np.float64(3300.0)": np.float64(3300.0), "nan": float("nan"),
    "inf": float("inf"), "'3300'": "3300", "True": True, "False": False, "None": None,
}  # fmt: skip


@pytest.mark.parametrize("shown", list(ROW_VALUES))
@pytest.mark.parametrize("column", list(ROW_COUNTS))
def test_each_count_column_of_a_reading_over_every_type_and_sign(column: str, shown: str) -> None:
    """Each count column given each type and sign, the other columns fixed: an int or a
    numpy int is learned (3,300 and 0 teach what they teach), anything else is refused
    whole, naming observe_row, the column and the value; None is no floor, and a count
    for every other column."""
    base, at_3300, at_zero, negative = ROW_COUNTS[column]
    value = ROW_VALUES[shown]
    if value is None and column == "static_floor_bytes":
        expected: Any = 60_007
    elif isinstance(value, bool):
        expected = f"{column} " + A_BOOL.format(value)
    elif not isinstance(value, int | np.integer):
        expected = f"{column} " + NOT_INT.format(repr(value), type(value).__name__)
    elif value >= 2**63:
        expected = f"{column} {PAST}"
    elif value < 0:
        expected = negative.format(int(value))
    else:
        expected = at_zero if value == 0 else at_3300
    pricer = Pricer("max-merge", safety_factor=1.0)
    if isinstance(expected, str):
        with pytest.raises(UsageError) as caught:
            pricer.observe_row({**base, column: value})
        assert str(caught.value) == "observe_row(): " + expected
        assert pricer.profiles == {}
    else:
        pricer.observe_row({**base, column: value})
        assert pricer.price("train", 100, 200, output_bytes=7, static_floor_bytes=5) == expected


NEGATIVE = "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got {}."
NOT_A_SIZE = (
    "budget_bytes {!r} is not a size: give bytes, or a number with KB, MB, GB, TB, KiB, MiB, "
    "GiB or TiB (e.g. 128.8GB)."
)


@pytest.mark.parametrize(
    ("budget", "admits", "oom_tokens", "max_tokens", "kept"),
    [
        # admits(10) (priced 3,300 B), oom_tokens (an OOM at 20 under 3,300 B), max_tokens,
        # and the budget an OOM wave under it keeps
        (3300, True, 20, 10, 3300),
        (3299, False, 20, 9, 3299),
        (3300.0, True, 20, 10, 3300),
        (3300.5, True, None, 10, 3300.5),
        ("3300", True, 20, 10, 3300),
        ("70GiB", True, None, 227_763_417, 75_161_927_680),
        (np.int64(3300), True, 20, 10, 3300),
        (np.float64(3300.0), True, 20, 10, 3300),
        (0, False, 20, 0, 0),
        (0.0, False, 20, 0, 0),
        (-0.0, False, 20, 0, 0),
        (np.int64(0), False, 20, 0, 0),
        ("0", False, 20, 0, 0),
        (math.inf, True, None, SEARCH_CAP_TOKENS, math.inf),
        (2**63, True, None, SEARCH_CAP_TOKENS, 2**63),
        (None, NEGATIVE.format(None), NEGATIVE.format(None), NEGATIVE.format(None), None),
        *[(v, *[NEGATIVE.format(shown)] * 4) for v, shown in [
            (-3300, "-3300"), (-3300.0, "-3300.0"), (np.int64(-3300), "-3300"),
            (-(2**63), "-9223372036854775808"), (math.nan, "nan"), (-math.inf, "-inf"),
            (True, "True"), (False, "False"), (1j, "1j"),
        ]],
        *[(v, *[NOT_A_SIZE.format(v)] * 4) for v in ["-1", "70 GB of it", "nan"]],
    ],
    ids=repr,
)  # fmt: skip
def test_every_budget_argument_over_every_type_and_sign(
    budget: Any, admits: Any, oom_tokens: Any, max_tokens: Any, kept: Any
) -> None:
    """admits, oom_tokens, max_tokens and wave take a budget alike (wave takes None too:
    no budget): an int, a float, a size string, a numpy number, 0 of each, infinity and
    2**63 are budgets (answers for max-merge at 330 B/token, an OOM at 20 tokens under
    3,300 B); a negative, NaN, a bool, anything else is refused whole, and a wave
    refused runs nothing. An OOM wave keeps a whole float budget as an int."""
    pricer = Pricer("max-merge", safety_factor=1.1, meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 30_000))
    with mock.patch.object(gc, "collect", lambda: 0):
        oom_at(pricer, "train", 20, 3300)
        calls = {
            "admits": lambda: pricer.admits("train", 10, budget_bytes=budget),
            "oom_tokens": lambda: pricer.oom_tokens("train", budget),
            "max_tokens": lambda: pricer.max_tokens("train", budget),
            "kept": lambda: (oom_at(pricer, "train", 30, budget), pricer.ooms[-1].budget_bytes)[1],
        }
        for name, expected in zip(calls, (admits, oom_tokens, max_tokens, kept), strict=True):
            if isinstance(expected, str):
                with pytest.raises(UsageError) as caught:
                    calls[name]()
                assert str(caught.value) == expected, name
                assert len(pricer.ooms) == 1  # a wave refused ran nothing
            else:
                answer = calls[name]()
                assert answer == expected and type(answer) is type(expected), name


#: Ten, eleven and twelve known signatures, sorted (the warning lists ten, then counts).
TEN, ELEVEN, TWELVE = ([f"s{i:02d}" for i in range(n)] for n in (10, 11, 12))


def live_pricer(signatures: list[str], ask: Any) -> Pricer:
    """A Pricer taught one reading of each signature, asked about 'trian' once before
    (no warning: perhaps a new signature), then taught one more reading of the first."""
    pricer = Pricer("max-merge")
    for signature in signatures:
        pricer.observe_row(row(10, 1_000, signature=signature))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ask(pricer)
    pricer.observe_row(row(10, 1_000, signature=signatures[0]))
    return pricer


ASKS = {
    "price": lambda p: p.price("trian", 10),
    "admits": lambda p: p.admits("trian", 10, budget_bytes=10**9),
    "max_tokens": lambda p: p.max_tokens("trian", 10**9),
}


@pytest.mark.parametrize("ask", list(ASKS))
@pytest.mark.parametrize(
    ("signatures", "message"),
    [
        (["train"], unknown_signature_warning(2, "trian", ["train"])),
        (["train", "eval"], unknown_signature_warning(3, "trian", ["eval", "train"])),
        (["b", "a"], unknown_signature_warning(3, "trian", ["a", "b"])),
        ([f"s{i:02d}" for i in range(10)], unknown_signature_warning(11, "trian", TEN)),
        ([f"s{i:02d}" for i in range(11)], unknown_signature_warning(12, "trian", ELEVEN)),
        (
            [f"s{i:02d}" for i in reversed(range(12))],
            unknown_signature_warning(13, "trian", TWELVE),
        ),
    ],
    ids=["one", "two", "learned out of order", "ten", "eleven", "twelve reversed"],
)
def test_the_live_unknown_signature_warning_is_whole_whichever_call_asks(
    signatures: list[str], message: str, ask: str
) -> None:
    """The warning the older tests match in part, whole, given by price, admits and
    max_tokens alike: the readings taught (the first ask's kept, the warning at the ask
    after a reading), the known signatures sorted, ten then how many more; said once."""
    pricer = live_pricer(signatures, ASKS[ask])
    with pytest.warns(PricerWarning) as caught:
        ASKS[ask](pricer)
    assert [str(w.message) for w in caught] == [message]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ASKS[ask](pricer)


@pytest.mark.parametrize("ask", list(ASKS))
def test_the_warm_start_warning_is_whole_whichever_call_asks(tmp_path: Path, ask: str) -> None:
    trace = tmp_path / "two.parquet"
    write_trace(readings_frame([dict(seq=i, wave=i, signature=s, packed_tokens=10,
                                     logical_tokens=10, peak_bytes=1_000, whole=True)
                                for i, s in enumerate(["train", "eval"])]), trace)  # fmt: skip
    pricer = Pricer.from_trace(trace, "max-merge")
    with pytest.warns(PricerWarning) as caught:
        ASKS[ask](pricer)
    assert [str(w.message) for w in caught] == [
        "warmfit: the trace it was warm-started from has no reading of signature 'trian': it "
        "has no price for it and admits none of its waves. It knows 'eval', 'train'. Is the "
        "signature mistyped, or are its waves not measured (Pricer.wave, or an enabled "
        "Recorder(pricer=...))?"
    ]


@pytest.mark.parametrize(
    ("cap", "largest", "by_price", "below_oom"),
    [
        # largest_admitted(n <= 10, cap), max_admitted(300 n, 66,000 B, cap=cap),
        # max_admitted(300 n, 66,000 B, oom_tokens=cap)
        (5, 5, 5, 4), (np.int64(5), 5, 5, 4), (1, 1, 1, 0), (2, 2, 2, 1), (0, 0, 0, 0),
        (np.int64(0), 0, 0, 0), (-1, 0, 0, 0), (-(2**63), 0, 0, 0), (10, 10, 10, 9),
        (11, 10, 11, 10), (220, 10, 220, 219), (221, 10, 220, 220), (222, 10, 220, 220),
        (2**63, 10, 220, 220),
    ],
    ids=repr,
)  # fmt: skip
def test_the_admission_searchs_cap_and_oom_size_over_every_sign_and_edge(
    cap: int, largest: int, by_price: int, below_oom: int
) -> None:
    from warmfit.replay.admission import largest_admitted

    assert largest_admitted(lambda n: n <= 10, cap=cap) == largest
    assert largest_admitted(lambda n: 1 <= n <= 10, cap=cap) == largest  # no size 0 is asked
    assert max_admitted(lambda n: 300 * n, 66_000, cap=cap) == by_price
    assert max_admitted(lambda n: 300 * n, 66_000, oom_tokens=cap) == below_oom


@pytest.mark.parametrize(
    ("budget", "admitted", "bound"),
    [
        # max_admitted(300 n, budget); oom_bound([(100, 66,000 B), (200, no budget)], budget)
        (66_000, 220, 100), (65_999, 219, 100), (66_000.0, 220, 100), (65_999.5, 219, 100),
        (66_000.5, 220, 200), (np.int64(66_000), 220, 100), (np.float64(66_000.0), 220, 100),
        (0, 0, 100), (0.0, 0, 100), (300, 1, 100), (299.9, 0, 100), (-1, 0, 100),
        (math.nan, 0, 200), (math.inf, SEARCH_CAP_TOKENS, 200), (2**63, SEARCH_CAP_TOKENS, 200),
    ],
    ids=repr,
)  # fmt: skip
def test_the_admission_functions_budget_over_every_type_and_edge(
    budget: float, admitted: int, bound: int
) -> None:
    """A budget a price meets exactly admits it, a byte less does not; NaN admits nothing
    and is bounded only by the OOM of no budget; an OOM under 66,000 B bounds 66,000 B and
    less, never 66,000.5 B."""
    assert max_admitted(lambda n: 300 * n, budget) == admitted
    assert oom_bound([(100, 66_000), (200, None)], budget) == bound


@pytest.mark.parametrize(
    ("none_from", "oom", "cap", "expected"),
    [
        # 300 B/token, no price from `none_from` tokens on; 66,000 B (220 tokens by price)
        (1, None, SEARCH_CAP_TOKENS, None), (1, 5, 3, None), (2, None, SEARCH_CAP_TOKENS, 1),
        (100, None, SEARCH_CAP_TOKENS, 99), (100, 100, SEARCH_CAP_TOKENS, 99),
        (100, 99, SEARCH_CAP_TOKENS, 98), (100, 101, 100, 99), (100, None, 99, 99),
        (100, None, 98, 98), (100, 50, 60, 49), (100, 60, 50, 50), (221, None, 2**40, 220),
        (220, None, 2**40, 219), (222, 221, 221, 220), (10**6, 150, 150, 149),
        (10**6, 151, 150, 150), (10**6, 150, 149, 149), (10**6, 1, 10, 0), (10**6, 2, 1, 1),
    ],
)  # fmt: skip
def test_max_admitted_where_the_price_stops_the_oom_and_the_cap_meet(
    none_from: int, oom: int | None, cap: int, expected: int | None
) -> None:
    """The three bounds drawn together onto each other's edges: a policy that stops
    pricing partway (None from some size: not admitted, and no price at 1 is None), the
    OOM size (one below is the most), the cap (the most itself), and the budget."""

    def estimate(n: int) -> int | None:
        return 300 * n if n < none_from else None

    assert max_admitted(estimate, 66_000, oom, cap) == expected


class StopsPricing(WarmFit):
    """300 B a packed token (the Pricer adds the outputs), no price from 100 packed tokens
    on; learns nothing."""

    name = "stops-pricing"

    def price(self, request: PriceRequest) -> float | None:
        n = request.packed_tokens
        return 300 * n if n < 100 else None

    def observe(self, reading: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("oom", "oom_budget", "cap", "outputs", "budget", "expected"),
    [
        (None, None, SEARCH_CAP_TOKENS, 0, 66_000, 99),
        (None, None, 99, 0, 66_000, 99),
        (None, None, 98, 0, 66_000, 98),
        (99, None, SEARCH_CAP_TOKENS, 0, 66_000, 98),
        (99, 66_000, SEARCH_CAP_TOKENS, 0, 66_000, 98),
        (99, 65_999, SEARCH_CAP_TOKENS, 0, 66_000, 99),  # its budget below the one asked
        (99, 0, SEARCH_CAP_TOKENS, 0, 66_000, 99),
        (99, 0, SEARCH_CAP_TOKENS, 0, 0, 0),
        (50, 66_000, 60, 0, 66_000, 49),
        (60, 66_000, 50, 0, 66_000, 50),
        (None, None, SEARCH_CAP_TOKENS, 0, 29_700, 99),  # the budget exactly the last price
        (None, None, SEARCH_CAP_TOKENS, 0, 29_699, 98),
        (None, None, SEARCH_CAP_TOKENS, 300, 29_700, 98),  # outputs by wave: one less
        (None, None, SEARCH_CAP_TOKENS, lambda n: 3 * n, 29_700, 98),
        (None, None, SEARCH_CAP_TOKENS, lambda n: 3 * n, 29_997, 99),
        (None, None, SEARCH_CAP_TOKENS, 0, 0, 0),
    ],
)  # fmt: skip
def test_max_tokens_where_the_price_stops_the_oom_the_cap_and_outputs_meet(
    oom: int | None, oom_budget: int | None, cap: int, outputs: Any, budget: int, expected: int
) -> None:
    """Pricer.max_tokens under a policy that stops pricing at 100 tokens (f 1.0), with an
    OOM wave, a cap, outputs (bytes or by size) and a budget each on the others' edges;
    admits agrees at the answer and one past it."""
    pricer = Pricer(StopsPricing, safety_factor=1.0, meter=FixedMeter(0, 0))
    if oom is not None:
        with mock.patch.object(gc, "collect", lambda: 0):
            oom_at(pricer, "train", oom, oom_budget)
    answer = pricer.max_tokens(
        "train", budget, cap=cap, output_bytes=outputs, logical_tokens=lambda n: 2 * n
    )
    assert answer == expected
    for n, fits in ((expected, True), (expected + 1, False)):
        if 1 <= n <= cap:  # admits knows no cap
            o = outputs(n) if callable(outputs) else outputs
            assert pricer.admits("train", n, 2 * n, budget_bytes=budget, output_bytes=o) is fits


# --- issue 38, Pricer oracles round 3 (s7) ---


class LinearToy(WarmFit):
    """A policy whose price sees logical tokens apart from packed ones: ``3.5 n + 2 m``
    bytes, no price from ``none_from`` logical tokens on, and a failure from ``fail_from``
    on (class attributes each example sets)."""

    name = "linear-toy"
    none_from: int = 2**62
    fail_from: int = 2**62

    def price(self, request: PriceRequest) -> float | None:
        n, m = request.packed_tokens, request.logical_tokens
        if m >= self.fail_from:
            raise ValueError("too long")
        if m >= self.none_from:
            return None
        return 3.5 * n + 2 * m


def toy_estimate(n: int, m: int, o: int, s: int | None, f: float) -> int | None:
    """docs/reference/pricer.md's price(): ``int((o + max(floor, int(p))) * f)`` from the
    profile's p, the floor alone ``int((o + s) * f)`` with no p, None with neither."""
    p = None if m >= LinearToy.none_from else 3.5 * n + 2 * m
    if p is not None:
        return int((o + max(s or 0, int(p))) * f)
    return None if s is None else int((o + s) * f)


def toy_bound(ooms: list[tuple[int, str, int | None]], budget: int, kind: str) -> int | None:
    """The smallest packed size of the kind that ran out of memory under a budget at least
    this one (no budget: every one), SPEC §9; the logical count plays no part."""
    sizes = [n for n, k, b in ooms if k == kind and (b is None or budget <= b)]
    return min(sizes) if sizes else None


LOGICAL = {
    "equal": lambda n: n,
    "plus one": lambda n: n + 1,
    "twice": lambda n: 2 * n,
}


@settings(max_examples=examples(400), deadline=None)
@given(data=st.data())
def test_the_pricer_against_a_plain_model_with_logical_apart_from_packed(data: Any) -> None:
    """Every answer of price, admits, oom_tokens and max_tokens predicted from the docs,
    with logical tokens drawn apart from packed (equal, one more, twice: OOM waves and asks
    alike), outputs as bytes or a function, floors, OOM waves of two kinds under budgets on
    and around the asked one, a price that stops (None) and one that fails at a logical
    size: the failure names the PACKED count."""
    f = data.draw(st.sampled_from([1.0, 1.1, 1.5]), label="f")
    LinearToy.none_from = data.draw(st.sampled_from([2**62, 40, 41, 80]), label="none_from")
    LinearToy.fail_from = data.draw(st.sampled_from([2**62, 30, 61]), label="fail_from")
    pricer = Pricer(LinearToy, safety_factor=f, meter=FixedMeter(0, 0))
    ooms: list[tuple[int, str, int | None]] = []
    for _ in range(data.draw(st.integers(0, 3), label="oom waves")):
        n = data.draw(st.integers(1, 60))
        m = LOGICAL[data.draw(st.sampled_from(sorted(LOGICAL)))](n)
        kind = data.draw(st.sampled_from(["flat", "split_child"]))
        budget = data.draw(st.sampled_from([None, 0, 150, 300, 301, 1_000]))
        if m >= LinearToy.fail_from:
            continue  # entering the wave prices it: a failing price is not this test's point
        with warnings.catch_warnings(), mock.patch.object(gc, "collect", lambda: 0):
            warnings.simplefilter("ignore")
            with pricer.wave("train", n, m, kind=kind, budget_bytes=budget) as w:
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        assert w.oom
        ooms.append((n, kind, budget))
    assert [(w.packed_tokens, w.kind, w.budget_bytes) for w in pricer.ooms] == ooms
    n = data.draw(st.integers(1, 70), label="n")
    shape = data.draw(st.sampled_from(sorted(LOGICAL)), label="logical")
    m = LOGICAL[shape](n)
    o = data.draw(st.sampled_from([0, 1, 100]), label="o")
    s = data.draw(st.sampled_from([None, 0, 3.5 * n + 2 * m, 200]), label="floor")
    s = None if s is None else int(s)
    kind = data.draw(st.sampled_from(["flat", "split_child"]), label="kind")
    edges = [0, 150, 300, 301, 1_000] + [
        e + d for e in [toy_estimate(n, m, o, s, f) or 0] for d in (-1, 0, 1)
    ]
    budget = data.draw(st.sampled_from([e for e in edges if e >= 0]), label="budget")
    unpriced = data.draw(st.booleans(), label="unpriced")
    bound = toy_bound(ooms, budget, kind)
    assert pricer.oom_tokens("train", budget, kind=kind) == bound
    asked = {"output_bytes": o, "static_floor_bytes": s, "kind": kind}
    if m >= LinearToy.fail_from:
        message = (
            f"policy 'linear-toy' failed in price() on a wave of 'train' ({n} packed tokens): "
            "ValueError: too long. Fix the policy's code."
        )
        with pytest.raises(PolicyError) as price_error:
            pricer.price("train", n, m, **asked)
        with pytest.raises(PolicyError) as admits_error:
            pricer.admits("train", n, m, budget_bytes=budget, unpriced=unpriced, **asked)
        assert str(price_error.value) == str(admits_error.value) == message
    else:
        estimate = toy_estimate(n, m, o, s, f)
        assert pricer.price("train", n, m, **asked) == estimate
        fits = unpriced if estimate is None else estimate <= budget
        expected = fits and (bound is None or n < bound)
        assert pricer.admits("train", n, m, budget_bytes=budget, unpriced=unpriced, **asked) is (
            expected
        )
    # max_tokens: logical tokens and outputs as functions of n, a small cap
    LinearToy.fail_from = 2**62  # the search probes sizes it chooses: no failing price here
    s = data.draw(st.sampled_from([None, None, s]), label="max floor")  # mostly none
    if s is not None:  # a floor past the stop prices again: not monotone, as max_tokens needs
        LinearToy.none_from = 2**62
    logical = data.draw(st.sampled_from([None, *sorted(LOGICAL)]), label="max logical")
    outputs = data.draw(st.sampled_from([0, 7, "ten per token"]), label="max outputs")
    cap = data.draw(st.sampled_from([1, 2, 50, 100]), label="cap")

    def at(k: int) -> tuple[int, int]:
        mk = k if logical is None else LOGICAL[logical](k)
        ok = 10 * k if outputs == "ten per token" else int(outputs)
        return mk, ok

    def model_admits(k: int) -> bool:
        mk, ok = at(k)
        e = toy_estimate(k, mk, ok, s, f)
        return e is not None and e <= budget and (bound is None or k < bound)

    if toy_estimate(1, *at(1), s, f) is None:
        want: int | None = None
    else:
        want = 0
        while want < cap and model_admits(want + 1):
            want += 1
    got = pricer.max_tokens(
        "train",
        budget,
        logical_tokens=None if logical is None else LOGICAL[logical],
        output_bytes=(lambda k: 10 * k) if outputs == "ten per token" else outputs,
        static_floor_bytes=s,
        kind=kind,
        cap=cap,
    )
    assert got == want


@pytest.mark.parametrize(
    "argument", ["packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes"]
)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (True, "True of type bool"),
        (False, "False of type bool"),
        (np.True_, "np.True_ of type bool"),
        (torch.tensor(True), "tensor(True) of type Tensor"),
    ],
    ids=["True", "False", "numpy", "torch"],
)
def test_wave_refuses_a_bool_of_any_kind_as_any_count(
    argument: str, value: Any, shown: str
) -> None:
    """As price() refuses it (docs/reference/pricer.md, Errors: in price, admits, max_tokens
    and wave alike): a bool as wave()'s logical tokens, outputs or floor is refused with
    the whole message, and the Pricer learns nothing (it was taken as 1 or 0 and taught)."""
    pricer = Pricer("max-merge", meter=FixedMeter(0, 1_000))
    asked: dict[str, Any] = {"packed_tokens": 1, argument: value}
    with pytest.raises(UsageError) as caught, pricer.wave("train", **asked):
        pass
    assert str(caught.value) == (
        f"{argument} must be an integer; got {shown} (a bool is not a count)."
    )
    assert pricer.profiles == {}
