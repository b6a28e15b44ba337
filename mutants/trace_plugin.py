"""A pytest plugin for ``mutants/run.py --generate``: which lines of the mutated
modules each test runs, and how long each test takes.

Loaded with ``-p trace_plugin`` (``mutants/`` on ``PYTHONPATH``) in the
unmutated baseline run. ``WARMFIT_MUTANTS_TRACE`` names the modules to trace
(paths relative to the working directory, joined by ``os.pathsep``) and
``WARMFIT_MUTANTS_TRACE_OUT`` the JSON file to write: per test node id, its
outcome, duration, and the lines it ran per module, split into those run
while setting it up (fixtures, which other tests of its file may share) and
those run by the test itself.

``sys.settrace`` slows every Python call of a test (five times and more for
Hypothesis and pure-Python oracles), so the modules are *probed* instead: an
import hook compiles each of them with a call ``__warmfit_probe__(k)`` before
every statement (after docstrings and ``from __future__`` imports), ``k``
naming the statement's lines (a compound statement: its header's). The file
on disk is untouched and the code keeps its line numbers. A statement counts
as run when it starts. Worker processes import the module unprobed.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

PROBE = "__warmfit_probe__"
_ROOT = Path.cwd().resolve()
#: module name -> its path relative to the root
_MODULES: dict[str, str] = {}
for _name in filter(None, os.environ.get("WARMFIT_MUTANTS_TRACE", "").split(os.pathsep)):
    _MODULES[_name[: -len(".py")].replace("/", ".").removesuffix(".__init__")] = _name

#: probe number -> (module path, first line, last line)
_PROBES: list[tuple[str, int, int]] = []
_hit: set[int] = set()
_results: dict[str, dict[str, Any]] = {}


def __warmfit_probe__(k: int) -> None:
    _hit.add(k)


class _Probes(ast.NodeTransformer):
    """Put a probe before every statement of every statement list."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _probe(self, first: int, last: int, where: ast.AST) -> ast.stmt:
        _PROBES.append((self.path, first, max(first, last)))
        call = ast.Expr(ast.Call(ast.Name(PROBE, ast.Load()), [ast.Constant(len(_PROBES) - 1)], []))
        return ast.copy_location(call, where)

    def _header(self, node: ast.stmt) -> tuple[int, int]:
        first = node.lineno
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            return first, body[0].lineno - 1
        return first, node.end_lineno or first

    def _statements(self, stmts: list[ast.stmt], keep_first: bool) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for i, stmt in enumerate(stmts):
            self.visit(stmt)
            docstring = (
                keep_first and i == 0 and isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
            )  # fmt: skip
            future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
            if docstring or future:
                out.append(stmt)
                continue
            out.append(self._probe(*self._header(stmt), stmt))
            out.append(stmt)
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                keep = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                         ast.AsyncFunctionDef)) and name == "body"  # fmt: skip
                setattr(node, name, self._statements(value, keep))
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)
        if isinstance(node, ast.ExceptHandler) and node.body:
            node.body.insert(0, self._probe(node.lineno, node.body[0].lineno - 1, node))
        return node


def probed(source: bytes, path: str, filename: str) -> Any:
    """The code of a module's source with its probes."""
    tree = ast.parse(source, filename)
    tree = _Probes(path).visit(tree)
    # the probe's name, imported after the docstring and the __future__ imports
    at = 0
    while at < len(tree.body) and (
        (isinstance(tree.body[at], ast.Expr) and at == 0)
        or (isinstance(tree.body[at], ast.ImportFrom) and tree.body[at].module == "__future__")
    ):
        at += 1
    importer = ast.ImportFrom("trace_plugin", [ast.alias(PROBE)], 0)
    tree.body.insert(at, ast.copy_location(importer, tree.body[max(0, at - 1)]))
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec", dont_inherit=True)


class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> Any:
        return probed(self.get_data(self.path), _MODULES[fullname], self.path)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin:
            return None
        spec.loader = _Loader(fullname, spec.origin)
        return spec


if _MODULES:
    sys.meta_path.insert(0, _Finder())


def _taken() -> dict[str, list[int]]:
    found: dict[str, set[int]] = {}
    for k in _hit:
        path, first, last = _PROBES[k]
        found.setdefault(path, set()).update(range(first, last + 1))
    _hit.clear()
    return {path: sorted(lines) for path, lines in found.items()}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    _hit.clear()
    yield
    _results.setdefault(item.nodeid, {})["setup_lines"] = _taken()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    _hit.clear()
    yield
    _results.setdefault(item.nodeid, {})["lines"] = _taken()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    _hit.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, {})
    entry["duration"] = entry.get("duration", 0.0) + report.duration
    if report.failed:
        entry["outcome"] = "failed"
    elif report.skipped and entry.get("outcome") != "failed":
        entry["outcome"] = "skipped"
    elif report.when == "call" and "outcome" not in entry:
        entry["outcome"] = "passed"


def pytest_unconfigure(config: pytest.Config) -> None:
    out = os.environ.get("WARMFIT_MUTANTS_TRACE_OUT")
    if out:
        Path(out).write_text(json.dumps(_results), encoding="utf-8")
