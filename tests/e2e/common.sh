# shellcheck shell=bash
# The shared start of the end-to-end scripts (sourced after `set -u`):
#
#   . "$(dirname "$0")/common.sh"
#   e2e_start NAME "ARGS" MIN MAX "$@"   # argument count checked (usage: SCRIPT ARGS, exit 2)
#   e2e_cli CLI REPO [CONFIG]            # $cli (checked executable), $repo, $config (an example
#                                        # of resources/configs, default fmnist-mlp-adamw.toml)
#   e2e_tmpdir                           # $tmp: a fresh directory, removed when the script exits
#   e2e_sweep_config SRC NAME "RUNGS"    # $tmp/es.toml: tests/data/sweep_grid.toml named NAME,
#                                        # successive halving at RUNGS ("5000, 10000")
#   sweep_table < OUTPUT                 # a sweep's table rows without their run ids
#   e2e_wait_for PID LOG REGEX           # until LOG has a line matching REGEX (at most 120 s, or
#                                        # until PID ends); status 0 when it has
#   e2e_wait_training DB N STEP PID LOG  # until N runs of DB are running at STEP or later ($cli's
#                                        # `runs`; fails when PID ends first, or after 30 s)
#
# fail MESSAGE prints "FAIL: NAME: MESSAGE" and exits 1; ctest's FAIL_REGULAR_EXPRESSION catches
# it, and each script ends with its own "PASS: NAME: ..." line.

e2e_start() {
  E2E_NAME=$1
  local args=$2 min=$3 max=$4
  shift 4
  if [ $# -lt "$min" ] || [ $# -gt "$max" ]; then
    echo "usage: $0 $args" >&2
    exit 2
  fi
}

fail() {
  echo "FAIL: $E2E_NAME: $*"
  exit 1
}

e2e_cli() {
  cli=$1
  repo=$2
  config=$repo/resources/configs/${3:-fmnist-mlp-adamw.toml}
  [ -x "$cli" ] || fail "CLI '$cli' is not an executable"
  [ -f "$config" ] || fail "config '$config' not found"
}

e2e_tmpdir() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-$E2E_NAME.XXXXXX") || fail "mktemp -d failed"
  trap 'rm -rf "$tmp"' EXIT
}

e2e_sweep_config() {
  local src=$1 name=$2 rungs=$3
  config=$tmp/es.toml
  sed "s/name = \"opt-lr\"/name = \"$name\"/" "$src/tests/data/sweep_grid.toml" > "$config" ||
    fail "cannot write $config"
  printf '\n[sweep.early_stopping]\nmethod = "successive_halving"\nsteps = [%s]\n' "$rungs" \
    >> "$config"
}

# The run ids differ between a sweep and its resumed twin; everything else must not.
sweep_table() {
  sed -n '/^point /,/^trial configs/p' | grep '^p[0-9]' | sed 's#\([0-9]/[0-9]\) *[0-9,]* *#\1 #'
}

# A run's first logged step (its data loaded, its kernels running) and the like.
e2e_wait_for() {
  local pid=$1 log=$2 pattern=$3
  for _ in $(seq 1200); do
    grep -q "$pattern" "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "$pattern" "$log" 2>/dev/null
}

e2e_wait_training() {
  local db=$1 count=$2 step=$3 pid=$4 log=$5
  for _ in $(seq 1 1500); do
    "$cli" --db "$db" runs 2>/dev/null |
      awk -v n="$count" -v s="$step" '$5 == "running" && $8 >= s {k++} END {exit k < n}' &&
      return 0
    kill -0 "$pid" 2>/dev/null || fail "it ended early: $(tail -3 "$log")"
    sleep 0.02
  done
  fail "fewer than $count runs got to step $step within 30 s"
}
