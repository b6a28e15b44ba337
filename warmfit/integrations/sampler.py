"""A batch sampler that packs samples into waves that fit a memory budget, learning as it goes.

:class:`BudgetSampler` is a ``torch.utils.data.Sampler`` that yields lists of
indices (pass it as a ``DataLoader``'s ``batch_sampler``). It packs samples
of different lengths into waves whose :meth:`warmfit.Pricer.price` fits
``budget_bytes`` (the memory free above the baseline when a wave starts,
SPEC §7), and it learns as the run goes: the recorder that records the run
with the same pricer (``Recorder(pricer=pricer)``) teaches it each reading,
so each wave is packed with what every wave before it measured.

Each epoch, in a seeded order:

- **while the signature has no price** (no profile yet, no floor), a wave
  takes samples while their tokens stay within ``first_wave_tokens`` (or up to
  ``first_wave_samples`` samples): the first wave's size is the user's guess,
  and its readings give the profile;
- **once it has one**, a wave takes the next sample while the price of the
  wave with it stays within the budget (next fit: samples keep the seeded
  order; a wave ends at the first sample that does not fit, and that sample
  opens the next wave);
- **a sample whose price alone is over the budget** is yielded alone, with a
  :class:`SamplerWarning`: every sample is yielded exactly once per epoch,
  and the trainer decides what to do with a wave that may not fit.

The order of the samples depends only on ``seed`` and the epoch; where the
waves end depends on the prices, so on the memory measured. Each wave's
price is kept in :attr:`BudgetSampler.waves`. Only an enabled recorder
teaches the pricer (one that records nothing tells its pricer nothing): when
:data:`UNTAUGHT_WAVES` waves in a row were packed at the first-wave size (no
price; a sample yielded alone at an OOM size neither counts nor breaks the run),
a :class:`SamplerWarning` says so; when those waves ran out of memory (an OOM
wave teaches nothing), it says that instead and asks for a smaller
``first_wave_tokens``.

**Each wave must be packed after the previous one ran.** A ``DataLoader``
asks its batch sampler for a wave when it needs that wave's data; a loader
that fetches ahead (worker processes, accelerate's loaders, the Hugging Face
``Trainer`` collecting ``gradient_accumulation_steps`` micro-batches per
step) packs waves before the readings of the waves before them are in, so
their prices lag: they still fit the budget as the pricer stood, but they
are not the prices the recorder records when they run. Use
``num_workers=0``; with the Hugging Face ``Trainer``, :func:`use_sampler`
(gradient accumulation of 1 keeps the prices exact).

Needs torch (extra ``torch``); imported only when used.
"""

from __future__ import annotations

import operator
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

try:
    import torch
    from torch.utils.data import Sampler
except ImportError as exc:  # pragma: no cover - exercised by the core install
    raise ImportError(
        "warmfit.integrations.sampler needs torch: install the extra 'warmfit[torch]' (pin a "
        "CPU torch first on a CPU-only machine; see the README)."
    ) from exc

from warmfit.errors import UsageError
from warmfit.trainer.budget import budget_bytes as _budget_bytes
from warmfit.trainer.pricer import Pricer, PricerWave

#: Waves packed at the first-wave size in a row before a :class:`SamplerWarning` says the
#: pricer learns nothing (a loader that fetches ahead packs one or two before it learns).
UNTAUGHT_WAVES = 4

#: ``tokens(lengths) -> packed tokens`` of a wave holding samples of these lengths.
TokensFn = Callable[[Sequence[int]], int]


class SamplerWarning(UserWarning):
    """What the sampler cannot do as asked: a sample priced over the budget alone (it is
    yielded alone all the same), waves that keep coming without a price (nothing teaches
    the pricer), a trainer that collects waves before it runs them (prices lag)."""


@dataclass(frozen=True)
class PackedWave:
    """One wave the sampler yielded: its samples, tokens and the price it was packed at."""

    #: The epoch it belongs to (0 for the first pass).
    epoch: int
    #: How many samples it holds.
    samples: int
    #: Its packed tokens (``tokens`` of its samples' lengths).
    packed_tokens: int
    #: The pricer's price of the wave when it was packed; None: packed by the first-wave
    #: size, with no price yet.
    estimate_bytes: int | None
    #: Its samples' indices, in the order yielded.
    indices: tuple[int, ...] = ()
    #: Whether it ran out of memory (in a :meth:`BudgetSampler.wave`): its samples were
    #: packed again into smaller waves (a wave of one sample is not retried).
    oom: bool = False


def padded_tokens(multiple: int = 1) -> TokensFn:
    """``tokens`` for a collator that pads every sample to the longest (rounded up to
    ``multiple``): ``samples * padded width``.

    >>> padded_tokens(8)([5, 17, 9])
    72
    """
    if not isinstance(multiple, int) or multiple < 1:
        raise UsageError(f"must be an integer >= 1; got {multiple!r}.", argument="multiple")

    def tokens(lengths: Sequence[int]) -> int:
        return len(lengths) * (-(-max(lengths) // multiple) * multiple)

    return tokens


def _positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1 (numpy integers and 0-d integer tensors too), or a
    UsageError naming ``name``."""
    try:
        number = operator.index(value) if not isinstance(value, bool) else 0
    except TypeError:
        number = 0
    if number < 1:
        raise UsageError(f"must be an integer >= 1; got {value!r}.", argument=name)
    return number


class BudgetSampler(Sampler[list[int]]):
    """Yields waves of sample indices whose price fits ``budget_bytes`` (see the module).

    - ``lengths``: each sample's length in tokens (ints >= 1), by index;
    - ``pricer``: the :class:`warmfit.Pricer` that prices the waves, the one the
      recorder teaches (``Recorder(pricer=pricer)``);
    - ``budget_bytes``: bytes (an int) or a size such as ``"70GiB"``;
    - ``signature``: the waves' profile key, as the recorder records them;
    - ``first_wave_tokens`` or ``first_wave_samples`` (one of them): the size of
      a wave packed while the signature has no price;
    - ``tokens``: a wave's packed tokens from its samples' lengths (default:
      their sum, as a padding-free collator packs them; :func:`padded_tokens`
      for a padding one); it must count what the recorder is told and never
      fall as samples are added;
    - ``output_bytes``: the wave's output bytes from its packed tokens (default
      none), as the recorder is told them;
    - ``shuffle`` (default True) and ``seed``: the order of the samples, drawn
      again each epoch (:meth:`set_epoch`, or one more each full pass).
    """

    def __init__(
        self,
        lengths: Sequence[int],
        pricer: Pricer,
        budget_bytes: int | str,
        *,
        signature: str = "train",
        first_wave_tokens: int | None = None,
        first_wave_samples: int | None = None,
        tokens: TokensFn | None = None,
        output_bytes: Callable[[int], int] | None = None,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.lengths = [_positive_int(n, f"lengths[{i}]") for i, n in enumerate(lengths)]
        if not isinstance(pricer, Pricer):
            raise UsageError(
                f"must be a warmfit.Pricer; got {type(pricer).__name__}.", argument="pricer"
            )
        self.pricer = pricer
        self.budget_bytes: int = _budget_bytes(budget_bytes)
        if not isinstance(signature, str) or not signature:
            raise UsageError(f"must be a non-empty str; got {signature!r}.", argument="signature")
        self.signature = signature
        if (first_wave_tokens is None) == (first_wave_samples is None):
            raise UsageError(
                "give one of first_wave_tokens and first_wave_samples: the size of a wave "
                "packed while the signature has no price yet."
            )
        self.first_wave_tokens = (
            None
            if first_wave_tokens is None
            else _positive_int(first_wave_tokens, "first_wave_tokens")
        )
        self.first_wave_samples = (
            None
            if first_wave_samples is None
            else _positive_int(first_wave_samples, "first_wave_samples")
        )
        self.tokens: TokensFn = tokens if tokens is not None else sum
        self.output_bytes = output_bytes
        self.shuffle = bool(shuffle)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise UsageError(f"must be an integer; got {seed!r}.", argument="seed")
        self.seed = seed
        #: The epoch the next pass draws its order for.
        self.epoch = 0
        #: Every wave yielded so far, in order, with the price it was packed at.
        self.waves: list[PackedWave] = []
        #: Samples yielded alone although their price was over the budget.
        self.oversized = 0
        #: Indices of samples that ran out of memory alone (not retried), in order.
        self.failed: list[int] = []
        self._unpriced_in_a_row = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw the next pass's order for ``epoch`` (as ``DistributedSampler.set_epoch``)."""
        self.epoch = int(epoch)

    def order(self, epoch: int) -> list[int]:
        """The order the samples are packed in for ``epoch``."""
        order = list(range(len(self.lengths)))
        if self.shuffle:
            random.Random(f"warmfit.sampler:{self.seed}:{epoch}").shuffle(order)
        return order

    def _price(self, lengths: list[int]) -> tuple[int, int | None]:
        n = self.tokens(lengths)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UsageError(
                f"tokens({lengths[:8]}{'...' if len(lengths) > 8 else ''}) gave {n!r}: it must "
                "give a wave's packed tokens, an integer >= 1."
            )
        o = 0 if self.output_bytes is None else self.output_bytes(n)
        return n, self.pricer.price(self.signature, n, output_bytes=o)

    def _fits_first_wave(self, lengths: list[int]) -> bool:
        if self.first_wave_samples is not None:
            return len(lengths) <= self.first_wave_samples
        assert self.first_wave_tokens is not None
        return self.tokens(lengths) <= self.first_wave_tokens

    def _untaught(self) -> None:
        """Count a wave packed without a price; warn once when too many come in a row."""
        self._unpriced_in_a_row += 1
        if self._unpriced_in_a_row == UNTAUGHT_WAVES:
            # the waves of this run before this one (it has not run yet), all unpriced
            ran = self.waves[len(self.waves) - (UNTAUGHT_WAVES - 1) :]
            ooms = [w.packed_tokens for w in ran if w.oom and w.estimate_bytes is None]
            if ooms:  # an OOM wave teaches nothing (SPEC §3): the first-wave size is the cause
                if self.first_wave_tokens is not None:
                    smaller = f"a smaller first_wave_tokens (it is {self.first_wave_tokens:,})"
                else:
                    smaller = (
                        f"a smaller first_wave_samples (it is {self.first_wave_samples:,}), "
                        f"or a first_wave_tokens below {min(ooms):,}"
                    )
                warnings.warn(
                    f"warmfit: {UNTAUGHT_WAVES} waves in a row were packed at the first-wave "
                    f"size, and {len(ooms)} of them ran out of memory "
                    f"({', '.join(f'{n:,}' for n in ooms)} tokens): a wave that runs out of "
                    f"memory teaches the pricer nothing of {self.signature!r}, so the "
                    f"first-wave size is too large for this device. Give {smaller}.",
                    SamplerWarning,
                    stacklevel=3,
                )
                return
            learned = sorted(getattr(self.pricer, "profiles", {}))
            others = (
                f" It has learned {', '.join(map(repr, learned))}: give the sampler the "
                "signature the recorder records (the integrations' default is "
                "'train/<model class>')."
                if learned
                else ""
            )
            warnings.warn(
                f"warmfit: {UNTAUGHT_WAVES} waves in a row were packed at the first-wave size: "
                f"the pricer has learned nothing of {self.signature!r}.{others} Is it the "
                "pricer of an enabled Recorder(pricer=...) recording this signature? (A "
                "recorder that records nothing teaches nothing.)",
                SamplerWarning,
                stacklevel=3,
            )

    def __iter__(self) -> Iterator[list[int]]:
        epoch = self.epoch
        order = self.order(epoch)
        lengths = self.lengths
        budget = self.budget_bytes
        pricer = self.pricer
        position = 0
        while position < len(order):
            # the wave starts here, priced as the pricer stands now (after the last wave ran);
            # no size at or above one that ran out of memory under this budget (SPEC §9)
            bound = pricer.oom_tokens(self.signature, budget)
            wave = [order[position]]
            sizes = [lengths[wave[0]]]
            position += 1
            tokens, price = self._price(sizes)
            if bound is not None and tokens >= bound:
                self._alone(wave[0], sizes[0], f"at or above {bound:,} tokens, a size that ran "
                            f"out of memory under this budget")  # fmt: skip
            elif price is None:  # no profile yet: the first-wave size
                self._untaught()
                while position < len(order):
                    grown = [*sizes, lengths[order[position]]]
                    if not self._fits_first_wave(grown) or (
                        bound is not None and self.tokens(grown) >= bound
                    ):
                        break
                    sizes = grown
                    wave.append(order[position])
                    position += 1
                tokens = self.tokens(sizes)
            elif price > budget:
                self._unpriced_in_a_row = 0
                self._alone(wave[0], sizes[0], f"priced {price:,} bytes alone, over the budget")
            else:
                self._unpriced_in_a_row = 0
                while position < len(order):
                    grown = [*sizes, lengths[order[position]]]
                    grown_tokens, grown_price = self._price(grown)
                    if (
                        grown_price is None
                        or grown_price > budget
                        or (bound is not None and grown_tokens >= bound)
                    ):
                        break
                    sizes, tokens, price = grown, grown_tokens, grown_price
                    wave.append(order[position])
                    position += 1
            ooms = len(pricer.ooms)
            self.waves.append(PackedWave(epoch, len(wave), tokens, price, tuple(wave)))
            yield wave
            # the trainer ran it: did it run out of memory?
            if any(w.signature == self.signature for w in pricer.ooms[ooms:]):
                self.waves[-1] = replace(self.waves[-1], oom=True)
                if len(wave) > 1:  # pack its samples again, into smaller waves
                    order[position:position] = wave
                else:
                    self.failed.append(wave[0])
                    warnings.warn(
                        f"warmfit: sample {wave[0]} ({sizes[0]} tokens) ran out of memory "
                        "alone: it is not retried (BudgetSampler.failed lists it).",
                        SamplerWarning,
                        stacklevel=2,
                    )
        self.epoch = epoch + 1

    def _alone(self, index: int, length: int, why: str) -> None:
        """A sample yielded alone, though nothing says it fits: count it and warn."""
        self.oversized += 1
        warnings.warn(
            f"warmfit: sample {index} ({length} tokens) is {why} of {self.budget_bytes:,} "
            "bytes: it is yielded alone.",
            SamplerWarning,
            stacklevel=3,
        )

    def wave(
        self, *, padded_tokens: int | None = None, sum_sq_tokens: int | None = None
    ) -> PricerWave:
        """The :meth:`warmfit.Pricer.wave` of the wave last yielded: its signature, packed
        tokens, output bytes and the sampler's budget, so its readings teach the pricer
        and an out-of-memory error in it is survived (``w.oom``) and its samples packed
        again::

            for batch in loader:                      # DataLoader(batch_sampler=sampler)
                with sampler.wave() as w:
                    loss = model(**batch).loss
                    w.forward_done()
                    loss.backward()
                if not w.oom:
                    optimizer.step()
                optimizer.zero_grad()
        """
        if not self.waves:
            raise UsageError("BudgetSampler.wave(): no wave has been yielded yet.")
        last = self.waves[-1]
        n = last.packed_tokens
        o = 0 if self.output_bytes is None else self.output_bytes(n)
        return self.pricer.wave(
            self.signature, n, output_bytes=o, budget_bytes=self.budget_bytes,
            padded_tokens=padded_tokens, sum_sq_tokens=sum_sq_tokens,
        )  # fmt: skip


def use_sampler(trainer: Any, sampler: BudgetSampler) -> None:
    """Train a Hugging Face ``Trainer`` on the waves of ``sampler``.

    Replaces the trainer's ``get_train_dataloader`` with a plain ``DataLoader``
    over its ``train_dataset``, its ``data_collator`` and ``sampler`` as the
    batch sampler, in this process (no worker processes, not prepared by
    accelerate, whose loader fetches a batch ahead): each wave is packed when
    the trainer asks for it, after the wave before it ran. The trainer moves
    each batch to its device itself. Needs ``max_steps`` (how many waves an
    epoch holds is known only as it is packed) and one process; with
    ``gradient_accumulation_steps > 1`` the trainer collects a step's waves
    before it runs them, so their prices lag (a :class:`SamplerWarning`).

    Each ``training_step`` then runs inside :meth:`BudgetSampler.wave`: the
    pricer takes the wave's readings itself, with or without ``warmfit record``
    (with :func:`~warmfit.integrations.huggingface.record_trainer` and
    ``Recorder(pricer=sampler.pricer)``, the recorder's, written to its trace),
    and a wave that runs out of memory is survived: its gradients are dropped,
    its loss is 0, and its samples are packed again into smaller waves.
    """
    args = trainer.args
    if not getattr(args, "max_steps", -1) > 0:
        raise UsageError(
            "use_sampler(): set TrainingArguments(max_steps=...): a BudgetSampler packs "
            "waves as it learns, so how many an epoch holds is not known in advance."
        )
    if getattr(args, "world_size", 1) > 1:
        raise UsageError(
            "use_sampler(): one process only; ranks that pack their own waves run different "
            "numbers of them, which a distributed step cannot wait for."
        )
    if getattr(args, "gradient_accumulation_steps", 1) > 1:
        warnings.warn(
            f"warmfit: gradient_accumulation_steps={args.gradient_accumulation_steps}: the "
            "Trainer collects a step's waves before it runs any, so each is packed without "
            "the readings of the waves before it in that step (the prices lag the recorder's).",
            SamplerWarning,
            stacklevel=2,
        )

    def get_train_dataloader() -> torch.utils.data.DataLoader[Any]:
        if trainer.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        return torch.utils.data.DataLoader(
            trainer.train_dataset,
            batch_sampler=sampler,
            collate_fn=trainer.data_collator,
            num_workers=0,
            pin_memory=bool(getattr(args, "dataloader_pin_memory", False)),
        )

    trainer.get_train_dataloader = get_train_dataloader
    if hasattr(trainer, "training_step") and hasattr(trainer, "compute_loss"):
        from warmfit.integrations.huggingface import measure_with_sampler

        measure_with_sampler(trainer, sampler)


__all__ = ["BudgetSampler", "PackedWave", "SamplerWarning", "padded_tokens", "use_sampler"]
