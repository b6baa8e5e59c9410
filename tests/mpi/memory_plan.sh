#!/usr/bin/env bash
# The buffer plan (memory.buffers) and recomputation (training.recompute)
# change where values live and when they are computed, never what they
# are: 20 steps of the ResNet deck (batch 32, 2 micro-batches a step,
# BatchNorm) and of the small GPT (batch 64, attention dropout) give the same step
# losses, gradient norms, test loss and final checkpoint (weights, BatchNorm
# state, optimizer state) bit for bit under "shared", and "shared" with
# recompute = "blocks" (dropout masks and BatchNorm statistics reproduced),
# as under "separate":
# - in fp32 on 1 rank, 2 data-parallel ranks, 2 ranks with ZeRO-1
#   (parallel.shard_optimizer) and 2 pipeline stages (1F1B keeps 2
#   micro-batches in flight on the first stage, each in its own workspace);
# - in bf16 and fp16 (dynamic loss scaling) on 1 rank, 2 ranks with
#   ZeRO-1 and 2 stages.
# Each must print less memory than the one before (so no comparison is
# between two identical layouts; a pipeline stage may have nothing to
# recompute), and a run whose
# plan exceeds memory.cap_mb is refused before training with exit 2 on
# every rank, naming the cap, the need and the settings to change.
# Usage: memory_plan.sh <mpiexec> <tessera-train> <tessera-tokenize> <inputs dir> <gpt deck> <source dir> <part>
#   part  fp32: the fp32 comparisons, the caps and the 512-token GPT;
#         16bit: the bf16 and fp16 comparisons (two ctest entries)
set -uo pipefail
mpiexec="$1" train="$2" tokenize="$3" inputs="$4" gpt_deck="$5" source_dir="$6" part="$7"
case "$part" in
  fp32|16bit) ;;
  *) echo "memory_plan.sh: part '$part': use fp32 or 16bit" >&2; exit 2 ;;
esac
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"

"$tokenize" "$source_dir"/README.md "$source_dir"/docs/*.md --out "$scratch/text" \
  > "$scratch/tokenize.log" 2>&1 || fail "tessera-tokenize exited $?"
resnet=("$inputs/fashion_mnist_resnet.toml" --set data.train_samples=640
  --set data.test_samples=200 --set training.batch_size=32)
gpt=("$gpt_deck" --set "data.train_tokens=$scratch/text.train.bin"
  --set "data.test_tokens=$scratch/text.val.bin" --set data.train_samples=1280
  --set training.batch_size=64)

# run <name> <ranks> <deck args...>: 20 steps, output in $scratch/<name>/.
run() {
  local name="$1" ranks="$2" rc=0
  shift 2
  timeout 300 "$mpiexec" --oversubscribe -n "$ranks" "$train" "$@" \
    --set training.max_steps=20 --set training.accumulation_steps=2 \
    --set training.log_every=0 --set "run.output_dir=$scratch/$name" \
    > "$scratch/$name.log" 2>&1 || rc=$?
  [ "$rc" -ne 124 ] || fail "$name: still running after 300 s (a rank hangs)"
  [ "$rc" -eq 0 ] || { fail "$name exited $rc"; tail -5 "$scratch/$name.log"; }
}
# steps <name>: every step's loss and gradient norm, and the test loss.
steps() {
  /usr/bin/python3 - "$scratch/$1/metrics.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "step":
        print("step", r["step"], repr(r["loss"]), repr(r["grad_norm"]))
    elif r["type"] == "epoch":
        print("epoch", r["epoch"], repr(r["test_loss"]))
PY
}
# in_all <name>: the memory the run printed in all, under its own plan and
# under the other, in MiB ("<own> <other>").
in_all() {
  sed -n 's/.*; in all \([0-9.]*\) MiB (memory.buffers = "[a-z]*": \([0-9.]*\) MiB;.*/\1 \2/p' \
    "$scratch/$1.log" | head -1
}
# same <label> <reference> <candidate>: step records and the checkpoint of
# step 20 bit for bit.
same() {
  local label="$1" a b group
  a=$(ckpt "$2" 20) b=$(ckpt "$3" 20)
  [ -f "$a" ] && [ -f "$b" ] || { fail "$label: no checkpoint of step 20 in $2 or $3"; return 1; }
  if ! cmp -s <(steps "$2") <(steps "$3"); then
    fail "$label: the step losses or gradient norms of $3 differ from $2's"
    diff <(steps "$2") <(steps "$3") | head -5
    return 1
  fi
  for group in parameters state optimizer; do
    h5_differs "$a" "$b" "/$group"
    [ $? -eq 1 ] || { fail "$label: the checkpoints' /$group differ between $2 and $3"; return 1; }
  done
}
# compare <label> <ranks> <deck args...>: the separate plan, the shared one
# and the shared one with recompute = "blocks", bit for bit.
compare() {
  local label="$1" ranks="$2"
  shift 2
  run "$label-separate" "$ranks" "$@" --set 'memory.buffers="separate"'
  run "$label-shared" "$ranks" "$@" --set 'memory.buffers="shared"'
  run "$label-blocks" "$ranks" "$@" --set 'training.recompute="blocks"'
  local shared separate blocks
  read -r shared separate <<<"$(in_all "$label-shared")"
  read -r blocks _ <<<"$(in_all "$label-blocks")"
  # A stage of a few layers may have no inner value to drop: strictly less
  # with recomputation on the whole model.
  local strict=0
  [[ "$label" == *-fp32-1 ]] && strict=1
  /usr/bin/python3 -c '
import sys
a, b, c = map(float, sys.argv[1:4])
sys.exit(0 if 0 < c <= a < b and (c < a or sys.argv[4] == "0") else 1)' \
    "${shared:-0}" "${separate:-0}" "${blocks:-0}" "$strict" ||
    fail "$label: printed in all ${blocks:-nothing} MiB with recomputation, ${shared:-nothing}" \
      "shared, ${separate:-nothing} separate: not less each time"
  [ "$(steps "$label-separate" | grep -c '^step')" -eq 20 ] ||
    fail "$label: the separate run recorded $(steps "$label-separate" | grep -c '^step') steps, not 20"
  same "$label" "$label-separate" "$label-shared" && same "$label" "$label-separate" "$label-blocks" &&
    echo "ok: $label: separate ($separate MiB in all), shared ($shared MiB) and shared with" \
      "recompute = \"blocks\" ($blocks MiB) bit for bit: 20 steps, test loss, checkpoint"
}

for model in resnet gpt; do
  deck=("${resnet[@]}")
  [ "$model" = gpt ] && deck=("${gpt[@]}")
  # The GPT's head shares the embedding's weights, which no stage boundary
  # may separate: its stages run with the head untied.
  boundary=(--set 'parallel.stage_boundaries=["s2b1_conv1"]')
  [ "$model" = gpt ] && boundary=(--set 'model.layers[10].tie=""' --set 'parallel.stage_boundaries=["ln2"]')
  if [ "$part" = fp32 ]; then
    compare "$model-fp32-1" 1 "${deck[@]}"
    compare "$model-fp32-2" 2 "${deck[@]}"
    compare "$model-fp32-zero" 2 "${deck[@]}" --set parallel.shard_optimizer=true
    compare "$model-fp32-stages" 2 "${deck[@]}" --set parallel.pipeline_stages=2 "${boundary[@]}"
    continue
  fi
  for format in bf16 fp16; do
    scaling=()
    [ "$format" = fp16 ] && scaling=(--set 'precision.loss_scale="dynamic"')
    compare "$model-$format-1" 1 "${deck[@]}" --set "precision.compute=\"$format\"" "${scaling[@]}"
    compare "$model-$format-zero" 2 "${deck[@]}" --set "precision.compute=\"$format\"" \
      "${scaling[@]}" --set parallel.shard_optimizer=true
    compare "$model-$format-stages" 2 "${deck[@]}" --set "precision.compute=\"$format\"" \
      "${scaling[@]}" --set parallel.pipeline_stages=2 "${boundary[@]}"
  done
done

if [ "$part" = 16bit ]; then
  [ "$failures" -eq 0 ] || exit 1
  echo "memory plan (bf16, fp16): all checks passed"
  exit 0
fi

# A cap below the plan (half of what 2 ranks printed): refused on both
# ranks before training, nothing trained, the message at the deck's key
# with what to change.
read -r need _ <<<"$(in_all resnet-fp32-2-shared)"
cap=$(/usr/bin/python3 -c 'import sys; print(round(float(sys.argv[1]) / 2, 1))' "${need:-0}")
out=$(timeout 120 "$mpiexec" --oversubscribe -n 2 "$train" "${resnet[@]}" --set memory.cap_mb="$cap" \
  --set training.accumulation_steps=2 --set "run.output_dir=$scratch/capped" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "memory.cap_mb = $cap: exit $rc, not 2"
grep -q "memory.cap_mb: the run needs $need MiB on rank 0, above the cap of $cap MiB" <<<"$out" &&
  grep -q "lower training.batch_size" <<<"$out" ||
  fail "memory.cap_mb = $cap: no message naming the cap and the fix: $(head -c 400 <<<"$out")"
[ ! -e "$scratch/capped/metrics.jsonl" ] || fail "memory.cap_mb = $cap: the refused run wrote metrics"
# Under the separate plan the same run needs more than the shared one: a
# cap between the two passes with "shared" and names it with "separate".
read -r in_all_shared in_all_separate <<<"$(in_all resnet-fp32-1-shared)"
cap=$(/usr/bin/python3 -c 'import sys; print(round((float(sys.argv[1]) + float(sys.argv[2])) / 2))' \
  "${in_all_shared:-0}" "${in_all_separate:-0}")
out=$("$train" "${resnet[@]}" --check --set memory.cap_mb="$cap" 2>&1) ||
  fail "memory.cap_mb = $cap (between ${in_all_shared:-?} and ${in_all_separate:-?} MiB) refused the shared plan"
out=$("$train" "${resnet[@]}" --check --set memory.cap_mb="$cap" --set 'memory.buffers="separate"' 2>&1)
rc=$?
[ "$rc" -eq 2 ] && grep -q 'memory.buffers = "shared" fits' <<<"$out" ||
  fail "memory.cap_mb = $cap under the separate plan: exit $rc, no hint at the shared plan: $(head -c 400 <<<"$out")"

# The tiny GPT at 4x its context (512 tokens; 4 windows a step). The
# attention keeps no [T, T] probabilities (2 floats per query instead), so
# its plan needs no more than 10 % above that of 16 windows of 128 tokens
# (the same tokens a step; with the probabilities kept it needed 45 % more).
# A cap between what the default plan needs and what recompute = "blocks"
# needs refuses the default, naming recomputation, and trains with it.
long=("$inputs/tiny_gpt.toml" --set "data.train_tokens=$scratch/text.train.bin"
  --set "data.test_tokens=$scratch/text.val.bin" --set 'model.input_shape=[512]'
  --set training.batch_size=4 --set data.test_samples=8)
"$train" "${long[@]}" --check > "$scratch/long.log" 2>&1 || fail "the 512-token GPT: --check exited $?"
"$train" "$inputs/tiny_gpt.toml" --set "data.train_tokens=$scratch/text.train.bin" \
  --set "data.test_tokens=$scratch/text.val.bin" --set training.batch_size=16 --check \
  > "$scratch/short.log" 2>&1 || fail "the 128-token GPT: --check exited $?"
read -r default _ <<<"$(in_all long)"
read -r short _ <<<"$(in_all short)"
/usr/bin/python3 -c 'import sys; sys.exit(0 if 0 < float(sys.argv[1]) <= 1.1 * float(sys.argv[2]) else 1)' \
  "${default:-0}" "${short:-0}" ||
  fail "the 512-token GPT needs ${default:-?} MiB, over 1.1 times the ${short:-?} MiB of 128-token windows with the same tokens"
blocks=$(sed -n 's/.*shared with training.recompute = "blocks": \([0-9.]*\) MiB).*/\1/p' "$scratch/long.log" | head -1)
cap=$(/usr/bin/python3 -c 'import sys; print(round((float(sys.argv[1]) + float(sys.argv[2])) / 2, 1))' \
  "${default:-0}" "${blocks:-0}")
/usr/bin/python3 -c 'import sys; sys.exit(0 if 0 < float(sys.argv[2]) < 0.6 * float(sys.argv[1]) else 1)' \
  "${default:-0}" "${blocks:-0}" ||
  fail "the 512-token GPT: recompute = \"blocks\" needs ${blocks:-?} MiB, not under 0.6 times ${default:-?}"
out=$("$train" "${long[@]}" --set memory.cap_mb="$cap" --set "run.output_dir=$scratch/long-default" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && grep -q "training.recompute = \"blocks\" fits" <<<"$out" ||
  fail "the 512-token GPT under a cap of $cap MiB: exit $rc, no hint at recomputation: $(head -c 300 <<<"$out")"
"$train" "${long[@]}" --set memory.cap_mb="$cap" --set 'training.recompute="blocks"' \
  --set training.max_steps=3 --set training.log_every=0 --set "run.output_dir=$scratch/long-blocks" \
  > "$scratch/long-blocks.log" 2>&1 || fail "the 512-token GPT with recomputation under a cap of $cap MiB exited $?"
[ "$(steps long-blocks | grep -c '^step')" -eq 3 ] ||
  fail "the 512-token GPT with recomputation under a cap of $cap MiB did not record 3 steps"
echo "ok: the 512-token GPT needs ${default:-?} MiB (128-token windows ${short:-?}), ${blocks:-?} MiB with recompute = \"blocks\";" \
  "a cap of $cap MiB refuses the first and trains the second"

[ "$failures" -eq 0 ] || exit 1
echo "memory plan (fp32, caps): all checks passed"
