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
  this one. Unset values are NaN; ``initial`` gives a start value. One more
  kind keeps every measured point instead of one number: :class:`Points`,
  which the rule asks for neighbours (``state.points.below(x)``,
  ``above(x)``, ``top(x)``; see :class:`PointSet`).
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

import bisect
import math
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

from warmfit.errors import PolicyError
from warmfit.policies.base import Policy, PriceRequest, Reading

Value = Any  # a float (the reference fold) or a numpy array (the vectorized engine)


class Expr:
    """An expression over a reading's fields and the aggregates declared before it."""

    def source(self) -> str:
        """The expression as Python source over plain floats (the reference engine's fold)."""
        raise NotImplementedError

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
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

    def __rtruediv__(self, other: object) -> Expr:
        return _Op(np.true_divide, "/", _expr(other), self)

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


#: Arrays already computed in one vectorized pass, by expression (its ``id``).
Memo = dict[int, np.ndarray]


def evaluate(
    expr: Expr, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
) -> np.ndarray:
    """``expr`` over every reading at once, each sub-expression computed once per pass
    (a condition shared by several aggregates, such as "after the seed", is not redone)."""
    key = id(expr)
    if key not in memo:
        memo[key] = expr.array(columns, state, memo)
    return memo[key]


def _expr(value: object) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool | int | float):
        return _Const(float(value))
    raise PolicyError(f"cannot use {value!r} in a policy declaration; use numbers and fields.")


class _Const(Expr):
    def __init__(self, value: float) -> None:
        self.value = np.float64(value)

    def source(self) -> str:
        value = float(self.value)
        if math.isnan(value):
            return "_nan"
        if math.isinf(value):
            return "_inf" if value > 0 else "(-_inf)"
        return repr(value)

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        return np.full(len(columns["packed_tokens"]), self.value)

    def __repr__(self) -> str:
        return repr(float(self.value))


class _Field(Expr):
    """One of a reading's values, as a double (booleans as 0.0 and 1.0)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def source(self) -> str:
        return f"f_{self.name}"

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        return columns[self.name]

    def __repr__(self) -> str:
        return self.name.upper()


class _Op(Expr):
    def __init__(self, ufunc: np.ufunc, symbol: str, left: Expr, right: Expr) -> None:
        self.ufunc, self.symbol, self.left, self.right = ufunc, symbol, left, right

    def source(self) -> str:
        left, right = self.left.source(), self.right.source()
        if self.symbol == "/":  # IEEE division as numpy does it: x / 0 is inf or nan
            return f"_div({left}, {right})"
        return f"({left} {self.symbol} {right})"

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        with np.errstate(all="ignore"):
            return self.ufunc(
                evaluate(self.left, columns, state, memo),
                evaluate(self.right, columns, state, memo),
            )

    def refs(self) -> Iterator[Aggregate]:
        yield from self.left.refs()
        yield from self.right.refs()

    def __repr__(self) -> str:
        return f"({self.left!r} {self.symbol} {self.right!r})"


class _Logic(_Op):
    """``&`` and ``|`` on truth values (a number is true when it is not 0)."""

    def source(self) -> str:
        word = "and" if self.symbol == "&" else "or"
        return f"(({self.left.source()}) != 0 {word} ({self.right.source()}) != 0)"

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        left = evaluate(self.left, columns, state, memo) != 0
        return self.ufunc(left, evaluate(self.right, columns, state, memo) != 0)


class _Not(Expr):
    def __init__(self, inner: Expr) -> None:
        self.inner = inner

    def source(self) -> str:
        return f"(not ({self.inner.source()}) != 0)"

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        return np.logical_not(evaluate(self.inner, columns, state, memo) != 0)

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


def _div(left: float, right: float) -> float:
    """IEEE division as numpy does it: ``x / 0`` is ±inf, ``0 / 0`` and ``nan / 0`` NaN."""
    try:
        return left / right
    except ZeroDivisionError:
        if left != left or left == 0:
            return math.nan
        return math.copysign(math.inf, left) * math.copysign(1.0, right)


def _fold_source(aggregates: tuple[Aggregate, ...]) -> str:
    """The reference engine's fold of one reading, as Python source over floats.

    Every aggregate's ``where`` and value are written out as plain float
    arithmetic (IEEE, as numpy's), so the fold costs about what a hand-written
    ``observe`` costs; aggregates are updated in declaration order, each
    expression seeing the ones declared before it as updated with this reading.
    """
    lines = ["def fold(st, seen, " + ", ".join(f"f_{name}" for name in FIELDS) + "):"]
    lines += [f"    a_{agg.name} = st[{agg.name!r}]" for agg in aggregates]
    for agg in aggregates:
        body = [f"v = float({agg.value.source()})", *agg.update_source(f"a_{agg.name}")]
        if agg.where is None:
            lines += [f"    {line}" for line in body]
        else:
            lines.append(f"    if ({agg.where.source()}) != 0:")
            lines += [f"        {line}" for line in body]
    lines += [f"    st[{agg.name!r}] = a_{agg.name}" for agg in aggregates] or ["    pass"]
    return "\n".join(lines) + "\n"


def _compile_fold(aggregates: tuple[Aggregate, ...]) -> Callable[..., None]:
    namespace: dict[str, Any] = {"_div": _div, "_nan": math.nan, "_inf": math.inf}
    exec(compile(_fold_source(aggregates), "<warmfit declared policy>", "exec"), namespace)
    fold: Callable[..., None] = namespace["fold"]
    return fold


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
        if where is not None and not isinstance(where, Expr):
            raise PolicyError(
                f"{type(self).__name__}(..., where={where!r}): where= takes a condition on "
                "the reading's fields, for example where=WHOLE or where=RATE > 0."
            )
        self.where = where
        self.initial = np.float64(math.nan if initial is None else initial)
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def start(self) -> Any:
        """A new profile's value: ``initial`` (NaN: unset)."""
        return float(self.initial)

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        """On a class, the aggregate; on a profile, its value (None while unset)."""
        if instance is None:
            return self
        value = float(instance.state[self.name])  # type: ignore[attr-defined]
        return None if math.isnan(value) else value

    def source(self) -> str:
        return f"a_{self.name}"

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        return state[self.name]

    def refs(self) -> Iterator[Aggregate]:
        yield self

    def update_source(self, var: str) -> list[str]:
        """Python lines that fold the value ``v`` into ``var`` (one more reading meeting
        ``where``), as numpy's running aggregate does."""
        raise NotImplementedError

    def __repr__(self) -> str:
        where = "" if self.where is None else f", where={self.where!r}"
        return f"{type(self).__name__}({self.value!r}{where})"


class Max(Aggregate):
    """The largest value (NaN values are skipped)."""

    kind = "max"

    def update_source(self, var: str) -> list[str]:  # np.fmax: NaN values are skipped
        return [f"{var} = v if ({var} != {var} or v > {var}) else {var}"]


class Min(Aggregate):
    """The smallest value (NaN values are skipped)."""

    kind = "min"

    def update_source(self, var: str) -> list[str]:  # np.fmin
        return [f"{var} = v if ({var} != {var} or v < {var}) else {var}"]


class First(Aggregate):
    """The value of the first reading that meets ``where``."""

    kind = "first"

    def __init__(self, value: Expr | float, where: Expr | None = None) -> None:
        super().__init__(value, where)

    def update_source(self, var: str) -> list[str]:
        return [f"if {self.name!r} not in seen:", f"    seen.add({self.name!r})", f"    {var} = v"]


class Last(Aggregate):
    """The value of the latest reading that meets ``where``."""

    kind = "last"

    def update_source(self, var: str) -> list[str]:
        return [f"{var} = v"]


class Sum(Aggregate):
    """The sum of the values, in reading order (starts at ``initial``, default 0)."""

    kind = "sum"

    def __init__(
        self, value: Expr | float, where: Expr | None = None, initial: float = 0.0
    ) -> None:
        super().__init__(value, where, initial)

    def update_source(self, var: str) -> list[str]:
        return [f"{var} = {var} + v"]


class Count(Sum):
    """How many observed readings meet ``where`` (a condition, or every reading)."""

    kind = "count"

    def __init__(self, where: Expr | None = None) -> None:
        super().__init__(1.0, where)

    def __repr__(self) -> str:
        return f"Count({'' if self.where is None else repr(self.where)})"


class Points(Aggregate):
    """Every measured point ``(at, value)`` of the readings that meet ``where``.

    Unlike the other aggregates it is not one number: the rule asks it for
    neighbours (``state.points.below(x)``, ``above(x)``, ``top(x)``; see
    :class:`PointSet`). Only the rule may read it, not another aggregate.
    A point with a NaN coordinate measures nothing and is not kept.
    """

    kind = "points"

    def __init__(self, value: Expr | float, at: Expr, where: Expr | None = None) -> None:
        super().__init__(value, where)
        self.at = _expr(at)

    def start(self) -> Any:
        return PointSet()

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return instance.state[self.name]  # type: ignore[attr-defined]

    def source(self) -> str:
        raise PolicyError(
            f"{self.name!r} holds points: only the rule can read it (state.{self.name}.top(x))."
        )

    def array(
        self, columns: dict[str, np.ndarray], state: dict[str, np.ndarray], memo: Memo
    ) -> np.ndarray:
        return np.asarray(self.source())  # raises: only the rule reads points

    def update_source(self, var: str) -> list[str]:
        return [f"{var}.add(float({self.at.source()}), v)"]

    def __repr__(self) -> str:
        where = "" if self.where is None else f", where={self.where!r}"
        return f"Points({self.value!r}, at={self.at!r}{where})"


class PointSet:
    """Measured points ``(x, y)`` as a profile holds them, and the neighbour queries
    a rule asks (the reference engine's form; the vectorized engine answers the same
    queries for every wave at once, :class:`warmfit.replay.vectorized.PointQueries`).

    - ``below(x)``: the largest measured ``x' <= x``; NaN when none;
    - ``above(x)``: the smallest measured ``x' >= x``; NaN when none;
    - ``top(x)``: the largest ``y`` of the points with ``x' <= x`` (the upper
      monotone envelope at ``x``); NaN when none.

    A NaN query answers NaN.

    >>> points = PointSet()
    >>> for x, y in ((200, 5.0), (100, 7.0), (400, 6.0)):
    ...     points.add(x, y)
    >>> points.below(300), points.above(300), points.top(300), points.top(99)
    (200, 400, 7.0, nan)
    """

    __slots__ = ("sizes", "tops")

    def __init__(self) -> None:
        #: The measured sizes, ascending, each once.
        self.sizes: list[float] = []
        #: At each size, the largest value measured at that size or below.
        self.tops: list[float] = []

    def add(self, x: float, y: float) -> None:
        """Keep the point ``(x, y)``."""
        if x != x or y != y:
            return
        i = bisect.bisect_left(self.sizes, x)
        if i == len(self.sizes) or self.sizes[i] != x:
            self.sizes.insert(i, x)
            self.tops.insert(i, self.tops[i - 1] if i else -math.inf)
        for j in range(i, len(self.tops)):  # the envelope is non-decreasing: stop at the first
            if self.tops[j] >= y:  # top already as high
                break
            self.tops[j] = y

    @classmethod
    def of(cls, xs: np.ndarray, ys: np.ndarray) -> PointSet:
        """The set holding the points ``zip(xs, ys)`` (in any order; NaN points left out)."""
        keep = ~(np.isnan(xs) | np.isnan(ys))
        xs, ys = xs[keep], ys[keep]
        points = cls()
        if len(xs):
            order = np.lexsort((ys, xs))
            xs, ys = xs[order], ys[order]
            last = np.append(xs[1:] != xs[:-1], True)  # the largest y at each size is its last
            points.sizes = xs[last].tolist()
            points.tops = np.maximum.accumulate(ys[last]).tolist()
        return points

    def below(self, x: float) -> float:
        if x != x:
            return math.nan
        i = bisect.bisect_right(self.sizes, x) - 1
        return self.sizes[i] if i >= 0 else math.nan

    def above(self, x: float) -> float:
        if x != x:
            return math.nan
        i = bisect.bisect_left(self.sizes, x)
        return self.sizes[i] if i < len(self.sizes) else math.nan

    def top(self, x: float) -> float:
        if x != x:
            return math.nan
        i = bisect.bisect_right(self.sizes, x) - 1
        return self.tops[i] if i >= 0 else math.nan

    def copy(self) -> PointSet:
        other = PointSet()
        other.sizes, other.tops = list(self.sizes), list(self.tops)
        return other

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PointSet) and self.sizes == other.sizes and self.tops == other.tops

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.sizes)

    def __repr__(self) -> str:
        return f"PointSet({len(self.sizes)} sizes)"


class State:
    """A profile's aggregates by name (``state.rate_max``), numbers or arrays."""

    def __init__(self, values: dict[str, Value]) -> None:
        self.__dict__.update(values)


def _pending(*args: Any) -> Any:  # pragma: no cover - never called: replaced when first needed
    raise AssertionError


#: A class's float rule before its first price builds it.
_PENDING: Callable[..., Any] = _pending


class _FloatNumpy:
    """The numpy functions the built-in rules call, on plain Python floats.

    Each gives the very double numpy gives on float64 scalars: ``maximum`` and
    ``minimum`` propagate NaN and, on a tie, return their second argument, as
    numpy's do (``maximum(-0.0, 0.0)`` is ``0.0``). Any other name is missing,
    so a rule that calls another numpy function is priced by numpy itself.
    """

    nan = math.nan
    inf = math.inf
    isnan = staticmethod(math.isnan)
    nextafter = staticmethod(math.nextafter)

    @staticmethod
    def maximum(a: float, b: float) -> float:
        return a if (a > b or a != a) else b

    @staticmethod
    def minimum(a: float, b: float) -> float:
        return a if (a < b or a != a) else b

    @staticmethod
    def where(condition: object, a: float, b: float) -> float:
        return a if condition else b


def _float_form(func: Callable[..., Any], done: dict[Any, Any]) -> Callable[..., Any]:
    """``func`` with numpy (``np``) replaced by :class:`_FloatNumpy` in its globals, and
    every declared policy it names by a stand-in whose ``rule`` and other static
    functions are their float forms too (``WarmFit.rule`` calls ``MaxMerge.rule``)."""
    if func in done:
        return done[func]
    names: dict[str, Any] = dict(func.__globals__)
    fast = types.FunctionType(
        func.__code__, names, func.__name__, func.__defaults__, func.__closure__
    )
    done[func] = fast
    for key, value in func.__globals__.items():
        if value is np:
            names[key] = _FloatNumpy
        elif isinstance(value, type) and issubclass(value, DeclaredPolicy):
            stand_in = types.SimpleNamespace()
            for attr in dir(value):
                member = _static_function(value, attr)
                if member is not None:
                    setattr(stand_in, attr, _float_form(member, done))
            names[key] = stand_in
    return fast


def _static_function(cls: type, attr: str) -> Callable[..., Any] | None:
    """The plain function of a static method ``cls.attr`` (from the class that defines it);
    None for anything else."""
    for klass in cls.__mro__:
        if attr in vars(klass):
            member = vars(klass)[attr]
            return member.__func__ if isinstance(member, staticmethod) else None
    return None


class DeclaredPolicy(Policy):
    """Base class of a policy declared as aggregates plus a ``rule``.

    Subclasses set ``name`` and ``summary``, declare aggregates as class
    attributes and a static ``rule(state, n, m)``. ``observe`` and ``price``
    are derived from the declaration; do not override them (a subclass that
    does is replayed by the reference engine only).

    ``plain_floats = True``, set by the class that defines ``rule``, says that
    the rule and the rules it calls give the same double on plain Python
    floats as on numpy's (they use only arithmetic, comparisons and numpy's
    ``maximum``, ``minimum``, ``where``, ``isnan``, ``nextafter``, never ``~``
    nor arithmetic on a comparison). ``price`` then runs that float form of
    the rule, several times cheaper than numpy on one wave, and numpy's where
    the float form stops (a division by zero). The built-ins set it.
    """

    aggregates: ClassVar[tuple[Aggregate, ...]] = ()
    rule: ClassVar[Callable[..., Any]]
    plain_floats: ClassVar[bool] = False
    _fold: ClassVar[Callable[..., None]]
    _float_rule: ClassVar[Callable[..., Any] | None] = None

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
            for expr in (agg.value, agg.where, getattr(agg, "at", None)):
                for ref in () if expr is None else expr.refs():
                    if isinstance(ref, Points):
                        raise PolicyError(
                            f"policy {cls.__qualname__}: aggregate {agg.name!r} reads "
                            f"{ref.name!r}, which holds points: only the rule can read them."
                        )
                    if id(ref) not in seen:
                        raise PolicyError(
                            f"policy {cls.__qualname__}: aggregate {agg.name!r} reads "
                            f"{ref.name or ref!r}, which is not declared before it."
                        )
            seen.add(id(agg))
        cls.aggregates = tuple(declared.values())
        cls._fold = staticmethod(_compile_fold(cls.aggregates))
        # the float form only where the class that defines the rule vouches for it
        owner = next((k for k in cls.__mro__ if "rule" in vars(k)), None)
        rule = None if owner is None else _static_function(owner, "rule")
        floats = rule is not None and vars(owner).get("plain_floats", False) is True
        cls._float_rule = staticmethod(_PENDING) if floats else None

    def __init__(self) -> None:
        self.state: dict[str, Value] = {agg.name: agg.start() for agg in self.aggregates}
        self.first_seen: set[str] = set()

    def observe(self, reading: Reading) -> None:
        n = reading.packed_tokens
        compute = max(0, reading.delta_bytes - reading.output_bytes)
        type(self)._fold(
            self.state,
            self.first_seen,
            float(n),
            float(reading.logical_tokens),
            float(reading.delta_bytes),
            float(reading.output_bytes),
            float(compute),
            compute / n,  # Python's true division of integers: correctly rounded, as numpy's
            reading.logical_tokens / n,
            1.0 if reading.whole else 0.0,
            1.0 if reading.phase == "caller" else 0.0,
        )

    @classmethod
    def _build_float_rule(cls) -> Callable[..., Any]:
        """The float form of the rule, made at the first price (once every class the
        rule names exists)."""
        fast = _float_form(_static_function(cls, "rule"), {})  # type: ignore[arg-type]
        cls._float_rule = staticmethod(fast)
        return fast

    def price(self, request: PriceRequest) -> float | None:
        fast = self._float_rule
        if fast is _PENDING:
            fast = self._build_float_rule()
        p: Any = None
        if fast is not None:
            try:
                p = fast(State(self.state), float(request.packed_tokens),
                         float(request.logical_tokens))  # fmt: skip
            except (ArithmeticError, AttributeError, TypeError):  # numpy prices it below
                p = None
            if not isinstance(p, (float, int)):  # a complex (a ** 0.5 of a negative a),
                p = None  # an array, None: numpy's answer is the rule's
        if p is None:
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
    ``observe`` nor ``price``).

    >>> from warmfit.policies import MaxMerge, WarmFit
    >>> is_declared(MaxMerge), is_declared(WarmFit)
    (True, True)
    >>> class Tweaked(WarmFit):
    ...     name = "tweaked"
    ...     def price(self, request):
    ...         return 0.0
    >>> is_declared(Tweaked)
    False
    """
    return (
        issubclass(cls, DeclaredPolicy)
        and cls.observe is DeclaredPolicy.observe
        and cls.price is DeclaredPolicy.price
        and hasattr(cls, "rule")
    )
