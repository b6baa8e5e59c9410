#!/usr/bin/env bash
# Compares two probe outputs field by field: words must match, numbers must
# agree within a relative tolerance: |a - b| <= tol * max(|a|, |b|, floor).
# floor (default 0) bounds the scale for values that are zero in exact
# arithmetic and only rounding noise in practice. A non-finite value (nan,
# -nan, inf, -inf in any spelling) on either side fails, naming its line
# and field: no probe output is meant to hold one, and NaN compares false
# with everything. Fields are separated by spaces and commas. Prints the worst relative difference.
# Usage: compare_outputs.sh <reference> <candidate> <tolerance> <label> [floor]
# tests/compare_outputs_check.sh tests this comparator.
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 <reference> <candidate> <tolerance> <label> [floor]" >&2; exit 2; }
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
  function finite(s) { return s ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
  # nan, -nan, NaN, inf, -Infinity, nan(0x7fc00000), ...
  function nonfinite(s) { s = tolower(s); return s ~ /^[-+]?(nan|inf)/ }
  function report(message) { if (bad < 20) print "FAIL: " label ": " message; bad++ }
  NR == FNR { ref[FNR] = $0; next }
  {
    # Commas separate fields too (h5dump writes "1.5e-01,").
    r = ref[FNR]; c = $0; gsub(/,/, " ", r); gsub(/,/, " ", c)
    n = split(r, a, " "); m = split(c, b, " ")
    if (n != m) { report(sprintf("line %d differs in shape: \"%s\" vs \"%s\"", FNR, ref[FNR], $0)); next }
    for (i = 1; i <= n; i++) {
      if (nonfinite(a[i]) || nonfinite(b[i])) {
        report(sprintf("line %d field %d: %s vs %s: a non-finite value", FNR, i, a[i], b[i]))
      } else if (finite(a[i])) {
        if (!finite(b[i])) {
          report(sprintf("line %d field %d: %s vs %s: not a number", FNR, i, a[i], b[i]))
          continue
        }
        d = abs(a[i] - b[i]); s = abs(a[i]) > abs(b[i]) ? abs(a[i]) : abs(b[i]); if (s < floor) s = floor
        if (d > tol * s) report(sprintf("line %d field %d: %s vs %s", FNR, i, a[i], b[i]))
        if (d > worst * (s > 0 ? s : 1)) worst = d / (s > 0 ? s : 1)
      } else if (a[i] != b[i]) report(sprintf("line %d: \"%s\" vs \"%s\"", FNR, ref[FNR], $0))
    }
  }
  END {
    if (bad) { printf "FAIL: %s: %d fields differ (numbers by more than %g relative, or not finite)\n", label, bad, tol; exit 1 }
    printf "ok: %s agree to %.3g relative at worst over %d lines (tolerance %g, scale floor %g)\n", label, worst, FNR, tol, floor
  }' "$reference" "$candidate"
