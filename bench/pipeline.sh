#!/usr/bin/env bash
# Pipeline stages side by side in one run: the CNN and ResNet decks of
# inputs/ on 1 rank, on 2 data-parallel ranks and on 2 pipeline stages, with
# M = 2, 4 and 8 micro-batches per step, each rank one OpenMP thread,
# alternately, REPETITIONS times each (default 2). Each run trains 2 epochs
# of the first TRAIN_SAMPLES training samples (default 2048) and reports the
# second, warm epoch: samples/s (best of the repetitions), the ratio to 1
# rank, the measured pipeline bubble (the share of the epoch the ranks spent
# waiting for their neighbours, averaged over the ranks) next to the ideal
# (S - 1) / (M + S - 1), and the peak resident set of rank 0.
# Usage: bench/pipeline.sh [build directory]   (after scripts/setup.sh build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-${TESSERA_BUILD_DIR:-$root/build}}"
train="$build/apps/tessera-train"
[ -x "$train" ] || { echo "no $train: run 'bash scripts/setup.sh build' first" >&2; exit 2; }
repetitions="${REPETITIONS:-2}" samples="${TRAIN_SAMPLES:-2048}"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1 OMP_PROC_BIND=spread OMP_PLACES=threads
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# measure <ranks> <micro-batches> <stages>: "samples/s bubble peak_mb" of the second epoch.
measure() {
  local out="$scratch/run"
  rm -rf "$out"
  mpiexec --oversubscribe -n "$1" "$train" "$deck" --set "data.train_samples=$samples" \
    --set training.epochs=2 --set "training.accumulation_steps=$2" --set training.log_every=0 --set training.eval_every=0 \
    --set "parallel.pipeline_stages=$3" --set checkpoint.every_epochs=0 \
    --set "run.output_dir=$out" > "$scratch/log" 2>&1 || { tail -3 "$scratch/log" >&2; exit 1; }
  /usr/bin/python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
e = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "epoch"][-1]
print(e["samples_per_second"], e.get("pipeline_bubble", 0), e["peak_resident_mb"])
PY
}

echo "| deck | M | layout | samples/s (best of $repetitions) | / 1 rank | bubble measured | bubble ideal | peak MiB rank 0 |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
for name in cnn resnet; do
  deck="$root/inputs/fashion_mnist_$name.toml"
  for micro in 2 4 8; do
    declare -A best=() bubble=() peak=()
    for ((r = 0; r < repetitions; ++r)); do
      for layout in "1 1" "2 1" "2 2"; do
        read -r -a split <<<"$layout"
        set -- "${split[@]}"
        read -r rate fraction mib < <(measure "$1" "$micro" "$2")
        key="$1x$2"
        if [ -z "${best[$key]:-}" ] || awk "BEGIN{exit !($rate > ${best[$key]})}"; then
          best[$key]=$rate bubble[$key]=$fraction peak[$key]=$mib
        fi
      done
    done
    for key in 1x1 2x1 2x2; do
      case $key in 1x1) layout="1 rank" ideal="-" ;; 2x1) layout="2 data ranks" ideal="-" ;;
        2x2) layout="2 stages" ideal=$(awk "BEGIN{printf \"%.2f\", 1 / ($micro + 1)}") ;; esac
      awk -v d="$name" -v m="$micro" -v l="$layout" -v r="${best[$key]}" -v one="${best[1x1]}" \
        -v b="${bubble[$key]}" -v i="$ideal" -v p="${peak[$key]}" \
        'BEGIN{printf "| %s | %d | %s | %.0f | %.2f | %s | %s | %.0f |\n", d, m, l, r, r / one,
               (l == "2 stages" ? sprintf("%.2f", b) : "-"), i, p}'
    done
    unset best bubble peak
  done
done
