#!/usr/bin/env bash
# loom_info --hang (docs/DESIGN.md, "Flight recorder"): four hang_rank processes hang on
# purpose in each way below; every rank that can writes its flight record to LOOM_DUMP_DIR (on
# the timeout, the peer's failure or loomCommAbort), and the diagnosis must name rank 2 and the
# collective where it went wrong. Also: a run with no fault names no one, a damaged record is
# reported by name and the others still diagnosed, an empty directory is an error.
#   usage: test_hang.sh LOOM_INFO HANG_RANK
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 LOOM_INFO HANG_RANK" >&2
  exit 2
fi
INFO=$1
RANK=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_hang.XXXXXX")
PIDS=()
trap 'kill -KILL "${PIDS[@]}" 2>/dev/null; rm -rf "$TMP"' EXIT

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

# hang CASE: runs the four ranks of CASE with their records in $TMP/CASE; the diagnosis in
# $TMP/CASE.out. The tuner's choice stands: collectives #2 and #3 go by lines, where every rank
# waits on every other, so a rank dead before #3 can leave one survivor stopped in #2 by the
# failure while the others wait on it in #3 (DESIGN.md, "Flight recorder").
hang() {
  local c=$1 r dir="$TMP/$1"
  mkdir -p "$dir"
  PIDS=()
  for r in 0 1 2 3; do
    LOOM_DUMP_DIR="$dir" LOOM_TIMEOUT_MS=2000 timeout -k 2 30 "$RANK" "$r" 4 "$dir/id" "$c" \
      >"$dir/r$r.out" 2>&1 &
    PIDS[r]=$!
  done
  if [ "$c" = stop ]; then
    # The stopped rank writes nothing: once the three others have, it goes.
    local end=$((SECONDS + 25))
    while [ "$(ls "$dir"/loom-rec-*.json 2>/dev/null | wc -l)" -lt 3 ] && [ $SECONDS -lt $end ]; do
      sleep 0.1
    done
    kill -KILL "${PIDS[2]}" 2>/dev/null
  fi
  for r in 0 1 2 3; do wait "${PIDS[r]}" 2>/dev/null; done
  timeout 30 "$INFO" --hang "$dir" >"$TMP/$c.out" 2>&1
}

# expect CASE PATTERN...: the diagnosis line matches every pattern.
expect() {
  local c=$1 p line
  shift
  hang "$c" || { why="loom_info --hang exit $?: $(cat "$TMP/$c.out")"; return 1; }
  line=$(grep "^diagnosis:" "$TMP/$c.out")
  for p in "$@"; do
    echo "$line" | grep -q -- "$p" || { why="no '$p' in: $(cat "$TMP/$c.out")"; return 1; }
  done
}

t_skip() { expect skip "rank(s) 2 diverge at collective #3" "another collective" "skipped"; }
t_order() { expect order "rank(s) 2 diverge at collective #3" "another collective"; }
t_count() { expect count "rank(s) 2 diverge at collective #2" "another count"; }
t_dtype() { expect dtype "rank(s) 2 diverge at collective #2" "another datatype"; }
t_root() { expect root "rank(s) 2 diverge at collective #1" "another root"; }
t_dead() {
  # The others may still be finishing the collective before (the dead rank's part of it
  # delivered, or not yet): collective #3, or #2 to #3.
  expect dead "rank(s) 2 hold the others back in collective" "#3" "no record from them" \
    "error names them"
}
t_stop() { expect stop "rank(s) 2 hold the others back in collective" "#3" "no record from them"; }
# LOOM_DUMP_SIGNAL: rank 2 stops itself; long before any timeout the others get SIGUSR1 and
# write their records at once, still waiting.
t_signal() {
  local dir="$TMP/signal" r end
  mkdir -p "$dir"
  PIDS=()
  for r in 0 1 2 3; do
    LOOM_DUMP_DIR="$dir" LOOM_DUMP_SIGNAL=USR1 LOOM_TIMEOUT_MS=60000 timeout -k 2 60 \
      "$RANK" "$r" 4 "$dir/id" stop >"$dir/r$r.out" 2>&1 &
    PIDS[r]=$!
  done
  end=$((SECONDS + 20))
  until [ "$(ps -o stat= -p "$(pgrep -P "${PIDS[2]}" | head -1)" 2>/dev/null | cut -c1)" = T ]; do
    [ $SECONDS -ge $end ] && { why="rank 2 never stopped"; return 1; }
    sleep 0.1
  done
  sleep 1 # the others reach their wait in collective #3
  for r in 0 1 3; do pkill -USR1 -P "${PIDS[r]}"; done
  while [ "$(ls "$dir"/loom-rec-*.json 2>/dev/null | wc -l)" -lt 3 ] && [ $SECONDS -lt $end ]; do
    sleep 0.1
  done
  # Copied before the ranks go: their failure then writes the records again.
  mkdir -p "$TMP/signal.rec"
  cp "$dir"/loom-rec-*.json "$TMP/signal.rec/"
  for r in 0 1 2 3; do pkill -KILL -P "${PIDS[r]}"; done
  for r in 0 1 2 3; do wait "${PIDS[r]}" 2>/dev/null; done
  timeout 30 "$INFO" --hang "$TMP/signal.rec" >"$TMP/signal.out" 2>&1 ||
    { why="exit $?: $(cat "$TMP/signal.out")"; return 1; }
  grep -q "^diagnosis: rank(s) 2 hold the others back in collective" "$TMP/signal.out" ||
    { why="$(cat "$TMP/signal.out")"; return 1; }
  [ "$(grep -c "): signal USR1$" "$TMP/signal.out")" = 3 ] || { why="not 3 records by the signal: $(cat "$TMP/signal.out")"; return 1; }
}

t_none() {
  expect none "no divergence found" || return 1
  [ "$(ls "$TMP/none"/loom-rec-*.json | wc -l)" = 4 ] || { why="not 4 records"; return 1; }
}

# The dead case again, as it is when rank 3 was slower: its communicator failed under it before
# it called collective #3, which the failed communicator then refused (so its record never
# enters #3). Rank 3 is behind, not a rank that skipped #3: rank 2 is still named.
t_dead_late() {
  local dir="$TMP/dead_late" f
  mkdir -p "$dir"
  cp "$TMP/dead"/loom-rec-*.json "$dir/"
  f=$(ls "$dir"/loom-rec-*-r3.json)
  /usr/bin/python3 - "$f" <<'PY' || { why="cannot rewrite $f"; return 1; }
import json, sys
rec = json.load(open(sys.argv[1]))
rec["ops"] = [o for o in rec["ops"] if o["seq"] < 3]
rec["calls"] = rec["collectives"] = len(rec["ops"])
json.dump(rec, open(sys.argv[1], "w"))
PY
  timeout 30 "$INFO" --hang "$dir" >"$TMP/dead_late.out" 2>&1 || { why="exit $?"; return 1; }
  grep -q "^diagnosis: rank(s) 2 hold the others back" "$TMP/dead_late.out" ||
    { why="$(cat "$TMP/dead_late.out")"; return 1; }
}

t_damaged() {
  local dir="$TMP/dead" f
  f=$(ls "$dir"/loom-rec-*-r1.json)
  head -c 300 "$f" >"$f.cut" && mv "$f.cut" "$f"
  timeout 30 "$INFO" --hang "$dir" >"$TMP/damaged.out" 2>&1 || { why="exit $?"; return 1; }
  grep -q "$(basename "$f"): .*at byte" "$TMP/damaged.out" || { why="$(cat "$TMP/damaged.out")"; return 1; }
  grep -q "^diagnosis: rank(s) 2 hold the others back" "$TMP/damaged.out" ||
    { why="$(cat "$TMP/damaged.out")"; return 1; }
}

t_empty() {
  mkdir -p "$TMP/empty"
  timeout 30 "$INFO" --hang "$TMP/empty" >"$TMP/empty.out" 2>&1
  local rc=$?
  [ $rc = 1 ] || { why="exit $rc, not 1"; return 1; }
  grep -q "no flight record" "$TMP/empty.out" || { why="$(cat "$TMP/empty.out")"; return 1; }
}

run_case "a rank that skips a collective" t_skip
run_case "a rank that calls collectives in another order" t_order
run_case "a rank with another count" t_count
run_case "a rank with another datatype of the same size" t_dtype
run_case "a rank with another root" t_root
run_case "a dead rank (SIGKILL)" t_dead
run_case "a dead rank, one survivor not yet in the collective" t_dead_late
run_case "a rank stuck in its own code (SIGSTOP)" t_stop
run_case "LOOM_DUMP_SIGNAL: records while the ranks still wait" t_signal
run_case "no fault: no one is named" t_none
run_case "a damaged record is named, the rest diagnosed" t_damaged
run_case "an empty directory is an error" t_empty
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
