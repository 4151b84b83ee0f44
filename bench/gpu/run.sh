#!/usr/bin/env bash
# The GPU check (issue "CUDA backend"), run on a GPU machine from the repository root after
# bench/gpu/pack.sh packed .device/pack.tar.xz here (the device tool carries it: carry
# [".device"]; the GPU machine lacks our Debian build dependencies, so the script does not try
# to build there). Within ~10 minutes it prints: the device, the CUDA tests, the parity test of
# every CUDA kernel against the CPU, GEMM TFLOP/s of our mm (cuBLAS, cuBLASLt, TF32, bf16, fp16,
# fp64) against raw cuBLAS, the MLP and qwen-tiny step time and samples or tokens/s trained by
# trainbench-cli on cuda:0, Muon vs AdamW optimizer-step time, NCCL at world size 1, and the
# same models and products in PyTorch on that machine. Each step has a time limit (a hang in
# one, e.g. NCCL's set-up, costs its limit, not the whole session).
# Output goes to stdout and, when $OUT is set, to $OUT/gpu-check.log (plus the run store).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
out=${OUT:-/tmp}
if [ ! -f .device/pack.tar.xz ]; then
  echo "no .device/pack.tar.xz: make it on the build machine (cmake --build --preset ci, then"
  echo "bench/gpu/pack.sh build/ci) and carry .device with this command"
  exit 1
fi
dir=$(mktemp -d)
tar -C "$dir" -xJf .device/pack.tar.xz
# cuBLAS and NCCL (loaded with dlopen, so not packed) from the CUDA toolkit, else from
# PyTorch's pip wheels (nvidia.cublas, nvidia.nccl).
wheel_libs=$(python3 -c '
import importlib, os
for m in ("nvidia.cublas", "nvidia.nccl"):
    try:
        print(os.path.join(list(importlib.import_module(m).__path__)[0], "lib"), end=":")
    except Exception:
        pass' 2>/dev/null || true)
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${wheel_libs}${LD_LIBRARY_PATH:-}"
cli="$dir/bin/trainbench-cli"
# TB_GPU_CHECK_DEVICE=cpu tries the script itself on a machine without a GPU.
device=${TB_GPU_CHECK_DEVICE:-cuda:0}
db="$out/gpu-runs.sqlite"
rm -f "$db"*

# The id of the stored run named gpu-$1 (empty when that run failed before it was stored).
id_of() {
  python3 -c '
import sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute("SELECT id FROM runs WHERE name = ?", ("gpu-" + sys.argv[2],)).fetchone()
print(row[0] if row else "")' "$db" "$1" 2>/dev/null
}

# Median of a metric over the steps after the first 20 (warm-up) of the run named gpu-$1.
median() {
  local id
  id=$(id_of "$1")
  [ -n "$id" ] || { echo "(no run gpu-$1)"; return; }
  "$cli" --db "$db" export "$id" | python3 -c '
import csv, sys, statistics
rows = [r for r in csv.DictReader(sys.stdin) if int(r["step"]) > 20]
for key in sys.argv[1:]:
    v = [float(r[key]) for r in rows if r.get(key)]
    print(f"{key} {statistics.median(v):.3f}" if v else f"{key} -", end="  ")
print()' "${@:2}"
}

losses() {  # the loss column of the run named gpu-$1, one per line
  local id
  id=$(id_of "$1")
  [ -n "$id" ] || return 0
  "$cli" --db "$db" export "$id" | python3 -c '
import csv, sys
for r in csv.DictReader(sys.stdin):
    print(r["loss"])'
}

train() {  # name config extra --set arguments...
  local name=$1 cfg=$2
  shift 2
  timeout -k 15 150 "$cli" --db "$db" run "$cfg" --set run.device="$device" --set run.log_interval=1 \
    --set eval.batches=1 --set checkpoint.interval=0 --set run.name="gpu-$name" "$@" | tail -1
}

{
  echo "== $(date -u +%F\ %T) UTC on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  echo "== trainbench-cli devices"
  "$cli" devices
  echo "== CUDA tests"
  timeout 150 "$dir/bin/tb_cuda_tests" --gtest_brief=1
  echo "== parity: every CUDA kernel against the CPU's (and openreg)"
  (cd "$dir/data" && timeout 120 "$dir/bin/tb_engine_tests" --gtest_filter='*BackendParity*' --gtest_brief=1)
  echo "== GPU GEMM: tensor mm (arg 2: 0 cuBLAS, 1 cuBLASLt, 2 TF32) vs raw cuBLAS; attention fused vs composed"
  timeout 150 "$dir/bin/cuda_bench" --benchmark_min_time=0.2
  echo "== models on $device (trainbench-cli; medians after 20 warm-up steps)"
  train mlp resources/configs/fmnist-mlp-adamw.toml --set run.steps=220 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2
  echo "mlp adamw: $(median mlp time.step_ms samples_per_s time.forward_ms time.backward_ms time.optimizer_ms)"
  train cnn resources/configs/fmnist-cnn-adamw.toml --set run.steps=120 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2
  echo "cnn adamw: $(median cnn time.step_ms samples_per_s time.forward_ms time.backward_ms time.optimizer_ms)"
  train qwen-adamw resources/configs/qwen-tiny-fortunes-adamw.toml --set run.steps=120 \
    --set data.kind=synthetic-text
  echo "qwen-tiny adamw: $(median qwen-adamw time.step_ms tokens_per_s time.forward_ms time.backward_ms time.optimizer_ms)"
  train qwen-muon resources/configs/qwen-tiny-fortunes-muon.toml --set run.steps=120 \
    --set data.kind=synthetic-text
  echo "qwen-tiny muon: $(median qwen-muon time.step_ms tokens_per_s time.optimizer_ms time.newton_schulz_ms)"
  train qwen-bf16 resources/configs/qwen-tiny-fortunes-adamw.toml --set run.steps=120 \
    --set data.kind=synthetic-text --set amp.enabled=true --set amp.dtype=bf16
  echo "qwen-tiny adamw bf16 autocast: $(median qwen-bf16 time.step_ms tokens_per_s)"
  echo "== NCCL at world size 1 (one GPU cannot run two ranks: no multi-GPU figures here)"
  (cd "$dir/data" && timeout 90 "$dir/bin/tb_engine_tests" --gtest_filter='DistNccl.*' --gtest_brief=1)
  timeout 60 "$dir/bin/dist_allreduce" --backend nccl --iters 20
  # The MLP through the NCCL exchange (a communicator of one) against the plain run: the same
  # losses bit for bit.
  train mlp-plain resources/configs/fmnist-mlp-adamw.toml --set run.steps=60 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2
  train mlp-nccl resources/configs/fmnist-mlp-adamw.toml --set run.steps=60 \
    --set data.path="$dir/data/fashion-mnist" --set data.workers=2 \
    --set distributed.backend='"nccl"'
  if [ -z "$(losses mlp-nccl)" ]; then
    echo "nccl world size 1: the NCCL run stored no losses (its error is above)"
  elif [ "$(losses mlp-plain)" = "$(losses mlp-nccl)" ] && [ -n "$(losses mlp-plain)" ]; then
    echo "nccl world size 1: the plain run's $(losses mlp-plain | wc -l) losses, bit for bit"
  else
    echo "nccl world size 1: LOSSES DIFFER from the plain run"
    paste -d' ' <(losses mlp-plain | head -5) <(losses mlp-nccl | head -5)
  fi
  echo "mlp nccl: $(median mlp-nccl time.step_ms time.comm_ms)"
  echo "== PyTorch on this GPU, same models and shapes"
  timeout 240 python3 bench/gpu/torch_gpu.py --steps 100 || echo "(no PyTorch with CUDA here, or it failed)"
} 2>&1 | tee "$out/gpu-check.log"
rm -rf "$dir"
