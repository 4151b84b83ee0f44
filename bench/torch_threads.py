"""Imported by the PyTorch benchmark scripts before torch itself.

Debian's PyTorch 1.13 is built with BLAS_INFO=generic: torch.set_num_threads() does not reach
OpenBLAS, which then runs every GEMM on all CPUs. OpenBLAS reads its thread count when it is
loaded, so this sets OPENBLAS_NUM_THREADS to the script's --threads (default 1) unless the
environment already has it.
"""
import os
import sys


def _threads_from_argv():
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


os.environ.setdefault("OPENBLAS_NUM_THREADS", _threads_from_argv())
