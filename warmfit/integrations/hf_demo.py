"""A real model from ``transformers``, trained by the Hugging Face Trainer and recorded.

``python -m warmfit.integrations.hf_demo`` builds a small Qwen3-MoE
(``Qwen3MoeForCausalLM`` from a ``Qwen3MoeConfig``: random initialisation,
nothing downloaded, no tokenizer) and trains it with ``transformers.Trainer``
on token sequences from a fixed random Markov chain (so the loss falls),
recorded through :func:`warmfit.integrations.huggingface.record_trainer`:

- each micro-batch holds a few sequences of different lengths, padded to the
  longest (a multiple of 8) with an ``attention_mask``; labels are -100 on
  padding;
- two length buckets, each its own signature: ``short`` batches (sequences of
  8 to 56 tokens) and ``long`` ones (64 to 128), shuffled together;
- gradient accumulation over 2 micro-batches, so each optimizer step holds
  two waves.

Under ``warmfit record`` the waves are recorded; run alone it only trains.

    warmfit record -o traces/hf-qwen3moe-cpu -- python -m warmfit.integrations.hf_demo
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

try:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM, Trainer, TrainingArguments
except ImportError:  # pragma: no cover - exercised by the core install
    sys.exit(
        "python -m warmfit.integrations.hf_demo needs torch and transformers: install the "
        "extras 'warmfit[torch,transformers]' (pin a CPU torch first on a CPU-only machine)."
    )

from warmfit.integrations.huggingface import record_trainer
from warmfit.integrations.tokens import batch_tokens
from warmfit.recorder import Recorder

#: The two length buckets: (name, shortest, longest sequence in tokens).
BUCKETS = (("short", 8, 56), ("long", 64, 128))


@dataclass(frozen=True)
class HfDemoConfig:
    """The model and the shape of the workload."""

    vocab: int = 256
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    experts: int = 8
    experts_per_token: int = 2
    expert_width: int = 64
    sequences_per_batch: int = 4
    steps: int = 30
    accumulation: int = 2
    learning_rate: float = 3e-3

    @property
    def model_tag(self) -> str:
        return f"qwen3moe-h{self.hidden}-l{self.layers}-e{self.experts}k{self.experts_per_token}"

    def model_config(self) -> Qwen3MoeConfig:
        return Qwen3MoeConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=2 * self.hidden,
            moe_intermediate_size=self.expert_width,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            num_experts=self.experts,
            num_experts_per_tok=self.experts_per_token,
            max_position_embeddings=256,
            tie_word_embeddings=False,
            pad_token_id=0,
        )


class MarkovBatches:
    """Micro-batches of Markov-chain sequences, padded to their longest (a multiple of 8)."""

    def __init__(self, cfg: HfDemoConfig, count: int, seed: int) -> None:
        rng = random.Random(seed)
        self.next_token = list(range(1, cfg.vocab))
        rng.shuffle(self.next_token)
        self.batches: list[dict[str, torch.Tensor]] = []
        for i in range(count):
            _, shortest, longest = BUCKETS[i % len(BUCKETS)]
            lengths = [rng.randint(shortest, longest) for _ in range(cfg.sequences_per_batch)]
            self.batches.append(self._pad([self._sequence(rng, n, cfg.vocab) for n in lengths]))
        rng.shuffle(self.batches)

    def _sequence(self, rng: random.Random, length: int, vocab: int) -> list[int]:
        token, out = rng.randrange(1, vocab), []
        for _ in range(length):
            token = self.next_token[token - 1] if rng.random() < 0.8 else rng.randrange(1, vocab)
            out.append(token)
        return out

    @staticmethod
    def _pad(sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        width = -(-max(map(len, sequences)) // 8) * 8
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        mask = torch.zeros(len(sequences), width, dtype=torch.long)
        for row, seq in enumerate(sequences):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        return {
            "input_ids": ids,
            "attention_mask": mask,
            "labels": ids.masked_fill(mask == 0, -100),
        }

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.batches[index]


def signature_of() -> Any:
    """The signature function: ``train/short`` or ``train/long``, by the longest sequence."""

    def signature(model: Any, batch: Any) -> str:
        longest = batch_tokens(batch).longest_sequence
        bucket = next(name for name, _, top in BUCKETS if longest <= top)
        return f"train/{bucket}"

    return signature


def build_trainer(
    cfg: HfDemoConfig, output_dir: str, seed: int = 0, recorder: Recorder | None = None
) -> tuple[Trainer, Recorder]:
    """The Trainer for ``cfg``, recorded into ``recorder`` (default: from the environment)."""
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(cfg.model_config())
    args = TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=1,  # each item is already a micro-batch
        gradient_accumulation_steps=cfg.accumulation,
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="constant",
        logging_steps=max(1, cfg.steps // 6),
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=seed,
    )
    data = MarkovBatches(cfg, cfg.steps * cfg.accumulation, seed + 1)
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=_unwrap)
    rec = record_trainer(trainer, recorder, signature=signature_of())
    return trainer, rec


def _unwrap(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    (batch,) = items
    return batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m warmfit.integrations.hf_demo",
        description="Train a small random Qwen3-MoE with the Hugging Face Trainer "
        "(recorded when run under 'warmfit record').",
    )
    parser.add_argument("--steps", type=int, default=HfDemoConfig.steps, help="optimizer steps")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = HfDemoConfig(steps=args.steps)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="warmfit-hf-demo-") as output_dir:
        trainer, recorder = build_trainer(cfg, output_dir, args.seed)
        history = trainer.train()
        losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    recorder.close()
    print(
        f"done: {cfg.model_tag}, {args.steps} steps in {time.perf_counter() - started:.1f} s; "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (chance is {math.log(cfg.vocab):.4f}; "
        f"train loss {history.training_loss:.4f})"
        + (f"; recorded {recorder.readings} readings" if recorder.enabled else ""),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
