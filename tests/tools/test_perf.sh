#!/usr/bin/env bash
# The perf tools (perf/, docs/PERF.md) as a user runs them: each of the nine briefly under
# `loomrun -n 2`, `loomrun -n 3` and as 2 thread ranks (-t 2), checking the nccl-tests table's
# shape (header lines, one "# Using devices" line per rank, 13 columns per row, a row for each
# size of the sweep, the closing lines), that every #wrong is 0 and the exit status 0; then
# -J (valid JSON with one result per row), clear refusals (bad -d/-o/sizes/flags, --mem cuda,
# a root out of range), -R, the names without underscores, and perf/plot. Each case runs under
# `timeout`; the whole script takes some 15 s on 2 cores.
# perf/plot needs gnuplot: without it that case is SKIPPED and the script exits 77 (ctest:
# SKIP_RETURN_CODE 77) once everything else passed.
#   usage: test_perf.sh PERF_BIN_DIR LOOMRUN PLOT_SCRIPT
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 PERF_BIN_DIR LOOMRUN PLOT_SCRIPT" >&2
  exit 2
fi
BIN=$(realpath "$1")
LOOMRUN=$(realpath "$2")
PLOT=$(realpath "$3")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_perf.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
TOOLS="all_reduce all_gather reduce_scatter alltoall broadcast reduce gather scatter sendrecv"
SWEEP=(-b 8 -e 64K -f 4 -n 2 -w 1 -c 1)
SIZES="8 32 128 512 2048 8192 32768" # what -b 8 -e 64K -f 4 visits

passed=0
failed=0
skipped=0
why=""

run_case() { # NAME FUNCTION [ARGS...]
  local name=$1
  shift
  why=""
  "$@"
  case $? in
    0) echo "PASS: $name"; passed=$((passed + 1)) ;;
    77) echo "SKIPPED: $name: $why"; skipped=$((skipped + 1)) ;;
    *) echo "FAIL: $name: $why"; failed=$((failed + 1)) ;;
  esac
}

# Runs a command with stdout in $TMP/out and stderr in $TMP/err; returns its status.
run() {
  timeout 30 "$@" >"$TMP/out" 2>"$TMP/err"
}

# The printed size and count of one row: the split collectives round each rank's block down to
# 16 bytes (float: 4 elements), as nccl-tests does.
expected_row() { # TOOL NRANKS SIZE -> "size count"
  local count=$(($3 / 4))
  case $1 in
    all_gather | reduce_scatter | alltoall | gather | scatter)
      local block=$(((count / $2) & ~3))
      echo "$((block * $2 * 4)) $block" ;;
    *) echo "$3 $count" ;;
  esac
}

# The table of $TMP/out for TOOL over NRANKS ranks.
check_table() { # TOOL NRANKS
  local tool=$1 n=$2 out=$TMP/out
  local head
  head=$(grep -c -E "^# (Loom perf tools version|Collective test starting: ${tool}_perf|nThread .* nGpus .* minBytes 8 maxBytes 65536 step: 4\(factor\) warmup iters: 1 iters: 2 agg iters: 1 validation: 1|Using devices)" "$out")
  [ "$head" = 4 ] || { why="header lines missing (found $head of 4)"; return 1; }
  local ranks
  ranks=$(grep -c "^#  Rank " "$out")
  [ "$ranks" = "$n" ] || { why="$ranks '# Using devices' rank lines for $n ranks"; return 1; }
  grep -q "^# .*out-of-place.*in-place" "$out" &&
    grep -q -E "^# +size +count +type +redop +root +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong$" "$out" &&
    grep -q -E "^# +\(B\) +\(elements\)" "$out" || { why="column header missing"; return 1; }
  grep -q "^# Out of bounds values : 0 OK$" "$out" &&
    grep -q -E "^# Avg bus bandwidth    : [0-9.e+-]+ ?$" "$out" &&
    grep -q "^# Collective test concluded: ${tool}_perf$" "$out" || { why="closing lines missing"; return 1; }
  check_rows "$tool" "$n"
}

check_rows() { # TOOL NRANKS
  local tool=$1 n=$2 rows want=""
  rows=$(grep -v "^#" "$TMP/out")
  for s in $SIZES; do want+="$(expected_row "$tool" "$n" "$s")"$'\n'; done
  local got
  got=$(awk '{print $1, $2}' <<<"$rows")
  [ "$got" = "${want%$'\n'}" ] || { why="rows (size count) $(echo $got) instead of $(echo $want)"; return 1; }
  local bad
  bad=$(awk -v tool="$tool" 'NF != 13 { print "row with " NF " columns: " $0; next }
    $9 != "0" { print "out-of-place #wrong " $9 ": " $0 }
    $13 != "0" && !(tool == "sendrecv" && $13 == "N/A") { print "in-place #wrong " $13 ": " $0 }' <<<"$rows")
  [ -z "$bad" ] || { why=$(head -3 <<<"$bad"); return 1; }
}

case_table() { # TOOL MODE(n2|n3|t2)
  local tool=$1 n cmd
  case $2 in
    n2) n=2; cmd=("$LOOMRUN" -n 2 "$BIN/${tool}_perf") ;;
    n3) n=3; cmd=("$LOOMRUN" -n 3 "$BIN/${tool}_perf") ;;
    t2) n=2; cmd=("$BIN/${tool}_perf" -t 2) ;;
  esac
  run "${cmd[@]}" "${SWEEP[@]}"
  local rc=$?
  [ $rc = 0 ] || { why="exit status $rc: $(tail -c 600 "$TMP/err") $(grep "Out of bounds" "$TMP/out")"; return 1; }
  check_table "$tool" "$n"
}

for tool in $TOOLS; do
  for mode in n2 n3 t2; do run_case "${tool}_perf $mode" case_table "$tool" "$mode"; done
done

# Every datatype and op with 3 thread ranks: the check values stay exact in each.
case_all_types() {
  run "$BIN/all_reduce_perf" -t 3 -b 64 -e 64 -n 1 -w 0 -d all -o all
  local rc=$? rows
  rows=$(grep -vc "^#" "$TMP/out")
  [ $rc = 0 ] || { why="exit status $rc: $(tail -c 600 "$TMP/err")"; return 1; }
  [ "$rows" = 72 ] || { why="$rows rows for 12 types x 6 ops"; return 1; }
  grep -q "^# Out of bounds values : 0 OK$" "$TMP/out" || { why="wrong values"; return 1; }
}

# -g 2 (two ranks per thread) and -r -1 (every root) under loomrun.
case_ranks_per_thread() {
  run "$LOOMRUN" -n 2 "$BIN/broadcast_perf" -g 2 -r -1 -b 1K -e 1K -n 2
  local rc=$?
  [ $rc = 0 ] || { why="exit status $rc: $(tail -c 600 "$TMP/err")"; return 1; }
  [ "$(grep -c "^#  Rank " "$TMP/out")" = 4 ] || { why="not 4 ranks"; return 1; }
  [ "$(grep -v "^#" "$TMP/out" | awk '{print $5}' | tr '\n' ' ')" = "0 1 2 3 " ] ||
    { why="rows are not one per root 0..3"; return 1; }
}

case_json() {
  local json=$TMP/ar.json
  run "$LOOMRUN" -n 2 "$BIN/all_reduce_perf" "${SWEEP[@]}" -J "$json"
  local rc=$?
  [ $rc = 0 ] || { why="exit status $rc: $(tail -c 600 "$TMP/err")"; return 1; }
  python3 -m json.tool "$json" >/dev/null 2>"$TMP/err" || { why="invalid JSON: $(cat "$TMP/err")"; return 1; }
  local summary
  summary=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
r=d["results"]
print(d["tool"], d["library"], d["nranks"], d["mem"], d["registered"], len(r),
      sorted(r[0].keys()), sorted(r[0]["out_of_place"].keys()), d["out_of_bounds"],
      all(x["out_of_place"]["wrong"] == 0 and x["in_place"]["wrong"] == 0 for x in r))' "$json")
  local want="all_reduce_perf loom 2 host False 7 ['count', 'in_place', 'out_of_place', 'redop', 'root', 'size', 'type'] ['algbw', 'busbw', 'iters', 'time_us', 'wrong'] 0 True"
  [ "$summary" = "$want" ] || { why="JSON content: $summary"; return 1; }
}

# --min_ms: more timed iterations than -n where -n calls take less than the time asked for
# (2 calls of 8 bytes take microseconds, not 200 ms), the same count on every rank, the JSON's
# "iters" saying how many, and the values still right. Without it, exactly -n.
case_min_ms() {
  local json=$TMP/minms.json counts
  run "$LOOMRUN" -n 2 "$BIN/all_reduce_perf" -b 8 -e 64 -f 8 -n 2 -w 1 -c 1 --min_ms 200 -J "$json"
  local rc=$?
  [ $rc = 0 ] || { why="exit status $rc: $(tail -c 600 "$TMP/err")"; return 1; }
  grep -q "^# Timed for at least 200 ms" "$TMP/out" || { why="no --min_ms line in the header"; return 1; }
  counts=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]
print(" ".join(str(x[p]["iters"]) for x in r for p in ("out_of_place", "in_place")))' "$json")
  local c
  for c in $counts; do
    [ "$c" -gt 2 ] && [ "$c" -le 1000000 ] || { why="timed iterations $counts: not more than -n 2"; return 1; }
  done
  [ "$(echo "$counts" | wc -w)" = 4 ] || { why="iteration counts '$counts' for 2 sizes x 2 placements"; return 1; }
  SIZES="8 64" check_rows all_reduce 2 || return 1
  run "$BIN/all_reduce_perf" -t 2 -b 8 -e 8 -n 3 -w 0 -J "$json" || { why="without --min_ms: exit status $?"; return 1; }
  counts=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]
print(" ".join(str(x[p]["iters"]) for x in r for p in ("out_of_place", "in_place")))' "$json")
  [ "$counts" = "3 3" ] || { why="without --min_ms: timed iterations $counts, not -n 3"; return 1; }
}

# A refusal: non-zero status, nothing on stdout's table, and a message naming the problem.
refused() { # PATTERN COMMAND...
  local pattern=$1
  shift
  run "$@"
  local rc=$?
  [ $rc != 0 ] || { why="exit status 0 for: $*"; return 1; }
  [ $rc != 124 ] || { why="timed out: $*"; return 1; }
  grep -q -- "$pattern" "$TMP/err" || { why="no message matching '$pattern': $(head -c 300 "$TMP/err")"; return 1; }
}

case_bad_flags() {
  refused "-d nosuchtype: unknown datatype" "$BIN/all_reduce_perf" -d nosuchtype || return 1
  refused "-o bad: unknown reduction op" "$BIN/reduce_perf" -o bad || return 1
  refused "-b 1X: expected a size" "$BIN/all_gather_perf" -b 1X || return 1
  refused "unknown flag '--bogus'" "$BIN/alltoall_perf" --bogus || return 1
  refused "invalid sizes" "$BIN/broadcast_perf" -b 1M -e 1K || return 1
  refused "--min_ms -5: expected an integer" "$BIN/all_reduce_perf" --min_ms -5 || return 1
  refused "-G 1: not supported" "$BIN/all_reduce_perf" -G 1 || return 1
  refused "root out of range" "$BIN/broadcast_perf" -t 2 -r 5 -b 8 -e 8 || return 1
  refused "root out of range" "$LOOMRUN" -n 2 "$BIN/gather_perf" -r 2 -b 8 -e 8
}

case_mem_cuda() {
  refused "CUDA buffers are not supported by this build of Loom yet" "$BIN/all_reduce_perf" --mem cuda
}

# -R: the same sweep on registered buffers, or a clear refusal while Loom has none.
case_register() {
  local r
  for r in 1 2; do
    run "$LOOMRUN" -n 2 "$BIN/all_reduce_perf" "${SWEEP[@]}" -R "$r"
    local rc=$?
    if [ $rc = 0 ]; then
      check_table all_reduce 2 || return 1
    elif ! grep -q -E "^all_reduce_perf: rank [0-9]+: -R $r: loom(CommRegister|MemAlloc)" "$TMP/err"; then
      why="-R $r: exit status $rc without a clear message: $(head -c 300 "$TMP/err")"
      return 1
    fi
  done
}

case_aliases() {
  local alias
  for alias in allreduce allgather reducescatter; do
    [ -L "$BIN/${alias}_perf" ] || { why="$BIN/${alias}_perf is not a symbolic link"; return 1; }
    run "$BIN/${alias}_perf" -t 2 -b 1K -e 1K -n 1 || { why="${alias}_perf failed"; return 1; }
  done
}

case_help() {
  run "$BIN/scatter_perf" --help || { why="--help exit status $?"; return 1; }
  grep -q "^Usage: scatter_perf" "$TMP/out" && grep -q -- "--mem" "$TMP/out" ||
    { why="--help does not show the usage"; return 1; }
}

case_plot() {
  if ! command -v gnuplot >/dev/null; then
    why="gnuplot is not installed (apt-get install -y gnuplot-nox)"
    return 77
  fi
  run "$BIN/all_gather_perf" -t 2 "${SWEEP[@]}" -J "$TMP/ag.json" || { why="all_gather_perf -J failed"; return 1; }
  [ -s "$TMP/ar.json" ] || { why="no JSON from the -J case"; return 1; }
  run "$PLOT" -o "$TMP/plot.png" -l "all-reduce" "$TMP/ar.json" -l "all-gather" "$TMP/ag.json" ||
    { why="perf/plot failed: $(cat "$TMP/err")"; return 1; }
  [ "$(head -c 4 "$TMP/plot.png" | od -An -tx1 | tr -d ' ')" = 89504e47 ] ||
    { why="perf/plot did not write a PNG"; return 1; }
}

run_case "every datatype and op (-d all -o all, -t 3)" case_all_types
run_case "-g 2 and -r -1 under loomrun" case_ranks_per_thread
run_case "-J writes the results as JSON" case_json
run_case "--min_ms times more iterations" case_min_ms
run_case "bad flags are refused clearly" case_bad_flags
run_case "--mem cuda is refused clearly" case_mem_cuda
run_case "-R 1 and -R 2" case_register
run_case "names without underscores" case_aliases
run_case "--help" case_help
run_case "perf/plot draws a PNG" case_plot

echo "test_perf: $passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ] || exit 1
[ $skipped = 0 ] || exit 77
exit 0
