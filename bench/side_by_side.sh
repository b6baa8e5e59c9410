#!/usr/bin/env bash
# Tessera against PyTorch on the same decks, batch size and cores, one after
# the other: tessera-bench for Tessera, bench/pytorch_reference.py for
# PyTorch under several thread settings (its best counts), then a table of
# samples/s, the ratios against the targets, each framework's training step
# as a fraction of the FMA peak tessera-bench measured (the same model's
# FLOPs over each one's step time), and the Dense layers' training step as
# a fraction of the sgemm peak.
#
#   bash bench/side_by_side.sh [--cores N] [--batch B] [--steps S] [--repetitions R] [--out DIR]
#                              [--cases mlp,mlp-512-256,cnn,resnet,gpt]
#
# Environment: TESSERA_BUILD_DIR (default <clone>/build) holds apps/tessera-bench.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cores=$(nproc) batch=128 steps=20 repetitions=5 out="" only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cores) cores="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --repetitions) repetitions="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --cases) only=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# OpenBLAS on narrower kernels than the CPU has: Tessera's start-up warning
# names the OPENBLAS_CORETYPE that fixes it; both frameworks run with it.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  coretype=$(OMP_PROC_BIND=spread OMP_PLACES=threads "$(dirname "$bench")/tessera-train" --version 2>&1 \
    | sed -n 's/.*Set OPENBLAS_CORETYPE=\([A-Za-z]*\).*/\1/p' | head -1 || true)
  if [ -n "$coretype" ]; then
    export OPENBLAS_CORETYPE="$coretype"
    echo "note: OpenBLAS chose narrower kernels than the CPU has; running with OPENBLAS_CORETYPE=$coretype"
  fi
fi
openblas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0 2>/dev/null || true)
case "$openblas" in
  *pthread*) echo "side_by_side.sh: warning: the pthread OpenBLAS is selected ($openblas); its threads fight Kokkos' OpenMP threads. scripts/setup.sh selects the OpenMP build." >&2 ;;
esac
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
# Both run on the same first `cores` CPUs.
pin=(taskset -c "0-$((cores - 1))")

# name | deck | overrides (space-separated key=value) | target ratio [| batch, default --batch]
cases=(
  "mlp|${root}/inputs/fashion_mnist_mlp.toml||1.3"
  "mlp-512-256|${root}/inputs/fashion_mnist_mlp.toml|model.layers[0].units=512 model.layers[2].units=256|1.3"
  "cnn|${root}/inputs/fashion_mnist_cnn.toml||1.3"
  "resnet|${root}/inputs/fashion_mnist_resnet.toml||1.3"
  "gpt|${root}/inputs/tiny_gpt.toml||1.3|32"
)
if [ -n "$only" ]; then
  known=""
  for entry in "${cases[@]}"; do known+=" ${entry%%|*}"; done
  for name in ${only//,/ }; do
    [[ " $known " == *" $name "* ]] ||
      { echo "side_by_side.sh: --cases: no case '$name'; cases:$known" >&2; exit 2; }
  done
fi
# PyTorch thread settings: OMP_NUM_THREADS (PyTorch's intra-op threads, and
# the OpenMP pool), OPENBLAS_NUM_THREADS (the BLAS it links); "default" sets
# neither. A setting that hangs or fails is reported and skipped.
# With neither set, Debian's PyTorch 1.13 over the OpenMP OpenBLAS can hang in
# its first matrix product; a short probe decides whether to try it.
settings=()
if env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS timeout 30 "${pin[@]}" "$python" -c \
     'import torch; a = torch.rand(128, 784); print((a @ a.T).sum().item())' > /dev/null 2>&1; then
  settings+=("default")
else
  echo "note: PyTorch with OMP_NUM_THREADS and OPENBLAS_NUM_THREADS unset did not finish a 128x784 matrix product in 30 s; its defaults are skipped"
fi
for t in $(printf '%s\n' 1 "$cores" | sort -un); do
  for b in $(printf '%s\n' 1 "$cores" | sort -un); do settings+=("$t,$b"); done
done

tessera_settings=("1,1")
[ "$cores" -eq 1 ] || tessera_settings+=("1,$cores" "$cores,$cores")

echo "machine: $(hostname), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; using $cores"
echo "batch $batch (or the case's own), $steps steps x $repetitions repetitions (median), results in $out"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
summary=()
for entry in "${cases[@]}"; do
  IFS='|' read -r name deck overrides target case_batch <<<"$entry"
  [ -z "$only" ] || [[ "$only" == *",$name,"* ]] || continue
  case_batch="${case_batch:-$batch}"
  sets=()
  for o in $overrides; do sets+=(--set "$o"); done
  echo
  echo "== $name: $(basename "$deck") ${overrides}"
  # Tessera: Kokkos' OpenMP threads, and those of the OpenBLAS that shares
  # its pool (Tessera's own kernels are small; the products are not).
  tessera=0 tessera_setting="none" tessera_json=""
  for setting in "${tessera_settings[@]}"; do
    t=${setting%,*} b=${setting#*,}
    report="$out/tessera-$name-omp$t-openblas$b.json"
    OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$b" OMP_PROC_BIND=spread OMP_PLACES=threads \
      "${pin[@]}" "$bench" "$deck" \
      ${sets[@]+"${sets[@]}"} --batch "$case_batch" --steps "$steps" --repetitions "$repetitions" \
      --json "$report" > "${report%.json}.log" 2>&1 \
      || { cat "${report%.json}.log"; echo "side_by_side.sh: tessera-bench failed on $name" >&2; exit 1; }
    rate=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"]["samples_per_second"])' "$report")
    printf '  %-28s %10.0f samples/s\n' "Tessera omp=$t openblas=$b" "$rate"
    if awk -v a="$rate" -v b="$tessera" 'BEGIN { exit !(a > b) }'; then
      tessera=$rate tessera_setting="omp=$t openblas=$b" tessera_json=$report
    fi
  done
  best=0 best_setting="none"
  for setting in "${settings[@]}"; do
    envs=(-u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS)
    label="defaults"
    if [ "$setting" != default ]; then
      envs+=(OMP_NUM_THREADS="${setting%,*}" OPENBLAS_NUM_THREADS="${setting#*,}")
      label="omp=${setting%,*} openblas=${setting#*,}"
    fi
    log="$out/pytorch-$name-${setting/,/-}.log"
    if env "${envs[@]}" timeout 600 "${pin[@]}" "$python" "$here/pytorch_reference.py" "$deck" \
         ${sets[@]+"${sets[@]}"} --batch "$case_batch" --steps "$steps" --repetitions "$repetitions" > "$log" 2>&1; then
      rate=$("$python" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["samples_per_second"])' "$log")
      printf '  %-28s %10.0f samples/s\n' "PyTorch $label" "$rate"
      if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$rate best_setting=$label; fi
    else
      printf '  %-28s %10s (exit %s after at most 600 s; see %s)\n' "$label" "failed" "$?" "$log"
    fi
  done
  dense=$("$python" -c 'import json,sys; d=json.load(open(sys.argv[1]))["dense"]; print("%.1f%%" % (100 * d["flops_fraction"]) if d["layers"] else "-")' "$tessera_json")
  # The step's FLOPs (the same model in both) over each step time, against
  # the FMA peak of all `cores` (measured in the run with that many threads).
  whole_cpu="$out/tessera-$name-omp$cores-openblas$cores.json"
  fractions=$("$python" -c 'import json,sys
r = json.load(open(sys.argv[1])); fma = r["peaks"]["fma"]["gflops"]; flops = r["step"]["flops"]
batch = r["batch_size"]
f = lambda rate: "%.1f%%" % (100 * flops * rate / batch * 1e-9 / fma) if fma > 0 and rate > 0 else "-"
print(f(float(sys.argv[2])), f(float(sys.argv[3])))' "$whole_cpu" "$tessera" "$best")
  summary+=("$name|$tessera|$tessera_setting|$best|$best_setting|$target|$dense|${fractions% *}|${fractions#* }|$whole_cpu")
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
first_report=$(echo "${summary[0]}" | awk -F'|' '{print $NF}')
"$python" -c 'import json,sys
r = json.load(open(sys.argv[1])); p = r["peaks"]; b = r["blas"]; m = r["machine"]
print("CPU %s (%s), Tessera kernels compiled for %s" % (m["cpu"], m["cpu_isa"], m["kernels_isa"]))
print("BLAS %s%s" % (b["library"], ", kernels %s (%s)" % (b["core"], b["core_isa"]) if b["core"] else ""))
print("peaks (%d threads, first case): FMA %.1f GFLOP/s (%s, %d threads), sgemm %.1f GFLOP/s, stream triad %.1f GB/s"
      % (r["threads"], p["fma"]["gflops"], p["fma"]["isa"], p["fma"]["threads"], p["sgemm"]["gflops"], p["stream_triad"]["gbs"]))' "$first_report"
echo
echo "Tessera and PyTorch: samples/s at each's best thread setting; \"of FMA\": the training"
echo "step's FLOPs per second as a fraction of the FMA peak of all $cores cores, which"
echo "tessera-bench measured with $cores threads; the Dense column: Tessera's Dense layers'"
echo "forward + backward as a fraction of the sgemm peak measured in its best run."
printf '%-12s %9s %-20s %9s %-20s %6s %7s  %-7s %8s %8s %s\n' case Tessera setting PyTorch setting ratio target verdict \
  "T of FMA" "P of FMA" "Dense/sgemm"
for row in "${summary[@]}"; do
  IFS='|' read -r name tessera tsetting best setting target dense tfma pfma report <<<"$row"
  ratio=$(awk -v a="$tessera" -v b="$best" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
  verdict=$(awk -v r="$ratio" -v t="$target" 'BEGIN { print (r != "-" && r >= t) ? "met" : "MISSED" }')
  printf '%-12s %9.0f %-20s %9.0f %-20s %6s %6sx  %-7s %8s %8s %s\n' "$name" "$tessera" "$tsetting" "$best" "$setting" "$ratio" "$target" "$verdict" "$tfma" "$pfma" "$dense"
done
