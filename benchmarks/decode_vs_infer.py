"""`gpuwise infer --engine hf` next to a real Hugging Face `generate` loop: time to first token and time per output
token at several batch sizes. Needs torch and transformers; meant for a GPU (the CPU path is a smoke test).

The model is built from its config with random weights (bf16, SDPA attention): speed does not depend on the
weights. TTFT = the median time of `generate(max_new_tokens=1)`; TPOT = (t(N) - t(1)) / (N - 1) with
`min_new_tokens = max_new_tokens = N`, so every sequence decodes N tokens (no early EOS).

Run: python benchmarks/decode_vs_infer.py llama-3.2-1b --batches 1,8,32 --prompt 512 --new 128 [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _timed(torch, dev, fn, reps: int) -> float:
    fn()  # warm-up
    out = []
    for _ in range(reps):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--gpu", help="catalog GPU for the prediction (default: the device's name)")
    ap.add_argument("--layers", type=int, help="build only this many layers (and predict for the same)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()

    import torch
    import transformers

    import gpuwise
    from gpuwise.catalog.models import load_model

    dev = torch.device(a.device)
    m = load_model(a.model)
    path = m.config_path
    if path is None:  # catalog models ship their config.json in the package
        from pathlib import Path

        import gpuwise.catalog as cat

        path = Path(cat.__file__).parent / "data" / "models" / f"{m.id}.json"
    cfg = transformers.AutoConfig.from_pretrained(str(path))
    if a.layers:
        cfg.num_hidden_layers = a.layers
        from dataclasses import replace

        spec = m.spec
        m = replace(m, spec=replace(spec, num_layers=a.layers,
                                    layer_types=spec.layer_types[:a.layers] if spec.layer_types else ()))
    cfg._attn_implementation = "sdpa"
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    with torch.device(dev):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    gpu = a.gpu or (torch.cuda.get_device_name(dev) if dev.type == "cuda" else None)
    rows = []
    for batch in (int(x) for x in a.batches.split(",")):
        ids = torch.randint(0, cfg.vocab_size, (batch, a.prompt), device=dev)

        def gen(n: int):
            with torch.no_grad():
                return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                      do_sample=False, pad_token_id=0)

        t1 = _timed(torch, dev, lambda: gen(1), a.reps)
        tn = _timed(torch, dev, lambda: gen(a.new), a.reps)
        row = {"batch": batch, "prompt_tokens": a.prompt, "output_tokens": a.new, "ttft_s": t1,
               "tpot_s": (tn - t1) / (a.new - 1), "device": str(dev), "torch": torch.__version__,
               "transformers": transformers.__version__}
        if gpu:
            p = gpuwise.infer(m, gpu=gpu, engine="hf", batch=batch, prompt_tokens=a.prompt, output_tokens=a.new)
            row.update(gpu=p.request.gpu.id, predicted_ttft_s=p.ttft_s, predicted_tpot_s=p.tpot_s,
                       ttft_error=(p.ttft_s - t1) / t1, tpot_error=(p.tpot_s - row["tpot_s"]) / row["tpot_s"])
        rows.append(row)
        pred = (f"  predicted {row['predicted_ttft_s'] * 1e3:8.2f} / {row['predicted_tpot_s'] * 1e3:7.2f} ms"
                f"  errors {row['ttft_error']:+.1%} / {row['tpot_error']:+.1%}") if gpu else ""
        print(f"batch {batch:4d}: TTFT {t1 * 1e3:8.2f} ms, TPOT {row['tpot_s'] * 1e3:7.2f} ms{pred}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": a.model, "layers": a.layers, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
