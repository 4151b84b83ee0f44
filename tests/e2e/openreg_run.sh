#!/usr/bin/env bash
# The MLP trained by `trainbench-cli run` on the CPU and on the openreg reference accelerator
# (issue 8): both runs finish, and every step's loss on openreg:0 is within 1e-4 (relative) of
# the CPU's (openreg has its own add/mul/relu/mm kernels; the rest runs the CPU's through its
# fallback). Uses the Fashion-MNIST config with a few steps.
# Prints one PASS line (exit 0) or a FAIL line saying what was wrong (exit 1).
# Usage: openreg_run.sh CLI REPO_ROOT        (ctest: e2e.openreg_run)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start openreg_run "CLI REPO_ROOT" 2 2 "$@"
cli=$1
config=$2/resources/configs/fmnist-mlp-adamw.toml
e2e_tmpdir
for dev in cpu openreg:0; do
  "$cli" --db "$tmp/runs.sqlite" run "$config" --set run.device="$dev" --set run.steps=12 \
    --set run.log_interval=1 --set eval.interval=12 --set eval.batches=2 >"$tmp/$dev.log" 2>&1 ||
    fail "the run on $dev failed: $(tail -3 "$tmp/$dev.log")"
done
"$cli" --db "$tmp/runs.sqlite" export 1 --format csv >"$tmp/cpu.csv" || fail "export 1 failed"
"$cli" --db "$tmp/runs.sqlite" export 2 --format csv >"$tmp/dev.csv" || fail "export 2 failed"
python3 - "$tmp/cpu.csv" "$tmp/dev.csv" <<'PY' || exit 1
import csv, sys
def losses(path):
    out = {}
    for row in csv.DictReader(open(path)):
        if row.get("loss"):
            out[int(row["step"])] = float(row["loss"])
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if len(a) != 12 or sorted(a) != sorted(b):
    print(f"FAIL: openreg_run: steps differ: cpu {sorted(a)} openreg {sorted(b)}"); sys.exit(1)
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
if worst > 1e-4:
    print(f"FAIL: openreg_run: losses differ by {worst:.3g} (relative)"); sys.exit(1)
print(f"PASS: openreg_run: 12 steps, largest relative loss difference {worst:.2g}")
PY
