#!/usr/bin/env bash
# The run's callbacks on 2 ranks: every callback that calls collectives
# (the evaluation after each epoch, checkpoints every 5 steps and every
# epoch with the optimizer sharded, the weights check) runs on both ranks in
# the same order, so no rank waits in another collective, and early
# stopping ends the run on both. A restart of the stopped run trains no
# further; a run interrupted before its stop, restarted, stops after the
# same epoch.
# Usage: callbacks.sh <mpiexec> <tessera-train> <smoke deck>
set -uo pipefail
mpiexec="$1" train="$2" deck="$3"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"

# run <name> <tessera-train arguments...> on 2 ranks: output in
# $scratch/<name>.log, status in $rc.
run() {
  local name="$1"
  shift
  timeout 120 "$mpiexec" --oversubscribe -n 2 "$train" "$deck" --set "run.output_dir=$scratch/$name" \
    --set training.epochs=6 --set data.train_samples=2048 --set data.test_samples=512 \
    --set parallel.shard_optimizer=true --set checkpoint.every_steps=5 \
    --set training.early_stop_min_delta=1000 "$@" > "$scratch/$name.log" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || fail "$name: still running after 120 s (a rank waits in another collective)"
}

# stopped_after <name>: the epoch of the run's stop record, and its last epoch record.
stopped_after() {
  python3 - "$scratch/$1/metrics.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
stops = [r["epoch"] for r in records if r["type"] == "stop"]
epochs = [r["epoch"] for r in records if r["type"] == "epoch"]
print(stops[-1] if stops else "none", epochs[-1] if epochs else "none", len(epochs))
PY
}

# No evaluation after the first lowers the loss by more than 1000: with a
# patience of 2 the run ends after epoch 3 of 6.
run whole --set training.early_stop_patience=2
if [ "$rc" -ne 0 ]; then
  fail "the 2-rank run with early stopping exited $rc"; tail -20 "$scratch/whole.log"
else
  read -r stop last count < <(stopped_after whole)
  [ "$stop" = 3 ] && [ "$last" = 3 ] && [ "$count" = 3 ] \
    || fail "early stopping: stop record after epoch $stop, last epoch record $last ($count in all); expected 3, 3, 3"
  grep -q "^callbacks, in order on every rank: evaluation (collective), weights check (collective), early stopping, metrics, caller's callbacks, checkpoint (collective)$" \
    "$scratch/whole.log" || fail "the run does not list its callbacks"
  grep -q "^early stopping: no evaluation loss below the best" "$scratch/whole.log" \
    || fail "the epoch line does not say why the run stopped"
  [ "$(grep -c '^test accuracy' "$scratch/whole.log")" -eq 1 ] || fail "no test result, or more than one"
  echo "ok: 2 ranks, collectives in every callback: early stopping ends the run after epoch $stop"
fi

# A restart of the stopped run trains no further.
run whole --set training.early_stop_patience=2 --restart latest
read -r stop last count < <(stopped_after whole)
if [ "$rc" -ne 0 ] || [ "$count" != 3 ] || ! grep -q "the run had ended: early stopping" "$scratch/whole.log"; then
  fail "the restart of a stopped run exited $rc with $count epoch records"; tail -5 "$scratch/whole.log"
else
  echo "ok: a restart of the stopped run says so and trains no further"
fi

# Rank 1 fails after step 40 (epoch 3 of 16 steps each); the restart from
# the checkpoint of step 35 counts the evaluations of epochs 1 and 2 from
# the checkpoint's metrics and stops after epoch 3, as the whole run did.
run broken --set training.early_stop_patience=2 --inject-fault step:40@1
[ "$rc" -ne 0 ] || fail "the run with a fault injected exited 0"
run broken --set training.early_stop_patience=2 --restart latest
read -r stop last count < <(stopped_after broken)
if [ "$rc" -ne 0 ] || [ "$stop" != 3 ] || [ "$last" != 3 ]; then
  fail "the restarted run exited $rc, stopped after epoch $stop (last epoch record $last); expected 3"
  tail -5 "$scratch/broken.log"
else
  echo "ok: interrupted in epoch 3 and restarted from step 35, the run stops after epoch $stop as the whole one did"
fi
[ "$failures" -eq 0 ] || exit 1
