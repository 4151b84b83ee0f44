#!/usr/bin/env bash
# e2e.sweep_trial_error: a sweep stopped with SIGTERM waits for its trials to stop after their
# step (each cancelled with a checkpoint) before it ends — it used to end at once, its trials
# still writing, so that an immediate `sweep --resume` was refused — and says how to continue.
# Then one trial's checkpoint is damaged: on `sweep --resume` its process refuses to continue
# (exit code 1). That trial has failed: its line gives the error, the rung lists its point as
# ended (before, it ranked last and was recorded as "stopped early", and the sweep said 0 failed),
# the sweep exits 2, and `sweeps` counts it failed.
#   tests/e2e/sweep_trial_error.sh TRAINBENCH_CLI SOURCE_DIR
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start sweep_trial_error "CLI SOURCE_DIR" 2 2 "$@"
cli=$1 src=$2
e2e_tmpdir
db=$tmp/runs.sqlite
# Four points, one seed each; successive halving at step 10000 keeps two of them.
e2e_sweep_config "$src" err 10000
sed -i 's/^seeds = .*/seeds = [1]/' "$config"
setsid "$cli" --db "$db" sweep "$config" --parallel 2 --set run.steps=20000 \
  --set checkpoint.interval=100 --set eval.interval=1000 --set run.log_interval=50 \
  > "$tmp/cut.txt" 2>&1 &
sweep=$!
e2e_wait_training "$db" 2 300 "$sweep" "$tmp/cut.txt"
kill -TERM "$sweep"
wait "$sweep"
rc=$?
cat "$tmp/cut.txt"
[ "$rc" = 143 ] || fail "the sweep stopped by SIGTERM exited with $rc, not 143 (128 + SIGTERM)"
# It waited for its trials: none is left running.
runs=$("$cli" --db "$db" runs)
echo "$runs"
echo "$runs" | grep -q ' running ' && fail "the sweep ended before its trials had stopped"
[ "$(echo "$runs" | grep -c 'cancelled at step .* with a checkpoint')" = 2 ] ||
  fail "the two running trials were not cancelled with a checkpoint"
grep -q '^sweep err interrupted: trainbench-cli sweep --resume err continues it$' "$tmp/cut.txt" ||
  fail "the sweep did not say how to continue"
"$cli" --db "$db" sweeps | grep -Eq '^1 +err +interrupted ' || fail "the sweep is not interrupted"

# `sweep --resume err`, its output in $out, which it prints; fails unless it exits with $1.
resume_sweep() {
  out=$("$cli" --db "$db" sweep --resume err --parallel 2 2>&1)
  local rc=$?
  echo "$out"
  [ "$rc" = "$1" ] || fail "the resumed sweep exited with $rc, not $1 ($2)"
}
# Fails ($2) unless `sweeps` lists the sweep finished with trials (finished, stopped, failed)
# matching $1.
sweeps_counts() {
  "$cli" --db "$db" sweeps | grep -Eq "^1 +err +finished .* 4 \\($1\\)\$" ||
    fail "$2: $("$cli" --db "$db" sweeps)"
}

# Damage trial 0's newest checkpoint: its resume is refused.
run=$(echo "$runs" | awk '$2 == "err" && $3 == "p0" {print $1}')
[ -n "$run" ] || fail "no run for trial 0"
newest=$(find "$tmp" -type d -path "*/run-$run/step-*" | sort | tail -1)
[ -f "$newest/model.safetensors" ] || fail "no checkpoint for run $run"
truncate -s 100 "$newest/model.safetensors"
resume_sweep 2 "a trial failed"
echo "$out" | grep -q "^trial 0 (err p0 s1): \[safetensors\] .*model.safetensors: truncated: .*, run $run stays cancelled, exit code 1, see .*trial-0.log$" ||
  fail "trial 0's line does not give its error"
echo "$out" | grep -Eq '^early stopping at step 10000 \(eval.loss, keep the best 2 of 4\): kept p[123] [^;]*, p[123] [^;]*; stopped p[123] [^;]*; ended p0 \(trial 0 error, exit code 1\)$' ||
  fail "the rung does not list the failed trial's point as ended"
echo "$out" | grep -q '^error: 1 trial(s) failed$' || fail "the sweep did not say a trial failed"
sweeps_counts "2, 1, 1" "sweeps does not count the trial failed"

# The damage mended (its checkpoints gone, the trial starts again): `sweep --resume` runs the
# failed trial, and the rung's decision is taken again with its value now. The points that
# finished are not taken as stopped at the rung, whatever that decision says.
rm -rf "$(dirname "$newest")"
resume_sweep 0 "the failed trial run again finished"
echo "$out" | grep -q '^trial 0 (err p0 s1): pid [0-9]*, unbound, to step 10000, ' ||
  fail "the failed trial was not run again"
echo "$out" | grep -Eq '^early stopping at step 10000 .*; stopped p2 [0-9.e-]+$' ||
  fail "the decision taken again stopped a point that had finished"
sweeps_counts "[23], 1, 0" "sweeps counts a finished point as stopped"
echo "PASS: sweep_trial_error: the stopped sweep waited for its trials; the refused resume failed its trial"
