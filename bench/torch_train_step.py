#!/usr/bin/env python3
"""PyTorch side of bench/vs_torch.sh: the shipped workloads written in PyTorch, trained for a
number of steps; prints the median step time after a warm-up in the line format of
bench/step_bench.cpp (the TrainBench side).

  /usr/bin/python3 bench/torch_train_step.py --model mlp|cnn|qwen-tiny|gpt2-small
      --optimizer adamw|muon
      [--threads T] [--steps N] [--warmup W] [--foreach auto|on|off]

A step is what TrainBench's trainer times as time.step_ms: the batch (drawn from the data in
memory, shuffled like the trainer's loader), forward + cross-entropy, backward, the global
gradient norm (TrainBench logs it every step; torch.nn.utils.clip_grad_norm_ with an infinite
max_norm computes it without clipping), the optimizer step(s), zero_grad and the LR scheduler.

Muon has no PyTorch 1.13 implementation; the peer below is Keller Jordan's reference
(https://github.com/KellerJordan/Muon, muon.py): Nesterov momentum 0.95, five quintic
Newton-Schulz iterations in the addmm form, shape scaling max(1, rows/cols)^0.5 and decoupled
weight decay, in float32 like TrainBench's CPU path. The hidden matrices go to Muon, the rest to
AdamW, as the configs in resources/configs split them.

--foreach auto (the default) times AdamW with foreach off and on during the warm-up and keeps
the faster, so the comparison is against PyTorch's best setting.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import torch_threads  # noqa: E402,F401  (pins OpenBLAS to --threads before torch loads it)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_nn import Gpt2, Muon, QwenTiny, read_fmnist  # noqa: E402  (shared with the other scripts)

FORTUNES = "/usr/share/games/fortunes"


def fortunes():
    data = bytearray()
    seen = set()
    for root, _, files in sorted(os.walk(FORTUNES)):
        for name in sorted(files):
            path = os.path.realpath(os.path.join(root, name))
            if path in seen or name.endswith(".dat"):
                continue
            seen.add(path)
            with open(path, "rb") as f:
                data += f.read()
    return torch.frombuffer(data, dtype=torch.uint8).long()


def fmnist_cnn():
    """resources/configs/fmnist-cnn-*.toml: two blocks of 3x3 convolution (no bias), batch norm,
    ReLU and 2x2 max pooling (32 and 64 channels), flatten, dropout 0.25, Linear 3136-128, ReLU,
    dropout 0.25, Linear 128-10; flat 784-value inputs reshaped to 1x28x28."""
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)),
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.25), nn.Linear(3136, 128), nn.ReLU(),
        nn.Dropout(0.25), nn.Linear(128, 10))


def build(model_kind, optimizer, foreach):
    if model_kind == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, 10))
        adamw_lr, betas = 1e-3, (0.9, 0.999)
        hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and not n.startswith("4.")]
    elif model_kind == "cnn":
        model = fmnist_cnn()
        adamw_lr, betas = 1e-3, (0.9, 0.999)
        # fmnist-cnn-muon.toml: the conv filters (flattened) and the hidden Linear to Muon.
        hidden = [p for n, p in model.named_parameters()
                  if p.ndim >= 2 and not n.startswith("14.")]
    elif model_kind == "gpt2-small":
        # resources/configs/gpt-tokens-*.toml at GPT-2 small's shape (as bench/vs_torch.sh sets
        # it): AdamW lr 1e-3, weight decay 0.1; Muon for the blocks' matrices.
        model = Gpt2()
        adamw_lr, betas, wd = 1e-3, (0.9, 0.95), 0.1
        hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and n.startswith("h.")]
    else:
        model = QwenTiny()
        adamw_lr, betas = 3e-3, (0.9, 0.95)
        hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and "embed" not in n]
    if model_kind != "gpt2-small":
        wd = 0.01
    if optimizer == "adamw":
        opts = [torch.optim.AdamW(model.parameters(), lr=adamw_lr, betas=betas, weight_decay=wd,
                                  foreach=foreach)]
    else:
        ids = {id(p) for p in hidden}
        rest = [p for p in model.parameters() if id(p) not in ids]
        opts = [Muon(hidden), torch.optim.AdamW(rest, lr=adamw_lr, betas=betas, weight_decay=0.01,
                                                foreach=foreach)]
    scheds = [torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=100000) for o in opts]
    return model, opts, scheds


def batches(model_kind, gen):
    if model_kind in ("mlp", "cnn"):
        x, y = read_fmnist("train")
        while True:
            perm = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x) - 127, 128):
                idx = perm[i:i + 128]
                yield x[idx], y[idx]
    else:
        # qwen-tiny: 16 windows of 64 bytes of the fortunes; gpt2-small: 4 windows of 64 GPT-2
        # tokens (uniformly random ids: the step's cost does not depend on which tokens).
        data = fortunes() if model_kind == "qwen-tiny" else torch.randint(
            0, 50257, (1 << 20,), generator=gen)
        batch = 16 if model_kind == "qwen-tiny" else 4
        while True:
            start = torch.randint(0, len(data) - 65, (batch,), generator=gen)
            win = torch.stack([data[s:s + 65] for s in start.tolist()])
            yield win[:, :64], win[:, 1:]


def run(model_kind, optimizer, foreach, steps, warmup):
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(1)
    model, opts, scheds = build(model_kind, optimizer, foreach)
    params = list(model.parameters())
    it = batches(model_kind, gen)
    times, loss = [], 0.0
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        x, y = next(it)
        logits = model(x)
        loss_t = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss = loss_t.item()
        loss_t.backward()
        torch.nn.utils.clip_grad_norm_(params, math.inf)
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad(set_to_none=True)
        for s in scheds:
            s.step()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    n = len(times)
    med = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
    return med, loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("mlp", "cnn", "qwen-tiny", "gpt2-small"), required=True)
    ap.add_argument("--optimizer", choices=("adamw", "muon"), required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--foreach", choices=("auto", "on", "off"), default="auto")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.foreach == "auto":
        # GPT-2 small's steps take seconds: probe with as few as the warm-up asks.
        probe, lead = (max(2, a.warmup), 1) if a.model == "gpt2-small" else (max(10, a.warmup), 3)
        off, _ = run(a.model, a.optimizer, False, probe, lead)
        on, _ = run(a.model, a.optimizer, True, probe, lead)
        foreach = on < off
    else:
        foreach = a.foreach == "on"
    med, loss = run(a.model, a.optimizer, foreach, a.steps, a.warmup)
    print(f"torch threads={torch.get_num_threads()} "
          f"openblas_threads={os.environ['OPENBLAS_NUM_THREADS']} steps={a.steps} time.step_ms={med:.4f} "
          f"foreach={'on' if foreach else 'off'} loss={loss:.5f}")


if __name__ == "__main__":
    main()
