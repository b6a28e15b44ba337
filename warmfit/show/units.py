"""Byte counts as people write and read them: ``128.8 GB``, ``80 GiB``.

Decimal units (KB, MB, GB, TB: powers of 1000) as GPU vendors and ART's
measurements give them, binary ones (KiB, MiB, GiB, TiB: powers of 1024) as
allocators report them. Nothing here knows about files or the command line.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
#: The largest size: a trace's byte counts are int64, and so is what they are compared with.
LARGEST = 2**63 - 1
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


def size_unit(text: str) -> tuple[str, str] | None:
    """The number (maybe none) and the unit of ``text`` where it reads as a size with a unit
    (``MiB``, ``8MiB``, ``128.8 gb``; a bare number or ``B`` is none), else ``None``: what a
    ``--budget 8 MiB`` written with a space leaves as a path.

    >>> size_unit("MiB"), size_unit("8MiB"), size_unit("trace.parquet"), size_unit("8")
    (('', 'MiB'), ('8', 'MiB'), None, None)
    """
    match = re.fullmatch(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)?)\s*([A-Za-z]+)\s*", text)
    if match is None or match.group(2).upper() not in UNITS or match.group(2).upper() == "B":
        return None
    return match.group(1), match.group(2)


def parse_bytes(text: str) -> int:
    """Bytes from ``12345``, ``128.8 GB`` or ``80GiB`` (whole bytes, rounded down).

    >>> parse_bytes("128.8 GB"), parse_bytes("80GiB"), parse_bytes("1024")
    (128800000000, 85899345920, 1024)
    >>> parse_bytes("9223372036854775807"), parse_bytes("8 TiB") // 2**40
    (9223372036854775807, 8)
    >>> parse_bytes("12 parsecs")
    Traceback (most recent call last):
    ...
    ValueError: '12 parsecs' is not a size: give bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB (e.g. 128.8GB).
    """
    match = _SIZE.fullmatch(text)
    unit = UNITS.get(match.group(2).upper()) if match else None
    if match is None or unit is None:
        raise ValueError(
            f"{text!r} is not a size: give bytes, or a number with KB, MB, GB, TB, KiB, MiB, "
            "GiB or TiB (e.g. 128.8GB)."
        )
    try:
        size = Decimal(match.group(1)) * unit
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"{text!r} is not a size.") from None
    if size > LARGEST:  # compared as a decimal: 5,000 digits never become an int
        shown = text if len(text) <= 40 else f"{text[:20]}...({len(text):,} characters)"
        raise ValueError(
            f"{shown!r} is above the largest size warmfit counts, 2**63 - 1 bytes "
            f"({LARGEST:,}, about 9.2 EB): give a size a device could hold, such as 128.8GB."
        )
    return int(size)


def format_bytes(count: int | None) -> str:
    """A byte count for a person: three significant figures in B, KB, MB, GB or TB.

    >>> format_bytes(112_506_383_872), format_bytes(-4_200_000), format_bytes(512), format_bytes(None)
    ('113 GB', '-4.20 MB', '512 B', '—')
    >>> format_bytes(999_499), format_bytes(999_500), format_bytes(9_996), format_bytes(-99_950)
    ('999 KB', '1.00 MB', '10.0 KB', '-100 KB')
    """
    if count is None:
        return "—"
    if abs(count) < 1000:
        return f"{count} B"
    for unit, factor in (("KB", 10**3), ("MB", 10**6), ("GB", 10**9)):
        text = _three_figures(count / factor)
        if abs(float(text)) < 1000:  # 999.5 KB rounds to 1000: 1.00 MB
            return f"{text} {unit}"
    return f"{_three_figures(count / 10**12)} TB"


def _three_figures(value: float) -> str:
    """``value`` with 2, 1 or 0 decimals: three significant figures once rounded
    (9.996 is 10.0, 99.96 is 100), as many as it has from 100 up."""
    digits = 2
    while digits and abs(round(value, digits)) >= 10 ** (3 - digits):
        digits -= 1
    return f"{value:.{digits}f}"
