"""What a trace says about its waves' batches (issue 29 items 1 and 2): padding left out of
the token counts (``padded_tokens``), and waves of equal tokens whose peaks differ by more
than the safety margin (``sum_sq_tokens``). ``warmfit validate`` warns; replay ignores both."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.format.shape import (
    padded_waves,
    padding_warning,
    unequal_peaks,
    unequal_peaks_warning,
)
from warmfit.format.trace import read_trace, readings_frame, write_trace

GB = 1_000_000_000


def _trace(path: Path, waves: list[dict[str, int]]) -> Path:
    """One whole caller reading per wave, baseline 0 (its peak is its actual bytes)."""
    rows = [
        dict(seq=i, wave=i, step=i, signature="train/gpt2", whole=True, logical_tokens=w["packed_tokens"], **w)
        for i, w in enumerate(waves)
    ]  # fmt: skip
    write_trace(readings_frame(rows), path / "rank0.parquet")
    return path


def _validate(path: Path) -> tuple[str, str]:
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output  # warnings never fail validate
    return result.stdout, result.stderr


#: A signature's first wave pays one-time costs and is not compared (warm-fit's seed).
_SEED = dict(packed_tokens=128, peak_bytes=GB // 2)


def test_equal_tokens_with_peaks_30_percent_apart_are_named_without_the_column(tmp_path):
    # two waves of 256 tokens (8 x 32 and 4 x 64), peaks 1.0 GB and 1.3 GB: +30% > 10%
    waves = [
        _SEED,
        dict(packed_tokens=256, peak_bytes=GB),
        dict(packed_tokens=256, peak_bytes=13 * GB // 10),
    ]
    out, err = _validate(_trace(tmp_path, waves))
    assert "waves with the same tokens differ in peak by more than the safety margin (10%" in err
    assert (
        "run 'run' signature 'train/gpt2': 2 waves of 256 packed tokens (after each rank's " in err
    )
    assert "first wave of it) peak at " in err
    assert "1.00 GB to 1.30 GB (+30%)" in err
    assert "This trace has no sum_sq_tokens column" in err  # names the column it lacks
    assert "by sequence-length bucket" in err and "docs/how-to/integrations.md" in err
    assert "differ in peak" not in out  # stdout stays the summary


def test_with_the_column_the_warning_gives_each_waves_sum_of_squared_lengths(tmp_path):
    # 8 sequences of 32: 8 * 32^2 = 8,192; 4 of 64: 4 * 64^2 = 16,384 (the same 256 tokens)
    waves = [
        dict(_SEED, sum_sq_tokens=4 * 32 * 32),
        dict(packed_tokens=256, peak_bytes=GB, sum_sq_tokens=8_192),
        dict(packed_tokens=256, peak_bytes=13 * GB // 10, sum_sq_tokens=16_384),
    ]
    _, err = _validate(_trace(tmp_path, waves))
    assert "1.00 GB to 1.30 GB (+30%; sum_sq_tokens 8,192 and 16,384)" in err
    assert "The trace has the column sum_sq_tokens" in err


@pytest.mark.parametrize("second", [GB, 11 * GB // 10, 105 * GB // 100, 95 * GB // 100])
def test_peaks_within_the_10_percent_margin_are_not_named(tmp_path, second):
    # 1.1 GB is exactly int(1.0 GB * 1.1): a perfect price of the first still covers it
    waves = [
        _SEED,
        dict(packed_tokens=256, peak_bytes=GB),
        dict(packed_tokens=256, peak_bytes=second),
    ]
    _, err = _validate(_trace(tmp_path, waves))
    assert err == ""


def test_the_first_wave_of_a_signature_is_not_compared(tmp_path):
    # its 1.3 GB pays one-time costs (the gradients' first allocation): warm-fit's seed
    waves = [
        dict(packed_tokens=256, peak_bytes=13 * GB // 10),
        dict(packed_tokens=256, peak_bytes=GB),
    ]
    _, err = _validate(_trace(tmp_path, waves))
    assert err == ""


def test_other_tokens_or_another_signature_are_not_compared(tmp_path):
    waves = [
        ("s", 128, 128, GB // 2),  # each signature's seed
        ("s", 256, 256, GB),
        ("s", 257, 257, 2 * GB),  # one token more
        ("s", 256, 512, 2 * GB),  # other logical tokens (prefix sharing): priced apart
        ("other", 128, 128, GB // 2),
        ("other", 256, 256, 3 * GB),  # another signature
    ]
    rows = [
        dict(seq=i, wave=i, signature=sig, whole=True, packed_tokens=n, logical_tokens=m,
             peak_bytes=peak)
        for i, (sig, n, m, peak) in enumerate(waves)
    ]  # fmt: skip
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    _, err = _validate(tmp_path)
    assert err == ""


def test_padding_over_10_percent_of_a_waves_tokens_is_named_with_the_fix(tmp_path):
    # lengths 3 and 5 padded to 5: packed 8, padded 10 (20%); 9 of 10 (10%: not over)
    waves = [
        dict(packed_tokens=8, padded_tokens=10, sum_sq_tokens=34, peak_bytes=1000),
        dict(packed_tokens=9, padded_tokens=10, sum_sq_tokens=41, peak_bytes=1000),
        dict(packed_tokens=16, padded_tokens=16, sum_sq_tokens=128, peak_bytes=2000),
    ]
    _, err = _validate(_trace(tmp_path, waves))
    assert (
        "padding is over 10% of a wave's tokens in 1 of 3 waves of run 'run' signature "
        "'train/gpt2' (up to 20%)"
    ) in err
    assert "tokens=padded_token_counts" in err and "record_trainer(...)" in err


def test_old_traces_without_the_columns_say_nothing_of_padding_and_replay_alike(tmp_path):
    waves = [
        _SEED,
        dict(packed_tokens=256, peak_bytes=GB),
        dict(packed_tokens=512, peak_bytes=2 * GB),
    ]
    old = _trace(tmp_path / "old", waves)
    new = _trace(tmp_path / "new", [dict(w, padded_tokens=2 * w["packed_tokens"], sum_sq_tokens=w["packed_tokens"]) for w in waves])  # fmt: skip
    assert _validate(old)[1] == ""
    assert "padding is over 10%" in _validate(new)[1]
    replays = [CliRunner().invoke(app, ["replay", str(p), "-f", "json"]) for p in (old, new)]
    assert [r.exit_code for r in replays] == [0, 0]
    assert replays[0].stdout == replays[1].stdout.replace(str(new), str(old))


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("padded_tokens", 7, "is below packed_tokens"),
        ("sum_sq_tokens", 0, "is not positive"),
    ],
)
def test_a_value_that_breaks_the_columns_rule_is_named(tmp_path, column, value, problem):
    rows = [
        dict(
            seq=0,
            wave=0,
            signature="s",
            packed_tokens=8,
            logical_tokens=8,
            peak_bytes=9,
            **{column: value},
        )
    ]
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    result = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert f"column '{column}', row 0: value {value} {problem}" in " ".join(result.stderr.split())
    assert read_trace([tmp_path], columns=["seq"]).height == 1  # replay's columns: not read


def test_a_column_of_another_type_is_refused_naming_it(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(seq=0, wave=0, signature="s", packed_tokens=8, logical_tokens=8, peak_bytes=9)]
    write_trace(readings_frame(rows), tmp_path / "t.parquet")
    table = pq.read_table(tmp_path / "t.parquet").append_column("padded_tokens", pa.array(["ten"]))
    pq.write_table(table, tmp_path / "t.parquet")
    result = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2 and "padded_tokens" in result.stderr


def _rows_with_baselines(path: Path, waves: list[tuple[int, int, int, int]]) -> Path:
    """One whole reading per wave: (packed tokens, baseline, peak, sum_sq_tokens)."""
    rows = [
        dict(seq=i, wave=i, step=i // 2, signature="train", whole=True, packed_tokens=n,
             logical_tokens=n, baseline_bytes=base, peak_bytes=peak, sum_sq_tokens=sq)
        for i, (n, base, peak, sq) in enumerate(waves)
    ]  # fmt: skip
    write_trace(readings_frame(rows), path / "rank0.parquet")
    return path


def test_equal_tokens_whose_baselines_explain_the_gap_name_the_baselines_not_attention(
    tmp_path,
):
    """The case observed (issue 41): two waves of 59 packed tokens, a dense mask. The
    first wave of a step starts at 2.00 GB and allocates the fp32 gradients, 420 MB,
    besides 1.00 GB of activations (delta 1.42 GB); the second starts at 2.42 GB with
    the gradients held (delta 1.00 GB): +42%, although their sum_sq_tokens differ
    (3,481 = 59^2 and 1,741 = 29^2 + 30^2). 1.42 GB less the 420 MB that the baselines
    differ by is 1.00 GB, within the 10% margin: the baselines explain it."""
    base, act, grads = 2 * GB, GB, 420_000_000
    waves = [
        (128, base, base + grads + act, 128 * 128),  # the seed: not compared
        (59, base + grads, base + grads + act, 59 * 59),  # (zero_grad kept them here)
        (59, base, base + grads + act, 59 * 59),  # step 1, first wave: allocates them
        (59, base + grads, base + grads + act, 29 * 29 + 30 * 30),
    ]
    _, err = _validate(_rows_with_baselines(tmp_path, waves))
    assert (
        "run 'run' signature 'train': 3 waves of 59 packed tokens (after each rank's first "
        "wave of it) peak at 1.00 GB to 1.42 GB (+42%; sum_sq_tokens 3,481 and 3,481; the "
        "wave of the higher peak started 420 MB lower, at a baseline of 2.00 GB against "
        "2.42 GB, and left 420 MB allocated after it)" in err
    )
    assert "Their baselines explain it, not their tokens' shape" in err
    assert "zero_grad(set_to_none=True)" in err
    assert "attention" not in err


def test_equal_tokens_at_a_baseline_that_explains_nothing_still_name_attention(tmp_path):
    """The same +42%, both waves starting at 2.00 GB: the baselines explain nothing."""
    base = 2 * GB
    waves = [
        (128, base, base + GB, 128 * 128),
        (59, base, base + GB, 29 * 29 + 30 * 30),
        (59, base, base + 142 * GB // 100, 59 * 59),
    ]
    _, err = _validate(_rows_with_baselines(tmp_path, waves))
    assert "1.00 GB to 1.42 GB (+42%; sum_sq_tokens 1,741 and 3,481)" in err
    assert "attention (which without a fused kernel grows" in err
    assert "baselines explain" not in err


def test_equal_token_waves_at_the_largest_peak_are_no_error(tmp_path):
    """Issue 42: peaks at 2**63 - 1 made the margin int(low * 1.1) overflow Int64
    ('conversion from f64 to i64'); a margin beyond Int64 holds every peak."""
    top = 2**63 - 1
    waves = [(128, 0, top, 1), (59, 0, top, 1), (59, 0, top - 10**17, 1)]
    _, err = _validate(_rows_with_baselines(tmp_path, waves))
    assert "differ in peak" not in err and "error" not in err


# --------------------------------------------------------------------------------------
# The functions themselves, on frames of readings built here (issue 38's generated pass)


def _readings(*waves: dict[str, object]) -> pl.DataFrame:
    """One reading per dict, in order; a dict's ``wave`` defaults to the one before it plus
    one (a wave of several readings repeats it); seq counts up per run and rank."""
    rows, seq, wave = [], {}, -1
    for given in waves:
        row = {"signature": "s", "packed_tokens": 256, "whole": True, **given}
        row.setdefault("logical_tokens", row["packed_tokens"])
        key = (row.get("run", "run"), row.get("rank", 0))
        wave = int(row.setdefault("wave", wave + 1))  # type: ignore[call-overload]
        row["seq"] = seq[key] = seq.get(key, -1) + 1
        rows.append(row)
    return readings_frame(rows)


def _padded(packed: int, padded: int | None, **more: object) -> dict[str, object]:
    return dict(packed_tokens=packed, padded_tokens=padded, peak_bytes=1000, **more)


def test_padding_shares_counted_per_wave_from_its_largest_padded_tokens() -> None:
    frame = _readings(
        _padded(1799, 2000),  # 201 / 2000 = 10.05%: over 10%
        _padded(900, 1000),  # 10%: not over
        _padded(5, 5),  # none
        _padded(0, 0),  # no tokens at all: no share, not a padded wave
        _padded(0, 1),  # 1 / 1 = 100%
        _padded(10, 10, phase="forward"),  # one wave of two readings: the largest, 20 of
        _padded(10, 20, wave=5),  # 20 padded tokens, is 50% padding
        _padded(8, None),  # unknown: not counted
        _padded(8, 8, signature="unpadded"),  # a signature with no padded wave: not named
    )
    # waves with padded tokens: 5 (not 0 of 0, nor the unknown); over 10%: 3
    assert padded_waves(frame).rows() == [("run", "s", 5, 3, 1.0)]
    assert padded_waves(frame.head(1)).rows() == [("run", "s", 1, 1, 0.1005)]


def test_the_padding_warning_names_up_to_shown_signatures_and_counts_the_rest() -> None:
    six = _readings(*[_padded(8, 10, signature=f"s{i}") for i in range(6)])
    text = padding_warning(six)
    assert "1 of 1 wave of run 'run' signature 's4' (up to 20%); and 1 more signatures." in text
    assert "'s5'" not in text
    assert "more signatures" not in padding_warning(six.head(5))
    assert "1 wave of run 'run' signature 's0' (up to 20%); and 1 more signatures" in (
        padding_warning(six.head(2), shown=1)
    )
    assert "more signatures" not in padding_warning(six.head(1), shown=1)
    assert padding_warning(_readings(_padded(8, 8))) == ""


def _wave(peak: int, baseline: int = 0, **more: object) -> dict[str, object]:
    return dict(peak_bytes=peak, baseline_bytes=baseline, **more)


#: A signature's first wave on a rank: left out of the comparison.
_FIRST = _wave(5, packed_tokens=1)


def test_equal_token_waves_compare_each_waves_largest_delta_without_oom_or_zero_waves() -> None:
    frame = _readings(
        _FIRST,
        _wave(1000, phase="forward"),  # wave 1: readings of 1,000 and 1,200 bytes:
        _wave(1200, wave=1),  # its delta is 1,200
        _wave(5000, baseline=5000),  # used none: left out (else low 0)
        _wave(900, phase="forward", oom=True),  # ran out of memory in one reading: out
        _wave(9000, wave=3),
        _wave(1500),  # +25% over 1,200
    )
    found = unequal_peaks(frame, 1.1)
    assert found.select("waves", "low", "high").rows() == [(2, 1200, 1500)]
    # waves of 1 and 2 bytes: int(1 * 1.1) = 1 < 2, named; 1 byte counts as used
    tiny = unequal_peaks(_readings(_FIRST, _wave(1), _wave(2)), 1.1)
    assert tiny.select("waves", "low", "high").rows() == [(2, 1, 2)]
    assert unequal_peaks_warning(_readings(_FIRST, _wave(1000), _wave(1100)), 1.1) == ""


def test_the_first_wave_is_the_first_in_seq_order_and_sum_sq_is_the_waves_largest() -> None:
    frame = _readings(
        _wave(3000, sum_sq_tokens=100),  # wave 0: the first, though its readings span wave 1
        _wave(1000, wave=1, sum_sq_tokens=300),
        _wave(1000, wave=1, sum_sq_tokens=200),
        _wave(2000, wave=0, sum_sq_tokens=100),
        _wave(1500, wave=2, sum_sq_tokens=400),
    )
    found = unequal_peaks(frame, 1.1)
    assert found.select("waves", "low", "high", "low_sum_sq", "high_sum_sq").rows() == [
        (2, 1000, 1500, 300, 400)
    ]


def _kept(low_base: int, high_base: int, high: int, after: int | None) -> pl.DataFrame:
    """Waves of equal tokens: the first (left out), one of 1,000 bytes from ``low_base``,
    one of ``high`` bytes from ``high_base``, and, unless None, a wave of other tokens
    from ``after`` (what the high wave left allocated: ``after - high_base``)."""
    waves = [_FIRST, _wave(low_base + 1000, low_base), _wave(high_base + high, high_base)]
    if after is not None:
        waves.append(_wave(after + 10, after, packed_tokens=7))
    return _readings(*waves)


@pytest.mark.parametrize(
    ("low_base", "high", "explained"),
    [
        (1, 1101, True),  # 1,101 - 1 = 1,100 = int(1,000 * 1.1): within the margin, exactly
        (1, 1102, False),  # 1,101 is over it
        (10, 1121, False),  # started 10 lower, but 1,111 is still over 1,100
        (100, 1200, True),
        (0, 1101, False),  # no lower start: the baselines explain nothing
    ],
)
def test_the_baselines_explain_a_gap_only_when_the_high_wave_started_lower_by_enough(
    low_base: int, high: int, explained: bool
) -> None:
    found = unequal_peaks(_kept(low_base, 0, high, None), 1.1)
    assert found.get_column("by_baseline").to_list() == [explained]


@pytest.mark.parametrize(
    ("after", "shown"),
    [(1, ", and left 1 B allocated after it)"), (0, ")"), (None, ")")],
)
def test_what_the_high_wave_left_allocated_is_the_next_waves_baseline_less_its_own(
    after: int | None, shown: str
) -> None:
    # 1,200 - 150 = 1,050 is within int(1,000 * 1.1); the wave before the high one started
    # 150 bytes above it: what that one left is not the high wave's
    text = unequal_peaks_warning(_kept(150, 0, 1200, after), 1.1)
    assert (
        "peak at 1.00 KB to 1.20 KB (+20%; the wave of the higher peak started 150 B lower, at "
        "a baseline of 0 B against 150 B" + shown
    ) in " ".join(text.split())
    assert unequal_peaks(_kept(150, 0, 1200, after), 1.1).item(0, "high_kept") == after


def test_groups_are_sorted_by_run_and_signature_then_widest_first_and_counted() -> None:
    frame = _readings(
        *[
            wave
            for run in ("b", "a")
            for signature in ("y", "x")
            for wave in (
                _wave(5, run=run, signature=signature, packed_tokens=1),
                _wave(1000, run=run, signature=signature, packed_tokens=10),
                _wave(1200, run=run, signature=signature, packed_tokens=10),  # +20%
                _wave(1000, run=run, signature=signature, packed_tokens=20),
                _wave(1500, run=run, signature=signature, packed_tokens=20),  # +50%
            )
        ]
    )
    found = unequal_peaks(frame, 1.1)
    assert found.select("run", "signature", "packed_tokens").rows() == [
        ("a", "x", 20), ("a", "x", 10), ("a", "y", 20), ("a", "y", 10),
        ("b", "x", 20), ("b", "x", 10), ("b", "y", 20), ("b", "y", 10),
    ]  # fmt: skip
    text = " ".join(unequal_peaks_warning(frame, 1.1, shown=3).split())
    assert text.index("run 'a' signature 'x'") < text.index("run 'a' signature 'y'")
    assert text.index("run 'a' signature 'y'") < text.index("run 'b' signature 'x'")
    assert "2 waves of 20 packed tokens" in text and "of 10 packed tokens" not in text
    assert "(+50%) and 1 more set of equal tokens; run" in text
    assert "; and 1 more signatures." in text and "run 'b' signature 'y'" not in text
    one = " ".join(unequal_peaks_warning(frame.filter(pl.col("packed_tokens") != 10), 1.1).split())
    assert "more set" not in one and "more signatures" not in one


def test_the_unequal_peaks_warning_names_up_to_five_signatures() -> None:
    def signatures(count: int) -> pl.DataFrame:
        return _readings(
            *[
                wave
                for i in range(count)
                for wave in (_FIRST, _wave(1000), _wave(2000))
                for wave in [dict(wave, signature=f"s{i}")]
            ]
        )

    assert "; and 1 more signatures." in " ".join(unequal_peaks_warning(signatures(6), 1.1).split())
    assert "more signatures" not in unequal_peaks_warning(signatures(5), 1.1)


def test_where_some_gaps_are_the_baselines_the_warning_says_which() -> None:
    frame = pl.concat(
        [
            _kept(100, 0, 1200, None),  # explained by the baselines
            _kept(0, 0, 1200, None).with_columns(pl.lit("other").alias("run")),  # not
        ]
    )
    text = " ".join(unequal_peaks_warning(frame, 1.1).split())
    assert "where the higher peak started lower, the baselines explain the gap" in text
    assert "Tokens alone do not decide memory there" in text
