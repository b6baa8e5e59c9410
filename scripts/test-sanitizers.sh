#!/usr/bin/env bash
# The unit tests (ctest label `unit`: every test_* executable on the OpenMP
# and Serial backends with 1 and 2 threads, and the replay of every fuzz
# corpus and regression input) built with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer. Any report fails the run.
#
#   scripts/test-sanitizers.sh    set up, build (build-sanitize/), run
source "$(dirname "${BASH_SOURCE[0]}")/sanitizer-build.sh"

step "unit tests under ASan + UBSan (ctest -L unit)"
started=$(date +%s)
LD_PRELOAD="$sanitizer_preload" ctest --test-dir "$sanitize_build_dir" -L unit --output-on-failure \
  -j "$TESSERA_JOBS"
note "passed in $(( $(date +%s) - started )) s"
