# shellcheck shell=bash
# Sourced by the app and MPI test scripts: Open MPI allowed to run as root,
# one OpenMP thread per rank, a scratch directory removed on exit, a
# failure counter (fail "message"; end with: [ "$failures" -eq 0 ] || exit 1),
# the path of a run's checkpoint (ckpt), and readers of HDF5 files that count a tool's error as a failure instead
# of reading it as a verdict. tests/script_checks.sh tests them.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# ckpt <run> <step>: the checkpoint a run with output directory
# $scratch/<run> writes at that step.
ckpt() { printf '%s/%s/checkpoints/step-%08d.h5' "$scratch" "$1" "$2"; }

# h5_differs <a.h5> <b.h5> [object]: status 0 when h5diff finds the files
# (or the object in both) different, 1 when equal. h5diff's status 2 (a
# file missing or not HDF5, an object absent) is no verdict: it fails the
# test, naming the files, and returns 2.
h5_differs() {
  local rc=0 out
  out=$(h5diff -q "$@" 2>&1) || rc=$?
  case "$rc" in
    0) return 1 ;;
    1) return 0 ;;
    *) fail "h5diff -q $*: exit $rc, no verdict: $(head -c 300 <<<"$out")"; return 2 ;;
  esac
}

# h5_values <file.h5> <group> <out>: appends every number of the group's
# datasets to <out>, one per line (h5dump, 9 significant digits); a group
# without datasets (the state of a model without BatchNorm) adds none.
# h5dump failing (a missing file or group) fails the test and returns 1.
h5_values() {
  local file="$1" group="$2" out="$3" dump rc=0
  dump=$(h5dump -m %.9e -y -w 1 -g "/$group" "$file" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "h5dump -g /$group $file: exit $rc: $(head -c 300 <<<"$dump")"
    return 1
  fi
  grep -E '^ *-?[0-9]' <<<"$dump" >> "$out" || true
}
