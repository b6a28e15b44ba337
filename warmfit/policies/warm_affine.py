"""``warm-affine``: warm-fit lowered by a fixed cost plus a per-token rate."""

from __future__ import annotations

from typing import Any

import numpy as np

from warmfit.policies.rule import COMPUTE, PACKED, WHOLE, First, Max
from warmfit.policies.warm_fit import WarmFit


class WarmAffine(WarmFit):
    """Warm-fit, lowered by a line through the warm waves: a fixed cost plus a rate.

    After the seed, the first whole reading is the *anchor* ``(n0, c0)``
    (``c`` = compute bytes, ``max(0, delta - o)``). Each later whole reading
    of another size gives a marginal rate ``(c - c0) / (n - n0)``; the
    profile keeps the steepest, ``slope``, the largest compute at the
    anchor's size, ``top``, the largest compute of the warm waves smaller
    than the anchor, ``below``, and the largest warm size, ``n_max``. The
    line is ``L(x) = max(below, top + max(0, slope) * (x - n0))``. With
    ``n_eff = max(warm_tokens, n, m / warm_sharing)`` as warm-fit takes it, a
    wave is priced ``min(warm_fit, L(n_eff))``, and beyond the largest warm
    wave no lower than that wave's own per-token cost, ``L(n_max) * n_eff /
    n_max``; until two distinct warm sizes are seen, as warm-fit.

    The line lies on or above every warm whole wave it learned from, so it
    never prices one of them below its compute; where memory is a fixed cost
    plus a rate it is exact from the smallest warm wave up to the largest,
    and above the truth beyond it. Marginal rates measured between small
    waves can be lower than between large ones (workspaces and allocator
    rounding are flat over small sizes), which is why a wave larger than any
    seen is priced at the largest wave's rate at least. It can still fail
    where memory grows faster than linearly in tokens (attention without a
    fused kernel): a wave larger than any seen then costs more than either
    rate predicts, and only the safety factor stands between it and the
    device's limit, until that wave's own reading steepens the line.

    >>> from warmfit.policies import PriceRequest, Reading
    >>> seed = Reading(packed_tokens=100, logical_tokens=100, delta_bytes=90_000, whole=True)
    >>> small = Reading(packed_tokens=200, logical_tokens=200, delta_bytes=60_000, whole=True)
    >>> large = Reading(packed_tokens=400, logical_tokens=400, delta_bytes=100_000, whole=True)
    >>> profile = WarmAffine()
    >>> for reading in (seed, small, large):
    ...     profile.observe(reading)
    >>> fit = WarmFit()
    >>> for reading in (seed, small, large):
    ...     fit.observe(reading)
    >>> within = PriceRequest(packed_tokens=300, logical_tokens=300)
    >>> fit.price(within)  # warm-fit: 300 B/token (the 200-token wave) * 300
    90000.0
    >>> profile.price(within)  # the line, 20,000 fixed + 200 B/token: 60,000 + 200 * 100
    80000.0
    >>> profile.price(PriceRequest(packed_tokens=800, logical_tokens=800))  # 250 B/token * 800
    200000.0
    """

    name = "warm-affine"
    summary = "warm-fit lowered by a fixed cost + per-token rate over the warm waves"
    #: its rule runs on plain floats too (DeclaredPolicy): a price costs a few µs
    plain_floats = True

    _warm_whole = WarmFit._warm & WHOLE
    anchor_tokens = First(PACKED, where=_warm_whole)
    anchor_bytes = First(COMPUTE, where=_warm_whole)
    top_bytes = Max(COMPUTE, where=_warm_whole & (PACKED == anchor_tokens))
    slope = Max(
        (COMPUTE - anchor_bytes) / (PACKED - anchor_tokens),
        where=_warm_whole & (PACKED != anchor_tokens),
    )
    below_bytes = Max(COMPUTE, where=_warm_whole & (PACKED < anchor_tokens), initial=0.0)
    max_tokens = Max(PACKED, where=_warm_whole)

    @staticmethod
    def line(state: Any, tokens: Any) -> Any:
        """The fitted line ``L(x) = max(below, top + max(0, slope) * (x - n0))``."""
        rise = state.top_bytes + np.maximum(0.0, state.slope) * (tokens - state.anchor_tokens)
        return np.maximum(state.below_bytes, rise)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        warm_fit = WarmFit.rule(state, n, m)
        n_eff = np.maximum(state.warm_tokens, np.maximum(n, m / state.warm_sharing))
        affine = WarmAffine.line(state, n_eff)
        # beyond the largest warm wave: at least that wave's own rate
        reach = WarmAffine.line(state, state.max_tokens) * (n_eff / state.max_tokens)
        affine = np.where(n_eff > state.max_tokens, np.maximum(affine, reach), affine)
        return np.where(np.isnan(state.slope), warm_fit, np.minimum(warm_fit, affine))
