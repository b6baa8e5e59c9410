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
# Compare field by field: names must match, numbers within 1e-6 relative.
awk -v tol=1e-6 '
  function abs(x) { return x < 0 ? -x : x }
  NR == FNR { ref[FNR] = $0; next }
  {
    n = split(ref[FNR], a, " "); m = split($0, b, " ")
    if (n != m) { printf "FAIL: line %d differs in shape: \"%s\" vs \"%s\"\n", FNR, ref[FNR], $0; bad++; next }
    for (i = 1; i <= n; i++) {
      if (a[i] ~ /^-?[0-9]/) {
        d = abs(a[i] - b[i]); s = abs(a[i]) > abs(b[i]) ? abs(a[i]) : abs(b[i])
        if (d > tol * s) { printf "FAIL: line %d field %d: %s vs %s\n", FNR, i, a[i], b[i]; bad++ }
        if (d > worst * (s > 0 ? s : 1)) worst = d / (s > 0 ? s : 1)
      } else if (a[i] != b[i]) { printf "FAIL: line %d: \"%s\" vs \"%s\"\n", FNR, ref[FNR], $0; bad++ }
    }
  }
  END {
    if (bad) exit 1
    printf "ok: 1 and 2 threads agree to %.3g relative at worst (tolerance %g)\n", worst, tol
  }' "$dir/threads1a.txt" "$dir/threads2.txt"
