#!/usr/bin/env bash
# Data-parallel throughput on these 2-core machines: the reference CNN deck
# (inputs/fashion_mnist_cnn.toml) on 1 rank x 2 threads, 2 ranks x 1 thread
# with gradient averaging overlapped with backward, the same with gradients
# sent in bf16 and in fp16 (parallel.gradient_dtype: half the bytes), and
# 2 ranks x 1 thread averaging after backward, and the optimizer sharded
# (ZeRO-1) with the parameters gathered during the next forward pass and
# after the update. Each run trains 2 epochs of the first
# TRAIN_SAMPLES samples (default 6400) and reports the second, warm epoch
# from metrics.jsonl: samples/s, exposed communication and the share of
# gradient communication that overlapped backward.
# Usage: bench/mpi_scaling.sh [build directory]   (after scripts/setup.sh build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${TESSERA_BUILD_DIR:-$root/build}}"
train="$build/apps/tessera-train"
[ -x "$train" ] || { echo "no $train: run 'bash scripts/setup.sh build' first" >&2; exit 2; }
samples="${TRAIN_SAMPLES:-6400}"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_PROC_BIND=spread OMP_PLACES=threads
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

run() {  # run <label> <ranks> <threads> [--set ...]
  local label="$1" ranks="$2" threads="$3"
  shift 3
  echo "running $label ..." >&2
  # Open MPI binds each of up to 2 ranks to one core: a rank with several
  # OpenMP threads must be given room (PE = processing elements per rank).
  mpiexec --oversubscribe -n "$ranks" --map-by "slot:PE=$threads" \
    -x OMP_NUM_THREADS="$threads" -x OMP_PROC_BIND -x OMP_PLACES \
    "$train" "$root/inputs/fashion_mnist_cnn.toml" --set "run.output_dir=$scratch/$label" \
    --set "data.train_samples=$samples" --set training.epochs=2 --set training.eval_every=0 \
    --set checkpoint.every_epochs=0 --set training.log_every=0 "$@" > "$scratch/$label.log" 2>&1 ||
    { cat "$scratch/$label.log" >&2; exit 1; }
  /usr/bin/python3 - "$label" "$ranks" "$threads" "$scratch/$label/metrics.jsonl" <<'PY'
import json, sys
label, ranks, threads, path = sys.argv[1:]
epoch = [json.loads(l) for l in open(path) if '"type":"epoch"' in l][-1]
t = epoch["time"]
print(f"| {label} | {ranks} x {threads} | {epoch['samples_per_second']:.0f} | "
      f"{t['communication']:.2f} | {t['communication_overlapped']:.2f} | "
      f"{100 * epoch['overlap_fraction']:.0f}% |")
PY
}

echo "CNN deck, global batch 128, $samples training samples, second epoch:"
echo
echo "| configuration | ranks x threads | samples/s | communication exposed (s) | overlapped (s) | overlap |"
echo "|---|---|---|---|---|---|"
run "1 rank" 1 2
run "2 ranks, overlap" 2 1
run "2 ranks, overlap, bf16 gradients" 2 1 --set 'parallel.gradient_dtype="bf16"'
run "2 ranks, overlap, fp16 gradients" 2 1 --set 'parallel.gradient_dtype="fp16"'
run "2 ranks, no overlap" 2 1 --set parallel.overlap=false
run "2 ranks, sharded optimizer, overlap" 2 1 --set parallel.shard_optimizer=true
run "2 ranks, sharded optimizer, blocking gather" 2 1 --set parallel.shard_optimizer=true \
  --set parallel.overlap_gather=false
