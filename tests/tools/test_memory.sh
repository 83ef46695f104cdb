#!/usr/bin/env bash
# loom_info --memory (docs/DESIGN.md, "Memory"): one communicator's counts after
# one call of each collective, for thread ranks (-n) and for process ranks under
# loomrun: a row per rank, FIFOs only where processes share memory, and nothing
# held after destroy; bad options are refused.
#   usage: test_memory.sh LOOM_INFO LOOMRUN
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 LOOM_INFO LOOMRUN" >&2
  exit 2
fi
INFO=$1
RUN=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_memory.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

# rows N: the table has ranks 0..N-1, one row each; prints the fifo column of each.
rows() {
  local n=$1 r
  for ((r = 0; r < n; r++)); do
    grep -c "^$r " "$TMP/out" | grep -qx 1 || { why="no one row for rank $r: $(cat "$TMP/out")"; return 1; }
  done
  grep -q "^after destroy: nothing held" "$TMP/out" || { why="not released: $(cat "$TMP/out" "$TMP/err")"; return 1; }
}

t_threads() {
  timeout 60 "$INFO" --memory -n 3 --bytes 65536 >"$TMP/out" 2>"$TMP/err" ||
    { why="exit $?: $(cat "$TMP/err")"; return 1; }
  rows 3 || return 1
  grep -q "3 ranks (threads of one process)" "$TMP/out" || { why="header: $(head -1 "$TMP/out")"; return 1; }
}

t_processes() {
  LOOM_BUFFSIZE=262144 LOOM_NSLOTS=4 timeout 60 "$RUN" -n 4 "$INFO" --memory --bytes 65536 \
    >"$TMP/out" 2>"$TMP/err" || { why="exit $?: $(cat "$TMP/err")"; return 1; }
  rows 4 || return 1
  # Columns: rank, init (2 words), rankseg (4), fifo (4): the fifo now is words 8-9.
  local r fifo
  for ((r = 0; r < 4; r++)); do
    fifo=$(awk -v r="$r" '$1 == r {print $8, $9}' "$TMP/out")
    case "$fifo" in
      "0 B" | "") why="rank $r has no FIFO after the calls: '$fifo'"; return 1 ;;
    esac
    # Its line per peer: nothing for itself, something for its ring neighbours.
    grep -q "^  rank $r: .*$r: 0 B" "$TMP/out" || { why="no line per peer for rank $r"; return 1; }
    grep "^  rank $r:" "$TMP/out" | grep -q " $(((r + 1) % 4)): [1-9]" ||
      { why="rank $r holds nothing for rank $(((r + 1) % 4))"; return 1; }
  done
}

t_socket_has_no_fifo() {
  LOOM_TRANSPORTS=socket timeout 60 "$RUN" -n 2 "$INFO" --memory --bytes 4096 \
    >"$TMP/out" 2>"$TMP/err" || { why="exit $?: $(cat "$TMP/err")"; return 1; }
  rows 2 || return 1
  [ "$(awk '$1 == 0 {print $8, $9}' "$TMP/out")" = "0 B" ] || { why="a FIFO over sockets: $(cat "$TMP/out")"; return 1; }
}

t_bad_options() {
  local args
  for args in "-n 0" "-n" "--bytes x" "--ranks 3"; do
    # shellcheck disable=SC2086 # the words of one case
    timeout 30 "$INFO" --memory $args >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    [ $rc = 2 ] || { why="'--memory $args': exit $rc, not 2"; return 1; }
    grep -q "takes -n RANKS and --bytes BYTES" "$TMP/err" || { why="'--memory $args': $(cat "$TMP/err")"; return 1; }
  done
}

run_case "thread ranks: a row each, nothing held after destroy" t_threads
run_case "process ranks: FIFOs after the calls, nothing held after destroy" t_processes
run_case "over sockets: no FIFO" t_socket_has_no_fifo
run_case "bad options are refused" t_bad_options
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
