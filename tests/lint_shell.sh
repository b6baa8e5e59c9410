#!/usr/bin/env bash
# Runs shellcheck over every shell script of the source tree: files ending in .sh
# and files whose first line starts a shell (.ci/run), outside build
# folders. Sourced files are followed (-x). shellcheck missing is a failure,
# not a pass: scripts/setup.sh installs Debian's shellcheck.
# Usage: lint_shell.sh <source dir>
set -euo pipefail
source_dir="$1"
command -v shellcheck > /dev/null ||
  { echo "FAIL: shellcheck is not installed: apt-get install shellcheck (scripts/setup.sh installs it)"; exit 1; }
cd "$source_dir"
scripts=()
while IFS= read -r -d '' file; do
  case "$file" in
    *.sh) scripts+=("$file") ;;
    *) if head -n1 "$file" 2>/dev/null | grep -qE '^#!(/usr)?/bin/(env )?(ba|da)?sh'; then scripts+=("$file"); fi ;;
  esac
done < <(find . \( -name .git -o -name 'build' -o -name 'build-*' -o -name output -o -name __pycache__ \
           -o -name gpu-bundle -o -name 'gpu-validate-*' \) -prune \
           -o -type f \( -name '*.sh' -o -path './.ci/*' -o -path './scripts/*' -o -path './bench/*' -o -path './tests/*' \) -print0 | sort -z)
[ "${#scripts[@]}" -gt 0 ] || { echo "FAIL: no shell scripts found under $source_dir"; exit 1; }
echo "shellcheck $(shellcheck --version | sed -n 's/^version: //p') on ${#scripts[@]} scripts"
shellcheck -x "${scripts[@]}"
echo "ok: ${#scripts[@]} scripts pass shellcheck"
