#!/usr/bin/env bash
# Compile-only builds of the whole of Tessera (library, apps, tests) for the
# GPU backends, on a machine without a GPU: a kernel that cannot compile for
# CUDA or HIP fails here. Each backend has its own cached Kokkos prefix and
# its own build directory; nothing is run.
#
#   scripts/gpu-compile-check.sh [cuda] [hip]     (default: both)
#
#   cuda  Debian's CUDA 11.8 toolkit, sm_80 (Ampere), Kokkos' nvcc_wrapper over g++-11
#   hip   Debian's hipcc (ROCm 5.2), gfx908 (MI100)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

backends=("$@")
[ "${#backends[@]}" -gt 0 ] || backends=(cuda hip)

for backend in "${backends[@]}"; do
  case "$backend" in
    cuda|hip) ;;
    *) echo "usage: $0 [cuda] [hip]" >&2; exit 2 ;;
  esac
  prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix "$backend")
  build_dir="${TESSERA_ROOT}/build-${backend}"
  if [ "$backend" = cuda ]; then
    use_debian_cuda
    cxx="${prefix}/bin/nvcc_wrapper"
  else
    # The target Kokkos was built for (Kokkos_ARCH_VEGA908); without it hipcc
    # asks rocm_agent_enumerator, which fails noisily on a machine without a GPU.
    export HCC_AMDGPU_TARGET=gfx908
    cxx=hipcc
  fi
  bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" "$backend"

  step "Tessera compile-only (${backend}): configure (${build_dir})"
  # Unoptimised (-O0): whether the code compiles for the device does not
  # depend on optimisation, and hipcc and nvcc take 20 to 40 % less time.
  # Unity batches of 8 sources: nvcc and hipcc spend about 10 s of each file
  # on Kokkos' headers alone, which a batch pays once.
  cmake -S "$TESSERA_ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
    -DTessera_ENABLE_COMPILE_ONLY=ON > "${build_dir}.configure.log" 2>&1 \
    || { cat "${build_dir}.configure.log"; die "CMake configure for ${backend} failed"; }

  step "Tessera compile-only (${backend}): build library, apps and tests"
  start=$(date +%s)
  cmake --build "$build_dir" -j "$TESSERA_JOBS"
  note "${backend}: everything compiled in $(( $(date +%s) - start )) s"
done
