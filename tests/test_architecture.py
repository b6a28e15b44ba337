"""The shape of the code: imports point one way, and every command is documented."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "warmfit"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The warmfit modules ``path`` imports, at the top or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found |= {name for name in names if name in modules}
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports(p, modules) - {module_name(p)} for p in paths}
    # A package's own __init__ may import its submodules; a submodule importing its
    # package's __init__ back would close a circle, and is caught below.
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_only_the_face_the_command_line_and_the_error_root_lie_loose() -> None:
    """Every other module lives in a folder that names its job (docs/reference/code-layout.md)."""
    loose = {path.name for path in PACKAGE.glob("*.py")}
    assert loose == {"__init__.py", "__main__.py", "cli.py", "errors.py"}


def test_folders_import_one_way() -> None:
    """No folder imports a folder that imports it back: the folders stand on floors."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}

    def folder(module: str) -> str:
        return ".".join(module.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for path in paths:
        source = folder(module_name(path))
        for target in map(folder, imports(path, modules)):
            if target not in (source, "warmfit"):
                edges.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in edges.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    back = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if reaches(b, a, {b}))
    assert not back, "folders that import each other: " + "; ".join(back)


def test_library_errors_name_arguments_and_the_cli_names_flags() -> None:
    import pytest
    from typer.testing import CliRunner

    from warmfit.cli import app
    from warmfit.errors import UsageError
    from warmfit.format.trace import readings_frame
    from warmfit.replay import replay
    from warmfit.report.table import render

    frame = readings_frame(
        [dict(seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9)]
    )
    with pytest.raises(UsageError, match=r"^safety_factor must be a positive number"):
        replay(frame, safety_factor=0)
    with pytest.raises(UsageError, match=r"^engine must be one of"):
        replay(frame, engine="fast")
    with pytest.raises(UsageError, match=r"^fmt must be one of"):
        render(replay(frame), "yaml")
    trace = str(PACKAGE.parent / "traces" / "pr991")
    result = CliRunner().invoke(app, ["replay", trace, "--safety", "0"])
    assert result.exit_code == 2 and "--safety must be a positive number" in result.output
