"""Deterministic trace generators: the PR #991 reconstruction.

``traces/pr991`` is a *reconstruction*: the GPU recordings behind OpenPipe/ART
PR #991 are not public, so this module rebuilds traces of its two
configurations from the figures the PR published (Qwen3.6-35B-A3B, 40 layers,
CP2, 8 steps, safety factor 1.1):

- a signature's first wave ran 15.6k packed tokens at 275 KB per packed token
  (KB = 1000 bytes): it paid one-time costs (compilation, first-use
  workspaces) on top of the warm cost;
- later waves ran 206-247 KB per packed token;
- EP1 (25 priced waves), where the learned profile sets the estimate;
- EP2 (17 priced waves), where the static MoE routing floor sets it.

Warm waves follow the model the PR's soundness argument assumes, memory = a
fixed cost + a per-token rate, with a small deterministic jitter (the
measurement noise of a real allocator). Every wave has a ``forward`` reading
(taken when the forward returns; activations only) and a whole ``caller``
reading (forward + loss + backward). The rank recorded is rank 0: the PR
reports one row per configuration and gives no per-rank figures.

Every other input is pinned here, not published, and listed with its reason
in ``traces/pr991/README.md``: the waves per step, the warm model's fixed
cost and rate, the token range, the jitter, the random seeds, the warm
waves' sharing ratio (uniform in [1.15, 1.6]) and the seed wave's sharing
ratio, pinned at 1.6 (the top of that range) so that max-merge prices every
warm wave at its rate times packed tokens: that is what keeps EP2's learned
price under its static floor on every wave (with 1.15, it rises above it on
one).

Regenerate byte-identically with ``make traces`` (``python -m
warmfit.samples.synthetic traces/pr991``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from warmfit.format.trace import write_trace

KB = 1000


@dataclass(frozen=True)
class RunShape:
    """How one reconstructed configuration's waves are drawn."""

    run: str
    waves_per_step: tuple[int, ...]  # one entry per optimizer step
    seed_packed_tokens: int  # the cold first wave
    seed_rate: float  # bytes per packed token of the cold first wave
    fixed_bytes: float  # warm model: memory = fixed + per_token * n
    per_token_bytes: float
    min_tokens: int  # warm waves' packed tokens are drawn in [min, max]
    max_tokens: int
    jitter: float  # relative jitter of a warm wave's memory, uniform in [-j, +j]
    floor_per_token_bytes: float | None  # static routing floor, when the run has one
    rng_seed: int


SIGNATURE = "qwen3.6-35b-a3b/L40/cp2/{ep}/lora"
OUTPUT_BYTES_PER_TOKEN = 8  # float32 log-prob and entropy per packed token
FORWARD_SHARE = 0.42  # forward-phase activations, as a share of the caller peak
BASELINE_BYTES = 61_400_000_000  # weights, optimizer state and adapters on one rank
#: Sharing ratio (logical / packed tokens) of a warm wave: uniform in this range.
WARM_SHARING = (1.15, 1.6)
#: The seed wave's sharing ratio, pinned at the top of WARM_SHARING: max-merge's
#: sharing_max is then 1.6 from the first wave, which keeps EP2's learned price
#: under its floor on every wave (see traces/pr991/README.md).
SEED_SHARING = 1.6

EP1 = RunShape(
    run="EP1",
    waves_per_step=(4, 3, 3, 3, 3, 3, 3, 4),
    seed_packed_tokens=15_600,
    seed_rate=275 * KB,
    fixed_bytes=1_565_000_000,
    per_token_bytes=170_600,
    min_tokens=21_500,
    max_tokens=39_000,
    jitter=0.034,
    floor_per_token_bytes=None,
    rng_seed=226_040,
)
EP2 = RunShape(
    run="EP2",
    waves_per_step=(3, 2, 2, 2, 2, 2, 2, 2),
    seed_packed_tokens=15_600,
    seed_rate=275 * KB,
    fixed_bytes=1_290_000_000,
    per_token_bytes=182_400,
    min_tokens=22_500,
    max_tokens=45_000,
    jitter=0.04,
    floor_per_token_bytes=286 * KB,
    rng_seed=660_873,
)


def pr991_readings(shape: RunShape) -> pl.DataFrame:
    """The readings of one reconstructed configuration, in recording order."""
    rng = random.Random(shape.rng_seed)
    rows: list[dict[str, object]] = []
    signature = SIGNATURE.format(ep=shape.run.lower())
    wave = 0
    for step, count in enumerate(shape.waves_per_step):
        for _ in range(count):
            if wave == 0:
                n = shape.seed_packed_tokens
                caller_delta_compute = round(shape.seed_rate * n)
            else:
                n = rng.randrange(shape.min_tokens, shape.max_tokens + 1, 8)
                warm = shape.fixed_bytes + shape.per_token_bytes * n
                caller_delta_compute = round(warm * (1 + rng.uniform(-shape.jitter, shape.jitter)))
            sharing = rng.uniform(*WARM_SHARING) if wave else SEED_SHARING
            m = int(n * sharing)
            o = OUTPUT_BYTES_PER_TOKEN * n
            floor = (
                None
                if shape.floor_per_token_bytes is None
                else round(shape.floor_per_token_bytes * n)
            )
            base = {
                "run": shape.run,
                "rank": 0,
                "step": step,
                "wave": wave,
                "signature": signature,
                "kind": "flat",
                "packed_tokens": n,
                "logical_tokens": m,
                "output_bytes": o,
                "baseline_bytes": BASELINE_BYTES,
                "static_floor_bytes": floor,
                "oom": False,
            }
            forward_delta = o + round(caller_delta_compute * FORWARD_SHARE)
            caller_delta = o + caller_delta_compute
            rows.append(
                base
                | {
                    "seq": 2 * wave,
                    "phase": "forward",
                    "whole": False,
                    "peak_bytes": BASELINE_BYTES + forward_delta,
                }
            )
            rows.append(
                base
                | {
                    "seq": 2 * wave + 1,
                    "phase": "caller",
                    "whole": True,
                    "peak_bytes": BASELINE_BYTES + caller_delta,
                }
            )
            wave += 1
    return pl.DataFrame(rows)


METADATA = {
    "warmfit.provenance": "reconstruction of OpenPipe/ART PR #991 from its published figures "
    "(see traces/pr991/README.md); generated by warmfit.samples.synthetic",
    "warmfit.model": "Qwen3.6-35B-A3B, 40 layers, CP2",
}


def write_pr991(directory: Path) -> list[Path]:
    """Write ``EP1.parquet`` and ``EP2.parquet`` into ``directory``."""
    return [
        write_trace(pr991_readings(shape), directory / f"{shape.run}.parquet", METADATA)
        for shape in (EP1, EP2)
    ]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m warmfit.samples.synthetic",
        description="Write traces/pr991, the reconstruction of ART PR #991's two runs.",
    )
    parser.add_argument(
        "target", nargs="?", default="traces/pr991", help="the folder (default traces/pr991)"
    )
    for path in write_pr991(Path(parser.parse_args().target)):
        print(f"wrote {path}")
