#!/usr/bin/env bash
# Runs the training loop of docs/examples/custom_loop.cpp on 2 ranks.
# Usage: example.sh <mpiexec> <example executable> <epochs>
set -euo pipefail
mpiexec="$1" example="$2" epochs="$3"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"
timeout 120 "$mpiexec" -n 2 "$example" "$epochs"
