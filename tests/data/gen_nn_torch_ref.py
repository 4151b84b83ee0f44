#!/usr/bin/env python3
"""Regenerates nn_torch_ref.json (used by tests/engine/nn_test.cpp) with Debian's PyTorch:
    /usr/bin/python3 tests/data/gen_nn_torch_ref.py > tests/data/nn_torch_ref.json
Reference values: nn.Linear / nn.Embedding initialisation after manual_seed, and a small MLP's
logits, cross-entropy loss and first-layer weight gradient."""
import json
import sys

import torch

torch.manual_seed(0)
lin = torch.nn.Linear(5, 3)
emb = torch.nn.Embedding(4, 6)
torch.manual_seed(7)
mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
x = torch.arange(16, dtype=torch.float32).reshape(2, 8) / 10 - 0.5
out = mlp(x)
loss = torch.nn.functional.cross_entropy(out, torch.tensor([1, 3]))
loss.backward()
json.dump({"linear_weight": lin.weight.flatten().tolist(), "linear_bias": lin.bias.tolist(),
           "embedding_weight": emb.weight.flatten().tolist(),
           "mlp_logits": out.flatten().tolist(), "mlp_loss": loss.item(),
           "mlp_grad_w0": mlp[0].weight.grad.flatten().tolist()}, sys.stdout, indent=1)
