#!/usr/bin/env bash
# TrainBench quick start for a fresh Debian 12 machine.
#   ./quickstart.sh run    install what is missing, build, start TrainBench
#                          (the GUI once it exists; without a display: the headless demo)
#   ./quickstart.sh test   install what is missing, build with warnings as errors, check
#                          formatting, build the API docs, run every test (ctest)
#   ./quickstart.sh sanitize [asan|tsan]   the engine, store and CLI suites under AddressSanitizer
#                          + UBSan or ThreadSanitizer (both when no argument; ~20 min each to
#                          build on 2 cores; docs/reliability.md)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

log() { printf '\n==> %s\n' "$*"; }

install_missing() {
  local wanted missing=()
  mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' packaging/debian-build-deps.txt)
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "All build dependencies are installed"
    return
  fi
  log "Installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

jobs() { nproc 2>/dev/null || echo 2; }

check_format() {
  log "Checking formatting (clang-format --dry-run -Werror)"
  local files
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.h' '*.hpp' '*.cpp' '*.cu' '*.cuh')
  else
    files=$(find engine app ui tests bench -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh')
  fi
  # shellcheck disable=SC2086
  clang-format --dry-run -Werror $files
}

cmd_run() {
  install_missing
  log "Building (release preset)"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(jobs)"
  local cli=build/release/app/cli/trainbench-cli
  if [ -x build/release/app/gui/trainbench ] && { [ -n "${DISPLAY:-}" ] || [ -n "${WAYLAND_DISPLAY:-}" ]; }; then
    exec build/release/app/gui/trainbench
  fi
  # Headless: a real training run (Fashion-MNIST MLP with AdamW, one epoch, a few seconds) into
  # the default run store, then the runs list.
  log "Headless demo: $cli run resources/configs/fmnist-mlp-adamw.toml --set run.epochs=1"
  "$cli" run resources/configs/fmnist-mlp-adamw.toml --set run.epochs=1 --set run.name=quickstart-demo
  exec "$cli" runs
}

cmd_test() {
  install_missing
  log "Building with warnings as errors (ci preset)"
  cmake --preset ci
  cmake --build --preset ci -j "$(jobs)"
  check_format
  log "Building the API reference (doxygen, warnings as errors)"
  cmake --build --preset ci --target docs
  log "Running the tests"
  ctest --preset ci -j "$(jobs)"
  test_cuda_emulation
}

# The CUDA backend's kernels, launch geometry and cuBLAS calls on the CPU emulation
# (tests/cuda_emu): the CUDA tests and the parity test run for real on machines without a GPU.
# Needs only the CUDA headers.
test_cuda_emulation() {
  if [ -x build/ci/tests/tb_cuda_emu_tests ]; then
    log "The CUDA tests ran on the emulated device with the ci build (ctest label cuda-emu)"
    return 0
  fi
  if [ ! -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime.h" ] && ! command -v nvcc >/dev/null; then
    log "No CUDA headers: skipping the CUDA emulation tests"
    return 0
  fi
  log "Building the CUDA backend for the CPU emulation (cuda-emu preset)"
  cmake --preset cuda-emu >/dev/null
  cmake --build build/cuda-emu --target tb_cuda_tests -j "$(jobs)"
  log "Running the CUDA tests on the emulated device"
  ctest --test-dir build/cuda-emu -L cuda -j "$(jobs)" --output-on-failure
}

# One sanitizer preset: build without the GUI, run every test but the CUDA and slow ones, and
# fail on any sanitizer report (also in tests judged by their output rather than exit code).
# die_after_fork=0: a few tests fork a short-lived child that starts a thread (a store writer
# that dies unclosed); the cpu_level runs run the whole test binary in one threaded process,
# where ThreadSanitizer would otherwise end such a child.
run_sanitizer() {
  local preset=$1
  log "Building the $preset preset (no GUI)"
  cmake --preset "$preset" -DTB_GUI=OFF
  cmake --build "build/$preset" -j "$(jobs)"
  log "Running the tests under $preset"
  local supp
  supp="$(pwd)/tests/tsan.supp"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:exitcode=66:die_after_fork=0:suppressions=$supp" \
    ctest --test-dir "build/$preset" -j "$(jobs)" -LE "slow|cuda" --output-on-failure
  if grep -Eq "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|WARNING: ThreadSanitizer" \
    "build/$preset/Testing/Temporary/LastTest.log"; then
    echo "sanitizer reports in build/$preset/Testing/Temporary/LastTest.log" >&2
    return 1
  fi
}

cmd_sanitize() {
  install_missing
  case "${1:-all}" in
    asan | tsan) run_sanitizer "$1" ;;
    all)
      run_sanitizer asan
      run_sanitizer tsan
      ;;
    *)
      echo "usage: $0 sanitize [asan|tsan]" >&2
      exit 2
      ;;
  esac
}

case "${1:-}" in
  run) cmd_run ;;
  test) cmd_test ;;
  sanitize) cmd_sanitize "${2:-all}" ;;
  *)
    echo "usage: $0 run|test|sanitize [asan|tsan]" >&2
    exit 2
    ;;
esac
