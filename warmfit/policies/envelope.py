"""``envelope``: price from the points measured, never below what a size has cost."""

from __future__ import annotations

from typing import Any

import numpy as np

from warmfit.policies.max_merge import MaxMerge
from warmfit.policies.rule import COMPUTE, PACKED, SHARING, WHOLE, Max, Points

#: Beyond the measured sizes a price stops growing at 8 PiB (2**53 bytes): more than any
#: device holds, so that squaring a large ratio never gives a price that is not a
#: number of bytes (int64) — such a wave is refused by any budget either way.
CEILING = 2.0**53


class Envelope(MaxMerge):
    """Interpolate between the measured sizes; never below the cost already seen.

    The profile keeps every whole reading as a point: packed tokens against
    compute bytes (``max(0, delta - o)``), the seed included (what a wave has
    cost is a fact, whether it was cold or not). Its *envelope* ``E(x)`` is
    the largest compute measured at a size not above ``x``. A wave is priced at
    ``x = max(n, m / sharing)``, with ``sharing`` the deepest of the whole
    readings (as warm-fit takes it), by where ``x`` falls:

    - **below the smallest size measured**: that size's envelope;
    - **within the measured sizes**: the straight line between the envelope at
      its two measured neighbours, ``E(lo) + (E(hi) - E(lo)) * (x - lo) / (hi - lo)``
      (exactly ``E(x)`` on a measured size). It is never below ``E(x)``, so
      never below the compute of any wave seen at a size not above this one.
      Where memory is a convex function of tokens (a fixed cost, a rate, a
      quadratic term), the chord lies on or above the curve: exact, to the
      rounding of a double, for a non-decreasing line, and safe for a convex
      curve. A curve that bends the other way between two measured sizes
      (concave) can be under-priced there;
    - **beyond the largest size measured** ``n_max``: ``E(n_max) * (x / n_max) ** k``,
      with ``k = 1``, or ``k = 2`` once the envelope's bytes per token at
      ``n_max`` exceed those at the next smaller size measured (growth faster
      than linear *where it was measured*; a cold and a warm wave of one size
      are one size: their difference is not growth).

    The bet beyond the measured range: memory there grows no faster than in
    proportion to tokens (``k = 1``: any fixed cost plus a rate), or no faster
    than their square once the two largest sizes showed the bytes per token
    rising (``k = 2``: attention without a fused kernel). It loses where a
    quadratic term is still hidden under a large fixed cost at the sizes
    measured (``10**6 + n**2`` measured at 100-300 tokens is priced linearly
    at 10,000: 36 MB for 101 MB), where the growth is steeper than a square,
    or where a workspace appears only at large sizes: such a wave is
    under-priced until one of its size is measured, and replay counts it as
    ``beyond`` (SPEC §8). The extrapolation stops at :data:`CEILING`
    (8 PiB). Memory that falls as tokens grow is priced
    at the envelope, never below what it has cost.

    Until the profile holds a whole reading it prices as max-merge (a
    signature of forward-only waves, say).

    >>> from warmfit.policies import PriceRequest, Reading
    >>> profile = Envelope()
    >>> for n, compute in ((100, 90_000), (200, 60_000), (400, 100_000)):
    ...     profile.observe(Reading(n, n, compute, whole=True))
    >>> profile.price(PriceRequest(50, 50))  # below: the 100-token point
    90000.0
    >>> profile.price(PriceRequest(300, 300))  # E(200) = 90,000 to E(400) = 100,000
    95000.0
    >>> profile.price(PriceRequest(800, 800))  # beyond: 250 B/token at 400, k = 1
    200000.0
    """

    name = "envelope"
    summary = "interpolate between measured sizes, never below a smaller size's cost"
    #: its rule runs on plain floats too (DeclaredPolicy): a price costs a few µs
    plain_floats = True

    points = Points(COMPUTE, at=PACKED, where=WHOLE)
    point_sharing = Max(SHARING, where=WHOLE, initial=1.0)
    max_tokens = Max(PACKED, where=WHOLE)
    top_bytes = Max(COMPUTE, where=WHOLE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        x = np.maximum(n, m / state.point_sharing)
        points = state.points
        lo, hi = points.below(x), points.above(x)
        at_lo, at_hi = points.top(x), points.top(hi)
        # on a measured size (lo == hi) the chord is NaN, as 0 / 0 would make it, without
        # dividing by zero: the float form of the rule (DeclaredPolicy) runs on through
        span = np.where(lo == hi, np.nan, hi - lo)
        between = at_lo + (at_hi - at_lo) * ((x - lo) / span)
        within = np.where(lo == hi, at_lo, between)
        ratio = x / state.max_tokens
        # superlinear: more bytes per token at the largest size than at the next smaller
        # one measured (the envelope at `under` is the envelope at that size); asked for
        # the waves beyond the largest size only (NaN asks nothing: within, it is unused)
        under = np.where(np.isnan(hi), np.nextafter(state.max_tokens, 0.0), np.nan)
        superlinear = state.top_bytes / state.max_tokens > points.top(under) / points.below(under)
        beyond = state.top_bytes * ratio * np.where(superlinear, ratio, 1.0)
        beyond = np.minimum(beyond, np.maximum(CEILING, state.top_bytes))
        priced = np.where(np.isnan(lo), at_hi, np.where(np.isnan(hi), beyond, within))
        return np.where(np.isnan(state.max_tokens), MaxMerge.rule(state, n, m), priced)
