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
