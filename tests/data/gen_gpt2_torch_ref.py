#!/usr/bin/env python3
"""Regenerates gpt2_tiny_hf.safetensors and gpt2_tiny_hf.json (used by tests/engine/gpt_test.cpp)
with Debian's PyTorch:
    /usr/bin/python3 tests/data/gen_gpt2_torch_ref.py tests/data
A GPT-2 in PyTorch written as Hugging Face transformers' modeling_gpt2.py computes it — Conv1D
layers (weight [in, out], y = x @ W + b), LayerNorm eps 1e-5, causal attention with the
"attn.bias" mask buffer, GELU with the tanh approximation ("gelu_new"), a final LayerNorm and
the head tied to wte — at a tiny size (vocab 23, 16 positions, width 16, 2 layers, 2 heads),
with random weights and LayerNorm parameters. The state_dict is written as safetensors under
GPT2Model's names (wte.weight, h.0.attn.c_attn.weight, ..., ln_f.bias, h.N.attn.bias masks),
float32, as transformers saves GPT-2; the JSON holds two token sequences and their logits
computed in float64 from the same float32 weights."""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

V, T, C, L, H = 23, 16, 16, 2, 2
gen = torch.Generator().manual_seed(20240520)


def rnd(*shape, std=0.2):
    return (torch.randn(*shape, generator=gen) * std).float()


state = {"wte.weight": rnd(V, C), "wpe.weight": rnd(T, C, std=0.05)}
for i in range(L):
    p = f"h.{i}."
    state[p + "ln_1.weight"] = 1 + rnd(C, std=0.1)
    state[p + "ln_1.bias"] = rnd(C, std=0.1)
    state[p + "attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    state[p + "attn.c_attn.weight"] = rnd(C, 3 * C)  # Conv1D: [in, out]
    state[p + "attn.c_attn.bias"] = rnd(3 * C, std=0.05)
    state[p + "attn.c_proj.weight"] = rnd(C, C)
    state[p + "attn.c_proj.bias"] = rnd(C, std=0.05)
    state[p + "ln_2.weight"] = 1 + rnd(C, std=0.1)
    state[p + "ln_2.bias"] = rnd(C, std=0.1)
    state[p + "mlp.c_fc.weight"] = rnd(C, 4 * C)
    state[p + "mlp.c_fc.bias"] = rnd(4 * C, std=0.05)
    state[p + "mlp.c_proj.weight"] = rnd(4 * C, C)
    state[p + "mlp.c_proj.bias"] = rnd(C, std=0.05)
state["ln_f.weight"] = 1 + rnd(C, std=0.1)
state["ln_f.bias"] = rnd(C, std=0.1)


def conv1d(x, p):
    return x @ w[p + ".weight"] + w[p + ".bias"]


w = {k: v.double() for k, v in state.items()}


def forward(idx):
    b, t = idx.shape
    x = w["wte.weight"][idx] + w["wpe.weight"][:t]
    for i in range(L):
        p = f"h.{i}."
        a = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], 1e-5)
        q, k, v = conv1d(a, p + "attn.c_attn").split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(w[p + "attn.bias"][:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(b, t, C)
        x = x + conv1d(y, p + "attn.c_proj")
        m = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], 1e-5)
        x = x + conv1d(F.gelu(conv1d(m, p + "mlp.c_fc"), approximate="tanh"), p + "mlp.c_proj")
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], 1e-5)
    return x @ w["wte.weight"].t()


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes() if hasattr(t, "numpy") else bytes(t)
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt"}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for blob in blobs:
            f.write(blob)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
    save_safetensors(os.path.join(out, "gpt2_tiny_hf.safetensors"), state)
    tokens = torch.tensor([[5, 22, 0, 17, 3, 3, 9], [1, 2, 3, 4, 5, 6, 7]])
    logits = forward(tokens)
    ref = {"config": {"vocab": V, "context_length": T, "d_model": C, "n_layers": L, "n_heads": H},
           "tokens": tokens.flatten().tolist(), "shape": list(logits.shape),
           "logits": logits.flatten().tolist()}
    with open(os.path.join(out, "gpt2_tiny_hf.json"), "w") as f:
        json.dump(ref, f)
        f.write("\n")


if __name__ == "__main__":
    main()
