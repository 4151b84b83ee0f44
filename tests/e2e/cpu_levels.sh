#!/usr/bin/env bash
# Every CPU capability level this machine runs trains to the same bits (issue 19): the
# Fashion-MNIST MLP with AdamW and qwen-tiny with Muon, a few logged steps each, at every level
# `trainbench-cli devices` says this CPU runs (TB_CPU_CAPABILITY); every loss and gradient norm
# must equal the baseline level's exactly (the store keeps doubles; export writes them round-trip).
# Prints one PASS line (exit 0) or a FAIL line saying what was wrong (exit 1).
# Usage: cpu_levels.sh CLI REPO_ROOT        (ctest: e2e.cpu_levels)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start cpu_levels "CLI REPO_ROOT" 2 2 "$@"
cli=$1
root=$2
e2e_tmpdir
runs_line=$("$cli" devices | sed -n 's/.*this CPU runs: \([^;]*\);.*/\1/p')
[ -n "$runs_line" ] || fail "'devices' printed no 'this CPU runs:' list"
levels=$(echo "$runs_line" | tr -d ',')
case " $levels " in *" baseline "*) ;; *) fail "baseline missing from '$runs_line'" ;; esac
summary=""
for config in fmnist-mlp-adamw qwen-tiny-fortunes-muon; do
  first=""
  for level in $levels; do
    db="$tmp/$config-$level.sqlite"
    TB_CPU_CAPABILITY=$level "$cli" --threads 2 --db "$db" devices >"$tmp/dev.txt" 2>&1
    grep -q "^CPU kernels: $level " "$tmp/dev.txt" || fail "TB_CPU_CAPABILITY=$level did not select it: $(grep 'CPU kernels' "$tmp/dev.txt")"
    TB_CPU_CAPABILITY=$level "$cli" --threads 2 --db "$db" run "$root/resources/configs/$config.toml" \
      --set run.steps=6 --set run.log_interval=1 --set eval.interval=6 --set eval.batches=1 \
      >"$tmp/run.log" 2>&1 || fail "$config at $level failed: $(tail -3 "$tmp/run.log")"
    "$cli" --db "$db" export 1 --format csv >"$tmp/$level.csv" || fail "export at $level failed"
    # The step, loss and gradient-norm columns (times differ from run to run).
    python3 - "$tmp/$level.csv" >"$tmp/$level.values" <<'PY' || fail "no loss column at $level"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keep = [k for k in (rows[0].keys() if rows else []) if k == "step" or k in ("loss", "grad_norm")]
if "loss" not in keep: sys.exit(1)
for r in rows:
    print(",".join(r[k] for k in keep))
PY
    [ "$(grep -c . "$tmp/$level.values")" -ge 6 ] || fail "$config at $level logged fewer than 6 steps"
    if [ -z "$first" ]; then
      first=$level
    elif ! cmp -s "$tmp/$first.values" "$tmp/$level.values"; then
      fail "$config: $level differs from $first: $(diff "$tmp/$first.values" "$tmp/$level.values" | head -4 | tr '\n' ' ')"
    fi
  done
  summary="$summary $config"
done
echo "PASS: cpu_levels: levels ($levels) give identical losses and gradient norms for$summary"
