"""One root for every error warmfit reports to a person.

Each error carries the process exit code the CLI returns for it (SPEC §5:
2 for bad input or usage). The CLI prints ``str(error)`` as one paragraph on
stderr and exits with ``error.exit_code``; it never shows a traceback for
these.
"""

from __future__ import annotations

import operator
import os
from pathlib import Path

from warmfit.show.names import printable


class WarmfitError(Exception):
    """Base of every error meant for the person running warmfit."""

    exit_code: int = 2


class UsageError(WarmfitError):
    """A command line or an argument that cannot be acted on.

    Library code names the argument (``argument="safety_factor"``) and says
    what is wrong with it; the command line translates the argument into its
    flag (:meth:`for_flag`), so a message never names a flag the caller did
    not use.

    >>> error = UsageError("must be a positive number; got 0.", argument="safety_factor")
    >>> str(error), str(error.for_flag("--safety"))
    ('safety_factor must be a positive number; got 0.', '--safety must be a positive number; got 0.')
    """

    def __init__(self, problem: str, *, argument: str | None = None) -> None:
        self.problem = problem
        self.argument = argument
        super().__init__(problem if argument is None else f"{argument} {problem}")

    def for_flag(self, flag: str) -> UsageError:
        """The same error, naming the command line's ``flag`` for the argument."""
        return UsageError(f"{flag} {self.problem}")


class EstimateOverflowError(UsageError):
    """A wave priced above 2**63 bytes (a trace's int64 column cannot hold it): the
    Pricer's answer; a recorder given such a price runs the wave unrecorded, as it
    would run it unpriced, so recording never changes what the trainer does."""


def no_room(files: str, folder: str | os.PathLike[str], exc: OSError, room: str) -> UsageError:
    """A failure to write temporary ``files`` in ``folder`` (a full disk, a file-size
    limit) as exit 2: what could not be written, where (escaped), why, and ``room``,
    what to do.

    >>> import errno
    >>> full = OSError(errno.ENOSPC, "No space left on device")
    >>> print(no_room("the figure's temporary files", "/tmp/x\\n", full, "Free space there."))
    cannot write the figure's temporary files in /tmp/x\\n (No space left on device); nothing was written. Free space there.
    """
    return UsageError(
        f"cannot write {files} in {printable(os.fspath(folder))} ({exc.strerror or exc}); "
        f"nothing was written. {room}"
    )


def whole_number(value: object, argument: str) -> int:
    """``value`` as an int (``operator.index``: an int, a numpy integer, a 0-d integer
    tensor), or a :class:`UsageError` naming ``argument``.

    >>> whole_number(3, "packed_tokens")
    3
    >>> whole_number(1.5, "packed_tokens")
    Traceback (most recent call last):
    ...
    warmfit.errors.UsageError: packed_tokens must be an integer; got 1.5 of type float (an int, or a 0-d integer tensor).
    """
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise UsageError(
            f"must be an integer; got {value!r} of type {type(value).__name__} (an int, or a "
            "0-d integer tensor).",
            argument=argument,
        ) from None


class TraceError(WarmfitError):
    """A trace that breaks trace format v1 (SPEC §2).

    The message names the file, and the column and row where it can (rows are
    counted from 0 within the file, as polars and pyarrow count them), and
    says what to do.
    """

    def __init__(
        self,
        problem: str,
        *,
        path: str | Path | None = None,
        column: str | None = None,
        row: int | None = None,
        fix: str | None = None,
    ) -> None:
        self.problem = problem
        self.path = None if path is None else str(path)
        self.column = column
        self.row = row
        self.fix = fix
        where = []
        if self.path is not None:
            where.append(printable(self.path))  # a file name may hold terminal escapes
        if column is not None:
            where.append(f"column '{column}'")
        if row is not None:
            where.append(f"row {row}")
        text = ", ".join(where) + ": " + problem if where else problem
        if fix:
            text += f" {fix}"
        super().__init__(text)


class RecordingError(WarmfitError):
    """A recording that could not be written completely (a full disk, for example).

    ``lost_readings`` counts the readings that are gone; the message says
    where the others are and what to run.
    """

    def __init__(self, message: str, *, lost_readings: int = 0) -> None:
        super().__init__(message)
        self.lost_readings = lost_readings


class PolicyError(WarmfitError):
    """An unknown policy name, or a user policy that cannot be loaded."""


class RegressionFound(WarmfitError):
    """``warmfit check`` found figures worse than the expectations allow (exit 1).

    The message lists one readable before/after line per regression.
    """

    exit_code = 1
