#!/usr/bin/env bash
# `launch` stopped by SIGTERM (as a supervisor stops it): the signal is passed on, each run stops
# after its step with a checkpoint, and the summary says "cancelled", not "failed". Each run's
# last recorded loss is at the step it was cancelled at (its plots end where it stopped).
# With SIGNAL = HUP (its terminal closed), the same.
# Usage: launch_cancel.sh CLI REPO_ROOT [SIGNAL]   (TERM, the default, or HUP)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start launch_cancel "CLI REPO_ROOT [SIGNAL]" 2 3 "$@"
sig=${3:-TERM}
e2e_cli "$1" "$2"
e2e_tmpdir
db=$tmp/runs.sqlite
"$cli" --db "$db" launch "$config" --nproc 2 --fallback --set run.epochs=20 \
  --set run.log_interval=7 --set threads=1 >"$tmp/out" 2>&1 &
pid=$!
# Until both runs have logged a step (data loaded, training), at most 120 s.
for _ in $(seq 1200); do
  grep -q "^slot 0 | step " "$tmp/out" && grep -q "^slot 1 | step " "$tmp/out" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "^slot 0 | step " "$tmp/out" || ! grep -q "^slot 1 | step " "$tmp/out"; then
  fail "the runs did not both log a step within 120 s: $(tail -n 5 "$tmp/out")"
fi
kill "-$sig" "$pid" 2>/dev/null
wait "$pid"
rc=$?
out=$(cat "$tmp/out")
[ "$rc" -eq 2 ] || fail "exit status $rc (2 expected); output: $out"
echo "$out" | grep -q "^2 of 2 runs were cancelled, each with a checkpoint" ||
  fail "no '2 of 2 runs were cancelled' summary: $out"
for slot in 0 1; do
  line=$(echo "$out" | grep -E "^slot $slot: pid [0-9]+ exited with 2 [(]run [0-9]+ cancelled[)]$") ||
    fail "slot $slot: no 'exited with 2 (run N cancelled)' line: $out"
  id=$(echo "$line" | sed -E 's/.*[(]run ([0-9]+) cancelled[)]/\1/')
  step=$(echo "$out" | grep -E "^slot $slot [|] run $id cancelled at step [0-9]+" |
    sed -E 's/.*cancelled at step ([0-9]+).*/\1/')
  [ -n "$step" ] || fail "slot $slot: no 'run $id cancelled at step N' line: $out"
  # The CSV's last train-loss row is the cancelled step, also off the logging interval.
  "$cli" --db "$db" export "$id" >"$tmp/m$slot.csv" || fail "export $id failed"
  last=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next }
    c && $c != "" { s = $1 } END { print s }' "$tmp/m$slot.csv")
  [ "$last" = "$step" ] ||
    fail "run $id: last loss at step '$last', cancelled at step $step ($(head -n 3 "$tmp/m$slot.csv"))"
done
echo "PASS: launch_cancel: SIG$sig: both runs cancelled, their losses end at the cancelled steps"
