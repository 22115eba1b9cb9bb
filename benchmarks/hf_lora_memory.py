"""Peak memory of a transformers + PEFT LoRA training step on the GPU next to `gpuwise train --framework hf
--finetune lora`: the Hugging Face Trainer's loop written out (bf16 base weights, PEFT's fp32 adapters, autocast,
gradient checkpointing, torch AdamW over the adapters, `zero_grad(set_to_none=True)`, the model's outputs dropped
before `backward()` as Trainer.compute_loss does).

The model is built from the catalog's config.json (or a config.json path) with random weights (transformers
`from_config`, SDPA attention; `--attn eager` for the unfused kernels); `--layers` cuts it. Memory is torch.cuda's
max allocated / reserved over the steps.

`--qlora` runs the QLoRA recipe as transformers + PEFT + TRL's SFTTrainer set it up: every linear layer but the LM
head in bitsandbytes NF4 with double quantization (bf16 compute), PEFT's prepare_model_for_kbit_training (all other
16-bit weights to fp32, gradient checkpointing), LoRA adapters, then TRL's peft_module_casting_to_bf16 under bf16
(norms fp32, embeddings and LM head back to bf16). The model is built on the meta device and filled one layer at a
time (random bf16 weights quantized on the GPU), so a 34B model needs no 68 GB bf16 copy. Needs bitsandbytes.

Run: python benchmarks/hf_lora_memory.py llama-3.1-8b --seq 2048 --micro-batch 2 [--no-gc] [--rank 16]
     [--targets all-linear] [--steps 3] [--qlora] [--attn sdpa|eager] [--precision bf16|fp16]
     [--optimizer adamw|adamw-8bit] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
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
    ap.add_argument("--qlora", action="store_true", help="NF4 base (bitsandbytes) as PEFT + TRL set it up")
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    ap.add_argument("--precision", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--optimizer", choices=("adamw", "adamw-8bit"), default="adamw")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    import gpuwise
    from gpuwise.catalog.gpus import get_gpu
    from gpuwise.catalog.models import find_entry

    entry = find_entry(args.model)
    if entry is not None:
        cfg_path = pathlib.Path(gpuwise.__file__).parent / "catalog" / "data" / "models" / f"{entry.id}.json"
    else:
        cfg_path = pathlib.Path(args.model)  # a config.json (validation/models/...)
    cfg_doc = json.loads(cfg_path.read_text())
    if args.layers:
        cfg_doc["num_hidden_layers"] = args.layers
    with tempfile.TemporaryDirectory() as d:
        (pathlib.Path(d) / "config.json").write_text(json.dumps(cfg_doc))
        config = transformers.AutoConfig.from_pretrained(d)
    dev = torch.device("cuda")
    half = torch.bfloat16 if args.precision == "bf16" else torch.float16
    t0 = time.time()
    if args.qlora:
        model = _qlora_model(config, dev, half, args.attn)
    else:
        with torch.device(dev):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=half, attn_implementation=args.attn)
    targets = "all-linear" if args.targets == "all-linear" else args.targets.split(",")
    if args.qlora:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=not args.no_gc)
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0,
                                             target_modules=targets, task_type="CAUSAL_LM"))
    if args.qlora and args.precision == "bf16":
        _trl_casting_to_bf16(model)
    if not args.no_gc and not args.qlora:
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    adapter_dtypes = sorted({str(p.dtype) for p in params})
    if args.optimizer == "adamw-8bit":
        import bitsandbytes as bnb

        opt = bnb.optim.AdamW8bit(params, lr=1e-4)
    else:
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
        with torch.autocast("cuda", dtype=half):
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
        pred = predict(args, gpu.id).memory
    doc = {"model": entry.id if entry else args.model, "qlora": args.qlora, "attn": args.attn,
           "precision": args.precision, "optimizer": args.optimizer,
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or None,
           "layers": args.layers or config.num_hidden_layers, "seq": args.seq,
           "micro_batch": args.micro_batch, "lora_rank": args.rank, "lora_targets": args.targets,
           "gradient_checkpointing": not args.no_gc, "adapter_dtypes": adapter_dtypes,
           "device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "transformers": transformers.__version__, "steps": args.steps, "losses": losses, "build_s": built_s,
           "allocated_before_steps_bytes": before, "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved,
           "predicted_allocated_bytes": pred.torch_allocated if pred else None,
           "predicted_reserved_bytes": pred.torch_reserved if pred else None,
           "predicted_moment": pred.moment if pred else None}
    line = (f"{doc['model']} {'qlora' if args.qlora else 'lora'} {args.attn} {args.precision} L{doc['layers']} "
            f"seq {args.seq} mb {args.micro_batch} r{args.rank} {args.targets} "
            f"gc {not args.no_gc}: allocated {allocated / GIB:.2f} GiB, reserved {reserved / GIB:.2f} GiB")
    if pred:
        line += (f"; predicted {pred.torch_allocated / GIB:.2f} ({pred.torch_allocated / allocated - 1:+.1%}), "
                 f"{pred.torch_reserved / GIB:.2f} ({pred.torch_reserved / reserved - 1:+.1%})")
    print(line)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(doc, indent=1))


def predict(args, gpu_id: str):
    """`gpuwise train` for the run's settings (tests/measure/test_measured_gpu_runs.py calls it on the saved files)."""
    import gpuwise

    return gpuwise.train(args.model, gpu=gpu_id, num_gpus=1, seq=args.seq, micro_batch=args.micro_batch,
                         global_batch=args.micro_batch, framework="hf", finetune="qlora" if args.qlora else "lora",
                         lora_rank=args.rank, lora_targets=args.targets, recompute="none" if args.no_gc else "full",
                         precision=args.precision, optimizer=args.optimizer,
                         attention="unfused" if args.attn == "eager" else "flash")


def _qlora_model(config, dev, half, attn: str):
    """The model as `from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=half))` leaves it, with random
    weights: built on the meta device, then each decoder layer is put on the GPU in 16 bits, its linear layers
    quantized to NF4 in place, and the 16-bit copies dropped before the next layer."""
    import bitsandbytes as bnb
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=half, attn_implementation=attn)

    def fill(module, prefix: str):
        module.to_empty(device=dev, recurse=True)
        with torch.no_grad():
            for name, p in module.named_parameters(prefix=prefix):
                if p.dim() >= 2:
                    p.normal_(0.0, 0.02)
                elif "norm" in name or "ln" in name:
                    p.fill_(1.0)
                else:
                    p.zero_()

    def quantize(parent):
        for cname, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=half, compress_statistics=True, quant_type="nf4", device="meta")
                w = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                      quant_type="nf4", quant_storage=torch.uint8)
                q.weight = w.to(dev)
                if child.bias is not None:
                    q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
                setattr(parent, cname, q)
            else:
                quantize(child)

    body = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    for layer in body.layers:
        fill(layer, "layer")
        quantize(layer)
        torch.cuda.empty_cache()
    for name, module in body.named_children():
        if name != "layers":
            fill(module, name)
    if model.lm_head.weight.is_meta:
        fill(model.lm_head, "lm_head")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    if hasattr(body, "rotary_emb"):  # its inv_freq buffer was never computed on meta
        with torch.device(dev):
            body.rotary_emb = type(body.rotary_emb)(config=config)
    model.is_loaded_in_4bit = True  # what PEFT reads to treat the model as bitsandbytes-quantized
    return model


def _trl_casting_to_bf16(model) -> None:
    """trl.trainer.utils.peft_module_casting_to_bf16, which SFTTrainer runs for 4-bit models under bf16."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.LayerNorm) or "norm" in name:
            module.to(torch.float32)
        elif any(x in name for x in ("lm_head", "embed_tokens", "wte", "wpe")):
            if hasattr(module, "weight") and module.weight.dtype == torch.float32:
                module.to(torch.bfloat16)


if __name__ == "__main__":
    main()
