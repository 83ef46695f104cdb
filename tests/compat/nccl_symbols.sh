#!/usr/bin/env bash
# nccl_symbols: what Loom's libnccl.so.2 exports against what nccl.h declares.
#   nccl_symbols.sh LIBNCCL OUR_HEADER [OFFICIAL_HEADER]
# Every function the official header declares (Loom's own text of it where no official one
# is installed) is exported; Loom's header declares exactly the official set; nothing
# outside nccl*/pnccl* leaves the library; every nccl* has its pnccl* alias; and the library
# needs no CUDA library to load.
set -uo pipefail
lib=$1 ours=$2 official=${3:-}
fail=0
bad() { echo "FAIL: $*"; fail=1; }

exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TWi]$/ {print $3}' | sort -u)
# Loom's header declares each pair through NCCL_DROPIN_DECL(ret, Name, ...), and
# ncclResetDebugInit on its own.
declared_ours=$( { grep -v '#define' "$ours" | grep -oE 'NCCL_DROPIN_DECL\([^,]+, *[A-Za-z0-9]+' |
  sed -E 's/.*, *//' | while read -r f; do echo "nccl$f"; echo "pnccl$f"; done
  grep -oE '\bp?ncclResetDebugInit\(' "$ours" | tr -d '('; } | sort -u)
if [ -n "$official" ] && [ -f "$official" ]; then
  # Declarations only: a name followed by "(" outside comment lines.
  declared=$(grep -vE '^ *(\*|/\*)' "$official" | grep -oE '\bp?nccl[A-Za-z0-9]+ *\(' |
    tr -d '( ' | sort -u)
  extra=$(comm -13 <(echo "$declared") <(echo "$declared_ours"))
  [ -z "$extra" ] || bad "Loom's nccl.h declares what NCCL's does not: $extra"
  missing=$(comm -23 <(echo "$declared") <(echo "$declared_ours"))
  [ -z "$missing" ] || bad "Loom's nccl.h lacks: $missing"
  against="the official $official"
else
  declared=$declared_ours
  against="Loom's header (no official nccl.h here)"
fi
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$missing" ] || bad "declared but not exported: $missing"
stray=$(echo "$exported" | grep -vE '^p?nccl' || true)
[ -z "$stray" ] || bad "exported outside nccl*/pnccl*: $stray"
# Under pipefail "echo ... | grep -q" fails at random: grep may leave before echo's last
# write, which then dies of SIGPIPE. Lists are compared whole.
unaliased=$(comm -23 <(grep -E '^nccl' <<<"$exported") <(sed -n 's/^p//p' <<<"$exported" | sort -u))
for f in $unaliased; do bad "$f has no p$f alias"; done
needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $NF}' | tr -d '[]')
echo "$needed" | grep -iE 'cuda|nccl' >/dev/null && bad "libnccl.so.2 needs a CUDA or NCCL library: $needed"
readelf -d "$lib" | grep STATIC_TLS >/dev/null &&
  bad "libnccl.so.2 needs static TLS (an initial-exec access): a program's dlopen of it fails"
soname=$(readelf -d "$lib" | awk '/SONAME/ {print $NF}' | tr -d '[]')
[ "$soname" = libnccl.so.2 ] || bad "soname is '$soname', not libnccl.so.2"
n=$(echo "$declared" | wc -l)
[ "$n" -ge 80 ] || bad "only $n functions declared: the header was not parsed"
[ $fail = 0 ] && echo "ok: $n functions of $against exported, nothing else; needs: $(echo $needed)"
exit $fail
