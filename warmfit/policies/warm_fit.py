"""``warm-fit``: the profile of OpenPipe/ART PR #991 (SPEC §4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from warmfit.policies.max_merge import MaxMerge
from warmfit.policies.rule import PACKED, RATE, SHARING, WHOLE, Count, Max, Min


class WarmFit(MaxMerge):
    """Max-merge, plus a warm fit learned from the waves after the cold seed.

    The seed is the profile's first whole reading; it and every reading
    before it touch only the max-merge fields. After it, every reading raises
    ``warm_rate``; a whole reading also lowers ``warm_tokens`` to its packed
    tokens and raises ``warm_sharing``. Once ``warm_tokens`` is set a wave is
    priced ``min(max_merge, warm_rate * max(warm_tokens, n, m / warm_sharing))``
    (before that, as max-merge): a wave smaller than the smallest warm wave is
    priced as if it were that large, so cost never shrinks as waves grow.

    >>> from warmfit.policies import PriceRequest, Reading
    >>> seed = Reading(packed_tokens=100, logical_tokens=100, delta_bytes=30_000, whole=True)
    >>> warm = Reading(packed_tokens=400, logical_tokens=400, delta_bytes=80_000, whole=True)
    >>> profile = WarmFit()
    >>> profile.observe(seed); profile.observe(warm)
    >>> profile.price(PriceRequest(packed_tokens=800, logical_tokens=800))  # 200 B/token, not 300
    160000.0
    """

    name = "warm-fit"
    summary = "max-merge lowered by a fit over the warm waves (ART PR #991)"
    #: its rule runs on plain floats too (DeclaredPolicy): a price costs a few µs
    plain_floats = True

    wholes = Count(WHOLE)
    #: After the seed: a whole reading came before this one.
    _warm = (wholes - WHOLE) >= 1
    warm_rate = Max(RATE, where=_warm, initial=0.0)
    warm_tokens = Min(PACKED, where=_warm & WHOLE)
    warm_sharing = Max(SHARING, where=_warm & WHOLE, initial=1.0)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        max_merge = MaxMerge.rule(state, n, m)
        warm_tokens = state.warm_tokens
        warm = state.warm_rate * np.maximum(warm_tokens, np.maximum(n, m / state.warm_sharing))
        return np.where(np.isnan(warm_tokens), max_merge, np.minimum(max_merge, warm))
