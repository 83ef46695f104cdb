#!/usr/bin/env bash
# The main job: set up, build, and run the all-reduce example over 4 local
# ranks on shared memory, printing its result and timing.
#   scripts/run.sh [count]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
loom_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
./build/loomrun -n 4 --prefix ./build/examples/allreduce "${1:-16777216}"
