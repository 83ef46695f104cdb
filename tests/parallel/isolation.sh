#!/usr/bin/env bash
# parallel_isolation: a file of src/parallel, compiled with that target's include path, can
# include the public header, cannot find an internal one, and reaches none by a relative path.
#   isolation.sh CC "INCLUDE_DIRS" SRC_ROOT
set -uo pipefail
cc=$1 dirs=$2 root=$3
flags=()
for d in ${dirs//;/ }; do flags+=("-I$d"); done
case " ${flags[*]} " in *" -I$root/src "*) echo "FAIL: src/parallel's include path reaches $root/src"; exit 1 ;; esac
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
printf '#include "loom.h"\nint f(void) { return (int)loomSuccess; }\n' >"$tmp/ok.c"
"$cc" -fsyntax-only "${flags[@]}" "$tmp/ok.c" || { echo "FAIL: loom.h does not compile with src/parallel's include path"; exit 1; }
# Each internal header must be missing (not merely fail to compile) from a file of src/parallel.
for h in core/comm.h collectives/coll.h transport/transport.h; do
  printf '#include "%s"\n' "$h" >"$tmp/probe.c"
  err=$("$cc" -E "${flags[@]}" "$tmp/probe.c" 2>&1 >/dev/null)
  case $err in
    *"$h: No such file"*) ;;
    *) echo "FAIL: $h is reachable from src/parallel (or the probe failed otherwise: $err)"; exit 1 ;;
  esac
done
# Nor by a relative path out of the directory.
if grep -rnE '#include[[:space:]]*"\.\./' "$root/src/parallel" --include='*.c' --include='*.cc' --include='*.h'; then
  echo "FAIL: a file of src/parallel includes a header by a relative path out of it"; exit 1
fi
echo "parallel_isolation: loom.h reachable; core/, collectives/, transport/ headers are not (include path: ${flags[*]})"
