#!/usr/bin/env python3
"""PyTorch on the GPU machine, the same models and shapes as bench/gpu/run.sh trains with
trainbench-cli: the Fashion-MNIST MLP (784-256-256-10, batch 128, AdamW) and qwen-tiny (4 layers,
width 128, context 64, batch 16) with AdamW and with Muon + AdamW. Prints, per model, the median
step time (forward + loss + backward + optimizer, synchronised), tokens/s and the optimizer step
alone; and mm TFLOP/s for the GEMM table.

  python3 bench/gpu/torch_gpu.py [--steps 100]
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from torch_nn import Muon, QwenTiny  # noqa: E402  (the same model and Muon as the CPU scripts)


def optimizers(model, kind):
    if kind == "adamw":
        return [torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)]
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.ndim == 2 and "embed" not in n)]
    return [Muon(hidden, weight_decay=0.0, ns_dtype=torch.bfloat16),
            torch.optim.AdamW(rest, lr=3e-3, fused=True)]


def bench(name, model, batch, target, kind, steps, tokens):
    opts = optimizers(model, kind)
    step_ms, opt_ms = [], []
    for i in range(steps + 10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(batch)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= 10:  # warm-up
            step_ms.append((t2 - t0) * 1e3)
            opt_ms.append((t2 - t1) * 1e3)
    step_ms.sort()
    opt_ms.sort()
    s, o = step_ms[len(step_ms) // 2], opt_ms[len(opt_ms) // 2]
    print(f"torch {name:<18} {kind:<6} step {s:8.3f} ms  optimizer {o:7.3f} ms  "
          f"{tokens / (s / 1e3):12.0f} {'tokens' if tokens != batch.shape[0] else 'samples'}/s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args()
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}, TF32 matmul "
          f"{torch.backends.cuda.matmul.allow_tf32}")
    torch.manual_seed(0)
    for n, dt in ((4096, torch.float32), (8192, torch.float32), (4096, torch.bfloat16),
                  (8192, torch.bfloat16), (4096, torch.float64)):
        x = torch.randn(n, n, device=dev, dtype=dt)
        y = torch.randn(n, n, device=dev, dtype=dt)
        for _ in range(3):
            x @ y
        torch.cuda.synchronize()
        reps, t = 20, time.perf_counter()
        for _ in range(reps):
            x @ y
        torch.cuda.synchronize()
        sec = (time.perf_counter() - t) / reps
        print(f"torch mm {str(dt):<15} n={n}: {sec * 1e3:8.3f} ms  {2 * n ** 3 / sec / 1e12:7.1f} TFLOP/s")
    mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 10)).to(dev)
    x = torch.randn(128, 784, device=dev)
    y = (torch.arange(128, device=dev) * 7) % 10
    bench("mlp", mlp, x, y, "adamw", a.steps, 128)
    tok = torch.randint(0, 256, (16, 65), device=dev)
    for kind in ("adamw", "muon"):
        q = QwenTiny().to(dev)
        bench("qwen-tiny", q, tok[:, :64], tok[:, 1:], kind, a.steps, 16 * 64)


if __name__ == "__main__":
    main()
