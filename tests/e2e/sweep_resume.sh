#!/usr/bin/env bash
# e2e.sweep_resume: a sweep with early stopping (successive halving at steps 5000 and 10000),
# killed with kill -9 after its first rung's decision while the kept trials run on (the sweep and
# its running trials, one process group), continues with `sweep --resume NAME` — finished and
# stopped trials kept, interrupted runs resumed from their checkpoints in whatever slot is free,
# the rung's decision taken again from the stored metrics — and ends with the table of the same
# sweep never interrupted (every point's mean and sd, and where the others stopped, equal; the
# run ids differ).
#   tests/e2e/sweep_resume.sh TRAINBENCH_CLI SOURCE_DIR
set -u
. "$(dirname "$0")/common.sh"
e2e_start sweep_resume "CLI SOURCE_DIR" 2 2 "$@"
cli=$1 src=$2
e2e_tmpdir
work=$tmp
sets=(--set run.steps=20000 --set checkpoint.interval=500 --set eval.interval=5000
      --set run.log_interval=20)
e2e_sweep_config "$src" es-resume "5000, 10000"

"$cli" --db "$work/whole/runs.sqlite" sweep "$config" --parallel 2 --binding exclusive \
  "${sets[@]}" > "$work/whole.txt" 2>&1 || fail "the uninterrupted sweep failed"
want=$(sweep_table < "$work/whole.txt")

mkdir -p "$work/cut"
setsid "$cli" --db "$work/cut/runs.sqlite" sweep "$config" --parallel 2 --binding exclusive \
  "${sets[@]}" > "$work/cut.txt" 2>&1 &
leader=$!
# Kill once the first rung is decided and a kept trial has run past step 6000 (checkpoints every
# 500), so that runs are cut mid-stage — however fast or loaded the machine is.
for _ in $(seq 1 3000); do
  grep -q '^early stopping at step 5000' "$work/cut.txt" &&
    "$cli" --db "$work/cut/runs.sqlite" runs 2>/dev/null |
    awk '$5 == "running" && $8 >= 6000 {found = 1} END {exit !found}' && break
  kill -0 "$leader" 2>/dev/null || fail "the sweep ended before it could be cut"
  sleep 0.02
done
kill -9 -- "-$leader" 2>/dev/null || fail "could not kill the sweep's process group"
wait "$leader" 2>/dev/null
# SIGKILL is delivered at once but a trial process may take a moment to end (a thread in a
# write); until it has, its run is rightly "running" and the resume would refuse to touch it.
for _ in $(seq 1 500); do
  kill -0 -- "-$leader" 2>/dev/null || break
  sleep 0.02
done
kill -0 -- "-$leader" 2>/dev/null && fail "the killed sweep's processes did not end within 10 s"
runs=$("$cli" --db "$work/cut/runs.sqlite" runs)
echo "$runs"
echo "$runs" | grep -q 'crashed' || fail "no run was cut mid-training"
"$cli" --db "$work/cut/runs.sqlite" sweeps | grep -q 'es-resume *interrupted' ||
  fail "the killed sweep is not listed as interrupted"
out=$("$cli" --db "$work/cut/runs.sqlite" sweep --resume es-resume --parallel 2 \
      --binding exclusive 2>&1) || fail "the resumed sweep failed: $out"
echo "$out" | grep -q 'resumed run' || fail "no run resumed from its checkpoint"
got=$(printf '%s\n' "$out" | sweep_table)
echo "uninterrupted:"; echo "$want"
echo "resumed:"; echo "$got"
[ -n "$want" ] || fail "the uninterrupted sweep has no table"
echo "$want" | grep -q 'stopped @5000' || fail "the uninterrupted sweep stopped no point at 5000"
[ "$got" = "$want" ] || fail "the resumed sweep's table differs"
echo "PASS: sweep_resume: killed after a rung, resumed to the same table"
