#!/usr/bin/env bash
# Prepare, on a machine with network, everything a GPU machine without
# network (no apt, no MPI, HDF5 or toml++ installed) needs to run Tessera:
# prebuilt binaries, the shared libraries they load, a relocatable Open MPI,
# and a fixed subset of the data. docs/gpu.md tells the whole path.
#
#   scripts/gpu-bundle.sh DIR [cuda [KOKKOS_ARCH]]   default: cuda HOPPER90 (H100, H200)
#   scripts/gpu-bundle.sh DIR openmp                 the host build of scripts/setup.sh,
#                                                    for the dry run on a CPU machine
#
# cuda: Kokkos and Kokkos Kernels 4.x from the release sources in
# TESSERA_KOKKOS_SOURCE (by default ../shared/kokkos beside the clone, where
# it exists), built with Debian's CUDA 11.8 for KOKKOS_ARCH by
# scripts/build-kokkos.sh without cuBLAS, cuSPARSE and cuSOLVER; Tessera built against them in
# build-bundle-cuda-<arch>, optimised, with -DTessera_ENABLE_CUBLAS=OFF
# (cuBLAS 11's libraries, 670 MB, cannot travel): every product runs Kokkos
# Kernels' or Tessera's own kernels on the GPU. The CUDA runtime travels
# with the binaries; the driver (libcuda) is the GPU machine's own.
# openmp: the binaries of the build scripts/setup.sh made (TESSERA_BUILD_DIR,
# default build/), with Debian's Kokkos 3.4.01.
#
# Output: DIR/ with libexec/ (the apps and the unit tests; bin/ runs them with
# the bundle's libraries), lib/ (every shared
# library they and Open MPI's plugins load, but glibc's and the GPU
# driver's), mpi/ (Open MPI 4.1 and PMIx 4, relocated through OPAL_PREFIX
# and PMIx's plugin path), data/ (the first TESSERA_BUNDLE_TRAIN_SAMPLES (10000) and
# TESSERA_BUNDLE_TEST_SAMPLES (2000) images of Fashion-MNIST, the GPT deck's
# byte tokens), env.sh (sourced by scripts/gpu-validate.sh --bundle),
# MANIFEST.md (what is inside, by part, with sizes); and DIR.tar.xz, the one
# file to carry. Environment: TESSERA_DATA_DIR (Fashion-MNIST, default
# /usr/share/datasets/fashion-mnist), TESSERA_TOKEN_DIR (the byte tokens,
# default /var/lib/tessera).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  echo "usage: $0 DIR [cuda [KOKKOS_ARCH] | openmp]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
out="$1"
backend="${2:-cuda}"
case "$backend" in
  cuda) arch="${3:-HOPPER90}" ;;
  openmp) arch="" ;;
  *) usage ;;
esac
case "$out" in
  "" | / | "$TESSERA_ROOT") die "DIR '${out}': give a new directory for the bundle" ;;
esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
fmnist="${TESSERA_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
tokens="${TESSERA_TOKEN_DIR:-/var/lib/tessera}"
train_samples="${TESSERA_BUNDLE_TRAIN_SAMPLES:-10000}"
test_samples="${TESSERA_BUNDLE_TEST_SAMPLES:-2000}"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [ -f "${fmnist}/${f}" ] || die "${fmnist}/${f} missing: run scripts/setup.sh first, or set TESSERA_DATA_DIR"
done
for f in devil.train.bin devil.val.bin; do
  [ -f "${tokens}/${f}" ] || die "${tokens}/${f} missing: run scripts/setup.sh first, or set TESSERA_TOKEN_DIR"
done

apps=(tessera-train tessera-predict tessera-bench tessera-synthetic tessera-inspect)
if [ "$backend" = cuda ]; then
  release_source="${TESSERA_KOKKOS_SOURCE:-}"
  if [ -z "$release_source" ] && [ -d "${TESSERA_ROOT}/../shared/kokkos" ]; then
    release_source=$(cd "${TESSERA_ROOT}/../shared/kokkos" && pwd)
  fi
  [ -n "$release_source" ] || die "Kokkos_ARCH_${arch} needs Kokkos 4.x: set TESSERA_KOKKOS_SOURCE to a directory with its release sources (see scripts/build-kokkos.sh)"
  export TESSERA_KOKKOS_SOURCE="$release_source" TESSERA_KOKKOS_ARCH="$arch" \
    TESSERA_KOKKOS_VENDOR_LIBRARIES=off
  bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" cuda
  prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix cuda)
  use_debian_cuda
  build="${TESSERA_ROOT}/build-bundle-cuda-${arch,,}"
  # A build configured against another Kokkos prefix keeps finding that one.
  if [ -f "${build}/CMakeCache.txt" ] && ! grep -q "^CMAKE_PREFIX_PATH:.*=${prefix}\$" "${build}/CMakeCache.txt"; then
    rm -rf "$build"
  fi
  step "Tessera for CUDA (Kokkos_ARCH_${arch}): configure (${build})"
  # One executable for all unit tests (Tessera_ENABLE_COMPILE_ONLY): nvcc
  # reads Kokkos' headers once per batch, and one binary carries the device
  # code of the test kernels once. Host code at -O0 (nvcc optimises the
  # device code all the same): CUDA 11 gives each translation unit its own
  # hidden state for a __host__ __device__ lambda, and when the optimiser
  # inlines a lambda's constructor in one unit while the linker takes its
  # copy constructor from another, the copy calls a null pointer (the first
  # run on an H100 crashed so in every unit test that launched a kernel
  # instantiated both in the library and in a test). Without inlining, each
  # lambda's constructor and copy come from the same unit.
  cmake -S "$TESSERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
    -DCMAKE_CXX_COMPILER="${prefix}/bin/nvcc_wrapper" -DCMAKE_PREFIX_PATH="$prefix" \
    -DTessera_ENABLE_COMPILE_ONLY=ON -DTessera_ENABLE_CUBLAS=OFF > "${build}.configure.log" 2>&1 \
    || { tail -40 "${build}.configure.log"; die "CMake configure failed (log: ${build}.configure.log)"; }
  step "Tessera for CUDA: build the apps and the unit tests"
  start=$(date +%s)
  build_progress "${build}.build.log" "$build" -j "$TESSERA_JOBS" \
    --target "${apps[@]}" tessera_unit_tests_compile_only \
    || { tail -40 "${build}.build.log"; die "build failed (log: ${build}.build.log)"; }
  note "built in $(( $(date +%s) - start )) s"
  unit_tests=("${build}/tests/tessera_unit_tests_compile_only")
  kokkos_label="Kokkos and Kokkos Kernels $(sed -n 's/^set(PACKAGE_VERSION "\([0-9.]*\)")/\1/p' \
    "${prefix}/lib/cmake/Kokkos/KokkosConfigVersion.cmake" | head -1) (${prefix})"
  toolkit="Debian CUDA $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), host g++-11"
else
  build="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build}"
  step "Tessera for the host: the build in ${build}"
  [ -x "${build}/apps/tessera-train" ] \
    || die "${build}/apps/tessera-train missing: run scripts/setup.sh build first (or set TESSERA_BUILD_DIR)"
  mapfile -t unit_tests < <(find "${build}/tests" -maxdepth 1 -type f -executable -name 'test_*' | sort)
  [ "${#unit_tests[@]}" -gt 0 ] || die "no unit test executables in ${build}/tests: build target tessera_unit_tests"
  kokkos_dir=$(sed -n 's/^Kokkos_DIR:[A-Z]*=//p' "${build}/CMakeCache.txt" | head -1)
  kokkos_label="Kokkos $(sed -n 's/^set(PACKAGE_VERSION "\([0-9.]*\)")/\1/p' \
    "${kokkos_dir}/KokkosConfigVersion.cmake" 2> /dev/null | head -1) (${kokkos_dir})"
  toolkit="$(g++ --version | head -1)"
fi

# wrap <real binary> <wrapper> <path from the wrapper's folder to lib/>: a
# script that runs the binary with the bundle's libraries. Only the bundle's
# programs see them: the node's own (Python, compute-sanitizer) keep the
# node's newer libstdc++.
wrap() {
  local real="$1" wrapper="$2" to_lib="$3" to_real
  to_real=$(realpath --relative-to="$(dirname "$wrapper")" "$real")
  cat > "$wrapper" <<WRAPPER
#!/bin/sh
# The bundle's ${to_real}, with the bundle's libraries.
here=\$(dirname "\$(readlink -f "\$0")")
LD_LIBRARY_PATH="\${here}/${to_lib}\${LD_LIBRARY_PATH:+:\${LD_LIBRARY_PATH}}" exec "\${here}/${to_real}" "\$@"
WRAPPER
  chmod +x "$wrapper"
}

step "binaries (${out}/libexec, run through ${out}/bin)"
rm -rf "${out:?}/bin" "${out:?}/libexec" "${out:?}/lib" "${out:?}/mpi" "${out:?}/data"
mkdir -p "${out}/bin/tests" "${out}/libexec/tests" "${out}/lib" "${out}/data/fashion-mnist" \
  "${out}/data/tokens"
for app in "${apps[@]}"; do
  [ -x "${build}/apps/${app}" ] || die "${build}/apps/${app} missing"
  cp "${build}/apps/${app}" "${out}/libexec/"
  wrap "${out}/libexec/${app}" "${out}/bin/${app}" ../lib
done
for t in "${unit_tests[@]}"; do
  # The CUDA build's single test executable travels as tessera_unit_tests.
  name=$(basename "$t")
  [ "$name" != tessera_unit_tests_compile_only ] || name=tessera_unit_tests
  cp "$t" "${out}/libexec/tests/${name}"
  wrap "${out}/libexec/tests/${name}" "${out}/bin/tests/${name}" ../../lib
done
strip --strip-unneeded "${out}"/libexec/tessera-* "${out}"/libexec/tests/*
note "$(find "${out}/libexec" -type f | wc -l) executables, $(du -sh "${out}/libexec" | cut -f1)"

step "Open MPI and PMIx, relocatable (${out}/mpi)"
ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi/lib
pmix_root=/usr/lib/x86_64-linux-gnu/pmix2
[ -d "${ompi_lib}/openmpi3" ] || die "${ompi_lib}/openmpi3 missing (package libopenmpi3)"
mpi="${out}/mpi"
# The tree as configured (prefix /usr, libdir lib/x86_64-linux-gnu/openmpi/lib),
# so that OPAL_PREFIX=${mpi} moves every path with it.
mkdir -p "${mpi}/bin" "${mpi}/libexec" "${mpi}/lib/x86_64-linux-gnu/openmpi/lib/openmpi3" \
  "${mpi}/share" "${mpi}/pmix2/lib/pmix" "${mpi}/pmix2/share"
cp /usr/bin/orterun /usr/bin/orted "${mpi}/libexec/"
wrap "${mpi}/libexec/orterun" "${mpi}/bin/orterun" ../../lib
wrap "${mpi}/libexec/orted" "${mpi}/bin/orted" ../../lib
ln -s orterun "${mpi}/bin/mpiexec"
cp -r /usr/share/openmpi "${mpi}/share/"
cp "${pmix_root}"/lib/pmix/*.so "${mpi}/pmix2/lib/pmix/"
cp -r "${pmix_root}/share/pmix" "${pmix_root}/share/pmix-mca-params.conf" "${mpi}/pmix2/share/"
# Plugins for networks a single GPU node does not use (InfiniBand, UCX,
# libfabric, PSM) would drag in their libraries; they stay behind.
for plugin in "${ompi_lib}"/openmpi3/*.so; do
  case "$(basename "$plugin")" in
    *ucx* | *ofi* | *openib* | *psm*) continue ;;
  esac
  cp "$plugin" "${mpi}/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/"
done
strip --strip-unneeded "${mpi}"/libexec/orte* "${mpi}"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so \
  "${mpi}"/pmix2/lib/pmix/*.so

step "shared libraries (${out}/lib)"
# Every library the binaries and plugins load, but the C library's own
# (the GPU machine's glibc is as new or newer) and the GPU driver's.
declare -A seen=()
mapfile -t loaders < <(find "${out}/libexec" "${mpi}/libexec" "${mpi}/lib" "${mpi}/pmix2" -type f \
  \( -perm -u+x -o -name '*.so' \))
for file in "${loaders[@]}"; do
  while read -r name path; do
    case "$name" in
      linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
        librt.so.* | libresolv.so.* | libutil.so.* | libcuda.so.* | libnvidia-*) continue ;;
    esac
    [ -n "$path" ] && [ -z "${seen[$name]:-}" ] || continue
    seen[$name]=1
    cp -L "$path" "${out}/lib/${name}"
  done < <(ldd "$file" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
strip --strip-unneeded "${out}"/lib/*.so* 2>/dev/null || true
note "${#seen[@]} libraries, $(du -sh "${out}/lib" | cut -f1)"

step "data: the first ${train_samples} and ${test_samples} Fashion-MNIST images, the byte tokens"
python3 - "$fmnist" "${out}/data/fashion-mnist" "$train_samples" "$test_samples" <<'PY'
import gzip, struct, sys
source, target, train, test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for prefix, keep in (("train", train), ("t10k", test)):
    for kind in ("images-idx3", "labels-idx1"):
        name = f"{prefix}-{kind}-ubyte.gz"
        with gzip.open(f"{source}/{name}", "rb") as f:
            magic, count = struct.unpack(">II", f.read(8))
            dims = [struct.unpack(">I", f.read(4))[0] for _ in range((magic & 0xFF) - 1)]
            item = 1
            for d in dims:
                item *= d
            keep_n = min(keep, count)
            body = f.read(keep_n * item)
        # mtime 0: the same bytes from every run.
        with open(f"{target}/{name}", "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            out.write(struct.pack(">II", magic, keep_n))
            for d in dims:
                out.write(struct.pack(">I", d))
            out.write(body)
PY
cp "${tokens}/devil.train.bin" "${tokens}/devil.val.bin" "${out}/data/tokens/"

step "env.sh and MANIFEST.md"
cat > "${out}/env.sh" <<'ENV'
# Sourced by scripts/gpu-validate.sh --bundle (or by hand): the bundle's
# binaries, libraries, Open MPI and data, wherever the bundle lies.
TESSERA_BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export TESSERA_BUNDLE
# bin/ and mpi/bin/ hold scripts that run the binaries with the bundle's
# libraries (lib/); nothing else sees those.
export PATH="${TESSERA_BUNDLE}/bin:${TESSERA_BUNDLE}/mpi/bin:${PATH}"
# Open MPI moves with OPAL_PREFIX; PMIx is told where its plugins are.
export OPAL_PREFIX="${TESSERA_BUNDLE}/mpi"
export PMIX_MCA_mca_base_component_path="${TESSERA_BUNDLE}/mpi/pmix2/lib/pmix"
# One node, no ssh, no high-speed network: start ranks locally, talk
# through shared memory.
export OMPI_MCA_plm=isolated OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 \
  OMPI_MCA_mtl=^ofi OMPI_MCA_osc=^ucx,pt2pt OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A node's own PMIx plugins (another version) fail to load: quietly.
export PMIX_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
export TESSERA_DATA_DIR="${TESSERA_BUNDLE}/data/fashion-mnist"
export TESSERA_TOKEN_DIR="${TESSERA_BUNDLE}/data/tokens"
ENV
{
  echo "# Tessera bundle: ${backend}${arch:+, Kokkos_ARCH_${arch}}"
  echo
  echo "Made $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname) from $(git -C "$TESSERA_ROOT" describe --always --dirty 2>/dev/null || echo 'an unknown commit')."
  echo "${kokkos_label}; ${toolkit}."
  if [ "$backend" = cuda ]; then
    echo "Products: Kokkos Kernels' own gemm and Tessera's tiled 16-bit product (no cuBLAS)."
  fi
  echo
  echo "| part | files | size |"
  echo "|---|---:|---:|"
  for part in libexec lib mpi data; do
    echo "| ${part}/ | $(find "${out}/${part}" -type f | wc -l) | $(du -sh "${out}/${part}" | cut -f1) |"
  done
  echo
  echo "Executables:"
  echo
  find "${out}/libexec" -type f -printf '%P %s\n' | sort | awk '{printf "- %s: %.1f MB\n", $1, $2 / 1e6}'
} > "${out}/MANIFEST.md"

step "pack (${out}.tar.xz)"
tar -C "$(dirname "$out")" -cf - "$(basename "$out")" | xz -T "$TESSERA_JOBS" -6 > "${out}.tar.xz"
cat "${out}/MANIFEST.md"
note "bundle: ${out} ($(du -sh "$out" | cut -f1)), packed: ${out}.tar.xz ($(du -h "${out}.tar.xz" | cut -f1))"
