# shellcheck shell=bash disable=SC2034
# net_lib.sh - the machinery of the network suite, sourced by net_suite.sh:
# "hosts" that are network namespaces joined by a Linux bridge, ranks of
# net_check launched in them, and a cleanup that always runs.
#
# Layout of one run (every name carries the harness's pid, so concurrent and
# crashed runs never collide):
#   namespace loomnet-<pid>-br   holds the bridge br0 and the bridge ends vh<k>
#                                of the veth pairs (the root namespace is not
#                                touched at all)
#   namespace loomnet-<pid>-h<k> host k: lo and eth0 (10.77.0.<k+1>/24, or
#                                fd77::<k+1>/64 only, for the IPv6 case)
#   /dev/shm/.loomnet-<pid>/h<k> host k's /dev/shm: every rank of host k runs
#                                with it bind-mounted on /dev/shm (in the mount
#                                namespace `ip netns exec` gives it), so what a
#                                rank leaves in /dev/shm is seen exactly, and
#                                other tests' /dev/shm/loom-* are never touched
#   $NET_WORK (/tmp/loomnet-<pid>.*) logs and control files
# cleanup kills every process in the run's namespaces, deletes the namespaces
# (which removes the veths, the bridge, qdiscs and nft tables with them) and the
# directories; stale_sweep does the same for runs whose harness is gone.
# Needs bash, iproute2 (ip, ss, tc) and coreutils; nftables for the loss case.

NET_PREFIX=loomnet
NET_RUN="$NET_PREFIX-$$"
NET_SHM="/dev/shm/.$NET_PREFIX-$$"
NET_WORK=""
NET_NS=()          # namespaces this run made, the bridge's first
NET_PIDS=()        # background processes this run started
NET_CLEANED=0
NET_EXIT_SKIP=77

say() { printf '%s\n' "net: $*"; }
# Every external command is bounded: tmo SECONDS cmd...
tmo() {
  local s=$1
  shift
  timeout -k 2 "$s" "$@"
}
now_ms() { date +%s%3N; }

# ---- Cleanup ------------------------------------------------------------------

ns_kill_all() { # ns: SIGKILL every process inside it
  local ns=$1 pids
  pids=$(tmo 10 ip netns pids "$ns" 2>/dev/null || true)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
}

net_cleanup() {
  # A subshell (a background rank that failed to start, say) may run the
  # EXIT trap too: only the harness itself cleans up.
  [ "$BASHPID" = "$$" ] || return 0
  [ "$NET_CLEANED" = 1 ] && return 0
  NET_CLEANED=1
  trap '' INT TERM
  local p ns
  for p in "${NET_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for ns in "${NET_NS[@]}"; do ns_kill_all "$ns"; done
  for p in "${NET_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  # The host namespaces first, then the bridge's.
  for ((i = ${#NET_NS[@]} - 1; i >= 0; i--)); do
    tmo 10 ip netns del "${NET_NS[$i]}" 2>/dev/null || true
  done
  rm -rf "$NET_SHM"
  if [ -n "$NET_WORK" ] && [ -d "$NET_WORK" ]; then
    if [ "${LOOM_NET_KEEP:-0}" = 1 ]; then say "kept the logs in $NET_WORK"; else rm -rf "$NET_WORK"; fi
  fi
  return 0
}

# Removes what crashed runs (harness killed with SIGKILL, machine reset of a
# namespace-less kind) left: namespaces, /dev/shm dirs and work dirs whose
# harness pid is no longer a net_suite.
harness_alive() { # pid
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep net_ >/dev/null
}
stale_sweep() {
  local ns pid d
  for ns in $(tmo 10 ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NET_PREFIX-[0-9]*-" || true); do
    pid=${ns#"$NET_PREFIX"-}
    pid=${pid%%-*}
    case $pid in '' | *[!0-9]*) continue ;; esac
    [ "$pid" = "$$" ] && continue
    harness_alive "$pid" && continue
    say "removing namespace $ns left by a run that is gone (pid $pid)"
    ns_kill_all "$ns"
    tmo 10 ip netns del "$ns" 2>/dev/null || true
  done
  for d in /dev/shm/."$NET_PREFIX"-* /tmp/"$NET_PREFIX"-*; do
    [ -e "$d" ] || continue
    pid=${d##*/}
    pid=${pid#.}
    pid=${pid#"$NET_PREFIX"-}
    pid=${pid%%.*}
    case $pid in '' | *[!0-9]*) continue ;; esac # not one of a run's names
    [ "$pid" = "$$" ] && continue
    harness_alive "$pid" || rm -rf "$d"
  done
}

net_traps() {
  trap net_cleanup EXIT
  trap 'say "interrupted"; exit 130' INT
  trap 'say "terminated"; exit 143' TERM
}

# ---- Can this machine do it? ---------------------------------------------------

# Prints why not and returns 1 when namespaces cannot be made here.
net_usable() {
  if [ "$(id -u)" != 0 ]; then
    echo "the net suite needs root to make network namespaces (running as uid $(id -u))"
    return 1
  fi
  local t
  for t in ip ss timeout mount; do
    command -v "$t" >/dev/null 2>&1 || { echo "$t is not installed (scripts/deps.sh installs it)"; return 1; }
  done
  local probe="$NET_RUN-probe" err rc=0
  if ! err=$(tmo 10 ip netns add "$probe" 2>&1); then
    echo "'ip netns add' fails here: $err"
    return 1
  fi
  if ! err=$(tmo 10 ip netns exec "$probe" sh -c "mkdir -p '$NET_SHM/probe' && mount --bind '$NET_SHM/probe' /dev/shm" 2>&1); then
    echo "cannot bind-mount a private /dev/shm inside a namespace: $err"
    rc=1
  fi
  tmo 10 ip netns del "$probe" 2>/dev/null || true
  rm -rf "$NET_SHM"
  return $rc
}

# ---- Topology -------------------------------------------------------------------

NET_HOSTS=0
NET_FAMILY=4
host_ns() { echo "$NET_RUN-h$1"; }
host_addr() { # k: the address ranks dial
  if [ "$NET_FAMILY" = 6 ]; then echo "fd77::$(($1 + 1))"; else echo "10.77.0.$(($1 + 1))"; fi
}

# net_up NHOSTS [4|6]: the bridge and NHOSTS hosts, each with eth0 on it.
net_up() {
  NET_HOSTS=$1
  NET_FAMILY=${2:-4}
  local br="$NET_RUN-br" k ns
  tmo 10 ip netns add "$br"
  NET_NS+=("$br")
  tmo 10 ip -n "$br" link set lo up
  tmo 10 ip -n "$br" link add br0 type bridge
  tmo 10 ip -n "$br" link set br0 up
  for ((k = 0; k < NET_HOSTS; k++)); do
    ns=$(host_ns "$k")
    tmo 10 ip netns add "$ns"
    NET_NS+=("$ns")
    tmo 10 ip -n "$ns" link set lo up
    tmo 10 ip -n "$br" link add "vh$k" type veth peer name eth0 netns "$ns"
    tmo 10 ip -n "$br" link set "vh$k" master br0
    tmo 10 ip -n "$br" link set "vh$k" up
    if [ "$NET_FAMILY" = 6 ]; then
      tmo 10 ip -n "$ns" -6 addr add "$(host_addr "$k")/64" dev eth0 nodad
    else
      tmo 10 ip -n "$ns" addr add "$(host_addr "$k")/24" dev eth0
    fi
    tmo 10 ip -n "$ns" link set eth0 up
    mkdir -p "$NET_SHM/h$k"
  done
}

# Runs a command inside host k (for the harness's own probes and strangers).
in_host() {
  local k=$1
  shift
  ip netns exec "$(host_ns "$k")" "$@"
}

# ---- Ranks -------------------------------------------------------------------------

# Filled by the caller before rank_start: NET_NRANKS, NET_RPH (ranks per host),
# NET_ROOT (LOOM_ROOT), NET_SECRET, NET_TIMEOUT_MS, NET_LIMIT (seconds a rank
# may live), NET_ENV (extra VAR=value words), NET_CHECK, NET_TUNING.
NET_TIMEOUT_MS=60000
NET_ENV=()
NET_TUNING=""
RANK_PIDS=()
rank_host() { echo $(($1 / NET_RPH)); }

# rank_start TAG RANK [net_check args...]: starts one rank in its host, output
# in $NET_WORK/TAG.r<RANK>.out, Loom's log in TAG.r<RANK>.log.
rank_start() {
  local tag=$1 r=$2
  shift 2
  local h
  h=$(rank_host "$r")
  env LOOM_RANK="$r" LOOM_WORLD_SIZE="$NET_NRANKS" LOOM_ROOT="$NET_ROOT" LOOM_SECRET="$NET_SECRET" \
    LOOM_TIMEOUT_MS="$NET_TIMEOUT_MS" LOOM_DEBUG=INFO LOOM_DEBUG_FILE="$NET_WORK/$tag.r$r.log" \
    LOOM_TUNING_FILE="$NET_TUNING" XDG_CACHE_HOME="$NET_WORK/cache" "${NET_ENV[@]}" \
    timeout -k 5 "$NET_LIMIT" ip netns exec "$(host_ns "$h")" \
    sh -c 'mount --bind "$1" /dev/shm || exit 70; shift; exec "$@"' sh "$NET_SHM/h$h" \
    "$NET_CHECK" "$@" >"$NET_WORK/$tag.r$r.out" 2>&1 &
  RANK_PIDS[$r]=$!
  NET_PIDS+=($!)
}

# ranks_wait: waits for every rank started; RANK_RC[r] is its exit status.
RANK_RC=()
ranks_wait() {
  local r
  for r in "${!RANK_PIDS[@]}"; do
    RANK_RC[$r]=0
    wait "${RANK_PIDS[$r]}" 2>/dev/null || RANK_RC[$r]=$? # (no "Killed" notes)
  done
}

# Shows what the ranks of TAG said: every line of rank 0 and the failures of all.
ranks_show() {
  local tag=$1 r
  sed 's/^/    /' "$NET_WORK/$tag.r0.out" 2>/dev/null | grep -v "^    net_check rank 0/[0-9]*: joined" || true
  for ((r = 1; r < NET_NRANKS; r++)); do
    grep -h "WRONG\|FAIL\|FAULT\|init failed" "$NET_WORK/$tag.r$r.out" 2>/dev/null | sed -n 1,20p | sed 's/^/    /' || true
  done
}

# On a failure: the tails of every rank's output and log.
ranks_dump() {
  local tag=$1 f
  for f in "$NET_WORK/$tag".r*.out "$NET_WORK/$tag".r*.log; do
    [ -s "$f" ] || continue
    echo "    --- ${f##*/} (last 15 lines)"
    tail -n 15 "$f" | sed 's/^/    /'
  done
}

# Nothing left behind: no process in any host, every host's /dev/shm empty.
# Prints what is left and returns 1 if anything is.
net_leftovers() {
  local k left=0 pids files
  for ((k = 0; k < NET_HOSTS; k++)); do
    pids=$(tmo 10 ip netns pids "$(host_ns "$k")" 2>/dev/null || true)
    if [ -n "$pids" ]; then
      echo "host $k still runs: $(ps -o pid=,comm= -p "$(echo $pids | tr ' ' ,)" 2>/dev/null | tr '\n' ' ')"
      left=1
    fi
    files=$(ls -A "$NET_SHM/h$k" 2>/dev/null || true)
    if [ -n "$files" ]; then
      echo "host $k's /dev/shm keeps: $(echo $files)"
      left=1
    fi
  done
  return $left
}

# Empties the hosts after a sub-case (so one sub-case's debris cannot fail the next).
net_scrub() {
  local k
  for ((k = 0; k < NET_HOSTS; k++)); do
    ns_kill_all "$(host_ns "$k")"
    rm -rf "${NET_SHM:?}/h$k/"* "$NET_SHM/h$k/".[!.]* 2>/dev/null || true
  done
}

# A port is listening in host k.
port_listening() { # k port
  [ -n "$(tmo 5 ip netns exec "$(host_ns "$1")" ss -Hltn "sport = :$2" 2>/dev/null)" ]
}
wait_listening() { # k port seconds
  local end=$(($(date +%s) + $3))
  while [ "$(date +%s)" -lt "$end" ]; do
    port_listening "$1" "$2" && return 0
    sleep 0.05
  done
  return 1
}
wait_files() { # seconds file...
  local end=$(($(date +%s) + $1)) f missing
  shift
  while :; do
    missing=0
    for f in "$@"; do [ -e "$f" ] || missing=1; done
    [ $missing = 0 ] && return 0
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.05
  done
}

# ---- For other harnesses (perf/compare/run --net) ----------------------------------
# Nothing above calls these; the net suite runs as before.

# net_use_prefix PREFIX: this run's namespaces, /dev/shm directory and work
# directory are named PREFIX-<pid>... instead of loomnet-<pid>..., so that the
# net suite's stale_sweep (which takes only loomnet-* names) never removes them
# while another harness is using them. Call it before net_usable and net_up.
net_use_prefix() {
  NET_PREFIX=$1
  NET_RUN="$NET_PREFIX-$$"
  NET_SHM="/dev/shm/.$NET_PREFIX-$$"
}

# host_spawn K LIMIT CMD...: starts CMD in the background inside host k, as
# rank_start starts a rank (host k's own /dev/shm bind-mounted on /dev/shm,
# killed after LIMIT seconds) but adding nothing of Loom's: the caller gives any
# environment through env and redirects the call's output. The pid (of the
# timeout wrapper) is left in SPAWN_PID and added to NET_PIDS.
SPAWN_PID=""
host_spawn() {
  local k=$1 limit=$2
  shift 2
  timeout -k 5 "$limit" ip netns exec "$(host_ns "$k")" \
    sh -c 'mount --bind "$1" /dev/shm || exit 70; shift; exec "$@"' sh "$NET_SHM/h$k" "$@" &
  SPAWN_PID=$!
  NET_PIDS+=($!)
}
