#!/usr/bin/env bash
# Gradient averaging in bf16 and fp16 on 2 and 3 ranks (tests/mpi/gradient_dtype.cpp):
# exact sums to the bit, general sums the same on every rank and within the
# rounding bound, fp16 overflow to infinity.
# Usage: gradient_dtype.sh <mpiexec> <test executable>
set -uo pipefail
mpiexec="$1" test="$2"
source "$(dirname "$0")/../script_common.sh"
export GTEST_COLOR=no
for ranks in 2 3; do
  timeout 120 "$mpiexec" --oversubscribe -n "$ranks" "$test" > "$scratch/ranks$ranks.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "$ranks ranks: exit $rc"
    cat "$scratch/ranks$ranks.log"
  else
    grep -E '^(bf16|fp16) on' "$scratch/ranks$ranks.log"
    echo "ok: $ranks ranks: $(grep -c '^\[       OK \]' "$scratch/ranks$ranks.log") tests passed over all ranks"
  fi
done
[ "$failures" -eq 0 ] || exit 1
