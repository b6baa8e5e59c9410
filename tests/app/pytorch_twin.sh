#!/usr/bin/env bash
# Every case of bench/side_by_side.sh (bench/cases.txt: deck and --set
# overrides) has a PyTorch twin, bench/pytorch_reference.py, whose model
# must be Tessera's: its parameter count, under Debian's python3-torch,
# must equal what `tessera-train DECK --set ... --check` prints. A control
# alters one layer of the twin and must be told apart.
# Usage: pytorch_twin.sh <tessera-train> <tessera-tokenize> <source dir>
set -uo pipefail
train="$1" tokenize="$2" source_dir="$3"
# shellcheck source=../script_common.sh
source "$source_dir/tests/script_common.sh"
python=/usr/bin/python3  # Debian's interpreter, where python3-torch lives
twin="$source_dir/bench/pytorch_reference.py"
cases="$source_dir/bench/cases.txt"

if ! out=$("$python" -c 'import torch' 2>&1); then
  echo "FAIL: Debian's PyTorch is missing: $python cannot import torch ($(tail -n1 <<< "$out"))."
  echo "      Install the Debian package python3-torch (apt-get install python3-torch; scripts/setup.sh test installs it)."
  exit 1
fi
[ -f "$cases" ] || { echo "FAIL: $cases not found"; exit 1; }

# --check reads a token deck's data files: a few tokens of the README stand in.
"$tokenize" "$source_dir/README.md" --out "$scratch/text" > "$scratch/tokenize.log" 2>&1 \
  || { cat "$scratch/tokenize.log"; echo "FAIL: tessera-tokenize exited $?"; exit 1; }

# parameters <log> <command...>: the count of a "total parameters: N" line.
parameters() {
  local log="$1"
  shift
  "$@" > "$log" 2>&1 || { echo "exit $?"; return; }
  sed -n 's/^total parameters: \([0-9][0-9]*\).*/\1/p' "$log" | head -n1
}

# compare <label> <deck> <tessera overrides...> -- <twin-only overrides...>:
# status 0 when the counts are equal, 1 when they differ, 2 when either
# command printed no count (its output is shown).
compare() {
  local label="$1" deck="$2" tessera_sets=() twin_sets=() data=()
  shift 2
  while [ $# -gt 0 ] && [ "$1" != -- ]; do tessera_sets+=(--set "$1"); shift; done
  [ $# -eq 0 ] || shift
  for o in "$@"; do twin_sets+=(--set "$o"); done
  if grep -q '^format = "tokens"' "$deck"; then
    data=(--set "data.train_tokens=$scratch/text.train.bin" --set "data.test_tokens=$scratch/text.val.bin")
  fi
  local ours theirs
  ours=$(parameters "$scratch/$label.tessera.log" "$train" "$deck" ${tessera_sets[@]+"${tessera_sets[@]}"} \
    ${data[@]+"${data[@]}"} --check)
  theirs=$(parameters "$scratch/$label.twin.log" "$python" "$twin" "$deck" \
    ${tessera_sets[@]+"${tessera_sets[@]}"} ${twin_sets[@]+"${twin_sets[@]}"} --parameters)
  echo "$label: tessera-train --check ${ours:-no count}, PyTorch twin ${theirs:-no count}"
  if [[ ! "$ours" =~ ^[0-9]+$ ]]; then cat "$scratch/$label.tessera.log"; return 2; fi
  if [[ ! "$theirs" =~ ^[0-9]+$ ]]; then cat "$scratch/$label.twin.log"; return 2; fi
  [ "$ours" = "$theirs" ] || return 1
}

count=0
while IFS='|' read -r name deck overrides _; do
  case "$name" in ''|'#'*) continue ;; esac
  count=$((count + 1))
  read -r -a sets <<< "$overrides"
  compare "$name" "$source_dir/$deck" ${sets[@]+"${sets[@]}"} --
  case $? in
    0) ;;
    1) fail "$name ($deck $overrides): the PyTorch twin's parameter count differs from Tessera's" ;;
    *) fail "$name ($deck $overrides): no parameter count (output above)" ;;
  esac
done < "$cases"
[ "$count" -gt 0 ] || fail "$cases lists no case"

# The control: the MLP twin with its second Dense layer one unit wider.
compare control "$source_dir/inputs/fashion_mnist_mlp.toml" -- "model.layers[2].units=129"
case $? in
  1) echo "ok: the twin with one layer altered is told apart" ;;
  0) fail "a twin with one layer altered passed the comparison" ;;
  *) fail "the control gave no parameter count (output above)" ;;
esac

[ "$failures" -eq 0 ] || { echo "$failures of $((count + 1)) checks failed"; exit 1; }
echo "all $count twins match Tessera's parameter counts"
