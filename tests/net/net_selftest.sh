#!/usr/bin/env bash
# net_selftest.sh - tests of the network suite's harness itself:
#   skip-unprivileged  as an ordinary user it reports SKIPPED (exit 77)
#   skip-no-netns      where `ip netns add` fails (a user namespace) likewise
#   cleanup-on-fail    a case whose ranks fail leaves no namespace, process or
#                      directory behind
#   cleanup-on-sigterm the harness interrupted mid-run cleans up the same
#   sweep-after-sigkill a harness killed outright leaves debris that the next
#                      run's stale sweep removes
#   usage: net_selftest.sh NET_CHECK LOOM_INFO
set -euo pipefail
NET_CHECK=$(realpath "$1")
LOOM_INFO=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
SUITE="$HERE/net_suite.sh"

passed=0
failed=0
skipped=0
pass() { echo "net: PASS harness/$1${2:+ ($2)}"; passed=$((passed + 1)); }
fail() { echo "net: FAIL harness/$1: $2"; failed=$((failed + 1)); }
skip() { echo "net: SKIP harness/$1: $2"; skipped=$((skipped + 1)); }

TMP=$(mktemp -d /tmp/loomnet-selftest.XXXXXX)
chmod 755 "$TMP"
BG=()
cleanup() {
  local p
  for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# A stand-in for net_check whose ranks just sit there.
cat >"$TMP/sitter" <<'EOF'
#!/bin/sh
exec sleep 120
EOF
chmod 755 "$TMP/sitter"

# Starts the suite in the background (pid in $pid, the harness's own pid, which
# names its namespaces), with a watchdog that kills it after 150 s.
bg_suite() { # out, suite args...
  local out=$1
  shift
  bash "$SUITE" "$@" >"$out" 2>&1 &
  pid=$!
  BG+=("$pid")
  local harness=$pid
  ( # ends by itself soon after the harness does
    for ((i = 0; i < 1500; i++)); do
      kill -0 $harness 2>/dev/null || exit 0
      sleep 0.1
    done
    kill -KILL $harness 2>/dev/null
  ) >/dev/null 2>&1 &
}

# What a run of the harness with pid $1 may leave: its namespaces, its
# directories, processes in those namespaces. Prints them; 1 if any.
debris() {
  local pid=$1 ns found=0
  ns=$(timeout 10 ip netns list 2>/dev/null | awk '{print $1}' | grep "^loomnet-$pid-" || true)
  [ -n "$ns" ] && { echo "namespaces: $(echo $ns)"; found=1; }
  ls -d "/dev/shm/.loomnet-$pid" /tmp/loomnet-"$pid".* 2>/dev/null && found=1
  return $found
}

# Which of these pids still run the sitter (a zombie, or a pid reused by
# another program, is gone); waits up to 5 s for them to go.
still_running() {
  local end=$(($(date +%s) + 5)) p alive
  while :; do
    alive=""
    for p in "$@"; do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] || continue
      [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" = Z ] && continue
      alive+="$p "
    done
    if [ -z "$alive" ] || [ "$(date +%s)" -ge "$end" ]; then
      echo "$alive"
      return 0
    fi
    sleep 0.1
  done
}

# Waits until harness $1 has ranks running in host 0; prints their pids.
wait_ranks_running() {
  local pid=$1 end=$(($(date +%s) + 60)) pids
  while [ "$(date +%s)" -lt "$end" ]; do
    pids=$(timeout 5 ip netns pids "loomnet-$pid-h0" 2>/dev/null | tr '\n' ' ' || true)
    case $pids in *[0-9]*) echo "$pids"; return 0 ;; esac
    sleep 0.1
  done
  return 1
}

# ---- Skips ----------------------------------------------------------------------

check_skip() { # name, command...
  local name=$1 out rc=0
  shift
  out=$(timeout 60 "$@" 2>&1) || rc=$?
  if [ "$rc" = 77 ] && grep -q "SKIP" <<<"$out"; then
    pass "$name" "$(grep -m1 SKIPPED <<<"$out" || grep -m1 SKIP <<<"$out")"
  else
    fail "$name" "exit $rc, not 77 with a reason: $out"
  fi
}

if [ "$(id -u)" != 0 ]; then
  check_skip skip-unprivileged bash "$SUITE" "$NET_CHECK" "$LOOM_INFO" bootstrap
  skip cleanup "not root: the cleanup checks need namespaces"
else
  if command -v setpriv >/dev/null 2>&1; then
    check_skip skip-unprivileged setpriv --reuid=65534 --regid=65534 --clear-groups \
      bash "$SUITE" "$NET_CHECK" "$LOOM_INFO" bootstrap
  else
    skip skip-unprivileged "setpriv (util-linux) is not installed"
  fi
  if timeout 10 unshare --user --map-root-user true 2>/dev/null; then
    check_skip skip-no-netns unshare --user --map-root-user bash "$SUITE" "$NET_CHECK" "$LOOM_INFO" bootstrap
  else
    skip skip-no-netns "cannot make a user namespace here"
  fi

  # ---- Cleanup ------------------------------------------------------------------

  # Ranks that fail at once (false stands in for net_check).
  rc=0
  bg_suite "$TMP/fail.out" /bin/false "$LOOM_INFO" bootstrap
  wait $pid || rc=$?
  if [ $rc = 1 ] && grep -q "FAIL" "$TMP/fail.out"; then
    if left=$(debris $pid); then pass cleanup-on-fail "the case failed (exit 1) and left nothing"; else
      fail cleanup-on-fail "left behind: $left"
    fi
  else
    fail cleanup-on-fail "a case whose ranks fail exited $rc: $(tail -n 5 "$TMP/fail.out")"
  fi

  # Interrupted while its ranks run.
  bg_suite "$TMP/term.out" "$TMP/sitter" "$LOOM_INFO" bootstrap
  if ranks=$(wait_ranks_running $pid); then
    kill -TERM $pid
    rc=0
    wait $pid || rc=$?
    # shellcheck disable=SC2086
    alive=$(still_running $ranks)
    if left=$(debris $pid) && [ -z "$alive" ]; then
      pass cleanup-on-sigterm "exit $rc, ranks $ranks gone, nothing left"
    else
      fail cleanup-on-sigterm "left behind: $left ${alive:+processes $alive}"
    fi
  else
    fail cleanup-on-sigterm "the ranks never started: $(tail -n 5 "$TMP/term.out")"
  fi

  # Killed outright: nothing can run in it, so the next run sweeps.
  bg_suite "$TMP/kill.out" "$TMP/sitter" "$LOOM_INFO" bootstrap
  if ranks=$(wait_ranks_running $pid); then
    kill -KILL $pid
    wait $pid 2>/dev/null || true
    if debris $pid >/dev/null; then
      fail sweep-after-sigkill "a harness killed with SIGKILL left nothing to sweep?"
    else
      timeout 60 bash "$SUITE" "$NET_CHECK" "$LOOM_INFO" sweep >"$TMP/sweep.out" 2>&1 || true
      # shellcheck disable=SC2086
      alive=$(still_running $ranks)
      if left=$(debris $pid) && [ -z "$alive" ]; then
        pass sweep-after-sigkill "$(grep -c 'removing namespace' "$TMP/sweep.out") namespaces swept, ranks $ranks gone"
      else
        fail sweep-after-sigkill "the sweep left: $left ${alive:+processes $alive}"
      fi
    fi
  else
    fail sweep-after-sigkill "the ranks never started: $(tail -n 5 "$TMP/kill.out")"
  fi
fi

echo "net_selftest: $passed passed, $failed failed, $skipped skipped"
[ $failed -gt 0 ] && exit 1
[ $passed -eq 0 ] && exit 77
exit 0
