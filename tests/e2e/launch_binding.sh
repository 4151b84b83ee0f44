#!/usr/bin/env bash
# `trainbench-cli launch` (issue 7): two runs in parallel, one process per CPU slot, into one
# fresh store. Checks that
#   - each child's Cpus_allowed_list (read from /proc/<pid>/status right after the spawn) equals
#     its slot's CPU set (mode node: every slot gets its node's CPUs; mode exclusive when the
#     machine has 2+ physical cores: disjoint sets),
#   - both processes exit 0 and both runs are finished in the store (two processes creating the
#     same store at once must not collide),
#   - each run recorded its binding ("bound to CPUs <set>") in its events.
# Usage: launch_binding.sh CLI REPO_ROOT        (ctest: e2e.launch_binding)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start launch_binding "CLI REPO_ROOT" 2 2 "$@"
cli=$1
repo=$2
config=$repo/tests/ui/data/blobs.toml
e2e_tmpdir

for mode in node exclusive; do
  db=$tmp/$mode.sqlite
  out=$("$cli" --db "$db" launch --nproc 2 --binding "$mode" --fallback "$config" \
        --set run.steps=400 2>&1) || fail "launch --binding $mode failed: $out"
  started=$(printf '%s\n' "$out" | grep -c '^slot [01]: pid [0-9]* CPUs ')
  unbound=$(printf '%s\n' "$out" | grep -c '^slot [01]: pid [0-9]* unbound')
  if [ "$mode" = exclusive ] && [ "$unbound" -gt 0 ]; then
    echo "note: exclusive needs 2 physical cores; this machine ran the slots unbound"
    continue
  fi
  [ "$started" -eq 2 ] || fail "$mode: expected 2 bound slots, got: $out"
  while read -r _ slot _ pid _ cpus _ _ mask _; do
    cpus=${cpus%,}
    mask=${mask%,}
    [ "$cpus" = "$mask" ] || fail "$mode: slot $slot (pid $pid) has mask $mask, its slot is $cpus"
  done < <(printf '%s\n' "$out" | grep '^slot [01]: pid [0-9]* CPUs ')
  [ "$(printf '%s\n' "$out" | grep -c -E 'exited with 0 [(]run [0-9]+ finished[)]$')" -eq 2 ] || fail "$mode: a child failed: $out"
  runs=$("$cli" --db "$db" runs) || fail "runs failed"
  [ "$(printf '%s\n' "$runs" | grep -c ' finished ')" -eq 2 ] || fail "$mode: runs: $runs"
  for id in 1 2; do
    "$cli" --db "$db" show "$id" | grep -q 'info: bound to CPUs ' ||
      fail "$mode: run $id did not record its binding"
  done
  echo "$mode: $(printf '%s\n' "$out" | grep '^slot [01]: pid [0-9]* CPUs ' | sed 's/, [^,]*$//' | tr '\n' ';')"
done
echo "PASS: launch_binding"
