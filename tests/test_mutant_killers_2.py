"""Tests that fail when the code is wrong (the mutant list refreshed for the replay package).

Each test here kills one or more planted bugs of ``mutants/mutants.toml``
that the rest of the suite let through; the mutant ids are named in each
test's docstring. The numbers are spelled out so that a reader can check
them by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from warmfit.checks import check_engines_agree, check_price_is_pure
from warmfit.files import write_atomically
from warmfit.policies import Policy, PriceRequest, Reading
from warmfit.policies.rule import RATE, DeclaredPolicy, Max
from warmfit.units import parse_bytes

# --------------------------------------------------------------------------- units


def test_binary_units_are_powers_of_1024() -> None:
    """Kills units-kib-is-1000: 1 KiB is 1,024 bytes, 1.5 KiB 1,536."""
    assert parse_bytes("1KiB") == 1_024
    assert parse_bytes("1.5 KiB") == 1_536
    assert parse_bytes("2 KB") == 2_000


def test_a_fractional_size_is_rounded_down() -> None:
    """Kills units-round-half-up: 1.9 bytes is 1 byte, 0.0009 KB (0.9 bytes) is 0."""
    assert parse_bytes("1.9") == 1
    assert parse_bytes("0.0009 KB") == 0
    assert parse_bytes("1.0009 KB") == 1_000


# --------------------------------------------------------------------------- atomic outputs


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name descriptors")
def test_an_output_is_fsynced_before_it_is_renamed_over_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills files-no-fsync: the temporary file's bytes reach the disk before the rename.

    Whether bytes reached the disk cannot be seen from the file, so the calls
    are recorded: fsync(temporary file), rename(temporary, target), fsync(directory).
    """
    events: list[tuple[str, ...]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "out.bin"
    write_atomically(target, lambda sink: sink.write(b"12345"))
    assert target.read_bytes() == b"12345"
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"]
    temporary = events[1][1]
    assert events[0] == ("fsync", temporary)
    assert events[1] == ("replace", temporary, str(target))
    assert Path(temporary).name.startswith(".out.bin.") and temporary.endswith(".tmp")
    assert events[2] == ("fsync", str(tmp_path))


def test_a_write_that_fails_half_way_leaves_the_target_and_no_temporary_file(
    tmp_path: Path,
) -> None:
    """Kills files-written-in-place and files-temporary-kept-on-failure."""
    target = tmp_path / "out.bin"
    target.write_bytes(b"the old 17 bytes!")

    def half(sink: BinaryIO) -> None:
        sink.write(b"4 by")
        sink.flush()
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, half)
    assert target.read_bytes() == b"the old 17 bytes!"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


# --------------------------------------------------------------------------- public conformance checks


class CountsItsQuestions(Policy):
    """Broken on purpose: ``price`` counts how often it was asked (same answers)."""

    name = "counts-its-questions"
    summary = "broken on purpose: price() changes the profile"

    def __init__(self) -> None:
        self.rate: float | None = None
        self.asked = 0

    def observe(self, reading: Reading) -> None:
        self.rate = max(self.rate or 0.0, reading.rate)

    def price(self, request: PriceRequest) -> float | None:
        self.asked += 1
        return None if self.rate is None else self.rate * request.packed_tokens


def test_check_price_is_pure_sees_a_price_that_changes_the_profile() -> None:
    """Kills checks-purity-unchecked: the answers repeat, only the state changes."""
    profile = CountsItsQuestions()
    profile.observe(Reading(100, 100, 5_000))
    assert profile.price(PriceRequest(10, 10)) == profile.price(PriceRequest(10, 10)) == 500.0
    with pytest.raises(AssertionError, match="price\\(\\) changed the profile"):
        check_price_is_pure(CountsItsQuestions)


class ShapeSensitive(DeclaredPolicy):
    """Broken on purpose: the rule looks at its input's shape, not only its values.

    One number (the reference engine) is priced ``rate_max * n``; an array
    (the vectorized engine) ``2 * rate_max * n``, so the engines disagree.
    """

    name = "shape-sensitive"
    summary = "broken on purpose: not elementwise"
    rate_max = Max(RATE)

    @staticmethod
    def rule(state: Any, n: Any, m: Any) -> Any:
        return state.rate_max * n * (1.0 + np.ndim(n))


def test_check_engines_agree_compares_the_bytes() -> None:
    """Kills checks-engines-never-compared."""
    profile = ShapeSensitive()
    profile.observe(Reading(100, 100, 5_000))
    assert profile.price(PriceRequest(10, 10)) == 500.0  # 50 B/token * 10, times (1 + 0)
    with pytest.raises(AssertionError, match="the engines disagree"):
        check_engines_agree(ShapeSensitive)
