#!/usr/bin/env bash
# Set up a Debian 12 machine for Tessera, build it, and run the main job.
#
#   scripts/setup.sh train [deck [tessera-train options]]
#                                  packages, Kokkos, build, then train the default deck
#                                  (a second run into the same output folder needs
#                                  --overwrite, --restart latest or another run.output_dir)
#   scripts/setup.sh test          packages, Kokkos, build, then the whole test suite (ctest)
#   scripts/setup.sh build         packages, Kokkos, build the library and apps only
#   scripts/setup.sh bench         packages (with python3-torch), PyTorch 2.x from PyPI in a
#                                  virtual environment (bench/venv.sh), Kokkos, build, then
#                                  bench/side_by_side.sh (Tessera against PyTorch)
#
# Every step is idempotent: a second run skips what is finished. Environment:
#   TESSERA_BUILD_DIR  build directory           (default: <clone>/build)
#   TESSERA_DEPS_DIR   cached dependency prefixes (default: /opt/tessera-deps)
#   TESSERA_JOBS       parallel build jobs        (default: nproc)
#   TESSERA_CCACHE     0: build without ccache    (default: ccache, from Debian)
#   TESSERA_TOKEN_DIR  byte-level token files, written here once and read by
#                      decks as ${TESSERA_TOKEN_DIR} (default: /var/lib/tessera;
#                      TESSERA_DATA_DIR, Fashion-MNIST for the decks, is
#                      Debian's package's directory unless set)
#   TESSERA_HOST_FAST_PATHS  OFF: the kernels and schedules of the GPU builds on
#                      the host (CMake Tessera_HOST_FAST_PATHS; default ON)
#   TESSERA_KOKKOS_SOURCE, TESSERA_KOKKOS_CXX_STANDARD, TESSERA_KOKKOS_BOUNDS_CHECK
#                      Kokkos release sources instead of Debian's 3.4.01, and
#                      the C++ standard of Kokkos and Tessera (17 or 20; see
#                      scripts/build-kokkos.sh and scripts/test-kokkos-release.sh)
#   TESSERA_CTEST_EXCLUDE  test: a regular expression of labels whose tests
#                      this suite leaves out (ctest -LE; default: none, the
#                      whole suite)
#   TESSERA_CTEST_LABELS   test: a regular expression of labels; only their
#                      tests run (ctest -L; default: every label)
#   TESSERA_CTEST_EXCLUDE_TESTS  test: a regular expression of test names this
#                      suite leaves out (ctest -E; default: none)
#   TESSERA_CMAKE_ARGS further arguments to Tessera's CMake configure, split
#                      at spaces (e.g. -DTessera_ENABLE_HEADER_CHECK=OFF)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

action="${1:-build}"
case "$action" in
  train|test|build|bench) ;;
  *) echo "usage: $0 <train [deck.toml [tessera-train options]]|test|build|bench>" >&2; exit 2 ;;
esac
build_dir="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build}"

step "Debian packages"
apt_install g++ cmake make pkg-config libopenblas-dev libopenblas-openmp-dev \
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools \
  libgtest-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev \
  dataset-fashion-mnist dict-devil python3 python3-matplotlib ccache
if [ "$action" != train ]; then
  # tessera-export (built by build, bench and test) writes ONNX with
  # Debian's onnx and reads checkpoints with h5py.
  step "Debian packages for tessera-export"
  apt_install python3-h5py python3-onnx
fi
if [ "$action" = test ]; then
  # The style tests (clang-format 14, shellcheck), the check of the
  # side-by-side PyTorch twins and of the PyTorch exports (Debian's
  # PyTorch) fail without them; the ONNX exports are run by ONNX Runtime
  # and onnx's reference evaluator from PyPI, in a virtual environment.
  step "Debian packages for the test suite"
  apt_install clang-format shellcheck python3-torch python3-venv
  step "ONNX Runtime and onnx from PyPI (tests/export/requirements.txt)"
  venv_dir=$(bash "${TESSERA_ROOT}/scripts/venv.sh" --create \
    "${TESSERA_ROOT}/tests/export/requirements.txt" onnx onnxruntime)
  note "virtual environment: ${venv_dir}"
fi
if [ "$action" = bench ]; then
  # Debian's PyTorch 1.13 is the second reference; PyTorch 2.x from PyPI the
  # first, in a virtual environment of Debian's Python, whose headers
  # torch.compile compiles against.
  step "Debian packages for the PyTorch references"
  apt_install python3-torch python3-venv python3-dev
  step "PyTorch 2.x from PyPI (bench/requirements.txt; several GB the first time)"
  venv_dir=$(bash "${TESSERA_ROOT}/bench/venv.sh" --create)
  note "virtual environment: ${venv_dir}"
fi
select_openblas_openmp

bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" openmp
kokkos_prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix openmp)

# A build directory built again from nothing (removed, or a branch switched
# back) takes its objects from ccache's cache (~/.cache/ccache, `ccache -s`
# shows its hits); TESSERA_CCACHE=0 builds without it.
if [ "${TESSERA_CCACHE:-1}" != 0 ] && command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  launcher=(-UCMAKE_CXX_COMPILER_LAUNCHER)
fi

read -ra extra_cmake_args <<< "${TESSERA_CMAKE_ARGS:-}"

step "Tessera: configure (${build_dir})"
# Tessera's own kernels for this machine's vector instructions (AVX2 and FMA,
# AVX-512): the build and the runs happen here (README, "CMake options").
cmake -S "$TESSERA_ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$kokkos_prefix" -DBUILD_SHARED_LIBS=ON -DTessera_HOST_ARCH=native \
  -DTessera_TEST_CONFIGURATION=setup -DCMAKE_CXX_STANDARD="${TESSERA_KOKKOS_CXX_STANDARD:-17}" \
  -DTessera_HOST_FAST_PATHS="${TESSERA_HOST_FAST_PATHS:-ON}" -DTessera_PYTHON=/usr/bin/python3 \
  "${launcher[@]}" "${extra_cmake_args[@]}" > "${build_dir}.configure.log" 2>&1 \
  || { cat "${build_dir}.configure.log"; die "CMake configure failed"; }
note "configured (log: ${build_dir}.configure.log)"

# Each command builds what it runs: train the library, tessera-train and
# tessera-tokenize (which prepares the GPT deck's tokens); build and bench
# every app; test everything, the test suite included. Make prints the
# percentage done on each line.
case "$action" in
  train) targets=(tessera-train tessera-tokenize) ;;
  build|bench) targets=(tessera_apps) ;;
  test) targets=(all) ;;
esac
step "Tessera: build (${targets[*]}; ${TESSERA_JOBS} jobs)"
build_start=$(date +%s)
cmake --build "$build_dir" -j "$TESSERA_JOBS" --target "${targets[@]}"
note "built in $(( $(date +%s) - build_start )) s"

# inputs/tiny_gpt.toml trains on The Devil's Dictionary (Ambrose Bierce,
# public domain; Debian's dict-devil), one token per byte, its last tenth
# held out.
token_dir="${TESSERA_TOKEN_DIR:-/var/lib/tessera}"
if [ ! -s "${token_dir}/devil.val.bin" ]; then
  step "Byte-level tokens of The Devil's Dictionary (${token_dir})"
  as_root mkdir -p "$token_dir"
  as_root "${build_dir}/apps/tessera-tokenize" /usr/share/dictd/devil.dict.dz --out "${token_dir}/devil" \
    || die "tessera-tokenize failed"
fi

step "OpenBLAS kernels"
apply_openblas_coretype "${build_dir}/apps/tessera-train"

case "$action" in
  train)
    deck="${2:-${TESSERA_ROOT}/inputs/fashion_mnist_mlp.toml}"
    step "train ${deck}"
    "${build_dir}/apps/tessera-train" "$deck" "${@:3}"
    ;;
  bench)
    step "Tessera against PyTorch (bench/side_by_side.sh)"
    TESSERA_BUILD_DIR="$build_dir" bash "${TESSERA_ROOT}/bench/side_by_side.sh"
    ;;
  test)
    step "test suite (ctest)"
    selection=()
    if [ -n "${TESSERA_CTEST_LABELS:-}" ]; then
      selection+=(-L "$TESSERA_CTEST_LABELS")
      note "running the tests labelled ${TESSERA_CTEST_LABELS}"
    fi
    if [ -n "${TESSERA_CTEST_EXCLUDE:-}" ]; then
      selection+=(-LE "$TESSERA_CTEST_EXCLUDE")
      note "leaving out the tests labelled ${TESSERA_CTEST_EXCLUDE}"
    fi
    if [ -n "${TESSERA_CTEST_EXCLUDE_TESTS:-}" ]; then
      selection+=(-E "$TESSERA_CTEST_EXCLUDE_TESTS")
      note "leaving out the tests named ${TESSERA_CTEST_EXCLUDE_TESTS}"
    fi
    run_ctest --test-dir "$build_dir" --output-on-failure -j "$TESSERA_JOBS" "${selection[@]}"
    ;;
esac
