"""Measurement: the real device, the real network and real training loops, fed back into the estimators.

Everything here needs torch and/or NVML (the optional extra `pip install "gpuwise[measure]"`). Nothing in this
package is imported by the analytical path; every module imports torch or pynvml lazily, inside functions, through
`_deps`, which turns a missing package, driver or GPU into one clear line (exit 2 in the CLI).

    commands.py     the commands as the CLI runs them: calibrate, bench_comm, bench_train, watch (args -> text);
                    the top of this package, which nothing here imports
    timing.py       how to time a kernel: CUDA events, warm-up, median and spread, rotating buffers
    calibrate_run.py  `gpuwise calibrate`: device identity and state, the order of the work -> a Calibration
      calibrate_gemm.py       the GEMM sweep: dtypes and shapes a device runs, one GEMM timed
      calibrate_fit.py        the performance model's GEMM curve (estimate/kernels.py) fitted to the sweep
      calibrate_bandwidth.py  DRAM and host<->device bandwidth, kernel launch overhead
      calibrate_result.py     the result types; calibrate_profile.py the device profile JSON `--profile` reads
                              (catalog/devices.py); calibrate_report.py its text and JSON
    dist.py         torchrun environment: rank, world, nodes, backend (nccl on GPUs, gloo on CPU)
    comm_run.py     `gpuwise bench comm`: collectives timed over message sizes on every rank
      comm_plan.py    what to run, from the options; comm_sizes.py nccl-tests' sizes, counts, algbw/busbw
      comm_result.py  the rows and the network figures fitted from them; comm_profile.py the network profile
                      file; comm_report.py its tables and JSON
    torch_model.py  a plain PyTorch decoder built from a ModelSpec (the model `bench train` runs)
    train_run.py    `gpuwise bench train`: FSDP2 / DDP / TP+SP / checkpointing steps vs gpuwise's prediction
      train_config.py   the model, batch and layout from the options or a plan file
      train_parallel.py the layout applied with PyTorch's APIs; train_loop.py the timed steps
      train_result.py   measured next to predicted; train_report.py its table and JSON, with the errors
    nvml.py         NVML snapshots (nvidia-smi's fields, None when not available)
    sampler.py      a background NVML sampler of one GPU (utilization, power, energy) for the tracker
    watch_view.py   `gpuwise watch`: the live per-GPU terminal view of one refresh (the loop: commands.watch)
    tracker.py      the tracking API for any PyTorch loop (tokens/s, MFU/HFU with their denominator, data wait)
    tracker_for_model.py  Tracker.for_model: FLOPs, peak, prediction and sampler from the catalogs
    track_summary.py  the tracker's per-step records and summary (text and JSON)
    rules.py        findings from a tracker summary: id, evidence, threshold, fix
    callbacks.py    thin Hugging Face Trainer and Lightning callbacks over the tracker
"""
