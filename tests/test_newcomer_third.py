"""What a newcomer tripped on, third pass (issue 41): the defaults, the messages, the
plot's middle title and OOM waves, the Makefile's install steps, the README's front door."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.test_plot import COMMON, WORKED, worked
from warmfit.cli import app
from warmfit.format.trace import readings_frame
from warmfit.policies import PolicyError, get_policy
from warmfit.replay import replay

REPO = Path(__file__).resolve().parent.parent


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- 4. defaults


def test_replay_and_check_default_to_max_merge_warm_fit_and_envelope(tmp_path: Path) -> None:
    """SPEC §9: without -p, the PR's two and the policy the README recommends, in order."""
    assert replay(worked(), engine="scalar").policies == ("max-merge", "warm-fit", "envelope")
    code, out, _ = invoke("replay", str(REPO / "traces" / "pr991"), "--format", "csv")
    assert code == 0
    policies = [line.split(",")[1] for line in out.splitlines()[1:]]
    assert policies == ["max-merge", "warm-fit", "envelope"] * 2
    expect = tmp_path / "e.toml"
    code, out, _ = invoke("check", str(REPO / "traces" / "pr991"), "--write-expect", str(expect))
    assert code == 0 and "(max-merge, warm-fit, envelope)" in out
    assert "[runs.EP1.envelope]" in expect.read_text()


# --------------------------------------------------------------------------- 8. smaller


def test_did_you_mean_is_not_capitalised_mid_sentence() -> None:
    with pytest.raises(PolicyError) as caught:
        get_policy("warmfit")
    assert str(caught.value).startswith(
        "unknown policy 'warmfit' (did you mean 'warm-fit'?); registered policies: "
    )
    assert "Did you" not in str(caught.value)


def test_validate_says_in_one_line_what_an_imported_trace_does_not_record() -> None:
    code, out, _ = invoke("validate", str(REPO / "traces" / "art-h200"))
    assert code == 0
    assert "not recorded" not in out
    lines = [line for line in out.splitlines() if "metadata" in line]
    assert lines == [
        "  not known   meter, torch, recorder (no warmfit.meter, warmfit.torch_version, "
        "warmfit.recorder metadata: written by another tool or imported)"
    ]
    assert "  device      NVIDIA H200" in out  # what is recorded is still shown


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


def test_make_test_says_what_it_installs() -> None:
    """Each install step of the venv is announced before it runs (about 4 minutes)."""
    text = (REPO / "Makefile").read_text()
    recipe = text.split("$(STAMP): pyproject.toml\n", 1)[1].split("\n\n", 1)[0].splitlines()
    for i, line in enumerate(recipe):
        if "pip install" in line or "-m venv" in line:
            assert recipe[i - 1].lstrip().startswith("@echo "), line


# --------------------------------------------------------------------------- 6 and 7. README


def test_the_readme_is_one_screen_and_states_the_recorders_cpu_cost() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 60
    for words in ("make demo", "make test", "warmfit record", "envelope"):
        assert words in text
    record = text.split("## Record", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"about \d+ µs per torch operator", record), record
