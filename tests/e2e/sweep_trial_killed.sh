#!/usr/bin/env bash
# e2e.sweep_trial_killed: a trial process killed under a running sweep (the OOM killer, a kill -9)
# is not a result. Before, the sweep ranked the dead trial worst at its rung and stopped its point
# for good; a trial killed mid-training failed the sweep with "is running in another process".
# Now the sweep ends failed, naming the trial, its exit code and log, and takes no decision;
# `sweep --resume` runs the trial again. Cut twice — trial 0 as soon as it is started (before or
# while it sets its run up), then a resumed trial mid-training — and resumed each time, the sweep
# ends with the table of the same sweep never interrupted.
#   tests/e2e/sweep_trial_killed.sh TRAINBENCH_CLI SOURCE_DIR
set -u
. "$(dirname "$0")/common.sh"
e2e_start sweep_trial_killed "CLI SOURCE_DIR" 2 2 "$@"
cli=$1 src=$2
e2e_tmpdir
work=$tmp
sets=(--set run.steps=20000 --set checkpoint.interval=500 --set eval.interval=10000
      --set run.log_interval=20)
e2e_sweep_config "$src" es-kill "10000"

"$cli" --db "$work/whole/runs.sqlite" sweep "$config" --parallel 2 "${sets[@]}" \
  > "$work/whole.txt" 2>&1 || fail "the uninterrupted sweep failed: $(tail -3 "$work/whole.txt")"
want=$(sweep_table < "$work/whole.txt")
[ -n "$want" ] || fail "the uninterrupted sweep has no table"

db=$work/cut/runs.sqlite
# The sweep ($leader) with a killed trial ends failed (exit code 1); its output $1 is shown.
cut_ends() {
  local rc
  wait "$leader"
  rc=$?
  cat "$1"
  [ "$rc" = 1 ] || fail "$2 with a killed trial exited with $rc, not 1"
}

# Cut 1: trial 0 at once.
"$cli" --db "$db" sweep "$config" --parallel 2 "${sets[@]}" > "$work/cut1.txt" 2>&1 &
leader=$!
killed=
for _ in $(seq 1 1500); do
  line=$(grep -m1 '^trial 0 (.*): pid ' "$work/cut1.txt")
  if [ -n "$line" ]; then
    kill -9 "$(echo "$line" | sed 's/.*: pid \([0-9]*\),.*/\1/')" && killed=1
    break
  fi
  sleep 0.02
done
[ -n "$killed" ] || fail "trial 0 never started"
cut_ends "$work/cut1.txt" "the sweep"
grep -q "error: \[sweep\] 1 trial(s) ended before step 10000 without a result: trial 0 (es-kill p0 s1, killed: exit code 137, see .*trial-0.log); trainbench-cli sweep --resume es-kill runs them again" \
  "$work/cut1.txt" || fail "the sweep did not say which trial ended without a result"
grep -q '^early stopping' "$work/cut1.txt" && fail "a rung was decided without trial 0"
"$cli" --db "$db" sweeps | grep -q 'es-kill *failed' || fail "the sweep is not listed failed"
"$cli" --db "$db" runs | grep -q ' queued ' && fail "a run was left queued"

# Cut 2: the resume, its first resumed trial once its run is past step 12000 (to the end now).
"$cli" --db "$db" sweep --resume es-kill --parallel 2 > "$work/cut2.txt" 2>&1 &
leader=$!
killed=
for _ in $(seq 1 1500); do
  line=$(grep -m1 '^trial [0-9]* (.*): pid [0-9]*, .*resumed run [0-9]*, ' "$work/cut2.txt")
  if [ -n "$line" ]; then
    pid=$(echo "$line" | sed 's/.*: pid \([0-9]*\),.*/\1/')
    run=$(echo "$line" | sed 's/.*resumed run \([0-9]*\),.*/\1/')
    if "$cli" --db "$db" runs 2>/dev/null |
       awk -v r="$run" '$1 == r && $5 == "running" && $8 > 12000 {f = 1} END {exit !f}'; then
      kill -9 "$pid" && killed=1
      break
    fi
  fi
  kill -0 "$leader" 2>/dev/null || break
  sleep 0.02
done
[ -n "$killed" ] || fail "no resumed trial could be killed past step 12000"
cut_ends "$work/cut2.txt" "the resumed sweep"
grep -q 'ended before the end without a result: trial [0-9] (es-kill p[01] s[12], killed: exit code 137' \
  "$work/cut2.txt" || fail "the resumed sweep did not name its killed trial"
grep -q 'is running in another process' "$work/cut2.txt" && fail "the killed trial's run was taken for a live one"
"$cli" --db "$db" runs | grep -q 'crashed' || fail "the killed trial's run is not crashed"

out=$("$cli" --db "$db" sweep --resume es-kill --parallel 2 2>&1) || fail "the last resume failed: $out"
got=$(printf '%s\n' "$out" | sweep_table)
echo "uninterrupted:"; echo "$want"
echo "resumed twice:"; echo "$got"
[ "$got" = "$want" ] || fail "the resumed sweep's table differs"
echo "PASS: sweep_trial_killed: killed trials were run again, the same table"
