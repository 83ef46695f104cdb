#!/usr/bin/env bash
# tests/gpu/run.sh - everything of Loom that needs a GPU, in one command for a machine that has
# one (a lent H100 or H200; the kernel steps take a minute or two there; the executor steps have
# not run on a GPU yet: a stuck wait ends at LOOM_TIMEOUT_MS, 60 s, so one step cannot hang):
#   1. build Loom with its device kernels (nvcc; no GoogleTest needed),
#   2. gpu_kernels: every datatype and op of the device kernels against the host kernels, bit
#      for bit (counts 0 to 2^20 + 3, aligned and misaligned, in place and out of place),
#   3. the same under compute-sanitizer memcheck and racecheck (counts up to 1000),
#   4. the reduction's bandwidth against the device-to-device copy's, in the same run,
#   5. gpu_exec: the CUDA executor's checks (the ones CI runs against a stand-in driver) on the
#      device: every collective, sends and receives at 1 to 8 thread ranks on the GPU, with the
#      tuner and with ring forced; 2 and 4 process ranks (CUDA IPC); a rank killed inside an
#      all-reduce; process ranks under compute-sanitizer memcheck,
#   6. gpu_nccl_device: an NCCL program on device buffers through the drop-in, 4 ranks of one
#      process and 2 processes,
# then a summary, one line a step. Logs go to $OUT (the device tool's folder) or /tmp/loom-gpu.
# Exits non-zero when a step failed. On a machine with no GPU every step says SKIPPED.
#   tests/gpu/run.sh [--bench-mib N]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/loom-gpu}
mkdir -p "$out"
bench_mib=1024
[ "${1:-}" = "--bench-mib" ] && bench_mib=${2:-1024}
summary=()
failed=0

step() { # name, command...: runs it, logs to $out/<name>.log, records PASS, SKIPPED or FAIL
  local name=$1 rc
  shift
  echo "=== $name: $*"
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  tail -n 25 "$out/$name.log"
  if [ $rc = 0 ]; then
    summary+=("PASS     $name")
  elif [ $rc = 77 ]; then
    summary+=("SKIPPED  $name: $(grep -m1 SKIPPED "$out/$name.log")")
  else
    summary+=("FAIL     $name (exit $rc, $out/$name.log)")
    failed=1
  fi
  return $rc
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 ||
    echo "no nvidia-smi"
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
} | tee "$out/machine.txt"

nvcc_dir=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if ! step build bash -c "cmake -S . -B build-gpu ${gen[*]} -DCMAKE_BUILD_TYPE=Release \
    -DLOOM_BUILD_TESTS=OFF -DLOOM_CUDA=ON -DCMAKE_CUDA_COMPILER=$nvcc_dir/nvcc &&
    time cmake --build build-gpu -j$(nproc) --target gpu_kernels gpu_exec gpu_nccl_device"; then
  printf '%s\n' "${summary[@]}"
  exit 1
fi
bin=build-gpu/tests/gpu/gpu_kernels

step kernels "$bin" --no-bench
if command -v compute-sanitizer >/dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 3 "$bin" --no-bench --quick
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 3 "$bin" --no-bench --quick
else
  summary+=("SKIPPED  memcheck, racecheck: no compute-sanitizer on PATH")
fi
step bandwidth "$bin" --bench-only --bench-mib "$bench_mib"

ex=build-gpu/tests/gpu/gpu_exec
export LOOM_TIMEOUT_MS=60000
step exec_threads "$ex" libcuda.so.1
step exec_threads_ring env LOOM_ALGO=ring "$ex" libcuda.so.1
step exec_procs2 "$ex" libcuda.so.1 procs 2
step exec_procs4 "$ex" libcuda.so.1 procs 4
step exec_killed "$ex" libcuda.so.1 killed 2
step nccl_device_all4 build-gpu/tests/gpu/gpu_nccl_device libcuda.so.1 all 4
step nccl_device_procs2 build-gpu/tests/gpu/gpu_nccl_device libcuda.so.1 procs 2
if command -v compute-sanitizer >/dev/null; then
  step exec_memcheck compute-sanitizer --tool memcheck --target-processes all --error-exitcode 3 \
    "$ex" libcuda.so.1 procs 2
fi

echo "=== summary ($out)"
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
exit $failed
