"""How sure a step-time or memory prediction is: the error band of its category on published runs gpuwise was not
tuned on.

`validation/speed.py` scores gpuwise against published training runs (validation/speed_sources/) split once into a
calibration part and a held-out part, and writes what the held-out part says into
`catalog/data/speed_validation.toml` (`python -m validation.speed --write-bands`): per category the number of
held-out runs, the median and 90th percentile of |error| and the median signed error, plus what the scored runs
cover (GPUs, precisions, frameworks, largest degrees). A prediction reports its category's band and says plainly
where its configuration lies outside everything validated.

The category rule is the one the sources' README states (most specific first), and `validation/speed.py` checks
every row against it.

Memory likewise: `validation/memory.py --write-bands` writes `catalog/data/memory_validation.toml` from the held-out
part of validation/memory_sources/, per framework family (`memory_category`): the median and 90th percentile of
|error| of the peak per GPU, the median signed error, and how many of the held-out ran / out-of-memory verdicts
were right.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..catalog._toml import load_toml
from ..estimate.job import HF_TRAINERS
from ..model.spec import LINEAR_MIXER_NAMES

CATEGORY_NAMES = {
    "moe_ep": "MoE",
    "context_parallel": "context parallel at >= 32K tokens",
    "amd": "AMD Instinct",
    "blackwell": "Blackwell",
    "fp8": "FP8 on Hopper",
    "megatron_3d": "Megatron TP/PP",
    "dense_fsdp": "dense data-parallel / FSDP",
}
LONG_CONTEXT = 32768
MIN_ROWS = 3
"""A category's own band needs this many held-out runs; below it the band of all held-out runs is used."""
ATTENTION_DOMINATED = 0.5
"""Share of a step's forward FLOPs in the attention core (scores and values) from which a prediction also answers to
the band of the held-out runs that share it (`[held_out.attention_dominated]`), and reports that band when it is
wider than its category's. Such steps spend most of their time in the flash-attention kernels, whose speed moved with
their software more than anything gpuwise prices: held-out runs of 2024 stacks (NeMo 24.03's long-sequence Llama-2-7B)
ran 18-21% slower than predicted, calibration runs of 2026 stacks (DeepSpeed with FlashAttention-3 / -4 at 64K-256K)
13-20% faster, and gpuwise's own H100 run measured cuDNN 9.19 6-16% above the mid-2024 cuDNN rates the profiles
carry, at the same clock (docs/performance.md, "Attention-dominated steps"). A dense data-parallel category's band
(6% typical) would understate that."""


def speed_category(*, moe: bool, cp: int, seq: int, vendor: str, architecture: str, precision: str,
                   framework: str, tp: int, pp: int) -> str:
    """The validation category of a training configuration (speed_sources/README.md, most specific first)."""
    if moe:
        return "moe_ep"
    if cp > 1 and seq >= LONG_CONTEXT:
        return "context_parallel"
    if vendor == "amd":
        return "amd"
    if architecture.startswith("Blackwell"):
        return "blackwell"
    if precision == "fp8":
        return "fp8"
    if framework == "megatron" and max(tp, pp) > 1:
        return "megatron_3d"
    return "dense_fsdp"


@lru_cache(maxsize=2)
def _bands(name: str = "speed_validation.toml") -> dict:
    return load_toml(name)


def _band(held_out: dict, category: str) -> tuple[dict, bool]:
    """(the band a category reports, whether it is its own): its own with MIN_ROWS held-out runs, else all's."""
    own = held_out.get(category)
    return (own, True) if own and own["runs"] >= MIN_ROWS else (held_out["all"], False)


@dataclass(frozen=True, slots=True)
class SpeedConfidence:
    category: str
    runs: int
    """Held-out published runs the band comes from (of the category, or of all categories when it has too few)."""
    of_category: bool
    """The band is the category's own (False: all held-out runs, the category has fewer than MIN_ROWS)."""
    median_abs_error: float
    p90_abs_error: float
    bias: float
    """Median signed error of those runs (positive: they ran slower than predicted)."""
    outside: tuple[str, ...]
    """What in this configuration no scored published run covers."""
    attention_share: float = 0.0
    """Share of the step's forward FLOPs in the attention core."""
    error_range: tuple[float, float] | None = None
    """Lowest and highest signed error of the band's runs, where the band is the attention-dominated one (None: the
    category's band)."""

    def describe(self) -> str:
        name = CATEGORY_NAMES.get(self.category, self.category)
        where = f"{name}, {self.runs} held-out published runs" if self.of_category else \
            f"all {self.runs} held-out published runs; {name} has fewer than {MIN_ROWS}"
        if self.error_range is not None:
            low, high = self.error_range
            where = (f"attention-dominated steps, {self.runs} held-out published runs: "
                     f"{100 * self.attention_share:.0f}% of this step's FLOPs are attention, and such runs ranged "
                     f"from {100 * low:+.0f}% to {100 * high:+.0f}% with the software of their attention kernels")
        slower = f"; on them gpuwise was {100 * self.bias:.0f}% too fast (median)" if self.bias > 0.05 else \
            (f"; on them gpuwise was {100 * -self.bias:.0f}% too slow (median)" if self.bias < -0.05 else "")
        return (f"±{100 * self.median_abs_error:.0f}% typical, ±{100 * self.p90_abs_error:.0f}% for 9 in 10 "
                f"({where}{slower})")


HOST_BOUND_HOSTS = {
    "grace": "eager Megatron-Core MoE layers on a Grace host (no CUDA graph scope): the host's launches, which gpuwise "
             "does not price, can bound the step: two published eager DeepSeek-V3 runs on GB200 (2025 software, "
             "all-to-all dispatcher) took ~32 ms per layer and micro-batch whatever their kernels (1.8x and 3.1x the "
             "prediction), where 2026 ones with HybridEP came within 10% (docs/performance.md)",
}
"""Hosts on which eager Megatron-Core MoE training was published host-bound, with what the warning says. NVIDIA's
DeepSeek-V3 GB200 guide (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization @1d9edcf) calls its baseline
host-bound; it and the DGX Cloud v25.05 GB200 run (a different layout, precision and dispatcher) both spent
31.5-31.9 ms per layer and micro-batch. The eager Grace runs of 2026 (Kimi-K2 on GB300, Qwen3-30B-A3B on GB200,
HybridEP) came within 10%; x86 hosts: eager MoE runs were published within gpuwise's usual error."""

FP8_KERNEL_NAMES = {"te": "Transformer Engine", "compiled": "torchao's float8 under torch.compile",
                    "eager": "torchao's float8 without torch.compile"}


def speed_confidence(*, category: str, gpu: str, precision: str, framework: str, degrees: dict[str, int],
                     num_gpus: int, seq: int, finetune: str, power_limit_w: float | None = None,
                     optimizer: str = "adamw", fp8_kernels: str | None = None,
                     mixer: str | None = None, eager_moe_host: str | None = None,
                     attention_share: float = 0.0) -> SpeedConfidence:
    """`fp8_kernels`: under fp8, whose quantization kernels are priced (`step_time.fp8_quantize_kind`); `mixer`: a
    hybrid model's recurrent layers' kind (`LinearMixerSpec.kind`); `eager_moe_host`: the host CPU driving eager
    Megatron-Core MoE layers (no CUDA graph scope), named where host-bound runs were published (`HOST_BOUND_HOSTS`);
    `attention_share`: the step's forward FLOPs in the attention core over all its forward FLOPs
    (`ATTENTION_DOMINATED`)."""
    data = _bands()
    band, own = _band(data["held_out"], category)
    error_range = None
    attention = data["held_out"].get("attention_dominated")
    if (attention_share >= ATTENTION_DOMINATED and attention and attention["runs"] >= MIN_ROWS
            and attention["p90"] > band["p90"]):
        band, own, error_range = attention, True, (float(attention["low"]), float(attention["high"]))
    cov = data["covered"]
    outside = []
    if gpu not in cov["gpus"]:
        outside.append(f"GPU {gpu} (validated: {', '.join(cov['gpus'])})")
    if precision not in cov["precisions"]:
        outside.append(f"precision {precision}")
    if framework not in cov["frameworks"]:
        outside.append(f"framework {framework}")
    for dim, value in degrees.items():
        top = cov["max_degree"].get(dim, 1)
        if value > top:
            outside.append(f"{dim} {value} (largest validated {top})")
    if num_gpus > cov["max_gpus"]:
        outside.append(f"{num_gpus:,} GPUs (largest validated {cov['max_gpus']:,})")
    if seq > cov["max_seq"]:
        outside.append(f"sequence {seq:,} (longest validated {cov['max_seq']:,})")
    validated_limits = cov.get("power_limits", [])
    if power_limit_w and f"{gpu} at {power_limit_w:g} W" not in validated_limits:
        outside.append(f"a {power_limit_w:g} W power limit (validated: {', '.join(validated_limits) or 'none'})")
    if finetune not in cov.get("finetunes", ("full",)):
        outside.append(f"{finetune} fine-tuning (no published speed run)")
    if fp8_kernels and fp8_kernels not in cov.get("fp8_kernels", (fp8_kernels,)):
        outside.append(f"fp8 quantized by {FP8_KERNEL_NAMES.get(fp8_kernels, fp8_kernels)} (no published speed run; "
                       "priced from kernel measurements)")
    if mixer and mixer not in cov.get("mixers", ()):
        outside.append(f"{LINEAR_MIXER_NAMES.get(mixer, mixer)} layers (no published speed run; their scan priced from "
                       "kernel measurements)")
    if optimizer not in cov.get("optimizers", ("adamw",)):
        outside.append(f"optimizer {optimizer} (no published speed run)")
    if eager_moe_host in HOST_BOUND_HOSTS:
        outside.append(HOST_BOUND_HOSTS[eager_moe_host])
    return SpeedConfidence(category=category, runs=int(band["runs"]), of_category=own,
                           median_abs_error=float(band["median"]), p90_abs_error=float(band["p90"]),
                           bias=float(band["bias"]), outside=tuple(outside), attention_share=attention_share,
                           error_range=error_range)


MEMORY_CATEGORY_NAMES = {
    "hf_trainers": "HF Trainer / TRL / PEFT / Unsloth",
    "megatron_deepspeed": "Megatron-LM / NeMo / DeepSpeed",
    "pytorch_native": "torchtitan / FSDP / torchtune",
}


def memory_category(framework: str) -> str:
    """The memory band of a training configuration: the family of the framework whose memory rules apply (its
    gradient buffers, loss, checkpointing and allocator habits differ by family, not by model)."""
    if framework in ("megatron", "deepspeed"):
        return "megatron_deepspeed"
    if framework in HF_TRAINERS:
        return "hf_trainers"
    return "pytorch_native"


@dataclass(frozen=True, slots=True)
class MemoryConfidence:
    category: str
    runs: int
    """Held-out published measurements of the peak the band comes from (the category's, or all when it has too
    few)."""
    of_category: bool
    median_abs_error: float
    p90_abs_error: float
    bias: float
    """Median signed error of those measurements (negative: the published peaks were higher than predicted)."""
    verdicts: int
    """Held-out rows whose verdict (ran / out of memory) could be checked, in the band's rows."""
    wrong_verdicts: int
    outside: tuple[str, ...] = ()
    """What in this configuration no scored published memory measurement covers."""

    def describe(self) -> str:
        name = MEMORY_CATEGORY_NAMES.get(self.category, self.category)
        where = f"{name}, {self.runs} held-out published peaks" if self.of_category else \
            f"all {self.runs} held-out published peaks; {name} has fewer than {MIN_ROWS}"
        lean = f"; on them gpuwise was {100 * -self.bias:.0f}% low (median)" if self.bias < -0.05 else \
            (f"; on them gpuwise was {100 * self.bias:.0f}% high (median)" if self.bias > 0.05 else "")
        right = self.verdicts - self.wrong_verdicts
        return (f"±{100 * self.median_abs_error:.0f}% typical, ±{100 * self.p90_abs_error:.0f}% for 9 in 10 "
                f"({where}{lean}); fits / does not fit right on {right} of {self.verdicts} held-out runs")


def memory_confidence(framework: str, *, finetune: str = "full", precision: str = "bf16",
                      optimizer: str = "adamw", offload: tuple[str, ...] = ()) -> MemoryConfidence:
    """The band `gpuwise train` reports next to its memory table, and what no published measurement covers."""
    category = memory_category(framework)
    data = _bands("memory_validation.toml")
    band, own = _band(data["held_out"], category)
    cov = data["covered"]
    outside = [f"{what} {value} (no published memory measurement)"
               for what, value, key in (("framework", framework, "frameworks"), ("fine-tuning", finetune, "finetunes"),
                                        ("precision", precision, "precisions"), ("optimizer", optimizer, "optimizers"))
               if value not in cov[key]]
    outside += [f"offloading {t} (no published memory measurement)" for t in sorted(offload)
                if t not in cov["offloads"]]
    return MemoryConfidence(category=category, runs=int(band["runs"]), of_category=own,
                            median_abs_error=float(band["median"]), p90_abs_error=float(band["p90"]),
                            bias=float(band["bias"]), verdicts=int(band["verdicts"]),
                            wrong_verdicts=int(band["wrong_verdicts"]), outside=tuple(outside))


def train_memory_confidence(r) -> MemoryConfidence:
    """`memory_confidence` for a `TrainResult` (the framework, fine-tuning mode, precision, optimizer and offload
    targets it resolved)."""
    req = r.request
    return memory_confidence(r.framework, finetune=req.finetune, precision=req.precision, optimizer=req.optimizer,
                             offload=tuple(req.offload))
