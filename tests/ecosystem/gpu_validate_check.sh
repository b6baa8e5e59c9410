#!/usr/bin/env bash
# scripts/gpu-validate.sh can only really run on a GPU machine. Here: its
# syntax (bash -n, with build-kokkos.sh that it builds Kokkos with), its
# usage errors, and its verdict on a machine
# without a GPU: exit 2 with a message pointing to the compile-only check.
# Exits 77 (skipped) on a machine with an NVIDIA GPU, where it would start a
# real validation.
# Usage: gpu_validate_check.sh <source dir>
set -euo pipefail
source_dir="$1"
script="${source_dir}/scripts/gpu-validate.sh"
if nvidia-smi -L > /dev/null 2>&1; then
  echo "an NVIDIA GPU is present: run scripts/gpu-validate.sh cuda itself"
  exit 77
fi
# ctest shellcheck lints these with every other script.
bash -n "$script"
bash -n "${source_dir}/scripts/build-kokkos.sh"
bash -n "${source_dir}/scripts/gpu-bundle.sh"
bash -n "${source_dir}/scripts/gpu-bundle-dry-run.sh"
expect() {  # expect <status> <message fragment> <args...>
  local status="$1" fragment="$2" out rc=0
  shift 2
  out=$(bash "$script" "$@" 2>&1) || rc=$?
  if [ "$rc" -ne "$status" ] || ! grep -qF -- "$fragment" <<<"$out"; then
    echo "FAIL: gpu-validate.sh $*: exit $rc, expected $status and '$fragment':"
    echo "$out"
    exit 1
  fi
  echo "ok: gpu-validate.sh $* -> exit $rc, '$fragment'"
}
# What the script is told comes from these checks alone, not from the
# caller's environment (scripts/test-kokkos-release.sh exports the sources).
unset TESSERA_KOKKOS_SOURCE TESSERA_KOKKOS_ARCH TESSERA_KOKKOS_CXX_STANDARD TESSERA_GPU_TOOLCHAIN
expect 2 "usage: " rocm
expect 2 "needs Kokkos 4.x: set TESSERA_KOKKOS_SOURCE" cuda HOPPER90
expect 2 "no cuda GPU found" cuda
expect 2 "no such directory or file" --bundle /nonexistent/bundle.tar.xz cuda
expect 2 "openmp runs a bundle" openmp
expect 2 "usage: " --bundle
