"""warm-affine: a fixed cost plus a per-token rate, on worked numbers and on
every stored trace (its invariants as properties are in test_policies.py)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tests.whole_waves import whole_wave, write_waves
from warmfit.format.trace import read_trace
from warmfit.policies import PriceRequest, Reading, WarmAffine, WarmFit
from warmfit.policies.rule import (
    State,
)
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


# --------------------------------------------------------------------------- warm-affine


def test_a_falling_line_is_flat_at_the_anchor() -> None:
    """Kills affine-negative-slope.

    Seed 100 tokens; anchor 200 tokens at 60,000 B; then 400 tokens at only
    40,000 B: the marginal rate (40,000 - 60,000) / (400 - 200) = -100 B/token
    is flattened to 0, so the line is 60,000 everywhere. A 300-token wave:
    warm-fit says 300 B/token * 300 = 90,000, the line 60,000 (not
    60,000 - 100 * 100 = 50,000).
    """
    profile = WarmAffine()
    for n, delta in ((100, 90_000), (200, 60_000), (400, 40_000)):
        profile.observe(Reading(n, n, delta, whole=True))
    assert profile.slope == -100.0
    assert profile.price(PriceRequest(300, 300)) == 60_000.0


# --------------------------------------------------------------------------- 6: warm-affine


def test_warm_affine_prices_a_small_wave_at_the_warm_tokens(tmp_path: Path) -> None:
    """Survivor 6 (stranger-affine-drops-warm-tokens): warm-affine's ``n_eff`` is
    ``max(warm_tokens, n, m / warm_sharing)``, as warm-fit's.

    Seed 100 tokens at 90,000 B; the anchor 150 tokens at 45,000 B (300
    B/token; warm_tokens 150); then 250 tokens at 60,000 B: slope (60,000 -
    45,000) / 100 = 150 B/token. A 50-token wave: n_eff = 150, the line L(150)
    = 45,000 B = warm-fit's 300 * 150 (and max-merge's 900 * 50): priced
    int(45,000 * 1.1) = 49,500 B. Dropping warm_tokens, L(50) = 45,000 - 150 *
    100 = 30,000 B, priced 33,000 B. It peaks at 60,000 B.
    """
    waves = [(100, 90_000), (150, 45_000), (250, 60_000), (50, 60_000)]
    profile = WarmAffine()
    for n, delta in waves[:3]:
        profile.observe(Reading(n, n, delta, whole=True))
    assert profile.price(PriceRequest(50, 50)) == 45_000.0
    folder = write_waves(tmp_path, [whole_wave(i, peak, n) for i, (n, peak) in enumerate(waves)])
    for engine in ("scalar", "vectorized"):
        result = replay(read_trace([folder]), ["warm-affine"], engine=engine)
        assert result.engine == engine
        assert result.per_wave.get_column("estimate_bytes").to_list() == [
            None, 148_500, 82_500, 49_500,
        ]  # fmt: skip
        assert result.per_wave.get_column("actual_bytes").to_list()[3] == 60_000
