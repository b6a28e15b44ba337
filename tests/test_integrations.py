"""The Lightning and Hugging Face Trainer integrations, on real training steps."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from warmfit.errors import UsageError  # noqa: E402
from warmfit.format.trace import read_trace  # noqa: E402
from warmfit.integrations.tokens import (  # noqa: E402
    BatchTokens,
    batch_tokens,
    default_token_counts,
    padded_token_counts,
)
from warmfit.recorder import Recorder  # noqa: E402

from .strategies import examples  # noqa: E402

pytestmark = pytest.mark.torch


# --------------------------------------------------------------------------- token counts


def test_padding_is_not_counted():
    ids = torch.arange(12).reshape(3, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    # padded: all 3 x 4 tokens; sum of squared lengths 4^2 + 2^2 = 20
    assert batch_tokens({"input_ids": ids, "attention_mask": mask}) == BatchTokens(
        6, 6, 2, 4, padded_tokens=12, sum_sq_tokens=20
    )


def test_left_padding_is_not_counted_either():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    got = default_token_counts(
        {"input_ids": torch.ones(2, 5, dtype=torch.long), "attention_mask": mask}
    )
    assert got == (8, 8)


def test_without_a_mask_every_token_counts():
    assert batch_tokens({"input_ids": torch.ones(2, 5, dtype=torch.long)}) == BatchTokens(
        10, 10, 2, 5, padded_tokens=10, sum_sq_tokens=2 * 25
    )
    assert batch_tokens(torch.ones(3, 7, dtype=torch.long)) == BatchTokens(
        21, 21, 3, 7, padded_tokens=21, sum_sq_tokens=3 * 49
    )
    assert batch_tokens((torch.ones(2, 4), torch.zeros(2))) == BatchTokens(
        8, 8, 2, 4, padded_tokens=8, sum_sq_tokens=2 * 16
    )
    embeds = {"inputs_embeds": torch.zeros(2, 6, 16)}
    assert batch_tokens(embeds) == BatchTokens(12, 12, 2, 6, padded_tokens=12, sum_sq_tokens=72)


def test_packed_sequences_are_read_from_position_id_resets():
    # one padding-free row holding sequences of 3, 2, 4 and 1 tokens
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3, 0]])
    batch = {"input_ids": torch.ones(1, 10, dtype=torch.long), "position_ids": positions}
    assert batch_tokens(batch) == BatchTokens(
        10, 10, 4, 4, padded_tokens=10, sum_sq_tokens=9 + 4 + 16 + 1
    )


def test_packed_rows_with_padding_and_a_row_that_starts_mid_sequence():
    positions = torch.tensor([[0, 1, 0, 1, 2, 0, 0], [5, 6, 0, 1, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0]])
    batch = {"input_ids": torch.ones(2, 7, dtype=torch.long), "attention_mask": mask,
             "position_ids": positions}  # fmt: skip
    # row 0: 2 + 3 tokens (padding at position 0 ignored); row 1: 2 (continued) + 2
    assert batch_tokens(batch) == BatchTokens(
        9, 9, 4, 3, padded_tokens=14, sum_sq_tokens=4 + 9 + 4 + 4
    )


def _padded(lengths: list[int]) -> dict[str, torch.Tensor]:
    """What an ordinary padded collator gives: right padding to the longest, with a mask."""
    width = max(lengths)
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    ids = (torch.arange(len(lengths) * width).reshape(len(lengths), width) % 16 + 1) * mask
    return {"input_ids": ids, "attention_mask": mask}


def test_a_padded_batch_counts_its_padding_and_squared_lengths_apart():
    # lengths 3 and 5 padded to 5: packed 8, padded 10, sum of squares 9 + 25 = 34
    batch = _padded([3, 5])
    assert batch_tokens(batch) == BatchTokens(8, 8, 2, 5, padded_tokens=10, sum_sq_tokens=34)
    assert default_token_counts(batch) == (8, 8)
    assert padded_token_counts(batch) == (10, 10)


def test_equal_tokens_in_sequences_of_other_lengths_differ_in_squared_lengths():
    # 8 sequences of 32 and 4 of 64: 256 tokens each; 8 * 32^2 = 8,192 and 4 * 64^2 = 16,384
    eight = batch_tokens(_padded([32] * 8))
    four = batch_tokens(_padded([64] * 4))
    assert (eight.packed_tokens, eight.padded_tokens, eight.sum_sq_tokens) == (256, 256, 8_192)
    assert (four.packed_tokens, four.padded_tokens, four.sum_sq_tokens) == (256, 256, 16_384)


def test_a_batch_the_default_cannot_read_is_a_usage_error_naming_the_fix():
    with pytest.raises(UsageError, match="token function"):
        batch_tokens({"pixels": torch.zeros(2, 3)})
    with pytest.raises(UsageError, match="token function"):
        batch_tokens("text")


def test_batch_tokens_built_from_four_counts_leaves_padding_and_squares_at_0():
    assert BatchTokens(6, 6, 2, 4) == BatchTokens(6, 6, 2, 4, padded_tokens=0, sum_sq_tokens=0)


def test_the_other_forms_of_a_batch_the_default_reads():
    """Embeddings of any width (1 too), a tuple or list whose first item is the tensor
    (whatever follows), a 1-d tensor as one row; [rows, tokens, more] is refused."""
    assert batch_tokens({"inputs_embeds": torch.zeros(2, 3, 1)}) == BatchTokens(
        6, 6, 2, 3, padded_tokens=6, sum_sq_tokens=18
    )
    one = BatchTokens(5, 5, 1, 5, padded_tokens=5, sum_sq_tokens=25)
    ids = torch.ones(1, 5, dtype=torch.long)
    assert batch_tokens((ids,)) == batch_tokens([ids, "labels"]) == one
    assert batch_tokens(torch.ones(5, dtype=torch.long)) == one  # [tokens]: one row
    assert batch_tokens({"input_ids": torch.ones(5, dtype=torch.long)}) == one
    with pytest.raises(UsageError, match=r"batch of type tuple"):
        batch_tokens(("text", ids))
    with pytest.raises(UsageError, match=r"^cannot count the tokens of input_ids with shape "
                       r"\(2, 3, 4\); the default reads \[rows, tokens\]"):  # fmt: skip
        batch_tokens({"input_ids": torch.ones(2, 3, 4, dtype=torch.long)})


def test_a_row_of_one_real_token_is_a_sequence_with_or_without_positions():
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": mask}
    want = BatchTokens(4, 4, 2, 3, padded_tokens=6, sum_sq_tokens=1 + 9)
    assert batch_tokens(batch) == want
    assert batch_tokens({**batch, "position_ids": torch.tensor([[0, 1, 2], [0, 1, 2]])}) == want


def test_a_batch_of_padding_alone_holds_no_token_and_no_sequence():
    """All padding (the integrations record no wave for it): 0 tokens, no sequence, the
    longest of none 0, and 6 padded tokens."""
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.zeros(2, 3)}
    want = BatchTokens(0, 0, 0, 0, padded_tokens=6, sum_sq_tokens=0)
    assert batch_tokens(batch) == want
    assert batch_tokens({**batch, "position_ids": torch.tensor([[0, 1, 2], [0, 1, 2]])}) == want


def test_a_row_continuing_a_sequence_starts_one_at_its_first_token():
    """Row 0 holds no position 0 (the tail of a sequence of 3); row 1 the last token of
    one (7) then a sequence of 3: sequences of 3, 1 and 3."""
    positions = torch.tensor([[3, 4, 5, 6], [7, 0, 1, 2]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    batch = {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": mask,
             "position_ids": positions}  # fmt: skip
    assert batch_tokens(batch) == BatchTokens(7, 7, 3, 3, padded_tokens=8, sum_sq_tokens=9 + 1 + 9)


def test_position_ids_for_every_row_are_read_and_other_shapes_ignored():
    """Position ids of shape [tokens] or [1, tokens] hold for every row (as a model
    broadcasts them): two rows of two sequences of 2. Other shapes (a multimodal
    model's [3, rows, tokens], [3, tokens] for 2 rows, a 0-d tensor) say nothing of
    where sequences start: each row is one sequence, as without them (not a crash)."""
    ids = torch.ones(2, 4, dtype=torch.long)
    resets = torch.tensor([0, 1, 0, 1])
    four = BatchTokens(8, 8, 4, 2, padded_tokens=8, sum_sq_tokens=4 * 4)
    assert batch_tokens({"input_ids": ids, "position_ids": resets}) == four
    assert batch_tokens({"input_ids": ids, "position_ids": resets[None]}) == four
    assert batch_tokens({"input_ids": ids, "position_ids": resets.expand(2, 4)}) == four
    rows = batch_tokens({"input_ids": ids})
    assert rows == BatchTokens(8, 8, 2, 4, padded_tokens=8, sum_sq_tokens=2 * 16)
    for other in (resets.expand(3, 2, 4), resets.expand(3, 4), torch.tensor(0), resets[:3]):
        assert batch_tokens({"input_ids": ids, "position_ids": other}) == rows


# --------------------------------------------------------------------------- what both share


def test_a_signature_neither_a_str_nor_a_function_is_a_usage_error():
    from warmfit.integrations._common import WaveSpec

    with pytest.raises(UsageError, match=r"^signature must be a str or a function "
                       r"\(module, batch\) -> str; got int\.$"):  # fmt: skip
        WaveSpec(7, None, None)


def test_a_wave_spec_opens_a_wave_from_one_real_token_and_none_for_padding_alone(tmp_path):
    """A row of 3 with 1 real token: packed 1, padded 3, squares 1, output 0 bytes unless
    output_bytes says (4 bytes per id: 12); all padding: no wave, and none skipped."""
    from warmfit.integrations._common import WaveSpec

    recorder = Recorder(tmp_path, run="spec", device="cpu", flush_interval_s=3600)
    ids = torch.ones(1, 3, dtype=torch.long)
    padding = {"input_ids": ids, "attention_mask": torch.zeros(1, 3)}
    one = {"input_ids": ids, "attention_mask": torch.tensor([[1, 0, 0]])}
    spec = WaveSpec("s", None, None)
    assert spec.wave(recorder, None, padding) is None
    wave = spec.wave(recorder, None, one)
    assert wave is not None
    assert (wave.signature, wave.packed_tokens, wave.logical_tokens) == ("s", 1, 1)
    assert (wave.padded_tokens, wave.sum_sq_tokens, wave.output_bytes) == (3, 1, 0)
    sized = WaveSpec("s", None, lambda batch: 4 * batch["input_ids"].numel())
    wave = sized.wave(recorder, None, one)
    assert wave is not None and wave.output_bytes == 12
    assert recorder.skipped_waves == 0
    recorder.close()


# --------------------------------------------------------------------------- Lightning


def _readings(recorder: Recorder):
    recorder.close()
    assert recorder.trace_path is not None
    return read_trace([recorder.trace_path]).sort("seq").to_dicts()


def _check_waves(rows, waves: int, steps: list[int]) -> None:
    assert len(rows) == 2 * waves
    assert [r["phase"] for r in rows] == ["forward", "caller"] * waves
    assert [r["whole"] for r in rows] == [False, True] * waves
    assert [r["wave"] for r in rows[::2]] == list(range(waves))
    assert [r["step"] for r in rows[::2]] == steps
    for forward, caller in zip(rows[::2], rows[1::2], strict=True):
        assert forward["peak_bytes"] > forward["baseline_bytes"]
        assert caller["peak_bytes"] >= forward["peak_bytes"]
        assert caller["baseline_bytes"] == forward["baseline_bytes"]


def _lightning_batches(rows: int = 3, width: int = 12) -> list[dict[str, torch.Tensor]]:
    out = []
    for i in range(6):
        lengths = [width - (i + r) % 5 for r in range(rows)]
        mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
        out.append({"input_ids": (torch.arange(rows * width).reshape(rows, width) % 17) * mask,
                    "attention_mask": mask})  # fmt: skip
    return out


@pytest.fixture(scope="module")
def pl():
    return pytest.importorskip("lightning.pytorch")


def _tiny_module(pl, manual: bool = False, backwards: int = 1, step: bool = True):
    """A tiny language model; with ``manual``, each batch runs ``backwards`` forward and
    backward passes, then an optimizer step (none when not ``step``)."""

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(17, 32)
            self.head = torch.nn.Linear(32, 17)
            self.automatic_optimization = not manual

        def loss(self, batch):
            logits = self.head(torch.relu(self.embed(batch["input_ids"])))
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), batch["input_ids"].flatten(), reduction="none"
            )
            return (loss * batch["attention_mask"].flatten()).mean()

        def training_step(self, batch, batch_idx):
            if not manual:
                return self.loss(batch)
            optimizer = self.optimizers()
            optimizer.zero_grad()
            for _ in range(backwards):
                self.manual_backward(self.loss(batch))
            if step:
                optimizer.step()
            return None

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    return Tiny()


def _fit(pl, module, callback, max_steps: int, accumulate: int = 1, loader=None, **options) -> None:
    trainer = pl.Trainer(
        max_steps=max_steps,
        accumulate_grad_batches=accumulate,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
        **options,
    )
    if loader is None:
        loader = torch.utils.data.DataLoader(_lightning_batches(), batch_size=None)
    trainer.fit(module, train_dataloaders=loader)


def test_lightning_records_each_batch_with_accumulation(pl, tmp_path):
    from warmfit.integrations.lightning import WarmfitCallback

    recorder = Recorder(tmp_path, run="pl", device="cpu", flush_interval_s=3600)
    _fit(pl, _tiny_module(pl), WarmfitCallback(recorder), max_steps=2, accumulate=2)
    rows = _readings(recorder)
    _check_waves(rows, waves=4, steps=[0, 0, 1, 1])
    expected = [int(b["attention_mask"].sum()) for b in _lightning_batches()[:4]]
    assert [r["packed_tokens"] for r in rows[::2]] == expected
    assert [r["logical_tokens"] for r in rows[::2]] == expected
    assert {r["signature"] for r in rows} == {"train/Tiny"}


def test_lightning_leaves_a_batch_of_padding_only_unrecorded(pl, tmp_path):
    from warmfit.integrations.lightning import WarmfitCallback

    recorder = Recorder(tmp_path, run="pl", device="cpu", flush_interval_s=3600)
    counts = iter([(0, 0), (5, 5), (7, 9)])
    callback = WarmfitCallback(recorder, tokens=lambda batch: next(counts))
    _fit(pl, _tiny_module(pl), callback, max_steps=3)
    rows = _readings(recorder)
    _check_waves(rows, waves=2, steps=[1, 2])
    assert [(r["packed_tokens"], r["logical_tokens"]) for r in rows[::2]] == [(5, 5), (7, 9)]


def test_lightning_manual_optimization_records_the_whole_batch(pl, tmp_path):
    from warmfit.integrations.lightning import WarmfitCallback

    recorder = Recorder(tmp_path, run="pl", device="cpu", flush_interval_s=3600)
    callback = WarmfitCallback(recorder, signature=lambda module, batch: "manual")
    _fit(pl, _tiny_module(pl, manual=True), callback, max_steps=3)
    rows = _readings(recorder)
    _check_waves(rows, waves=3, steps=[0, 1, 2])
    assert {r["signature"] for r in rows} == {"manual"}


def test_lightning_manual_optimization_takes_one_forward_reading_per_batch(pl, tmp_path):
    """Two backward passes in each batch: the forward reading is taken at the first (a
    second forward_done() would be refused), and the wave still runs to the batch's end."""
    from warmfit.integrations.lightning import WarmfitCallback

    recorder = Recorder(tmp_path, run="pl", device="cpu", flush_interval_s=3600)
    _fit(pl, _tiny_module(pl, manual=True, backwards=2), WarmfitCallback(recorder), max_steps=2)
    _check_waves(_readings(recorder), waves=2, steps=[0, 1])


@pytest.mark.parametrize("manual", [False, True])
def test_lightning_takes_the_caller_reading_before_the_step_only_with_automatic_optimization(
    pl, tmp_path, manual
):
    """A meter whose peak grows by 100 bytes at each optimizer step, from 100: with
    automatic optimization the caller reading is taken after backward, before the step
    (wave k reads 100 + 100k); with manual optimization at the batch's end, after it
    (100 + 100(k + 1)). The forward readings are 100 + 100k either way."""
    from tests.fixed_meter import FixedMeter
    from warmfit.integrations.lightning import WarmfitCallback

    meter = FixedMeter(0, 100)
    module = _tiny_module(pl, manual=manual)
    configure = module.configure_optimizers

    def configure_optimizers():
        optimizer = configure()
        optimizer.register_step_post_hook(lambda *_: setattr(meter, "peak", meter.peak + 100))
        return optimizer

    module.configure_optimizers = configure_optimizers
    recorder = Recorder(tmp_path, run="pl", meter=meter, flush_interval_s=3600)
    _fit(pl, module, WarmfitCallback(recorder), max_steps=3)
    rows = _readings(recorder)
    assert [r["peak_bytes"] for r in rows[::2]] == [100, 200, 300]
    callers = [200, 300, 400] if manual else [100, 200, 300]
    assert [r["peak_bytes"] for r in rows[1::2]] == callers


def test_lightning_flushes_the_readings_after_the_last_step_when_training_ends(pl, tmp_path):
    """Manual optimization that never steps the optimizer (no recorder step, so no flush
    at a step): the 2 waves' 4 readings are in the log when fit() returns, before close."""
    from warmfit.integrations.lightning import WarmfitCallback
    from warmfit.recorder.log import LOG_NAME, rank_dir, read_log

    recorder = Recorder(tmp_path, run="pl", device="cpu", flush_interval_s=3600)
    module = _tiny_module(pl, manual=True, step=False)
    _fit(pl, module, WarmfitCallback(recorder), -1, max_epochs=1, limit_train_batches=2)
    assert recorder.readings == 4 and recorder.current_step == 0
    assert read_log(rank_dir(tmp_path, "pl", 0) / LOG_NAME).readings == 4
    _check_waves(_readings(recorder), waves=2, steps=[0, 0])


def test_lightning_without_warmfit_record_never_counts_a_batch(pl, tmp_path, monkeypatch):
    """No ``warmfit record``: the recorder records nothing, and the token and signature
    functions are never called (recording costs nothing)."""
    from warmfit.integrations.lightning import WarmfitCallback
    from warmfit.recorder import ENV_DIR

    monkeypatch.delenv(ENV_DIR, raising=False)
    called = []

    def signature(module, batch):
        called.append("signature")
        return "s"

    def tokens(batch):
        called.append("tokens")
        return 5, 5

    callback = WarmfitCallback(signature=signature, tokens=tokens)
    _fit(pl, _tiny_module(pl), callback, max_steps=2)
    assert callback.recorder is not None and not callback.recorder.enabled
    assert called == []


def test_lightning_out_of_memory_is_recorded_on_the_phase_it_interrupted(pl, tmp_path):
    from warmfit.integrations.lightning import WarmfitCallback

    module = _tiny_module(pl)
    plain_step = module.training_step

    def failing_step(batch, batch_idx):
        if batch_idx == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return plain_step(batch, batch_idx)

    module.training_step = failing_step
    recorder = Recorder(tmp_path, run="pl", device="cpu", flush_interval_s=3600)
    with pytest.raises(RuntimeError, match="out of memory"):
        _fit(pl, module, WarmfitCallback(recorder), max_steps=4)
    rows = _readings(recorder)
    assert [(r["wave"], r["phase"], r["whole"], r["oom"]) for r in rows] == [
        (0, "forward", False, False),
        (0, "caller", True, False),
        (1, "forward", False, True),
    ]


# --------------------------------------------------------------------------- Hugging Face


@pytest.fixture(scope="module")
def hf_demo():
    pytest.importorskip("transformers")
    from warmfit.integrations import hf_demo

    return hf_demo


def _tiny_hf(hf_demo, steps: int):
    return hf_demo.HfDemoConfig(
        vocab=32, hidden=16, layers=1, heads=2, kv_heads=1, experts=4, expert_width=16,
        sequences_per_batch=3, steps=steps, accumulation=2,
    )  # fmt: skip


def test_hf_demo_pads_to_a_multiple_of_8_with_labels_ignored_on_padding(hf_demo):
    """Sequences of 3 and 9 tokens: padded to 16 (9 rounded up to a multiple of 8), ids 0
    and labels -100 on padding, the mask 1 on the real tokens."""
    batch = hf_demo.MarkovBatches._pad([[5, 6, 7], list(range(1, 10))])
    ids = [[5, 6, 7] + [0] * 13, list(range(1, 10)) + [0] * 7]
    assert batch["input_ids"].tolist() == ids
    assert batch["attention_mask"].tolist() == [[1] * 3 + [0] * 13, [1] * 9 + [0] * 7]
    labels = [[5, 6, 7] + [-100] * 13, list(range(1, 10)) + [-100] * 7]
    assert batch["labels"].tolist() == labels
    assert hf_demo.MarkovBatches._pad([[1] * 8])["input_ids"].shape == (1, 8)


def test_hf_demo_batches_alternate_buckets_and_follow_the_chain_4_times_in_5(hf_demo):
    """10 batches of 3 sequences: 5 of 8 to 56 tokens and 5 of 64 to 128 (shuffled), every
    real token in 1..31; about 80% of the steps from one token to the next follow the
    fixed chain (the rest are drawn at random)."""
    data = hf_demo.MarkovBatches(_tiny_hf(hf_demo, steps=5), 10, seed=3)
    assert len(data) == 10 and data[9] is data.batches[9]
    lengths = sorted(int(b["attention_mask"].sum(dim=1).max()) for b in data.batches)
    assert all(8 <= n <= 56 for n in lengths[:5]) and all(64 <= n <= 128 for n in lengths[5:])
    follows = steps = 0
    for batch in data.batches:
        assert batch["input_ids"].shape[0] == 3
        for row, mask in zip(
            batch["input_ids"].tolist(), batch["attention_mask"].tolist(), strict=True
        ):
            real = row[: sum(mask)]
            assert all(1 <= t < 32 for t in real)
            follows += sum(data.next_token[a - 1] == b for a, b in itertools.pairwise(real))
            steps += len(real) - 1
    assert 0.75 < follows / steps < 0.85


def test_hf_demo_signatures_by_the_longest_sequence_and_logs_about_6_times(hf_demo, tmp_path):
    """A longest sequence of 56 tokens is short, 64 and 128 long; the loss is logged every
    steps // 6 steps, at least every step; the padding id 0 is the model's."""
    signature = hf_demo.signature_of()
    for longest, name in ((8, "short"), (56, "short"), (64, "long"), (128, "long")):
        batch = {"input_ids": torch.ones(2, 128), "attention_mask": torch.zeros(2, 128)}
        batch["attention_mask"][1, :longest] = 1
        assert signature(None, batch) == f"train/{name}"
    for steps, every in ((1, 1), (11, 1), (12, 2), (30, 5)):
        trainer, _ = hf_demo.build_trainer(
            _tiny_hf(hf_demo, steps=steps), str(tmp_path / "out"), recorder=Recorder(None)
        )
        assert (trainer.args.max_steps, trainer.args.logging_steps) == (steps, every)
        assert len(trainer.train_dataset) == 2 * steps  # two micro-batches a step
    # each seed its own batches (the data's seed is derived from it)
    data = [
        hf_demo.build_trainer(
            _tiny_hf(hf_demo, steps=1), str(tmp_path / "out"), seed, Recorder(None)
        )[0].train_dataset.batches
        for seed in (0, 1, 2)
    ]
    ids = [[b["input_ids"].tolist() for b in batches] for batches in data]
    assert all(ids[i] != ids[j] for i, j in itertools.combinations(range(3), 2))
    # the batches pad with id 0, the model's padding id: its embedding starts at 0
    embeddings = trainer.model.get_input_embeddings()
    assert embeddings.padding_idx == 0 and not embeddings.weight[0].any()
    assert embeddings.weight[1:].abs().sum(dim=1).all()


def test_hf_demo_records_the_shipped_traces_first_step_again(hf_demo, tmp_path):
    """traces/hf-qwen3moe-cpu is the demo with its defaults (its README: 255,360
    parameters; recording again gives the same readings). Its first optimizer step,
    recorded again, is the trace's first two waves: steps, signatures, tokens, whether
    whole, and each reading's bytes above its baseline."""
    import polars as pl

    cfg = hf_demo.HfDemoConfig()
    recorder = Recorder(tmp_path / "trace", run="again", device="cpu", flush_interval_s=3600)
    trainer, _ = hf_demo.build_trainer(cfg, str(tmp_path / "out"), recorder=recorder)
    assert sum(p.numel() for p in trainer.model.parameters()) == 255_360
    assert cfg.model_tag == "qwen3moe-h64-l2-e8k2"
    args = trainer.args  # the README's: 30 steps of 2 micro-batches, lr 3e-3 constant, seed 0
    assert (args.max_steps, args.gradient_accumulation_steps, args.seed) == (30, 2, 0)
    assert (args.learning_rate, args.lr_scheduler_type) == (3e-3, "constant")
    assert args.use_cpu and args.device.type == "cpu"
    trainer.args.max_steps = 1
    trainer.train()
    recorder.close()
    shipped = Path(__file__).resolve().parent.parent / "traces" / "hf-qwen3moe-cpu"
    columns = ["step", "wave", "signature", "phase", "whole", "packed_tokens", "logical_tokens"]

    def readings(trace: Path) -> list[dict[str, object]]:
        rows = read_trace([trace]).sort("seq")
        return rows.select(
            *columns, above=pl.col("peak_bytes") - pl.col("baseline_bytes")
        ).to_dicts()

    again = readings(tmp_path / "trace")
    assert len(again) == 4 and again == readings(shipped)[:4]
    assert [r["packed_tokens"] for r in again] == [432, 432, 381, 381]


def test_hf_demo_main_trains_says_so_and_refuses_0_steps(hf_demo, tmp_path, monkeypatch, capsys):
    """One step of the demo under warmfit record (its environment): 2 micro-batches, 4
    readings; one step logs one loss, the train loss; chance is ln 256 = 5.5452."""
    from warmfit.recorder import ENV_DIR, ENV_RUN

    with pytest.raises(SystemExit) as refused:
        hf_demo.main(["--steps", "0"])
    assert refused.value.code == 2 and "--steps must be at least 1" in capsys.readouterr().err
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    monkeypatch.setenv(ENV_RUN, "demo")
    assert hf_demo.main(["--steps", "1"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress bar
    said = re.search(  # its last line (the Trainer prints its logs before it)
        r"\ndone: qwen3moe-h64-l2-e8k2, 1 steps in [0-9.]+ s; loss (\d\.\d{4}) -> (\d\.\d{4}) "
        r"\(chance is 5\.5452; train loss (\d\.\d{4})\); recorded 4 readings\n\Z",
        out,
    )
    assert said is not None, out
    assert said[1] == said[2] == said[3]
    # seed 0 by default, as build_trainer's (the README's): the same two micro-batches
    default, _ = hf_demo.build_trainer(
        hf_demo.HfDemoConfig(steps=1), str(tmp_path / "out"), recorder=Recorder(None)
    )
    tokens = sorted(int(b["attention_mask"].sum()) for b in default.train_dataset.batches)
    rows = read_trace([tmp_path]).filter(phase="forward")
    assert sorted(rows["packed_tokens"]) == tokens


def test_hf_trainer_records_each_micro_batch_of_accumulation(hf_demo, tmp_path):
    cfg = _tiny_hf(hf_demo, steps=2)
    recorder = Recorder(tmp_path / "trace", run="hf", device="cpu", flush_interval_s=3600)
    trainer, rec = hf_demo.build_trainer(cfg, str(tmp_path / "out"), recorder=recorder)
    assert rec is recorder
    batches = list(trainer.train_dataset.batches)
    trainer.train()
    rows = _readings(recorder)
    _check_waves(rows, waves=4, steps=[0, 0, 1, 1])
    # the sampler shuffles: the waves hold the batches' non-padding tokens in some order
    expected = sorted(int(b["attention_mask"].sum()) for b in batches)
    assert sorted(r["packed_tokens"] for r in rows[::2]) == expected
    assert all(r["logical_tokens"] == r["packed_tokens"] for r in rows)
    padded = sorted(b["attention_mask"].numel() for b in batches)
    assert expected != padded  # the batches do hold padding, and it was left out
    # ... and recorded apart: tokens padding included, and the sum of squared lengths
    shapes = sorted(
        (int(b["attention_mask"].sum()), b["attention_mask"].numel(),
         int((b["attention_mask"].sum(dim=1) ** 2).sum()))
        for b in batches
    )  # fmt: skip
    got = sorted((r["packed_tokens"], r["padded_tokens"], r["sum_sq_tokens"]) for r in rows[::2])
    assert got == shapes
    assert all(padded > packed for packed, padded, _ in got)
    signatures = [r["signature"] for r in rows[::2]]
    assert set(signatures) == {"train/short", "train/long"}
    for row in rows[::2]:
        batch = next(b for b in batches if int(b["attention_mask"].sum()) == row["packed_tokens"])
        longest = int(batch["attention_mask"].sum(dim=1).max())
        assert row["signature"] == ("train/short" if longest <= 56 else "train/long")


def test_hf_record_trainer_refuses_a_second_call_and_leaves_an_unrecorded_trainer_alone(
    hf_demo, tmp_path, monkeypatch
):
    from warmfit.integrations.huggingface import record_trainer
    from warmfit.recorder import ENV_DIR

    cfg = _tiny_hf(hf_demo, steps=1)
    recorder = Recorder(tmp_path / "trace", run="hf", device="cpu", flush_interval_s=3600)
    trainer, _ = hf_demo.build_trainer(cfg, str(tmp_path / "out"), recorder=recorder)
    with pytest.raises(UsageError, match="already recorded"):
        record_trainer(trainer, recorder)
    recorder.close()
    monkeypatch.delenv(ENV_DIR, raising=False)
    plain, rec = hf_demo.build_trainer(cfg, str(tmp_path / "out2"))
    assert not rec.enabled
    assert "training_step" not in vars(plain) and "compute_loss" not in vars(plain)


class _Trainer:
    """What record_trainer and use_sampler use of a Hugging Face Trainer (``args``,
    ``model``, ``training_step`` running ``compute_loss`` then backward, ``add_callback``),
    without a training loop: the wrappers' own logic, step by step. ``losses``: the loss
    computed that many times per step (a trainer of several losses); ``per_row``: a batch
    of several rows run as one ``training_step`` per row, called from inside itself;
    ``oom``: each step runs out of memory after its backward."""

    def __init__(self, losses: int = 1, per_row: bool = False, oom: bool = False) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(1, 1)
        self.args = SimpleNamespace(device="cpu", max_steps=4)
        self.callbacks: list[object] = []
        self.losses, self.per_row, self.oom = losses, per_row, oom

    def add_callback(self, callback: object) -> None:
        self.callbacks.append(callback)

    def compute_loss(self, model, inputs):
        return model(inputs["input_ids"].float()[..., None]).sum()

    def training_step(self, model, inputs):
        rows = len(inputs["input_ids"])
        if self.per_row and rows > 1:
            one = [{k: v[i : i + 1] for k, v in inputs.items()} for i in range(rows)]
            return sum(self.training_step(model, row) for row in one)
        loss = sum(self.compute_loss(model, inputs) for _ in range(self.losses))
        loss.backward()
        if self.oom:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return loss.detach()


@pytest.mark.parametrize("options", [{}, {"losses": 2, "per_row": True}])
def test_hf_record_trainer_returns_each_steps_loss_and_records_one_wave_per_outer_step(
    tmp_path, options
):
    """A micro-batch of padding alone runs unrecorded (its compute_loss outside any wave,
    before the first); one of two rows of 3 tokens is one wave of 6, however many times
    its step computes the loss (the forward reading taken at the first) or calls
    training_step inside itself (only the outer call recorded). Each step returns the
    loss the unrecorded trainer returns, and leaves the same gradients."""
    pytest.importorskip("transformers")
    from tests.fixed_meter import FixedMeter
    from warmfit.integrations.huggingface import WarmfitStepCallback, record_trainer

    recorder = Recorder(tmp_path, run="hf", meter=FixedMeter(0, 100), flush_interval_s=3600)
    plain, trainer = _Trainer(**options), _Trainer(**options)
    assert record_trainer(trainer, recorder, signature="train") is recorder
    assert [type(c) for c in trainer.callbacks] == [WarmfitStepCallback]
    padding = {"input_ids": torch.ones(2, 3), "attention_mask": torch.zeros(2, 3)}
    rows = {"input_ids": torch.tensor([[1.0, 2, 3], [4, 5, 6]]), "attention_mask": torch.ones(2, 3)}
    for batch in (padding, rows):
        want = plain.training_step(plain.model, batch)
        got = trainer.training_step(trainer.model, batch)
        assert got is not None and got.item() == want.item() != 0
    assert torch.equal(trainer.model.weight.grad, plain.model.weight.grad)
    readings = _readings(recorder)
    _check_waves(readings, waves=1, steps=[0])
    assert [(r["signature"], r["packed_tokens"]) for r in readings] == [("train", 6)] * 2


def test_hf_a_sampler_wave_that_runs_out_of_memory_returns_0_and_drops_its_gradients():
    pytest.importorskip("transformers")
    from tests.fixed_meter import FixedMeter
    from warmfit import Pricer
    from warmfit.integrations.sampler import BudgetSampler, use_sampler

    pricer = Pricer("max-merge", safety_factor=1.0, meter=FixedMeter(0, 100))
    sampler = BudgetSampler([3], pricer, 10**9, first_wave_samples=1)
    trainer = _Trainer(oom=True)
    use_sampler(trainer, sampler)
    next(iter(sampler))
    loss = trainer.training_step(trainer.model, {"input_ids": torch.ones(1, 3)})
    assert loss.item() == 0
    assert [p.grad for p in trainer.model.parameters()] == [None, None]
    pricer.close()


def test_hf_use_sampler_then_record_trainer_records_the_batch_shape_where_counts_agree(
    tmp_path,
):
    """use_sampler first: record_trainer with a recorder that records nothing (outside
    warmfit record) leaves the trainer as it is; with another pricer it is refused; with
    the sampler's, it records the sampler's waves. Samples of 3 and 4 tokens, one per
    wave: the first batch holds its 3 tokens (one row: padded 3, squares 9, recorded);
    the second holds one more than its sample (a collator that adds a token), so its
    shape is not the wave's: neither column is recorded."""
    pytest.importorskip("transformers")
    from tests.fixed_meter import FixedMeter
    from warmfit import Pricer
    from warmfit.integrations.huggingface import record_trainer
    from warmfit.integrations.sampler import BudgetSampler, use_sampler

    pricer = Pricer("max-merge", safety_factor=1.0)
    lengths = [3, 4]
    sampler = BudgetSampler(lengths, pricer, 10**9, first_wave_samples=1)
    trainer = _Trainer()
    use_sampler(trainer, sampler)
    off = Recorder(None)
    assert record_trainer(trainer, off) is off and trainer.callbacks == []
    other = Recorder(
        tmp_path / "other", run="hf", meter=FixedMeter(0, 100), pricer=Pricer("max-merge")
    )
    with pytest.raises(UsageError, match=r"^record_trainer\(\): the trainer packs its waves"):
        record_trainer(trainer, other)
    other.close()
    recorder = Recorder(tmp_path / "trace", run="hf", meter=FixedMeter(0, 100), pricer=pricer,
                        flush_interval_s=3600)  # fmt: skip
    assert record_trainer(trainer, recorder) is recorder and len(trainer.callbacks) == 1
    counts = []
    for extra, indices in enumerate(sampler):
        tokens = sum(lengths[i] for i in indices) + extra
        counts.append(tokens)
        trainer.training_step(trainer.model, {"input_ids": torch.ones(1, tokens)})
    assert len(counts) == 2
    readings = _readings(recorder)
    _check_waves(readings, waves=2, steps=[0, 0])
    first, second = readings[0], readings[2]
    shape = (first["packed_tokens"], first["padded_tokens"], first["sum_sq_tokens"])
    assert shape == (counts[0], counts[0], counts[0] ** 2)
    assert second["packed_tokens"] == counts[1] - 1
    assert (second["padded_tokens"], second["sum_sq_tokens"]) == (None, None)


def test_hf_record_trainer_then_use_sampler_needs_the_samplers_pricer(tmp_path):
    pytest.importorskip("transformers")
    from tests.fixed_meter import FixedMeter
    from warmfit import Pricer
    from warmfit.integrations.huggingface import record_trainer
    from warmfit.integrations.sampler import BudgetSampler, use_sampler

    sampler = BudgetSampler([3, 4], Pricer("max-merge"), 10**9, first_wave_samples=1)
    for pricer in (None, Pricer("max-merge")):
        recorder = Recorder(tmp_path / str(pricer is None), run="hf", meter=FixedMeter(0, 1),
                            pricer=pricer)  # fmt: skip
        trainer = _Trainer()
        record_trainer(trainer, recorder)
        with pytest.raises(UsageError, match=r"^use_sampler\(\): the trainer is recorded with"):
            use_sampler(trainer, sampler)
        recorder.close()


def _pad_to_longest(samples: list[list[int]]) -> dict[str, torch.Tensor]:
    """An ordinary padded collator: token ids padded with 0 to the longest, and a mask."""
    width = max(map(len, samples))
    ids = torch.tensor([s + [0] * (width - len(s)) for s in samples])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in samples])
    return {"input_ids": ids, "attention_mask": mask}


#: Samples of 3 and 5, 4 and 4, 2 and 6 tokens: two per batch, each batch 8 real tokens.
_PADDED_SAMPLES = [list(range(1, n + 1)) for n in (3, 5, 4, 4, 2, 6)]


def _record_padded(pl, trace, run: str, **options):
    from warmfit.integrations.lightning import WarmfitCallback

    recorder = Recorder(trace, run=run, device="cpu", flush_interval_s=3600)
    loader = torch.utils.data.DataLoader(
        _PADDED_SAMPLES, batch_size=2, shuffle=False, collate_fn=_pad_to_longest
    )
    _fit(pl, _tiny_module(pl), WarmfitCallback(recorder, **options), max_steps=3, loader=loader)
    return _readings(recorder)


def test_lightning_with_a_padded_collator_records_padding_and_record_and_validate_say_so(
    pl, tmp_path, capsys
):
    from typer.testing import CliRunner

    from warmfit.cli import app
    from warmfit.commands.record import _print_summary
    from warmfit.recorder.launch import Recording

    rows = _record_padded(pl, tmp_path / "trace", "pl")
    _check_waves(rows, waves=3, steps=[0, 1, 2])
    # lengths 3 and 5 padded to 5: packed 8, padded 10, sum of squares 9 + 25 = 34;
    # 4 and 4: 8, 8, 32; 2 and 6 padded to 6: 8, 12, 4 + 36 = 40
    got = [(r["packed_tokens"], r["padded_tokens"], r["sum_sq_tokens"]) for r in rows[::2]]
    assert got == [(8, 10, 34), (8, 8, 32), (8, 12, 40)]
    # padding is 2/10 = 20% and 4/12 = 33% of two waves' tokens: over 10%, named with the fix
    said = (
        "padding is over 10% of a wave's tokens in 2 of 3 waves of run 'pl' signature "
        "'train/Tiny' (up to 33%)"
    )
    _print_summary(Recording(0, tmp_path / "trace" / "run=pl", []), tmp_path / "trace")
    summary = capsys.readouterr().err
    assert said in summary and "tokens=padded_token_counts" in summary
    validated = CliRunner().invoke(app, ["validate", str(tmp_path / "trace")])
    assert validated.exit_code == 0, validated.output
    assert said in validated.stderr and "tokens=padded_token_counts" in validated.stderr
    assert "padding" not in validated.stdout  # the summary on stdout is unchanged

    # counted as the warning says: packed = padded, and nothing more to say about padding
    rows = _record_padded(pl, tmp_path / "counted", "pl", tokens=padded_token_counts)
    got = [(r["packed_tokens"], r["padded_tokens"], r["sum_sq_tokens"]) for r in rows[::2]]
    assert got == [(10, 10, 34), (8, 8, 32), (12, 12, 40)]
    validated = CliRunner().invoke(app, ["validate", str(tmp_path / "counted")])
    assert validated.exit_code == 0 and "padding" not in validated.stderr


def test_a_token_function_of_your_own_records_neither_column(pl, tmp_path):
    rows = _record_padded(pl, tmp_path / "trace", "own", tokens=lambda batch: (7, 7))
    assert [r["packed_tokens"] for r in rows] == [7] * 6
    assert "padded_tokens" not in rows[0] and "sum_sq_tokens" not in rows[0]


def test_lightning_records_into_the_recorder_warmfit_record_asks_for(pl, tmp_path, monkeypatch):
    from warmfit.integrations.lightning import WarmfitCallback
    from warmfit.recorder import ENV_DIR, ENV_RUN

    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    monkeypatch.setenv(ENV_RUN, "env")
    callback = WarmfitCallback()
    _fit(pl, _tiny_module(pl), callback, max_steps=2)
    assert callback.recorder is not None and callback.recorder.meter.name == "warmfit.cpu-storages"
    _check_waves(_readings(callback.recorder), waves=2, steps=[0, 1])


def test_hf_trainer_counts_padding_free_packed_rows_by_their_tokens(hf_demo, tmp_path):
    cfg = _tiny_hf(hf_demo, steps=1)
    recorder = Recorder(tmp_path / "trace", run="hf", device="cpu", flush_interval_s=3600)
    trainer, _ = hf_demo.build_trainer(cfg, str(tmp_path / "out"), recorder=recorder)
    rows_of = [[5, 9, 3], [12, 7]]  # sequence lengths packed into one row per micro-batch
    packed = []
    for lengths in rows_of:
        ids = torch.randint(1, cfg.vocab, (1, sum(lengths)))
        positions = torch.cat([torch.arange(n) for n in lengths])[None]
        packed.append({"input_ids": ids, "position_ids": positions, "labels": ids.clone()})
    trainer.train_dataset = packed
    trainer.train()
    rows = _readings(recorder)
    _check_waves(rows, waves=2, steps=[0, 0])
    assert sorted(r["packed_tokens"] for r in rows[::2]) == [17, 19]
    # no padding (padded = packed); squared lengths 25 + 81 + 9 = 115 and 144 + 49 = 193
    got = sorted((r["packed_tokens"], r["padded_tokens"], r["sum_sq_tokens"]) for r in rows[::2])
    assert got == [(17, 17, 115), (19, 19, 193)]
    assert {r["signature"] for r in rows} == {"train/short"}  # longest sequence 12


# --- issue 38, tests by pattern (s3) ---


def test_any_nonzero_mask_entry_is_a_real_token():
    """Some collators' masks hold each token's sequence number (1, 2, 3 ...) rather than
    1: every non-zero entry is a real token, 0 alone is padding. Rows [1, 1, 2, 2, 0] and
    [3, 0, 0, 0, 0]: 5 real tokens in 2 rows (lengths 4 and 1)."""
    batch = {
        "input_ids": torch.ones(2, 5, dtype=torch.long),
        "attention_mask": torch.tensor([[1, 1, 2, 2, 0], [3, 0, 0, 0, 0]]),
    }
    assert batch_tokens(batch) == BatchTokens(5, 5, 2, 4, padded_tokens=10, sum_sq_tokens=17)
    assert default_token_counts(batch) == (5, 5) and padded_token_counts(batch) == (10, 10)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"pixels": torch.zeros(2, 3), "labels": torch.zeros(2)},
         "cannot count the tokens of a batch without 'input_ids' or 'inputs_embeds' (its "
         "keys: pixels, labels); pass a token function that returns (packed_tokens, "
         "logical_tokens)."),
        ({}, "cannot count the tokens of a batch without 'input_ids' or 'inputs_embeds' (its "
             "keys: none); pass a token function that returns (packed_tokens, "
             "logical_tokens)."),
        ({"input_ids": None, 7: torch.ones(1)},
         "cannot count the tokens of a batch without 'input_ids' or 'inputs_embeds' (its "
         "keys: input_ids, 7); pass a token function that returns (packed_tokens, "
         "logical_tokens)."),
        ("text", "cannot count the tokens of a batch of type str; the default reads a tensor, "
                 "a tuple whose first item is a tensor, or a mapping with 'input_ids'. Pass a "
                 "token function that returns (packed_tokens, logical_tokens)."),
        ([], "cannot count the tokens of a batch of type list; the default reads a tensor, a "
             "tuple whose first item is a tensor, or a mapping with 'input_ids'. Pass a token "
             "function that returns (packed_tokens, logical_tokens)."),
        (torch.ones(2, 3, 4), "cannot count the tokens of input_ids with shape (2, 3, 4); the "
                              "default reads [rows, tokens]. Pass a token function."),
        ({"inputs_embeds": torch.ones(1, 2, 3, 4)},
         "cannot count the tokens of input_ids with shape (1, 2, 3); the default reads [rows, "
         "tokens]. Pass a token function."),
    ],
)  # fmt: skip
def test_each_refusal_of_the_token_count_word_for_word(batch, message):
    with pytest.raises(UsageError) as refused:
        batch_tokens(batch)
    assert str(refused.value) == message


@pytest.mark.timeout(30)
@settings(max_examples=examples(60), deadline=None)
@given(
    rows=st.lists(
        st.lists(st.integers(1, 4), max_size=3).flatmap(
            lambda seqs: st.tuples(st.just(seqs), st.integers(0, 3), st.booleans(),
                                   st.sampled_from([1, 1, 2, 7]), st.sampled_from([0, 0, 3]))
        ),
        min_size=1, max_size=4,
    ),
    positions=st.sampled_from(["none", "rows", "shared"]),
)  # fmt: skip
def test_oracle_token_counts_of_padded_and_packed_rows(rows, positions):
    """Rows holding 0 to 3 packed sequences each (lengths 1 to 4), left or right padded
    to the widest (``pad`` extra), mask values 1 or a sequence number, the row's first
    sequence starting at position ``start`` (3: it continues one of the row before);
    position ids per row, one row of them for every row (when all rows hold the same),
    or none. Counted the plain way: without positions a row's real tokens are one
    sequence; with them, each sequence is one."""
    width = max(sum(seqs) + pad for seqs, pad, _, _, _ in rows)
    masks, pos = [], []
    for seqs, _, left, value, start in rows:
        real = sum(seqs)
        fill = [0] * (width - real)
        row_pos = [p + (start if k == 0 else 0) for k, n in enumerate(seqs) for p in range(n)]
        masks.append(fill + [value] * real if left else [value] * real + fill)
        pos.append(fill + row_pos if left else row_pos + fill)
    if positions == "shared":
        assume(all(p == pos[0] for p in pos))
    batch = {"input_ids": torch.ones(len(rows), width, dtype=torch.long),
             "attention_mask": torch.tensor(masks)}  # fmt: skip
    if positions == "none":
        lengths = [sum(seqs) for seqs, *_ in rows if seqs]
    else:
        batch["position_ids"] = torch.tensor(pos if positions == "rows" else pos[0])
        lengths = [n for seqs, *_ in rows for n in seqs]
    want = BatchTokens(
        sum(lengths), sum(lengths), len(lengths), max(lengths, default=0),
        padded_tokens=len(rows) * width, sum_sq_tokens=sum(n * n for n in lengths),
    )  # fmt: skip
    assert batch_tokens(batch) == want


# --- fresh audit of 12-06 (fa2) ---


@pytest.mark.parametrize(
    "mask",
    [
        torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0]]),  # wider: cached tokens too, say
        torch.tensor([[1, 0, 0]]),  # one row for two
        torch.ones(3, 2, dtype=torch.long),  # rows and tokens the other way round
    ],
    ids=["2x5", "1x3", "3x2"],
)
def test_a_2d_mask_not_of_the_ids_shape_says_nothing_of_padding(mask):
    """input_ids of 2 rows of 3 tokens; an attention_mask of another shape does not say
    which of these 6 tokens are padding: it is not read, and each row is one sequence of
    3, as without a mask (6 tokens, 2 sequences, longest 3, padded 6, 3^2 + 3^2 = 18)."""
    ids = torch.ones(2, 3, dtype=torch.long)
    rows = BatchTokens(6, 6, 2, 3, padded_tokens=6, sum_sq_tokens=18)
    assert batch_tokens({"input_ids": ids}) == rows
    assert batch_tokens({"input_ids": ids, "attention_mask": mask}) == rows
