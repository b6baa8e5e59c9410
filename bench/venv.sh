#!/usr/bin/env bash
# The virtual environment that holds PyTorch 2.x for bench/side_by_side.sh:
# Debian's /usr/bin/python3 (python3-venv; python3-dev for torch.compile's
# C++ code) with the exact packages of bench/requirements.txt, in
# ${TESSERA_DEPS_DIR:-/opt/tessera-deps}/venv-<hash of requirements.txt>,
# so that editing the pins makes a new one and an unchanged file reuses it.
#
#   bash bench/venv.sh --path     print the environment's directory
#   bash bench/venv.sh --create   create it unless complete, then print it
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
requirements="${here}/requirements.txt"
hash=$(sha256sum "$requirements" | cut -c1-12)
venv="${TESSERA_DEPS_DIR:-/opt/tessera-deps}/venv-${hash}"
# Written last: a directory without it is an interrupted install.
complete="${venv}/.tessera-complete"

case "${1:-}" in
  --path) echo "$venv" ;;
  --create)
    if [ ! -f "$complete" ]; then
      rm -rf "$venv"
      mkdir -p "$(dirname "$venv")"
      /usr/bin/python3 -m venv "$venv" || {
        rm -rf "$venv"
        echo "bench/venv.sh: /usr/bin/python3 -m venv failed; install python3-venv (bash scripts/setup.sh bench does)" >&2
        exit 2
      }
      # Several GB of wheels (the CUDA libraries of PyPI's torch); a few minutes.
      echo "bench/venv.sh: installing bench/requirements.txt into $venv" >&2
      "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements" >&2
      "$venv/bin/pip" check >&2
      "$venv/bin/python" -W ignore::UserWarning -c 'import torch' \
        || { echo "bench/venv.sh: torch does not import in $venv" >&2; exit 1; }
      touch "$complete"
    fi
    echo "$venv"
    ;;
  -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
  *) echo "bench/venv.sh: expected --path or --create (see --help), got '${1:-}'" >&2; exit 2 ;;
esac
