#!/usr/bin/env python3
"""PyTorch side of the end-to-end epoch benchmark: one epoch of the Fashion-MNIST MLP
784-256-256-10 at batch 128 (shuffled, normalised like TrainBench's loader), AdamW lr 1e-3 wd
0.01 or Muon-free AdamW only (PyTorch 1.13 has no Muon), then a test-set evaluation. Compare with
`trainbench-cli run resources/configs/fmnist-mlp-adamw.toml --set run.epochs=1` (the CLI prints
it/s; time it with `time`).

Run with Debian's PyTorch:  /usr/bin/python3 bench/torch_fmnist_epoch.py --threads 1
"""
import argparse
import os
import sys
import time

import torch_threads  # noqa: F401  (pins OpenBLAS to --threads before torch loads it)
import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from torch_nn import read_fmnist  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    t0 = time.perf_counter()
    xtr, ytr = read_fmnist("train")
    xte, yte = read_fmnist("t10k")
    load = time.perf_counter() - t0
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    t1 = time.perf_counter()
    for _ in range(a.epochs):
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), 128):
            idx = perm[i:i + 128]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    train = time.perf_counter() - t1
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    total = time.perf_counter() - t0
    print(f"torch {torch.__version__} threads={a.threads}: load {load:.2f} s, train "
          f"{train / a.epochs:.2f} s/epoch, total {total:.2f} s, test accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
