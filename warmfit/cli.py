"""The ``warmfit`` command line: a thin adapter over the library.

Each command lives in its own module under :mod:`warmfit.commands`, opens the
data, calls one library function and prints the result. Errors derived from
:class:`~warmfit.errors.WarmfitError` become one paragraph on stderr and the
error's exit code (2 for bad input or usage), never a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

from warmfit.commands import check, plot, policies, record, recover, replay, sweep, validate
from warmfit.errors import UsageError, WarmfitError

#: The flag of each library argument a command passes on (UsageError.argument).
FLAGS = {
    "safety_factor": "--safety",
    "engine": "--engine",
    "by": "--by",
    "budget_bytes": "--budget",
    "fmt": "--format",
}


class _Group(TyperGroup):
    """Turns every :class:`WarmfitError` into a message and an exit code."""

    def invoke(self, ctx: Any) -> Any:  # click.Context (typer vendors click)
        try:
            return super().invoke(ctx)
        except WarmfitError as exc:
            if isinstance(exc, UsageError) and exc.argument in FLAGS:
                exc = exc.for_flag(FLAGS[exc.argument])
            typer.echo(f"warmfit: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_Group,
    name="warmfit",
    help="Replay recorded GPU training waves through memory-pricing policies.\n\n"
    "Example: warmfit replay traces/pr991 --format markdown",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("replay")(replay.replay_command)
app.command("validate")(validate.validate_command)
app.command("policies")(policies.policies_command)
app.command("plot")(plot.plot_command)
app.command("check")(check.check_command)
app.command("sweep")(sweep.sweep_command)
app.command("record", context_settings={"allow_interspersed_args": False})(record.record_command)
app.command("recover")(recover.recover_command)


def main() -> None:
    """Console-script entry point."""
    try:
        app(prog_name="warmfit")
    except KeyboardInterrupt:
        sys.exit(130)
