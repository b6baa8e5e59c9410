#!/usr/bin/env bash
# Trains a deck and asserts that the final test accuracy reaches a threshold.
# Usage: check_accuracy.sh <tessera-train> <deck> <min accuracy>
set -euo pipefail
train="$1" deck="$2" threshold="$3"
out=$("$train" "$deck" 2>&1) || { echo "$out"; echo "FAIL: tessera-train exited with $?"; exit 1; }
echo "$out"
acc=$(echo "$out" | sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' | tail -1)
[ -n "$acc" ] || { echo "FAIL: no 'test accuracy:' line"; exit 1; }
if awk -v a="$acc" -v t="$threshold" 'BEGIN { exit !(a >= t) }'; then
  echo "PASS: test accuracy ${acc} >= ${threshold}"
else
  echo "FAIL: test accuracy ${acc} < ${threshold}"
  exit 1
fi
