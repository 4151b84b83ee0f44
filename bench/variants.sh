#!/usr/bin/env bash
# Two or more settings of TrainBench itself, side by side on one config: each round runs every
# variant once (the order reversed every other round, A B / B A), then prints the median of each
# variant's per-run median step and the ratio to the first. A variant is an environment
# assignment (TB_CPU_CAPABILITY=avx2, OPENBLAS_CORETYPE=SkylakeX), a step_bench option
# (--gemm-backend=openblas) or --set overrides (optimizer.muon.ns_variant=gram), or several,
# separated by spaces inside one argument.
#
#   bench/variants.sh CONFIG [--rounds R] [--steps N] [--warmup W] [--threads T] [--build DIR]
#                     -- VARIANT VARIANT...
#
#   bench/variants.sh resources/configs/fmnist-mlp-adamw.toml --threads 1 -- \
#       TB_CPU_CAPABILITY=baseline TB_CPU_CAPABILITY=avx2
#   bench/variants.sh resources/configs/fmnist-mlp-adamw.toml -- \
#       --gemm-backend=onednn --gemm-backend=openblas
#   bench/variants.sh resources/configs/fmnist-mlp-muon.toml -- \
#       optimizer.muon.ns_variant=standard optimizer.muon.ns_variant=gram
#
# Uses DIR/bench/step_bench (default build/release, else build/ci). Results: docs/benchmarks.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,19p' "$0"; exit 2; }
config=$1; shift
rounds=3 steps=60 warmup=10 threads=1 build=""
# shellcheck source=bench/common.sh
. "$here/bench/common.sh"
while [ $# -gt 0 ]; do
  bench_option variants.sh "$@"
  if [ "$bench_shift" -gt 0 ]; then shift "$bench_shift"; continue; fi
  case "$1" in
    --) shift; break ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "variants.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -ge 2 ] || { echo "variants.sh: give at least two variants after --" >&2; exit 2; }
bench_step_bench variants.sh
variants=("$@")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-variants.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
run_variant() {  # index
  local v=${variants[$1]} envs=() sets=()
  for word in $v; do
    case "$word" in
      TB_*=* | OPENBLAS_*=* | OMP_*=*) envs+=("$word") ;;
      --*=*) sets+=("${word%%=*}" "${word#*=}") ;;
      *=*) sets+=(--set "$word") ;;
      *) echo "variants.sh: '$word' is neither NAME=value nor key=value" >&2; exit 2 ;;
    esac
  done
  env "${envs[@]}" "$tb" "$config" --steps "$steps" --warmup "$warmup" --threads "$threads" \
    "${sets[@]}" | sed -n 's/.*time.step_ms=\([0-9.]*\).*/\1/p' >>"$tmp/$1"
}
for ((r = 0; r < rounds; ++r)); do
  if ((r % 2 == 0)); then
    for ((i = 0; i < ${#variants[@]}; ++i)); do run_variant "$i"; done
  else
    for ((i = ${#variants[@]} - 1; i >= 0; --i)); do run_variant "$i"; done
  fi
done
python3 - "$tmp" "${variants[@]}" <<'PY'
import statistics, sys
d, names = sys.argv[1], sys.argv[2:]
meds = []
for i, n in enumerate(names):
    vals = [float(x) for x in open(f"{d}/{i}") if x.strip()]
    meds.append(statistics.median(vals))
    runs = " ".join(f"{v:.2f}" for v in vals)
    print(f"{n:45s} {meds[-1]:8.2f} ms  x{meds[-1] / meds[0]:.2f}   (runs: {runs})")
PY
