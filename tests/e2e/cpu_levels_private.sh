#!/usr/bin/env bash
# The CPU kernels' avx2/avx512 builds keep their instructions to themselves (issue 19): no global
# function of the program contains a ymm or zmm register. A global function is one the linker
# could hand to any caller; the per-level copies of inline code are local (engine/CMakeLists.txt,
# cmake/LocalizeCpuLevel.cmake), so baseline code never calls into AVX code on a CPU without it.
# Prints one PASS line (exit 0) or a FAIL line naming the functions (exit 1).
# Usage: cpu_levels_private.sh BINARY        (ctest: build.cpu_levels_private)
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/common.sh"
e2e_start cpu_levels_private "BINARY" 1 1 "$@"
bin=$1
if ! command -v objdump >/dev/null || ! command -v nm >/dev/null; then
  fail "objdump and nm (binutils) are needed"
fi
e2e_tmpdir
# Start addresses of functions using a ymm/zmm register.
objdump -d --no-show-raw-insn "$bin" |
  awk '/^[0-9a-f]+ <.*>:$/ {addr=$1; next} /%[yz]mm/ {if (!(addr in seen)) {seen[addr]=1; print addr}}' |
  sed 's/^0*//' | sort >"$tmp/vector" || fail "objdump failed"
[ -s "$tmp/vector" ] || fail "no function uses ymm/zmm: the avx2/avx512 kernels are missing"
nm --defined-only "$bin" | awk '$2 ~ /^[TWi]$/ {a=$1; sub(/^0*/, "", a); print a, $3}' | sort >"$tmp/global"
join "$tmp/vector" "$tmp/global" | awk '{print $2}' | c++filt >"$tmp/bad"
if [ -s "$tmp/bad" ]; then
  fail "$(wc -l <"$tmp/bad") global functions use AVX registers: $(head -3 "$tmp/bad" | tr '\n' ' ')"
fi
echo "PASS: cpu_levels_private: $(wc -l <"$tmp/vector") functions use ymm/zmm, none of them global"
