# Sourced by the app and MPI test scripts: Open MPI allowed to run as root,
# one OpenMP thread per rank, a scratch directory removed on exit, and a
# failure counter (fail "message"; end with: [ "$failures" -eq 0 ] || exit 1).
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
