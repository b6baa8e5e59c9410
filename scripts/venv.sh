#!/usr/bin/env bash
# A virtual environment of the project's: Debian's /usr/bin/python3
# (python3-venv) with the exact packages of one pinned requirements file, in
# ${TESSERA_DEPS_DIR:-/opt/tessera-deps}/venv-<hash of the file>, so that
# editing the pins makes a new one and an unchanged file reuses it.
#
#   bash scripts/venv.sh --path   REQUIREMENTS             print its directory
#   bash scripts/venv.sh --create REQUIREMENTS [MODULE...] create it unless complete
#                                  (then check that each MODULE imports), print it
#
# Users: bench/venv.sh (PyTorch 2.x, bench/requirements.txt) and the export
# checks (ONNX Runtime and onnx, tests/export/requirements.txt).
set -euo pipefail
action="${1:-}"
requirements="${2:-}"
case "$action" in
  --path|--create) ;;
  -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "scripts/venv.sh: expected --path or --create (see --help), got '$action'" >&2; exit 2 ;;
esac
[ -f "$requirements" ] || { echo "scripts/venv.sh: requirements file '$requirements' not found" >&2; exit 2; }
hash=$(sha256sum "$requirements" | cut -c1-12)
venv="${TESSERA_DEPS_DIR:-/opt/tessera-deps}/venv-${hash}"
# Written last: a directory without it is an interrupted install.
complete="${venv}/.tessera-complete"

if [ "$action" = --create ] && [ ! -f "$complete" ]; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv" || {
    rm -rf "$venv"
    echo "scripts/venv.sh: /usr/bin/python3 -m venv failed; install python3-venv (scripts/setup.sh test and bench do)" >&2
    exit 2
  }
  echo "scripts/venv.sh: installing $requirements into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements" >&2
  "$venv/bin/pip" check >&2
  for module in "${@:3}"; do
    "$venv/bin/python" -W ignore::UserWarning -c "import $module" \
      || { echo "scripts/venv.sh: $module does not import in $venv" >&2; exit 1; }
  done
  touch "$complete"
fi
echo "$venv"
