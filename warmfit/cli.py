"""The ``warmfit`` command line: a thin adapter over the library.

Each command lives in its own module under :mod:`warmfit.commands`, opens the
data, calls one library function and prints the result. Errors derived from
:class:`~warmfit.errors.WarmfitError` become one paragraph on stderr and the
error's exit code (2 for bad input or usage), never a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import resource
import sys
import threading
from typing import Annotated, Any, NoReturn

import typer
from typer._click.exceptions import NoArgsIsHelpError
from typer._click.exceptions import UsageError as ClickUsageError
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from warmfit.commands import (
    check,
    import_,
    plot,
    policies,
    recommend,
    record,
    recover,
    replay,
    sweep,
    validate,
)
from warmfit.errors import UsageError, WarmfitError
from warmfit.run import signals
from warmfit.show.names import printable

#: The flag of each library argument a command passes on (UsageError.argument).
FLAGS = {
    "safety_factor": "--safety",
    "engine": "--engine",
    "by": "--by",
    "budget_bytes": "--budget",
    "jobs": "--jobs",
    "fmt": "--format",
    "permutations": "--permute",
    "seed": "--seed",
}


def _placeholder(param: TyperOption, ctx: Any) -> str | None:
    """What help shows for an option's value: its upper-case name or its choices.

    A flag takes no value, so it shows none (typer would print ``<bool>``,
    which reads as if ``--force true`` were accepted).
    """
    if param.is_flag:
        return None
    if param.metavar is not None:
        return param.metavar
    if param.type_descriptor.is_choice:
        return param.display_type(ctx).strip("<>")
    return (param.name or "value").upper()


def _argument_name(param: TyperArgument, *, usage: bool) -> str:
    """``PATH...`` for a repeatable argument (``[COMMAND]...`` when optional, in usage)."""
    name = (param.metavar or (param.name or "").upper()).removesuffix("...")
    if usage and not param.required:
        name = f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def literal(text: str | None) -> str | None:
    """Help text as written: rich markup would read ``warmfit[cluster]`` as a style and
    drop it, so every ``[`` is escaped (once: an escaped text is left as it is).

    >>> literal("pip install 'warmfit[cluster]'")
    "pip install 'warmfit\\\\[cluster]'"
    """
    if not text or "\\[" in text:
        return text
    return text.replace("[", "\\[")


def plain_help(param: Any) -> Any:
    """Make ``param`` show one placeholder style in help: ``FILE``, ``PATH...``, none for a flag,
    and its help text literally (:func:`literal`).

    typer renders types as ``<path>``, ``<list[str]>`` and ``<bool>`` beside
    the names given as metavars; warmfit's help shows only upper-case names
    (and the choices of an option that has them).
    """
    param.help = literal(getattr(param, "help", None))
    if isinstance(param, TyperArgument):
        # The name column shows the metavar (PATH...); no type column beside it.
        param.metavar = _argument_name(param, usage=False)
        param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        param._usage_display_name = lambda: _argument_name(param, usage=True)  # type: ignore[method-assign]
    elif isinstance(param, TyperOption):
        param.display_type_rich = lambda ctx: _placeholder(param, ctx)  # type: ignore[method-assign]
    return param


class _Command(TyperCommand):
    """A command whose help shows every placeholder in one style and every text literally
    (:func:`plain_help`, :func:`literal`)."""

    def get_params(self, ctx: Any) -> list[Any]:
        self.help = literal(self.help)
        return [plain_help(p) for p in super().get_params(ctx)]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except ClickUsageError as exc:  # some (an option without its value) name no command
            if exc.ctx is None:
                exc.ctx = ctx
            raise


def usage_message(exc: ClickUsageError) -> str:
    """click's usage error as warmfit's one line: ``warmfit: error: COMMAND: what. See
    'COMMAND -h'.`` (typer would draw a box around it under a usage line)."""
    message = exc.format_message().replace(": Value error, ", ": ")
    message = message[:1].lower() + message[1:]
    path = exc.ctx.command_path if exc.ctx is not None else "warmfit"
    command = path.partition(" ")[2]
    where = f"{command}: " if command else ""
    message = message if message.endswith(("?", ".")) else message + "."
    return f"warmfit: error: {where}{message} See '{path} -h'."


def _usage_error(exc: ClickUsageError) -> int:
    """Print a usage error (help, when no arguments asked for it) and give its exit code."""
    if isinstance(exc, NoArgsIsHelpError):  # no arguments: the help, as click shows it
        exc.show()
    else:
        typer.echo(usage_message(exc), err=True)
    return exc.exit_code


class _Group(TyperGroup):
    """Turns every :class:`WarmfitError` into a message and an exit code."""

    def get_params(self, ctx: Any) -> list[Any]:
        return [plain_help(p) for p in super().get_params(ctx)]

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            context = super().make_context(*args, **kwargs)
        except KeyboardInterrupt as stop:  # typer would exit 130 without a word
            raise typer.Exit(stopped(stop)) from None
        except ClickUsageError as exc:
            raise typer.Exit(_usage_error(exc)) from None
        return context

    def invoke(self, ctx: Any) -> Any:  # click.Context (typer vendors click)
        try:
            return super().invoke(ctx)
        except ClickUsageError as exc:  # a command's arguments, as click parsed them
            raise typer.Exit(_usage_error(exc)) from None
        except WarmfitError as exc:
            if isinstance(exc, UsageError) and exc.argument in FLAGS:
                exc = exc.for_flag(FLAGS[exc.argument])
            typer.echo(f"warmfit: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as stop:  # typer would exit 130 without a word
            raise typer.Exit(stopped(stop)) from None
        except Exception as exc:  # what no command turned into a line
            late = signals.received()  # a stop that became another error (RuntimeError
            if late is not None:  # "Error calling __set_name__", say) on its way here
                raise typer.Exit(stopped(late)) from None
            said = _workers_failed() or resource_limit(exc)
            if said is None:
                raise
        # Only a limit's error comes here. Its traceback's frames held what it half made
        # (a worker pool's pipes and semaphores, out of file descriptors): freed now, so
        # that multiprocessing's clean-up at exit finds the descriptors it needs.
        gc.collect()
        typer.echo(f"warmfit: error: {said}", err=True)
        raise typer.Exit(2)


def _workers_failed() -> str | None:
    """Why the worker processes failed, where warmfit ended them (a stopped fork server)."""
    workers = sys.modules.get("warmfit.run.workers")
    return None if workers is None else workers.stopped_server_message()


def _limit(name: str) -> str:
    """A resource limit of this process, as a person reads it (:mod:`resource` is imported
    with this module: out of file descriptors, its shared library could not be opened)."""
    soft = resource.getrlimit(getattr(resource, name))[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else f"{soft:,}"


def resource_limit(exc: BaseException) -> str | None:
    """The line for an error that a resource limit (or an exhausted resource) caused,
    naming the limit and what to do; None for any other error (a bug: its traceback
    is shown)."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
        return (
            f"too many open files ({exc.strerror}): this process may open "
            f"{_limit('RLIMIT_NOFILE')} (ulimit -n, RLIMIT_NOFILE); nothing was written. "
            "Raise the limit (ulimit -n 4096), or run with --jobs 1."
        )
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        where = f" writing {printable(str(exc.filename))}" if exc.filename else ""
        limit = _limit("RLIMIT_FSIZE")
        if limit == "unlimited":  # the file system's own largest file (FAT32's is 4 GiB)
            return (
                f"a file grew past the largest its file system holds{where} ({exc.strerror}; "
                "the file-size limit, ulimit -f, is unlimited); nothing was written. Write "
                "it to another file system."
            )
        return (
            f"a file grew past the file-size limit{where} ({limit} bytes: ulimit -f, "
            "RLIMIT_FSIZE); nothing was written. Raise the limit (ulimit -f unlimited)."
        )
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        where = f" at {printable(str(exc.filename))}" if exc.filename else ""
        return f"no space left on the device{where} ({exc.strerror}); free some, and run again."
    if isinstance(exc, FileNotFoundError) and "No usable temporary directory" in str(exc):
        return (
            "no folder for temporary files can be written (TMPDIR, /tmp, /var/tmp, this "
            f"folder; the file-size limit is {_limit('RLIMIT_FSIZE')} bytes: ulimit -f); "
            "nothing was written. Point TMPDIR at a folder with room, or raise the limit."
        )
    if isinstance(exc, EOFError):  # a worker process's hand-off cut short
        return (
            "a worker process could not be started or handed its work (EOFError); nothing "
            f"was written. This process may open {_limit('RLIMIT_NOFILE')} files (ulimit -n) "
            "and use memory up to " + _limit("RLIMIT_AS") + " bytes (ulimit -v): raise them, "
            "or run with --jobs 1."
        )
    if isinstance(exc, MemoryError):
        return (
            f"out of memory (this process may use {_limit('RLIMIT_AS')} bytes: ulimit -v, "
            "RLIMIT_AS); nothing was written. Raise the limit, run where there is more "
            "memory, or replay fewer files at once."
        )
    return None


def pin_temporary_folder() -> None:
    """Make ``TMPDIR``, where it names a folder, the temporary folder of this process and
    of the processes it starts, whether or not it has room: Python's own choice skips a
    full one for /tmp, and a full TMPDIR was then reported as /tmp."""
    import tempfile

    folder = os.environ.get("TMPDIR")
    if folder and os.path.isdir(folder):
        tempfile.tempdir = os.path.abspath(folder)


app = typer.Typer(
    cls=_Group,
    name="warmfit",
    help="Record GPU training waves and replay them through memory-pricing policies.\n\n"
    "A wave is one micro-batch forward plus the loss and backward that follow it.\n\n"
    "Example: warmfit replay traces/pr991 --format markdown",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version() -> str:
    """warmfit's version, from the installed package's metadata (no heavy import)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("warmfit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from warmfit import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"warmfit {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print warmfit's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Record GPU training waves and replay them through memory-pricing policies.

    A wave is one micro-batch forward plus the loss and backward that follow it.

    Example: warmfit replay traces/pr991 --format markdown
    """


# In the order a user meets them: record a run, then read, replay and judge it.
app.command("record", cls=_Command, context_settings={"allow_interspersed_args": False})(
    record.record_command
)
app.command("recover", cls=_Command)(recover.recover_command)
app.command("validate", cls=_Command)(validate.validate_command)
app.command("replay", cls=_Command)(replay.replay_command)
app.command("sweep", cls=_Command)(sweep.sweep_command)
app.command("recommend", cls=_Command)(recommend.recommend_command)
app.command("plot", cls=_Command)(plot.plot_command)
app.command("check", cls=_Command)(check.check_command)
app.command("policies", cls=_Command)(policies.policies_command)
# warmfit import table | art-misses: measurements already held, as traces (issue 30).
import_app = typer.Typer(cls=_Group, help=import_.HELP, no_args_is_help=True)
import_app.command("table", cls=_Command)(import_.table_command)
import_app.command("art-misses", cls=_Command)(import_.art_misses_command)
app.add_typer(import_app, name="import")


def main() -> None:
    """Run the command line (``sys.argv``); exits with ``SystemExit``, as click does.

    Ctrl-C ends a command with exit 130, SIGTERM with 143, SIGHUP with 129 and
    SIGQUIT with 131, each with one line on stderr (never a traceback). Each
    unwinds the command, so that what it started (worker processes, temporary
    files, an output being written) is ended or removed on the way out. A signal
    whose exception vanished on the way (:mod:`warmfit.run.signals`) still ends
    the command with its line and its exit code.
    """
    try:
        signals.install()
        pin_temporary_folder()
        signals.raise_if_received()
        app(prog_name="warmfit")
        signals.raise_if_received()
    except KeyboardInterrupt as stop:  # outside a command: while the program starts
        signals.finish()
        sys.exit(stopped(stop))
    except (SystemExit, Exception):
        signals.finish()  # from here a signal is looked at (by run()), not raised
        late = signals.received()  # the command ended, but a signal came first
        if late is not None:
            sys.exit(stopped(late))
        raise


def stopped(stop: KeyboardInterrupt) -> int:
    """Say that the command was stopped, in one line (what it started has been ended
    on the way here); its exit code: 128 plus the signal's number (130 for Ctrl-C,
    143 for SIGTERM)."""
    return signals.report(stop)


def _other_threads_to_join() -> bool:
    """Whether a thread Python's exit would join (not a daemon: those it leaves, as
    :func:`os._exit` does) still runs besides this one."""
    me = threading.current_thread()
    return any(t is not me and not t.daemon and t.is_alive() for t in threading.enumerate())


def run() -> NoReturn:
    """The ``warmfit`` program (its console script, and ``python -m warmfit``):
    :func:`main`, then the process ends at once.

    Python's own exit tears the interpreter down module by module: 50 ms with
    polars imported, and 0.15 to 0.2 s after a large replay (measured: a cold
    1e7 replay took 3.43 s, 3.27 s ending this way). Everything an exit must
    do is done first: the ``atexit`` handlers run (multiprocessing's clean-up
    of its temporary folder, the recorder's), and stdout and stderr are
    flushed; where a thread Python would join (not a daemon thread, such as the
    fork server's watcher) still runs, Python's ordinary exit joins it instead.
    """
    try:
        main()
    except SystemExit as done:
        code: object = done.code
    except KeyboardInterrupt as stop:  # a signal in main()'s own last lines
        code = stopped(stop)
    else:
        code = 0
    if _other_threads_to_join():
        sys.exit(code)  # type: ignore[arg-type]
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # as Python does with sys.exit("message")
        print(code, file=sys.stderr)
        status = 1
    # From here a signal is only looked at, not raised: raised in the exit hooks, one
    # could vanish (a hook that swallows errors), or end in a traceback.
    ending = signals.hold()
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except OSError:  # a closed pipe: Python's exit status for it
        status = 120
    except ValueError:  # stdout closed: nothing to flush, as Python does
        pass
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    late = signals.received() or signals.held(ending)  # the last moment to look
    if late is not None:  # the command had ended: it says so, with the signal's code
        status = signals.report(late, " as it ended")
    os._exit(status)
