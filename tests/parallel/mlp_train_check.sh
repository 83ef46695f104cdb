#!/usr/bin/env bash
# mlp_train_check: the example trains under loomrun -n 8 (dp 2 x tp 4, SP, ZeRO-1) to the
# single-rank loss: at every step the two losses agree to float32 rounding (relative 1e-5,
# after 20 Adam steps), and the loss falls to less than half its first value.
#   mlp_train_check.sh LOOMRUN MLP_TRAIN
set -uo pipefail
out=$(timeout 120 "$1" -n 8 --timeout 100 "$2" -s 20 2>/dev/null)
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: mlp_train exited $rc"; echo "$out"; exit 1; }
echo "$out"
echo "$out" | awk '
  /^#/ { next }
  { n++; if (n == 1) first = $2; last = $2
    if ($4 + 0 > 1e-5) { print "FAIL: step " $1 ": losses " $2 " and " $3 " differ by " $4; bad = 1 } }
  END {
    if (n != 20) { print "FAIL: " n " steps printed, expected 20"; exit 1 }
    if (last >= first / 2) { print "FAIL: the loss went from " first " to " last; exit 1 }
    exit bad }'
