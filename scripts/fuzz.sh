#!/usr/bin/env bash
# Fuzzes the readers of untrusted input: the deck reader, the IDX reader,
# the HDF5 dataset reader and the checkpoint reader (tests/fuzz/), with
# libFuzzer under ASan + UBSan, starting from the seed corpus in
# tests/fuzz/corpus/<target>/. New corpus entries go to a scratch directory;
# the tree is not touched.
#
#   scripts/fuzz.sh              seed 1 and a fixed number of inputs per
#                                target (about 20 s each), as CI runs it
#   scripts/fuzz.sh SECONDS      a campaign of SECONDS per target with a fresh
#                                random seed, to look for new findings
#
# A finding stops the run and names the input that caused it. Make it a
# regression test: copy the file to tests/fuzz/regressions/<target>/, fix
# the reader, and ctest replays it on every build from then on.
source "$(dirname "${BASH_SOURCE[0]}")/sanitizer-build.sh"

seconds="${1:-}"
[[ -z "$seconds" || "$seconds" =~ ^[1-9][0-9]*$ ]] ||
  die "usage: scripts/fuzz.sh [SECONDS per target]; '${seconds}' is not a positive number"
# Inputs per target for the fixed run, about 20 s each on a 2-core machine
# (the targets differ a hundredfold in speed).
declare -A fixed_runs=([deck]=120000 [idx]=6000 [hdf5]=6000 [checkpoint]=2000)
work="${sanitize_build_dir}/fuzz-work"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
# The fuzz targets start no MPI, so the fast unwinder serves; libFuzzer
# checks each input for leaks itself.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1"
total=0
for target in deck idx hdf5 checkpoint; do
  if [[ -n "$seconds" ]]; then
    budget=(-max_total_time="$seconds")
    step "fuzz ${target} for ${seconds} s"
  else
    budget=(-seed=1 -runs="${fixed_runs[$target]}")
    step "fuzz ${target}: ${fixed_runs[$target]} inputs from seed 1"
  fi
  mkdir -p "${work}/${target}/corpus" "${work}/${target}/findings"
  log="${work}/${target}/fuzz.log"
  # -rss_limit_mb: a reader that allocates gigabytes for a small input is a finding too.
  if ! TMPDIR="${work}/${target}" "${sanitize_build_dir}/tests/fuzz/fuzz_${target}" \
      "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
      -print_final_stats=1 -artifact_prefix="${work}/${target}/findings/" \
      "${work}/${target}/corpus" "${TESSERA_ROOT}/tests/fuzz/corpus/${target}" > "$log" 2>&1; then
    tail -60 "$log"
    die "fuzz_${target} found a problem; the input is in ${work}/${target}/findings/ — copy it to tests/fuzz/regressions/${target}/ and fix the reader"
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corpus=$(find "${work}/${target}/corpus" -type f | wc -l)
  note "${runs:-0} inputs run, ${edges:-?} coverage edges, ${corpus} new corpus entries"
  total=$((total + ${runs:-0}))
done
step "summary"
note "${total} inputs fuzzed in 4 targets"
