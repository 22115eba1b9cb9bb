#!/usr/bin/env bash
# The measurements to take whenever a GPU is lent (issue 6, item 6), in one batch:
#   calibrate (device profile), bench train on four models/layouts that fit one GPU (with the calibrated profile
#   and without), prefill sustained and attention by thread blocks next to the kernel model, and gpuwise infer next
#   to a real transformers decode loop at several batch sizes.
# Usage: bash benchmarks/gpu_session.sh OUTDIR [calibrate|train|ac|prefill|attention|cudnn-sdpa|qlora|decode|all]
#        (then commit OUTDIR as benchmarks/results/<gpu>/). Each stage fits in one 10-minute call of the device tool; train and decode
#        read OUTDIR/profile.json from calibrate.
# Needs: torch (CUDA build), transformers, nvidia-ml-py, and this package installed (pip install -e ".[measure]").
set -uo pipefail
out="${1:?usage: gpu_session.sh OUTDIR [calibrate|train|ac|prefill|attention|cudnn-sdpa|qlora|decode|all]}"
stage="${2:-all}"
dtypes="${GPUWISE_CAL_DTYPES:-}"  # e.g. bf16,fp8 for a shorter calibration
mkdir -p "$out"
want() { [ "$stage" = all ] || [ "$stage" = "$1" ]; }
log() { echo "+ $*" | tee -a "$out/commands.txt" >&2; }  # stderr: stdout is the JSON
run() { log "$@"; "$@"; }

if want calibrate; then
run nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$out/nvidia-smi.csv"
run gpuwise calibrate ${dtypes:+--dtypes "$dtypes"} --save "$out/profile.json" --json > "$out/calibrate.json"
python3 - "$out/calibrate.json" <<'PY' | tee "$out/calibrate.txt"
import json, sys
d = json.load(open(sys.argv[1]))
for m in d["matmul"]:
    print(f"{m['dtype']:5} best {m['best_tflops']:8.1f} TFLOP/s of {m['peak_tflops']} fitted eff {m['fitted_efficiency']}")
for t in d["transfers"]:
    print(f"{t['kind']:13} {t['gb_s']:8.1f} GB/s (datasheet {t['reference_gb_s']})")
print("launch overhead us", d["kernel_overhead_us"])
PY
fi

train() {  # NAME ARGS...
  local name="$1"; shift
  run gpuwise bench train "$@" --steps 10 --warmup-steps 3 --json > "$out/train-$name.json"
  run gpuwise bench train "$@" --steps 10 --warmup-steps 3 --profile "$out/profile.json" --json \
    > "$out/train-$name-profiled.json"
}
if want train; then
train gpt2-s1024-mb8 gpt2 --seq 1024 --micro-batch 8
train llama-3.2-1b-s4096-mb2 llama-3.2-1b --seq 4096 --micro-batch 2
train llama-3.2-1b-s4096-mb4-recompute llama-3.2-1b --seq 4096 --micro-batch 4 --recompute full
# 8 of 32 layers: with fp32 master weights and AdamW (16 bytes per parameter), 16 layers plus the 128k-vocabulary
# embedding and head (4.5B parameters, 72 GB of states) do not fit 80 GB.
train llama-3.1-8b-8layers-s4096-mb1 llama-3.1-8b --layers 8 --seq 4096 --micro-batch 1 --recompute full
# one micro-batch per step against two: gradients absent at the start of the first backward, present from the second
train llama-3.1-8b-8layers-s8192-mb1 llama-3.1-8b --layers 8 --seq 8192 --micro-batch 1
train llama-3.1-8b-8layers-s8192-mb1-acc2 llama-3.1-8b --layers 8 --seq 8192 --micro-batch 1 --global-batch 2
fi

# torchtitan's activation checkpointing modes (issue 17: peak memory per mode; issue 18: the recompute's cost) on
# one model and batch, then op-level SAC on deeper models and other families. Sized for a 141 GB H200; on an 80 GB
# H100 the 16-layer and mb2 runs exceed the card (gpuwise train predicts 72-107 GiB allocated for them).
ac() {  # NAME ARGS...: one run, no profiled twin (bench_vs_model.py re-predicts with --profile)
  local name="$1"; shift
  run timeout 120 gpuwise bench train "$@" --steps 8 --warmup-steps 3 --json > "$out/train-$name.json" \
    2> "$out/train-$name.log"
}
if want ac; then
for mode in none op layer:2 full; do
  ac "llama-3.1-8b-8layers-s8192-mb2-ac-${mode/:/}" llama-3.1-8b --layers 8 --seq 8192 --micro-batch 2 --recompute "$mode"
done
ac llama-3.1-8b-16layers-s8192-mb1-ac-op llama-3.1-8b --layers 16 --seq 8192 --micro-batch 1 --recompute op
ac llama-3.1-8b-16layers-s8192-mb2-ac-op llama-3.1-8b --layers 16 --seq 8192 --micro-batch 2 --recompute op
ac qwen3-8b-8layers-s8192-mb2-ac-op qwen3-8b --layers 8 --seq 8192 --micro-batch 2 --recompute op
ac llama-3.2-3b-s8192-mb2-ac-op llama-3.2-3b --seq 8192 --micro-batch 2 --recompute op
fi

# prefill in a burst and sustained next to forward_pass_s, and flash attention for training by thread blocks next to
# attention_s (issue 19: the prefill kernels' rate under load; issue 18: the attention kernel's rate by length and
# parallel work). About 2.5 and 1.5 minutes.
if want prefill; then
  run python3 benchmarks/prefill_sustained.py --model qwen3-14b --shapes 2x4096,1x2048,4x4096 --seconds 30 \
    --json "$out/prefill-qwen3-14b.json" --smi-log "$out/prefill-smi-qwen3-14b.csv"
fi
if want attention; then
  run python3 benchmarks/attention_train.py --batches 1,4 --heads 4,8,16,32,64 --seqs 1024,2048,4096,8192 \
    --json "$out/attention-train-grid.json"
  run python3 benchmarks/attention_train.py --batches 1 --heads 2,4,8,16,32 --seqs 16384,32768 \
    --json "$out/attention-train-long.json"
fi

# cuDNN's fused attention with gpt-oss's 128-key window and attention sinks, as Transformer Engine runs them
# (issue 18: `attention_kernels.band_work`, `sink_backward_s`). Needs the nvidia-cudnn-frontend wheel (carry it: the
# device README's notes); about 30 s.
if want cudnn-sdpa; then
  run python3 benchmarks/cudnn_sdpa.py --check --json "$out/cudnn-sdpa.json"
fi

# transformers + PEFT + bitsandbytes QLoRA as TRL sets it up (issue 17: the NF4 base, prepare_model_for_kbit_training's
# fp32 casts, the eager attention of the published out-of-memory run), next to `gpuwise train --framework hf
# --finetune qlora`. Needs bitsandbytes (carry it: the device README's notes); about 3 minutes.
qlora() {  # NAME ARGS... (ALLOC=... sets PYTORCH_CUDA_ALLOC_CONF for the run)
  local name="$1"; shift
  run env PYTORCH_CUDA_ALLOC_CONF="${ALLOC:-}" timeout 150 python3 benchmarks/hf_lora_memory.py "$@" --qlora --optimizer adamw-8bit --steps 3 \
    --json "$out/hf-qlora-$name.json" 2> "$out/hf-qlora-$name.log"
}
if want qlora; then
qlora llama-3.1-8b-s2048-mb2 llama-3.1-8b --seq 2048 --micro-batch 2
qlora llama-3.1-8b-s8192-mb1 llama-3.1-8b --seq 8192 --micro-batch 1
qlora llama-3.1-8b-s2048-mb1-nogc llama-3.1-8b --seq 2048 --micro-batch 1 --no-gc
qlora codellama-34b-s2048-mb2 validation/models/codellama-34b.json --seq 2048 --micro-batch 2
qlora codellama-34b-s2048-mb2-eager validation/models/codellama-34b.json --seq 2048 --micro-batch 2 --attn eager
qlora qwen3-14b-s2048-mb2-r32-fp16 qwen3-14b --seq 2048 --micro-batch 2 --rank 32 --precision fp16
# the caching allocator's slack (reserved - allocated) with expandable segments, which map more memory into one
# segment instead of caching fixed-size ones
ALLOC=expandable_segments:True qlora llama-3.1-8b-s8192-mb1-expandable llama-3.1-8b --seq 8192 --micro-batch 1
ALLOC=expandable_segments:True qlora codellama-34b-s2048-mb2-eager-expandable validation/models/codellama-34b.json \
  --seq 2048 --micro-batch 2 --attn eager
fi

if want decode; then
for m in llama-3.2-1b llama-3.1-8b; do
  run python3 benchmarks/decode_vs_infer.py "$m" --batches 1,8,32 --prompt 512 --new 128 --json "$out/decode-$m.json"
done
fi
echo "results in $out"
