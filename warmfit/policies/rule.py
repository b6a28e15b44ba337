"""A policy declared once: its state as running aggregates, its price as one function.

In the manner of a polars expression, a :class:`DeclaredPolicy` says *what*
its profile keeps, not how to update it; the reference engine folds its
readings one at a time and the vectorized engine computes every wave's state
at once, both from the same declaration, so the two cannot drift apart.

A declaration has two parts:

- **State**: class attributes that are aggregates over the readings the
  profile observed — :class:`Max`, :class:`Min`, :class:`First`,
  :class:`Last`, :class:`Sum`, :class:`Count` — each of a *value* and an
  optional *where* condition, both expressions over the reading's fields
  (:data:`PACKED`, :data:`LOGICAL`, :data:`COMPUTE`, :data:`RATE`,
  :data:`SHARING`, :data:`WHOLE`, ...) and the aggregates declared before it.
  An expression sees an earlier aggregate as updated with the current
  reading: ``Count(WHOLE) - WHOLE`` is the number of whole readings *before*
  this one. Unset values are NaN; ``initial`` gives a start value.
- **Price**: a static method ``rule(state, n, m)`` over the state's fields
  (``state.rate_max``), the packed tokens ``n`` and the logical tokens ``m``,
  written with numpy functions so that it runs on plain numbers and on arrays
  alike; it returns the learned compute bytes, NaN for "no profile yet".

Arithmetic is IEEE double throughout, as numpy and Python do it, so both
engines give the same bytes. ``max-merge``, ``warm-fit`` and ``warm-affine``
are declared this way.

>>> class LastRate(DeclaredPolicy):
...     name, summary = "last-rate", "the rate of the latest reading"
...     rate = Last(RATE)
...     @staticmethod
...     def rule(state, n, m):
...         return state.rate * n
>>> profile = LastRate()
>>> profile.price(PriceRequest(10, 10)) is None
True
>>> profile.observe(Reading(packed_tokens=100, logical_tokens=100, delta_bytes=5_000))
>>> profile.price(PriceRequest(10, 10))
500.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

from warmfit.errors import PolicyError
from warmfit.policies.base import Policy, PriceRequest, Reading

Value = Any  # a numpy float64 / bool_, or an array of them


class Expr:
    """An expression over a reading's fields and the aggregates declared before it."""

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        raise NotImplementedError

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def refs(self) -> Iterator[Aggregate]:
        """The aggregates this expression reads."""
        return iter(())

    def __add__(self, other: object) -> Expr:
        return _Op(np.add, "+", self, _expr(other))

    def __radd__(self, other: object) -> Expr:
        return _Op(np.add, "+", _expr(other), self)

    def __sub__(self, other: object) -> Expr:
        return _Op(np.subtract, "-", self, _expr(other))

    def __rsub__(self, other: object) -> Expr:
        return _Op(np.subtract, "-", _expr(other), self)

    def __mul__(self, other: object) -> Expr:
        return _Op(np.multiply, "*", self, _expr(other))

    def __rmul__(self, other: object) -> Expr:
        return _Op(np.multiply, "*", _expr(other), self)

    def __truediv__(self, other: object) -> Expr:
        return _Op(np.true_divide, "/", self, _expr(other))

    def __lt__(self, other: object) -> Expr:
        return _Op(np.less, "<", self, _expr(other))

    def __le__(self, other: object) -> Expr:
        return _Op(np.less_equal, "<=", self, _expr(other))

    def __gt__(self, other: object) -> Expr:
        return _Op(np.greater, ">", self, _expr(other))

    def __ge__(self, other: object) -> Expr:
        return _Op(np.greater_equal, ">=", self, _expr(other))

    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return _Op(np.equal, "==", self, _expr(other))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return _Op(np.not_equal, "!=", self, _expr(other))

    def __and__(self, other: object) -> Expr:
        return _Logic(np.logical_and, "&", self, _expr(other))

    def __or__(self, other: object) -> Expr:
        return _Logic(np.logical_or, "|", self, _expr(other))

    def __invert__(self) -> Expr:
        return _Not(self)

    __hash__ = object.__hash__


def _expr(value: object) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool | int | float):
        return _Const(float(value))
    raise PolicyError(f"cannot use {value!r} in a policy declaration; use numbers and fields.")


class _Const(Expr):
    def __init__(self, value: float) -> None:
        self.value = np.float64(value)

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        return self.value

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        return np.full(len(columns["packed_tokens"]), self.value)

    def __repr__(self) -> str:
        return repr(float(self.value))


class _Field(Expr):
    """One of a reading's values, as a double (booleans as 0.0 and 1.0)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        return reading[self.name]

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        return columns[self.name]

    def __repr__(self) -> str:
        return self.name.upper()


class _Op(Expr):
    def __init__(self, ufunc: np.ufunc, symbol: str, left: Expr, right: Expr) -> None:
        self.ufunc, self.symbol, self.left, self.right = ufunc, symbol, left, right

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        with np.errstate(all="ignore"):
            return self.ufunc(self.left.scalar(reading, state), self.right.scalar(reading, state))

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        with np.errstate(all="ignore"):
            return self.ufunc(self.left.array(columns, state), self.right.array(columns, state))

    def refs(self) -> Iterator[Aggregate]:
        yield from self.left.refs()
        yield from self.right.refs()

    def __repr__(self) -> str:
        return f"({self.left!r} {self.symbol} {self.right!r})"


class _Logic(_Op):
    """``&`` and ``|`` on truth values (a number is true when it is not 0)."""

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        left = self.left.scalar(reading, state) != 0
        return self.ufunc(left, self.right.scalar(reading, state) != 0)

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        left = self.left.array(columns, state) != 0
        return self.ufunc(left, self.right.array(columns, state) != 0)


class _Not(Expr):
    def __init__(self, inner: Expr) -> None:
        self.inner = inner

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        return np.logical_not(self.inner.scalar(reading, state) != 0)

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        return np.logical_not(self.inner.array(columns, state) != 0)

    def refs(self) -> Iterator[Aggregate]:
        return self.inner.refs()

    def __repr__(self) -> str:
        return f"~{self.inner!r}"


#: Packed tokens ``n`` of the reading's wave.
PACKED = _Field("packed_tokens")
#: Logical tokens ``m`` (before prefix sharing).
LOGICAL = _Field("logical_tokens")
#: The reading's delta bytes, ``max(0, peak - baseline)``.
DELTA = _Field("delta_bytes")
#: The wave's output bytes ``o``.
OUTPUT = _Field("output_bytes")
#: Compute bytes ``max(0, delta - o)``.
COMPUTE = _Field("compute_bytes")
#: Bytes per packed token, ``max(0, delta - o) / n`` (SPEC §4).
RATE = _Field("rate")
#: Sharing ratio ``m / n``.
SHARING = _Field("sharing")
#: 1.0 for a whole reading, else 0.0.
WHOLE = _Field("whole")
#: 1.0 for a ``caller`` reading, 0.0 for a ``forward`` one.
CALLER = _Field("caller")

FIELDS = ("packed_tokens", "logical_tokens", "delta_bytes", "output_bytes", "compute_bytes",
          "rate", "sharing", "whole", "caller")  # fmt: skip


def reading_values(reading: Reading) -> dict[str, Value]:
    """A reading's fields as doubles, as :data:`FIELDS` names them."""
    compute = max(0, reading.delta_bytes - reading.output_bytes)
    n = reading.packed_tokens
    return {
        "packed_tokens": np.float64(n),
        "logical_tokens": np.float64(reading.logical_tokens),
        "delta_bytes": np.float64(reading.delta_bytes),
        "output_bytes": np.float64(reading.output_bytes),
        "compute_bytes": np.float64(compute),
        "rate": np.float64(compute / n),
        "sharing": np.float64(reading.logical_tokens / n),
        "whole": np.float64(reading.whole),
        "caller": np.float64(reading.phase == "caller"),
    }


class Aggregate(Expr):
    """A running aggregate over the observed readings that meet ``where``.

    Used in an expression, it is the aggregate's value including the current
    reading (for aggregates declared earlier).
    """

    kind: ClassVar[str]

    def __init__(
        self, value: Expr | float, where: Expr | None = None, initial: float | None = None
    ) -> None:
        self.value = _expr(value)
        self.where = where
        self.initial = np.float64(math.nan if initial is None else initial)
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """On a class, the aggregate; on a profile, its value (None while unset)."""
        if instance is None:
            return self
        value = float(instance.state[self.name])  # type: ignore[attr-defined]
        return None if math.isnan(value) else value

    def scalar(self, reading: dict[str, Value], state: dict[str, Value]) -> Value:
        return state[self.name]

    def array(self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> np.ndarray:
        return state[self.name]

    def refs(self) -> Iterator[Aggregate]:
        yield self

    def update(self, current: Value, value: Value) -> Value:
        """The aggregate after one more reading meeting ``where``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        where = "" if self.where is None else f", where={self.where!r}"
        return f"{type(self).__name__}({self.value!r}{where})"


class Max(Aggregate):
    """The largest value (NaN values are skipped)."""

    kind = "max"

    def update(self, current: Value, value: Value) -> Value:
        return np.fmax(current, value)


class Min(Aggregate):
    """The smallest value (NaN values are skipped)."""

    kind = "min"

    def update(self, current: Value, value: Value) -> Value:
        return np.fmin(current, value)


class First(Aggregate):
    """The value of the first reading that meets ``where``."""

    kind = "first"

    def __init__(self, value: Expr | float, where: Expr | None = None) -> None:
        super().__init__(value, where)

    def update(self, current: Value, value: Value) -> Value:
        return value


class Last(Aggregate):
    """The value of the latest reading that meets ``where``."""

    kind = "last"

    def update(self, current: Value, value: Value) -> Value:
        return value


class Sum(Aggregate):
    """The sum of the values, in reading order (starts at ``initial``, default 0)."""

    kind = "sum"

    def __init__(
        self, value: Expr | float, where: Expr | None = None, initial: float = 0.0
    ) -> None:
        super().__init__(value, where, initial)

    def update(self, current: Value, value: Value) -> Value:
        return np.add(current, value)


class Count(Sum):
    """How many observed readings meet ``where`` (a condition, or every reading)."""

    kind = "count"

    def __init__(self, where: Expr | None = None) -> None:
        super().__init__(1.0, where)

    def __repr__(self) -> str:
        return f"Count({'' if self.where is None else repr(self.where)})"


class State:
    """A profile's aggregates by name (``state.rate_max``), numbers or arrays."""

    def __init__(self, values: dict[str, Value]) -> None:
        self.__dict__.update(values)


class DeclaredPolicy(Policy):
    """Base class of a policy declared as aggregates plus a ``rule``.

    Subclasses set ``name`` and ``summary``, declare aggregates as class
    attributes and a static ``rule(state, n, m)``. ``observe`` and ``price``
    are derived from the declaration; do not override them (a subclass that
    does is replayed by the reference engine only).
    """

    aggregates: ClassVar[tuple[Aggregate, ...]] = ()
    rule: ClassVar[Callable[..., Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared: dict[str, Aggregate] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, Aggregate):
                    declared.pop(name, None)
                    declared[name] = value
        seen: set[int] = set()
        for agg in declared.values():
            for expr in (agg.value, agg.where):
                for ref in () if expr is None else expr.refs():
                    if id(ref) not in seen:
                        raise PolicyError(
                            f"policy {cls.__qualname__}: aggregate {agg.name!r} reads "
                            f"{ref.name or ref!r}, which is not declared before it."
                        )
            seen.add(id(agg))
        cls.aggregates = tuple(declared.values())

    def __init__(self) -> None:
        self.state: dict[str, Value] = {agg.name: agg.initial for agg in self.aggregates}
        self.first_seen: set[str] = set()

    def observe(self, reading: Reading) -> None:
        values = reading_values(reading)
        state = self.state
        for agg in self.aggregates:
            if agg.where is not None and agg.where.scalar(values, state) == 0:
                continue
            if isinstance(agg, First):
                if agg.name in self.first_seen:
                    continue
                self.first_seen.add(agg.name)
            state[agg.name] = agg.update(state[agg.name], agg.value.scalar(values, state))

    def price(self, request: PriceRequest) -> float | None:
        with np.errstate(all="ignore"):
            p = type(self).rule(
                State(self.state),
                np.float64(request.packed_tokens),
                np.float64(request.logical_tokens),
            )
        p = float(p)
        return None if math.isnan(p) else p


def is_declared(cls: type[Policy]) -> bool:
    """Whether both engines can run ``cls`` from its declaration (it overrides neither
    ``observe`` nor ``price``)."""
    return (
        issubclass(cls, DeclaredPolicy)
        and cls.observe is DeclaredPolicy.observe
        and cls.price is DeclaredPolicy.price
        and hasattr(cls, "rule")
    )
