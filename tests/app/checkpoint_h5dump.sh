#!/usr/bin/env bash
# Checkpoints end to end: h5dump finds the groups, datasets and attributes
# docs/checkpoint.md documents; tessera-inspect prints the step and the
# parameter norms the writer computed; a writer killed with SIGKILL between
# its complete temporary file and the rename leaves `latest` on the previous
# checkpoint, which still loads; bad files exit 2 naming the file.
# Usage: checkpoint_h5dump.sh <checkpoint_probe> <tessera-inspect>
set -euo pipefail
probe="$1" inspect="$2"
scratch=$(mktemp -d)
writer=
trap '[ -n "$writer" ] && kill -9 "$writer" 2>/dev/null; rm -rf "$scratch"' EXIT
dir="$scratch/checkpoints"
fail() { echo "FAIL: $*"; exit 1; }

# Checkpoint 1: one epoch of 200 samples in batches of 32 is 7 steps.
"$probe" "$dir" 1 > "$scratch/first.out"
first="$dir/step-00000007.h5"
[ -f "$first" ] || fail "no $first; probe said: $(cat "$scratch/first.out")"
[ "$(cat "$dir/latest")" = "step-00000007.h5" ] || fail "latest: $(cat "$dir/latest")"

# The documented layout, as h5dump sees it.
h5dump -H "$first" > "$scratch/header.txt"
for object in 'ATTRIBUTE "format"' 'ATTRIBUTE "format_version"' 'ATTRIBUTE "tessera_version"' \
              'ATTRIBUTE "world_size"' 'ATTRIBUTE "global_batch"' 'GROUP "training"' \
              'ATTRIBUTE "step"' 'ATTRIBUTE "epoch"' 'ATTRIBUTE "batch"' 'ATTRIBUTE "lr"' \
              'ATTRIBUTE "schedule"' 'GROUP "rng"' 'ATTRIBUTE "seed"' 'ATTRIBUTE "shuffle_epoch"' \
              'ATTRIBUTE "dropout_step"' 'ATTRIBUTE "initialization_seed"' 'GROUP "deck"' \
              'DATASET "text"' 'DATASET "overrides"' 'DATASET "metrics"' 'GROUP "model"' \
              'ATTRIBUTE "layers"' 'ATTRIBUTE "input_shape"' 'ATTRIBUTE "output_shape"' \
              'ATTRIBUTE "inputs"' 'GROUP "parameters"' 'GROUP "state"' 'DATASET "running_mean"' \
              'DATASET "running_var"' 'GROUP "optimizer"' 'ATTRIBUTE "step_count"' \
              'ATTRIBUTE "buffers"' 'GROUP "exp_avg"' 'GROUP "exp_avg_sq"'; do
  grep -qF "$object" "$scratch/header.txt" || fail "h5dump -H $first lacks $object"
done
# Datasets by full path, with the shapes the model gives them.
h5dump -H -d /parameters/fc1/weight "$first" | grep -qF 'SIMPLE { ( 16, 2 ) / ( 16, 2 ) }' ||
  fail "/parameters/fc1/weight is not 16 x 2"
h5dump -H -d /optimizer/exp_avg_sq/fc2/weight "$first" | grep -qF 'SIMPLE { ( 2, 16 ) / ( 2, 16 ) }' ||
  fail "/optimizer/exp_avg_sq/fc2/weight is not 2 x 16"
h5dump -a /format "$first" | grep -qF '"tessera-checkpoint"' || fail "format attribute"
h5dump -a /training/step "$first" | grep -qE '^ *\(0\): 7$' || fail "/training step attribute is not 7"
h5dump -d /deck/text "$first" | grep -qF 'checkpoint_probe' || fail "/deck/text does not hold the deck"
echo "PASS: h5dump finds the documented layout"

# tessera-inspect prints the step and the norms the probe computed itself.
"$inspect" "$first" > "$scratch/inspect.txt"
grep -qx "step: 7" "$scratch/inspect.txt" || fail "tessera-inspect step: $(cat "$scratch/inspect.txt")"
grep -qx "epochs done: 1 of 2; epoch 2 starts after step 7" "$scratch/inspect.txt" ||
  fail "tessera-inspect progress after epoch 1 of 2: $(cat "$scratch/inspect.txt")"
while read -r word name norm; do
  [ "$word" = norm ] || continue
  grep -qE "^  $name +\[[0-9, ]+\] +norm $norm\$" "$scratch/inspect.txt" ||
    fail "tessera-inspect does not print $name norm $norm: $(cat "$scratch/inspect.txt")"
done < "$scratch/first.out"
grep -q "^norm fc2/bias" "$scratch/first.out" || fail "the probe printed no norms"
"$inspect" "$dir" | grep -qx "step: 7" || fail "tessera-inspect <directory>"
"$inspect" "$dir/latest" | grep -qx "step: 7" || fail "tessera-inspect <directory>/latest"
echo "PASS: tessera-inspect prints the step and the parameter norms"

# Checkpoint 2, killed while it pauses before the rename.
TESSERA_CHECKPOINT_PAUSE_SECONDS=60 "$probe" "$dir" 1 > "$scratch/second.out" 2> "$scratch/second.err" &
writer=$!
for _ in $(seq 600); do
  grep -q "pausing" "$scratch/second.err" 2>/dev/null && break
  kill -0 "$writer" 2>/dev/null || fail "the writer ended before pausing: $(cat "$scratch/second.err")"
  sleep 0.1
done
grep -q "pausing" "$scratch/second.err" || fail "the writer never paused"
grep -qF "resumed $first at step 7" "$scratch/second.out" || fail "the writer did not resume: $(cat "$scratch/second.out")"
kill -9 "$writer"
wait "$writer" 2>/dev/null || true
writer=
compgen -G "$dir/.step-00000014.h5.tmp.*" > /dev/null || fail "no temporary file left by the killed writer: $(ls -A "$dir")"
[ "$(cat "$dir/latest")" = "step-00000007.h5" ] || fail "latest after the crash: $(cat "$dir/latest")"
[ "$(cd "$dir" && ls step-*.h5)" = "step-00000007.h5" ] || fail "checkpoint files after the crash: $(ls -A "$dir")"
"$inspect" "$dir" > "$scratch/after_crash.txt" || fail "tessera-inspect on the directory after the crash exited $?"
grep -qx "step: 7" "$scratch/after_crash.txt" || fail "after the crash latest is not step 7"
echo "PASS: a writer killed before its rename leaves latest on checkpoint 1, which loads"

# The next run resumes from checkpoint 1 and commits checkpoint 2.
"$probe" "$dir" 1 > "$scratch/third.out"
grep -qF "resumed $first at step 7" "$scratch/third.out" || fail "no resume: $(cat "$scratch/third.out")"
[ "$(cat "$dir/latest")" = "step-00000014.h5" ] || fail "latest after resuming: $(cat "$dir/latest")"
"$inspect" "$dir" > "$scratch/resumed.txt"
grep -qx "step: 14" "$scratch/resumed.txt" || fail "tessera-inspect after resuming"
grep -qx "epochs done: 2 of 2 (finished)" "$scratch/resumed.txt" ||
  fail "tessera-inspect progress of the finished run: $(cat "$scratch/resumed.txt")"
echo "PASS: the next run resumes from checkpoint 1 and commits step 14"

# Bad files: a clear message naming the file, exit status 2.
expect_bad() {  # <path> <message fragment>
  set +e
  out=$("$inspect" "$1" 2>&1)
  rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "tessera-inspect $1 exited $rc, expected 2: $out"
  grep -qF "$1" <<<"$out" || fail "message does not name $1: $out"
  grep -qF "$2" <<<"$out" || fail "message lacks '$2': $out"
}
echo "not a checkpoint" > "$scratch/text.h5"
expect_bad "$scratch/text.h5" "not an HDF5 file"
head -c 20000 "$first" > "$scratch/truncated.h5"
expect_bad "$scratch/truncated.h5" "truncated"
expect_bad "$scratch/missing.h5" "does not exist"
mkdir "$scratch/empty"
expect_bad "$scratch/empty" "has no 'latest' file"
echo "PASS: bad files exit 2 naming the file and the problem"
