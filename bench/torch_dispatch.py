#!/usr/bin/env python3
"""Per-op overhead in PyTorch eager, to read side by side with bench/dispatch_bench.

Same operations as dispatch_bench: a 1-element add of two tensors and `x * 2`, each allocating
its output. Prints the median of 5 runs (after a warm-up) in nanoseconds per op.
Run with Debian's PyTorch: /usr/bin/python3 bench/torch_dispatch.py [--threads N]
"""
import argparse
import statistics
import timeit

import torch_threads  # noqa: F401  (pins OpenBLAS to --threads before torch loads it)
import torch  # noqa: E402


def per_op_ns(stmt, env, number):
    timeit.timeit(stmt, globals=env, number=number // 10)  # warm-up
    runs = [timeit.timeit(stmt, globals=env, number=number) / number * 1e9 for _ in range(5)]
    return statistics.median(runs)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--number", type=int, default=200000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    a = torch.full((1,), 1.5)
    b = torch.full((1,), 2.5)
    env = {"a": a, "b": b, "torch": torch}
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"add_1elem      {per_op_ns('a + b', env, args.number):8.1f} ns")
    print(f"mul_scalar     {per_op_ns('a * 2', env, args.number):8.1f} ns")
    print(f"empty_1elem    {per_op_ns('torch.empty(1)', env, args.number):8.1f} ns")
    g = torch.full((1,), 1.5, requires_grad=True)
    env["g"] = g
    print(f"mul_scalar_grad{per_op_ns('g * 2', env, args.number):8.1f} ns")


if __name__ == "__main__":
    main()
