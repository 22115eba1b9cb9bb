"""Measurement: the real device, the real network and real training loops, fed back into the estimators.

Everything here needs torch and/or NVML (the optional extra `pip install "gpuwise[measure]"`). Nothing in this
package is imported by the analytical path; every module imports torch or pynvml lazily, inside functions, through
`_deps`, which turns a missing package, driver or GPU into one clear line (exit 2 in the CLI).

    calibrate.py    matmul TFLOP/s per dtype over a GEMM sweep, DRAM and host<->device bandwidth, launch overhead
                    -> a device profile JSON that `--profile` reads (catalog/devices.py); calibrate_report.py shows it
    timing.py       how to time a kernel: CUDA events, warm-up, median and spread, rotating buffers
    dist.py         torchrun environment: rank, world, nodes, backend (nccl on GPUs, gloo on CPU)
    comm_bench.py   `gpuwise bench comm`: collectives over message sizes, nccl-tests algbw/busbw -> network profile
                    (comm_report.py: its tables, JSON and the profile file)
    torch_model.py  a plain PyTorch decoder built from a ModelSpec (the model `bench train` runs)
    train_bench.py  `gpuwise bench train`: FSDP2 / DDP / TP+SP / checkpointing steps vs gpuwise's prediction
                    (train_report.py: measured next to predicted, with the errors)
    nvml.py         NVML snapshots (nvidia-smi's fields, None when not available)
    sampler.py      a background NVML sampler of one GPU (utilization, power, energy) for the tracker
    watch.py        `gpuwise watch`: the live per-GPU terminal view
    tracker.py      the tracking API for any PyTorch loop (tokens/s, MFU/HFU with their denominator, data wait)
    track_summary.py  the tracker's per-step records and summary (text and JSON)
    rules.py        findings from a tracker summary: id, evidence, threshold, fix
    callbacks.py    thin Hugging Face Trainer and Lightning callbacks over the tracker
"""
