"""Showing names that come from traces: escaped for each place they are shown.

Run labels and signatures are data a trainer wrote, so they may hold
anything: rich markup (``[/bold]``), terminal escape sequences, newlines, a
table's ``|``, matplotlib's ``$...$`` mathtext, a DEL that TOML forbids. Each
function here makes one kind of output show the name as it is, harmlessly.
"""

from __future__ import annotations

import unicodedata

#: Unicode categories shown escaped: control characters, line and paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})
#: Bidirectional overrides and isolates, which reorder what a terminal shows.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(ch: str) -> bool:
    return ch in _BIDI or unicodedata.category(ch) in _ESCAPED_CATEGORIES


def printable(name: str) -> str:
    """``name`` with control characters escaped as Python writes them; the rest unchanged.

    Terminal escape sequences, newlines, DEL and bidirectional overrides can
    then neither act on the terminal nor break a line of a table.

    >>> printable("EP1\\x1b[31m\\n\\x7f"), printable("qwen3-35b [/bold]")
    ('EP1\\\\x1b[31m\\\\n\\\\x7f', 'qwen3-35b [/bold]')
    """
    if not any(_escaped(ch) for ch in name):
        return name
    return "".join(repr(ch)[1:-1] if _escaped(ch) else ch for ch in name)


def markdown_cell(name: str) -> str:
    """``name`` for a cell of a markdown table: escaped controls and ``|``.

    >>> markdown_cell("a|b\\nc")
    'a\\\\|b\\\\nc'
    """
    return printable(name).replace("|", "\\|")


def mathtext_literal(name: str) -> str:
    """``name`` for matplotlib text: escaped controls, and ``$`` so no mathtext is parsed.

    >>> mathtext_literal("$\\\\undefinedcommand$")
    '\\\\$\\\\undefinedcommand\\\\$'
    """
    return printable(name).replace("$", "\\$")


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f"}
_TOML_ESCAPES["\r"] = "\\r"


def toml_string(value: str) -> str:
    """``value`` as a TOML basic string that reads back as ``value``.

    TOML forbids control characters (DEL included) in strings unless escaped;
    JSON's escaping leaves DEL raw, so this writes its own.

    >>> toml_string('run "1"\\x7f')
    '"run \\\\"1\\\\"\\\\u007F"'
    """
    out = []
    for ch in value:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def waves_under(count: int) -> str:
    """``N wave(s) under its/their peak``, as every warning of waves under their peak says it.

    >>> waves_under(1), waves_under(3)
    ('1 wave under its peak', '3 waves under their peak')
    """
    return f"{counted(count, 'wave')} under {'its' if count == 1 else 'their'} peak"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one.

    The plural is ``noun + "s"`` unless given. Counts get thousands separators.

    >>> counted(1, "run"), counted(3, "run"), counted(0, "log"), counted(1200, "entry", "entries")
    ('1 run', '3 runs', '0 logs', '1,200 entries')
    """
    word = noun if count == 1 else (plural if plural is not None else noun + "s")
    return f"{count:,} {word}"
