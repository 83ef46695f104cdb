#!/usr/bin/env bash
# parallel_isolation: a file of src/parallel, compiled with that target's include path, can
# include the public header and cannot include an internal one.
#   isolation.sh CC "INCLUDE_DIRS" SRC_ROOT
set -uo pipefail
cc=$1 dirs=$2 root=$3
flags=()
for d in ${dirs//;/ }; do flags+=("-I$d"); done
case " ${flags[*]} " in *" -I$root/src "*) echo "FAIL: src/parallel's include path reaches $root/src"; exit 1 ;; esac
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
printf '#include "loom.h"\nint f(void) { return (int)loomSuccess; }\n' >"$tmp/ok.c"
"$cc" -fsyntax-only "${flags[@]}" "$tmp/ok.c" || { echo "FAIL: loom.h does not compile with src/parallel's include path"; exit 1; }
for h in core/comm.h collectives/coll.h transport/transport.h; do
  printf '#include "%s"\n' "$h" >"$tmp/bad.c"
  if (cd "$root/src/parallel" && "$cc" -fsyntax-only "${flags[@]}" "$tmp/bad.c") 2>/dev/null; then
    echo "FAIL: $h is reachable from src/parallel"; exit 1
  fi
done
echo "parallel_isolation: loom.h reachable; core/, collectives/, transport/ headers are not (include path: ${flags[*]})"
