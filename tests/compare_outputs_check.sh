#!/usr/bin/env bash
# Tests tests/compare_outputs.sh, which every "agrees to rounding" test
# relies on: equal outputs and differences just below the tolerance pass;
# differences just above it, non-finite values on either side (nan, -nan,
# inf, -inf, NaN, Infinity), other words, other shapes and other line
# counts fail, naming the line and field.
set -uo pipefail
compare="$(dirname "${BASH_SOURCE[0]}")/compare_outputs.sh"
failures=0
# check <pass|fail> <reference line> <candidate line> <tolerance> [floor] [expected message]
check() {
  local want="$1" ref="$2" cand="$3" tol="$4" floor="${5:-0}" message="${6:-}" out rc
  out=$(bash "$compare" <(printf '%b\n' "$ref") <(printf '%b\n' "$cand") "$tol" case "$floor" 2>&1)
  rc=$?
  if [ "$want" = pass ] && [ "$rc" -ne 0 ]; then
    echo "FAIL: '$ref' vs '$cand' (tolerance $tol, floor $floor) should pass: $out"
    failures=$((failures + 1))
  elif [ "$want" = fail ] && [ "$rc" -ne 1 ]; then
    echo "FAIL: '$ref' vs '$cand' (tolerance $tol, floor $floor) should fail with status 1, got $rc: $out"
    failures=$((failures + 1))
  elif [ -n "$message" ] && [[ "$out" != *"$message"* ]]; then
    echo "FAIL: '$ref' vs '$cand': the report lacks '$message': $out"
    failures=$((failures + 1))
  else
    echo "ok: $want: '$ref' vs '$cand'"
  fi
}

check pass "step 1 loss 0.5 / 0.25 -0.125" "step 1 loss 0.5 / 0.25 -0.125" 0
check pass "0.5 / 0.25 -0.125" "0.5 / 0.25 -0.125" 1e-5
# Just below and just above 1e-5 relative.
check pass "1.0 -2.0" "1.0000099 -2.0000198" 1e-5
check fail "1.0 -2.0" "1.0000101 -2.0" 1e-5 0 "line 1 field 1: 1.0 vs 1.0000101"
check fail "1.0 -2.0" "1.0 -2.0000202" 1e-5 0 "line 1 field 2"
check pass "3e-4 1.5E+2" "3.000029e-4 150.0014" 1e-5
check fail "3e-4 1.5E+2" "3.000031e-4 150.0014" 1e-5 0 "line 1 field 1: 3e-4 vs 3.000031e-4"
# The scale floor: zero in exact arithmetic against rounding noise.
check pass "0" "9e-9" 1e-5 1e-3
check fail "0" "2e-8" 1e-5 1e-3 "line 1 field 1: 0 vs 2e-8"
# The probe that exposed the hole: every field non-finite.
check fail "0.5 / 0.25 -0.125" "nan / -nan inf" 1e-5 0 "line 1 field 1: 0.5 vs nan: a non-finite value"
for bad in nan -nan NaN inf -inf +inf Inf Infinity -Infinity "nan(0x7fc00000)"; do
  check fail "a 1.0\nb 2.0" "a 1.0\nb $bad" 1e-3 0 "line 2 field 2: 2.0 vs $bad: a non-finite value"
  check fail "a 1.0\nb $bad" "a 1.0\nb 2.0" 1e-3 0 "line 2 field 2: $bad vs 2.0: a non-finite value"
done
# Non-finite on both sides, even the same spelling, fails too.
check fail "loss nan" "loss nan" 1e-3 0 "line 1 field 2: nan vs nan"
check fail "w inf -inf" "w inf -inf" 1e-3 0 "field 2"
# A number against a word, other words, shapes and line counts.
check fail "loss 0.5" "loss x0.5" 1e-3 0 "not a number"
check fail "loss 0.5" "lost 0.5" 1e-3 0 "\"loss 0.5\" vs \"lost 0.5\""
check fail "1 2 3" "1 2" 1e-3 0 "differs in shape"
check fail "1\n2" "1" 1e-3 0 "2 vs 1 lines"
# h5dump's values end in a comma.
check pass "            6.835933891e-05," "            6.835934619e-05," 2e-7
check fail "            6.835933891e-05," "            6.835934619e-05," 1e-7 0 "line 1 field 1: 6.835933891e-05 vs 6.835934619e-05"
check fail "   1.5e-01," "   nan," 1e-3 0 "a non-finite value"
# Words that start like numbers but are not (2x2) compare as words.
check pass "grid 2x2 0.5" "grid 2x2 0.5" 1e-3
check fail "grid 2x2 0.5" "grid 2x3 0.5" 1e-3 0 "\"grid 2x2 0.5\" vs \"grid 2x3 0.5\""
# Nothing to compare is a failure, not a pass.
out=$(bash "$compare" /dev/null /dev/null 1e-3 empty 2>&1) && { echo "FAIL: empty inputs passed: $out"; failures=$((failures + 1)); }

[ "$failures" -eq 0 ] || { echo "$failures comparator checks failed"; exit 1; }
echo "all comparator checks passed"
