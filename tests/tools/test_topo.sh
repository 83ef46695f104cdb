#!/usr/bin/env bash
# loom_info --topo (docs/topology.md): it prints the probed topology in
# LOOM_TOPO_FILE's format, that output reads back as a valid file, an edited
# one (two hosts) is taken, and a bad one is refused naming file and line.
#   usage: test_topo.sh LOOM_INFO
set -u

if [ $# -ne 1 ]; then
  echo "usage: $0 LOOM_INFO" >&2
  exit 2
fi
INFO=$1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_topo.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset LOOM_TOPO_FILE LOOM_HOSTID

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

t_prints_the_facts() {
  timeout 30 "$INFO" --topo >"$TMP/probed" 2>"$TMP/err" || { why="exit $?: $(cat "$TMP/err")"; return 1; }
  local key
  for key in host machine cpus; do
    [ "$(grep -c "^$key [^ ]\+\$" "$TMP/probed")" = 1 ] || { why="no one '$key' line"; return 1; }
  done
  [ "$(grep -vc '^#\|^host \|^machine \|^cpus ' "$TMP/probed")" = 0 ] || { why="other lines"; return 1; }
}

t_reads_back() {
  LOOM_TOPO_FILE="$TMP/probed" timeout 30 "$INFO" --env >"$TMP/out" 2>"$TMP/err" ||
    { why="exit $?: $(grep -i invalid "$TMP/out")"; return 1; }
}

t_edited_is_taken() {
  sed 's/^host .*/host node-b   # edited/; s/^cpus .*/cpus 3/' "$TMP/probed" >"$TMP/edited"
  LOOM_TOPO_FILE="$TMP/edited" timeout 30 "$INFO" --topo >/dev/null 2>"$TMP/err" ||
    { why="exit $?: $(cat "$TMP/err")"; return 1; }
}

t_bad_is_refused() {
  printf 'host a\n# fine so far\ncpus many\n' >"$TMP/bad"
  LOOM_TOPO_FILE="$TMP/bad" timeout 30 "$INFO" --topo >/dev/null 2>"$TMP/err"
  local rc=$?
  [ $rc = 1 ] || { why="exit $rc, not 1"; return 1; }
  grep -q "LOOM_TOPO_FILE=$TMP/bad: $TMP/bad:3: cpus 'many' is not an integer" "$TMP/err" ||
    { why="stderr: $(cat "$TMP/err")"; return 1; }
}

run_case "loom_info --topo prints host, machine and cpus" t_prints_the_facts
run_case "its output is a valid LOOM_TOPO_FILE" t_reads_back
run_case "an edited file is taken" t_edited_is_taken
run_case "a bad file is refused naming file and line" t_bad_is_refused
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
