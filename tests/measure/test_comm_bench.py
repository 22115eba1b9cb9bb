"""`gpuwise bench comm`: nccl-tests bookkeeping against published numbers, the fitted network, the profile file,
and one real two-rank gloo run under torchrun on CPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpuwise
from gpuwise.catalog.devices import load_profile, network_overrides
from gpuwise.catalog.gpus import get_gpu
from gpuwise.cli import main
from gpuwise.errors import GpuwiseError, InvalidArgument
from gpuwise.estimate.comm import bus_factor
from gpuwise.measure import comm_plan, comm_profile, comm_result, comm_run, comm_sizes
from gpuwise.measure import comm_report as cr

# ------------------------------------------------------------------------------------------------------------
# nccl-tests definitions (NVIDIA/nccl-tests doc/PERFORMANCE.md, "Summary"): busbw = algbw x factor.


@pytest.mark.parametrize("op, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_reduce", 16, 1.875),     # 2(n-1)/n
    ("all_gather", 2, 0.5), ("all_gather", 8, 0.875),                               # (n-1)/n
    ("reduce_scatter", 4, 0.75), ("reduce_scatter", 8, 0.875),                      # (n-1)/n
    ("all_to_all", 8, 0.875),                                                       # (n-1)/n
    ("send_recv", 2, 1.0), ("send_recv", 8, 1.0),                                   # 1
])
def test_busbw_factor_is_nccl_tests(op, n, factor) -> None:
    algbw, busbw = comm_sizes.bandwidths(op, 1_000_000_000, 1.0, n)
    assert algbw == pytest.approx(1.0)
    assert busbw == pytest.approx(factor)


# Rows of real nccl-tests output (out-of-place columns): size (B), count, time (us), algbw, busbw.
# 8 ranks in one node, from a public nccl-tests sweep (all_reduce_perf / all_gather_perf / reduce_scatter_perf),
# and sendrecv_perf on 8 A100s (li-plus/playground cuda/nccl.md).
NCCL_TESTS_ROWS = [
    ("all_reduce", 8, 1073741824, 268435456, 2601.84, 412.69, 722.20),
    ("all_reduce", 8, 8388608, 2097152, 76.96, 109.00, 190.75),
    ("all_gather", 8, 1073741824, 33554432, 1486.06, 722.54, 632.22),
    ("all_gather", 8, 1048576, 32768, 19.69, 53.24, 46.59),
    ("reduce_scatter", 8, 1073741824, 33554432, 1451.69, 739.65, 647.19),
    ("send_recv", 8, 1073741824, 268435456, 5503.4, 195.10, 195.10),
]


@pytest.mark.parametrize("op, n, size, count, time_us, algbw, busbw", NCCL_TESTS_ROWS)
def test_reproduces_nccl_tests_rows(op, n, size, count, time_us, algbw, busbw) -> None:
    assert comm_sizes.message_shape(op, size, n, 4) == (count, size)
    a, b = comm_sizes.bandwidths(op, size, time_us * 1e-6, n)
    assert round(a, 2) == pytest.approx(algbw, abs=0.011)
    assert round(b, 2) == pytest.approx(busbw, abs=0.011)


def test_sizes_round_down_like_nccl_tests() -> None:
    # nccl-tests all_gather on 8 ranks prints "128  4" and sizes under 8 elements as 0 (not run); alltoall with
    # uint8 prints "128  16" (count = elements sent to each peer).
    assert comm_sizes.message_shape("all_gather", 128, 8, 4) == (4, 128)
    assert comm_sizes.message_shape("all_gather", 64, 8, 4) == (2, 64)
    assert comm_sizes.message_shape("all_gather", 16, 8, 4) is None
    assert comm_sizes.message_shape("all_to_all", 128, 8, 1) == (16, 128)
    # Three ranks: 8 KiB of fp32 = 2048 elements -> 682 per rank -> 8184 B; all_reduce keeps 8192.
    assert comm_sizes.message_shape("reduce_scatter", 8192, 3, 4) == (682, 8184)
    assert comm_sizes.message_shape("all_reduce", 8192, 3, 4) == (2048, 8192)
    assert comm_sizes.message_shape("send_recv", 8192, 3, 4) == (2048, 8192)
    assert comm_sizes.message_shape("all_reduce", 2, 3, 4) is None


def test_message_sizes_double_from_min_to_max() -> None:
    assert comm_sizes.message_sizes(8 * 1024, 64 * 1024) == [8192, 16384, 32768, 65536]
    assert comm_sizes.message_sizes(8 * 1024, 100 * 1024) == [8192, 16384, 32768, 65536]
    assert comm_sizes.message_sizes(4096, 4096) == [4096]
    assert len(comm_sizes.message_sizes(8 * 1024, 1 << 30)) == 18  # 2^13 .. 2^30


def test_buffers_per_rank() -> None:
    assert comm_sizes.buffer_bytes("all_reduce", 1 << 30, 8) == 1 << 30                    # in place
    assert comm_sizes.buffer_bytes("all_gather", 1 << 30, 8) == (1 << 30) + (1 << 27)     # S/n in, S out
    assert comm_sizes.buffer_bytes("all_to_all", 1 << 20, 8) == 2 << 20
    assert comm_sizes.buffer_bytes("send_recv", 1 << 20, 2) == 2 << 20


def test_latency_steps_are_the_models() -> None:
    assert [comm_sizes.latency_steps(n) for n in (2, 3, 4, 8, 9, 16)] == [1, 2, 2, 3, 4, 4]


# ------------------------------------------------------------------------------------------------------------
# Fitting the network and the profile file, from made-up rows (no torch).

def _op(op, n, times_us, group="world"):
    rows = []
    for i, t in enumerate(times_us):
        size = 8192 << i
        a, b = comm_sizes.bandwidths(op, size, t * 1e-6, n)
        rows.append(comm_result.Row(size, size // 4, t * 1e-6, t * 1e-6, t * 1e-6, a, b))
    return comm_result.OpResult(op, group, n, bus_factor(op, n), tuple(rows))


def _result(ops, intra=None, nnodes=1, world=2, local=2):
    return comm_result.CommBenchResult(world_size=world, nnodes=nnodes, local_world_size=local, backend="gloo",
                                       device="cpu", dtype="fp32", iters=5, warmup=2, ops=ops, intra_node=intra,
                                       intra_node_note=None, fit=comm_result.fit_network(ops, intra, nnodes=nnodes),
                                       torch_version="x", date="2025-01-01")


def test_peak_is_best_of_three_largest_and_latency_is_smallest_over_log_steps() -> None:
    # 8 ranks: busbw = S / t x 1.75. Sizes 8 KiB .. 256 KiB (6 sizes).
    o = _op("all_reduce", 8, [30.0, 31.0, 32.0, 10.0, 40.0, 60.0])
    # three largest: 64 KiB / 10 us, 128 KiB / 40 us, 256 KiB / 60 us -> 64 KiB wins: 65536 / 10e-6 / 1e9 x 1.75
    assert o.peak_busbw_gb_s == pytest.approx(65536 / 10e-6 / 1e9 * 1.75)
    assert o.latency_us == pytest.approx(30.0 / 3)  # ceil(log2 8) = 3 steps
    assert comm_result.OpResult("all_reduce", "world", 8, 1.75, ()).peak_busbw_gb_s is None


def test_one_node_fills_the_intra_node_level() -> None:
    ar = _op("all_reduce", 2, [100.0, 120.0, 150.0])
    fit = comm_result.fit_network((ar,), None, nnodes=1)
    assert fit.intra_node_busbw_gb_s == ar.peak_busbw_gb_s
    assert fit.intra_node_latency_us == pytest.approx(100.0)
    assert fit.inter_node_busbw_gb_s is None and fit.inter_node_latency_us is None
    assert set(fit.network()) == {"intra_node_busbw_gb_s", "intra_node_latency_us"}


def test_several_nodes_split_world_and_per_node_all_reduce() -> None:
    world = _op("all_reduce", 16, [50.0, 60.0, 80.0])
    intra = _op("all_reduce", 8, [20.0, 22.0, 25.0], group="intra_node")
    fit = comm_result.fit_network((world,), intra, nnodes=2)
    assert fit.inter_node_busbw_gb_s == world.peak_busbw_gb_s
    assert fit.intra_node_busbw_gb_s == intra.peak_busbw_gb_s
    assert fit.inter_node_latency_us == pytest.approx(50.0 / 4)
    assert fit.intra_node_latency_us == pytest.approx(20.0 / 3)
    alone = comm_result.fit_network((world,), None, nnodes=2, intra_note="one rank per node")
    assert alone.intra_node_busbw_gb_s is None and "one rank per node" in " ".join(alone.how)
    none = comm_result.fit_network((_op("all_gather", 2, [10.0]),), None, nnodes=1)
    assert none.network() == {}


def test_profile_loads_and_slows_the_prediction(tmp_path) -> None:
    res = _result((_op("all_reduce", 2, [200.0, 250.0, 400.0]),))  # ~0.1 GB/s: a slow network
    path = comm_profile.save(res, tmp_path / "net.json")
    doc = json.loads(Path(path).read_text())
    assert doc["kind"] == "gpuwise-network-profile" and doc["measured"]["backend"] == "gloo"
    net = network_overrides(path)
    assert net["intra_node_busbw_gb_s"] == pytest.approx(res.fit.intra_node_busbw_gb_s, rel=1e-5)
    load_profile(path, get_gpu("h100-sxm"))
    kw = dict(gpu="h100-sxm", num_gpus=8, fsdp="full", global_batch=8, seq=4096)
    base = gpuwise.train("llama-3.1-8b", **kw).perf.step
    slow = gpuwise.train("llama-3.1-8b", profile=path, **kw).perf.step
    assert slow.breakdown["dp_comm"] > 100 * base.breakdown["dp_comm"]
    assert slow.step_time_s > base.step_time_s


def test_save_merges_into_an_existing_profile(tmp_path) -> None:
    p = tmp_path / "h100.json"
    p.write_text(json.dumps({"measured": {"by": "gpuwise calibrate"}, "matmul_efficiency": {"bf16": 0.7},
                             "network": {"inter_node_busbw_gb_s": 40.0, "intra_node_busbw_gb_s": 999.0}}))
    comm_profile.save(_result((_op("all_reduce", 2, [200.0, 250.0, 400.0]),)), p)
    doc = json.loads(p.read_text())
    assert doc["matmul_efficiency"] == {"bf16": 0.7} and doc["measured"] == {"by": "gpuwise calibrate"}
    assert doc["network"]["inter_node_busbw_gb_s"] == 40.0          # not measured here: kept
    assert doc["network"]["intra_node_busbw_gb_s"] != 999.0         # measured: replaced
    assert doc["network_measured"]["by"] == "gpuwise bench comm"
    load_profile(p, get_gpu("h100-sxm"))


def test_save_refuses_non_profiles_and_unwritable_paths(tmp_path) -> None:
    res = _result((_op("all_reduce", 2, [200.0]),))
    bad = tmp_path / "notes.txt"
    bad.write_text("not json")
    with pytest.raises(GpuwiseError, match="not valid JSON"):
        comm_profile.save(res, bad)
    assert bad.read_text() == "not json"
    with pytest.raises(GpuwiseError, match="cannot write"):
        comm_profile.save(res, tmp_path / "missing-dir" / "net.json")


def test_render_and_json_say_unknown_as_null() -> None:
    res = _result((_op("all_reduce", 2, [200.0, 250.0]), _op("all_gather", 2, [])))
    d = cr.to_dict(res)
    assert d["command"] == "bench comm" and d["schema_version"]
    assert d["network"]["inter_node_busbw_gb_s"] is None
    assert d["ops"]["all_gather"]["peak_busbw_gb_s"] is None and d["ops"]["all_gather"]["rows"] == []
    text = cr.render(res)
    assert "all_reduce" in text and "not measured" in text and "busbw" in text


# ------------------------------------------------------------------------------------------------------------
# Bad input, and the real thing under torchrun.

class _Args:
    def __init__(self, **kw):
        self.ops = self.min_bytes = self.max_bytes = self.iters = self.warmup = self.device = self.save = None
        self.quick = self.json = False
        self.__dict__.update(kw)


@pytest.mark.parametrize("kw, message", [
    ({"ops": "all_reduce,allgather"}, "unknown collective 'allgather'"),
    ({"ops": " , "}, "no collective"),
    ({"min_bytes": 1 << 20, "max_bytes": 1 << 10}, "larger than --max-bytes"),
    ({"ops": "all_gather", "save": ""}, "add it to --ops"),
    ({"iters": 0}, "--iters"),
])
def test_bad_input_is_one_line(kw, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        comm_plan.make_plan(_Args(**kw))


def test_plan_defaults() -> None:
    assert comm_plan.make_plan(_Args(device="cpu")).sizes[-1] == 64 << 20
    assert comm_plan.make_plan(_Args()).sizes[-1] == 1 << 30
    quick = comm_plan.make_plan(_Args(quick=True, device="cpu", save=""))
    assert (quick.sizes[0], quick.sizes[-1], quick.iters, quick.save) == (8 << 10, 4 << 20, 5, "gpuwise-network.json")
    assert comm_plan.make_plan(_Args(ops="send-recv,all_reduce,send_recv")).ops == ("send_recv", "all_reduce")


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(comm_run.__file__).parents[2]), env.get("PYTHONPATH", "")])
    return env


def test_cli_bad_ops_exits_2(capsys) -> None:
    assert main(["bench", "comm", "--ops", "broadcast"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown collective 'broadcast'" in err


def test_not_under_torchrun_is_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuwise", "bench", "comm", "--device", "cpu"],
                          capture_output=True, text=True, timeout=60, env=_clean_env())
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "torchrun" in proc.stderr and proc.stdout == ""


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("comm")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "gpuwise", "bench", "comm", "--quick", "--device", "cpu", "--json", "--save", str(out / "net.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_clean_env(), cwd=out)
    return proc, out / "net.json"


def test_torchrun_two_ranks_gloo(torchrun_run) -> None:
    proc, profile = torchrun_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # rank 0 alone writes stdout
    assert (doc["world_size"], doc["nnodes"], doc["backend"], doc["device"]) == (2, 1, "gloo", "cpu")
    assert set(doc["ops"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}
    factors = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5, "send_recv": 1.0}
    for op, o in doc["ops"].items():
        assert len(o["rows"]) == 10, op  # 8 KiB .. 4 MiB
        for row in o["rows"]:
            assert row["algbw_gb_s"] > 0 and math.isfinite(row["algbw_gb_s"]) and math.isfinite(row["busbw_gb_s"])
            assert row["busbw_gb_s"] / row["algbw_gb_s"] == pytest.approx(factors[op])
            assert row["time_p10_s"] <= row["time_s"] <= row["time_p90_s"]
    assert doc["profile_path"] == str(profile)
    net = network_overrides(profile)
    assert net["intra_node_busbw_gb_s"] > 0 and "inter_node_busbw_gb_s" not in net
    load_profile(profile, get_gpu("h100-sxm"))


def test_torch_missing_is_one_line() -> None:
    code = ("import sys\n"
            "class B:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch': raise ImportError(name)\n"
            "sys.meta_path.insert(0, B())\n"
            "from gpuwise.cli import main\n"
            "sys.exit(main(['bench', 'comm', '--device', 'cpu']))\n")
    env = {**_clean_env(), "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "PyTorch" in proc.stderr


class _FakeDist:
    """One process standing in for a process group: collectives do nothing, reduce_scatter fails as gloo's did."""

    class ReduceOp:
        MAX = MIN = SUM = None

    def __init__(self, error: str):
        self.error = error

    def barrier(self, group=None):
        pass

    def all_reduce(self, t, op=None, group=None):
        pass

    def all_gather_single(self, out, src, group=None):
        pass

    def reduce_scatter_single(self, out, src, group=None):
        raise RuntimeError(self.error)

    def get_backend(self, group=None):
        return "gloo"


def _run_fake(op: str, error: str = "Backend gloo does not support reduce_scatter_tensor"):
    torch = pytest.importorskip("torch")
    from gpuwise.measure.dist import DistEnv

    plan = comm_plan.make_plan(_Args(ops=op, device="cpu", min_bytes=8192, max_bytes=32768, iters=3, warmup=1))
    dev = torch.device("cpu")
    fits = {(0, s): True for s in plan.sizes}
    return comm_run._run_op(torch, _FakeDist(error), dev, torch.Generator(), op, None, 2, DistEnv(0, 2, 0, 2), plan,
                            fits, lambda text: None)


def test_run_op_measures_every_size() -> None:
    o = _run_fake("all_gather")
    assert [r.size_bytes for r in o.rows] == [8192, 16384, 32768] and [r.count for r in o.rows] == [1024, 2048, 4096]
    assert all(r.busbw_gb_s == pytest.approx(r.algbw_gb_s * 0.5) for r in o.rows)


def test_unsupported_collective_is_skipped_with_its_reason() -> None:
    o = _run_fake("reduce_scatter")
    assert o.rows == () and o.peak_busbw_gb_s is None
    assert len(o.skipped) == 3 and all("gloo does not support reduce_scatter" in why for _s, why in o.skipped)
    with pytest.raises(RuntimeError, match="peer closed"):
        _run_fake("reduce_scatter", error="Connection reset: peer closed")


def test_save_target_checked_before_measuring(tmp_path) -> None:
    comm_profile.check_save_target(tmp_path / "net.json")
    with pytest.raises(GpuwiseError, match="does not exist"):
        comm_profile.check_save_target(tmp_path / "nope" / "net.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(GpuwiseError, match="JSON object"):
        comm_profile.check_save_target(tmp_path / "list.json")
