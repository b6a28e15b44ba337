"""warm-affine: a fixed cost plus a per-token rate, on worked numbers and on
every stored trace (its invariants as properties are in test_policies.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from warmfit.format.trace import read_trace
from warmfit.policies import PriceRequest, Reading, WarmAffine, WarmFit
from warmfit.policies.rule import State
from warmfit.replay import replay

REPO = Path(__file__).resolve().parent.parent
#: The traces warm-affine was built on. Not Liger-Kernel's curves (traces/liger-gpu):
#: there a line learned between small sizes under-prices larger quadratic ones, and
#: warm-affine puts more waves under their peak than warm-fit (66 against 47 in
#: ascending order, README "Choosing a policy"); envelope is the policy for them.
STORED = sorted(p for p in (REPO / "traces").iterdir() if p.is_dir() and p.name != "liger-gpu")


def whole(n: int, compute: int) -> Reading:
    return Reading(n, n, compute, whole=True)


def test_a_wave_beyond_the_largest_warm_wave_pays_at_least_its_rate() -> None:
    # Qwen3.5-4B TP2 on an H200 (traces/art-h200): the 64+64 pair cold (the seed)
    # and warm, then the 128+128 pair; next comes the 2048+2048 pair, 4096 tokens,
    # which peaked at 6,959,876,608 bytes.
    profile = WarmAffine()
    for reading in (
        whole(128, 432_695_808),  # the seed, cold
        whole(128, 365_585_920),  # the anchor: n0 = 128, c0 = top = 365,585,920
        whole(256, 501_137_408),  # marginal rate (501,137,408 - 365,585,920) / 128
    ):
        profile.observe(reading)
    assert profile.slope == 1_058_996.0
    request = PriceRequest(4096, 4096)
    # The line alone: 365,585,920 + 1,058,996 * (4096 - 128) = 4,567,682,048, far under
    # the real 6,959,876,608: the marginal rate between small waves is too low here.
    assert WarmAffine.line(State(profile.state), 4096.0) == 4_567_682_048
    # Beyond the largest warm wave (256) the price is at least that wave's own rate:
    # 501,137,408 * (4096 / 256) = 8,018,198,528, below warm-fit's
    # 2,856,140 B/token (the anchor's rate) * 4096 = 11,698,749,440.
    assert WarmFit.rule(State(profile.state), 4096.0, 4096.0) == 11_698_749_440
    assert profile.price(request) == 8_018_198_528


def test_until_two_warm_sizes_it_is_warm_fit() -> None:
    history = [whole(100, 90_000), whole(200, 60_000), whole(200, 70_000)]
    affine, fit = WarmAffine(), WarmFit()
    for reading in history:
        affine.observe(reading)
        fit.observe(reading)
    for n in (50, 200, 400, 10_000):
        assert affine.price(PriceRequest(n, n)) == fit.price(PriceRequest(n, n))


def test_the_largest_compute_at_the_anchor_size_lifts_the_line() -> None:
    # anchor (200, 60,000); a second wave of 200 tokens at 70,000 lifts top; then
    # (400, 100,000) gives the marginal rate (100,000 - 60,000) / 200 = 200 B/token.
    profile = WarmAffine()
    for reading in (whole(100, 90_000), whole(200, 60_000), whole(200, 70_000)):
        profile.observe(reading)
    profile.observe(whole(400, 100_000))
    # 70,000 + 200 * (300 - 200) = 90,000 (warm-fit: 350 B/token * 300 = 105,000)
    assert profile.price(PriceRequest(300, 300)) == 90_000.0
    # the 200-token waves are never priced under their compute
    assert profile.price(PriceRequest(200, 200)) == 70_000.0


def test_meets_its_targets_on_real_h200_measurements() -> None:
    as_shipped = REPO / "traces" / "art-h200" / "recompute_memory_final.parquet"
    summary = replay(read_trace([as_shipped]), ["warm-affine"]).summary
    medians = summary.get_column("median_over_estimate").to_list()
    assert summary.get_column("under_peak").sum() == 0
    assert max(medians) <= 0.20
    assert statistics.median(medians) <= 0.13


@pytest.mark.parametrize("trace", STORED, ids=[p.name for p in STORED])
def test_puts_no_more_waves_under_their_peak_than_warm_fit(trace: Path) -> None:
    summary = replay(read_trace([trace]), ["warm-fit", "warm-affine"]).summary
    under = {(r["run"], r["policy"]): r["under_peak"] for r in summary.to_dicts()}
    for run in summary.get_column("run").unique():
        assert under[(run, "warm-affine")] <= under[(run, "warm-fit")]
