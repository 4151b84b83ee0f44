#!/usr/bin/env bash
# Signals during a run: 400 pause/resume pairs (SIGUSR2) in 4 s at a training `trainbench-cli
# run`, then SIGUSR1 (cancel). The run must end cancelled with a checkpoint and exit 2. A handler
# that ran on a thread inside a oneDNN kernel corrupted the heap ("corrupted size vs. prev_size",
# exit 134) in 3 of 3 such runs; the handlers now run on the CLI's watcher thread alone.
# Usage: signal_storm.sh CLI REPO_ROOT
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start signal_storm "CLI REPO_ROOT" 2 2 "$@"
e2e_cli "$1" "$2"
e2e_tmpdir
# 20 epochs (9380 steps) outlast the storm at any speed.
"$cli" --db "$tmp/runs.sqlite" run "$config" --set run.epochs=20 --set run.log_interval=100 \
  >"$tmp/run.log" 2>&1 &
pid=$!
e2e_wait_for "$pid" "$tmp/run.log" "^step [0-9]"
for _ in $(seq 400); do
  kill -USR2 "$pid" 2>/dev/null
  kill -USR2 "$pid" 2>/dev/null
  sleep 0.01
done
sleep 0.2
# Cancel also wakes a run left paused (two signals sent at once may arrive as one).
kill -USR1 "$pid" 2>/dev/null
wait "$pid"
rc=$?
last=$(tr '\r' '\n' <"$tmp/run.log" | grep -v '^$' | tail -n 3)
[ "$rc" -eq 2 ] || fail "exit status $rc (2 expected, cancelled); the run's last lines: $last"
echo "$last" | grep -q "cancelled at step [0-9]*, with a checkpoint to continue from" ||
  fail "no 'cancelled at step N, with a checkpoint' line: $last"
echo "PASS: signal_storm: $(echo "$last" | grep -o 'cancelled at step [0-9]*')"
