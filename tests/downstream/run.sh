#!/usr/bin/env bash
# Installs the Tessera build into a scratch prefix, then configures, builds
# and runs the downstream project against it with find_package(Tessera).
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
