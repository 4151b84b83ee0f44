#!/usr/bin/env bash
# e2e.sweep_resume: a sweep killed with kill -9 mid-trial (the sweep and its running trials, one
# process group) continues with `sweep --resume NAME` — finished runs kept, interrupted ones
# resumed from their checkpoints, the rest started — and ends with the table of the same sweep
# never interrupted (every point's mean and sd equal; the run ids differ).
#   tests/e2e/sweep_resume.sh TRAINBENCH_CLI SOURCE_DIR
set -u
cli=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: sweep_resume: $*"; exit 1; }
sets=(--set run.steps=20000 --set checkpoint.interval=500 --set eval.interval=5000
      --set run.log_interval=20)
table() { sed -n '/^point /,/^trial configs/p' | grep '^p[0-9]' |
          sed 's#\([0-9]/[0-9]\) *[0-9,]* *#\1 #'; }

"$cli" --db "$work/whole/runs.sqlite" sweep "$src/tests/data/sweep_grid.toml" --parallel 2 \
  --binding exclusive "${sets[@]}" > "$work/whole.txt" 2>&1 || fail "the uninterrupted sweep failed"
want=$(table < "$work/whole.txt")

mkdir -p "$work/cut"
setsid "$cli" --db "$work/cut/runs.sqlite" sweep "$src/tests/data/sweep_grid.toml" --parallel 2 \
  --binding exclusive "${sets[@]}" > "$work/cut.txt" 2>&1 &
leader=$!
# Kill once a trial of the second pair has checkpoints (step 1000 or more committed), so that
# runs are cut mid-training — however fast or loaded the machine is.
for _ in $(seq 1 3000); do
  "$cli" --db "$work/cut/runs.sqlite" runs 2>/dev/null |
    awk '$3 == "p1" && $5 == "running" && $8 >= 1000 {found = 1} END {exit !found}' && break
  kill -0 "$leader" 2>/dev/null || fail "the sweep ended before it could be cut"
  sleep 0.02
done
kill -9 -- "-$leader" 2>/dev/null || fail "could not kill the sweep's process group"
wait "$leader" 2>/dev/null
runs=$("$cli" --db "$work/cut/runs.sqlite" runs)
echo "$runs"
echo "$runs" | grep -q 'crashed' || fail "no run was cut mid-training"
out=$("$cli" --db "$work/cut/runs.sqlite" sweep --resume opt-lr --parallel 2 \
      --binding exclusive 2>&1) || fail "the resumed sweep failed: $out"
echo "$out" | grep -q 'resumed run' || fail "no run resumed from its checkpoint"
got=$(printf '%s\n' "$out" | table)
echo "uninterrupted:"; echo "$want"
echo "resumed:"; echo "$got"
[ -n "$want" ] || fail "the uninterrupted sweep has no table"
[ "$got" = "$want" ] || fail "the resumed sweep's table differs"
echo "PASS: sweep_resume: killed mid-trial, resumed to the same table"
