#!/usr/bin/env bash
# Runs the determinism probe twice with 1 OpenMP thread and once with 2,
# for the model with every layer type and for the small GPT (--gpt).
# - The two 1-thread runs must be bitwise identical: same binary, machine,
#   thread count and data, so nothing may vary.
# - The 2-thread run goes through the vendor BLAS with another split of the
#   work, which rounds differently on some CPUs' kernels (OpenBLAS's Haswell
#   and Zen kernels do, its SkylakeX kernels do not), and Adam carries that
#   rounding through 12 steps. Every number must agree within 1e-5 relative
#   to the value, or to 0.01 for smaller values: the weights are of order
#   0.1 to 1, and a weight that happens to sit near zero carries its
#   tensor's absolute rounding noise. Measured: 1.8e-6 at worst on the
#   Haswell/Zen kernels, 0 on SkylakeX/Cooperlake.
# Usage: compare.sh <probe executable> <scratch directory>
set -euo pipefail
probe="$1" dir="$2"
mkdir -p "$dir"
for model in every_layer gpt; do
  flag=""
  [ "$model" = gpt ] && flag="--gpt"
  OMP_NUM_THREADS=1 "$probe" $flag > "$dir/$model-threads1a.txt"
  OMP_NUM_THREADS=1 "$probe" $flag > "$dir/$model-threads1b.txt"
  OMP_NUM_THREADS=2 "$probe" $flag > "$dir/$model-threads2.txt"
  lines=$(wc -l < "$dir/$model-threads1a.txt")
  [ "$lines" -gt 100 ] || { echo "FAIL: $model: the probe printed only $lines lines"; exit 1; }
  if ! cmp -s "$dir/$model-threads1a.txt" "$dir/$model-threads1b.txt"; then
    echo "FAIL: $model: two runs with 1 thread differ:"; diff "$dir/$model-threads1a.txt" "$dir/$model-threads1b.txt" | head -20; exit 1
  fi
  echo "ok: $model: two 1-thread runs are bitwise identical ($lines lines)"
  bash "$(dirname "$0")/../compare_outputs.sh" "$dir/$model-threads1a.txt" "$dir/$model-threads2.txt" 1e-5 \
    "$model: 1 and 2 threads" 1e-2
done
