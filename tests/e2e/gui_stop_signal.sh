#!/usr/bin/env bash
# The GUI stopped by a signal while it trains (Ctrl-C in its terminal, a logout, a supervisor):
# it quits as closing it does, without the question — the run stops after its step with a
# checkpoint, status cancelled, and the program exits 128 + the signal (143 for SIGTERM, 129 for
# SIGHUP: its terminal closed). Before, the default action killed it and the run was found
# crashed without a checkpoint (and, for SIGHUP, a distributed run's mpirun, in a process group
# of its own, trained on). The signal is sent twice 20 ms apart, as `timeout` does (the process,
# then its group): one request.
# Runs the GUI on Qt's offscreen platform (no display needed).
# Usage: gui_stop_signal.sh CLI REPO_ROOT GUI [SIGNAL]   (SIGNAL: TERM, the default, or HUP)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start gui_stop_signal "CLI REPO_ROOT GUI [SIGNAL]" 3 4 "$@"
gui=$3
sig=${4:-TERM}
case $sig in
  TERM) expected=143 ;;
  HUP) expected=129 ;;
  *) fail "SIGNAL must be TERM or HUP, got '$sig'" ;;
esac
[ -x "$gui" ] || fail "GUI '$gui' is not an executable"
e2e_cli "$1" "$2"
e2e_tmpdir
export HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/runtime"
mkdir -p "$HOME" "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

# 50 epochs: still training when the signal comes, at any speed.
sed 's/^epochs = 5 /epochs = 50 /' "$config" >"$tmp/long.toml"
grep -q '^epochs = 50 ' "$tmp/long.toml" || fail "cannot lengthen $config (its epochs line changed?)"
QT_QPA_PLATFORM=offscreen "$gui" --db "$tmp/runs.sqlite" --run "$tmp/long.toml" >"$tmp/gui.log" 2>&1 &
pid=$!
# Until the run has logged a step (the data loaded, the kernels running), at most 120 s.
logged() {
  local steps
  steps=$("$cli" --db "$tmp/runs.sqlite" runs 2>/dev/null | awk '$1 == 1 { print $6 }')
  [ "${steps:-0}" -gt 0 ] 2>/dev/null
}
for _ in $(seq 1200); do
  logged && break
  kill -0 "$pid" 2>/dev/null || fail "the GUI ended before its run logged a step: $(cat "$tmp/gui.log")"
  sleep 0.1
done
logged || fail "no step logged in 120 s"
kill "-$sig" "$pid"
sleep 0.02
kill "-$sig" "$pid" 2>/dev/null
wait "$pid"
rc=$?
[ "$rc" -eq "$expected" ] || fail "SIG$sig: exit status $rc ($expected expected); its output: $(cat "$tmp/gui.log")"
grep -q "quitting; the runs training here stop after their step, with a checkpoint" "$tmp/gui.log" ||
  fail "it did not say why it quits: $(cat "$tmp/gui.log")"
status=$("$cli" --db "$tmp/runs.sqlite" show 1 | head -n 1)
echo "$status" | grep -q ": cancelled" || fail "the store says '$status'"
"$cli" --db "$tmp/runs.sqlite" show 1 | grep -q "with a checkpoint to continue from" ||
  fail "run 1 has no checkpoint to continue from: $("$cli" --db "$tmp/runs.sqlite" show 1 | head -n 4)"
echo "PASS: gui_stop_signal: SIG$sig twice at the training GUI: exit $expected, run 1 cancelled with a checkpoint"
