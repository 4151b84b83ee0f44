#!/usr/bin/env bash
# Packs the GPU check for a machine that has a GPU but not our Debian libraries: the test and
# benchmark binaries of a CUDA build plus the shared libraries they need (except the C library,
# the C++ runtime and CUDA's own, which that machine has), into an ignored folder .device/.
#   bench/gpu/pack.sh [BUILD_DIR]      (default build/ci)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/ci}
out=.device
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
for b in tests/tb_cuda_tests tests/tb_engine_tests app/cli/trainbench-cli bench/cuda_bench; do
  cp "$build/$b" "$out/bin/"
  strip "$out/bin/$(basename "$b")"
done
cp -r tests/data "$out/data"
# Shared libraries from Debian that the GPU machine's image lacks.
for b in "$out"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcublas[^/]*|libcudart[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
du -sh "$out"
