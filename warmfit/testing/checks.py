"""Conformance checks every pricing policy must pass — run them on your own.

In the manner of scikit-learn's ``check_estimator`` and river's ``checks``:

>>> from warmfit.testing.checks import check_policy
>>> from warmfit.policies import WarmFit
>>> check_policy(WarmFit)            # raises AssertionError naming a failed check
['prices_before_any_observation', 'price_is_pure', 'instances_share_no_state', 'monotone_in_tokens_and_sharing', 'replay_is_deterministic', 'split_files_change_nothing', 'engines_agree']

In a pytest suite, one test per (policy, check)::

    from warmfit.testing.checks import parametrize_with_checks

    @parametrize_with_checks([MyPolicy])
    def test_my_policy(policy, check):
        check(policy)

The checks draw their inputs from a seeded random generator (no extra
dependency), so a failure is reproducible: the message names the check, the
policy and what broke. A check that does not apply (the engines check for a
free-form policy, which only the reference engine runs) is skipped with its
reason.
"""

from __future__ import annotations

import copy
import random
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from warmfit.errors import WarmfitError
from warmfit.format.schema import KINDS
from warmfit.policies import Policy, PriceRequest, Reading

#: How many generated inputs each check tries.
EXAMPLES = 60


class SkipCheck(Exception):
    """A check that does not apply to this policy, with the reason."""


def _rng(seed: int) -> random.Random:
    return random.Random(seed)


def random_reading(rng: random.Random) -> Reading:
    """A reading as replay feeds a policy: any kind and phase; whole only on a flat
    wave's caller reading."""
    n = rng.choice([1, 7, 100, 1_000, rng.randint(1, 200_000)])
    whole = rng.random() < 0.5
    kind = "flat" if whole else rng.choice(KINDS)
    phase = "caller" if whole else rng.choice(["forward", "caller"])
    return Reading(
        packed_tokens=n,
        logical_tokens=rng.randint(n, n * 8),
        delta_bytes=rng.choice([0, rng.randint(0, 2**40), rng.randint(0, 2**20)]),
        output_bytes=rng.choice([0, rng.randint(0, 2**30)]),
        whole=whole,
        phase=phase,
        kind=kind,
        static_floor_bytes=rng.choice([None, rng.randint(0, 2**40)]),
    )


def random_history(rng: random.Random) -> list[Reading]:
    return [random_reading(rng) for _ in range(rng.randint(0, 12))]


def random_request(rng: random.Random) -> PriceRequest:
    n = rng.randint(1, 200_000)
    return PriceRequest(n, rng.randint(n, n * 8), rng.choice([0, rng.randint(0, 2**30)]))


def random_trace(seed: int, waves: int = 60) -> pl.DataFrame:
    """A valid v1 trace: two runs, two ranks each, three signatures, flat waves with a
    forward and a caller reading (whole, or interrupted), split children, forward-only
    calls, out-of-memory readings and static floors now and then."""
    from warmfit.format.trace import readings_frame

    rng = _rng(seed)
    rows: list[dict[str, object]] = []
    for run in ("a", "b"):
        for rank in (0, 1):
            seq = 0
            for wave in range(waves):
                kind = rng.choices(KINDS, weights=[6, 2, 1])[0]
                n = rng.randint(1, 50_000)
                constants: dict[str, object] = {
                    "run": run, "rank": rank, "wave": wave, "kind": kind,
                    "signature": rng.choice(["s0", "s1", "s2"]), "packed_tokens": n,
                    "logical_tokens": rng.choice([n, rng.randint(n, 8 * n)]),
                    "output_bytes": rng.choice([0, 8 * n]),
                    "static_floor_bytes": rng.choice([None, None, rng.randint(0, 2**34)]),
                }  # fmt: skip
                rate = rng.uniform(100, 400) * (1.5 if wave < 3 else 1.0)
                fixed = rng.randint(0, 2**30)
                phases = ["forward"] if kind == "dp_rank_forward" else ["forward", "caller"]
                for phase in phases:
                    peak = int(fixed + rate * n * (0.4 if phase == "forward" else 1.0))
                    rows.append(
                        constants
                        | {
                            "seq": seq,
                            "phase": phase,
                            "whole": kind == "flat" and phase == "caller" and rng.random() < 0.8,
                            "baseline_bytes": 1_000,
                            "peak_bytes": 1_000 + peak,
                            "oom": rng.random() < 0.03,
                        }
                    )
                    seq += 1
    return readings_frame(rows)


def _fed(cls: type[Policy], history: Sequence[Reading]) -> Policy:
    profile = cls()
    for reading in history:
        profile.observe(reading)
    return profile


def _state(profile: Policy) -> dict[str, Any]:
    """A deep copy of everything a profile holds: its ``__dict__`` and its slots (a policy
    may keep its state in ``__slots__``, which ``vars()`` does not show)."""
    state = dict(getattr(profile, "__dict__", {}))
    for klass in type(profile).__mro__:
        slots = vars(klass).get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot.startswith("__") and not slot.endswith("__"):
                slot = f"_{klass.__name__.lstrip('_')}{slot}"  # a private name, mangled
            if slot not in ("__dict__", "__weakref__") and hasattr(profile, slot):
                state[f"{klass.__qualname__}.{slot}"] = getattr(profile, slot)
    return copy.deepcopy(state)


def check_prices_before_any_observation(cls: type[Policy]) -> None:
    """A fresh profile prices nothing (None) or a number >= 0."""
    price = cls().price(PriceRequest(1_000, 2_000))
    assert price is None or price >= 0, f"a fresh profile priced {price!r}"


def check_price_is_pure(cls: type[Policy]) -> None:
    """``price`` changes nothing and answers the same twice."""
    rng = _rng(1)
    for _ in range(EXAMPLES):
        profile = _fed(cls, random_history(rng))
        request = random_request(rng)
        before = _state(profile)
        first = profile.price(request)
        assert _state(profile) == before, "price() changed the profile"
        assert profile.price(request) == first, "price() answered differently twice"


def check_instances_share_no_state(cls: type[Policy]) -> None:
    """Observing on one profile leaves another untouched."""
    a, b = cls(), cls()
    fresh = _state(b)
    a.observe(Reading(100, 200, 50_000, 10, whole=True))
    a.observe(Reading(300, 300, 90_000, 10, whole=True))
    assert _state(b) == fresh, "two profiles share state"


def check_monotone_in_tokens_and_sharing(cls: type[Policy]) -> None:
    """A wave with more packed or logical tokens never costs less."""
    rng = _rng(2)
    for _ in range(EXAMPLES):
        profile = _fed(cls, random_history(rng))
        request = random_request(rng)
        n, m = request.packed_tokens, request.logical_tokens
        base = profile.price(PriceRequest(n, m))
        if base is None:
            continue
        for bigger in (PriceRequest(n, m + n), PriceRequest(min(2 * n, m), m),
                       PriceRequest(2 * n, 2 * m)):  # fmt: skip
            price = profile.price(bigger)
            assert price is not None and price >= base, (
                f"({bigger.packed_tokens}, {bigger.logical_tokens}) tokens priced {price!r}, "
                f"below ({n}, {m}) tokens at {base!r}"
            )


def _replay(trace: pl.DataFrame, cls: type[Policy], engine: str = "scalar") -> Any:
    from warmfit.replay import replay

    return replay(trace, [cls], engine=engine)


def check_replay_is_deterministic(cls: type[Policy]) -> None:
    """Replaying the same trace twice gives the same bytes."""
    trace = random_trace(3)
    first, second = _replay(trace, cls), _replay(trace, cls)
    assert first.per_wave.equals(second.per_wave), "two replays of one trace differ"


def check_split_files_change_nothing(cls: type[Policy]) -> None:
    """A trace split across files, rows shuffled, replays as one file."""
    from warmfit.format.trace import read_trace, write_trace

    trace = random_trace(4)
    shuffled = trace.sample(fraction=1.0, shuffle=True, seed=4)
    with tempfile.TemporaryDirectory() as tmp:
        cuts = sorted(_rng(4).sample(range(1, trace.height), 3))
        for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, trace.height], strict=True)):
            write_trace(shuffled[lo:hi], Path(tmp) / f"part{i}.parquet")
        split = read_trace([tmp])
    whole = read_trace_frame(trace)
    assert _replay(whole, cls).per_wave.equals(_replay(split, cls).per_wave), (
        "splitting the trace into files changed the replay"
    )


def read_trace_frame(trace: pl.DataFrame) -> pl.DataFrame:
    """A generated frame as ``read_trace`` would give it (validated, in canonical order)."""
    from warmfit.format.trace import read_trace, write_trace

    with tempfile.TemporaryDirectory() as tmp:
        write_trace(trace, Path(tmp) / "trace.parquet")
        return read_trace([tmp])


def check_engines_agree(cls: type[Policy]) -> None:
    """A declared policy gives the same bytes on the vectorized engine as on the reference."""
    from warmfit.policies.rule import is_declared

    if not is_declared(cls):
        raise SkipCheck(
            f"{cls.name} is a free-form policy: only the reference engine runs it "
            "(declare it with warmfit.policies.rule.DeclaredPolicy to run both)"
        )
    for seed in range(5, 10):
        trace = read_trace_frame(random_trace(seed))
        scalar, vectorized = _replay(trace, cls, "scalar"), _replay(trace, cls, "vectorized")
        assert vectorized.engine == "vectorized", f"the {vectorized.engine} engine ran instead"
        assert scalar.per_wave.equals(vectorized.per_wave), (
            f"the engines disagree on generated trace {seed}"
        )


CHECKS: tuple[Callable[[type[Policy]], None], ...] = (
    check_prices_before_any_observation,
    check_price_is_pure,
    check_instances_share_no_state,
    check_monotone_in_tokens_and_sharing,
    check_replay_is_deterministic,
    check_split_files_change_nothing,
    check_engines_agree,
)


def check_name(check: Callable[..., None]) -> str:
    return check.__name__.removeprefix("check_")


def run_check(check: Callable[[type[Policy]], None], cls: type[Policy]) -> None:
    """Run one check; an AssertionError names the check and the policy."""
    try:
        check(cls)
    except AssertionError as exc:
        raise AssertionError(f"policy {cls.name!r} fails {check_name(check)}: {exc}") from None
    except WarmfitError as exc:
        raise AssertionError(f"policy {cls.name!r} fails {check_name(check)}: {exc}") from None


def check_policy(cls: type[Policy]) -> list[str]:
    """Run every check on a policy class; return the names of those that ran.

    Raises ``AssertionError`` naming the first check that failed.
    """
    ran = []
    for check in CHECKS:
        try:
            run_check(check, cls)
        except SkipCheck:
            continue
        ran.append(check_name(check))
    return ran


def parametrize_with_checks(policies: Sequence[type[Policy]]) -> Any:
    """A pytest decorator: one test per (policy, check), ids ``name-check``; a check
    that does not apply is skipped with its reason."""
    import pytest

    def bound(check: Callable[[type[Policy]], None]) -> Callable[[type[Policy]], None]:
        def run(cls: type[Policy]) -> None:
            try:
                run_check(check, cls)
            except SkipCheck as exc:
                pytest.skip(str(exc))

        run.__name__ = check.__name__
        return run

    cases = [(cls, bound(check)) for cls in policies for check in CHECKS]
    ids = [f"{cls.name}-{check_name(check)}" for cls in policies for check in CHECKS]
    return pytest.mark.parametrize(("policy", "check"), cases, ids=ids)
