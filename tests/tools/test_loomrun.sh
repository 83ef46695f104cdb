#!/usr/bin/env bash
# Tests loomrun with rank_prog (no Loom inside) and cause_prog (a real Loom program in which
# one rank crashes) as the rank programs.
#   usage: test_loomrun.sh LOOMRUN RANK_PROG CAUSE_PROG
# Each case runs under `timeout 30`, so a loomrun that hangs fails its case instead of the
# whole test. Every case that starts ranks gives them a unique marker argument and checks at
# the end that no process carrying that marker is left.
set -u

if [ $# -ne 3 ]; then
  echo "usage: $0 LOOMRUN RANK_PROG CAUSE_PROG" >&2
  exit 2
fi
LOOMRUN=$(realpath "$1")
RANK_PROG=$(realpath "$2")
CAUSE_PROG=$(realpath "$3")
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_loomrun.XXXXXX")
BUSY_PIDS=()
trap 'busy_stop; rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ulimit -c 0 # the crashes below are on purpose

# ---- Helpers ---------------------------------------------------------------

# Fails the current case with a reason: `check COND... || return 1` style.
expect_eq() { # ACTUAL EXPECTED WHAT
  [ "$1" = "$2" ] && return 0
  why="$3: got '$1', expected '$2'"
  return 1
}

expect_grep() { # FILE PATTERN WHAT
  grep -qE -- "$2" "$1" && return 0
  why="$3: no line matching '$2' in: $(head -c 600 "$1")"
  return 1
}

expect_no_grep() { # FILE PATTERN WHAT
  grep -qE -- "$2" "$1" || return 0
  why="$3: $(grep -E -- "$2" "$1" | head -n 3)"
  return 1
}

# Pids of live processes whose command line holds MARKER. The bracket keeps grep's own
# command line from matching its pattern.
procs_with() {
  local marker=$1
  grep -lsa -- "[${marker:0:1}]${marker:1}" /proc/[0-9]*/cmdline 2>/dev/null |
    sed 's|/proc/\([0-9]*\)/cmdline|\1|'
}

# "PID STATE" for each child of $PPID_WANTED, from /proc (no procps needed).
children_of() {
  local p st
  for p in /proc/[0-9]*; do
    read -r st 2>/dev/null <"$p/stat" || continue
    st=${st##*) } # after "pid (comm) ": state, ppid, ...
    set -- $st
    [ "${2:-}" = "$PPID_WANTED" ] && echo "${p#/proc/} $1"
  done
}

wait_until() { # SECONDS COMMAND...: polls COMMAND until it succeeds
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.05
  done
}

no_procs_with() { [ -z "$(procs_with "$1")" ]; }

expect_gone() { # MARKER: no rank may outlive loomrun
  wait_until 5 no_procs_with "$1" && return 0
  why="processes left behind: $(procs_with "$1" | tr '\n' ' ')"
  return 1
}

files_exist() { # PREFIX N: PREFIX.0 .. PREFIX.N-1 all exist
  local i
  for ((i = 0; i < $2; i++)); do [ -e "$1.$i" ] || return 1; done
}

# Starts loomrun in the background under timeout and sets LOOMRUN_PID and GUARD_PID.
start_bg() {
  timeout 30 "$LOOMRUN" "$@" >"$TMP/out" 2>"$TMP/err" &
  GUARD_PID=$!
  PPID_WANTED=$GUARD_PID
  LOOMRUN_PID=""
  wait_until 10 loomrun_started || LOOMRUN_PID=""
}
loomrun_started() {
  LOOMRUN_PID=$(children_of | head -n 1 | cut -d' ' -f1)
  [ -n "$LOOMRUN_PID" ]
}

# shellcheck source=tests/tools/cases.sh
source "$(dirname "${BASH_SOURCE[0]}")/cases.sh"

field_values() { # NAME < output: every NAME=value on every line, one value a line
  tr ' ' '\n' | sed -n "s/^$1=//p"
}

# Keeps every core busy (2 to 8 of them) with `yes`, so that ranks and loomrun are slow to
# run when they wake. Each `yes` also stops on its own after 120 s, should this script be
# killed before its EXIT trap runs.
busy_start() {
  local i n
  n=$(nproc 2>/dev/null || echo 2)
  [ "$n" -lt 2 ] && n=2
  [ "$n" -gt 8 ] && n=8
  for ((i = 0; i < n; i++)); do
    timeout 120 yes >/dev/null &
    BUSY_PIDS+=($!)
  done
}
busy_stop() {
  [ ${#BUSY_PIDS[@]} -gt 0 ] || return 0
  kill "${BUSY_PIDS[@]}" 2>/dev/null
  wait "${BUSY_PIDS[@]}" 2>/dev/null
  BUSY_PIDS=()
}

pid_state() { # PID: its state letter (Z for a zombie); nothing once it is gone
  local st
  read -r st 2>/dev/null <"/proc/$1/stat" || return 0
  st=${st##*) }
  echo "${st%% *}"
}

ranks_are_zombies() { # DIR N: the processes named by DIR/pid.0 .. pid.N-1 are all zombies
  local i
  for ((i = 0; i < $2; i++)); do
    [ "$(pid_state "$(cat "$1/pid.$i" 2>/dev/null)")" = Z ] || return 1
  done
}

# ---- Cases -----------------------------------------------------------------

t_env() {
  timeout 30 "$LOOMRUN" -n 4 -x LOOM_TEST_X=hello --env LOOM_TEST_Y=a=b "$RANK_PROG" env \
    LOOM_TEST_X LOOM_TEST_Y LOOM_RUN_FD >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 0 "exit status" || return 1
  expect_eq "$(wc -l <"$TMP/out")" 4 "output lines" || return 1
  expect_eq "$(field_values LOOM_RANK <"$TMP/out" | sort -n | tr '\n' ' ')" "0 1 2 3 " \
    "LOOM_RANK values" || return 1
  expect_eq "$(grep -cE '^LOOM_RANK=([0-9]+) .*LOOM_LOCAL_RANK=\1 ' "$TMP/out")" 4 \
    "LOOM_LOCAL_RANK equal to LOOM_RANK" || return 1
  expect_eq "$(field_values LOOM_WORLD_SIZE <"$TMP/out" | sort -u)" 4 "LOOM_WORLD_SIZE" || return 1
  expect_eq "$(field_values LOOM_LOCAL_SIZE <"$TMP/out" | sort -u)" 4 "LOOM_LOCAL_SIZE" || return 1
  local root secret
  root=$(field_values LOOM_ROOT <"$TMP/out" | sort -u)
  expect_eq "$(grep -cE '^127\.0\.0\.1:[0-9]+$' <<<"$root")" 1 "one LOOM_ROOT, 127.0.0.1:port" ||
    return 1
  secret=$(field_values LOOM_SECRET <"$TMP/out" | sort -u)
  expect_eq "$(grep -cE '^[0-9a-f]{16}$' <<<"$secret")" 1 "one LOOM_SECRET, 16 hex digits" ||
    return 1
  expect_eq "$(field_values LOOM_TEST_X <"$TMP/out" | sort -u)" hello "-x LOOM_TEST_X" || return 1
  expect_eq "$(field_values LOOM_TEST_Y <"$TMP/out" | sort -u)" a=b "--env LOOM_TEST_Y" || return 1
  expect_eq "$(field_values LOOM_RUN_FD <"$TMP/out" | sort -u | grep -cE '^[0-9]+$')" 1 \
    "one LOOM_RUN_FD, a number" || return 1
  # A second run must draw a new secret.
  timeout 30 "$LOOMRUN" -n 1 "$RANK_PROG" env >"$TMP/out2" 2>&1
  [ "$(field_values LOOM_SECRET <"$TMP/out2")" != "$secret" ] || {
    why="two runs got the same secret $secret"
    return 1
  }
}

t_host_port() {
  timeout 30 "$LOOMRUN" --np 2 --host 127.0.0.1 --port 29517 -- "$RANK_PROG" env >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 0 "exit status" || return 1
  expect_eq "$(field_values LOOM_ROOT <"$TMP/out" | sort -u)" 127.0.0.1:29517 "LOOM_ROOT" || return 1
}

t_prefix() {
  timeout 30 "$LOOMRUN" -n 3 -p "$RANK_PROG" lines >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 0 "exit status" || return 1
  local r want_out want_err
  for r in 0 1 2; do
    want_out="[$r] out-$r-1 [$r] out-$r-2 [$r] part-$r-apart-$r-b [$r] out-$r-3 [$r] tail-$r "
    want_err="[$r] err-$r-1 [$r] errtail-$r "
    # Each rank's lines whole, prefixed, on the right stream, in the order it wrote them.
    expect_eq "$(grep -F "[$r] " "$TMP/out" | tr '\n' ' ')" "$want_out" "rank $r stdout" || return 1
    expect_eq "$(grep -F "[$r] " "$TMP/err" | tr '\n' ' ')" "$want_err" "rank $r stderr" || return 1
  done
  expect_eq "$(wc -l <"$TMP/out") $(wc -l <"$TMP/err")" "15 6" "line counts" || return 1
}

t_rank_fails() {
  local marker="lrm-fail-$$"
  timeout 30 "$LOOMRUN" -n 4 --grace 1 "$RANK_PROG" exit 2 3 "$marker" >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 3 "exit status" || return 1
  expect_grep "$TMP/err" "rank 2 exited with status 3; stopping the other ranks" "message" ||
    return 1
  expect_no_grep "$TMP/err" "because of it|blamed" "blame without any message" || return 1
  expect_gone "$marker"
}

t_rank_killed() {
  local marker="lrm-kill-$$"
  timeout 30 "$LOOMRUN" -n 3 "$RANK_PROG" kill 1 "$marker" >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 137 "exit status" || return 1
  expect_grep "$TMP/err" "rank 1 was killed by signal 9 \(Killed\)" "message" || return 1
  expect_gone "$marker"
}

# The ranks ignore SIGTERM, so this also covers the SIGKILL after --grace.
t_timeout() {
  local marker="lrm-timeout-$$"
  timeout 30 "$LOOMRUN" -n 3 --timeout 1 --grace 0.5 "$RANK_PROG" stubborn "$marker" \
    >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 124 "exit status" || return 1
  expect_grep "$TMP/err" "timed out after 1 s" "timeout message" || return 1
  expect_grep "$TMP/err" "sending SIGKILL" "SIGKILL message" || return 1
  # loomrun itself must reap them; the ranks' PR_SET_PDEATHSIG would hide a leak here.
  expect_no_grep "$TMP/err" "giving up" "ranks not reaped" || return 1
  expect_gone "$marker"
}

t_signals() {
  local marker="lrm-sig-$$" dir="$TMP/sig" rc
  mkdir -p "$dir"
  start_bg -n 3 "$RANK_PROG" signals "$dir" "$marker"
  [ -n "$LOOMRUN_PID" ] || { why="loomrun did not start"; return 1; }
  wait_until 10 files_exist "$dir/ready" 3 || { why="ranks not ready: $(ls "$dir")"; return 1; }
  kill -USR1 "$LOOMRUN_PID"
  wait_until 10 files_exist "$dir/usr1" 3 || { why="SIGUSR1 not forwarded: $(ls "$dir")"; return 1; }
  kill -0 "$LOOMRUN_PID" 2>/dev/null || { why="loomrun ended on SIGUSR1"; return 1; }
  kill -TERM "$LOOMRUN_PID"
  wait "$GUARD_PID"
  rc=$?
  files_exist "$dir/term" 3 || { why="SIGTERM not forwarded: $(ls "$dir")"; return 1; }
  expect_eq "$rc" 143 "exit status" || return 1
  expect_gone "$marker"
}

# A rank that ends early is reaped at once, while the others still run.
t_no_zombies() {
  local marker="lrm-zombie-$$" rc
  start_bg -n 3 "$RANK_PROG" exit 1 0 "$marker"
  [ -n "$LOOMRUN_PID" ] || { why="loomrun did not start"; return 1; }
  PPID_WANTED=$LOOMRUN_PID
  two_live_children() {
    local kids
    kids=$(children_of)
    [ "$(wc -l <<<"$kids")" = 2 ] && ! grep -q ' Z$' <<<"$kids"
  }
  wait_until 10 two_live_children || { why="children: $(children_of | tr '\n' ' ')"; return 1; }
  kill -TERM "$LOOMRUN_PID"
  wait "$GUARD_PID"
  rc=$?
  expect_eq "$rc" 143 "exit status" || return 1
  expect_gone "$marker"
}

# PR_SET_PDEATHSIG: the ranks die with loomrun even when it gets no chance to stop them.
t_kill9() {
  local marker="lrm-kill9-$$" dir="$TMP/kill9"
  mkdir -p "$dir"
  start_bg -n 3 "$RANK_PROG" signals "$dir" "$marker"
  [ -n "$LOOMRUN_PID" ] || { why="loomrun did not start"; return 1; }
  wait_until 10 files_exist "$dir/ready" 3 || { why="ranks not ready"; return 1; }
  kill -KILL "$LOOMRUN_PID"
  wait "$GUARD_PID" 2>/dev/null # bash would report the kill
  expect_gone "$marker"
}

t_usage() {
  local args
  while IFS= read -r args; do
    eval "timeout 30 \"\$LOOMRUN\" $args" >"$TMP/out" 2>"$TMP/err"
    expect_eq $? 2 "loomrun $args" || return 1
    [ -s "$TMP/err" ] || { why="loomrun $args: no message on stderr"; return 1; }
  done <<'EOF'
"$RANK_PROG" env
-p "$RANK_PROG" env
-n 0 "$RANK_PROG" env
-n 4097 "$RANK_PROG" env
-n two "$RANK_PROG" env
-n 2
-n 2 --bogus "$RANK_PROG" env
-n 2 -x NOEQUALS "$RANK_PROG" env
-n 2 -x LOOM_RANK=5 "$RANK_PROG" env
-n 2 -x LOOM_RUN_FD=5 "$RANK_PROG" env
-n 2 --timeout soon "$RANK_PROG" env
-n 2 --grace -1 "$RANK_PROG" env
-n 2 --port 70000 "$RANK_PROG" env
-n
EOF
  timeout 30 "$LOOMRUN" --help >"$TMP/out" 2>&1
  expect_eq $? 0 "--help exit status" || return 1
  expect_grep "$TMP/out" "usage: loomrun -n N" "--help text" || return 1
  timeout 30 "$LOOMRUN" --version >"$TMP/out" 2>&1
  expect_eq $? 0 "--version exit status" || return 1
}

t_not_found() {
  timeout 30 "$LOOMRUN" -n 2 "no-such-program-$$" >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 127 "exit status, not in PATH" || return 1
  expect_grep "$TMP/err" "no-such-program-$$.*No such file or directory" "message" || return 1
  printf 'not a program\n' >"$TMP/noexec"
  timeout 30 "$LOOMRUN" -n 2 "$TMP/noexec" >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 127 "exit status, not executable" || return 1
  expect_grep "$TMP/err" "noexec.*Permission denied" "message" || return 1
}

# ---- The first failing rank -------------------------------------------------
# rank_prog sends by hand what libloom sends when a peer's failure makes it fail, so these
# cases need no timing luck; cause_prog is the real thing, run many times.

# Runs `rank_prog race DIR BLAME` with loomrun stopped (SIGSTOP) while rank 0 exits 1 and rank 1
# dies of SIGSEGV, so that loomrun wakes to find both dead, as it does when it is slow to run,
# and the kernel hands it rank 0 first. Sets RC.
race_stopped() { # BLAME MARKER
  local dir="$TMP/race.$1" ok
  rm -rf "$dir" && mkdir -p "$dir"
  start_bg -n 2 "$RANK_PROG" race "$dir" "$1" "$2"
  [ -n "$LOOMRUN_PID" ] || { why="loomrun did not start"; return 1; }
  wait_until 10 files_exist "$dir/pid" 2 || { why="ranks not ready: $(ls "$dir")"; return 1; }
  kill -STOP "$LOOMRUN_PID"
  touch "$dir/go"
  wait_until 10 ranks_are_zombies "$dir" 2
  ok=$?
  kill -CONT "$LOOMRUN_PID"
  wait "$GUARD_PID"
  RC=$?
  [ $ok -eq 0 ] || { why="the ranks did not both die: $(cat "$TMP/err")"; return 1; }
}

# Without blame, a crash beats an exit among ranks that died together: a program that does
# not use Loom gets the old answer unless a rank crashed.
t_cause_crash_first() {
  race_stopped 0 "lrm-crash-$$" || return 1
  expect_eq "$RC" 139 "exit status" || return 1
  expect_grep "$TMP/err" "^loomrun: rank 1 was killed by signal 11 \(Segmentation fault\)$" \
    "message" || return 1
  expect_gone "lrm-crash-$$"
}

t_cause_blamed() {
  race_stopped 1 "lrm-blamed-$$" || return 1
  expect_eq "$RC" 139 "exit status" || return 1
  expect_grep "$TMP/err" \
    "^loomrun: rank 1 was killed by signal 11 \(Segmentation fault\); rank 0 failed because of it$" \
    "message" || return 1
  expect_gone "lrm-blamed-$$"
}

# Rank 0 blames rank 1 and exits at once; rank 1 dies 100 ms later. loomrun must wait for it
# before stopping anyone, and report it.
t_cause_wait() {
  local marker="lrm-wait-$$" dir="$TMP/wait"
  mkdir -p "$dir"
  timeout 30 "$LOOMRUN" -n 3 "$RANK_PROG" blame "$dir" 100 "$marker" >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 139 "exit status" || return 1
  expect_grep "$TMP/err" "^loomrun: rank 1 was killed by signal 11 \(Segmentation fault\); \
rank 0 failed because of it; stopping the other ranks$" "message" || return 1
  expect_gone "$marker"
}

# ... but not for long: a blamed rank that lives on does not hold the run.
# It would live on past the `timeout` around loomrun (status 124 then), so
# only loomrun's giving up on it ends the run with rank 0's status.
t_cause_wait_bounded() {
  local marker="lrm-bound-$$" dir="$TMP/bound"
  mkdir -p "$dir"
  timeout 30 "$LOOMRUN" -n 2 "$RANK_PROG" blame "$dir" 300000 "$marker" >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 1 "exit status" || return 1
  expect_grep "$TMP/err" "^loomrun: rank 0 exited with status 1; it blamed rank 1, which was \
still running; stopping the other ranks$" "message" || return 1
  expect_gone "$marker"
}

# The kernel names the sender: a message from a process that is no rank counts for nothing.
t_cause_not_a_rank() {
  local marker="lrm-stranger-$$" dir="$TMP/stranger"
  mkdir -p "$dir"
  timeout 30 "$LOOMRUN" -n 2 "$RANK_PROG" blame "$dir" 20000 child "$marker" \
    >"$TMP/out" 2>"$TMP/err"
  expect_eq $? 1 "exit status" || return 1
  expect_grep "$TMP/err" "^loomrun: rank 0 exited with status 1; stopping the other ranks$" \
    "message" || return 1
  expect_gone "$marker"
}

# A careless -x (LOOM_NSLOTS=8x) makes every Loom rank fail its init at once, naming the
# variable: loomrun ends with the rank's status instead of waiting for a hang.
t_bad_setting() {
  local marker="lrm-badset-$$" v
  for v in LOOM_NSLOTS=8x LOOM_TIMEOUT_MS=abc LOOM_BUFFSIZE=1T LOOM_DIRECT=yes; do
    timeout 30 "$LOOMRUN" -n 2 -x "$v" "$CAUSE_PROG" 9 "$marker" >"$TMP/out" 2>"$TMP/err"
    expect_eq $? 1 "exit status with $v" || return 1
    expect_grep "$TMP/err" "loomCommInitFromEnv failed: invalid argument \\(invalid setting: $v: " \
      "the init error with $v" || return 1
  done
  expect_gone "$marker"
}

ECHOED=0
CAUSE_RUNS=0
# RUNS runs of cause_prog under loomrun -n NP, rank VICTIM crashing: every one must report
# the crash and exit 139, whichever rank loomrun happened to reap first.
cause_runs() { # NP VICTIM RUNS WHAT
  local i rc marker="lrm-cause-$$"
  for ((i = 1; i <= $3; i++)); do
    timeout 30 "$LOOMRUN" -n "$1" --timeout 25 "$CAUSE_PROG" "$2" "$marker" \
      >"$TMP/out" 2>"$TMP/err"
    rc=$?
    CAUSE_RUNS=$((CAUSE_RUNS + 1))
    grep -q "because of it" "$TMP/err" && ECHOED=$((ECHOED + 1))
    if [ $rc -ne 139 ] ||
      ! grep -qE "^loomrun: rank $2 was killed by signal 11 \(Segmentation fault\)" "$TMP/err"; then
      why="$4, run $i of $3: exit status $rc; $(grep -v ' LOOM ' "$TMP/err" | head -c 600)"
      return 1
    fi
  done
  expect_gone "$marker"
}

t_cause_loom() {
  cause_runs 2 1 20 "-n 2" && cause_runs 3 1 20 "-n 3"
}

t_cause_loom_busy() {
  busy_start
  cause_runs 2 1 20 "-n 2, busy cores" && cause_runs 3 1 20 "-n 3, busy cores"
  local rc=$?
  busy_stop
  return $rc
}

run_case "a bad setting ends every rank at init" t_bad_setting
run_case "environment of every rank" t_env
run_case "--host and --port" t_host_port
run_case "--prefix on stdout and stderr" t_prefix
run_case "a rank exiting 3 stops the others, exit 3" t_rank_fails
run_case "a rank killed by SIGKILL gives 137" t_rank_killed
run_case "--timeout stops stubborn ranks, exit 124" t_timeout
run_case "SIGUSR1 and SIGTERM are forwarded" t_signals
run_case "early exits are reaped at once" t_no_zombies
run_case "ranks die with loomrun on kill -9" t_kill9
run_case "bad usage gives 2" t_usage
run_case "a missing program gives 127" t_not_found
run_case "a crash beats an exit among ranks reaped together" t_cause_crash_first
run_case "a rank that failed because of another is not reported" t_cause_blamed
run_case "loomrun waits for a blamed rank to die" t_cause_wait
run_case "... but not for as long as it lives" t_cause_wait_bounded
run_case "blame from a process that is no rank is ignored" t_cause_not_a_rank
run_case "a Loom rank's crash is reported, 40 runs" t_cause_loom
run_case "a Loom rank's crash is reported, 40 runs on busy cores" t_cause_loom_busy
echo "note: in $ECHOED of $CAUSE_RUNS Loom runs loomrun reaped a rank that failed because of the crash along with it"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
