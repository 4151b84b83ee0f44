#!/usr/bin/env bash
# kill -9 of a running `trainbench-cli run` (issue 5): at a random moment 1.5-4 s into a training
# run, SIGKILL the CLI, then check that the run store it was writing
#   - passes PRAGMA integrity_check,
#   - holds the "loss" metric for every step 1..k (k >= 1) and no step beyond k (a log call is
#     never split across commits), with runs.last_step = k and the run still marked running,
#   - shows the run as crashed with k steps in `trainbench-cli runs` (the next open marks it), and
#     that `trainbench-cli show 1` works on it.
# Prints one PASS line with k (exit 0) or a FAIL line saying what was wrong (exit 1).
# Usage: kill9_run.sh CLI REPO_ROOT [ROUNDS]  (ctest: e2e.kill9_run, 1 round; e2e.kill9_20, 20)
# Each round uses a fresh store; the kill comes 0..2.5 s after the first committed step (so a slow
# start, e.g. under a sanitizer, still leaves something to check).
# Needs python3 with its sqlite3 module (Debian 12: /usr/bin/python3).
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start kill9_run "CLI REPO_ROOT [ROUNDS]" 2 3 "$@"
e2e_cli "$1" "$2"
rounds=${3:-1}
py=${PYTHON:-python3}
"$py" -c 'import sqlite3' 2>/dev/null || fail "'$py' with the sqlite3 module is needed"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-kill9.XXXXXX") || fail "mktemp -d failed"
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
summary=
round_once() {
db=$tmp/runs-$round.sqlite

# A random delay of 0..2500 ms after the first committed step.
delay_ms=$((RANDOM % 2501))
delay=$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))

# log_interval=1: metrics of every step go to the store (the config logs every 10th), so the
# committed steps must be exactly 1..k. 20 epochs (9380 steps) outlast the 2.5 s at any speed
# (5 epochs took 2.6 s at ~900 steps/s, too close).
"$cli" --db "$db" run "$config" --set run.epochs=20 --set run.log_interval=1 \
  >"$tmp/run.log" 2>&1 &
pid=$!
# Wait (up to 120 s) for the first committed step, then the random delay.
first='
import sqlite3, sys, time
t0 = time.time()
while time.time() - t0 < 120:
    try:
        con = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True, timeout=1)
        if con.execute("SELECT MAX(last_step) FROM metric_chunks").fetchone()[0]:
            sys.exit(0)
        con.close()
    except sqlite3.Error:
        pass
    time.sleep(0.05)
sys.exit(1)
'
"$py" -c "$first" "$db" || fail "no step was committed within 120 s"
echo "kill9_run: round $round: SIGKILL ${delay} s after the first commit"
sleep "$delay"
if ! kill -0 "$pid" 2>/dev/null; then
  wait "$pid"
  rc=$?
  pid=
  tail -n 20 "$tmp/run.log"
  fail "the run ended (exit code $rc) before the SIGKILL at ${delay} s"
fi
kill -KILL "$pid"
{ wait "$pid"; } 2>/dev/null  # without the shell's "Killed" notice
rc=$?
pid=
[ "$rc" -eq 137 ] || { tail -n 20 "$tmp/run.log"; fail "expected the run to die of SIGKILL (exit 137), got $rc"; }
echo "kill9_run: killed; last progress: $(tr '\r' '\n' <"$tmp/run.log" | grep -a 'step' | tail -n 1)"

# The file as the killed process left it (nothing else has opened it yet).
check_db='
import sqlite3, struct, sys
def fail(msg):
    print("FAIL: kill9_run: " + msg)
    sys.exit(1)
def series_steps(con, run, key_id):
    # metric_chunks: per row, count records of (step int64, value float64, time float64),
    # little-endian; a later row (higher id) replaces an earlier one for the same step.
    steps = {}
    for count, blob in con.execute(
            "SELECT count, points FROM metric_chunks WHERE run_id = ? AND key_id = ? ORDER BY id",
            (run, key_id)):
        if len(blob) != 24 * count:
            fail("a chunk of key %d holds %d bytes for %d points" % (key_id, len(blob), count))
        for step, value, t in struct.iter_unpack("<qdd", blob):
            steps[step] = value
    return sorted(steps)
try:
    con = sqlite3.connect(sys.argv[1])
    rows = con.execute("PRAGMA integrity_check").fetchall()
    if rows != [("ok",)]:
        fail("PRAGMA integrity_check: %r" % (rows[:10],))
    runs = con.execute("SELECT id, status, last_step FROM runs").fetchall()
    if len(runs) != 1:
        fail("expected one run in the store, found %r" % (runs,))
    run, status, last_step = runs[0]
    if status != "running":
        fail("before the next open the run should still be running, it is %r" % (status,))
    key = con.execute("SELECT id FROM metric_keys WHERE name = ?", ("loss",)).fetchone()
    if key is None:
        fail("no \"loss\" metric key: no step was committed")
    steps = series_steps(con, run, key[0])
    k = len(steps)
    if k < 1:
        fail("no \"loss\" step was committed")
    if steps != list(range(1, k + 1)):
        missing = sorted(set(range(1, steps[-1] + 1)) - set(steps))
        fail("\"loss\" steps are not 1..%d: first %r, last %r, missing %r"
             % (k, steps[:3], steps[-3:], missing[:10]))
    max_step = con.execute("SELECT MAX(last_step) FROM metric_chunks WHERE run_id = ?",
                           (run,)).fetchone()[0]
    if max_step != k:
        fail("metrics hold step %r beyond the last \"loss\" step %d (a step was split)"
             % (max_step, k))
    key_names = dict(con.execute("SELECT id, name FROM metric_keys").fetchall())
    key_steps = {key_names[kid]: set(series_steps(con, run, kid)) for (kid,) in con.execute(
        "SELECT DISTINCT key_id FROM metric_chunks WHERE run_id = ?", (run,)).fetchall()}
    def keys_at(step):
        return {n for n, st in key_steps.items() if step in st}
    partial = keys_at(1) - keys_at(k)
    if partial:
        fail("step %d lacks metrics %r that step 1 has (a step was split)" % (k, sorted(partial)))
    if last_step != k:
        fail("runs.last_step is %r, the committed steps end at %d" % (last_step, k))
    con.close()
    print(run, k)
except sqlite3.Error as e:
    fail("SQLite error reading the store: %s" % e)
'
out=$("$py" -c "$check_db" "$db") || { echo "$out"; exit 1; }
read -r run k <<<"$out"
echo "kill9_run: integrity_check ok; run $run holds loss steps 1..$k"

# The next open marks the run crashed.
runs_out=$("$cli" --db "$db" runs 2>&1) || { echo "$runs_out"; fail "'trainbench-cli runs' failed"; }
echo "$runs_out"
# id name status created-date created-time steps message...
row=$(awk -v id="$run" '$1 == id { print $3, $6 }' <<<"$runs_out")
read -r status steps <<<"$row"
[ "${status:-}" = crashed ] || fail "run $run's status in 'runs' is '${status:-<none>}', expected crashed"
[ "${steps:-}" = "$k" ] || fail "run $run's steps in 'runs' is '${steps:-<none>}', expected $k"

show_out=$("$cli" --db "$db" show "$run" 2>&1) ||
  { echo "$show_out"; fail "'trainbench-cli show $run' failed"; }
grep -q "': crashed" <<<"$show_out" || { echo "$show_out"; fail "'show $run' does not say crashed"; }
grep -Eq "^ +loss +[^ ]+ @$k( |$)" <<<"$show_out" ||
  { echo "$show_out"; fail "'show $run' does not list loss at step $k"; }

echo "kill9_run: round $round: SIGKILL ${delay} s after the first commit; integrity ok, loss steps 1..$k, run $run crashed with $k steps"
summary="$summary $k"

}

for round in $(seq 1 "$rounds"); do
  round_once
done
echo "PASS: kill9_run: $rounds round(s); committed steps at the kills:$summary"
exit 0
