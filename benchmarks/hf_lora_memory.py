"""Peak memory of a transformers + PEFT LoRA training step on the GPU next to `gpuwise train --framework hf
--finetune lora`: the Hugging Face Trainer's loop written out (bf16 base weights, PEFT's fp32 adapters, autocast,
gradient checkpointing, torch AdamW over the adapters, `zero_grad(set_to_none=True)`, the model's outputs dropped
before `backward()` as Trainer.compute_loss does).

The model is built from the catalog's config.json with random weights (transformers `from_config`, SDPA attention);
`--layers` cuts it. Memory is torch.cuda's max allocated / reserved over the steps.

Run: python benchmarks/hf_lora_memory.py llama-3.1-8b --seq 2048 --micro-batch 2 [--no-gc] [--rank 16]
     [--targets all-linear] [--steps 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

GIB = 2**30


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--targets", default="all-linear")
    ap.add_argument("--no-gc", action="store_true", help="gradient checkpointing off")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    import gpuwise
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import find_entry

    entry = find_entry(args.model)
    cfg_path = pathlib.Path(gpuwise.__file__).parent / "catalog" / "data" / "models" / f"{entry.id}.json"
    cfg_doc = json.loads(cfg_path.read_text())
    if args.layers:
        cfg_doc["num_hidden_layers"] = args.layers
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "config.json").write_text(json.dumps(cfg_doc))
        config = transformers.AutoConfig.from_pretrained(d)
    dev = torch.device("cuda")
    t0 = time.time()
    with torch.device(dev):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    targets = "all-linear" if args.targets == "all-linear" else args.targets.split(",")
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0,
                                             target_modules=targets, task_type="CAUSAL_LM"))
    if not args.no_gc:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    adapter_dtypes = sorted({str(p.dtype) for p in params})
    opt = torch.optim.AdamW(params, lr=1e-4)
    built_s = time.time() - t0
    vocab = config.vocab_size
    gen = torch.Generator(device=dev).manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    losses = []
    for _ in range(args.steps):
        x = torch.randint(0, vocab, (args.micro_batch, args.seq), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x)
        loss = out.loss
        del out  # Trainer.compute_loss returns the loss alone
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))
    torch.cuda.synchronize()
    allocated, reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()

    gpu = get_gpu(torch.cuda.get_device_name(dev))
    spec_model = args.model if not args.layers else None
    pred = None
    if spec_model is not None:
        res = gpuwise.train(spec_model, gpu=gpu.id, num_gpus=1, seq=args.seq, micro_batch=args.micro_batch,
                            global_batch=args.micro_batch, framework="hf", finetune="lora", lora_rank=args.rank,
                            lora_targets=args.targets, recompute="none" if args.no_gc else "full",
                            precision="bf16", optimizer="adamw")
        pred = res.memory
    doc = {"model": entry.id, "layers": args.layers or config.num_hidden_layers, "seq": args.seq,
           "micro_batch": args.micro_batch, "lora_rank": args.rank, "lora_targets": args.targets,
           "gradient_checkpointing": not args.no_gc, "adapter_dtypes": adapter_dtypes,
           "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "transformers": transformers.__version__, "steps": args.steps, "losses": losses, "build_s": built_s,
           "allocated_before_steps_bytes": before, "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved,
           "predicted_allocated_bytes": pred.torch_allocated if pred else None,
           "predicted_reserved_bytes": pred.torch_reserved if pred else None,
           "predicted_moment": pred.moment if pred else None}
    line = (f"{entry.id} L{doc['layers']} seq {args.seq} mb {args.micro_batch} r{args.rank} {args.targets} "
            f"gc {not args.no_gc}: allocated {allocated / GIB:.2f} GiB, reserved {reserved / GIB:.2f} GiB")
    if pred:
        line += (f"; predicted {pred.torch_allocated / GIB:.2f} ({pred.torch_allocated / allocated - 1:+.1%}), "
                 f"{pred.torch_reserved / GIB:.2f} ({pred.torch_reserved / reserved - 1:+.1%})")
    print(line)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
