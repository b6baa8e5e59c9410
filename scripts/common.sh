# shellcheck shell=bash
# Shared helpers for Tessera's setup scripts: named steps that fail loudly,
# and the locations of cached dependency prefixes.
# Sourced, not executed.

set -Eeuo pipefail

# Used by the scripts that source this file:
# shellcheck disable=SC2034
TESSERA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Dependency prefixes live outside the clone so a fresh clone reuses them.
TESSERA_DEPS_DIR="${TESSERA_DEPS_DIR:-/opt/tessera-deps}"
TESSERA_JOBS="${TESSERA_JOBS:-$(nproc)}"

# Kokkos 3.4 warns unless thread binding is set; these also keep the
# OpenMP pool well-behaved next to OpenBLAS (see README, "Threads").
export OMP_PROC_BIND="${OMP_PROC_BIND:-spread}"
export OMP_PLACES="${OMP_PLACES:-threads}"
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

_tessera_current_step=""

_tessera_on_error() {
  local rc=$?
  # Subshells exit quietly; the main shell reports once.
  [ "$BASHPID" = "$$" ] || exit "$rc"
  echo "" >&2
  echo "tessera setup: FAILED in step '${_tessera_current_step:-<none>}' (exit ${rc})" >&2
  echo "tessera setup: the full command output is above; fix the cause and re-run — finished steps are skipped." >&2
  exit "$rc"
}
trap _tessera_on_error ERR

# step "name" : announce a named step; errors after it are reported under that name.
step() {
  _tessera_current_step="$1"
  printf '\n==> [%s] %s\n' "$(date +%H:%M:%S)" "$1"
}

note() { printf '    %s\n' "$*"; }

# build_progress <log> <cmake --build arguments...>: the build's whole output
# goes to <log>; what is shown is each tenth of the way done (from Make's
# "[ NN%]" lines), so a long quiet build shows that it moves. Its status is
# the build's.
build_progress() {
  local log="$1"
  shift
  cmake --build "$@" 2>&1 | tee "$log" | awk '
    /^\[ *[0-9]+%\]/ {
      p = int(substr($0, 2))
      if (p >= next_p) { printf "    %d%% built\n", p; fflush(); next_p = p - p % 10 + 10 }
    }'
  return "${PIPESTATUS[0]}"
}

die() {
  echo "tessera setup: error in step '${_tessera_current_step:-<none>}': $*" >&2
  exit 1
}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Install the Debian packages given as arguments that are not installed yet.
apt_install() {
  local missing=()
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    note "all ${#} packages already installed"
    return 0
  fi
  note "installing: ${missing[*]}"
  apt_locked apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt_locked apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# apt_locked <command...>: the command as root, holding the lock every apt
# call of these scripts takes, so that an install running beside another
# (CI installs the GPU toolchains in the background) waits its turn
# instead of failing on apt's own locks.
apt_locked() {
  as_root flock "${TESSERA_APT_LOCK:-/var/lock/tessera-apt.lock}" "$@"
}

# Add a deb-src (and optionally contrib/non-free) entry mirroring the existing bookworm one.
ensure_apt_source() {
  local name="$1" types="$2" components="$3"
  local file="/etc/apt/sources.list.d/${name}.sources"
  [ -f "$file" ] && return 0
  local uris
  uris=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uris" ] || uris="http://deb.debian.org/debian"
  note "adding apt source ${file} (${types}: ${components})"
  as_root tee "$file" >/dev/null <<SRC
Types: ${types}
URIs: ${uris}
Suites: bookworm
Components: ${components}
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt_locked apt-get update -qq
}

# Kokkos' OpenMP threads and OpenBLAS must share one thread pool: with the
# pthread flavour, idle OpenMP threads spin and the two pools fight over the
# cores (3x slower on 2 cores). Select Debian's OpenMP flavour of OpenBLAS.
select_openblas_openmp() {
  local alt=/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0
  [ -f "$alt" ] || die "${alt} missing (package libopenblas0-openmp)"
  if [ "$(readlink -f /etc/alternatives/libopenblas.so.0-x86_64-linux-gnu 2>/dev/null)" != "$alt" ]; then
    note "selecting the OpenMP flavour of OpenBLAS"
    as_root update-alternatives --set libopenblas.so.0-x86_64-linux-gnu "$alt" >/dev/null
  fi
}

# OpenBLAS on narrower vector kernels than the CPU has (Debian's 0.3.21
# takes its AVX2 Haswell kernels on AMD family 26, an AVX-512 CPU): a
# Tessera app warns at start-up (and in --version) and names the
# OPENBLAS_CORETYPE that fixes it; export that for the steps that follow (app: tessera-train). A value
# the caller set stays.
apply_openblas_coretype() {
  local app="$1" coretype
  if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    note "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE} (set by the caller)"
    return 0
  fi
  coretype=$("$app" --version 2>&1 | sed -n 's/.*Set OPENBLAS_CORETYPE=\([A-Za-z]*\).*/\1/p' | head -1 || true)
  if [ -n "$coretype" ]; then
    export OPENBLAS_CORETYPE="$coretype"
    note "OpenBLAS chose narrower kernels than the CPU has: OPENBLAS_CORETYPE=${coretype} from here on"
  else
    note "OpenBLAS's kernels use the CPU's widest vectors"
  fi
}

# Debian's CUDA 11.8 for the compile-only builds, whatever newer CUDA the
# machine also carries: its nvcc may come first in PATH, CUDA_HOME and
# LIBRARY_PATH may point at it, and its headers may be linked into
# /usr/local/include, which the host compiler searches before /usr/include,
# so that nvcc 11.8 would read CUDA 13's cuda_fp16.h. This puts /usr/bin
# first, drops those variables, and puts a folder of links to /usr/include's
# copy of every name /usr/local/include also holds on CPLUS_INCLUDE_PATH,
# which the host compiler searches before its system folders.
use_debian_cuda() {
  local shadow="${TESSERA_DEPS_DIR}/debian-cuda-include" entry name
  export PATH="/usr/bin:${PATH}"
  export NVCC_WRAPPER_DEFAULT_COMPILER=g++-11
  unset CUDA_HOME LIBRARY_PATH
  rm -rf "$shadow"
  mkdir -p "$shadow"
  for entry in /usr/local/include/*; do
    name=$(basename "$entry")
    if [ -e "$entry" ] && [ -e "/usr/include/${name}" ]; then ln -s "/usr/include/${name}" "${shadow}/${name}"; fi
  done
  export CPLUS_INCLUDE_PATH="${shadow}${CPLUS_INCLUDE_PATH:+:${CPLUS_INCLUDE_PATH}}"
}

# run_ctest <ctest arguments...>: ctest that fails when it finds no test
# (--no-tests=error) and when it reports a test Skipped or Not Run. Inside a
# test binary each skipped case is checked against tests/expected_skips.txt;
# a whole ctest entry skipped is never expected in the project's scripts.
run_ctest() {
  local log rc=0
  log=$(mktemp)
  ctest --no-tests=error "$@" 2>&1 | tee "$log" || rc=$?
  if grep -q "The following tests did not run:" "$log"; then
    sed -n '/The following tests did not run:/,/^$/p' "$log" >&2
    rm -f "$log"
    die "ctest skipped the tests listed above; a test the suite registers must run"
  fi
  rm -f "$log"
  [ "$rc" -eq 0 ] || die "ctest $* failed (exit ${rc})"
}
