#!/usr/bin/env bash
# storm.sh - kill storms: COUNT randomized faults, each in a fresh communicator of storm_rank
# processes (storm_rank.c) in network-namespace "hosts" with their own /dev/shm (the network
# suite's machinery, tests/net/net_lib.sh).
#
#   usage: storm.sh STORM_RANK COUNT [SEED]
#
# Each fault draws, from SEED and its number: 2 to 8 ranks; one rank per process, or 2 to 3
# thread ranks per process; one host (shared memory, or local between threads) or two (sockets
# between them); calls alone or two in a group; on a host stream or not; SIGKILL or SIGSTOP;
# the process struck; a moment 0 to 1 s after every rank made its first call. Every rank of
# the other processes must then see a call fail; the time from the strike to the last of them
# is the fault's latency. Reported per fault and in a summary line, and failing the run:
#   hangs          a survivor still in a call 30 s after the strike (goal 0)
#   latency        over the goal: 5 s on one host, LOOM_TIMEOUT_MS + 5 s across hosts
#   leaks          /dev/shm entries left in a host, descriptors or threads a survivor still
#                  holds after destroying its communicator (goal 0 each)
#   wrong          a call that returned loomSuccess with a wrong sum
# The communicators' timeout is STORM_TIMEOUT_MS (3000): a stopped process is noticed when a
# survivor's wait reaches it. Exits 77 (SKIPPED, with the reason) where namespaces cannot be
# made; 1 when any fault failed; 0 otherwise.
set -u

if [ $# -lt 2 ]; then
  echo "usage: $0 STORM_RANK COUNT [SEED]" >&2
  exit 2
fi
STORM_RANK=$1
COUNT=$2
SEED=${3:-$(date +%s)}
TMO_MS=${STORM_TIMEOUT_MS:-3000}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# shellcheck source=tests/net/net_lib.sh
source "$HERE/../net/net_lib.sh"
net_use_prefix loomstorm
say() { printf '%s\n' "storm: $*"; }

if ! why=$(net_usable); then
  say "SKIPPED: $why"
  exit "$NET_EXIT_SKIP"
fi
NET_WORK=$(mktemp -d "/tmp/$NET_PREFIX-$$.XXXXXX")
net_traps
net_up 2
# Fixed tuning constants: every namespace is a new host to the tuner's cache, and calibrating
# at every init would dominate the storm.
printf 'step_us 20\ncopy_gbps 5\nreduce_gbps 5\nncpus %s\n' "$(nproc)" >"$NET_WORK/tuning.txt"

faults=0 failed=0 hangs=0 leak_shm=0 leak_fd=0 leak_thread=0 wrong=0 over=0
lat_shm=() lat_net=()

# wait_pids PID...: waits for each (their wrappers end them after a limit); RC[pid] is its
# status (124 or 137: killed by the wrapper).
declare -A RC
wait_pids() {
  local p
  for p in "$@"; do
    RC[$p]=0
    wait "$p" 2>/dev/null || RC[$p]=$?
  done
}

# fault K: one fault; prints one line; adds to the counters.
fault() {
  local k=$1
  RANDOM=$(((SEED * 7919 + k) % 32768))
  local n=$((2 + RANDOM % 7)) per=1 hosts=$((1 + RANDOM % 2)) group=$((RANDOM % 2))
  local stream=$((RANDOM % 2)) sig=KILL delay=$((RANDOM % 1000))
  [ $((RANDOM % 2)) = 1 ] && sig=STOP
  [ $((RANDOM % 2)) = 1 ] && per=$((2 + RANDOM % 2))
  [ "$per" -ge "$n" ] && per=$((n - 1))
  local nproc=$(((n + per - 1) / per))
  local victim=$((RANDOM % nproc)) dir="$NET_WORK/f$k" p first t h
  local what="n=$n per_process=$per hosts=$hosts group=$group stream=$stream SIG$sig victim=process$victim delay=${delay}ms"
  mkdir -p "$dir"
  local -a pids=()
  for ((p = 0; p < nproc; p++)); do
    first=$((p * per))
    t=$((n - first < per ? n - first : per))
    h=$((hosts == 2 ? p % 2 : 0))
    local -a args=(--nranks "$n" --first "$first" --threads "$t" --id-file "$dir/id" --ready-dir "$dir"
      --seed "$((SEED * 1000003 + k))" --max-seconds 30)
    [ "$group" = 1 ] && args+=(--group)
    [ "$stream" = 1 ] && args+=(--stream)
    host_spawn "$h" 60 env LOOM_TIMEOUT_MS="$TMO_MS" LOOM_TUNING_FILE="$NET_WORK/tuning.txt" \
      XDG_CACHE_HOME="$NET_WORK/cache" LOOM_DEBUG=WARN "$STORM_RANK" "${args[@]}" >"$dir/p$p.out" 2>&1
    pids[p]=$SPAWN_PID
  done
  # Every rank made a call (or a process ended early: a set-up failure).
  local end=$(($(date +%s) + 30)) r ready
  while :; do
    ready=1
    for ((r = 0; r < n; r++)); do [ -e "$dir/ready.$r" ] || ready=0; done
    [ $ready = 1 ] && break
    for ((p = 0; p < nproc; p++)); do kill -0 "${pids[$p]}" 2>/dev/null || ready=x; done
    [ $ready = x ] || [ "$(date +%s)" -ge "$end" ] && break
    sleep 0.02
  done
  faults=$((faults + 1))
  if [ "$ready" != 1 ]; then
    failed=$((failed + 1))
    say "fault $k ($what): FAIL: the ranks never all started: $(cat "$dir"/p*.out 2>/dev/null | head -5 | tr '\n' ' ')"
    net_scrub
    return
  fi
  local vpid
  vpid=$(cat "$dir/ready.$((victim * per))")
  sleep "$(printf '0.%03d' "$delay")"
  local strike
  strike=$(now_ms)
  kill -"$sig" "$vpid" 2>/dev/null
  local -a survivors=()
  for ((p = 0; p < nproc; p++)); do [ "$p" != "$victim" ] && survivors+=("${pids[$p]}"); done
  wait_pids "${survivors[@]}"
  [ "$sig" = STOP ] && kill -KILL "$vpid" 2>/dev/null
  wait_pids "${pids[$victim]}"
  # The verdict.
  local why="" last=0 at code fa fb ta tb
  for ((p = 0; p < nproc; p++)); do
    [ "$p" = "$victim" ] && continue
    code=${RC[${pids[$p]}]}
    case $code in
      0) ;;
      1) why+="process $p: a wrong sum; " wrong=$((wrong + 1)) ;;
      4 | 124 | 137) why+="process $p hung (exit $code); " hangs=$((hangs + 1)) ;;
      5) why+="process $p leaked: $(grep -h 'STORM_PROC\|STORM_LEAK' "$dir/p$p.out" | tr '\n' ' '); "
         # STORM_PROC fds=A->B threads=C->D
         read -r fa fb ta tb <<<"$(sed -n 's/^STORM_PROC fds=\([0-9]*\)->\([0-9]*\) threads=\([0-9]*\)->\([0-9]*\).*/\1 \2 \3 \4/p' "$dir/p$p.out")"
         [ "${fb:-0}" -gt "${fa:-0}" ] && leak_fd=$((leak_fd + 1))
         [ "${tb:-0}" -gt "${ta:-0}" ] && leak_thread=$((leak_thread + 1)) ;;
      *) why+="process $p exited $code: $(grep -h 'STORM_INIT\|storm_rank' "$dir/p$p.out" | head -2 | tr '\n' ' '); " ;;
    esac
    for at in $(sed -n 's/^STORM rank=[0-9]* rc=[0-9]* at_ms=\([0-9]*\).*/\1/p' "$dir/p$p.out"); do
      [ "$at" -gt "$last" ] && last=$at
    done
  done
  local left
  if ! left=$(net_leftovers); then
    why+="left behind: $left; "
    echo "$left" | grep -q "/dev/shm" && leak_shm=$((leak_shm + 1))
  fi
  local lat=$((last > 0 ? last - strike : -1)) goal=5000
  [ "$hosts" = 2 ] && goal=$((TMO_MS + 5000))
  if [ -z "$why" ]; then
    if [ "$lat" -lt 0 ] || [ "$lat" -gt "$goal" ]; then
      why="the last survivor's error came ${lat} ms after the strike (goal ${goal} ms)"
      over=$((over + 1))
    fi
  fi
  if [ "$hosts" = 2 ]; then lat_net+=("$lat"); else lat_shm+=("$lat"); fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    say "fault $k ($what): FAIL: $why"
    for ((p = 0; p < nproc; p++)); do sed "s/^/    p$p: /" "$dir/p$p.out" | tail -n 8; done
  else
    say "fault $k ($what): every survivor failed, the last ${lat} ms after the strike"
  fi
  net_scrub
  rm -rf "$dir"
}

# max and median of a list of numbers.
stats() {
  [ $# -eq 0 ] && { echo "none"; return; }
  printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {printf "median %d ms, max %d ms (%d faults)", v[int((NR + 1) / 2)], v[NR], NR}'
}

say "seed $SEED, $COUNT faults, LOOM_TIMEOUT_MS=$TMO_MS"
start=$(date +%s)
for ((k = 1; k <= COUNT; k++)); do fault "$k"; done
say "$faults faults in $(($(date +%s) - start)) s (seed $SEED): $failed failed; hangs $hangs;" \
  "over the latency goal $over; wrong sums $wrong; leaks: /dev/shm $leak_shm, descriptors $leak_fd," \
  "threads $leak_thread"
say "latency, one host: $(stats "${lat_shm[@]}"); across hosts: $(stats "${lat_net[@]}")"
[ "$failed" -eq 0 ]
