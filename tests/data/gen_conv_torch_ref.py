#!/usr/bin/env python3
"""Regenerates conv_torch_ref.json (used by tests/engine/conv_test.cpp) with Debian's PyTorch:
    /usr/bin/python3 tests/data/gen_conv_torch_ref.py > tests/data/conv_torch_ref.json
Reference values, in float64: torch.nn.functional.conv2d (groups, stride, padding, dilation, a
1x1 case), max_pool2d (with indices), avg_pool2d (count_include_pad on and off),
adaptive_avg_pool2d and batch_norm (training with running statistics, then eval) — each output
and the gradients of sum(output * grad) with respect to every input; nn.Conv2d's initialisation
after manual_seed; and a small residual CNN built in the order TrainBench's `cnn` kind builds it
(its logits, loss and gradients)."""
import json
import sys

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
gen = torch.Generator().manual_seed(1234)


def rnd(*shape):
    return torch.randn(*shape, generator=gen)


def flat(t):
    return t.detach().flatten().tolist()


def case(fn, inputs, **kw):
    """fn(*inputs) -> output; returns inputs, output, a random output gradient and the input
    gradients of sum(output * grad)."""
    leaves = [t.clone().requires_grad_(True) if t is not None else None for t in inputs]
    out = fn(*leaves)
    g = rnd(*out.shape)
    (out * g).sum().backward()
    r = {"inputs": [{"shape": list(t.shape), "values": flat(t)} if t is not None else None
                    for t in inputs],
         "out_shape": list(out.shape), "out": flat(out), "grad_out": flat(g),
         "grads": [flat(t.grad) if t is not None else None for t in leaves]}
    r.update(kw)
    return r


ref = {}
ref["conv_groups"] = case(
    lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    [rnd(2, 4, 7, 6), rnd(6, 2, 3, 3), rnd(6)],
    stride=[2, 1], padding=[1, 2], dilation=[1, 2], groups=2)
ref["conv_plain"] = case(lambda x, w, b: F.conv2d(x, w, b, padding=1),
                         [rnd(3, 3, 8, 8), rnd(5, 3, 3, 3), rnd(5)],
                         stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1)
ref["conv_pointwise"] = case(lambda x, w: F.conv2d(x, w), [rnd(2, 4, 5, 5), rnd(3, 4, 1, 1)],
                             stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=1)
x = rnd(2, 3, 7, 7)
ref["max_pool"] = case(lambda x: F.max_pool2d(x, 3, 2, 1), [x], kernel=[3, 3], stride=[2, 2],
                       padding=[1, 1])
ref["max_pool"]["indices"] = F.max_pool2d(x, 3, 2, 1, return_indices=True)[1].flatten().tolist()
ref["avg_pool_pad"] = case(lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=True), [x],
                           kernel=[3, 3], stride=[2, 2], padding=[1, 1], count_include_pad=True)
ref["avg_pool_nopad"] = case(lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 1),
                                                     count_include_pad=False), [x],
                             kernel=[3, 2], stride=[2, 1], padding=[1, 1],
                             count_include_pad=False)
ref["adaptive_avg_pool"] = case(lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [rnd(2, 3, 7, 5)],
                                output_size=[3, 2])

# batch_norm in training (running statistics updated), then in eval with those statistics.
xb, wb, bb = rnd(4, 3, 5, 5), rnd(3), rnd(3)
rm0, rv0 = rnd(3) * 0.1, torch.rand(3, generator=gen) + 0.5
rm, rv = rm0.clone(), rv0.clone()
ref["batch_norm_train"] = case(
    lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5),
    [xb, wb, bb], momentum=0.1, eps=1e-5, running_mean_in=flat(rm0), running_var_in=flat(rv0))
ref["batch_norm_train"]["running_mean_out"] = flat(rm)
ref["batch_norm_train"]["running_var_out"] = flat(rv)
ref["batch_norm_eval"] = case(
    lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False, momentum=0.1, eps=1e-5),
    [xb, wb, bb], momentum=0.1, eps=1e-5, running_mean_in=flat(rm), running_var_in=flat(rv))

# nn.Conv2d's initialisation (float32, the default generator).
torch.set_default_dtype(torch.float32)
torch.manual_seed(0)
conv = torch.nn.Conv2d(3, 4, 3)
ref["conv2d_init"] = {"weight": flat(conv.weight), "bias": flat(conv.bias)}


# The `cnn` kind with input [1, 8, 8], channels [4, 6], convs_per_block 2, residual, batch norm,
# max pooling, avgpool head, hidden [5], classes 3 — modules created in TrainBench's order.
class Block(torch.nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.convs = torch.nn.Sequential(
            torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(cout), torch.nn.ReLU()),
            torch.nn.Sequential(torch.nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(cout)))
        self.skip = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, bias=False),
                                        torch.nn.BatchNorm2d(cout))
        self.pool = torch.nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(torch.relu(self.convs(x) + self.skip(x)))


torch.manual_seed(5)
blocks = torch.nn.Sequential(Block(1, 4), Block(4, 6))
classifier = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                 torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
xc = torch.arange(2 * 64, dtype=torch.float32).reshape(2, 1, 8, 8).sin()
logits = classifier(blocks(xc))
loss = F.cross_entropy(logits, torch.tensor([2, 0]))
loss.backward()
params = dict(blocks.named_parameters(prefix="blocks"))
params.update(dict(classifier.named_parameters(prefix="classifier")))
ref["cnn_model"] = {
    "logits": flat(logits), "loss": loss.item(),
    "grads": {k: flat(v.grad) for k, v in params.items()},
    "running_mean": {k: flat(v) for k, v in blocks.state_dict().items()
                     if k.endswith("running_mean")}}
json.dump(ref, sys.stdout, indent=None, separators=(",", ":"))
print()
