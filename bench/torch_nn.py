#!/usr/bin/env python3
"""PyTorch side of bench/nn_bench.cpp: forward + cross-entropy + backward + zero_grad of the same
two models at the same shapes, float32 on the CPU. Also the module the other PyTorch scripts
share: QwenTiny, Gpt2 (GPT-2 layout), the reference Muon and the Fashion-MNIST reader.

Run with Debian's PyTorch:  /usr/bin/python3 bench/torch_nn.py --threads 1
"""
import argparse
import gzip
import math
import struct
import time

import torch_threads  # noqa: F401  (pins OpenBLAS to --threads before torch loads it)
import torch  # noqa: E402
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, ctx):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(d, d) for _ in range(3))
        self.o_proj = nn.Linear(d, d, bias=False)
        inv = 10000.0 ** (-torch.arange(0, self.hd, 2, dtype=torch.float64) / self.hd)
        ang = torch.arange(ctx, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        q, k = rope(q, self.cos[:t], self.sin[:t]), rope(k, self.cos[:t], self.sin[:t])
        s = q @ k.transpose(-2, -1) / math.sqrt(self.hd)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        p = s.masked_fill(mask, float("-inf")).softmax(-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d, heads, ctx, ffn):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads, ctx)
        self.gate_proj = nn.Linear(d, ffn, bias=False)
        self.up_proj = nn.Linear(d, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class QwenTiny(nn.Module):
    def __init__(self, vocab=256, d=128, layers=4, heads=4, ctx=64, ffn=352):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads, ctx, ffn) for _ in range(layers))
        self.norm = RMSNorm(d)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h) @ self.embed.weight.t()


class Gpt2Block(nn.Module):
    """nanoGPT's Block (karpathy/nanoGPT model.py) with its non-flash attention path: PyTorch
    1.13 has no F.scaled_dot_product_attention."""

    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        y = s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    """TrainBench's `gpt` model: learned token and position embeddings, pre-norm blocks, a final
    LayerNorm and a head tied to the (padded) token table whose padded logits are dropped.
    Defaults: GPT-2 small with llm.c's 50304-row table."""

    def __init__(self, vocab=50257, padded_vocab=50304, ctx=1024, layers=12, heads=12, d=768):
        super().__init__()
        self.vocab = vocab
        self.wte, self.wpe = nn.Embedding(padded_vocab, d), nn.Embedding(ctx, d)
        self.h = nn.ModuleList(Gpt2Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        # GPT-2's initialisation, as TrainBench's and nanoGPT's: N(0, 0.02), the residual
        # projections N(0, 0.02/sqrt(2 layers)), biases 0, padded rows 0. (PyTorch's default
        # N(0, 1) embeddings start at a loss near 100, where exp() underflows into slow
        # subnormals.)
        with torch.no_grad():
            for n, p in self.named_parameters():
                if p.ndim == 2:
                    std = 0.02 / math.sqrt(2 * layers) if n.endswith("proj.weight") else 0.02
                    p.normal_(0.0, std)
            self.wte.weight[vocab:].zero_()

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        return (self.ln_f(x) @ self.wte.weight.t())[..., :self.vocab]


FMNIST = "/usr/share/datasets/fashion-mnist"


def read_fmnist(split):
    """Fashion-MNIST's "train" or "t10k" split from Debian's dataset-fashion-mnist, normalised
    like TrainBench's loader: (x/255 - 0.2860)/0.3530, labels as int64."""
    with gzip.open(f"{FMNIST}/{split}-images-idx3-ubyte.gz") as f:
        _, n, r, c = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(n, r * c)
    with gzip.open(f"{FMNIST}/{split}-labels-idx1-ubyte.gz") as f:
        f.read(8)
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return ((x.float() / 255) - 0.2860) / 0.3530, y


def newton_schulz5(g, steps=5, eps=1e-7, dtype=None):
    """Muon's orthogonalisation (Keller Jordan's quintic iteration), in the addmm form; in `dtype`
    (bf16 on a GPU) or g's own."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g if dtype is None else g.to(dtype)
    x = x / (x.norm() + eps)
    transposed = x.size(0) > x.size(1)
    if transposed:
        x = x.T
    for _ in range(steps):
        s = x @ x.T
        bm = torch.addmm(s, s, s, beta=b, alpha=c)  # b*S + c*S@S
        x = torch.addmm(x, bm, x, beta=a)  # a*X + B@X
    if transposed:
        x = x.T
    return x.to(g.dtype)


class Muon(torch.optim.Optimizer):
    """Muon for hidden matrices and conv filters viewed as [out, in*kh*kw]
    (https://github.com/KellerJordan/Muon, muon.py): Nesterov
    momentum, Newton-Schulz (in `ns_dtype`, default the parameter's), decoupled weight decay,
    shape scaling max(1, rows/cols)^0.5."""

    def __init__(self, params, lr=0.02, momentum=0.95, weight_decay=0.01, ns_dtype=None):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.lerp_(p.grad, 1 - group["momentum"])
                g = p.grad.lerp(buf, group["momentum"])  # Nesterov
                g = g.view(len(g), -1)  # a conv filter as [out, in*kh*kw] (muon.py)
                u = newton_schulz5(g, dtype=self.ns_dtype)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(u.view_as(p), alpha=-group["lr"] * max(1.0, g.size(0) / g.size(1)) ** 0.5)


def time_steps(model, x, y, seconds, repeats=5):
    """Median over `repeats` windows of `seconds`/repeats each (this kind of VM is noisy)."""
    times = sorted(time_window(model, x, y, seconds / repeats) for _ in range(repeats))
    return times[len(times) // 2]


def time_window(model, x, y, seconds):
    def step():
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        model.zero_grad(set_to_none=True)
    step()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return (time.perf_counter() - start) / n * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                        nn.Linear(256, 10))
    x = torch.randn(128, 784)
    y = torch.arange(128) * 7 % 10
    print(f"torch {torch.__version__} threads={a.threads}")
    print(f"mlp_fwd_bwd        {time_steps(mlp, x, y, a.seconds):8.3f} ms")
    q = QwenTiny()
    tok = torch.randint(0, 256, (16, 65))
    print(f"qwen_tiny_fwd_bwd  {time_steps(q, tok[:, :64], tok[:, 1:], a.seconds):8.3f} ms")


if __name__ == "__main__":
    main()
