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
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Iterable, Iterator

from ..errors import InvalidArgument, require_positive_int, require_positive_number
from ._deps import float32_matmul_precision
from .rules import RuleContext
from .rules import findings as run_rules

DEFAULT_HISTORY = 10_000
"""Steps kept for summaries (~250 bytes each, ~2.5 MB): hours of training at a step per second; older steps drop
out of the window (the count of steps keeps going)."""

_MAX_FLOPS = 1e30
_MAX_TOKENS = 1 << 50

from .track_summary import SAMPLER_FIELDS, StepRecord, TrackerSummary  # noqa: F401 (the API)


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


def _cuda():
    """torch.cuda if torch is already imported and sees a GPU, else None (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda


def _resolve_gpu(gpu: Any) -> tuple[Any, int | None, str | None, str | None]:
    """(catalog GPU or None, index of the current CUDA device when torch sees one, why the peak is unknown, that
    device's name)."""
    from ..catalog.gpus import GPU, get_gpu
    from ..errors import UnknownGPUError

    cuda = _cuda()
    index = cuda.current_device() if cuda is not None else None
    name = cuda.get_device_name(index) if cuda is not None else None
    if isinstance(gpu, GPU):
        return gpu, index, None, name
    if gpu is not None:
        return get_gpu(gpu), index, None, name  # a name the user typed: unknown raises UnknownGPUError
    if cuda is None:
        return None, None, ("MFU unknown: no gpu= given and torch sees no CUDA device (or torch is not imported "
                            "yet); pass gpu=..."), None
    try:
        return get_gpu(name), index, None, name
    except UnknownGPUError:
        return None, index, f"MFU unknown: {name} is not in the catalog; pass gpu=... (see `gpuwise gpus`)", name


def _same_gpu(g: Any, device_name: str) -> bool:
    from ..catalog.gpus import get_gpu
    from ..errors import UnknownGPUError

    try:
        return get_gpu(device_name).id == g.id
    except UnknownGPUError:
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
            from ._deps import require_torch

            torch = require_torch("Tracker(sync=True)")
            if torch.cuda.is_available():  # on CPU, work is synchronous: nothing to wait for
                self._sync = torch.cuda.synchronize
        self.synced = sync
        # Seconds at 100% of the job's peak: MFU = ideal / step time (one division per step).
        denom = peak_flops * world_size if peak_flops else None
        self._ideal_model_s = flops_per_step / denom if (denom and flops_per_step) else None
        self._ideal_hw_s = hardware_flops_per_step / denom if (denom and hardware_flops_per_step) else None
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

    # --- construction from a model ---------------------------------------------------------------------------

    @classmethod
    def for_model(cls, model: Any, *, seq: int, batch: int, world_size: int = 1, precision: str = "bf16",
                  recompute: str = "none", gpu: Any = None, micro_batch: int | None = None,
                  data_parallel: int | None = None, layout: dict | None = None, flops_convention: str = "causal",
                  nvml: bool | None = None, **kw: Any) -> Tracker:
        """A tracker whose FLOPs, tokens, peak and label come from gpuwise's model and GPU catalogs.

        model: catalog name, Hugging Face id, config.json path, or a catalog.models.LoadedModel.
        seq: tokens per sequence; batch: sequences per optimizer step per data-parallel rank;
        micro_batch: sequences per forward/backward (None: batch, no gradient accumulation);
        data_parallel: ranks that see different data (None: world_size, or world_size / (tp x pp x cp) of `layout`).
        precision / recompute: as in `gpuwise train` (the peak is the dense peak of the GEMM dtype; recompute adds
            hardware FLOPs, HFU's numerator).
        gpu: catalog id or name, or a catalog GPU; None: the current CUDA device's name (when torch is imported and
            sees one) looked up in the catalog; not found: MFU unknown, with the reason in the summary.
        layout: options of `gpuwise.api.train` for the job's parallel layout ({} for plain DDP, {"fsdp": "full"},
            {"tp": 8, "pp": 2}, ...): when given and the GPU is known, the predicted peak memory and step time
            (for the memory comparison and the communication rule). None: no prediction.
        nvml: sample the GPU with NVML in a background thread: None = when a CUDA device is visible and NVML
            works (else a note says why not), True = required, False = never.
        kw: the other Tracker options (clock, sync, sampler, history, ...).
        """
        from ..catalog.models import LoadedModel, load_model
        from ..estimate.flops import gemm_dtype, step_flops
        from ..estimate.job import CONVENTIONS, PRECISIONS, RECOMPUTE

        require_positive_int("seq", seq, 1 << 24)
        require_positive_int("batch", batch, 1 << 24)
        require_positive_int("world_size", world_size, 1 << 24)
        for name, value, valid in (("precision", precision, PRECISIONS), ("recompute", recompute, RECOMPUTE),
                                   ("flops_convention", flops_convention, CONVENTIONS)):
            if value not in valid:
                raise InvalidArgument(f"{name}: unknown value '{value}'; valid: {', '.join(valid)}")
        mb = batch if micro_batch is None else micro_batch
        require_positive_int("micro_batch", mb, batch)
        if batch % mb:
            raise InvalidArgument(f"micro_batch {mb} does not divide batch {batch}")
        if data_parallel is None:
            opts = layout or {}
            model_parallel = opts.get("tp", 1) * opts.get("pp", 1) * opts.get("cp", 1)
            if world_size % model_parallel:
                raise InvalidArgument(f"world_size {world_size} is not a multiple of tp x pp x cp = {model_parallel}")
            data_parallel = world_size // model_parallel
        require_positive_int("data_parallel", data_parallel, world_size)
        loaded = model if isinstance(model, LoadedModel) else load_model(model)
        global_batch = batch * data_parallel
        flops = step_flops(loaded.spec, seq=seq, global_batch=global_batch, convention=flops_convention,
                           recompute=recompute)

        g, cuda_index, reason, device_name = _resolve_gpu(gpu)
        peak = label = None
        if g is not None:
            dtype = gemm_dtype(g.peak_flops, precision)
            peak = g.peak(dtype)
            label = f"{g.name} ({g.id}) {dtype} dense"
            if peak is None:
                reason = f"MFU unknown: the catalog has no dense {dtype} peak for {g.name}"

        capacity = kw.pop("memory_capacity_bytes", None)
        if capacity is None and cuda_index is not None:
            capacity = _cuda().get_device_properties(cuda_index).total_memory  # the real device (MIG slices too)
        elif capacity is None and g is not None:
            capacity = g.memory_bytes
        predicted_mem = kw.pop("predicted_peak_memory_bytes", None)
        predicted_step = predicted_comm = None
        if layout is not None and g is not None:
            from ..api import train

            r = train(loaded, gpu=g, num_gpus=world_size, seq=seq, global_batch=global_batch, micro_batch=mb,
                      precision=precision, recompute=recompute, flops_convention=flops_convention, **layout)
            if predicted_mem is None:  # less the CUDA context, cuBLAS workspace and NCCL buffers torch does not see
                predicted_mem = int(r.memory.torch_reserved)
            predicted_step = r.perf.step.step_time_s
            predicted_comm = sum(v for k, v in r.perf.step.breakdown.items() if k.endswith("_comm"))

        context = kw.pop("context", None) or RuleContext(
            world_size=world_size, precision=precision, recompute=recompute,
            gpu_name=g.name if g is not None else None,
            memory_bandwidth_bytes_per_s=g.memory_bandwidth_bytes_per_s if g is not None else None,
            fp32_peak_flops_per_gpu=g.peak("fp32") if g is not None else None,
            bf16_peak_flops_per_gpu=g.peak("bf16") if g is not None else None,
            tokens_per_microbatch_per_gpu=seq * mb, predicted_step_time_s=predicted_step,
            predicted_comm_s=predicted_comm)

        notes = []
        if gpu is not None and device_name is not None and g is not None and not _same_gpu(g, device_name):
            notes.append(f"the MFU peak is for gpu={g.id}, but this process runs on {device_name}")
        sampler = kw.pop("sampler", None)
        optional = False
        if sampler is None and (nvml or (nvml is None and cuda_index is not None)):
            try:
                from .sampler import NvmlSampler

                sampler = NvmlSampler(cuda_index=cuda_index if cuda_index is not None else 0)
                optional = not nvml
            except Exception as e:  # noqa: BLE001 - any NVML failure; reported in the summary, not hidden
                if nvml:
                    raise
                notes.append(f"NVML not sampled: {' '.join(str(e).split()) or type(e).__name__}")
        elif sampler is None and nvml is None:
            notes.append("NVML not sampled: no CUDA device visible to torch")
        t = cls(flops_per_step=flops.model, hardware_flops_per_step=flops.hardware, tokens_per_step=flops.tokens,
                peak_flops=peak, peak_label=label, unknown_peak_reason=reason, world_size=world_size,
                sampler=sampler, memory_capacity_bytes=capacity, predicted_peak_memory_bytes=predicted_mem,
                context=context, **kw)
        t._sampler_optional = optional
        t.notes.extend(notes)
        return t

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
        ok = step_s > 0
        tps = tokens / step_s if (tokens is not None and ok) else None
        mfu = self._ideal_model_s / step_s if (self._ideal_model_s is not None and ok) else None
        hfu = self._ideal_hw_s / step_s if (self._ideal_hw_s is not None and ok) else None
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
            cuda = _cuda()
            self._probe = (lambda: (cuda.max_memory_allocated(), cuda.max_memory_reserved())) if cuda else None
            self._probe_resolved = True
        got = self._probe() if self._probe is not None else None
        return (None, None) if got is None else (got[0], got[1])

    def _capacity(self) -> int | None:
        if self.memory_capacity_bytes is None:
            cuda = _cuda()
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
        n = len(window)
        times = [r.step_time_s for r in window]
        total = math.fsum(times)
        mean = total / n
        waits = math.fsum(r.data_wait_s for r in window)
        tokens = [r.tokens for r in window]
        if all(t is not None for t in tokens):
            total_tokens = sum(tokens)
            tokens_per_step = total_tokens / n
            tps = total_tokens / total if total > 0 else None
        else:
            tokens_per_step = tps = None
            notes.append("tokens unknown for some steps: pass tokens= to each step or tokens_per_step=")
        ok = mean > 0
        nvml = {}
        if self._marks is not None and self._sampler_started:
            s = self.sampler.summary(since=self._marks[start])
            nvml = {dst: getattr(s, src, None) for src, dst in SAMPLER_FIELDS}
        summary = TrackerSummary(
            steps=n, step_time_median_s=statistics.median(times), step_time_mean_s=mean, step_time_min_s=min(times),
            step_time_max_s=max(times), data_wait_mean_s=waits / n,
            data_wait_share=waits / total if total > 0 else None,
            tokens_per_step=tokens_per_step, tokens_per_s=tps,
            tokens_per_s_per_gpu=tps / self.world_size if tps is not None else None,
            mfu=self._ideal_model_s / mean if (self._ideal_model_s is not None and ok) else None,
            hfu=self._ideal_hw_s / mean if (self._ideal_hw_s is not None and ok) else None,
            mfu_note=mfu_note, notes=tuple(notes), **nvml, **base)
        return replace(summary, findings=tuple(run_rules(summary, ctx)))
