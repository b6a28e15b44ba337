"""The largest wave a policy admits under a budget: one search, for ``recommend`` and the Pricer.

SPEC §7 admits a wave when its estimate is ``<= budget``. The largest
admitted packed-token count is found by :func:`largest_admitted` (doubling,
then halving: exact to the token for a price that is monotone
non-decreasing in ``n``, as every built-in policy's is); :func:`max_admitted`
adds what both callers need around it: a size with no price (no profile, no
floor) admits nothing, an estimate past int64 (which replay refuses) is never
admitted, and a size that ran out of memory under the budget bounds the
answer below it (SPEC §9, :func:`oom_bound`).

``warmfit recommend`` (:mod:`warmfit.report.recommend`) and
:meth:`warmfit.Pricer.max_tokens` both call :func:`max_admitted`, so a Pricer
that has learned a trace's rank admits what ``recommend`` says that rank
admits, to the token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: The most packed tokens the search tries (2**40, about 1.1e12): a policy that prices
#: every size up to it within the budget admits "no limit".
SEARCH_CAP_TOKENS = 2**40

#: ``estimate(n) -> bytes`` of a wave of ``n`` packed tokens: None when it has no price,
#: and :data:`OVERFLOW` when its estimate is past int64.
EstimateFn = Callable[[int], "int | None"]

#: What an ``EstimateFn`` returns for an estimate past int64 (never admitted).
OVERFLOW = -1


def largest_admitted(admits: Callable[[int], bool], cap: int = SEARCH_CAP_TOKENS) -> int:
    """The largest ``n`` in ``1..cap`` with ``admits(n)``, for a predicate that holds up
    to some size and not beyond (0 when it fails at 1; ``cap`` when it holds there):
    doubling until it fails, then halving the interval, so ``admits(n)`` and not
    ``admits(n + 1)`` (or ``n == cap``).

    >>> largest_admitted(lambda n: 7 * n <= 1000), largest_admitted(lambda n: False)
    (142, 0)
    >>> largest_admitted(lambda n: True, cap=1000)
    1000
    """
    if cap < 1 or not admits(1):
        return 0
    low = 1  # admitted
    while True:
        high = min(2 * low, cap)
        if high == low:
            return cap
        if not admits(high):
            break
        low = high
    while high - low > 1:  # admits(low), not admits(high)
        middle = (low + high) // 2
        if admits(middle):
            low = middle
        else:
            high = middle
    return low


def oom_bound(ooms: Iterable[tuple[int, float | None]], budget_bytes: float) -> int | None:
    """The smallest packed-token count that ran out of memory under a budget at least
    ``budget_bytes`` (SPEC §9), of ``(packed_tokens, budget)`` OOM waves; None: none.

    An OOM under budget ``b`` says that size did not fit ``b``, so it does not fit
    any budget ``<= b``; an OOM whose budget is not known (``None``: a trace's
    reading, a wave priced without one) counts under every budget.

    >>> oom_bound([(4096, 10_000), (8192, None)], 9_000), oom_bound([(4096, 10_000)], 20_000)
    (4096, None)
    >>> oom_bound([(4096, 10_000), (8192, None)], 20_000)
    8192
    """
    sizes = [n for n, b in ooms if b is None or budget_bytes <= b]
    return min(sizes) if sizes else None


def max_admitted(
    estimate: EstimateFn,
    budget_bytes: float,
    oom_tokens: int | None = None,
    cap: int = SEARCH_CAP_TOKENS,
) -> int | None:
    """The largest packed-token count whose ``estimate`` is ``<= budget_bytes``, below
    ``oom_tokens`` (the smallest size that ran out of memory under this budget,
    :func:`oom_bound`; None: none), exact to the token; 0 when not even one token is
    admitted; None when ``estimate`` gives no price (no profile, no floor).

    >>> max_admitted(lambda n: 300 * n, 66_000), max_admitted(lambda n: 300 * n, 66_000, 150)
    (220, 149)
    >>> max_admitted(lambda n: None, 66_000) is None
    True
    """
    if estimate(1) is None:
        return None
    if oom_tokens is not None:
        cap = min(cap, oom_tokens - 1)

    def admits(n: int) -> bool:
        price = estimate(n)
        return price is not None and 0 <= price <= budget_bytes

    return largest_admitted(admits, cap)


__all__ = [
    "OVERFLOW",
    "SEARCH_CAP_TOKENS",
    "EstimateFn",
    "largest_admitted",
    "max_admitted",
    "oom_bound",
]
