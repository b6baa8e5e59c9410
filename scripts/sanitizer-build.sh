#!/usr/bin/env bash
# Builds Tessera's library, unit tests and fuzz targets with clang 14 under
# AddressSanitizer and UndefinedBehaviorSanitizer, with libFuzzer coverage,
# against Kokkos built by clang (OpenMP + Serial; scripts/build-kokkos.sh
# clang). Sourced by scripts/test-sanitizers.sh and scripts/fuzz.sh, which
# share the build in $TESSERA_SANITIZE_BUILD_DIR (default build-sanitize/).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sanitize_build_dir="${TESSERA_SANITIZE_BUILD_DIR:-${TESSERA_ROOT}/build-sanitize}"

step "Debian packages"
apt_install clang libomp-dev libclang-rt-dev cmake make pkg-config libopenblas-dev \
  libopenblas-openmp-dev libopenmpi-dev openmpi-bin libhdf5-openmpi-dev \
  libgtest-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
# The tests of the threads and Winograd convolution schedules need a gemm
# that runs on its calling thread: the OpenMP OpenBLAS (as scripts/setup.sh).
select_openblas_openmp
bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" clang
kokkos_prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix clang)

step "Tessera with ASan + UBSan + libFuzzer (clang): configure (${sanitize_build_dir})"
# -O2 keeps the instrumented kernels fast enough for the whole unit suite;
# line tables keep the reports readable. The library builds in unity batches
# (the fuzzed readers, which carry their own flags, stay separate).
cmake -S "$TESSERA_ROOT" -B "$sanitize_build_dir" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_FLAGS_DEBUG="-O2 -gline-tables-only" \
  -DCMAKE_PREFIX_PATH="$kokkos_prefix" -DBUILD_SHARED_LIBS=ON -DTessera_ENABLE_APPS=OFF \
  -DTessera_HOST_ARCH=native -DTessera_TEST_CONFIGURATION=sanitizers \
  -DTessera_ENABLE_SANITIZERS="address;undefined" -DTessera_ENABLE_FUZZING=ON \
  > "${sanitize_build_dir}.configure.log" 2>&1 \
  || { cat "${sanitize_build_dir}.configure.log"; die "CMake configure failed"; }
note "configured (log: ${sanitize_build_dir}.configure.log)"

step "Tessera with ASan + UBSan + libFuzzer (clang): build the library, unit tests and fuzz targets"
cmake --build "$sanitize_build_dir" -j "$TESSERA_JOBS" --target tessera_unit_tests tessera_fuzz_targets

# Runtime options for every sanitized program: stop at the first report.
# Open MPI, which each test binary starts once, keeps allocations from
# MPI_Init, many in plugins it unloads at MPI_Finalize. Preloading
# tessera_keep_plugins (a dlclose that does nothing) keeps them mapped, and
# the full unwinder finds the Open MPI frames under each allocation, so
# tests/sanitizer/lsan.supp can name them, with the reason.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:detect_stack_use_after_return=1:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=${TESSERA_ROOT}/tests/sanitizer/lsan.supp:print_suppressions=0"
# Used by the scripts that source this file:
# shellcheck disable=SC2034
sanitizer_preload="${sanitize_build_dir}/tests/libtessera_keep_plugins.so"
