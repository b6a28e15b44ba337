"""``warmfit.Pricer``: the policy replay runs, run inside the trainer (issue 26, item 2).

The Pricer must price every wave to the very bytes replay prices it: the
stored traces and generated ones are fed through it reading by reading,
each wave priced at its first reading before that reading is observed (as a
trainer asks before it runs the wave), and compared with replay's per-wave
``estimate_bytes``.
"""

from __future__ import annotations

import contextlib
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warmfit
from warmfit.errors import EstimateOverflowError, PolicyError, UsageError
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import MaxMerge, PriceRequest, Reading, WarmFit, get_policy, policy_names
from warmfit.policies.rule import DeclaredPolicy, State
from warmfit.replay import replay
from warmfit.trainer.pricer import ROW_COLUMNS, Pricer

from .example_policy import LastWhole, LastWholeLoop
from .strategies import examples, traces

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted(p for p in (REPO / "traces").iterdir() if p.is_dir() and any(p.rglob("*.parquet")))
BUILT_IN = ["max-merge", "warm-fit", "warm-affine", "envelope"]


def pricer_estimates(readings: pl.DataFrame, policy: Any, safety: float) -> dict[tuple, Any]:
    """Each wave's price from a Pricer per (run, rank), asked at the wave's first reading
    before that reading is observed; readings in trace order."""
    prices: dict[tuple, Any] = {}
    pricers: dict[tuple[str, int], Pricer] = {}
    for row in readings.iter_rows(named=True):
        stream = (row["run"], row["rank"])
        pricer = pricers.get(stream)
        if pricer is None:
            pricer = pricers[stream] = Pricer(policy, safety_factor=safety)
        key = (*stream, row["wave"])
        if key not in prices:
            prices[key] = pricer.price(
                row["signature"], row["packed_tokens"], row["logical_tokens"],
                output_bytes=row["output_bytes"], static_floor_bytes=row["static_floor_bytes"],
                kind=row["kind"],
            )  # fmt: skip
        pricer.observe_row(row)
    return prices


def replay_estimates(readings: pl.DataFrame, policy: Any, safety: float, engine: str) -> dict:
    rows = replay(readings, [policy], safety, engine).per_wave
    return {
        (r, k, w): e for r, k, w, e in rows.select("run", "rank", "wave", "estimate_bytes").rows()
    }


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
@pytest.mark.parametrize("policy", BUILT_IN)
def test_every_stored_wave_is_priced_to_the_byte_replay_prices_it(trace: Path, policy: str) -> None:
    readings = read_trace([trace])
    ours = pricer_estimates(readings, policy, 1.1)
    for engine in ("vectorized", "scalar"):
        assert ours == replay_estimates(readings, policy, 1.1, engine)
    assert any(v is not None for v in ours.values())


@settings(max_examples=examples(40))
@given(
    frame=traces(max_waves=20),
    policy=st.sampled_from([*BUILT_IN, LastWhole, LastWholeLoop]),
    safety=st.sampled_from([1.0, 1.1, 1.37]),
)
def test_generated_traces_with_oom_split_and_floors_price_as_replay(
    frame: pl.DataFrame, policy: Any, safety: float
) -> None:
    readings = frame.sort("run", "rank", "seq", maintain_order=True)
    assert pricer_estimates(readings, policy, safety) == replay_estimates(
        readings, policy, safety, "scalar"
    )


# --------------------------------------------------------------------------- worked examples


def row(n: int, peak: int, **fields: Any) -> dict[str, Any]:
    """One reading as the recorder writes it (baseline 0, flat caller, whole)."""
    base = dict(run="r", rank=0, seq=0, wave=0, step=0, signature="train", kind="flat",
                phase="caller", whole=True, packed_tokens=n, logical_tokens=n, output_bytes=0,
                baseline_bytes=0, peak_bytes=peak, static_floor_bytes=None, oom=False)  # fmt: skip
    return {**base, **fields}


def test_warm_fit_worked_example() -> None:
    pricer = Pricer("warm-fit", safety_factor=1.1)
    assert pricer.price("train", 100) is None
    pricer.observe_row(row(100, 30_000))  # the seed: 300 B/token, max-merge only
    assert pricer.price("train", 200) == 66_000  # int(300 * 200 * 1.1)
    pricer.observe_row(row(400, 80_000))  # warm: 200 B/token from 400 tokens up
    assert pricer.price("train", 800) == 176_000  # min(300, 200) B/token * 800 * 1.1
    assert pricer.price("train", 100) == 33_000  # min(300 * 100, 200 * 400) * 1.1
    assert pricer.price("train", 800, output_bytes=1_000) == 177_100  # (1,000 + 160,000) * 1.1
    assert pricer.price("train", 800, static_floor_bytes=200_000) == 220_000  # the floor is higher
    assert pricer.price("other", 800) is None  # another signature has its own profile
    assert pricer.price("other", 800, static_floor_bytes=10) == 11


def test_outputs_and_sharing_in_the_rate() -> None:
    pricer = Pricer("max-merge", safety_factor=1.0)
    # rate = (delta - outputs) / n = (11,000 - 1,000) / 100; sharing m / n = 2
    pricer.observe_row(
        row(100, 12_000, baseline_bytes=1_000, output_bytes=1_000, logical_tokens=200)
    )
    assert pricer.price("train", 100, 400) == 20_000  # 100 B/token * max(100, 400 / 2)
    assert pricer.price("train", 300, 400) == 30_000
    assert pricer.price("train", 300, 400, output_bytes=5) == 30_005


def test_readings_replay_does_not_learn_from_teach_nothing() -> None:
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(100, 10_000))
    assert pricer.price("train", 100) == 10_000
    pricer.observe_row(row(100, 10**9, oom=True))  # out of memory: never learned from
    pricer.observe_row(row(100, 10**9, kind="split_child", whole=False))  # a split child's caller
    assert pricer.price("train", 100) == 10_000
    pricer.observe_row(row(100, 20_000, kind="split_child", phase="forward", whole=False))
    assert pricer.price("train", 100) == 20_000  # a split child's forward is learned from
    pricer.observe_row(row(100, 50, baseline_bytes=100))  # a peak below baseline: delta 0
    assert pricer.price("train", 100) == 20_000


def test_admits_at_exactly_the_budget_and_refuses_an_unpriced_wave_unless_told() -> None:
    pricer = Pricer("warm-fit", safety_factor=1.1)
    assert not pricer.admits("train", 100, budget_bytes=10**12)  # no price: not admitted
    assert pricer.admits("train", 100, budget_bytes=0, unpriced=True)
    pricer.observe_row(row(100, 30_000))
    assert pricer.price("train", 200) == 66_000
    assert pricer.admits("train", 200, budget_bytes=66_000)
    assert not pricer.admits("train", 200, budget_bytes=65_999)
    assert pricer.admits("train", 200, budget_bytes=66_000.0)
    assert pricer.admits("x", 1, static_floor_bytes=0, budget_bytes=0)  # a floor of 0 prices 0


def test_a_policy_class_a_user_policy_and_the_profiles() -> None:
    by_class, by_name = Pricer(WarmFit), Pricer("warm-fit")
    assert by_class.policy is by_name.policy is WarmFit
    loop = Pricer(LastWholeLoop, safety_factor=1.0)
    loop.observe_row(row(100, 9_000))
    assert loop.price("train", 200) == 18_000
    assert set(loop.profiles) == {"train"} and isinstance(loop.profiles["train"], LastWholeLoop)
    assert repr(loop) == "Pricer('last-whole-loop', safety_factor=1, 1 signatures)"
    spec = Pricer("tests.example_policy:LastWhole")
    assert spec.policy is LastWhole


def test_warmfit_pricer_is_the_trainers_pricer_and_import_warmfit_stays_light() -> None:
    assert warmfit.Pricer is Pricer
    assert "Pricer" in dir(warmfit) or "Pricer" in warmfit.__all__
    with pytest.raises(AttributeError, match="no attribute 'Pricers'"):
        _ = warmfit.Pricers  # type: ignore[attr-defined]
    done = subprocess.run(
        [sys.executable, "-c", "import sys, warmfit; print(warmfit.__version__); "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'polars', 'numpy', 'torch'}), "
         "'warmfit.trainer' in sys.modules)"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines()[1] == "[] False"


# --------------------------------------------------------------------------- errors


def test_a_bad_policy_or_safety_factor_is_named() -> None:
    with pytest.raises(
        PolicyError, match=r"unknown policy 'warm-fitt' \(did you mean 'warm-fit'\?\); registered"
    ):
        Pricer("warm-fitt")
    with pytest.raises(UsageError, match=r"^policy must be a registered policy name .* got 3"):
        Pricer(3)  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match=r"is not a subclass of warmfit\.policies\.Policy"):
        Pricer(int)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^safety_factor must be a positive number"):
        Pricer(safety_factor=0)
    with pytest.raises(UsageError, match=r"^safety_factor must be a positive number"):
        Pricer(safety_factor=math.nan)
    with pytest.raises(UsageError, match=r"^safety_factor must be a number"):
        Pricer(safety_factor="1.1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda p: p.price("s", 0), r"^packed_tokens must be > 0; got 0"),
        (lambda p: p.price("s", 2**63), r"^packed_tokens must be below 2\*\*63"),
        (lambda p: p.price("s", 10.0, 10), r"^packed_tokens must be an integer; got 10\.0"),
        (lambda p: p.price("s", 10, 20.0), r"^logical_tokens must be an integer; got 20\.0"),
        (lambda p: p.price("s", 10, output_bytes=0.0), r"^output_bytes must be an integer"),
        (lambda p: p.price("s", 10, 2**63), r"^logical_tokens must be below 2\*\*63"),
        (lambda p: p.price("s", 10, output_bytes=2**63), r"^output_bytes must be below 2\*\*63"),
        (lambda p: p.price("s", 10, static_floor_bytes=2**63), r"^static_floor_bytes must be below"),
        (lambda p: p.price("s", 1.5), r"^packed_tokens must be an integer; got 1.5"),
        (lambda p: p.price("s", 10, 5), r"^logical_tokens must be >= packed_tokens \(10\); got 5"),
        (lambda p: p.price("s", 10, output_bytes=-1), r"^output_bytes must be >= 0"),
        (lambda p: p.price("s", 10, static_floor_bytes=-1), r"^static_floor_bytes must be >= 0"),
        (lambda p: p.price("s", 10, static_floor_bytes=1.0), r"^static_floor_bytes must be an int"),
        (lambda p: p.price("s", 10, kind="fused"), r"^kind must be one of flat, split_child"),
        (lambda p: p.price(7, 10), r"^signature must be a str"),
        (lambda p: p.admits("s", 10, budget_bytes=-1), r"^budget_bytes must be a number of bytes"),
        (lambda p: p.admits("s", 10, budget_bytes="1 parsec"), r"^budget_bytes .1 parsec. is not a"),
        (lambda p: p.observe_row({"kind": "flat", "phase": "caller", "oom": False}),
         r"^observe_row\(\): the reading has no 'signature' column"),
    ],
)  # fmt: skip
def test_bad_arguments_are_usage_errors_naming_the_argument(call: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        call(Pricer())


def test_counts_may_be_integer_like() -> None:
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(row(100, 10_000))
    assert pricer.price("train", np.int64(200), np.int32(200), output_bytes=np.int64(0)) == 20_000


@pytest.mark.parametrize(
    ("price", "shown"),
    [(True, "True"), ("5", "'5'"), (math.nan, "nan"), (math.inf, "inf"), (-0.5, "-0.5")],
)
def test_a_price_that_is_not_a_finite_number_of_bytes_is_named(price: Any, shown: str) -> None:
    """A bool, a str, NaN, infinity or a negative float from a policy's price() is
    refused, naming it, as replay refuses it (not priced as 1 byte, nor a TypeError)."""

    class Odd(WarmFit):
        name = "odd"

        def price(self, request: PriceRequest) -> Any:
            return price

    with pytest.raises(PolicyError, match=rf"^policy 'odd' priced a wave at {re.escape(shown)};"):
        Pricer(Odd).price("s", 10)


def test_a_policy_that_prices_nonsense_or_fails_is_named() -> None:
    from .example_policy import Negative

    with pytest.raises(PolicyError, match="'negative' priced a wave at -1"):
        Pricer(Negative).price("s", 10)

    class Broken(WarmFit):
        name = "broken"

        def price(self, request: PriceRequest) -> float | None:
            raise ZeroDivisionError("oops")

    with pytest.raises(PolicyError, match=r"'broken' failed in price\(\) .*ZeroDivisionError"):
        Pricer(Broken).price("s", 10)

    class Unteachable(WarmFit):
        name = "unteachable"

        def observe(self, reading: Reading) -> None:
            raise KeyError("lost")

    with pytest.raises(PolicyError, match=r"'unteachable' failed in observe\(\) .*KeyError"):
        Pricer(Unteachable).observe_row(row(10, 100))


# --------------------------------------------------------------------------- from_trace


def test_from_trace_learns_one_stream_as_replay_leaves_it() -> None:
    trace = REPO / "traces" / "pr991"
    readings = read_trace([trace])
    result = replay(readings, ["warm-fit"], 1.1)
    for run in ("EP1", "EP2"):
        pricer = Pricer.from_trace(trace, "warm-fit", 1.1, run=run)
        profiles = {sig: p for (r, _, sig, _), p in result.profiles.items() if r == run}
        assert set(pricer.profiles) == set(profiles)
        for sig, profile in profiles.items():
            assert pricer.profiles[sig].state == profile.state  # type: ignore[attr-defined]
            for n in (1, 4_096, 65_536):
                p = profile.price(PriceRequest(n, n))
                expected = None if p is None else int(int(p) * 1.1)
                assert pricer.price(sig, n) == expected


def test_from_trace_asks_for_a_stream_when_there_are_several(tmp_path: Path) -> None:
    trace = REPO / "traces" / "pr991"
    with pytest.raises(UsageError, match=r"holds 2 streams .*run 'EP1' rank 0, run 'EP2' rank 0"):
        Pricer.from_trace(trace)
    with pytest.raises(UsageError, match=r"no readings of run 'EP3'; it holds run 'EP1' rank 0"):
        Pricer.from_trace(trace, run="EP3")
    with pytest.raises(UsageError, match=r"no readings of run 'EP1' rank 1"):
        Pricer.from_trace([trace], run="EP1", rank=1)
    with pytest.raises(PolicyError, match="unknown policy"):
        Pricer.from_trace(trace, "nope", run="EP1")
    one = tmp_path / "one.parquet"
    write_trace(readings_frame([dict(seq=0, wave=0, signature="s", packed_tokens=10,
                                     logical_tokens=10, peak_bytes=1_000, whole=True)]), one)  # fmt: skip
    assert Pricer.from_trace(one, "max-merge", 1.0).price("s", 20) == 2_000  # one stream: no choice


def streams_trace(path: Path, runs: int) -> Path:
    """A trace of ``runs`` one-wave runs 'r00', 'r01', ... (rank 0 each): as many streams."""
    write_trace(readings_frame([
        dict(run=f"r{i:02d}", seq=0, wave=0, signature="s", packed_tokens=10, logical_tokens=10,
             peak_bytes=1_000, whole=True)
        for i in range(runs)
    ]), path)  # fmt: skip
    return path


@pytest.mark.parametrize(("runs", "more"), [(10, ""), (11, " (and 1 more)"), (12, " (and 2 more)")])
def test_from_trace_lists_ten_streams_and_counts_the_rest(
    tmp_path: Path, runs: int, more: str
) -> None:
    """The refusal lists the first ten streams, in trace order, then how many more: 10
    streams are all listed with nothing after; 11 are ten listed and '(and 1 more)'."""
    trace = streams_trace(tmp_path / "many.parquet", runs)
    listed = ", ".join(f"run 'r{i:02d}' rank 0" for i in range(10))
    with pytest.raises(UsageError) as caught:
        Pricer.from_trace(trace)
    assert str(caught.value) == (
        f"the trace holds {runs} streams to choose from ({listed}{more}); a Pricer learns one "
        "rank's readings: give run= and rank=."
    )
    with pytest.raises(UsageError) as caught:
        Pricer.from_trace(trace, rank=3)  # a rank alone: named alone, no 'run None'
    assert str(caught.value) == f"the trace holds no readings of rank 3; it holds {listed}{more}."
    with pytest.raises(UsageError) as caught:
        Pricer.from_trace(trace, run="r99")
    assert str(caught.value).startswith("the trace holds no readings of run 'r99'; it holds ")
    assert Pricer.from_trace(trace, "max-merge", 1.0, run="r03").price("s", 20) == 2_000


def test_a_usage_error_names_its_argument_for_the_command_line() -> None:
    """A bad count names the argument apart from the problem (UsageError.argument), so the
    command line can put its own flag in its place (for_flag); observe_row's name the call."""
    with pytest.raises(UsageError) as caught:
        Pricer().price("s", 1.5)
    got = "must be an integer; got 1.5 of type float (an int, or a 0-d integer tensor)."
    assert (caught.value.argument, caught.value.problem) == ("packed_tokens", got)
    assert str(caught.value.for_flag("--tokens")) == f"--tokens {got}"
    with pytest.raises(UsageError) as caught:
        Pricer().max_tokens("s", 10, cap=2**63)
    assert caught.value.argument == "cap" and caught.value.problem.startswith("must be below 2**63")
    with pytest.raises(UsageError) as caught:
        Pricer().observe_row(row(1.5, 100))
    assert caught.value.argument is None
    assert str(caught.value) == f"observe_row(): packed_tokens {got}"


@pytest.mark.parametrize(
    "edge",
    [dict(packed_tokens=1, logical_tokens=1), dict(static_floor_bytes=0),
     dict(output_bytes=0, baseline_bytes=0), dict(peak_bytes=0)],
    ids=["one token", "floor 0", "outputs and baseline 0", "peak 0"],
)  # fmt: skip
def test_a_reading_at_the_column_edges_is_learned_the_same_through_numpy_values(
    edge: dict[str, int],
) -> None:
    """The smallest values a trace holds (1 token, a floor, outputs, a baseline or a peak
    of 0) teach the same whether plain ints or numpy ones (the checked path) carry them."""
    plain, numpy_typed = Pricer("max-merge", 1.0), Pricer("max-merge", 1.0)
    reading = row(10, 10_000, **edge)
    plain.observe_row(reading)
    numpy_typed.observe_row({k: np.int64(v) if type(v) is int else v for k, v in reading.items()})
    for n in (1, 200):
        assert plain.price("train", n) == numpy_typed.price("train", n)
    assert plain.profiles["train"].state == numpy_typed.profiles["train"].state  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "edge",
    [dict(packed_tokens=1, logical_tokens=1), dict(static_floor_bytes=0), dict(output_bytes=0)],
    ids=["one token", "floor 0", "outputs 0"],
)  # fmt: skip
def test_a_wave_at_the_edges_is_priced_the_same_through_numpy_values(edge: dict[str, int]) -> None:
    """price() of the smallest wave a trace holds (1 token, a floor or outputs of 0)
    answers the same given plain ints or numpy ones (its checked path)."""
    pricer = Pricer("max-merge", 1.0)
    pricer.observe_row(row(10, 10_000))
    wave = {"packed_tokens": 5, "logical_tokens": 5, "output_bytes": 7, **edge}
    plain = pricer.price("train", **wave)  # type: ignore[arg-type]
    typed = pricer.price("train", **{k: np.int64(v) for k, v in wave.items()})  # type: ignore[arg-type]
    assert plain == typed and plain is not None


def test_an_empty_signature_is_learned_whatever_the_types_of_the_other_values() -> None:
    """A trace's signature column may hold '' (price() takes it too): observe_row learned
    it from a reading of plain ints but refused it, 'must be a non-empty str', when another
    value was a numpy one (the checked path), so from_trace's answer hung on dtypes."""
    plain, numpy_typed = Pricer("max-merge", 1.0), Pricer("max-merge", 1.0)
    plain.observe_row(row(100, 10_000, signature=""))
    numpy_typed.observe_row(
        row(np.int64(100), np.int64(10_000), signature="", whole=np.bool_(True))
    )
    assert plain.price("", 200) == numpy_typed.price("", 200) == 20_000


def test_from_trace_warns_once_of_a_signature_the_trace_lacks(tmp_path: Path) -> None:
    """A Pricer warm-started from a trace knows its signatures ('s', and 'o' whose only
    reading ran out of memory): 'train/tiny' is none of them, so its first ask warns at
    once, naming what the trace taught; later asks say nothing more. A signature the
    trace holds never warns, nor does a live Pricer's first ask of a new signature."""
    import warnings

    from warmfit.trainer.pricer import PricerWarning

    one = tmp_path / "one.parquet"
    write_trace(readings_frame([
        dict(seq=0, wave=0, signature="s", packed_tokens=10, logical_tokens=10,
             peak_bytes=1_000, whole=True),
        dict(seq=1, wave=1, signature="o", packed_tokens=10, logical_tokens=10,
             peak_bytes=1_000, phase="forward", oom=True),
    ]), one)  # fmt: skip
    pricer = Pricer.from_trace(one, "max-merge", 1.0)
    with pytest.warns(PricerWarning, match=r"trace it was warm-started from has no reading of "
                      r"signature 'train/tiny'.*It knows 's'\."):  # fmt: skip
        assert pricer.price("train/tiny", 100) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only; the trace's own signatures: never
        assert pricer.price("train/tiny", 100) is None
        assert pricer.max_tokens("train/tiny", 10**9) is None
        assert pricer.price("s", 20) == 2_000 and pricer.price("o", 20) is None
    with pytest.warns(PricerWarning, match="signature 'eval'"):  # max_tokens asks too
        assert pricer.max_tokens("eval", 10**9) is None
    live = Pricer("max-merge", 1.0)
    live.observe_row(dict(signature="s", kind="flat", phase="caller", whole=True,
                          packed_tokens=10, logical_tokens=10, output_bytes=0, baseline_bytes=0,
                          peak_bytes=1_000, static_floor_bytes=None, oom=False))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its first wave of a new signature has no price
        assert live.price("train/tiny", 100) is None


def test_row_columns_are_trace_columns() -> None:
    from warmfit.format.schema import COLUMNS

    assert set(ROW_COLUMNS) <= set(COLUMNS)


# --------------------------------------------------------------------------- the float form


@settings(max_examples=examples(150))
@given(
    history=st.lists(
        st.tuples(
            st.integers(1, 5_000), st.integers(0, 3), st.integers(0, 2**30),
            st.integers(0, 2**12), st.booleans(), st.sampled_from(["caller", "forward"]),
        ),
        max_size=12,
    ),
    asks=st.lists(st.tuples(st.integers(1, 8_000), st.integers(0, 3)), min_size=1, max_size=6),
)  # fmt: skip
def test_the_float_form_of_each_built_in_rule_gives_numpys_double(
    history: list[tuple[int, int, int, int, bool, str]], asks: list[tuple[int, int]]
) -> None:
    """Prices run the rule on plain floats (DeclaredPolicy.plain_floats): the same doubles
    numpy gives, NaN for no profile included, on measured sizes, between them and beyond."""
    sizes = [n for n, *_ in history]
    for name in BUILT_IN:
        cls = get_policy(name)
        assert issubclass(cls, DeclaredPolicy) and cls.plain_floats
        profile = cls()
        for n, extra, delta, out, whole, phase in history:
            profile.observe(
                Reading(n, n + extra * n, delta, out, whole and phase == "caller", phase)
            )
        for n, extra in [*asks, *((s, 0) for s in sizes)]:
            m = n + extra * n
            got = profile.price(PriceRequest(n, m))  # (builds the float form the first time)
            with np.errstate(all="ignore"):
                expected = float(cls.rule(State(profile.state), np.float64(n), np.float64(m)))
            fast = cls._float_rule(State(profile.state), float(n), float(m))  # type: ignore[misc]
            assert (math.isnan(expected) and math.isnan(fast)) or fast == expected, (name, n, m)
            assert got == (None if math.isnan(expected) else expected)


#: Doubles where numpy's answers differ in a bit only: zeros of either sign, NaN, infinities.
_EDGES = st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1.0, 5e-324])


@settings(max_examples=300)
@given(a=st.floats() | _EDGES, b=st.floats() | _EDGES, condition=st.booleans())
def test_the_float_forms_numpy_functions_give_numpys_very_double(
    a: float, b: float, condition: bool
) -> None:
    """The plain-float stand-ins of np.maximum, np.minimum, np.where, np.isnan and
    np.nextafter that a vouching rule runs on: numpy's double to the bit, NaN for NaN.
    On a tie both give their second argument, as numpy does: maximum(-0.0, 0.0) is
    +0.0, maximum(0.0, -0.0) is -0.0, minimum alike."""
    from warmfit.policies.rule import _FloatNumpy

    def bits(x: float) -> object:
        return "nan" if math.isnan(x) else np.float64(x).tobytes()

    x, y = np.float64(a), np.float64(b)
    assert bits(_FloatNumpy.maximum(a, b)) == bits(float(np.maximum(x, y)))
    assert bits(_FloatNumpy.minimum(a, b)) == bits(float(np.minimum(x, y)))
    assert bits(_FloatNumpy.where(condition, a, b)) == bits(float(np.where(condition, x, y)))
    assert _FloatNumpy.isnan(a) == bool(np.isnan(x))
    assert bits(_FloatNumpy.nextafter(a, b)) == bits(float(np.nextafter(x, y)))
    assert (bits(_FloatNumpy.maximum(-0.0, 0.0)), bits(_FloatNumpy.maximum(0.0, -0.0))) == (
        bits(0.0),
        bits(-0.0),
    )
    assert (bits(_FloatNumpy.minimum(-0.0, 0.0)), bits(_FloatNumpy.minimum(0.0, -0.0))) == (
        bits(0.0),
        bits(-0.0),
    )


def test_a_vouching_rule_runs_on_floats_from_its_first_price(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rule that vouches for floats and calls the built-ins' rules (the larger of
    WarmFit's and MaxMerge's prices, WarmFit.rule calling MaxMerge.rule in turn) is
    priced on plain floats from the first price on: no numpy function is called, and
    the price is numpy's double. Rates 200, 200 and 300 B/token measured: max-merge's
    300 B/token is the larger, 30,000 B at 100 tokens, 120,000 B at 400, 300 B at 1."""

    class Larger(WarmFit):
        name = "larger-of-two-test"
        summary = "the larger of warm-fit's and max-merge's prices (a test policy)"
        plain_floats = True

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return np.maximum(WarmFit.rule(state, n, m), MaxMerge.rule(state, n, m))

    profile = Larger()
    for reading in (Reading(100, 100, 20_000, 0, True), Reading(400, 400, 80_000, 0, True),
                    Reading(400, 400, 120_000, 0, True)):  # fmt: skip
        profile.observe(reading)
    asks = [(100, 100), (400, 400), (1, 1), (250, 500)]
    with np.errstate(all="ignore"):
        expected = [
            float(Larger.rule(State(profile.state), np.float64(n), np.float64(m))) for n, m in asks
        ]
    calls: list[str] = []
    for name in ("maximum", "minimum", "where", "isnan", "nextafter"):
        numpys = getattr(np, name)

        def counted(*args: Any, _numpys: Any = numpys, _name: str = name, **kw: Any) -> Any:
            calls.append(_name)
            return _numpys(*args, **kw)

        monkeypatch.setattr(np, name, counted)
    got = [profile.price(PriceRequest(n, m)) for n, m in asks]
    assert (got, calls) == (expected, [])
    assert got[:3] == [30_000.0, 120_000.0, 300.0]


def test_only_a_rule_that_vouches_for_floats_runs_on_them() -> None:
    class Inverted(WarmFit):  # a rule of its own that uses ~: numpy prices it
        name = "inverted"

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return np.where(~(n > 10), 1.0, 2.0)

    class Inherits(WarmFit):  # the rule it inherits vouches for itself
        name = "inherits"

    from warmfit.policies.rule import RATE, Max

    class OwnRule(DeclaredPolicy):  # a policy of one's own that says nothing: numpy prices it
        name = "own-rule"
        summary = "twice the packed tokens (a test policy)"
        rate_max = Max(RATE)

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return np.where(~(n > 10), 1.0, 2.0 * n)

    assert Inverted._float_rule is None
    assert Inverted().price(PriceRequest(100, 100)) == 2.0
    # the default: no vouching, as DeclaredPolicy itself says (plain_floats False)
    assert DeclaredPolicy.plain_floats is False and OwnRule.plain_floats is False
    assert OwnRule._float_rule is None and OwnRule().price(PriceRequest(100, 100)) == 200.0
    assert Inherits().price(PriceRequest(1, 1)) is None and Inherits._float_rule is not None
    assert policy_names()[:4] == BUILT_IN


def test_a_float_form_that_gives_a_complex_falls_back_to_numpy() -> None:
    """A rule with ``** 0.5`` of a negative number: Python's floats give a complex,
    numpy NaN (no price). The float form must not raise (a TypeError at float(p)) but
    give numpy's answer: no price at 100 tokens, 50 B/token * sqrt(200 - 150) at 200."""
    from warmfit.policies.rule import RATE, Max

    class Root(DeclaredPolicy):
        name = "root-test"
        summary = "rate times the square root of n - 150"
        plain_floats = True
        rate_max = Max(RATE)

        @staticmethod
        def rule(state: Any, n: Any, m: Any) -> Any:
            return state.rate_max * (n - 150.0) ** 0.5

    profile = Root()
    profile.observe(Reading(100, 100, 5_000, 0, True, "caller"))  # 50 B/token
    assert profile.price(PriceRequest(100, 100)) is None
    assert profile.price(PriceRequest(200, 200)) == 50 * 50**0.5


# --- audit of 12-06g (audit1) ---


def test_a_signature_only_another_rank_recorded_is_warned_of_at_the_first_ask(
    tmp_path: Path,
) -> None:
    """Rank 0 recorded signature 'a', rank 1 'b'. A Pricer warm-started from rank 0 has
    no reading of 'b': its first ask of 'b' warns (the trace it learned has none), as
    for a signature no rank recorded; 'a' prices 1,000 B / 10 tokens x 20 = 2,000 B."""
    from warmfit.trainer.pricer import PricerWarning

    two = tmp_path / "two.parquet"
    write_trace(readings_frame([
        dict(seq=0, wave=0, rank=rank, signature=sig, packed_tokens=10, logical_tokens=10,
             peak_bytes=1_000, whole=True)
        for rank, sig in ((0, "a"), (1, "b"))
    ]), two)  # fmt: skip
    pricer = Pricer.from_trace(two, "max-merge", 1.0, rank=0)
    assert pricer.price("a", 20) == 2_000
    with pytest.warns(PricerWarning, match=r"warm-started from has no reading of signature "
                      r"'b'.*It knows 'a'\."):  # fmt: skip
        assert pricer.price("b", 20) is None


# --- issue 38, tests by pattern (s4) ---

#: The columns a reading holds, as observe_row's refusals list them.
LISTED = (
    "signature, kind, phase, whole, packed_tokens, logical_tokens, output_bytes, "
    "baseline_bytes, peak_bytes, static_floor_bytes, oom"
)
#: A count past a trace's int64 column, as the refusals show it.
PAST = "must be below 2**63 (a trace's int64 column); got 9223372036854775808."
KIND_ONE_OF = "kind must be one of flat, split_child, dp_rank_forward; got 'fused'."


class BrokenPrice(WarmFit):
    name = "broken-price"

    def price(self, request: PriceRequest) -> float | None:
        raise ZeroDivisionError("oops")


class BrokenObserve(WarmFit):
    name = "broken-observe"

    def observe(self, reading: Reading) -> None:
        raise KeyError("lost")


def taught(policy: Any = "max-merge") -> Pricer:
    """A Pricer (safety factor 1.1) taught 300 B/token of 'train' (30,000 B over 100 tokens)."""
    pricer = Pricer(policy, safety_factor=1.1)
    pricer.observe_row(row(100, 30_000))
    return pricer


def no_column(name: str) -> dict[str, Any]:
    return {k: v for k, v in row(10, 1_000).items() if k != name}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: Pricer(3), UsageError,  # type: ignore[arg-type]
         "policy must be a registered policy name (warmfit policies), 'module:Class', or a "
         "policy class; got 3 of type int."),
        (lambda: Pricer(safety_factor="1.1"), UsageError,  # type: ignore[arg-type]
         "safety_factor must be a number (1.1 adds a 10% margin); got '1.1'."),
        (lambda: Pricer(safety_factor=True), UsageError,
         "safety_factor must be a number (1.1 adds a 10% margin); got True."),
        (lambda: Pricer(safety_factor=0), UsageError,
         "safety_factor must be a positive number (1.1 adds a 10% margin); got 0."),
        (lambda: Pricer(safety_factor=-1.5), UsageError,
         "safety_factor must be a positive number (1.1 adds a 10% margin); got -1.5."),
        (lambda: Pricer(safety_factor=math.inf), UsageError,
         "safety_factor must be a positive number (1.1 adds a 10% margin); got inf."),
        (lambda: Pricer(safety_factor=2**1100), UsageError,
         "safety_factor must be a positive number (1.1 adds a 10% margin); got an integer of "
         "1101 bits, past a float's range."),
        (lambda: Pricer().price("s", 0), UsageError, "packed_tokens must be > 0; got 0."),
        (lambda: Pricer().price("s", -3, 5), UsageError, "packed_tokens must be > 0; got -3."),
        (lambda: Pricer().price("s", 10, 9), UsageError,
         "logical_tokens must be >= packed_tokens (10); got 9."),
        (lambda: Pricer().price("s", 10, 0), UsageError,  # 0 is a count given, not "none"
         "logical_tokens must be >= packed_tokens (10); got 0."),
        (lambda: taught().admits("train", 10, 0, budget_bytes=10**9), UsageError,
         "logical_tokens must be >= packed_tokens (10); got 0."),
        (lambda: Pricer().price("s", 10, output_bytes=-1), UsageError,
         "output_bytes must be >= 0; got -1."),
        (lambda: Pricer().price("s", 10, static_floor_bytes=-1), UsageError,
         "static_floor_bytes must be >= 0, or None for no floor; got -1."),
        (lambda: Pricer().price(7, 10), UsageError, "signature must be a str; got 7."),
        (lambda: Pricer().price("s", 10, kind="fused"), UsageError, KIND_ONE_OF),
        (lambda: Pricer().price("s", True), UsageError,
         "packed_tokens must be an integer; got True of type bool (a bool is not a count)."),
        (lambda: Pricer().price("s", 10, output_bytes=False), UsageError,
         "output_bytes must be an integer; got False of type bool (a bool is not a count)."),
        (lambda: Pricer().price("s", 2**63), UsageError, f"packed_tokens {PAST}"),
        (lambda: Pricer().price("s", 10, static_floor_bytes=2**63), UsageError,
         f"static_floor_bytes {PAST}"),
        (lambda: Pricer().price("s", 10, 20.0), UsageError,
         "logical_tokens must be an integer; got 20.0 of type float (an int, or a 0-d integer "
         "tensor)."),
        (lambda: taught().price("train", 2**60, 2**61, output_bytes=5, static_floor_bytes=7),
         EstimateOverflowError,
         "policy 'max-merge' prices a wave of 'train' (1152921504606846976 packed tokens) above "
         "2**63 bytes (outputs 5, floor 7, safety factor 1.1)."),
        (lambda: taught().admits("train", 2**61, 2**62, budget_bytes=10), EstimateOverflowError,
         "policy 'max-merge' prices a wave of 'train' (2305843009213693952 packed tokens) above "
         "2**63 bytes (outputs 0, floor None, safety factor 1.1)."),
        (lambda: Pricer(BrokenPrice).price("s", 10), PolicyError,
         "policy 'broken-price' failed in price() on a wave of 's' (10 packed tokens): "
         "ZeroDivisionError: oops. Fix the policy's code."),
        (lambda: Pricer(BrokenObserve).observe_row(row(10, 100, signature="eval")), PolicyError,
         "policy 'broken-observe' failed in observe() on a reading of 'eval': KeyError: 'lost'. "
         "Fix the policy's code."),
        (lambda: Pricer().admits("s", 10, budget_bytes=-1.0), UsageError,
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got -1.0."),
        (lambda: Pricer().admits("s", 10, budget_bytes=math.nan), UsageError,
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got nan."),
        (lambda: Pricer().oom_tokens("s", -1), UsageError,
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got -1."),
        (lambda: Pricer().max_tokens("s", "1 parsec"), UsageError,
         "budget_bytes '1 parsec' is not a size: give bytes, or a number with KB, MB, GB, TB, "
         "KiB, MiB, GiB or TiB (e.g. 128.8GB)."),
        (lambda: Pricer().max_tokens("s", 10, cap=0), UsageError, "cap must be >= 1; got 0."),
        (lambda: Pricer().max_tokens("s", 10, cap=-1), UsageError, "cap must be >= 1; got -1."),
        (lambda: Pricer().max_tokens("s", 10, kind="fused"), UsageError, KIND_ONE_OF),
        (lambda: Pricer().observe_row([1]), UsageError,
         f"observe_row(): a reading is a mapping of trace v1 column names to values ({LISTED}); "
         "got list."),
        (lambda: Pricer().observe_row(no_column("oom")), UsageError,
         f"observe_row(): the reading has no 'oom' column; a reading maps trace v1 column names "
         f"to values ({LISTED})."),
        (lambda: Pricer().observe_row(no_column("peak_bytes")), UsageError,
         f"observe_row(): the reading has no 'peak_bytes' column; a reading maps trace v1 "
         f"column names to values ({LISTED})."),
        (lambda: Pricer().observe_row(row(10, 1_000, kind="fused")), UsageError,
         f"observe_row(): {KIND_ONE_OF}"),
        (lambda: Pricer().observe_row(row(10, 1_000, phase="backward")), UsageError,
         "observe_row(): phase must be one of forward, caller; got 'backward'."),
        (lambda: Pricer().observe_row(row(10, 1_000, whole=1)), UsageError,
         "observe_row(): whole must be a bool; got 1."),
        (lambda: Pricer().observe_row(row(10, 1_000, oom="no")), UsageError,
         "observe_row(): oom must be a bool; got 'no'."),
        (lambda: Pricer().observe_row(row(10, 1_000, signature=None)), UsageError,
         "observe_row(): signature must be a str; got None."),
        (lambda: Pricer().observe_row(row(10, 1_000, static_floor_bytes=-1)), UsageError,
         "observe_row(): static_floor_bytes must be >= 0 or None; got -1."),
        (lambda: Pricer().observe_row(row(10, -1)), UsageError,
         "observe_row(): peak_bytes must be >= 0; got -1."),
        (lambda: Pricer().observe_row(row(10, 1_000, baseline_bytes=-2)), UsageError,
         "observe_row(): baseline_bytes must be >= 0; got -2."),
        (lambda: Pricer().observe_row(row(10, 1_000, output_bytes=-3)), UsageError,
         "observe_row(): output_bytes must be >= 0; got -3."),
        (lambda: Pricer().observe_row(row(10, 1_000, logical_tokens=9)), UsageError,
         "observe_row(): logical_tokens must be >= packed_tokens (10); got 9."),
        (lambda: Pricer().observe_row(row(0, 1_000)), UsageError,
         "observe_row(): packed_tokens must be > 0; got 0."),
        (lambda: Pricer().observe_row(row(10, 1_000, output_bytes=True)), UsageError,
         "observe_row(): output_bytes must be an integer; got True of type bool (a bool is not "
         "a count)."),
        (lambda: Pricer().observe_row(row(10, 2**63)), UsageError, f"observe_row(): peak_bytes {PAST}"),
    ],
)  # fmt: skip
def test_every_refusal_word_for_word(call: Any, error: type[Exception], message: str) -> None:
    """Each refusal the Pricer can give, whole: the argument or column, the value, the hint."""
    with pytest.raises(error) as caught:
        call()
    assert type(caught.value) is error
    assert str(caught.value) == message


def test_a_wave_after_the_given_meter_was_closed_is_refused_word_for_word() -> None:
    from .fixed_meter import FixedMeter

    pricer = Pricer("max-merge", meter=FixedMeter(0, 10))
    with pricer.wave("train", 4):
        pass
    pricer.close()
    with pytest.raises(UsageError) as caught:
        pricer.wave("train", 4)
    assert str(caught.value) == (
        "wave(): this Pricer's meter was closed by close() and measures nothing more; give a "
        "Pricer a new meter (Pricer(meter=...)), or none to have one made at its first wave "
        "after each close()."
    )


def test_the_unknown_signature_warnings_word_for_word(tmp_path: Path) -> None:
    """Both warnings, whole. Live: 'trian' asked, then 1,000 readings of 'train' taught
    (the count with a thousands comma). Warm-started from a trace whose only reading ran
    out of memory: it knows no signature yet, so says so, at the first ask of 'x'."""
    import warnings

    from warmfit.trainer.pricer import PricerWarning

    tail = (
        " Is the signature mistyped, or are its waves not measured (Pricer.wave, or an enabled "
        "Recorder(pricer=...))?"
    )
    live = Pricer("max-merge")
    assert live.price("trian", 10) is None
    for _ in range(1_000):
        live.observe_row(row(10, 1_000))
    with pytest.warns(PricerWarning) as caught:
        assert live.price("trian", 10) is None
    assert [str(w.message) for w in caught] == [
        "warmfit: the Pricer has been taught 1,000 readings, none of signature 'trian': it has "
        "no price for it and admits none of its waves. It knows 'train'." + tail
    ]
    oomed = tmp_path / "oomed.parquet"
    write_trace(readings_frame([dict(seq=0, wave=0, signature="o", packed_tokens=10,
                                     logical_tokens=10, peak_bytes=1_000, oom=True)]), oomed)  # fmt: skip
    warm = Pricer.from_trace(oomed, "max-merge")
    with pytest.warns(PricerWarning) as caught:
        assert warm.price("x", 10) is None
    assert [str(w.message) for w in caught] == [
        "warmfit: the trace it was warm-started from has no reading of signature 'x': it has no "
        "price for it and admits none of its waves. It knows no signature yet." + tail
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the trace's signature, though it taught nothing
        assert warm.price("o", 10) is None


def three_streams(path: Path) -> Path:
    """Run 'a' ranks 0 (300 B/token) and 1 (200 B/token), run '' rank 0 (100 B/token)."""
    write_trace(readings_frame([
        dict(run=run, rank=rank, seq=0, wave=0, signature="s", packed_tokens=10,
             logical_tokens=10, peak_bytes=rate * 10, whole=True)
        for run, rank, rate in (("a", 0, 300), ("a", 1, 200), ("", 0, 100))
    ]), path)  # fmt: skip
    return path


#: The streams as the trace holds them (write_trace sorts them by run and rank).
HELD = "run '' rank 0, run 'a' rank 0, run 'a' rank 1"


@pytest.mark.parametrize(
    ("run", "rank", "asked"),
    [
        ("b", None, "run 'b'"),
        (None, 2, "rank 2"),
        ("a", 2, "run 'a' rank 2"),
        ("b", 0, "run 'b' rank 0"),  # rank 0 is a choice: named
        ("", 1, "run '' rank 1"),  # so is the run ''
        ("b", 1, "run 'b' rank 1"),
    ],
)
def test_from_trace_names_the_stream_it_lacks_in_each_form(
    tmp_path: Path, run: str | None, rank: int | None, asked: str
) -> None:
    trace = three_streams(tmp_path / "three.parquet")
    with pytest.raises(UsageError) as caught:
        Pricer.from_trace(trace, "max-merge", 1.0, run=run, rank=rank)
    assert str(caught.value) == f"the trace holds no readings of {asked}; it holds {HELD}."


@pytest.mark.parametrize(
    ("run", "rank", "rate"),
    [("a", 0, 300), ("a", 1, 200), ("", 0, 100), ("", None, 100), (None, 1, 200)],
)
def test_from_trace_takes_run_empty_and_rank_zero_as_choices(
    tmp_path: Path, run: str | None, rank: int | None, rate: int
) -> None:
    """Twins of the one-rank examples: the run '' and the rank 0 are choices like any
    (not "none given"); the stream chosen is the one learned, 20 tokens at its rate."""
    trace = three_streams(tmp_path / "three.parquet")
    assert (
        Pricer.from_trace(trace, "max-merge", 1.0, run=run, rank=rank).price("s", 20) == rate * 20
    )
    with pytest.raises(UsageError) as caught:
        Pricer.from_trace(trace)
    assert str(caught.value) == (
        f"the trace holds 3 streams to choose from ({HELD}); a Pricer learns one rank's "
        "readings: give run= and rank=."
    )


@pytest.mark.parametrize(
    ("run", "rank", "listed"),
    [
        ("a", None, "run 'a' rank 0, run 'a' rank 1"),  # one run, two ranks
        (None, 0, "run '' rank 0, run 'a' rank 0"),  # one rank, two runs
    ],
)
def test_from_trace_lists_the_streams_of_the_run_or_rank_asked(
    tmp_path: Path, run: str | None, rank: int | None, listed: str
) -> None:
    """Twin of the three-stream refusal with a run or a rank given: the 2 streams it
    counts are the 2 it lists (the trace's third stream is not one to choose from)."""
    trace = three_streams(tmp_path / "three.parquet")
    with pytest.raises(UsageError) as caught:
        Pricer.from_trace(trace, run=run, rank=rank)
    assert str(caught.value) == (
        f"the trace holds 2 streams to choose from ({listed}); a Pricer learns one rank's "
        "readings: give run= and rank=."
    )


# --- fresh audit of 12-06 (fa5) ---


@pytest.mark.parametrize(
    ("floor", "problem"),
    [
        (1.5, "must be an integer; got 1.5 of type float (an int, or a 0-d integer tensor)."),
        ("7", "must be an integer; got '7' of type str (an int, or a 0-d integer tensor)."),
        (True, "must be an integer; got True of type bool (a bool is not a count)."),
        (2**63, PAST),
    ],
)
def test_observe_row_names_itself_when_refusing_a_floor_that_is_not_a_count(
    floor: object, problem: str
) -> None:
    """The floor column's refusals of a reading, whole: each names the call
    (``observe_row(): ``) and the column, as the reading's other columns' refusals do,
    and the reading teaches nothing."""
    pricer = taught()
    with pytest.raises(UsageError) as caught:
        pricer.observe_row(row(10, 1_000, static_floor_bytes=floor))
    assert str(caught.value) == f"observe_row(): static_floor_bytes {problem}"
    assert pricer.price("train", 10) == 3_300  # 300 B/token * 10 * 1.1, as before


NEGATIVE = "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got "


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        (-1, NEGATIVE + "-1."),
        (-(2**70), NEGATIVE + "-1180591620717411303424."),
        (-1.0, NEGATIVE + "-1.0."),
        ("-1", "budget_bytes '-1' is not a size: give bytes, or a number with KB, MB, GB, TB, "
         "KiB, MiB, GiB or TiB (e.g. 128.8GB)."),
    ],
)  # fmt: skip
def test_a_wave_refuses_a_negative_budget_of_every_type_word_for_word(
    budget: object, message: str
) -> None:
    """wave()'s budget is checked as admits() checks it, an int as much as a float or a
    string: a negative one is refused before the wave runs, and nothing is measured."""
    from .fixed_meter import FixedMeter

    pricer = Pricer("max-merge", meter=FixedMeter(0, 10))
    with pytest.raises(UsageError) as caught:
        pricer.wave("train", 4, budget_bytes=budget)
    assert str(caught.value) == message
    assert pricer.ooms == [] and pricer.profiles == {}


# --- issue 38, tests by pattern round 2 (s6) ---

#: The hint of every refusal of a price a policy gave.
PRICE_HINT = (
    "a price must be a finite number of bytes >= 0, or None when the profile has nothing to go on."
)
NOT_A_SIZE = (
    "budget_bytes {!r} is not a size: give bytes, or a number with KB, MB, GB, TB, KiB, MiB, "
    "GiB or TiB (e.g. 128.8GB)."
)


def odd_price(price: Any) -> type[WarmFit]:
    """A policy named 'odd' that prices every wave at ``price``."""

    class Odd(WarmFit):
        name = "odd"

        def price(self, request: PriceRequest) -> Any:
            return price

    return Odd


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: Pricer("warm-fitt"), PolicyError,
         "unknown policy 'warm-fitt' (did you mean 'warm-fit'?); registered policies: max-merge, "
         "warm-fit, warm-affine, envelope. Run 'warmfit policies' to list them, or give "
         "'module:Class'."),
        (lambda: Pricer(int), PolicyError,  # type: ignore[arg-type]
         "\"<class 'int'>\" is not a subclass of warmfit.policies.Policy."),
        (lambda: Pricer(odd_price(True)).price("s", 10), PolicyError,
         f"policy 'odd' priced a wave at True; {PRICE_HINT}"),
        (lambda: Pricer(odd_price("5")).price("s", 10), PolicyError,
         f"policy 'odd' priced a wave at '5'; {PRICE_HINT}"),
        (lambda: Pricer(odd_price(math.nan)).price("s", 10), PolicyError,
         f"policy 'odd' priced a wave at nan; {PRICE_HINT}"),
        (lambda: Pricer(odd_price(math.inf)).price("s", 10), PolicyError,
         f"policy 'odd' priced a wave at inf; {PRICE_HINT}"),
        (lambda: Pricer(odd_price(-0.5)).price("s", 10), PolicyError,
         f"policy 'odd' priced a wave at -0.5; {PRICE_HINT}"),
        (lambda: Pricer(odd_price(-1)).admits("s", 10, budget_bytes=10**9), PolicyError,
         f"policy 'odd' priced a wave at -1; {PRICE_HINT}"),
        (lambda: Pricer().price("s", 10.0, 10), UsageError,
         "packed_tokens must be an integer; got 10.0 of type float (an int, or a 0-d integer "
         "tensor)."),
        (lambda: Pricer().price("s", 10, output_bytes=0.0), UsageError,
         "output_bytes must be an integer; got 0.0 of type float (an int, or a 0-d integer "
         "tensor)."),
        (lambda: Pricer().price("s", 10, 2**63), UsageError, f"logical_tokens {PAST}"),
        (lambda: Pricer().price("s", 10, output_bytes=2**63), UsageError, f"output_bytes {PAST}"),
        (lambda: Pricer().price("s", 2**64), UsageError,
         "packed_tokens must be below 2**63 (a trace's int64 column); got 18446744073709551616."),
        (lambda: Pricer().price("s", 10, static_floor_bytes=True), UsageError,
         "static_floor_bytes must be an integer; got True of type bool (a bool is not a count)."),
        (lambda: Pricer().admits("s", True, budget_bytes=10), UsageError,
         "packed_tokens must be an integer; got True of type bool (a bool is not a count)."),
        (lambda: Pricer().admits("s", 10, budget_bytes="1 parsec"), UsageError,
         NOT_A_SIZE.format("1 parsec")),
        (lambda: Pricer().wave("s", 5, budget_bytes="lots"), UsageError, NOT_A_SIZE.format("lots")),
        (lambda: Pricer().max_tokens("s", 10, cap=2**63), UsageError, f"cap {PAST}"),
        (lambda: Pricer().observe_row({"kind": "flat", "phase": "caller", "oom": False}),
         UsageError,
         f"observe_row(): the reading has no 'signature' column; a reading maps trace v1 column "
         f"names to values ({LISTED})."),
    ],
)  # fmt: skip
def test_each_refusal_once_matched_in_part_is_whole(
    call: Any, error: type[Exception], message: str
) -> None:
    """The refusals the file's older tables match by a prefix or a fragment, whole: the
    argument, the value's repr, the hint."""
    with pytest.raises(error) as caught:
        call()
    assert type(caught.value) is error
    assert str(caught.value) == message


#: Values of every type a count or a size may be given as, by id.
TYPED = {
    "3300": 3300, "3300.0": 3300.0, "'3300'": "3300", "'70GiB'": "70GiB", "'-1'": "-1",
    "True": True, "False": False, "np.int64(3300)": np.int64(3300),
    "np.float64(3300.0)": np.float64(3300.0), "-3300": -3300, "-3300.0": -3300.0,
    "np.int64(-3300)": np.int64(-3300), "0": 0, "0.0": 0.0, "np.int64(0)": np.int64(0),
    "nan": math.nan, "inf": math.inf, "-inf": -math.inf, "2**63": 2**63, "-2**63": -(2**63),
    "3300.5": 3300.5, "None": None,
}  # fmt: skip

#: Each count argument of price and max_tokens (the Pricer taught 300 B/token, f 1.1):
#: its call, the answer at 3,300 (any integer type), its refusal of -3,300 / -2**63 (as
#: ``{}``) and its answer at 0, and at None.
COUNTS: dict[str, tuple[Any, Any, str, Any, Any]] = {
    "packed_tokens": (lambda p, v: p.price("train", v), 1_089_000,
                      "packed_tokens must be > 0; got {}.", "packed_tokens must be > 0; got 0.",
                      None),
    "output_bytes": (lambda p, v: p.price("train", 10, output_bytes=v), 6_930,
                     "output_bytes must be >= 0; got {}.", 3_300, None),
    "static_floor_bytes": (lambda p, v: p.price("train", 10, static_floor_bytes=v), 3_630,
                           "static_floor_bytes must be >= 0, or None for no floor; got {}.",
                           3_300, 3_300),
    "cap": (lambda p, v: p.max_tokens("train", 10**6, cap=v), 3_030,
            "cap must be >= 1; got {}.", "cap must be >= 1; got 0.", None),
    "max_tokens output_bytes": (lambda p, v: p.max_tokens("train", 10**6, output_bytes=v), 3_019,
                                "output_bytes must be >= 0; got {}.", 3_030, None),
}  # fmt: skip


def count_outcome(argument: str, shown: str) -> Any:
    """What a count argument gives for TYPED[shown], from the trace's column rules: an
    integer (not a bool) below 2**63, else the refusal naming the argument."""
    value = TYPED[shown]
    _, at_3300, negative, at_zero, at_none = COUNTS[argument]
    name = argument.split()[-1]
    if value is None and at_none is not None:
        return at_none
    if isinstance(value, bool):
        return f"{name} must be an integer; got {value!r} of type bool (a bool is not a count)."
    if not isinstance(value, int | np.integer):
        return (
            f"{name} must be an integer; got {value!r} of type {type(value).__name__} (an int, "
            "or a 0-d integer tensor)."
        )
    if value >= 2**63:
        return f"{name} {PAST}"
    if value < 0:
        return negative.format(int(value))
    return at_zero if value == 0 else at_3300


@pytest.mark.parametrize("shown", list(TYPED))
@pytest.mark.parametrize("argument", list(COUNTS))
def test_every_count_argument_over_every_type_and_sign(argument: str, shown: str) -> None:
    """Each count argument of price() and max_tokens() given each type and sign: an int
    or a numpy int is taken (3,300: its answer; 0: its answer or refusal), a float, a
    str, a bool, NaN, infinities and None (where it is no floor) refused whole, a
    negative refused naming its value, 2**63 refused as past the int64 column."""
    expected = count_outcome(argument, shown)
    call = COUNTS[argument][0]
    if isinstance(expected, str):
        with pytest.raises(UsageError) as caught:
            call(taught(), TYPED[shown])
        assert str(caught.value) == expected
    else:
        assert call(taught(), TYPED[shown]) == expected


NOT_A_NUMBER = "safety_factor must be a number (1.1 adds a 10% margin); got {}."
NOT_POSITIVE = "safety_factor must be a positive number (1.1 adds a 10% margin); got {}."


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        ("3300", 3300.0), ("3300.0", 3300.0), ("np.float64(3300.0)", 3300.0),
        ("np.int64(3300)", 3300.0), ("np.int64(-3300)", NOT_POSITIVE.format("-3300")),
        ("np.int64(0)", NOT_POSITIVE.format("0")),
        ("3300.5", 3300.5), ("2**63", 9.223372036854776e18),
        ("'3300'", NOT_A_NUMBER.format("'3300'")), ("'70GiB'", NOT_A_NUMBER.format("'70GiB'")),
        ("'-1'", NOT_A_NUMBER.format("'-1'")), ("True", NOT_A_NUMBER.format("True")),
        ("False", NOT_A_NUMBER.format("False")), ("None", NOT_A_NUMBER.format("None")),
        ("-3300", NOT_POSITIVE.format("-3300")), ("-3300.0", NOT_POSITIVE.format("-3300.0")),
        ("-2**63", NOT_POSITIVE.format("-9223372036854775808")),
        ("0", NOT_POSITIVE.format("0")), ("0.0", NOT_POSITIVE.format("0.0")),
        ("nan", NOT_POSITIVE.format("nan")), ("inf", NOT_POSITIVE.format("inf")),
        ("-inf", NOT_POSITIVE.format("-inf")),
    ],
)  # fmt: skip
def test_the_safety_factor_over_every_type_and_sign(
    tmp_path: Path, shown: str, expected: Any
) -> None:
    """Pricer() and from_trace() take a safety factor alike: a positive int or float is
    kept as a float and prices by it (1,000 B learned, times f), anything else refused
    whole before the trace is read. A numpy integer is a number like a numpy float (it
    was refused as "not a number" while a numpy float was taken)."""
    value = TYPED[shown]
    trace = tmp_path / "one.parquet"
    write_trace(readings_frame([dict(seq=0, wave=0, signature="s", packed_tokens=10,
                                     logical_tokens=10, peak_bytes=1_000)]), trace)  # fmt: skip
    for make in (
        lambda: Pricer("max-merge", value),
        lambda: Pricer.from_trace(trace, "max-merge", value),
    ):
        if isinstance(expected, str):
            with pytest.raises(UsageError) as caught:
                make()
            assert str(caught.value) == expected
            continue
        pricer = make()
        assert type(pricer.safety_factor) is float and pricer.safety_factor == expected
        if expected < 10**6:
            pricer.observe_row(row(10, 1_000, signature="s"))  # from_trace learned it already
            assert pricer.price("s", 10) == int(1_000 * expected)


# --- fresh audit of 12-06 (fa8) ---

#: A numpy or torch bool given as a count, as each Pricer call refuses it.
NOT_A_COUNT = "{} must be an integer; got {} of type {} (a bool is not a count)."


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda torch: Pricer().price("s", np.True_),
         NOT_A_COUNT.format("packed_tokens", "np.True_", "bool")),
        (lambda torch: Pricer().price("s", 10, np.bool_(True)),
         NOT_A_COUNT.format("logical_tokens", "np.True_", "bool")),
        (lambda torch: Pricer().price("s", 10, output_bytes=np.False_),
         NOT_A_COUNT.format("output_bytes", "np.False_", "bool")),
        (lambda torch: Pricer().price("s", 10, static_floor_bytes=np.True_),
         NOT_A_COUNT.format("static_floor_bytes", "np.True_", "bool")),
        (lambda torch: Pricer().admits("s", np.True_, budget_bytes=10),
         NOT_A_COUNT.format("packed_tokens", "np.True_", "bool")),
        (lambda torch: Pricer().max_tokens("s", 10, cap=np.True_),
         NOT_A_COUNT.format("cap", "np.True_", "bool")),
        (lambda torch: Pricer().observe_row(row(10, 1_000, peak_bytes=np.True_)),
         "observe_row(): " + NOT_A_COUNT.format("peak_bytes", "np.True_", "bool")),
        (lambda torch: Pricer().price("s", torch.tensor(True)),
         NOT_A_COUNT.format("packed_tokens", "tensor(True)", "Tensor")),
        (lambda torch: Pricer().price("s", 10, output_bytes=torch.tensor(False)),
         NOT_A_COUNT.format("output_bytes", "tensor(False)", "Tensor")),
        (lambda torch: Pricer().observe_row(row(10, 1_000, logical_tokens=torch.tensor(True))),
         "observe_row(): " + NOT_A_COUNT.format("logical_tokens", "tensor(True)", "Tensor")),
    ],
)  # fmt: skip
def test_a_numpy_or_tensor_bool_is_refused_as_no_count_word_for_word(
    call: Any, message: str
) -> None:
    """A numpy bool or a bool tensor is refused as a bool ("a bool is not a count"), as a
    Python bool is: not with the hint of a value of no integer type (an int, or a 0-d
    integer tensor), and never with an AttributeError (a torch dtype has no ``kind``)."""
    import torch

    with pytest.raises(UsageError) as caught:
        call(torch)
    assert str(caught.value) == message


def test_a_0d_integer_tensor_is_a_count_as_the_docs_say() -> None:
    """docs/reference/pricer.md: counts may be any integer (numpy.int64, a 0-d integer
    tensor). A tensor was an AttributeError ('torch.dtype' object has no attribute 'kind')
    in every call and reading. Learned 300 B/token (30,000 B over 100 tokens, whole):
    200 tokens and 1,000 output bytes price (1,000 + 60,000) * 1.1 = 67,100 B; with a
    floor of 100,000 B, (1,000 + 100,000) * 1.1 = 111,100 B."""
    import torch

    pricer = Pricer("max-merge", safety_factor=1.1)
    pricer.observe_row(
        row(torch.tensor(100), torch.tensor(30_000), logical_tokens=torch.tensor(100),
            output_bytes=torch.tensor(0), baseline_bytes=torch.tensor(0),
            whole=torch.tensor(True), oom=torch.tensor(False))
    )  # fmt: skip
    assert pricer.price("train", 100) == 33_000
    t = torch.tensor
    assert pricer.price("train", t(200), t(200), output_bytes=t(1_000)) == 67_100
    assert pricer.price("train", t(200), output_bytes=1_000, static_floor_bytes=t(100_000)) == (
        111_100
    )
    assert pricer.admits("train", t(200), budget_bytes=67_100, output_bytes=t(1_000)) is True
    assert pricer.admits("train", t(201), budget_bytes=67_100, output_bytes=t(1_000)) is False
    assert pricer.max_tokens("train", 66_000, cap=t(1_000)) == 200


@pytest.mark.parametrize(
    ("call", "packed"),
    [
        (lambda: Pricer(BrokenPrice).price("s", 10, 20), 10),
        (lambda: Pricer(BrokenPrice).price("s", 10, 20, output_bytes=5, kind="split_child"), 10),
        (lambda: Pricer(BrokenPrice).admits("s", 7, 70, budget_bytes=10**9), 7),
        (lambda: Pricer(BrokenPrice).max_tokens("s", 10**9, logical_tokens=lambda n: 3 * n), 1),
    ],
)
def test_a_policy_failing_in_price_is_named_with_the_packed_count(call: Any, packed: int) -> None:
    """The PolicyError of a policy that fails in price() names the wave's PACKED tokens,
    whatever its logical tokens (the word-for-word table above keeps them equal)."""
    with pytest.raises(PolicyError) as caught:
        call()
    assert str(caught.value) == (
        f"policy 'broken-price' failed in price() on a wave of 's' ({packed} packed tokens): "
        "ZeroDivisionError: oops. Fix the policy's code."
    )


# --- issue 38, Pricer oracles round 3 (s7) ---


def bad_values() -> list[Any]:
    """The values the refusal oracle puts in one argument: bools of three kinds, counts of
    three kinds (accepted where in range), non-integers, signs and edges, text, None."""
    import torch

    return [
        True, False, np.True_, np.False_, torch.tensor(True), torch.tensor(7), torch.tensor(-3),
        torch.tensor(1.5), np.int64(7), np.int64(-2), np.float64(2.0), 1.5, 10.0,
        float("nan"), float("inf"), -1, 0, 1, 9, 20, 21, 2**63 - 1, 2**63, -(2**63), "10",
        None, b"1",
    ]  # fmt: skip


def refusal_rule(argument: str, value: Any, where: str = "", packed: int = 10) -> str | None:
    """The whole message a count argument's value is refused with, from the rules the
    word-for-word tables above spell (None: accepted): a bool of any kind, then a value that
    is not an integer, then one past 2**63, then the argument's own sign rule."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        problem = f"must be an integer; got {value!r} of type {type(value).__name__} (a bool is not a count)."
    else:
        try:
            number = int(value) if isinstance(value, int | np.integer) else value.__index__()
        except (AttributeError, TypeError):
            problem = (
                f"must be an integer; got {value!r} of type {type(value).__name__} "
                "(an int, or a 0-d integer tensor)."
            )
        else:
            if number >= 2**63:
                problem = f"must be below 2**63 (a trace's int64 column); got {number}."
            elif argument == "packed_tokens" and number <= 0:
                problem = f"must be > 0; got {number}."
            elif argument == "logical_tokens" and number < packed:
                problem = f"must be >= packed_tokens ({packed}); got {number}."
            elif argument == "cap" and number < 1:
                problem = f"must be >= 1; got {number}."
            elif argument == "static_floor_bytes" and number < 0:
                tail = " or None" if where else ", or None for no floor"
                problem = f"must be >= 0{tail}; got {number}."
            elif number < 0:
                problem = f"must be >= 0; got {number}."
            elif argument == "packed_tokens" and number > 20:  # past the call's logical 20
                return f"{where}logical_tokens must be >= packed_tokens ({number}); got 20."
            else:
                return None
    return f"{where}{argument} {problem}"


def wave_made(pricer: Pricer, packed: Any, asked: dict[str, Any]) -> None:
    """Make (not enter) a wave of ``pricer``: its arguments are checked when it is made."""
    from .fixed_meter import FixedMeter

    pricer._meter = FixedMeter(0, 0)  # no CPU meter made for a wave never entered
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a sign a trace cannot hold: unrecorded, warned
        pricer.wave("train", packed, **asked)


def wave_rule(argument: str, value: Any) -> str | None:
    """wave()'s whole message for one count (None: the wave is made): a bool of any kind
    as price refuses it; the recorder's "wave(): " refusal of a value that is not an
    integer; its "above 2**63 - 1" refusal; no sign rule (the wave runs unrecorded)."""
    if isinstance(value, bool) or str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        return refusal_rule(argument, value)
    try:
        number = int(value) if isinstance(value, int | np.integer) else value.__index__()
    except (AttributeError, TypeError):
        return "wave(): " + str(refusal_rule(argument, value))
    if number > 2**63 - 1:
        return (
            f"wave('train'): {argument}={number:,} is above 2**63 - 1 "
            "(9,223,372,036,854,775,807), the largest value a trace's column holds (int64). "
            "Pass the wave's real count or byte size (None where it has none)."
        )
    return None


#: Each call the refusal oracle makes, by the argument it puts the value in: a good call
#: (10 packed, 20 logical tokens, outputs 0, no floor) with that one argument replaced.
CALLS = {
    "price": ("packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes"),
    "admits": ("packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes"),
    "max_tokens": ("output_bytes", "static_floor_bytes", "cap"),
    "wave": ("packed_tokens", "logical_tokens", "output_bytes", "static_floor_bytes"),
    "observe_row": (
        "packed_tokens",
        "logical_tokens",
        "output_bytes",
        "baseline_bytes",
        "peak_bytes",
        "static_floor_bytes",
    ),
}


@settings(max_examples=examples(600), deadline=None)
@given(
    call=st.sampled_from([(c, a) for c, arguments in CALLS.items() for a in arguments]),
    index=st.integers(0, len(bad_values()) - 1),
)
def test_one_bad_count_in_any_call_is_refused_word_for_word_by_the_tables_rules(
    call: tuple[str, str], index: int
) -> None:
    """One drawn value (of 27: bools of Python, numpy and torch, integer tensors, numpy
    ints, floats, NaN, infinity, signs, 2**63 - 1 and 2**63, text, None, bytes) in one
    count argument of price, admits, max_tokens or observe_row, on an otherwise good call:
    refused with the whole message the tables' rules predict (observe_row's with its
    prefix and its own floor wording), or accepted, and a refused reading teaches nothing."""
    method, argument = call
    value = bad_values()[index]
    pricer = taught()
    good: dict[str, Any] = {"packed_tokens": 10, "logical_tokens": 20, "output_bytes": 0}
    good["static_floor_bytes"] = None
    if method == "observe_row":
        reading = {**row(10, 1_000, logical_tokens=20, signature="new"), argument: value}
        run = lambda: pricer.observe_row(reading)  # noqa: E731
        where = "observe_row(): "
        if argument == "static_floor_bytes" and value is None:
            expected = None
        else:
            expected = refusal_rule(argument, value, where)
    elif method == "wave":
        # wave() takes the recorder's rules but a bool (price's words): a value a trace
        # cannot hold as a sign (0, -1, logical < packed) runs the wave unrecorded
        asked = {**good, argument: value}
        asked.pop("packed_tokens")
        run = lambda: wave_made(pricer, value if argument == "packed_tokens" else 10, asked)  # noqa: E731
        default = value is None and argument in ("logical_tokens", "static_floor_bytes")
        expected = None if default else wave_rule(argument, value)
    elif method == "max_tokens":
        asked = {"output_bytes": 0, "static_floor_bytes": None, "cap": 100, argument: value}
        run = lambda: pricer.max_tokens("train", 66_000, **asked)  # noqa: E731
        accepted = value is None and argument == "static_floor_bytes"
        expected = None if accepted else refusal_rule(argument, value)
    else:
        asked = {**good, argument: value}
        if method == "price":
            run = lambda: pricer.price("train", **asked)  # noqa: E731
        else:
            run = lambda: pricer.admits("train", budget_bytes=66_000, **asked)  # noqa: E731
        default = value is None and argument in ("logical_tokens", "static_floor_bytes")
        expected = None if default else refusal_rule(argument, value)
    if expected is None:
        with contextlib.suppress(EstimateOverflowError):  # accepted, priced past 2**63
            run()
    else:
        with pytest.raises(UsageError) as caught:
            run()
        assert str(caught.value) == expected
        assert not isinstance(caught.value, EstimateOverflowError)
    # a refused reading of 'new' teaches nothing; an accepted one makes its profile
    taught_new = method == "observe_row" and expected is None
    assert set(pricer.profiles) == ({"train", "new"} if taught_new else {"train"})


def budget_rule(value: Any) -> str | None:
    """The whole message a budget argument's value is refused with (None: accepted), from
    the budget tables' rules: a float (not a bool) is bytes when >= 0; text is a size; any
    other value must be an integer (an index: a numpy int, a 0-d integer tensor) >= 0."""
    shown = value
    if isinstance(value, float):
        refused = not value >= 0
    elif isinstance(value, str | bytes) or value is None:
        refused = not isinstance(value, str)  # "10": 10 bytes
    else:
        try:
            shown = value if isinstance(value, bool) else value.__index__()
        except (AttributeError, TypeError):
            shown = value
        refused = isinstance(shown, bool) or not isinstance(shown, int) or shown < 0
    if not refused:
        return None
    return f"budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got {shown!r}."


def safety_factor_rule(value: Any) -> str | None:
    """The whole message a safety factor is refused with (None: accepted): not a real
    number (a bool of any kind, text, None, a tensor), then not a positive finite one."""
    from numbers import Real

    margin = "(1.1 adds a 10% margin)"
    if isinstance(value, bool) or not isinstance(value, Real):
        return f"safety_factor must be a number {margin}; got {value!r}."
    if not (math.isfinite(value) and value > 0):
        return f"safety_factor must be a positive number {margin}; got {value}."
    return None


@settings(max_examples=examples(150), deadline=None)
@given(
    call=st.sampled_from(["Pricer", "admits", "max_tokens", "oom_tokens", "wave"]),
    index=st.integers(0, len(bad_values()) - 1),
)
def test_one_bad_budget_or_safety_factor_is_refused_word_for_word_by_the_tables_rules(
    call: str, index: int
) -> None:
    """The refusal oracle's twin for the other numbers: one of the 27 values as
    Pricer()'s safety factor, or as the budget of admits, max_tokens, oom_tokens or wave
    (a good call otherwise): the whole message the rules predict, or accepted."""
    from .fixed_meter import FixedMeter

    value = bad_values()[index]
    pricer = Pricer("max-merge", meter=FixedMeter(0, 0))
    pricer.observe_row(row(100, 30_000))
    runs = {
        "Pricer": lambda: Pricer("max-merge", safety_factor=value),
        "admits": lambda: pricer.admits("train", 10, budget_bytes=value),
        "max_tokens": lambda: pricer.max_tokens("train", value, cap=100),
        "oom_tokens": lambda: pricer.oom_tokens("train", value),
        "wave": lambda: pricer.wave("train", 10, budget_bytes=value),
    }
    expected = safety_factor_rule(value) if call == "Pricer" else budget_rule(value)
    if call == "wave" and value is None:
        expected = None  # a wave given no budget: its OOM counts under every budget
    if expected is None:
        runs[call]()
    else:
        with pytest.raises(UsageError) as caught:
            runs[call]()
        assert str(caught.value) == expected
