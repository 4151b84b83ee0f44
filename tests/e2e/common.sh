# shellcheck shell=bash
# The shared start of the end-to-end scripts (sourced after `set -u`):
#
#   . "$(dirname "$0")/common.sh"
#   e2e_start NAME "ARGS" MIN MAX "$@"   # argument count checked (usage: SCRIPT ARGS, exit 2)
#   e2e_tmpdir                           # $tmp: a fresh directory, removed when the script exits
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

e2e_tmpdir() {
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/tb-$E2E_NAME.XXXXXX") || fail "mktemp -d failed"
  trap 'rm -rf "$tmp"' EXIT
}
