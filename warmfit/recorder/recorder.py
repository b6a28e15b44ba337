"""The :class:`Recorder`: one context manager per wave, readings to a crash-safe log.

A trainer wraps each wave of its micro-batch loop::

    recorder = Recorder("traces/my-run", run="ep1")
    for step in range(steps):
        for batch in waves:
            with recorder.wave("train/d4096", packed_tokens=n, logical_tokens=m,
                               output_bytes=logits_bytes) as wave:
                outputs = model(batch)
                wave.forward_done()            # the `forward` reading
                loss(outputs).backward()       # the caller's work inside the yield
            # leaving the block takes the `caller` reading
        optimizer.step()
        recorder.step()                         # marks the step, flushes the log
    recorder.close()                            # compacts the log into Parquet

Entering a wave takes the baseline (allocated bytes) and resets the meter's
peak. A ``caller`` reading is **whole** (SPEC §1) when the wave is ``flat``,
left without an exception, :meth:`Wave.forward_done` was called, no other
wave was entered inside it (which resets the counter) and the counter did not
fall below the wave's forward peak or its baseline (a reset the recorder did
not make).

A flat wave left without ``forward_done()`` still records its ``caller``
reading, but never as whole. SPEC §1 detects an untracked reset by the
counter falling below the forward peak; without a forward reading the only
check left is the baseline, and a reset while the forward's activations are
still allocated leaves the counter above the baseline, so it would pass
unseen and a too-low peak would seed the warm fit. An exception leaving the
wave records the reading of the phase it interrupted and is re-raised
unchanged; an out-of-memory error marks that reading ``oom``.
"""

from __future__ import annotations

import atexit
import contextlib
import operator
import os
import sys
import threading
import warnings
import weakref
from collections import deque
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol

from warmfit.errors import EstimateOverflowError, RecordingError, UsageError, whole_number
from warmfit.format.schema import (
    ESTIMATE_COLUMN,
    KINDS,
    LARGEST_INT,
    PADDED_COLUMN,
    RESERVED_COLUMN,
    SUM_SQ_COLUMN,
)
from warmfit.recorder.log import (
    LOG_NAME,
    Compaction,
    LogWriter,
    check_run_label,
    compact_log,
    existing_recording,
    log_schema,
    rank_dir,
    write_lost_readings,
)
from warmfit.recorder.meters import Meter, make_meter
from warmfit.run.signals import ctrl_c_ignored

#: Environment variables ``warmfit record`` sets for :meth:`Recorder.from_env`.
ENV_DIR: Final = "WARMFIT_RECORD_DIR"
ENV_RUN: Final = "WARMFIT_RECORD_RUN"
ENV_FLUSH: Final = "WARMFIT_RECORD_FLUSH_S"

#: Readings buffered before a flush is forced, whatever the time.
MAX_BUFFERED = 65_536

#: What ``_priced`` gives for a price that cannot be recorded (the wave runs unrecorded).
_SKIP: Final = -(2**64)


class WavePricer(Protocol):
    """What ``Recorder(pricer=...)`` asks of a pricer (such as
    ``warmfit.trainer.Pricer``): the price of a wave about to run, and each reading
    the recorder writes, to learn from."""

    def price(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int,
        *,
        output_bytes: int,
        static_floor_bytes: int | None,
        kind: str,
    ) -> int | None: ...

    def observe_row(self, row: dict[str, Any]) -> None: ...


class Wave:
    """One wave's context: ``with recorder.wave(...) as wave: ...``.

    Call :meth:`forward_done` when the forward returns; leaving the block
    takes the ``caller`` reading. A flat wave's ``caller`` reading can be
    whole only when :meth:`forward_done` was called (the module docstring
    says why).
    """

    __slots__ = (
        "_recorder",
        "baseline_bytes",
        "carried_peak_bytes",
        "carried_reserved_bytes",
        "estimate_bytes",
        "forward_peak_bytes",
        "interrupted",
        "kind",
        "logical_tokens",
        "output_bytes",
        "packed_tokens",
        "padded_tokens",
        "signature",
        "static_floor_bytes",
        "sum_sq_tokens",
        "wave",
    )

    def __init__(
        self,
        recorder: Recorder,
        signature: str,
        packed_tokens: int,
        logical_tokens: int,
        output_bytes: int,
        static_floor_bytes: int | None,
        kind: str,
        estimate_bytes: int | None = None,
        padded_tokens: int | None = None,
        sum_sq_tokens: int | None = None,
    ) -> None:
        self._recorder = recorder
        self.signature = signature
        self.packed_tokens = packed_tokens
        self.logical_tokens = logical_tokens
        self.output_bytes = output_bytes
        self.static_floor_bytes = static_floor_bytes
        self.kind = kind
        #: The price the trainer used for this wave, recorded on its readings (SPEC §8):
        #: ``wave(estimate_bytes=...)``, else the pricer's answer; None: none.
        self.estimate_bytes = estimate_bytes
        #: What the wave's batch holds, recorded on its readings when given (None: not).
        self.padded_tokens = padded_tokens
        self.sum_sq_tokens = sum_sq_tokens
        self.wave = -1
        self.baseline_bytes = 0
        self.forward_peak_bytes = -1  # the raw counter at forward_done; -1 before
        self.carried_peak_bytes = 0  # the peak before a nested wave reset the counter
        self.carried_reserved_bytes = 0  # the same for the reserved pool's peak
        self.interrupted = False  # a nested wave reset the counter inside this one

    def __enter__(self) -> Wave:
        self._recorder._enter(self)
        return self

    def forward_done(self) -> None:
        """Take the ``forward`` reading: the forward has returned its outputs."""
        self._recorder._forward_done(self)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._recorder._exit(self, exc)


class _NullWave:
    """A wave that records nothing: of a disabled recorder, or one the recorder skips.

    It keeps the rules a recorded wave keeps (``forward_done()`` once), so a
    trainer behaves the same whether it records or not.
    """

    __slots__ = ("_forward", "estimate_bytes")

    def __init__(self, estimate_bytes: int | None = None) -> None:
        self._forward = False
        #: The price given to ``wave()`` (a recorder that records nothing asks no pricer).
        self.estimate_bytes = estimate_bytes

    def __enter__(self) -> _NullWave:
        return self

    def forward_done(self) -> None:
        if self._forward:
            raise UsageError("forward_done() called twice in one wave.")
        self._forward = True

    def __exit__(self, *exc: object) -> None:
        pass


class RecorderWarning(UserWarning):
    """A wave the recorder cannot record: it runs as usual, and the recorder skips it."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocator running out of memory (any device).

    >>> is_out_of_memory(MemoryError()), is_out_of_memory(RuntimeError("CUDA out of memory."))
    (True, True)
    >>> is_out_of_memory(ValueError("bad shape"))
    False
    """
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ == "OutOfMemoryError" for cls in type(exc).__mro__):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return "out of memory" in text or "can't allocate memory" in text
    return False


def _count(name: str, value: Any) -> int:
    """``value`` as an int (:func:`~warmfit.errors.whole_number`), or a UsageError
    saying it was ``wave()``'s argument."""
    try:
        return whole_number(value, name)
    except UsageError as exc:
        raise UsageError(f"wave(): {exc}") from None


def _too_large(signature: str, **values: int | None) -> None:
    """Raise the UsageError for the first of ``values`` above :data:`LARGEST_INT`."""
    for name, value in values.items():
        if value is not None and value > LARGEST_INT:
            raise UsageError(
                f"wave({signature!r}): {name}={value:,} is above 2**63 - 1 ({LARGEST_INT:,}), "
                "the largest value a trace's column holds (int64). Pass the wave's real "
                "count or byte size (None where it has none)."
            )
    raise AssertionError("no value too large")  # pragma: no cover


def _detect_rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except ImportError:
        pass
    raw = os.environ.get("RANK", "0")
    try:
        rank = int(raw)
    except ValueError:
        raise UsageError(f"the RANK environment variable is {raw!r}, not a rank number.") from None
    if rank < 0:
        raise UsageError(f"the RANK environment variable is {rank}; ranks are >= 0.")
    return rank


class Recorder:
    """Records the waves of one rank to ``output_dir/run=<run>/rank=<rank>/``.

    ``run`` labels the run (default: the output directory's name); ``rank`` is
    read from ``torch.distributed`` when it is initialized, else from the
    ``RANK`` environment variable, else 0. ``device`` chooses the meter:
    ``None`` measures the accelerator when there is one, else CPU storages;
    ``meter`` passes one directly. Readings are flushed to the rank's
    write-ahead log at every :meth:`step`, every ``flush_interval_s`` seconds
    and every :data:`MAX_BUFFERED` readings; :meth:`close` compacts the log
    into the rank's Parquet trace. A recorder is also a context manager that
    closes on exit. With ``enabled=False`` it records nothing and costs
    nothing.

    ``pricer`` (see :class:`WavePricer`): a wave given no ``estimate_bytes`` is
    priced by ``pricer.price(...)`` when it is recorded, and that price is recorded
    (SPEC §8); after each reading the recorder writes, ``pricer.observe_row(row)``
    receives it (a dict of trace column names to values, as the log holds it).
    A recorder that records nothing asks and tells its pricer nothing.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike[str] | None,
        run: str | None = None,
        *,
        rank: int | None = None,
        device: Any = None,
        meter: Meter | None = None,
        flush_interval_s: float = 2.0,
        fsync: bool = True,
        enabled: bool = True,
        pricer: WavePricer | None = None,
    ) -> None:
        self.enabled = enabled and output_dir is not None
        self.pricer = pricer
        self._step = 0
        self._closed = False
        self._compaction: Compaction | None = None
        self._skipped: dict[str, int] = {}  # waves skipped, by the argument that was wrong
        if not self.enabled:
            self.output_dir = None
            self.run = run or ""
            self.rank = rank or 0
            return
        assert output_dir is not None
        self.output_dir = Path(output_dir)
        self.run = check_run_label(run or self.output_dir.resolve().name)
        self.rank = _detect_rank() if rank is None else int(rank)
        self.directory = rank_dir(self.output_dir, self.run, self.rank)
        if not flush_interval_s > 0:
            raise UsageError(f"flush_interval_s must be positive; got {flush_interval_s}.")
        found = existing_recording(self.directory)
        if found and not (self.directory / LOG_NAME).exists():
            raise UsageError(
                f"{self.directory} already holds a recording ({found[0].name}); record under "
                "another run label, or remove that directory first."
            )
        self.meter: Meter = meter if meter is not None else make_meter(device)
        self._reserved = (
            getattr(self.meter, "reserved_peak_bytes", None)
            if getattr(self.meter, "has_reserved", False)
            else None
        )
        try:
            # The log is created now, locked, so that a second recorder of this run
            # and rank (another process without RANK, or this one) is refused here.
            self._writer: LogWriter = LogWriter(
                self.directory / LOG_NAME,
                self.run,
                self.rank,
                self._metadata(),
                fsync,
                extra_columns=(ESTIMATE_COLUMN, PADDED_COLUMN, SUM_SQ_COLUMN, RESERVED_COLUMN)
                if self._reserved is not None
                else (ESTIMATE_COLUMN, PADDED_COLUMN, SUM_SQ_COLUMN),
            )
        except BaseException:
            self.meter.close()
            raise
        self._pid = os.getpid()
        #: A reading's columns as a pricer's observe_row receives them: the log's (run,
        #: rank, v1's others, estimate_bytes, padded_tokens, sum_sq_tokens, and
        #: reserved_peak_bytes where measured).
        self._row_names = tuple(self._writer.schema.names)
        self._rows: deque[tuple[Any, ...]] = deque()
        self._active: list[Wave] = []
        self._seq = 0
        self._next_wave = 0
        self._lock = threading.Lock()
        self._flush_failure: str | None = None  # the last failed flush, until one succeeds
        self._flush_at = MAX_BUFFERED  # buffered readings that force a flush
        self._stop = threading.Event()
        self._flusher = threading.Thread(
            target=_flush_periodically,
            args=(weakref.ref(self), self._stop, flush_interval_s),
            name=f"warmfit-recorder-flush-rank{self.rank}",
            daemon=True,
        )
        self._flusher.start()
        atexit.register(_close_at_exit, weakref.ref(self))
        attach = getattr(pricer, "_use_recorder", None)
        if attach is not None:  # a warmfit.Pricer's own waves take their readings here
            attach(self)

    @classmethod
    def meter_only(
        cls, pricer: WavePricer, meter: Meter | None = None, device: Any = None
    ) -> Recorder:
        """A recorder that takes readings and hands them to ``pricer`` only: no file,
        no log, no thread (``warmfit.Pricer.wave`` outside a recording). Its readings
        are those an enabled recorder takes, by the same code."""
        self = cls.__new__(cls)
        self.enabled = True
        self.pricer = pricer
        self._step = 0
        self._closed = False
        self._compaction = None
        self._skipped = {}
        self.output_dir = None
        self.run = ""
        self.rank = 0
        self.meter = meter if meter is not None else make_meter(device)
        self._reserved = (
            getattr(self.meter, "reserved_peak_bytes", None)
            if getattr(self.meter, "has_reserved", False)
            else None
        )
        extras: tuple[str, ...] = (ESTIMATE_COLUMN, PADDED_COLUMN, SUM_SQ_COLUMN)
        extras += (RESERVED_COLUMN,) if self._reserved is not None else ()
        self._writer = None  # type: ignore[assignment]
        self._row_names = tuple(log_schema(extras).names)
        self._rows = deque()
        self._active = []
        self._seq = 0
        self._next_wave = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._flush_failure = None
        self._flush_at = MAX_BUFFERED
        return self

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_env(cls, device: Any = None, pricer: WavePricer | None = None) -> Recorder:
        """The recorder ``warmfit record`` asks for, or a disabled one.

        ``warmfit record`` sets ``WARMFIT_RECORD_DIR`` (and
        ``WARMFIT_RECORD_RUN``); without them the recorder is disabled and
        records nothing. A recorder from the environment closes itself when
        the process exits. ``pricer``: as :class:`Recorder` takes it.
        """
        output_dir = os.environ.get(ENV_DIR)
        if not output_dir:
            return cls(None, enabled=False, pricer=pricer)
        flush = os.environ.get(ENV_FLUSH)
        try:
            interval = float(flush) if flush else 2.0
        except ValueError:
            raise UsageError(f"{ENV_FLUSH}={flush!r} is not a number of seconds.") from None
        return cls(
            output_dir,
            os.environ.get(ENV_RUN) or None,
            device=device,
            flush_interval_s=interval,
            pricer=pricer,
        )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ waves

    def wave(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int | None = None,
        output_bytes: int = 0,
        static_floor_bytes: int | None = None,
        kind: str = "flat",
        estimate_bytes: int | None = None,
        *,
        padded_tokens: int | None = None,
        sum_sq_tokens: int | None = None,
    ) -> Wave | _NullWave:
        """A context manager for one wave; see the module docstring.

        ``logical_tokens``: the tokens the wave's rows stand for, shared prefixes
        counted once per row (SPEC §1); None: ``packed_tokens`` (no sharing).
        ``output_bytes``: the bytes of what the forward returns and the caller
        keeps through the wave (logits, say), counted apart from the compute.

        ``estimate_bytes``: the price the trainer used for the wave, recorded on
        its readings (SPEC §8; ``wave.estimate_bytes``); when None, a recorder
        with a ``pricer`` records the pricer's price of the wave instead.

        ``padded_tokens`` and ``sum_sq_tokens`` describe the wave's batch, recorded
        on its readings when given (columns of the same names; replay never reads
        them, ``warmfit validate`` does): its tokens padding included (rows times
        width of a padded batch; ``>= packed_tokens``), and the sum over its
        sequences of their length squared (``> 0``). The integrations give both.

        The arguments are checked the same way whether the recorder records or
        not, so recording never changes what the trainer does. A wrong type (a
        float count, a signature that is not a non-empty str, an unknown kind)
        is a programming error: :class:`UsageError`. Values that cannot be
        recorded (``packed_tokens <= 0``, ``logical_tokens < packed_tokens``, a
        negative byte size or price) are not: the wave runs unrecorded, the first such
        wave per argument gives a :class:`RecorderWarning`, and
        :attr:`skipped_waves` counts them all. A pricer's price is checked in the
        same way (a wrong type names the pricer).
        """
        if not isinstance(signature, str) or not signature:
            raise UsageError(
                f"wave(signature={signature!r}): the signature must be a non-empty str "
                f"(got {type(signature).__name__})."
            )
        if kind not in KINDS:
            raise UsageError(
                f"wave({signature!r}, kind={kind!r}): kind must be one of " + ", ".join(KINDS) + "."
            )
        # Counts become ints here (a 0-d integer tensor gives its value), so a float or
        # a float tensor is refused now, not at the next flush. The fast path is one
        # type check per count.
        if type(packed_tokens) is not int:
            packed_tokens = _count("packed_tokens", packed_tokens)
        if logical_tokens is None:
            logical_tokens = packed_tokens
        elif type(logical_tokens) is not int:
            logical_tokens = _count("logical_tokens", logical_tokens)
        if type(output_bytes) is not int:
            output_bytes = _count("output_bytes", output_bytes)
        if static_floor_bytes is not None and type(static_floor_bytes) is not int:
            static_floor_bytes = _count("static_floor_bytes", static_floor_bytes)
        if estimate_bytes is not None and type(estimate_bytes) is not int:
            estimate_bytes = _count("estimate_bytes", estimate_bytes)
        if padded_tokens is not None and type(padded_tokens) is not int:
            padded_tokens = _count("padded_tokens", padded_tokens)
        if sum_sq_tokens is not None and type(sum_sq_tokens) is not int:
            sum_sq_tokens = _count("sum_sq_tokens", sum_sq_tokens)
        # The trace's integer columns are int64: a larger value could never be written,
        # and taken in it would fail the log's flush of the readings around it. One
        # max() over the values given is the fast path.
        if (
            max(
                packed_tokens,
                logical_tokens,
                output_bytes,
                static_floor_bytes or 0,
                estimate_bytes or 0,
                padded_tokens or 0,
                sum_sq_tokens or 0,
            )
            > LARGEST_INT
        ):
            _too_large(
                signature,
                packed_tokens=packed_tokens,
                logical_tokens=logical_tokens,
                output_bytes=output_bytes,
                static_floor_bytes=static_floor_bytes,
                estimate_bytes=estimate_bytes,
                padded_tokens=padded_tokens,
                sum_sq_tokens=sum_sq_tokens,
            )
        if (
            not (0 < packed_tokens <= logical_tokens)
            or output_bytes < 0
            or (static_floor_bytes is not None and static_floor_bytes < 0)
            or (estimate_bytes is not None and estimate_bytes < 0)
        ):
            return self._skip(
                signature, packed_tokens, logical_tokens, output_bytes, static_floor_bytes,
                estimate_bytes,
            )  # fmt: skip
        if padded_tokens is not None or sum_sq_tokens is not None:  # one test when not given
            shape = self._shape(signature, packed_tokens, padded_tokens, sum_sq_tokens)
            if shape is None:  # unrecorded, as for a bad count; the price given stays
                return _NullWave(estimate_bytes)
            padded_tokens, sum_sq_tokens = shape
        if not self.enabled:
            return _NullWave(estimate_bytes)
        if estimate_bytes is None and self.pricer is not None:
            estimate_bytes = self._priced(
                signature, packed_tokens, logical_tokens, output_bytes, static_floor_bytes, kind
            )
            if estimate_bytes is _SKIP:
                return _NullWave()
            if estimate_bytes is not None and estimate_bytes < 0:
                return self._skip(
                    signature, packed_tokens, logical_tokens, output_bytes, static_floor_bytes,
                    estimate_bytes, "the pricer's price",
                )  # fmt: skip
        return Wave(
            self, signature, packed_tokens, logical_tokens, output_bytes, static_floor_bytes, kind,
            estimate_bytes, padded_tokens, sum_sq_tokens,
        )  # fmt: skip

    def _shape(
        self,
        signature: str,
        packed_tokens: int,
        padded_tokens: int | None,
        sum_sq_tokens: int | None,
    ) -> tuple[int | None, int | None] | None:
        """``(padded_tokens, sum_sq_tokens)`` (ints already), or None: a value that cannot
        be recorded (the wave runs unrecorded, as for the other arguments)."""
        if padded_tokens is not None and padded_tokens < packed_tokens:
            argument = "padded_tokens"
            rule = f"padded_tokens={padded_tokens} is below packed_tokens={packed_tokens}"
        elif sum_sq_tokens is not None and sum_sq_tokens <= 0:
            argument, rule = "sum_sq_tokens", f"sum_sq_tokens={sum_sq_tokens} is not positive"
        else:
            return padded_tokens, sum_sq_tokens
        self._warn_skipped(signature, argument, rule)
        return None

    def _priced(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int,
        output_bytes: int,
        static_floor_bytes: int | None,
        kind: str,
    ) -> int | None:
        """The pricer's price of a wave (an int, or None: it has none)."""
        assert self.pricer is not None
        try:
            price = self.pricer.price(
                signature, packed_tokens, logical_tokens, output_bytes=output_bytes,
                static_floor_bytes=static_floor_bytes, kind=kind,
            )  # fmt: skip
        except EstimateOverflowError as exc:
            # Unrecorded, the wave would run unpriced: recorded, it runs unrecorded (a
            # price past int64 cannot be recorded), never stopped by the recording.
            self._warn_skipped(signature, "estimate_bytes", f"the pricer's price is {exc}")
            return _SKIP
        if price is None:
            return price
        if type(price) is not int:
            try:
                price = operator.index(price)
            except TypeError:
                raise UsageError(
                    f"wave({signature!r}): the pricer's price() must return an integer number "
                    f"of bytes or None; {type(self.pricer).__name__}.price() returned "
                    f"{price!r} of type {type(price).__name__}."
                ) from None
        if price > LARGEST_INT:  # as an overflow above: the wave runs, unrecorded
            self._warn_skipped(
                signature,
                "estimate_bytes",
                f"{type(self.pricer).__name__}.price() returned {price:,} bytes, above the "
                f"trace's largest value 2**63 - 1 ({LARGEST_INT:,})",
            )
            return _SKIP
        return price

    def _skip(
        self,
        signature: str,
        packed_tokens: int,
        logical_tokens: int,
        output_bytes: int,
        static_floor_bytes: int | None,
        estimate_bytes: int | None = None,
        priced_by: str = "estimate_bytes",
    ) -> _NullWave:
        """A wave whose values cannot be recorded: it runs unrecorded; warn once per argument
        (``priced_by``: where a negative price came from)."""
        if packed_tokens <= 0:
            argument, rule = "packed_tokens", f"packed_tokens={packed_tokens} is not positive"
        elif logical_tokens < packed_tokens:
            argument = "logical_tokens"
            rule = f"logical_tokens={logical_tokens} is below packed_tokens={packed_tokens}"
        elif output_bytes < 0:
            argument, rule = "output_bytes", f"output_bytes={output_bytes} is negative"
        elif static_floor_bytes is not None and static_floor_bytes < 0:
            argument = "static_floor_bytes"
            rule = f"static_floor_bytes={static_floor_bytes} is negative (None means no floor)"
        else:
            argument = "estimate_bytes"
            rule = (
                f"estimate_bytes={estimate_bytes} is negative (None means no price)"
                if priced_by == "estimate_bytes"
                else f"{priced_by} {estimate_bytes} is negative (None means no price)"
            )
        self._warn_skipped(signature, argument, rule)
        return _NullWave()

    def _warn_skipped(self, signature: str, argument: str, rule: str) -> None:
        """Count a skipped wave; warn at the first per argument (from ``wave()``'s caller)."""
        count = self._skipped.get(argument, 0)
        self._skipped[argument] = count + 1
        if count == 0:
            warnings.warn(
                f"warmfit: wave({signature!r}) is not recorded: {rule}. The wave runs as "
                "usual, unrecorded; later waves with this problem are skipped without another "
                "warning and counted (Recorder.skipped_waves, and the summary of 'warmfit "
                "record').",
                RecorderWarning,
                stacklevel=4,
            )

    @property
    def skipped_waves(self) -> int:
        """Waves not recorded because their values cannot be recorded (see :meth:`wave`)."""
        return sum(self._skipped.values())

    def _enter(self, wave: Wave) -> None:
        meter = self.meter
        if self._active:  # nested: this reset hides the open waves' peaks from the counter
            peak = meter.peak_bytes()
            reserved = self._reserved() if self._reserved is not None else 0
            for outer in self._active:
                outer.interrupted = True
                if peak > outer.carried_peak_bytes:
                    outer.carried_peak_bytes = peak
                if reserved > outer.carried_reserved_bytes:
                    outer.carried_reserved_bytes = reserved
        wave.baseline_bytes = meter.allocated_bytes()
        meter.reset_peak()
        wave.wave = self._next_wave
        self._next_wave += 1
        self._active.append(wave)

    def _forward_done(self, wave: Wave) -> None:
        if wave.forward_peak_bytes >= 0:
            raise UsageError(f"forward_done() called twice in wave {wave.wave}.")
        raw = self.meter.peak_bytes()
        wave.forward_peak_bytes = raw
        reserved = self._reserved_peak(wave)
        self._append(wave, "forward", False, max(raw, wave.carried_peak_bytes), False, reserved)

    def _reserved_peak(self, wave: Wave) -> int | None:
        """The reserved pool's peak over the reading's interval, when the meter has one."""
        if self._reserved is None:
            return None
        return max(int(self._reserved()), wave.carried_reserved_bytes)

    def _exit(self, wave: Wave, exc: BaseException | None) -> None:
        active = self._active
        if active and active[-1] is wave:
            active.pop()
        else:
            with contextlib.suppress(ValueError):
                active.remove(wave)
        raw = self.meter.peak_bytes()
        peak = max(raw, wave.carried_peak_bytes)
        reserved = self._reserved_peak(wave)
        forward_taken = wave.forward_peak_bytes >= 0
        if exc is not None:
            phase = "caller" if forward_taken else "forward"
            self._append(wave, phase, False, peak, is_out_of_memory(exc), reserved)
        elif wave.kind != "flat":  # split children and forward-only calls: forward only
            if not forward_taken:
                self._append(wave, "forward", False, peak, False, reserved)
        else:
            # Without forward_done() there is no forward peak to hold the counter to
            # (SPEC §1), so the reading is never whole: see the module docstring.
            whole = (
                forward_taken
                and not wave.interrupted
                and raw >= wave.forward_peak_bytes
                and raw >= wave.baseline_bytes
            )
            self._append(wave, "caller", whole, peak, False, reserved)

    def _append(
        self, wave: Wave, phase: str, whole: bool, peak: int, oom: bool, reserved: int | None
    ) -> None:
        row: tuple[Any, ...] = (
            self._seq,
            self._step,
            wave.wave,
            wave.signature,
            wave.kind,
            phase,
            whole,
            wave.packed_tokens,
            wave.logical_tokens,
            wave.output_bytes,
            wave.baseline_bytes,
            peak,
            wave.static_floor_bytes,
            oom,
            wave.estimate_bytes,
            wave.padded_tokens,
            wave.sum_sq_tokens,
        )
        if self._reserved is not None:
            row = (*row, reserved)
        self._rows.append(row)
        self._seq += 1
        if self.pricer is not None:  # the reading as the log holds it, to learn from
            values = (self.run, self.rank, *row)  # (the flush thread may have taken it)
            self.pricer.observe_row(dict(zip(self._row_names, values, strict=True)))
        if self._writer is None:  # meter_only(): the pricer's reading, not kept
            self._rows.clear()
        elif len(self._rows) >= self._flush_at:
            self._flush_or_warn()

    # ------------------------------------------------------------------ steps and files

    @property
    def current_step(self) -> int:
        """The optimizer step readings are labelled with (0 before the first step())."""
        return self._step

    @property
    def readings(self) -> int:
        """Readings taken so far."""
        return self._seq if self.enabled else 0

    def step(self) -> None:
        """Mark an optimizer step: later readings carry the next step; flush the log.

        A flush that fails (a full disk) does not stop the trainer: it warns on
        stderr, keeps the readings and tries again at the next flush.
        """
        self._step += 1
        if self.enabled:
            self._flush_or_warn()

    def flush(self) -> None:
        """Append the buffered readings to the write-ahead log as one batch.

        Raises the write's error when it fails; the log is then cut back to
        its last complete batch and the readings stay buffered for the next
        flush.
        """
        if not self.enabled or self._closed or os.getpid() != self._pid:
            return
        with self._lock:
            rows = self._rows
            count = len(rows)
            if not count:
                return
            batch = [rows.popleft() for _ in range(count)]
            try:
                refused = self._writer.append(batch)
            except BaseException:
                rows.extendleft(reversed(batch))  # keep them for the next try
                raise
        if refused:  # never again: each would fail every later flush with it
            row, why = refused[0]
            print(
                f"warmfit: warning: {len(refused):,} readings could not be written to "
                f"{self._writer.path} and are left out (the first: wave {row[2]} "
                f"{row[3]!r} {row[5]}: {why}); the readings around them are written. "
                "Check the values the trainer gave that wave.",
                file=sys.stderr,
            )

    def _flush_or_warn(self) -> None:
        """:meth:`flush`, warning once per run of failures instead of raising."""
        try:
            self.flush()
        except Exception as exc:
            if self._flush_failure is None:
                print(
                    f"warmfit: warning: could not write {len(self._rows):,} readings to "
                    f"{self._writer.path}: {exc}. They are kept in memory and written at "
                    "the next flush; close() says if any are lost.",
                    file=sys.stderr,
                )
            self._flush_failure = f"{type(exc).__name__}: {exc}"
            # Not again at the very next reading: at the next step(), periodic flush,
            # or MAX_BUFFERED readings from now.
            self._flush_at = len(self._rows) + MAX_BUFFERED
            return
        self._flush_at = MAX_BUFFERED
        if self._flush_failure is not None:
            print(
                f"warmfit: the readings are being written to {self._writer.path} again.",
                file=sys.stderr,
            )
            self._flush_failure = None

    def _metadata(self) -> dict[str, str]:
        import torch

        # the package this module belongs to is loaded before it: read its version there
        # rather than import it back (warmfit imports the Pricer, which measures with this)
        version = sys.modules["warmfit"].__version__
        return {
            "warmfit.meter": self.meter.name,
            "warmfit.device": self.meter.device_name,
            "warmfit.torch_version": str(torch.__version__),
            "warmfit.recorder": f"warmfit {version}",
        }

    def close(self) -> Compaction | None:
        """Flush, stop measuring and compact the log into the rank's Parquet file.

        Returns what compaction did (``None`` when nothing was recorded).
        Waves still open are not recorded. Calling it again does nothing, even
        after a first call that raised. If the last flush fails (a full disk),
        the recorder is closed all the same and :class:`RecordingError` says
        how many readings are lost; their count is also left in
        ``readings.lost`` beside the log, which keeps every batch flushed
        before for ``warmfit recover``. If compaction fails, the log is kept
        whole and :class:`RecordingError` says so.
        """
        if not self.enabled or self._closed or os.getpid() != self._pid:
            return self._compaction
        if self._writer is None:  # meter_only(): nothing to write
            self._closed = True
            self.meter.close()
            return None
        self._stop.set()
        self._flusher.join()
        writer = self._writer
        try:
            self.flush()
        except Exception as exc:
            self._closed = True
            lost = len(self._rows)
            self._rows.clear()
            with contextlib.suppress(Exception):  # the flush error is the one to report
                self.meter.close()
            with contextlib.suppress(OSError):
                write_lost_readings(writer.path, lost)
            writer.finish()
            writer.release()
            raise RecordingError(
                f"{lost:,} readings of rank {self.rank} could not be written to "
                f"{writer.path} ({type(exc).__name__}: {exc}) and are lost. The "
                f"{writer.readings:,} readings flushed before are in that log: free some "
                f"space, then run 'warmfit recover {self.output_dir}'.",
                lost_readings=lost,
            ) from exc
        except BaseException:
            self._closed = True
            with contextlib.suppress(Exception):
                self._release()
            raise
        self._closed = True
        self.meter.close()
        if writer.readings == 0:
            writer.discard()  # nothing was recorded: leave nothing behind
            return None
        writer.finish()
        skipped = {"warmfit.skipped_waves": str(self.skipped_waves)} if self._skipped else None
        try:
            self._compaction = compact_log(writer.path, skipped, held_fd=writer.fd)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # an I/O error, or a dependency's panic
            raise RecordingError(
                f"could not compact {writer.path} into a trace ({type(exc).__name__}: "
                f"{exc}). The log keeps every reading: free some space, then run "
                f"'warmfit recover {self.output_dir}'."
            ) from exc
        finally:
            writer.release()
        return self._compaction

    def _release(self) -> None:
        try:
            self.meter.close()
        finally:
            self._writer.release()

    @property
    def trace_path(self) -> Path | None:
        """The Parquet file :meth:`close` wrote, if any."""
        return self._compaction.trace if self._compaction else None


def _flush_periodically(
    recorder: weakref.ref[Recorder], stop: threading.Event, interval_s: float
) -> None:
    while not stop.wait(interval_s):
        alive = recorder()
        if alive is None:
            return
        alive._flush_or_warn()  # never raises: the trainer must not die of this thread
        del alive


def _close_at_exit(recorder: weakref.ref[Recorder]) -> None:
    """Close a recorder left open at interpreter exit; warn, never raise, on failure."""
    alive = recorder()
    if alive is None:
        return
    try:
        # the program is ending already (a first Ctrl-C may be why): a second one, typed
        # while the last readings are written, would stop the write and lose them
        with ctrl_c_ignored():
            alive.close()
    except Exception as exc:  # a traceback at exit helps no one; say what is left
        print(
            f"warmfit: warning: could not close the recorder of rank {alive.rank} at exit: {exc}",
            file=sys.stderr,
        )
