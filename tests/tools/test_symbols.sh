#!/usr/bin/env bash
# What a Loom library exports: only its public API (STYLE.md: "Only loom* symbols
# leave the shared library"), all of it, and a static archive beside it.
#   usage: test_symbols.sh LIB_SO LIB_A HEADER
# HEADER is the library's public header (loom.h for libloom, loom_parallel.h for
# libloom_parallel); every function it
# declare with LOOM_API must be exported, and nothing else may be.
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 LIB_SO LIB_A HEADER" >&2
  exit 2
fi
SO=$1
AR=$2
INC=$3
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_symbols.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

# Names of the defined dynamic symbols of the shared library, one a line.
exported() {
  nm -D --defined-only "$SO" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u
}

# Functions the public headers declare with LOOM_API, one a line.
declared() {
  tr '\n' ' ' <"$INC" | grep -oE 'LOOM_API[^;{}()#]*\(' |
    sed -E 's/.*[^A-Za-z0-9_](loom[A-Za-z0-9_]*)[[:space:]]*\($/\1/' |
    grep -E '^loom[A-Za-z0-9_]*$' | sort -u
}

t_so_exists() {
  [ -f "$SO" ] || { why="$SO is missing"; return 1; }
  nm -D --defined-only "$SO" >"$TMP/nm" 2>"$TMP/nm.err" ||
    { why="nm -D failed: $(head -c 300 "$TMP/nm.err")"; return 1; }
  [ -s "$TMP/nm" ] || { why="nm -D lists no defined symbols"; return 1; }
}

t_only_loom() {
  exported >"$TMP/exp" || { why="nm -D failed"; return 1; }
  grep -v '^loom' "$TMP/exp" >"$TMP/bad"
  [ -s "$TMP/bad" ] || return 0
  why="$(wc -l <"$TMP/bad") symbols do not start with 'loom': $(head -n 10 "$TMP/bad" | tr '\n' ' ')"
  return 1
}

t_only_public() {
  exported >"$TMP/exp"
  declared >"$TMP/decl"
  [ -s "$TMP/decl" ] || { why="found no LOOM_API declarations in $INC"; return 1; }
  comm -23 "$TMP/exp" "$TMP/decl" >"$TMP/extra"
  [ -s "$TMP/extra" ] || return 0
  why="exported but declared in no public header: $(head -n 10 "$TMP/extra" | tr '\n' ' ')"
  return 1
}

t_all_public() {
  exported >"$TMP/exp"
  declared >"$TMP/decl"
  comm -13 "$TMP/exp" "$TMP/decl" >"$TMP/missing"
  [ -s "$TMP/missing" ] || return 0
  why="declared with LOOM_API but not exported: $(head -n 10 "$TMP/missing" | tr '\n' ' ')"
  return 1
}

t_static_archive() {
  [ -f "$AR" ] || { why="$AR is missing"; return 1; }
  ar t "$AR" >"$TMP/members" 2>&1 || { why="not an archive: $(head -c 300 "$TMP/members")"; return 1; }
  nm --defined-only "$AR" 2>/dev/null | awk '$2 == "T" { print $3 }' | sort -u >"$TMP/ar_syms"
  declared >"$TMP/decl"
  comm -13 "$TMP/ar_syms" "$TMP/decl" >"$TMP/missing"
  [ -s "$TMP/missing" ] || return 0
  why="the archive does not define: $(head -n 10 "$TMP/missing" | tr '\n' ' ')"
  return 1
}

# A library a program may load with dlopen (ctypes, a torch extension) must not
# need static TLS: glibc keeps only a few hundred bytes spare for those.
t_no_static_tls() {
  if readelf -d "$SO" | grep -q STATIC_TLS; then
    why="$(basename "$SO") has the STATIC_TLS flag (an initial-exec TLS access): dlopen fails with 'cannot allocate memory in static TLS block'"
    return 1
  fi
}

run_case "$(basename "$SO") exists and has a dynamic symbol table" t_so_exists
run_case "$(basename "$SO") can be loaded with dlopen (no static TLS)" t_no_static_tls
run_case "$(basename "$SO") exports only symbols starting with loom" t_only_loom
run_case "$(basename "$SO") exports only functions of the public headers" t_only_public
run_case "$(basename "$SO") exports every function of the public headers" t_all_public
run_case "$(basename "$AR") exists and defines the public functions" t_static_archive

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
