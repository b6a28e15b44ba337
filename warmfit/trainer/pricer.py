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

import os
from collections.abc import Iterable, Mapping
from typing import Any

from warmfit.errors import PolicyError, UsageError, whole_number
from warmfit.format.schema import KINDS
from warmfit.policies import Policy, PriceRequest, Reading, checked_class, get_policy
from warmfit.replay.reference import _checked_price
from warmfit.replay.semantics import (
    DEFAULT_SAFETY_FACTOR,
    check_budget,
    check_safety_factor,
    estimate_bytes,
    is_observed,
)

_INF = float("inf")

#: The columns of a reading :meth:`Pricer.observe_row` reads (trace format v1, SPEC §2).
ROW_COLUMNS = (
    "signature", "kind", "phase", "whole", "packed_tokens", "logical_tokens", "output_bytes",
    "baseline_bytes", "peak_bytes", "static_floor_bytes", "oom",
)  # fmt: skip


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

    __slots__ = ("_fresh", "_profiles", "policy", "safety_factor")

    def __init__(
        self,
        policy: str | type[Policy] = "warm-fit",
        safety_factor: float = DEFAULT_SAFETY_FACTOR,
    ) -> None:
        #: The policy class every profile is an instance of.
        self.policy: type[Policy] = _policy_class(policy)
        if isinstance(safety_factor, bool) or not isinstance(safety_factor, int | float):
            raise UsageError(
                f"must be a number (1.1 adds a 10% margin); got {safety_factor!r}.",
                argument="safety_factor",
            )
        #: The safety factor ``f`` of SPEC §3.
        self.safety_factor: float = check_safety_factor(safety_factor)
        self._profiles: dict[str, Policy] = {}
        # what a signature without a profile prices from (a fresh profile; price changes nothing)
        self._fresh: Policy = self.policy()

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
        lists what it holds.
        """
        from warmfit.format.trace import read_trace  # only for a warm start

        paths = [path] if isinstance(path, str | os.PathLike) else list(path)
        pricer = cls(policy, safety_factor)  # bad arguments fail before the trace is read
        readings = read_trace(paths)
        streams = readings.select("run", "rank").unique(maintain_order=True).rows()
        chosen = [
            (r, k) for r, k in streams if (run is None or r == run) and (rank is None or k == rank)
        ]
        held = ", ".join(f"run {r!r} rank {k}" for r, k in streams[:10])
        held += f" (and {len(streams) - 10} more)" if len(streams) > 10 else ""
        if not chosen:
            asked = f"run {run!r}" if rank is None else f"run {run!r} rank {rank}"
            asked = f"rank {rank}" if run is None else asked
            raise UsageError(f"the trace holds no readings of {asked}; it holds {held}.")
        if len(chosen) > 1:
            raise UsageError(
                f"the trace holds {len(chosen)} streams to choose from ({held}); a Pricer "
                "learns one rank's readings: give run= and rank=."
            )
        (run_label, rank_number) = chosen[0]
        stream = readings.filter((readings["run"] == run_label) & (readings["rank"] == rank_number))
        for row in stream.select(ROW_COLUMNS).iter_rows(named=True):
            pricer.observe_row(row)
        return pricer

    # ------------------------------------------------------------------ learning

    def observe_row(self, row: Mapping[str, Any]) -> None:
        """Learn from one reading, a mapping of trace v1 column names to values (a row of
        a trace, or of the recorder).

        As replay does (SPEC §3): the reading's signature's profile observes it,
        unless it ran out of memory or is a ``split_child`` wave's caller
        reading (:func:`warmfit.replay.semantics.is_observed`); its delta is
        ``max(0, peak - baseline)``. Columns beyond :data:`ROW_COLUMNS` (run,
        rank, seq, wave, step, estimate_bytes, ...) are not read.
        """
        try:
            kind, phase, oom = row["kind"], row["phase"], row["oom"]
            if not is_observed(kind, phase, oom):
                return
            signature = row["signature"]
            n, m, o = row["packed_tokens"], row["logical_tokens"], row["output_bytes"]
            delta = max(0, row["peak_bytes"] - row["baseline_bytes"])
            reading = Reading(n, m, delta, o, row["whole"], phase, kind, row["static_floor_bytes"])
        except KeyError as exc:
            raise UsageError(
                f"observe_row(): the reading has no {exc.args[0]!r} column; a reading maps "
                f"trace v1 column names to values ({', '.join(ROW_COLUMNS)})."
            ) from None
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
            and 0 < n <= m
            and o >= 0
            and (s is None or (type(s) is int and s >= 0))
            and type(signature) is str
            and kind in KINDS
        ):
            n, m, o, s = self._checked(signature, n, m, o, s, kind)
        profile = self._profiles.get(signature)
        if profile is None:
            profile = self._fresh
        cls = self.policy
        try:
            p = profile.price(PriceRequest(n, m, o, kind, s))
            if p is not None and not (type(p) is float and 0.0 <= p < _INF):  # usual: no check
                p = _checked_price(cls, p)
            return estimate_bytes(p, o, s, self.safety_factor)[0]
        except OverflowError:
            raise UsageError(
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
        n, m, o = (
            whole_number(n, "packed_tokens"),
            whole_number(m, "logical_tokens"),
            whole_number(o, "output_bytes"),
        )
        s = None if s is None else whole_number(s, "static_floor_bytes")
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

    def admits(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int | None = None,
        *,
        budget_bytes: int,
        output_bytes: int = 0,
        static_floor_bytes: int | None = None,
        kind: str = "flat",
        unpriced: bool = False,
    ) -> bool:
        """Whether the wave fits ``budget_bytes`` (the memory free above the baseline when
        it is admitted): its estimate ``<= budget_bytes``, as SPEC §7 admits.

        A wave with no price (no profile, no floor) has nothing to say it fits:
        it is not admitted, unless ``unpriced=True``.
        """
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int | float):
            raise UsageError(
                f"must be a number of bytes >= 0; got {budget_bytes!r}.", argument="budget_bytes"
            )
        check_budget(budget_bytes)
        estimate = self.price(
            signature, packed_tokens, logical_tokens, output_bytes=output_bytes,
            static_floor_bytes=static_floor_bytes, kind=kind,
        )  # fmt: skip
        return unpriced if estimate is None else estimate <= budget_bytes

    # ------------------------------------------------------------------ inspection

    @property
    def profiles(self) -> Mapping[str, Policy]:
        """Each signature's profile, by signature (read them; do not change them)."""
        return dict(self._profiles)

    def __repr__(self) -> str:
        return (
            f"Pricer({self.policy.name!r}, safety_factor={self.safety_factor:g}, "
            f"{len(self._profiles)} signatures)"
        )
