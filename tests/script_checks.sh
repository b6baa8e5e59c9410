#!/usr/bin/env bash
# Tests the helpers of tests/script_common.sh and the argument checks of the
# multi-part test scripts: an h5diff or h5dump error is a failure, never a
# verdict (a missing file must not read as "the files differ" or as "no
# numbers to compare"), and an unknown part exits 2 instead of passing.
# Usage: script_checks.sh <tests source dir>
set -uo pipefail
tests="$1"
# shellcheck source=script_common.sh
source "$tests/script_common.sh"
checks=0
# expect <what> <wanted "status failures"> <got "status failures">
expect() {
  checks=$((checks + 1))
  if [ "$2" = "$3" ]; then echo "ok: $1"; else fail "$1: expected status and failures '$2', got '$3'"; fi
}
# h5 <file> <values...>: a file with the float dataset /parameters/w.
h5() {
  local file="$1"
  shift
  echo "$*" > "$scratch/values.txt"
  printf 'PATH parameters/w\nINPUT-CLASS TEXTFP\nRANK 1\nDIMENSION-SIZES %d\nOUTPUT-CLASS FP\nOUTPUT-SIZE 32\n' \
    $# > "$scratch/h5import.cfg"
  h5import "$scratch/values.txt" -c "$scratch/h5import.cfg" -o "$file" || fail "h5import $file"
}
h5 "$scratch/a.h5" 1.5 2.5 -3
h5 "$scratch/a_again.h5" 1.5 2.5 -3
h5 "$scratch/b.h5" 1.5 2.5 -4
echo "not HDF5" > "$scratch/text.h5"

# Each call in a subshell: its status and the failures it counted.
verdict() { ( start=$failures; "$@" > "$scratch/out.txt"; echo "$? $((failures - start))" ); }
expect "h5_differs on equal files: 1 (equal)" "1 0" "$(verdict h5_differs "$scratch/a.h5" "$scratch/a_again.h5" /parameters)"
expect "h5_differs on different files: 0 (differ)" "0 0" "$(verdict h5_differs "$scratch/a.h5" "$scratch/b.h5" /parameters)"
expect "h5_differs with a missing file: 2 and a failure" "2 1" "$(verdict h5_differs "$scratch/a.h5" "$scratch/missing.h5" /parameters)"
expect "h5_differs with a file that is not HDF5: 2 and a failure" "2 1" "$(verdict h5_differs "$scratch/text.h5" "$scratch/a.h5" /parameters)"
expect "h5_differs with an object in neither file: 2 and a failure" "2 1" "$(verdict h5_differs "$scratch/a.h5" "$scratch/b.h5" /optimizer)"

: > "$scratch/numbers.txt"
expect "h5_values on a group" "0 0" "$(verdict h5_values "$scratch/a.h5" parameters "$scratch/numbers.txt")"
[ "$(tr -d ' ,' < "$scratch/numbers.txt" | tr '\n' ' ')" = "1.500000000e+00 2.500000000e+00 -3.000000000e+00 " ] ||
  fail "h5_values wrote: $(cat "$scratch/numbers.txt")"
: > "$scratch/numbers.txt"
expect "h5_values on a missing file: 1 and a failure" "1 1" "$(verdict h5_values "$scratch/missing.h5" parameters "$scratch/numbers.txt")"
expect "h5_values on a missing group: 1 and a failure" "1 1" "$(verdict h5_values "$scratch/a.h5" state "$scratch/numbers.txt")"
[ ! -s "$scratch/numbers.txt" ] || fail "h5_values wrote numbers for a missing file or group"

# Multi-part scripts refuse a part they do not have, before running anything.
for call in "app/sweep.sh mpiexec a b c d e nonsense" "app/restart.sh mpiexec a b nonsense"; do
  read -r -a args <<<"$call"
  script="${args[0]}"
  out=$(bash "$tests/$script" "${args[@]:1}" 2>&1)
  rc=$?
  checks=$((checks + 1))
  if [ "$rc" -eq 2 ] && [[ "$out" == *"nonsense"* ]]; then echo "ok: $script refuses an unknown part"
  else fail "$script with an unknown part: exit $rc, '$out'"; fi
done

[ "$failures" -eq 0 ] || { echo "$failures of $checks checks failed"; exit 1; }
echo "all $checks checks passed"
