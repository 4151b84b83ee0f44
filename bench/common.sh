# shellcheck shell=bash
# The options and the step_bench lookup that bench/vs_torch.sh and bench/variants.sh share
# (sourced; `here` is the repository root):
#
#   bench_option SCRIPT "$@"   # --rounds/--steps/--warmup/--threads/--build VALUE: sets the
#                              # variable of that name, bench_shift=2; anything else: bench_shift=0
#   bench_step_bench SCRIPT    # sets tb to BUILD/bench/step_bench (build defaults to build/release,
#                              # else build/ci), or says how to build one and exits 2
#   bench_openblas_coretype    # when OpenBLAS does not recognise this CPU (trainbench-cli devices
#                              # says so) and OPENBLAS_CORETYPE is unset, exports the core it names,
#                              # so both sides of a comparison get OpenBLAS's real kernels

# shellcheck disable=SC2034  # the variables belong to the sourcing script
bench_option() {
  local script=$1
  shift
  bench_shift=0
  case "$1" in
    --rounds | --steps | --warmup | --threads | --build) ;;
    *) return 0 ;;
  esac
  if [ $# -lt 2 ]; then
    echo "$script: $1 needs a value" >&2
    exit 2
  fi
  case "$1" in
    --rounds) rounds=$2 ;;
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --threads) threads=$2 ;;
    --build) build=$2 ;;
  esac
  bench_shift=2
}

# shellcheck disable=SC2154  # here: the repository root, set by the sourcing script
bench_step_bench() {
  local script=$1 d
  if [ -z "$build" ]; then
    for d in build/release build/ci; do
      if [ -x "$here/$d/bench/step_bench" ]; then build=$here/$d; break; fi
    done
  fi
  tb="$build/bench/step_bench"
  if [ ! -x "$tb" ]; then
    echo "$script: no step_bench under build/release or build/ci; build one first" \
         "(cmake --preset release && cmake --build --preset release --target step_bench)" >&2
    exit 2
  fi
}

bench_openblas_coretype() {
  local cli="$build/app/cli/trainbench-cli" core
  [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x "$cli" ] || return 0
  core=$("$cli" devices 2>/dev/null | sed -n 's/^note: OpenBLAS did not recognise.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\).*/\1/p')
  if [ -n "$core" ]; then
    export OPENBLAS_CORETYPE=$core
    echo "# OpenBLAS does not recognise this CPU: OPENBLAS_CORETYPE=$core for both sides"
  fi
}
