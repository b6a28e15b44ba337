"""``warm-affine``: warm-fit lowered by a fixed cost plus a per-token rate."""

from __future__ import annotations

from warmfit.policies.base import PriceRequest, Reading
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

    >>> seed = Reading(packed_tokens=100, logical_tokens=100, delta_bytes=90_000, whole=True)
    >>> small = Reading(packed_tokens=200, logical_tokens=200, delta_bytes=60_000, whole=True)
    >>> large = Reading(packed_tokens=400, logical_tokens=400, delta_bytes=100_000, whole=True)
    >>> profile = WarmAffine()
    >>> for reading in (seed, small, large):
    ...     profile.observe(reading)
    >>> within = PriceRequest(packed_tokens=300, logical_tokens=300)
    >>> WarmFit.price(profile, within)  # warm-fit: 300 B/token (the 200-token wave) * 300
    90000.0
    >>> profile.price(within)  # the line, 20,000 fixed + 200 B/token: 60,000 + 200 * 100
    80000.0
    >>> profile.price(PriceRequest(packed_tokens=800, logical_tokens=800))  # 250 B/token * 800
    200000.0
    """

    name = "warm-affine"
    summary = "warm-fit lowered by a fixed cost + per-token rate over the warm waves"
    vectorized = "warmfit.vectorized:WARM_AFFINE"

    def __init__(self) -> None:
        super().__init__()
        self.anchor_tokens: int | None = None
        self.anchor_bytes = 0
        self.top_bytes = 0
        self.below_bytes = 0
        self.slope: float | None = None
        self.max_tokens = 0

    def observe(self, reading: Reading) -> None:
        warm = self.seeded
        super().observe(reading)
        if not (warm and reading.whole):
            return
        n = reading.packed_tokens
        compute = max(0, reading.delta_bytes - reading.output_bytes)
        self.max_tokens = max(self.max_tokens, n)
        if self.anchor_tokens is None:
            self.anchor_tokens, self.anchor_bytes, self.top_bytes = n, compute, compute
        elif n == self.anchor_tokens:
            self.top_bytes = max(self.top_bytes, compute)
        else:
            marginal = (compute - self.anchor_bytes) / (n - self.anchor_tokens)
            self.slope = marginal if self.slope is None else max(self.slope, marginal)
            if n < self.anchor_tokens:
                self.below_bytes = max(self.below_bytes, compute)

    def price(self, request: PriceRequest) -> float | None:
        warm_fit = super().price(request)
        if warm_fit is None or self.slope is None or self.warm_tokens is None:
            return warm_fit
        n, m = request.packed_tokens, request.logical_tokens
        n_eff = max(self.warm_tokens, max(n, m / self.warm_sharing))
        affine = self.line(n_eff)
        if n_eff > self.max_tokens:  # beyond the largest warm wave: at least its rate
            affine = max(affine, self.line(self.max_tokens) * (n_eff / self.max_tokens))
        return min(warm_fit, affine)

    def line(self, tokens: float) -> float:
        assert self.slope is not None and self.anchor_tokens is not None
        return max(
            self.below_bytes, self.top_bytes + max(0.0, self.slope) * (tokens - self.anchor_tokens)
        )
