#!/usr/bin/env bash
# Two training runs in parallel on one machine, unbound vs `exclusive` binding: per run, the mean
# and the standard deviation of the step time, and the wall time of the launch.
# Usage: bench/launch_binding.sh CLI [CONFIG] [STEPS]   (results: docs/benchmarks.md §6d)
set -eu
cli=$1
config=${2:-$(dirname "$0")/../resources/configs/fmnist-mlp-adamw.toml}
steps=${3:-400}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-launch-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for mode in none exclusive; do
  db=$tmp/$mode.sqlite
  start=$(date +%s.%N)
  "$cli" --db "$db" launch --nproc 2 --binding "$mode" "$config" --set run.steps="$steps" \
    --set eval.interval=0 --set data.workers=1 > "$tmp/$mode.log" 2>&1
  end=$(date +%s.%N)
  for id in 1 2; do
    "$cli" --db "$db" export "$id" --format csv > "$tmp/$mode-$id.csv"
    python3 - "$tmp/$mode-$id.csv" "$mode" "$id" "$start" "$end" <<'PY'
import csv, statistics, sys
path, mode, run, start, end = sys.argv[1:]
rows = list(csv.DictReader(open(path)))  # wide: one column per metric
ms = [float(r["time.step_ms"]) for r in rows if r.get("time.step_ms")][10:]  # skip warm-up
print(f"{mode:10s} run {run}: step {statistics.mean(ms):6.2f} ms  sd {statistics.stdev(ms):5.2f} ms"
      f"  p95 {sorted(ms)[int(0.95 * len(ms))]:6.2f} ms  (launch wall {float(end) - float(start):5.1f} s)")
PY
  done
done
