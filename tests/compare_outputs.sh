#!/usr/bin/env bash
# Compares two probe outputs field by field: words must match, numbers must
# agree within a relative tolerance: |a - b| <= tol * max(|a|, |b|, floor).
# floor (default 0) bounds the scale for values that are zero in exact
# arithmetic and only rounding noise in practice. Prints the worst
# relative difference.
# Usage: compare_outputs.sh <reference> <candidate> <tolerance> <label> [floor]
set -euo pipefail
tol="$3" label="$4" floor="${5:-0}"
# Copies, so either input may be a pipe (process substitution).
reference=$(mktemp) candidate=$(mktemp)
trap 'rm -f "$reference" "$candidate"' EXIT
cat "$1" > "$reference"
cat "$2" > "$candidate"
reference_lines=$(wc -l < "$reference") candidate_lines=$(wc -l < "$candidate")
[ "$reference_lines" -gt 0 ] || { echo "FAIL: $label: nothing to compare"; exit 1; }
[ "$reference_lines" -eq "$candidate_lines" ] ||
  { echo "FAIL: $label: $reference_lines vs $candidate_lines lines"; exit 1; }
awk -v tol="$tol" -v label="$label" -v floor="$floor" '
  function abs(x) { x += 0; return x < 0 ? -x : x }
  NR == FNR { ref[FNR] = $0; next }
  {
    n = split(ref[FNR], a, " "); m = split($0, b, " ")
    if (n != m) { printf "FAIL: %s: line %d differs in shape: \"%s\" vs \"%s\"\n", label, FNR, ref[FNR], $0; bad++; next }
    for (i = 1; i <= n; i++) {
      if (a[i] ~ /^-?[0-9]/) {
        d = abs(a[i] - b[i]); s = abs(a[i]) > abs(b[i]) ? abs(a[i]) : abs(b[i]); if (s < floor) s = floor
        if (d > tol * s) { if (bad < 20) printf "FAIL: %s: line %d field %d: %s vs %s\n", label, FNR, i, a[i], b[i]; bad++ }
        if (d > worst * (s > 0 ? s : 1)) worst = d / (s > 0 ? s : 1)
      } else if (a[i] != b[i]) { printf "FAIL: %s: line %d: \"%s\" vs \"%s\"\n", label, FNR, ref[FNR], $0; bad++ }
    }
  }
  END {
    if (bad) { printf "FAIL: %s: %d numbers differ by more than %g relative\n", label, bad, tol; exit 1 }
    printf "ok: %s agree to %.3g relative at worst over %d lines (tolerance %g, scale floor %g)\n", label, worst, FNR, tol, floor
  }' "$reference" "$candidate"
