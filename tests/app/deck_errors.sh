#!/usr/bin/env bash
# tessera-train on bad input: exit status 2 and a message with file:line:column.
# Usage: deck_errors.sh <tessera-train> <directory with bad_*.toml>
set -uo pipefail
train="$1" dir="$2"
failures=0
expect() {  # expect <expected status> <expected message fragment> <args...>
  local status="$1" fragment="$2"
  shift 2
  local out rc
  out=$("$train" "$@" 2>&1); rc=$?
  if [ "$rc" -ne "$status" ]; then
    echo "FAIL: tessera-train $* exited $rc, expected $status"; echo "$out"; failures=$((failures + 1))
  elif ! grep -qF -- "$fragment" <<<"$out"; then
    echo "FAIL: tessera-train $*: message lacks '$fragment'"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: tessera-train $* -> exit $rc, '$fragment'"
  fi
}
expect 2 "${dir}/bad_unknown_key.toml:3:1: run.sed: unknown key (did you mean 'run.seed'?)" "${dir}/bad_unknown_key.toml"
expect 2 "${dir}/bad_optimizer_key.toml:16:1: optimizer.momentum: does not apply to type 'adam'; it applies to: sgd" "${dir}/bad_optimizer_key.toml"
expect 2 "${dir}/bad_schedule.toml:16:19: schedule.milestones: epoch 20 does not follow 30; milestones must increase" "${dir}/bad_schedule.toml"
expect 2 "${dir}/bad_shapes.toml:15:1: model.layers[1]: tessera::Conv2D 'conv': input [128, 32]" "${dir}/bad_shapes.toml" --check
expect 2 "--set model.input_shape=[700]: model.input_shape: the model takes 700 values per sample, the data's samples have shape [1, 28, 28] (784 values)" "${dir}/fashion_mnist_smoke.toml" --set "model.input_shape=[700]"
expect 2 "does_not_exist.toml" "${dir}/does_not_exist.toml"
expect 2 "--bogus" "${dir}/fashion_mnist_smoke.toml" --bogus
expect 2 "a deck is required"
expect 0 "| \`conv2d\` | 1 | \`out_channels\` (required" --list-layers
expect 0 "dense0 (dense): units=128 bias=true init=he_uniform" "${dir}/fashion_mnist_smoke.toml" --check
expect 0 "deck OK" "${dir}/fashion_mnist_smoke.toml" --check
expect 2 "--set training.batch_size=0: training.batch_size: value 0 is out of range" "${dir}/fashion_mnist_smoke.toml" --check --set training.batch_size=0
expect 2 "--set data.normalize_mean=1e300: data.normalize_mean: value 1e+300 is not a finite number" "${dir}/fashion_mnist_smoke.toml" --check --set data.normalize_mean=1e300
expect 2 "--set optimizer.lr=nan: optimizer.lr: value nan is not a finite number" "${dir}/fashion_mnist_smoke.toml" --check --set optimizer.lr=nan
expect 2 "--set data.test_images=/nonexistent/t10k.gz: data.test_images: cannot read '/nonexistent/t10k.gz'" "${dir}/fashion_mnist_smoke.toml" --check --set data.test_images=/nonexistent/t10k.gz
expect 2 "--set data.validation_split=0.000001: data.validation_split: 1e-06 of 60000 training samples leaves 0 for validation" "${dir}/fashion_mnist_smoke.toml" --set data.validation_split=0.000001 --set "run.output_dir=/tmp/tessera-deck-errors"
# A data file that exists but is not IDX: exit 2 and the file's name.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
echo "not an idx file" > "${scratch}/broken.gz"
expect 2 "${scratch}/broken.gz: not an IDX file" "${dir}/fashion_mnist_smoke.toml" --set "data.test_labels=${scratch}/broken.gz" --set "run.output_dir=${scratch}/out"
# An output directory that cannot be created.
touch "${scratch}/file"
expect 2 "cannot write metrics to ${scratch}/file/sub/metrics.jsonl" "${dir}/fashion_mnist_smoke.toml" --set "run.output_dir=${scratch}/file/sub"
[ "$failures" -eq 0 ] || exit 1
