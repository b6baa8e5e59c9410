#!/usr/bin/env bash
# tessera-predict against the training run that wrote the checkpoint: on the
# same test samples it must print the loss and accuracy tessera-train's
# last evaluation printed (fp32 and bf16; IDX, HDF5 and byte tokens), with any
# batch size; its HDF5 and CSV predictions agree with each other and with
# the printed figures (probabilities sum to 1, the class is the arg max of
# the logits, the accuracy is the share of classes equal to the labels);
# --data reads another set; a checkpoint of another model, a damaged
# checkpoint, a missing one and an unwritable --out are refused with exit 2
# and the file named, before any output is written; under mpiexec every
# rank exits 2 without hanging.
# Usage: predict.sh <mpiexec> <tessera-train> <tessera-predict> <tessera-tokenize> <tessera-idx2hdf5> <source dir>
set -uo pipefail
mpiexec="$1" train="$2" predict="$3" tokenize="$4" idx2hdf5="$5" source_dir="$6"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"
deck="$source_dir/tests/app/fashion_mnist_smoke.toml"
data="${TESSERA_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
small=(--set training.epochs=1 --set data.train_samples=512 --set data.test_samples=300)

# train <name> <deck> [args...]: a short run into $scratch/<name>.
train() {
  local name="$1" d="$2"
  shift 2
  timeout 300 "$train" "$d" --set "run.output_dir=$scratch/$name" --progress lines "$@" \
    > "$scratch/$name.train.log" 2>&1 || { fail "training $name exited $?"; tail -5 "$scratch/$name.train.log"; }
}
# figures <log>: "loss accuracy" of tessera-train's final test line or tessera-predict's line.
figures() {
  sed -n -e 's/^test loss \([0-9.]*\)$/\1/p' -e 's/^test accuracy: \([0-9.]*\)$/\1/p' \
    -e 's/^test: [0-9]* samples, loss \([0-9.]*\), accuracy \([0-9.]*\) .*/\1 \2/p' "$1" | paste -sd' '
}
# same_figures <label> <train log> <predict log>
same_figures() {
  local expected got
  expected=$(figures "$2") got=$(figures "$3")
  [ -n "$expected" ] || { fail "$1: no test loss and accuracy in $2"; return; }
  [ "$expected" = "$got" ] || fail "$1: tessera-train's test loss and accuracy '$expected', tessera-predict's '$got'"
  echo "$1: loss and accuracy $got, as in training"
}
# run_predict <label> <expected exit> <args...>: output in $scratch/<label>.log
run_predict() {
  local label="$1" expected="$2" rc=0
  shift 2
  timeout 120 "$predict" "$@" > "$scratch/$label.log" 2>&1 || rc=$?
  [ "$rc" -eq "$expected" ] || { fail "$label: exit $rc, expected $expected"; cat "$scratch/$label.log"; }
}

train fp32 "$deck" "${small[@]}"
run_predict fp32 0 "$deck" "$scratch/fp32/checkpoints" "${small[@]}" \
  --out "$scratch/fp32.h5" --save-inputs
same_figures "fp32" "$scratch/fp32.train.log" "$scratch/fp32.log"
run_predict fp32-batch7 0 "$deck" "$scratch/fp32/checkpoints" "${small[@]}" --batch 7 \
  --out "$scratch/fp32.csv"
same_figures "fp32, batches of 7" "$scratch/fp32.train.log" "$scratch/fp32-batch7.log"

/usr/bin/python3 - "$scratch/fp32.h5" "$scratch/fp32.csv" "$scratch/fp32.log" <<'EOF' || fail "the predictions files disagree (above)"
import csv, re, sys
import h5py, numpy as np
h5, table, log = sys.argv[1:]
f = h5py.File(h5, "r")
logits, probabilities = f["logits"][...], f["probabilities"][...]
predicted, labels, inputs = f["class"][...], f["labels"][...], f["inputs"][...]
problems = []
if logits.shape != (300, 10) or inputs.shape != (300, 784):
    problems.append(f"shapes: logits {logits.shape}, inputs {inputs.shape}")
if np.abs(probabilities.sum(axis=1) - 1).max() > 1e-5:
    problems.append("probabilities do not sum to 1")
if (np.argmax(logits, axis=1) != predicted).any():
    problems.append("class is not the arg max of the logits")
accuracy = float((predicted == labels).mean())
printed = float(re.search(r"accuracy ([0-9.]+)", open(log).read()).group(1))
if abs(accuracy - printed) > 5e-5 or abs(f.attrs["accuracy"] - accuracy) > 1e-12:
    problems.append(f"accuracy: classes give {accuracy}, printed {printed}, attribute {f.attrs['accuracy']}")
rows = list(csv.reader(open(table)))
if rows[0][:3] != ["sample", "label", "class"] or len(rows) != 301:
    problems.append(f"CSV: header {rows[0][:3]}, {len(rows)} rows")
elif any(int(r[2]) != c or int(r[1]) != l for r, c, l in zip(rows[1:], predicted, labels)):
    problems.append("CSV classes or labels differ from the HDF5 file's")
elif np.abs(np.array([[float(x) for x in r[3:]] for r in rows[1:]]) - probabilities).max() > 1e-6:
    problems.append("CSV probabilities differ from the HDF5 file's")
print("\n".join(problems) or f"predictions files agree: accuracy {accuracy}")
sys.exit(1 if problems else 0)
EOF

train bf16 "$deck" "${small[@]}" --set precision.compute=bf16
run_predict bf16 0 "$deck" "$scratch/bf16/checkpoints" "${small[@]}" --set precision.compute=bf16
grep -q ", bf16, from " "$scratch/bf16.log" || fail "bf16: the run does not say bf16: $(head -3 "$scratch/bf16.log")"
same_figures "bf16" "$scratch/bf16.train.log" "$scratch/bf16.log"

# Byte tokens: a label at every position.
"$tokenize" "$source_dir/README.md" --out "$scratch/text" > "$scratch/tokenize.log" 2>&1 ||
  fail "tessera-tokenize exited $?"
gpt=("$source_dir/tests/app/tiny_gpt_smoke.toml" --set training.epochs=1 --set data.train_samples=64
  --set "data.train_tokens=$scratch/text.train.bin" --set "data.test_tokens=$scratch/text.val.bin")
train gpt "${gpt[@]}"
run_predict gpt 0 "${gpt[@]}" "$scratch/gpt/checkpoints"
same_figures "tokens" "$scratch/gpt.train.log" "$scratch/gpt.log"

# HDF5: the test images converted, the file given with --data.
"$idx2hdf5" "$data/t10k-images-idx3-ubyte.gz" "$data/t10k-labels-idx1-ubyte.gz" "$scratch/test.h5" \
  > "$scratch/idx2hdf5.log" 2>&1 || fail "tessera-idx2hdf5 exited $?"
hdf5=("$source_dir/tests/app/fashion_mnist_hdf5.toml" --set "data.train_file=$scratch/test.h5"
  --set data.train_samples=512 --set data.test_samples=300)
train hdf5 "${hdf5[@]}" --set "data.test_file=$scratch/test.h5"
run_predict hdf5 0 "${hdf5[@]}" "$scratch/hdf5/checkpoints" --data "$scratch/test.h5"
same_figures "HDF5" "$scratch/hdf5.train.log" "$scratch/hdf5.log"

# Another data set: the training images, the first 50.
run_predict other-data 0 "$deck" "$scratch/fp32/checkpoints" --limit 50 \
  --data "$data/train-images-idx3-ubyte.gz" --labels "$data/train-labels-idx1-ubyte.gz"
grep -q "^test: 50 samples" "$scratch/other-data.log" || fail "--data: $(cat "$scratch/other-data.log")"

# Refusals, exit 2, the file named, nothing written.
run_predict wider 2 "$deck" "$scratch/fp32/checkpoints" --set model.layers[0].units=64 --out "$scratch/wider.h5"
grep -q "dataset '/parameters/dense0/weight' has shape \[128, 784\]; the model's dense0 weight has shape \[64, 784\]" \
  "$scratch/wider.log" || fail "a wider deck: $(cat "$scratch/wider.log")"
[ ! -e "$scratch/wider.h5" ] || fail "a refused run wrote $scratch/wider.h5"
run_predict other-model 2 "$source_dir/tests/app/tiny_gpt_smoke.toml" "$scratch/fp32/checkpoints" \
  --set "data.test_tokens=$scratch/text.val.bin"
grep -qF "$scratch/fp32/checkpoints/step-" "$scratch/other-model.log" ||
  fail "another model's checkpoint: $(cat "$scratch/other-model.log")"
head -c 4000 "$scratch/fp32/checkpoints/$(cat "$scratch/fp32/checkpoints/latest")" > "$scratch/damaged.h5"
run_predict damaged 2 "$deck" "$scratch/damaged.h5"
grep -q "damaged.h5: .*truncated or damaged" "$scratch/damaged.log" || fail "damaged: $(cat "$scratch/damaged.log")"
run_predict missing 2 "$deck" "$scratch/nothing.h5"
grep -q "nothing.h5" "$scratch/missing.log" || fail "missing: $(cat "$scratch/missing.log")"
run_predict unwritable 2 "$deck" "$scratch/fp32/checkpoints" --out "$scratch/no/such/dir/p.h5"
grep -q "^tessera-predict: --out .*does not exist or is not writable" "$scratch/unwritable.log" &&
  ! grep -q "^test:" "$scratch/unwritable.log" || fail "unwritable --out: $(cat "$scratch/unwritable.log")"
rc=0
timeout 60 "$mpiexec" -n 2 "$predict" "$deck" "$scratch/fp32/checkpoints" > "$scratch/ranks.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "runs on one process" "$scratch/ranks.log" ||
  fail "under mpiexec -n 2: exit $rc: $(cat "$scratch/ranks.log")"

[ "$failures" -eq 0 ] || { echo "$failures checks failed"; exit 1; }
echo "tessera-predict: all checks passed"
