#!/usr/bin/env bash
# Data-parallel scaling on this machine: 1 process x 1 thread against N ranks x 1 thread
# (trainbench-cli launch --ddp), the same per-rank batch (weak scaling, as PyTorch's DDP is
# measured), rounds interleaved (A B, then B A) so the VM's drift hits both alike. Per run: the
# median time.step_ms of the steps after the warm-up (rank 0's step includes waiting for the
# others in the gradient exchange) and the median time.comm_ms. Prints per round and the median
# over rounds of
#
#   efficiency = step_ms(1 process) / step_ms(N ranks)
#
# (N ranks do N times the work per step: 1.0 is perfect scaling.)
#
#   bench/ddp_scaling.sh CONFIG [--nproc N] [--rounds R] [--steps S] [--warmup W] [--build DIR]
#                        [-- --set key=value...]
#
# Uses DIR/app/cli/trainbench-cli (default build/release, else build/ci). Results:
# docs/benchmarks.md.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,17p' "$0"; exit 2; }
config=$1; shift
nproc=2 rounds=3 steps=200 warmup=20 threads=1 build=""
# shellcheck source=bench/common.sh
. "$here/bench/common.sh"
while [ $# -gt 0 ]; do
  bench_option ddp_scaling.sh "$@"
  if [ "$bench_shift" -gt 0 ]; then shift "$bench_shift"; continue; fi
  case "$1" in
    --nproc) nproc=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "ddp_scaling.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench_step_bench ddp_scaling.sh
cli=$build/app/cli/trainbench-cli
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-ddp-scaling.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sets=(--set threads=1 --set run.steps="$steps" --set run.log_interval=1 --set eval.interval=0
      --set checkpoint.interval=0 "$@")

# median COLUMN STORE: the median of a metric over the steps after the warm-up.
median() {
  "$cli" --db "$2" export 1 --format csv |
    awk -F, -v col="$1" -v w="$warmup" '
      NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
      $1 > w && c && $c != "" { print $c }' |
    sort -g | awk '{ v[n++] = $1 } END { if (n == 0) print "nan"; else print v[int((n - 1) / 2)] }'
}

one() {
  rm -f "$tmp/one.sqlite"*
  "$cli" --db "$tmp/one.sqlite" run "$config" "${sets[@]}" > "$tmp/one.log" 2>&1 ||
    { tail -3 "$tmp/one.log" >&2; exit 1; }
  median time.step_ms "$tmp/one.sqlite"
}
many() {
  rm -rf "$tmp/many.sqlite"* "$tmp/checkpoints"
  "$cli" --db "$tmp/many.sqlite" launch --ddp --nproc "$nproc" "$config" "${sets[@]}" \
    > "$tmp/many.log" 2>&1 || { tail -3 "$tmp/many.log" >&2; exit 1; }
  echo "$(median time.step_ms "$tmp/many.sqlite") $(median time.comm_ms "$tmp/many.sqlite")"
}

echo "# $(basename "$config"): 1 x 1 thread vs $nproc ranks x 1 thread, $steps steps (median after $warmup)"
printf '%-6s %14s %14s %14s %10s\n' round one_step_ms ranks_step_ms ranks_comm_ms efficiency
effs=()
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then a=$(one); read -r b c <<< "$(many)"; else read -r b c <<< "$(many)"; a=$(one); fi
  e=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
  effs+=("$e")
  printf '%-6s %14s %14s %14s %10s\n' "$r" "$a" "$b" "$c" "$e"
done
printf '%s\n' "${effs[@]}" | sort -n | awk '{ v[n++] = $1 } END { printf "median efficiency %s\n", v[int((n - 1) / 2)] }'
