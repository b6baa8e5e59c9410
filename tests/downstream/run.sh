#!/usr/bin/env bash
# Installs the Tessera build into a scratch prefix, then configures, builds
# and runs the downstream project against it with find_package(Tessera);
# then checks that the installed config refuses a Kokkos it was not built with.
# Usage: run.sh <tessera build dir> <downstream source dir> <prefix path> <C++ compiler>
set -euo pipefail
build="$1" source="$2" prefix_path="$3" cxx="$4"
scratch="${build}/downstream-test"
rm -rf "$scratch"
cmake --install "$build" --prefix "${scratch}/install" > "${scratch}.install.log" 2>&1 \
  || { cat "${scratch}.install.log"; exit 1; }
cmake -S "$source" -B "${scratch}/build" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="${scratch}/install;${prefix_path}"
cmake --build "${scratch}/build"
"${scratch}/build/downstream"

# Another Kokkos first on the prefix path: find_package(Tessera) must refuse
# it and say why, instead of building against headers Tessera was not built with.
fake="${scratch}/other-kokkos/lib/cmake/Kokkos"
mkdir -p "$fake"
cat > "${fake}/KokkosConfigVersion.cmake" <<'VERSION'
set(PACKAGE_VERSION "4.99.00")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
VERSION
cat > "${fake}/KokkosConfig.cmake" <<'CONFIG'
set(Kokkos_DEVICES SERIAL)
CONFIG
if cmake -S "$source" -B "${scratch}/build-other" -DCMAKE_CXX_COMPILER="$cxx" \
     -DCMAKE_PREFIX_PATH="${scratch}/other-kokkos;${scratch}/install;${prefix_path}" \
     > "${scratch}/other.log" 2>&1; then
  echo "downstream: configured against another Kokkos"; exit 1
fi
grep -q "but Kokkos 4.99.00 was found" "${scratch}/other.log" \
  || { cat "${scratch}/other.log"; echo "downstream: no message about the other Kokkos"; exit 1; }
echo "downstream: another Kokkos is refused: $(grep -o 'Tessera was built with Kokkos [^,]*, but Kokkos 4.99.00 was found' "${scratch}/other.log")"
