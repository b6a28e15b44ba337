"""A real training workload to record: ``python -m warmfit.samples.demo``.

A small decoder-only transformer in plain torch (random initialisation,
nothing downloaded) trained the way RL fine-tuning trains. Each prompt has a
group of completions that continue it; a wave packs several groups as
prefix trees: a prompt is computed once and each of its completions attends
to it through a tree attention mask (and to its own earlier tokens, never to
a sibling), so a wave's logical tokens (every completion with its own copy
of the prompt) exceed its packed tokens, as in real RL runs.

Every step runs two kinds of wave, each with its own signature:

- ``score/...``: a no-gradient forward that scores the completions (the
  log-probabilities an RL trainer takes before its update);
- ``train/...``: forward, then the caller's loss and backward inside the
  wave, gradients accumulating across the step's waves.

Waves vary in width (groups per wave) and sharing (group size, prompt and
completion lengths). One optimizer step per step. Tokens follow a fixed
random Markov chain, so there is something to learn: the loss falls.

Under ``warmfit record`` the waves are recorded (:meth:`Recorder.from_env`);
run alone it records nothing. With ``torchrun`` each rank trains on its own
prompts and gradients are averaged (gloo on CPU, nccl on CUDA).

    python -m warmfit.samples.demo --steps 12 --device cpu
    warmfit record -o traces/demo -- python -m warmfit.samples.demo
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:  # pragma: no cover - exercised by CI's minimal install
    sys.exit(
        "python -m warmfit.samples.demo needs torch, which is not installed: install the extra "
        "'warmfit[torch]' (on a CPU-only machine pin a CPU build first; see the README)."
    )

from warmfit.recorder import Recorder
from warmfit.recorder.meters import CpuMeter


@dataclass(frozen=True)
class DemoConfig:
    """The model and the shape of the workload."""

    vocab: int = 64
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    max_positions: int = 64
    groups_per_step: int = 8
    group_sizes: tuple[int, ...] = (2, 4, 8)
    prompt_tokens: tuple[int, int] = (8, 24)  # inclusive range
    completion_tokens: tuple[int, int] = (4, 20)
    wave_widths: tuple[int, ...] = (1, 2, 3, 4)  # groups per wave
    learning_rate: float = 3e-3

    @property
    def signature_suffix(self) -> str:
        return f"d{self.d_model}-l{self.n_layers}-v{self.vocab}"


# --------------------------------------------------------------------------- model


class Block(nn.Module):
    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        heads = (batch, tokens, self.n_heads, width // self.n_heads)
        q, k, v = (t.reshape(heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, tokens, width))
        return x + self.mlp(self.norm2(x))


class TinyDecoder(nn.Module):
    """A decoder-only transformer that runs one packed prefix-tree row."""

    def __init__(self, cfg: DemoConfig) -> None:
        super().__init__()
        self.token = nn.Embedding(cfg.vocab, cfg.d_model)
        self.position = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        x = self.token(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Group:
    """One prompt and the completions sampled for it."""

    prompt: list[int]
    completions: list[list[int]]


@dataclass
class PackedWave:
    """Groups packed as prefix trees into one row, with their tree mask."""

    tokens: torch.Tensor  # [1, n]
    positions: torch.Tensor  # [1, n]
    mask: torch.Tensor  # [n, n] bool: may query attend to key
    sources: torch.Tensor  # packed positions whose logits predict...
    targets: torch.Tensor  # ...these tokens
    packed_tokens: int
    logical_tokens: int


class MarkovTask:
    """Token sequences from a fixed random Markov chain (the thing to learn)."""

    def __init__(self, cfg: DemoConfig, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.cfg = cfg
        self.next_token = torch.randperm(cfg.vocab, generator=gen).tolist()
        self.rng = random.Random(seed)

    def _continue(self, start: int, length: int) -> list[int]:
        out, token = [], start
        for _ in range(length):
            if self.rng.random() < 0.8:
                token = self.next_token[token]
            else:
                token = self.rng.randrange(self.cfg.vocab)
            out.append(token)
        return out

    def group(self) -> Group:
        cfg = self.cfg
        prompt = self._continue(self.rng.randrange(cfg.vocab), self.rng.randint(*cfg.prompt_tokens))
        size = self.rng.choice(cfg.group_sizes)
        return Group(
            prompt,
            [
                self._continue(prompt[-1], self.rng.randint(*cfg.completion_tokens))
                for _ in range(size)
            ],
        )

    def waves(self, groups: list[Group]) -> list[list[Group]]:
        """Split a step's groups into waves of varying widths."""
        out, i = [], 0
        while i < len(groups):
            width = self.rng.choice(self.cfg.wave_widths)
            out.append(groups[i : i + width])
            i += width
        return out


def pack(groups: list[Group], device: torch.device) -> PackedWave:
    """Pack groups as prefix trees: each prompt once, completions branching off it."""
    tokens: list[int] = []
    positions: list[int] = []
    group_ids: list[int] = []
    branch_ids: list[int] = []  # -1 for prompt tokens, else the completion's index
    sources: list[int] = []
    targets: list[int] = []
    logical = 0
    for g, group in enumerate(groups):
        start = len(tokens)
        prompt_len = len(group.prompt)
        tokens += group.prompt
        positions += range(prompt_len)
        group_ids += [g] * prompt_len
        branch_ids += [-1] * prompt_len
        last_prompt = start + prompt_len - 1
        for b, completion in enumerate(group.completions):
            first = len(tokens)
            tokens += completion
            positions += range(prompt_len, prompt_len + len(completion))
            group_ids += [g] * len(completion)
            branch_ids += [b] * len(completion)
            sources += [last_prompt, *range(first, first + len(completion) - 1)]
            targets += completion
            logical += prompt_len + len(completion)
    gid = torch.tensor(group_ids)
    bid = torch.tensor(branch_ids)
    pos = torch.tensor(positions)
    mask = (
        (gid[:, None] == gid[None, :])
        & (pos[None, :] <= pos[:, None])
        & ((bid[None, :] == -1) | (bid[None, :] == bid[:, None]))
    )
    return PackedWave(
        tokens=torch.tensor(tokens, device=device)[None],
        positions=pos.to(device)[None],
        mask=mask.to(device),
        sources=torch.tensor(sources, device=device),
        targets=torch.tensor(targets, device=device),
        packed_tokens=len(tokens),
        logical_tokens=logical,
    )


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class StepResult:
    step: int
    loss: float  # mean cross-entropy over the step's completion tokens (train waves)
    score_nll: float  # the same, measured by the no-gradient scoring waves before the update
    waves: int
    packed_tokens: int
    logical_tokens: int


def train(
    steps: int = 30,
    device: str = "cpu",
    seed: int = 0,
    recorder: Recorder | None = None,
    compile: bool = False,
    cfg: DemoConfig | None = None,
    on_step: Any = None,
) -> list[StepResult]:
    """Train the demo model; return one result per step. Records into ``recorder``."""
    cfg = cfg or DemoConfig()
    dev = torch.device(device)
    rank, world = _distributed(dev)
    torch.manual_seed(seed)
    model = TinyDecoder(cfg).to(dev)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
    forward = torch.compile(model, dynamic=True) if compile else model
    task = MarkovTask(cfg, seed * 1000 + 1 + rank)
    rec = recorder if recorder is not None else Recorder(None, enabled=False)
    train_sig = f"train/{cfg.signature_suffix}"
    score_sig = f"score/{cfg.signature_suffix}"
    results = []
    for step in range(steps):
        groups = [task.group() for _ in range(cfg.groups_per_step)]
        step_targets = sum(len(c) for g in groups for c in g.completions)
        score_sum = 0.0
        with torch.no_grad():
            for wave_groups in task.waves(groups):
                wave = pack(wave_groups, dev)
                out_bytes = wave.packed_tokens * cfg.vocab * 4
                with rec.wave(score_sig, wave.packed_tokens, wave.logical_tokens, out_bytes) as w:
                    logits = forward(wave.tokens, wave.positions, wave.mask)
                    w.forward_done()
                    nll = F.cross_entropy(logits[0, wave.sources], wave.targets, reduction="sum")
                    score_sum += float(nll)
                del logits
        loss_sum, packed, logical = 0.0, 0, 0
        train_waves = task.waves(groups)
        for wave_groups in train_waves:
            wave = pack(wave_groups, dev)
            out_bytes = wave.packed_tokens * cfg.vocab * 4
            with rec.wave(train_sig, wave.packed_tokens, wave.logical_tokens, out_bytes) as w:
                logits = forward(wave.tokens, wave.positions, wave.mask)
                w.forward_done()
                loss = F.cross_entropy(logits[0, wave.sources], wave.targets, reduction="sum")
                (loss / step_targets).backward()
                loss_sum += float(loss.detach())
            del logits, loss
            packed += wave.packed_tokens
            logical += wave.logical_tokens
        if world > 1:
            _average_gradients(model, world)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rec.step()
        result = StepResult(
            step,
            loss_sum / step_targets,
            score_sum / step_targets,
            len(train_waves),
            packed,
            logical,
        )
        results.append(result)
        if on_step is not None:
            on_step(result)
    return results


def _distributed(device: torch.device) -> tuple[int, int]:
    """Join the process group when launched by torchrun; return (rank, world size)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank(), dist.get_world_size()


def _average_gradients(model: nn.Module, world: int) -> None:
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m warmfit.samples.demo",
        description="Train a small transformer on RL-style prefix-tree waves "
        "(recorded when run under 'warmfit record').",
    )
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here; use --device cpu")

    recorder = Recorder.from_env(device=args.device)
    if args.compile and recorder.enabled and recorder.meter.name == CpuMeter.name:
        print(
            "note: the CPU meter watches operators through a TorchDispatchMode, under which "
            "torch.compile runs the model eagerly; --compile takes effect on GPUs.",
            file=sys.stderr,
        )
    rank = int(os.environ.get("RANK", "0"))
    started = time.perf_counter()

    def report(r: StepResult) -> None:
        if rank == 0:
            print(
                f"step {r.step:>3}  loss {r.loss:.4f}  score-nll {r.score_nll:.4f}  "
                f"waves {r.waves}  packed {r.packed_tokens:>5}  logical {r.logical_tokens:>5}  "
                f"sharing {r.logical_tokens / r.packed_tokens:.2f}",
                flush=True,
            )

    results = train(args.steps, args.device, args.seed, recorder, args.compile, on_step=report)
    recorder.close()
    if rank == 0:
        first, last = results[0].loss, results[-1].loss
        print(
            f"done: {args.steps} steps in {time.perf_counter() - started:.1f} s; "
            f"loss {first:.4f} -> {last:.4f} (chance is {math.log(DemoConfig().vocab):.4f})"
            + (f"; recorded {recorder.readings} readings" if recorder.enabled else ""),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
