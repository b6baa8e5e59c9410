#!/usr/bin/env bash
# Performance portability across execution spaces, from real reports:
# tessera-bench built for Serial (Tessera_EXECUTION_SPACE=Serial, built here
# beside the suite's build; the execution space is chosen when Tessera is
# compiled) and the suite's OpenMP build with 1 and 2 threads. Serial and
# OpenMP with one thread run on the same platform (one core), 2 threads on
# another (two cores). tessera-compare must rate the Serial build 0 (it has
# no report on two cores) and the OpenMP build by the harmonic mean of its
# efficiencies, recomputed here from the reports.
# Usage: pp_backends.sh <OpenMP tessera-bench> <tessera-compare> <deck> <variant build dir>
#        <source dir> <C++ compiler> <prefix path> <build type> <shared libs> [launcher]
set -euo pipefail
openmp_bench="$1" compare="$2" deck="$3" variant="$4" source_dir="$5" cxx="$6" prefix_path="$7"
build_type="$8" shared="$9" launcher="${10:-}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The Serial build: configured once, then rebuilt incrementally; unoptimised
# (-O0): what is checked is the reports and their comparison, not the
# Serial build's speed, and it compiles in half the time of the suite's
# build type.
cmake -S "$source_dir" -B "$variant" -DTessera_EXECUTION_SPACE=Serial -DTessera_ENABLE_TESTS=OFF \
  -DCMAKE_BUILD_TYPE="$build_type" "-DCMAKE_CXX_FLAGS_${build_type^^}=-O0 -DNDEBUG" \
  -DBUILD_SHARED_LIBS="$shared" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix_path" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} \
  > "$scratch/configure.log" 2>&1 || { cat "$scratch/configure.log"; exit 1; }
cmake --build "$variant" --target tessera-bench -j 2 > "$scratch/build.log" 2>&1 \
  || { tail -50 "$scratch/build.log"; exit 1; }
serial_bench="$variant/apps/tessera-bench"

bench() {  # bench <name> <threads> <tessera-bench>
  OMP_NUM_THREADS="$2" "$3" "$deck" --steps 3 --repetitions 3 --gemm-size 256 \
    --triad-elements 1000000 --peak-repetitions 3 --json "$scratch/$1.json" > "$scratch/$1.log" 2>&1 \
    || { cat "$scratch/$1.log"; echo "FAIL: tessera-bench $1"; exit 1; }
}
bench serial 1 "$serial_bench"
bench openmp1 1 "$openmp_bench"
bench openmp2 2 "$openmp_bench"
"$compare" "$scratch/serial.json" "$scratch/openmp1.json" "$scratch/openmp2.json" \
  --label "Serial" --label "OpenMP, 1 thread" --label "OpenMP, 2 threads" \
  --application "Serial build" --application "OpenMP build" --application "OpenMP build" \
  -o "$scratch/table.md"
cat "$scratch/table.md"

python3 - "$scratch" <<'PY'
import json, os, sys
d = sys.argv[1]
s, o1, o2 = (json.load(open(os.path.join(d, n + ".json"))) for n in ("serial", "openmp1", "openmp2"))
lines = open(os.path.join(d, "table.md")).read().splitlines()
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
# The reports say which build they come from.
check(s["build_info"]["kokkos"]["execution_space"] == "Serial" and s["backend"] == "Serial",
      f"serial report: {s['build_info']['kokkos']}")
check(o1["build_info"]["kokkos"]["execution_space"] == "OpenMP", "openmp report execution space")
check(s["build_info"]["kokkos"]["backends"] == o1["build_info"]["kokkos"]["backends"],
      "both builds use the same Kokkos")
check(s["platform"] == o1["platform"] != o2["platform"],
      f"platforms {s['platform']!r}, {o1['platform']!r}, {o2['platform']!r}")
rows = {}
for line in lines:
    cells = [c.strip() for c in line.strip("|").split("|")]
    if line.startswith("| ") and cells[0] in ("Serial build", "OpenMP build"):
        rows[(cells[0], cells[1])] = cells[2:]
def seconds(r, name):
    if name is None:
        return r["step"]["seconds"]
    l = next(l for l in r["layers"] if l["name"] == name)
    return l["forward"]["seconds"] + l["backward"]["seconds"]
def roofline(r, name):
    ls = r["layers"] if name is None else [l for l in r["layers"] if l["name"] == name]
    return sum(max(l["step"]["executed_flops"] / (r["peaks"]["sgemm"]["gflops"] * 1e9),
                   l["step"]["bytes"] / (r["peaks"]["stream_triad"]["gbs"] * 1e9)) for l in ls)
f = lambda v: f"{v:.3f}"
for name in [None] + [l["name"] for l in s["layers"]]:
    item = "training step" if name is None else f"{name} fwd+bwd"
    best1 = min(seconds(s, name), seconds(o1, name))
    # Serial: one core only, so 0 over the two platforms.
    e_s = roofline(s, name) / seconds(s, name)
    expected = [f(e_s), f(best1 / seconds(s, name)), "0.000", "0.000", "0.000", "0.000"]
    check(rows.get(("Serial build", item)) == expected,
          f"Serial build {item}: {rows.get(('Serial build', item))}, expected {expected}")
    a1, a2 = roofline(o1, name) / seconds(o1, name), roofline(o2, name) / seconds(o2, name)
    p1 = best1 / seconds(o1, name)
    expected = [f(a1), f(p1), f(a2), "1.000", f(2 / (1 / a1 + 1 / a2)), f(2 / (1 / p1 + 1))]
    check(rows.get(("OpenMP build", item)) == expected,
          f"OpenMP build {item}: {rows.get(('OpenMP build', item))}, expected {expected}")
check(any(l.startswith("PP of Serial build, training step: 0.000") for l in lines),
      "Serial build's summary line")
if errors:
    print("FAIL: " + "\n      ".join(errors))
    sys.exit(1)
step = lambda r: r["step"]["samples_per_second"]
print(f"PASS: Serial {step(s):.0f}, OpenMP 1 thread {step(o1):.0f}, 2 threads {step(o2):.0f} "
      "samples/s; performance portability as recomputed")
PY
