"""Thin Hugging Face Trainer and Lightning callbacks over a `Tracker` (transformers / lightning imported lazily).

    tracker = Tracker.for_model("llama-3.1-8b", seq=2048, batch=8, world_size=8)
    Trainer(..., callbacks=[hf_callback(tracker)])              # transformers
    L.Trainer(..., callbacks=[lightning_callback(tracker)])     # lightning

A tracked step is one optimizer step. Neither framework hands the callback the data loader, so the data wait is
the host time between the end of one step and the start of the next, where both fetch the next batch; it also
holds whatever else runs there (logging, other callbacks). Evaluation is excluded by restarting the gap after it
(HF on_evaluate, Lightning on_validation_end), and so is HF checkpointing (on_save); a Lightning ModelCheckpoint
write lands in the gap (it has no hook after the write), which a rare save spreads thin over the window.
Tokens: HF counts them when TrainingArguments(include_num_input_tokens_seen=...) is on (gathered over ranks: the
job's tokens); otherwise, and in Lightning without `tokens=`, the tracker's tokens_per_step stands.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Callable

from .tracker import Tracker

log = logging.getLogger("gpuwise.track")

_TORCH_PRECISION = {"float32": "fp32", "bfloat16": "bf16-pure", "float16": "fp16"}


def _param_precision(model: Any) -> str | None:
    """gpuwise's precision name for a model's (first) parameter dtype, or None."""
    try:
        return _TORCH_PRECISION.get(str(next(model.parameters()).dtype).removeprefix("torch."))
    except (AttributeError, StopIteration, TypeError):
        return None


def _check_world(tracker: Tracker, world: int, where: str) -> None:
    if world != tracker.world_size:
        log.warning("gpuwise: the tracker assumes %d GPU(s) but %s runs on %d: MFU's denominator is off by %d/%d",
                    tracker.world_size, where, world, world, tracker.world_size)


def _report(tracker: Tracker, skip_first: int, show: bool) -> None:
    text = tracker.summary(skip_first=skip_first).render()
    log.info("%s", text)
    if show:
        print(text)
    tracker.close()


def hf_callback(tracker: Tracker, *, skip_first: int = 1, print_summary: bool = True) -> Any:
    """A transformers.TrainerCallback that feeds `tracker`; the summary is logged (and printed on rank 0) at the end."""
    from transformers import TrainerCallback

    class GpuwiseHFCallback(TrainerCallback):
        def __init__(self) -> None:
            self.tracker, self.last_end, self.seen = tracker, None, 0

        def on_train_begin(self, args, state, control, model=None, **kw):
            self.last_end, self.seen = None, state.num_input_tokens_seen
            precision = "bf16" if args.bf16 else "fp16" if args.fp16 else _param_precision(model)
            if precision is not None:
                tracker.set_context(precision=precision)
            _check_world(tracker, args.world_size, "the Trainer")

        def on_step_begin(self, args, state, control, **kw):
            if self.last_end is not None:  # get_batch_samples() ran in this gap: the data wait
                tracker.add_data_wait(tracker.clock() - self.last_end)
            tracker.start_step()

        def on_step_end(self, args, state, control, **kw):
            tokens = None
            if getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False, None):
                tokens, self.seen = state.num_input_tokens_seen - self.seen, state.num_input_tokens_seen
            tracker.end_step(tokens or None)
            self.last_end = tracker.clock()

        def on_evaluate(self, args, state, control, **kw):  # evaluation is not data wait
            self.last_end = tracker.clock() if self.last_end is not None else None

        on_save = on_evaluate

        def on_train_end(self, args, state, control, **kw):
            _report(tracker, skip_first, print_summary and state.is_world_process_zero)

    return GpuwiseHFCallback()


def lightning_callback(tracker: Tracker, *, tokens: Callable[[Any], int] | None = None, skip_first: int = 1,
                       print_summary: bool = True, module: str = "lightning.pytorch") -> Any:
    """A Lightning Callback that feeds `tracker` (module: 'pytorch_lightning' for the standalone package).

    tokens(batch) -> the rank's tokens in a batch; the callback multiplies by trainer.world_size (Lightning's
    strategies are data parallel). With gradient accumulation a step spans several batches: it ends when
    trainer.global_step moves, and the gaps between its batches are data wait inside the step."""
    pl = importlib.import_module(module)

    class GpuwiseLightningCallback(pl.Callback):
        def __init__(self) -> None:
            self.tracker, self.last_end, self.global_step, self.rank_tokens = tracker, None, 0, 0

        def on_train_start(self, trainer, pl_module):
            self.last_end, self.global_step, self.rank_tokens = None, trainer.global_step, 0
            p = str(trainer.precision)
            precision = (_param_precision(pl_module) if p.startswith(("32", "64")) else
                         "bf16" if p.startswith("bf16") else "fp16" if p.startswith("16") else None)
            if precision is not None:
                tracker.set_context(precision=precision)
            _check_world(tracker, trainer.world_size, "the Lightning Trainer")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.last_end is not None:  # the fetch of this batch ran in the gap
                tracker.add_data_wait(tracker.clock() - self.last_end)
            if not tracker.in_step:
                tracker.start_step()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if tokens is not None:
                self.rank_tokens += tokens(batch)
            if trainer.global_step != self.global_step:  # the optimizer stepped: the step is complete
                self.global_step = trainer.global_step
                tracker.end_step(self.rank_tokens * trainer.world_size if tokens is not None else None)
                self.rank_tokens = 0
            self.last_end = tracker.clock()

        def on_validation_end(self, trainer, pl_module):  # validation is not data wait
            self.last_end = tracker.clock() if self.last_end is not None else None

        def on_train_end(self, trainer, pl_module):
            if tracker.in_step:  # the last batches of an epoch that did not reach an optimizer step
                tracker.abandon_step()
            _report(tracker, skip_first, print_summary and trainer.is_global_zero)

    return GpuwiseLightningCallback()
