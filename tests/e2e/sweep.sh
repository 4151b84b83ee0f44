#!/usr/bin/env bash
# e2e.sweep: a 2 x 2 x 2 grid (optimizer x learning rate x seed) on synthetic data runs with
# --parallel 2 in exclusive CPU slots and records 8 runs under one sweep: its table has four
# points with both seeds finished, eight distinct runs, and the runs carry the sweep's tag.
#   tests/e2e/sweep.sh TRAINBENCH_CLI SOURCE_DIR
set -u
cli=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: sweep: $*"; exit 1; }
out=$("$cli" --db "$work/runs.sqlite" sweep "$src/tests/data/sweep_grid.toml" --parallel 2 \
      --binding exclusive 2>&1) || fail "the sweep exited with $?: $out"
table=$(printf '%s\n' "$out" | sed -n '/^point /,/^trial configs/p')
echo "$table"
[ "$(printf '%s\n' "$table" | grep -c ' 2/2 ')" = 4 ] || fail "expected 4 points with 2/2 finished"
ids=$(printf '%s\n' "$table" | sed -n 's|^p[0-9].* [0-9]*/[0-9]* *\([0-9,]*\) .*|\1|p' |
      tr ',' '\n' | sort -un | wc -l)
[ "$ids" = 8 ] || fail "expected 8 distinct runs, found $ids"
# Two at a time: trials 0 and 1 both start before either ends, each in its own CPU slot.
order=$(printf '%s\n' "$out" | grep -E '^trial [01] ' | head -3 | sed 's/^trial \([01]\) ([^)]*): \(pid\)\{0,1\}.*/\1\2/')
[ "$(printf '%s\n' "$order" | head -2 | tr '\n' ' ')" = "0pid 1pid " ] ||
  fail "trials 0 and 1 did not run at once: $(printf '%s\n' "$out" | grep -E '^trial [01] ' | head -3)"
cpus=$(printf '%s\n' "$out" | sed -n 's/^trial [01] ([^)]*): pid [0-9]*, CPUs \([0-9,-]*\),.*/\1/p' | sort -u | wc -l)
[ "$cpus" = 2 ] || fail "trials 0 and 1 did not get two CPU slots: $(printf '%s\n' "$out" | grep -E '^trial [01] ' | head -2)"
printf '%s\n' "$table" | grep -q '<- best' || fail "no best point marked"
[ "$(find "$work/sweeps/opt-lr" -name "trial-*.toml" | wc -l)" = 8 ] || fail "expected 8 trial configs"
tagged=$("$cli" --db "$work/runs.sqlite" export 1 --format json | grep -c '"sweep:opt-lr"')
[ "$tagged" -ge 1 ] || fail "run 1 does not carry the tag sweep:opt-lr"
[ "$("$cli" --db "$work/runs.sqlite" runs | grep -c 'opt-lr p')" = 8 ] || fail "expected 8 runs"
# The store records the sweep: its runs know it (runs --sweep), it is listed, its table reads back,
# and the same sweep name cannot be started twice.
[ "$("$cli" --db "$work/runs.sqlite" runs --sweep opt-lr | grep -c '\[sweep opt-lr p[0-3]\]')" = 8 ] ||
  fail "runs --sweep opt-lr does not list 8 runs of the sweep"
"$cli" --db "$work/runs.sqlite" sweeps | grep -Eq '^1 +opt-lr +finished .* 8 \(8, 0, 0\)' ||
  fail "sweeps does not list opt-lr finished with 8 trials: $("$cli" --db "$work/runs.sqlite" sweeps)"
shown=$("$cli" --db "$work/runs.sqlite" sweep --show opt-lr | sed -n '/^point /,/^trial configs/p')
[ "$shown" = "$table" ] || fail "sweep --show differs from the sweep's own table: $shown"
again=$("$cli" --db "$work/runs.sqlite" sweep "$src/tests/data/sweep_grid.toml" 2>&1) &&
  fail "starting sweep opt-lr a second time succeeded"
echo "$again" | grep -q "already has a sweep 'opt-lr' (id 1, finished): sweep --show opt-lr prints its table, or give this one another sweep.name" ||
  fail "a second, finished opt-lr is refused without naming sweep --show: $again"
# Eight at a time in exclusive slots, on a machine with fewer physical cores: the slots cannot be
# met, so the trials run unbound, and each start says why (it said "unbound" and nothing more).
cores=$(lscpu -p=core,socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)
if [ "$cores" -ge 1 ] && [ "$cores" -lt 8 ]; then
  sed 's/^name = "opt-lr"/name = "crowd"/' "$src/tests/data/sweep_grid.toml" > "$work/crowd.toml"
  out=$("$cli" --db "$work/runs.sqlite" sweep "$work/crowd.toml" --set run.steps=5 \
        --parallel 8 --binding exclusive 2>&1) || fail "the crowded sweep exited with $?: $out"
  warned=$(printf '%s\n' "$out" | grep -c "^  warning: \[binding\] there are only $cores physical cores.* runs unbound$")
  [ "$warned" = 8 ] || fail "expected each of 8 unbound trials to say why: $out"
fi
echo "PASS: sweep: 8 runs in 4 points, 2 at a time"
