#!/usr/bin/env bash
# Converts Fashion-MNIST to HDF5 with tessera-idx2hdf5, then trains the
# HDF5 smoke deck from it and checks the accuracy.
# Usage: hdf5_train.sh <tessera-idx2hdf5> <tessera-train> <min accuracy>
set -euo pipefail
convert="$1" train="$2" threshold="$3"
here="$(cd "$(dirname "$0")" && pwd)"
data="${TESSERA_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$convert" "$data/train-images-idx3-ubyte.gz" "$data/train-labels-idx1-ubyte.gz" "$scratch/train.h5"
"$convert" "$data/t10k-images-idx3-ubyte.gz" "$data/t10k-labels-idx1-ubyte.gz" "$scratch/test.h5"
h5ls "$scratch/train.h5" | grep -q "^images  *Dataset {60000, 28, 28}" || { echo "FAIL: h5ls train.h5"; exit 1; }
bash "$here/check_accuracy.sh" "$train" "$here/fashion_mnist_hdf5.toml" "$threshold" \
  --set "data.train_file=$scratch/train.h5" --set "data.test_file=$scratch/test.h5"
# A dataset name the file does not have is bad input: exit 2, naming both.
set +e
out=$("$train" "$here/fashion_mnist_hdf5.toml" --set "data.train_file=$scratch/train.h5" \
      --set "data.test_file=$scratch/test.h5" --set data.images_dataset=pixels 2>&1)
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "FAIL: missing dataset exited $rc, expected 2"; echo "$out"; exit 1; }
grep -qF "$scratch/train.h5 has no dataset 'pixels'" <<<"$out" || { echo "FAIL: message: $out"; exit 1; }
echo "PASS: missing dataset -> exit 2 naming the file and dataset"
