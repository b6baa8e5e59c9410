#!/usr/bin/env bash
# The GPU bundle's whole path, on this CPU machine: scripts/gpu-bundle.sh
# bundles the host build (Debian's Kokkos, OpenMP), and
# scripts/gpu-validate.sh --bundle runs the bundle from a scratch directory
# as a GPU machine would: with the network cut (unshare -n), no apt, and
# Debian's Open MPI and PMIx hidden (a private mount namespace lays empty
# folders over them), so that the bundle's relocated copy (OPAL_PREFIX)
# must serve. Run as root, after the README's setup (scripts/setup.sh build).
#
#   scripts/gpu-bundle-dry-run.sh        (.ci/run runs it; about 4 minutes)
#
# Environment: TESSERA_BUILD_DIR (default build/), TESSERA_VALIDATE_SECONDS
# (default 420). Exit status: gpu-validate.sh's (0 when every step passed).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ "$(id -u)" -eq 0 ] || die "the dry run cuts the network and hides Open MPI in namespaces: run it as root"
build="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build}"
[ -f "${build}/CMakeCache.txt" ] || die "${build} is not configured: run scripts/setup.sh build first (or set TESSERA_BUILD_DIR)"

step "packages for the dry run (unshare, ip)"
apt_install util-linux iproute2 xz-utils

step "the host build's apps and unit tests (${build})"
cmake --build "$build" -j "$TESSERA_JOBS" --target tessera-train tessera-bench tessera-synthetic \
  tessera-inspect tessera_unit_tests > /dev/null

scratch=$(mktemp -d /tmp/tessera-dry-run.XXXXXX)
TESSERA_BUILD_DIR="$build" bash "${TESSERA_ROOT}/scripts/gpu-bundle.sh" "${scratch}/bundle-host" openmp

step "gpu-validate.sh --bundle, network cut, Debian's Open MPI hidden (${scratch})"
mkdir -p "${scratch}/empty" "${scratch}/work"
# Only the packed bundle goes on: the directory beside it could serve by mistake.
mv "${scratch}/bundle-host.tar.xz" "${scratch}/work/"
rm -rf "${scratch}/bundle-host"
status=0
# shellcheck disable=SC2016 # the inner script expands its own variables
TESSERA_VALIDATE_DIR="${scratch}/validate" TESSERA_VALIDATE_SECONDS="${TESSERA_VALIDATE_SECONDS:-420}" \
  SCRATCH="$scratch" ROOT="$TESSERA_ROOT" unshare --mount --net --propagation private bash -c '
  set -eu
  ip link set lo up
  for hidden in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 \
                /usr/share/openmpi /etc/openmpi; do
    [ ! -d "$hidden" ] || mount --bind "${SCRATCH}/empty" "$hidden"
  done
  for hidden in /usr/bin/orterun /usr/bin/orted; do
    [ ! -e "$hidden" ] || mount --bind /dev/null "$hidden"
  done
  if timeout 5 bash -c "exec 3<>/dev/tcp/deb.debian.org/80" 2> /dev/null; then
    echo "dry run: the network is still reachable" >&2
    exit 1
  fi
  cd "${SCRATCH}/work"
  bash "${ROOT}/scripts/gpu-validate.sh" --bundle bundle-host.tar.xz openmp
' || status=$?
# The summary, reports and logs stay; the bundle's 100 MB go.
rm -rf "${scratch}/work" "${scratch}/validate/bundle" "${scratch}/empty"
note "summary, reports and logs: ${scratch}/validate"
exit "$status"
