"""A policy that takes its time, for the tests that stop a replay while it runs.

``Slow`` prices as max-merge, after sleeping :data:`PAUSE_S` at every price, so
that a replay of a few thousand waves lasts seconds on any machine: long
enough to send it a signal, or to stop one of its workers, mid-batch. It is
a free-form policy (the reference engine runs it), named ``module:Class`` on
the command line; the workers import it by that name. In a command started
with ``WARMFIT_TEST_WORKERS=always``, importing it also makes any replay use
worker processes (see below).
"""

from __future__ import annotations

import os
import time

import warmfit.run.workers
from warmfit.policies import MaxMerge, Policy, PriceRequest, Reading

# Worker processes for any trace, however small, in a command started with
# WARMFIT_TEST_WORKERS=always that names this policy: the replay asks after it has
# imported the policy (the early pool, started before, is then not used). Imported
# anywhere else (pytest collects this module's doctests), it changes nothing.
if os.environ.get("WARMFIT_TEST_WORKERS") == "always":
    warmfit.run.workers.WORKER_BYTES = 0

#: Seconds slept at each price.
PAUSE_S = 0.002


class Slow(Policy):
    """Max-merge, :data:`PAUSE_S` late at every price."""

    name = "slow"
    summary = "max-merge, slowly (a test policy)"

    def __init__(self) -> None:
        self._inner = MaxMerge()

    def observe(self, reading: Reading) -> None:
        self._inner.observe(reading)

    def price(self, request: PriceRequest) -> float | None:
        time.sleep(PAUSE_S)
        return self._inner.price(request)
