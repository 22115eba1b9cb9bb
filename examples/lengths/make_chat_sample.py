"""Write chat_sample.jsonl: 1,000 chat-like (prompt, output) token lengths for `gpuwise infer --dataset-path`.

    python examples/lengths/make_chat_sample.py

Made by gpuwise, not downloaded: log-normal lengths with ShareGPT's published spread, kept within vLLM bench's
ShareGPT filter and scaled to the means vLLM's benchmark prints for ShareGPT on Llama-3-class tokenizers (about 220
prompt and 195 generated tokens per request; validation/serving_sources/sharegpt_lengths.md). See
gpuwise.plan.serve.chat_lengths.
"""

import json
from pathlib import Path

from gpuwise.plan.serve import chat_lengths

MEAN_PROMPT, MEAN_OUTPUT, N = 220, 195, 1000

if __name__ == "__main__":
    prompts, outputs = chat_lengths(N, MEAN_PROMPT, MEAN_OUTPUT)
    out = Path(__file__).with_name("chat_sample.jsonl")
    out.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": o}) + "\n" for p, o in zip(prompts, outputs)))
    print(f"wrote {out} ({N} requests, mean prompt {sum(prompts) / N:.0f}, mean output {sum(outputs) / N:.0f})")
