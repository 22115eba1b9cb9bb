"""Device and network profiles: what a GPU achieves, not what its datasheet promises.

A `DeviceProfile` joins a catalog GPU's datasheet (dense peak per dtype, DRAM bandwidth, SM count) with the
fractions of it that real kernels reach: large-GEMM efficiency per dtype, copy-bandwidth efficiency, flash
attention efficiency forward and backward, and the smallest time a kernel takes. Defaults come from
`data/devices.toml`, where every number carries its public measurement; a measured profile (JSON written by
`gpuwise calibrate`, or by hand) overrides any of them with `--profile FILE`.

A `Network` gives the two levels of a cluster: inside a node (NVLink/NVSwitch, or PCIe) and across nodes (the
NIC bandwidth per GPU), with the bus bandwidth NCCL reaches on each, and the per-collective latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from ..errors import InvalidArgument, require_positive_number
from ..jsonfile import read_json_object
from ..units import GB
from ._toml import load_toml
from .attention_kernels import FAMILIES
from .gpus import GPU, get_gpu
from .power import clock_factor

PROFILE_KIND = "gpuwise-device-profile"
SIXTEEN_BIT_FALLBACK = {"bf16": ("fp16", "fp32"), "fp16": ("bf16", "fp32")}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DeviceProfile:
    """Compared and hashed by identity (it keys the kernel-time caches)."""

    gpu: GPU
    matmul_efficiency: dict[str, float]
    """Achievable fraction of the dense peak for large GEMMs, per dtype key of `GPU.peak_flops`."""
    matmul_shape_efficiency: float = 1.0
    """What a language model's GEMMs reach of the best-shape rate beyond tile and wave quantization, relative to
    Hopper's: the median over training shapes of modelled / measured time, over Hopper's median (devices.toml
    `matmul_shape_efficiency`; 1: none applied). It multiplies the GEMM rate."""
    memory_efficiency: float
    """Achievable fraction of the DRAM bandwidth for streaming kernels (copies, elementwise)."""
    matmul_memory_efficiency: float | None = None
    """The fraction of the DRAM bandwidth a memory-bound GEMM (decode: a few rows against every weight) streams its
    operands at beyond its fixed time (`gemm_overhead_s`), measured on cuBLAS (devices.toml); None:
    `memory_efficiency`."""
    gemm_overhead_s: float | None = None
    """Fixed time of one GEMM kernel (a line fitted to one-row GEMM time against bytes: its intercept, devices.toml
    `gemm_overhead_us`); None: `kernel_overhead_s`."""
    attention_forward_efficiency: float
    """Flash-style attention forward FLOP/s as a fraction of the 16-bit dense peak."""
    attention_backward_efficiency: float
    sdpa_forward_efficiency: float
    """PyTorch's scaled_dot_product_attention (its flash backend runs FlashAttention-2 kernels, as the flash-attn 2
    package does): what PyTorch-native trainers get, where the best kernel (above) is Transformer Engine's."""
    sdpa_backward_efficiency: float
    attention_kernel: str = "fa2"
    """Kernel family of the device's best attention (`attention_kernels.FAMILIES`): how its throughput falls at short
    sequences (the efficiencies above are its long-sequence plateau)."""
    sdpa_kernel: str = "fa2"
    """The family PyTorch's SDPA runs here: FlashAttention-2 kernels on Hopper and older; where the profile gives
    no SDPA rates of its own (Blackwell), the device's best kernel, whose rates it then uses."""
    flash_attn_forward_efficiency: float | None = None
    """The flash-attn package (Dao-AILab's flash_attn: transformers' attn_implementation="flash_attention_2",
    Axolotl's flash_attention) where it differs from SDPA's flash backend: on ROCm the package is its Composable Kernel
    build while SDPA's flash backend runs AOTriton (devices.toml, CDNA 3). None: SDPA's figures (on CUDA both run the
    FlashAttention-2 kernels)."""
    flash_attn_backward_efficiency: float | None = None
    """The same for the flash-attn package's backward; None: `sdpa_backward_efficiency`."""
    paged_decode_efficiency: float | None = None
    """Fraction of the DRAM bandwidth a paged-KV decode attention kernel streams the cache at (FlashAttention's paged
    decode, the kernel vLLM and SGLang run); None: the streaming `memory_efficiency` (no measurement)."""
    kernel_overhead_s: float
    """Smallest GPU time of one kernel (launch latency, ramp-up and tail), added once per kernel."""
    tile: tuple[int, int]
    """Output tile (rows, cols) of one thread block of the large GEMM kernels (tile/wave quantization)."""
    fused_moe_call_s: float | None = None
    """One fused-MoE call (vLLM's and SGLang's Triton fused_moe) at decode sizes beyond streaming its experts'
    weights, measured (devices.toml `fused_moe_call_us`); None: no measurement."""
    host_copy_bytes_per_s: float | None = None
    """Measured pinned host-to-device bytes/s (`gpuwise calibrate`); None: the PCIe line rate x host_copy_efficiency."""
    sources: dict[str, str] = field(default_factory=dict)
    """Field -> where the number comes from (a public measurement, an architecture default, a profile file)."""

    @property
    def bandwidth(self) -> float:
        """Achievable DRAM bytes/s (0 when the datasheet gives none: callers check `known`)."""
        return (self.gpu.memory_bandwidth_bytes_per_s or 0.0) * self.memory_efficiency

    @property
    def gemm_fixed_s(self) -> float:
        """Fixed time of one GEMM kernel (`kernel_overhead_s` where none was measured)."""
        return self.kernel_overhead_s if self.gemm_overhead_s is None else self.gemm_overhead_s

    @property
    def gemm_bandwidth(self) -> float:
        """Achievable DRAM bytes/s of a memory-bound GEMM (`bandwidth` where none was measured)."""
        if self.matmul_memory_efficiency is None:
            return self.bandwidth
        return (self.gpu.memory_bandwidth_bytes_per_s or 0.0) * self.matmul_memory_efficiency

    @property
    def paged_decode_bandwidth(self) -> float:
        """Achievable bytes/s of a paged-KV decode attention kernel (`bandwidth` where none was measured)."""
        if self.paged_decode_efficiency is None:
            return self.bandwidth
        return (self.gpu.memory_bandwidth_bytes_per_s or 0.0) * self.paged_decode_efficiency

    def matmul_flops(self, dtype: str) -> float | None:
        """Achievable large-GEMM FLOP/s in `dtype`, or None when the GPU has no such peak. A 16-bit type the catalog
        gives no peak for runs at the other 16-bit type's, else at fp32's (Apple's GPUs: fp32 only), never free."""
        key = dtype
        if self.gpu.peak_flops.get(key) is None and dtype in SIXTEEN_BIT_FALLBACK:
            key = next((d for d in SIXTEEN_BIT_FALLBACK[dtype] if self.gpu.peak_flops.get(d)), dtype)
        peak = self.gpu.peak_flops.get(key)
        if peak is None:
            return None
        return peak * self.matmul_efficiency.get(key, self.matmul_efficiency["default"]) * self.matmul_shape_efficiency


@lru_cache(maxsize=1)
def _data() -> dict:
    return load_toml("devices.toml")


def _merge(into: dict, row: dict, origin: str, sources: dict[str, str]) -> None:
    """`row`'s figures over `into`'s, each with its source: the row's `sources` table for that key (a matmul
    efficiency's as "matmul_efficiency.<dtype>"), else the row's `source`, else `origin`."""
    own = row.get("sources", {})
    for key, value in row.items():
        if key in ("source", "sources", "note"):
            continue
        if key == "matmul_efficiency":
            into.setdefault(key, {}).update(value)
            for dt in value:
                key_dt = f"matmul_efficiency.{dt}"
                sources[key_dt] = own.get(key_dt, row.get("source", origin))
        else:
            into[key] = value
            sources[key] = own.get(key, row.get("source", origin))


SEGMENTS = ("consumer", "workstation", "datacenter")
"""`GPU.segment` values a [architecture.<name>.<segment>] table of devices.toml may key."""

_DEFAULTS: dict[tuple[str, float | None], DeviceProfile] = {}


def default_profile(gpu: GPU) -> DeviceProfile:
    """The profile gpuwise assumes for a catalog GPU: generic < architecture < this GPU's own measurements (or those
    of the sibling on its die, `same_die_as`), with compute slowed to the board power it may draw (`power.py`)."""
    key = (gpu.id, gpu.power_limit_w)
    hit = _DEFAULTS.get(key)
    if hit is None:
        hit = _DEFAULTS[key] = _default_profile(gpu)
    return hit


def _default_profile(gpu: GPU) -> DeviceProfile:
    data = _data()
    values: dict = {}
    sources: dict[str, str] = {}
    _merge(values, data["generic"], "generic default (no public measurement for this architecture)", sources)
    archs = data.get("architecture", {})
    arch = dict(archs.get(gpu.architecture_family) or {})
    # a segment's own figures within an architecture ([architecture.<name>.consumer]: GeForce cards, whose figures
    # differ from the data-center parts' of the same SM generation), over the architecture's
    segment = {s: arch.pop(s) for s in SEGMENTS if isinstance(arch.get(s), dict)}.get(gpu.segment)
    like = arch.pop("like", None)  # an architecture without measurements of its own takes a sibling's
    if like:
        base = {k: v for k, v in archs[like].items() if k not in SEGMENTS}
        _merge(values, {**base, "source": f"{base['source']} (taken for {gpu.architecture_family}: {arch['source']})"},
               f"{like} default", sources)
    if arch:
        _merge(values, arch, f"{gpu.architecture_family} default", sources)
    if segment:
        _merge(values, segment, f"{gpu.architecture_family} {gpu.segment} default", sources)
    own = dict(data.get("gpu", {}).get(gpu.id) or {})
    measured_at_w = gpu.tdp_w  # the board power its own measurements ran at
    sibling = own.pop("same_die_as", None)
    parent = gpu.extra.get("mig_parent")  # a MIG slice: its card's measured fractions of its pro-rata peaks
    if sibling:
        measured_at_w = get_gpu(sibling).tdp_w
        _merge(values, data["gpu"][sibling], f"{sibling} measurement", sources)
    elif parent and parent in data.get("gpu", {}):
        parent_row = {k: v for k, v in data["gpu"][parent].items() if k != "same_die_as"}
        _merge(values, parent_row, f"{parent} measurement", sources)
    if own:
        _merge(values, own, f"{gpu.id} measurement", sources)
    profile = _build(gpu, values, sources)
    return _at_power(profile, gpu.power_w, measured_at_w)


def _at_power(profile: DeviceProfile, power_w: float | None, measured_at_w: float | None) -> DeviceProfile:
    """`profile` with its compute-bound rates (matrix products, attention) scaled by the SM clock the board reaches
    at `power_w` against the `measured_at_w` its figures were measured at; bandwidth and launch cost unchanged."""
    f = clock_factor(power_w, measured_at_w)
    if f == 1.0:
        return profile
    note = f"x {f:.3f}: SM clock at {power_w:g} W of the {measured_at_w:g} W measured at (catalog/power.py)"
    sources = dict(profile.sources)
    for k in [k for k in sources
              if k.startswith(("matmul_efficiency.", "sdpa", "flash_attn")) or "attention" in k]:
        sources[k] = f"{sources[k]}; {note}"
    sources["power"] = note
    return replace(profile, matmul_efficiency={k: v * f for k, v in profile.matmul_efficiency.items()},
                   attention_forward_efficiency=profile.attention_forward_efficiency * f,
                   attention_backward_efficiency=profile.attention_backward_efficiency * f,
                   sdpa_forward_efficiency=profile.sdpa_forward_efficiency * f,
                   sdpa_backward_efficiency=profile.sdpa_backward_efficiency * f,
                   flash_attn_forward_efficiency=_scaled(profile.flash_attn_forward_efficiency, f),
                   flash_attn_backward_efficiency=_scaled(profile.flash_attn_backward_efficiency, f), sources=sources)


def _scaled(value: float | None, f: float) -> float | None:
    return None if value is None else value * f


def _optional(v: dict, key: str) -> float | None:
    return float(v[key]) if key in v else None


def _build(gpu: GPU, v: dict, sources: dict[str, str]) -> DeviceProfile:
    return DeviceProfile(
        gpu=gpu, matmul_efficiency=dict(v["matmul_efficiency"]), memory_efficiency=float(v["memory_efficiency"]),
        matmul_shape_efficiency=float(v.get("matmul_shape_efficiency", 1.0)),
        matmul_memory_efficiency=(float(v["matmul_memory_efficiency"]) if "matmul_memory_efficiency" in v else None),
        gemm_overhead_s=(float(v["gemm_overhead_us"]) * 1e-6 if "gemm_overhead_us" in v else None),
        attention_forward_efficiency=float(v["attention_forward_efficiency"]),
        attention_backward_efficiency=float(v["attention_backward_efficiency"]),
        sdpa_forward_efficiency=float(v.get("sdpa_forward_efficiency", v["attention_forward_efficiency"])),
        sdpa_backward_efficiency=float(v.get("sdpa_backward_efficiency", v["attention_backward_efficiency"])),
        attention_kernel=_family("attention_kernel", v.get("attention_kernel", "fa2")),
        sdpa_kernel=_family("sdpa_kernel", v.get("sdpa_kernel", "fa2") if "sdpa_forward_efficiency" in v
                            else v.get("attention_kernel", "fa2")),
        flash_attn_forward_efficiency=_optional(v, "flash_attn_forward_efficiency"),
        flash_attn_backward_efficiency=_optional(v, "flash_attn_backward_efficiency"),
        paged_decode_efficiency=_optional(v, "paged_decode_efficiency"),
        kernel_overhead_s=float(v["kernel_overhead_us"]) * 1e-6, tile=tuple(v["tile"]), sources=dict(sources),
        fused_moe_call_s=float(v["fused_moe_call_us"]) * 1e-6 if "fused_moe_call_us" in v else None,
        host_copy_bytes_per_s=None)


def _family(name: str, value: object) -> str:
    if value not in FAMILIES:
        raise InvalidArgument(f"profile: {name} must be one of {', '.join(FAMILIES)}, got {value!r}")
    return str(value)


MIN_EFFICIENCY = 1e-6
"""The smallest share of a peak a profile may claim: a millionth. A CPU's calibration read against an H100's peak is
about 2e-4 (tests/measure/test_calibrate.py applies one on purpose), while 5e-324 (a fuzzed file) made every time
infinite and the JSON NaN (issue 21); a millionth keeps every time finite."""


def _fraction(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_EFFICIENCY <= value <= 1:
        raise InvalidArgument(f"profile: {name} must be a fraction in [{MIN_EFFICIENCY}, 1], got {value!r}")
    return float(value)


def _number(name: str, value: object, upper: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < upper:
        raise InvalidArgument(f"profile: {name} must be a number in (0, {upper:g}), got {value!r}")
    return float(value)


def _table(doc: dict, key: str) -> dict:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"profile: {key} must be an object {{dtype: number}}, got {type(value).__name__}")
    return value


def load_profile(path: str | Path, gpu: GPU) -> DeviceProfile:
    """A device profile file (JSON) applied over the defaults of `gpu`.

    Keys (all optional; see docs/performance.md): `matmul_efficiency` {dtype: fraction} or `matmul_tflops`
    {dtype: TFLOP/s} (the best-shape rate), `matmul_shape_efficiency`, `memory_efficiency` or
    `memory_bandwidth_gb_s`, `matmul_memory_efficiency` or `gemm_bandwidth_gb_s` and `gemm_overhead_us` (a one-row
    GEMM's line), `attention_forward_efficiency`,
    `attention_backward_efficiency`, `sdpa_forward_efficiency`, `sdpa_backward_efficiency`,
    `flash_attn_forward_efficiency`, `flash_attn_backward_efficiency`, `paged_decode_efficiency`,
    `attention_kernel`
    (fa2, cudnn or fa3), `kernel_overhead_us`, `host_to_device_gb_s` (pinned), and `network`
    {intra_node_busbw_gb_s, inter_node_busbw_gb_s, intra_node_latency_us, inter_node_latency_us}. Measured absolute figures are divided by the catalog
    peak. A profile that names the catalog `gpu` it was measured on applies to that GPU only.
    """
    doc = _read_profile(str(path))
    network_overrides(path)  # the whole file is checked, whether or not this command uses its network section
    measured_on = doc.get("gpu")
    if measured_on is not None and measured_on != gpu.id:
        raise InvalidArgument(f"--profile: {Path(path).name} was measured on {measured_on}, not {gpu.id} "
                              f"(use --gpu {measured_on}, or calibrate this GPU)")
    base = default_profile(gpu)
    origin = f"profile {Path(path).name}"
    sources = dict(base.sources)
    eff = dict(base.matmul_efficiency)
    for dt, frac in _table(doc, "matmul_efficiency").items():
        eff[dt] = _fraction(f"matmul_efficiency.{dt}", frac)
        sources[f"matmul_efficiency.{dt}"] = origin
    for dt, tflops in _table(doc, "matmul_tflops").items():
        peak = gpu.peak_flops.get(dt)
        if peak is None:
            raise InvalidArgument(f"--profile: {gpu.name} has no {dt} peak in the catalog to compare with")
        eff[dt] = _fraction(f"matmul_tflops.{dt} / peak", _number(f"matmul_tflops.{dt}", tflops, 1e5) * 1e12 / peak)
        sources[f"matmul_efficiency.{dt}"] = origin
    changes: dict = {"matmul_efficiency": eff}
    if "memory_bandwidth_gb_s" in doc:
        if not gpu.memory_bandwidth_bytes_per_s:
            raise InvalidArgument(f"--profile: {gpu.name} has no datasheet bandwidth to compare with")
        changes["memory_efficiency"] = _fraction("memory_bandwidth_gb_s / datasheet",
                                                 _number("memory_bandwidth_gb_s", doc["memory_bandwidth_gb_s"], 1e5)
                                                 * GB / gpu.memory_bandwidth_bytes_per_s)
    for key in ("memory_efficiency", "attention_forward_efficiency", "attention_backward_efficiency",
                "sdpa_forward_efficiency", "sdpa_backward_efficiency", "flash_attn_forward_efficiency",
                "flash_attn_backward_efficiency", "paged_decode_efficiency", "matmul_shape_efficiency",
                "matmul_memory_efficiency"):
        if key in doc:
            changes[key] = _fraction(key, doc[key])
    if "gemm_bandwidth_gb_s" in doc:  # a measured GEMM line's streaming rate (`gpuwise calibrate`)
        if "matmul_memory_efficiency" in doc:
            raise InvalidArgument("--profile: gemm_bandwidth_gb_s and matmul_memory_efficiency both set: they are the "
                                  "same figure (give one)")
        if not gpu.memory_bandwidth_bytes_per_s:
            raise InvalidArgument(f"--profile: {gpu.name} has no datasheet bandwidth to compare with")
        changes["matmul_memory_efficiency"] = _fraction(
            "gemm_bandwidth_gb_s / datasheet",
            _number("gemm_bandwidth_gb_s", doc["gemm_bandwidth_gb_s"], 1e5) * GB / gpu.memory_bandwidth_bytes_per_s)
    if "memory_efficiency" in changes and "matmul_memory_efficiency" not in changes:
        changes["matmul_memory_efficiency"] = None  # the measured bandwidth stands for the GEMMs' streaming too
    for key in ("attention_kernel", "sdpa_kernel"):
        if key in doc:
            changes[key] = _family(key, doc[key])
    if "kernel_overhead_us" in doc:
        changes["kernel_overhead_s"] = _microseconds("kernel_overhead_us", doc["kernel_overhead_us"])
        changes["gemm_overhead_s"] = None  # a measured launch cost stands for the GEMMs' fixed time too
    if "gemm_overhead_us" in doc:
        changes["gemm_overhead_s"] = _microseconds("gemm_overhead_us", doc["gemm_overhead_us"])
    if "host_to_device_gb_s" in doc:
        require_positive_number("--profile: host_to_device_gb_s", doc["host_to_device_gb_s"], 1e4)
        changes["host_copy_bytes_per_s"] = float(doc["host_to_device_gb_s"]) * GB
    for key in changes:
        if key != "matmul_efficiency":
            sources[_CATALOG_KEY.get(key, key)] = origin
    changes["sources"] = sources
    return replace(base, **changes)


_CATALOG_KEY = {"gemm_overhead_s": "gemm_overhead_us", "kernel_overhead_s": "kernel_overhead_us",
                "host_copy_bytes_per_s": "host_to_device_gb_s"}
"""Profile fields whose `sources` key is the devices.toml name (microseconds, GB/s) rather than the field's own."""


PROFILE_MAX_US = 1e4
"""The largest fixed time per kernel a profile may give (microseconds, exclusive)."""


def _microseconds(name: str, us: object) -> float:
    """A profile's fixed time in microseconds, as seconds: [0, PROFILE_MAX_US)."""
    if isinstance(us, bool) or not isinstance(us, (int, float)) or not 0 <= us < PROFILE_MAX_US:
        raise InvalidArgument(f"profile: {name} must be in [0, {PROFILE_MAX_US:g}), got {us!r}")
    return us * 1e-6


def _read_profile(path: str) -> dict:
    return read_json_object(path, "--profile")


def network_overrides(path: str | Path | None) -> dict:
    """The `network` section of a profile file ({} when none)."""
    if path is None:
        return {}
    net = _read_profile(str(path)).get("network") or {}
    if not isinstance(net, dict):
        raise InvalidArgument("--profile: `network` must be an object")
    for key in ("intra_node_busbw_gb_s", "inter_node_busbw_gb_s", "intra_node_latency_us", "inter_node_latency_us"):
        if key in net:
            require_positive_number(f"--profile: network.{key}", net[key], 1e5)
            if key.endswith("busbw_gb_s") and net[key] < 0.01:  # 10 MB/s: no GPU link is slower
                raise InvalidArgument(f"--profile: network.{key} = {net[key]!r} GB/s is no GPU interconnect")
    return net


def network_defaults() -> dict:
    return _data()["network"]


def host_op_time_ratio(gpu: GPU) -> float:
    """Host time per framework operation on the CPU that drives `gpu`, relative to the x86 servers gpuwise's
    host-latency figures were measured on (data/devices.toml [host]): 2.75 on Grace (GB200, GB300), 1 elsewhere."""
    return float(_data()["host"]["op_time_ratio"][gpu.host_cpu or "x86"])


ASSUMED_PCIE_GEN = 4
"""PCIe generation taken where the catalog gives none (the common one in today's servers); said where used."""


def pcie_x16_bytes_per_s(gpu: GPU, *, assume: bool = False) -> float | None:
    """PCIe x16 line rate in one direction for the GPU's PCIe generation (data/devices.toml `pcie_x16_gb_s`).

    None when the catalog has no generation for the GPU (or one the table lacks), unless `assume`: then the rate of
    `ASSUMED_PCIE_GEN`, for models that must put a number on a link (communication over PCIe, offload)."""
    table = network_defaults()["pcie_x16_gb_s"]
    gen = gpu.pcie_gen if gpu.pcie_gen is not None and str(gpu.pcie_gen) in table else None
    if gen is None and assume:
        gen = ASSUMED_PCIE_GEN
    return float(table[str(gen)]) * GB if gen is not None else None


def host_copy_bytes_per_s(profile: DeviceProfile) -> float:
    """Host <-> device bytes/s of pinned copies: the profile's measurement (`gpuwise calibrate`), else the PCIe line
    rate x `host_copy_efficiency` (data/devices.toml)."""
    if profile.host_copy_bytes_per_s:
        return profile.host_copy_bytes_per_s
    net = network_defaults()
    return pcie_x16_bytes_per_s(profile.gpu, assume=True) * float(net["host_copy_efficiency"])


def device_profile(gpu: GPU, path: str | None) -> DeviceProfile:
    """The profile a request runs with: the measured one in `path` (`--profile`), else the catalog default. A GPU
    whose memory bandwidth or 16-bit (or fp32) matrix peak is unknown has no speed to predict: refused, rather than
    costing its matrix products as free."""
    if path and gpu.power_limit_w:
        raise InvalidArgument("--power-limit with --profile: a measured profile already ran at the card's power limit "
                              "of its day; calibrate under the limit instead (`nvidia-smi -pl W`, then `gpuwise "
                              "calibrate`)")
    profile = load_profile(path, gpu) if path else default_profile(gpu)
    missing = speed_figures_missing(gpu)
    if missing:
        raise InvalidArgument(f"{gpu.name}: its {missing} {'is' if ' and ' not in missing else 'are'} not known, so "
                              "its speed cannot be predicted; `gpuwise fit` answers memory alone (a GPU the catalog "
                              "lacks: describe it in a user catalog, docs/catalogs.md)")
    return profile


def speed_figures_missing(gpu: GPU) -> str | None:
    """What a speed prediction needs that the catalog does not give for `gpu` (None: nothing): the DRAM bandwidth,
    and a dense matrix peak in a 16-bit type or fp32."""
    missing = []
    if not gpu.memory_bandwidth_bytes_per_s:
        missing.append("memory bandwidth")
    if not any(gpu.peak(d) for d in ("bf16", "fp16", "fp32")):
        missing.append("matrix FLOP/s peak")
    return " and ".join(missing) or None


@lru_cache(maxsize=1)
def _prices() -> dict:
    return load_toml("rental.toml")


def rental_price(gpu: GPU) -> tuple[float | None, str]:
    """(USD per GPU-hour, where it comes from) for on-demand rental; (None, why) when unknown."""
    data = _prices()
    row = data["price"].get(gpu.id)
    if row is None:
        return None, "no rental price in the catalog (pass --usd-per-gpu-hour)"
    source = data["sources"].get(row["source"], row["source"])
    note = f" ({row['note']})" if row.get("note") else ""
    return float(row["usd_per_hour"]), f"{row['source']}{note}: {source}"
