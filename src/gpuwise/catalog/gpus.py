"""The GPU catalog: `data/gpus.toml` (built from shared/gpu_specs.csv, every row sourced) -> `GPU`.

Peaks are dense (no 2:4 sparsity) per dtype in FLOP/s; a dtype the source does not give is absent
(None), never 0. Memory capacity: what nvidia-smi reports when a real report was found
(`memory_mib_reported`), else the marketed size read as GiB, because DRAM capacities are binary (an
"80 GB" H100 carries 80 GiB of HBM3, of which nvidia-smi shows 81,559 MiB).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from ..errors import InvalidArgument, UnknownGPUError, suggest
from ..jsonfile import read_regular_text
from ..units import GB, GiB, MiB, TiB, fmt_gib, parse_size
from ._toml import load_toml, tomllib


@dataclass(frozen=True, slots=True)
class MIGProfile:
    name: str
    """NVIDIA's profile name, e.g. '1g.10gb'."""
    memory_gb: float
    """Memory of the slice as the profile name states it (GB as NVIDIA writes it; binary in practice)."""
    compute_fraction: float
    """Share of the GPU's compute slices (1g of 7 = 1/7; RTX PRO 6000 has 4 slices)."""
    max_instances: int | None

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gb * GiB)


@dataclass(frozen=True, slots=True)
class GPU:
    id: str
    name: str
    vendor: str
    segment: str
    memory_gb: float
    """As marketed (decimal label)."""
    memory_bytes: int
    """Capacity gpuwise plans with (see module docstring)."""
    memory_bytes_source: str
    """'nvidia-smi' or 'marketed GB read as GiB'."""
    memory_bandwidth_bytes_per_s: float | None
    peak_flops: dict[str, float]
    """Dense peak FLOP/s per dtype key (fp64, fp32, tf32, bf16, fp16, fp16_fp16acc, fp8, int8, fp4)."""
    architecture: str | None = None
    form_factor: str | None = None
    release_year: int | None = None
    memory_type: str | None = None
    l2_cache_bytes: int | None = None
    sm_count: int | None = None
    host_cpu: str | None = None
    """The CPU the GPU's processes run on: 'grace' (GB200, GB300 superchips), 'x86' or None (an x86 server, the
    hosts gpuwise's host-latency figures were measured on)."""
    interconnect: str | None = None
    interconnect_bytes_per_s: float | None = None
    """Per-GPU scale-up bandwidth, both directions together (NVLink total), bytes/s."""
    nvlink: bool = False
    pcie_gen: int | None = None
    tdp_w: float | None = None
    """Rated board power (W)."""
    power_limit_w: float | None = None
    """A lower board power limit the GPU runs under (`--power-limit`, `nvidia-smi -pl`; None: its rated power)."""
    ecc: bool | None = None
    mig_profiles: tuple[MIGProfile, ...] = ()
    price_usd: float | None = None
    price_note: str | None = None
    aliases: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    notes: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def power_w(self) -> float | None:
        """The board power it may draw: its power limit, else its rated power (None when neither is known)."""
        if self.power_limit_w and self.tdp_w:
            return min(self.power_limit_w, self.tdp_w)
        return self.tdp_w or self.power_limit_w

    def peak(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a dtype, or None when unknown."""
        return self.peak_flops.get(dtype)

    @property
    def architecture_family(self) -> str:
        """The architecture without its parenthesized detail ("Hopper", "Blackwell Ultra", "CDNA 3"); "" unknown."""
        return (self.architecture or "").split(" (")[0]


_VENDOR_WORDS = re.compile(r"\b(nvidia|geforce|tesla|amd|instinct|intel|google|apple)\b")


def _normalize(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", _VENDOR_WORDS.sub(" ", name.lower()))


APPLE_GPU_SHARE = ((36.0, 2 / 3), (float("inf"), 3 / 4))
"""macOS lets the GPU wire only part of unified memory (Metal's `recommendedMaxWorkingSetSize`, raised with
`sudo sysctl iogpu.wired_limit_mb`): by default about 2/3 of it up to 36 GB and 3/4 above, as measured and reported
(exo-explore/exo#1672: 10.67 GB of a 16 GB M4; gpustack/gpustack#1375: "75% of total RAM"; sgl-project/sglang#21443:
"typically ~65-75%"). Newer macOS may give more (antirez/ds4#893: 107.5 GiB of 128 on macOS 26): --gpu-memory says
what a given Mac has."""


def apple_gpu_share(memory_gb: float) -> float:
    return next(share for upto, share in APPLE_GPU_SHARE if memory_gb <= upto)


def _gpu_from_row(row: dict) -> GPU:
    tflops = row.get("peak_tflops", {}) or {}
    reported = row.get("memory_mib_reported")
    if reported:
        mem_bytes, mem_src = int(reported * MiB), "nvidia-smi"
    elif row.get("vendor") == "apple":
        share = apple_gpu_share(float(row["memory_gb"]))
        mem_bytes = int(float(row["memory_gb"]) * GiB * share)
        mem_src = (f"macOS's default GPU share of unified memory, {share:.0%} of {float(row['memory_gb']):g} GB "
                   "(raise it with sysctl iogpu.wired_limit_mb and pass --gpu-memory)")
    else:
        mem_bytes, mem_src = int(float(row["memory_gb"]) * GiB), "marketed GB read as GiB"
    bw = row.get("memory_bandwidth_gb_s")
    ic = row.get("interconnect_gb_s")
    l2 = row.get("l2_cache_mb")
    migs = tuple(
        MIGProfile(
            m["name"], float(m["memory_gb"]),
            m["compute_sevenths"] / 7 if "compute_sevenths" in m else m.get("compute_quarters", 0) / 4,
            m.get("max_instances"),
        )
        for m in row.get("mig_profiles", []) or []
    )
    return GPU(
        id=row["id"],
        name=row["name"],
        vendor=row.get("vendor", ""),
        segment=row.get("segment", ""),
        memory_gb=float(row["memory_gb"]),
        memory_bytes=mem_bytes,
        memory_bytes_source=mem_src,
        memory_bandwidth_bytes_per_s=float(bw) * GB if bw else None,
        peak_flops={k: float(v) * 1e12 for k, v in tflops.items() if v},
        architecture=row.get("architecture"),
        form_factor=row.get("form_factor"),
        release_year=row.get("release_year"),
        memory_type=row.get("memory_type"),
        l2_cache_bytes=int(float(l2) * 1e6) if l2 else None,
        sm_count=row.get("sm_count"),
        host_cpu=row.get("host_cpu"),
        interconnect=row.get("interconnect"),
        interconnect_bytes_per_s=float(ic) * GB if ic else None,
        nvlink=bool(row.get("nvlink", False)),
        pcie_gen=row.get("pcie_gen"),
        tdp_w=row.get("tdp_w"),
        ecc=row.get("ecc"),
        mig_profiles=migs,
        price_usd=row.get("price_usd"),
        price_note=row.get("price_note"),
        aliases=tuple(row.get("aliases", []) or []),
        sources=tuple(row.get("sources", []) or []),
        notes=row.get("notes"),
    )


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[GPU, ...], dict[str, GPU], dict[str, str]]:
    data = load_toml("gpus.toml")
    gpus = tuple(_gpu_from_row(r) for r in data["gpu"])
    index: dict[str, GPU] = {}
    for g in gpus:
        for key in (g.id, g.name, *g.aliases):
            index.setdefault(_normalize(key), g)
    mine = _user_gpus(index)
    for g in mine:
        for key in (g.id, g.name, *g.aliases):
            index[_normalize(key)] = g
    return gpus + mine, index, dict(data.get("sources", {}))


USER_CATALOG_ENV = "GPUWISE_GPUS"
MAX_USER_CATALOG_BYTES = 1 << 20
MAX_USER_STRING_CHARS = 2000
"""Longest text a user-catalog field takes (a name, a note): a bound against a hostile file, not a measured figure."""
_USER_KEYS = {"id", "name", "vendor", "segment", "architecture", "release_year", "form_factor", "memory_gb",
              "memory_mib_reported", "memory_type", "memory_bandwidth_gb_s", "l2_cache_mb", "sm_count",
              "peak_tflops", "host_cpu", "interconnect", "interconnect_gb_s", "nvlink", "pcie_gen", "pcie_lanes",
              "tdp_w", "price_usd", "price_note", "aliases", "sources", "notes"}
HOST_CPUS = ("x86", "grace")
"""The hosts gpuwise tells apart (`GPU.host_cpu`)."""
_PEAK_KEYS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp16_fp16acc", "fp8", "fp8_fp16acc", "int8",
              "fp4")
_USER_NUMBERS = {"memory_gb": 16384.0, "memory_mib_reported": 16 * 2**20, "memory_bandwidth_gb_s": 1e5,
                 "l2_cache_mb": 1e4, "sm_count": 1e4, "interconnect_gb_s": 1e5, "pcie_gen": 10, "pcie_lanes": 64,
                 "tdp_w": 1e5, "price_usd": 1e8, "release_year": 2100}
"""Each number's upper bound: ten times or more what any accelerator has (16 TiB of memory, 100 TB/s, 100 PFLOP/s
per type), so that a typo is caught and a real GPU is not."""
_USER_MINIMA = {"memory_gb": 0.1, "memory_mib_reported": 100, "memory_bandwidth_gb_s": 1.0, "l2_cache_mb": 0.01,
                "sm_count": 1, "interconnect_gb_s": 0.1, "pcie_gen": 1, "pcie_lanes": 1, "tdp_w": 1.0,
                "release_year": 1990}
"""Each number's lower bound: a tenth or less of the smallest accelerator's (100 MB, 1 GB/s, 10 GFLOP/s), so that a
typo (1e-300) is caught instead of turning into latencies of 1e300 days."""
_USER_INTEGERS = frozenset({"sm_count", "pcie_gen", "pcie_lanes", "release_year", "memory_mib_reported"})
_USER_STRINGS = ("vendor", "segment", "architecture", "form_factor", "memory_type", "interconnect", "price_note",
                 "notes")
MIN_PEAK_TFLOPS = 0.01


def user_catalog_path() -> Path:
    """The user's own GPU catalog: $GPUWISE_GPUS, else $XDG_CONFIG_HOME/gpuwise/gpus.toml (~/.config by default)."""
    env = os.environ.get(USER_CATALOG_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "gpuwise" / "gpus.toml"


def _user_gpus(index: dict[str, GPU]) -> tuple[GPU, ...]:
    """The GPUs of the user catalog (`user_catalog_path`; none when it does not exist), each row checked: the
    catalog's schema (`[[gpu]]` rows, data/gpus.toml's keys and units), positive numbers below the bounds above, an id
    and names that no other GPU has. Any fault: one line naming the file, the row and the key."""
    path = user_catalog_path()
    try:
        exists = path.exists()
    except OSError as exc:  # a name longer than the file system allows, a path through a non-directory
        raise InvalidArgument(f"{USER_CATALOG_ENV}={path}: not a readable path ({exc.strerror or exc})") from None
    if not exists:
        if os.environ.get(USER_CATALOG_ENV):
            raise InvalidArgument(f"{USER_CATALOG_ENV}={path}: no such file")
        return ()
    where = f"user GPU catalog {path}"
    try:
        # the operator's own file: bounded and non-blocking, but not limited to the web API's allowed folders
        data = tomllib.loads(read_regular_text(path, MAX_USER_CATALOG_BYTES, what="user GPU catalog "))
    except tomllib.TOMLDecodeError as exc:
        raise InvalidArgument(f"{where}: not valid TOML ({exc})") from None
    rows = data.get("gpu", [])
    if set(data) - {"gpu"} or not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InvalidArgument(f"{where}: expected only [[gpu]] tables (see docs/catalogs.md)")
    out: list[GPU] = []
    seen = dict(index)
    for i, row in enumerate(rows, 1):
        gpu = _checked_user_row(row, f"{where}, GPU {i}")
        for key in (gpu.id, gpu.name, *gpu.aliases):
            other = seen.get(_normalize(key))
            if other is not None and other is not gpu:
                raise InvalidArgument(f"{where}, GPU {i}: '{key}' already names {other.id} ({other.name}); give it "
                                      "another id, name or alias")
            seen[_normalize(key)] = gpu
        out.append(gpu)
    return tuple(out)


def _checked_user_row(row: dict, where: str) -> GPU:
    unknown = set(row) - _USER_KEYS
    if unknown:
        raise InvalidArgument(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; valid: "
                              f"{', '.join(sorted(_USER_KEYS))}")
    for key in ("id", "name"):
        if not isinstance(row.get(key), str) or not row[key].strip() or len(row[key]) > 200:
            raise InvalidArgument(f"{where}: '{key}' must be a non-empty string")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", row["id"]):
        raise InvalidArgument(f"{where}: id '{row['id']}' must be lower-case letters, digits, '.', '_' or '-'")
    if "memory_gb" not in row:
        raise InvalidArgument(f"{where}: 'memory_gb' (GB as marketed) is required")
    for key, bound in _USER_NUMBERS.items():
        if key in row:
            _check_number(where, key, row[key], bound, _USER_MINIMA.get(key, 0.0), key in _USER_INTEGERS)
    for key in _USER_STRINGS:
        if key in row and (not isinstance(row[key], str) or len(row[key]) > MAX_USER_STRING_CHARS):
            raise InvalidArgument(f"{where}: '{key}' must be a string")
    peaks = row.get("peak_tflops", {})
    if not isinstance(peaks, dict):
        raise InvalidArgument(f"{where}: 'peak_tflops' must be a table of dtype = TFLOP/s")
    for key, value in peaks.items():
        if key not in _PEAK_KEYS:
            raise InvalidArgument(f"{where}: peak_tflops.{key}: unknown dtype; valid: {', '.join(_PEAK_KEYS)}")
        _check_number(where, f"peak_tflops.{key}", value, 1e5, MIN_PEAK_TFLOPS)
    if "host_cpu" in row and row["host_cpu"] not in HOST_CPUS:
        raise InvalidArgument(f"{where}: host_cpu = {row['host_cpu']!r}; valid: {', '.join(HOST_CPUS)}")
    sources = row.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(a, str) for a in sources):
        raise InvalidArgument(f"{where}: 'sources' must be a list of strings")
    if "nvlink" in row and not isinstance(row["nvlink"], bool):
        raise InvalidArgument(f"{where}: 'nvlink' must be true or false")
    aliases = row.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise InvalidArgument(f"{where}: 'aliases' must be a list of names")
    return _gpu_from_row({"vendor": "", "segment": "custom", **row})


def _check_number(where: str, key: str, value: object, bound: float, least: float = 0.0,
                  integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= bound:
        raise InvalidArgument(f"{where}: {key} = {value!r} is not a number in (0, {bound:g}]")
    if value < least:
        raise InvalidArgument(f"{where}: {key} = {value!r} is below {least:g}, less than any real GPU has")
    if integer and value != int(value):
        raise InvalidArgument(f"{where}: {key} = {value!r} must be a whole number")


def all_gpus() -> tuple[GPU, ...]:
    return _catalog()[0]


def gpu_sources() -> dict[str, str]:
    """Source key -> description/URL for the `sources` of each GPU."""
    return _catalog()[2]


def _tokens(name: str) -> frozenset[str]:
    """The words of a GPU name, letters and digits split apart ('RTX4090' and 'rtx-4090': rtx, 4090), vendor words
    dropped."""
    return frozenset(re.findall(r"[a-z]+|[0-9]+", _VENDOR_WORDS.sub(" ", name.lower())))


def _by_words(name: str, gpus: tuple[GPU, ...]) -> list[GPU]:
    """GPUs one of whose spellings (id, name, alias) holds every word of `name`, fewest other words first: '4090'
    finds the RTX 4090, '3090' the RTX 3090 before the 3090 Ti. Several at the same fewest count: all of them."""
    words = _tokens(name)
    if not words:
        return []
    best: dict[str, tuple[int, GPU]] = {}
    for g in gpus:
        for key in (g.id, g.name, *g.aliases):
            have = _tokens(key)
            if words <= have:
                extra = len(have - words)
                if g.id not in best or extra < best[g.id][0]:
                    best[g.id] = (extra, g)
    if not best:
        return []
    fewest = min(extra for extra, _ in best.values())
    return [g for extra, g in best.values() if extra == fewest]


def get_gpu(name: str) -> GPU:
    """A GPU by id, name or alias; forgiving about case, spaces and vendor words ('NVIDIA H100 80GB HBM3'); else by
    its words ('4090', 'RTX4090'), when they single out one GPU. A name that fits several is refused with them."""
    if not isinstance(name, str) or not name.strip():
        raise UnknownGPUError("no GPU given; see `gpuwise gpus` for the catalog")
    gpus, index, _ = _catalog()
    hit = index.get(_normalize(name))
    if hit is not None:
        return hit
    found = _by_words(name, gpus)
    if len(found) == 1:
        return found[0]
    if found:
        listed = ", ".join(f"{g.id} ({g.name})" for g in found[:6]) + (", ..." if len(found) > 6 else "")
        raise UnknownGPUError(f"GPU '{name}' matches {len(found)} GPUs: {listed}; pass one of their ids")
    ids = [g.id for g in gpus]
    raise UnknownGPUError(f"unknown GPU '{name}'.{suggest(name, ids)} See `gpuwise gpus` for the catalog.")


MAX_GPU_MEMORY_BYTES = 16 * TiB
"""Largest memory `--gpu-memory` accepts: 16 TiB, ten times a GB300 NVL72 rack's whole HBM (20.7 TB across 72 GPUs is
288 GB per GPU): a size past it is a typo."""


MIN_GPU_MEMORY_BYTES = GiB
"""`--gpu-memory`'s floor: a CUDA context and runtime take about half of it before any model byte."""
GPU_MEMORY_SLACK = 1.05
"""How far `--gpu-memory` may pass the catalog's memory (the larger of its bytes and its marketed GB read as GiB,
which a user may type, and which on Apple silicon is the whole unified memory above the GPU's default share): 5%,
a rounding margin, so only a size the GPU cannot have is refused."""


def with_memory(gpu: GPU | None, size: str) -> GPU:
    """A GPU with `size` of usable memory (`--gpu-memory 24GiB`): the catalog GPU with its capacity replaced (what is
    free on a shared card), or without one a GPU the catalog lacks, of which nothing else is known (its speed
    figures are then unknown, never made up)."""
    n_bytes = parse_size(size)
    if n_bytes is None or n_bytes > MAX_GPU_MEMORY_BYTES:
        raise InvalidArgument(f"--gpu-memory: '{size}' is not a memory size up to 16 TiB (e.g. 24GiB, 23.5GB, "
                              "16000MiB)")
    if n_bytes < MIN_GPU_MEMORY_BYTES:  # below the CUDA context and runtime alone: every answer would be negative
        raise InvalidArgument(f"--gpu-memory: '{size}' is less than 1 GiB; give the memory the GPU has free")
    if gpu is not None and n_bytes > GPU_MEMORY_SLACK * max(gpu.memory_bytes, gpu.memory_gb * GiB):
        raise InvalidArgument(f"--gpu-memory: '{size}' is more than the {fmt_gib(gpu.memory_bytes)} a {gpu.name} "
                              "has; give what is free on it (or leave --gpu-memory out)")
    label = fmt_gib(n_bytes)
    if gpu is None:
        return GPU(id=f"custom-{n_bytes / GiB:g}gib", name="custom GPU", vendor="", segment="custom",
                   memory_gb=n_bytes / GB, memory_bytes=int(n_bytes), memory_bytes_source="--gpu-memory",
                   memory_bandwidth_bytes_per_s=None, peak_flops={},
                   notes="from --gpu-memory: only its memory is known")
    return replace(gpu, memory_bytes=int(n_bytes), memory_bytes_source="--gpu-memory",
                   name=f"{gpu.name}, {label} usable", mig_profiles=())


def search_gpus(query: str | None = None) -> list[GPU]:
    """GPUs whose id, name, alias, vendor, segment or architecture contains the query (all if None)."""
    gpus = all_gpus()
    if not query:
        return list(gpus)
    q = _normalize(query)
    if not q:  # only a vendor word ('apple', 'NVIDIA'): the vendor's GPUs
        return [g for g in gpus if g.vendor == query.strip().lower()]
    out = []
    for g in gpus:
        hay = [g.id, g.name, g.vendor, g.segment, g.architecture or "", *g.aliases]
        if any(q in _normalize(h) for h in hay):
            out.append(g)
    return out
