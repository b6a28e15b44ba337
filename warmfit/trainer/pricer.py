"""The :class:`Pricer`: the policy a replay runs, run inside the trainer.

A trainer asks it, before each wave, what the wave will cost
(:meth:`Pricer.price`) or whether it fits a memory budget
(:meth:`Pricer.admits`), and hands it each reading the recorder takes
(:meth:`Pricer.observe_row`, which ``Recorder(pricer=...)`` calls). It prices
by the very code replay runs (SPEC §3): the wave's profile prices
(``policy.price``, checked as the reference engine checks it), then
:func:`warmfit.replay.semantics.estimate_bytes` turns the learned bytes into
the estimate; a reading teaches the profile exactly when
:func:`warmfit.replay.semantics.is_observed` says so. So a trace recorded
under a Pricer replays, through the same policy and safety factor, to the
prices the trainer used, wave for wave.

>>> pricer = Pricer("warm-fit", safety_factor=1.1)
>>> pricer.price("train", 100) is None          # no profile, no floor: unpriced
True
>>> pricer.price("train", 100, static_floor_bytes=50_000)   # the floor alone: 55,000 * 1.1
55000
>>> pricer.observe_row({"signature": "train", "kind": "flat", "phase": "caller",
...     "whole": True, "packed_tokens": 100, "logical_tokens": 100, "output_bytes": 0,
...     "baseline_bytes": 1_000, "peak_bytes": 31_000, "static_floor_bytes": None,
...     "oom": False})
>>> pricer.price("train", 200)                   # 300 B/token * 200 * 1.1
66000
>>> pricer.admits("train", 200, budget_bytes=66_000), pricer.admits("train", 201, budget_bytes=66_000)
(True, False)
"""

from __future__ import annotations

import gc
import os
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from numbers import Real
from types import TracebackType
from typing import TYPE_CHECKING, Any

from warmfit.errors import EstimateOverflowError, PolicyError, UsageError, whole_number
from warmfit.format.schema import KINDS, PHASES
from warmfit.policies import Policy, PriceRequest, Reading, checked_class, get_policy
from warmfit.replay.admission import OVERFLOW, SEARCH_CAP_TOKENS, max_admitted, oom_bound
from warmfit.replay.reference import _checked_price
from warmfit.replay.semantics import (
    DEFAULT_SAFETY_FACTOR,
    check_safety_factor,
    estimate_bytes,
    is_observed,
)
from warmfit.trainer.budget import budget_bytes as _budget_bytes

if TYPE_CHECKING:
    from warmfit.recorder.meters import Meter
    from warmfit.recorder.recorder import Recorder

_INF = float("inf")
#: Counts and byte sizes a trace's int64 columns hold: below 2**63.
_I64 = 2**63


class PricerWarning(UserWarning):
    """A Pricer asked again and again about a signature it has never been taught (a
    mistyped signature prices nothing and admits nothing)."""


@dataclass(frozen=True)
class OomWave:
    """A wave that ran out of memory inside :meth:`Pricer.wave`: its size did not fit
    its budget (SPEC §9)."""

    signature: str
    kind: str
    packed_tokens: int
    #: The budget it ran under (``Pricer.wave(budget_bytes=...)``; a float where it is
    #: not a whole number of bytes); None: not given, so it counts under every budget.
    budget_bytes: int | float | None


#: The columns of a reading :meth:`Pricer.observe_row` reads (trace format v1, SPEC §2).
ROW_COLUMNS = (
    "signature", "kind", "phase", "whole", "packed_tokens", "logical_tokens", "output_bytes",
    "baseline_bytes", "peak_bytes", "static_floor_bytes", "oom",
)  # fmt: skip


def _bool_dtype(value: object) -> bool:
    """Whether ``value`` is a numpy bool or a bool tensor (a torch dtype has no ``kind``:
    a 0-d integer tensor is a count, not an AttributeError)."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and (getattr(dtype, "kind", None) == "b" or str(dtype) == "torch.bool")


def _count(value: object, argument: str, where: str = "") -> int:
    """A token count or byte size as the trace's int64 columns take it: an integer (not a
    bool, not a float) below 2**63, or a UsageError naming ``argument`` (after ``where``,
    the call it was given to)."""

    def refused(problem: str) -> UsageError:
        if where:
            return UsageError(f"{where}{argument} {problem}")
        return UsageError(problem, argument=argument)

    if isinstance(value, bool) or _bool_dtype(value):
        return_type = type(value).__name__
        raise refused(
            f"must be an integer; got {value!r} of type {return_type} (a bool is not a count)."
        )
    try:
        number = whole_number(value, argument)
    except UsageError as exc:
        raise refused(exc.problem) from None
    if number >= _I64:
        raise refused(f"must be below 2**63 (a trace's int64 column); got {number}.")
    return number


def _policy_class(policy: object) -> type[Policy]:
    if isinstance(policy, str):
        return get_policy(policy)
    if isinstance(policy, type):
        return checked_class(policy, repr(policy))
    raise UsageError(
        "must be a registered policy name (warmfit policies), 'module:Class', or a policy "
        f"class; got {policy!r} of type {type(policy).__name__}.",
        argument="policy",
    )


class Pricer:
    """One trainer rank's profiles under one policy and safety factor.

    ``policy`` is a registered name (``warmfit policies``), a ``module:Class``
    path or a policy class; ``safety_factor`` the ``f`` of SPEC §3 (default
    1.1, as replay's). Like a replay of one ``(run, rank)`` stream it keeps one
    profile per signature and learns from every reading it is given, whatever
    run and rank the reading names: give each rank its own Pricer, as each
    trainer rank keeps its own profiles.
    """

    __slots__ = (
        "__weakref__",
        "_asked",
        "_device",
        "_fresh",
        "_meter",
        "_meter_closed",
        "_metering",
        "_observed",
        "_open",
        "_profiles",
        "_recorder",
        "_traced",
        "ooms",
        "policy",
        "safety_factor",
    )

    def __init__(
        self,
        policy: str | type[Policy] = "warm-fit",
        safety_factor: float = DEFAULT_SAFETY_FACTOR,
        *,
        meter: Meter | None = None,
        device: Any = None,
    ) -> None:
        #: The policy class every profile is an instance of.
        self.policy: type[Policy] = _policy_class(policy)
        # any real number (a numpy int or float too), not a bool: True is no margin
        given: object = safety_factor  # as the caller passed it, whatever its annotation
        if isinstance(given, bool) or not isinstance(given, Real):
            raise UsageError(
                f"must be a number (1.1 adds a 10% margin); got {safety_factor!r}.",
                argument="safety_factor",
            )
        try:
            float(safety_factor)
        except OverflowError:  # an int past a float's range: no traceback, one line
            raise UsageError(
                f"must be a positive number (1.1 adds a 10% margin); got an integer of "
                f"{int(safety_factor).bit_length()} bits, past a float's range.",
                argument="safety_factor",
            ) from None
        #: The safety factor ``f`` of SPEC §3.
        self.safety_factor: float = check_safety_factor(safety_factor)
        self._profiles: dict[str, Policy] = {}
        # what a signature without a profile prices from (a fresh profile; price changes nothing)
        self._fresh: Policy = self.policy()
        #: The waves that ran out of memory inside :meth:`wave`, in order (SPEC §9).
        self.ooms: list[OomWave] = []
        self._observed = 0  # readings observed, to tell a mistyped signature from a new one
        self._asked: dict[str, int] = {}  # unknown signature -> _observed when first asked
        # the trace's signatures of a Pricer warm-started by from_trace (None: not one)
        self._traced: frozenset[str] | None = None
        self._meter = meter  # the meter of waves no recorder records (None: made when needed)
        self._device = device
        self._metering: Recorder | None = None  # a recorder that writes nothing, for wave()
        self._meter_closed = False  # close() closed the meter given: it measures nothing more
        self._recorder: Any = None  # a weak reference to the enabled Recorder(pricer=self)
        self._open: list[PricerWave] = []

    # ------------------------------------------------------------------ warm start

    @classmethod
    def from_trace(
        cls,
        path: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        policy: str | type[Policy] = "warm-fit",
        safety_factor: float = DEFAULT_SAFETY_FACTOR,
        run: str | None = None,
        rank: int | None = None,
    ) -> Pricer:
        """A Pricer that has observed a stored trace's readings of one run and rank.

        ``path`` is a trace (a file or a directory) or several. The readings of
        the chosen ``(run, rank)`` are observed in trace order (``seq``), as
        replay observes them; ``run`` and ``rank`` may be left out while the
        trace holds only one of each. A trace of several runs or ranks with
        none chosen, or a choice the trace does not hold, is a UsageError that
        lists what it holds. Asked about a signature the trace lacks (no
        profile), it warns once, at the first ask (:class:`PricerWarning`, naming
        the signatures it knows): a Pricer learning live warns only at a later
        ask, as its first wave of a new signature has no price by rights.
        """
        from warmfit.format.trace import read_trace  # only for a warm start

        paths = [path] if isinstance(path, str | os.PathLike) else list(path)
        pricer = cls(policy, safety_factor)  # bad arguments fail before the trace is read
        readings = read_trace(paths)
        streams = readings.select("run", "rank").unique(maintain_order=True).rows()
        chosen = [
            (r, k) for r, k in streams if (run is None or r == run) and (rank is None or k == rank)
        ]
        if not chosen:
            asked = f"run {run!r}" if rank is None else f"run {run!r} rank {rank}"
            asked = f"rank {rank}" if run is None else asked
            raise UsageError(
                f"the trace holds no readings of {asked}; it holds {_listed(streams)}."
            )
        if len(chosen) > 1:  # the streams of the run (or rank) asked, not the whole trace's
            raise UsageError(
                f"the trace holds {len(chosen)} streams to choose from ({_listed(chosen)}); "
                "a Pricer learns one rank's readings: give run= and rank=."
            )
        (run_label, rank_number) = chosen[0]
        stream = readings.filter((readings["run"] == run_label) & (readings["rank"] == rank_number))
        for row in stream.select(ROW_COLUMNS).iter_rows(named=True):
            pricer.observe_row(row)
        # it knows the trace's signatures: one the trace lacks is warned of at its first ask
        pricer._traced = frozenset(stream.get_column("signature").unique().to_list())
        return pricer

    # ------------------------------------------------------------------ learning

    def observe_row(self, row: Mapping[str, Any]) -> None:
        """Learn from one reading, a mapping of trace v1 column names to values (a row of
        a trace, or of the recorder).

        As replay does (SPEC §3): the reading's signature's profile observes it,
        unless it ran out of memory or is a ``split_child`` wave's caller
        reading (:func:`warmfit.replay.semantics.is_observed`); its delta is
        ``max(0, peak - baseline)``. Columns beyond :data:`ROW_COLUMNS` (run,
        rank, seq, wave, step, estimate_bytes, ...) are not read. Every value is
        checked by the trace's own column rules (an integer below 2**63, never a
        bool or a float, for a count; a known kind and phase; a bool for
        ``whole`` and ``oom``): a reading a trace could not hold is a
        :class:`UsageError` and teaches nothing.
        """
        if not isinstance(row, Mapping):
            raise UsageError(
                f"observe_row(): a reading is a mapping of trace v1 column names to values "
                f"({', '.join(ROW_COLUMNS)}); got {type(row).__name__}."
            )
        try:
            signature, kind, phase, whole, oom = (
                row["signature"], row["kind"], row["phase"], row["whole"], row["oom"]
            )  # fmt: skip
            n, m, o = row["packed_tokens"], row["logical_tokens"], row["output_bytes"]
            baseline, peak, s = row["baseline_bytes"], row["peak_bytes"], row["static_floor_bytes"]
        except KeyError as exc:
            raise UsageError(
                f"observe_row(): the reading has no {exc.args[0]!r} column; a reading maps "
                f"trace v1 column names to values ({', '.join(ROW_COLUMNS)})."
            ) from None
        # one test for the usual reading (ints in range, known names); else check each value
        if not (
            type(n) is int
            and type(m) is int
            and type(o) is int
            and type(baseline) is int
            and type(peak) is int
            and (s is None or (type(s) is int and 0 <= s < _I64))
            and 0 < n <= m < _I64
            and 0 <= o < _I64
            and 0 <= baseline < _I64
            and 0 <= peak < _I64
            and type(whole) is bool
            and type(oom) is bool
            and type(signature) is str
            and kind in KINDS
            and phase in PHASES
        ):
            signature, kind, phase, whole, oom, n, m, o, baseline, peak, s = self._checked_row(
                signature, kind, phase, whole, oom, n, m, o, baseline, peak, s
            )
        if not is_observed(kind, phase, oom):
            if signature not in self._profiles:
                self._asked[signature] = -1  # a signature readings name: not a mistyped one
            return
        reading = Reading(n, m, max(0, peak - baseline), o, whole, phase, kind, s)
        profile = self._profiles.get(signature)
        if profile is None:
            profile = self._profiles[signature] = self.policy()
        try:
            profile.observe(reading)
        except Exception as exc:  # a user's policy may fail in any way; replay names it so
            raise PolicyError(
                f"policy {self.policy.name!r} failed in observe() on a reading of "
                f"{signature!r}: {type(exc).__name__}: {exc}. Fix the policy's code."
            ) from None
        self._observed += 1

    @staticmethod
    def _checked_row(
        signature: Any, kind: Any, phase: Any, whole: Any, oom: Any, *counts: Any
    ) -> tuple[Any, ...]:
        """A reading's values by the trace's column rules, or a UsageError naming the column."""
        where = "observe_row(): "
        if not isinstance(signature, str):  # a trace's string column: "" too, as price() takes
            raise UsageError(f"{where}signature must be a str; got {signature!r}.")
        if not isinstance(kind, str) or kind not in KINDS:
            raise UsageError(f"{where}kind must be one of {', '.join(KINDS)}; got {kind!r}.")
        if not isinstance(phase, str) or phase not in PHASES:
            raise UsageError(f"{where}phase must be one of {', '.join(PHASES)}; got {phase!r}.")
        flags = []
        for name, flag in (("whole", whole), ("oom", oom)):
            if type(flag) is not bool and not _bool_dtype(flag):
                raise UsageError(f"{where}{name} must be a bool; got {flag!r}.")
            flags.append(bool(flag))
        names = ("packed_tokens", "logical_tokens", "output_bytes", "baseline_bytes", "peak_bytes")
        n, m, o, baseline, peak = (_count(v, k, where) for k, v in zip(names, counts, strict=False))
        s = counts[5]
        s = None if s is None else _count(s, "static_floor_bytes", where)
        for name, value in zip(names[2:], (o, baseline, peak), strict=True):
            if value < 0:
                raise UsageError(f"{where}{name} must be >= 0; got {value}.")
        if s is not None and s < 0:
            raise UsageError(f"{where}static_floor_bytes must be >= 0 or None; got {s}.")
        if n <= 0:
            raise UsageError(f"{where}packed_tokens must be > 0; got {n}.")
        if m < n:
            raise UsageError(f"{where}logical_tokens must be >= packed_tokens ({n}); got {m}.")
        return (signature, kind, phase, *flags, n, m, o, baseline, peak, s)

    # ------------------------------------------------------------------ pricing

    def price(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int | None = None,
        *,
        output_bytes: int = 0,
        static_floor_bytes: int | None = None,
        kind: str = "flat",
    ) -> int | None:
        """The wave's estimate in bytes, as replay would price it now (SPEC §3).

        ``int((output_bytes + max(floor, int(p))) * safety_factor)`` from the
        signature's profile's ``p``; the floor alone while the signature has no
        profile; ``None`` with neither. ``logical_tokens`` defaults to
        ``packed_tokens`` (no prefix sharing). Changes nothing.
        """
        n, o, s = packed_tokens, output_bytes, static_floor_bytes
        m = n if logical_tokens is None else logical_tokens
        # one test for the usual call (ints in range, a known kind); else check and convert
        if not (
            type(n) is int
            and type(m) is int
            and type(o) is int
            and 0 < n <= m < _I64
            and 0 <= o < _I64
            and (s is None or (type(s) is int and 0 <= s < _I64))
            and type(signature) is str
            and kind in KINDS
        ):
            n, m, o, s = self._checked(signature, n, m, o, s, kind)
        profile = self._profiles.get(signature)
        if profile is None:
            self._unknown(signature)
            profile = self._fresh
        cls = self.policy
        try:
            p = profile.price(PriceRequest(n, m, o, kind, s))
            if p is not None and not (type(p) is float and 0.0 <= p < _INF):  # usual: no check
                p = _checked_price(cls, p)
            return estimate_bytes(p, o, s, self.safety_factor)[0]
        except OverflowError:
            raise EstimateOverflowError(
                f"policy {cls.name!r} prices a wave of {signature!r} ({n} packed tokens) above "
                f"2**63 bytes (outputs {o}, floor {s}, safety factor {self.safety_factor:g})."
            ) from None
        except PolicyError:
            raise
        except Exception as exc:  # a user's policy may fail in any way
            raise PolicyError(
                f"policy {cls.name!r} failed in price() on a wave of {signature!r} ({n} packed "
                f"tokens): {type(exc).__name__}: {exc}. Fix the policy's code."
            ) from None

    @staticmethod
    def _checked(
        signature: object, n: Any, m: Any, o: Any, s: Any, kind: object
    ) -> tuple[int, int, int, int | None]:
        """The wave's counts as ints, or a UsageError naming the argument that is wrong."""
        if not isinstance(signature, str):
            raise UsageError(f"must be a str; got {signature!r}.", argument="signature")
        if kind not in KINDS:
            raise UsageError(f"must be one of {', '.join(KINDS)}; got {kind!r}.", argument="kind")
        n, m, o = _count(n, "packed_tokens"), _count(m, "logical_tokens"), _count(o, "output_bytes")
        s = None if s is None else _count(s, "static_floor_bytes")
        if n <= 0:
            raise UsageError(f"must be > 0; got {n}.", argument="packed_tokens")
        if m < n:
            raise UsageError(f"must be >= packed_tokens ({n}); got {m}.", argument="logical_tokens")
        if o < 0:
            raise UsageError(f"must be >= 0; got {o}.", argument="output_bytes")
        if s is not None and s < 0:
            raise UsageError(
                f"must be >= 0, or None for no floor; got {s}.", argument="static_floor_bytes"
            )
        return n, m, o, s

    def _unknown(self, signature: str) -> None:
        """Warn once about a signature asked again after readings came in, none of it: a
        mistyped or never-recorded signature prices nothing and admits nothing."""
        first = self._asked.get(signature)
        if first is None and self._traced is not None and signature not in self._traced:
            if len(self._asked) < 10_000:  # warned once (past the bound: not again)
                self._asked[signature] = -1
                self._warn_unknown(
                    signature, f"the trace it was warm-started from has no reading of signature "
                    f"{signature!r}: it has no price for it and admits none of its waves. "
                )  # fmt: skip
        elif first is None:
            if len(self._asked) < 10_000:  # a bound on what a stream of new names costs
                self._asked[signature] = self._observed
        elif 0 <= first < self._observed:
            self._asked[signature] = -1  # said once
            self._warn_unknown(
                signature, f"the Pricer has been taught {self._observed:,} readings, none of "
                f"signature {signature!r}: it has no price for it and admits none of its waves. "
            )  # fmt: skip

    def _warn_unknown(self, signature: str, what: str) -> None:
        """The one :class:`PricerWarning` of a signature without a price: ``what``, then
        the signatures the Pricer knows."""
        known = sorted(self._profiles)
        shown = ", ".join(map(repr, known[:10])) + (
            f" (and {len(known) - 10} more)" if len(known) > 10 else ""
        )
        warnings.warn(
            f"warmfit: {what}"
            + (f"It knows {shown}." if known else "It knows no signature yet.")
            + " Is the signature mistyped, or are its waves not measured (Pricer.wave, or "
            "an enabled Recorder(pricer=...))?",
            PricerWarning,
            stacklevel=5,
        )

    def admits(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int | None = None,
        *,
        budget_bytes: int | str,
        output_bytes: int = 0,
        static_floor_bytes: int | None = None,
        kind: str = "flat",
        unpriced: bool = False,
    ) -> bool:
        """Whether the wave fits ``budget_bytes`` (the memory free above the baseline when
        it is admitted; bytes, or a size such as ``"70GiB"``): its estimate ``<=
        budget_bytes``, as SPEC §7 admits, and it is smaller than every wave of the
        signature and kind that ran out of memory in :meth:`wave` under a budget at
        least this one (SPEC §9).

        A wave with no price (no profile, no floor) has nothing to say it fits:
        it is not admitted, unless ``unpriced=True``.
        """
        budget = self._budget(budget_bytes)
        estimate = self.price(
            signature, packed_tokens, logical_tokens, output_bytes=output_bytes,
            static_floor_bytes=static_floor_bytes, kind=kind,
        )  # fmt: skip
        bound = self.oom_tokens(signature, budget, kind=kind)
        if bound is not None and _count(packed_tokens, "packed_tokens") >= bound:
            return False
        return unpriced if estimate is None else estimate <= budget

    @staticmethod
    def _budget(value: object) -> float:
        """A budget argument: bytes (an int, or a float as replay's ``--budget`` takes
        it), or a size such as ``"70GiB"`` (:func:`warmfit.trainer.budget.budget_bytes`)."""
        if isinstance(value, float) and not isinstance(value, bool):
            if not value >= 0:  # NaN and negatives
                raise UsageError(
                    f"must be a number of bytes >= 0 or a size such as '70GiB'; got {value!r}.",
                    argument="budget_bytes",
                )
            return float(value)  # a numpy float too: admits() answers a bool, not numpy.bool
        return _budget_bytes(value)

    def oom_tokens(
        self, signature: str, budget_bytes: float | str, *, kind: str = "flat"
    ) -> int | None:
        """The smallest packed-token count of ``signature`` (and ``kind``) that ran out of
        memory in :meth:`wave` under a budget at least ``budget_bytes``: no size at or
        above it is admitted under this budget (SPEC §9). None: none did.

        Only the Pricer's own waves count: a trace's OOM readings (``observe_row``,
        ``from_trace``) say nothing of the budget they ran under.
        """
        budget = self._budget(budget_bytes)
        return oom_bound(
            ((w.packed_tokens, w.budget_bytes) for w in self.ooms
             if w.signature == signature and w.kind == kind),
            budget,
        )  # fmt: skip

    def max_tokens(
        self,
        signature: str,
        budget_bytes: int | str,
        *,
        logical_tokens: Callable[[int], int] | None = None,
        output_bytes: int | Callable[[int], int] = 0,
        static_floor_bytes: int | None = None,
        kind: str = "flat",
        cap: int = SEARCH_CAP_TOKENS,
    ) -> int | None:
        """The largest packed-token count :meth:`admits` under ``budget_bytes`` now, exact
        to the token; None when the signature has no price (no profile, no floor).

        The search ``warmfit recommend`` runs (:func:`warmfit.replay.admission.max_admitted`,
        one implementation): the price at ``n`` is :meth:`price`'s, with
        ``logical_tokens(n)`` logical tokens (default ``n``: no sharing) and
        ``output_bytes`` (bytes, or ``output_bytes(n)``); below the smallest size
        that ran out of memory under this budget (:meth:`oom_tokens`); ``cap``
        (default 2**40) when every size up to it fits. A Pricer that learned a
        trace's rank (:meth:`from_trace`) admits what ``recommend`` says that rank
        admits, given its sharing (``lambda n: n * L // P``) and last wave's
        outputs and floor. Exact for a price monotone in ``n``, as every built-in
        policy's is.
        """
        budget = self._budget(budget_bytes)
        if kind not in KINDS:
            raise UsageError(f"must be one of {', '.join(KINDS)}; got {kind!r}.", argument="kind")
        cap = _count(cap, "cap")
        if cap < 1:
            raise UsageError(f"must be >= 1; got {cap}.", argument="cap")

        def estimate(n: int) -> int | None:
            m = n if logical_tokens is None else logical_tokens(n)
            o = output_bytes(n) if callable(output_bytes) else output_bytes
            try:
                return self.price(
                    signature, n, m, output_bytes=o, static_floor_bytes=static_floor_bytes,
                    kind=kind,
                )  # fmt: skip
            except EstimateOverflowError:
                return OVERFLOW

        return max_admitted(estimate, budget, self.oom_tokens(signature, budget, kind=kind), cap)

    # ------------------------------------------------------------------ measuring

    def wave(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int | None = None,
        *,
        output_bytes: int = 0,
        static_floor_bytes: int | None = None,
        kind: str = "flat",
        budget_bytes: int | str | None = None,
        padded_tokens: int | None = None,
        sum_sq_tokens: int | None = None,
    ) -> PricerWave:
        """A context manager for one wave that teaches the Pricer its readings::

            with pricer.wave("train", n, budget_bytes=budget) as w:
                loss = model(batch).loss
                w.forward_done()
                loss.backward()
            if w.oom: ...                         # ran out of memory: survived, learned

        The readings are taken as the recorder takes them (entering takes the
        baseline, ``forward_done()`` the ``forward`` reading, leaving the
        ``caller`` one; SPEC §1), by the enabled :class:`~warmfit.recorder.Recorder`
        given this Pricer (``Recorder(pricer=pricer)``), which writes them to its
        trace, or, with none, by the Pricer's own meter (``Pricer(meter=...)``,
        else the recorder's meter for ``device``), which writes nothing. Either
        way the Pricer observes the same readings, so a trace replays to the
        prices used. ``w.estimate_bytes`` is the wave's price when it was entered.

        An out-of-memory error (``torch.OutOfMemoryError``, any allocator's)
        leaving the block is survived: its reading is an OOM reading, the
        frames it unwound are cleared, the collector and the allocator's cache
        give back what they can, ``w.oom`` is True, and the Pricer admits no wave
        of this signature at or above this size under a budget not larger than
        ``budget_bytes`` (None: any budget; SPEC §9). Any other exception passes.
        """
        budget = None if budget_bytes is None else self._budget(budget_bytes)
        for name, value in (
            ("packed_tokens", packed_tokens),
            ("logical_tokens", logical_tokens),
            ("output_bytes", output_bytes),
            ("static_floor_bytes", static_floor_bytes),
        ):
            if isinstance(value, bool) or _bool_dtype(value):  # True is not a count (price's)
                _count(value, name)
        recorder = self._recorder() if self._recorder is not None else None
        if recorder is None or recorder._closed:
            recorder = self._meter_recorder()
        inner = recorder.wave(
            signature, packed_tokens, logical_tokens, output_bytes, static_floor_bytes, kind,
            padded_tokens=padded_tokens, sum_sq_tokens=sum_sq_tokens,
        )  # fmt: skip
        count = (
            packed_tokens if type(packed_tokens) is int else _count(packed_tokens, "packed_tokens")
        )
        return PricerWave(self, inner, signature, kind, count, budget)

    def _meter_recorder(self) -> Recorder:
        """The recorder that measures this Pricer's waves and writes nothing (made once)."""
        if self._metering is None:
            if self._meter_closed:  # a closed meter reads no new bytes: every wave 0 bytes
                raise UsageError(
                    "wave(): this Pricer's meter was closed by close() and measures nothing "
                    "more; give a Pricer a new meter (Pricer(meter=...)), or none to have one "
                    "made at its first wave after each close()."
                )
            from warmfit.recorder.recorder import Recorder  # torch, only when measuring

            self._metering = Recorder.meter_only(self, meter=self._meter, device=self._device)
        return self._metering

    def _use_recorder(self, recorder: Recorder) -> None:
        """Called by an enabled ``Recorder(pricer=self)``: its waves take this Pricer's
        readings from now on (one meter, one set of readings, written to the trace)."""
        import weakref

        self._recorder = weakref.ref(recorder)

    def _learn_oom(self, wave: OomWave) -> None:
        self.ooms.append(wave)

    # ------------------------------------------------------------------ inspection

    @property
    def profiles(self) -> Mapping[str, Policy]:
        """Each signature's profile, by signature (read them; do not change them)."""
        return dict(self._profiles)

    def close(self) -> None:
        """Stop the Pricer's own meter (a CPU meter watches every operator while open).

        A meter the Pricer made is made again at the next :meth:`wave`; a meter given
        (``Pricer(meter=...)``) is closed for good, so a later :meth:`wave` without an
        enabled recorder is a :class:`~warmfit.errors.UsageError`."""
        if self._metering is not None:
            self._metering.close()
            self._metering = None
            self._meter_closed = self._meter is not None

    def __repr__(self) -> str:
        return (
            f"Pricer({self.policy.name!r}, safety_factor={self.safety_factor:g}, "
            f"{len(self._profiles)} signatures)"
        )


class PricerWave:
    """One wave of :meth:`Pricer.wave`: ``forward_done()``, then ``oom`` and
    ``estimate_bytes`` once it has run."""

    __slots__ = ("_inner", "_pricer", "budget_bytes", "kind", "oom", "packed_tokens", "signature")

    def __init__(
        self,
        pricer: Pricer,
        inner: Any,
        signature: str,
        kind: str,
        packed_tokens: int,
        budget_bytes: float | None,
    ) -> None:
        self._pricer = pricer
        self._inner = inner
        self.signature = signature
        self.kind = kind
        self.packed_tokens = packed_tokens
        self.budget_bytes = budget_bytes
        #: Whether the wave ran out of memory (and the error was survived).
        self.oom = False

    @property
    def estimate_bytes(self) -> int | None:
        """The wave's price when it was entered (None: it had none)."""
        estimate: int | None = self._inner.estimate_bytes
        return estimate

    def __enter__(self) -> PricerWave:
        self._inner.__enter__()
        return self

    def forward_done(self) -> None:
        """Take the ``forward`` reading: the forward has returned its outputs."""
        self._inner.forward_done()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._inner.__exit__(exc_type, exc, tb)  # the reading, OOM marked, observed
        if exc is None or not _is_out_of_memory(exc):
            return False
        self.oom = True
        budget = self.budget_bytes  # a whole number of bytes as an int; a fraction, inf kept
        if type(budget) is float and budget.is_integer():
            budget = int(budget)
        self._pricer._learn_oom(OomWave(self.signature, self.kind, self.packed_tokens, budget))
        _free(tb)
        return True  # survived: the trainer's loop goes on


def _listed(streams: list[tuple[str, int]]) -> str:
    """Streams as a refusal names them: the first ten, then how many more."""
    listed = ", ".join(f"run {r!r} rank {k}" for r, k in streams[:10])
    return listed + (f" (and {len(streams) - 10} more)" if len(streams) > 10 else "")


def _is_out_of_memory(exc: BaseException) -> bool:
    from warmfit.recorder.recorder import is_out_of_memory

    return is_out_of_memory(exc)


def _free(tb: TracebackType | None) -> None:
    """Give back what an out-of-memory wave held: the locals of the frames it unwound
    (their tensors), then the collector's garbage and the allocator's cached blocks."""
    if tb is not None:
        traceback.clear_frames(tb)
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # freeing is best effort; the wave is survived all the same
        pass


__all__ = ["ROW_COLUMNS", "OomWave", "Pricer", "PricerWarning", "PricerWave"]
