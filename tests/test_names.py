"""Names from traces as each output shows them (warmfit/show/names.py), checked against
what the outputs' own readers make of them: TOML read back by ``tomllib``, and escapes
written apart from the code, from the Unicode categories and Python's escapes."""

from __future__ import annotations

import tomllib
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warmfit.show.names import (
    counted,
    markdown_cell,
    mathtext_literal,
    printable,
    toml_string,
    waves_under,
)

#: Bidirectional embeddings, overrides (U+202A..U+202E) and isolates (U+2066..U+2069).
BIDI = {chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def _shown_escaped(ch: str) -> str:
    """One character as :func:`printable` must show it, written from the definitions."""
    if ch not in BIDI and unicodedata.category(ch) not in ("Cc", "Zl", "Zp"):
        return ch
    named = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
    if ch in named:
        return named[ch]
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("run-1", "run-1"),
        ("qwen3 [/bold] $x$ | é", "qwen3 [/bold] $x$ | é"),
        ("EP1\x1b[31m", "EP1\\x1b[31m"),  # an escape sequence: Cc
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("del\x7f", "del\\x7f"),  # DEL: Cc
        ("nel\x85", "nel\\x85"),  # C1 control: Cc
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),  # Zl, Zp
        ("\u202eevil\u202c", "\\u202eevil\\u202c"),  # a right-to-left override, its pop
        ("\u202a\u202b\u202d", "\\u202a\\u202b\\u202d"),  # embeddings, left-to-right override
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),  # isolates
        ("zero\u200bwidth\u200e", "zero\u200bwidth\u200e"),  # Cf but no override: kept
        ("\u2029", "\\u2029"),  # a name of only the escaped
        # beside an escaped character, the rest is kept as it is, not as Python writes it
        ("C:\\tmp\x1b 'x'", "C:\\tmp\\x1b 'x'"),
        ("zero\u200bwidth\n", "zero\u200bwidth\\n"),
    ],
)
def test_printable_escapes_controls_separators_and_bidi_overrides_only(
    name: str, shown: str
) -> None:
    assert printable(name) == shown


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=12))
def test_printable_escapes_each_character_as_its_definition_says(name: str) -> None:
    assert printable(name) == "".join(_shown_escaped(ch) for ch in name)


def test_a_markdown_cell_escapes_the_pipe_and_controls() -> None:
    assert markdown_cell("a|b\nc") == "a\\|b\\nc"
    assert markdown_cell("||") == "\\|\\|"
    assert markdown_cell("plain") == "plain"


def test_a_mathtext_literal_escapes_every_dollar_and_controls() -> None:
    assert mathtext_literal("$\\alpha$ costs $5") == "\\$\\alpha\\$ costs \\$5"
    assert mathtext_literal("x\x1b") == "x\\x1b"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ('run "1"', '"run \\"1\\""'),
        ("a\\b", '"a\\\\b"'),
        ("\b\t\n\f\r", '"\\b\\t\\n\\f\\r"'),
        ("\x00\x1f", '"\\u0000\\u001F"'),
        ("\x7f", '"\\u007F"'),
        (" ~\x80é", '" ~\x80é"'),  # space, tilde and what is above DEL: as they are
    ],
)
def test_a_toml_string_is_written_with_toml_escapes(value: str, written: str) -> None:
    assert toml_string(value) == written


@settings(max_examples=80, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=16))
def test_a_toml_string_reads_back_through_tomllib_as_the_value(value: str) -> None:
    assert tomllib.loads(f"name = {toml_string(value)}\n") == {"name": value}


def test_counted_makes_the_noun_plural_unless_the_count_is_one() -> None:
    assert counted(0, "wave") == "0 waves"
    assert counted(1, "wave") == "1 wave"
    assert counted(2, "wave") == "2 waves"
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(2, "entry", "entries") == "2 entries"
    assert counted(1_234_567, "byte") == "1,234,567 bytes"


def test_waves_under_says_its_peak_for_one_and_their_peak_for_others() -> None:
    assert waves_under(1) == "1 wave under its peak"
    assert waves_under(0) == "0 waves under their peak"
    assert waves_under(2) == "2 waves under their peak"
    assert waves_under(1000) == "1,000 waves under their peak"
