#!/usr/bin/env bash
# Run Tessera on a GPU machine and write what it did: the unit suite, the
# example decks (MLP, wide MLP, CNN, ResNet, tiny GPT) for a bounded number of
# steps, each run's checkpoint through tessera-predict, tessera-bench on each,
# PyTorch on the same decks (fp32, TF32 off), 2 MPI ranks on the one GPU
# (data parallel with ZeRO-1, and 2 pipeline stages) against 1, and a
# compute-sanitizer memcheck of one training step per deck, in this order.
#
#   scripts/gpu-validate.sh --bundle BUNDLE cuda [KOKKOS_ARCH]
#       with the prebuilt binaries of scripts/gpu-bundle.sh (a directory, or
#       its .tar.xz): no network, no packages, no compiler needed
#   scripts/gpu-validate.sh --bundle BUNDLE openmp
#       the same run on a CPU machine with a bundle of the host build (the
#       dry run: ctest gpu_bundle_dry_run)
#   scripts/gpu-validate.sh cuda [KOKKOS_ARCH]   default AMPERE80 (A100); HOPPER90 for H100
#   scripts/gpu-validate.sh hip  [KOKKOS_ARCH]   default VEGA90A (MI250X)
#       build here first: scripts/setup.sh build (Debian packages, the host
#       build in build/) and scripts/build-kokkos.sh for the GPU with the
#       toolchain on the machine (TESSERA_GPU_TOOLCHAIN=system: nvcc or hipcc
#       on PATH, Kokkos Kernels calling cuBLAS or rocBLAS); tessera-bench also
#       runs on the host and tessera-compare compares the two
#
# Environment:
#   TESSERA_KOKKOS_SOURCE   Kokkos and Kokkos Kernels 4.x release sources, for
#                           the build path; required for HOPPER90 and VEGA90A
#   TESSERA_VALIDATE_DIR    output directory (default: <clone>/gpu-validate-<backend>)
#   TESSERA_VALIDATE_SECONDS  time for the whole run (default 480): each step
#                           gets at most what is left, and steps that find too
#                           little left are recorded as not run
#   TESSERA_VALIDATE_STEPS  comma-separated steps to run (default all): unit,
#                           train, bench, pytorch, ranks, memcheck
#   TESSERA_GPU_NAME        platform name in the reports (default: from nvidia-smi / rocm-smi)
#   TESSERA_VALIDATE_PYTHON the Python with PyTorch (default python3)
# Output: summary.md, written a line at a time as results arrive (a run cut
# short still says what it did); reports/*.json (tessera-bench),
# pytorch-*.jsonl, logs/, and gpu-validate.tar.gz holding all of them.
# Exit status 1 if any step failed (the others still run), 2 without a GPU
# or with bad arguments.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
  echo "usage: $0 [--bundle BUNDLE] <cuda|hip|openmp> [KOKKOS_ARCH]" >&2
  exit 2
}
bundle=""
if [ "${1:-}" = "--bundle" ]; then
  [ $# -ge 2 ] || usage
  bundle="$2"
  shift 2
fi
backend="${1:-}"
case "$backend" in
  cuda) arch="${2:-$([ -n "$bundle" ] && echo HOPPER90 || echo AMPERE80)}" ;;
  hip) arch="${2:-VEGA90A}" ;;
  openmp)
    [ -n "$bundle" ] || { echo "gpu-validate: openmp runs a bundle: --bundle BUNDLE openmp" >&2; exit 2; }
    arch=host
    ;;
  *) usage ;;
esac
if [ -z "$bundle" ]; then
  case "$arch" in
    AMPERE80|VEGA908|VEGA906|VEGA900) ;;
    *)
      if [ -z "${TESSERA_KOKKOS_SOURCE:-}" ]; then
        echo "gpu-validate: Kokkos_ARCH_${arch} needs Kokkos 4.x: set TESSERA_KOKKOS_SOURCE to a" \
             "directory with kokkos-4.x/ and kokkos-kernels-4.x/ release sources, or run a" \
             "prebuilt bundle (--bundle, scripts/gpu-bundle.sh)" >&2
        exit 2
      fi
      ;;
  esac
elif [ ! -e "$bundle" ]; then
  echo "gpu-validate: --bundle ${bundle}: no such directory or file (make one with scripts/gpu-bundle.sh)" >&2
  exit 2
fi

step "device"
case "$backend" in
  cuda) gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true) ;;
  hip) gpu=$(rocm-smi --showproductname 2>/dev/null | sed -n 's/.*Card [Ss]eries: *//p' | head -1 || true) ;;
  openmp) gpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores" ;;
esac
if [ -z "$gpu" ]; then
  echo "gpu-validate: no ${backend} GPU found ($([ "$backend" = cuda ] && echo nvidia-smi || echo rocm-smi));" \
       "this script runs Tessera on a GPU. Without one, scripts/gpu-compile-check.sh checks" \
       "that everything compiles for CUDA and HIP." >&2
  exit 2
fi
gpu="${TESSERA_GPU_NAME:-$gpu}"
note "$gpu"

out="${TESSERA_VALIDATE_DIR:-${TESSERA_ROOT}/gpu-validate-${backend}}"
mkdir -p "$out/logs" "$out/reports"
out=$(cd "$out" && pwd)
# The training runs of an earlier validation here are replaced (an output
# folder holds one run).
rm -rf "$out/runs"
summary="$out/summary.md"
budget="${TESSERA_VALIDATE_SECONDS:-480}"
wanted=",${TESSERA_VALIDATE_STEPS:-unit,train,bench,pytorch,ranks,memcheck},"
python="${TESSERA_VALIDATE_PYTHON:-python3}"
started=$(date +%s)
failures=()

# record <step> <result>: one line of the summary, written at once.
record() { printf '| %s | %s |\n' "$1" "$2" >> "$summary"; }
left() { echo $(( budget - ($(date +%s) - started) )); }
# run_step <seconds> <log> <command...>: the command with its output in <log>,
# stopped after <seconds> or when the run's time is spent, whichever comes
# first. Status 124 when stopped, 125 when too little time was left to start.
run_step() {
  local seconds="$1" log="$2" remaining
  shift 2
  remaining=$(left)
  [ "$remaining" -lt "$seconds" ] && seconds="$remaining"
  if [ "$seconds" -lt 10 ]; then
    echo "not run: the run's ${budget} s were spent" > "$log"
    return 125
  fi
  timeout --kill-after=10 "$seconds" "$@" > "$log" 2>&1
}
# verdict <status> <log>: the words for a failed step's status.
verdict() {
  case "$1" in
    124) echo "STOPPED after its time ($(basename "$2"))" ;;
    125) echo "not run: time spent" ;;
    *) echo "FAILED, exit $1 ($(basename "$2"))" ;;
  esac
}
fail_step() { failures+=("$1"); record "$1" "$(verdict "$2" "$3")"; }
# line_of <log> <pattern>: the first line matching, progress redraws (carriage
# returns, erase-line codes: a rank under mpiexec has a terminal) taken out,
# the timing breakdown cut.
line_of() {
  tr '\r' '\n' < "$1" | sed 's/\x1b\[K//g' | grep -m1 -E "$2" | sed 's/ (data .*//' | cut -c1-220
}

if [ -n "$bundle" ]; then
  if [ -f "$bundle" ]; then
    step "unpacking ${bundle}"
    mkdir -p "$out/bundle"
    tar -C "$out/bundle" -xJf "$bundle"
    bundle=$(find "$out/bundle" -mindepth 1 -maxdepth 1 -type d | head -1)
  fi
  [ -f "${bundle}/env.sh" ] || { echo "gpu-validate: ${bundle}/env.sh missing: not a bundle of scripts/gpu-bundle.sh" >&2; exit 2; }
  # shellcheck source=/dev/null
  source "${bundle}/env.sh"
  bin="${TESSERA_BUNDLE}/bin"
  unit_tests=("$bin"/tests/*)
  origin="bundle $(head -1 "${TESSERA_BUNDLE}/MANIFEST.md" | sed 's/^# Tessera bundle: //')"
else
  # The host build (and on Debian the packages): also the CPU reports' build.
  host_build="${TESSERA_BUILD_DIR:-${TESSERA_ROOT}/build}"
  TESSERA_BUILD_DIR="$host_build" bash "${TESSERA_ROOT}/scripts/setup.sh" build
  export TESSERA_GPU_TOOLCHAIN=system TESSERA_KOKKOS_ARCH="$arch"
  bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" "$backend"
  prefix=$(bash "${TESSERA_ROOT}/scripts/build-kokkos.sh" --prefix "$backend")
  cxx=$([ "$backend" = cuda ] && echo "${prefix}/bin/nvcc_wrapper" || echo hipcc)
  build="${TESSERA_ROOT}/build-${backend}-run"
  # CUDA: host code unoptimised, as in scripts/gpu-bundle.sh (nvcc's
  # __host__ __device__ lambdas across translation units); HIP optimised.
  host_opt=$([ "$backend" = cuda ] && echo -O0 || echo -O2)
  step "Tessera for ${backend}: configure and build (${build})"
  cmake -S "$TESSERA_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_CXX_FLAGS_RELEASE="${host_opt} -DNDEBUG" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
    -DTessera_ENABLE_COMPILE_ONLY=ON > "$out/logs/configure.log" 2>&1 \
    || { tail -40 "$out/logs/configure.log"; die "configure failed (log: $out/logs/configure.log)"; }
  cmake --build "$build" -j "$TESSERA_JOBS" --target tessera-train tessera-predict tessera-bench \
    tessera_unit_tests_compile_only > "$out/logs/build.log" 2>&1 \
    || { tail -60 "$out/logs/build.log"; die "build failed (log: $out/logs/build.log)"; }
  mkdir -p "$out/bin"
  ln -sf "${build}/apps/tessera-train" "${build}/apps/tessera-predict" "${build}/apps/tessera-bench" "$out/bin/"
  bin="$out/bin"
  unit_tests=("${build}/tests/tessera_unit_tests_compile_only")
  origin="built here in ${build}"
  export TESSERA_TOKEN_DIR="${TESSERA_TOKEN_DIR:-/var/lib/tessera}"
fi
export TESSERA_SOURCE_DIR="$TESSERA_ROOT"
{
  echo "# gpu-validate ${backend}: ${gpu}"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ), $(hostname), Kokkos_ARCH_${arch}, ${origin}"
  if [ "$backend" = cuda ]; then
    echo
    echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  fi
  echo
  echo "| step | result |"
  echo "|---|---|"
} > "$summary"
"$bin/tessera-train" --version > "$out/logs/version.log" 2>&1 || true
record "build" "$(grep -m3 -E '^(Tessera|Kokkos|BLAS)' "$out/logs/version.log" | tr '\n' ';' | sed 's/;$//; s/;/; /g')"

# The most GPU memory any Tessera process held, sampled each second.
memory_log="$out/logs/gpu-memory.csv"
if [ "$backend" = cuda ]; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -l 1 > "$memory_log" 2>/dev/null &
  memory_sampler=$!
  trap 'kill "$memory_sampler" 2>/dev/null || true' EXIT
fi

# The decks, each bounded: the benchmark cases of bench/cases.txt (name,
# deck file, --set overrides, and the case's batch where it gives one), the
# token decks reading the token files of TESSERA_TOKEN_DIR.
tokens="${TESSERA_TOKEN_DIR}"
deck_names=()
declare -A deck_file=() deck_sets=()
while IFS='|' read -r name file sets _ batch; do
  case "$name" in '' | '#'*) continue ;; esac
  deck_names+=("$name")
  deck_file[$name]="$file"
  deck_sets[$name]="$sets"
  [ -z "$batch" ] || deck_sets[$name]+=" training.batch_size=${batch}"
  if [ "$file" = inputs/tiny_gpt.toml ]; then
    deck_sets[$name]+=" data.train_tokens=${tokens}/devil.train.bin data.test_tokens=${tokens}/devil.val.bin"
  fi
done < "${TESSERA_ROOT}/bench/cases.txt"
# deck_args <name> <extra sets...>: the deck file and its --set arguments.
deck_args() {
  local name="$1" o
  shift
  printf '%s\n' "${TESSERA_ROOT}/${deck_file[$name]}"
  # shellcheck disable=SC2086 # the overrides are space-separated words
  for o in ${deck_sets[$name]} "$@"; do printf -- '--set\n%s\n' "$o"; done
}
selected() { [[ "$wanted" == *",$1,"* ]]; }

# check_predict <name> <training log> <deck> <--set arguments...>: the
# run's checkpoint through tessera-predict on the same test samples must
# give the loss and accuracy of the run's last evaluation.
check_predict() {
  local name="$1" train_log="$2" deck="$3" log="$out/logs/predict-$1.log" expected got
  shift 3
  if ! run_step 60 "$log" "$bin/tessera-predict" "$deck" "$out/runs/${name}/checkpoints" "$@"; then
    fail_step "predict ${name}" "$?" "$log"
    return
  fi
  expected="$(sed -n 's/^test loss \([0-9.]*\)$/\1/p' "$train_log") $(sed -n 's/^test accuracy: \([0-9.]*\)$/\1/p' "$train_log")"
  got=$(sed -n 's/^test: [0-9]* samples, loss \([0-9.]*\), accuracy \([0-9.]*\) .*/\1 \2/p' "$log")
  if [ "$got" = "$expected" ]; then
    record "predict ${name}" "$(line_of "$log" '^test:'), as the run's last evaluation"
  else
    failures+=("predict ${name}")
    record "predict ${name}" "FAILED: loss and accuracy '${got}', the run's last evaluation '${expected}' ($(basename "$log"))"
  fi
}

if selected unit; then
  step "unit suite"
  # The device instances of the typed tests and every untyped test; the
  # Serial instances (/1) are the host CI's.
  status=0
  total_passed=0
  unit_start=$(date +%s)
  for t in "${unit_tests[@]}"; do
    log="$out/logs/unit-$(basename "$t").log"
    run_step 150 "$log" "$t" --gtest_filter='-*/1.*' || status=$?
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    total_passed=$(( total_passed + ${passed:-0} ))
    [ "$status" -eq 0 ] || break
  done
  if [ "$status" -eq 0 ]; then
    record "unit suite" "${total_passed} tests passed, ${#unit_tests[@]} executable(s), $(( $(date +%s) - unit_start )) s"
  else
    failed=$(grep -h -c '^\[  FAILED  \] .*\.' "$log" 2>/dev/null || true)
    fail_step "unit suite" "$status" "$log"
    note "${failed:-?} failed; ${total_passed} passed in earlier executables"
  fi
fi

if selected train; then
  for name in "${deck_names[@]}"; do
    step "${name}: one bounded epoch"
    log="$out/logs/train-${name}.log"
    # The GPT decks' windows take longer a sample: as many tokens for each
    # (512 windows of 128, 128 of 512).
    case "$name" in
      gpt) samples=512 ;;
      gpt-512) samples=128 ;;
      *) samples=4096 ;;
    esac
    mapfile -t args < <(deck_args "$name" training.epochs=1 "data.train_samples=${samples}" \
      data.test_samples=1000 "run.output_dir=$out/runs/${name}")
    if run_step 60 "$log" "$bin/tessera-train" "${args[@]}"; then
      record "train ${name}" "$(line_of "$log" '^epoch 1/1:')"
      check_predict "$name" "$log" "${args[@]}"
    else
      fail_step "train ${name}" "$?" "$log"
    fi
  done
fi

if selected bench; then
  for name in "${deck_names[@]}"; do
    step "${name}: tessera-bench"
    log="$out/logs/bench-${name}.log"
    report="$out/reports/${name}-${backend}.json"
    mapfile -t args < <(deck_args "$name")
    # Peaks on the first deck only: they do not depend on the deck.
    peaks=(--skip-peaks)
    [ "$name" != "${deck_names[0]}" ] || peaks=(--peak-repetitions 3)
    # --predict: the bounds from this GPU's own launch counts, beside its step.
    if run_step 60 "$log" "$bin/tessera-bench" "${args[@]}" --steps 10 --repetitions 3 \
         "${peaks[@]}" --predict h100,mi250x --platform "$gpu" --json "$report"; then
      record "bench ${name}" "$(grep -m1 -iE 'samples/s' "$log" | sed 's/^ *//' | cut -c1-200); $(grep -m1 '^predicted step on NVIDIA' "$log" | cut -c1-160)"
    else
      fail_step "bench ${name}" "$?" "$log"
    fi
  done
fi

if selected pytorch; then
  device=$([ "$backend" = cuda ] && echo cuda || echo cpu)
  if "$python" -c "import torch, sys; sys.exit(0 if '${device}' == 'cpu' or torch.cuda.is_available() else 1)" 2> /dev/null; then
    for name in "${deck_names[@]}"; do
      step "${name}: PyTorch on ${device}"
      log="$out/logs/pytorch-${name}.log"
      results="$out/pytorch-${name}.jsonl"
      mapfile -t args < <(deck_args "$name")
      # tessera-bench's steps and repetitions; eager only (torch.compile
      # takes minutes to compile).
      if run_step 60 "$log" "$python" "${TESSERA_ROOT}/bench/pytorch_reference.py" "${args[@]}" \
           --device "$device" --steps 10 --repetitions 3 --variants eager; then
        grep '^{' "$log" > "$results" || true
        record "PyTorch ${name}" "$("$python" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = [r for r in rows if r.get('kind') == 'variant']
p = next((r for r in rows if r.get('kind') == 'process'), {})
print('; '.join(f\"{r['variant']}: {r.get('samples_per_second', 0):.0f} samples/s\" if r['status'] == 'ok'
                else f\"{r['variant']}: {r['status']}\" for r in v), '|', p.get('framework', ''), p.get('device', ''))
" "$results" 2>&1 | head -1)"
      else
        fail_step "PyTorch ${name}" "$?" "$log"
      fi
    done
  else
    record "PyTorch" "not run: ${python} has no torch$([ "$device" = cuda ] && echo ' that sees the GPU')"
  fi
fi

if selected ranks; then
  step "2 ranks on the one device against 1"
  # The MLP deck, 2 epochs of 2048 samples: the final test loss of 1 rank,
  # 2 data-parallel ranks with ZeRO-1, and 2 pipeline stages.
  declare -A rank_runs=(
    [1-rank]="1"
    [2-ranks-zero1]="2 parallel.shard_optimizer=true"
    [2-stages]="2 parallel.pipeline_stages=2")
  for run in 1-rank 2-ranks-zero1 2-stages; do
    read -r ranks sets <<<"${rank_runs[$run]}"
    log="$out/logs/ranks-${run}.log"
    # shellcheck disable=SC2086 # sets is one word or none
    mapfile -t args < <(deck_args mlp training.epochs=2 data.train_samples=2048 \
      data.test_samples=1000 "run.output_dir=$out/runs/ranks-${run}" $sets)
    if run_step 60 "$log" mpiexec --oversubscribe -n "$ranks" "$bin/tessera-train" "${args[@]}"; then
      record "MLP, ${run}" "$(line_of "$log" '^epoch 2/2:')"
    else
      fail_step "MLP, ${run}" "$?" "$log"
    fi
  done
fi

if selected memcheck && [ "$backend" = cuda ]; then
  if command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for name in mlp cnn resnet gpt; do
      step "${name}: compute-sanitizer memcheck, one training step"
      log="$out/logs/memcheck-${name}.log"
      mapfile -t args < <(deck_args "$name" training.epochs=1 training.batch_size=32 \
        data.train_samples=32 data.test_samples=32 "run.output_dir=$out/runs/memcheck-${name}")
      if run_step 90 "$log" "$sanitizer" --tool memcheck --error-exitcode 3 --target-processes all \
           "$bin/tessera-train" "${args[@]}"; then
        record "memcheck ${name}" "$(grep -m1 'ERROR SUMMARY' "$log" || echo 'no summary')"
      else
        fail_step "memcheck ${name}" "$?" "$log"
        record "memcheck ${name}, first error" "$(grep -m1 -E '^=========  ?(Invalid|Program hit|Error)' "$log" | cut -c1-200)"
      fi
    done
  else
    record "memcheck" "not run: no compute-sanitizer on this machine"
  fi
fi

if [ "$backend" = cuda ] && [ -s "$memory_log" ]; then
  record "GPU memory" "at most $(sort -n "$memory_log" | tail -1) MiB in use (nvidia-smi, each second)"
fi

# The host comparison of the build path (this machine's CPU).
if [ -z "$bundle" ] && selected bench; then
  for name in mlp cnn resnet; do
    step "${name}: tessera-bench on the host, tessera-compare"
    mapfile -t args < <(deck_args "$name")
    host_report="$out/reports/${name}-host.json"
    if "${host_build}/apps/tessera-bench" "${args[@]}" --json "$host_report" \
         > "$out/logs/bench-${name}-host.log" 2>&1 \
       && "${host_build}/apps/tessera-compare" "$out/reports/${name}-${backend}.json" "$host_report" \
         -o "$out/compare-${name}.md" > "$out/logs/compare-${name}.log" 2>&1; then
      record "${name}, GPU against host" "$(grep -E '^PP of ' "$out/compare-${name}.md" | head -1) (compare-${name}.md)"
    else
      failures+=("${name} comparison")
      record "${name}, GPU against host" "FAILED (logs/bench-${name}-host.log, logs/compare-${name}.log)"
    fi
  done
fi

step "summary"
record "time" "$(( $(date +%s) - started )) s of ${budget}"
packed=$(mktemp)
tar -C "$out" -czf "$packed" --exclude=./bundle --exclude=./runs --exclude=./gpu-validate.tar.gz .
mv "$packed" "$out/gpu-validate.tar.gz"
cat "$summary"
if [ "${#failures[@]}" -gt 0 ]; then
  echo "gpu-validate: failed: ${failures[*]}; everything is in ${out}" >&2
  exit 1
fi
note "everything passed; summary, reports and logs in ${out} (all of them in gpu-validate.tar.gz)"
