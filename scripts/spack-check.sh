#!/usr/bin/env bash
# Real Spack on Tessera's recipe and environment: Spack's own package audit,
# the concretizer on the three specs the README documents (OpenMP, CUDA for
# H100, ROCm for MI250X) and on spack.yaml, then a check that each
# concretized spec has what the recipe promises. Nothing is fetched or built.
# CI has no Spack, so neither CI nor the README's commands run this; run it
# after changing spack/ or spack.yaml (scripts/lint-spack.py is the offline
# check that CI runs).
#
# Usage: scripts/spack-check.sh SPACK_DIR SPACK_PACKAGES_DIR [WORK_DIR]
#   SPACK_DIR           a Spack 1.1 tree (bin/spack), e.g. tag v1.1.0
#   SPACK_PACKAGES_DIR  a spack/spack-packages tree (repos/spack_repo/builtin)
#   WORK_DIR            Spack's configuration, caches and the environment copy
#                       (default: a new directory under /tmp); never the clone
# SPACK_DIR and SPACK_PACKAGES_DIR may come from TESSERA_SPACK and
# TESSERA_SPACK_PACKAGES instead. Spack's Python must import clingo: with
# bootstrapping off, give it one that has it, e.g.
#   python3 -m venv /tmp/spack-venv && /tmp/spack-venv/bin/pip install clingo==5.8.3
#   SPACK_PYTHON=/tmp/spack-venv/bin/python scripts/spack-check.sh ...
# The configuration is the script's own (user scope in WORK_DIR, an empty
# system scope), so a site's ~/.spack and /etc/spack play no part; the
# compilers are the ones `spack compiler find` sees here.
set -euo pipefail

source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
spack_dir=${1:-${TESSERA_SPACK:-}}
packages_dir=${2:-${TESSERA_SPACK_PACKAGES:-}}
work=${3:-}
usage="usage: $0 SPACK_DIR SPACK_PACKAGES_DIR [WORK_DIR] (or TESSERA_SPACK, TESSERA_SPACK_PACKAGES)"
[ -n "$spack_dir" ] && [ -n "$packages_dir" ] || { echo "$usage" >&2; exit 2; }
[ -x "${spack_dir}/bin/spack" ] || {
  echo "spack-check: ${spack_dir}/bin/spack not found: give a Spack tree (e.g. git archive v1.1.0)" >&2
  exit 2
}
builtin="${packages_dir}/repos/spack_repo/builtin"
[ -f "${builtin}/repo.yaml" ] || {
  echo "spack-check: ${builtin}/repo.yaml not found: give a spack/spack-packages tree" >&2
  exit 2
}
python="${SPACK_PYTHON:-python3}"
"$python" -c 'import clingo' 2>/dev/null || {
  echo "spack-check: ${python} cannot import clingo, Spack's solver; set SPACK_PYTHON to a" \
    "Python that has it (pip install clingo==5.8.3 in a venv)" >&2
  exit 2
}
if [ -z "$work" ]; then
  work=$(mktemp -d /tmp/tessera-spack-check.XXXXXX)
fi
case "$(cd "$work" 2>/dev/null && pwd)/" in
  "${source_dir}/"*) echo "spack-check: WORK_DIR must lie outside the clone" >&2; exit 2 ;;
esac
mkdir -p "${work}/user" "${work}/system" "${work}/env"
export SPACK_USER_CONFIG_PATH="${work}/user" SPACK_SYSTEM_CONFIG_PATH="${work}/system"
export SPACK_USER_CACHE_PATH="${work}/cache" SPACK_PYTHON="$python"
unset SPACK_DISABLE_LOCAL_CONFIG  # it would also switch off the user scope above
spack=("${spack_dir}/bin/spack")
cat > "${work}/user/repos.yaml" <<EOF
repos::
  tessera: ${source_dir}/spack/spack_repo/tessera
  builtin: ${builtin}
EOF
"${spack[@]}" bootstrap disable --scope user > /dev/null
"${spack[@]}" compiler find --scope user > /dev/null
echo "spack-check: Spack $("${spack[@]}" --version), spack-packages" \
  "$(git -C "$packages_dir" log -1 --format='%h %cs' 2>/dev/null || echo '(not a git checkout)')," \
  "configuration in ${work}"

failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

echo "== spack audit packages tessera"
if "${spack[@]}" audit packages tessera 2>&1 | tee "${work}/audit.txt"; then
  grep -q "PKG-DIRECTIVES: passed" "${work}/audit.txt" || fail "audit: no 'PKG-DIRECTIVES: passed'"
else
  fail "spack audit packages tessera"
fi

# The line of one package in `spack spec` output (its first occurrence).
node() { grep -E "[ ^]$2@" "$1" | head -1 || true; }
# expect <spec output> <package> <text> <what it means>: the package's line
# has the text, where name=v in it also matches name:=v (Spack writes a
# value the recipe asked for exactly that way); a trailing space in the text
# rules out further values (scalars:=float, not scalars:=double,float).
expect() {
  local line
  line=$(node "$1" "$2")
  if [ -z "$line" ]; then
    fail "$(basename "$1" .txt): no $2 in the concretized spec"
  elif grep -qF -- "$3" <<<"${line} " || grep -qF -- "$3" <<<"${line//:=/=} "; then
    echo "ok   $(basename "$1" .txt): $2 has '$3' ($4)"
  else
    fail "$(basename "$1" .txt): $2 lacks '$3' ($4): ${line}"
  fi
}

concretize() {
  local name="$1"
  shift
  echo "== spack spec $*"
  if ! "${spack[@]}" spec -l "$@" > "${work}/${name}.txt" 2>&1; then
    cat "${work}/${name}.txt"
    fail "${name}: spack spec $* does not concretize"
    return 1
  fi
  grep -E "[ ^](tessera|kokkos|kokkos-kernels|openblas|openmpi|mpich|cray-mpich|rocblas|py-matplotlib)@" \
    "${work}/${name}.txt" || true
}

if concretize openmp tessera; then
  expect "${work}/openmp.txt" kokkos "+openmp" "the host backend"
  expect "${work}/openmp.txt" kokkos-kernels "scalars:=float " "float kernels only"
  expect "${work}/openmp.txt" kokkos-kernels "layouts=right" "row-major"
  expect "${work}/openmp.txt" openblas "threads=openmp" "one OpenMP thread pool"
fi
if concretize cuda tessera +cuda cuda_arch=90 +gpu_aware_mpi; then
  expect "${work}/cuda.txt" kokkos "cuda_arch=90" "H100 code in Kokkos"
  expect "${work}/cuda.txt" kokkos "+cuda_lambda" "extended lambdas"
  expect "${work}/cuda.txt" kokkos-kernels "cuda_arch=90" "H100 code in Kokkos Kernels"
  expect "${work}/cuda.txt" kokkos-kernels "scalars:=float " "float kernels only"
  expect "${work}/cuda.txt" openmpi "+cuda" "a CUDA-aware MPI"
fi
if concretize rocm tessera +rocm amdgpu_target=gfx90a +gpu_aware_mpi; then
  expect "${work}/rocm.txt" kokkos "amdgpu_target=gfx90a" "MI250X code in Kokkos"
  expect "${work}/rocm.txt" rocblas "amdgpu_target=gfx90a" "MI250X code in rocBLAS"
  expect "${work}/rocm.txt" kokkos-kernels "+rocblas" "rocBLAS for gemm"
  expect "${work}/rocm.txt" openmpi "+rocm" "a ROCm-aware MPI"
fi

# The environment, copied so that spack.lock lands in WORK_DIR: its repos:
# and develop: paths point back at the clone.
echo "== spack concretize (spack.yaml)"
sed -e "s|^\(    tessera: \)spack/|\1${source_dir}/spack/|" \
  -e "s|^\(      path: \)\.$|\1${source_dir}|" "${source_dir}/spack.yaml" > "${work}/env/spack.yaml"
rm -f "${work}/env/spack.lock"
if "${spack[@]}" -e "${work}/env" concretize > "${work}/env.txt" 2>&1; then
  grep -E "[ ^](tessera|kokkos|kokkos-kernels|openblas)@" "${work}/env.txt" || true
  expect "${work}/env.txt" tessera "dev_path=${source_dir}" "developed in place"
  expect "${work}/env.txt" kokkos-kernels "scalars:=float " "float kernels only"
  expect "${work}/env.txt" openblas "threads=openmp" "one OpenMP thread pool"
else
  cat "${work}/env.txt"
  fail "spack.yaml does not concretize"
fi

if [ "$failures" -ne 0 ]; then
  echo "spack-check: ${failures} check(s) failed; outputs in ${work}"
  exit 1
fi
echo "spack-check: audit clean, 3 specs and spack.yaml concretize as the recipe promises"
