"""The policy API: one policy instance is one signature's memory profile.

A policy is a small online estimator, in the manner of river's
``learn_one`` / ``predict_one``:

- ``observe(reading)`` learns from one peak-memory reading of a wave;
- ``price(request)`` returns the learned compute bytes ``p`` for a wave of
  ``request.packed_tokens`` packed and ``request.logical_tokens`` logical
  tokens, or ``None`` while the profile has nothing to go on. It changes
  nothing.

The replay engine turns ``p`` into an estimate (static floor, output bytes,
safety factor: SPEC §3); a policy only prices compute. Nothing here knows
about files or the command line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Reading:
    """One peak-memory observation of a wave, as a policy sees it.

    ``delta_bytes`` is ``max(0, peak_bytes - baseline_bytes)``.
    """

    packed_tokens: int
    logical_tokens: int
    delta_bytes: int
    output_bytes: int = 0
    whole: bool = False
    phase: str = "caller"
    kind: str = "flat"
    static_floor_bytes: int | None = None

    @property
    def rate(self) -> float:
        """Bytes per packed token above the outputs: ``max(0, delta - o) / n``."""
        return max(0, self.delta_bytes - self.output_bytes) / self.packed_tokens

    @property
    def sharing(self) -> float:
        """Sharing ratio ``m / n`` (logical over packed tokens)."""
        return self.logical_tokens / self.packed_tokens


@dataclass(frozen=True, slots=True)
class PriceRequest:
    """A wave to price: its token counts and what the trainer knows of it."""

    packed_tokens: int
    logical_tokens: int
    output_bytes: int = 0
    kind: str = "flat"
    static_floor_bytes: int | None = None


class Policy(ABC):
    """Base class of pricing policies. Subclass it and register it.

    Subclasses set ``name`` (the ``--policy`` name) and ``summary`` (one
    line for ``warmfit policies``), take only parameters in ``__init__``
    (with defaults, so that ``cls()`` works), and implement ``observe`` and
    ``price``. ``price`` must not change the instance.

    This free-form class runs on the reference engine, one reading at a time.
    To run on the vectorized engine too, declare the rule once instead:
    :class:`warmfit.policies.rule.DeclaredPolicy`.
    """

    name: ClassVar[str]
    summary: ClassVar[str]

    @abstractmethod
    def observe(self, reading: Reading) -> None:
        """Learn from one reading (replay never passes an out-of-memory reading, nor a
        split child's caller reading)."""

    @abstractmethod
    def price(self, request: PriceRequest) -> float | None:
        """Learned compute bytes for ``request``, or ``None`` with no profile yet."""
