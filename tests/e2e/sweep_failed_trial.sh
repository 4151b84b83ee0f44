#!/usr/bin/env bash
# e2e.sweep_failed_trial: a trial whose run diverges is a failed trial. Before, a sweep whose
# trial diverged exited 0 and said nothing, and with early stopping the diverged trial was
# recorded as "stopped" at the rung (`sweeps` counted it so, the note ranked it "inf"). Now the
# trial's line names its run and why it ended, the sweep exits 2 saying how many trials failed,
# `sweeps` counts the trial failed, and at a rung the diverged point is listed as ended (its place
# among the losers taken, the others ranked as before) and not recorded as stopped.
#   tests/e2e/sweep_failed_trial.sh TRAINBENCH_CLI SOURCE_DIR
set -u
. "$(dirname "$0")/common.sh"
e2e_start sweep_failed_trial "CLI SOURCE_DIR" 2 2 "$@"
cli=$1 src=$2
e2e_tmpdir
db=$tmp/runs.sqlite
# One AdamW point per learning rate, one seed: 1e6 diverges within a few steps.
sed -e '/^"optimizer.kind"/d' -e '/^"optimizer.muon.lr"/d' -e 's/^seeds = .*/seeds = [1]/' \
  -e 's/^"optimizer.lr" = .*/"optimizer.lr" = [1e-3, 3e-3, 1e6]/' -e 's/name = "opt-lr"/name = "div"/' \
  "$src/tests/data/sweep_grid.toml" > "$tmp/div.toml" || fail "cannot write the config"

out=$("$cli" --db "$db" sweep "$tmp/div.toml" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 2 ] || fail "the sweep with a diverged trial exited with $rc, not 2"
echo "$out" | grep -q '^trial 2 (div p2 s1): run [0-9]* diverged (20 non-finite losses in a row (run.max_nonfinite) at step [0-9]*), exit code 2, see .*trial-2.log$' ||
  fail "the diverged trial's line does not name its run and why"
echo "$out" | grep -q '^error: 1 trial(s) failed$' || fail "the sweep did not say a trial failed"
"$cli" --db "$db" sweeps | grep -Eq '^1 +div +finished .* 3 \(2, 0, 1\)$' ||
  fail "sweeps does not count the diverged trial failed: $("$cli" --db "$db" sweeps)"

# Successive halving at step 10, factor 2: the three points take ceil(3 / 2) = 2 places; the
# diverged point takes a losing one, so both others go on, and it is not recorded as stopped.
sed -e 's/name = "div"/name = "div-es"/' "$tmp/div.toml" > "$tmp/es.toml"
printf '\n[sweep.early_stopping]\nmethod = "successive_halving"\nsteps = [10]\n' >> "$tmp/es.toml"
out=$("$cli" --db "$db" sweep "$tmp/es.toml" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 2 ] || fail "the early-stopping sweep with a diverged trial exited with $rc, not 2"
echo "$out" | grep -Eq '^early stopping at step 10 \(eval.loss, keep the best 2 of 3\): kept p[01] [0-9.e-]+, p[01] [0-9.e-]+; stopped none; ended p2 \(trial 2 diverged\)$' ||
  fail "the rung's note does not list the diverged point as ended"
[ "$(echo "$out" | grep -c '^trial [01] (div-es p[01] s1): finished$')" = 2 ] ||
  fail "the two live points did not both run to the end"
"$cli" --db "$db" sweeps | grep -Eq '^2 +div-es +finished .* 3 \(2, 0, 1\)$' ||
  fail "sweeps counts the diverged trial as stopped: $("$cli" --db "$db" sweeps)"
"$cli" --db "$db" sweep --show div-es | grep -q 'stopped @' &&
  fail "a point is shown stopped: $("$cli" --db "$db" sweep --show div-es)"
echo "PASS: sweep_failed_trial: the diverged trial failed the sweep and was not taken as stopped"
