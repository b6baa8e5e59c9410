#!/usr/bin/env bash
# Streaming data against loading whole, side by side in one run: the MLP and
# CNN decks of inputs/ trained from Fashion-MNIST converted to contiguous
# HDF5 (tessera-idx2hdf5 --contiguous), loaded whole (data.streaming =
# false) and streamed (true), alternately, REPETITIONS times each (default
# 3). Each run trains 2 epochs of the first TRAIN_SAMPLES training samples
# (default: all 60000 for the MLP, 6400 for the CNN) and reports the
# second, warm epoch: samples/s (best of the repetitions), the ratio
# streamed / whole, the data phase's seconds and the peak resident set.
# Usage: bench/streaming.sh [build directory]   (after scripts/setup.sh build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${TESSERA_BUILD_DIR:-$root/build}}"
train="$build/apps/tessera-train" convert="$build/apps/tessera-idx2hdf5"
[ -x "$train" ] || { echo "no $train: run 'bash scripts/setup.sh build' first" >&2; exit 2; }
data="${TESSERA_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
repetitions="${REPETITIONS:-3}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" OMP_PROC_BIND=spread OMP_PLACES=threads
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for set in train t10k; do
  "$convert" --contiguous "$data/$set-images-idx3-ubyte.gz" "$data/$set-labels-idx1-ubyte.gz" \
    "$scratch/$set.h5" > /dev/null
done
# The decks as they are, but reading the HDF5 files.
hdf5_deck() {  # hdf5_deck <deck> <output>
  /usr/bin/python3 - "$1" "$2" "$scratch" <<'PY'
import re, sys
deck, out, scratch = sys.argv[1:]
text = open(deck).read()
text = re.sub(r'(?m)^(format|train_images|train_labels|test_images|test_labels)\s*=.*\n', '', text)
text = text.replace('[data]\n', f'[data]\nformat = "hdf5"\ntrain_file = "{scratch}/train.h5"\n'
                    f'test_file = "{scratch}/t10k.h5"\n', 1)
open(out, "w").write(text)
PY
}

echo "| deck | threads | samples | whole (samples/s) | streamed (samples/s) | streamed / whole | data s (whole / streamed) | peak MiB (whole / streamed) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for name in mlp cnn; do
  hdf5_deck "$root/inputs/fashion_mnist_$name.toml" "$scratch/$name.toml"
  samples="${TRAIN_SAMPLES:-$([ "$name" = mlp ] && echo 60000 || echo 6400)}"
  for r in $(seq "$repetitions"); do
    for streaming in false true; do
      echo "running $name streaming=$streaming ($r of $repetitions) ..." >&2
      out="$scratch/$name-$streaming-$r"
      "$train" "$scratch/$name.toml" --set "run.output_dir=$out" --set "data.streaming=$streaming" \
        --set "data.train_samples=$samples" --set training.epochs=2 --set training.eval_every=0 \
        --set checkpoint.every_epochs=0 --set training.log_every=0 > "$out.log" 2>&1 ||
        { cat "$out.log" >&2; exit 1; }
    done
  done
  /usr/bin/python3 - "$scratch" "$name" "$repetitions" "$samples" "$OMP_NUM_THREADS" <<'PY'
import json, sys
scratch, name, reps, samples, threads = sys.argv[1:]
def last_epoch(streaming, r):
    lines = open(f"{scratch}/{name}-{streaming}-{r}/metrics.jsonl")
    return [json.loads(l) for l in lines if '"type":"epoch"' in l][-1]
best = {}
for s in ("false", "true"):
    epochs = [last_epoch(s, r) for r in range(1, int(reps) + 1)]
    best[s] = max(epochs, key=lambda e: e["samples_per_second"])
w, t = best["false"], best["true"]
print(f"| {name} | {threads} | {samples} | {w['samples_per_second']:.0f} | {t['samples_per_second']:.0f} | "
      f"{t['samples_per_second'] / w['samples_per_second']:.3f} | "
      f"{w['time']['data']:.3f} / {t['time']['data']:.3f} | "
      f"{w['peak_resident_mb']:.0f} / {t['peak_resident_mb']:.0f} |")
PY
done
