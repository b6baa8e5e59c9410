#!/usr/bin/env bash
# Exact restarts through tessera-train: resuming from a checkpoint written
# mid-epoch or at an epoch boundary, on 1 and on 2 ranks, ends bitwise equal
# to the uninterrupted run (parameters, optimizer state) with the same
# per-step losses and loss scales; resuming on another rank count agrees within 1e-5
# relative over the first steps; a run killed with SIGKILL while writing a checkpoint leaves the
# previous one in place and the next run resumes from it; bad checkpoints
# are refused with exit status 2 and the file's name. A run with its
# optimizer state sharded over the ranks is the unsharded run bit for bit,
# and restarts into or out of sharding and onto other rank counts.
# Part `exact` runs everything that must hold bit for bit (same rank and
# thread count); part `ranks` the resumption on other rank counts, whose
# sums go through the vendor BLAS in another order and agree to rounding.
# Usage: restart.sh <mpiexec> <tessera-train> <restart deck> <exact|ranks>
set -uo pipefail
mpiexec="$1" train="$2" deck="$3" part="$4"
case "$part" in exact|ranks) ;; *) echo "restart.sh: unknown part '$part' (exact or ranks)" >&2; exit 2 ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"

# train <ranks> <name> [args...]: a run with its own output directory.
train() {
  local ranks="$1" name="$2"
  shift 2
  timeout 300 "$mpiexec" --oversubscribe -n "$ranks" "$train" "$deck" \
    --set "run.output_dir=$scratch/$name" "$@" > "$scratch/$name.log" 2>&1 ||
    { fail "$name exited $?"; tail -5 "$scratch/$name.log"; }
}
# The loss and the loss scale of every step after <from>, as the metrics
# file recorded them (after the last restart, when the directory saw
# several runs).
losses() {
  /usr/bin/python3 -c '
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
starts = [i for i, r in enumerate(records) if r["type"] == "restart"]
for r in records[starts[-1] if starts else 0:]:
    if r["type"] == "step" and r["step"] > int(sys.argv[2]):
        print(r["step"], repr(r["loss"]), r["loss_scale"])' "$scratch/$1/metrics.jsonl" "$2"
}
# same <reference run> <resumed run> <from step> [final step]: bitwise
# equal end states (at step 470 unless given) and losses.
same() {
  local final="${4:-470}" what="$2 (from step $3)"
  if h5diff -q "$(ckpt "$1" "$final")" "$(ckpt "$2" "$final")" /parameters &&
     h5diff -q "$(ckpt "$1" "$final")" "$(ckpt "$2" "$final")" /optimizer; then
    echo "ok: $what: parameters and optimizer state bitwise equal to $1's"
  else
    fail "$what: the final checkpoint differs from $1's"
  fi
  if [ -n "$(losses "$2" "$3")" ] && cmp -s <(losses "$1" "$3") <(losses "$2" "$3"); then
    echo "ok: $what: the $(losses "$2" "$3" | wc -l) per-step losses and loss scales after the restart are identical"
  else
    fail "$what: per-step losses or loss scales differ from $1's"
  fi
}

# Another rank count, same global batch: the sums over ranks go in another
# order, so the resumed run follows the 2-rank run to rounding. That holds
# for the first steps only: rounding can move a ReLU input that sits within
# it of zero across the kink, which changes that sample's gradient by its
# full size, and the runs then part (measured with OpenBLAS's SkylakeX
# kernels: losses within 1e-7 up to step 198, 1e-4 apart in the gradient
# norm at step 199, 1e-2 by step 300). A resumed run that restored anything
# wrongly (weights, optimizer moments, data cursor, dropout stream, learning
# rate) is off from its first step, so the first 10 steps after the restart
# and the weights at step 110 are compared, within 1e-5 relative.
dump() {  # dump <run> <layer> <step>
  h5dump -d "/parameters/$2/weight" -y -w 1 -m %.9e "$(ckpt "$1" "$3")" | grep -E '^ *-?[0-9]' |
    tr -d ', ' | sed 's/^/w /'
}
if [ "$part" = ranks ]; then
  every10=(--set checkpoint.every_steps=10 --set checkpoint.keep=100)
  train 2 two "${every10[@]}"
  for ranks in 1 3; do
    train "$ranks" "two_on_$ranks" --restart "$(ckpt two 100)" "${every10[@]}"
    for layer in dense0 dense3; do
      bash "$here/../compare_outputs.sh" <(dump two $layer 110) <(dump "two_on_$ranks" $layer 110) 1e-5 \
        "$layer at step 110 after resuming the 2-rank run on $ranks ranks" 1e-2 ||
        failures=$((failures + 1))
    done
    bash "$here/../compare_outputs.sh" <(losses two 100 | head -10) <(losses "two_on_$ranks" 100 | head -10) \
      1e-5 "losses of steps 101 to 110 after resuming the 2-rank run on $ranks ranks" ||
      failures=$((failures + 1))
  done
  # The whole optimizer state of a 2-rank checkpoint, resharded over 3
  # ranks (slices of 17, 17 and 16 chunks of 1024 parameters): the gradients
  # reduce-scattered rather than all-reduced, the norm from the slices, and
  # still the same weights as the unsharded 3-rank run, bit for bit.
  train 3 two_on_3_sharded --restart "$(ckpt two 100)" "${every10[@]}" \
    --set parallel.shard_optimizer=true
  for layer in dense0 dense3; do
    if cmp -s <(dump two_on_3 $layer 110) <(dump two_on_3_sharded $layer 110); then
      echo "ok: $layer at step 110 on 3 ranks: the sharded optimizer's weights equal the unsharded ones bitwise"
    else
      fail "$layer at step 110 on 3 ranks: a sharded optimizer changed the weights"
    fi
  done
  [ "$failures" -eq 0 ] || exit 1
  exit 0
fi

train 1 one
train 1 one_mid --restart "$(ckpt one 100)"
same one one_mid 100
train 1 one_epoch --restart "$(ckpt one 235)"
same one one_epoch 235
grep -q "resuming from $(ckpt one 235): epoch 2, step 0 of 235" "$scratch/one_epoch.log" ||
  fail "the epoch-boundary restart did not say where it resumed"

# training.max_steps = 300 ends the run 65 steps into its second epoch:
# 300 step records, the last checkpoint at step 300 (recording where in
# the epoch it stopped), and a restart from step 100 under the same cap
# ends there bitwise too; restarting the finished run trains nothing more.
capped=(--set training.max_steps=300)
train 1 capped "${capped[@]}"
steps="$(grep -c '"type":"step"' "$scratch/capped/metrics.jsonl")"
if [ "$steps" = 300 ] && [ -f "$(ckpt capped 300)" ] && [ ! -e "$(ckpt capped 400)" ]; then
  echo "ok: training.max_steps=300 stopped the run after step 300 and checkpointed it"
else
  fail "training.max_steps=300: $steps step records; checkpoint 300 present: $([ -f "$(ckpt capped 300)" ] && echo yes || echo no)"
fi
train 1 capped_mid --restart "$(ckpt capped 100)" "${capped[@]}"
same capped capped_mid 100 300
train 1 capped_done --set "run.output_dir=$scratch/capped" --restart latest "${capped[@]}"
grep -q "resuming from $(ckpt capped 300): epoch 2, step 65 of 235" "$scratch/capped_done.log" ||
  fail "the restart of the capped run did not resume at step 65 of epoch 2"
[ "$(grep -c '"type":"step"' "$scratch/capped/metrics.jsonl")" = 300 ] ||
  fail "restarting a run that reached training.max_steps trained more steps"

# Activations in bf16: the checkpoints hold the float master weights and
# optimizer state, from which the resumed run rounds its 16-bit weight
# copies again, so it continues the run bit for bit.
bf16=(--set precision.compute=bf16)
train 1 one_bf16 "${bf16[@]}"
train 1 one_bf16_mid --restart "$(ckpt one_bf16 100)" "${bf16[@]}"
same one_bf16 one_bf16_mid 100
grep -q "activations and their gradients in bf16" "$scratch/one_bf16.log" ||
  fail "the bf16 run did not say it computes in bf16"
h5_differs "$(ckpt one 470)" "$(ckpt one_bf16 470)" /parameters
[ $? -ne 1 ] || fail "the bf16 run ended with the fp32 run's weights"

train 2 two
train 2 two_mid --restart "$(ckpt two 100)"
same two two_mid 100

# The optimizer state sharded over the 2 ranks (ZeRO-1): the same run bit
# for bit, checkpoints with the whole state (gathered on rank 0), restarts
# from whole state into shards and back.
shard=(--set parallel.shard_optimizer=true)
train 2 two_sharded "${shard[@]}"
same two two_sharded 0
train 2 two_sharded_mid --restart "$(ckpt two 100)" "${shard[@]}"
same two two_sharded_mid 100
train 2 two_unsharded_mid --restart "$(ckpt two_sharded 100)"
same two two_unsharded_mid 100

# SIGKILL while the second checkpoint is being written: each write pauses
# 6 s between the complete temporary file and the rename, and the kill
# comes within 0.1 s of the second pause's start.
TESSERA_CHECKPOINT_PAUSE_SECONDS=6 "$train" "$deck" --set "run.output_dir=$scratch/killed" \
  > "$scratch/killed.log" 2>&1 &
pid=$!
for _ in $(seq 3000); do
  [ "$(grep -c pausing "$scratch/killed.log")" -ge 2 ] && break
  sleep 0.1
done
kill -9 "$pid"; wait "$pid" 2>/dev/null
latest=$(cat "$scratch/killed/checkpoints/latest" 2>/dev/null)
[ "$latest" = "step-00000100.h5" ] || fail "after SIGKILL, latest names '$latest', not step-00000100.h5"
train 1 killed --restart latest
grep -q "resuming from $(ckpt killed 100)" "$scratch/killed.log" ||
  { fail "the run after SIGKILL did not resume from step 100"; tail -3 "$scratch/killed.log"; }
same one killed 100

# Bad checkpoints: exit 2, the file and the problem named.
expect() {  # expect <fragment> <restart argument> [args...]
  local fragment="$1" out rc
  shift
  out=$("$train" "$deck" --set "run.output_dir=$scratch/bad" --restart "$@" 2>&1); rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$fragment" <<<"$out"; then
    fail "--restart $*: exit $rc, expected 2 and '$fragment'"; echo "$out" | tail -3
  else
    echo "ok: --restart $* -> exit 2, '$fragment'"
  fi
}
echo "not a checkpoint" > "$scratch/text.h5"
head -c 20000 "$(ckpt one 100)" > "$scratch/truncated.h5"
expect "$scratch/missing.h5" "$scratch/missing.h5"
expect "$scratch/text.h5" "$scratch/text.h5"
expect "$scratch/truncated.h5" "$scratch/truncated.h5"
expect "written with training.batch_size 256, the deck has 128" "$(ckpt one 100)" --set training.batch_size=128
expect "$(ckpt one 100): dataset '/parameters/dense0/weight' has shape [64, 784]; the model's dense0 weight has shape [32, 784]" "$(ckpt one 100)" --set "model.layers[0].units=32"
[ "$failures" -eq 0 ] || exit 1
