#!/usr/bin/env bash
# The main job: set up, build (Release), then all_reduce_perf over 4 local ranks on shared
# memory: the nccl-tests table (size, time, algorithm and bus bandwidth, #wrong) from 8 B to
# 128 MiB, every size checked.
#   scripts/run.sh [all_reduce_perf flags...]   e.g. scripts/run.sh -b 1K -e 1G -d bfloat16
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
loom_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ $# -eq 0 ]; then set -- -b 8 -e 128M -f 2; fi
exec ./build/loomrun -n 4 ./build/perf/all_reduce_perf "$@"
