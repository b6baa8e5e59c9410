#!/usr/bin/env bash
# The virtual environment that holds PyTorch 2.x for bench/side_by_side.sh:
# Debian's /usr/bin/python3 (python3-venv; python3-dev for torch.compile's
# C++ code) with the exact packages of bench/requirements.txt, made by
# scripts/venv.sh in ${TESSERA_DEPS_DIR:-/opt/tessera-deps}/venv-<hash of
# requirements.txt>, so that editing the pins makes a new one and an
# unchanged file reuses it. Several GB of wheels (the CUDA libraries of
# PyPI's torch) the first time: a few minutes.
#
#   bash bench/venv.sh --path     print the environment's directory
#   bash bench/venv.sh --create   create it unless complete, then print it
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
case "${1:-}" in
  --path|--create) exec bash "$here/../scripts/venv.sh" "$1" "$here/requirements.txt" torch ;;
  -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) echo "bench/venv.sh: expected --path or --create (see --help), got '${1:-}'" >&2; exit 2 ;;
esac
