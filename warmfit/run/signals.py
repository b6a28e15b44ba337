"""Signals that end a command, and moments that must not be cut short.

A command ends on SIGINT (Ctrl-C: exit 130), SIGTERM (143), SIGHUP (129) and
SIGQUIT (131), each with one line, from the first line of warmfit that runs
(:mod:`warmfit.__main__` installs :func:`install` before it imports anything
else). The handler raises where the command is (:class:`Interrupted` for
Ctrl-C, :class:`Terminated` for the others, both ``KeyboardInterrupt``\\ s), so
that what the command started is ended on the way out.

A signal is never lost. The handler first records it (:func:`received`), then
raises; an exception raised from a signal handler can vanish (a library that
turns it into its own error and catches that, during start-up imports say), so
the command looks again at the moments that matter (:func:`raise_if_received`:
after its imports, before an output replaces a file, and when it ends). One raised
inside a finalizer (a ``__del__``, a weak reference's callback) is one Python can only
print, as "Exception ignored in ...", with a traceback: it is recorded already, so
:func:`install`'s hook leaves it unprinted and lets every other one through. The
handler stays installed: a second signal while the first one's exception is
already unwinding (its clean-up running) is recorded, not raised again, so the
clean-up finishes; one that comes after the first vanished raises again.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Final

#: The signals that end a command, and what the line says for each.
ENDING: Final = {
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGHUP: "terminated (SIGHUP: the terminal closed)",
    signal.SIGQUIT: "terminated (SIGQUIT)",
}

_received: int | None = None  # the first ending signal this process received
_reported = False  # whether its line has been printed
_finished = False  # whether the command is over (finish())
_deferring = False  # inside deferred(): a signal is recorded, raised at its end


class Stopped(KeyboardInterrupt):
    """A signal that ends the command, raised where the command is."""

    signum: int = signal.SIGINT

    @property
    def exit_code(self) -> int:
        """128 plus the signal's number, as a shell reports a process it ended."""
        return 128 + int(self.signum)

    @property
    def said(self) -> str:
        return ENDING.get(signal.Signals(self.signum), f"stopped (signal {int(self.signum)})")


class Interrupted(Stopped):
    """Ctrl-C (SIGINT)."""


class Terminated(Stopped):
    """SIGTERM, SIGHUP or SIGQUIT: the command ends as for Ctrl-C."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum


def stop_for(signum: int) -> Stopped:
    """The exception a signal raises."""
    return Interrupted() if signum == signal.SIGINT else Terminated(signum)


def as_stop(stop: KeyboardInterrupt) -> Stopped:
    """Python's own KeyboardInterrupt (raised before :func:`install`, or by code that
    raises it) as the Ctrl-C it stands for; a :class:`Stopped` as it is."""
    return stop if isinstance(stop, Stopped) else Interrupted()


def _handler(signum: int, frame: object) -> None:
    global _received
    if _received is None:
        _received = signum
    if _finished or _deferring or isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return  # the command is over, a block waits to end (deferred()), or a stop is
        # unwinding already: its clean-up runs
    raise stop_for(_received)


def finish() -> None:
    """The command is over: from now on a signal is recorded, not raised (the program
    looks at it last, as it exits: :func:`received`, :func:`held`)."""
    global _finished
    _finished = True


def _quiet_stops(
    hook: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], object]:
    """``sys.unraisablehook`` that prints nothing for a :class:`Stopped` (raised in a
    finalizer: recorded, raised again at the next moment that matters) and hands every
    other unraisable exception to ``hook``."""

    def quiet(unraisable: sys.UnraisableHookArgs) -> object:
        if isinstance(unraisable.exc_value, Stopped):
            return None
        return hook(unraisable)

    quiet.quiets_stops = True  # type: ignore[attr-defined]
    return quiet


def install() -> None:
    """Make each of :data:`ENDING`'s signals end this process's command (from the main
    thread; elsewhere nothing changes). A signal ignored when the process started
    (``nohup`` ignores SIGHUP; a shell's background job, SIGINT and SIGQUIT) stays
    ignored. A stop raised inside a finalizer is not printed as "Exception ignored"."""
    if threading.current_thread() is not threading.main_thread():
        return
    if not getattr(sys.unraisablehook, "quiets_stops", False):
        sys.unraisablehook = _quiet_stops(sys.unraisablehook)
    for signum in ENDING:
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, _handler)


def received() -> Stopped | None:
    """The stop of the first ending signal received, if one was and its line has not
    been printed yet."""
    if _received is None or _reported:
        return None
    return stop_for(_received)


def raise_if_received() -> None:
    """Raise the stop of a signal received whose exception vanished (see the module
    docstring); nothing when none was."""
    stop = received()
    if stop is not None:
        raise stop


def report(stop: KeyboardInterrupt, how: str = "; nothing more was written") -> int:
    """Say, in one line on stderr, that the command was stopped (once: a signal is
    reported once); its exit code."""
    global _received, _reported
    stop = as_stop(stop)
    if _received is None:
        _received = stop.signum
    if not _reported:
        _reported = True
        with contextlib.suppress(OSError, ValueError):
            print(f"\nwarmfit: {stop.said}{how}.", file=sys.stderr, flush=True)
    return stop.exit_code


def hold() -> set[int]:
    """Block :data:`ENDING`'s signals (in this thread: the main one, at the end of the
    program); the signals blocked now that were not before."""
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)
    except (AttributeError, OSError, ValueError):  # no signal masks here
        return set()
    return {int(s) for s in ENDING if s not in before}


def held(blocked: set[int]) -> Stopped | None:
    """The stop of a signal that came while :func:`hold` blocked it (None: none did)."""
    try:
        pending = {int(s) for s in signal.sigpending()} & blocked
    except (AttributeError, OSError):
        return None
    return stop_for(min(pending)) if pending else None


@contextlib.contextmanager
def deferred(now: bool = True) -> Iterator[Callable[[], None]]:
    """:data:`ENDING`'s signals wait until the block is done (a file written and the lines
    that say so printed), then end the command as usual: a stop never falls between a
    file replaced and the line saying it was. The handler records a signal that comes
    meanwhile (in whichever thread the system delivered it: blocking it in this one
    would not hold it) and the stop is raised as the block ends; where the block fails,
    its error goes on, and the program reports the signal as it ends.

    With ``now=False`` a signal still stops the command at once until the block calls
    the function it yields: the moment its file is whole, just before it is put in place
    (a replay that writes as it goes stays stoppable while it runs)."""
    global _deferring
    if _deferring:  # within another deferred block: that one raises
        yield lambda: None
        return
    started = False

    def start() -> None:
        global _deferring
        nonlocal started
        started = _deferring = True

    if now:
        start()
    try:
        yield start
    finally:
        if started:
            _deferring = False
    raise_if_received()


@contextlib.contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """Ctrl-C (SIGINT) ignored inside the block, then handled as before; processes
    started inside it inherit the ignoring. Outside the main thread, where no signal
    handler can be set, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
