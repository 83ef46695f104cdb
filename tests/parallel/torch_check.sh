#!/usr/bin/env bash
# torch_check: libloom_parallel's math against PyTorch on CPU. The TorchDump tests of
# loom_parallel_tests write multi-rank runs' inputs and results to a directory; each
# torch_*.py beside this script recomputes them with PyTorch (Debian's python3-torch, which
# /usr/bin/python3 sees) and compares. Exit 77 (SKIPPED) where torch cannot be imported.
#   torch_check.sh LOOM_PARALLEL_TESTS
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! err=$("$py" -c "import torch, numpy" 2>&1); then
  echo "SKIPPED: $py cannot import torch and numpy (scripts/deps.sh installs python3-torch): ${err##*$'\n'}"
  exit 77
fi
dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
if ! LOOM_TORCH_DIR=$dir LOOM_TORCH_XENT_DIR=$dir "$1" --gtest_filter='TorchDump*:XentTorch*' \
  --gtest_brief=1 >"$dir/dump.log" 2>&1; then
  echo "FAIL: the TorchDump tests failed"; grep -v " LOOM " "$dir/dump.log" | tail -30; exit 1
fi
bad=0 ran=0
for s in "$here"/torch_*.py; do
  ran=$((ran + 1))
  "$py" "$s" --dir "$dir" || bad=1
done
[ $ran -gt 0 ] || { echo "FAIL: no torch_*.py beside $0"; exit 1; }
exit $bad
