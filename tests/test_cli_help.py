"""Every command's help shows placeholders in one style; flags take no value;
``warmfit --version`` (issue 14, item 8)."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from warmfit.cli import app

REPO = Path(__file__).resolve().parent.parent
PR991 = str(REPO / "traces/pr991")
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
#: An upper-case placeholder (FILE, PATH..., START:STOP:STEP) or a list of choices (a|b).
PLACEHOLDER = re.compile(r"^([A-Z][A-Z_:]*(\.\.\.)?|[a-z-]+(\|[a-z-]+)+)$")


def help_text(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)], ids=str)
def test_help_shows_no_typer_type_names(command: list[str]) -> None:
    text = help_text(*command)
    typer_types = r"<(bool|path|str|float|int|list\[\w+\]|[a-z-]+(\|[a-z-]+)+)>"
    assert not re.search(typer_types, text), text  # <bool>, <path>, <list[str]>, <a|b>


@pytest.mark.parametrize("command", COMMANDS)
def test_every_value_has_an_upper_case_placeholder_and_flags_none(command: str) -> None:
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    ctx = cmd.make_context(command, ["--help"], resilient_parsing=True)
    for param in cmd.get_params(ctx):
        if getattr(param, "is_flag", False):
            assert param.display_type_rich(ctx) is None, (command, param.name)
            continue
        shown = param.metavar if param.param_type_name == "argument" else None
        shown = shown or param.display_type_rich(ctx)
        assert shown and PLACEHOLDER.match(shown), (command, param.name, shown)
    usage = cmd.get_usage(ctx)
    assert "{" not in usage and "......" not in usage, usage


def test_the_usage_lines_read_like_the_readme() -> None:
    assert "Usage: warmfit replay [OPTIONS] PATH..." in help_text("replay")
    assert "Usage: warmfit record [OPTIONS] [COMMAND]..." in help_text("record")
    assert "Usage: warmfit recover [OPTIONS] DIR" in help_text("recover")
    text = help_text("replay")
    assert re.search(r"--safety +FACTOR", text) and re.search(r"--force +Overwrite", text)
    assert re.search(r"--per-wave +FILE", text) and re.search(r"--budget +SIZE", text)
    assert re.search(r"--expect +-e +FILE", help_text("check"))


def test_version_comes_from_the_package_metadata() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"warmfit {version('warmfit')}\n"


def test_a_value_after_a_flag_is_explained(tmp_path: Path) -> None:
    out = str(tmp_path / "w.csv")
    result = CliRunner().invoke(app, ["replay", PR991, "--per-wave", out, "--force", "true"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "true" in result.output and "a flag takes no value" in result.output


def test_every_bracketed_extra_in_help_is_shown_literally() -> None:
    """Rich markup read ``warmfit[cluster]`` as a style and showed ``pip install 'warmfit'``
    (issue 29, item 3): every help text goes through one escaping path (warmfit.cli.literal)."""
    sources = "\n".join(p.read_text() for p in (REPO / "warmfit" / "commands").glob("*.py"))
    written = set(re.findall(r"warmfit\[(\w+)\]", sources))
    assert written  # replay's --cluster names the cluster extra
    shown = "\n".join(help_text(command) for command in COMMANDS)
    for extra in written:
        assert f"warmfit[{extra}]" in re.sub(r"\s*│\s*", " ", shown), extra
    assert "pip install 'warmfit')" not in shown


def test_the_top_level_help_says_what_a_wave_is_and_lists_record_first() -> None:
    text = help_text()
    assert "A wave is one micro-batch forward plus the loss and backward" in text
    listed = re.findall(r"^│ (\w+) ", text[text.index("Commands") :], flags=re.M)
    assert listed[0] == "record" and set(listed) == set(COMMANDS)


def placeholders(command: str) -> dict[str, str | None]:
    """What ``command``'s help shows for each of its parameters' values."""
    cmd = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    ctx = cmd.make_context(command, ["--help"], resilient_parsing=True)
    return {
        p.name: p.metavar if p.param_type_name == "argument" else p.display_type_rich(ctx)
        for p in cmd.get_params(ctx)
    }


def test_replays_placeholders_spelled_out() -> None:
    """A named metavar, the choices of an option that has them, the option's name in
    upper case where it has neither (``--seed``), none for a flag."""
    shown = placeholders("replay")
    assert {k: v for k, v in shown.items() if v is not None} == {
        "paths": "PATH...", "policy": "POLICY", "safety": "FACTOR",
        "format": "table|markdown|csv|json", "per_wave": "FILE",
        "engine": "auto|scalar|vectorized", "by": "run|signature", "budget": "SIZE",
        "jobs": "N", "permute": "N", "seed": "SEED", "cluster": "ADDRESS",
    }  # fmt: skip
    assert shown["force"] is None and shown["verbose"] is None


@pytest.mark.parametrize("command, usage", [
    ("recover", "warmfit recover [OPTIONS] DIR"),
    ("record", "warmfit record [OPTIONS] [COMMAND]..."),
    ("replay", "warmfit replay [OPTIONS] PATH..."),
])  # fmt: skip
def test_the_usage_line_whole(command: str, usage: str) -> None:
    """One argument shows no ``...``; a repeatable one does, in brackets when optional."""
    lines = [line.strip() for line in help_text(command).splitlines()]
    assert f"Usage: {usage}" in lines


def test_an_argument_without_a_metavar_shows_its_name() -> None:
    """Every warmfit argument names its metavar; one that does not (a command added
    later) shows its name in upper case, as click would."""
    from warmfit.cli import _Command, _Group

    tiny = typer.Typer(cls=_Group)

    @tiny.command(cls=_Command)
    def go(things: list[str], one: str = typer.Argument("x")) -> None:
        """Go."""

    @tiny.command(cls=_Command)
    def other() -> None:
        """Another, so that go is a command of the group."""

    result = CliRunner().invoke(tiny, ["go", "--help"], env={"COLUMNS": "200"})
    assert "Usage: root go [OPTIONS] THINGS... [ONE]" in result.output
    assert re.search(r"│ \* +THINGS\.\.\. +\[required\]", result.output), result.output


@pytest.mark.parametrize("args", [[], ["import"]], ids=["warmfit", "import"])
def test_no_arguments_shows_the_help_and_exits_2(args: list[str]) -> None:
    """As git does: the help, not an error line (``no_args_is_help``)."""
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "error" not in result.output
    assert f"Usage: {' '.join(['warmfit', *args])} [OPTIONS] COMMAND [ARGS]..." in result.output
    assert "Commands" in result.output


def test_a_usage_error_no_command_claims_names_warmfit() -> None:
    from typer._click.exceptions import UsageError as ClickUsageError

    from warmfit.cli import usage_message

    assert usage_message(ClickUsageError("No such option: --nope")) == (
        "warmfit: error: no such option: --nope. See 'warmfit -h'."
    )


def test_the_top_level_options_are_version_and_help_alone() -> None:
    """No shell-completion options (typer's ``add_completion``): warmfit installs none."""
    text = help_text()
    options = text[text.index("Options") : text.index("Commands")]
    assert re.findall(r"--[\w-]+", options) == ["--version", "--help"]


def test_the_version_of_a_source_tree_never_installed_is_the_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.metadata

    import warmfit
    from warmfit.cli import version as warmfit_version

    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    monkeypatch.setattr(warmfit, "__version__", "0.0.0+source")
    assert warmfit_version() == "0.0.0+source"
