#!/usr/bin/env bash
# Trains a deck and asserts that the final test accuracy reaches a threshold.
# Usage: check_accuracy.sh <tessera-train> <deck> <min accuracy> [tessera-train options...]
set -euo pipefail
train="$1" deck="$2" threshold="$3"
shift 3
# With a validation split, epochs are evaluated on it and the test set once at the end.
validation=0
case "$*" in *data.validation_split=*) validation=1 ;; esac
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
out=$("$train" "$deck" --set "run.output_dir=${scratch}" "$@" 2>&1) || { rc=$?; echo "$out"; echo "FAIL: tessera-train exited with $rc"; exit 1; }
echo "$out"
acc=$(echo "$out" | sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' | tail -1)
[ -n "$acc" ] || { echo "FAIL: no 'test accuracy:' line"; exit 1; }
awk -v a="$acc" -v t="$threshold" 'BEGIN { exit !(a >= t) }' \
  || { echo "FAIL: test accuracy ${acc} < ${threshold}"; exit 1; }
echo "PASS: test accuracy ${acc} >= ${threshold}"
# The metrics file records the epoch, and plots.
metrics="${scratch}/metrics.jsonl"
grep -q "\"type\":\"epoch\"" "$metrics" || { echo "FAIL: no epoch record in $metrics"; exit 1; }
grep -q "\"test_accuracy\":0\.[0-9]" "$metrics" || { echo "FAIL: $metrics lacks test_accuracy"; tail -2 "$metrics"; exit 1; }
if [ "$validation" -eq 1 ]; then
  grep -q "\"validation_accuracy\":0\.[0-9]" "$metrics" || { echo "FAIL: $metrics lacks validation_accuracy"; exit 1; }
  grep -q "\"type\":\"test\"" "$metrics" || { echo "FAIL: $metrics lacks the final test record"; exit 1; }
fi
# Debian's interpreter, which sees Debian's python3-matplotlib.
/usr/bin/python3 "$(dirname "$0")/../../scripts/plot_metrics.py" "$metrics" -o "${scratch}/curves.png"
[ -s "${scratch}/curves.png" ] || { echo "FAIL: no curves.png"; exit 1; }
echo "PASS: metrics file and plot"
