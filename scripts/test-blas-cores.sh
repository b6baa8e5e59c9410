#!/usr/bin/env bash
# Runs the tests whose arithmetic goes through the vendor BLAS (ctest label
# `blas`: unit tests, thread and rank agreement, restarts on other rank
# counts, the accuracy smoke run) once under every OpenBLAS kernel class
# this CPU can execute: Haswell's (AVX2 + FMA) and SkylakeX's (AVX-512).
#
# Why: Debian's OpenBLAS picks its kernels by CPU model, and different
# kernels round differently. On a CPU it does not know (AMD family 26, for
# one) it falls back to Haswell kernels. A suite that passes under one core
# type only would turn red on the next machine; this runs them all here.
#
#   scripts/test-blas-cores.sh [--except-suite-core]
#       set up and build (as `setup.sh build`, and the tests), then the runs;
#       --except-suite-core leaves out the class of the core type that
#       `scripts/setup.sh test` runs the whole suite on here (OpenBLAS's own
#       choice, or the OPENBLAS_CORETYPE setup.sh sets), which CI has just run
#
# Each core type is checked to be the one OpenBLAS really uses
# (OPENBLAS_VERBOSE=2 prints it). Two core types OpenBLAS picks on some
# CPUs are not run, since in Debian's OpenBLAS 0.3.21 their single
# precision is another's:
# - Cooperlake (CPUs with AVX512-BF16) is SkylakeX's:
#   kernel/x86_64/KERNEL.COOPERLAKE includes KERNEL.SKYLAKEX and adds only
#   the bf16 sbgemm kernels, which Tessera does not call; param.h gives
#   both the same blocking;
# - Zen (AMD CPUs before AVX-512) is Haswell's: KERNEL.ZEN names Haswell's
#   sgemm and sgemv kernels and differs only in the packing copy and the
#   beta scaling, which move and scale single elements; param.h gives both
#   the same sgemm blocking (P 320, Q 320, unroll 8 x 4) and differs only in
#   SWITCH_RATIO, how threads split M and N, never K. determinism_probe
#   (every layer type, 2 threads) printed the same bits under both.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

except_suite_core=0
case "${1:-}" in
  "") ;;
  --except-suite-core) except_suite_core=1 ;;
  *) echo "usage: $0 [--except-suite-core]" >&2; exit 2 ;;
esac

build_dir="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build}"
TESSERA_BUILD_DIR="$build_dir" bash "${TESSERA_ROOT}/scripts/setup.sh" build
step "Tessera: the test executables"
cmake --build "$build_dir" -j "$TESSERA_JOBS"

step "OpenBLAS core types this CPU supports"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() {
  local f
  for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done
}
cores=()
has avx2 fma && cores+=(Haswell)
has avx512f avx512cd avx512bw avx512dq avx512vl && cores+=(SkylakeX)
[ "${#cores[@]}" -gt 0 ] || die "this CPU has none of the instruction sets of Haswell and SkylakeX"
note "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
# core_in_use [type]: the core type OpenBLAS uses under OPENBLAS_CORETYPE=type
# (none: under the caller's environment), as OPENBLAS_VERBOSE=2 prints it.
core_in_use() {
  [ -z "${1:-}" ] || local -x OPENBLAS_CORETYPE="$1"
  OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=1 "${build_dir}/tests/test_dense" --gtest_filter=none 2>&1 |
    sed -n 's/^Core: //p'
}
default_core=$(core_in_use)
note "default core type: ${default_core}"
if [ "$except_suite_core" -eq 1 ]; then
  # The core type the whole suite of `setup.sh test` ran on: the one
  # apply_openblas_coretype sets, else OpenBLAS's own (Cooperlake is
  # SkylakeX, Zen is Haswell).
  suite_core=$(apply_openblas_coretype "${build_dir}/apps/tessera-train" > /dev/null; echo "${OPENBLAS_CORETYPE:-}")
  [ -n "$suite_core" ] || suite_core="$default_core"
  case "$suite_core" in
    Cooperlake) suite_core=SkylakeX ;;
    Zen) suite_core=Haswell ;;
  esac
  kept=()
  for core in "${cores[@]}"; do [ "$core" = "$suite_core" ] || kept+=("$core"); done
  note "leaving out ${suite_core}: the whole suite has run on its kernels"
  cores=("${kept[@]}")
fi
if [ "${#cores[@]}" -eq 0 ]; then
  step "summary"
  note "no other kernel class on this CPU: the whole suite has run on its only one"
  exit 0
fi
note "core types to run: ${cores[*]}"

results=()
failed=0
for core in "${cores[@]}"; do
  step "ctest -L blas with OPENBLAS_CORETYPE=${core}"
  used=$(core_in_use "$core")
  [ "$used" = "$core" ] || die "OPENBLAS_CORETYPE=${core}: OpenBLAS uses '${used}' instead"
  started=$(date +%s)
  if OPENBLAS_CORETYPE="$core" ctest --no-tests=error --test-dir "$build_dir" -L blas --output-on-failure -j "$TESSERA_JOBS"; then
    results+=("${core}: passed in $(( $(date +%s) - started )) s")
  else
    results+=("${core}: FAILED after $(( $(date +%s) - started )) s")
    failed=$((failed + 1))
  fi
done

step "summary"
for r in "${results[@]}"; do note "$r"; done
[ "$failed" -eq 0 ] || die "${failed} core type(s) failed; rerun one with OPENBLAS_CORETYPE=<type> ctest --test-dir ${build_dir} -L blas"
