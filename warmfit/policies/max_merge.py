"""``max-merge``: the profile before OpenPipe/ART PR #991 (SPEC §4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from warmfit.policies.rule import RATE, SHARING, DeclaredPolicy, Max


class MaxMerge(DeclaredPolicy):
    """Keep the highest rate and the deepest sharing ever seen.

    Every reading raises ``rate_max`` (bytes per packed token above the
    outputs) and ``sharing_max`` (never below 1.0). A wave of ``n`` packed and
    ``m`` logical tokens is priced ``rate_max * max(n, m / sharing_max)``, so a
    small, cold first wave's rate prices every later wave.

    >>> from warmfit.policies import PriceRequest, Reading
    >>> profile = MaxMerge()
    >>> profile.price(PriceRequest(packed_tokens=100, logical_tokens=100)) is None
    True
    >>> profile.observe(Reading(packed_tokens=100, logical_tokens=200, delta_bytes=5_000))
    >>> profile.price(PriceRequest(packed_tokens=100, logical_tokens=400))  # 50 B/token * 400/2
    10000.0
    """

    name = "max-merge"
    summary = "highest rate and sharing ever seen (before ART PR #991)"
    #: its rule runs on plain floats too (DeclaredPolicy): a price costs a few µs
    plain_floats = True

    rate_max = Max(RATE)
    sharing_max = Max(SHARING, initial=1.0)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rate_max * np.maximum(n, m / state.sharing_max)
