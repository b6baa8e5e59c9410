#!/usr/bin/env bash
# tessera-bench on a small CNN run (with --mixed-gemm): the JSON report
# follows the documented schema (docs/benchmarks.md), per-layer FLOPs are the closed forms for
# Dense and Conv2D, and bad input exits with status 2.
# Usage: bench_report.sh <tessera-bench> <deck>
set -euo pipefail
bench="$1" deck="$2"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$bench" "$deck" --batch 16 --steps 2 --repetitions 2 --gemm-size 128 --triad-elements 100000 \
  --peak-repetitions 2 --mixed-gemm --json "$scratch/report.json" > "$scratch/out.txt" 2>&1 \
  || { cat "$scratch/out.txt"; echo "FAIL: tessera-bench exited $?"; exit 1; }
cat "$scratch/out.txt"
grep -q "^training step: .* samples/s at batch 16" "$scratch/out.txt" || { echo "FAIL: no training step line"; exit 1; }
grep -q "^16-bit products (n = 128, float accumulation):" "$scratch/out.txt" \
  || { echo "FAIL: no 16-bit products line (--mixed-gemm)"; exit 1; }
# Debian's interpreter: the check uses the standard library only.
/usr/bin/python3 - "$scratch/report.json" "$deck" <<'PY'
import json, math, os, re, sys
report = json.load(open(sys.argv[1]))
deck = sys.argv[2]
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
def typed(obj, key, kind, where):
    value = obj.get(key)
    check(isinstance(value, kind) and not isinstance(value, bool),
          f"{where}.{key} is {value!r}, expected {kind.__name__}")
    return value

check(report.get("schema") == "tessera-bench", "schema")
check(report.get("schema_version") == 2, "schema_version")
for key in ("tessera_version", "build", "backend", "kokkos_version", "compiler", "deck", "run_name",
            "platform", "status"):
    typed(report, key, str, "report")
check(report["status"] == "ok", "status")
check(re.fullmatch(r"\d+\.\d+\.\d+", report["kokkos_version"]) is not None, "kokkos_version format")
# The exact build: Kokkos version and backends, execution space, BLAS and its core, compiler.
info = report["build_info"]
check(info["tessera_version"] == report["tessera_version"], "build_info.tessera_version")
check(info["kokkos"]["version"] == report["kokkos_version"], "build_info.kokkos.version")
check(report["backend"] in info["kokkos"]["backends"], "build_info.kokkos.backends")
check(info["kokkos"]["execution_space"] == report["backend"], "build_info.kokkos.execution_space")
check(re.fullmatch(r"\d+\.\d+\.\d+", info["kokkos_kernels"]["version"]) is not None,
      "build_info.kokkos_kernels.version")
check(info["blas"]["library"].startswith("OpenBLAS"), f"build_info.blas.library {info['blas']}")
check(info["blas"]["core"] != "", "build_info.blas.core")
check(info["compiler"] == report["compiler"] and info["build_type"] != "", "build_info.compiler")
check("spack_spec" in info, "build_info.spack_spec")
check(report["platform"].endswith(f" x{report['threads']}"), f"platform {report['platform']}")
check(report["deck"] == deck, f"deck {report['deck']} != {deck}")
machine = report["machine"]
for key in ("hostname", "cpu"):
    typed(machine, key, str, "machine")
check(typed(machine, "cores", int, "machine") >= 1, "machine.cores >= 1")
threads = typed(report, "threads", int, "report")
if report["backend"] == "OpenMP":
    check(threads == int(os.environ["OMP_NUM_THREADS"]), f"threads {threads} != OMP_NUM_THREADS")
check(report["batch_size"] == 16, "batch_size")
check(isinstance(report["overrides"], list), "overrides")
timing = report["timing"]
check(timing["steps"] == 2 and timing["repetitions"] == 2 and timing["warmup_steps"] == 2, "timing")
peaks = report["peaks"]
check(peaks["sgemm"]["size"] == 128 and peaks["sgemm"]["gflops"] > 0, "peaks.sgemm")
check(peaks["stream_triad"]["elements"] == 100000 and peaks["stream_triad"]["gbs"] > 0, "peaks.stream_triad")
check(peaks["repetitions"] == 2, "peaks.repetitions")
# --mixed-gemm: both 16-bit types through every host method.
mixed = {(f["type"], f["method"]): f["gflops"] for f in peaks.get("mixed_gemm", [])}
check(set(mixed) == {(t, m) for t in ("bf16", "fp16") for m in ("widen_blas", "tiled")},
      f"peaks.mixed_gemm entries {sorted(mixed)}")
check(all(g > 0 for g in mixed.values()), f"peaks.mixed_gemm GFLOP/s {mixed}")

def check_pass(p, where):
    for key in ("seconds", "flops", "bytes", "gflops", "gbs", "flops_fraction", "bandwidth_fraction"):
        check(isinstance(p.get(key), (int, float)) and math.isfinite(p[key]) and p[key] >= 0,
              f"{where}.{key} = {p.get(key)!r}")
    check(p["seconds"] > 0 and p["bytes"] > 0, f"{where}: zero time or bytes")
    check(math.isclose(p["gflops"], p["flops"] / p["seconds"] * 1e-9, rel_tol=1e-9), f"{where}.gflops")
    check(math.isclose(p["flops_fraction"], p["gflops"] / peaks["sgemm"]["gflops"], rel_tol=1e-9),
          f"{where}.flops_fraction")
    check(math.isclose(p["bandwidth_fraction"], p["gbs"] / peaks["stream_triad"]["gbs"], rel_tol=1e-9),
          f"{where}.bandwidth_fraction")

layers = report["layers"]
types = [l["type"] for l in layers]
check(types == ["Conv2D", "ReLU", "MaxPool2D", "Conv2D", "ReLU", "MaxPool2D", "Dense", "ReLU",
                "Dropout", "Dense"], f"layer types {types}")
N = 16
# (forward FLOPs, backward FLOPs) in closed form; the first layer computes no dx.
conv1, conv2 = 2 * 32 * 28 * 28 * 25, 2 * 64 * 14 * 14 * 800
fc1, fc2 = 2 * 3136 * 256, 2 * 256 * 10
expected = {
    "conv1": (N * (conv1 + 32 * 784), N * (conv1 + 32 * 784)),
    "conv2": (N * (conv2 + 64 * 196), N * (2 * conv2 + 64 * 196)),
    "fc1": (N * (fc1 + 256), N * (2 * fc1 + 256)),
    "fc2": (N * (fc2 + 10), N * (2 * fc2 + 10)),
}
for i, layer in enumerate(layers):
    where = f"layers[{i}] ({layer.get('name')})"
    check(layer["index"] == i, f"{where}.index")
    check(isinstance(layer["output_shape"], list) and layer["output_shape"][0] == N, f"{where}.output_shape")
    for p in ("forward", "backward", "step"):
        check_pass(layer[p], f"{where}.{p}")
    for p in ("forward", "backward"):
        kernels = layer[p]["kernels"]
        check(len(kernels) >= 1, f"{where}.{p}.kernels is empty")
        for k in kernels:
            check(isinstance(k["name"], str) and k["seconds"] >= 0 and k["calls"] >= 1, f"{where}.{p} kernel {k}")
        check(sum(k["seconds"] for k in kernels) <= layer[p]["seconds"] * 1.001, f"{where}.{p}: kernels exceed the layer")
    check(math.isclose(layer["step"]["seconds"], layer["forward"]["seconds"] + layer["backward"]["seconds"]),
          f"{where}.step.seconds")
    if layer["name"] in expected:
        fwd, bwd = expected.pop(layer["name"])
        check(layer["forward"]["flops"] == fwd, f"{where}.forward.flops {layer['forward']['flops']} != {fwd}")
        check(layer["backward"]["flops"] == bwd, f"{where}.backward.flops {layer['backward']['flops']} != {bwd}")
        # The products: a KokkosBlas::gemm, or inside the convolution's
        # threads or Winograd schedule (each thread's one-thread gemms run in
        # that kernel).
        names = [k["name"] for k in layer["forward"]["kernels"]]
        products = ("KokkosBlas::gemm", "tessera::kernels::conv2d_forward_threads",
                    "tessera::kernels::conv2d_forward_winograd")
        check(any(n.startswith(products) for n in names), f"{where}: no gemm among {names}")
check(not expected, f"layers missing: {sorted(expected)}")
step = report["step"]
check(step["seconds"] > 0 and math.isclose(step["samples_per_second"], N / step["seconds"]), "step rate")
check(math.isclose(step["layers_seconds"], sum(l["step"]["seconds"] for l in layers)), "step.layers_seconds")
check(math.isclose(step["flops"], sum(l["step"]["flops"] for l in layers)), "step.flops")
for key in ("data", "forward", "backward", "optimizer"):
    check(step["phases"][key] >= 0, f"step.phases.{key}")
dense = report["dense"]
dense_layers = [l for l in layers if l["type"] == "Dense"]
check(dense["layers"] == 2, "dense.layers")
check(math.isclose(dense["seconds"], sum(l["step"]["seconds"] for l in dense_layers)), "dense.seconds")
check(math.isclose(dense["gflops"], sum(l["step"]["flops"] for l in dense_layers) / dense["seconds"] * 1e-9),
      "dense.gflops")
if errors:
    print("FAIL: " + "\n      ".join(errors))
    sys.exit(1)
print(f"PASS: report schema, {len(layers)} layers, Dense and Conv2D FLOPs")
PY
# Bad input: status 2 and a message naming the problem.
expect() {  # expect <fragment> <args...>
  local fragment="$1" out rc
  shift
  set +e
  out=$("$bench" "$@" 2>&1); rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "FAIL: tessera-bench $* exited $rc, expected 2"; echo "$out"; exit 1; }
  grep -qF -- "$fragment" <<<"$out" || { echo "FAIL: tessera-bench $*: message lacks '$fragment'"; echo "$out"; exit 1; }
  echo "ok: tessera-bench $* -> exit 2, '$fragment'"
}
expect "does_not_exist.toml" "$scratch/does_not_exist.toml"
expect "--steps" "$deck" --steps 0
expect "training.batch_size" "$deck" --set training.batch_size=0
touch "$scratch/file"
expect "cannot write $scratch/file/report.json" "$deck" --batch 2 --steps 1 --repetitions 1 --skip-peaks \
  --json "$scratch/file/report.json"
