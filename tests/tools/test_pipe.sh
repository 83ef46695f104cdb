#!/usr/bin/env bash
# loom_pipe (tools/loom_pipe.c, docs/PARALLEL.md): its figures are the simulator's (the
# makespans and peaks PARALLEL.md section 6 promises), each rank's row draws every compute of
# its list, a kind that cannot serve p and m says why, bad arguments are refused, and --svg and
# --png draw through gnuplot (those two cases SKIP without gnuplot).
#   usage: test_pipe.sh LOOM_PIPE
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 LOOM_PIPE" >&2
  exit 2
fi
PIPE=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_pipe.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"
skipped=0

# The makespan printed for kind $1 at p $2, m $3 with costs $4.
makespan() {
  timeout 30 "$PIPE" -k "$1" -p "$2" -m "$3" -c "$4" 2>"$TMP/err" |
    sed -n 's/^  makespan \([0-9.e+]*\), bubble.*/\1/p'
}

t_formulas() {
  local p m got want
  for p in 1 2 4 8; do
    for m in 1 3 $((2 * p)) $((4 * p)); do
      # AFAB and 1F1B: (m+p-1)(f+b+w) for any costs.
      want=$(awk -v m=$m -v p=$p 'BEGIN { print (m + p - 1) * 3.5 }')
      for k in afab 1f1b; do
        got=$(makespan $k $p $m 1,2,0.5,0)
        [ "$got" = "$want" ] || { why="$k p $p m $m: makespan '$got', want $want"; return 1; }
      done
      [ $m -ge $((2 * p)) ] || continue
      # ZB-V and DualPipeV, m >= 2p, unit costs per stage: 6m+p-1 stage units, stages of 1/2.
      want=$(awk -v m=$m -v p=$p 'BEGIN { print (6 * m + p - 1) / 2 }')
      for k in zbv dualpipev; do
        got=$(makespan $k $p $m 1,1,1,0)
        [ "$got" = "$want" ] || { why="$k p $p m $m: makespan '$got', want $want"; return 1; }
      done
    done
  done
}

t_rows() {
  # 1F1B at p 3, m 4, 3 columns per unit: each row shows its 4 F, 4 B and 4 W with their
  # microbatches, and rank r starts after r idle units.
  timeout 30 "$PIPE" -k 1f1b -p 3 -m 4 -w 54 >"$TMP/out" 2>"$TMP/err" || { why="exit $?"; return 1; }
  local r row
  for r in 0 1 2; do
    row=$(grep "^  rank $r " "$TMP/out") || { why="no row for rank $r"; return 1; }
    for op in F B W; do
      for i in 0 1 2 3; do
        [[ $row == *"$op$i"* ]] || { why="rank $r row lacks $op$i: $row"; return 1; }
      done
    done
    [[ ${row#*|} == "$(printf '%*s' $((3 * r)) '' | tr ' ' .)F0"* ]] ||
      { why="rank $r does not start after $r idle units: $row"; return 1; }
  done
  grep -q "peak activations per rank: 3 2 1" "$TMP/out" || { why="peaks: $(cat "$TMP/out")"; return 1; }
}

t_compares() {
  timeout 30 "$PIPE" -p 4 -m 8 >"$TMP/out" 2>"$TMP/err" || { why="exit $?"; return 1; }
  local k
  for k in afab 1f1b interleaved zbh1 zbv dualpipev; do
    grep -q "^$k  *[0-9.]*  *[0-9.]*%  *[0-9]*\$" "$TMP/out" || { why="no table line for $k"; return 1; }
  done
}

t_refuses() {
  timeout 30 "$PIPE" -k dualpipev -p 4 -m 3 >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc = 1 ] || { why="DualPipeV at m < 2p: exit $rc, not 1"; return 1; }
  grep -q "dualpipev: loomPipeScheduleCreate: numMicrobatches 3 is below 2\*numRanks = 8" \
    "$TMP/out" || { why="no reason: $(cat "$TMP/out")"; return 1; }
  timeout 30 "$PIPE" -k gpipe >/dev/null 2>"$TMP/err"
  rc=$?
  [ $rc = 2 ] && grep -q "unknown kind 'gpipe'" "$TMP/err" || { why="-k gpipe: exit $rc"; return 1; }
}

t_draws() { # $1: svg or png
  command -v gnuplot >/dev/null || { why="SKIPPED: no gnuplot"; return 2; }
  timeout 60 "$PIPE" -p 3 -m 6 --"$1" "$TMP/pipe.$1" >"$TMP/out" 2>"$TMP/err" ||
    { why="exit $?: $(cat "$TMP/err")"; return 1; }
  [ -s "$TMP/pipe.$1" ] || { why="no $1 written"; return 1; }
  if [ "$1" = svg ]; then
    grep -q "<svg" "$TMP/pipe.svg" && grep -q "zbv: makespan" "$TMP/pipe.svg" ||
      { why="not an SVG with the titles"; return 1; }
  else
    [ "$(head -c 4 "$TMP/pipe.png" | tail -c 3)" = PNG ] || { why="not a PNG"; return 1; }
  fi
}

draw_case() { # NAME FORMAT
  why=""
  t_draws "$2"
  case $? in
    0) echo "PASS: $1"; passed=$((passed + 1)) ;;
    2) echo "SKIPPED: $1: $why"; skipped=$((skipped + 1)) ;;
    *) echo "FAIL: $1: $why"; failed=$((failed + 1)) ;;
  esac
}

run_case "makespans are the formulas of PARALLEL.md at p 1..8" t_formulas
run_case "each rank's row draws its list" t_rows
run_case "every kind in the comparison table" t_compares
run_case "a kind that cannot serve says why; an unknown kind is refused" t_refuses
draw_case "--svg draws through gnuplot" svg
draw_case "--png draws through gnuplot" png
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
