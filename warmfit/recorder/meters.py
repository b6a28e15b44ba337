"""Meters: where the recorder reads allocated and peak bytes.

A meter answers three questions as cheaply as it can: how many bytes are
allocated now (:meth:`Meter.allocated_bytes`), the peak since the last reset
(:meth:`Meter.peak_bytes`), and it resets that peak to the current allocation
(:meth:`Meter.reset_peak`). Two meters exist:

- :class:`AcceleratorMeter` reads a GPU's caching-allocator statistics through
  ``torch.accelerator`` (or ``torch.cuda`` on older torch), the counters a
  trainer already uses;
- :class:`CpuMeter` counts the exact bytes of live CPU tensor storages, seen
  through a ``TorchDispatchMode``, so that CPU runs give real, deterministic
  readings.

torch is imported lazily: importing this module does not import it.
"""

from __future__ import annotations

import gc
import platform
import threading
import warnings
import weakref
from typing import Any, Protocol

from warmfit.errors import UsageError


class Meter(Protocol):
    """What the recorder needs from a memory counter."""

    #: Short name stored in the trace metadata (``warmfit.meter``).
    name: str
    #: The device measured, in words (``warmfit.device``).
    device_name: str

    def allocated_bytes(self) -> int: ...

    def peak_bytes(self) -> int: ...

    def reset_peak(self) -> None: ...

    def close(self) -> None: ...


# A meter may also have ``has_reserved = True`` and ``reserved_peak_bytes()``: the peak
# of the allocator's reserved pool since the last reset_peak(). The recorder then
# writes it to the optional column ``reserved_peak_bytes`` (docs/reference/recorder.md).


# --------------------------------------------------------------------------- accelerator


class AcceleratorMeter:
    """A GPU's allocator counters: ``memory_allocated``, its peak, and its reset.

    Prefers the device-generic ``torch.accelerator`` memory API (torch >= 2.9)
    and falls back to ``torch.cuda``. Where torch exposes the raw statistics
    call behind ``memory_allocated`` (a nested dict read in C++), the meter
    reads it directly rather than through the flattened ``memory_stats`` dict,
    after checking once that both agree.
    """

    def __init__(self, device: Any = None) -> None:
        import torch

        self._device = torch.device(device) if device is not None else None
        accel = getattr(torch, "accelerator", None)
        if accel is not None and hasattr(accel, "memory_allocated") and accel.is_available():
            kind = accel.current_accelerator().type
            index = self._index(torch, kind)
            self.name = "torch.accelerator"
            self._allocated = lambda: accel.memory_allocated(index)
            self._peak = lambda: accel.max_memory_allocated(index)
            self._reset = lambda: accel.reset_peak_memory_stats(index)
            reserved = getattr(accel, "max_memory_reserved", None)
            self._reserved = None if reserved is None else (lambda: reserved(index))
            raw = getattr(torch._C, "_accelerator_getDeviceStats", None)
        elif torch.cuda.is_available():
            kind = "cuda"
            index = self._index(torch, kind)
            self.name = "torch.cuda"
            self._allocated = lambda: torch.cuda.memory_allocated(index)
            self._peak = lambda: torch.cuda.max_memory_allocated(index)
            self._reset = lambda: torch.cuda.reset_peak_memory_stats(index)
            self._reserved = lambda: torch.cuda.max_memory_reserved(index)
            raw = getattr(torch._C, "_cuda_memoryStats", None)
        else:
            raise UsageError(
                "no GPU or other accelerator is available to measure; record on CPU "
                "instead (device='cpu')."
            )
        self.index = index
        #: Whether the reserved pool's peak can be read (reset with the allocated peak).
        self.has_reserved = self._reserved is not None
        self.device_name = _accelerator_name(torch, kind, index)
        if raw is not None:
            self._use_raw_stats(raw, index)

    def _index(self, torch: Any, kind: str) -> int:
        if self._device is not None and self._device.type != kind:
            raise UsageError(
                f"the recorder was asked to measure {self._device}, but the accelerator "
                f"here is {kind}; pass device='{kind}' or device='cpu'."
            )
        if self._device is not None and self._device.index is not None:
            return int(self._device.index)
        return (
            int(torch.accelerator.current_device_index())
            if kind != "cuda"
            else int(torch.cuda.current_device())
        )

    def _use_raw_stats(self, raw: Any, index: int) -> None:
        """Read the allocator's nested statistics dict directly when it agrees."""

        def current() -> int:
            return int(raw(index)["allocated_bytes"]["all"]["current"])

        def peak() -> int:
            return int(raw(index)["allocated_bytes"]["all"]["peak"])

        def reserved() -> int:
            return int(raw(index)["reserved_bytes"]["all"]["peak"])

        try:
            agrees = current() == int(self._allocated()) and peak() == int(self._peak())
        except Exception:  # a torch whose raw dict has another shape: keep the public API
            return
        if agrees:
            self._allocated, self._peak = current, peak
        if self._reserved is not None:
            try:
                if reserved() == int(self._reserved()):
                    self._reserved = reserved
            except Exception:  # keep the public call
                pass

    def allocated_bytes(self) -> int:
        return int(self._allocated())

    def peak_bytes(self) -> int:
        return int(self._peak())

    def reset_peak(self) -> None:
        self._reset()  # resets the reserved pool's peak too

    def reserved_peak_bytes(self) -> int:
        """The allocator's reserved-pool peak since the last reset (``has_reserved`` only)."""
        assert self._reserved is not None
        return int(self._reserved())

    def close(self) -> None:
        pass


def _accelerator_name(torch: Any, kind: str, index: int) -> str:
    try:
        if kind == "cuda":
            return f"{torch.cuda.get_device_name(index)} (cuda:{index})"
        module = getattr(torch, kind, None)
        if module is not None and hasattr(module, "get_device_name"):
            return f"{module.get_device_name(index)} ({kind}:{index})"
    except Exception:  # a name is metadata only; never fail a recording for it
        pass
    return f"{kind}:{index}"


# --------------------------------------------------------------------------- cpu


class _StorageRef(weakref.ref[Any]):
    """A weak reference to a storage that remembers its key and counted size."""

    __slots__ = ("key", "nbytes")
    key: int
    nbytes: int


class CpuMeter:
    """Exact live bytes of CPU tensor storages, and their peak since the last reset.

    While the meter is open, a ``TorchDispatchMode`` sees every operator the
    thread runs (backward included). Each CPU storage an operator returns is
    counted once, by its size in bytes, and a weak reference uncounts it when
    torch frees it; views and in-place results share their storage and add
    nothing. Storages alive when the meter opens (model weights) are found
    through the garbage collector and counted in the baseline. The count is
    deterministic: the same program gives the same bytes on every run.

    It does not see tensors created on other threads until an operator on this
    thread returns them, nor memory a C++ kernel allocates and frees inside
    one operator (a CPU kernel's scratch space); compiled graphs
    (``torch.compile``) are seen as their outputs.

    >>> import torch
    >>> meter = CpuMeter()
    >>> before = meter.allocated_bytes()
    >>> x = torch.empty(1000, dtype=torch.float32)
    >>> meter.allocated_bytes() - before
    4000
    >>> del x
    >>> meter.allocated_bytes() - before
    0
    >>> meter.close()
    """

    name = "warmfit.cpu-storages"
    #: CPU storages have no reserved pool: the recorder writes no reserved column.
    has_reserved = False

    def __init__(self) -> None:
        import torch

        self._torch_tensor = torch.Tensor
        self._refs: dict[int, _StorageRef] = {}
        self._live = 0
        self._peak = 0
        self._owner = threading.get_ident()
        self._on_free = self._make_on_free()
        self.device_name = _cpu_name()
        with warnings.catch_warnings():  # some modules warn when their attributes are read
            warnings.simplefilter("ignore")
            for obj in gc.get_objects():
                if isinstance(obj, torch.Tensor):
                    self._track_tensor(obj)
        self._peak = self._live
        self._mode: Any = _dispatch_mode_class()(self)
        self._mode.__enter__()
        self._open = True

    def _make_on_free(self) -> Any:
        refs = self._refs
        meter = weakref.ref(self)

        def on_free(ref: _StorageRef) -> None:
            if refs.get(ref.key) is ref:
                del refs[ref.key]
                owner = meter()
                if owner is not None:
                    owner._live -= ref.nbytes

        return on_free

    def _track_tensor(self, tensor: Any) -> None:
        """Count a tensor's storage if it is a CPU storage not counted yet."""
        try:
            if tensor.device.type != "cpu":
                return
            storage = tensor.untyped_storage()
        except Exception:  # sparse, meta, or a subclass without one storage
            return
        key = storage._cdata
        nbytes = storage.nbytes()
        ref = self._refs.get(key)
        if ref is None:
            ref = _StorageRef(storage, self._on_free)
            ref.key = key
            ref.nbytes = nbytes
            self._refs[key] = ref
            self._live += nbytes
        elif ref.nbytes != nbytes:  # resized in place (an out= result, resize_)
            self._live += nbytes - ref.nbytes
            ref.nbytes = nbytes
        else:
            return
        if self._live > self._peak:
            self._peak = self._live

    def _track_outputs(self, out: Any) -> None:
        if isinstance(out, self._torch_tensor):
            self._track_tensor(out)
        elif isinstance(out, (tuple, list)):
            for item in out:
                if isinstance(item, (tuple, list)):
                    self._track_outputs(item)
                elif isinstance(item, self._torch_tensor):
                    self._track_tensor(item)

    def allocated_bytes(self) -> int:
        return self._live

    def peak_bytes(self) -> int:
        return self._peak

    def reset_peak(self) -> None:
        self._peak = self._live

    def close(self) -> None:
        """Stop watching operators (the counts stay readable)."""
        if not self._open:
            return
        self._open = False
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        on_top = bool(_get_current_dispatch_mode() is self._mode)
        if threading.get_ident() == self._owner and on_top:
            self._mode.__exit__(None, None, None)
        else:  # another mode sits on top: leave the stack alone, stop counting
            self._mode.meter = None


class CappedCpuMeter(CpuMeter):
    """A :class:`CpuMeter` that simulates a device of ``cap_bytes``: an operator whose
    outputs take the live CPU tensor bytes past the cap raises
    ``torch.OutOfMemoryError`` (its outputs are dropped, as an allocation that failed),
    so that running out of memory, and surviving it, can be tried on a CPU. A
    simulation: a real allocator also fails on fragmentation and its own scratch space.

    >>> import torch
    >>> meter = CappedCpuMeter(meter_live() + 4_000)
    >>> ok = torch.empty(500, dtype=torch.float64)          # 4,000 bytes: at the cap
    >>> torch.empty(1, dtype=torch.float64)
    Traceback (most recent call last):
    ...
    torch.OutOfMemoryError: Simulated CPU out of memory. 8 bytes more would hold ...
    >>> meter.close()
    """

    name = "warmfit.cpu-storages-capped"

    def __init__(self, cap_bytes: int) -> None:
        if isinstance(cap_bytes, bool) or not isinstance(cap_bytes, int) or cap_bytes < 0:
            raise UsageError(
                f"must be a number of bytes >= 0; got {cap_bytes!r}.", argument="cap_bytes"
            )
        #: The live bytes past which an operator runs out of memory.
        self.cap_bytes = cap_bytes
        #: Operators that ran out of memory so far.
        self.ooms = 0
        super().__init__()

    def _track_outputs(self, out: Any) -> None:
        super()._track_outputs(out)
        if self._live > self.cap_bytes:
            import torch

            self.ooms += 1
            over = self._live
            raise torch.OutOfMemoryError(  # worded as allocators word it (" out of memory.")
                f"Simulated CPU out of memory. {over - self.cap_bytes:,} bytes more would hold "
                f"{over:,} bytes of CPU tensors, over the cap of {self.cap_bytes:,} "
                "(warmfit CappedCpuMeter, a simulation)."
            )


def meter_live() -> int:
    """The bytes of live CPU tensor storages now (a meter opened and closed at once)."""
    meter = CpuMeter()
    try:
        return meter.allocated_bytes()
    finally:
        meter.close()


def _cpu_name() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import os

    return f"cpu: {model} ({os.cpu_count()} logical cores, {platform.machine()})"


_MODE_CLASS: Any = None


def _dispatch_mode_class() -> Any:
    """The dispatch mode class, defined on first use so that torch loads lazily."""
    global _MODE_CLASS
    if _MODE_CLASS is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _StorageCounter(TorchDispatchMode):
            def __init__(self, meter: CpuMeter) -> None:
                super().__init__()
                self.meter: CpuMeter | None = meter

            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                out = func(*args, **(kwargs or {}))
                if self.meter is not None:
                    self.meter._track_outputs(out)
                return out

        _MODE_CLASS = _StorageCounter
    return _MODE_CLASS


def make_meter(device: Any = None) -> Meter:
    """The meter for ``device``: a GPU's allocator, or live CPU storages.

    ``None`` picks the accelerator when one is available, else the CPU.
    """
    import torch

    if device is None:
        accel = getattr(torch, "accelerator", None)
        available = accel.is_available() if accel is not None else torch.cuda.is_available()
        return AcceleratorMeter() if available else CpuMeter()
    if torch.device(device).type == "cpu":
        return CpuMeter()
    return AcceleratorMeter(device)
