#!/usr/bin/env bash
# Tessera against PyTorch on the same decks, batch size and cores, one after
# the other: tessera-bench for Tessera, bench/pytorch_reference.py for
# PyTorch under several thread settings (its best counts), then a table of
# samples/s, the ratios against the targets, and the Dense layers' training
# step as a fraction of the sgemm peak tessera-bench measured.
#
#   bash bench/side_by_side.sh [--cores N] [--batch B] [--steps S] [--repetitions R] [--out DIR]
#
# Environment: TESSERA_BUILD_DIR (default <clone>/build) holds apps/tessera-bench.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cores=$(nproc) batch=128 steps=20 repetitions=5 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) cores="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repetitions) repetitions="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "side_by_side.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench="${TESSERA_BUILD_DIR:-${root}/build}/apps/tessera-bench"
python=/usr/bin/python3  # Debian's interpreter: it sees python3-torch
[ -x "$bench" ] || { echo "side_by_side.sh: $bench not found; build first: bash scripts/setup.sh build" >&2; exit 2; }
"$python" -c "import torch" 2>/dev/null \
  || { echo "side_by_side.sh: PyTorch is missing; install it with: apt-get install -y python3-torch" >&2; exit 2; }
[ "$cores" -ge 1 ] && [ "$cores" -le "$(nproc)" ] \
  || { echo "side_by_side.sh: --cores $cores must be 1 to $(nproc)" >&2; exit 2; }
openblas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0 2>/dev/null || true)
case "$openblas" in
  *pthread*) echo "side_by_side.sh: warning: the pthread OpenBLAS is selected ($openblas); its threads fight Kokkos' OpenMP threads. scripts/setup.sh selects the OpenMP build." >&2 ;;
esac
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
# Both run on the same first `cores` CPUs.
pin=(taskset -c "0-$((cores - 1))")

# name | deck | overrides (space-separated key=value) | target ratio
cases=(
  "mlp|${root}/inputs/fashion_mnist_mlp.toml||1.1"
  "mlp-512-256|${root}/inputs/fashion_mnist_mlp.toml|model.layers[0].units=512 model.layers[2].units=256|1.1"
  "cnn|${root}/inputs/fashion_mnist_cnn.toml||1.2"
)
# PyTorch thread settings: OMP_NUM_THREADS (PyTorch's intra-op threads, and
# the OpenMP pool), OPENBLAS_NUM_THREADS (the BLAS it links); "default" sets
# neither. A setting that hangs or fails is reported and skipped.
settings=("default")
for t in $(printf '%s\n' 1 "$cores" | sort -un); do
  for b in $(printf '%s\n' 1 "$cores" | sort -un); do settings+=("$t,$b"); done
done

echo "machine: $(hostname), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; using $cores"
echo "batch $batch, $steps steps x $repetitions repetitions (median), results in $out"
summary=()
for entry in "${cases[@]}"; do
  IFS='|' read -r name deck overrides target <<<"$entry"
  sets=()
  for o in $overrides; do sets+=(--set "$o"); done
  echo
  echo "== $name: $(basename "$deck") ${overrides}"
  OMP_NUM_THREADS="$cores" OMP_PROC_BIND=spread OMP_PLACES=threads "${pin[@]}" "$bench" "$deck" \
    ${sets[@]+"${sets[@]}"} --batch "$batch" --steps "$steps" --repetitions "$repetitions" \
    --json "$out/tessera-$name.json" > "$out/tessera-$name.log" 2>&1 \
    || { cat "$out/tessera-$name.log"; echo "side_by_side.sh: tessera-bench failed on $name" >&2; exit 1; }
  tessera=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"]["samples_per_second"])' "$out/tessera-$name.json")
  printf '  %-28s %10.0f samples/s\n' "Tessera (OMP_NUM_THREADS=$cores)" "$tessera"
  best=0 best_setting="none"
  for setting in "${settings[@]}"; do
    envs=(-u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS)
    label="PyTorch defaults"
    if [ "$setting" != default ]; then
      envs+=(OMP_NUM_THREADS="${setting%,*}" OPENBLAS_NUM_THREADS="${setting#*,}")
      label="PyTorch omp=${setting%,*} openblas=${setting#*,}"
    fi
    log="$out/pytorch-$name-${setting/,/-}.log"
    if env "${envs[@]}" timeout 300 "${pin[@]}" "$python" "$here/pytorch_reference.py" "$deck" \
         ${sets[@]+"${sets[@]}"} --batch "$batch" --steps "$steps" --repetitions "$repetitions" > "$log" 2>&1; then
      rate=$("$python" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["samples_per_second"])' "$log")
      printf '  %-28s %10.0f samples/s\n' "$label" "$rate"
      if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$rate best_setting=$label; fi
    else
      printf '  %-28s %10s (exit %s after at most 300 s; see %s)\n' "$label" "failed" "$?" "$log"
    fi
  done
  dense=$("$python" -c 'import json,sys; d=json.load(open(sys.argv[1]))["dense"]; print(f"{100*d[\"flops_fraction\"]:.1f}% ({d[\"gflops\"]:.1f} GFLOP/s)" if d["layers"] else "-")' "$out/tessera-$name.json")
  summary+=("$name|$tessera|$best|$best_setting|$target|$dense")
done
sgemm=$("$python" -c 'import json,sys; p=json.load(open(sys.argv[1]))["peaks"]; print(f"{p[\"sgemm\"][\"gflops\"]:.1f} GFLOP/s, stream triad {p[\"stream_triad\"][\"gbs\"]:.1f} GB/s")' "$out/tessera-${cases[0]%%|*}.json")

echo
echo "peaks measured by tessera-bench: sgemm $sgemm"
printf '%-12s %12s %12s  %-32s %7s %7s  %s\n' case Tessera PyTorch "PyTorch best setting" ratio target "Dense step / sgemm (target 80%)"
for row in "${summary[@]}"; do
  IFS='|' read -r name tessera best setting target dense <<<"$row"
  ratio=$(awk -v a="$tessera" -v b="$best" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
  verdict=$(awk -v r="$ratio" -v t="$target" 'BEGIN { print (r != "-" && r >= t) ? "met" : "MISSED" }')
  printf '%-12s %12.0f %12.0f  %-32s %7s %6sx  %s  [%s]\n' "$name" "$tessera" "$best" "$setting" "$ratio" "$target" "$dense" "$verdict"
done
