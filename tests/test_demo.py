"""The demo workload: it trains, it packs prefix trees, recording changes nothing."""

from __future__ import annotations

import re
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


# --------------------------------------------------------------------------- in process
# The tests below run the demo inside the test process (no ``warmfit record``, no torchrun), on
# a small model where they train, so that each line of the module is checked without a
# subprocess.

SMALL = demo.DemoConfig(d_model=16, n_heads=2, n_layers=1, groups_per_step=3)


def test_the_default_model_has_the_documented_shape():
    cfg = demo.DemoConfig()
    assert cfg.signature_suffix == "d64-l2-v64"
    model = demo.TinyDecoder(cfg)
    # token and position embeddings 64x64 each: 8,192; per block: two layer norms (128 each),
    # qkv 64x192 + 192 = 12,480, proj 64x64 + 64 = 4,160, MLP 64x256 + 256 = 16,640 and
    # 256x64 + 64 = 16,448: 49,984, twice: 99,968; final norm 128; head 64x64 + 64 = 4,160
    assert sum(p.numel() for p in model.parameters()) == 8_192 + 99_968 + 128 + 4_160
    assert model.position.num_embeddings == 64 and len(model.blocks) == 2
    assert model.blocks[0].n_heads == 4 and cfg.groups_per_step == 8


def test_the_model_is_causal_and_ignores_what_its_mask_hides():
    torch.manual_seed(0)
    model = demo.TinyDecoder(SMALL).eval()
    tokens = torch.tensor([[5, 9, 13, 2]])
    positions = torch.tensor([[0, 1, 2, 3]])
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    with torch.no_grad():
        logits = model(tokens, positions, causal)
        changed = model(torch.tensor([[5, 9, 13, 40]]), positions, causal)
        shifted = model(tokens, torch.tensor([[1, 2, 3, 4]]), causal)
    assert logits.shape == (1, 4, 64)
    # a later token changes no earlier logit, and changes its own
    assert torch.allclose(logits[0, :3], changed[0, :3], atol=1e-6)
    assert not torch.allclose(logits[0, 3], changed[0, 3])
    # positions count: the same tokens one place later predict something else
    assert not torch.allclose(logits, shifted)


def test_two_groups_pack_into_one_row_spelled_out():
    groups = [
        demo.Group(prompt=[1, 2], completions=[[3, 4, 5]]),
        demo.Group(prompt=[6], completions=[[7], [8, 9]]),
    ]
    wave = demo.pack(groups, torch.device("cpu"))
    assert wave.tokens.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9]]
    assert wave.positions.tolist() == [[0, 1, 2, 3, 4, 0, 1, 1, 2]]
    # 2 + 3 + 1 + 1 + 2 packed; (2+3) + (1+1) + (1+2) logical
    assert (wave.packed_tokens, wave.logical_tokens) == (9, 10)
    # token 1 (the first prompt's last) predicts 3, then 3 -> 4, 4 -> 5; token 6 (index 5,
    # the second prompt) predicts 7 and 8; 8 (index 7) predicts 9
    assert wave.sources.tolist() == [1, 2, 3, 5, 5, 7]
    assert wave.targets.tolist() == [3, 4, 5, 7, 8, 9]
    expected = [
        "100000000",
        "110000000",
        "111000000",
        "111100000",
        "111110000",
        "000001000",  # the second group sees nothing of the first
        "000001100",
        "000001010",  # completion [8, 9] sees its prompt, not its sibling [7]
        "000001011",
    ]
    assert ["".join("1" if v else "0" for v in row) for row in wave.mask.tolist()] == expected


def test_the_markov_task_draws_the_configured_shapes():
    cfg = demo.DemoConfig()
    task = demo.MarkovTask(cfg, seed=7)
    groups = [task.group() for _ in range(400)]
    prompts = [len(g.prompt) for g in groups]
    completions = [len(c) for g in groups for c in g.completions]
    assert (min(prompts), max(prompts)) == (8, 24)  # inclusive range
    assert (min(completions), max(completions)) == (4, 20)
    assert {len(g.completions) for g in groups} == {2, 4, 8}
    # 80% of the tokens follow the chain, the rest are uniform (1 in 64 of which follow it too)
    pairs = [(a, b) for g in groups for a, b in zip(g.prompt, g.prompt[1:], strict=False)]
    follow = sum(task.next_token[a] == b for a, b in pairs) / len(pairs)
    assert 0.75 < follow < 0.86
    # a completion continues its prompt's last token
    firsts = [task.next_token[g.prompt[-1]] == c[0] for g in groups for c in g.completions]
    assert sum(firsts) / len(firsts) > 0.75
    waves = task.waves(groups)
    assert [g for wave in waves for g in wave] == groups  # every group once, in order
    assert {len(w) for w in waves[:-1]} == {1, 2, 3, 4} and 1 <= len(waves[-1]) <= 4


def _step_oracle(cfg: demo.DemoConfig, task_seed: int, steps: int) -> list[tuple[int, int]]:
    """Each step's packed and logical tokens, from the groups the task draws (a step draws its
    groups, then splits them twice: the scoring waves, then the training waves)."""
    task = demo.MarkovTask(cfg, task_seed)
    out = []
    for _ in range(steps):
        groups = [task.group() for _ in range(cfg.groups_per_step)]
        task.waves(groups), task.waves(groups)
        packed = sum(len(g.prompt) + sum(map(len, g.completions)) for g in groups)
        logical = sum(len(g.prompt) + len(c) for g in groups for c in g.completions)
        out.append((packed, logical))
    return out


def test_a_step_reports_its_tokens_and_its_mean_loss(tmp_path):
    with Recorder(tmp_path, run="demo", device="cpu") as recorder:
        results = demo.train(steps=2, seed=2, recorder=recorder, cfg=SMALL)
    # rank 0 of seed 2 draws its prompts with seed 2 * 1000 + 1
    assert [(r.packed_tokens, r.logical_tokens) for r in results] == _step_oracle(SMALL, 2001, 2)
    assert [r.step for r in results] == [0, 1]
    for r in results:
        # the loss is a mean per completion token: near chance (ln 64 = 4.16) this early;
        # the scoring waves measure the same model before the update, split otherwise
        assert 3.5 < r.loss < 4.8
        assert r.score_nll == pytest.approx(r.loss, abs=1e-4)
    rows = read_trace([tmp_path])
    assert (rows["output_bytes"] == rows["packed_tokens"] * 64 * 4).all()  # float32 logits
    callers = rows.filter(pl.col("phase") == "caller")
    for r in results:
        step = callers.filter(pl.col("step") == r.step)
        train = step.filter(pl.col("signature") == "train/d16-l1-v64")
        score = step.filter(pl.col("signature") == "score/d16-l1-v64")
        assert train.height == r.waves and score.height >= 1
        assert train["packed_tokens"].sum() == score["packed_tokens"].sum() == r.packed_tokens
        assert train["logical_tokens"].sum() == r.logical_tokens


def test_a_step_applies_the_gradient_of_its_mean_loss(monkeypatch):
    """Whatever the waves, a step's gradient is that of the mean cross-entropy over its
    completion tokens, here computed on all its groups packed as one wave."""
    captured: list[torch.Tensor] = []

    class Capture(torch.optim.AdamW):
        def step(self, closure=None):
            if not captured:
                captured.extend(p.grad.clone() for p in self.param_groups[0]["params"])
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "AdamW", Capture)
    demo.train(steps=1, seed=4, cfg=SMALL)
    torch.manual_seed(4)
    model = demo.TinyDecoder(SMALL)
    task = demo.MarkovTask(SMALL, 4001)
    groups = [task.group() for _ in range(SMALL.groups_per_step)]
    wave = demo.pack(groups, torch.device("cpu"))
    logits = model(wave.tokens, wave.positions, wave.mask)
    torch.nn.functional.cross_entropy(logits[0, wave.sources], wave.targets).backward()
    expected = [p.grad for p in model.parameters()]
    assert len(captured) == len(expected)
    for got, want in zip(captured, expected, strict=True):
        assert torch.allclose(got, want, rtol=1e-3, atol=1e-6)


def test_train_defaults_and_the_compile_switch(monkeypatch):
    compiled: list[dict[str, object]] = []

    def fake_compile(model, **kwargs):
        compiled.append(kwargs)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    tiny = demo.DemoConfig(d_model=8, n_heads=2, n_layers=1, groups_per_step=1)
    assert len(demo.train(cfg=tiny)) == 30 and compiled == []  # 30 steps, not compiled
    assert [r.loss for r in demo.train(steps=1, cfg=tiny)] == [
        r.loss for r in demo.train(steps=1, seed=0, cfg=tiny)
    ]
    demo.train(steps=1, cfg=tiny, compile=True)
    assert compiled == [{"dynamic": True}]


def test_a_rank_of_several_draws_its_own_prompts_and_averages_gradients(monkeypatch):
    averaged: list[int] = []
    monkeypatch.setattr(demo, "_distributed", lambda device: (1, 2))
    monkeypatch.setattr(demo, "_average_gradients", lambda model, world: averaged.append(world))
    results = demo.train(steps=2, seed=3, cfg=SMALL)
    assert averaged == [2, 2]  # once a step, before the optimizer's
    # rank 1 of seed 3 draws with seed 3 * 1000 + 1 + 1
    assert [(r.packed_tokens, r.logical_tokens) for r in results] == _step_oracle(SMALL, 3002, 2)


class FakeDist:
    """torch.distributed's calls the demo makes, recorded."""

    def __init__(self, initialized: bool) -> None:
        self.initialized = initialized
        self.calls: list[tuple[str, object]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch.distributed as dist

        monkeypatch.setattr(dist, "is_initialized", lambda: self.initialized)
        monkeypatch.setattr(dist, "init_process_group", lambda b: self.calls.append(("init", b)))
        monkeypatch.setattr(dist, "get_rank", lambda: 1)
        monkeypatch.setattr(dist, "get_world_size", lambda: 3)
        monkeypatch.setattr(torch.cuda, "set_device", lambda i: self.calls.append(("device", i)))

        def all_reduce(tensor: torch.Tensor) -> None:  # as if 3 ranks had the same gradient
            self.calls.append(("all_reduce", tuple(tensor.shape)))
            tensor.mul_(3)

        monkeypatch.setattr(dist, "all_reduce", all_reduce)


def test_one_process_joins_no_group(monkeypatch):
    fake = FakeDist(initialized=False)
    fake.install(monkeypatch)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert demo._distributed(torch.device("cpu")) == (0, 1)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert demo._distributed(torch.device("cuda")) == (0, 1)
    assert fake.calls == []


def test_torchrun_joins_gloo_on_cpu_and_nccl_on_cuda(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "2")
    cpu = FakeDist(initialized=False)
    cpu.install(monkeypatch)
    assert demo._distributed(torch.device("cpu")) == (1, 3)
    assert cpu.calls == [("init", "gloo")]
    cuda = FakeDist(initialized=False)
    cuda.install(monkeypatch)
    assert demo._distributed(torch.device("cuda")) == (1, 3)
    assert cuda.calls == [("init", "nccl"), ("device", 2)]
    joined = FakeDist(initialized=True)
    joined.install(monkeypatch)
    assert demo._distributed(torch.device("cuda")) == (1, 3)
    assert joined.calls == [("device", 2)]


def test_gradients_are_averaged_over_the_ranks(monkeypatch):
    fake = FakeDist(initialized=True)
    fake.install(monkeypatch)
    layer = torch.nn.Linear(2, 1)
    layer.weight.grad = torch.tensor([[1.5, -3.0]])  # the bias has no gradient
    demo._average_gradients(layer, 3)
    assert layer.weight.grad.tolist() == [[1.5, -3.0]]  # summed over 3 equal ranks, / 3
    assert layer.bias.grad is None and fake.calls == [("all_reduce", (1, 2))]


@pytest.fixture
def small_main(monkeypatch):
    """main() as run alone, training the small model."""
    for name in ("WARMFIT_RECORD_DIR", "WARMFIT_RECORD_RUN", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    real = demo.train
    monkeypatch.setattr(demo, "train", lambda *a, **k: real(*a, **k, cfg=SMALL))
    return real


def test_main_prints_each_step_and_the_losses(small_main, capsys):
    assert demo.main(["--steps", "3", "--seed", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    results = small_main(3, "cpu", 5, cfg=SMALL)
    assert out[:3] == [
        f"step {r.step:>3}  loss {r.loss:.4f}  score-nll {r.score_nll:.4f}  waves {r.waves}  "
        f"packed {r.packed_tokens:>5}  logical {r.logical_tokens:>5}  "
        f"sharing {r.logical_tokens / r.packed_tokens:.2f}"
        for r in results
    ]
    first, last = f"{results[0].loss:.4f}", f"{results[2].loss:.4f}"
    assert len(out) == 4
    assert re.fullmatch(
        rf"done: 3 steps in [0-9.]+ s; loss {first} -> {last} \(chance is 4\.1589\)", out[3]
    )


def test_main_on_another_rank_prints_nothing(small_main, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    assert demo.main(["--steps", "1"]) == 0
    assert capsys.readouterr().out == ""


def test_main_under_record_counts_its_readings_and_notes_compile_on_cpu(
    small_main, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("WARMFIT_RECORD_DIR", str(tmp_path))
    monkeypatch.setenv("WARMFIT_RECORD_RUN", "demo")
    monkeypatch.setattr(torch, "compile", lambda model, dynamic: model)
    assert demo.main(["--steps", "1", "--compile"]) == 0
    captured = capsys.readouterr()
    readings = read_trace([tmp_path]).height
    assert readings > 0
    assert captured.out.splitlines()[-1].endswith(f"; recorded {readings} readings")
    assert captured.err.startswith("note: the CPU meter watches operators")


def test_main_without_record_says_nothing_of_compile_or_readings(small_main, capsys, monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda model, dynamic: model)
    assert demo.main(["--steps", "1", "--compile"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "recorded" not in captured.out


def test_main_passes_its_defaults_to_train(monkeypatch, capsys):
    monkeypatch.delenv("WARMFIT_RECORD_DIR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    calls = []

    def fake_train(*args, on_step):
        calls.append(args[:2] + args[2:3] + args[4:])
        return [demo.StepResult(0, 4.0, 4.0, 1, 10, 20), demo.StepResult(1, 3.0, 3.0, 1, 10, 20)]

    monkeypatch.setattr(demo, "train", fake_train)
    assert demo.main([]) == 0
    assert calls == [(30, "cpu", 0, False)]
    assert "loss 4.0000 -> 3.0000" in capsys.readouterr().out


def test_main_refuses_no_steps_and_a_missing_cuda(small_main, capsys, monkeypatch):
    with pytest.raises(SystemExit) as stopped:
        demo.main(["--steps", "0"])
    assert stopped.value.code == 2 and "--steps must be at least 1" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stopped:
        demo.main(["--device", "cuda:0"])
    assert stopped.value.code == 2
    assert "--device cuda: no CUDA device is available here" in capsys.readouterr().err
