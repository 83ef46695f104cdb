#!/usr/bin/env bash
# net_suite.sh - Loom between "hosts" that are network namespaces on one
# machine, joined by a bridge (net_lib.sh). Needs root; where namespaces
# cannot be made it says why and exits 77 (SKIPPED), never passes silently.
#
#   net_suite.sh NET_CHECK LOOM_INFO CASE
#
# CASE (each one ctest test, label "net"; docs/TESTING.md):
#   bootstrap          ranks of 4 hosts (IPv4) and 2 hosts (IPv6) join and leave
#   stranger_bootstrap garbage, a bad header and a wrong-secret hello at rank
#                      0's rendezvous port; the communicator forms and works
#   matrix_2x2 matrix_4x1 matrix_ipv6
#                      net_check's whole collective matrix, unforced and with
#                      LOOM_ALGO forced to each family (and, with several
#                      ranks per host, to the hierarchical all-reduce)
#   loss               the matrix over a link that drops 1% of packets (nftables)
#   tbf                the matrix over a link held to 1 Gbit/s (tc tbf)
#   linkdown kill      a host's link taken down / a rank SIGKILLed mid
#                      all-reduce: every other rank fails with loomRemoteError
#                      naming the peer (LOOM_TIMEOUT_MS is never reached)
#   stranger_transport strangers at the socket transport's listening ports
#                      while the communicator lives; it keeps working
#   sweep              only removes what crashed runs left (net_selftest.sh)
# LOOM_NET_KEEP=1 keeps the logs. Prints PASS/FAIL/SKIP per sub-case and a
# closing "N passed, N failed, N skipped" line. Exit 0, 1 (a failure) or 77.
# shellcheck disable=SC2034 # variables read by the sourced net_lib.sh and net_faults.sh
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 NET_CHECK LOOM_INFO CASE" >&2
  exit 2
fi
NET_CHECK=$(realpath "$1")
LOOM_INFO=$(realpath "$2")
CASE=$3
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=net_lib.sh
source "$HERE/net_lib.sh"

FAULT_TIMEOUT_MS=3600000 # LOOM_TIMEOUT_MS of the fault cases: never reached
FAULT_HEARTBEAT_MS=5000  # LOOM_HEARTBEAT_MS of the fault cases

passed=0
failed=0
skipped=0
pass() { say "PASS $CASE/$1${2:+ ($2)}"; passed=$((passed + 1)); }
fail() { say "FAIL $CASE/$1: $2"; failed=$((failed + 1)); }
skip() { say "SKIP $CASE/$1: $2"; skipped=$((skipped + 1)); }

finish() {
  echo "net_suite $CASE: $passed passed, $failed failed, $skipped skipped"
  [ $failed -gt 0 ] && exit 1
  [ $passed -eq 0 ] && [ $skipped -gt 0 ] && exit $NET_EXIT_SKIP
  exit 0
}

# ---- Set-up shared by the cases -------------------------------------------------

new_secret() { od -An -N8 -tx8 /dev/urandom | tr -d ' \n'; }

# The tuner's constants, measured once per case in host 0 by loom_info (each
# namespace is a new host to the cache, and 4 ranks calibrating at once on a
# small machine take many seconds); a fixed set if the machine was too busy.
tuning_prepare() {
  NET_TUNING="$NET_WORK/tuning.txt"
  local cached
  tmo 60 ip netns exec "$(host_ns 0)" env XDG_CACHE_HOME="$NET_WORK/cache" "$LOOM_INFO" --tuning \
    >/dev/null 2>&1 || true
  cached=$(ls "$NET_WORK"/cache/loom/tuning-*.txt 2>/dev/null | sed -n 1p || true)
  if [ -n "$cached" ]; then
    cp "$cached" "$NET_TUNING"
  else
    printf 'step_us 20\ncopy_gbps 5\nreduce_gbps 5\nncpus %s\n' "$(nproc)" >"$NET_TUNING"
  fi
}

# topo NHOSTS RANKS_PER_HOST FAMILY: the network and the rank layout.
PORT=29500
topo() {
  net_up "$1" "$3"
  NET_RPH=$2
  NET_NRANKS=$(($1 * $2))
  tuning_prepare
}
next_root() { # a fresh port for every run, so nothing waits on TIME_WAIT
  PORT=$((PORT + 1))
  if [ "$NET_FAMILY" = 6 ]; then NET_ROOT="[$(host_addr 0)]:$PORT"; else NET_ROOT="$(host_addr 0):$PORT"; fi
}

# ---- A run of every rank --------------------------------------------------------

# run_ranks TAG LIMIT [net_check args...]: starts ranks 0..N-1 and waits for
# them; returns 0 when every rank exited 0 and nothing was left behind, and
# otherwise sets WHY.
WHY=""
run_ranks() {
  local tag=$1 r
  NET_LIMIT=$2
  shift 2
  next_root
  NET_SECRET=$(new_secret)
  RANK_PIDS=()
  for ((r = 0; r < NET_NRANKS; r++)); do rank_start "$tag" "$r" "$@"; done
  ranks_wait
  WHY=""
  for ((r = 0; r < NET_NRANKS; r++)); do
    case ${RANK_RC[$r]} in
      0) ;;
      124 | 137) WHY+="rank $r hung (killed after ${NET_LIMIT} s); " ;;
      *) WHY+="rank $r exited ${RANK_RC[$r]}; " ;;
    esac
  done
  local left
  if ! left=$(net_leftovers); then WHY+="left behind: $left; "; fi
  [ -z "$WHY" ]
}

# matrix TAG LIMIT ALGO [net_check args...]: one run of the matrix with
# LOOM_ALGO=ALGO ("" unforced); checks that a forced family was never
# refused for a collective it was asked to serve.
matrix() {
  local tag=$1 limit=$2 algo=$3 t0
  shift 3
  NET_ENV=()
  [ -n "$algo" ] && NET_ENV=(LOOM_ALGO="$algo")
  t0=$(date +%s)
  if run_ranks "$tag" "$limit" "$@"; then
    if [ -n "$algo" ] && grep -h "cannot serve" "$NET_WORK/$tag".r*.log >/dev/null 2>&1; then
      fail "$tag" "LOOM_ALGO=$algo fell back: $(grep -h 'cannot serve' "$NET_WORK/$tag".r0.log | sed -n 1,3p)"
    else
      pass "$tag" "LOOM_ALGO=${algo:-unforced}, $NET_NRANKS ranks, $(($(date +%s) - t0)) s"
    fi
    ranks_show "$tag"
  else
    fail "$tag" "LOOM_ALGO=${algo:-unforced}: $WHY"
    ranks_show "$tag"
    ranks_dump "$tag"
  fi
  net_scrub
}

# The runs of one topology: unforced, then each family forced, on the
# collectives it serves (algos.c; docs/DESIGN.md "Choosing an algorithm"; the
# unforced run covers the rest); each with the large-count subset.
matrix_families() {
  local name=$1
  matrix "$name-unforced" 240 "" --big
  matrix "$name-ring" 180 ring --big --only allreduce,broadcast,reduce,allgather,reducescatter
  matrix "$name-tree" 180 tree --big --only allreduce,broadcast,reduce
  matrix "$name-rhd" 180 rhd --big --only allreduce,allgather,reducescatter
  matrix "$name-doubling" 180 allreduce:doubling --big --only allreduce
  matrix "$name-pairwise" 180 alltoall:pairwise --big --only alltoall
  matrix "$name-bruck" 180 alltoall:bruck --big --only alltoall
  # Two levels need several ranks on each host (hier.c).
  if [ "$NET_RPH" -gt 1 ]; then matrix "$name-hier" 180 allreduce:hier --big --only allreduce; fi
}

# ---- Cases --------------------------------------------------------------------

case_bootstrap() {
  topo 4 1 4
  NET_ENV=()
  if run_ranks boot-4x1 60 --init-only; then pass boot-4x1 "4 hosts, IPv4"; else
    fail boot-4x1 "$WHY"
    ranks_dump boot-4x1
  fi
  net_scrub
  net_cleanup_hosts
  topo 2 1 6
  if run_ranks boot-ipv6 60 --init-only; then pass boot-ipv6 "2 hosts, IPv6 only, LOOM_ROOT=$NET_ROOT"; else
    fail boot-ipv6 "$WHY"
    ranks_dump boot-ipv6
  fi
}

case_matrix() { # hosts ranks-per-host family
  topo "$1" "$2" "$3"
  if [ "$3" = 6 ]; then
    matrix "ipv6-$1x$2-unforced" 240 "" --big
    matrix "ipv6-$1x$2-ring" 120 ring --only allreduce,broadcast,reduce,allgather,reducescatter
  else
    matrix_families "$1x$2"
  fi
}

case_loss() {
  command -v nft >/dev/null 2>&1 || { skip loss "nftables (nft) is not installed (scripts/deps.sh installs it)"; return; }
  topo 4 1 4
  local ns err
  ns=$(host_ns 1)
  # Both directions of host 1's link lose 1% of their packets.
  if ! err=$(tmo 10 ip netns exec "$ns" nft -f - 2>&1 <<'EOF'
table inet loomloss {
  chain in { type filter hook input priority 0; numgen random mod 100 < 1 counter drop; }
  chain out { type filter hook output priority 0; numgen random mod 100 < 1 counter drop; }
}
EOF
  ); then
    skip loss "nftables cannot filter here: $err"
    return
  fi
  matrix loss-4x1 240 ""
  matrix loss-4x1-big 240 "" --big --only allreduce,alltoall,sendrecv
  local dropped
  dropped=$(tmo 10 ip netns exec "$ns" nft list table inet loomloss | grep -o 'packets [0-9]*' |
    awk '{s += $2} END {print s + 0}')
  if [ "$dropped" -gt 0 ]; then pass loss-dropped "$dropped packets dropped on host 1's link"; else
    fail loss-dropped "nftables dropped no packet: the lossy link was never exercised"
  fi
}

case_tbf() {
  topo 2 2 4
  local br="$NET_RUN-br" err
  # Host 1's link, both ways: the bridge's end (towards host 1) and eth0.
  if ! err=$(tmo 10 ip netns exec "$br" tc qdisc add dev vh1 root tbf rate 1gbit burst 128kb latency 50ms 2>&1) ||
    ! err=$(tmo 10 ip netns exec "$(host_ns 1)" tc qdisc add dev eth0 root tbf rate 1gbit burst 128kb latency 50ms 2>&1); then
    skip tbf "tc cannot add a tbf qdisc here: $err"
    return
  fi
  matrix tbf-2x2 240 "" --big
  local sent
  sent=$(tmo 10 ip netns exec "$br" tc -s qdisc show dev vh1 | grep -o 'Sent [0-9]* bytes' | awk '{print $2}' | sed -n 1p)
  if [ "${sent:-0}" -gt 1000000 ]; then pass tbf-shaped "$sent bytes went through the 1 Gbit/s qdisc"; else
    fail tbf-shaped "only ${sent:-0} bytes went through the qdisc: the link was not exercised"
  fi
}

net_cleanup_hosts() { # tears the current topology down (a case with two)
  local i
  net_scrub
  for ((i = ${#NET_NS[@]} - 1; i >= 0; i--)); do tmo 10 ip netns del "${NET_NS[$i]}" 2>/dev/null || true; done
  NET_NS=()
  rm -rf "${NET_SHM:?}"/h*
}

# shellcheck source=net_faults.sh
source "$HERE/net_faults.sh"

# ---- Main ---------------------------------------------------------------------

net_traps
if ! why=$(net_usable); then
  say "SKIPPED: $why"
  skip "$CASE" "$why"
  finish
fi
stale_sweep
if [ "$CASE" = sweep ]; then # only the sweep (net_selftest.sh)
  echo "net_suite sweep: done"
  exit 0
fi
NET_WORK=$(mktemp -d "/tmp/$NET_PREFIX-$$.XXXXXX")
mkdir -p "$NET_WORK/cache"
case $CASE in
  bootstrap) case_bootstrap ;;
  stranger_bootstrap) case_stranger_bootstrap ;;
  matrix_2x2) case_matrix 2 2 4 ;;
  matrix_4x1) case_matrix 4 1 4 ;;
  matrix_ipv6) case_matrix 3 1 6 ;;
  loss) case_loss ;;
  tbf) case_tbf ;;
  linkdown) case_linkdown ;;
  kill) case_kill ;;
  stranger_transport) case_stranger_transport ;;
  *)
    echo "unknown case $CASE" >&2
    exit 2
    ;;
esac
finish
