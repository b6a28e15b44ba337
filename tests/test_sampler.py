"""The sampler that packs waves under a memory budget (issue 26, item 3).

Unit tests on a Pricer taught by hand, then the proof: a real transformers
model trained by the Hugging Face Trainer on the sampler's waves, recorded
with the same Pricer; the run completes, every wave's price fits the budget,
and the recorded trace replays to the prices the sampler packed at.
"""

from __future__ import annotations

import os
import random
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from warmfit import Pricer  # noqa: E402
from warmfit.errors import UsageError  # noqa: E402
from warmfit.integrations.sampler import (  # noqa: E402
    UNTAUGHT_WAVES,
    BudgetSampler,
    SamplerWarning,
    padded_tokens,
    use_sampler,
)
from warmfit.policies import Policy, PriceRequest, Reading  # noqa: E402
from warmfit.trainer import pricer as pricer_module  # noqa: E402

from .fixed_meter import FixedMeter  # noqa: E402
from .strategies import examples  # noqa: E402

pytestmark = pytest.mark.torch

LENGTHS = [random.Random(7).randint(1, 40) for _ in range(60)]


def taught(rate: int, policy: str = "max-merge") -> Pricer:
    """A Pricer (safety factor 1) whose profile of ``train`` prices ``rate`` bytes per token."""
    pricer = Pricer(policy, safety_factor=1.0)
    pricer.observe_row(
        dict(signature="train", kind="flat", phase="caller", whole=True, packed_tokens=10,
             logical_tokens=10, output_bytes=0, baseline_bytes=0, peak_bytes=10 * rate,
             static_floor_bytes=None, oom=False)
    )  # fmt: skip
    return pricer


def test_each_epoch_yields_every_sample_once_in_waves_that_fit_and_cannot_grow() -> None:
    sampler = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1, seed=3)
    for epoch in range(2):
        waves = list(sampler)
        assert Counter(i for wave in waves for i in wave) == Counter(range(len(LENGTHS)))
        flat = [i for wave in waves for i in wave]
        assert flat == sampler.order(epoch)  # the seeded order, cut into waves
        for k, wave in enumerate(waves):
            tokens = sum(LENGTHS[i] for i in wave)
            assert tokens * 100 <= 6_000
            if k + 1 < len(waves):  # next fit: the sample that opens the next wave did not fit
                assert (tokens + LENGTHS[waves[k + 1][0]]) * 100 > 6_000
    assert sampler.epoch == 2
    assert [w.samples for w in sampler.waves] == [len(w) for w in all_waves(sampler)]
    assert all(w.estimate_bytes == w.packed_tokens * 100 for w in sampler.waves)


def all_waves(sampler: BudgetSampler) -> list[list[int]]:
    """The waves of epochs 0 and 1 again, from a sampler like ``sampler``."""
    return [wave for epoch in (0, 1) for wave in waves_of(sampler, epoch)]


def waves_of(sampler: BudgetSampler, epoch: int) -> list[list[int]]:
    again = BudgetSampler(
        sampler.lengths, sampler.pricer, sampler.budget_bytes, first_wave_samples=1,
        seed=sampler.seed,
    )  # fmt: skip
    again.set_epoch(epoch)
    return list(again)


def test_the_same_seed_gives_the_same_waves_and_another_epoch_another_order() -> None:
    one = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1, seed=5)
    two = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1, seed=5)
    assert list(one) == list(two)
    assert one.order(1) != one.order(0) and one.order(1) == two.order(1)
    assert BudgetSampler(LENGTHS, taught(1), 1, first_wave_samples=1, shuffle=False).order(
        4
    ) == list(range(len(LENGTHS)))
    two.set_epoch(0)
    assert list(two) == waves_of(one, 0)


def test_without_a_price_the_first_wave_size_packs_and_a_lesson_takes_over() -> None:
    pricer = Pricer("warm-fit", safety_factor=1.0)
    lengths = [10, 20, 30, 40, 5, 5, 5, 5, 5, 5]
    by_samples = BudgetSampler(lengths, pricer, 10**9, first_wave_samples=3, shuffle=False)
    with pytest.warns(SamplerWarning, match="4 waves in a row .* learned nothing of 'train'"):
        assert list(by_samples) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]  # nobody teaches it
    assert all(w.estimate_bytes is None for w in by_samples.waves)
    by_tokens = BudgetSampler(lengths, pricer, 10**9, first_wave_tokens=35, shuffle=False)
    with pytest.warns(SamplerWarning, match="learned nothing"):
        assert list(by_tokens) == [[0, 1], [2], [3], [4, 5, 6, 7, 8, 9]]  # 40 > 35 goes alone
    assert [w.packed_tokens for w in by_tokens.waves] == [30, 30, 40, 30]

    sampler = BudgetSampler(lengths, pricer, 2_000, first_wave_samples=2, shuffle=False)
    waves = iter(sampler)
    assert next(waves) == [0, 1]  # 30 tokens, unpriced
    pricer.observe_row(
        dict(
            signature="train",
            kind="flat",
            phase="caller",
            whole=True,
            packed_tokens=30,
            logical_tokens=30,
            output_bytes=0,
            baseline_bytes=0,
            peak_bytes=1_500,
            static_floor_bytes=None,
            oom=False,
        )
    )  # fmt: skip  (the wave's reading: 50 B/token)
    assert list(waves) == [[2], [3], [4, 5, 6, 7, 8, 9]]  # 30 + 40 tokens: 3,500 B; 45: 2,250 B
    assert [w.estimate_bytes for w in sampler.waves] == [None, 1_500, 2_000, 1_500]


def test_a_sample_over_the_budget_alone_is_yielded_alone_with_a_warning() -> None:
    sampler = BudgetSampler([5, 50, 5], taught(100), 1_000, first_wave_samples=1, shuffle=False)
    with pytest.warns(SamplerWarning, match=r"sample 1 \(50 tokens\) is priced 5,000 bytes alone"):
        waves = list(sampler)
    assert waves == [[0], [1], [2]] and sampler.oversized == 1
    assert sampler.waves[1].estimate_bytes == 5_000


def test_outputs_tokens_of_a_padding_collator_and_a_size_budget() -> None:
    assert padded_tokens(8)([5, 17, 9]) == 72 and padded_tokens()([3, 4]) == 8
    pricer = taught(100)
    sampler = BudgetSampler(
        [3, 4, 9], pricer, "2KB", first_wave_samples=1, shuffle=False, tokens=padded_tokens(4),
        output_bytes=lambda n: 10 * n,
    )  # fmt: skip
    assert sampler.budget_bytes == 2_000
    assert list(sampler) == [[0, 1], [2]]  # 2 * 4 tokens: 880 B; 3 * 12: 3,960 B
    assert [w.estimate_bytes for w in sampler.waves] == [880, 1_320]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(first_wave_samples=1, first_wave_tokens=1), "give one of first_wave_tokens"),
        (dict(), "give one of first_wave_tokens"),
        (dict(first_wave_samples=0), r"^first_wave_samples must be an integer >= 1"),
        (dict(first_wave_tokens=1.5), r"^first_wave_tokens must be an integer >= 1"),
        (dict(first_wave_samples=1, budget_bytes=-1), r"^budget_bytes must be a number of bytes"),
        (dict(first_wave_samples=1, budget_bytes="12 parsecs"), r"^budget_bytes '12 parsecs' is not"),
        (dict(first_wave_samples=1, lengths=[3, 0]), r"^lengths\[1\] must be an integer >= 1"),
        (dict(first_wave_samples=1, pricer="warm-fit"), r"^pricer must be a warmfit.Pricer"),
        (dict(first_wave_samples=1, signature=""), r"^signature must be a non-empty str"),
        (dict(first_wave_samples=1, seed="x"), r"^seed must be an integer"),
    ],
)  # fmt: skip
def test_bad_arguments_are_usage_errors(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = dict(lengths=[3, 4], pricer=Pricer(), budget_bytes=100)
    arguments.update(kwargs)
    with pytest.raises(UsageError, match=message):
        BudgetSampler(**arguments)
    with pytest.raises(UsageError, match=r"^multiple must be an integer >= 1"):
        padded_tokens(0)


def test_lengths_may_be_numpy_or_tensor_integers() -> None:
    import numpy as np

    sampler = BudgetSampler(np.array([3, 4]), taught(1), 100, first_wave_samples=1)
    assert sampler.lengths == [3, 4] and all(type(n) is int for n in sampler.lengths)
    assert BudgetSampler(torch.tensor([5]), taught(1), 100, first_wave_samples=1).lengths == [5]
    with pytest.raises(UsageError, match=r"^lengths\[0\] must be an integer >= 1; got True"):
        BudgetSampler([True], taught(1), 100, first_wave_samples=1)


def test_padded_tokens_pads_to_the_longest_sample_itself_by_default() -> None:
    """With no ``multiple``, a padding collator pads every sample to the longest one,
    not to a multiple of it: 3 samples x 17 = 51 tokens, one sample of 1 is 1 token."""
    assert padded_tokens()([5, 17, 9]) == 51
    assert padded_tokens()([1]) == 1 and padded_tokens(1)([3, 5]) == padded_tokens()([3, 5]) == 10


def test_the_default_seed_is_seed_0() -> None:
    """A sampler made without a seed draws the orders of ``seed=0``: two runs made the
    same way pack the same waves, and a run made with ``seed=0`` is that run."""
    default = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1)
    zero = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1, seed=0)
    one = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1, seed=1)
    assert default.seed == 0
    assert [default.order(e) for e in (0, 3)] == [zero.order(e) for e in (0, 3)]
    assert default.order(0) != one.order(0)
    assert list(default) == list(zero)


def test_a_wave_of_one_token_is_a_wave() -> None:
    """Samples of 1 token at 100 B/token under a 200 B budget: one token is a wave's
    smallest size (>= 1), priced 100 B; two samples fit (200 B, exactly the budget),
    a third would not (300 B)."""
    sampler = BudgetSampler([1, 1, 1], taught(100), 200, first_wave_samples=1, shuffle=False)
    assert list(sampler) == [[0, 1], [2]]
    assert [(w.packed_tokens, w.estimate_bytes) for w in sampler.waves] == [(2, 200), (1, 100)]


def test_a_sample_priced_exactly_at_the_budget_fits() -> None:
    """100 B/token under 200 B: a sample of 2 tokens prices 200 B, exactly the budget, so
    it fits (SPEC §7: ``<=``) and is packed as any other, not yielded as oversized."""
    sampler = BudgetSampler([2, 1], taught(100), 200, first_wave_samples=1, shuffle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplerWarning)
        assert list(sampler) == [[0], [1]]  # 2 + 1 tokens: 300 B
    assert sampler.oversized == 0 and sampler.waves[0].estimate_bytes == 200


class UpToSeen(Policy):
    """100 B/token up to the largest wave seen; no price above it (a user policy that
    does not extrapolate: SPEC §3 lets a profile have nothing to go on)."""

    name = "up-to-seen"
    summary = "no price above the largest wave seen"

    def __init__(self) -> None:
        self.largest = 0

    def observe(self, reading: Reading) -> None:
        self.largest = max(self.largest, reading.packed_tokens)

    def price(self, request: PriceRequest) -> float | None:
        n = request.packed_tokens
        return 100.0 * n if n <= self.largest else None


@pytest.mark.parametrize("budget", [10**6, 400], ids=["fits", "over-the-budget"])
def test_unpriced_waves_are_counted_in_a_row_from_the_last_priced_wave(budget: int) -> None:
    """A profile that prices 5 tokens (500 B) but not 20: after the priced first wave
    (packed, or alone over a 400 B budget) three unpriced waves in a row are not yet
    the four that warn; a fourth is."""
    pricer = Pricer(UpToSeen, safety_factor=1.0)
    pricer.observe_row(
        dict(signature="train", kind="flat", phase="caller", whole=True, packed_tokens=10,
             logical_tokens=10, output_bytes=0, baseline_bytes=0, peak_bytes=1_000,
             static_floor_bytes=None, oom=False)
    )  # fmt: skip
    for lengths, warned in (([5, 20, 20, 20], False), ([5, 20, 20, 20, 20], True)):
        sampler = BudgetSampler(lengths, pricer, budget, first_wave_samples=1, shuffle=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert list(sampler) == [[i] for i in range(len(lengths))]
        said = [str(w.message) for w in caught if "in a row" in str(w.message)]
        assert len(said) == warned
        assert [w.estimate_bytes for w in sampler.waves] == [500] + [None] * (len(lengths) - 1)


def test_wave_before_a_wave_is_yielded_is_a_usage_error() -> None:
    sampler = BudgetSampler([3], taught(1), 100, first_wave_samples=1)
    with pytest.raises(UsageError, match=r"^BudgetSampler.wave\(\): no wave has been yielded"):
        sampler.wave()


def test_the_samplers_wave_tells_the_pricer_its_outputs() -> None:
    """A wave of 100 tokens whose outputs are 10 B/token (1,000 B) rises 10,000 B above
    its baseline: the pricer learns (10,000 - 1,000) / 100 = 90 B/token."""
    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 10_000))
    sampler = BudgetSampler([100], pricer, 10**9, first_wave_samples=1,
                            output_bytes=lambda n: 10 * n)  # fmt: skip
    for _ in sampler:
        with sampler.wave():
            pass
    pricer.close()
    assert pricer.price("train", 100) == 9_000
    assert pricer.price("train", 100, output_bytes=1_000) == 10_000


def test_a_tokens_function_that_gives_no_tokens_is_named() -> None:
    sampler = BudgetSampler([3], taught(1), 10, first_wave_samples=1, tokens=lambda lengths: 0)
    with pytest.raises(UsageError, match=r"tokens\(\[3\]\) gave 0"):
        list(sampler)


def test_a_data_loader_takes_it_as_its_batch_sampler() -> None:
    data = [torch.full((n,), i) for i, n in enumerate(LENGTHS)]
    sampler = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=torch.cat)
    batches = list(loader)
    assert sum(len(b) for b in batches) == sum(LENGTHS)
    assert [len(b) for b in batches] == [w.packed_tokens for w in sampler.waves]
    with pytest.raises(TypeError):
        len(loader)  # how many waves an epoch holds is known only as it is packed


def test_use_sampler_needs_max_steps_one_process_and_warns_of_accumulation() -> None:
    sampler = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1)

    def trainer(**args: Any) -> SimpleNamespace:
        base = dict(max_steps=4, world_size=1, gradient_accumulation_steps=1)
        return SimpleNamespace(args=SimpleNamespace(**{**base, **args}), train_dataset=[1],
                               data_collator=list)  # fmt: skip

    with pytest.raises(UsageError, match=r"set TrainingArguments\(max_steps=...\)"):
        use_sampler(trainer(max_steps=-1), sampler)
    with pytest.raises(UsageError, match="one process only"):
        use_sampler(trainer(world_size=2), sampler)
    with pytest.warns(SamplerWarning, match="gradient_accumulation_steps=2"):
        use_sampler(trainer(gradient_accumulation_steps=2), sampler)
    plain = trainer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        use_sampler(plain, sampler)
    loader = plain.get_train_dataloader()
    assert loader.batch_sampler is sampler and loader.num_workers == 0


def test_use_sampler_takes_args_naming_only_max_steps_and_its_loader_needs_a_dataset() -> None:
    """A trainer whose args name only ``max_steps`` (the others left out) is one process
    without accumulation whose loader pins no memory: no warning. ``max_steps`` must be
    at least 1 (left out, -1 as the Trainer's default, or 0: refused). The loader,
    asked for with no ``train_dataset``, says so as the Trainer does (a ValueError). A
    trainer with a ``training_step`` but no ``compute_loss`` is not one to instrument:
    its ``training_step`` is left as it is."""
    sampler = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1)
    for args in (SimpleNamespace(), SimpleNamespace(max_steps=-1), SimpleNamespace(max_steps=0)):
        with pytest.raises(UsageError, match=r"set TrainingArguments\(max_steps=...\)"):
            use_sampler(SimpleNamespace(args=args), sampler)

    def step(model: Any, inputs: Any) -> None:
        pass

    bare = SimpleNamespace(args=SimpleNamespace(max_steps=1), train_dataset=None,
                           data_collator=list, training_step=step)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        use_sampler(bare, sampler)
    assert bare.training_step is step
    with pytest.raises(ValueError, match=r"^Trainer: training requires a train_dataset\.$"):
        bare.get_train_dataloader()
    bare.train_dataset = list(range(len(LENGTHS)))
    loader = bare.get_train_dataloader()
    assert loader.batch_sampler is sampler and loader.pin_memory is False


# --------------------------------------------------------------------------- the proof


class Recorded(torch.utils.data.Dataset):
    """Token sequences that note which index each fetch asked for."""

    def __init__(self, lengths: list[int], vocab: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.items = [torch.randint(1, vocab, (n,), generator=generator) for n in lengths]
        self.fetched: list[int] = []

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        self.fetched.append(index)
        return self.items[index]


def flatten(items: list[Any]) -> dict[str, Any]:
    """Padding-free packing: one row, positions restarting at each sample (as
    DataCollatorWithFlattening does); the tokens the recorder counts are the sum."""
    ids = torch.cat(items)[None]
    positions = torch.cat([torch.arange(len(x)) for x in items])[None]
    labels = ids.clone()
    starts = torch.cumsum(torch.tensor([0] + [len(x) for x in items[:-1]]), 0)
    labels[0, starts] = -100
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def test_hf_trainer_trains_on_the_waves_and_the_trace_replays_to_the_samplers_prices(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import polars as pl
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    from warmfit.format.trace import read_trace
    from warmfit.integrations.huggingface import record_trainer
    from warmfit.recorder import Recorder
    from warmfit.replay import replay

    lengths = [random.Random(0).randint(8, 96) for _ in range(30)]
    budget = 2_000_000
    data = Recorded(lengths, vocab=64)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=128, n_embd=32, n_layer=1, n_head=2,
                        bos_token_id=1, eos_token_id=1)  # fmt: skip
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=1, max_steps=14,
        learning_rate=1e-3, save_strategy="no", report_to="none", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, logging_steps=7, seed=0,
    )  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data,
                      data_collator=flatten)  # fmt: skip
    pricer = Pricer("warm-fit", safety_factor=1.1)
    recorder = Recorder(tmp_path / "trace", run="hf", device="cpu", flush_interval_s=3600,
                        pricer=pricer)  # fmt: skip
    record_trainer(trainer, recorder, signature="train")
    sampler = BudgetSampler(lengths, pricer, budget, signature="train", first_wave_tokens=128)
    use_sampler(trainer, sampler)
    trainer.train()
    recorder.close()

    # the run completed, past the end of the first epoch
    assert trainer.state.global_step == 14 and len(sampler.waves) == 14
    epochs = Counter(w.epoch for w in sampler.waves)
    assert epochs[0] >= 2 and epochs[1] >= 1, epochs
    first = sum(w.samples for w in sampler.waves if w.epoch == 0)
    assert sorted(data.fetched[:first]) == list(range(len(lengths)))  # each sample once
    # the first wave had no price; every other wave's price fits the budget
    prices = [w.estimate_bytes for w in sampler.waves]
    assert prices[0] is None and all(p is not None and p <= budget for p in prices[1:])
    assert any(w.samples > 1 for w in sampler.waves[1:])  # it does pack
    # the trace replays, through the Pricer's policy and safety factor, to those prices
    readings = read_trace([tmp_path / "trace"])
    per_wave = replay(readings, ["warm-fit"], 1.1).per_wave
    warm_fit = per_wave.filter(policy="warm-fit").sort("wave")
    assert warm_fit["packed_tokens"].to_list() == [w.packed_tokens for w in sampler.waves]
    assert warm_fit["estimate_bytes"].to_list() == prices
    recorded = readings.group_by("wave").agg(pl.col("estimate_bytes").first()).sort("wave")
    assert recorded["estimate_bytes"].to_list() == prices  # what the recorder wrote down


def test_the_untaught_warning_names_the_signatures_the_pricer_has_learned() -> None:
    """The integrations record 'train/<model class>'; a sampler left at its default
    'train' never finds a price: the warning names what the pricer did learn."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    pricer.observe_row(
        dict(signature="train/GPT2LMHeadModel", kind="flat", phase="caller", whole=True,
             packed_tokens=10, logical_tokens=10, output_bytes=0, baseline_bytes=0,
             peak_bytes=1_000, static_floor_bytes=None, oom=False)
    )  # fmt: skip
    sampler = BudgetSampler([5] * 10, pricer, 10**9, first_wave_samples=2, shuffle=False)
    with pytest.warns(SamplerWarning, match="It has learned 'train/GPT2LMHeadModel'"):
        list(sampler)


@pytest.mark.timeout(30)  # packs waves in a loop: a packing bug loops
def test_the_untaught_warning_of_a_pricer_that_learned_nothing_names_no_signature() -> None:
    """A pricer that learned nothing at all: the warning (whole) names no signature it
    learned, and asks whether the recorder teaching it is enabled."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    sampler = BudgetSampler([5] * 10, pricer, 10**9, first_wave_samples=2, shuffle=False)
    with pytest.warns(SamplerWarning) as caught:
        list(sampler)
    assert [str(w.message) for w in caught] == [
        "warmfit: 4 waves in a row were packed at the first-wave size: the pricer has "
        "learned nothing of 'train'. Is it the pricer of an enabled Recorder(pricer=...) "
        "recording this signature? (A recorder that records nothing teaches nothing.)"
    ]


# --------------------------------------------------------------------------- OOM survived (issue 39)


def run_epoch(sampler: BudgetSampler, fits: int) -> list[list[int]]:
    """A training loop over one epoch in which a wave over ``fits`` tokens runs out of
    memory (raised inside the sampler's Pricer wave, as an allocator raises it)."""
    ran = []
    for wave in sampler:
        with sampler.wave() as w:
            w.forward_done()
            if sampler.waves[-1].packed_tokens > fits:
                raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
        if not w.oom:
            ran.append(wave)
    return ran


@pytest.mark.timeout(30)  # packs waves in a loop: a packing bug loops
def test_an_oom_wave_is_packed_again_into_smaller_waves_and_no_sample_is_lost() -> None:
    """40 B/token priced (max-merge, factor 1) within 6,000 B packs up to 150 tokens; the
    device fits 60: every wave over 60 runs out of memory, its samples are packed
    again, and no later wave reaches the size that ran out of memory."""
    pricer = taught(40)  # its waves are measured by its own meter (CPU storages here)
    sampler = BudgetSampler(LENGTHS, pricer, 6_000, first_wave_samples=1, seed=3)
    ran = run_epoch(sampler, fits=60)
    assert sorted(i for wave in ran for i in wave) == list(range(len(LENGTHS)))  # each once
    assert sampler.epoch == 1 and sampler.failed == []
    oom_waves = [i for i, w in enumerate(sampler.waves) if w.oom]
    assert oom_waves and all(sampler.waves[i].packed_tokens > 60 for i in oom_waves)
    for i in oom_waves:  # no later wave of that size under that budget
        assert all(w.packed_tokens < sampler.waves[i].packed_tokens for w in sampler.waves[i + 1 :])
    assert [w.indices for w in sampler.waves if not w.oom] == [tuple(w) for w in ran]
    assert all(len(w.indices) == w.samples for w in sampler.waves)
    assert pricer.oom_tokens("train", 6_000) == min(
        sampler.waves[i].packed_tokens for i in oom_waves
    )
    pricer.close()


@pytest.mark.timeout(30)  # packs waves in a loop: a packing bug loops
def test_a_sample_that_runs_out_of_memory_alone_is_not_retried() -> None:
    pricer = taught(1)
    lengths = [5, 50, 5, 5]
    sampler = BudgetSampler(lengths, pricer, 10**6, first_wave_samples=1, shuffle=False)
    with pytest.warns(SamplerWarning, match=r"sample 1 \(50 tokens\) ran out of memory alone"):
        ran = run_epoch(sampler, fits=20)
    assert sampler.failed == [1] and sorted(i for w in ran for i in w) == [0, 2, 3]
    # a later epoch yields sample 1 alone, at or above the size that ran out of memory
    with pytest.warns(SamplerWarning, match=r"sample 1 \(50 tokens\) is at or above 50 tokens"):
        assert [1] in list(sampler)
    pricer.close()


def hf_trainer(tmp_path: Path, lengths: list[int], steps: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    data = Recorded(lengths, vocab=64)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=128, n_embd=32, n_layer=1, n_head=2,
                        bos_token_id=1, eos_token_id=1)  # fmt: skip
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=1, max_steps=steps,
        learning_rate=1e-3, save_strategy="no", report_to="none", use_cpu=True,
        dataloader_num_workers=0, disable_tqdm=True, logging_steps=100, seed=0, optim="sgd",
    )  # fmt: skip
    return Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data,
                   data_collator=flatten)  # fmt: skip


def test_hf_trainer_without_warmfit_record_learns_from_the_pricers_own_readings(
    tmp_path: Path,
) -> None:
    """No recorder at all (as outside 'warmfit record'): the Pricer measures each
    training_step itself and packs beyond the first-wave size from the second wave on."""
    pytest.importorskip("transformers")
    rng = random.Random(0)
    lengths = [rng.randint(8, 96) for _ in range(30)]
    trainer = hf_trainer(tmp_path, lengths, steps=4)
    pricer = Pricer("warm-fit")
    sampler = BudgetSampler(lengths, pricer, 2_000_000, signature="train", first_wave_tokens=64)
    use_sampler(trainer, sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplerWarning)  # never "the pricer has learned nothing"
        trainer.train()
    pricer.close()
    assert trainer.state.global_step == 4 and "train" in pricer.profiles
    first, *later = sampler.waves
    assert first.estimate_bytes is None and first.packed_tokens <= 64
    assert all(w.estimate_bytes is not None and w.estimate_bytes <= 2_000_000 for w in later)
    assert all(w.packed_tokens > 64 for w in later)  # packed beyond the first-wave size
    assert list((tmp_path / "out").glob("**/*.parquet")) == []


@pytest.mark.timeout(120)  # trains (10 s here); packs waves in a loop: a packing bug loops
def test_hf_trainer_survives_an_oom_mid_epoch_uses_every_sample_once_and_records_it(
    tmp_path: Path,
) -> None:
    """A simulated device (CappedCpuMeter: 1.2 MB above the weights) under a budget
    set too high (2 MB): the priced waves run out of memory mid-epoch; the run goes on,
    finishes the epoch with every sample once, admits no later wave at or above a size
    that ran out of memory, and the trace holds the OOM readings."""
    pytest.importorskip("transformers")
    from warmfit.format.trace import read_trace
    from warmfit.integrations.huggingface import record_trainer
    from warmfit.recorder import Recorder
    from warmfit.recorder.meters import CappedCpuMeter, meter_live

    rng = random.Random(0)
    lengths = [rng.randint(8, 96) for _ in range(30)]
    trainer = hf_trainer(tmp_path, lengths, steps=24)
    meter = CappedCpuMeter(meter_live() + 1_200_000)
    pricer = Pricer("warm-fit")
    recorder = Recorder(tmp_path / "trace", run="hf", meter=meter, pricer=pricer)
    sampler = BudgetSampler(lengths, pricer, "2MB", signature="train", first_wave_tokens=64)
    use_sampler(trainer, sampler)
    record_trainer(trainer, recorder, signature="train")
    trainer.train()
    recorder.close()
    assert trainer.state.global_step == 24 and meter.ooms >= 1
    epoch0 = [w for w in sampler.waves if w.epoch == 0]
    assert any(w.epoch == 1 for w in sampler.waves)  # the epoch finished
    used = sorted(i for w in epoch0 if not w.oom for i in w.indices)
    assert used == list(range(len(lengths)))  # every sample once
    ooms = [i for i, w in enumerate(sampler.waves) if w.oom]
    assert ooms and ooms[0] > 0  # mid-epoch, after a wave that fitted
    for i in ooms:
        assert all(w.packed_tokens < sampler.waves[i].packed_tokens for w in sampler.waves[i + 1 :])
    readings = read_trace([tmp_path / "trace"])
    oom_readings = readings.filter(readings["oom"])
    assert sorted(set(oom_readings["packed_tokens"].to_list())) == sorted(
        {sampler.waves[i].packed_tokens for i in ooms}
    )
    assert readings["wave"].n_unique() == len(sampler.waves)  # one recorded wave each


def run_epoch_early_oom(sampler: BudgetSampler, fits: int) -> None:
    """As :func:`run_epoch`, but a wave over ``fits`` tokens runs out of memory before its
    forward pass is done: it measured nothing, so it teaches the pricer nothing."""
    for _ in sampler:
        with sampler.wave() as w:
            if sampler.waves[-1].packed_tokens > fits:
                raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
            w.forward_done()


@pytest.mark.timeout(30)  # packs waves in a loop: a packing bug loops
def test_first_waves_that_run_out_of_memory_are_said_to_be_the_cause() -> None:
    """An untaught pricer, first waves of at most 50 tokens (five samples of 10), a device
    that fits 20: the waves of 50, 40 and 30 tokens run out of memory in their forward
    pass (each OOM bounds the next wave below it, SPEC §9) and teach nothing, so the
    fourth wave (20 tokens) is the fourth in a row at the first-wave size. The warning
    says the waves ran out of memory and asks for a smaller first_wave_tokens, not
    whether the recorder is enabled."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    sampler = BudgetSampler([10] * 10, pricer, 10**9, first_wave_tokens=50, shuffle=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_epoch_early_oom(sampler, fits=20)
    said = [str(w.message) for w in caught if issubclass(w.category, SamplerWarning)]
    assert [w.packed_tokens for w in sampler.waves[:4]] == [50, 40, 30, 20]
    assert [w.oom for w in sampler.waves[:4]] == [True, True, True, False]
    assert [w.estimate_bytes for w in sampler.waves[:4]] == [None] * 4
    (message,) = [m for m in said if "in a row" in m]
    assert "3 of them ran out of memory (50, 40, 30 tokens)" in message
    assert "a smaller first_wave_tokens (it is 50)" in message
    assert "Recorder(pricer=" not in message and "learned nothing" not in message
    pricer.close()
    # by samples: the other knob is named, and a token size below the smallest OOM
    pricer = Pricer("max-merge", safety_factor=1.0)
    sampler = BudgetSampler([10] * 10, pricer, 10**9, first_wave_samples=5, shuffle=False)
    with pytest.warns(SamplerWarning, match=r"first_wave_samples \(it is 5\), or a "
                      r"first_wave_tokens below 30"):  # fmt: skip
        run_epoch_early_oom(sampler, fits=20)
    pricer.close()


# --- audit of 12-06g (audit1) ---


def test_the_oversized_warning_names_the_samples_index_not_its_place_in_the_order() -> None:
    """Shuffled (seed 0, epoch 0) the samples [5, 5, 50, 5] are packed in the order
    [3, 0, 1, 2]; at 100 B/token under 1,000 B: [3, 0] (10 tokens, 1,000 B), [1] (sample
    2 would make 55 tokens), then sample 2 alone (50 tokens, 5,000 B). The warning names
    sample 2, its index, not 3, its place in the order."""
    sampler = BudgetSampler([5, 5, 50, 5], taught(100), 1_000, first_wave_samples=1)
    assert sampler.order(0) == [3, 0, 1, 2]
    with pytest.warns(SamplerWarning, match=r"sample 2 \(50 tokens\) is priced 5,000 bytes"):
        waves = list(sampler)
    assert waves == [[3, 0], [1], [2]] and sampler.oversized == 1


def test_the_first_wave_size_counts_the_tokens_function_not_the_summed_lengths() -> None:
    """A padding collator (padded_tokens(8)) and no price yet, first_wave_tokens=40:
    samples [5, 17, 9] in order. [5, 17] pads to 2 x 24 = 48 tokens, over 40 (their sum,
    22, is not what the wave holds), so each sample is a wave: 8, 24 and 16 tokens."""
    sampler = BudgetSampler(
        [5, 17, 9], Pricer("max-merge"), 10**9, first_wave_tokens=40, tokens=padded_tokens(8),
        shuffle=False,
    )  # fmt: skip
    assert list(sampler) == [[0], [1], [2]]
    assert [(w.packed_tokens, w.estimate_bytes) for w in sampler.waves] == [
        (8, None), (24, None), (16, None),
    ]  # fmt: skip


def test_another_signatures_oom_during_a_wave_does_not_repack_it() -> None:
    """100 B/token under 1,000 B packs [5, 5, 5] as [0, 1] (1,000 B) and [2]. During the
    first wave the trainer runs an 'eval' wave that runs out of memory: that is eval's
    OOM, not the sampler's wave's, so [0, 1] is not marked OOM nor packed again."""
    pricer = taught(100)
    sampler = BudgetSampler([5, 5, 5], pricer, 1_000, first_wave_samples=1, shuffle=False)
    waves = []
    for wave in sampler:
        waves.append(wave)
        with sampler.wave() as w:
            w.forward_done()
        if len(waves) == 1:
            with pricer.wave("eval", 10, budget_bytes=1_000) as e:
                raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
            assert e.oom and not w.oom
    pricer.close()
    assert waves == [[0, 1], [2]] and sampler.failed == []
    assert [w.oom for w in sampler.waves] == [False, False]
    assert [o.signature for o in pricer.ooms] == ["eval"]


# --- audit of 12-06g (audit4) ---


def oom_at(pricer: Pricer, tokens: int, budget: int) -> None:
    """A wave of ``train`` of ``tokens`` packed tokens that ran out of memory under ``budget``."""
    with pricer.wave("train", tokens, budget_bytes=budget) as w:
        raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
    assert w.oom


def test_unpriced_waves_stop_below_an_oom_size_counted_by_the_tokens_function() -> None:
    """No price yet (no profile), a padding collator (padded_tokens(8)) and a wave of 24
    tokens that ran out of memory under the budget; first_wave_tokens=100. Samples [5, 9,
    9] in order: [5, 9] pads to 2 x 16 = 32 tokens, at or above 24 (their sum, 14, is not
    what the wave holds), so each sample is its own wave: 8, 16 and 16 tokens."""
    pricer = Pricer("max-merge")
    oom_at(pricer, 24, 10**9)
    sampler = BudgetSampler(
        [5, 9, 9], pricer, 10**9, first_wave_tokens=100, tokens=padded_tokens(8), shuffle=False
    )
    assert list(sampler) == [[0], [1], [2]]
    assert [w.packed_tokens for w in sampler.waves] == [8, 16, 16]
    pricer.close()


def test_a_sample_padded_to_an_oom_size_is_yielded_alone() -> None:
    """100 B/token under 1 MB, a padding collator (padded_tokens(8)), and a wave of 24
    tokens that ran out of memory under 1 MB. Sample 0 (20 tokens long) pads to 24
    tokens, the OOM size: it is yielded alone with a warning (its length, 20, is below 24,
    but the wave holds 24); sample 1 (3 tokens, 8 padded) is the next wave."""
    pricer = taught(100)
    oom_at(pricer, 24, 10**6)
    sampler = BudgetSampler(
        [20, 3], pricer, 10**6, first_wave_samples=1, tokens=padded_tokens(8), shuffle=False
    )
    with pytest.warns(SamplerWarning, match=r"sample 0 \(20 tokens\) is at or above 24 tokens"):
        assert list(sampler) == [[0], [1]]
    assert sampler.oversized == 1
    pricer.close()


def test_a_priced_wave_stops_one_sample_before_it_reaches_an_oom_size() -> None:
    """100 B/token under 1 MB (every wave here is priced well within it), and a wave of 20
    tokens that ran out of memory under 1 MB. Samples [10, 10, 5] in order: [0, 1] would
    be 20 tokens, exactly the OOM size, so it is not packed: [0], then [1, 2] (15)."""
    pricer = taught(100)
    oom_at(pricer, 20, 10**6)
    sampler = BudgetSampler([10, 10, 5], pricer, 10**6, first_wave_samples=1, shuffle=False)
    assert list(sampler) == [[0], [1, 2]]
    assert [w.packed_tokens for w in sampler.waves] == [10, 15]
    pricer.close()


@pytest.mark.timeout(30)  # packs waves in a loop: a packing bug loops
def test_a_sample_that_ran_out_of_memory_alone_is_named_with_its_length_not_its_padding() -> None:
    """A padding collator (padded_tokens(8)): sample 0, 5 tokens long, is a wave of 8
    tokens; it runs out of memory alone. The warning names its length, 5 tokens."""
    pricer = taught(1)
    sampler = BudgetSampler(
        [5], pricer, 10**6, first_wave_samples=1, tokens=padded_tokens(8), shuffle=False
    )
    with pytest.warns(SamplerWarning, match=r"sample 0 \(5 tokens\) ran out of memory alone"):
        assert run_epoch(sampler, fits=0) == []
    assert sampler.failed == [0] and sampler.waves[0].packed_tokens == 8
    pricer.close()


@pytest.mark.timeout(30)  # packs waves in a loop: a packing bug loops
def test_a_samplers_oom_wave_bounds_only_budgets_up_to_the_samplers() -> None:
    """100 B/token under 1,000 B: [5, 5] is one wave of 10 tokens (1,000 B), and the
    device fits 5: it runs out of memory, recorded under the sampler's budget, 1,000 B.
    Its samples are packed again as [0], [1]. The OOM says 10 tokens do not fit 1,000 B,
    nothing of 1,001 B: the Pricer bounds the one budget, not the other."""
    pricer = taught(100)
    sampler = BudgetSampler([5, 5], pricer, 1_000, first_wave_samples=1, shuffle=False)
    assert run_epoch(sampler, fits=5) == [[0], [1]]
    assert [(o.packed_tokens, o.budget_bytes) for o in pricer.ooms] == [(10, 1_000)]
    assert pricer.oom_tokens("train", 1_000) == 10
    assert pricer.oom_tokens("train", 1_001) is None
    assert pricer.admits("train", 10, budget_bytes=1_001)
    pricer.close()


# --- issue 38, tests by pattern (s3) ---


def plain_tokens(lengths: list[int], multiple: int | None) -> int:
    """A wave's packed tokens, the plain way: the sum of its lengths (no padding), or its
    samples times the longest length rounded up to ``multiple`` (a padding collator)."""
    if multiple is None:
        return sum(lengths)
    width = max(lengths)
    return len(lengths) * ((width + multiple - 1) // multiple * multiple)


def untaught_message(
    signature: str, ooms: list[int], first: tuple[str, int], learned: list[str]
) -> str:
    """The warning of four waves in a row at the first-wave size, written out from the
    module's docstring: the OOM variant when some of the three waves before ran out of
    memory (``ooms``: their tokens), else the one asking for an enabled recorder."""
    if not ooms:
        others = (
            f" It has learned {', '.join(map(repr, sorted(learned)))}: give the sampler the "
            "signature the recorder records (the integrations' default is 'train/<model "
            "class>')."
            if learned
            else ""
        )
        return (
            f"warmfit: 4 waves in a row were packed at the first-wave size: the pricer has "
            f"learned nothing of {signature!r}.{others} Is it the pricer of an enabled "
            "Recorder(pricer=...) recording this signature? (A recorder that records nothing "
            "teaches nothing.)"
        )
    knob, size = first
    smaller = (
        f"a smaller first_wave_tokens (it is {size:,})"
        if knob == "tokens"
        else f"a smaller first_wave_samples (it is {size:,}), or a first_wave_tokens below "
        f"{min(ooms):,}"
    )
    return (
        f"warmfit: 4 waves in a row were packed at the first-wave size, and {len(ooms)} of "
        f"them ran out of memory ({', '.join(f'{n:,}' for n in ooms)} tokens): a wave that "
        f"runs out of memory teaches the pricer nothing of {signature!r}, so the first-wave "
        f"size is too large for this device. Give {smaller}."
    )


@pytest.mark.timeout(30)
@settings(max_examples=examples(100), deadline=None)
@given(
    lengths=st.lists(st.sampled_from([1, 2, 5, 8, 9, 16]) | st.integers(1, 40), max_size=10),
    rate=st.sampled_from([1, 10, 100]) | st.integers(1, 300),
    multiple=st.sampled_from([None, None, 1, 4, 8]),
    out_rate=st.sampled_from([None, 0, 3, 50]),
    taught_at_start=st.booleans(),
    first=st.tuples(st.just("tokens"), st.integers(1, 60))
    | st.tuples(st.just("samples"), st.integers(1, 4)),
    budget_at=st.integers(1, 80),
    budget_offset=st.sampled_from([0, 0, -1, 1, 10**6]),
    earlier_ooms=st.lists(
        st.tuples(
            st.integers(1, 80), st.sampled_from([-1, 0, 1]), st.sampled_from(["train", "eval"])
        ),
        max_size=3,
    ),
    fits=st.none() | st.sampled_from([1, 8, 16, 30]) | st.integers(1, 80),
    shuffle=st.booleans(),
    seed=st.integers(0, 3),
    epochs=st.integers(1, 2),
    unmeasured=st.sets(st.integers(0, 8), max_size=4),
    others=st.lists(
        st.sampled_from(["train/GPT2", "eval", "train/Llama", "a"]), unique=True, max_size=3
    ),
)
@mock.patch.object(pricer_module, "_free", lambda tb: None)  # no gc.collect() per OOM
def test_oracle_each_sample_once_in_waves_within_the_budget_that_one_more_would_not_fit(
    lengths: list[int],
    rate: int,
    multiple: int | None,
    out_rate: int | None,
    taught_at_start: bool,
    first: tuple[str, int],
    budget_at: int,
    budget_offset: int,
    earlier_ooms: list[tuple[int, int, str]],
    fits: int | None,
    shuffle: bool,
    seed: int,
    epochs: int,
    unmeasured: set[int],
    others: list[str],
) -> None:
    """The module's promise checked against a plain model of it, every deciding input
    drawn at once: the budget (often exactly the price of a wave of ``budget_at`` tokens,
    or one byte either side), the rate, a padding ``tokens()`` or plain lengths, output
    bytes by tokens or none, a pricer taught or not (the first-wave size by tokens or by
    samples), OOMs recorded before under this budget, one byte below or above it (of
    this signature or another), waves run outside sampler.wave() (teaching nothing), and
    waves over ``fits`` tokens that run out of memory (sizes out of order, a wave of one
    sample too), shuffled or not, any seed, one or two epochs.

    Each wave is the next samples of the order (an OOM wave's samples go back in front);
    a sample at or above the OOM bound, or priced over the budget alone, is alone and
    warned of; a priced wave fits the budget, stays below the bound, and the next sample
    would break one of them; an unpriced wave fits the first-wave size and the next
    sample would not (or would reach the bound). Every warning, word for word, in order."""
    signature = "train"
    meter = FixedMeter(0, 0)
    pricer = Pricer("max-merge", safety_factor=1.0, meter=meter)
    learned = taught_at_start
    for other in [*others, signature] if taught_at_start else others:
        pricer.observe_row(
            dict(signature=other, kind="flat", phase="caller", whole=True,
                 packed_tokens=10, logical_tokens=10, output_bytes=0, baseline_bytes=0,
                 peak_bytes=10 * rate, static_floor_bytes=None, oom=False)
        )  # fmt: skip

    def out(n: int) -> int:
        return 0 if out_rate is None else out_rate * n

    def price(n: int) -> int | None:
        return rate * n + out(n) if learned else None

    budget = max(0, rate * budget_at + out(budget_at) + budget_offset)
    ooms: list[tuple[int, int]] = []  # (tokens, budget) of every OOM of `train`
    for size, offset, of in earlier_ooms:  # another signature's OOM bounds nothing here
        under = max(0, budget + offset)
        with pricer.wave(of, size, budget_bytes=under):
            raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
        if of == signature:
            ooms.append((size, under))
    fits_first = (
        dict(first_wave_tokens=first[1])
        if first[0] == "tokens"
        else dict(first_wave_samples=first[1])
    )
    sampler = BudgetSampler(
        lengths, pricer, budget, signature=signature, **fits_first,  # type: ignore[arg-type]
        tokens=None if multiple is None else padded_tokens(multiple),
        output_bytes=None if out_rate is None else out, shuffle=shuffle, seed=seed,
    )  # fmt: skip

    def tok(indices: list[int]) -> int:
        return plain_tokens([lengths[i] for i in indices], multiple)

    def first_wave_fits(indices: list[int]) -> bool:
        return tok(indices) <= first[1] if first[0] == "tokens" else len(indices) <= first[1]

    expected: list[str] = []
    unpriced_in_a_row = 0
    history: list[tuple[bool, bool]] = []  # per wave: (unpriced, ran out of memory)
    history_tokens: list[int] = []
    failed: list[int] = []
    oversized = 0
    for epoch in range(epochs):
        queue = list(range(len(lengths)))
        if shuffle:
            random.Random(f"warmfit.sampler:{seed}:{epoch}").shuffle(queue)
        assert sampler.order(epoch) == queue
        used: list[int] = []
        failed_before = len(failed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for wave in sampler:
                assert wave and wave == queue[: len(wave)]
                rest = queue[len(wave) :]
                bound = min((n for n, b in ooms if b >= budget), default=None)
                head = wave[0]
                tokens = tok(wave)
                said = f"warmfit: sample {head} ({lengths[head]} tokens) is "
                alone = f" of {budget:,} bytes: it is yielded alone."
                if bound is not None and tok([head]) >= bound:
                    assert len(wave) == 1
                    oversized += 1
                    expected.append(
                        f"{said}at or above {bound:,} tokens, a size that ran out of memory "
                        f"under this budget{alone}"
                    )
                elif price(tok([head])) is None:
                    unpriced_in_a_row += 1
                    if unpriced_in_a_row == UNTAUGHT_WAVES:
                        last3 = zip(history[-3:], history_tokens[-3:], strict=True)
                        oomed = [n for (unpriced, oom), n in last3 if unpriced and oom]
                        expected.append(untaught_message(signature, oomed, first, others))
                    assert len(wave) == 1 or first_wave_fits(wave)
                    assert bound is None or len(wave) == 1 or tokens < bound
                    if rest:
                        grown = [*wave, rest[0]]
                        assert not first_wave_fits(grown) or (
                            bound is not None and tok(grown) >= bound
                        )
                else:
                    unpriced_in_a_row = 0
                    alone_price = price(tok([head]))
                    assert alone_price is not None
                    if alone_price > budget:
                        assert len(wave) == 1
                        oversized += 1
                        expected.append(f"{said}priced {alone_price:,} bytes alone, over the "
                                        f"budget{alone}")  # fmt: skip
                    else:
                        assert price(tokens) <= budget  # type: ignore[operator]
                        assert bound is None or tokens < bound
                        if rest:
                            grown = [*wave, rest[0]]
                            assert price(tok(grown)) > budget or (  # type: ignore[operator]
                                bound is not None and tok(grown) >= bound
                            )
                packed = sampler.waves[-1]
                assert (packed.epoch, packed.samples, packed.indices) == (
                    epoch, len(wave), tuple(wave),
                )  # fmt: skip
                assert (packed.packed_tokens, packed.estimate_bytes) == (tokens, price(tokens))
                # the trainer runs it: over `fits` tokens it runs out of memory at once
                # (a wave run outside sampler.wave() teaches nothing and never runs out)
                measured = len(history) not in unmeasured
                oom = measured and fits is not None and tokens > fits
                if measured:
                    with sampler.wave() as w:
                        if oom:
                            raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
                        meter.peak = rate * tokens + out(tokens)
                        w.forward_done()
                    assert w.oom == oom
                history.append((packed.estimate_bytes is None, oom))
                history_tokens.append(tokens)
                if not oom:
                    learned = learned or measured
                    used += wave
                    queue = rest
                else:
                    ooms.append((tokens, budget))
                    if len(wave) == 1:
                        failed.append(head)
                        expected.append(
                            f"warmfit: sample {head} ({lengths[head]} tokens) ran out of "
                            "memory alone: it is not retried (BudgetSampler.failed lists it)."
                        )
                        queue = rest
        assert queue == [] and sampler.epoch == epoch + 1
        # each sample once: in a wave that ran, or failed alone this epoch
        assert sorted(used + failed[failed_before:]) == list(range(len(lengths)))
        said_now = [str(c.message) for c in caught if issubclass(c.category, SamplerWarning)]
        assert said_now == expected
        expected = []
    assert [w.oom for w in sampler.waves] == [oom for _, oom in history]
    assert sampler.failed == failed
    assert sampler.oversized == oversized
    pricer.close()


def test_the_untaught_warning_names_the_learned_signatures_sorted() -> None:
    """The pricer learned 'train/Llama', then 'eval' (in that order), never 'train': the
    warning after four unpriced waves names both, sorted, word for word."""
    pricer = Pricer("max-merge", safety_factor=1.0)
    for other in ("train/Llama", "eval"):
        pricer.observe_row(
            dict(signature=other, kind="flat", phase="caller", whole=True, packed_tokens=10,
                 logical_tokens=10, output_bytes=0, baseline_bytes=0, peak_bytes=1_000,
                 static_floor_bytes=None, oom=False)
        )  # fmt: skip
    sampler = BudgetSampler([5] * 4, pricer, 10**9, first_wave_samples=1, shuffle=False)
    with pytest.warns(SamplerWarning) as caught:
        assert list(sampler) == [[0], [1], [2], [3]]
    assert [str(w.message) for w in caught] == [
        "warmfit: 4 waves in a row were packed at the first-wave size: the pricer has "
        "learned nothing of 'train'. It has learned 'eval', 'train/Llama': give the sampler "
        "the signature the recorder records (the integrations' default is 'train/<model "
        "class>'). Is it the pricer of an enabled Recorder(pricer=...) recording this "
        "signature? (A recorder that records nothing teaches nothing.)"
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(), "give one of first_wave_tokens and first_wave_samples: the size of a wave "
                 "packed while the signature has no price yet."),
        (dict(first_wave_samples=2, first_wave_tokens=64),
         "give one of first_wave_tokens and first_wave_samples: the size of a wave packed "
         "while the signature has no price yet."),
        (dict(first_wave_samples=0), "first_wave_samples must be an integer >= 1; got 0."),
        (dict(first_wave_tokens=True), "first_wave_tokens must be an integer >= 1; got True."),
        (dict(first_wave_tokens="64"), "first_wave_tokens must be an integer >= 1; got '64'."),
        (dict(lengths=[3, 4, -2]), "lengths[2] must be an integer >= 1; got -2."),
        (dict(lengths=[3.0]), "lengths[0] must be an integer >= 1; got 3.0."),
        (dict(pricer="warm-fit"), "pricer must be a warmfit.Pricer; got str."),
        (dict(budget_bytes=-1),
         "budget_bytes must be a number of bytes >= 0 or a size such as '70GiB'; got -1."),
        (dict(budget_bytes="70 GiBs"),
         "budget_bytes '70 GiBs' is not a size: give bytes, or a number with KB, MB, GB, TB, "
         "KiB, MiB, GiB or TiB (e.g. 128.8GB)."),
        (dict(signature=None), "signature must be a non-empty str; got None."),
        (dict(seed=1.0), "seed must be an integer; got 1.0."),
        (dict(seed=False), "seed must be an integer; got False."),
    ],
)  # fmt: skip
def test_each_refusal_of_the_sampler_word_for_word(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = dict(
        lengths=[3, 4], pricer=Pricer(), budget_bytes=100, first_wave_samples=1
    )
    if "first_wave_tokens" in kwargs or not kwargs:
        del arguments["first_wave_samples"]
    arguments.update(kwargs)
    with pytest.raises(UsageError) as refused:
        BudgetSampler(**arguments)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    ("lengths", "gives", "message"),
    [
        ([3], 0, "tokens([3]) gave 0: it must give a wave's packed tokens, an integer >= 1."),
        ([2] * 9, 2.5, "tokens([2, 2, 2, 2, 2, 2, 2, 2]...) gave 2.5: it must give a wave's "
                       "packed tokens, an integer >= 1."),
        ([1] * 8, True, "tokens([1, 1, 1, 1, 1, 1, 1, 1]) gave True: it must give a wave's "
                        "packed tokens, an integer >= 1."),
    ],
)  # fmt: skip
def test_a_tokens_function_that_gives_no_tokens_is_refused_word_for_word(
    lengths: list[int], gives: Any, message: str
) -> None:
    """A priced wave grows to all the samples: tokens() gives a token per sample until
    then, ``gives`` for the whole wave; its message shows at most 8 lengths."""
    sampler = BudgetSampler(
        lengths, taught(1), 10**6, first_wave_samples=1, shuffle=False,
        tokens=lambda ls: len(ls) if len(ls) < len(lengths) else gives,
    )  # fmt: skip
    with pytest.raises(UsageError) as refused:
        list(sampler)
    assert str(refused.value) == message


def test_use_sampler_refusals_and_warning_word_for_word() -> None:
    sampler = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1)

    def trainer(**args: Any) -> SimpleNamespace:
        base = dict(max_steps=4, world_size=1, gradient_accumulation_steps=1)
        return SimpleNamespace(args=SimpleNamespace(**{**base, **args}), train_dataset=[1],
                               data_collator=list)  # fmt: skip

    with pytest.raises(UsageError) as refused:
        use_sampler(trainer(max_steps=0), sampler)
    assert str(refused.value) == (
        "use_sampler(): set TrainingArguments(max_steps=...): a BudgetSampler packs waves as "
        "it learns, so how many an epoch holds is not known in advance."
    )
    with pytest.raises(UsageError) as refused:
        use_sampler(trainer(world_size=3), sampler)
    assert str(refused.value) == (
        "use_sampler(): one process only; ranks that pack their own waves run different "
        "numbers of them, which a distributed step cannot wait for."
    )
    with pytest.warns(SamplerWarning) as caught:
        use_sampler(trainer(gradient_accumulation_steps=3), sampler)
    assert [str(w.message) for w in caught] == [
        "warmfit: gradient_accumulation_steps=3: the Trainer collects a step's waves before "
        "it runs any, so each is packed without the readings of the waves before it in that "
        "step (the prices lag the recorder's)."
    ]
    with pytest.raises(UsageError) as refused:
        BudgetSampler([1], taught(1), 1, first_wave_samples=1).wave()
    assert str(refused.value) == "BudgetSampler.wave(): no wave has been yielded yet."


def test_the_untaught_warning_counts_only_the_waves_that_ran_out_of_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An untaught pricer, first waves of 2 samples, lengths [9, 9, 4, 4, 3, 3] in order:
    [0, 1] (18 tokens) runs out of memory, so [0] alone (9; [0, 1] is the OOM size) runs
    outside sampler.wave() (teaching nothing), then [1, 2] (13) runs out of memory, then
    [1] (9) is the fourth wave in a row without a price. Of the three before it, two ran
    out of memory: the warning says 2 (18, 13 tokens), and the smallest, 13."""
    monkeypatch.setattr(pricer_module, "_free", lambda tb: None)
    sampler = BudgetSampler([9, 9, 4, 4, 3, 3], Pricer("max-merge"), 10**9,
                            first_wave_samples=2, shuffle=False)  # fmt: skip
    waves = []
    with pytest.warns(SamplerWarning) as caught:
        for wave in sampler:
            waves.append(wave)
            if len(waves) in (1, 3):
                with sampler.wave():
                    raise torch.OutOfMemoryError("simulated: CUDA out of memory.")
            if len(waves) == 4:
                break
    assert waves == [[0, 1], [0], [1, 2], [1]]
    assert [str(w.message) for w in caught] == [
        "warmfit: 4 waves in a row were packed at the first-wave size, and 2 of them ran "
        "out of memory (18, 13 tokens): a wave that runs out of memory teaches the pricer "
        "nothing of 'train', so the first-wave size is too large for this device. Give a "
        "smaller first_wave_samples (it is 2), or a first_wave_tokens below 13."
    ]


@pytest.mark.parametrize("pin", [True, False])
def test_use_samplers_loader_pins_memory_as_the_trainer_args_say(pin: bool) -> None:
    """The twin of the loader built from args that name only ``max_steps``: args with
    ``dataloader_pin_memory`` give a loader that pins as they say, over the trainer's
    dataset and collator, in this process."""
    sampler = BudgetSampler(LENGTHS, taught(100), 6_000, first_wave_samples=1)
    trainer = SimpleNamespace(
        args=SimpleNamespace(max_steps=2, dataloader_pin_memory=pin),
        train_dataset=list(range(len(LENGTHS))), data_collator=list,
    )  # fmt: skip
    use_sampler(trainer, sampler)
    loader = trainer.get_train_dataloader()
    assert (loader.pin_memory, loader.num_workers) == (pin, 0)
    assert loader.batch_sampler is sampler and loader.collate_fn is list
    assert loader.dataset is trainer.train_dataset


def test_a_sample_alone_at_an_oom_size_neither_counts_nor_breaks_unpriced_waves_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An untaught pricer, first waves of 1 sample, a wave of 20 tokens that ran out of
    memory under the budget, lengths [5, 5, 20, 5, 5] in order: [0] and [1] are packed at
    the first-wave size, [2] alone at the OOM size (not packed at the first-wave size, so
    not counted; not priced either, so the run is not broken), then [3] and [4]: the
    warning of four in a row comes with wave [4], after the one of sample 2."""
    monkeypatch.setattr(pricer_module, "_free", lambda tb: None)
    pricer = Pricer("max-merge")
    oom_at(pricer, 20, 10**6)
    sampler = BudgetSampler([5, 5, 20, 5, 5], pricer, 10**6, first_wave_samples=1,
                            shuffle=False)  # fmt: skip
    said: list[tuple[int, str]] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, wave in enumerate(sampler):
            assert wave == [k]
            said += [(k, str(w.message)) for w in caught[len(said) :]]
    assert said == [
        (2, "warmfit: sample 2 (20 tokens) is at or above 20 tokens, a size that ran out of "
            "memory under this budget of 1,000,000 bytes: it is yielded alone."),
        (4, "warmfit: 4 waves in a row were packed at the first-wave size: the pricer has "
            "learned nothing of 'train'. Is it the pricer of an enabled Recorder(pricer=...) "
            "recording this signature? (A recorder that records nothing teaches nothing.)"),
    ]  # fmt: skip


# --- fresh audit of 12-06 (fa2) ---


@pytest.mark.parametrize("first_wave", [{"first_wave_tokens": 16}, {"first_wave_samples": 3}])
@pytest.mark.parametrize(
    ("oom", "waves", "tokens"),
    [(8, [[0], [1], [2]], [4, 4, 4]), (9, [[0, 1], [2]], [8, 4])],
    ids=["oom-at-8", "oom-at-9"],
)
def test_unpriced_waves_stop_one_sample_before_exactly_an_oom_size(
    first_wave: dict[str, int], oom: int, waves: list[list[int]], tokens: list[int]
) -> None:
    """No price yet (no profile) and a wave that ran out of memory under the budget;
    samples [4, 4, 4] in order, a first-wave size of 16 tokens or 3 samples (room for all
    12 tokens). An OOM at 8 tokens: [0, 1] would be 8 tokens, exactly the OOM size, so
    each sample is its own wave of 4. An OOM at 9: [0, 1] (8 tokens) is packed, and
    [0, 1, 2] (12) would reach it, so sample 2 opens the next wave."""
    pricer = Pricer("max-merge")
    oom_at(pricer, oom, 10**9)
    sampler = BudgetSampler([4, 4, 4], pricer, 10**9, shuffle=False, **first_wave)
    assert list(sampler) == waves
    assert [w.packed_tokens for w in sampler.waves] == tokens
    assert all(w.estimate_bytes is None for w in sampler.waves) and sampler.oversized == 0
    pricer.close()
