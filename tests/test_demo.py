"""The demo workload: it trains, it packs prefix trees, recording changes nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

torch = pytest.importorskip("torch")

from warmfit.format.trace import read_trace  # noqa: E402
from warmfit.recorder import Recorder  # noqa: E402
from warmfit.samples import demo  # noqa: E402

pytestmark = pytest.mark.torch

RECORD = (sys.executable, "-m", "warmfit", "record")


def torchrun_demo(torchrun: str) -> list[str]:
    return [
        torchrun,
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "warmfit.samples.demo",
        "--steps",
        "2",
    ]


def test_a_packed_wave_shares_each_prompt_and_hides_siblings():
    groups = [demo.Group(prompt=[1, 2, 3], completions=[[4, 5], [6]])]
    wave = demo.pack(groups, torch.device("cpu"))
    assert (wave.packed_tokens, wave.logical_tokens) == (6, 9)  # 3 + 2 + 1 vs (3+2) + (3+1)
    assert wave.positions.tolist() == [[0, 1, 2, 3, 4, 3]]
    mask = wave.mask
    assert mask[4, :5].tolist() == [True, True, True, True, True]  # completion 0 sees prompt
    assert not mask[5, 3] and not mask[3, 5]  # siblings never see each other
    assert mask[5, :3].all() and mask[5, 5]
    assert not mask[1, 2]  # causal inside the prompt
    # the prompt's last token predicts each completion's first token
    assert wave.sources.tolist() == [2, 3, 2] and wave.targets.tolist() == [4, 5, 6]


def test_the_loss_is_identical_with_and_without_the_recorder(tmp_path):
    plain = demo.train(steps=3, seed=1)
    with Recorder(tmp_path, run="demo", device="cpu") as recorder:
        recorded = demo.train(steps=3, seed=1, recorder=recorder)
    assert [r.loss for r in recorded] == [r.loss for r in plain]
    assert recorder.readings > 0


def test_the_loss_falls():
    results = demo.train(steps=12, seed=0)
    assert results[-1].loss < results[0].loss - 1.0


def test_warmfit_record_of_the_demo_is_a_valid_trace_with_shared_prefixes(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run(
        [
            *RECORD,
            "-o",
            str(out),
            "--",
            sys.executable,
            "-m",
            "warmfit.samples.demo",
            "--steps",
            "2",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    rows = read_trace([out])
    sharing = rows["logical_tokens"] / rows["packed_tokens"]
    assert sharing.min() > 1.0
    assert rows["signature"].n_unique() == 2
    assert rows.filter(pl.col("whole")).height == rows.filter(pl.col("phase") == "caller").height
    assert (rows["peak_bytes"] > rows["baseline_bytes"]).all()


def test_a_two_rank_torchrun_recording_has_both_ranks(tmp_path):
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not installed")
    out = tmp_path / "ddp"
    done = subprocess.run(
        [*RECORD, "-o", str(out), "--run", "ddp", "--", *torchrun_demo(torchrun)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = read_trace([out])
    assert sorted(rows["rank"].unique().to_list()) == [0, 1]
    per_rank = rows.group_by("rank").agg(pl.len())["len"].to_list()
    assert all(n > 0 for n in per_rank)
