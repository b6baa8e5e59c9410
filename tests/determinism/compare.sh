#!/usr/bin/env bash
# Runs the determinism probe twice with 1 OpenMP thread and once with 2:
# the two 1-thread runs must be bitwise identical, and every number of the
# 2-thread run must agree with the 1-thread run to 1e-6 relative.
# Usage: compare.sh <probe executable> <scratch directory>
set -euo pipefail
probe="$1" dir="$2"
mkdir -p "$dir"
OMP_NUM_THREADS=1 "$probe" > "$dir/threads1a.txt"
OMP_NUM_THREADS=1 "$probe" > "$dir/threads1b.txt"
OMP_NUM_THREADS=2 "$probe" > "$dir/threads2.txt"
lines=$(wc -l < "$dir/threads1a.txt")
[ "$lines" -gt 100 ] || { echo "FAIL: the probe printed only $lines lines"; exit 1; }
if ! cmp -s "$dir/threads1a.txt" "$dir/threads1b.txt"; then
  echo "FAIL: two runs with 1 thread differ:"; diff "$dir/threads1a.txt" "$dir/threads1b.txt" | head -20; exit 1
fi
echo "ok: two 1-thread runs are bitwise identical ($lines lines)"
bash "$(dirname "$0")/../compare_outputs.sh" "$dir/threads1a.txt" "$dir/threads2.txt" 1e-6 "1 and 2 threads"
