#!/usr/bin/env bash
# Packs the GPU check for a machine that has a GPU but not our Debian libraries: the test,
# benchmark and CLI binaries of a CUDA build, the shared libraries they need (except the C
# library, the C++ runtime and CUDA's own, which that machine has), the run configs, the
# PyTorch scripts and a small Fashion-MNIST (the 10k test images serve as both splits: timing
# only) — compressed into the ignored .device/pack.tar.xz (under the device tool's 64 MiB).
#   bench/gpu/pack.sh [BUILD_DIR]      (default build/ci)
# Then, on the GPU machine, from the repository root: bench/gpu/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/ci}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data/fashion-mnist"
for b in tests/tb_cuda_tests tests/tb_engine_tests app/cli/trainbench-cli bench/cuda_bench \
  bench/dist_allreduce; do
  cp "$build/$b" "$stage/bin/"
  strip "$stage/bin/$(basename "$b")"
done
cp -r tests/data "$stage/data/tests"
fm=/usr/share/datasets/fashion-mnist
for kind in images-idx3 labels-idx1; do
  cp "$fm/t10k-$kind-ubyte.gz" "$stage/data/fashion-mnist/"
  cp "$fm/t10k-$kind-ubyte.gz" "$stage/data/fashion-mnist/train-$kind-ubyte.gz"
done
# Shared libraries from Debian that the GPU machine's image lacks.
for b in "$stage"/bin/*; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcublas[^/]*|libcudart[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
rm -rf .device && mkdir -p .device
tar -C "$stage" -cJf .device/pack.tar.xz .
du -h .device/pack.tar.xz
