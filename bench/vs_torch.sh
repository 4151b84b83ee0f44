#!/usr/bin/env bash
# TrainBench against PyTorch eager on every shipped workload: model x optimizer x thread count,
# interleaved A B A B so that both sides see the same drift of a shared machine, then the median
# of each side's per-run medians and their ratio.
#
#   bench/vs_torch.sh [--rounds R] [--steps N] [--warmup W] [--threads "1 2"] [--only REGEX]
#                     [--build DIR]
#
# TrainBench side: DIR/bench/step_bench (default build/release, else build/ci) on
# resources/configs/*.toml. PyTorch side: bench/torch_train_step.py with Debian's python3-torch
# (`apt-get install python3-torch`). Results and how to read them: docs/benchmarks.md.
# The gpt2-small workloads run resources/configs/gpt-tokens-*.toml at GPT-2 small's shape
# (12 blocks, width 768, 124 M parameters) on batches of 4 x 64 random GPT-2 token ids, at most
# 6 steps after 2 warm-up steps (a step takes seconds).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=3 steps=60 warmup=10 threads="1 2" only="" build=""
# shellcheck source=bench/common.sh
. "$here/bench/common.sh"
while [ $# -gt 0 ]; do
  bench_option vs_torch.sh "$@"
  if [ "$bench_shift" -gt 0 ]; then shift "$bench_shift"; continue; fi
  case "$1" in
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "vs_torch.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench_step_bench vs_torch.sh
py=/usr/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "vs_torch.sh: $py cannot import torch; install Debian's python3-torch" >&2
  exit 2
fi

out=$(mktemp)
tokens=$(mktemp)
trap 'rm -f "$out" "$tokens"' EXIT
# 1 M random GPT-2 token ids as raw uint16 (nanoGPT's train.bin format) for the gpt2-small rows.
"$py" -c 'import sys, torch; g = torch.Generator().manual_seed(1)
torch.randint(0, 50257, (1 << 20,), generator=g, dtype=torch.int32).to(torch.int16).numpy().tofile(sys.argv[1])' "$tokens"
gpt2="--set data.path=$tokens --set data.val_path=$tokens --set model.n_layers=12"
gpt2="$gpt2 --set model.n_heads=12 --set model.d_model=768 --set model.context_length=1024"
gpt2="$gpt2 --set data.context_length=64 --set data.batch_size=4"

# name | TrainBench config | PyTorch model | PyTorch optimizer | step cap | step_bench settings
workloads="mlp-adamw|fmnist-mlp-adamw.toml|mlp|adamw||
mlp-muon|fmnist-mlp-muon.toml|mlp|muon||
cnn-adamw|fmnist-cnn-adamw.toml|cnn|adamw||
cnn-muon|fmnist-cnn-muon.toml|cnn|muon||
qwen-tiny-adamw|qwen-tiny-fortunes-adamw.toml|qwen-tiny|adamw||
qwen-tiny-muon|qwen-tiny-fortunes-muon.toml|qwen-tiny|muon||
gpt2-small-adamw|gpt-tokens-adamw.toml|gpt2-small|adamw|6|$gpt2
gpt2-small-muon|gpt-tokens-muon.toml|gpt2-small|muon|6|$gpt2"
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) CPUs: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
bench_openblas_coretype
echo "# $("$py" -c 'import torch; print("torch", torch.__version__)'), TrainBench ${build#"$here"/}," \
     "rounds $rounds, $steps steps after $warmup warm-up"
for r in $(seq 1 "$rounds"); do
  while IFS='|' read -r name cfg model opt cap sets; do
    [ -n "$only" ] && ! [[ "$name" =~ $only ]] && continue
    n=$steps w=$warmup
    if [ -n "$cap" ]; then n=$((steps < cap ? steps : cap)); w=$((warmup < 2 ? warmup : 2)); fi
    for t in $threads; do
      # A B in odd rounds, B A in even ones: neither side always runs first.
      order="tb torch"; [ $((r % 2)) -eq 0 ] && order="torch tb"
      for side in $order; do
        if [ "$side" = tb ]; then
          # shellcheck disable=SC2086  # $sets is a list of --set options
          line=$("$tb" "$here/resources/configs/$cfg" --steps "$n" --warmup "$w" \
                 --threads "$t" $sets)
        else
          line=$("$py" "$here/bench/torch_train_step.py" --model "$model" --optimizer "$opt" \
                 --threads "$t" --steps "$n" --warmup "$w")
        fi
        ms=$(echo "$line" | field time.step_ms)
        echo "$name $t $side $ms" >> "$out"
        echo "round $r  $name  threads $t  $side  $line" >&2
      done
    done
  done <<< "$workloads"
done

"$py" - "$out" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, t, side, ms = line.split()
    rows.setdefault((name, int(t)), {}).setdefault(side, []).append(float(ms))
print("| workload | threads | TrainBench ms/step | PyTorch ms/step | ratio (TB / PyTorch) |")
print("|---|---|---|---|---|")
for (name, t), sides in rows.items():
    a, b = statistics.median(sides["tb"]), statistics.median(sides["torch"])
    print(f"| {name} | {t} | {a:.2f} | {b:.2f} | {a / b:.2f} |")
EOF
