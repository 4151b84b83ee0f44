#!/usr/bin/env python3
"""PyTorch side of the end-to-end epoch benchmark: one epoch of the Fashion-MNIST MLP
784-256-256-10 at batch 128 (shuffled, normalised like TrainBench's loader), AdamW lr 1e-3 wd
0.01 or Muon-free AdamW only (PyTorch 1.13 has no Muon), then a test-set evaluation. Compare with
`trainbench-cli run resources/configs/fmnist-mlp-adamw.toml --set run.epochs=1` (the CLI prints
it/s; time it with `time`).

Run with Debian's PyTorch:  /usr/bin/python3 bench/torch_fmnist_epoch.py --threads 1
"""
import argparse
import gzip
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DIR = "/usr/share/datasets/fashion-mnist"


def read(images, labels):
    with gzip.open(f"{DIR}/{images}") as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(n, r * c)
    with gzip.open(f"{DIR}/{labels}") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return ((x.float() / 255) - 0.2860) / 0.3530, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    t0 = time.perf_counter()
    xtr, ytr = read("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    xte, yte = read("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
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
