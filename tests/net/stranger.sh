#!/usr/bin/env bash
# stranger.sh - a stranger at a rank's listening port, run inside a host
# namespace by net_suite.sh. Nothing but bash's /dev/tcp and coreutils.
#   stranger.sh garbage HOST PORT      64 KiB of random bytes
#   stranger.sh text HOST PORT         an HTTP request (longer than any hello)
#   stranger.sh bytes HOST PORT HEX    these bytes (e.g. a header or a hello
#                                      with a wrong secret)
#   stranger.sh short HOST PORT        three bytes, then nothing: only a
#                                      deadline on the hello ends it
#   stranger.sh idle HOST PORT SECS    connects, says nothing, holds it SECS
# After sending, waits up to STRANGER_WAIT seconds (default 5) for the rank to
# close the connection. Exit: 0 the rank closed it (refused), 1 still open
# then, 2 could not connect. idle exits 0 once SECS have passed (or the rank
# closed it earlier).
set -uo pipefail
trap '' PIPE # a rank that closes on us makes writes fail, not kill us
mode=$1 host=$2 port=$3 arg=${4:-}

if ! exec 3<>"/dev/tcp/$host/$port"; then
  echo "stranger: cannot connect to $host:$port"
  exit 2
fi
case $mode in
  garbage) head -c 65536 /dev/urandom >&3 2>/dev/null || true ;;
  text) printf 'GET /index.html HTTP/1.1\r\nHost: loom\r\nUser-Agent: stranger\r\nAccept: */*\r\n\r\n' >&3 2>/dev/null || true ;;
  short) printf 'LMX' >&3 2>/dev/null || true ;;
  bytes) printf '%b' "$(sed 's/../\\x&/g' <<<"$arg")" >&3 2>/dev/null || true ;;
  idle)
    timeout "$arg" cat <&3 >/dev/null 2>&1
    echo "stranger: idle connection to $host:$port held (rank closed it early: $([ $? = 124 ] && echo no || echo yes))"
    exit 0
    ;;
  *)
    echo "stranger: unknown mode $mode"
    exit 2
    ;;
esac
# The rank should close on us: cat sees EOF (0) or a reset (1); 124 is a timeout.
wait_s=${STRANGER_WAIT:-5}
start=$(date +%s%N)
timeout "$wait_s" cat <&3 >/dev/null 2>&1
rc=$?
if [ $rc = 124 ]; then
  echo "stranger: $mode to $host:$port: still open after $wait_s s"
  exit 1
fi
echo "stranger: $mode to $host:$port: refused (closed by the rank after $((($(date +%s%N) - start) / 1000000)) ms)"
exit 0
