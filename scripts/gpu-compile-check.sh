#!/usr/bin/env bash
# Compile-only builds of Tessera (library, apps, unit tests and the example:
# what a GPU build runs) for the GPU backends, on a machine without a GPU:
# a kernel that cannot compile for CUDA or HIP fails here. Each backend has
# its own cached Kokkos prefix and its own build directory; nothing is run.
#
#   scripts/gpu-compile-check.sh [cuda] [hip]     (default: both)
#
# Kokkos for CUDA: the release sources in TESSERA_KOKKOS_SOURCE, by default
# ../shared/kokkos beside the clone where it exists (4.6.01 in CI), for the
# GPU Tessera is validated on; otherwise Debian's 3.4.01, which does not know
# it, for the GPU of its time. HIP stays on 3.4.01: Debian's ROCm 5.2
# (clang 15.0.6) cannot compile Kokkos 4.6.01's HIP parallel_scan for gfx908
# or gfx90a ("Cannot select: intrinsic %llvm.amdgcn.permlanex16").
#
#   cuda  Debian's CUDA 11.8, Kokkos' nvcc_wrapper over g++-11:
#         sm_90 (H100, Kokkos_ARCH_HOPPER90) on Kokkos 4, sm_80 (A100) on 3.4.01
#   hip   Debian's hipcc (ROCm 5.2), gfx908 (MI100) on 3.4.01
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

release_source="${TESSERA_KOKKOS_SOURCE:-}"
if [ -z "$release_source" ] && [ -d "${TESSERA_ROOT}/../shared/kokkos" ]; then
  release_source=$(cd "${TESSERA_ROOT}/../shared/kokkos" && pwd)
fi

backends=("$@")
[ "${#backends[@]}" -gt 0 ] || backends=(cuda hip)

for backend in "${backends[@]}"; do
  case "$backend" in
    cuda|hip) ;;
    *) echo "usage: $0 [cuda] [hip]" >&2; exit 2 ;;
  esac
  if [ "$backend" = cuda ] && [ -n "$release_source" ]; then
    export TESSERA_KOKKOS_SOURCE="$release_source" TESSERA_KOKKOS_ARCH=HOPPER90
  elif [ "$backend" = cuda ]; then
    export TESSERA_KOKKOS_SOURCE="" TESSERA_KOKKOS_ARCH=AMPERE80
  else
    export TESSERA_KOKKOS_SOURCE="" TESSERA_KOKKOS_ARCH=VEGA908
  fi
  arch="$TESSERA_KOKKOS_ARCH"
  prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix "$backend")
  # One build directory per Kokkos prefix: a build configured against one
  # Kokkos keeps finding it in its cache.
  build_dir="${TESSERA_ROOT}/build-${backend}-${arch,,}"
  if [ "$backend" = cuda ]; then
    use_debian_cuda
    cxx="${prefix}/bin/nvcc_wrapper"
  else
    # The target Kokkos was built for; without it hipcc asks
    # rocm_agent_enumerator, which fails noisily on a machine without a GPU.
    export HCC_AMDGPU_TARGET=gfx908
    cxx=hipcc
  fi
  bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" "$backend"

  step "Tessera compile-only (${backend}, Kokkos_ARCH_${arch}): configure (${build_dir})"
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

  step "Tessera compile-only (${backend}): build library, apps, unit tests and example"
  start=$(date +%s)
  cmake --build "$build_dir" -j "$TESSERA_JOBS"
  note "${backend}: everything compiled in $(( $(date +%s) - start )) s"
done
