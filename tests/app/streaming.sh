#!/usr/bin/env bash
# Streaming data (data.streaming = true) end to end: Fashion-MNIST written
# contiguous by tessera-idx2hdf5 --contiguous trains to the same step
# losses, validation and test results, bit for bit, streamed as loaded
# whole, on 1 rank, on 2 and on 3 pipeline stages; a synthetic dataset of 1000 MiB as floats
# trains streamed under data.max_resident_mb = 64 with a peak resident set
# below the file's size, where loading it whole is refused; bad input
# (a compressed file streamed, limits too small) fails naming the file or
# the deck line, with exit status 2.
# Usage: streaming.sh <mpiexec> <tessera-idx2hdf5> <tessera-synthetic> <tessera-train>
set -uo pipefail
mpiexec="$1" convert="$2" synthetic="$3" train="$4"
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../script_common.sh
source "$here/../script_common.sh"
data="${TESSERA_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
deck="$here/fashion_mnist_hdf5.toml"

for set in train t10k; do
  "$convert" --contiguous "$data/$set-images-idx3-ubyte.gz" "$data/$set-labels-idx1-ubyte.gz" \
    "$scratch/$set.h5" > /dev/null || fail "tessera-idx2hdf5 --contiguous $set"
done
"$convert" "$data/t10k-images-idx3-ubyte.gz" "$data/t10k-labels-idx1-ubyte.gz" \
  "$scratch/compressed.h5" > /dev/null || fail "tessera-idx2hdf5 t10k"
files=(--set "data.train_file=$scratch/train.h5" --set "data.test_file=$scratch/t10k.h5")

# run <name> <ranks> [options...]: output in $scratch/<name>.log, status in $rc.
run() {
  local name="$1" ranks="$2"
  shift 2
  timeout 300 "$mpiexec" --oversubscribe -n "$ranks" "$train" "$@" \
    --set "run.output_dir=$scratch/$name" > "$scratch/$name.log" 2>&1
  rc=$?
  [ "$rc" -ne 124 ] || fail "$name: still running after 300 s"
}

# same <a> <b>: the step losses and the validation and test results in the
# two runs' metrics are the same numbers, as JSON writes them (every bit).
same() {
  /usr/bin/python3 - "$scratch/$1/metrics.jsonl" "$scratch/$2/metrics.jsonl" <<'PY'
import json, sys
def read(path):
    lines = [json.loads(l) for l in open(path)]
    steps = [l["loss"] for l in lines if l["type"] == "step"]
    results = [(k, l[k]) for l in lines for k in sorted(l)
               if k.endswith("_loss") or k.endswith("_accuracy")]
    return steps, results
a, b = read(sys.argv[1]), read(sys.argv[2])
if not a[0] or a != b:
    differ = sum(x != y for x, y in zip(a[0], b[0]))
    sys.exit(f"{len(a[0])} and {len(b[0])} steps, {differ} losses differ; results {a[1]} vs {b[1]}")
print(f"{len(a[0])} step losses and {len(a[1])} results equal")
PY
}

for ranks in 1 2; do
  run "memory$ranks" "$ranks" "$deck" "${files[@]}" --set data.validation_split=0.1
  [ "$rc" -eq 0 ] || { fail "in-memory run on $ranks rank(s) exited $rc"; cat "$scratch/memory$ranks.log"; }
  run "stream$ranks" "$ranks" "$deck" "${files[@]}" --set data.validation_split=0.1 \
    --set data.streaming=true
  [ "$rc" -eq 0 ] || { fail "streamed run on $ranks rank(s) exited $rc"; cat "$scratch/stream$ranks.log"; }
  grep -qF "data streamed from $scratch/train.h5 and $scratch/t10k.h5: each rank reads its share of every batch, 3 batches ahead" \
    "$scratch/stream$ranks.log" || fail "$ranks rank(s): the run description does not say the data is streamed"
  if out=$(same "memory$ranks" "stream$ranks"); then
    echo "ok: $ranks rank(s), streamed = loaded whole: $out"
  else
    fail "$ranks rank(s): streamed differs from loaded whole: $out"
  fi
done

# Pipeline stages read streamed data on the first stage (images) and the
# last (labels) only; the inner stage reads nothing: 3 stages, 2 micro-batches
# a step, equal the 1-rank run with 2 micro-batches loaded whole.
micro=(--set data.validation_split=0.1 --set training.accumulation_steps=2)
run memory_micro 1 "$deck" "${files[@]}" "${micro[@]}"
run stream_pipeline 3 "$deck" "${files[@]}" "${micro[@]}" --set data.streaming=true \
  --set parallel.pipeline_stages=3
if [ "$rc" -eq 0 ] && out=$(same memory_micro stream_pipeline); then
  echo "ok: 3 pipeline stages, streamed = 1 rank loaded whole: $out"
else
  fail "3 pipeline stages streamed: exit $rc or results differ: ${out:-}"; tail -3 "$scratch/stream_pipeline.log"
fi

# expect_error <name> <expected text> <tessera-train arguments...>
expect_error() {
  local name="$1" expected="$2"
  shift 2
  run "$name" 1 "$@"
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$expected" "$scratch/$name.log"; then
    fail "$name: exit $rc, expected 2 and '$expected'"
    cat "$scratch/$name.log"
  else
    echo "ok: $name -> exit 2: $(grep -F -- "$expected" "$scratch/$name.log" | head -1)"
  fi
}
expect_error compressed "$scratch/compressed.h5: dataset 'images' is stored in chunks" \
  "$deck" "${files[@]}" --set "data.test_file=$scratch/compressed.h5" --set data.streaming=true
expect_error whole_over_limit \
  "--set data.max_resident_mb=100: data.max_resident_mb: $scratch/train.h5:images holds 60000 samples, which take 180 MiB in memory, more than the limit of 100 MiB; set data.streaming = true" \
  "$deck" "${files[@]}" --set data.max_resident_mb=100
expect_error buffers_over_limit "data.max_resident_mb: 1 MiB cannot hold the streaming buffers" \
  "$deck" "${files[@]}" --set data.streaming=true --set data.max_resident_mb=1 \
  --set training.batch_size=1024

# Larger than the limit: 64000 samples of 64 x 64 bytes (250 MiB in the
# file, 1001 MiB as float samples with the labels) under max_resident_mb = 64.
"$synthetic" "$scratch/big.h5" --samples 64000 --shape 1x64x64 --seed 1 > /dev/null ||
  fail "tessera-synthetic big.h5"
"$synthetic" "$scratch/big_test.h5" --samples 2000 --shape 1x64x64 --seed 1 > /dev/null ||
  fail "tessera-synthetic big_test.h5"
big=(--set "data.train_file=$scratch/big.h5" --set "data.test_file=$scratch/big_test.h5")
run big 1 "$here/synthetic_stream.toml" "${big[@]}"
accuracy=$(sed -n 's/^test accuracy: //p' "$scratch/big.log")
if [ "$rc" -ne 0 ] || [ -z "$accuracy" ]; then
  fail "streamed synthetic run exited $rc"
  cat "$scratch/big.log"
else
  peak=$(/usr/bin/python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if '\"epoch\"' in l][-1]['peak_resident_mb'])" "$scratch/big/metrics.jsonl")
  file_mb=$(( $(stat -c %s "$scratch/big.h5") >> 20 ))
  if awk -v p="$peak" -v f="$file_mb" -v a="$accuracy" 'BEGIN { exit !(p > 0 && p < f && a >= 0.9) }'; then
    echo "ok: streamed 64000 samples (file $file_mb MiB) under a 64 MiB limit: peak resident $peak MiB, test accuracy $accuracy"
  else
    fail "streamed synthetic run: peak resident $peak MiB (file $file_mb MiB), test accuracy $accuracy (>= 0.9 expected)"
  fi
fi
expect_error big_whole "data.max_resident_mb: $scratch/big.h5:images holds 64000 samples, which take 1001 MiB" \
  "$here/synthetic_stream.toml" "${big[@]}" --set data.streaming=false

[ "$failures" -eq 0 ] || exit 1
echo "PASS: streaming"
