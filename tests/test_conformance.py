"""One conformance suite for every policy: each (policy, check) pair is a test.

Runs over every registered policy and the example user policy in
``tests/example_policy.py``. A check that does not apply skips with a reason.
"""

from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings

from tests.strategies import histories, requests
from warmfit.policies import Policy, PriceRequest, Reading, get_policy, policy_names
from warmfit.replay import replay
from warmfit.trace import read_trace, write_trace

REPO = Path(__file__).resolve().parent.parent
POLICIES = [*policy_names(), "tests.example_policy:LastWhole"]


def _fed(cls: type[Policy], history: list[Reading]) -> Policy:
    profile = cls()
    for reading in history:
        profile.observe(reading)
    return profile


def check_prices_before_any_observation(spec: str, tmp_path: Path) -> None:
    price = get_policy(spec)().price(PriceRequest(1_000, 2_000))
    assert price is None or price >= 0


def check_price_is_pure(spec: str, tmp_path: Path) -> None:
    @settings(max_examples=50, deadline=None)
    @given(history=histories, r=requests())
    def prop(history: list[Reading], r: PriceRequest) -> None:
        profile = _fed(get_policy(spec), history)
        before = copy.deepcopy(vars(profile))
        first = profile.price(r)
        assert vars(profile) == before
        assert profile.price(r) == first

    prop()


def check_instances_share_no_state(spec: str, tmp_path: Path) -> None:
    cls = get_policy(spec)
    a, b = cls(), cls()
    fresh = copy.deepcopy(vars(b))
    a.observe(Reading(100, 200, 50_000, 10, whole=True))
    a.observe(Reading(300, 300, 90_000, 10, whole=True))
    assert vars(b) == fresh


def check_cost_is_monotone_in_tokens_and_sharing(spec: str, tmp_path: Path) -> None:
    @settings(max_examples=50, deadline=None)
    @given(history=histories, r=requests())
    def prop(history: list[Reading], r: PriceRequest) -> None:
        profile = _fed(get_policy(spec), history)
        n, m = r.packed_tokens, r.logical_tokens
        base = profile.price(PriceRequest(n, m))
        if base is None:
            return
        for bigger in (
            PriceRequest(n, m + n),
            PriceRequest(min(n * 2, m), m),
            PriceRequest(2 * n, 2 * n),
        ):
            if bigger.packed_tokens >= n and bigger.logical_tokens >= m:
                price = profile.price(bigger)
                assert price is not None and price >= base

    prop()


def _trace() -> pl.DataFrame:
    return read_trace([REPO / "traces/pr991"])


def _replay_in_a_fresh_process(spec: str, per_wave: Path, hash_seed: str) -> str:
    """``warmfit replay traces/pr991 -p SPEC`` in its own interpreter; its JSON output."""
    done = subprocess.run(
        [sys.executable, "-m", "warmfit", "replay", "traces/pr991", "-p", spec,
         "--engine", "scalar", "--format", "json", "--per-wave", str(per_wave)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_replay_is_deterministic(spec: str, tmp_path: Path) -> None:
    # Two separate processes, with different string hashes: a policy that
    # depends on set or dict-of-object order, ids or hashes shows up here.
    first = _replay_in_a_fresh_process(spec, tmp_path / "first.parquet", "1")
    second = _replay_in_a_fresh_process(spec, tmp_path / "second.parquet", "2")
    assert first == second
    assert pl.read_parquet(tmp_path / "first.parquet").equals(
        pl.read_parquet(tmp_path / "second.parquet")
    )
    # and a third replay, in this process, gives the same per-wave rows
    here = replay(_trace(), [spec], engine="scalar")
    assert here.per_wave.equals(pl.read_parquet(tmp_path / "first.parquet"))


def check_splitting_a_trace_into_parts_changes_nothing(spec: str, tmp_path: Path) -> None:
    whole = _trace()
    shuffled = whole.sample(fraction=1.0, shuffle=True, seed=7)
    cuts = sorted(random.Random(7).sample(range(1, whole.height), 3))
    for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, whole.height], strict=True)):
        write_trace(shuffled[lo:hi], tmp_path / f"part{i}.parquet")
    split = read_trace([tmp_path])
    a = replay(whole, [spec], engine="scalar")
    b = replay(split, [spec], engine="scalar")
    assert a.per_wave.equals(b.per_wave) and a.summary.equals(b.summary)


def check_vectorized_form_equals_the_loop(spec: str, tmp_path: Path) -> None:
    from warmfit.vectorized import has_vectorized_form

    if not has_vectorized_form(get_policy(spec)):
        pytest.skip(f"{spec} has no vectorized form: it is replayed one reading at a time")
    scalar = replay(_trace(), [spec], engine="scalar")
    vectorized = replay(_trace(), [spec], engine="vectorized")
    assert scalar.per_wave.equals(vectorized.per_wave)
    assert scalar.summary.equals(vectorized.summary)


CHECKS: list[Callable[[str, Path], None]] = [
    check_prices_before_any_observation,
    check_price_is_pure,
    check_instances_share_no_state,
    check_cost_is_monotone_in_tokens_and_sharing,
    check_replay_is_deterministic,
    check_splitting_a_trace_into_parts_changes_nothing,
    check_vectorized_form_equals_the_loop,
]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__.removeprefix("check_") for c in CHECKS])
@pytest.mark.parametrize("spec", POLICIES)
def test_policy_conforms(spec: str, check: Callable[[str, Path], None], tmp_path: Path) -> None:
    check(spec, tmp_path)
