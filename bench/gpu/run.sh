#!/usr/bin/env bash
# The GPU check, run on a GPU machine from the repository root with the packed folder .device/
# (bench/gpu/pack.sh): device info, the CUDA tests, the engine tests, the demo, GEMM figures.
# Output goes to stdout and, when $OUT is set, to $OUT/gpu-check.log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dir=.device
log=${OUT:-/tmp}/gpu-check.log
cublas_dirs=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/$dir/lib:/usr/local/cuda/lib64:${cublas_dirs}:${LD_LIBRARY_PATH:-}"
{
  echo "== $(date -u +%F\ %T) UTC on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  echo "== trainbench-cli devices"
  "$dir/bin/trainbench-cli" devices
  echo "== CUDA tests"
  "$dir/bin/tb_cuda_tests"
  echo "== engine tests (CPU, $(nproc) cores)"
  "$dir/bin/tb_engine_tests" --gtest_brief=1
  echo "== demo"
  "$dir/bin/trainbench-cli" demo
  echo "== GPU GEMM: tensor mm vs raw cuBLAS"
  "$dir/bin/cuda_bench" --benchmark_min_time=0.3
  echo "== PyTorch on this GPU, same shapes"
  python3 - <<'PY' || true
import torch, time
for n, dt in ((1024, torch.float32), (4096, torch.float32), (8192, torch.float32), (4096, torch.float64)):
    a = torch.randn(n, n, device="cuda", dtype=dt); b = torch.randn(n, n, device="cuda", dtype=dt)
    for _ in range(3): a @ b
    torch.cuda.synchronize(); reps = 20; t = time.perf_counter()
    for _ in range(reps): a @ b
    torch.cuda.synchronize(); s = (time.perf_counter() - t) / reps
    print(f"torch {torch.__version__} mm {dt} n={n}: {s*1e3:.3f} ms, {2*n**3/s/1e12:.1f} TFLOP/s (TF32 {torch.backends.cuda.matmul.allow_tf32})")
PY
} 2>&1 | tee "$log"
