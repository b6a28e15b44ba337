"""``warm-fit``: the profile of OpenPipe/ART PR #991 (SPEC §4)."""

from __future__ import annotations

from warmfit.policies.base import PriceRequest, Reading
from warmfit.policies.max_merge import MaxMerge


class WarmFit(MaxMerge):
    """Max-merge, plus a warm fit learned from the waves after the cold seed.

    The seed is the profile's first whole reading; it and every reading
    before it touch only the max-merge fields. After it, every reading raises
    ``warm_rate``; a whole reading also lowers ``warm_tokens`` to its packed
    tokens and raises ``warm_sharing``. Once ``warm_tokens`` is set a wave is
    priced ``min(max_merge, warm_rate * max(warm_tokens, n, m / warm_sharing))``
    (before that, as max-merge): a wave smaller than the smallest warm wave is
    priced as if it were that large, so cost never shrinks as waves grow.

    >>> seed = Reading(packed_tokens=100, logical_tokens=100, delta_bytes=30_000, whole=True)
    >>> warm = Reading(packed_tokens=400, logical_tokens=400, delta_bytes=80_000, whole=True)
    >>> profile = WarmFit()
    >>> profile.observe(seed); profile.observe(warm)
    >>> profile.price(PriceRequest(packed_tokens=800, logical_tokens=800))  # 200 B/token, not 300
    160000.0
    """

    name = "warm-fit"
    summary = "max-merge lowered by a fit over the warm waves (ART PR #991)"
    vectorized = "warmfit.vectorized:WARM_FIT"

    def __init__(self) -> None:
        super().__init__()
        self.seeded = False
        self.warm_rate = 0.0
        self.warm_tokens: int | None = None
        self.warm_sharing = 1.0

    def observe(self, reading: Reading) -> None:
        super().observe(reading)
        if not self.seeded:
            self.seeded = reading.whole
            return
        self.warm_rate = max(self.warm_rate, reading.rate)
        if reading.whole:
            n = reading.packed_tokens
            self.warm_tokens = n if self.warm_tokens is None else min(self.warm_tokens, n)
            self.warm_sharing = max(self.warm_sharing, reading.sharing)

    def price(self, request: PriceRequest) -> float | None:
        max_merge = super().price(request)
        if max_merge is None or self.warm_tokens is None:
            return max_merge
        n, m = request.packed_tokens, request.logical_tokens
        warm = self.warm_rate * max(self.warm_tokens, max(n, m / self.warm_sharing))
        return min(max_merge, warm)
