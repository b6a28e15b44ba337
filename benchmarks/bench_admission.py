"""Throughput under a memory cap: ``BudgetSampler`` against a fixed batch size (issue 39).

    python benchmarks/bench_admission.py [--samples N] [--cap-mb MB]   (make bench runs it)

A SIMULATION on a CPU. A small transformers model (a tiny GPT-2 with a random
configuration, built here: nothing downloaded, ``HF_HUB_OFFLINE=1``) is trained
for one epoch through the Hugging Face ``Trainer`` on variable-length samples
(lengths drawn log-uniform in 16..384, seeded) under a cap on the live CPU
tensor bytes (:class:`warmfit.recorder.meters.CappedCpuMeter`: an operator that
takes them past the cap raises ``torch.OutOfMemoryError``). Three arms, each
from the same initial weights, under the same cap:

- **fixed**: the usual way, ``TrainingArguments(auto_find_batch_size=True)``:
  accelerate's ``find_executable_batch_size`` starts at 64 samples a batch and,
  at each out-of-memory error, restarts the epoch at 0.9 times the size;
  batches pad every sample to the longest (``DataCollatorForLanguageModeling``
  semantics: padding is computed on); shuffled;
- **envelope** and **warm-fit**: ``BudgetSampler`` (``use_sampler``) packs the
  same samples, padded by the same collator (its ``tokens`` count the padded
  tokens, ``padded_tokens()``), into waves priced within the budget (the cap
  above the live bytes when training starts), learning from its own readings
  (no trace is written); the first wave is 512 padded tokens (the user's
  guess); an out-of-memory wave is survived and its samples packed again. Only
  how many samples a wave holds differs from the fixed arm.

Figures per arm: waves (optimizer steps) in the epoch, real tokens per wave,
the out-of-memory errors met (each one, in the fixed arm, restarts the
epoch), wall time of the whole epoch (restarts included) and real tokens per
second; the throughput ratio is each sampler arm's tokens per second over
the fixed arm's. Wall time on a shared machine moves with its load: the
waves per epoch are exact, the times are not.

Prints a table and writes one file per run under ``benchmarks/results/``
(``<UTC time>-<short commit>-admission.json``; ``benchmarks/runinfo.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from runinfo import write_run  # noqa: E402

VOCAB = 256


def lengths_of(samples: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [int(math.exp(rng.uniform(math.log(16), math.log(384)))) for _ in range(samples)]


class Tokens:
    """Token sequences of the given lengths (a map-style dataset)."""

    def __init__(self, lengths: list[int]) -> None:
        import torch

        generator = torch.Generator().manual_seed(0)
        self.items = [torch.randint(1, VOCAB, (n,), generator=generator) for n in lengths]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return {"input_ids": self.items[index]}


def padded(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Pad every sample to the longest (the fixed-batch arm's collator)."""
    import torch

    width = max(len(x["input_ids"]) for x in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    mask = torch.zeros(len(items), width, dtype=torch.long)
    for row, x in enumerate(items):
        n = len(x["input_ids"])
        ids[row, :n], mask[row, :n] = x["input_ids"], 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def trainer_for(data: Tokens, out: str, collator: Any, **extra: Any) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=512, n_embd=64, n_layer=2, n_head=2,
                        bos_token_id=1, eos_token_id=1)  # fmt: skip
    args = TrainingArguments(
        output_dir=out, learning_rate=1e-3, save_strategy="no", report_to="none",
        use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, logging_steps=10**6,
        seed=0, optim="sgd", **extra,
    )  # fmt: skip
    return Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data,
                   data_collator=collator)  # fmt: skip


def run_fixed(data: Tokens, lengths: list[int], cap_extra: int, out: str) -> dict[str, Any]:
    from warmfit.recorder.meters import CappedCpuMeter, meter_live

    trainer = trainer_for(data, out, padded, num_train_epochs=1, auto_find_batch_size=True,
                          per_device_train_batch_size=64)  # fmt: skip
    meter = CappedCpuMeter(meter_live() + cap_extra)
    started = time.perf_counter()
    try:
        done = trainer.train()
    finally:
        meter.close()
    wall = time.perf_counter() - started
    batch = trainer._train_batch_size
    waves = math.ceil(len(lengths) / batch)
    # the completed epoch alone (the Trainer times its last training loop), and the whole
    # search: every epoch restarted at an out-of-memory error, and the restarts themselves
    return {"batch_size": batch, "waves": waves, "ooms": meter.ooms, "wall_s": wall,
            "epoch_s": float(done.metrics["train_runtime"]), "tokens": sum(lengths),
            "steps": trainer.state.global_step}  # fmt: skip


def run_sampler(
    data: Tokens, lengths: list[int], cap_extra: int, out: str, policy: str
) -> dict[str, Any]:
    from transformers import TrainerCallback

    from warmfit import Pricer
    from warmfit.integrations.sampler import BudgetSampler, padded_tokens, use_sampler
    from warmfit.recorder.meters import CappedCpuMeter, meter_live

    class OneEpoch(TrainerCallback):
        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            control.should_training_stop = True

    # max_steps bounds the epoch (each sample once, plus waves that run out of memory); the
    # Trainer polls the spent loader up to max_steps times, so no larger than needed
    trainer = trainer_for(data, out, padded, max_steps=3 * len(lengths),
                          per_device_train_batch_size=1)  # fmt: skip
    trainer.add_callback(OneEpoch())
    meter = CappedCpuMeter(meter_live() + cap_extra)
    pricer = Pricer(policy, meter=meter)
    sampler = BudgetSampler(lengths, pricer, cap_extra, first_wave_tokens=512, seed=0,
                            tokens=padded_tokens())  # fmt: skip
    use_sampler(trainer, sampler)
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.train()
    finally:
        pricer.close()
    wall = time.perf_counter() - started
    epoch0 = [w for w in sampler.waves if w.epoch == 0]
    fitted = [w for w in epoch0 if not w.oom]
    used = sorted(i for w in fitted for i in w.indices)
    assert used == list(range(len(lengths))), "a sample was lost or repeated"
    return {"waves": len(epoch0), "waves_fitted": len(fitted), "ooms": meter.ooms,
            "oom_waves": sum(w.oom for w in epoch0), "wall_s": wall, "epoch_s": wall,
            "tokens": sum(lengths),
            "largest_wave_tokens": max(w.packed_tokens for w in fitted),
            "failed_samples": len(sampler.failed)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=160)
    parser.add_argument("--cap-mb", type=float, default=32.0, help="the cap above the weights")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    lengths = lengths_of(args.samples)
    data = Tokens(lengths)
    cap_extra = int(args.cap_mb * 1e6)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as out:
        results["fixed"] = run_fixed(data, lengths, cap_extra, out)
        for policy in ("envelope", "warm-fit"):
            results[policy] = run_sampler(data, lengths, cap_extra, out, policy)
    base = results["fixed"]["tokens"] / results["fixed"]["epoch_s"]
    base_search = results["fixed"]["tokens"] / results["fixed"]["wall_s"]
    print(
        f"SIMULATION on CPU: one epoch of {len(lengths)} samples ({sum(lengths):,} tokens, "
        f"lengths {min(lengths)}..{max(lengths)}) of a tiny random GPT-2 through the HF Trainer, "
        f"live CPU tensor bytes capped {cap_extra / 1e6:g} MB above the weights "
        "(CappedCpuMeter raises torch.OutOfMemoryError)."
    )
    print(f"{'arm':<40}{'waves/epoch':>12}{'tokens/wave':>12}{'OOMs':>6}{'epoch s':>9}"
          f"{'tokens/s':>10}{'ratio':>7}{'with search':>13}")  # fmt: skip
    for arm, r in results.items():
        label = (f"fixed batch {r['batch_size']} (find_executable_batch_size)" if arm == "fixed"
                 else f"BudgetSampler, {arm}")  # fmt: skip
        fitted = r.get("waves_fitted", r["waves"])
        rate = r["tokens"] / r["epoch_s"]
        r["tokens_per_wave"] = r["tokens"] / fitted
        r["tokens_per_s"] = rate
        r["throughput_ratio"] = rate / base
        r["throughput_ratio_with_search"] = (r["tokens"] / r["wall_s"]) / base_search
        print(f"{label:<40}{r['waves']:>12,}{r['tokens_per_wave']:>12,.0f}{r['ooms']:>6}"
              f"{r['epoch_s']:>9.1f}{rate:>10,.0f}{r['throughput_ratio']:>7.2f}"
              f"{r['throughput_ratio_with_search']:>13.2f}")  # fmt: skip
    print(
        "waves/epoch: optimizer steps in the epoch (a sampler's OOM waves included); "
        "tokens/wave: real tokens per wave that ran; OOMs: out-of-memory errors met (fixed: "
        "each restarted the epoch at 0.9x the batch); ratio: real tokens/s over the fixed "
        f"arm's completed epoch ({results['fixed']['epoch_s']:.1f} s); with search: over its "
        f"whole run, every restart included ({results['fixed']['wall_s']:.1f} s). Wall "
        "times move with the machine's load; waves/epoch do not."
    )
    kept = write_run(
        "admission",
        {"samples": args.samples, "cap_mb": args.cap_mb},
        {"simulation": "CPU, CappedCpuMeter", "results": results},
    )
    print(f"wrote {kept.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
