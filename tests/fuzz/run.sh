#!/usr/bin/env bash
# Runs the libFuzzer harnesses of tests/fuzz (docs/TESTING.md, "Fuzzing"), each for SECONDS,
# one after the other, in a clang build with AddressSanitizer and UndefinedBehaviorSanitizer
# (build-fuzz/), starting from the committed corpus and merging what it finds back into it.
# Prints, per harness, the executions, the time and the corpus size; stops at the first crash,
# leak, timeout or sanitizer report (libFuzzer leaves the input in build-fuzz/artifacts).
#   tests/fuzz/run.sh [SECONDS (3600)] [NAME...]   (names: boot_wire sock_wire unique_id
#                                                   settings files record; default all)
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-3600}
shift || true
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(boot_wire sock_wire unique_id settings files record)
command -v clang >/dev/null || { echo "run.sh: needs clang (apt-get install clang)" >&2; exit 2; }
export CC=clang CXX=clang++
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_FUZZ=ON \
  -DLOOM_SANITIZE=address,undefined >build-fuzz.configure.log 2>&1 ||
  { cat build-fuzz.configure.log; exit 1; }
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
mkdir -p build-fuzz/artifacts
for n in "${names[@]}"; do
  corpus=tests/fuzz/corpus/$n
  work=build-fuzz/corpus-$n
  rm -rf "$work"
  mkdir -p "$work"
  start=$(date +%s)
  LOOM_DEBUG=NONE ./build-fuzz/tests/fuzz/fuzz_"$n" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/"$n"- \
    "$work" "$corpus" >build-fuzz/"$n".log 2>&1 ||
    { echo "$n: FAILED after $(($(date +%s) - start)) s:"; tail -40 build-fuzz/"$n".log; exit 1; }
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' build-fuzz/"$n".log)
  # The new inputs that add coverage go into the committed corpus.
  LOOM_DEBUG=NONE ./build-fuzz/tests/fuzz/fuzz_"$n" -merge=1 "$corpus" "$work" \
    >build-fuzz/"$n".merge.log 2>&1
  echo "$n: ${execs:-?} executions in $(($(date +%s) - start)) s, no crash, hang or report;" \
    "corpus now $(ls "$corpus" | wc -l) inputs"
done
