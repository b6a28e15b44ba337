"""``python -m warmfit`` and the ``warmfit`` console script: the ``warmfit`` program.

:func:`run` makes Ctrl-C, SIGTERM, SIGHUP and SIGQUIT end the command from the
first moment (:func:`warmfit.run.signals.install`), while the command line's
modules are still being imported, so that a command stopped as it starts ends
with one line and exit 130, 143, 129 or 131, never a traceback; then it runs
:func:`warmfit.cli.run`, which handles them from there on.
"""

import sys

from warmfit.run import signals


def run() -> None:
    """The ``warmfit`` program."""
    signals.install()
    try:
        from warmfit.cli import run as program

        signals.raise_if_received()  # one that vanished inside an import
    except (KeyboardInterrupt, Exception) as exc:
        # a stop, or another error it became (Python wraps one raised in __set_name__
        # while a class is made in a RuntimeError)
        stop = exc if isinstance(exc, KeyboardInterrupt) else signals.received()
        if stop is None:
            raise
        code = signals.report(stop, " as it started; nothing was written")
        sys.stdout.flush()
        raise SystemExit(code) from None
    program()


if __name__ == "__main__":
    run()
