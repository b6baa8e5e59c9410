#!/usr/bin/env bash
# On a machine with a GPU: build Tessera for CUDA or HIP and run it there.
# The test suite, each example deck for one epoch, and tessera-bench on each
# deck (on the GPU and, for comparison, on the host CPU), then
# tessera-compare over those reports. Everything lands in one directory.
#
#   scripts/gpu-validate.sh cuda [KOKKOS_ARCH]   default AMPERE80 (A100); HOPPER90 for H100
#   scripts/gpu-validate.sh hip  [KOKKOS_ARCH]   default VEGA90A (MI250X)
#
# The build steps are scripts/setup.sh build (Debian packages, the host
# build in build/) and scripts/build-kokkos.sh for the GPU, with the
# toolchain already on the machine (TESSERA_GPU_TOOLCHAIN=system: nvcc or
# hipcc on PATH, Kokkos Kernels calling cuBLAS or rocBLAS). Environment:
#   TESSERA_KOKKOS_SOURCE   Kokkos and Kokkos Kernels 4.x release sources
#                           (kokkos-4.x/ and kokkos-kernels-4.x/ in one directory);
#                           required for HOPPER90 and VEGA90A, which Debian's
#                           Kokkos 3.4.01 does not know
#   TESSERA_VALIDATE_DIR    output directory (default: <clone>/gpu-validate-<backend>)
#   TESSERA_GPU_NAME        platform name in the reports (default: from nvidia-smi / rocm-smi)
# Output: summary.md (what ran, with its results), reports/*.json (tessera-bench),
# compare-<deck>.md (tessera-compare), logs/. Exit status 1 if any step failed
# (the others still run), 2 without a GPU or with bad arguments.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

backend="${1:-}"
case "$backend" in
  cuda) arch="${2:-AMPERE80}" ;;
  hip) arch="${2:-VEGA90A}" ;;
  *) echo "usage: $0 <cuda|hip> [KOKKOS_ARCH]" >&2; exit 2 ;;
esac
case "$arch" in
  AMPERE80|VEGA908|VEGA906|VEGA900) ;;
  *)
    if [ -z "${TESSERA_KOKKOS_SOURCE:-}" ]; then
      echo "gpu-validate: Kokkos_ARCH_${arch} needs Kokkos 4.x: set TESSERA_KOKKOS_SOURCE to a" \
           "directory with kokkos-4.x/ and kokkos-kernels-4.x/ release sources" >&2
      exit 2
    fi
    ;;
esac

step "GPU"
if [ "$backend" = cuda ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
else
  gpu=$(rocm-smi --showproductname 2>/dev/null | sed -n 's/.*Card [Ss]eries: *//p' | head -1 || true)
fi
if [ -z "$gpu" ]; then
  echo "gpu-validate: no ${backend} GPU found ($([ "$backend" = cuda ] && echo nvidia-smi || echo rocm-smi));" \
       "this script runs Tessera on a GPU. Without one, scripts/gpu-compile-check.sh checks" \
       "that everything compiles for CUDA and HIP." >&2
  exit 2
fi
gpu="${TESSERA_GPU_NAME:-$gpu}"
note "$gpu, Kokkos_ARCH_${arch}"

out="${TESSERA_VALIDATE_DIR:-${TESSERA_ROOT}/gpu-validate-${backend}}"
mkdir -p "$out/logs" "$out/reports"
summary="$out/summary.md"
failures=()
# record <step> <status>: one line of the summary
record() { printf '| %s | %s |\n' "$1" "$2" >> "$summary"; }
{
  echo "# gpu-validate ${backend}: ${gpu}"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(hostname), Kokkos_ARCH_${arch}," \
       "Kokkos sources: ${TESSERA_KOKKOS_SOURCE:-Debian trilinos 3.4.01}"
  echo
  echo "| step | result |"
  echo "|---|---|"
} > "$summary"

# The host build (and on Debian the packages): also the CPU reports' build.
host_build="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build}"
TESSERA_BUILD_DIR="$host_build" bash "${TESSERA_ROOT}/scripts/setup.sh" build

export TESSERA_GPU_TOOLCHAIN=system TESSERA_KOKKOS_ARCH="$arch"
bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" "$backend"
prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix "$backend")
if [ "$backend" = cuda ]; then
  cxx="${prefix}/bin/nvcc_wrapper"
else
  cxx=hipcc
fi

build="${TESSERA_ROOT}/build-${backend}-run"
step "Tessera for ${backend}: configure and build (${build})"
cmake -S "$TESSERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" > "$out/logs/configure.log" 2>&1 \
  || { tail -40 "$out/logs/configure.log"; die "configure failed (log: $out/logs/configure.log)"; }
cmake --build "$build" -j "$TESSERA_JOBS" > "$out/logs/build.log" 2>&1 \
  || { tail -60 "$out/logs/build.log"; die "build failed (log: $out/logs/build.log)"; }
record "build" "$("${build}/apps/tessera-train" --version | tr '\n' ';' | sed 's/;$//; s/;/; /g')"

step "test suite on the GPU (ctest)"
if ctest --no-tests=error --test-dir "$build" --output-on-failure -j "$TESSERA_JOBS" > "$out/logs/ctest.log" 2>&1; then
  record "test suite" "$(grep -E 'tests passed' "$out/logs/ctest.log" | tail -1)"
else
  record "test suite" "FAILED: $(grep -E 'tests passed' "$out/logs/ctest.log" | tail -1) (logs/ctest.log)"
  failures+=("test suite")
fi

decks=(fashion_mnist_mlp fashion_mnist_cnn fashion_mnist_resnet)
for deck in "${decks[@]}"; do
  file="${TESSERA_ROOT}/inputs/${deck}.toml"
  step "${deck}: one epoch on the GPU"
  log="$out/logs/train-${deck}.log"
  if "${build}/apps/tessera-train" "$file" --set training.epochs=1 \
       --set "run.output_dir=$out/runs/${deck}" > "$log" 2>&1; then
    record "${deck}, 1 epoch" "$(grep -E '^test accuracy' "$log"); $(grep -m1 -E '^epoch' "$log" | cut -c1-160)"
  else
    record "${deck}, 1 epoch" "FAILED (logs/train-${deck}.log)"
    failures+=("${deck} training")
  fi

  step "${deck}: tessera-bench on the GPU and on the host"
  gpu_report="$out/reports/${deck}-${backend}.json"
  host_report="$out/reports/${deck}-host.json"
  if ! "${build}/apps/tessera-bench" "$file" --platform "$gpu" --json "$gpu_report" \
         > "$out/logs/bench-${deck}-${backend}.log" 2>&1; then
    failures+=("${deck} bench on the GPU")
  fi
  if ! "${host_build}/apps/tessera-bench" "$file" --json "$host_report" \
         > "$out/logs/bench-${deck}-host.log" 2>&1; then
    failures+=("${deck} bench on the host")
  fi
  # A failed bench still writes its report (status "failed"), which rates 0.
  reports=()
  for r in "$gpu_report" "$host_report"; do [ -f "$r" ] && reports+=("$r"); done
  if [ "${#reports[@]}" -gt 0 ] && "${host_build}/apps/tessera-compare" "${reports[@]}" \
       -o "$out/compare-${deck}.md" > "$out/logs/compare-${deck}.log" 2>&1; then
    record "${deck}, tessera-bench" "$(grep -E '^PP of ' "$out/compare-${deck}.md" | head -1) (compare-${deck}.md)"
  else
    record "${deck}, tessera-bench" "FAILED (logs/bench-${deck}-*.log)"
    failures+=("${deck} comparison")
  fi
done

step "summary"
cat "$summary"
if [ "${#failures[@]}" -gt 0 ]; then
  echo "gpu-validate: failed: ${failures[*]}; everything is in ${out}" >&2
  exit 1
fi
note "everything passed; reports and logs in ${out}"
