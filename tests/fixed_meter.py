"""A meter whose readings a test sets: every wave reads the same baseline and peak.

Quicker than a CpuMeter (no scan of live tensors, no dispatch mode) where a test
needs only a wave's delta, to check what the Pricer learns from it by hand.
"""

from __future__ import annotations


class FixedMeter:
    """Every reading: ``baseline`` bytes allocated, a peak of ``peak`` bytes."""

    name = "fixed"
    device_name = "a fixed meter (tests)"
    has_reserved = False

    def __init__(self, baseline: int, peak: int) -> None:
        self.baseline = baseline
        self.peak = peak
        self.closed = False

    def allocated_bytes(self) -> int:
        return self.baseline

    def peak_bytes(self) -> int:
        return self.peak

    def reset_peak(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
