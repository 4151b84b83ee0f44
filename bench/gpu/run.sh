#!/usr/bin/env bash
# The GPU check (issue "CUDA backend"), run on a GPU machine from the repository root after
# bench/gpu/pack.sh packed .device/pack.tar.xz here — or, without a pack, it builds one first
# (the `ci` preset's test, CLI and benchmark targets; needs the build dependencies that
# `./quickstart.sh` installs, a few minutes on 16 cores). Within ~10 minutes it prints: the device,
# the CUDA tests, the parity test of every CUDA kernel against the CPU, GEMM TFLOP/s of our mm
# (cuBLAS, cuBLASLt, TF32, bf16, fp16, fp64) against raw cuBLAS, the MLP and qwen-tiny step time
# and samples or tokens/s trained by trainbench-cli on cuda:0, Muon vs AdamW optimizer-step time,
# and the same models and products in PyTorch on that machine.
# Output goes to stdout and, when $OUT is set, to $OUT/gpu-check.log (plus the run store).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
out=${OUT:-/tmp}
if [ ! -f .device/pack.tar.xz ]; then
  echo "== no .device/pack.tar.xz: building it (cmake --preset ci)"
  if ! { cmake --preset ci >/dev/null &&
    cmake --build build/ci -j"$(nproc)" --target tb_cuda_tests tb_engine_tests trainbench-cli \
      cuda_bench dist_allreduce >/dev/null &&
    bench/gpu/pack.sh build/ci; }; then
    echo "building the GPU check failed"
    exit 1
  fi
fi
dir=$(mktemp -d)
tar -C "$dir" -xJf .device/pack.tar.xz
cublas_dirs=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${cublas_dirs}:${LD_LIBRARY_PATH:-}"
cli="$dir/bin/trainbench-cli"
# TB_GPU_CHECK_DEVICE=cpu tries the script itself on a machine without a GPU.
device=${TB_GPU_CHECK_DEVICE:-cuda:0}
db="$out/gpu-runs.sqlite"
rm -f "$db"*

# Median of a metric over the steps after the first 20 (warm-up) of stored run $1.
median() {
  "$cli" --db "$db" export "$1" | python3 -c '
import csv, sys, statistics
rows = [r for r in csv.DictReader(sys.stdin) if int(r["step"]) > 20]
for key in sys.argv[1:]:
    v = [float(r[key]) for r in rows if r.get(key)]
    print(f"{key} {statistics.median(v):.3f}" if v else f"{key} -", end="  ")
print()' "${@:2}"
}

losses() {  # the loss column of stored run $1, one per line
  "$cli" --db "$db" export "$1" | python3 -c '
import csv, sys
for r in csv.DictReader(sys.stdin):
    print(r["loss"])'
}

train() {  # name config extra --set arguments...
  local name=$1 cfg=$2
  shift 2
  "$cli" --db "$db" run "$cfg" --set run.device="$device" --set run.log_interval=1 \
    --set eval.batches=1 --set checkpoint.interval=0 --set run.name="gpu-$name" "$@" | tail -1
}

{
  echo "== $(date -u +%F\ %T) UTC on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  echo "== trainbench-cli devices"
  "$cli" devices
  echo "== CUDA tests"
  "$dir/bin/tb_cuda_tests" --gtest_brief=1
  echo "== parity: every CUDA kernel against the CPU's (and openreg)"
  (cd "$dir/data" && "$dir/bin/tb_engine_tests" --gtest_filter='*BackendParity*' --gtest_brief=1)
  echo "== GPU GEMM: tensor mm (arg 2: 0 cuBLAS, 1 cuBLASLt, 2 TF32) vs raw cuBLAS; attention fused vs composed"
  "$dir/bin/cuda_bench" --benchmark_min_time=0.2
  echo "== models on $device (trainbench-cli; medians after 20 warm-up steps)"
  train mlp resources/configs/fmnist-mlp-adamw.toml --set run.steps=220 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2
  echo "mlp adamw: $(median 1 time.step_ms samples_per_s time.forward_ms time.backward_ms time.optimizer_ms)"
  train cnn resources/configs/fmnist-cnn-adamw.toml --set run.steps=120 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2
  echo "cnn adamw: $(median 2 time.step_ms samples_per_s time.forward_ms time.backward_ms time.optimizer_ms)"
  train qwen-adamw resources/configs/qwen-tiny-fortunes-adamw.toml --set run.steps=120 \
    --set data.kind=synthetic-text
  echo "qwen-tiny adamw: $(median 3 time.step_ms tokens_per_s time.forward_ms time.backward_ms time.optimizer_ms)"
  train qwen-muon resources/configs/qwen-tiny-fortunes-muon.toml --set run.steps=120 \
    --set data.kind=synthetic-text
  echo "qwen-tiny muon: $(median 4 time.step_ms tokens_per_s time.optimizer_ms time.newton_schulz_ms)"
  train qwen-bf16 resources/configs/qwen-tiny-fortunes-adamw.toml --set run.steps=120 \
    --set data.kind=synthetic-text --set amp.enabled=true --set amp.dtype=bf16
  echo "qwen-tiny adamw bf16 autocast: $(median 5 time.step_ms tokens_per_s)"
  echo "== NCCL at world size 1 (one GPU cannot run two ranks: no multi-GPU figures here)"
  (cd "$dir/data" && "$dir/bin/tb_engine_tests" --gtest_filter='DistNccl.*' --gtest_brief=1)
  "$dir/bin/dist_allreduce" --backend nccl --iters 20
  # The MLP through the NCCL exchange (a communicator of one) against the plain run: the same
  # losses bit for bit (runs 6 and 7).
  train mlp-plain resources/configs/fmnist-mlp-adamw.toml --set run.steps=60 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2
  train mlp-nccl resources/configs/fmnist-mlp-adamw.toml --set run.steps=60 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2 \
    --set distributed.backend='"nccl"'
  if [ "$(losses 6)" = "$(losses 7)" ] && [ -n "$(losses 6)" ]; then
    echo "nccl world size 1: the plain run's $(losses 6 | wc -l) losses, bit for bit"
  else
    echo "nccl world size 1: LOSSES DIFFER from the plain run"
    paste -d' ' <(losses 6 | head -5) <(losses 7 | head -5)
  fi
  echo "mlp nccl: $(median 7 time.step_ms time.comm_ms)"
  echo "== PyTorch on this GPU, same models and shapes"
  python3 bench/gpu/torch_gpu.py --steps 100 || echo "(no PyTorch with CUDA here)"
} 2>&1 | tee "$out/gpu-check.log"
rm -rf "$dir"
