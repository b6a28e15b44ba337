"""Mutants generated from a module's syntax tree, for ``mutants/run.py --generate``.

:func:`generate` walks a module with :mod:`ast` and yields one :class:`Generated`
per small change of these kinds (the ``kind`` of each, as its id spells it):

- arithmetic: ``Add->Sub``, ``Sub->Add``, ``Mult->Div``, ``Div->Mult``,
  ``FloorDiv->Div``, ``Mod->FloorDiv``, ``Pow->Mult``, ``LShift->RShift``,
  ``RShift->LShift``, and the boolean array operators ``BitAnd->BitOr``,
  ``BitOr->BitAnd`` (numpy's ``&``/``|``), in expressions and in ``x op= y``;
- comparisons: ``Lt->LtE``, ``LtE->Lt``, ``Gt->GtE``, ``GtE->Gt`` (boundaries),
  ``Eq->NotEq``, ``NotEq->Eq``, ``Is->IsNot``, ``IsNot->Is``, ``In->NotIn``,
  ``NotIn->In``;
- ``And->Or``, ``Or->And``;
- conditions: ``If->True``, ``If->False`` (``if``/``elif``), ``IfExp->True``,
  ``IfExp->False`` (``a if c else b``), ``While->False``, ``CompIf->True`` (a
  comprehension's ``if``), ``Not->drop`` (``not x`` -> ``x``), ``Invert->drop``
  (``~x`` -> ``x``), ``USub->drop`` (``-x`` -> ``x``);
- constants: ``Int->k+1``, ``Float->x*1.01`` (``0.0`` -> ``1.0``), ``True->False``,
  ``False->True``;
- ``max->min``, ``min->max`` (the builtins), ``maximum->minimum``,
  ``minimum->maximum`` (``np.maximum``, ``np.minimum``, ``np.maximum.at``),
  ``.max->.min``, ``.min->.max``, ``.any->.all``, ``.all->.any`` (methods),
  ``ceil->floor``, ``floor->ceil`` (``math.``);
- ``Return->None``: a returned value replaced by ``None``.

Nothing is generated in docstrings and other strings, type annotations,
decorators, ``__all__``, ``assert`` and ``raise`` statements, f-strings, the
arguments of an exception's construction (a name ending in ``Error``,
``Exception`` or ``Warning``), of ``warnings.warn``, ``print`` and logging
calls, ``if TYPE_CHECKING:`` and ``if __name__ == "__main__":`` blocks, string
concatenation, or on a line marked ``# pragma: no mutate``: mutating messages
is noise.

A mutant is a small textual edit of the module (an operator token, a
constant, a condition): every other byte of the file stays as it was, and
the edited text is parsed again and checked to give exactly the syntax tree
intended. Its id is ``FILE:LINE:COL:KIND`` (``summary.py:123:18:Lt->LtE``, the
column 1-based); accepted survivors (:func:`load_accepted`) are matched on the
file, the mutated line's text and the kind, so that they stay matched when
unrelated edits move the line.
"""

from __future__ import annotations

import ast
import bisect
import copy
import dataclasses
import io
import re
import tokenize
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PRAGMA = "pragma: no mutate"

BINOPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
}
SYMBOL: dict[type[ast.AST], str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in",
    ast.NotIn: "not in", ast.And: "and", ast.Or: "or",
}  # fmt: skip
COMPARES: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
#: Builtins called by name, swapped.
NAMES = {"max": "min", "min": "max"}
#: ``np.X`` (and ``numpy.X``), swapped wherever they appear (``np.maximum.at`` too).
NUMPY = {"maximum": "minimum", "minimum": "maximum", "fmax": "fmin", "fmin": "fmax"}
#: Methods called on any object (arrays, Series, expressions), swapped.
METHODS = {"max": "min", "min": "max", "any": "all", "all": "any"}
#: ``math.X``, swapped.
MATH = {"ceil": "floor", "floor": "ceil"}
#: Mutants known to be equivalent, not generated (counted as equivalent-skipped):
EQUIVALENT = ("Int->k+1 of the 1 in reshape(-1, ...): numpy takes any negative size as the rest",)
#: Calls whose arguments are messages, not behaviour.
MESSAGE_CALLS = {"print", "warn", "warnings.warn"}
LOGGERS = {"logging", "logger", "log", "_log", "LOG", "LOGGER"}
ERROR_SUFFIXES = ("Error", "Exception", "Warning")


@dataclass(frozen=True)
class Edit:
    """Replace characters ``start:end`` of the module's text by ``text``."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Generated:
    """One generated mutant of one module."""

    file: str  # the module's path, relative to the repository root
    line: int  # 1-based, of the mutation point
    col: int  # 1-based, of the mutation point
    kind: str  # "Lt->LtE", ...
    edits: tuple[Edit, ...]
    before: str  # the mutated line(s), as they are
    after: str  # the mutated line(s), mutated
    #: Index among the mutants of this kind on this line (0 for the first, by column).
    occurrence: int
    #: The lines to look for in coverage: the mutated node's and its statement's first.
    lines: tuple[int, ...]
    #: Run when the module is imported (module level, class body, a default argument):
    #: no test's own lines cover it.
    import_time: bool
    #: For an import-time mutant, the lines whose tests may see it: its enclosing
    #: function's (a default value) or class's (a class attribute); (0, 0): the module's.
    scope: tuple[int, int]
    #: The text of the module, for :meth:`source`.
    original: str = field(repr=False, compare=False)

    @property
    def id(self) -> str:
        return f"{Path(self.file).name}:{self.line}:{self.col}:{self.kind}"

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What an accepted survivor is matched on: file, the line's text, kind, occurrence."""
        return (self.file, normalized(self.before), self.kind, self.occurrence)

    def source(self) -> str:
        """The module's text with this mutant planted."""
        return apply(self.original, self.edits)


def normalized(line: str) -> str:
    """A line's text with its whitespace collapsed (indentation and spacing changes
    do not unmatch an accepted survivor)."""
    return " ".join(line.split())


def apply(text: str, edits: tuple[Edit, ...]) -> str:
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


class _Source:
    """A module's text with the conversions between AST positions (line, UTF-8 byte
    column) and character offsets, and its tokens."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type in (tokenize.OP, tokenize.NAME)
        ]
        self.token_starts = [self.offset_chars(*t.start) for t in self.tokens]
        self.pragma_lines = {
            t.start[0]
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type == tokenize.COMMENT and PRAGMA in t.string
        }

    def offset_chars(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def offset(self, line: int, col_bytes: int) -> int:
        """Character offset of an AST position (``col_offset`` counts UTF-8 bytes)."""
        raw = self.lines[line - 1].encode("utf-8")[:col_bytes]
        return self.starts[line - 1] + len(raw.decode("utf-8"))

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def position(self, offset: int) -> tuple[int, int]:
        """(1-based line, 1-based column) of a character offset."""
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def find(self, begin: int, end: int, words: tuple[str, ...]) -> tuple[int, int] | None:
        """The span of the token sequence ``words`` lying between two offsets."""
        i = bisect.bisect_left(self.token_starts, begin)
        while i < len(self.tokens) and self.token_starts[i] < end:
            if all(
                i + k < len(self.tokens) and self.tokens[i + k].string == w
                for k, w in enumerate(words)
            ):
                last = self.tokens[i + len(words) - 1]
                return self.token_starts[i], self.offset_chars(*last.end)
            i += 1
        return None


def _is_docstring(node: ast.AST, parent: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_message_call(node: ast.Call) -> bool:
    name = _dotted(node.func)
    if not name:
        return False
    last = name.rsplit(".", 1)[-1]
    if name in MESSAGE_CALLS or last.endswith(ERROR_SUFFIXES):
        return True
    return name.split(".", 1)[0] in LOGGERS and "." in name


def _stringy(node: ast.AST) -> bool:
    """An operand that makes ``+``/``%`` a string or list operation, not arithmetic."""
    return isinstance(node, (ast.JoinedStr, ast.List, ast.ListComp, ast.Tuple)) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


def _skipped_if(node: ast.If) -> bool:
    test = ast.unparse(node.test)
    return test in ("TYPE_CHECKING", "typing.TYPE_CHECKING") or "__name__" in test


def _nudged(value: object) -> tuple[str, object] | None:
    """(kind, new value) of a constant, or None for one not nudged."""
    if isinstance(value, bool):
        return f"{value}->{not value}", not value
    if isinstance(value, int):
        return "Int->k+1", value + 1
    if isinstance(value, float):
        if value == 0.0:
            return "Float->x*1.01", 1.0
        new = value * 1.01
        if new == value or new != new:  # inf, nan
            return None
        return "Float->x*1.01", new
    return None


class _Walker:
    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.src = _Source(text)
        self.tree = ast.parse(text)
        self.nodes = list(ast.walk(self.tree))
        self.index = {id(n): i for i, n in enumerate(self.nodes)}
        self.found: list[
            tuple[int, str, tuple[Edit, ...], Callable[[ast.AST], None], int, bool]
        ] = []
        self.statement: dict[int, ast.AST] = {}  # node -> its statement
        self.stmt_path: dict[int, tuple[tuple[str, int | None], ...]] = {}
        self.node_path: dict[int, tuple[tuple[str, int | None], ...]] = {}
        self.scope: dict[int, tuple[int, int]] = {}
        self.pragma_skipped = 0
        self.equivalent_skipped = 0
        self.parent = {id(c): p for p in self.nodes for c in ast.iter_child_nodes(p)}
        self.call_funcs = {id(n.func) for n in self.nodes if isinstance(n, ast.Call)}

    # ------------------------------------------------------------------ walking

    def walk(self) -> None:
        self._visit(
            self.tree, skip=False, runtime=False, statement=None, path=(), at=(), scope=(0, 0)
        )

    def _visit(
        self,
        node: ast.AST,
        *,
        skip: bool,
        runtime: bool,
        statement: ast.AST | None,
        path: tuple[tuple[str, int | None], ...],
        at: tuple[tuple[str, int | None], ...],
        scope: tuple[int, int],
    ) -> None:
        if isinstance(node, ast.stmt):
            statement, at = node, path
        self.scope[id(node)] = scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = (node.lineno, node.end_lineno or node.lineno)
        self.stmt_path[id(node)] = at
        self.node_path[id(node)] = path
        if not skip:
            skip = self._skips(node)
        if not skip:
            self.statement[id(node)] = statement  # type: ignore[assignment]
            self._mutate(node, runtime)
        for name, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for i, child in enumerate(children):
                if not isinstance(child, ast.AST):
                    continue
                child_skip = skip or self._skips_field(node, name, child)
                child_runtime = runtime
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    child_runtime = name == "body"
                step = (name, i if isinstance(value, list) else None)
                self._visit(
                    child, skip=child_skip, runtime=child_runtime, statement=statement,
                    path=(*path, step), at=at, scope=scope,
                )  # fmt: skip

    def _skips(self, node: ast.AST) -> bool:
        if isinstance(node, (ast.Raise, ast.Assert, ast.JoinedStr, ast.Import, ast.ImportFrom)):
            return True
        if _is_docstring(node, None):
            return True
        if isinstance(node, ast.Call) and _is_message_call(node):
            return True
        if isinstance(node, ast.If) and _skipped_if(node):
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return True
        return False

    @staticmethod
    def _skips_field(node: ast.AST, name: str, child: ast.AST) -> bool:
        return name in ("annotation", "returns", "decorator_list", "type_comment")

    # ------------------------------------------------------------------ mutating

    def _add(
        self,
        node: ast.AST,
        kind: str,
        edits: list[Edit],
        change: Callable[[ast.AST], None],
        runtime: bool,
        at: int | None = None,
    ) -> None:
        point = edits[0].start if at is None else at
        self.found.append((self.index[id(node)], kind, tuple(edits), change, point, runtime))

    def _op_token(self, left: ast.AST, right: ast.AST, op: ast.AST) -> tuple[int, int] | None:
        words = tuple(SYMBOL[type(op)].split())
        return self.src.find(self.src.end(left), self.src.start(right), words)

    def _mutate(self, node: ast.AST, runtime: bool) -> None:
        src = self.src
        if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
            if isinstance(node.op, (ast.Add, ast.Mod)) and (
                _stringy(node.left) or _stringy(node.right)
            ):
                return
            new = BINOPS[type(node.op)]
            span = self._op_token(node.left, node.right, node.op)
            if span:
                self._add(
                    node, f"{type(node.op).__name__}->{new.__name__}",
                    [Edit(*span, SYMBOL[new])], _set_attr("op", new()), runtime,
                )  # fmt: skip
        elif isinstance(node, ast.AugAssign) and type(node.op) in BINOPS:
            if isinstance(node.op, (ast.Add, ast.Mod)) and _stringy(node.value):
                return
            new = BINOPS[type(node.op)]
            span = src.find(
                src.end(node.target), src.start(node.value), (SYMBOL[type(node.op)] + "=",)
            )
            if span:
                self._add(
                    node, f"{type(node.op).__name__}->{new.__name__}",
                    [Edit(*span, SYMBOL[new] + "=")], _set_attr("op", new()), runtime,
                )  # fmt: skip
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                flipped = COMPARES.get(type(op))
                if flipped is None:
                    continue
                span = self._op_token(operands[i], operands[i + 1], op)
                if span:
                    self._add(
                        node, f"{type(op).__name__}->{flipped.__name__}",
                        [Edit(*span, SYMBOL[flipped])], _set_op(i, flipped()), runtime,
                    )  # fmt: skip
        elif isinstance(node, ast.BoolOp):
            other: type[ast.boolop] = ast.Or if isinstance(node.op, ast.And) else ast.And
            edits = []
            for a, b in zip(node.values, node.values[1:], strict=False):
                span = src.find(src.end(a), src.start(b), (SYMBOL[type(node.op)],))
                if span is None:
                    return
                edits.append(Edit(*span, SYMBOL[other]))
            self._add(
                node, f"{type(node.op).__name__}->{other.__name__}", edits,
                _set_attr("op", other()), runtime,
            )  # fmt: skip
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert, ast.USub)):
            word = {ast.Not: "not", ast.Invert: "~", ast.USub: "-"}[type(node.op)]
            start = src.start(node)
            span = src.find(start, src.start(node.operand), (word,))
            if span and span[0] == start:
                end = span[1]
                while end < len(src.text) and src.text[end] in " \t":
                    end += 1
                self._add(
                    node, f"{type(node.op).__name__}->drop", [Edit(start, end, "")],
                    _replace_with_operand, runtime,
                )  # fmt: skip
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
            if isinstance(node.test, ast.Constant):
                return
            name = type(node).__name__
            values = (False,) if isinstance(node, ast.While) else (True, False)
            for truth in values:
                self._add(
                    node, f"{name}->{truth}",
                    [Edit(src.start(node.test), src.end(node.test), str(truth))],
                    _set_attr("test", ast.Constant(truth)), runtime,
                )  # fmt: skip
        elif isinstance(node, ast.comprehension):
            for j, condition in enumerate(node.ifs):
                if isinstance(condition, ast.Constant):
                    continue
                self._add(
                    node, "CompIf->True",
                    [Edit(src.start(condition), src.end(condition), "True")],
                    _set_if(j), runtime,
                )  # fmt: skip
        elif isinstance(node, ast.Constant):
            nudged = _nudged(node.value)
            if nudged is None:
                return
            if self._equivalent_constant(node):
                self.equivalent_skipped += 1
                return
            kind, new_value = nudged
            self._add(
                node, kind, [Edit(src.start(node), src.end(node), repr(new_value))],
                _set_attr("value", new_value), runtime,
            )  # fmt: skip
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            new_name = NAMES.get(node.func.id)
            if new_name:
                self._add(
                    node, f"{node.func.id}->{new_name}",
                    [Edit(src.start(node.func), src.end(node.func), new_name)],
                    _set_func_name(new_name), runtime,
                )  # fmt: skip
        elif isinstance(node, ast.Attribute):
            owner = _dotted(node.value)
            table, label = None, node.attr
            if owner in ("np", "numpy") and node.attr in NUMPY:
                table = NUMPY
            elif owner == "math" and node.attr in MATH:
                table = MATH
            elif node.attr in METHODS and self._called(node):
                table, label = METHODS, "." + node.attr
            if table is None:
                return
            new_attr = table[node.attr]
            end = src.end(node)
            new_label = ("." if label.startswith(".") else "") + new_attr
            self._add(
                node, f"{label}->{new_label}", [Edit(end - len(node.attr), end, new_attr)],
                _set_attr("attr", new_attr), runtime,
            )  # fmt: skip
        elif isinstance(node, ast.Return) and node.value is not None:
            returned = node.value
            if isinstance(returned, ast.Constant) and (
                returned.value is None or isinstance(returned.value, bool)
            ):
                return  # nothing to take away, or the constant's own mutant flips it
            self._add(
                node, "Return->None", [Edit(src.start(returned), src.end(returned), "None")],
                _set_attr("value", ast.Constant(None)), runtime, at=src.start(returned),
            )  # fmt: skip

    def _equivalent_constant(self, node: ast.Constant) -> bool:
        """A constant whose nudge cannot change behaviour (see :data:`EQUIVALENT`)."""
        up = self.parent.get(id(node))
        call = self.parent.get(id(up)) if up is not None else None
        # the -1 of reshape(-1, ...): numpy takes any negative size as "the rest"
        return (
            node.value == 1
            and isinstance(up, ast.UnaryOp)
            and isinstance(up.op, ast.USub)
            and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "reshape"
            and any(a is up for a in call.args)
        )

    def _called(self, node: ast.Attribute) -> bool:
        """Whether ``node`` is the function of a call (``x.max()``, not ``x.max``)."""
        return id(node) in self.call_funcs

    # ------------------------------------------------------------------ results

    def mutants(self) -> Iterator[Generated]:
        src = self.src
        made: list[Generated] = []
        for index, kind, edits, change, point, runtime in self.found:
            node = self.nodes[index]
            line, col = src.position(point)
            edit_lines = {src.position(e.start)[0] for e in edits}
            first_line = getattr(node, "lineno", line)
            last_line = getattr(node, "end_lineno", max(edit_lines))
            if (edit_lines | {line, first_line}) & src.pragma_lines:
                self.pragma_skipped += 1
                continue
            # the statement holding the edit, mutated in a copy: the rest of the text is
            # unchanged, so the mutant parses as intended when that statement does
            top = self.stmt_path[id(node)]
            statement_copy = copy.deepcopy(_follow(self.tree, top))
            change_in(statement_copy, self.node_path[id(node)][len(top) :], change)
            want = _dump(self.tree, top, statement_copy)
            mutated = apply(src.text, edits)
            if _dump(_parse(mutated), top) != want and isinstance(node, (ast.BinOp, ast.BoolOp)):
                # an operator of another precedence (| for &): keep the operands together
                edits = (Edit(src.start(node), src.start(node), "("), *edits,
                         Edit(src.end(node), src.end(node), ")"))  # fmt: skip
                mutated = apply(src.text, edits)
            if _dump(_parse(mutated), top) != want and isinstance(node, ast.BinOp):
                # a tighter operator inside a chain (``a | b | c``'s outer ``|`` as ``&``):
                # keep each operand together too
                edits = (*edits, *(Edit(src.start(side), src.start(side), "(")
                                   for side in (node.left, node.right)),
                         *(Edit(src.end(side), src.end(side), ")")
                           for side in (node.left, node.right)))  # fmt: skip
                mutated = apply(src.text, edits)
            if _dump(_parse(mutated), top) != want:
                raise AssertionError(f"{self.file}:{line}:{col}: {kind} did not plant as intended")
            first, last = min(edit_lines), max(edit_lines)
            before = "".join(src.lines[first - 1 : last]).rstrip("\n")
            after_lines = mutated.splitlines()
            after = "\n".join(after_lines[first - 1 : first - 1 + (last - first + 1)])
            if len(edit_lines) == 1 and edits[0].text == "":  # dropped text: one line still
                after = after_lines[first - 1]
            statement = self.statement.get(id(node))
            covered = set(range(first_line, last_line + 1))
            if statement is not None:
                covered.add(statement.lineno)  # type: ignore[attr-defined]
            covered |= edit_lines
            made.append(
                Generated(
                    file=self.file,
                    line=line,
                    col=col,
                    kind=kind,
                    edits=edits,
                    before=before,
                    after=after,
                    occurrence=0,
                    lines=tuple(sorted(covered)),
                    import_time=not runtime,
                    scope=self.scope[id(node)],
                    original=src.text,
                )
            )
        made.sort(key=lambda m: (m.line, m.col, m.kind))
        seen: dict[tuple[int, str], int] = {}
        for m in made:
            n = seen.get((m.line, m.kind), 0)
            seen[(m.line, m.kind)] = n + 1
            yield m if n == 0 else dataclasses.replace(m, occurrence=n)


def _parse(text: str) -> ast.AST | None:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _dump(
    tree: ast.AST | None, path: tuple[tuple[str, int | None], ...], instead: object = None
) -> object:
    """The statement at ``path`` in ``tree`` (or ``instead`` of it), dumped, with the
    length of every list on the way (a mutant must change that statement only)."""
    if tree is None:
        return None
    sizes = []
    node: object = tree
    for name, i in path:
        value = getattr(node, name, None)
        if i is None:
            node = value
            continue
        if not isinstance(value, list) or i >= len(value):
            return None
        sizes.append(len(value))
        node = value[i]
    node = node if instead is None else instead
    if not isinstance(node, ast.AST):
        return None
    return sizes, ast.dump(node)


# ---------------------------------------------------------------------- changes to a tree


def _set_attr(name: str, value: object) -> Callable[[ast.AST], None]:
    def change(node: ast.AST) -> None:
        setattr(node, name, value)

    return change


def _set_op(i: int, op: ast.cmpop) -> Callable[[ast.AST], None]:
    def change(node: ast.AST) -> None:
        node.ops[i] = op  # type: ignore[attr-defined]

    return change


def _set_if(j: int) -> Callable[[ast.AST], None]:
    def change(node: ast.AST) -> None:
        node.ifs[j] = ast.Constant(True)  # type: ignore[attr-defined]

    return change


def _set_func_name(name: str) -> Callable[[ast.AST], None]:
    def change(node: ast.AST) -> None:
        node.func.id = name  # type: ignore[attr-defined]

    return change


def _replace_with_operand(node: ast.AST) -> None:
    raise NotImplementedError  # done by change_in, which knows the parent


def _follow(node: object, path: tuple[tuple[str, int | None], ...]) -> object:
    for name, i in path:
        node = getattr(node, name, None)
        if i is not None:
            node = node[i] if isinstance(node, list) and i < len(node) else None
    return node


def change_in(
    root: object, path: tuple[tuple[str, int | None], ...], change: Callable[[ast.AST], None]
) -> None:
    """Apply ``change`` to the node at ``path`` under ``root`` (not the root itself
    when the change replaces the node by its operand)."""
    node = _follow(root, path)
    assert isinstance(node, ast.AST)
    if change is not _replace_with_operand:
        change(node)
        return
    parent = _follow(root, path[:-1])
    name, i = path[-1]
    operand = node.operand  # type: ignore[attr-defined]
    if i is None:
        setattr(parent, name, operand)
    else:
        getattr(parent, name)[i] = operand


# ---------------------------------------------------------------------- entry points


class Mutants(list[Generated]):
    """A module's mutants, how many a ``# pragma: no mutate`` left out, and how many
    were left out as equivalent (:data:`EQUIVALENT`)."""

    pragma_skipped: int = 0
    equivalent_skipped: int = 0


def generate(root: Path, file: str) -> Mutants:
    """Every mutant of ``file`` (a path relative to ``root``), in line order."""
    text = (root / file).read_text(encoding="utf-8")
    walker = _Walker(file, text)
    walker.walk()
    made = Mutants(walker.mutants())
    made.pragma_skipped = walker.pragma_skipped
    made.equivalent_skipped = walker.equivalent_skipped
    return made


@dataclass(frozen=True)
class Accepted:
    """A generated survivor accepted in ``mutants/generated.toml``, with its reason."""

    id: str
    file: str
    line: str
    kind: str
    occurrence: int
    reason: str

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.file, normalized(self.line), self.kind, self.occurrence)

    @property
    def line_number(self) -> int:
        match = re.match(r"^[^:]+:(\d+):", self.id)
        return int(match.group(1)) if match else 0


def load_accepted(path: Path) -> list[Accepted]:
    if not path.exists():
        return []
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    accepted = []
    for entry in doc.get("accepted", []):
        missing = [k for k in ("id", "file", "line", "kind", "reason") if k not in entry]
        if missing:
            raise SystemExit(f"{path.name}: an entry lacks {', '.join(missing)}: {entry}")
        accepted.append(
            Accepted(
                entry["id"],
                entry["file"],
                entry["line"],
                entry["kind"],
                int(entry.get("occurrence", 0)),
                entry["reason"].strip(),
            )
        )
    return accepted


def wrong_occurrences(mutants: list[Generated], accepted: list[Accepted]) -> list[str]:
    """Entries whose id names a mutant of their line, text and kind but another
    ``occurrence``: they would match (and skip) the wrong mutant of that line.

    The id's line and column are only a hint (lines move), but where a mutant of
    exactly that id reads the same line, a different occurrence is a slip: a line
    holding the same kind twice needs ``occurrence = N`` on the entry of the second."""
    by_id = {m.id: m for m in mutants}
    slips = []
    for entry in accepted:
        m = by_id.get(entry.id)
        if m is not None and m.key[:3] == entry.key[:3] and m.occurrence != entry.occurrence:
            slips.append(
                f"  {entry.id}: names occurrence {m.occurrence} of its line's {entry.kind}; "
                f"the entry says {entry.occurrence} (add occurrence = {m.occurrence})"
            )
    return slips


def match_accepted(
    mutants: list[Generated], accepted: list[Accepted]
) -> tuple[dict[str, Accepted], list[Accepted]]:
    """Which mutants (by id) an accepted entry covers, and the entries matching none.

    An entry matches the mutant with its file, line text (whitespace collapsed),
    kind and occurrence; where several lines of the file read the same, the one
    nearest the line its id names."""
    by_key: dict[tuple[str, str, str, int], list[Generated]] = {}
    for m in mutants:
        by_key.setdefault(m.key, []).append(m)
    matched: dict[str, Accepted] = {}
    unmatched = []
    for entry in accepted:
        candidates = [m for m in by_key.get(entry.key, []) if m.id not in matched]
        if not candidates:
            unmatched.append(entry)
            continue
        best = min(candidates, key=lambda m: abs(m.line - entry.line_number))
        matched[best.id] = entry
    return matched, unmatched
