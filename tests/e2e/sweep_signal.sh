#!/usr/bin/env bash
# e2e.sweep_signal: SIGTERM sent to a sweep process alone (kill PID, a supervisor; not the
# terminal's Ctrl-C, which reaches its trials too) is passed on to the trials running: each stops
# after its step with a checkpoint (cancelled), and `sweep --resume` can continue them. Before,
# the sweep said "its trials stop" and exited while they trained on unsupervised to their end.
# (tests/e2e/sweep_trial_error.sh checks the exit status and that an immediate resume works.)
#   tests/e2e/sweep_signal.sh TRAINBENCH_CLI SOURCE_DIR
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start sweep_signal "CLI SOURCE_DIR" 2 2 "$@"
cli=$1 src=$2
e2e_tmpdir
db=$tmp/runs.sqlite
sed 's/name = "opt-lr"/name = "signal"/' "$src/tests/data/sweep_grid.toml" > "$tmp/s.toml" ||
  fail "cannot write the config"
setsid "$cli" --db "$db" sweep "$tmp/s.toml" --parallel 2 --set run.steps=2000000 \
  --set run.log_interval=100 --set eval.interval=0 > "$tmp/out.txt" 2>&1 &
sweep=$!
e2e_wait_training "$db" 2 200 "$sweep" "$tmp/out.txt"
kill -TERM "$sweep"
for _ in $(seq 1 500); do  # until it has ended (a zombie until the wait below)
  case $(ps -o stat= -p "$sweep" 2>/dev/null) in "" | Z*) break ;; esac
  sleep 0.02
done
case $(ps -o stat= -p "$sweep" 2>/dev/null) in
  "" | Z*) wait "$sweep" 2>/dev/null ;;
  *) fail "the sweep did not end on SIGTERM" ;;
esac
# Each trial stopped after its step and closed its run, and the sweep waited for them: no run is
# left running.
runs=$("$cli" --db "$db" runs)
echo "$runs"
echo "$runs" | grep -q ' running ' && fail "a trial went on after the sweep was stopped"
[ "$(echo "$runs" | grep -c 'cancelled at step .* with a checkpoint')" -ge 2 ] ||
  fail "the running trials were not cancelled with a checkpoint"
grep -q 'sweep --resume signal continues it' "$tmp/out.txt" ||
  fail "the sweep did not say how to continue: $(tail -2 "$tmp/out.txt")"
echo "PASS: sweep_signal: SIGTERM to the sweep stopped its trials with checkpoints"
