"""Memory budgets: as a person writes them (``"70GiB"``), and as the device has one now.

- :func:`budget_bytes`: a budget argument (an int of bytes, or a size such as
  ``"70GiB"`` or ``"128.8GB"``, read by the one parser,
  :func:`warmfit.show.units.parse_bytes`) as bytes, or a :class:`UsageError`;
  every budget argument of the Pricer and the sampler goes through it.
- :func:`device_budget`: the bytes a wave may use on the device now: free
  plus the allocator's reusable reserved bytes, less a reserve, the smallest
  over the ranks of the default process group when one is initialised (every
  rank must fit the wave they run together).

torch is imported only by :func:`device_budget`.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from warmfit.errors import UsageError
from warmfit.show.units import parse_bytes


def budget_bytes(value: object, argument: str = "budget_bytes") -> int:
    """``value`` (bytes as an int, or a size such as ``"70GiB"``) as whole bytes >= 0.

    >>> budget_bytes("8MB"), budget_bytes("70GiB"), budget_bytes(1024)
    (8000000, 75161927680, 1024)
    >>> budget_bytes(-1)
    Traceback (most recent call last):
    ...
    warmfit.errors.UsageError: budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got -1.
    """
    if isinstance(value, str):
        try:
            value = parse_bytes(value)
        except ValueError as exc:
            raise UsageError(str(exc), argument=argument) from None
    elif not isinstance(value, bool) and hasattr(value, "__index__"):
        # a numpy integer, a 0-d integer tensor; a float tensor, or one of several
        # elements, raises TypeError from __index__: kept as given, refused below
        with contextlib.suppress(TypeError):
            value = value.__index__()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(
            f"must be a number of bytes >= 0 or a size such as '70GiB'; got {value!r}.",
            argument=argument,
        )
    return value


def device_budget(reserve: float = 0.03, device: Any = None) -> int:
    """The bytes a wave may use on the accelerator now, for ``admits``,
    ``max_tokens`` and ``BudgetSampler``.

    ``free + (reserved - allocated) - int(reserve * total)`` from torch's own
    counters (``mem_get_info``, ``memory_reserved``, ``memory_allocated``):
    what the driver has free, plus what the caching allocator holds but no
    tensor uses (it reuses it before asking the driver), less ``reserve``, a
    fraction of the device's total memory kept back for what the counters do
    not see (the CUDA context's growth, other processes, fragmentation); 0 at
    least. When a default ``torch.distributed`` process group is initialised,
    the smallest over its ranks (an all-reduce with MIN: call it on every rank
    together), since a wave the ranks run together must fit each of them.

    ``device``: the accelerator to ask (default the current one). No
    accelerator is a :class:`UsageError`: a CPU has no allocator budget to
    read; give the budget yourself.
    """
    if isinstance(reserve, bool) or not isinstance(reserve, int | float):
        raise UsageError(f"must be a fraction in [0, 1); got {reserve!r}.", argument="reserve")
    if not (math.isfinite(reserve) and 0 <= reserve < 1):
        raise UsageError(f"must be a fraction in [0, 1); got {reserve!r}.", argument="reserve")
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            "device_budget(): no CUDA device to read a budget from; give the budget in bytes "
            "(or a size such as '70GiB') instead."
        )
    index = torch.cuda.current_device() if device is None else torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    free, total = torch.cuda.mem_get_info(index)
    reusable = int(torch.cuda.memory_reserved(index)) - int(torch.cuda.memory_allocated(index))
    budget = max(0, int(free) + max(0, reusable) - int(reserve * int(total)))
    return _min_over_ranks(torch, budget)


def _min_over_ranks(torch: Any, budget: int) -> int:
    """``budget``, the smallest over the default process group's ranks when it is
    initialised (an all-reduce with MIN on a tensor of the group's device)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return budget
    backend = dist.get_backend()
    on = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else "cpu"
    value = torch.tensor([budget], dtype=torch.int64, device=on)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item())


__all__ = ["budget_bytes", "device_budget"]
