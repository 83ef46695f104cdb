#!/usr/bin/env bash
# The whole test suite: set up, build with -Werror, run every test, then the
# sanitizer passes. Exits non-zero if anything fails.
#   scripts/test.sh            everything (what CI runs)
#   LOOM_TEST_QUICK=1 scripts/test.sh   the main build's tests only
#   (cd build && ctest -L long)          the full collective matrix, outside CI
# The main pass includes the network suite (label "net": ranks in network
# namespaces, as root; SKIPPED with the reason where namespaces cannot be made).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
loom_deps
scripts/format.sh --check
jobs=$(nproc)
# Compiles go through ccache when it is there (deps.sh installs it): paths are taken relative to
# the checkout, so a fresh clone at another path reuses what an earlier run compiled.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

build_and_test() { # dir, cmake args..., -- ctest args...
  local dir=$1
  shift
  local cargs=() targs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cargs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targs=("$@")
  echo "=== $dir: configure ${cargs[*]}"
  cmake -S . -B "$dir" -DLOOM_WERROR=ON "${launcher[@]}" "${cargs[@]}" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  grep -A8 "optional parts" "$dir.configure.log" || true
  # shellcheck disable=SC2086 # $targets is a list of words, or empty for all
  cmake --build "$dir" -j"$jobs" ${targets:+--target $targets}
  echo "=== $dir: test ${targs[*]}"
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j"$jobs" "${targs[@]}")
}

targets=""
build_and_test build -DCMAKE_BUILD_TYPE=RelWithDebInfo -- -LE "sanity|long|tsan"
if [ "${LOOM_TEST_QUICK:-0}" = 1 ]; then exit 0; fi
# Sanitizers over the unit tests and a covering part of the multi-rank tests. These trees build
# only what their labels run (perf tools and examples are built and run by the main pass).
targets="loom_unit_tests loom_mp_tests loom_mp_boot_tests loom_parallel_tests loom_nccl nccl_abi nccl_ranks loom_cuda_notice loom_cuda_kernels loom_cuda_exec nccl_device"
for f in boot_wire sock_wire unique_id settings files record; do targets+=" fuzz_${f}_replay"; done
build_and_test build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=address,undefined -- -L "unit|sanity"
build_and_test build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=thread -- -L "tsan|sanity"
echo "=== valgrind: the fast unit tests and thread-rank multi-rank tests"
vg=(valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite -q)
"${vg[@]}" ./build/tests/loom_unit_tests --gtest_brief=1 \
  --gtest_filter='Convert*:Formats/*:Dispatch*:Dtype*:Tune*:Boot*:Victims/*:Plan*:*Args*:CheckKinds*:Params*:Hang*'
"${vg[@]}" ./build/tests/loom_mp_tests --gtest_brief=1 \
  --gtest_filter='Ranks/CommInit.*/thread3:Ranks/P2PGroup.*/thread3:Ranks/Stream.*/thread3:Ranks/AllReduceMatrix.*/thread3_float32:AllReduce.PreMulSum*:Ranks/Handles.*/thread:HandlesInitAll.*'
"${vg[@]}" ./build/tests/cudastub/loom_cuda_notice ./build/tests/cudastub/stub/libcuda.so.1
"${vg[@]}" ./build/tests/cudastub/loom_cuda_kernels ./build/tests/cudastub/stub/libcuda.so.1
echo "all test passes done"
