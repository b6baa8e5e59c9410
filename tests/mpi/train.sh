#!/usr/bin/env bash
# tessera-train under mpiexec: a 2-rank run of the smoke deck trains, logs
# and writes metrics from rank 0 only (with communication time and the
# overlap fraction), also with gradients averaged in bf16, and in fp16 under
# dynamic loss scaling that skips overflowing steps; ranks that disagree or fail stop the whole job with a
# message and a non-zero status within a bounded time, on every rank.
# Usage: train.sh <mpiexec> <tessera-train> <smoke deck> <min accuracy>
set -uo pipefail
mpiexec="$1" train="$2" deck="$3" threshold="$4"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"

# run <name> <mpiexec arguments...>: output in $scratch/<name>.log, status in $rc.
run() {
  local name="$1"
  shift
  local start=$SECONDS
  timeout 120 "$mpiexec" --oversubscribe "$@" > "$scratch/$name.log" 2>&1
  rc=$?
  seconds=$((SECONDS - start))
  [ "$rc" -ne 124 ] || fail "$name: still running after 120 s (a rank hangs)"
}

# near_fp32 <name> <what>: run <name> (just made, status in $rc) reached the
# 2-rank fp32 run's test accuracy within 0.005, the bar mixed-precision
# training is held to.
near_fp32() {
  local name="$1" what="$2" reached
  reached=$(sed -n 's/^test accuracy: //p' "$scratch/$name.log")
  if [ "$rc" -ne 0 ] || [ -z "$reached" ] || [ -z "$accuracy" ]; then
    fail "2-rank training with $what exited $rc"; tail -5 "$scratch/$name.log"
  elif ! awk -v a="$reached" -v b="$accuracy" 'BEGIN { d = a - b; exit !(d <= 0.005 && d >= -0.005) }'; then
    fail "2 ranks with $what reached $reached, fp32 $accuracy: more than 0.005 apart"
  else
    echo "ok: 2 ranks with $what reach test accuracy $reached (fp32: $accuracy)"
  fi
}

# Two ranks train one epoch.
run two -n 2 "$train" "$deck" --set "run.output_dir=$scratch/two" --set parallel.bucket_mb=0.1
accuracy=$(sed -n 's/^test accuracy: //p' "$scratch/two.log")
if [ "$rc" -ne 0 ] || [ -z "$accuracy" ]; then
  fail "2-rank training exited $rc"; cat "$scratch/two.log"
elif ! awk -v a="$accuracy" -v t="$threshold" 'BEGIN { exit !(a >= t) }'; then
  fail "2-rank training reached $accuracy < $threshold"
else
  echo "ok: 2 ranks train the smoke deck to test accuracy $accuracy (>= $threshold)"
fi
[ "$(grep -c '^test accuracy' "$scratch/two.log")" -eq 1 ] || fail "the result was printed by more than rank 0"
grep -q "2 ranks, global batch 128 (shards of up to 64)" "$scratch/two.log" || fail "no data-parallel banner"
# The same run with gradients averaged in bf16 (8 significant bits: each
# gradient rounded to 2^-8 relative, far below the noise of a 128-sample
# batch) trains as well: test accuracy within 0.005 of the fp32 run, the
# bar mixed-precision training is held to (runs with other seeds spread
# by about 0.001 here).
run bf16 -n 2 "$train" "$deck" --set "run.output_dir=$scratch/bf16" --set parallel.bucket_mb=0.1 \
  --set 'parallel.gradient_dtype="bf16"'
near_fp32 bf16 "bf16 gradients"
grep -q "gradients averaged in bf16" "$scratch/bf16.log" || fail "no bf16 gradient banner"
# The same with the optimizer sharded: bf16 codes reduce-scattered instead
# of all-reduced, the same sums on 2 ranks, so every step's loss is the same.
run bf16_sharded -n 2 "$train" "$deck" --set "run.output_dir=$scratch/bf16_sharded" \
  --set parallel.bucket_mb=0.1 --set 'parallel.gradient_dtype="bf16"' \
  --set parallel.shard_optimizer=true
step_losses() { grep '"type":"step"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
if [ "$rc" -eq 0 ] && [ "$(step_losses "$scratch/bf16/metrics.jsonl" | wc -l)" -gt 400 ] &&
   cmp -s <(step_losses "$scratch/bf16/metrics.jsonl") <(step_losses "$scratch/bf16_sharded/metrics.jsonl"); then
  echo "ok: bf16 gradients with a sharded optimizer: every step's loss equals the unsharded run's"
else
  fail "bf16 gradients with a sharded optimizer: exit $rc, or step losses differ from the unsharded run"
fi
# fp16 gradients under dynamic loss scaling from 2^24: the first step's
# output-layer gradients, up to 1/128 each, scaled by 2^24 exceed fp16's
# 65504 on every CPU, so the averaged gradients overflow and steps are
# skipped, each halving the scale, until it fits; later doublings (every
# 100 steps) may overflow again. The run must still train to within 0.005
# of fp32, and its metrics must show every skip halving the scale and every
# other step keeping or doubling it.
run fp16 -n 2 "$train" "$deck" --set "run.output_dir=$scratch/fp16" --set parallel.bucket_mb=0.1 \
  --set 'parallel.gradient_dtype="fp16"' --set 'precision.loss_scale="dynamic"' \
  --set precision.initial_loss_scale=16777216 --set precision.loss_scale_growth_interval=100
near_fp32 fp16 "fp16 gradients and dynamic loss scaling"
if scales=$(/usr/bin/python3 - "$scratch/fp16/metrics.jsonl" <<'PY'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "step"]
skipped = [r["step"] for r in steps if r["skipped"]]
assert steps[0]["skipped"] and steps[0]["loss_scale"] == 2.0**24, "step 1 was not skipped at 2^24"
for a, b in zip(steps, steps[1:]):
    allowed = [a["loss_scale"] / 2] if a["skipped"] else [a["loss_scale"], 2 * a["loss_scale"]]
    assert b["loss_scale"] in allowed, f"step {b['step']}: scale {b['loss_scale']} after {a}"
    assert (a["grad_norm"] is None) == a["skipped"], f"step {a['step']}: norm and skip disagree"
print(f"{len(skipped)} of {len(steps)} steps skipped (first {skipped[:8]}), "
      f"final scale {steps[-1]['loss_scale']:g}")
PY
); then
  echo "ok: fp16 gradients from loss scale 2^24: $scales"
else
  fail "fp16 gradients with loss scaling: the metrics do not show skips halving the scale"
fi
# Two ranks, each batch in 2 micro-batches of 64 (32 per rank): the model
# holds a quarter of the batch, and still learns.
run accumulate -n 2 "$train" "$deck" --set "run.output_dir=$scratch/accumulate" \
  --set training.accumulation_steps=2
accuracy=$(sed -n 's/^test accuracy: //p' "$scratch/accumulate.log")
if [ "$rc" -ne 0 ] || [ -z "$accuracy" ] || ! awk -v a="$accuracy" -v t="$threshold" 'BEGIN { exit !(a >= t) }'; then
  fail "2 ranks with 2 micro-batches: exit $rc, accuracy '$accuracy' (needs >= $threshold)"; tail -5 "$scratch/accumulate.log"
else
  echo "ok: 2 ranks with 2 micro-batches a step reach test accuracy $accuracy"
fi
grep -q "2 micro-batches of gradients per step" "$scratch/accumulate.log" &&
  grep -q "shards of up to 32" "$scratch/accumulate.log" || fail "no accumulation banner"
/usr/bin/python3 - "$scratch/two/metrics.jsonl" <<'PY' || fail "metrics.jsonl of the 2-rank run"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
runs = [l for l in lines if l["type"] == "run"]
epochs = [l for l in lines if l["type"] == "epoch"]
assert len(runs) == 1 and runs[0]["ranks"] == 2, runs          # rank 0 alone writes
assert len(epochs) == 1, epochs
e = epochs[0]
assert e["time"]["communication"] > 0 and e["time"]["communication_overlapped"] >= 0, e
assert 0 <= e["overlap_fraction"] <= 1, e
print("ok: metrics from rank 0 only, communication %.2f s exposed, %.0f%% overlapped"
      % (e["time"]["communication"], 100 * e["overlap_fraction"]))
PY

# expect <name> <status> <message fragment>: checks the run just made.
expect() {
  local name="$1" status="$2" fragment="$3"
  if [ "$rc" -ne "$status" ]; then
    fail "$name exited $rc, expected $status"; cat "$scratch/$name.log"
  elif ! grep -qF -- "$fragment" "$scratch/$name.log"; then
    fail "$name: message lacks '$fragment'"; cat "$scratch/$name.log"
  else
    echo "ok: $name -> exit $rc in ${seconds} s, '$fragment'"
  fi
}

# Rank 1 cannot read its data: every rank stops with status 2.
run data_fault -n 2 "$train" "$deck" --set "run.output_dir=$scratch/data" --inject-fault data@1
expect data_fault 2 "data error: rank 1: ${TESSERA_DATA_DIR:-/usr/share/datasets/fashion-mnist}/train-images-idx3-ubyte.gz: cannot read (fault injected by --inject-fault)"
# Rank 1 fails in the middle of training: the job is aborted, not left hanging.
run step_fault -n 3 "$train" "$deck" --set "run.output_dir=$scratch/step" --inject-fault step:5@1
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "step_fault exited $rc"
expect step_fault "$rc" "tessera-train: rank 1: error: fault injected by --inject-fault after optimizer step 5; stopping every rank"
# The same with the optimizer sharded: rank 1 fails while the step's
# parameters are still being gathered (they arrive during the next forward).
run step_fault_sharded -n 3 "$train" "$deck" --set "run.output_dir=$scratch/step_sharded" \
  --set parallel.shard_optimizer=true --inject-fault step:5@1
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "step_fault_sharded exited $rc"
expect step_fault_sharded "$rc" "tessera-train: rank 1: error: fault injected by --inject-fault after optimizer step 5; stopping every rank"
# Ranks given different decks: every rank refuses.
run mismatch -n 1 "$train" "$deck" --check : -n 1 "$train" "$deck" --check --set training.epochs=2
expect mismatch 2 "the deck differs between ranks: rank 1 differs from rank 0"
# A deck error on one rank only: the verdict is the same on every rank.
run one_bad -n 1 "$train" "$deck" --check : -n 1 "$train" "$deck" --check --set training.epochs=0
expect one_bad 2 "rank 1: --set training.epochs=0: training.epochs: value 0 is out of range"
[ "$failures" -eq 0 ] || exit 1
