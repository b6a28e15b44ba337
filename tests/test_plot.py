"""``warmfit plot``: the data behind each figure by a worked example, and one real
render of each format (the pixels themselves are looked at by a person); for a large
trace, what is thinned and what never is (every wave under its peak, the extremes)."""

from __future__ import annotations

import math
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.format.trace import read_trace, readings_frame, write_trace
from warmfit.policies import Policy, PriceRequest, Reading
from warmfit.replay import replay
from warmfit.report.plot import (
    DPI,
    LINE_COLUMNS,
    SCATTER_CELLS,
    SEED_NOTE,
    STRIP_CELLS,
    THIN_ABOVE,
    Drawn,
    PlotData,
    build_plot_data,
    draw_figure,
    figure_size,
    line_keep,
    over_estimates,
    peak_series,
    plot_format,
    price_curves,
    rate_points,
    render_plot,
    strip_keep,
    thin,
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


def test_a_wave_at_or_below_its_output_bytes_has_a_rate_of_zero() -> None:
    """rate = max(0, actual - o) / n / 1000 with o = 1_000 bytes: an actual peak of 500
    bytes (below the outputs) or exactly 1_000 gives 0, not a negative rate nor a byte
    above it; 5_000 bytes over 400 tokens gives 4_000 / 400 / 1000 = 0.01 KB a token."""
    rows = [
        {**COMMON, "run": "R", "seq": seq, "wave": seq, "packed_tokens": n, "logical_tokens": n,
         "peak_bytes": 10_000 + actual, "whole": True}
        for seq, (n, actual) in enumerate([(100, 500), (200, 1_000), (400, 5_000)])
    ]  # fmt: skip
    points = rate_points(replay(readings_frame(rows), ["max-merge"], engine="scalar"))
    assert points.get_column("actual_bytes").to_list() == [500, 1_000, 5_000]
    assert points.get_column("rate_kb_per_token").to_list() == [0.0, 0.0, 0.01]


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


def test_the_curves_start_at_one_token_below_a_wave_of_one_or_two() -> None:
    """The grid spans 0.8x the smallest wave to 1.1x the largest, from at least 1 packed
    token: waves of 1 and 10 tokens give int(0.8) = 0, so 1, to int(11.0) = 11, every
    whole count 1, 2, .., 11 (160 steps of 10/159 rounded down)."""
    rows = [
        {**COMMON, "run": "R", "seq": seq, "wave": seq, "packed_tokens": n, "logical_tokens": n,
         "peak_bytes": 20_000, "whole": True}
        for seq, n in enumerate([1, 10])
    ]  # fmt: skip
    curves = price_curves(replay(readings_frame(rows), ["max-merge"], engine="scalar"))
    assert curves.get_column("packed_tokens").to_list() == list(range(1, 12))


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
    # two runs: 15 inches wide, 0.6 + 2 x 4.2 = 9 inches tall, at 100 pixels an inch
    assert png_size(out.read_bytes()) == (1500, 900)
    assert out.stat().st_size > 20_000  # three panels per run, not a blank sheet
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "will not overwrite without --force" in again.output


def test_a_temporary_folder_that_cannot_be_removed_still_gives_the_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plot's folder of frames cannot be removed once the figure is drawn (on NFS a file
    still open somewhere leaves a ``.nfsXXXX`` behind, and the folder's ``rmdir`` fails
    "Directory not empty"): the figure is kept and the command exits 0, without a
    traceback; the folder stays, as the file system keeps it."""
    import errno
    import os
    import tempfile

    write_trace(worked(("A", "B")), tmp_path / "trace" / "t.parquet")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    rmdir = os.rmdir
    refused: list[str] = []

    def busy_rmdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).name.startswith("warmfit-plot-"):
            refused.append(Path(path).name)
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), path)
        rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", busy_rmdir)
    out = tmp_path / "figure.png"
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "trace"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert png_size(out.read_bytes())[0] > 0
    assert refused and [f.name for f in scratch.iterdir()] == refused[:1]


@pytest.mark.parametrize("harm", ["removed", "cut short"])
def test_temporary_files_spoiled_while_drawing_are_named_not_blamed_on_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, harm: str
) -> None:
    """A cleaner of TMPDIR removes (or something cuts) plot's frame files between the
    replay and the drawing of run B's row: exit 2, one line naming the temporary folder, the
    run and what to do; no figure. Before, a removed file read "cannot write OUTPUT: No such
    file or directory" (the output blamed), and a cut one ended in polars' traceback."""
    import warmfit.report.plot as plot

    write_trace(worked(("A", "B")), tmp_path / "trace" / "t.parquet")
    read = plot.PlotParts.read

    def spoiled(parts: Any, run: str) -> Any:
        if run == "B":
            for file in parts.folder.iterdir():
                if harm == "removed":
                    file.unlink()
                else:
                    file.write_bytes(file.read_bytes()[:20])
        return read(parts, run)

    monkeypatch.setattr(plot.PlotParts, "read", spoiled)
    out = tmp_path / "figure.png"
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "trace"), "-o", str(out)])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert line.startswith("warmfit: error: cannot read the figure's temporary files in "), line
    assert "warmfit-plot-" in line and "(run B): " in line and "run the command again" in line
    assert "\n" not in line and "cannot write" not in line
    assert not out.exists()


def test_svg_render(tmp_path: Path) -> None:
    frame = worked()
    out = render_plot(build_plot_data(replay(frame, engine="scalar")), tmp_path / "f.svg")
    head = out.read_text()[:1000]
    width, height = figure_size(1)
    assert f'width="{width * 72:g}pt" height="{height * 72:g}pt"' in head
    assert "<path" in out.read_text()


def test_the_same_data_gives_the_same_svg_bytes(tmp_path: Path) -> None:
    """matplotlib names an SVG's clip paths and glyphs by hashes salted at random unless
    ``svg.hashsalt`` is set: two SVGs of the same data differed in every id. warmfit sets
    the salt while it saves, and leaves the user's setting as it was."""
    import matplotlib

    data = build_plot_data(replay(worked(), engine="scalar"))
    first = render_plot(data, tmp_path / "a.svg").read_bytes()
    second = render_plot(data, tmp_path / "b.svg").read_bytes()
    assert 'clip-path="url(#' in first.decode()  # ids that a salt would change
    assert first == second
    assert matplotlib.rcParams["svg.hashsalt"] is None


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
    assert "signature 't' is not in 1 run (other): the middle panel shows" in result.stderr
    assert result.output.count("middle panel") == 1


# --------------------------------------------------------------------------- large traces (issue 28)

BIG_WAVES = THIN_ABOVE + 1_000
#: Every SPIKE-th wave's rate is 15 % above every rate before it: max-merge (and warm-fit)
#: price it under its peak.
SPIKE = 400


def big_run(waves: int = BIG_WAVES, seed: int = 0) -> pl.DataFrame:
    """One run, rank and signature of ``waves`` waves, one whole caller reading each, a
    static floor on every wave: more than THIN_ABOVE points in every panel, the rates
    along a curve as in a real trace."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1_000, 30_000, waves)
    # bytes per token: a fixed cost spread over the tokens, plus 150 a token, give or take 3 %
    rate = (2e6 / tokens + 150) * rng.uniform(0.97, 1.03, waves)
    for i in range(SPIKE, waves, SPIKE):
        rate[i] = rate[:i].max() * 1.15
    rows = [
        dict(seq=i, wave=i, signature="s", packed_tokens=int(n), logical_tokens=int(n),
             peak_bytes=10_000 + 1_000 + int(r * n), baseline_bytes=10_000, output_bytes=1_000,
             static_floor_bytes=int(n) * 50, whole=True)
        for i, (n, r) in enumerate(zip(tokens, rate, strict=True))
    ]  # fmt: skip
    return readings_frame(rows)


@pytest.fixture(scope="module")
def big() -> PlotData:
    return build_plot_data(replay(big_run(), engine="vectorized"), caption="my words")


def column_of(values: np.ndarray, count: int) -> np.ndarray:
    """The contract of the thinning's columns: floor((v - min) / (max - min) * count), the
    largest in the last."""
    lo, hi = values.min(), values.max()
    return np.minimum(np.floor((values - lo) / (hi - lo) * count), count - 1).astype(int)


def assert_extremes_kept(full: pl.DataFrame, drawn: pl.DataFrame, y: str) -> None:
    """Each column's lowest and highest value of a line is among its drawn points."""
    columns = column_of(full.get_column("position").to_numpy().astype(float), LINE_COLUMNS)
    full = full.with_columns(column=columns).drop_nulls(y)
    drawn = drawn.join(full.select("position", "column"), on="position")
    want = full.group_by("column").agg(lo=pl.col(y).min(), hi=pl.col(y).max())
    got = drawn.group_by("column").agg(pl.col(y))
    for column, lo, hi, values in want.join(got, on="column", how="left").iter_rows():
        assert values is not None and lo in values and hi in values, (y, column)


def test_a_small_trace_is_drawn_whole() -> None:
    """Below THIN_ABOVE waves a run, every point is drawn, as before (and the footnote is
    the caption alone)."""
    result = replay(read_trace([REPO / "traces" / "cpu-demo", REPO / "traces" / "pr991"]))
    data = build_plot_data(result, caption="my words")
    drawn = data.drawn
    assert drawn.thinned == () and drawn.note is None and drawn.points == drawn.drawn
    assert drawn.peaks.drop("draw_actual", "draw_estimate").equals(data.peaks)
    assert drawn.peaks.get_column("draw_estimate").all()
    firsts = data.peaks.with_row_index().group_by("run", "position").agg(pl.col("index").min())
    assert (
        drawn.peaks.with_row_index()
        .filter("draw_actual")
        .get_column("index")
        .sort()
        .equals(firsts.get_column("index").sort())
    )
    assert drawn.over.drop("offset").equals(data.over)
    for run in data.runs:
        rank, signature = data.main_profiles[run]
        main = data.rates.filter(
            (pl.col("run") == run) & (pl.col("rank") == rank) & (pl.col("signature") == signature)
        )
        mine = drawn.rates.filter(pl.col("run") == run)
        assert mine.drop("draw_point", "draw_floor").equals(main)
        assert mine.get_column("draw_point").all()
        assert mine.get_column("draw_floor").equals(
            main.get_column("floor_kb_per_token").is_not_null(), check_names=False
        )


def test_thinning_keeps_every_wave_under_its_peak_and_each_columns_extremes(
    big: PlotData,
) -> None:
    drawn, peaks = big.drawn, big.peaks
    assert drawn.thinned == ("run",) and drawn.waves == BIG_WAVES
    under = peaks.filter(pl.col("under_peak"))
    assert under.height >= 2 * (BIG_WAVES // SPIKE - 1)  # both policies, every spike
    # every estimate under its peak is a point of its policy's line, with its wave's actual
    kept = drawn.peaks.filter(pl.col("draw_estimate") & pl.col("under_peak"))
    assert sorted(kept.select("position", "policy").rows()) == sorted(
        under.select("position", "policy").rows()
    )
    actual = drawn.peaks.filter(pl.col("draw_actual")).get_column("position")
    assert set(under.get_column("position")) <= set(actual)
    # ... even where it is neither the lowest nor the highest of its column
    line = peaks.filter(pl.col("policy") == "max-merge").with_columns(
        column=column_of(np.arange(BIG_WAVES, dtype=float), LINE_COLUMNS)
    )
    bounds = line.group_by("column").agg(
        lo=pl.col("estimate_gb").min(), hi=pl.col("estimate_gb").max()
    )
    inner = line.join(bounds, on="column").filter(
        pl.col("under_peak")
        & (pl.col("estimate_gb") > pl.col("lo"))
        & (pl.col("estimate_gb") < pl.col("hi"))
    )
    assert inner.height, "the trace should have an estimate under its peak inside a column"
    # each column's lowest and highest, of the actual peaks and of each policy's estimates
    first = peaks.unique("position", keep="first", maintain_order=True)
    assert_extremes_kept(first, drawn.peaks.filter(pl.col("draw_actual")), "actual_gb")
    for policy in big.policies:
        mine = pl.col("policy") == policy
        assert_extremes_kept(
            peaks.filter(mine), drawn.peaks.filter(mine & pl.col("draw_estimate")), "estimate_gb"
        )
    # and it thins: at most a few points a column
    assert drawn.peaks.filter("draw_actual").height <= 2 * LINE_COLUMNS + under.height + 2
    assert drawn.drawn < drawn.points / 2


def near_every_point(full: np.ndarray, drawn: np.ndarray, cell: np.ndarray) -> bool:
    """Every full point has a drawn one within one cell (``cell``: its size in x and y)."""
    buckets: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for x, y in (drawn / cell).tolist():
        buckets.setdefault((math.floor(x), math.floor(y)), []).append((x, y))
    for x, y in (full / cell).tolist():
        bx, by = math.floor(x), math.floor(y)
        near = [
            q for dx in (-1, 0, 1) for dy in (-1, 0, 1) for q in buckets.get((bx + dx, by + dy), [])
        ]
        if not any(abs(qx - x) <= 1 and abs(qy - y) <= 1 for qx, qy in near):
            return False
    return True


def test_thinned_dots_cover_every_dot_within_a_pixel_cell(big: PlotData) -> None:
    # panel (b): every wave's dot has a drawn one within a cell (about a pixel), the extremes
    # and every wave under its peak drawn
    rates = big.drawn.rates
    warm = rates.filter(pl.col("role") == "warm")
    full = np.column_stack([warm["packed_tokens"] / 1000, warm["rate_kb_per_token"]])
    shown = warm.filter("draw_point")
    dots = np.column_stack([shown["packed_tokens"] / 1000, shown["rate_kb_per_token"]])
    assert len(dots) < len(full) / 2
    cell = (full.max(axis=0) - full.min(axis=0)) / np.array(SCATTER_CELLS)
    assert near_every_point(full, dots, cell)
    for axis in (0, 1):
        assert full[:, axis].min() in dots[:, axis] and full[:, axis].max() in dots[:, axis]
    under = set(big.peaks.filter("under_peak").get_column("wave"))
    assert under <= set(rates.filter("draw_point").get_column("wave"))
    # the static floor, a line along packed tokens: its lowest and highest drawn
    floor = rates.filter(pl.col("draw_floor")).get_column("floor_kb_per_token")
    assert rates.height > floor.len() > 0
    assert floor.min() == rates["floor_kb_per_token"].min()
    assert floor.max() == rates["floor_kb_per_token"].max()
    # panel (c): every over-estimate under 0 drawn, the extremes, a dot near every dot
    for policy in big.policies:
        values = big.over.filter(pl.col("policy") == policy).get_column("over_estimate_pct")
        offsets = 0.18 * ((np.arange(values.len()) * 7919) % 11 - 5) / 5
        shown = big.drawn.over.filter(pl.col("policy") == policy)
        assert shown.height < values.len() / 2
        drawn_values = set(shown.get_column("over_estimate_pct"))
        assert set(values.filter(values < 0)) <= drawn_values
        assert {values.min(), values.max()} <= drawn_values
        full = np.column_stack([offsets, values.to_numpy()])
        dots = np.column_stack([shown["offset"].to_numpy(), shown["over_estimate_pct"].to_numpy()])
        cell = np.array([1e-9, (values.max() - values.min()) / STRIP_CELLS])
        assert near_every_point(full, dots, cell)


def test_the_thinned_figure_draws_what_the_data_says_and_says_so(big: PlotData) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    drawn = big.drawn
    points = (
        BIG_WAVES  # actual peaks
        + big.peaks.filter(pl.col("estimate_gb").is_not_null()).height
        + big.peaks.filter("under_peak").height  # the red crosses
        + BIG_WAVES * 2  # panel (b): a dot and a floor point a wave (one profile)
        + big.over.height
    )
    assert drawn.points == points
    assert drawn.note is not None
    assert f"{BIG_WAVES:,} waves: {drawn.drawn:,} of {points:,} points drawn" in drawn.note
    assert "binned by pixel" in drawn.note
    assert f"every wave under its peak drawn ({drawn.under:,} estimates)" in drawn.note
    fig = draw_figure(big)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    (footnote,) = fig.findobj(lambda a: isinstance(a, Text) and "my words" in a.get_text())
    assert footnote.get_text() == f"my words\n{SEED_NOTE}\n{drawn.note}"
    # the lines hold the drawn rows, point for point
    peaks_ax = fig.axes[0]
    lines = {line.get_label(): line for line in peaks_ax.get_lines()}
    assert len(lines["actual peak"].get_xydata()) == drawn.peaks.filter("draw_actual").height
    for policy in big.policies:
        mine = drawn.peaks.filter((pl.col("policy") == policy) & pl.col("draw_estimate"))
        assert len(lines[f"{policy} estimate"].get_xydata()) == mine.height
    # the footnote overprints nothing and lies on the sheet
    box = footnote.get_window_extent(renderer)
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    for ax in fig.axes:
        others = [ax.get_legend(), ax.xaxis.label, *ax.get_xticklabels()]
        for other in others:
            assert not box.overlaps(other.get_window_extent(renderer)), other
        assert not box.overlaps(ax.get_window_extent(renderer))


def test_a_strip_keeps_its_extremes_where_they_share_a_cell() -> None:
    # the highest shares the top cell with the dot before it, the lowest the bottom one
    y = np.array([0.9999, 1.0, 0.0001, 0.0, 0.5])
    assert strip_keep(np.zeros(5, np.int64), y, count=10).tolist() == [
        True, True, True, True, True,
    ]  # fmt: skip
    assert strip_keep(np.zeros(5, np.int64), y[[0, 2, 4]], count=10).tolist() == [True] * 3
    crowded = np.array([0.5, 0.0, 1.0, 0.50001, 0.50002])
    assert strip_keep(np.zeros(5, np.int64), crowded, count=10).tolist() == [
        True, True, True, False, False,
    ]  # fmt: skip


def test_a_wave_under_its_peak_is_drawn_even_in_a_crowded_cell() -> None:
    """Wave 3 is under its peak; its dot in panel (b) shares a pixel cell with wave 2's
    (and wave 7's) and lies between the extremes: only the rule that draws every such
    wave keeps it."""
    xs = [1.0, 5.0, 3.0, 3.000001, 3.0, 2.0, 4.0, 3.000002]
    ys = [1.0, 5.0, 3.0, 3.000001, 2.0, 4.0, 3.5, 3.000002]
    common = {"run": "r", "rank": 0, "policy": "p"}
    peaks = pl.DataFrame(
        [{**common, "wave": i, "position": i, "actual_gb": y, "estimate_gb": y * 1.2,
          "set_by": "profile", "under_peak": i == 3, "oom": False} for i, y in enumerate(ys)]
    )  # fmt: skip
    rates = pl.DataFrame(
        [{"run": "r", "rank": 0, "signature": "s", "wave": i, "first_seq": i,
          "packed_tokens": int(x * 1e6), "actual_bytes": 1, "rate_kb_per_token": y,
          "floor_kb_per_token": None, "role": "warm"} for i, (x, y) in enumerate(zip(xs, ys, strict=True))]
    )  # fmt: skip
    over = pl.DataFrame({"run": "r", "policy": "p", "over_estimate_pct": ys})
    drawn = thin(peaks, rates, over, ["r"], {"r": (0, "s")}, above=3)
    assert drawn.thinned == ("r",)
    dots = drawn.rates.filter("draw_point").get_column("wave").to_list()
    assert 3 in dots and 2 in dots
    assert 7 not in dots  # the cell's other dots go


def test_the_note_says_what_was_thinned_or_nothing() -> None:
    frames = {"peaks": pl.DataFrame(), "rates": pl.DataFrame(), "over": pl.DataFrame()}
    counts = {"waves": 100_000, "points": 600_000, "drawn": 4_000}
    assert Drawn(**frames, **counts, under=3, thinned=()).note is None
    head = (
        "100,000 waves: 4,000 of 600,000 points drawn, binned by pixel (a line keeps each "
        "pixel column's lowest and highest, dots one per pixel cell, extremes kept);\n"
    )
    thinned = ("r",)
    one = Drawn(**frames, **counts, under=1, thinned=thinned).note
    assert one == head + "every wave under its peak drawn (1 estimate)"
    many = Drawn(**frames, **counts, under=1_914, thinned=thinned).note
    assert many == head + "every wave under its peak drawn (1,914 estimates)"
    none = Drawn(**frames, **counts, under=0, thinned=thinned).note
    assert none == head + "no estimate is under its peak"


def test_a_thinned_line_keeps_its_gaps() -> None:
    """An unpriced wave breaks its policy's line (NaN); thinning keeps both sides of the
    break, so that the line does not bridge it."""
    y = np.array([1.0, 1.0, np.nan, np.nan, 1.0, 1.0, 1.0, 1.0])
    keep = line_keep(np.arange(8.0), y, columns=1)
    assert keep.tolist() == [True, True, True, True, True, False, False, True]


# --------------------------------------------------------------------------- what a newcomer tripped on (issue 29, item 5)


def _drawn(fig: Any) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _texts(fig: Any) -> list[Any]:
    """Every visible text of a figure, once each (a legend's texts are found twice)."""
    from matplotlib.text import Text

    found = fig.findobj(lambda a: isinstance(a, Text) and a.get_visible() and a.get_text())
    return list({id(text): text for text in found}.values())


def _line_colours(ax: Any, suffix: str = "") -> dict[str, Any]:
    from matplotlib.colors import to_hex

    return {
        str(line.get_label()).removesuffix(suffix): to_hex(line.get_color())
        for line in ax.get_lines()
        if str(line.get_label()).endswith(suffix)
    }


def test_a_policy_keeps_its_colour_wherever_it_is_drawn() -> None:
    """`-p warm-fit` alone was drawn in max-merge's colour (the first one): a built-in's
    colour is its own, in `plot` and in `sweep --plot`, and a policy of one's own takes
    one no built-in has."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from warmfit.report.sweep import sweep

    frame = worked()
    colours: dict[tuple[str, ...], dict[str, Any]] = {}
    lineups = [("warm-fit",), ("max-merge", "warm-fit"), ("envelope", "warm-affine", "warm-fit")]
    for lineup in lineups:
        fig = draw_figure(build_plot_data(replay(frame, list(lineup), engine="scalar")))
        colours[lineup] = _line_colours(fig.axes[0], " estimate")
        assert _line_colours(fig.axes[1], " price") == colours[lineup]
        assert set(colours[lineup]) == set(lineup)
    assert colours[("warm-fit",)]["warm-fit"] == colours[("max-merge", "warm-fit")]["warm-fit"]
    from warmfit.report.plot import POLICY_COLOURS, draw_pareto, policy_colours

    for lineup, seen in colours.items():
        assert seen == {name: POLICY_COLOURS[name] for name in lineup}, lineup
    # sweep --plot: the line of each policy in each panel
    for lineup in lineups[:2]:
        fig = draw_pareto(sweep(frame, list(lineup), grid=[1.0, 1.1]))
        legend = fig.axes[0].get_legend()
        names = [t.get_text().split(":")[0] for t in legend.get_texts()]
        lines = [h[0] if isinstance(h, tuple) else h for h in legend.legend_handles]
        assert names == list(lineup)
        drawn = {to_hex(line.get_color()) for line in fig.axes[0].get_lines()}
        assert drawn == {POLICY_COLOURS[name] for name in lineup}
        assert [to_hex(line.get_color()) for line in lines] == [POLICY_COLOURS[n] for n in lineup]
    # a policy of one's own: a colour of no built-in, the same wherever it is drawn
    fig = draw_figure(build_plot_data(replay(frame, ["warm-fit", SkipSeed], engine="scalar")))
    own = _line_colours(fig.axes[0], " estimate")
    assert own["warm-fit"] == POLICY_COLOURS["warm-fit"]
    assert own["skip-seed"] not in POLICY_COLOURS.values()
    picked = policy_colours(["mine", "recorded", "max-merge", "yours", "warm-fit"])
    assert picked["recorded"] == POLICY_COLOURS["recorded"]
    assert len(set(picked.values())) == 5
    assert picked["mine"] == policy_colours(["mine"])["mine"]


def _safe_labels(fig: Any) -> list[Any]:
    return [text for text in _texts(fig) if "safe ×" in text.get_text()]


def assert_no_safe_label_overprints(fig: Any, results: int) -> None:
    renderer = _drawn(fig)
    labels = _safe_labels(fig)
    assert len(labels) == results  # one a result and policy: every safe factor is written
    boxes = [label.get_window_extent(renderer) for label in labels]
    for i, box in enumerate(boxes):
        for j in range(i):
            assert not box.overlaps(boxes[j]), (labels[i].get_text(), labels[j].get_text())
        assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    # nor over the panels' titles, axis labels and ticks
    others = []
    for ax in fig.axes:
        if ax.get_visible():
            others += [ax.title, ax.xaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels()]
            others.append(ax.patch)
    for other in others:
        extent = other.get_window_extent(renderer)
        for label, box in zip(labels, boxes, strict=True):
            assert not box.overlaps(extent), (label.get_text(), other)


EVERY_BUILT_IN = ["max-merge", "warm-fit", "warm-affine", "envelope"]


@pytest.mark.parametrize("trace", ["pr991", "art-h200", "liger-gpu"])
def test_sweep_safe_labels_never_overprint(trace: str) -> None:
    """The stars of several policies fall together (all at 0 waves under, close medians):
    their "safe ×" labels, written beside them, overprinted one another."""
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import draw_pareto
    from warmfit.report.sweep import sweep

    readings = read_trace([REPO / "traces" / trace])
    if trace == "liger-gpu":  # its 144 runs take minutes to draw: the first 12 of them here
        runs = sorted(readings.get_column("run").unique().to_list())[:12]
        readings = readings.filter(pl.col("run").is_in(runs))
    result = sweep(readings, EVERY_BUILT_IN, grid=[1.0, 1.1, 1.2])
    safe = [r for r in result.results if r["safe_factor"] is not None]
    assert_no_safe_label_overprints(draw_pareto(result), len(safe))


@pytest.mark.slow
def test_sweep_safe_labels_never_overprint_on_every_liger_run() -> None:
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import draw_pareto
    from warmfit.report.sweep import sweep

    result = sweep(read_trace([REPO / "traces" / "liger-gpu"]), EVERY_BUILT_IN, grid=[1.0, 1.2])
    safe = [r for r in result.results if r["safe_factor"] is not None]
    assert_no_safe_label_overprints(draw_pareto(result), len(safe))


def _legend_texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_seed_is_called_cold_only_where_its_rate_is_above_every_warm_waves() -> None:
    """The seed was called "cold seed wave" always; cpu-demo's seed has the warm waves'
    rate. The footnote says what the words mean."""
    pytest.importorskip("matplotlib")
    # the worked trace: seed 0.29 KB/token, its one warm wave 0.245
    cold = build_plot_data(replay(worked(), engine="scalar"), caption="mine")
    fig = draw_figure(cold)
    assert "cold seed (first whole wave)" in _legend_texts(fig.axes[1])
    from warmfit.report.plot import SEED_NOTE, seed_is_cold

    assert seed_is_cold(cold.rates)
    footnotes = [t.get_text() for t in _texts(fig) if SEED_NOTE in t.get_text()]
    assert footnotes == [f"mine\n{SEED_NOTE}"]
    # the warm wave as costly as the seed (0.29 KB/token): a seed, not a cold one
    rows = [dict(row) for row in WORKED]
    rows[2]["peak_bytes"] = 10_000 + 1_000 + 290 * 200
    level = readings_frame([{**COMMON, **r} for r in rows]).sort("run", "rank", "seq")
    warm = build_plot_data(replay(level, engine="scalar"))
    assert warm.rates.get_column("rate_kb_per_token").to_list()[:2] == pytest.approx([0.29] * 2)
    assert not seed_is_cold(warm.rates)
    fig = draw_figure(warm)
    texts = _legend_texts(fig.axes[1])
    assert "seed (first whole wave)" in texts
    assert not [t for t in texts if "cold" in t]
    assert [t.get_text() for t in _texts(fig) if SEED_NOTE in t.get_text()] == [SEED_NOTE]
    # no warm wave to compare with: not cold either
    assert not seed_is_cold(warm.rates.filter(pl.col("role") != "warm"))
    # a recording: cpu-demo's seed is as costly a token as its warm waves
    demo = build_plot_data(replay(read_trace([REPO / "traces" / "cpu-demo"])))
    (run,) = demo.runs
    rank, signature = demo.main_profiles[run]
    mine = demo.rates.filter((pl.col("rank") == rank) & (pl.col("signature") == signature))
    assert not seed_is_cold(mine)
    assert "seed (first whole wave)" in _legend_texts(draw_figure(demo).axes[1])


def two_ranks() -> pl.DataFrame:
    """The worked run on rank 0; on rank 1 the same waves at twice the bytes; and a run
    "solo" on rank 0 alone."""
    rows = [{**COMMON, **row, "run": "R"} for row in WORKED]
    rows += [{**row, "rank": 1, "peak_bytes": 2 * row["peak_bytes"]} for row in rows]
    rows += [{**COMMON, **row, "run": "solo"} for row in WORKED]
    return readings_frame(rows).sort("run", "rank", "seq")


def test_plot_rank_draws_that_ranks_waves_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import warmfit.report.plot

    seen: list[PlotData] = []
    monkeypatch.setattr(
        warmfit.report.plot, "render_plot", lambda data, path, *_: seen.append(data.whole())
    )
    write_trace(two_ranks(), tmp_path / "trace" / "t.parquet")
    base = ["plot", str(tmp_path / "trace"), "--engine", "scalar"]
    result = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "a.png"), "--rank", "1"])
    assert result.exit_code == 0, result.output
    (data,) = seen
    assert data.rank == 1 and data.runs == ("R",)
    assert "rank 1 is not in 1 run (solo): not drawn" in result.stderr
    for frame in (data.peaks, data.rates, data.drawn.peaks, data.drawn.rates):
        assert frame.get_column("rank").unique().to_list() == [1]
    assert data.main_profiles == {"R": (1, "s")}
    # rank 1's waves priced as the whole trace's replay prices them
    whole = peak_series(replay(two_ranks(), engine="scalar"))
    mine = whole.filter((pl.col("run") == "R") & (pl.col("rank") == 1))
    assert data.peaks.drop("position").equals(mine.drop("position"))
    assert data.peaks.get_column("position").unique().to_list() == [0, 1, 2, 3]
    # every rank without --rank; rank 0 is in both runs
    assert CliRunner().invoke(app, [*base, "-o", str(tmp_path / "b.png")]).exit_code == 0
    assert seen[1].rank is None and sorted(seen[1].peaks.get_column("rank").unique()) == [0, 1]
    assert seen[1].peaks.height == whole.height
    fine = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "c.png"), "--rank", "0"])
    assert fine.exit_code == 0 and "not drawn" not in fine.output
    assert seen[2].runs == ("R", "solo")
    # the title says which rank
    fig = draw_figure(data)
    assert fig.get_suptitle().endswith(", rank 1 alone")


def test_plot_refuses_a_rank_the_trace_does_not_hold(tmp_path: Path) -> None:
    write_trace(two_ranks(), tmp_path / "trace" / "t.parquet")
    out = tmp_path / "x.png"
    for rank in ("2", "-1"):
        args = ["plot", str(tmp_path / "trace"), "-o", str(out), "--rank", rank]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert f"--rank {rank}: the trace holds no reading of rank {rank}" in result.output
        assert "Its ranks: 0, 1." in result.output and "Traceback" not in result.output
        assert not out.exists()


def small_tokens() -> pl.DataFrame:
    """Waves of 8 to 64 packed tokens, as a CPU demo records."""
    rows = [
        dict(seq=i, wave=i, signature="s", packed_tokens=n, logical_tokens=n,
             peak_bytes=10_000 + 1_000 + (300 if i else 400) * n, baseline_bytes=10_000,
             output_bytes=1_000, whole=True)
        for i, n in enumerate([8, 12, 20, 32, 40, 64, 16, 24])
    ]  # fmt: skip
    return readings_frame(rows)


def _ticks(ax: Any, renderer: Any) -> list[tuple[float, str]]:
    """The x ticks inside the axes' view, each with its label as drawn."""
    low, high = sorted(ax.get_xlim())
    ticks = zip(ax.get_xticks(), ax.get_xticklabels(), strict=True)
    return [(float(at), label.get_text()) for at, label in ticks if low <= at <= high]


def test_token_ticks_are_whole_and_readable() -> None:
    """Panel (b) drew packed tokens in thousands: 8-64 tokens had ticks at 0.01, 0.02...
    Ticks are whole tokens, with thousands separators, k or M for large counts; the
    waves' axis has whole ticks too."""
    pytest.importorskip("matplotlib")

    fig = draw_figure(build_plot_data(replay(small_tokens(), engine="scalar")))
    renderer = _drawn(fig)
    ticks = _ticks(fig.axes[1], renderer)
    assert len(ticks) >= 3
    assert all(at == int(at) for at, _ in ticks)
    assert [label for _, label in ticks] == [str(int(at)) for at, _ in ticks]
    assert fig.axes[1].xaxis.label.get_text() == "packed tokens"
    waves = _ticks(fig.axes[0], renderer)
    assert waves and all(at == int(at) for at, _ in waves)
    # a real GPU trace, tens of thousands of tokens: "12k", "16k", ...
    fig = draw_figure(build_plot_data(replay(read_trace([REPO / "traces" / "pr991"]))))
    renderer = _drawn(fig)
    for ax in (fig.axes[1], fig.axes[4]):
        labels = [label for _, label in _ticks(ax, renderer)]
        assert labels and all(re.fullmatch(r"\d+k", label) for label in labels), labels
    from warmfit.report.plot import token_tick

    assert [token_tick(n, 9_000) for n in (0, 8, 2_500)] == ["0", "8", "2,500"]
    assert token_tick(12_500, 40_000) == "12.5k" and token_tick(2.5e7, 3e7) == "25M"


def _rendered(frame: pl.DataFrame, **options: object):  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from warmfit.report.plot import build_plot_data, draw_figure

    fig = draw_figure(build_plot_data(replay(frame, engine="scalar"), **options))  # type: ignore[arg-type]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig, canvas.get_renderer()


def test_the_middle_title_fits_its_panel_with_a_long_signature() -> None:
    long = "train/" + "packed-seq-4096-bucket-07-" * 6 + "eval"
    extra = [
        dict(COMMON, seq=10 + i, wave=10 + i, signature=long, packed_tokens=10,
             logical_tokens=10, peak_bytes=20_000, whole=True)
        for i in range(2)
    ]  # fmt: skip
    frame = readings_frame([*({**COMMON, **r} for r in WORKED), *extra]).sort("seq")
    fig, renderer = _rendered(frame, signature=long)
    middle = fig.axes[1]
    title = middle.title.get_window_extent(renderer)
    panel = middle.get_window_extent(renderer)
    assert "rank 0, signature train/packed" in middle.get_title()
    assert "…" in middle.get_title()
    assert title.width <= panel.width, (title.width, panel.width)


def test_an_oom_wave_is_marked_on_the_peak_panel() -> None:
    """Wave 3 of the worked trace ran out of memory: its actual peak (120,000 bytes
    above baseline) is where it stopped; it is drawn with a mark of its own, named."""
    fig, _ = _rendered(worked())
    peaks = fig.axes[0]
    marked = [c for c in peaks.collections if c.get_label().startswith("ran out of memory")]
    assert len(marked) == 1
    assert [x for x, _ in marked[0].get_offsets()] == [3]
    legend = [t.get_text() for t in peaks.get_legend().get_texts()]
    assert "ran out of memory (its peak so far)" in legend


def test_an_oom_wave_survives_the_thinning_of_a_large_run() -> None:
    from warmfit.report.plot import build_plot_data

    rows = []
    for i in range(30_000):  # a long run: thinned; one wave in the middle ran out of memory
        rows.append(dict(seq=i, wave=i, signature="s", packed_tokens=100, logical_tokens=100,
                         peak_bytes=1_000_000 + (i % 7), whole=True, oom=i == 15_001))  # fmt: skip
    result = replay(readings_frame(rows), ["max-merge"])
    kept = build_plot_data(result).drawn.peaks.filter(pl.col("draw_actual"))
    assert kept.height < 30_000 and kept.filter(pl.col("oom")).height == 1


# --------------------------------------------------------------------------- streamed plot


@st.composite
def wave_rows(draw: st.DrawFn) -> tuple[pl.DataFrame, int]:
    """Per-wave rows of a few runs, ranks and waves (each key once), ``policies`` rows a
    wave, wave by wave as a replay makes them or in any order (a caller's own frame)."""
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 2), st.integers(0, 6)),
            unique=True,
            max_size=14,
        )
    )
    if draw(st.booleans()):
        keys.sort(key=lambda k: (k[0], k[1]))  # canonical order: each run's waves together
    policies = draw(st.integers(1, 3))
    rows = [(*key, f"p{i}") for key in keys for i in range(policies)]
    if draw(st.booleans()):
        rows = draw(st.permutations(rows))
    frame = pl.DataFrame(
        rows, schema={"run": pl.String, "rank": pl.Int32, "wave": pl.Int64, "policy": pl.String},
        orient="row",
    )  # fmt: skip
    return frame, policies


def _places(rows: list[tuple[Any, ...]]) -> list[int]:
    """Each row's wave's place in its run, waves in the order they first come (by hand)."""
    place: dict[tuple[Any, ...], int] = {}
    per_run: dict[Any, int] = {}
    for run, rank, wave, *_ in rows:
        if (run, rank, wave) not in place:
            place[(run, rank, wave)] = per_run.get(run, 0)
            per_run[run] = per_run.get(run, 0) + 1
    return [place[row[:3]] for row in rows]


@settings(max_examples=300, deadline=None)
@given(wave_rows())
def test_wave_places_without_a_join_are_those_of_first_appearance(drawn: Any) -> None:
    """The places ``peak_series`` gives (a join where rows do not come wave by wave) and
    the first row of each wave that panel (a)'s actual-peak line takes, against a count
    by hand, whatever the rows' order."""
    from warmfit.report.plot import _first_of_each_wave, _positions

    frame, _ = drawn
    rows = frame.rows()
    places = _places(rows)
    assert _positions(frame).to_list() == places
    seen: set[tuple[Any, int]] = set()
    firsts = []
    for row, place in zip(rows, places, strict=True):
        firsts.append((row[0], place) not in seen)
        seen.add((row[0], place))
    peaks = frame.with_columns(position=pl.Series(places, dtype=pl.Int64))
    assert _first_of_each_wave(peaks).tolist() == firsts


@settings(max_examples=200, deadline=None)
@given(wave_rows(), st.data())
def test_roles_are_taken_row_by_row_only_where_the_waves_line_up(drawn: Any, data: Any) -> None:
    """Panel (b)'s roles: each wave's own, from roles in the same order, another order,
    or lacking some waves (``other``, as the join left them null)."""
    from warmfit.report.plot import _with_roles

    frame, _ = drawn
    waves = frame.filter(pl.col("policy") == "p0").drop("policy")
    keys = waves.rows()
    role = {key: data.draw(st.sampled_from(["seed", "warm", "other"])) for key in keys}
    kept = data.draw(st.permutations(keys)) if data.draw(st.booleans()) else list(keys)
    if kept and data.draw(st.booleans()):
        kept = kept[:-1]
    roles = pl.DataFrame(
        [(*key, role[key]) for key in kept],
        schema={"run": pl.String, "rank": pl.Int32, "wave": pl.Int64, "role": pl.String},
        orient="row",
    )  # fmt: skip
    got = _with_roles(waves, roles)
    assert got.drop("role").equals(waves)
    assert got.get_column("role").to_list() == [
        role[key] if key in set(kept) else None for key in keys
    ]


def _frames_equal(streamed: PlotData, whole: PlotData) -> None:
    """Every frame and figure of two plots' data alike (the curves in any row order)."""
    for name in ("peaks", "rates", "over"):
        assert getattr(streamed, name).equals(getattr(whole, name)), name
    for name in ("peaks", "rates", "over"):
        assert getattr(streamed.drawn, name).equals(getattr(whole.drawn, name)), name
    assert streamed.curves.sort(streamed.curves.columns).equals(
        whole.curves.sort(whole.curves.columns)
    )
    for name in ("waves", "points", "drawn", "under", "thinned"):
        assert getattr(streamed.drawn, name) == getattr(whole.drawn, name), name
    assert streamed.main_profiles == whole.main_profiles
    assert streamed.profile_counts == whole.profile_counts


@pytest.mark.parametrize("batch", ["7", "100000"])
def test_the_streamed_plot_draws_what_a_replay_in_memory_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: str
) -> None:
    """``warmfit plot`` holds one run at a time (its frames written per run and batch,
    each batch's places and row numbers shifted by what came before): the data it draws
    are those of a replay of the whole trace in memory, in batches of 7 readings or one,
    and its temporary folder is gone when it ends, as after a refusal."""
    pytest.importorskip("matplotlib")
    import warmfit.report.plot

    trace = pl.concat([worked(("A", "B", "C")), two_ranks()])
    write_trace(trace.sort("run", "rank", "seq"), tmp_path / "trace" / "t.parquet")
    seen: list[PlotData] = []
    monkeypatch.setattr(
        warmfit.report.plot, "render_plot", lambda data, path, *_: seen.append(data.whole())
    )
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("WARMFIT_BATCH_READINGS", batch)
    (tmp_path / "tmp").mkdir()
    args = ["plot", str(tmp_path / "trace"), "-o", str(tmp_path / "f.png"), "--engine", "scalar"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    whole = build_plot_data(replay(read_trace([tmp_path / "trace"]), engine="scalar"))
    _frames_equal(seen[0], whole)
    assert seen[0].runs == ("A", "B", "C", "R", "solo")
    assert list((tmp_path / "tmp").iterdir()) == []
    refused = CliRunner().invoke(app, [*args, "--signature", "nosuch", "--force"])
    assert refused.exit_code == 2 and "no run of the trace has that signature" in refused.output
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_strip_of_exactly_the_limit_is_drawn_whole_and_one_more_is_thinned() -> None:
    """Panel (c)'s strips: 12 equal over-estimates sit in one cell, and rows 0 and 11
    share a jitter offset ((11 * 7919) % 11 == 0). A strip of at most ``above`` rows is
    drawn whole; one longer keeps the first dot of each (offset, cell): 11 of 12."""
    from warmfit.report.plot import _thin_over

    over = pl.DataFrame(
        {"run": ["r"] * 12, "policy": ["warm-fit"] * 12, "over_estimate_pct": [5.0] * 12}
    )
    assert _thin_over(over, ["r"], above=12).height == 12
    thinned = _thin_over(over, ["r"], above=11)
    assert thinned.height == 11
    assert thinned.get_column("offset").n_unique() == 11


def test_a_run_of_5000_waves_is_drawn_whole_and_one_of_5001_is_thinned() -> None:
    """The limit docs/explanation/performance.md gives: a run of more than 5,000 waves is
    thinned. 5,000 waves: every point drawn, nothing thinned; 5,001: the run thinned."""
    for waves, thinned in ((5_000, ()), (5_001, ("run",))):
        data = build_plot_data(replay(big_run(waves), engine="vectorized"))
        assert data.drawn.waves == waves
        assert data.drawn.thinned == thinned
        assert (data.drawn.drawn == data.drawn.points) is (not thinned)


def test_the_thinning_grids_are_1000_columns_320_by_240_cells_and_400_cells_a_strip() -> None:
    """The default resolutions, by the points flat series keep (one per occupied cell, the
    first, and the last point, which shares the last cell):

    - a flat line at x = 0 .. 2,000: 1,000 columns of two points (the last of three) keep
      their first, x = 0, 2, .., 1,998, and the last, x = 2,000: 1,001 points;
    - dots at x = 0 .. 639, y = 0: 320 columns of two dots, 320 firsts and the
      rightmost: 321; at y = 0 .. 479, x = 0: 240 rows of two, 241;
    - a strip of 800 over-estimates 0 .. 799 at one offset: 400 cells of two, 401."""
    from warmfit.report.plot import scatter_keep

    assert line_keep(np.arange(2_001.0), np.zeros(2_001)).sum() == 1_001
    assert scatter_keep(np.arange(640.0), np.zeros(640)).sum() == 321
    assert scatter_keep(np.zeros(480), np.arange(480.0)).sum() == 241
    assert strip_keep(np.zeros(800, np.int64), np.arange(800.0)).sum() == 401


def test_thinning_an_empty_series_keeps_nothing() -> None:
    """No point: no cell (an int64 array of length 0), no line point, no dot, no strip
    dot; beside it one point sits in cell 0 and is kept."""
    from warmfit.report.plot import _one_per_cell, cells, scatter_keep

    empty = np.zeros(0)
    for got, kind in (
        (cells(empty, 4), np.int64),
        (_one_per_cell(np.zeros(0, np.int64)), np.int64),
        (line_keep(empty, empty), np.bool_),
        (scatter_keep(empty, empty), np.bool_),
        (strip_keep(np.zeros(0, np.int64), empty), np.bool_),
    ):
        assert isinstance(got, np.ndarray) and got.shape == (0,) and got.dtype == kind
    assert cells(np.array([7.0]), 4).tolist() == [0]
    assert _one_per_cell(np.array([0])).tolist() == [0]
    assert line_keep(np.array([7.0]), np.array([1.0])).tolist() == [True]


def _worked_frames() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The panels' frames of the worked run's replay (run R, 4 waves, 2 policies)."""
    result = replay(worked(), ["max-merge", "warm-fit"], engine="scalar")
    return peak_series(result), rate_points(result), over_estimates(result)


def test_a_plot_of_no_run_draws_nothing() -> None:
    """The panels' frames with no row and no run (a replay of no wave): no curve, no
    wave, no point, nothing drawn or thinned, and panel (b)'s frame with its flags and
    no row."""
    from warmfit.report.plot import plot_data

    peaks, rates, over = (frame.clear() for frame in _worked_frames())
    data = plot_data((), ("max-merge", "warm-fit"), 1.1, {}, peaks, rates, over)
    assert data.curves.height == 0 and data.main_profiles == {}
    drawn = data.drawn
    assert (drawn.waves, drawn.points, drawn.drawn, drawn.under) == (0, 0, 0, 0)
    assert drawn.thinned == ()
    assert (drawn.peaks.height, drawn.rates.height, drawn.over.height) == (0, 0, 0)
    assert drawn.rates.columns == [*rates.columns, "draw_point", "draw_floor"]
    assert drawn.rates.schema["draw_point"] == pl.Boolean


def test_streamed_parts_read_a_run_without_files_as_empty_frames(tmp_path: Path) -> None:
    """A streamed plot's parts (:class:`PlotParts`): the worked run R's frames come back
    as written (4 waves: 8 rows of panel a, 2 policies; 4 of panel b); a run no batch
    wrote reads as the same three frames' columns with no row."""
    from warmfit.report.plot import PlotPart, PlotParts

    frames = _worked_frames()
    parts = PlotParts(str(tmp_path), None)
    parts.add(PlotPart.of(frames, str(tmp_path), {}, [0]))
    back = parts.read("R")
    assert [frame.height for frame in back] == [8, 4, frames[2].height]
    for got, want in zip(back, frames, strict=True):
        assert got.equals(want)
    absent = parts.read("absent")
    assert isinstance(absent, tuple) and len(absent) == 3
    for got, want in zip(absent, frames, strict=True):
        assert got.height == 0 and got.schema == want.schema


# --- issue 38, generated pass of plot.py (i38p2) ---


def _style(line: Any) -> tuple[Any, ...]:
    """A line's colour, style, width, marker, marker size and z-order."""
    from matplotlib.colors import to_hex

    return (
        to_hex(line.get_color()),
        line.get_linestyle(),
        line.get_linewidth(),
        line.get_marker(),
        line.get_markersize(),
        line.get_zorder(),
    )


def _dots(collection: Any) -> tuple[Any, ...]:
    """A scatter's sizes, face and edge colours, edge widths and z-order."""
    from matplotlib.colors import to_hex

    return (
        collection.get_sizes().tolist(),
        [to_hex(c) for c in collection.get_facecolor()],
        [to_hex(c) for c in collection.get_edgecolor()],
        collection.get_linewidths().tolist(),
        collection.get_zorder(),
    )


def _below(ax: Any, renderer: Any) -> tuple[float, float, int, float]:
    """Where a panel's legend sits against its axes (LEGEND_BELOW): its centre's x less
    the axes' centre, its top less the anchor 0.17 of the axes' height below them (less
    the legend's border pad, half its font size), its columns and its font size."""
    legend = ax.get_legend()
    box = legend.get_window_extent(renderer)
    x, y = ax.transAxes.transform((0.5, -0.17))
    size = legend.get_texts()[0].get_fontsize()
    columns = len({round(t.get_window_extent(renderer).x0) for t in legend.get_texts()})
    return (box.x0 + box.x1) / 2 - x, box.y1 - (y - 0.5 * size * DPI / 72), columns, size


def _worked_figure(policies: tuple[str, ...] = ("max-merge", "warm-fit"), **options: Any) -> Any:
    pytest.importorskip("matplotlib")
    return draw_figure(
        build_plot_data(replay(worked(), list(policies), engine="scalar"), **options)
    )


def test_the_peak_panel_draws_each_series_in_its_own_style() -> None:
    """Panel (a) of the worked run, in KB (the largest, max-merge's 128,700 bytes, is under
    a MB): the actual peaks 30, 50, 90, 120 KB (a dark line of dots), each policy's
    estimates (its colour, later ones thinner and dashed, on top), wave 3's OOM mark and
    warm-fit's estimate under its peak (108.9 KB < 120) crossed in red; the legend below,
    centred, in two columns."""
    fig = _worked_figure()
    renderer = _drawn(fig)
    ax = fig.axes[0]
    lines = {str(line.get_label()): line for line in ax.get_lines()}
    assert list(lines) == ["actual peak", "max-merge estimate", "warm-fit estimate"]
    assert _style(lines["actual peak"]) == ("#222222", "-", 2, "o", 4, 4)
    assert list(lines["actual peak"].get_xdata()) == [0, 1, 2, 3]
    assert list(lines["actual peak"].get_ydata()) == pytest.approx([30, 50, 90, 120])
    assert _style(lines["max-merge estimate"]) == ("#d95f02", "-", 3.0, ".", 6, 3)
    assert _style(lines["warm-fit estimate"]) == ("#1b9e77", "--", 2.2, ".", 6, 4)
    for name, estimates in (
        ("max-merge", [64.9, 128.7, 128.7]),
        ("warm-fit", [64.9, 108.9, 108.9]),
    ):
        got = list(lines[f"{name} estimate"].get_ydata())  # wave 0 unpriced
        assert got[0] is None and got[1:] == pytest.approx(estimates)
    marks = {c.get_label(): c for c in ax.collections}
    assert list(marks) == ["ran out of memory (its peak so far)", "estimate under its peak"]
    oom, under = marks.values()
    assert oom.get_offsets().tolist() == [[3, 120]]
    assert _dots(oom) == ([140], ["#000000"], ["#ffffff"], [0.8], 7)
    assert under.get_offsets().tolist() == [[3, pytest.approx(108.9)]]
    assert _dots(under) == ([80], ["#ff0000"], ["#ff0000"], [2], 6)
    assert ax.get_ylabel() == "bytes above baseline (KB)" and ax.get_ylim()[0] == 0
    assert ax.yaxis.get_gridlines()[0].get_alpha() == 0.3
    assert _below(ax, renderer) == (pytest.approx(0, abs=1e-6), pytest.approx(0, abs=1e-6), 2, 8)


def whole_waves(rates: list[float], n: int = 100, **extra: Any) -> pl.DataFrame:
    """Run R of whole waves of ``n`` packed tokens, wave i at ``rates[i]`` KB a token
    (o = 1,000 bytes, baseline 10,000): wave 0 the seed, the others warm."""
    rows = [
        {**COMMON, "run": "R", "seq": i, "wave": i, "packed_tokens": n, "logical_tokens": n,
         "peak_bytes": 11_000 + round(rate * 1_000 * n), "whole": True, **extra}
        for i, rate in enumerate(rates)
    ]  # fmt: skip
    return readings_frame(rows)


def test_the_rates_panel_draws_each_role_and_price_in_its_own_style() -> None:
    """Panel (b) of the worked run: each policy's price line in its colour, the waves
    as dots by role (other grey squares under warm blue dots under the red seed star),
    the y range every rate and price with 8 % of a span of at least 1 KB a token each
    side: rates 0.2225 to 0.2975, so 0.1425 to 0.3775; the legend below in two columns,
    its title at 8 points."""
    fig = _worked_figure()
    renderer = _drawn(fig)
    ax = fig.axes[1]
    lines = {str(line.get_label()): line for line in ax.get_lines()}
    assert list(lines) == ["max-merge price", "warm-fit price"]
    assert _style(lines["max-merge price"])[:3] + _style(lines["max-merge price"])[5:] == (
        "#d95f02", "-", 3.0, 3,
    )  # fmt: skip
    assert _style(lines["warm-fit price"])[:3] + _style(lines["warm-fit price"])[5:] == (
        "#1b9e77", "--", 2.2, 4,
    )  # fmt: skip
    # 160 counts from 0.8 x 100 to 1.1 x 400 tokens: max-merge at the seed's 0.29 KB a
    # token, warm-fit from it down to the warm wave's 0.245
    for name, first, last in (("max-merge", 0.29, 0.29), ("warm-fit", 0.29, 0.245)):
        x, y = lines[f"{name} price"].get_xdata(), lines[f"{name} price"].get_ydata()
        assert (len(x), x[0], x[-1], y[0], y[-1]) == (160, 80, 440, first, pytest.approx(last))
    assert set(lines["max-merge price"].get_ydata()) == {0.29}
    roles = {c.get_label(): c for c in ax.collections}
    assert list(roles) == ["other waves", "warm waves", "cold seed (first whole wave)"]
    other, warm, seed = roles.values()
    assert other.get_offsets().tolist() == [[400, 0.2225], [400, 0.2975]]
    assert _dots(other) == ([24], ["#999999"], ["#999999"], [1], 3)
    assert warm.get_offsets().tolist() == [[200, 0.245]]
    assert _dots(warm) == ([36], ["#2c7fb8"], ["#2c7fb8"], [1], 4)
    assert seed.get_offsets().tolist() == [[100, 0.29]]
    assert _dots(seed) == ([260], ["#c51b1b"], ["#c51b1b"], [1], 5)
    assert ax.get_ylim() == pytest.approx((0.1425, 0.3775))
    assert ax.get_title() == "R: rate per packed token" and ax.title.get_fontsize() == 12
    assert ax.yaxis.get_gridlines()[0].get_alpha() == 0.3
    assert _below(ax, renderer) == (pytest.approx(0, abs=1e-6), pytest.approx(0, abs=1e-6), 2, 8)
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "price per token after the last wave, before ×1.1"
    assert legend.get_title().get_fontsize() == 8


def test_the_rates_panels_y_range_pads_the_rates_by_8_percent_of_their_span() -> None:
    """The span is the rates' range, 5 % of the highest, or 1 KB a token, whichever is
    largest: rates 100 and 99 KB a token, span 5 (5 % of 100): 98.6 to 100.4."""
    pytest.importorskip("matplotlib")
    data = build_plot_data(replay(whole_waves([100, 99]), ["max-merge"], engine="scalar"))
    peaks, ax = draw_figure(data).axes[:2]
    assert ax.get_ylim() == pytest.approx((98.6, 100.4))
    # a seed and a warm wave, no other: no grey dot, nor its legend entry
    assert [c.get_label() for c in ax.collections] == ["warm waves", "cold seed (first whole wave)"]
    # no wave ran out of memory, none is under its peak: no mark of either on panel (a)
    assert list(peaks.collections) == []
    assert _legend_texts(peaks) == ["actual peak", "max-merge estimate"]


def test_a_static_floor_is_drawn_and_said_where_it_sets_every_estimate() -> None:
    """Rates 3, 2 and 2.5 KB a token over 100 tokens with a static floor of 2,000,000
    bytes (20 KB a token): every estimate, 1.1 x (2,000,000 + 1,000) = 2.2011 MB, is the
    floor's. Panel (a) says so at its top left, in grey at 9 points, its y range 12 %
    taller than the lines need (0.201 to 2.2011 MB, 5 % margins: 2.3011 x 1.12);
    panel (b) draws the floor as a dotted grey line under the rest, and its y range is
    2 to 20 KB a token, span 18: 0.56 to 21.44."""
    pytest.importorskip("matplotlib")
    frame = whole_waves([3, 2, 2.5], static_floor_bytes=2_000_000)
    data = build_plot_data(replay(frame, ["max-merge", "warm-fit"], engine="scalar"))
    assert data.peaks.get_column("set_by").to_list() == ["floor"] * 6
    fig = draw_figure(data)
    peaks, rates = fig.axes[:2]
    (note,) = peaks.texts
    assert note.get_text() == "every estimate is set by the static floor"
    assert (note.get_position(), note.get_fontsize(), note.get_color()) == (
        (0.02, 0.97), 9, "#555555",
    )  # fmt: skip
    assert peaks.get_ylabel() == "bytes above baseline (MB)"
    assert peaks.get_ylim() == pytest.approx((0, (2.2011 + 0.05 * (2.2011 - 0.201)) * 1.12))
    floor = [line for line in rates.get_lines() if line.get_label() == "static floor"]
    assert [_style(line)[:3] + _style(line)[5:] for line in floor] == [("#555555", ":", 2, 2)]
    assert list(floor[0].get_ydata()) == [20, 20, 20]
    assert rates.get_ylim() == pytest.approx((0.56, 21.44))
    # the worked run has no floor: no note, no floor line
    worked_fig = _worked_figure()
    assert list(worked_fig.axes[0].texts) == []
    assert "static floor" not in [line.get_label() for line in worked_fig.axes[1].get_lines()]


def test_the_over_estimate_panel_draws_a_box_and_dots_a_policy() -> None:
    """Panel (c) of the worked run: max-merge's over-estimates 29.8 and 43 % at place 1,
    warm-fit's 29.8 and 21 % at place 2: a box half a place wide in the policy's colour
    (35 % opaque), its median a black line 2 points wide, no flier marks; the dots in the
    policy's colour, jittered 0.18 either side (rows 0 and 1: offsets -5 and +5 of 5);
    "median +36.4%" 6 points above the highest dot; the red dashed line of 0 %; x from
    0.4 to 2.6; y from -5 (at least 5 % under) to the top of the 5 % margins around
    0 .. 43 (45.15) plus 8 % of that range (47.3): 48.934."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    fig = _worked_figure()
    renderer = _drawn(fig)
    ax = fig.axes[2]
    boxes = [(p.get_path().vertices[:, 0], p.get_facecolor(), p.get_alpha()) for p in ax.patches]
    assert [(x.min(), x.max()) for x, _, _ in boxes] == [(0.75, 1.25), (1.75, 2.25)]
    assert [(to_hex(colour), alpha) for _, colour, alpha in boxes] == [
        ("#d95f02", 0.35), ("#1b9e77", 0.35),
    ]  # fmt: skip
    medians = [line for line in ax.get_lines() if line.get_linewidth() == 2]
    assert [(list(m.get_xdata()), list(m.get_ydata())) for m in medians] == [
        ([0.75, 1.25], pytest.approx([36.4, 36.4])), ([1.75, 2.25], pytest.approx([25.4, 25.4])),
    ]  # fmt: skip
    assert {to_hex(m.get_color()) for m in medians} == {"#000000"}
    # two whiskers, two caps and a median a box, and the 0 % line: no flier marks
    assert len(ax.get_lines()) == 11
    zero = ax.get_lines()[-1]
    assert zero.get_label() == "actual peak (0%)" and list(zero.get_ydata()) == [0, 0]
    assert (to_hex(zero.get_color()), zero.get_linewidth(), zero.get_linestyle()) == (
        "#ff0000", 1, "--",
    )  # fmt: skip
    dots = ax.collections
    assert [c.get_offsets().tolist() for c in dots] == [
        [pytest.approx([0.82, 29.8]), pytest.approx([1.18, 43.0])],
        [pytest.approx([1.82, 29.8]), pytest.approx([2.18, 21.0])],
    ]
    assert [_dots(c) for c in dots] == [
        ([14], ["#d95f02"], ["#d95f02"], [1], 3), ([14], ["#1b9e77"], ["#1b9e77"], [1], 3),
    ]  # fmt: skip
    notes = [(t.get_text(), t.xy, t.get_position(), t.get_fontsize(), t.get_ha()) for t in ax.texts]
    assert notes == [
        ("median +36.4%", (1, pytest.approx(43.0)), (0, 6), 9, "center"),
        ("median +25.4%", (2, pytest.approx(29.8)), (0, 6), 9, "center"),
    ]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["max-merge", "warm-fit"]
    assert ax.get_xlim() == (0.4, 2.6)
    assert ax.get_ylim() == pytest.approx((-5, 45.15 + 0.08 * 47.3))
    assert ax.yaxis.get_gridlines()[0].get_alpha() == 0.3
    assert not ax.xaxis.get_gridlines()[0].get_visible()
    assert _below(ax, renderer) == (pytest.approx(0, abs=1e-6), pytest.approx(0, abs=1e-6), 1, 8)


def test_the_figure_of_one_run_is_one_row_of_three_panels_titled_with_its_lineup() -> None:
    """One run: 15 by 4.8 inches (as for none), three panels; the title names the policies
    and the safety factor (no rank: every rank drawn) at 14 points; the footnote, the
    caption then what "seed" means, at 11 points in italics."""
    fig = _worked_figure(caption="mine")
    assert figure_size(1) == figure_size(0) == (15.0, 4.8)
    assert tuple(fig.get_size_inches()) == (15.0, 4.8) and len(fig.axes) == 3
    assert fig.get_suptitle() == "warmfit replay: max-merge, warm-fit (safety factor 1.1)"
    (title,) = [t for t in _texts(fig) if t.get_text() == fig.get_suptitle()]
    assert title.get_fontsize() == 14
    (footnote,) = [t for t in _texts(fig) if SEED_NOTE in t.get_text()]
    assert footnote.get_text() == f"mine\n{SEED_NOTE}"
    assert (footnote.get_fontsize(), footnote.get_fontstyle()) == (11, "italic")
    assert [t for t in fig.axes[0].get_xticks() if t != int(t)] == []  # whole waves


def test_a_figure_with_no_seed_drawn_has_no_footnote() -> None:
    """Forward readings alone: no wave is whole, so none is a seed (all "other"); with no
    caption and nothing thinned there is nothing to say under the panels."""
    pytest.importorskip("matplotlib")
    rows = [dict(row, phase="forward", whole=False) for row in WORKED[:3]]
    frame = readings_frame([{**COMMON, **row} for row in rows])
    data = build_plot_data(replay(frame, ["max-merge"], engine="scalar"))
    assert data.rates.get_column("role").to_list() == ["other"] * 2  # waves 0 and 1
    fig = draw_figure(data)
    assert fig.get_supxlabel() == "" and not [t for t in _texts(fig) if "seed" in t.get_text()]


def test_names_are_shortened_around_an_ellipsis_to_the_limit() -> None:
    """26 letters in 21 characters: 10 at the start, the ellipsis, 10 at the end; a name
    of exactly the limit kept whole; a limit under 9 taken as 9 (4, the ellipsis, 4)."""
    from warmfit.report.plot import shortened

    letters = "abcdefghijklmnopqrstuvwxyz"
    assert shortened(letters, 21) == "abcdefghij…qrstuvwxyz"
    assert (
        shortened(letters, 26) == letters and shortened(letters, 25) == "abcdefghijkl…opqrstuvwxyz"
    )
    assert shortened(letters, 5) == "abcd…wxyz"


def test_the_byte_axis_turns_to_mb_under_a_gb_and_to_kb_under_a_mb() -> None:
    from warmfit.report.plot import byte_unit

    assert [byte_unit(gb) for gb in (1.5, 1.0, 0.995, 0.001, 0.000_999)] == [
        (1.0, "GB"), (1.0, "GB"), (1e3, "MB"), (1e3, "MB"), (1e6, "KB"),
    ]  # fmt: skip


def test_the_byte_unit_is_that_of_the_largest_actual_peak_or_estimate() -> None:
    """Panel (a)'s unit follows the largest value drawn, an actual peak or an estimate:
    peaks 900, 400 and 600 KB under estimates up to 1.98 MB are drawn in MB, as are peaks
    up to 1.5 MB under estimates of at most 220 KB; one wave of no bytes, in KB."""
    pytest.importorskip("matplotlib")

    def unit(rates: list[float], n: list[int]) -> str:
        rows = [
            {**COMMON, "run": "R", "seq": i, "wave": i, "packed_tokens": k, "logical_tokens": k,
             "peak_bytes": 11_000 + round(rate * 1_000 * k) - (1_000 if rate == 0 else 0),
             "whole": True}
            for i, (rate, k) in enumerate(zip(rates, n, strict=True))
        ]  # fmt: skip
        data = build_plot_data(replay(readings_frame(rows), ["max-merge"], engine="scalar"))
        return str(draw_figure(data).axes[0].get_ylabel())

    # seed 8.99 KB a token: wave 1 (200 tokens) priced 1.1 x (1,000 + 8,990 x 200) bytes
    assert unit([8.99, 3.0, 8.0], [100, 200, 50]) == "bytes above baseline (MB)"
    # seed 2 KB a token over 100: wave 1's 1.5 MB priced 220 KB (under its peak)
    assert unit([2.0, 15.0, 0.5], [100, 100, 10]) == "bytes above baseline (MB)"
    assert unit([0.0], [100]) == "bytes above baseline (KB)"


def test_later_policies_are_drawn_thinner_dashed_and_on_top() -> None:
    """The i-th policy: line style i of ``-``, ``--``, ``-.``, ``:`` (again from the fifth),
    3 - 0.8 i points wide but at least 1.2, at z-order 3 + i."""
    from warmfit.report.plot import _line

    names = ["a", "b", "c", "d", "e"]
    got = [
        (s["linestyle"], s["linewidth"], s["zorder"]) for s in map(lambda n: _line(names, n), names)
    ]
    assert got == [
        ("-", 3.0, 3), ("--", pytest.approx(2.2), 4), ("-.", pytest.approx(1.4), 5),
        (":", 1.2, 6), ("-", 1.2, 7),
    ]  # fmt: skip


def test_other_policies_take_the_other_colours_round_again_after_the_last() -> None:
    from warmfit.report.plot import OTHER_COLOURS, policy_colours

    names = [f"mine-{i}" for i in range(7)]
    assert list(policy_colours(names).values()) == [*OTHER_COLOURS, *OTHER_COLOURS[:2]]


def test_token_ticks_turn_to_k_and_m_at_ten_thousand_and_ten_million() -> None:
    from warmfit.report.plot import token_tick

    assert token_tick(5_000, 10_000) == "5k" and token_tick(5_000, 9_999) == "5,000"
    assert token_tick(5e6, 10_000_000) == "5M" and token_tick(5e6, 9_999_999) == "5,000k"
    assert token_tick(1, 64) == "1"


def test_the_pareto_picture_of_a_sweep_lays_out_its_results_and_stars() -> None:
    """The worked run's sweep over factors 1.0 and 1.1 (no wave under its peak at
    either): max-merge's medians 24 and 36.4 %, safe factor 0.847 (median 5.08 %);
    warm-fit's 14 and 25.4 %, 0.909 (3.64 %). Four runs: three panels a row, two rows,
    the last two panels hidden; each panel 5.2 inches wide and 3.8 + 0.16 a policy tall,
    plus 0.6 for the title (15.6 by 8.84). One run: one panel, the title on two lines."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    from warmfit.report.plot import draw_pareto, pareto_points
    from warmfit.report.sweep import sweep

    result = sweep(worked(("A", "B", "C", "D")), ["max-merge", "warm-fit"], grid=[1.0, 1.1])
    points = pareto_points(result).filter(pl.col("result") == "A")
    assert points.drop("result").rows() == [
        ("max-merge", 1.0, 0, pytest.approx(24.0), False),
        ("max-merge", 1.1, 0, pytest.approx(36.4), False),
        ("max-merge", pytest.approx(0.847458, abs=1e-6), 0, pytest.approx(5.084444), True),
        ("warm-fit", 1.0, 0, pytest.approx(14.0), False),
        ("warm-fit", 1.1, 0, pytest.approx(25.4), False),
        ("warm-fit", pytest.approx(0.909091, abs=1e-6), 0, pytest.approx(3.636), True),
    ]
    fig = draw_pareto(result)
    assert tuple(fig.get_size_inches()) == pytest.approx((15.6, 8.84))
    assert (
        fig.get_suptitle() == "warmfit sweep: median over-estimate against waves under their peak"
    )
    assert [ax.get_visible() for ax in fig.axes] == [True] * 4 + [False] * 2
    assert [ax.get_title() for ax in fig.axes[:4]] == ["A", "B", "C", "D"]
    ax = fig.axes[0]
    assert ax.title.get_fontsize() == 9
    lines = ax.get_lines()
    assert [(list(line.get_xdata()), list(line.get_ydata())) for line in lines] == [
        ([0, 0], pytest.approx([24.0, 36.4])), ([0, 0], pytest.approx([14.0, 25.4])),
    ]  # fmt: skip
    stars = ax.collections
    assert [c.get_offsets().tolist() for c in stars] == [
        [[0, pytest.approx(5.084444)]], [[0, pytest.approx(3.636)]],
    ]  # fmt: skip
    assert [(c.get_sizes().tolist(), to_hex(c.get_facecolor()[0]), c.get_zorder()) for c in stars] == [
        ([180], "#d95f02", 9), ([180], "#1b9e77", 9),
    ]  # fmt: skip
    assert ax.get_xlim() == (-0.5, 1.5) and ax.yaxis.get_gridlines()[0].get_alpha() == 0.3
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "max-merge: safe ×0.847", "warm-fit: safe ×0.909",
    ]  # fmt: skip
    assert legend.markerscale == 0.7
    one = draw_pareto(sweep(worked(), ["max-merge", "warm-fit"], grid=[1.0, 1.1]))
    assert tuple(one.get_size_inches()) == pytest.approx((5.2, 4.72)) and len(one.axes) == 1
    assert one.get_suptitle() == (
        "warmfit sweep: median over-estimate\nagainst waves under their peak"
    )
    title = [t for t in _texts(one) if t.get_text() == one.get_suptitle()]
    assert [t.get_fontsize() for t in title] == [13]


def test_a_long_result_name_is_wrapped_at_64_characters_in_its_panels_title() -> None:
    """A name of 64 characters on one line; one of 65 on two, each shown literally (a
    ``$`` escaped, no mathtext). The lines were joined by an escaped newline, drawn as
    the two characters ``\\n`` on one line over the next panel's title."""
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import draw_pareto
    from warmfit.report.sweep import sweep

    name = " ".join(["word"] * 13)  # 64 characters
    longer = " ".join(["word"] * 12) + " $word"  # 65
    frame = pl.concat([worked((name,)), worked((longer,))])
    fig = draw_pareto(sweep(frame.sort("run", "rank", "seq"), ["max-merge"], grid=[1.0]))
    wrapped = " ".join(["word"] * 12) + "\n\\$word"
    assert sorted(ax.get_title() for ax in fig.axes[:2]) == [wrapped, name]  # "$" sorts first


def test_figure_files_hold_no_date_or_version() -> None:
    """The same data gives the same bytes: no software version in a PNG, no date or
    creator in an SVG."""
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import figure_bytes

    fig = _worked_figure()
    png, svg = figure_bytes(fig, "png"), figure_bytes(fig, "svg").decode()
    assert b"Software" not in png and b"Matplotlib" not in png
    assert "<dc:date>" not in svg and "Matplotlib v" not in svg and "<dc:creator>" not in svg


def test_a_streamed_plot_of_recorded_prices_draws_them_but_no_price_curve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace that carries the trainer's own prices (``estimate_bytes``) is replayed with
    ``recorded`` too, which has no profile: ``warmfit plot`` draws its estimates (panel a)
    and over-estimates (panel c) but no price curve (panel b), its data those of the
    replay in memory."""
    pytest.importorskip("matplotlib")
    import warmfit.report.plot

    rows = [{**COMMON, **row, "run": "R", "estimate_bytes": 50_000} for row in WORKED]
    write_trace(readings_frame(rows), tmp_path / "trace" / "t.parquet")
    seen: list[PlotData] = []
    monkeypatch.setattr(
        warmfit.report.plot, "render_plot", lambda data, path, *_: seen.append(data.whole())
    )
    args = ["plot", str(tmp_path / "trace"), "-o", str(tmp_path / "f.png"), "--engine", "scalar"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (data,) = seen
    assert data.policies == ("max-merge", "warm-fit", "envelope", "recorded")
    _frames_equal(data, build_plot_data(replay(read_trace([tmp_path / "trace"]), engine="scalar")))
    fig = draw_figure(data)
    assert [line.get_label() for line in fig.axes[0].get_lines()][-1] == "recorded estimate"
    assert [line.get_label() for line in fig.axes[1].get_lines()] == [
        "max-merge price", "warm-fit price", "envelope price",
    ]  # fmt: skip
    assert [t.get_text() for t in fig.axes[2].get_xticklabels()][-1] == "recorded"


def test_only_the_first_estimate_under_its_peak_is_named_in_the_legend() -> None:
    """warm-fit and envelope both price the worked run's wave 3 under its peak (108.9 KB
    against 120): two red crosses, one entry "estimate under its peak" in the legend."""
    fig = _worked_figure(("warm-fit", "envelope"))
    ax = fig.axes[0]
    crosses = [c for c in ax.collections if c.get_offsets().tolist() == [[3, pytest.approx(108.9)]]]
    assert len(crosses) == 2
    assert _legend_texts(ax).count("estimate under its peak") == 1


def test_each_runs_rates_panel_draws_its_own_profiles_points_alone() -> None:
    """two_ranks: run R's rank 0 (the worked waves) and rank 1 (twice the bytes), and run
    solo's rank 0. Panel (b) of each run draws its main profile's four waves (rank 0),
    no other rank's or run's: the worked run's dots in both."""
    pytest.importorskip("matplotlib")
    data = build_plot_data(replay(two_ranks(), ["max-merge"], engine="scalar"))
    assert data.main_profiles == {"R": (0, "s"), "solo": (0, "s")}
    fig = draw_figure(data)
    for ax in (fig.axes[1], fig.axes[4]):
        dots = [tuple(p) for c in ax.collections for p in c.get_offsets().tolist()]
        assert dots == [(400, 0.2225), (400, 0.2975), (200, 0.245), (100, 0.29)]


def test_the_rates_title_names_the_profile_shown_where_a_run_has_several() -> None:
    """Two profiles (signatures s and t): the middle title's second line names rank and
    signature, at 10 points; a long signature kept to 48 - 18 = 30 characters there."""
    fig, _ = _rendered(two_signatures())
    assert fig.axes[1].get_title() == "run: rate per packed token\nrank 0, signature s"
    assert fig.axes[1].title.get_fontsize() == 10
    from warmfit.report.plot import shortened

    long = "train/" + "packed-seq-4096-bucket-07-" * 6 + "eval"
    frame = two_signatures().with_columns(
        signature=pl.when(pl.col("signature") == "t").then(pl.lit(long)).otherwise("signature")
    )
    fig, _ = _rendered(frame, signature=long)
    assert fig.axes[1].get_title().split("\n")[1] == f"rank 0, signature {shortened(long, 30)}"


def test_packed_token_ticks_are_in_thousands_where_the_axis_reaches_ten_thousand() -> None:
    """Waves of 8,000 and 20,000 packed tokens: the axis runs from under 10,000 to over
    it, and every tick is written in thousands (the largest tick in view decides)."""
    pytest.importorskip("matplotlib")
    rows = [
        {**COMMON, "run": "R", "seq": i, "wave": i, "packed_tokens": n, "logical_tokens": n,
         "peak_bytes": 11_000 + 100 * n, "whole": True}
        for i, n in enumerate([8_000, 20_000])
    ]  # fmt: skip
    fig = draw_figure(build_plot_data(replay(readings_frame(rows), ["max-merge"], engine="scalar")))
    renderer = _drawn(fig)
    ax = fig.axes[1]
    assert ax.get_xlim()[0] < 10_000 < ax.get_xlim()[1]
    labels = [label for _, label in _ticks(ax, renderer)]
    assert labels and all(re.fullmatch(r"\d+k", label) for label in labels), labels


def test_the_footnote_of_a_thinned_figure_of_several_runs_counts_each_wave_once() -> None:
    """A figure drawn from one PlotData of two runs says what its data's thinning note
    says (8 waves, here marked thinned), not the runs' counts over again per row."""
    import dataclasses

    pytest.importorskip("matplotlib")
    data = build_plot_data(replay(worked(("A", "B")), ["max-merge"], engine="scalar"))
    marked = dataclasses.replace(data, drawn=dataclasses.replace(data.drawn, thinned=("A",)))
    assert marked.drawn.note is not None and marked.drawn.note.startswith("8 waves: ")
    fig = draw_figure(marked)
    assert fig.get_supxlabel() == f"{SEED_NOTE}\n{marked.drawn.note}"


def test_a_sweep_result_with_no_priced_wave_has_no_safe_factor_nor_median() -> None:
    """Run E is one wave, the seed, never priced: no median at any factor (nulls, no
    line point), no safe factor (no star); its legend says so."""
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import draw_pareto, pareto_points
    from warmfit.report.sweep import sweep

    lone = readings_frame([{**COMMON, **WORKED[1], "run": "E"}])
    frame = pl.concat([worked(), lone]).sort("run", "rank", "seq")
    result = sweep(frame, ["max-merge"], grid=[1.0, 1.1])
    points = pareto_points(result).filter(pl.col("result") == "E")
    assert points.drop("result").rows() == [
        ("max-merge", 1.0, 0, None, False), ("max-merge", 1.1, 0, None, False),
    ]  # fmt: skip
    fig = draw_pareto(result)
    (ax,) = [ax for ax in fig.axes if ax.get_title() == "E"]
    assert len(ax.collections) == 0
    assert _legend_texts(ax) == ["max-merge: no safe factor"]
    assert all(t == int(t) for t in ax.get_xticks())


def test_a_run_with_no_priced_wave_draws_an_empty_over_estimate_panel() -> None:
    """One wave, the seed, which no policy prices: panel (c) draws no box, only the red
    0 % line, its y range from -5 (at least 5 % under), and the figure is drawn."""
    pytest.importorskip("matplotlib")
    lone = readings_frame([{**COMMON, **WORKED[1], "run": "E"}])
    data = build_plot_data(replay(lone, ["max-merge"], engine="scalar"))
    assert data.over.height == 0
    ax = draw_figure(data).axes[2]
    assert len(ax.patches) == 0 and [line.get_label() for line in ax.get_lines()] == [
        "actual peak (0%)"
    ]
    assert ax.get_ylim()[0] == -5


def test_write_pareto_writes_the_picture_and_returns_its_path(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import write_pareto
    from warmfit.report.sweep import sweep

    target = tmp_path / "pareto.png"
    written = write_pareto(sweep(worked(), ["max-merge"], grid=[1.0]), target)
    # one panel of one policy: 5.2 by 0.6 + 3.8 + 0.16 inches, at 100 pixels an inch
    assert written == target and png_size(target.read_bytes()) == (520, 456)


# --- issue 38, generated pass of plot.py (i38p1) ---


def one_wave_each(tokens: list[int], peak: int = 20_000) -> pl.DataFrame:
    """One run, rank and signature: a whole caller reading of ``tokens[i]`` packed tokens
    for wave i, each ``peak`` bytes (baseline 10,000, outputs 1,000)."""
    rows = [
        {**COMMON, "run": "R", "seq": seq, "wave": seq, "packed_tokens": n,
         "logical_tokens": n, "peak_bytes": peak, "whole": True}
        for seq, n in enumerate(tokens)
    ]  # fmt: skip
    return readings_frame(rows)


def test_the_curves_span_0_8_to_1_1_times_the_waves_and_leave_an_unpriced_count_null() -> None:
    """Waves of 1,000 and 2,000 tokens: the grid runs from int(0.8 x 1,000) = 800 to
    int(1.1 x 2,000) = 2,200. Waves of 1 and 2 tokens: int(0.8) = 0, so 1, to int(2.2) = 2
    (at least 2): the two counts 1 and 2. A profile that has learned no rate (skip-seed,
    which skips its one wave, the seed) prices nothing: every count's price is null."""
    curves = price_curves(replay(one_wave_each([1_000, 2_000]), ["max-merge"], engine="scalar"))
    tokens = curves.get_column("packed_tokens").to_list()
    assert (tokens[0], tokens[-1]) == (800, 2_200)
    curves = price_curves(replay(one_wave_each([1, 2]), ["max-merge"], engine="scalar"))
    assert curves.get_column("packed_tokens").to_list() == [1, 2]
    unpriced = price_curves(replay(one_wave_each([100]), [SkipSeed], engine="scalar"))
    assert unpriced.get_column("packed_tokens").to_list() == list(range(80, 111))
    assert unpriced.get_column("price_kb_per_token").null_count() == unpriced.height > 0


def test_the_middle_panel_breaks_a_tie_by_the_lowest_rank_then_the_first_signature() -> None:
    """Profiles with as many waves: rank 0 before rank 1, and on one rank signature 'a'
    before 'b', whatever order the waves come in."""
    from warmfit.report.plot import main_profile

    rates = pl.DataFrame(
        {"run": ["R"] * 6, "rank": [1, 1, 0, 0, 0, 0], "signature": ["a", "a", "b", "b", "a", "a"]}
    )
    assert main_profile(rates, "R") == ((0, "a"), 3)
    assert main_profile(rates.filter(pl.col("rank") == 0), "R") == ((0, "a"), 2)
    assert main_profile(rates.filter(pl.col("signature") == "a"), "R") == ((0, "a"), 2)


def hand_frames(
    waves: dict[str, int], policies: tuple[str, ...] = ("p",), seed: int = 0
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The panels' frames (:func:`peak_series`, :func:`rate_points`, :func:`over_estimates`)
    of runs of ``waves[run]`` waves each, rows wave by wave as a replay makes them: one
    rank and signature, actual peaks and estimates at random (each estimate 0 to 50 %
    above its peak), the first wave of a run its seed, the others warm."""
    rng = np.random.default_rng(seed)
    peaks, rates, over = [], [], []
    for run, count in waves.items():
        actual = rng.uniform(1.0, 2.0, count)
        tokens = rng.integers(1_000, 30_000, count)
        for wave in range(count):
            for policy in policies:
                estimate = float(actual[wave] * rng.uniform(1.0, 1.5))
                peaks.append((run, 0, wave, wave, policy, float(actual[wave]), estimate))
                over.append((run, policy, (estimate / actual[wave] - 1) * 100))
            rates.append((run, 0, "s", wave, len(rates), int(tokens[wave]),
                          float(actual[wave] * 1e9), float(actual[wave] * 1e6 / tokens[wave]),
                          "seed" if wave == 0 else "warm"))  # fmt: skip
    columns = ["run", "rank", "wave", "position", "policy", "actual_gb", "estimate_gb"]
    peak_frame = pl.DataFrame(peaks, schema=columns, orient="row").with_columns(
        pl.col("rank").cast(pl.Int32),
        set_by=pl.lit("profile"),
        under_peak=pl.lit(False),
        oom=pl.lit(False),
    )
    rate_columns = ["run", "rank", "signature", "wave", "first_seq", "packed_tokens"]
    rate_columns += ["actual_bytes", "rate_kb_per_token", "role"]
    rate_frame = pl.DataFrame(rates, schema=rate_columns, orient="row").with_columns(
        pl.col("rank").cast(pl.Int32), floor_kb_per_token=pl.lit(None, pl.Float64)
    )
    over_frame = pl.DataFrame(over, schema=["run", "policy", "over_estimate_pct"], orient="row")
    return peak_frame, rate_frame, over_frame


def thin_runs(
    frames: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame], runs: list[str], above: int
) -> Drawn:
    return thin(*frames, runs, {run: (0, "s") for run in runs}, above=above)


def drawn_rows(drawn: Drawn, run: str) -> tuple[list[Any], list[Any]]:
    """A run's drawn actual peaks (their places) and estimates (place and policy)."""
    mine = drawn.peaks.filter(pl.col("run") == run)
    actual = mine.filter("draw_actual").get_column("position").to_list()
    estimates = sorted(mine.filter("draw_estimate").select("position", "policy").rows())
    return actual, estimates


def test_each_run_is_thinned_on_its_own_and_a_small_one_beside_a_large_one_drawn_whole() -> None:
    """With a limit of 2,000 waves: a run of 2,500 waves beside one of 10 is thinned as it
    is alone (its lines have 1,000 columns of 2 or 3 waves), the small one drawn whole;
    two runs of 2,500 waves, each as it is alone; the waves counted over both runs."""
    frames = hand_frames({"big": 2_500, "small": 10}, ("p", "q"))
    drawn = thin_runs(frames, ["big", "small"], above=2_000)
    assert drawn.thinned == ("big",) and drawn.waves == 2_510
    # the actual-peak line takes each wave's first row (policy p's), once
    assert drawn.peaks.filter("draw_actual").get_column("policy").unique().to_list() == ["p"]
    alone = thin_runs(tuple(f.filter(pl.col("run") == "big") for f in frames), ["big"], 2_000)
    assert alone.thinned == ("big",) and alone.waves == 2_500
    assert drawn_rows(drawn, "big") == drawn_rows(alone, "big")
    assert len(drawn_rows(alone, "big")[0]) < 2_500
    small = drawn.peaks.filter(pl.col("run") == "small")
    assert small.height == 20 and small.get_column("draw_estimate").all()
    assert small.get_column("draw_actual").sum() == 10
    both = hand_frames({"a": 2_500, "b": 2_500}, ("p", "q"))
    drawn = thin_runs(both, ["a", "b"], above=2_000)
    assert drawn.thinned == ("a", "b") and drawn.waves == 5_000
    for run in ("a", "b"):
        mine = tuple(f.filter(pl.col("run") == run) for f in both)
        assert drawn_rows(drawn, run) == drawn_rows(thin_runs(mine, [run], 2_000), run)


def test_thinning_draws_the_same_points_whatever_the_rows_order() -> None:
    """A caller's frame may hold a run's rows in any order: the thinned lines keep the
    same waves' actual peaks and the same estimates as the rows in recording order (one
    policy, whose every estimate's line keeps its extremes, and two)."""
    for policies in (("p",), ("p", "q")):
        frames = hand_frames({"R": 2_500}, policies)
        ordered = thin_runs(frames, ["R"], above=2_000)
        actual, estimates = drawn_rows(ordered, "R")
        assert 0 < len(actual) < 2_500 and 0 < len(estimates) < 2_500 * len(policies)
        line = frames[0].filter(pl.col("policy") == "p")
        top = line.sort("estimate_gb").get_column("position")
        assert (top[0], "p") in estimates and (top[-1], "p") in estimates
        for seed in (1, 2):
            shuffled = (frames[0].sample(fraction=1.0, shuffle=True, seed=seed), *frames[1:])
            got = drawn_rows(thin_runs(shuffled, ["R"], above=2_000), "R")
            assert (sorted(got[0]), got[1]) == (sorted(actual), estimates)
        # the first row of the run at its first wave, the rest in any order
        rest = frames[0].filter(pl.col("position") > 0).sample(fraction=1.0, shuffle=True, seed=3)
        first = (pl.concat([frames[0].filter(pl.col("position") == 0), rest]), *frames[1:])
        got = drawn_rows(thin_runs(first, ["R"], above=2_000), "R")
        assert (sorted(got[0]), got[1]) == (sorted(actual), estimates)


def test_thin_draws_the_runs_it_is_given_alone() -> None:
    """Frames holding runs a and b, thinned for run a: only run a's rows and waves."""
    frames = hand_frames({"a": 30, "b": 20})
    drawn = thin_runs(frames, ["a"], above=10)
    assert drawn.waves == 30 and drawn.thinned == ("a",)
    for frame in (drawn.peaks, drawn.rates, drawn.over):
        assert frame.get_column("run").unique().to_list() == ["a"]
    alone = thin_runs(tuple(f.filter(pl.col("run") == "a") for f in frames), ["a"], above=10)
    for name in ("peaks", "rates", "over"):
        assert getattr(drawn, name).equals(getattr(alone, name)), name
    assert (drawn.points, drawn.drawn) == (alone.points, alone.drawn)


def test_a_plot_of_one_wave_and_one_policy() -> None:
    """The smallest trace: one wave, one policy: one row a panel, drawn whole."""
    data = build_plot_data(replay(one_wave_each([100]), ["max-merge"], engine="scalar"))
    assert data.peaks.height == 1 and data.drawn.waves == 1 and data.drawn.thinned == ()
    assert data.drawn.peaks.get_column("draw_actual").to_list() == [True]


def test_the_first_row_of_each_wave_where_runs_come_back_or_places_go_down() -> None:
    """Panel (a)'s actual-peak line takes each wave's first row: run A, B, A, B at places
    0, 0, 0, 1 (A's wave 0 comes back after B's), and run A at places 0, 1, 0."""
    from warmfit.report.plot import _first_of_each_wave

    back = pl.DataFrame({"run": ["A", "B", "A", "B"], "position": [0, 0, 0, 1]})
    assert _first_of_each_wave(back).tolist() == [True, True, False, True]
    down = pl.DataFrame({"run": ["A", "A", "A"], "position": [0, 1, 0]})
    assert _first_of_each_wave(down).tolist() == [True, True, False]


def test_a_line_keeps_its_first_and_last_point_and_an_unpriced_line_only_those() -> None:
    """y = 2, 2, 1, 3, 2 in one column: its lowest is at index 2, its highest at index 3;
    the first and the last point are kept besides, the second is not. A line of no priced
    point (every y NaN) keeps its ends alone."""
    keep = line_keep(np.arange(5.0), np.array([2.0, 2.0, 1.0, 3.0, 2.0]), columns=1)
    assert keep.tolist() == [True, False, True, True, True]
    assert line_keep(np.arange(3.0), np.full(3, np.nan)).tolist() == [True, False, True]


def test_a_scatter_keeps_a_dot_without_a_finite_place_and_thins_the_others_alone() -> None:
    """Dots at (0, 0), (1, NaN), (0.1, 0.1), (10, 10) in 2 x 2 cells: the NaN one is kept
    (matplotlib skips it) and takes no part in the cells or extremes: (0.1, 0.1) shares
    (0, 0)'s cell and is no extreme."""
    from warmfit.report.plot import scatter_keep

    x = np.array([0.0, 1.0, 0.1, 10.0])
    y = np.array([0.0, np.nan, 0.1, 10.0])
    assert scatter_keep(x, y, (2, 2)).tolist() == [True, True, False, True]
    assert scatter_keep(y, x, (2, 2)).tolist() == [True, True, False, True]
    # (0, 0), (0, 10) and (0.5, 5) lie in three cells of their own: all drawn, whatever a
    # dot at (1, NaN) beside them
    x, y = np.array([0.0, 0.0, 1.0, 0.5]), np.array([0.0, 10.0, np.nan, 5.0])
    assert scatter_keep(x, y, (2, 2)).tolist() == [True] * 4


def test_a_strip_keeps_every_dot_under_zero_not_one_at_zero() -> None:
    """Over-estimates 1, 0, 0, 2 % in one cell: the first (1), the lowest (the first 0)
    and the highest (2) are kept; the second 0 is no estimate under its peak."""
    y = np.array([1.0, 0.0, 0.0, 2.0])
    assert strip_keep(np.zeros(4, np.int64), y, count=1).tolist() == [True, True, False, True]
    y = np.array([1.0, 0.5, 0.5, 2.0])
    assert strip_keep(np.zeros(4, np.int64), y, count=1).tolist() == [True, True, False, True]


def test_each_runs_strips_count_their_jitter_from_zero() -> None:
    """Panel (c) of several runs: each (run, policy) strip numbers its rows 0, 1, ... on
    its own, row i at offset 0.18 * ((i * 7919) % 11 - 5) / 5, whatever the other
    strips (2 and 3 runs of 2 policies, 4 rows each, drawn whole)."""
    from warmfit.report.plot import _thin_over

    expected = {i: 0.18 * ((i * 7919) % 11 - 5) / 5 for i in range(4)}
    for runs in ("ab", "abc"):
        rows = [(run, policy, float(i)) for run in runs for policy in "pq" for i in range(4)]
        over = pl.DataFrame(rows, schema=["run", "policy", "over_estimate_pct"], orient="row")
        shuffled = over.sample(fraction=1.0, shuffle=True, seed=3)
        drawn = _thin_over(shuffled, list(runs), 50)
        assert drawn.height == 8 * len(runs)
        within = shuffled.with_columns(i=pl.int_range(pl.len()).over("run", "policy"))
        got = drawn.with_columns(within.get_column("i"))
        for row in got.iter_rows(named=True):
            assert row["offset"] == pytest.approx(expected[row["i"]]), row


def test_a_role_or_static_floor_of_at_most_the_limit_is_drawn_whole_beside_a_thinned_one() -> None:
    """Panel (b) of a run of 12 waves thinned at 4: its 7 warm dots go through the
    thinning, but a dot of a role of at most 4 dots is drawn even where it shares a pixel
    cell and is no extreme; so is the seed, even where a warm dot before it has its very
    place; and a static floor of 4 points, all in one column, is drawn whole."""
    peaks, rates, over = hand_frames({"R": 12})
    x = rates.get_column("packed_tokens").to_list()
    y = rates.get_column("rate_kb_per_token").to_list()
    x[2], y[2] = x[1], y[1]  # wave 2, the seed, where warm wave 1 is
    role = ["warm"] * 12
    role[2] = "seed"
    role[4:8] = ["other"] * 4  # four other dots in one cell, the middle two no extremes
    x[4:8], y[4:8] = [5_000, 5_000, 5_000, 5_001], [0.5, 0.5, 0.5, 0.50001]
    floor: list[float | None] = [None] * 12
    floor[8:12] = [1.0, 3.0, 2.0, 2.5]  # the floor's 4 points, waves 8-11 at one place
    x[8:12] = [9_000] * 4
    rates = rates.with_columns(
        packed_tokens=pl.Series(x), rate_kb_per_token=pl.Series(y), role=pl.Series(role),
        floor_kb_per_token=pl.Series(floor, dtype=pl.Float64),
    )  # fmt: skip
    drawn = thin_runs((peaks, rates, over), ["R"], above=4).rates
    assert drawn.height == 12
    dots = drawn.filter("draw_point")
    assert dots.filter(pl.col("role") != "warm").get_column("wave").to_list() == [2, 4, 5, 6, 7]
    assert drawn.filter("draw_floor").get_column("wave").to_list() == [8, 9, 10, 11]


def test_plot_data_refuses_a_signature_no_run_has() -> None:
    """build_plot_data, as `warmfit plot --signature`: exit 2 naming the signatures."""
    from warmfit.errors import UsageError

    with pytest.raises(UsageError, match=r"--signature 'u': no run .*Its signatures: 's'\."):
        build_plot_data(replay(worked(), engine="scalar"), signature="u")


def test_plot_rank_draws_the_curves_of_that_ranks_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``plot --rank 1``: panel (b)'s points have rank 1's roles, and its curves are those
    of rank 1's profile as a replay of the whole trace leaves it (rank 1's readings are
    twice rank 0's)."""
    import warmfit.report.plot

    seen: list[PlotData] = []
    monkeypatch.setattr(
        warmfit.report.plot, "render_plot", lambda data, path, *_: seen.append(data.whole())
    )
    write_trace(two_ranks(), tmp_path / "trace" / "t.parquet")
    args = ["plot", str(tmp_path / "trace"), "-o", str(tmp_path / "a.png"), "--rank", "1"]
    result = CliRunner().invoke(app, [*args, "--engine", "scalar"])
    assert result.exit_code == 0, result.output
    (data,) = seen
    # rank 1's waves have their own roles: the seed, a warm wave, two others
    assert data.rates.get_column("role").to_list() == ["seed", "warm", "other", "other"]
    whole = price_curves(replay(two_ranks(), engine="scalar"), profiles={("R", 1, "s")})
    assert whole.height > 0 and whole.get_column("rank").unique().to_list() == [1]
    assert data.curves.sort(data.curves.columns).equals(whole.sort(whole.columns))


def test_a_batchs_frames_sent_back_are_written_by_the_parts_and_read_back() -> None:
    """A batch replayed elsewhere (a cluster's) sends its frames back, no folder
    (:class:`PlotPart` ``frames``): :class:`PlotParts` writes them to its own folder, and
    reads the run back as written."""
    import tempfile

    from warmfit.report.plot import PlotPart, PlotParts

    frames = _worked_frames()
    part = PlotPart.of(frames, None, {}, [0])
    assert part.files == () and part.frames is frames
    with tempfile.TemporaryDirectory() as folder:
        parts = PlotParts(folder, None)
        parts.add(part)
        assert len(list(Path(folder).iterdir())) == 3
        for got, want in zip(parts.read("R"), frames, strict=True):
            assert got.equals(want)


def test_the_runs_thinned_are_named_in_the_frames_order() -> None:
    """Six runs of 5 waves, thinned above 4 waves: all six, in the order they come."""
    order = ("f", "e", "d", "c", "b", "a")
    drawn = thin_runs(hand_frames(dict.fromkeys(order, 5)), list(order), above=4)
    assert drawn.thinned == order and drawn.waves == 30


def test_a_batch_replayed_here_writes_its_frames_and_one_replayed_elsewhere_sends_them(
    tmp_path: Path,
) -> None:
    """:meth:`PlotFold.part`: a batch replayed on this machine writes its run's three
    frames to the folder itself; one replayed elsewhere (``local=False``: a cluster's
    worker, which cannot reach the folder) writes nothing there and sends its frames back."""
    from types import SimpleNamespace

    from warmfit.replay.stream import Lineup
    from warmfit.report.plot import PlotFold

    result = replay(worked(), [SkipSeed], engine="scalar")
    priced = SimpleNamespace(per_wave=result.per_wave)
    lineup = Lineup((SkipSeed,), result.safety_factor, "scalar", "run", False)
    away = PlotFold(str(tmp_path), local=False).part(worked(), priced, result.profiles, lineup)
    assert away.files == () and away.frames is not None and list(tmp_path.iterdir()) == []
    assert away.frames[0].equals(peak_series(result))
    here = PlotFold(str(tmp_path)).part(worked(), priced, result.profiles, lineup)
    assert here.frames is None and len(here.files) == 1
    assert sorted(tmp_path.iterdir()) == sorted(Path(p) for p in here.files[0][1])


def test_plot_rank_names_the_runs_without_it_in_the_traces_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs f, e, d, c, b and a have no reading of rank 1 (the worked run R has): `plot
    --rank 1` names them as the trace orders its runs, a to f."""
    import warmfit.report.plot

    monkeypatch.setattr(warmfit.report.plot, "render_plot", lambda *_: None)
    frame = pl.concat([two_ranks().filter(pl.col("run") == "R"), worked(tuple("fedcba"))])
    write_trace(frame.sort("run", "rank", "seq"), tmp_path / "trace" / "t.parquet")
    args = ["plot", str(tmp_path / "trace"), "-o", str(tmp_path / "a.png"), "--rank", "1"]
    result = CliRunner().invoke(app, [*args, "--engine", "scalar"])
    assert result.exit_code == 0, result.output
    assert "rank 1 is not in 6 runs (a, b, c, d, e, f): not drawn" in result.stderr
