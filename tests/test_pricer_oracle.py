"""The live :class:`warmfit.Pricer` against the independent oracle (issue 38, item 1).

A trainer rank's Pricer, handed that rank's readings one by one and asked
before each wave what it will cost, must answer exactly what a replay prices
the wave at (SPEC §3: priced at its first reading from the profile as it
stands, then every reading observed unless it ran out of memory or is a split
child's caller reading). The answers are checked against
:func:`tests.oracle.replay_waves`, which imports nothing from warmfit, on
generated traces of several runs, ranks and signatures, interleaved waves,
peaks at or below their baselines, floors, outputs and out-of-memory readings.
:meth:`Pricer.from_trace` on a trace of several ranks must learn the one
stream it is given, no other.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oracle
from tests.oracle import Row
from tests.strategies import examples, oracle_traces
from warmfit import Pricer
from warmfit.errors import EstimateOverflowError, UsageError
from warmfit.format.schema import KINDS
from warmfit.format.trace import readings_frame, write_trace
from warmfit.trainer.pricer import PricerWarning

POLICIES = list(oracle.BUILT_IN)
SIZES = (1, 7, 64, 100, 1000, 4096, 50_000)


def live_prices(rows: Sequence[Row], policy: str, f: float) -> dict[tuple[str, int, int], object]:
    """Each wave's price from one Pricer per (run, rank), asked at the wave's first
    reading, every reading then handed to ``observe_row``; ``"overflow"`` where the
    Pricer refuses a price past 2**63 bytes."""
    streams: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        streams.setdefault((str(row["run"]), int(row["rank"])), []).append(row)
    prices: dict[tuple[str, int, int], object] = {}
    for (run, rank), readings in streams.items():
        pricer = Pricer(policy, safety_factor=f)
        seen: set[int] = set()
        for row in sorted(readings, key=lambda r: r["seq"]):
            if row["wave"] not in seen:
                seen.add(int(row["wave"]))
                try:
                    price: object = pricer.price(
                        str(row["signature"]),
                        int(row["packed_tokens"]),
                        int(row["logical_tokens"]),
                        output_bytes=int(row["output_bytes"]),
                        static_floor_bytes=row["static_floor_bytes"],  # type: ignore[arg-type]
                        kind=str(row["kind"]),
                    )
                except UsageError:
                    price = "overflow"
                prices[(run, rank, int(row["seq"]))] = price
            pricer.observe_row(row)
    return prices


def oracle_prices(
    rows: Sequence[Row], policy: str, f: float
) -> dict[tuple[str, int, int], object] | None:
    """The same, from the oracle's replay; None where it refuses a price past int64."""
    try:
        waves = oracle.replay_waves(rows, [policy], f)
    except OverflowError:
        return None
    return {w.key: w.priced[policy][0] for w in waves}


@settings(max_examples=examples(60))
@given(oracle_traces(), st.sampled_from(POLICIES), st.sampled_from([1.0, 1.1, 1.37]))
def test_a_live_pricer_prices_every_wave_as_the_replay_does(
    rows: list[Row], policy: str, f: float
) -> None:
    live = live_prices(rows, policy, f)
    want = oracle_prices(rows, policy, f)
    if want is None:  # the oracle refused a price past int64: the Pricer must refuse that one
        assert "overflow" in live.values()
        return
    assert live == want


def _stream_rows(rows: Sequence[Row], run: str, rank: int) -> list[Row]:
    return [r for r in rows if r["run"] == run and r["rank"] == rank]


@settings(max_examples=examples(30))
@given(oracle_traces(), st.sampled_from(POLICIES))
def test_from_trace_learns_the_stream_it_is_given_and_no_other(
    rows: list[Row], policy: str
) -> None:
    """Every (run, rank) of a trace of several: ``from_trace(run=, rank=)`` prices any
    size, for every signature, as a Pricer that observed that stream alone."""
    streams = sorted({(str(r["run"]), int(r["rank"])) for r in rows})
    with tempfile.TemporaryDirectory() as folder:
        path = write_trace(readings_frame(list(rows)), Path(folder) / "t.parquet")
        for run, rank in streams:
            warm = Pricer.from_trace(path, policy, run=run, rank=rank)
            mine = _stream_rows(rows, run, rank)
            profiles: dict[str, oracle.MaxMerge] = {}
            for row in sorted(mine, key=lambda r: r["seq"]):
                profile = profiles.setdefault(str(row["signature"]), oracle.POLICIES[policy]())
                kind, phase, oom = str(row["kind"]), str(row["phase"]), bool(row["oom"])
                if oracle.observed(kind, phase, oom):
                    delta = max(0, int(row["peak_bytes"]) - int(row["baseline_bytes"]))
                    profile.observe(
                        oracle.Reading(
                            int(row["packed_tokens"]),
                            int(row["logical_tokens"]),
                            delta,
                            int(row["output_bytes"]),
                            bool(row["whole"]),
                            phase,
                            kind,
                        )
                    )
            for sig, profile in profiles.items():
                for n in SIZES:
                    try:
                        want: object = oracle.estimate(profile.price(n, n), 0, None, 1.1)[0]
                    except OverflowError:
                        want = "overflow"
                    try:
                        got: object = warm.price(sig, n)
                    except UsageError:
                        got = "overflow"
                    assert got == want, f"run {run!r} rank {rank} {sig!r} {n} tokens"


def test_a_peak_below_its_baseline_teaches_a_delta_of_zero() -> None:
    """SPEC §1: delta = max(0, peak - baseline). A whole reading of 100 tokens whose
    peak (900) is below its baseline (1,000) teaches max-merge a rate of 0 bytes a
    token: a later wave is priced int(0 * 1.1) = 0 bytes, not negative, not unpriced."""
    pricer = Pricer("max-merge")
    pricer.observe_row(
        dict(
            signature="s",
            kind="flat",
            phase="caller",
            whole=True,
            packed_tokens=100,
            logical_tokens=100,
            output_bytes=0,
            baseline_bytes=1000,
            peak_bytes=900,
            static_floor_bytes=None,
            oom=False,
        )
    )
    assert pricer.price("s", 100) == 0
    assert pricer.price("s", 100, static_floor_bytes=50) == 55  # the floor, 50 * 1.1


@pytest.mark.parametrize("policy", POLICIES)
def test_an_oom_reading_teaches_nothing(policy: str) -> None:
    """SPEC §3 step 2: an out-of-memory reading is never learned from; a split child's
    caller reading neither. The Pricer stays unpriced after both."""
    pricer = Pricer(policy)
    base = dict(signature="s", logical_tokens=100, packed_tokens=100, output_bytes=0,
                baseline_bytes=0, peak_bytes=10**6, static_floor_bytes=None)  # fmt: skip
    pricer.observe_row({**base, "kind": "flat", "phase": "caller", "whole": True, "oom": True})
    pricer.observe_row({**base, "kind": "split_child", "phase": "caller", "whole": False,
                        "oom": False})  # fmt: skip
    assert pricer.price("s", 100) is None


# --- issue 38, tests by pattern (s4) ---

#: Signatures whose readings are never learned from (OOM ones; split children's caller
#: ones): named by readings, so never warned of, and never priced but by a floor.
LONE_OOM, LONE_SPLIT = "x/oom", "x/split"
#: The signatures asked of the Pricer: the oracle traces' own, the lone ones, one never
#: recorded.
ASKED = ["s", "t", "moe/L8", "ü", LONE_OOM, LONE_SPLIT, "never"]


@settings(max_examples=examples(30))
@given(
    oracle_traces(max_waves=6),
    st.sampled_from(POLICIES),
    st.sampled_from([1.0, 1.1, 1.37]),
    st.data(),
)
def test_one_pricer_fed_every_stream_in_any_order_prices_and_warns_as_a_plain_model(
    rows: list[Row], policy: str, f: float, data: st.DataObject
) -> None:
    """One Pricer is handed every reading of a trace of several runs, ranks, signatures
    and kinds, in the drawn order (not seq order: it learns from every reading it is
    given, whatever run and rank it names), with now and then a reading it does not
    learn from moved to a signature of its own (x/oom for an OOM one, x/split for a
    split child's caller one). Before each reading it is asked a drawn signature (the
    reading's, another, a lone one, one never recorded) at the reading's size, one more
    or one less, with the reading's
    outputs and floor, under a drawn kind. Each answer is the plain model's: the
    oracle's profile of every learned reading so far, SPEC §3's estimate; and the
    PricerWarnings it gives are the model's, word for word: one, at an ask of a
    signature with no profile that no reading named, first asked before the learned
    readings since (docs/reference/pricer.md)."""
    pricer = Pricer(policy, safety_factor=f)
    profiles: dict[str, oracle.MaxMerge] = {}
    named: set[str] = set()  # signatures a reading named that taught nothing
    first_ask: dict[str, int] = {}  # signature -> readings learned when first asked
    warned: set[str] = set()
    taught = 0
    for row in rows:
        kind, phase, oom = str(row["kind"]), str(row["phase"]), bool(row["oom"])
        learned = oracle.observed(kind, phase, oom)
        if not learned and data.draw(st.booleans()):
            row = {**row, "signature": LONE_OOM if oom else LONE_SPLIT}
        sig = data.draw(st.sampled_from([str(row["signature"]), *ASKED]))
        n = max(1, int(row["packed_tokens"]) + data.draw(st.sampled_from([0, 0, 1, -1])))
        m = max(n, int(row["logical_tokens"]))
        o, s = int(row["output_bytes"]), row["static_floor_bytes"]
        expected: list[str] = []
        if sig not in profiles and sig not in named and sig not in warned:
            if sig not in first_ask:
                first_ask[sig] = taught
            elif first_ask[sig] < taught:
                warned.add(sig)
                expected.append(oracle.unknown_signature_warning(taught, sig, sorted(profiles)))
        p = profiles[sig].price(n, m) if sig in profiles else None
        try:
            want: object = oracle.estimate(p, o, None if s is None else int(s), f)[0]
        except OverflowError:
            want = "overflow"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got: object = pricer.price(
                    sig, n, m, output_bytes=o, static_floor_bytes=s,  # type: ignore[arg-type]
                    kind=data.draw(st.sampled_from(KINDS)),
                )  # fmt: skip
            except EstimateOverflowError:
                got = "overflow"
        assert got == want, (sig, n, m, o, s)
        said = [str(w.message) for w in caught if issubclass(w.category, PricerWarning)]
        assert said == expected
        pricer.observe_row(row)
        if learned:
            delta = max(0, int(row["peak_bytes"]) - int(row["baseline_bytes"]))
            reading = oracle.Reading(int(row["packed_tokens"]), int(row["logical_tokens"]),
                                     delta, o, bool(row["whole"]), phase, kind)  # fmt: skip
            profiles.setdefault(str(row["signature"]), oracle.POLICIES[policy]()).observe(reading)
            taught += 1
        else:
            named.add(str(row["signature"]))
    assert sorted(pricer.profiles) == sorted(profiles)
