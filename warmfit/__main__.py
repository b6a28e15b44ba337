"""``python -m warmfit`` and the ``warmfit`` console script: the ``warmfit`` program.

:func:`run` catches Ctrl-C and SIGTERM from the first moment, while the command
line's modules are still being imported, so that a command stopped as it
starts ends with one line and exit 130 or 143, never a traceback; then it
runs :func:`warmfit.cli.run`, which handles them from there on.
"""

import signal
import sys


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(143)


def run() -> None:
    """The ``warmfit`` program."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        from warmfit.cli import run as program
    except (KeyboardInterrupt, SystemExit) as stop:
        ended = "interrupted (Ctrl-C)" if isinstance(stop, KeyboardInterrupt) else "terminated"
        print(f"\nwarmfit: {ended} as it started; nothing was written.", file=sys.stderr)
        raise SystemExit(130 if isinstance(stop, KeyboardInterrupt) else 143) from None
    program()


if __name__ == "__main__":
    run()
