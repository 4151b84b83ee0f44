#!/usr/bin/env bash
# Building GPT-2 small (124 M parameters with GPT-2's initialisation: the normal draws dominate)
# in TrainBench against PyTorch, one thread, interleaved A B A B; then each side's median and the
# ratio. TrainBench: the whole `trainbench-cli --threads 1 model gpt` process (start, build, the
# parameter table); PyTorch: only the constructor of bench/torch_train_step.py's Gpt2 (after the
# interpreter has started and imported torch), so the comparison leans towards PyTorch.
#
#   bench/model_build_vs_torch.sh [--rounds R] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=5 build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "model_build_vs_torch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for d in "$build" build/release build/ci; do
  if [ -n "$d" ] && [ -x "$here/$d/app/cli/trainbench-cli" ]; then cli=$here/$d/app/cli/trainbench-cli; break; fi
  if [ -n "$d" ] && [ -x "$d/app/cli/trainbench-cli" ]; then cli=$d/app/cli/trainbench-cli; break; fi
done
[ -n "${cli:-}" ] || { echo "model_build_vs_torch.sh: no trainbench-cli (build one, or --build DIR)" >&2; exit 2; }
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null ||
  { echo "model_build_vs_torch.sh: $py cannot import torch; install Debian's python3-torch" >&2; exit 2; }

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
a=() b=()
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs, $rounds rounds, GPT-2 small, one thread"
for r in $(seq 1 "$rounds"); do
  t0=$(date +%s.%N)
  "$cli" --threads 1 model gpt > /dev/null
  ta=$(echo "$(date +%s.%N) - $t0" | bc)
  tb=$(cd "$here/bench" && OMP_NUM_THREADS=1 "$py" -c '
import time, torch
torch.set_num_threads(1)
from torch_train_step import Gpt2
torch.manual_seed(1)
t = time.perf_counter(); Gpt2(); print(f"{time.perf_counter() - t:.3f}")')
  printf 'round %d  trainbench %.2f s  pytorch %.2f s\n' "$r" "$ta" "$tb"
  a+=("$ta") b+=("$tb")
done
ma=$(printf '%s\n' "${a[@]}" | median)
mb=$(printf '%s\n' "${b[@]}" | median)
printf 'median  trainbench %.2f s  pytorch %.2f s  ratio (TB / PyTorch) %.2f\n' "$ma" "$mb" \
  "$(echo "$ma / $mb" | bc -l)"
