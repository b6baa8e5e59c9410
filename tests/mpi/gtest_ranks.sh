#!/usr/bin/env bash
# Runs a GoogleTest executable built for several ranks (every rank checks
# its own results) under mpiexec on 2 and 3 ranks, and prints the lines of
# its output that match <report pattern>.
# Usage: gtest_ranks.sh <mpiexec> <test executable> [<report pattern>]
set -uo pipefail
mpiexec="$1" test="$2" report="${3:-^$}"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"
export GTEST_COLOR=no
for ranks in 2 3; do
  timeout 120 "$mpiexec" --oversubscribe -n "$ranks" "$test" > "$scratch/ranks$ranks.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "$ranks ranks: exit $rc"
    cat "$scratch/ranks$ranks.log"
  else
    grep -E "$report" "$scratch/ranks$ranks.log"
    echo "ok: $ranks ranks: $(grep -c '^\[       OK \]' "$scratch/ranks$ranks.log") tests passed over all ranks"
  fi
done
[ "$failures" -eq 0 ] || exit 1
