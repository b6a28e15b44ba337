"""Policies a user might write, for the conformance suite and the README.

``LastWhole`` is the README's example of writing a policy; ``Negative`` is
broken on purpose, to show how replay names a policy that returns nonsense.
"""

from __future__ import annotations

from warmfit.policies import Policy, PriceRequest, Reading


class LastWhole(Policy):
    """Price at the rate of the most recent whole reading (any reading until one).

    >>> p = LastWhole()
    >>> p.observe(Reading(packed_tokens=100, logical_tokens=100, delta_bytes=9_000, whole=True))
    >>> p.price(PriceRequest(packed_tokens=200, logical_tokens=200))
    18000.0
    """

    name = "last-whole"
    summary = "rate of the most recent whole wave (an example user policy)"

    def __init__(self) -> None:
        self.rate: float | None = None
        self.sharing = 1.0
        self.seen_whole = False

    def observe(self, reading: Reading) -> None:
        if reading.whole or not self.seen_whole:
            self.rate, self.sharing = reading.rate, max(1.0, reading.sharing)
            self.seen_whole = self.seen_whole or reading.whole

    def price(self, request: PriceRequest) -> float | None:
        if self.rate is None:
            return None
        return self.rate * max(request.packed_tokens, request.logical_tokens / self.sharing)


class Negative(Policy):
    """Broken on purpose: prices every wave at -1 byte."""

    name = "negative"
    summary = "broken on purpose"

    def observe(self, reading: Reading) -> None:
        pass

    def price(self, request: PriceRequest) -> float | None:
        return -1.0


class Abstract(Policy):
    """Forgot to implement ``observe``: warmfit names what is missing."""

    name = "abstract"
    summary = "broken on purpose"

    def price(self, request: PriceRequest) -> float | None:
        return None
