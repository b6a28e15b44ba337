"""Policies a user might write, for the conformance suite and the README.

``LastWhole`` is the README's example of writing a policy (declared once, run
by both engines), ``LastWholeLoop`` the same rule as a free-form class;
``Negative`` is
broken on purpose, to show how replay names a policy that returns nonsense.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from warmfit.policies import Policy, PriceRequest, Reading
from warmfit.policies.rule import RATE, SHARING, WHOLE, Count, DeclaredPolicy, Last


class LastWhole(DeclaredPolicy):
    """Price at the rate of the most recent whole reading (any reading until one).

    >>> p = LastWhole()
    >>> p.observe(Reading(packed_tokens=100, logical_tokens=100, delta_bytes=9_000, whole=True))
    >>> p.price(PriceRequest(packed_tokens=200, logical_tokens=200))
    18000.0
    """

    name = "last-whole"
    summary = "rate of the most recent whole wave (an example user policy)"

    wholes = Count(WHOLE)
    _chosen = WHOLE | (wholes == 0)  # a whole reading, or any reading until the first one
    rate = Last(RATE, where=_chosen)
    sharing = Last(SHARING, where=_chosen)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rate * np.maximum(n, m / np.maximum(1.0, state.sharing))


class LastWholeLoop(Policy):
    """The same rule written as a free-form class: ``observe`` and ``price`` by hand.

    It works, on the reference engine only (the vectorized engine needs a
    declaration); the conformance suite runs both forms.
    """

    name = "last-whole-loop"
    summary = "LastWhole as a hand-written loop (reference engine only)"

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
