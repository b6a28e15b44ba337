"""Byte counts as people write and read them (warmfit/show/units.py), checked against the
units' definitions: decimal units are powers of 1000, binary ones powers of 1024."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warmfit.show.units import LARGEST, format_bytes, parse_bytes

#: Each unit's bytes, by definition (SI and IEC prefixes), written apart from the code.
DEFINED = {
    "B": 1,
    "KB": 1000,
    "MB": 1000 * 1000,
    "GB": 1000 * 1000 * 1000,
    "TB": 1000 * 1000 * 1000 * 1000,
    "KiB": 1024,
    "MiB": 1024 * 1024,
    "GiB": 1024 * 1024 * 1024,
    "TiB": 1024 * 1024 * 1024 * 1024,
}


@pytest.mark.parametrize("unit", list(DEFINED))
def test_one_of_each_unit_is_its_definition(unit: str) -> None:
    assert parse_bytes(f"1 {unit}") == DEFINED[unit]
    assert parse_bytes(f"1{unit.lower()}") == DEFINED[unit]
    assert parse_bytes(f"3{unit.upper()}") == 3 * DEFINED[unit]


def test_a_bare_number_is_bytes() -> None:
    assert parse_bytes("7") == 7
    assert parse_bytes(" 7 ") == 7


@given(st.sampled_from(list(DEFINED)), st.integers(0, 10**6), st.integers(0, 999))
def test_a_decimal_count_of_a_unit_is_rounded_down_to_whole_bytes(
    unit: str, whole: int, thousandths: int
) -> None:
    # whole.thousandths units: (whole * 1000 + thousandths) / 1000 of the unit, floored
    expected = (whole * 1000 + thousandths) * DEFINED[unit] // 1000
    if expected > LARGEST:
        with pytest.raises(ValueError, match="above the largest size"):
            parse_bytes(f"{whole}.{thousandths:03d}{unit}")
    else:
        assert parse_bytes(f"{whole}.{thousandths:03d}{unit}") == expected


@pytest.mark.parametrize("text", ["-5", "1.2.3", "GB 5", "5 parsecs", "", "0x10"])
def test_what_is_not_a_size_is_a_value_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size: give bytes"):
        parse_bytes(text)


def test_a_size_above_int64_is_named_whole_up_to_40_characters() -> None:
    forty = "9" * 40
    with pytest.raises(ValueError) as caught:
        parse_bytes(forty)
    assert f"'{forty}' is above the largest size" in str(caught.value)
    forty_one = "9" * 41
    with pytest.raises(ValueError) as caught:
        parse_bytes(forty_one)
    assert f"'{'9' * 20}...(41 characters)' is above the largest size" in str(caught.value)
    assert parse_bytes(str(LARGEST)) == LARGEST


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (999, "999 B"),
        (1000, "1.00 KB"),  # exactly a unit: that unit
        (1100, "1.10 KB"),
        (10**12, "1.00 TB"),
        (10**12 - 10**9, "999 GB"),
        (12_345_678, "12.3 MB"),  # 10 to 100 of a unit: one decimal
        (10 * 10**6, "10.0 MB"),  # exactly 10: one decimal
        (9_990_000, "9.99 MB"),  # under 10: two
        (100 * 10**6, "100 MB"),  # exactly 100: none
        (-4_200_000, "-4.20 MB"),
        (None, "—"),
    ],
)
def test_a_byte_count_is_shown_with_three_significant_figures(
    count: int | None, shown: str
) -> None:
    assert format_bytes(count) == shown


# --- audit of 12-06g (audit2) ---


@pytest.mark.parametrize(
    ("text", "count"),
    [(".5 GB", 500_000_000), (".25GiB", 2**28), ("0.5 GB", 500_000_000), ("5. MB", 5_000_000)],
)
def test_a_fraction_written_without_its_leading_or_trailing_digits_is_a_size(
    text: str, count: int
) -> None:
    """.5 GB is 0.5 GB = 500,000,000 bytes; .25 GiB a quarter of 2**30 = 2**28."""
    assert parse_bytes(text) == count


# --- format_bytes counts its three figures once rounded (12-06g) ---

FACTORS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (999_499, "999 KB"),
        (999_500, "1.00 MB"),  # 999.5 KB rounds to 1000: was "1000 KB"
        (9_996, "10.0 KB"),  # was "10.00 KB"
        (99_960, "100 KB"),  # was "100.0 KB"
        (-999_500, "-1.00 MB"),
        (999_999_999_999, "1.00 TB"),  # was "1000 GB"
        (999_500_000_000_000, "1000 TB"),  # TB is the largest unit
    ],
)
def test_format_bytes_counts_three_figures_once_rounded(count: int, shown: str) -> None:
    assert format_bytes(count) == shown


@given(st.integers(min_value=1000, max_value=999_499_999_999_999), st.booleans())
def test_format_bytes_shows_three_significant_figures_below_1000_of_its_unit(
    count: int, negative: bool
) -> None:
    """Read back by its definition: a number under 1000 of the largest unit not above
    it, with exactly three significant figures, within half its last figure of count."""
    number, unit = format_bytes(-count if negative else count).split(" ")
    value = abs(float(number))
    assert number.startswith("-") == negative
    assert 1 <= value < 1000
    assert len(number.lstrip("-").replace(".", "").lstrip("0")) == 3
    decimals = len(number.partition(".")[2])
    assert abs(value * FACTORS[unit] - count) <= FACTORS[unit] * 10**-decimals / 2 * 1.000001
