#!/usr/bin/env bash
# README command 2 on a second Kokkos: build Kokkos and Kokkos Kernels from
# their release sources (CI: 4.6.01, the release nearest to the 4.6.02 that
# Spack gives its users), build Tessera against them in its own build
# directory and run the whole test suite there (or the labels chosen below). README command 2 itself
# stays on Debian's 3.4.01, which any fresh machine can build.
#
#   scripts/test-kokkos-release.sh [sources]
#
#   sources  a folder with kokkos-<version>.tar.gz and
#            kokkos-kernels-<version>.tar.gz, or with those folders extracted
#            (default: ../shared/kokkos beside the clone)
# Environment:
#   TESSERA_KOKKOS_CXX_STANDARD  17 (default) or 20: Kokkos and Tessera as C++20
#   TESSERA_HOST_FAST_PATHS      OFF: the suite on the kernels of the GPU builds
#                                (CI does this, with TESSERA_KOKKOS_BOUNDS_CHECK=on:
#                                README command 2 tests the host fast paths)
#   TESSERA_KOKKOS_BOUNDS_CHECK  on: Kokkos built with its View bounds checks
#   TESSERA_CTEST_LABELS         labels of the tests to run, TESSERA_CTEST_EXCLUDE
#                                labels and TESSERA_CTEST_EXCLUDE_TESTS names of tests
#                                to leave out (scripts/setup.sh; CI runs
#                                '^(unit|paths)$', the unit tests and those whose
#                                verdict rests on the kernels, without the unit
#                                tests' 1-thread runs)
#   TESSERA_CMAKE_ARGS           further CMake arguments (CI: the header check off,
#                                which README command 2 builds)
#   TESSERA_BUILD_DIR            build directory (default: <clone>/build-kokkos-<version>
#                                [-cxx20][-device-paths][-bounds-check])
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

sources="${1:-${TESSERA_ROOT}/../shared/kokkos}"
step "Kokkos release sources (${sources})"
if [ ! -d "$sources" ]; then
  die "no folder ${sources}: give a folder with kokkos-<version>.tar.gz and kokkos-kernels-<version>.tar.gz (Kokkos' GitHub releases) as the first argument"
fi
sources=$(cd "$sources" && pwd)
version=$(find "$sources" -maxdepth 1 -name 'kokkos-[0-9]*' | sed 's|.*/kokkos-||; s|\.tar\.gz$||' | sort -V | tail -1)
[ -n "$version" ] || die "${sources} holds no kokkos-<version>.tar.gz or kokkos-<version>/"
cxx_standard="${TESSERA_KOKKOS_CXX_STANDARD:-17}"
suffix=""
[ "$cxx_standard" = 17 ] || suffix="-cxx${cxx_standard}"
case "${TESSERA_HOST_FAST_PATHS:-ON}" in
  ON) paths="host fast paths" ;;
  OFF) paths="device paths on the host"; suffix+="-device-paths" ;;
  *) die "TESSERA_HOST_FAST_PATHS=${TESSERA_HOST_FAST_PATHS}: use ON or OFF" ;;
esac
bounds=""
if [ "${TESSERA_KOKKOS_BOUNDS_CHECK:-off}" = on ]; then
  bounds=", View bounds checked"
  suffix+="-bounds-check"
fi
note "Kokkos ${version}, C++${cxx_standard}, ${paths}${bounds}"

export TESSERA_KOKKOS_SOURCE="$sources" TESSERA_KOKKOS_CXX_STANDARD="$cxx_standard"
export TESSERA_BUILD_DIR="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build-kokkos-${version}${suffix}}"
exec bash "${TESSERA_ROOT}/scripts/setup.sh" test
