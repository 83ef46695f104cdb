#!/usr/bin/env bash
# The project's C and C++ sources against .clang-format.
#   scripts/format.sh          reformats every tracked source file in place
#   scripts/format.sh --check  changes nothing; lists each file that is not formatted and
#                              exits 1 (run by scripts/test.sh before anything is built)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
command -v clang-format >/dev/null || { echo "format: clang-format is not installed (scripts/deps.sh installs it)" >&2; exit 1; }
# The tree is formatted with this major version; others lay some code out differently, so the
# check is only made with it (another version reformats, but does not judge, the tree).
FORMAT_MAJOR=14
have=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
# The tracked sources; in a tree that is not a git checkout (an unpacked archive), every source
# under the project's directories.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' '*.cuh')
else
  mapfile -t files < <(find src include compat tests perf tools examples -type f \( -name '*.c' -o \
    -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -not -path '*/results/*' | sort)
fi
if [ "$mode" = "--check" ]; then
  if [ "$have" != "$FORMAT_MAJOR" ]; then
    echo "format: SKIPPED: clang-format $have here; the tree is checked with clang-format $FORMAT_MAJOR (Debian 12's)"
    exit 0
  fi
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
