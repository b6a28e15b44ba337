"""``warmfit plot``: the data behind each figure by a worked example, and one real
render of each format (the pixels themselves are looked at by a person)."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import Policy, PriceRequest, Reading
from warmfit.replay import replay
from warmfit.report.plot import (
    DPI,
    build_plot_data,
    draw_figure,
    figure_size,
    over_estimates,
    peak_series,
    plot_format,
    price_curves,
    rate_points,
    render_plot,
)

REPO = Path(__file__).resolve().parent.parent

# One signature on one rank; o = 1_000 bytes, baseline 10_000 on every reading.
#  wave 0: n=100, forward delta 10_000, caller (whole) delta 30_000 -> the seed, rate 290 B/token
#  wave 1: n=200, caller (whole) delta 50_000                        -> warm, rate 245
#  wave 2: n=400, forward only, delta 90_000                         -> other, rate 222.5
#  wave 3: n=400, whole caller delta 120_000 that ran out of memory  -> other, rate 297.5
COMMON = dict(signature="s", output_bytes=1_000, baseline_bytes=10_000)
WORKED = [
    dict(seq=0, wave=0, packed_tokens=100, logical_tokens=100, peak_bytes=20_000, phase="forward"),
    dict(seq=1, wave=0, packed_tokens=100, logical_tokens=100, peak_bytes=40_000, whole=True),
    dict(seq=2, wave=1, packed_tokens=200, logical_tokens=200, peak_bytes=60_000, whole=True),
    dict(seq=3, wave=2, packed_tokens=400, logical_tokens=400, peak_bytes=100_000, phase="forward"),
    dict(seq=4, wave=3, packed_tokens=400, logical_tokens=400, peak_bytes=130_000, whole=True,
         oom=True),
]  # fmt: skip


def worked(runs: tuple[str, ...] = ("R",)) -> pl.DataFrame:
    rows = [{**COMMON, **row, "run": run} for run in runs for row in WORKED]
    return readings_frame(rows).sort("run", "rank", "seq")


def test_peaks_panel_data() -> None:
    peaks = peak_series(replay(worked(), engine="scalar"))
    mm = peaks.filter(pl.col("policy") == "max-merge").to_dicts()
    wf = peaks.filter(pl.col("policy") == "warm-fit").to_dicts()
    assert [r["position"] for r in mm] == [0, 1, 2, 3]
    assert [r["actual_gb"] for r in mm] == [30_000 / 1e9, 50_000 / 1e9, 90_000 / 1e9, 120_000 / 1e9]
    # wave 0 is unpriced (no profile, no floor).
    # wave 1: both p = 290 * 200 = 58_000 -> int(59_000 * 1.1) = 64_900.
    # waves 2-3: max-merge p = 290 * 400 -> 128_700; warm-fit min(116_000, 245 * 400) -> 108_900.
    assert [r["estimate_gb"] for r in mm] == [None, 64_900 / 1e9, 128_700 / 1e9, 128_700 / 1e9]
    assert [r["estimate_gb"] for r in wf] == [None, 64_900 / 1e9, 108_900 / 1e9, 108_900 / 1e9]
    # Only warm-fit's estimate of wave 3 (108_900 < 120_000) is under its peak.
    assert [r["under_peak"] for r in mm] == [False] * 4
    assert [r["under_peak"] for r in wf] == [False, False, False, True]
    assert [r["set_by"] for r in wf] == [None, "profile", "profile", "profile"]


def test_rates_panel_points() -> None:
    points = rate_points(replay(worked(), engine="scalar")).to_dicts()
    assert [p["wave"] for p in points] == [0, 1, 2, 3]
    assert [p["role"] for p in points] == ["seed", "warm", "other", "other"]
    # rate = max(0, actual - o) / n, in KB (1000 bytes) per packed token
    assert [p["rate_kb_per_token"] for p in points] == pytest.approx([0.29, 0.245, 0.2225, 0.2975])
    assert [p["floor_kb_per_token"] for p in points] == [None] * 4


def test_rates_panel_curves() -> None:
    curves = price_curves(replay(worked(), ["max-merge", "warm-fit"], engine="vectorized"))
    tokens = curves.filter(pl.col("policy") == "max-merge").get_column("packed_tokens").to_list()
    assert tokens[0] == 80 and tokens[-1] == 440  # 0.8 x 100 to 1.1 x 400
    assert 200 in tokens
    for row in curves.iter_rows(named=True):
        n = row["packed_tokens"]
        # After the trace: rate_max = 290; warm_rate = 245 (the forward reading's 222.5 is
        # lower), warm_tokens = 200. The OOM reading is never learned.
        expected = 290 if row["policy"] == "max-merge" else min(290, 245 * max(200, n) / n)
        assert row["price_kb_per_token"] == pytest.approx(expected / 1000)
    at = {
        (r["policy"], r["packed_tokens"]): r["price_kb_per_token"]
        for r in curves.iter_rows(named=True)
    }
    assert at[("warm-fit", 200)] == pytest.approx(0.245) and at[("warm-fit", 80)] == 0.29


def test_over_estimates_panel_data() -> None:
    over = over_estimates(replay(worked(), engine="scalar"))
    # Waves 1 and 2 count: wave 0 is unpriced, wave 3 ran out of memory.
    by_policy = {
        p: over.filter(pl.col("policy") == p).get_column("over_estimate_pct").to_list()
        for p in ("max-merge", "warm-fit")
    }
    assert by_policy["max-merge"] == pytest.approx([29.8, (128_700 / 90_000 - 1) * 100])
    assert by_policy["warm-fit"] == pytest.approx([29.8, 21.0])


def test_main_profile_is_the_busiest() -> None:
    extra = [
        dict(COMMON, seq=10 + i, wave=10 + i, signature="t", packed_tokens=10, logical_tokens=10,
             peak_bytes=20_000)
        for i in range(2)
    ]  # fmt: skip
    frame = readings_frame([*({**COMMON, **r} for r in WORKED), *extra]).sort("run", "rank", "seq")
    data = build_plot_data(replay(frame, engine="scalar"))
    assert data.main_profiles == {"run": (0, "s")} and data.profile_counts == {"run": 2}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_png_render_through_the_cli(tmp_path: Path) -> None:
    write_trace(worked(("A", "B")), tmp_path / "trace" / "t.parquet")
    out = tmp_path / "figure.png"
    args = ["plot", str(tmp_path / "trace"), "-o", str(out), "--engine", "scalar"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    width, height = figure_size(2)
    assert png_size(out.read_bytes()) == (round(width * DPI), round(height * DPI))
    assert out.stat().st_size > 20_000  # three panels per run, not a blank sheet
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "will not overwrite without --force" in again.output


def test_svg_render(tmp_path: Path) -> None:
    frame = worked()
    out = render_plot(build_plot_data(replay(frame, engine="scalar")), tmp_path / "f.svg")
    head = out.read_text()[:1000]
    width, height = figure_size(1)
    assert f'width="{width * 72:g}pt" height="{height * 72:g}pt"' in head
    assert "<path" in out.read_text()


def test_suffix_picks_the_format() -> None:
    assert plot_format("a.png") == "png" and plot_format("b.SVG") == "svg"


def test_other_suffix_is_refused_before_any_work(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "missing"), "-o", "x.pdf"])
    assert result.exit_code == 2
    assert "suffix must be .png or .svg" in result.output


def test_replay_and_help_never_import_matplotlib() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from warmfit.cli import app\n"
        "for args in (['--help'], ['replay', sys.argv[1]], ['check', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'torch')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(REPO / "traces" / "pr991")], check=True, cwd=REPO
    )


def test_without_matplotlib_plot_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from warmfit.errors import UsageError
    from warmfit.report.plot import _require_matplotlib

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(UsageError, match=r"pip install 'warmfit\[plot\]'"):
        _require_matplotlib()


def two_signatures() -> pl.DataFrame:
    extra = [
        dict(COMMON, seq=10 + i, wave=10 + i, signature="t", packed_tokens=10, logical_tokens=10,
             peak_bytes=20_000, whole=True)
        for i in range(2)
    ]  # fmt: skip
    return readings_frame([*({**COMMON, **r} for r in WORKED), *extra]).sort("run", "rank", "seq")


def test_signature_picks_the_middle_panel_in_each_run_that_has_it() -> None:
    result = replay(two_signatures(), engine="scalar")
    assert build_plot_data(result).main_profiles == {"run": (0, "s")}
    assert build_plot_data(result, signature="t").main_profiles == {"run": (0, "t")}


def test_plot_names_the_signature_it_shows_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    write_trace(two_signatures(), tmp_path / "trace" / "t.parquet")
    out = tmp_path / "figure.png"
    base = ["plot", str(tmp_path / "trace"), "--engine", "scalar"]
    result = CliRunner().invoke(app, [*base, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote " in result.output and "(1 run)" in result.output  # not "1 runs"
    assert "the middle panel shows rank 0, signature 's' (1 of 2 profiles" in result.output
    picked = CliRunner().invoke(app, [*base, "-o", str(out), "--force", "--signature", "t"])
    assert picked.exit_code == 0, picked.output
    assert "middle panel" not in picked.output  # every run shows the one asked for
    wrong = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "x.png"), "--signature", "u\x1b"])
    assert wrong.exit_code == 2 and "Traceback" not in wrong.output
    assert "--signature 'u\\x1b'" in wrong.output and "'s', 't'" in wrong.output
    assert not (tmp_path / "x.png").exists()


class SkipSeed(Policy):
    """The tour's tempting shortcut: max-merge that skips the cold seed (prices waves under)."""

    name = "skip-seed"
    summary = "highest rate seen, except the cold seed's"

    def __init__(self) -> None:
        self.seeded = False
        self.rate: float | None = None

    def observe(self, reading: Reading) -> None:
        if reading.whole and not self.seeded:
            self.seeded = True
            return
        self.rate = reading.rate if self.rate is None else max(self.rate, reading.rate)

    def price(self, request: PriceRequest) -> float | None:
        return None if self.rate is None else self.rate * request.packed_tokens


def drawn_points(ax: Any) -> list[tuple[float, float]]:
    """Every marker an axes draws (scatter points, line markers), in display pixels."""
    points: list[tuple[float, float]] = []
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if len(offsets):
            points += [tuple(p) for p in collection.get_offset_transform().transform(offsets)]
    for line in ax.get_lines():
        if line.get_marker() not in (None, "None", "", " "):
            points += [tuple(p) for p in line.get_transform().transform(line.get_xydata())]
    return [p for p in points if all(map(math.isfinite, p))]


def test_no_legend_hides_a_wave_or_a_label() -> None:
    """Issue 14: the tour's skip-seed figure had a legend over the wave it should show."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    # the traces of the tour (not the 144 runs of Liger-Kernel's curves: drawing them all
    # takes minutes, and they have no seed to skip)
    traces = REPO / "traces"
    tour = [traces / "pr991", traces / "art-h200" / "recompute_memory_final.parquet"]
    tour += [traces / "cpu-demo", traces / "hf-qwen3moe-cpu"]
    result = replay(read_trace(tour), ["max-merge", "warm-fit", SkipSeed])
    fig = draw_figure(build_plot_data(result))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    points = [p for ax in fig.axes for p in drawn_points(ax)]
    assert len(points) > 1000
    labels = [ax.xaxis.label.get_window_extent(renderer) for ax in fig.axes]
    labels += [ax.title.get_window_extent(renderer) for ax in fig.axes]
    legends = [ax.get_legend() for ax in fig.axes]
    assert all(legends)
    for legend in legends:
        box = legend.get_window_extent(renderer)
        covered = [p for p in points if box.contains(*p)]
        assert covered == [], f"the legend at {box} covers {len(covered)} drawn points"
        assert not any(box.overlaps(label) for label in labels)
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)


def test_a_signature_some_runs_lack_is_named_once(tmp_path: Path) -> None:
    frame = pl.concat([two_signatures(), two_signatures().with_columns(run=pl.lit("other"))])
    frame = frame.filter(~((pl.col("run") == "other") & (pl.col("signature") == "t")))
    write_trace(frame.sort("run", "rank", "seq"), tmp_path / "trace" / "t.parquet")
    args = ["plot", str(tmp_path / "trace"), "-o", str(tmp_path / "f.png"), "--signature", "t"]
    result = CliRunner().invoke(app, [*args, "--engine", "scalar"])
    assert result.exit_code == 0, result.output
    assert "signature 't' is not in 1 run (other): the middle panel shows" in result.output
    assert result.output.count("middle panel") == 1
