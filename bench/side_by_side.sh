#!/usr/bin/env bash
# Tessera against PyTorch on the same decks, batch size and cores, by the
# benchmark protocol of docs/benchmarks.md: a tuning pass picks each side's
# best thread setting (and PyTorch's eager or torch.compile, channels_last
# or not), then interleaved rounds measure Tessera, PyTorch 2.x eager,
# PyTorch 2.x compiled and Debian's PyTorch 1.13 one after the other; the
# verdict is the median of the rounds' paired ratios Tessera / PyTorch 2.x
# (the faster of its eager and compiled runs) against the case's target.
#
#   bash bench/side_by_side.sh [--cases LIST] [--pairs N] [--cores N] [--batch B] [--steps S]
#                              [--repetitions R] [--out DIR] [--baseline-build DIR]
#                              [--no-pytorch] [--compile-timeout S] [--vectors avx2]
#
#   --cases LIST          comma-separated names from bench/cases.txt (default: all of them:
#                         mlp, mlp-512-256, cnn, resnet, gpt, gpt-512)
#   --pairs N             interleaved rounds (default 5; a verdict needs at least 5)
#   --cores N             every process runs on CPUs 0 to N-1 (default: all)
#   --batch B             batch size of the cases without their own (default 128)
#   --steps S             training steps per timed epoch (default 20)
#   --repetitions R       timed epochs per measurement, their median counts (default 3)
#   --out DIR             logs, reports and rounds (default: a new temporary directory)
#   --baseline-build DIR  a second build of Tessera (DIR/apps/tessera-bench), tuned and
#                         measured in every round right after the first: the paired ratio
#                         build / baseline is the regression check
#   --no-pytorch          measure Tessera only (with --baseline-build: the regression check)
#   --compile-timeout S   seconds one variant's warm-up, torch.compile included, may take
#                         before it counts as failed (default 1200)
#   --vectors avx2        every side held to AVX2 on an AVX-512 CPU, as on a machine without
#                         AVX-512: OpenBLAS's Haswell kernels, MKL, oneDNN and PyTorch's own
#                         kernels (torch.compile's included) on AVX2; the Tessera builds must
#                         be AVX2 builds (-DTessera_HOST_ARCH=x86-64-v3)
#
# Environment: TESSERA_BUILD_DIR (default <clone>/build) holds apps/tessera-bench.
# Needs PyTorch 2.x in the project's virtual environment (bench/venv.sh) and
# Debian's python3-torch: bash scripts/setup.sh bench installs both.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cores=$(nproc) batch=128 steps=20 repetitions=3 pairs=5 out="" only="" baseline_dir=""
pytorch=yes compile_timeout=1200 held_to=""
die() { echo "side_by_side.sh: $*" >&2; exit 2; }
need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (see --help)"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cores|--batch|--steps|--repetitions|--pairs|--compile-timeout)
      need_value "$@"
      [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 '$2': expected a positive integer"
      case "$1" in
        --cores) cores="$2" ;; --batch) batch="$2" ;; --steps) steps="$2" ;;
        --repetitions) repetitions="$2" ;; --pairs) pairs="$2" ;; --compile-timeout) compile_timeout="$2" ;;
      esac
      shift 2 ;;
    --out) need_value "$@"; out="$2"; shift 2 ;;
    --cases) need_value "$@"; only=",$2,"; shift 2 ;;
    --baseline-build) need_value "$@"; baseline_dir="$2"; shift 2 ;;
    --no-pytorch) pytorch=no; shift ;;
    --vectors)
      need_value "$@"
      [ "$2" = avx2 ] || die "--vectors '$2': the one choice is avx2 (every side held to AVX2)"
      held_to=avx2; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ "$cores" -le "$(nproc)" ] || die "--cores $cores: this machine has $(nproc) CPUs"

# JSON is read with Debian's interpreter and its standard library only.
json=/usr/bin/python3
bench="${TESSERA_BUILD_DIR:-${root}/build}/apps/tessera-bench"
[ -x "$bench" ] || die "$bench not found; build first: bash scripts/setup.sh build"
baseline_bench=""
if [ -n "$baseline_dir" ]; then
  baseline_bench="$(cd "$baseline_dir" 2>/dev/null && pwd)/apps/tessera-bench" || true
  [ -x "$baseline_bench" ] || die "--baseline-build $baseline_dir: no apps/tessera-bench in it (a Tessera build directory)"
fi
# Debian's PyTorch takes sgemm_ from libblas.so.3, whose alternative is the
# pthread OpenBLAS; this folder's libblas.so.3 is the OpenMP build Tessera
# runs, chosen per process so that the system's alternatives stay.
openmp_blas=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [ "$pytorch" = yes ]; then
  venv=$(bash "$here/venv.sh" --path)
  torch2="$venv/bin/python"
  "$torch2" -c 'import torch' 2> /dev/null \
    || die "PyTorch 2.x: no working virtual environment at $venv (pinned in bench/requirements.txt); run: bash scripts/setup.sh bench"
  /usr/bin/python3 -c 'import torch' 2> /dev/null \
    || die "Debian's PyTorch is missing (package python3-torch); run: bash scripts/setup.sh bench (or apt-get install python3-torch)"
  [ -f "$openmp_blas/libblas.so.3" ] \
    || die "$openmp_blas/libblas.so.3 missing (package libopenblas0-openmp); run: bash scripts/setup.sh bench"
  debian_version=$(dpkg-query -W -f '${Version}' python3-torch 2> /dev/null | sed 's/[+~-].*//')
fi

cases=()
while IFS= read -r line; do
  case "$line" in ''|'#'*) continue ;; esac
  cases+=("$line")
done < "$here/cases.txt"
if [ -n "$only" ]; then
  known=""
  for entry in "${cases[@]}"; do known+=" ${entry%%|*}"; done
  for name in ${only//,/ }; do
    [[ " $known " == *" $name "* ]] || die "--cases: no case '$name' in bench/cases.txt; cases:$known"
  done
fi

# --vectors avx2: the environment every process inherits (OpenBLAS's
# kernels, MKL's and oneDNN's dispatch, ATen's and torch.compile's vector
# code), and Tessera's builds checked for AVX2 host kernels.
if [ "$held_to" = avx2 ]; then
  export OPENBLAS_CORETYPE=Haswell MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
  for app in "$bench" ${baseline_bench:+"$baseline_bench"}; do
    version=$("$app" --version 2>&1) || die "--vectors avx2: $app --version failed: $version"
    kernels=$(sed -n 's/^host kernels: //p' <<< "$version")
    case "$kernels" in
      AVX2*) ;;
      *) die "--vectors avx2: $(dirname "$(dirname "$app")") has host kernels '${kernels:-unknown}'; build it with -DTessera_HOST_ARCH=x86-64-v3" ;;
    esac
  done
fi

# OpenBLAS on narrower kernels than the CPU has: Tessera's start-up warning
# names the OPENBLAS_CORETYPE that fixes it; Tessera and Debian's PyTorch
# (the same OpenBLAS) run with it.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  coretype=$(OMP_PROC_BIND=spread OMP_PLACES=threads "$(dirname "$bench")/tessera-train" --version 2>&1 \
    | sed -n 's/.*Set OPENBLAS_CORETYPE=\([A-Za-z]*\).*/\1/p' | head -1 || true)
  if [ -n "$coretype" ]; then
    export OPENBLAS_CORETYPE="$coretype"
    echo "note: OpenBLAS chose narrower kernels than the CPU has; running with OPENBLAS_CORETYPE=$coretype"
  fi
fi
case "$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0 2> /dev/null || true)" in
  *pthread*) echo "side_by_side.sh: warning: the pthread OpenBLAS is selected for libopenblas.so.0; its threads fight Kokkos' OpenMP threads in Tessera. scripts/setup.sh selects the OpenMP build." >&2 ;;
esac
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
out="$(cd "$out" && pwd)"
pin=(taskset -c "0-$((cores - 1))")

flags=" $(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1) "
case "$flags" in
  *" avx512f "*) vectors="AVX-512" ;;
  *" avx2 "*) vectors="AVX2" ;;
  *" avx "*) vectors="AVX (no AVX2)" ;;
  *) vectors="SSE (no AVX)" ;;
esac
[ "$held_to" != avx2 ] || vectors+=", every side held to AVX2 (--vectors avx2)"
machine="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), vectors $vectors (/proc/cpuinfo flags), $(nproc) CPUs, running on CPUs 0-$((cores - 1))"
echo "machine: $(hostname): $machine"
echo "protocol: tuning pass, then $pairs interleaved rounds; each measurement $steps steps x $repetitions epochs (median); results in $out"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# The value at a dotted key path of a JSON file, or of a JSON text.
field() {
  "$json" - "$1" "$2" <<'PY'
import json, sys
source, path = sys.argv[1], sys.argv[2]
value = json.loads(source) if source.startswith("{") else json.load(open(source))
for key in path.split("."):
    value = value[key]
print(value)
PY
}

# tessera_run BENCH REPORT OMP OPENBLAS PEAKS: one tessera-bench measurement;
# PEAKS=no skips the peaks. Exits the script when tessera-bench fails.
tessera_run() {
  local peaks=(--skip-peaks)
  [ "$5" = no ] || peaks=()
  OMP_NUM_THREADS="$3" OPENBLAS_NUM_THREADS="$4" OMP_PROC_BIND=spread OMP_PLACES=threads \
    "${pin[@]}" "$1" "$deck" ${sets[@]+"${sets[@]}"} --batch "$case_batch" --steps "$steps" \
    --repetitions "$repetitions" --json "$2" ${peaks[@]+"${peaks[@]}"} > "${2%.json}.log" 2>&1 \
    || { cat "${2%.json}.log"; echo "side_by_side.sh: $1 failed on case $name (log above: ${2%.json}.log)" >&2; exit 1; }
  field "$2" step.samples_per_second
}

# tessera_tune BENCH PREFIX: the thread settings of Kokkos' OpenMP threads
# and those of the OpenBLAS sharing their runtime; prints "omp openblas"
# of the fastest. The run on every core also measures the peaks.
tessera_tune() {
  local best=0 choice="" t b rate peaks settings=("1 1")
  [ "$cores" -eq 1 ] || settings+=("1 $cores" "$cores $cores")
  for setting in "${settings[@]}"; do
    read -r t b <<< "$setting"
    peaks=no
    [ "$t" != "$cores" ] || peaks=yes
    rate=$(tessera_run "$1" "$dir/$2-tune-omp$t-openblas$b.json" "$t" "$b" "$peaks") || exit 1
    printf '  %-44s %10.0f samples/s\n' "$2 omp=$t openblas=$b" "$rate" >&2
    if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$rate choice="$t $b"; fi
  done
  echo "$choice"
}

# PyTorch settings, "label|VAR=value ..." (environment before Python starts).
# PyTorch 2.x: OMP_NUM_THREADS, its intra-op threads and those of the MKL
# inside it. Debian's PyTorch also reads OPENBLAS_NUM_THREADS; with neither
# set it can hang in its first matrix product over the OpenMP OpenBLAS, so a
# short probe decides whether its defaults are tried.
counts=$(printf '%s\n' 1 "$cores" | sort -un)
torch2_settings=()
for t in $counts; do torch2_settings+=("omp=$t|OMP_NUM_THREADS=$t"); done
debian_settings=()
if [ "$pytorch" = yes ]; then
  if env -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS OMP_PROC_BIND=spread OMP_PLACES=threads \
       LD_LIBRARY_PATH="$openmp_blas" timeout 30 "${pin[@]}" \
       /usr/bin/python3 -c 'import torch; a = torch.rand(128, 784); print((a @ a.T).sum().item())' > /dev/null 2>&1; then
    debian_settings+=("defaults|")
  else
    echo "note: Debian's PyTorch with OMP_NUM_THREADS and OPENBLAS_NUM_THREADS unset did not finish a 128x784 matrix product in 30 s; its defaults are skipped"
  fi
fi
for t in $counts; do
  for b in $counts; do debian_settings+=("omp=$t openblas=$b|OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$b"); done
done

# torch_env SIDE SETTING: the environment of one PyTorch process, as
# arguments of env(1): the setting, and the OpenMP thread binding Tessera
# runs with (every side's OpenMP runtime is libgomp).
torch_env() {
  local vars
  vars=(-u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u MKL_NUM_THREADS OMP_PROC_BIND=spread OMP_PLACES=threads)
  [ "$1" = torch2 ] || vars+=(LD_LIBRARY_PATH="$openmp_blas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # shellcheck disable=SC2206 # VAR=value words, no globs
  vars+=(${2#*|})
  printf '%s\n' "${vars[@]}"
}

# torch_tune SIDE PYTHON SETTINGS...: one process per setting measures every
# variant (a variant that fails or times out is reported and left out);
# prints "mode|setting|variant|rate" of the fastest per mode (eager, compiled).
torch_tune() {
  local side="$1" python="$2" index=0 files=() envs
  shift 2
  for setting in "$@"; do
    local log="$dir/$side-tune-$index"
    mapfile -t envs < <(torch_env "$side" "$setting")
    env "${envs[@]}" timeout "$((compile_timeout * 4 + 600))" "${pin[@]}" "$python" "$here/pytorch_reference.py" \
      "$deck" ${sets[@]+"${sets[@]}"} --batch "$case_batch" --steps "$steps" --repetitions "$repetitions" \
      --compile-timeout "$compile_timeout" > "$log.jsonl" 2> "$log.log" \
      || echo "{\"kind\": \"variant\", \"variant\": \"all\", \"status\": \"failed\", \"error\": \"exit $? (see $log.log)\"}" >> "$log.jsonl"
    files+=("${setting%%|*}" "$log.jsonl")
    index=$((index + 1))
  done
  "$json" - "$side" "${files[@]}" <<'PY'
import json, sys
side, best = sys.argv[1], {}
for label, path in zip(sys.argv[2::2], sys.argv[3::2]):
    results = []
    for line in open(path):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") != "variant":
            continue
        if record["status"] == "ok":
            rate = record["samples_per_second"]
            results.append(f"{record['variant']} {rate:,.0f}")
            mode = record["variant"].split("+")[0]
            if rate > best.get(mode, ("", "", 0))[2]:
                best[mode] = (label, record["variant"], rate)
        else:
            results.append(f"{record['variant']} FAILED ({record['error']})")
    name = "PyTorch 2.x" if side == "torch2" else "Debian PyTorch"
    print(f"  {name + ' ' + label:44s} " + ", ".join(results) + " (samples/s)", file=sys.stderr)
for mode, (label, variant, rate) in best.items():
    print(f"{mode}|{label}|{variant}|{rate}")
PY
}

# A PyTorch process that stays for the rounds: it warms up its variant once
# (torch.compile compiles there) and measures it on each "measure" line.
# server_start KEY SIDE SETTING VARIANT sets server_pid[KEY], server_in[KEY]
# and server_out[KEY] (descriptors of two FIFOs); its lines go to KEY.jsonl.
declare -A server_pid server_in server_out server_variant
# An interrupted run leaves no server behind.
trap 'for pid in "${server_pid[@]}"; do kill "$pid" 2> /dev/null || true; done' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
server_start() {
  local key="$1" python="$torch2" envs fd_in fd_out
  [ "$2" = torch2 ] || python=/usr/bin/python3
  mapfile -t envs < <(torch_env "$2" "$3")
  rm -f "$dir/$key.in" "$dir/$key.out"
  mkfifo "$dir/$key.in" "$dir/$key.out"
  # The server keeps none of the other servers' descriptors.
  (for fd in "${server_in[@]}" "${server_out[@]}"; do exec {fd}>&-; done
   exec env "${envs[@]}" "${pin[@]}" "$python" "$here/pytorch_reference.py" "$deck" ${sets[@]+"${sets[@]}"} \
     --batch "$case_batch" --steps "$steps" --repetitions "$repetitions" --variants "$4" \
     --compile-timeout "$compile_timeout" --serve < "$dir/$key.in" > "$dir/$key.out" 2> "$dir/$key.log") &
  server_pid[$key]=$!
  exec {fd_in}> "$dir/$key.in" {fd_out}< "$dir/$key.out"
  server_in[$key]=$fd_in server_out[$key]=$fd_out server_variant[$key]=$4
  : > "$dir/$key.jsonl"
  local line
  while server_read "$key" "$((compile_timeout + 600))" line; do
    case "$line" in
      *'"kind": "ready"'*'"'"$4"'"'*) return 0 ;;
      *'"kind": "ready"'*) return 1 ;;
    esac
  done
  return 1
}

# server_read KEY TIMEOUT VAR: the server's next line into VAR (and its
# log); fails on end of output or timeout.
server_read() {
  local -n into="$3"
  IFS= read -r -t "$2" -u "${server_out[$1]}" into || return 1
  printf '%s\n' "$into" >> "$dir/$1.jsonl"
}

# server_measure KEY: one measurement's samples/s into `measured`, or "-"
# if it failed; a server that fails is stopped. Runs in this shell (not in
# $(...)), so that stopping it counts for the later rounds; the write is in
# a subshell, where a server that died raises SIGPIPE.
server_measure() {
  local line pid="${server_pid[$1]:-}"
  measured="-"
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2> /dev/null \
     && (printf 'measure %s\n' "${server_variant[$1]}" 1>&"${server_in[$1]}") 2> /dev/null \
     && server_read "$1" 1800 line && [[ "$line" == *'"status": "ok"'* ]]; then
    measured=$(field "$line" samples_per_second)
  else
    echo "side_by_side.sh: $1 failed to measure (see $dir/$1.log); its later rounds count as failed too" >&2
    server_stop "$1"
  fi
}

server_stop() {
  local pid="${server_pid[$1]:-}" fd_in="${server_in[$1]:-}" fd_out="${server_out[$1]:-}"
  [ -n "$pid" ] || return 0
  (printf 'quit\n' 1>&"$fd_in") 2> /dev/null || true
  exec {fd_in}>&- {fd_out}<&-
  unset "server_in[$1]" "server_out[$1]"
  for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.2; done
  kill "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  unset "server_pid[$1]"
  rm -f "$dir/$1.in" "$dir/$1.out"
}

ran=()
for entry in "${cases[@]}"; do
  IFS='|' read -r name deck_path overrides target case_batch <<< "$entry"
  [ -z "$only" ] || [[ "$only" == *",$name,"* ]] || continue
  ran+=("$name")
  deck="$root/$deck_path"
  case_batch="${case_batch:-$batch}"
  sets=()
  read -r -a words <<< "$overrides"
  for o in ${words[@]+"${words[@]}"}; do sets+=(--set "$o"); done
  dir="$out/$name"
  mkdir -p "$dir"
  echo
  echo "== $name: $deck_path${overrides:+ $overrides} (batch $case_batch): tuning"
  choice=$(tessera_tune "$bench" tessera) || exit 1
  read -r tessera_omp tessera_openblas <<< "$choice"
  {
    echo "deck=$deck_path${overrides:+ $overrides}"
    echo "batch=$case_batch"
    echo "target=$target"
    echo "peaks=$dir/tessera-tune-omp$cores-openblas$cores.json"
    echo "tessera=omp=$tessera_omp openblas=$tessera_openblas"
  } > "$dir/meta"
  if [ -n "$baseline_bench" ]; then
    choice=$(tessera_tune "$baseline_bench" baseline) || exit 1
    read -r baseline_omp baseline_openblas <<< "$choice"
    echo "baseline=omp=$baseline_omp openblas=$baseline_openblas" >> "$dir/meta"
  fi
  servers=()
  if [ "$pytorch" = yes ]; then
    # The fastest setting and variant per mode; each becomes a server.
    while IFS='|' read -r mode label variant _; do
      echo "torch2-$mode=$label|$variant" >> "$dir/meta"
    done < <(torch_tune torch2 "$torch2" "${torch2_settings[@]}")
    while IFS='|' read -r mode label variant _; do
      echo "debian=$label|$variant" >> "$dir/meta"
    done < <(torch_tune debian /usr/bin/python3 "${debian_settings[@]}")
    echo "debian_version=$debian_version" >> "$dir/meta"
    for key in torch2-eager torch2-compiled debian; do
      chosen=$(sed -n "s/^$key=//p" "$dir/meta")
      [ -n "$chosen" ] || { echo "  $key: every setting failed in the tuning pass; no rounds for it"; continue; }
      side=torch2
      [ "$key" != debian ] || side=debian
      settings_var="${side}_settings[@]"
      for setting in "${!settings_var}"; do
        [ "${setting%%|*}" = "${chosen%|*}" ] || continue
        if server_start "$key" "$side" "$setting" "${chosen#*|}"; then
          servers+=("$key")
        else
          echo "  $key (${chosen/|/, }): its warm-up failed (see $dir/$key.log); no rounds for it"
          server_stop "$key"
        fi
      done
    done
  fi

  echo "== $name: $pairs interleaved rounds"
  printf 'round\ttessera\tbaseline\ttorch2-eager\ttorch2-compiled\tdebian\n' > "$dir/rounds.tsv"
  for round in $(seq "$pairs"); do
    rate=$(tessera_run "$bench" "$dir/tessera-round$round.json" "$tessera_omp" "$tessera_openblas" no) || exit 1
    row=("$round" "$rate")
    rate="-"
    if [ -n "$baseline_bench" ]; then
      rate=$(tessera_run "$baseline_bench" "$dir/baseline-round$round.json" "$baseline_omp" "$baseline_openblas" no) || exit 1
    fi
    row+=("$rate")
    for key in torch2-eager torch2-compiled debian; do
      measured="-"
      [[ " ${servers[*]} " != *" $key "* ]] || server_measure "$key"
      row+=("$measured")
    done
    (IFS=$'\t'; echo "${row[*]}") >> "$dir/rounds.tsv"
    shown=()
    for rate in "${row[@]:1}"; do
      if [ "$rate" = - ]; then shown+=(-); else shown+=("$(printf '%.0f' "$rate")"); fi
    done
    printf '  round %s, samples/s: Tessera %s, baseline %s, PyTorch 2.x eager %s, compiled %s, Debian %s\n' \
      "$round" "${shown[@]}"
  done
  for key in ${servers[@]+"${servers[@]}"}; do server_stop "$key"; done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$json" - "$out" "$pairs" "$machine" "${ran[@]}" <<'PY'
import json, os, statistics, sys

out, pairs, machine, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]


def number(text):
    return None if text == "-" else float(text)


def spread(values):
    """median, (min, max), (first quartile, third quartile)"""
    values = sorted(values)
    if len(values) == 1:
        return values[0], (values[0], values[0]), (values[0], values[0])
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), (values[0], values[-1]), (q1, q3)


def first_line(path, kind):
    if os.path.exists(path):
        for line in open(path):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("kind") == kind:
                return record
    return None


def describe_torch_blas(process):
    if not process:
        return "(no process)"
    b = process["blas"]
    where = b["sgemm"] or "no sgemm_ found"
    text = f"sgemm_ from {where}: {b['library'] or '?'}"
    if b["threading"]:
        text += f", {b['threading']}"
    text += f"; torch BLAS_INFO={b['torch_blas_info']}; mapped BLAS files: {', '.join(b['mapped']) or 'none'}"
    if b["warning"]:
        text += f"; WARNING: {b['warning']}"
    return text


summary = []
print("\nThe benchmark protocol (docs/benchmarks.md): samples/s are medians over the rounds; a")
print("round's ratio pairs Tessera with the runs right after it; 'PyTorch 2.x best' in a round is")
print("the faster of its eager and compiled runs. 'of FMA' divides the training step's FLOPs per")
print("second by the FMA peak of all the cores, on the basis named: model FLOPs (the model's")
print("direct-form arithmetic, the same for every framework) or executed FLOPs (what Tessera's")
print("kernels execute: Winograd's, im2col's). PyTorch's executed FLOPs are unknown, so its")
print("fractions use the model FLOPs.")
print(f"machine: {machine}")
for name in names:
    d = os.path.join(out, name)
    meta = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(d, "meta")))
    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(d, "rounds.tsv"))][1:]
    columns = ["tessera", "baseline", "torch2-eager", "torch2-compiled", "debian"]
    rates = {c: [number(r[i + 1]) for r in rows] for i, c in enumerate(columns)}
    rates["torch2-best"] = [max((v for v in pair if v is not None), default=None)
                            for pair in zip(rates["torch2-eager"], rates["torch2-compiled"])]
    peaks_report = json.load(open(meta["peaks"]))
    peaks, step = peaks_report["peaks"], peaks_report["step"]
    batch = peaks_report["batch_size"]
    fma = peaks["fma"]["gflops"]
    tessera_reports = [json.load(open(os.path.join(d, f"tessera-round{r[0]}.json"))) for r in rows]

    def of_fma(rate, flops):
        return f"{100 * flops * rate / batch * 1e-9 / fma:.1f}%" if rate and fma > 0 else "-"

    print(f"\n== {name}: {meta['deck']}, batch {batch}, {len(rows)} rounds, target {meta['target']}x PyTorch 2.x")
    print(f"  peaks (tuning run, {peaks_report['threads']} threads): FMA {fma:.1f} GFLOP/s ({peaks['fma']['isa']}), "
          f"sgemm {peaks['sgemm']['gflops']:.1f} GFLOP/s, stream triad {peaks['stream_triad']['gbs']:.1f} GB/s")
    for warning in peaks["warnings"]:
        print(f"  peaks warning: {warning}")
    print(f"  {'row':30s} {'setting':38s} {'samples/s: median (min-max)':>30s}  of FMA")
    labels = {"tessera": "Tessera", "baseline": "Tessera, baseline build",
              "torch2-eager": "PyTorch 2.x eager", "torch2-compiled": "PyTorch 2.x compiled",
              "debian": f"Debian PyTorch {meta.get('debian_version', '')}"}
    medians = {}
    for column in columns:
        values = [v for v in rates[column] if v is not None]
        setting = meta.get(column, "").replace("|", ", ")
        if column not in meta:
            continue
        if not values:
            print(f"  {labels[column]:30s} {setting:38s} {'failed':>30s}")
            medians[column] = None
            continue
        median, (low, high), _ = spread(values)
        medians[column] = median
        cell = f"{median:,.0f} ({low:,.0f}-{high:,.0f})"
        if column in ("tessera", "baseline"):
            fraction = (f"{of_fma(median, step['model_flops'])} of model FLOPs, "
                        f"{of_fma(median, step['executed_flops'])} of executed FLOPs")
        else:
            fraction = f"{of_fma(median, step['model_flops'])} of model FLOPs"
        print(f"  {labels[column]:30s} {setting:38s} {cell:>30s}  {fraction}")
    dense = [r["dense"]["model_gflops"] for r in tessera_reports if r["dense"]["layers"]]
    if dense and peaks["sgemm"]["gflops"] > 0:
        print(f"  Tessera's Dense layers, forward + backward: "
              f"{100 * statistics.median(dense) / peaks['sgemm']['gflops']:.1f}% of the sgemm peak (model FLOPs)")
    print("  BLAS, read from each running process:")
    blas = peaks_report["blas"]
    threading = peaks_report["build_info"]["blas"].get("threading", "")
    print(f"    Tessera (tessera-bench 'blas'): {blas['library']}"
          + (f", kernels {blas['core']} ({blas['core_isa']})" if blas.get("core") else "")
          + (f", {threading}" if threading else ""))
    for key, label in (("torch2-eager", "PyTorch 2.x eager"), ("torch2-compiled", "PyTorch 2.x compiled"),
                       ("debian", "Debian PyTorch")):
        if key in meta:
            process = first_line(os.path.join(d, f"{key}.jsonl"), "process")
            version = f" (torch {process['torch_version']})" if process else ""
            print(f"    {label}{version}: {describe_torch_blas(process)}")
    print(f"  paired ratios ({len(rows)} rounds)      pairs  median  min-max      interquartile  target  verdict")
    if not any(rates[c][i] for c in columns[1:] for i in range(len(rows))):
        print("    none: nothing but Tessera was measured")
    verdicts = {}
    for against, label in (("torch2-best", "Tessera / PyTorch 2.x best"), ("debian", "Tessera / Debian PyTorch"),
                           ("baseline", "Tessera / baseline build")):
        ratios = [t / p for t, p in zip(rates["tessera"], rates[against]) if t and p]
        if not ratios:
            verdicts[against] = None
            continue
        median, (low, high), (q1, q3) = spread(ratios)
        if against == "torch2-best":
            target = float(meta["target"])
            if len(ratios) < 5:
                verdict = f"no verdict ({len(ratios)} < 5 pairs)"
            else:
                verdict = "met" if median >= target else "MISSED"
            target_text = f"{target:g}"
        elif against == "baseline":
            # A change is resolved when the middle half of the pairs lies on one side of 1.
            verdict = "slower" if q3 < 1 else "faster" if q1 > 1 else "no change resolved"
            target_text = "1"
        else:
            verdict, target_text = "(second anchor)", "-"
        verdicts[against] = (median, low, high, q1, q3, verdict)
        print(f"    {label:30s} {len(ratios):5d} {median:7.2f}  {low:.2f}-{high:.2f}    {q1:.2f}-{q3:.2f}      "
              f"{target_text:6s}  {verdict}")
    summary.append((name, medians, verdicts, meta["target"]))

print("\nSummary (samples/s medians; ratios: median [interquartile] of the paired ratios)")
print(f"{'case':12s} {'Tessera':>9s} {'PT2 eager':>10s} {'PT2 comp.':>10s} {'Deb 1.13':>9s}  "
      f"{'T / PT2 best':22s} {'target':6s} {'verdict':9s} {'T / Debian':22s}")
for name, medians, verdicts, target in summary:
    def cell(key, width):
        value = medians.get(key)
        return f"{value:>{width},.0f}" if value else f"{'-':>{width}s}"

    def ratio(key):
        v = verdicts.get(key)
        return f"{v[0]:.2f} [{v[3]:.2f}-{v[4]:.2f}]" if v else "-"

    main = verdicts.get("torch2-best")
    print(f"{name:12s} {cell('tessera', 9)} {cell('torch2-eager', 10)} {cell('torch2-compiled', 10)} "
          f"{cell('debian', 9)}  {ratio('torch2-best'):22s} {target:6s} {main[5] if main else '-':9s} "
          f"{ratio('debian'):22s}")
    if verdicts.get("baseline"):
        print(f"{'':12s} against the baseline build: {ratio('baseline')} ({verdicts['baseline'][5]})")
PY
