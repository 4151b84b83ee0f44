#!/usr/bin/env python3
"""An exported model loads in PyTorch and evaluates to the accuracy TrainBench stored.

    tests/e2e/torch_loads_export.py CLI REPO_ROOT        (ctest: e2e.torch_loads_export)

Trains the Fashion-MNIST MLP example for 40 steps into a fresh store, exports its weights with
`trainbench-cli weights`, loads them into the same network written with torch.nn
(Module.load_state_dict, strict) and evaluates the first 4 test batches of 128 as the run's eval
did; the accuracy and loss must equal the stored eval.accuracy / eval.loss (as `show` prints
them, 6 significant digits). Needs PyTorch (Debian's python3-torch); without it the test is
skipped (exit 77). The safetensors file is read here with the format's own rules (8-byte header
length, JSON header, raw little-endian data), so no other package is needed."""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("SKIP: torch_loads_export: PyTorch is not installed")
    sys.exit(77)


def load_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        assert info["dtype"] == "F32", info
        blob = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(blob, dtype=torch.float32).reshape(info["shape"])
    return out


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                                    nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x):
        return self.layers(x)


def main():
    cli, repo = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "runs.sqlite")
        config = os.path.join(repo, "resources/configs/fmnist-mlp-adamw.toml")
        subprocess.run([cli, "--db", db, "run", config, "--set", "run.steps=40", "--set",
                        "eval.batches=4", "--set", "eval.interval=40"], check=True,
                       capture_output=True)
        weights = os.path.join(tmp, "mlp.safetensors")
        subprocess.run([cli, "--db", db, "weights", "1", "-o", weights], check=True,
                       capture_output=True)
        shown = subprocess.run([cli, "--db", db, "show", "1"], check=True, capture_output=True,
                               text=True).stdout
        stored = {}
        for line in shown.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in ("eval.accuracy", "eval.loss"):
                stored[parts[0]] = parts[1]
        model = Mlp()
        model.load_state_dict(load_safetensors(weights), strict=True)
        model.eval()
    d = "/usr/share/datasets/fashion-mnist/"
    x = torch.frombuffer(bytearray(gzip.open(d + "t10k-images-idx3-ubyte.gz").read()[16:]),
                         dtype=torch.uint8).float().view(-1, 784)[:512]
    y = torch.frombuffer(bytearray(gzip.open(d + "t10k-labels-idx1-ubyte.gz").read()[8:]),
                         dtype=torch.uint8).long()[:512]
    x = (x / 255.0 - 0.2860) / 0.3530
    with torch.no_grad():
        logits = model(x)
    got = {"eval.accuracy": f"{(logits.argmax(1) == y).float().mean().item():.6g}",
           "eval.loss": f"{nn.functional.cross_entropy(logits, y).item():.6g}"}
    if got != stored:
        print(f"FAIL: torch_loads_export: PyTorch evaluates {got}, TrainBench stored {stored}")
        sys.exit(1)
    print(f"PASS: torch_loads_export: PyTorch evaluates the export to {got}, as stored")


if __name__ == "__main__":
    main()
