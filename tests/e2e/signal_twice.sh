#!/usr/bin/env bash
# The stop signal delivered twice at once: GNU timeout (and other supervisors) send it to the
# process and then to its process group, so a run gets SIGTERM or SIGINT twice within
# microseconds. That is one request: the run must stop after its step with a checkpoint, exit 2,
# not die of the second copy with no checkpoint (it did, in 2 of 8 tries under `timeout -s INT`).
# Part 1 sends SIGTERM (and, once, SIGHUP) twice 20 ms apart at a training run; part 2 runs it
# under `timeout`.
# Usage: signal_twice.sh CLI REPO_ROOT
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start signal_twice "CLI REPO_ROOT" 2 2 "$@"
e2e_cli "$1" "$2"
e2e_tmpdir

# Checks the run's last lines and its status in the store; $1: the round, $2: the exit status,
# $3: "any" when the run may have been stopped before its first step (then without a checkpoint).
ended_cancelled() {
  local round=$1 rc=$2 last status want="cancelled at step [0-9]*, with a checkpoint to continue"
  [ "${3:-}" = any ] && want="cancelled at step [0-9]*"
  last=$(tr '\r' '\n' <"$tmp/run$round.log" | grep -v '^$' | tail -n 3)
  [ "$rc" -eq 2 ] || fail "round $round: exit status $rc (2 expected, cancelled); last lines: $last"
  echo "$last" | grep -q "$want" || fail "round $round: no '$want' line: $last"
  # With a checkpoint, the last line says how to continue it.
  if [ "${3:-}" != any ]; then
    echo "$last" | grep -q "^continue it with: trainbench-cli --db $tmp/runs.sqlite run --resume $round$" ||
      fail "round $round: no 'continue it with' line: $last"
  fi
  status=$("$cli" --db "$tmp/runs.sqlite" show "$round" | head -n 1)
  echo "$status" | grep -q ": cancelled" || fail "round $round: the store says '$status'"
}

round=0
# SIGHUP: the run's terminal closed (an ssh session lost) stops it as SIGTERM does.
for stop in TERM:0.02 TERM:0.02 TERM:0.005 HUP:0.02; do
  round=$((round + 1))
  sig=${stop%:*} gap=${stop#*:}
  "$cli" --db "$tmp/runs.sqlite" run "$config" --set run.epochs=20 --set run.log_interval=50 \
    >"$tmp/run$round.log" 2>&1 &
  pid=$!
  e2e_wait_for "$pid" "$tmp/run$round.log" "^step [0-9]"
  kill "-$sig" "$pid" 2>/dev/null
  sleep "$gap"
  kill "-$sig" "$pid" 2>/dev/null
  wait "$pid"
  ended_cancelled "$round" $?
done

if command -v timeout >/dev/null; then
  round=$((round + 1))
  timeout --preserve-status -s TERM 6 "$cli" --db "$tmp/runs.sqlite" run "$config" \
    --set run.epochs=20 --set run.log_interval=50 >"$tmp/run$round.log" 2>&1
  rc=$?
  ended_cancelled "$round" "$rc" any  # a slow machine may still be loading the data at 6 s
fi
echo "PASS: signal_twice: $round runs stopped by a doubled signal, each cancelled with a checkpoint"
