"""``max-merge``: the profile before OpenPipe/ART PR #991 (SPEC §4)."""

from __future__ import annotations

from warmfit.policies.base import Policy, PriceRequest, Reading


class MaxMerge(Policy):
    """Keep the highest rate and the deepest sharing ever seen.

    Every reading raises ``rate_max`` (bytes per packed token above the
    outputs) and ``sharing_max`` (never below 1.0). A wave of ``n`` packed and
    ``m`` logical tokens is priced ``rate_max * max(n, m / sharing_max)``, so a
    small, cold first wave's rate prices every later wave.

    >>> profile = MaxMerge()
    >>> profile.price(PriceRequest(packed_tokens=100, logical_tokens=100)) is None
    True
    >>> profile.observe(Reading(packed_tokens=100, logical_tokens=200, delta_bytes=5_000))
    >>> profile.price(PriceRequest(packed_tokens=100, logical_tokens=400))  # 50 B/token * 400/2
    10000.0
    """

    name = "max-merge"
    summary = "highest rate and sharing ever seen (before ART PR #991)"
    vectorized = "warmfit.vectorized:MAX_MERGE"

    def __init__(self) -> None:
        self.rate_max: float | None = None
        self.sharing_max = 1.0

    def observe(self, reading: Reading) -> None:
        rate = reading.rate
        self.rate_max = rate if self.rate_max is None else max(self.rate_max, rate)
        self.sharing_max = max(self.sharing_max, reading.sharing)

    def price(self, request: PriceRequest) -> float | None:
        if self.rate_max is None:
            return None
        n, m = request.packed_tokens, request.logical_tokens
        return self.rate_max * max(n, m / self.sharing_max)
