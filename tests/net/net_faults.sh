# shellcheck shell=bash disable=SC2034
# net_faults.sh - the cases where something goes wrong on purpose, sourced by
# net_suite.sh: a link taken down, a rank killed, strangers at the ranks'
# listening ports.

# ---- A link down, a rank killed --------------------------------------------------

FAULT_COUNT=262144 # floats per all-reduce of the fault loop (1 MiB)

# Waits until every rank wrote its ready file, or one rank exited first.
fault_wait_ready() { # tag
  local tag=$1 end=$(($(date +%s) + 90)) r all
  while :; do
    all=1
    for ((r = 0; r < NET_NRANKS; r++)); do
      [ -e "$NET_WORK/$tag.ready.$r" ] && continue
      all=0
      kill -0 "${RANK_PIDS[$r]}" 2>/dev/null || return 1
    done
    [ $all = 1 ] && return 0
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.05
  done
}

# fault_run TAG STRIKE VICTIMS EXEMPT: starts every rank in the fault loop,
# lets the all-reduces run, records the time and calls STRIKE (a command).
# Then every rank not in EXEMPT (the killed one) must fail with
# loomRemoteError (6); a rank not in VICTIMS (space-separated ranks the fault
# took away) must also name one of them in loomGetLastError. Nothing is
# timed: LOOM_TIMEOUT_MS (FAULT_TIMEOUT_MS) is far above the ranks' own
# limit, so only noticing the fault can end their waits, and FAULT_SLOW_OK
# says whether the heartbeats' notice ("has sent nothing") is the case's
# subject (a link down) or a failure to notice at once (a rank killed).
fault_run() {
  local tag=$1 strike=$2 victims=$3 exempt=$4 r
  NET_ENV=(LOOM_HEARTBEAT_MS="$FAULT_HEARTBEAT_MS")
  NET_LIMIT=90
  next_root
  NET_SECRET=$(new_secret)
  RANK_PIDS=()
  local saved=$NET_TIMEOUT_MS
  NET_TIMEOUT_MS=$FAULT_TIMEOUT_MS
  for ((r = 0; r < NET_NRANKS; r++)); do
    rank_start "$tag" "$r" --fault-loop $FAULT_COUNT --ready-file "$NET_WORK/$tag.ready.$r" \
      --stop-file "$NET_WORK/$tag.stop" --fail-time-file "$NET_WORK/$tag.failtime" --max-seconds 60
  done
  NET_TIMEOUT_MS=$saved
  if ! fault_wait_ready "$tag"; then
    touch "$NET_WORK/$tag.stop"
    ranks_wait
    fail "$tag" "the all-reduce loop never got going on every rank"
    ranks_show "$tag"
    ranks_dump "$tag"
    net_scrub
    return
  fi
  sleep 1 # the all-reduces are under way
  local fail_ms
  fail_ms=$(now_ms)
  echo "$fail_ms" >"$NET_WORK/$tag.failtime"
  $strike
  ranks_wait
  local end_ms
  end_ms=$(now_ms)
  touch "$NET_WORK/$tag.stop"
  fault_judge "$tag" "$victims" "$exempt" "$fail_ms" "$end_ms"
  net_scrub
}

fault_judge() { # tag victims exempt fail_ms end_ms
  local tag=$1 victims=$2 exempt=$3 fail_ms=$4 end_ms=$5 r line rc after err why=""
  local named
  named="(peer|rank) (${victims// /|})([^0-9]|\$)"
  for ((r = 0; r < NET_NRANKS; r++)); do
    [[ " $exempt " == *" $r "* ]] && continue
    line=$(grep -h "FAULT rc=" "$NET_WORK/$tag.r$r.out" 2>/dev/null | sed -n 1p || true)
    if [ -z "$line" ]; then
      why+="rank $r saw no error (exit ${RANK_RC[$r]}); "
      continue
    fi
    rc=$(sed -n 's/.*FAULT rc=\([0-9]*\).*/\1/p' <<<"$line")
    after=$(sed -n 's/.* after_ms=\(-\{0,1\}[0-9]*\).*/\1/p' <<<"$line")
    err=${line#* error: }
    say "  rank $r: rc=$rc after ${after} ms: $err"
    [ "$rc" = 6 ] || why+="rank $r returned $rc, not loomRemoteError; "
    [[ "$err" != *"timed out"* ]] || why+="rank $r's error is a deadline's; "
    if [ "$FAULT_SLOW_OK" = 0 ] && [[ "$err" == *"has sent nothing"* ]]; then
      why+="rank $r learnt of the fault from the heartbeats, not at once; "
    fi
    if [[ " $victims " != *" $r "* ]] && ! grep -qE "$named" <<<"$err"; then
      why+="rank $r's error does not name peer $victims; "
    fi
  done
  local left
  left=$(net_leftovers) || why+="left behind: $left; "
  if [ -z "$why" ]; then
    pass "$tag" "every rank failed naming the fault ($((end_ms - fail_ms)) ms after it)"
  else
    fail "$tag" "$why"
    ranks_dump "$tag"
  fi
}

strike_kill() { # kills FAULT_VICTIM's process
  local pid
  pid=$(cat "$NET_WORK/$FAULT_TAG.ready.$FAULT_VICTIM")
  say "  SIGKILL rank $FAULT_VICTIM (pid $pid)"
  kill -KILL "$pid"
}

strike_linkdown() { # takes FAULT_HOST's eth0 down
  say "  ip link set dev eth0 down in host $FAULT_HOST"
  tmo 10 ip -n "$(host_ns "$FAULT_HOST")" link set dev eth0 down
}

case_kill() {
  topo 2 2 4
  # Rank 2 on host 1: rank 3 sees it on its own host, ranks 0 and 1 across.
  FAULT_TAG=kill-2x2-rank2 FAULT_VICTIM=2 FAULT_SLOW_OK=0
  fault_run "$FAULT_TAG" strike_kill 2 2
  net_cleanup_hosts
  # Rank 0, the bootstrap's hub, alone on its host.
  topo 4 1 4
  FAULT_TAG=kill-4x1-rank0 FAULT_VICTIM=0 FAULT_SLOW_OK=0
  fault_run "$FAULT_TAG" strike_kill 0 0
}

case_linkdown() {
  topo 4 1 4
  # Host 3 (rank 3) drops off the network; it must fail too (it is cut off
  # from everyone), but need not name anyone in particular. The others learn
  # who went silent from the bootstrap's heartbeats and must name peer 3.
  FAULT_HOST=3 FAULT_SLOW_OK=1
  fault_run linkdown-4x1-host3 strike_linkdown 3 ""
}

# ---- Strangers ------------------------------------------------------------------

# Little-endian hex of a value: le VALUE BYTES.
le() {
  local v=$1 n=$2 i out=""
  for ((i = 0; i < n; i++)); do out+=$(printf '%02x' $(((v >> (8 * i)) & 255))); done
  echo "$out"
}

# stranger_spawn LABEL HOST_FROM MODE ADDR PORT ARG [WAIT]: one attack from
# host HOST_FROM, in the background; stranger_collect then passes each whose
# connection the rank closed within WAIT seconds (default 5).
STRANGERS=()
stranger_spawn() {
  local label=$1 from=$2 mode=$3 addr=$4 port=$5 arg=$6 wait_s=${7:-5} n=${#STRANGERS[@]}
  STRANGER_WAIT=$wait_s tmo $((wait_s + 30)) ip netns exec "$(host_ns "$from")" \
    bash "$HERE/stranger.sh" "$mode" "$addr" "$port" "$arg" >"$NET_WORK/stranger.$n.out" 2>&1 &
  NET_PIDS+=($!)
  STRANGERS+=("$!:$n:$label")
}
stranger_collect() {
  local s pid n label rc
  for s in "${STRANGERS[@]}"; do
    pid=${s%%:*}
    n=${s#*:}
    label=${n#*:}
    n=${n%%:*}
    rc=0
    wait "$pid" 2>/dev/null || rc=$?
    if [ $rc = 0 ]; then pass "$label" "$(cat "$NET_WORK/stranger.$n.out")"; else
      fail "$label" "$(cat "$NET_WORK/stranger.$n.out") (stranger.sh exit $rc)"
    fi
  done
  STRANGERS=()
}

# Bootstrap wire (src/core/bootstrap.h): a header is magic "LMWG", type u16,
# version u16, length u32, tag u32, from i32, pad u32.
boot_hdr() { echo "$(le 0x4c4d5747 4)$(le "$1" 2)$(le 1 2)$(le "$2" 4)$(le 0 4)$(le 1 4)$(le 0 4)"; }

case_stranger_bootstrap() {
  # Host 0 has the two ranks (they talk over shared memory, so this case needs
  # no socket transport); host 1 is the stranger's.
  topo 2 2 4
  NET_NRANKS=2
  NET_ENV=()
  NET_LIMIT=120
  next_root
  NET_SECRET=$(new_secret)
  RANK_PIDS=()
  local addr
  addr=$(host_addr 0)
  rank_start sb 0
  if ! wait_listening 0 "$PORT" 30; then
    fail boot-listen "rank 0 never listened on $addr:$PORT"
    ranks_dump sb
    return
  fi
  stranger_spawn boot-garbage 1 garbage "$addr" "$PORT" ""
  stranger_spawn boot-http 1 text "$addr" "$PORT" ""
  # A hello header claiming a 4 GiB payload, and a hello cut short.
  stranger_spawn boot-huge-length 1 bytes "$addr" "$PORT" "$(boot_hdr 1 0xffffffff)"
  stranger_spawn boot-short-hello 1 bytes "$addr" "$PORT" "$(boot_hdr 1 8)$(le 0x1122334455667788 8)"
  stranger_collect
  # One that says nothing and stays through the whole rendezvous.
  tmo 60 ip netns exec "$(host_ns 1)" bash "$HERE/stranger.sh" idle "$addr" "$PORT" 15 \
    >"$NET_WORK/sb.idle.out" 2>&1 &
  NET_PIDS+=($!)
  # A real hello with the wrong secret: net_check itself, as rank 1.
  local out rc=0 wrong
  wrong=$(new_secret)
  out=$(LOOM_RANK=1 LOOM_WORLD_SIZE=2 LOOM_ROOT="$NET_ROOT" LOOM_SECRET="$wrong" LOOM_TIMEOUT_MS=5000 \
    LOOM_TUNING_FILE="$NET_TUNING" XDG_CACHE_HOME="$NET_WORK/cache" \
    tmo 30 ip netns exec "$(host_ns 1)" sh -c 'mount --bind "$1" /dev/shm || exit 70; shift; exec "$@"' \
    sh "$NET_SHM/h1" "$NET_CHECK" --init-only 2>&1) || rc=$?
  if [ "$rc" = 2 ] && grep -q "init failed" <<<"$out"; then
    pass boot-wrong-secret "refused: $(grep 'init failed' <<<"$out" | sed -n 1p)"
  else
    fail boot-wrong-secret "a hello with a wrong secret was not refused (exit $rc): $out"
  fi
  # Now the real rank 1: the communicator forms and the matrix passes.
  rank_start sb 1
  ranks_wait
  local why=""
  [ "${RANK_RC[0]}" = 0 ] || why+="rank 0 exited ${RANK_RC[0]}; "
  [ "${RANK_RC[1]}" = 0 ] || why+="rank 1 exited ${RANK_RC[1]}; "
  local left
  left=$(net_leftovers) || why+="left behind: $left; "
  # For the reader: what rank 0 said about them (WARN lines of its log).
  grep -h "WARN" "$NET_WORK/sb.r0.log" 2>/dev/null | sed 's/^[^ ]* LOOM WARN [^ ]* /    rank 0: /' | sed -n 1,10p || true
  if [ -z "$why" ]; then
    pass boot-then-matrix "the communicator formed after the strangers and every collective passed"
    ranks_show sb
  else
    fail boot-then-matrix "$why"
    ranks_show sb
    ranks_dump sb
  fi
}

# Socket transport wire (src/transport/socket/socket.h): a hello is magic
# "LMSK", version u16, bytes u16 (40), secret u64, comm_hash u64, src i32,
# dst i32, lane u16, stream u16, nstreams u16, pad u16.
sock_hello() { # secret_hex comm_hash_hex src dst
  echo "$(le 0x4c4d534b 4)$(le 1 2)$(le 40 2)$(le "0x$1" 8)$(le "0x$2" 8)$(le "$3" 4)$(le "$4" 4)$(le 0 2)$(le 0 2)$(le 1 2)$(le 0 2)"
}

# The TCP ports a rank listens on inside host k: what `ss -ltnp` shows for
# its pid, and what its log says the socket transport listens on.
listening_ports() { # k pid log
  {
    tmo 10 ip netns exec "$(host_ns "$1")" ss -Hltnp 2>/dev/null | grep "pid=$2," |
      awk '{n = split($4, a, ":"); print a[n]}'
    grep -ho "socket transport listening on [^ ]*" "$3" 2>/dev/null | sed 's/.*://'
  } | sort -un
}

case_stranger_transport() {
  # Ranks 0-3 on hosts 0 and 1; host 2 is the stranger's.
  topo 3 2 4
  NET_NRANKS=4
  NET_ENV=()
  NET_LIMIT=180
  next_root
  NET_SECRET=$(new_secret)
  RANK_PIDS=()
  local r pauses=()
  for ((r = 0; r < NET_NRANKS; r++)); do
    rank_start st "$r" --pause-file "$NET_WORK/st.pause.$r" --resume-file "$NET_WORK/st.resume"
    pauses+=("$NET_WORK/st.pause.$r")
  done
  if ! wait_files 120 "${pauses[@]}"; then
    touch "$NET_WORK/st.resume"
    ranks_wait
    fail sock-first-pass "the ranks never finished the first pass"
    ranks_show st
    ranks_dump st
    return
  fi
  local hash wrong ports h pid port a targets=()
  hash=$(grep -ho 'ready (comm [0-9a-f]*' "$NET_WORK/st.r0.log" | sed -n 1p | awk '{print $3}')
  wrong=$(printf '%016x' $((0x$NET_SECRET ^ 0x5a5a)))
  for ((r = 0; r < NET_NRANKS; r++)); do
    h=$(rank_host "$r")
    pid=$(cat "$NET_WORK/st.pause.$r")
    ports=$(listening_ports "$h" "$pid" "$NET_WORK/st.r$r.log")
    say "  rank $r (pid $pid, host $h) listens on: ${ports:-nothing}"
    for port in $ports; do targets+=("$r:$(host_addr "$h"):$port"); done
  done
  [ ${#targets[@]} -gt 0 ] || fail sock-ports "no rank listens on a TCP port while the communicator lives"
  # While the ranks wait between the passes: what a stranger may say.
  local t
  for t in "${targets[@]}"; do
    r=${t%%:*} port=${t##*:} a=${t#*:}
    a=${a%:*}
    stranger_spawn "sock-r$r:$port-garbage" 2 garbage "$a" "$port" ""
    stranger_spawn "sock-r$r:$port-http" 2 text "$a" "$port" ""
    # Three bytes and silence: only the hello deadline (SOCK_HELLO_MS, 10 s) ends it.
    stranger_spawn "sock-r$r:$port-short" 2 short "$a" "$port" "" 20
    if [ -n "$hash" ]; then
      stranger_spawn "sock-r$r:$port-wrong-secret" 2 bytes "$a" "$port" "$(sock_hello "$wrong" "$hash" 0 "$r")"
      stranger_spawn "sock-r$r:$port-bad-rank" 2 bytes "$a" "$port" "$(sock_hello "$NET_SECRET" "$hash" 99 "$r")"
    else
      skip "sock-r$r:$port-forged-hellos" "no comm hash in rank 0's log ('ready (comm' line), so no hello could be forged"
    fi
  done
  stranger_collect
  # While the second pass runs: garbage again, and a connection that says
  # nothing.
  for t in "${targets[@]}"; do
    r=${t%%:*} port=${t##*:} a=${t#*:}
    a=${a%:*}
    stranger_spawn "sock-r$r:$port-garbage-busy" 2 garbage "$a" "$port" ""
    tmo 30 ip netns exec "$(host_ns 2)" bash "$HERE/stranger.sh" idle "$a" "$port" 5 \
      >>"$NET_WORK/st.idle.out" 2>&1 &
    NET_PIDS+=($!)
  done
  touch "$NET_WORK/st.resume"
  stranger_collect
  # For the reader: what rank 0 said about them.
  grep -h "WARN" "$NET_WORK/st.r0.log" 2>/dev/null | sed 's/^[^ ]* LOOM WARN [^ ]* /    rank 0: /' | sed -n 1,12p || true
  ranks_wait
  local why=""
  for ((r = 0; r < NET_NRANKS; r++)); do
    [ "${RANK_RC[$r]}" = 0 ] || why+="rank $r exited ${RANK_RC[$r]}; "
  done
  local left
  left=$(net_leftovers) || why+="left behind: $left; "
  if [ -z "$why" ]; then
    pass sock-then-matrix "every collective passed again after the strangers"
    ranks_show st
  else
    fail sock-then-matrix "$why"
    ranks_show st
    ranks_dump st
  fi
}
