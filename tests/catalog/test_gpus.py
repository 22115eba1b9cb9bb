"""GPU catalog: lookup as people type names, dense peaks, unknown as None (never 0)."""

from __future__ import annotations

import pytest

from gpuwise.catalog.gpus import all_gpus, get_gpu, gpu_sources
from gpuwise.errors import InvalidArgument, UnknownGPUError


@pytest.mark.parametrize(("name", "gid"), [
    ("h100-sxm", "h100-sxm"), ("H100", "h100-sxm"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("nvidia h100 pcie", "h100-pcie"), ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"), ("RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("rtx_a6000", "rtx-a6000"), ("Tesla T4", "t4"), ("m2-ultra", "m2-ultra"),
    ("h200", "h200-sxm"), ("H100 80GB", "h100-sxm"), ("h100-80gb", "h100-sxm"),
    # by their words, when they single out one GPU
    ("4090", "rtx-4090"), ("RTX4090", "rtx-4090"), ("geforce 5090", "rtx-5090"), ("3090", "rtx-3090"),
    ("3090 ti", "rtx-3090-ti"), ("MI300", "mi300x"), ("l40 s", "l40s"),
])
def test_forgiving_lookup(name: str, gid: str) -> None:
    assert get_gpu(name).id == gid


def test_unknown_gpu_suggests() -> None:
    with pytest.raises(UnknownGPUError, match="rtx-4090"):
        get_gpu("rtx 4900")


@pytest.mark.parametrize("name", ["80gb", "sxm", "rtx"])
def test_a_name_that_fits_several_gpus_is_refused_with_them(name: str) -> None:
    with pytest.raises(UnknownGPUError, match=r"matches \d+ GPUs: .*pass one of their ids"):
        get_gpu(name)


def test_h100_dense_bf16_and_ridge_point() -> None:
    g = get_gpu("h100-sxm")
    assert g.peak("bf16") == 989.5e12  # datasheet 1,979 TFLOP/s "with sparsity" / 2
    assert g.peak("bf16") / g.memory_bandwidth_bytes_per_s == pytest.approx(295, rel=0.01)


def test_geforce_fp32_accumulate_is_half_rate() -> None:
    g = get_gpu("rtx-4090")
    assert g.peak("fp16_fp16acc") == pytest.approx(2 * g.peak("bf16"), rel=0.001)  # 330.3 vs 165.2 (rounded)


def test_no_zero_numbers_and_every_source_resolves() -> None:
    sources = gpu_sources()
    assert len(all_gpus()) >= 40
    for g in all_gpus():
        assert g.memory_bytes > 0
        assert all(v > 0 for v in g.peak_flops.values()), g.id
        assert g.sources and all(s in sources for s in g.sources), g.id
    assert get_gpu("t4").peak("bf16") is None  # Turing has no bf16 tensor cores: unknown stays None


MY_GPU = """
[[gpu]]
id = "lab-card-16gb"
name = "Lab Card 16GB"
aliases = ["lab card"]
vendor = "nvidia"
architecture = "Ada Lovelace"
memory_gb = 16
memory_bandwidth_gb_s = 288
sm_count = 34
peak_tflops = { fp32 = 22.1, bf16 = 44.1, fp16 = 44.1 }
"""


@pytest.fixture
def user_catalog(tmp_path, monkeypatch):
    """Write a user GPU catalog and point GPUWISE_GPUS at it; the catalog is read again before and after."""
    from gpuwise.catalog import gpus

    def write(text: str):
        path = tmp_path / "gpus.toml"
        path.write_text(text)
        monkeypatch.setenv("GPUWISE_GPUS", str(path))
        gpus._catalog.cache_clear()
        return path

    yield write
    monkeypatch.delenv("GPUWISE_GPUS", raising=False)
    gpus._catalog.cache_clear()


def test_grace_superchips_name_their_host(user_catalog) -> None:
    """GB200 and GB300 run their processes on the superchip's Grace CPU; HGX boards on x86 servers (no host named);
    a user row may name its host."""
    assert get_gpu("gb200").host_cpu == get_gpu("gb300").host_cpu == "grace"
    assert get_gpu("b200").host_cpu is None and get_gpu("h100").host_cpu is None
    user_catalog(MY_GPU.replace("sm_count = 34", 'host_cpu = "grace"'))
    assert get_gpu("lab card").host_cpu == "grace"


def test_a_user_catalog_adds_gpus_with_the_catalog_schema(user_catalog) -> None:
    user_catalog(MY_GPU)
    g = get_gpu("lab card")
    assert g.id == "lab-card-16gb" and g.memory_bytes == 16 * 2**30 and g.peak("bf16") == 44.1e12
    assert g.memory_bandwidth_bytes_per_s == 288e9 and g.segment == "custom"
    assert get_gpu("h100").id == "h100-sxm"  # the shipped catalog is still there


@pytest.mark.parametrize("text, words", [
    ("x = [", "not valid TOML"),
    (MY_GPU.replace("memory_gb = 16", "memory_gb = 0"), "memory_gb = 0 is not a number"),
    (MY_GPU.replace("memory_gb = 16", "memory_gb = 1e9"), "memory_gb"),
    (MY_GPU.replace("memory_gb = 16\n", ""), "'memory_gb' (GB as marketed) is required"),
    (MY_GPU.replace("fp32 = 22.1", "fp33 = 22.1"), "peak_tflops.fp33: unknown dtype"),
    (MY_GPU.replace("sm_count = 34", "sm_count = \"34\""), "sm_count"),
    (MY_GPU.replace("sm_count", "sm_cuont"), "unknown key(s) sm_cuont"),
    (MY_GPU.replace('"lab card"', '"RTX 4090"'), "already names rtx-4090"),
    (MY_GPU.replace('id = "lab-card-16gb"', 'id = "My GPU"'), "must be lower-case"),
    (MY_GPU.replace("sm_count = 34", 'host_cpu = "arm"'), "host_cpu = 'arm'; valid: x86, grace"),
    (MY_GPU.replace('architecture = "Ada Lovelace"', "architecture = 3"), "'architecture' must be a string"),
    (MY_GPU.replace("memory_bandwidth_gb_s = 288", "memory_bandwidth_gb_s = 1e-300"), "below 1, less than any"),
    (MY_GPU.replace("fp32 = 22.1", "fp32 = 1e-300"), "peak_tflops.fp32 = 1e-300 is below 0.01"),
    (MY_GPU.replace("sm_count = 34", "sm_count = 3.5"), "sm_count = 3.5 must be a whole number"),
    ("[gpu]\nid = 1", "expected only [[gpu]] tables"),
])
def test_a_malformed_user_catalog_is_one_clear_error(user_catalog, text: str, words: str) -> None:
    path = user_catalog(text)
    with pytest.raises(InvalidArgument) as exc:
        get_gpu("h100")
    assert str(path) in str(exc.value) and words in str(exc.value) and "\n" not in str(exc.value)


def test_a_named_user_catalog_that_does_not_exist_is_an_error(tmp_path, monkeypatch) -> None:
    from gpuwise.catalog import gpus

    monkeypatch.setenv("GPUWISE_GPUS", str(tmp_path / "missing.toml"))
    gpus._catalog.cache_clear()
    try:
        with pytest.raises(InvalidArgument, match="no such file"):
            get_gpu("h100")
    finally:
        monkeypatch.delenv("GPUWISE_GPUS")
        gpus._catalog.cache_clear()


@pytest.mark.parametrize("kind", ["fifo", "folder", "binary", "huge"])
def test_a_user_catalog_that_is_not_a_readable_text_file_is_one_line(tmp_path, monkeypatch, kind) -> None:
    """A FIFO is opened non-blocking and refused on its descriptor (no writer: a blocking read would hang), a folder
    or undecodable bytes are refused, and so is a file over the size bound."""
    import os

    from gpuwise.catalog import gpus

    path = tmp_path / "gpus.toml"
    if kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("POSIX FIFOs")
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00 not utf-8")
    else:
        path.write_bytes(b"#" * (gpus.MAX_USER_CATALOG_BYTES + 1))
    words = {"fifo": "not a regular file", "folder": "not a regular file", "binary": "not UTF-8 text",
             "huge": "over the"}[kind]
    monkeypatch.setenv("GPUWISE_GPUS", str(path))
    gpus._catalog.cache_clear()
    try:
        with pytest.raises(InvalidArgument, match=words) as exc:
            get_gpu("h100")
        assert "\n" not in str(exc.value)
    finally:
        monkeypatch.delenv("GPUWISE_GPUS")
        gpus._catalog.cache_clear()


def test_apple_gpus_plan_with_macos_default_share_of_unified_memory(user_catalog) -> None:
    """macOS lets the GPU wire about 3/4 of unified memory above 36 GB and 2/3 up to it (catalog/gpus.py sources)."""
    assert get_gpu("m3-max").memory_bytes == int(128 * 2**30 * 3 / 4)
    user_catalog('[[gpu]]\nid = "m4-16gb"\nname = "Apple M4 16GB"\nvendor = "apple"\nmemory_gb = 16\n')
    assert get_gpu("m4-16gb").memory_bytes == int(16 * 2**30 * 2 / 3)


@pytest.mark.parametrize(("query", "vendor"), [("apple", "apple"), ("NVIDIA", "nvidia"), ("AMD", "amd")])
def test_a_vendor_word_lists_that_vendor_s_gpus(query: str, vendor: str) -> None:
    from gpuwise.catalog.gpus import search_gpus

    found = search_gpus(query)
    assert found and {g.vendor for g in found} == {vendor}


def test_a_mig_slice_runs_at_its_cards_measured_fractions() -> None:
    """A slice has pro-rata peaks and bandwidth (catalog/mig.py); the fractions of them its kernels reach are its
    card's measurements, not the architecture's generic defaults."""
    from gpuwise.catalog.devices import default_profile
    from gpuwise.catalog.mig import resolve_gpu

    for card, slice_ in (("h100-sxm", "3g.40gb"), ("a100-sxm-80gb", "1g.10gb")):
        whole, part = default_profile(get_gpu(card)), default_profile(resolve_gpu(f"{card}:{slice_}"))
        assert part.matmul_efficiency == whole.matmul_efficiency
        assert part.memory_efficiency == whole.memory_efficiency
        assert part.matmul_flops("bf16") < whole.matmul_flops("bf16")  # the slice's share of the peak
