"""Peak memory of the language-model loss per logit element, measured: what `logits_bytes_per_element`
(estimate/activations.py) assumes for each framework's cross-entropy.

For each loss below, the logits come from a real matmul (hidden [T, h] @ head [h, V], bf16, both requiring grad) and
the script reads torch.cuda's allocated bytes: after the forward (what the loss saved, the 16-bit logits deleted as
torchtitan deletes `pred`) and the peak of the backward, both above what existed before the logits, divided by
T x V. The backward's peak includes the 16-bit gradient of the logits and the gradients of hidden and head (small
next to T x V when V >> h).

  torchtitan      F.cross_entropy(logits.float(), labels): the fused log-softmax and nll kernels.
  loss-parallel   the same under torch.distributed.tensor.parallel.loss_parallel() on DTensor logits sharded over
                  the vocabulary (torchtitan with TP > 1), on a one-GPU mesh: the same code path as with TP ranks.
  transformers    transformers.loss.loss_utils.ForCausalLMLoss (what Trainer's models call).

Run: python benchmarks/loss_memory.py [--tokens 16384] [--vocab 65536] [--hidden 2048] [--json FILE]
Needs a CUDA GPU (the numbers are torch.cuda.memory_allocated); `--device cpu` only checks that it runs.
"""

from __future__ import annotations

import argparse
import json
import os


def _measure(torch, dev, name: str, loss_fn, tokens: int, vocab: int, hidden: int) -> dict:
    cuda = dev.type == "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    h = torch.randn(tokens, hidden, device=dev, dtype=torch.bfloat16, generator=gen, requires_grad=True)
    w = (torch.randn(hidden, vocab, device=dev, dtype=torch.bfloat16, generator=gen) / hidden ** 0.5).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), device=dev, generator=gen)
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    logits = h @ w
    loss = loss_fn(logits, labels)
    del logits
    if cuda:
        torch.cuda.synchronize()
        forward_peak = torch.cuda.max_memory_allocated() - base
        saved = torch.cuda.memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        backward_peak = torch.cuda.max_memory_allocated() - base
    value = float(loss.detach())
    n = tokens * vocab
    out = {"loss": name, "tokens": tokens, "vocab": vocab, "hidden": hidden, "loss_value": value}
    if cuda:
        out.update(saved_bytes_per_element=saved / n, forward_peak_bytes_per_element=forward_peak / n,
                   backward_peak_bytes_per_element=backward_peak / n)
    del h, w, loss
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--vocab", type=int, default=65536)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    dev = torch.device(args.device)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import loss_parallel

    mesh = init_device_mesh(dev.type, (1,))

    def titan(logits, labels):
        return F.cross_entropy(logits.float(), labels)

    def parallel(logits, labels):
        d = DTensor.from_local(logits, mesh, [Shard(1)], run_check=False)  # as ColwiseParallel's output
        with loss_parallel():
            loss = F.cross_entropy(d.float(), distribute_tensor(labels, mesh, [Replicate()]))
        return _ParallelLoss(loss, loss_parallel)

    class _ParallelLoss:  # backward must run under loss_parallel() too
        def __init__(self, loss, ctx) -> None:
            self.loss, self.ctx = loss, ctx

        def backward(self) -> None:
            with self.ctx():
                self.loss.backward()

        def detach(self):
            return self.loss.full_tensor().detach()

    losses = [("torchtitan", titan), ("loss-parallel", parallel)]
    try:
        from transformers.loss.loss_utils import ForCausalLMLoss

        losses.append(("transformers", lambda logits, labels: ForCausalLMLoss(logits[None], labels[None],
                                                                              vocab_size=args.vocab)))
    except ImportError:
        pass
    rows = []
    for name, fn in losses:
        r = _measure(torch, dev, name, fn, args.tokens, args.vocab, args.hidden)
        rows.append(r)
        if "saved_bytes_per_element" in r:
            print(f"{name:14} saved {r['saved_bytes_per_element']:6.2f} B  forward peak "
                  f"{r['forward_peak_bytes_per_element']:6.2f} B  backward peak "
                  f"{r['backward_peak_bytes_per_element']:6.2f} B per logit element  (loss {r['loss_value']:.3f})")
        else:
            print(f"{name:14} ran (loss {r['loss_value']:.3f}); no CUDA memory statistics on {dev.type}")
    dist.destroy_process_group()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                       "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
