"""Hypothesis strategies: the one place that builds generated readings and traces.

Every property test draws from here, so that what "a valid history" or "a
valid trace" means is written once.
"""

from __future__ import annotations

from hypothesis import strategies as st

from warmfit.policies import PriceRequest, Reading
from warmfit.schema import KINDS

#: Token counts: small enough to be fast, large enough to reach real shapes.
tokens = st.integers(min_value=1, max_value=200_000)
byte_counts = st.integers(min_value=0, max_value=2**40)


@st.composite
def readings(draw: st.DrawFn, whole: bool | None = None) -> Reading:
    """One policy-level reading: any kind, phase, sharing, outputs and delta."""
    n = draw(tokens)
    m = draw(st.integers(min_value=n, max_value=n * 8))
    phase = draw(st.sampled_from(["forward", "caller"]))
    is_whole = (phase == "caller" and draw(st.booleans())) if whole is None else whole
    if is_whole:
        phase = "caller"
    return Reading(
        packed_tokens=n,
        logical_tokens=m,
        delta_bytes=draw(byte_counts),
        output_bytes=draw(st.integers(min_value=0, max_value=2**30)),
        whole=is_whole,
        phase=phase,
        kind=draw(st.sampled_from(KINDS)),
        static_floor_bytes=draw(st.none() | byte_counts),
    )


histories = st.lists(readings(), max_size=12)


@st.composite
def requests(draw: st.DrawFn) -> PriceRequest:
    """A wave to price."""
    n = draw(tokens)
    return PriceRequest(
        packed_tokens=n,
        logical_tokens=draw(st.integers(min_value=n, max_value=n * 8)),
        output_bytes=draw(st.integers(min_value=0, max_value=2**30)),
        kind=draw(st.sampled_from(KINDS)),
        static_floor_bytes=draw(st.none() | byte_counts),
    )
