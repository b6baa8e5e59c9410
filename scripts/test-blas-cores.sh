#!/usr/bin/env bash
# Runs the tests whose arithmetic goes through the vendor BLAS (ctest label
# `blas`: unit tests, thread and rank agreement, restarts on other rank
# counts, the accuracy smoke run) once under every OpenBLAS core type this
# CPU can execute among Haswell, Zen, SkylakeX and Cooperlake.
#
# Why: Debian's OpenBLAS picks its kernels by CPU model, and different
# kernels round differently. On a CPU it does not know (AMD family 26, for
# one) it falls back to Haswell kernels. A suite that passes under one core
# type only would turn red on the next machine; this runs them all here.
#
#   scripts/test-blas-cores.sh    set up and build (as `setup.sh build`, and the tests), then the runs
#
# Each core type is checked to be the one OpenBLAS really uses
# (OPENBLAS_VERBOSE=2 prints it). OpenBLAS 0.3.21 cannot select Cooperlake
# by name (its lookup stops one entry short) and then falls back to
# detection, which gives Cooperlake on CPUs with AVX512-BF16: so Cooperlake
# is run only where the CPU has that.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

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
has avx2 fma && cores+=(Haswell Zen)
has avx512f avx512cd avx512bw avx512dq avx512vl && cores+=(SkylakeX)
has avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16 && cores+=(Cooperlake)
[ "${#cores[@]}" -gt 0 ] || die "this CPU has none of the instruction sets of Haswell, Zen, SkylakeX, Cooperlake"
note "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')"
note "default core type: $(OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=1 "${build_dir}/tests/test_dense" --gtest_filter=none 2>&1 | sed -n 's/^Core: //p')"
note "core types to run: ${cores[*]}"

results=()
failed=0
for core in "${cores[@]}"; do
  step "ctest -L blas with OPENBLAS_CORETYPE=${core}"
  used=$(OPENBLAS_CORETYPE="$core" OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=1 \
           "${build_dir}/tests/test_dense" --gtest_filter=none 2>&1 | sed -n 's/^Core: //p')
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
