#!/usr/bin/env bash
# The unit tests (ctest label `unit`: every test_* executable on the OpenMP
# and Serial backends, and the replay of every fuzz corpus and regression
# input) built with clang under AddressSanitizer and UndefinedBehaviorSanitizer.
# Any report fails the run. Each test_* executable runs once, with 2 OpenMP
# threads (test_*_threads2): its 1-thread run executes the same code on one
# thread of the pool, and the full suite runs it uninstrumented.
#
#   scripts/test-sanitizers.sh    set up, build (build-sanitize/), run
source "$(dirname "${BASH_SOURCE[0]}")/sanitizer-build.sh"

step "unit tests under ASan + UBSan (ctest -L unit -E '^test_.*_threads1\$')"
started=$(date +%s)
LD_PRELOAD="$sanitizer_preload" run_ctest --test-dir "$sanitize_build_dir" -L unit -E '^test_.*_threads1$' \
  --output-on-failure -j "$TESSERA_JOBS"
note "passed in $(( $(date +%s) - started )) s"
