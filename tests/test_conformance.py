"""One conformance suite for every policy: each (policy, check) pair is a test.

The checks are warmfit's public ones (:mod:`warmfit.testing.checks`), the same a
policy author runs on their own policy. They run over every registered
policy and the example user policies in ``tests/example_policy.py``; a check
that does not apply skips with its reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.example_policy import LastWhole, LastWholeLoop
from warmfit.policies import Policy, PriceRequest, Reading, get_policy, policy_names
from warmfit.policies.rule import PACKED, RATE, DeclaredPolicy, Max
from warmfit.replay import replay
from warmfit.testing.checks import (
    check_engines_agree,
    check_policy,
    check_price_is_pure,
    parametrize_with_checks,
    random_trace,
    read_trace_frame,
)

REPO = Path(__file__).resolve().parent.parent
POLICIES = [*(get_policy(name) for name in policy_names()), LastWhole, LastWholeLoop]


@parametrize_with_checks(POLICIES)
def test_policy_conforms(policy: type[Policy], check: Callable[[type[Policy]], None]) -> None:
    check(policy)


class Shrinking(DeclaredPolicy):
    """Broken on purpose: a larger wave is priced lower."""

    name = "shrinking"
    summary = "broken on purpose: cost falls as waves grow"
    rate_max = Max(RATE)
    tokens = Max(PACKED)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rate_max * state.tokens * state.tokens / np.maximum(n, 1.0)


def test_check_policy_passes_the_built_ins_and_names_a_broken_check() -> None:
    assert "engines_agree" in check_policy(get_policy("warm-affine"))
    assert "engines_agree" not in check_policy(LastWholeLoop)  # skipped: free-form
    with pytest.raises(AssertionError, match="'shrinking' fails monotone_in_tokens_and_sharing"):
        check_policy(Shrinking)


def test_the_declared_and_the_free_form_example_agree() -> None:
    for seed in range(3):
        trace = read_trace_frame(random_trace(seed))
        declared = replay(trace, [LastWhole], engine="vectorized").per_wave
        loop = replay(trace, [LastWholeLoop], engine="scalar").per_wave
        assert declared.drop("policy").equals(loop.drop("policy"))


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


SPECS = [*policy_names(), "tests.example_policy:LastWhole", "tests.example_policy:LastWholeLoop"]


@pytest.mark.parametrize("spec", SPECS)
def test_replay_is_deterministic_across_processes(spec: str, tmp_path: Path) -> None:
    # Two separate processes, with different string hashes: a policy that
    # depends on set or dict-of-object order, ids or hashes shows up here
    # (warmfit.testing.checks replays twice in one process, which cannot see that).
    first = _replay_in_a_fresh_process(spec, tmp_path / "first.parquet", "1")
    second = _replay_in_a_fresh_process(spec, tmp_path / "second.parquet", "2")
    assert first == second
    assert pl.read_parquet(tmp_path / "first.parquet").equals(
        pl.read_parquet(tmp_path / "second.parquet")
    )


# --------------------------------------------------------------------------- public conformance checks


class CountsItsQuestions(Policy):
    """Broken on purpose: ``price`` counts how often it was asked (same answers)."""

    name = "counts-its-questions"
    summary = "broken on purpose: price() changes the profile"

    def __init__(self) -> None:
        self.rate: float | None = None
        self.asked = 0

    def observe(self, reading: Reading) -> None:
        self.rate = max(self.rate or 0.0, reading.rate)

    def price(self, request: PriceRequest) -> float | None:
        self.asked += 1
        return None if self.rate is None else self.rate * request.packed_tokens


def test_check_price_is_pure_sees_a_price_that_changes_the_profile() -> None:
    """Kills checks-purity-unchecked: the answers repeat, only the state changes."""
    profile = CountsItsQuestions()
    profile.observe(Reading(100, 100, 5_000))
    assert profile.price(PriceRequest(10, 10)) == profile.price(PriceRequest(10, 10)) == 500.0
    with pytest.raises(AssertionError, match="price\\(\\) changed the profile"):
        check_price_is_pure(CountsItsQuestions)


class ShapeSensitive(DeclaredPolicy):
    """Broken on purpose: the rule looks at its input's shape, not only its values.

    One number (the reference engine) is priced ``rate_max * n``; an array
    (the vectorized engine) ``2 * rate_max * n``, so the engines disagree.
    """

    name = "shape-sensitive"
    summary = "broken on purpose: not elementwise"
    rate_max = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rate_max * n * (1.0 + np.ndim(n))


def test_check_engines_agree_compares_the_bytes() -> None:
    """Kills checks-engines-never-compared."""
    profile = ShapeSensitive()
    profile.observe(Reading(100, 100, 5_000))
    assert profile.price(PriceRequest(10, 10)) == 500.0  # 50 B/token * 10, times (1 + 0)
    with pytest.raises(AssertionError, match="the engines disagree"):
        check_engines_agree(ShapeSensitive)
