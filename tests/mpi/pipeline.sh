#!/usr/bin/env bash
# Pipeline stages (parallel.pipeline_stages) under mpiexec, on the head of
# Fashion-MNIST (512 training and 500 test samples) with 4 micro-batches per
# step:
# - the CNN deck on 2 balanced stages and the ResNet deck on 2 stages split
#   at a named layer and on 3 balanced stages give 1 rank's step losses,
#   gradient norms, test loss and checkpoint (weights, BatchNorm state,
#   optimizer state) bit for bit: each stage runs the same kernels on the
#   same micro-batches and sums its gradients in the same order;
# - the CNN deck in bf16 on 2 stages gives 1 rank's bf16 run bit for bit;
# - each stage's workspace holds less than the whole model's activations;
# - the ResNet deck on 2 stages x 2 data ranks (4 ranks, synchronised
#   BatchNorm) equals 2 data-parallel ranks bit for bit, and agrees with 1
#   rank within 1e-5 (sums over ranks round differently: the losses of both
#   epochs, the weights after step 2);
# - a checkpoint written by a pipeline resumes on 1 rank, and one written on
#   1 rank resumes on a pipeline, exactly;
# - every epoch record reports the pipeline bubble;
# - a stage rank that fails mid-training ends the job (no hang), and bad
#   stage settings are refused with the deck line.
# Usage: pipeline.sh <mpiexec> <tessera-train> <inputs directory>
set -uo pipefail
mpiexec="$1" train="$2" inputs="$3"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"
here="$(dirname "$0")"

# run <name> <ranks> <deck> [--set ...]: output in $scratch/<name>/, status in $rc.
run() {
  local name="$1" ranks="$2" deck="$3"
  shift 3
  timeout 300 "$mpiexec" --oversubscribe -n "$ranks" "$train" "$deck" \
    --set data.train_samples=512 --set data.test_samples=500 --set training.epochs=2 \
    --set training.accumulation_steps=4 \
    --set training.log_every=0 --set checkpoint.every_epochs=1 \
    --set "run.output_dir=$scratch/$name" "$@" > "$scratch/$name.log" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || fail "$name: still running after 300 s (a rank hangs)"
  [ "$rc" -eq 0 ] || { fail "$name exited $rc"; tail -5 "$scratch/$name.log"; }
}
# steps <name> [losses]: every step's loss and gradient norm (or the loss
# only), and the epochs' test losses.
steps() {
  /usr/bin/python3 - "$scratch/$1/metrics.jsonl" "${2:-}" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "step":
        print("step", r["step"], repr(r["loss"]), *([] if sys.argv[2] else [repr(r["grad_norm"])]))
    elif r["type"] == "epoch":
        print("epoch", r["epoch"], repr(r["test_loss"]))
PY
}
# weights <name> <step> <groups...>: the checkpoint's numbers, one per line,
# into $scratch/<name>.<step>.txt (a missing file fails the test).
weights() {
  local name="$1" step="$2" file
  shift 2
  file=$(ckpt "$name" "$step")
  : > "$scratch/$name.$step.txt"
  [ -f "$file" ] || { fail "$name: no checkpoint $file"; return; }
  for group in "$@"; do h5_values "$file" "$group" "$scratch/$name.$step.txt"; done
}
# equal <reference> <candidate> <step>: the checkpoints' parameters, state
# and optimizer groups bit for bit (h5diff without tolerances compares every
# value exactly, and the groups' attributes); status 0 when equal.
equal() {
  local a b group
  a=$(ckpt "$1" "$3") b=$(ckpt "$2" "$3")
  [ -f "$a" ] && [ -f "$b" ] || { fail "$2: no checkpoint of step $3 in $1 or $2"; return 1; }
  # Not vacuous: the reference holds weights.
  h5ls -r "$a/parameters" | grep -q Dataset || { fail "$1: $a holds no parameters"; return 1; }
  for group in parameters state optimizer; do
    h5_differs "$a" "$b" "/$group"
    [ $? -eq 1 ] || return 1
  done
}
# same <reference> <candidate> <step>: bit for bit.
same() {
  if cmp -s <(steps "$1") <(steps "$2") && equal "$1" "$2" "$3"; then
    echo "ok: $2: step losses, gradient norms, test losses and the checkpoint at step $3" \
      "($(h5ls -r "$(ckpt "$1" "$3")" | grep -c Dataset) datasets)" \
      "equal $1's bit for bit"
  else
    fail "$2 differs from $1"
    diff <(steps "$1") <(steps "$2") | head -5
  fi
}

cnn="$inputs/fashion_mnist_cnn.toml" resnet="$inputs/fashion_mnist_resnet.toml"
run cnn 1 "$cnn"
grep -q "data: 512 training, 0 validation and 500 test samples" "$scratch/cnn.log" ||
  fail "cnn: data.train_samples and data.test_samples did not cut the files to 512 and 500"
run cnn_2 2 "$cnn" --set parallel.pipeline_stages=2
same cnn cnn_2 8
grep -q "pipeline of 2 stages x 1 data-parallel rank(s), 4 micro-batch(es) per step in 1F1B order" \
  "$scratch/cnn_2.log" || fail "cnn_2: no pipeline banner"

# In bf16 the stages exchange their boundary in float, which the 16-bit
# values widen to and round back from exactly: 1 rank's bf16 run bit for bit.
run cnn_bf16 1 "$cnn" --set precision.compute=bf16
run cnn_bf16_2 2 "$cnn" --set parallel.pipeline_stages=2 --set precision.compute=bf16
same cnn_bf16 cnn_bf16_2 8
! cmp -s <(steps cnn) <(steps cnn_bf16) || fail "cnn_bf16: the step losses of fp32"

run resnet 1 "$resnet"
run resnet_2 2 "$resnet" --set parallel.pipeline_stages=2 \
  --set 'parallel.stage_boundaries=["s2b1_conv1"]'
same resnet resnet_2 8
grep -q "stage 1: stem..s1b1_out (.*), stage 2: s2b1_conv1..fc" "$scratch/resnet_2.log" ||
  fail "resnet_2: the stages do not start at the named layer"
# Each stage's workspace holds its own layers' activations: less than the
# whole model's, together at least as much (the boundary is in both).
/usr/bin/python3 - "$scratch/resnet_2.log" <<'PY' || fail "resnet_2: stage workspaces"
import re, sys
m = re.search(r"activations and their gradients per rank: stage 1 ([0-9.]+) MiB x 2, "
              r"stage 2 ([0-9.]+) MiB x 1 \(the whole model ([0-9.]+) MiB\)", open(sys.argv[1]).read())
assert m, "no activation line"
a, b, whole = map(float, m.groups())
assert 0 < a < whole and 0 < b < whole and a + b >= whole, (a, b, whole)
PY
run resnet_3 3 "$resnet" --set parallel.pipeline_stages=3
same resnet resnet_3 8

# 2 stages x 2 data ranks: each stage's ranks split every micro-batch as 2
# data-parallel ranks do (BatchNorm over the whole micro-batch), with the
# same sums: bit for bit the 2-rank run. Against 1 rank, sums over ranks
# round differently and plain data parallelism drifts from 1 rank as it
# trains, by jumps where a last-bit difference flips a ReLU or max-pooling
# decision and changes a gradient outright (here the weights of order 1e-2
# agree to 1.7e-7 after step 2; after step 3 to 6.6e-7 with the weight
# gradients of the 3 x 3 convolutions lowered to gemm, to 5.4e-5 with
# Winograd's, whose roundings flip another decision, and the gradient norm
# of step 3 differs by 1e-4): the losses of both epochs, and the weights
# after step 2, are compared.
every2=(--set checkpoint.every_steps=2 --set checkpoint.keep=10)
run resnet_sync 1 "$resnet" --set parallel.batchnorm=sync "${every2[@]}"
run resnet_dp 2 "$resnet" --set parallel.batchnorm=sync
run resnet_2x2 4 "$resnet" --set parallel.pipeline_stages=2 --set parallel.batchnorm=sync \
  "${every2[@]}"
same resnet_dp resnet_2x2 8
bash "$here/../compare_outputs.sh" <(steps resnet_sync losses) <(steps resnet_2x2 losses) 1e-5 \
  "ResNet, 2 stages x 2 ranks against 1 rank: step and test losses" || fail "resnet_2x2 losses"
weights resnet_sync 2 parameters state
weights resnet_2x2 2 parameters state
bash "$here/../compare_outputs.sh" "$scratch/resnet_sync.2.txt" "$scratch/resnet_2x2.2.txt" 1e-5 \
  "ResNet, 2 stages x 2 ranks against 1 rank: weights and BatchNorm state at step 2" 1e-2 ||
  fail "resnet_2x2 weights"

# The bubble: measured in every epoch record, and in the epoch lines.
/usr/bin/python3 - "$scratch/resnet_2x2/metrics.jsonl" <<'PY' || fail "resnet_2x2: pipeline_bubble"
import json, sys
epochs = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "epoch"]
assert len(epochs) == 2, epochs
for e in epochs:
    assert 0 < e["pipeline_bubble"] < 1, e
    assert e["time"]["pipeline_wait"] >= 0, e
print("ok: pipeline bubble %.0f%% and %.0f%% of the epochs" % tuple(100 * e["pipeline_bubble"] for e in epochs))
PY
grep -q "pipeline bubble [0-9]*%" "$scratch/resnet_2x2.log" || fail "resnet_2x2: no bubble in the epoch line"

# Restarts across layouts: a pipeline's checkpoint holds every stage's part.
resumed() {
  local later
  later=$(steps cnn | grep 'step [5-8] ')
  if equal cnn "$1" 8 && [ -n "$later" ] && [ "$later" = "$(steps "$1" | grep 'step [5-8] ')" ]; then
    echo "ok: $2 resumes exactly"
  else
    fail "$2 resumed differs from the uninterrupted run"
  fi
}
run cnn_resume_1 1 "$cnn" --restart "$(ckpt cnn_2 4)"
resumed cnn_resume_1 "the 2-stage checkpoint on 1 rank"
run cnn_resume_2 2 "$cnn" --set parallel.pipeline_stages=2 \
  --restart "$(ckpt cnn 4)"
resumed cnn_resume_2 "the 1-rank checkpoint on 2 stages"

# expect <name> <status> <fragment> <mpiexec arguments...>
expect() {
  local name="$1" status="$2" fragment="$3"
  shift 3
  timeout 120 "$mpiexec" --oversubscribe "$@" > "$scratch/$name.log" 2>&1
  rc=$?
  if [ "$rc" -eq 124 ]; then
    fail "$name: still running after 120 s (a rank hangs)"
  elif [ "$status" != any ] && [ "$rc" -ne "$status" ] || [ "$rc" -eq 0 ]; then
    fail "$name exited $rc, expected $status"; tail -5 "$scratch/$name.log"
  elif ! grep -qF -- "$fragment" "$scratch/$name.log"; then
    fail "$name: message lacks '$fragment'"; tail -5 "$scratch/$name.log"
  else
    echo "ok: $name -> exit $rc, '$fragment'"
  fi
}
small=(--set data.train_samples=512 --set training.accumulation_steps=4 --set "run.output_dir=$scratch/bad")
# The last stage's rank fails after step 2, while the first waits for it.
expect stage_fault any "rank 1: error: fault injected by --inject-fault after optimizer step 2" \
  -n 2 "$train" "$cnn" "${small[@]}" --set parallel.pipeline_stages=2 --inject-fault step:2@1
expect odd_ranks 2 "parallel.pipeline_stages: 2 stages need a rank count divisible by 2; the job has 3 ranks" \
  -n 3 "$train" "$cnn" "${small[@]}" --set parallel.pipeline_stages=2 --check
expect inside_block 2 "a stage cannot start at layer 's1b1_conv2'" \
  -n 2 "$train" "$resnet" "${small[@]}" --set parallel.pipeline_stages=2 \
  --set 'parallel.stage_boundaries=["s1b1_conv2"]' --check
expect two_names 2 "parallel.stage_boundaries: names 2 layer(s); parallel.pipeline_stages = 2 needs 1" \
  -n 1 "$train" "$cnn" "${small[@]}" --set parallel.pipeline_stages=2 \
  --set 'parallel.stage_boundaries=["conv2", "fc1"]' --check
[ "$failures" -eq 0 ] || exit 1
