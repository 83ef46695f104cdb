#!/usr/bin/env bash
# The project's C and C++ sources against .clang-format.
#   scripts/format.sh          reformats every tracked source file in place
#   scripts/format.sh --check  changes nothing; lists each file that is not formatted and
#                              exits 1 (run by scripts/test.sh before anything is built)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (scripts/deps.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh')
if [ "$mode" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version | sed 's/.*version //')):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "format: run scripts/format.sh to fix them" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files match .clang-format"
  exit 0
fi
[ -z "$mode" ] || { echo "format: unknown argument '$mode' (none, or --check)" >&2; exit 2; }
clang-format -i "${files[@]}"
