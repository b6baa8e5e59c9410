#!/usr/bin/env bash
# Tests the accounting of skipped test cases (tests/test_main.cpp): a test
# binary with a skipped case that tests/expected_skips.txt does not list for
# its configuration fails and names the case; listed for the configuration
# in force, the same skip passes and is reported as expected.
# Usage: skip_accounting_check.sh <a unit test binary>
set -uo pipefail
binary="$1"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$(TESSERA_TEST_INJECT_SKIP=1 "$binary" --gtest_filter='SkipAccounting.*' 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -q "unexpected skip in test configuration '.*': SkipAccounting.InjectedSkip: injected" <<<"$out"; then
  echo "ok: an unlisted skip fails the binary (exit $rc) and names the case"
else
  fail "an unlisted skip: exit $rc; output:"; echo "$out"
fi

out=$(TESSERA_TEST_INJECT_SKIP=1 TESSERA_TEST_CONFIGURATION=skip-accounting-check \
        "$binary" --gtest_filter='SkipAccounting.*' 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "[ SKIPPED  ] SkipAccounting.InjectedSkip (expected: the check of this list injects it)" <<<"$out"; then
  echo "ok: a skip listed for the configuration passes and is reported as expected"
else
  fail "a listed skip: exit $rc; output:"; echo "$out"
fi

# Without the injection the case does not exist: nothing skips, nothing fails.
out=$("$binary" --gtest_filter='SkipAccounting.*' 2>&1)
rc=$?
[ "$rc" -eq 0 ] && ! grep -q "SKIPPED" <<<"$out" || { fail "no injection: exit $rc"; echo "$out"; }

[ "$failures" -eq 0 ] || exit 1
echo "skip accounting: all checks passed"
