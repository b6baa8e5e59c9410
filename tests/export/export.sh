#!/usr/bin/env bash
# The exports of tessera-export, checked numerically against tessera-predict.
# For the MLP, CNN, ResNet and tiny GPT decks and a deck holding the layer
# types those four lack (tests/export/all_layers.toml), each after a few
# training steps: tessera-predict writes the logits of a batch of test data
# (and the inputs it fed), tessera-export writes the ONNX file and the
# PyTorch state dict; check_onnx.py (ONNX Runtime and onnx's reference
# evaluator, from PyPI in the virtual environment of
# tests/export/requirements.txt; onnx's full checker and strict shape
# inference) and check_pytorch.py (the deck's twin in
# bench/pytorch_reference.py under Debian's torch, strict loading) must
# give the same logits within 1e-5 relative in norm. Beyond the numbers:
# tessera-export lists every registered layer type; a layer type it has no
# mapping for (planted in a description) is refused with exit 2, naming the
# layer, and nothing is written; a checkpoint of another model is refused
# with exit 2 naming the dataset and both shapes.
# Usage: export.sh <tessera-train> <tessera-predict> <tessera-export> <tessera-tokenize> <source dir>
set -uo pipefail
train="$1" predict="$2" export_tool="$3" tokenize="$4" source_dir="$5"
# shellcheck source=../script_common.sh
source "$source_dir/tests/script_common.sh"
python=/usr/bin/python3  # Debian's: python3-onnx, python3-h5py, python3-torch
requirements="$source_dir/tests/export/requirements.txt"
venv=$(bash "$source_dir/scripts/venv.sh" --path "$requirements")
if [ ! -f "$venv/.tessera-complete" ]; then
  echo "FAIL: the virtual environment of $requirements ($venv) is missing or incomplete:"
  echo "      bash scripts/setup.sh test creates it (bash scripts/venv.sh --create $requirements)"
  exit 1
fi
"$tokenize" "$source_dir/README.md" --out "$scratch/text" > "$scratch/tokenize.log" 2>&1 ||
  { cat "$scratch/tokenize.log"; echo "FAIL: tessera-tokenize exited $?"; exit 1; }
tokens=(--set "data.train_tokens=$scratch/text.train.bin" --set "data.test_tokens=$scratch/text.val.bin")
images=(--set data.train_samples=256 --set data.test_samples=64)

# check <name> <deck> [--set ...]: train, predict, export, check both files.
check() {
  local name="$1" deck="$2" rc=0
  shift 2
  local sets=(--set training.epochs=1 "$@")
  timeout 300 "$train" "$deck" "${sets[@]}" --set "run.output_dir=$scratch/$name" --progress lines \
    > "$scratch/$name.train.log" 2>&1 || { fail "$name: tessera-train exited $?"; tail -5 "$scratch/$name.train.log"; return; }
  local checkpoint="$scratch/$name/checkpoints"
  timeout 120 "$predict" "$deck" "$checkpoint" "${sets[@]}" --limit 8 --out "$scratch/$name.h5" \
    --save-inputs > "$scratch/$name.predict.log" 2>&1 || { fail "$name: tessera-predict exited $?"; cat "$scratch/$name.predict.log"; return; }
  timeout 120 "$export_tool" "$deck" "$checkpoint" "${sets[@]}" --onnx "$scratch/$name.onnx" \
    --pytorch "$scratch/$name.pt" > "$scratch/$name.export.log" 2>&1 || { fail "$name: tessera-export exited $?"; cat "$scratch/$name.export.log"; return; }
  timeout 300 "$venv/bin/python" "$source_dir/tests/export/check_onnx.py" "$scratch/$name.onnx" \
    "$scratch/$name.h5" 2>&1 | sed "s/^/$name: /" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name: the ONNX export does not match tessera-predict (above)"
  rc=0
  timeout 300 "$python" "$source_dir/tests/export/check_pytorch.py" --twin "$source_dir/bench/pytorch_reference.py" \
    "$deck" "$scratch/$name.pt" "$scratch/$name.h5" "${sets[@]}" 2>&1 | sed "s/^/$name: /" || rc=$?
  [ "$rc" -eq 0 ] || fail "$name: the PyTorch export does not match tessera-predict (above)"
}

check mlp "$source_dir/inputs/fashion_mnist_mlp.toml" "${images[@]}"
check cnn "$source_dir/inputs/fashion_mnist_cnn.toml" "${images[@]}"
check resnet "$source_dir/inputs/fashion_mnist_resnet.toml" "${images[@]}"
check gpt "$source_dir/inputs/tiny_gpt.toml" --set data.train_samples=32 "${tokens[@]}"
check all_layers "$source_dir/tests/export/all_layers.toml" "${images[@]}"

# Every registered layer type has a mapping (the backquotes are markdown's).
# shellcheck disable=SC2016
registered=$("$train" --list-layers | sed -n 's/^| `\([a-z0-9]*\)` |.*/\1/p' | grep -vx type | sort)
exportable=$("$export_tool" --list-types | sort)
[ -n "$registered" ] && [ "$registered" = "$exportable" ] ||
  fail "tessera-export --list-types differs from the registry: $(diff <(echo "$registered") <(echo "$exportable") | tr '\n' ' ')"
echo "tessera-export maps all $(wc -l <<<"$registered") registered layer types"

# A layer type without a mapping, planted in the MLP's description.
"$predict" "$source_dir/inputs/fashion_mnist_mlp.toml" "$scratch/mlp/checkpoints" "${images[@]}" \
  --describe "$scratch/mlp.json" > /dev/null 2>&1 || fail "tessera-predict --describe exited $?"
"$python" -c '
import json, sys
d = json.load(open(sys.argv[1]))
d["layers"][1]["type"] = "test_only_layer"
json.dump(d, open(sys.argv[2], "w"))' "$scratch/mlp.json" "$scratch/planted.json"
rc=0
out=$("$export_tool" "$source_dir/inputs/fashion_mnist_mlp.toml" "$scratch/mlp/checkpoints" \
  --graph "$scratch/planted.json" --onnx "$scratch/planted.onnx" 2>&1) || rc=$?
[ "$rc" -eq 2 ] && grep -q "layer 'dense0'\|layer 'relu1'" <<<"$out" && grep -q "test_only_layer" <<<"$out" ||
  fail "a planted layer type: exit $rc, '$out'"
[ ! -e "$scratch/planted.onnx" ] || fail "a refused export wrote $scratch/planted.onnx"
! compgen -G "$scratch/.planted.onnx.*" > /dev/null || fail "a refused export left $(compgen -G "$scratch/.planted.onnx.*")"

# A deck that does not match the checkpoint.
rc=0
out=$("$export_tool" "$source_dir/inputs/fashion_mnist_mlp.toml" "$scratch/mlp/checkpoints" \
  --set model.layers[0].units=64 --onnx "$scratch/wider.onnx" 2>&1) || rc=$?
[ "$rc" -eq 2 ] && grep -q "'/parameters/dense0/weight' has shape \[256, 784\]; the model's dense0 weight has shape \[64, 784\]" <<<"$out" ||
  fail "a deck that does not match: exit $rc, '$out'"
[ ! -e "$scratch/wider.onnx" ] || fail "a refused export wrote $scratch/wider.onnx"

[ "$failures" -eq 0 ] || { echo "$failures checks failed"; exit 1; }
echo "exports: all checks passed"
