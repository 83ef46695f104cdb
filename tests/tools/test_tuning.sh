#!/usr/bin/env bash
# loom_info --tuning (docs/DESIGN.md, "Choosing an algorithm"): the calibration's tables, and
# per collective the families a communicator of processes here would choose among: never the
# ordered family unless LOOM_DETERMINISTIC=1 (then it alone serves the reductions), no direct
# plans with LOOM_DIRECT=0, and choices that follow a tuning file's tables.
#   usage: test_tuning.sh LOOM_INFO
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 LOOM_INFO" >&2
  exit 2
fi
INFO=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_tuning.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export XDG_CACHE_HOME=$TMP/cache # a calibration of its own, never the user's cache

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

info() { # ENV... : loom_info --tuning into $TMP/out
  env "$@" timeout 60 "$INFO" --tuning >"$TMP/out" 2>"$TMP/err" ||
    { why="exit $?: $(cat "$TMP/err")"; return 1; }
}

# algos COLL: the algorithms of COLL's rows, one per line.
algos() { awk -v c="$1" '$1 == c {print $(NF - 5)}' "$TMP/out" | sort -u; }

t_default() {
  info LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=TUNE || return 1
  # The table of the calibration: five sizes, three positive figures each.
  local rows
  rows=$(awk '/^  [0-9]+ [KM]iB/ && $3 > 0 && $5 > 0 {n++} END {print n + 0}' "$TMP/out")
  [ "$rows" = 5 ] || { why="calibration table: $(head -8 "$TMP/out")"; return 1; }
  ! grep -q " ordered " "$TMP/out" || { why="ordered offered without LOOM_DETERMINISTIC: $(grep ordered "$TMP/out")"; return 1; }
  [ -n "$(algos allreduce)" ] || { why="no all-reduce rows: $(cat "$TMP/out")"; return 1; }
  # The cache it wrote has the tables (a calibration that the load of other jobs disturbed is
  # used once and not written: then there is nothing to look at).
  grep -q "disturbed by load: not cached" "$TMP/err" && return 0
  grep -q "^copy_gbps@16777216 " "$TMP"/cache/loom/tuning-*.txt ||
    { why="cache without tables: $(cat "$TMP"/cache/loom/tuning-*.txt "$TMP/err")"; return 1; }
  # ... and says whether other work disturbed it (then a process after ten minutes measures again).
  grep -qE "^disturbed [0-9]+$" "$TMP"/cache/loom/tuning-*.txt ||
    { why="cache without its disturbed count: $(cat "$TMP"/cache/loom/tuning-*.txt)"; return 1; }
}

t_deterministic() {
  info LOOM_DETERMINISTIC=1 || return 1
  local c
  # Lines fold in rank order too and serve the small all-reduces and reduce-scatters.
  for c in allreduce reduce reducescatter; do
    [ "$(algos $c | grep -v '^lines$')" = ordered ] || { why="$c: $(algos $c | tr '\n' ' ')"; return 1; }
  done
  [ "$(algos allgather)" != ordered ] || { why="ordered serves all-gather"; return 1; }
}

t_no_direct() {
  info LOOM_DIRECT=0 || return 1
  ! grep -qE " (oneshot|twoshot|read) " "$TMP/out" || { why="direct plans with LOOM_DIRECT=0: $(grep -E ' (oneshot|twoshot|read) ' "$TMP/out")"; return 1; }
}

# tuning CMA_GBPS [FOLD_GBPS]: a tuning file whose FIFO runs at 8 GB/s at every size and
# cross-memory attach at CMA_GBPS; with FOLD_GBPS, reads folded into a rank's own buffer
# (cma_reduce_gbps@) at that.
tuning() {
  local f=$TMP/tuning.txt b
  printf 'step_us 2\ncopy_gbps 8\nreduce_gbps 12\nncpus 2\ncma_gbps %s\ncma_us 1\n' "$1" >"$f"
  for b in 65536 262144 1048576 4194304 16777216; do
    printf 'copy_gbps@%s 8\ncma_gbps@%s %s\nreduce_gbps@%s 12\n' "$b" "$b" "$1" "$b" >>"$f"
    [ -z "${2:-}" ] || printf 'cma_reduce_gbps@%s %s\n' "$b" "$2" >>"$f"
  done
  echo "$f"
}

t_file_tables() {
  info LOOM_TUNING_FILE="$(tuning 80)" || return 1
  grep -q "^  1 MiB  *8.00  *80.00  *12.00" "$TMP/out" || { why="tables not the file's: $(head -8 "$TMP/out")"; return 1; }
  # Reads ten times faster than the FIFO: a large all-gather reads.
  awk '$1 == "allgather" && $2 == 2' "$TMP/out" | tail -1 | grep -q " read " ||
    { why="fast reads not taken: $(grep '^allgather' "$TMP/out")"; return 1; }
  info LOOM_TUNING_FILE="$(tuning 0.8)" || return 1
  # Ten times slower: no size of any collective reads.
  ! grep -qE " (oneshot|twoshot|read) " "$TMP/out" || { why="slow reads taken: $(grep -E ' (oneshot|twoshot|read) ' "$TMP/out")"; return 1; }
}

# Reads alone ten times faster than the FIFO, but read and folded in (as one-shot and two-shot
# reduce) ten times slower: large all-gathers still read, no all-reduce goes to a direct plan.
t_file_fold() {
  info LOOM_TUNING_FILE="$(tuning 80 0.8)" || return 1
  grep -q "^  1 MiB  *8.00  *80.00  *12.00  *0.80" "$TMP/out" || { why="tables not the file's: $(head -8 "$TMP/out")"; return 1; }
  awk '$1 == "allgather" && $2 == 2' "$TMP/out" | tail -1 | grep -q " read " ||
    { why="fast reads not taken: $(grep '^allgather' "$TMP/out")"; return 1; }
  ! grep -E "^(allreduce|reducescatter) " "$TMP/out" | grep -qE " (oneshot|twoshot|read) " ||
    { why="slow folds taken: $(grep -E '^(allreduce|reducescatter) ' "$TMP/out" | grep -E ' (oneshot|twoshot|read) ')"; return 1; }
}

# Four processes of a fresh host at once (a job's ranks starting): one calibrates, holding the
# host's lock, and the others wait and read what it saved; one more calibration only for each
# that was too disturbed to be saved (then the next holder of the lock measures again).
t_one_calibration() {
  local d=$TMP/four k pids=()
  mkdir -p "$d"
  for k in 1 2 3 4; do
    XDG_CACHE_HOME=$d/cache LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=TUNE timeout 120 "$INFO" --tuning \
      >"$d/out.$k" 2>"$d/err.$k" &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || { why="a loom_info failed: $(cat "$d"/err.*)"; return 1; }; done
  local measured cached unsaved
  measured=$(cat "$d"/err.* | grep -c "calibrated: step")
  cached=$(cat "$d"/err.* | grep -c "tuning constants from the cache")
  unsaved=$(cat "$d"/err.* | grep -c "disturbed by load: not cached")
  [ "$measured" = $((1 + unsaved)) ] && [ $((measured + cached)) = 4 ] ||
    { why="$measured calibrations ($unsaved not saved), $cached from the cache: $(cat "$d"/err.*)"; return 1; }
}

# A cached calibration that other work disturbed serves for ten minutes, then the next process
# measures again; an undisturbed one stays.
t_disturbed_expires() {
  local d=$TMP/expire f
  mkdir -p "$d"
  XDG_CACHE_HOME=$d/cache timeout 120 "$INFO" --tuning >/dev/null 2>&1 || { why="first run"; return 1; }
  f=$(ls "$d"/cache/loom/tuning-*.txt 2>/dev/null | sed -n 1p)
  # Too disturbed to be cached at all (t_one_calibration counts those): nothing to age.
  [ -n "$f" ] || { echo "  (skipped: this calibration was too disturbed to be cached)"; return 0; }
  sed -i 's/^disturbed .*/disturbed 0/' "$f"
  touch -d "20 minutes ago" "$f"
  XDG_CACHE_HOME=$d/cache LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=TUNE timeout 120 "$INFO" --tuning \
    >/dev/null 2>"$d/err.old" || { why="second run"; return 1; }
  grep -q "tuning constants from the cache" "$d/err.old" ||
    { why="an undisturbed cache of 20 minutes was not used: $(cat "$d/err.old")"; return 1; }
  sed -i 's/^disturbed .*/disturbed 3/' "$f"
  XDG_CACHE_HOME=$d/cache LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=TUNE timeout 120 "$INFO" --tuning \
    >"$d/out.new" 2>"$d/err.new" || { why="third run"; return 1; }
  grep -q "tuning constants from the cache" "$d/err.new" ||
    { why="a disturbed cache of a moment ago was not used: $(cat "$d/err.new")"; return 1; }
  grep -q "were measured only while other work held the cores" "$d/out.new" ||
    { why="loom_info --tuning does not say the figures were disturbed: $(head -3 "$d/out.new")"; return 1; }
  touch -d "20 minutes ago" "$f"
  XDG_CACHE_HOME=$d/cache LOOM_DEBUG=INFO LOOM_DEBUG_SUBSYS=TUNE timeout 120 "$INFO" --tuning \
    >/dev/null 2>"$d/err.exp" || { why="fourth run"; return 1; }
  grep -q "were disturbed by load, [0-9]* s ago: measuring again" "$d/err.exp" &&
    grep -q "calibrated: step" "$d/err.exp" ||
    { why="a disturbed cache of 20 minutes was used again: $(cat "$d/err.exp")"; return 1; }
}

run_case "the calibration's tables; no ordered family by default" t_default
run_case "a disturbed calibration is measured again after ten minutes" t_disturbed_expires
run_case "four processes of a new host: one calibration" t_one_calibration
run_case "LOOM_DETERMINISTIC=1: the ordered family (and lines, small) serve the reductions" t_deterministic
run_case "LOOM_DIRECT=0: no direct plans" t_no_direct
run_case "a tuning file's tables drive the choice" t_file_tables
run_case "reads folded in as slow as the file says: no direct all-reduce" t_file_fold
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
