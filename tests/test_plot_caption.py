"""The figure says where its traces come from: traces/pr991 is a reconstruction (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from warmfit.cli import app
from warmfit.format.trace import find_trace_files, read_trace, readings_frame, write_trace
from warmfit.replay import replay
from warmfit.report.plot import SEED_NOTE, build_plot_data, provenance_caption
from warmfit.samples.synthetic import METADATA

REPO = Path(__file__).resolve().parent.parent
PR991 = REPO / "traces" / "pr991"


def test_the_caption_comes_from_the_files_provenance() -> None:
    caption = provenance_caption(find_trace_files([REPO / "traces"]))
    # pr991's and art-h200's files carry it; the recordings (cpu-demo, hf-...) do not
    assert caption is not None
    lines = caption.splitlines()
    assert f"EP1, EP2: {METADATA['warmfit.provenance']}" in lines
    assert [line for line in lines if "real H200 measurements" in line]
    assert [line for line in lines if "Liger-Kernel" in line]
    assert len(lines) == 3


def test_a_trace_without_provenance_has_no_caption(tmp_path: Path) -> None:
    rows = [dict(seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9)]
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet")
    assert provenance_caption([path]) is None


def test_the_figure_draws_the_caption_under_the_panels() -> None:
    pytest.importorskip("matplotlib")
    from warmfit.report.plot import draw_figure

    readings = read_trace([PR991])
    caption = provenance_caption(find_trace_files([PR991]))
    fig = draw_figure(build_plot_data(replay(readings), caption))
    texts = [t.get_text() for t in fig.findobj(match=lambda a: hasattr(a, "get_text"))]
    assert f"{caption}\n{SEED_NOTE}" in texts  # the caption first, then what "seed" means
    bare = draw_figure(build_plot_data(replay(readings)))
    assert not [t for t in bare.findobj(lambda a: hasattr(a, "get_text")) if "reconstruction"
                in t.get_text()]  # fmt: skip


def test_warmfit_plot_captions_the_reconstruction_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import warmfit.report.plot

    seen: list[str | None] = []
    monkeypatch.setattr(
        warmfit.report.plot, "render_plot", lambda data, path, *_: seen.append(data.caption)
    )
    runner = CliRunner()
    for args in ([], ["--caption", "my own words"], ["--caption", ""]):
        out = tmp_path / f"p{len(seen)}.png"
        result = runner.invoke(app, ["plot", str(PR991), "-o", str(out), *args])
        assert result.exit_code == 0, result.output
    assert seen[0] is not None and "reconstruction" in seen[0]
    assert seen[1:] == ["my own words", None]


def test_warmfit_plot_says_under_the_caption_what_it_thinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of more than THIN_ABOVE waves is drawn thinned; the footnote says so, after the
    caption (issue 28)."""
    pytest.importorskip("matplotlib")
    import warmfit.report.plot
    from tests.test_plot import BIG_WAVES, big_run

    seen: list[warmfit.report.plot.PlotData] = []
    monkeypatch.setattr(
        warmfit.report.plot, "render_plot", lambda data, path, *_: seen.append(data.whole())
    )
    write_trace(big_run(), tmp_path / "trace" / "t.parquet")
    args = ["plot", str(tmp_path / "trace"), "-o", str(tmp_path / "f.svg"), "--caption", "mine"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (data,) = seen
    assert data.caption == "mine" and data.drawn.thinned == ("run",)
    assert data.drawn.note is not None and data.drawn.note.startswith(f"{BIG_WAVES:,} waves: ")
    # and a small trace, under the same command, is drawn whole: no note
    again = CliRunner().invoke(app, ["plot", str(PR991), "-o", str(tmp_path / "g.svg")])
    assert again.exit_code == 0, again.output
    assert seen[1].drawn.note is None and seen[1].drawn.points == seen[1].drawn.drawn


# --- issue 38, generated pass of plot.py (i38p2) ---


def test_the_caption_names_a_files_runs_in_the_order_they_come(tmp_path: Path) -> None:
    """Eight runs r0 .. r7 in one file of a synthetic trace: named in that order."""
    runs = [f"r{i}" for i in range(8)]
    rows = [
        dict(run=run, seq=0, wave=0, signature="s", packed_tokens=1, logical_tokens=1, peak_bytes=9)
        for run in runs
    ]
    path = write_trace(readings_frame(rows), tmp_path / "t.parquet", METADATA)
    assert provenance_caption([path]) == f"{', '.join(runs)}: {METADATA['warmfit.provenance']}"
