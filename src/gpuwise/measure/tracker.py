"""The tracking API for any PyTorch loop: step time, tokens/s, MFU/HFU with their denominator, data wait, memory.

    tracker = Tracker.for_model("llama-3.1-8b", seq=4096, batch=8, world_size=8)   # FLOPs, peak, label
    for batch in tracker.wrap(loader):            # times next(): the data-loader wait
        with tracker.step():                      # times the step
            loss = model(**batch).loss
            loss.backward(); opt.step(); opt.zero_grad()
    print(tracker.summary().render())             # or .to_dict() (JSON, schema_version)

One convention for the whole class: a *step* is one optimizer step, and `flops_per_step`, `tokens_per_step` and a
step's `tokens=` count the whole job (all ranks), as `estimate.flops.step_flops(global_batch=...)` does. So

    MFU = model FLOPs per step / (step time x dense peak FLOP/s of one GPU x world_size)
    HFU = the same with hardware FLOPs (recomputed forwards included)

and a summary's MFU uses the mean step time over its window (total FLOPs / total time). The denominator is printed
with every MFU: which peak (GPU, dtype, dense), per GPU, times how many GPUs. No peak, no MFU: an unknown device
gives None and the summary says why, never a guessed peak.

Step time is the step's bracket (start_step .. end_step) plus the data wait measured before it (in `wrap` or
`data_wait`, or reported with `add_data_wait`): the loop's wall time per step. Time outside both (evaluation,
checkpointing) is not counted. Data wait inside a bracket (gradient accumulation fetching micro-batches) is in the
bracket already and is counted once.

No device sync by default. CUDA is asynchronous: end_step reads the host clock when the host has *queued* the
step, not when the GPU finished it. The host cannot run ahead for long: it blocks on the caching allocator, on any
`.item()` / `.cpu()` / `if tensor:` (a loss logged, a NaN check, the optimizer's grad-norm), so over steady state
the host's step time converges to the device's, and the summary's mean over many steps is exact; one step's time
may lag or lead by up to one step. With `sync=True` each step ends with torch.cuda.synchronize(): per-step times are
exact, at the cost of draining the queue every step (the host no longer prepares the next step while the GPU
works). The data wait is host time spent in the loader: it is GPU idle time when the loop syncs once per step (most
loops do: a logged loss), and an upper bound on it otherwise.

Overhead: the per-step path is two clock reads, a few float operations and one small frozen record (benchmarks/
tracker_overhead.py); no torch call unless `sync`, `memory_per_step` or `nvml_per_step` is on. Peak memory is a
running maximum in torch's allocator, so it is read once, at summary time.

Here: the Tracker class and its per-step path. `Tracker.for_model` is built in tracker_for_model.py, the records and
the summary are track_summary.py, the findings rules.py.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator

from ..errors import InvalidArgument, require_positive_int, require_positive_number
from ..estimate.flops import utilization
from . import _deps  # through the module: tests replace _deps.cuda_if_imported
from ._deps import float32_matmul_precision
from .rules import RuleContext
from .rules import findings as run_rules
from .track_summary import SAMPLER_FIELDS, StepRecord, TrackerSummary, window_figures  # records: also the API here
from .tracker_for_model import for_model

DEFAULT_HISTORY = 10_000
"""Steps kept for summaries (~250 bytes each, ~2.5 MB): hours of training at a step per second; older steps drop
out of the window (the count of steps keeps going)."""

_MAX_FLOPS = 1e30
_MAX_TOKENS = 1 << 50


class _StepScope:
    """`with tracker.step(tokens=...)`: one preallocated object per tracker (no allocation per step)."""

    __slots__ = ("tracker", "tokens")

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.tokens: int | None = None

    def __enter__(self) -> _StepScope:
        self.tracker.start_step()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.tracker.end_step(self.tokens)
        else:  # a failed step (OOM, interrupt) is not a representative step: drop it
            self.tracker.abandon_step()
        return False


class _WaitScope:
    """`with tracker.data_wait():` adds the block's duration to the data wait."""

    __slots__ = ("tracker", "t0")

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.t0 = 0.0

    def __enter__(self) -> _WaitScope:
        self.t0 = self.tracker.clock()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.tracker.add_data_wait(self.tracker.clock() - self.t0)
        return False


class Tracker:
    """Measures a training loop step by step; `summary()` turns the steps into rates, MFU/HFU and findings.

    flops_per_step: model FLOPs of one optimizer step of the whole job (MFU numerator); None: MFU unknown.
    hardware_flops_per_step: the same with recompute (HFU numerator); None: HFU unknown (pass flops_per_step
        again when nothing is recomputed).
    tokens_per_step: tokens of one step of the whole job, used when a step gives no `tokens=`.
    peak_flops: dense peak FLOP/s of ONE GPU in the dtype the GEMMs run in; None: MFU unknown.
    peak_label: what that peak is ('NVIDIA H100 80GB HBM3 (h100-sxm) bf16 dense'); the numbers are added.
    unknown_peak_reason: shown instead of an MFU when peak_flops is None (for_model fills it).
    world_size: GPUs in the job (the MFU denominator multiplies the peak by it).
    clock: seconds, monotonic (time.perf_counter; tests pass a fake).
    sync: torch.cuda.synchronize() at each step end (see the module docstring for the default's consequence).
    sampler: an NVML sampler (measure.sampler.NvmlSampler or anything with start/stop/mark/summary); started at the
        first step, stopped by close().
    memory_capacity_bytes / predicted_peak_memory_bytes: for "peak vs predicted vs capacity"; capacity None:
        the CUDA device's total memory when torch is imported and sees one.
    memory_probe: () -> (allocated_peak_bytes, reserved_peak_bytes) or None; None: torch.cuda.max_memory_allocated
        / max_memory_reserved when torch is already imported and CUDA is available (torch is never imported for it).
    memory_per_step / nvml_per_step: also read memory (torch.cuda.memory_stats builds its whole dict per call) / the
        sampler's window summary into every StepRecord. Off by default: memory peaks are running maxima, and NVML
        samples every 0.1 s, so a step of 10-100 ms holds zero or one sample.
    context: facts for the rules (precision, bandwidth, predictions); see rules.RuleContext.
    history: steps kept for summaries.
    """

    def __init__(self, *, flops_per_step: float | None = None, hardware_flops_per_step: float | None = None,
                 tokens_per_step: int | None = None, peak_flops: float | None = None, peak_label: str | None = None,
                 unknown_peak_reason: str | None = None, world_size: int = 1,
                 clock: Callable[[], float] = time.perf_counter, sync: bool = False, sampler: Any = None,
                 memory_capacity_bytes: int | None = None, predicted_peak_memory_bytes: int | None = None,
                 memory_probe: Callable[[], tuple[int, int] | None] | None = None, memory_per_step: bool = False,
                 nvml_per_step: bool = False, context: RuleContext | None = None,
                 history: int = DEFAULT_HISTORY) -> None:
        require_positive_int("world_size", world_size, 1 << 24)
        require_positive_int("history", history, 1 << 30)
        for name, value in (("flops_per_step", flops_per_step), ("hardware_flops_per_step", hardware_flops_per_step),
                            ("peak_flops", peak_flops)):
            if value is not None:
                require_positive_number(name, value, _MAX_FLOPS)
        if tokens_per_step is not None:
            require_positive_int("tokens_per_step", tokens_per_step, _MAX_TOKENS)
        self.flops_per_step = flops_per_step
        self.hardware_flops_per_step = hardware_flops_per_step
        self.tokens_per_step = tokens_per_step
        self.peak_flops = peak_flops
        self.peak_label = peak_label if peak_label is not None or peak_flops is None else "peak as given"
        self.unknown_peak_reason = unknown_peak_reason
        self.world_size = world_size
        self.clock = clock
        self.sampler = sampler
        self.memory_capacity_bytes = memory_capacity_bytes
        self.predicted_peak_memory_bytes = predicted_peak_memory_bytes
        self.context = replace(context, world_size=world_size) if context is not None else RuleContext(
            world_size=world_size)
        self.notes: list[str] = []
        """Lines added to every summary (e.g. why NVML is not sampled)."""
        self._declared_precision = self.context.precision
        self._probe = memory_probe
        self._probe_resolved = memory_probe is not None
        self._memory_per_step = memory_per_step
        self._nvml_per_step = nvml_per_step and sampler is not None
        self._sync: Callable[[], Any] | None = None
        if sync:
            torch = _deps.require_torch("Tracker(sync=True)")
            if torch.cuda.is_available():  # on CPU, work is synchronous: nothing to wait for
                self._sync = torch.cuda.synchronize
        self.synced = sync
        self._records: deque[StepRecord] = deque(maxlen=history)
        self._marks: deque[int] | None = deque(maxlen=history) if sampler is not None else None
        self._scope = _StepScope(self)
        self._wait_scope = _WaitScope(self)
        self._count = 0
        self._start: float | None = None
        self._last_tick: float | None = None
        self._wait_before = 0.0
        self._wait_inside = 0.0
        self._mark = 0
        self._sampler_started = False
        self._sampler_optional = False

    # Construction from a model (tracker_for_model.py): FLOPs, tokens, peak and label from gpuwise's catalogs.
    for_model = classmethod(for_model)

    # --- the per-step path (keep it a few microseconds) --------------------------------------------------------

    def step(self, tokens: int | None = None) -> _StepScope:
        """`with tracker.step(tokens=n):` around one optimizer step (tokens of the whole job; None: tokens_per_step)."""
        self._scope.tokens = tokens
        return self._scope

    def start_step(self) -> None:
        if self._start is not None:
            raise RuntimeError("Tracker.start_step(): the previous step was not ended (end_step() missing)")
        if self.sampler is not None:
            self._sample_mark()
        self._start = self.clock()

    def end_step(self, tokens: int | None = None) -> StepRecord:
        """End the step started by start_step(); tokens of the whole job (None: tokens_per_step)."""
        if self._sync is not None:
            self._sync()
        now = self.clock()
        start = self._start
        if start is None:
            raise RuntimeError("Tracker.end_step() without start_step()")
        self._start = None
        before = self._wait_before
        return self._record(now - start + before, before + self._wait_inside, tokens)

    def abandon_step(self) -> None:
        """Forget the open step and the data wait attributed to it (a failed or skipped step)."""
        self._start = None
        self._wait_before = self._wait_inside = 0.0

    def tick(self, tokens: int | None = None) -> StepRecord | None:
        """The one-call hook: call once per step, at the same point of the loop; a step is the time between two
        ticks (the first tick only starts the clock and returns None). Do not mix with start_step/end_step."""
        if self._start is not None:
            raise RuntimeError("Tracker.tick() while a start_step() is open: use one style or the other")
        if self._sync is not None:
            self._sync()
        now = self.clock()
        last, self._last_tick = self._last_tick, now
        if last is None:
            self._wait_before = self._wait_inside = 0.0  # waits before the first tick belong to no step
            if self.sampler is not None:
                self._sample_mark()
            return None
        rec = self._record(now - last, self._wait_before + self._wait_inside, tokens)
        if self.sampler is not None:
            self._sample_mark()
        return rec

    def add_data_wait(self, seconds: float) -> None:
        """Report data-loader wait measured elsewhere: before the next step, or inside the open one."""
        if self._start is None:
            self._wait_before += seconds
        else:
            self._wait_inside += seconds

    def data_wait(self) -> _WaitScope:
        """`with tracker.data_wait(): batch = next(it)` for loops that do not use wrap()."""
        return self._wait_scope

    def wrap(self, iterable: Iterable) -> Iterator:
        """Iterate `iterable` (a DataLoader), timing each next() as data wait for the step that consumes it."""
        it = iter(iterable)
        clock = self.clock
        while True:
            t0 = clock()
            try:
                item = next(it)
            except StopIteration:
                return
            waited = clock() - t0
            if self._start is None:
                self._wait_before += waited
            else:
                self._wait_inside += waited
            yield item

    def _record(self, step_s: float, wait_s: float, tokens: int | None) -> StepRecord:
        self._wait_before = self._wait_inside = 0.0
        if tokens is None:
            tokens = self.tokens_per_step
        tps = tokens / step_s if (tokens is not None and step_s > 0) else None
        # utilization() is the one MFU formula (None without a peak or for a zero step time).
        flops, hw_flops = self.flops_per_step, self.hardware_flops_per_step
        mfu = utilization(flops, step_s, self.world_size, self.peak_flops) if flops is not None else None
        hfu = utilization(hw_flops, step_s, self.world_size, self.peak_flops) if hw_flops is not None else None
        alloc = reserved = gpu = None
        if self._memory_per_step:
            alloc, reserved = self._read_memory()
        if self._nvml_per_step and self._sampler_started:
            gpu = self.sampler.summary(since=self._mark)
        rec = StepRecord(self._count, step_s, wait_s, tokens, tps, mfu, hfu, alloc, reserved, gpu)
        self._count += 1
        self._records.append(rec)
        if self._marks is not None:
            self._marks.append(self._mark)
        return rec

    def _sample_mark(self) -> None:
        if not self._sampler_started:
            try:
                self.sampler.start()
            except Exception as e:  # noqa: BLE001 - an auto-created sampler may fail: say so, keep training
                if not self._sampler_optional:
                    raise
                self.notes.append(f"NVML not sampled: {' '.join(str(e).split()) or type(e).__name__}")
                self.sampler, self._marks, self._nvml_per_step = None, None, False
                return
            self._sampler_started = True
        self._mark = self.sampler.mark()

    # --- state and lifecycle -----------------------------------------------------------------------------------

    @property
    def in_step(self) -> bool:
        """True between start_step() and end_step()."""
        return self._start is not None

    @property
    def steps(self) -> int:
        """Steps recorded so far (including those that fell out of the history)."""
        return self._count

    @property
    def records(self) -> tuple[StepRecord, ...]:
        """The steps kept (the last `history`)."""
        return tuple(self._records)

    def set_context(self, **facts: Any) -> None:
        """Update the facts the rules see (e.g. the precision a trainer really runs in)."""
        self.context = replace(self.context, **facts)

    def close(self) -> None:
        """Stop the sampler (if the tracker started it)."""
        if self._sampler_started:
            self.sampler.stop()
            self._sampler_started = False

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        return (f"Tracker(steps={self._count}, world_size={self.world_size}, flops_per_step={self.flops_per_step}, "
                f"peak_flops={self.peak_flops}, sync={self.synced})")

    # --- summary -----------------------------------------------------------------------------------------------

    def _read_memory(self) -> tuple[int | None, int | None]:
        if not self._probe_resolved:
            cuda = _deps.cuda_if_imported()
            self._probe = (lambda: (cuda.max_memory_allocated(), cuda.max_memory_reserved())) if cuda else None
            self._probe_resolved = True
        got = self._probe() if self._probe is not None else None
        return (None, None) if got is None else (got[0], got[1])

    def _capacity(self) -> int | None:
        if self.memory_capacity_bytes is None:
            cuda = _deps.cuda_if_imported()
            if cuda is not None:
                self.memory_capacity_bytes = cuda.get_device_properties(cuda.current_device()).total_memory
        return self.memory_capacity_bytes

    def _live_context(self) -> RuleContext:
        ctx = self.context
        torch = sys.modules.get("torch")
        if ctx.float32_matmul_precision is None and torch is not None:
            ctx = replace(ctx, float32_matmul_precision=float32_matmul_precision(torch))
        return ctx

    def _mfu_note(self) -> str | None:
        if self.peak_flops is None:
            return self.unknown_peak_reason or ("MFU unknown: no peak FLOP/s given (pass peak_flops=, or use "
                                                "Tracker.for_model(..., gpu=...))")
        if self.flops_per_step is None:
            return "MFU unknown: no FLOP count per step (pass flops_per_step=, or use Tracker.for_model)"
        return None

    def summary(self, skip_first: int = 1, last: int | None = None) -> TrackerSummary:
        """Aggregate the steps after the first `skip_first` (warm-up), or only the `last` N of them."""
        if skip_first < 0:
            raise InvalidArgument(f"skip_first must be 0 or more, got {skip_first}")
        recs = list(self._records)
        dropped = self._count - len(recs)
        start = min(len(recs), max(0, skip_first - dropped))
        if last is not None:
            require_positive_int("last", last, 1 << 30)
            start = max(start, len(recs) - last)
        window = recs[start:]
        notes = list(self.notes)
        if dropped > skip_first:
            notes.append(f"the first {dropped} steps fell out of the history ({len(recs)} kept): the window is the "
                         f"last {len(window)}")
        mfu_note = self._mfu_note()
        ctx = self._live_context()
        if self._declared_precision and ctx.precision and ctx.precision != self._declared_precision:
            notes.append(f"the trainer runs {ctx.precision} but the MFU denominator assumes {self._declared_precision} "
                         "(pass precision= to match)")
        alloc, reserved = self._read_memory()
        base = dict(skipped_steps=start + dropped if window else min(skip_first, self._count), synced=self.synced,
                    model_flops_per_step=self.flops_per_step, hardware_flops_per_step=self.hardware_flops_per_step,
                    peak_flops_per_gpu=self.peak_flops, peak_label=self.peak_label, world_size=self.world_size,
                    memory_allocated_peak_bytes=alloc, memory_reserved_peak_bytes=reserved,
                    memory_predicted_peak_bytes=self.predicted_peak_memory_bytes,
                    memory_capacity_bytes=self._capacity(), context=ctx)
        if not window:
            notes.append(f"no steps measured after skipping the first {skip_first}")
            return TrackerSummary(steps=0, mfu_note=mfu_note, notes=tuple(notes), **base)
        figures = window_figures(window, world_size=self.world_size, model_flops_per_step=self.flops_per_step,
                                 hardware_flops_per_step=self.hardware_flops_per_step,
                                 peak_flops_per_gpu=self.peak_flops)
        if figures["tokens_per_step"] is None:
            notes.append("tokens unknown for some steps: pass tokens= to each step or tokens_per_step=")
        nvml = {}
        if self._marks is not None and self._sampler_started:
            s = self.sampler.summary(since=self._marks[start])
            nvml = {dst: getattr(s, src, None) for src, dst in SAMPLER_FIELDS}
        summary = TrackerSummary(**figures, mfu_note=mfu_note, notes=tuple(notes), **nvml, **base)
        return replace(summary, findings=tuple(run_rules(summary, ctx)))
