#!/usr/bin/env bash
# tessera-bench on a small CNN run (with --mixed-gemm): the JSON report
# follows the documented schema (docs/benchmarks.md), per-layer FLOPs are the closed forms for
# Dense and Conv2D on both bases (the model's direct form, and what the kernels
# execute: Winograd's products and transforms where conv2 runs them), the
# console names the basis of every FLOP rate, an MLP executes its model's
# FLOPs exactly, the peaks' plausibility verdicts follow the rule (measured,
# and with injected peaks and clocks on both sides of the threshold), the
# predicted GPU steps are the roofline bounds of the report's own counts and
# the same bounds fed this host's measured peaks never exceed its measured
# times (a kernel over its bound timed again by a second run), and bad input
# exits with status 2.
# Usage: bench_report.sh <tessera-bench> <CNN deck> [<MLP deck>]
set -euo pipefail
bench="$1" deck="$2" mlp_deck="${3:-$(dirname "$2")/fashion_mnist_mlp.toml}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The run the checks below read; a second run (the predictions' check) repeats it.
run_args=(--batch 16 --steps 2 --repetitions 2 --gemm-size 128 --triad-elements 100000
  --peak-repetitions 2 --predict "h100,mi250x")
"$bench" "$deck" "${run_args[@]}" --mixed-gemm --json "$scratch/report.json" \
  > "$scratch/out.txt" 2>&1 \
  || { cat "$scratch/out.txt"; echo "FAIL: tessera-bench exited $?"; exit 1; }
cat "$scratch/out.txt"
grep -q "^training step: .* samples/s at batch 16" "$scratch/out.txt" || { echo "FAIL: no training step line"; exit 1; }
grep -q "^16-bit products (n = 128, float accumulation):" "$scratch/out.txt" \
  || { echo "FAIL: no 16-bit products line (--mixed-gemm)"; exit 1; }
# Debian's interpreter: the check uses the standard library only.
/usr/bin/python3 - "$scratch/report.json" "$deck" "$scratch/out.txt" <<'PY'
import json, math, os, re, sys
report = json.load(open(sys.argv[1]))
deck = sys.argv[2]
console = open(sys.argv[3]).read().splitlines()
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)
def typed(obj, key, kind, where):
    value = obj.get(key)
    check(isinstance(value, kind) and not isinstance(value, bool),
          f"{where}.{key} is {value!r}, expected {kind.__name__}")
    return value
def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
def over(a, b):  # a fraction as tessera-bench writes it: 0 without the peak
    return a / b if b > 0 else 0

check(report.get("schema") == "tessera-bench", "schema")
check(report.get("schema_version") == 3, "schema_version")
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
check(info.get("kernel_paths") in ("host fast paths", "device paths on the host", "device paths"),
      f"build_info.kernel_paths {info.get('kernel_paths')}")
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
fma = peaks["fma"]
check(fma["gflops"] > 0, f"peaks.fma.gflops {fma['gflops']}")
# The ceiling sums each thread's fastest burst: never below the median of
# whole repetitions that the same bursts make up.
check(fma["ceiling_gflops"] >= fma["gflops"], f"peaks.fma.ceiling_gflops {fma['ceiling_gflops']} < {fma['gflops']}")
check(isinstance(fma["isa"], str) and fma["isa"] != "", f"peaks.fma.isa {fma['isa']!r}")
check(fma["threads"] == threads, f"peaks.fma.threads {fma['threads']} != threads {threads}")
check(peaks["sgemm"]["size"] == 128 and peaks["sgemm"]["gflops"] > 0, "peaks.sgemm")
check(peaks["stream_triad"]["elements"] == 100000 and peaks["stream_triad"]["gbs"] > 0, "peaks.stream_triad")
check(peaks["repetitions"] == 2, "peaks.repetitions")
# --mixed-gemm: both 16-bit types through every host method.
mixed = {(f["type"], f["method"]): f["gflops"] for f in peaks.get("mixed_gemm", [])}
check(set(mixed) == {(t, m) for t in ("bf16", "fp16") for m in ("widen_blas", "tiled")},
      f"peaks.mixed_gemm entries {sorted(mixed)}")
check(all(g > 0 for g in mixed.values()), f"peaks.mixed_gemm GFLOP/s {mixed}")

# The expectation and the verdicts: vector floats x FMA/cycle x clock x cores
# x 2, cores at most the threads; the FMA peak plausible from half of it, the
# sgemm peak up to the FMA peak; one warning per implausible peak, each also
# a console line; the triad has no rule.
expected = fma["expected"]
check(set(expected) == {"vector_floats", "fma_per_cycle", "clock_mhz", "clock_source", "cores",
                        "derivation"}, f"peaks.fma.expected keys {sorted(expected)}")
check(1 <= expected["cores"] <= threads, f"peaks.fma.expected.cores {expected['cores']}")
check(expected["fma_per_cycle"] in (1, 2), f"peaks.fma.expected.fma_per_cycle {expected['fma_per_cycle']}")
if expected["vector_floats"] > 0 and expected["clock_mhz"] > 0:
    want = 2 * expected["vector_floats"] * expected["fma_per_cycle"] * expected["clock_mhz"] * 1e-3 \
        * expected["cores"]
    check(fma["expected_gflops"] is not None and close(fma["expected_gflops"], want),
          f"peaks.fma.expected_gflops {fma['expected_gflops']} != {want}")
    check(fma["plausible"] is (fma["gflops"] >= fma["expected_gflops"] / 2 if fma["gflops"] > 0 else None),
          f"peaks.fma.plausible {fma['plausible']} for {fma['gflops']} against {fma['expected_gflops']}")
else:
    check(fma["expected_gflops"] is None and fma["plausible"] is None, "no expectation, yet a verdict")
check(peaks["sgemm"]["plausible"] is (peaks["sgemm"]["gflops"] <= fma["gflops"]
                                      if fma["gflops"] > 0 and peaks["sgemm"]["gflops"] > 0 else None),
      f"peaks.sgemm.plausible {peaks['sgemm']['plausible']}")
check("plausible" in peaks["stream_triad"] and peaks["stream_triad"]["plausible"] is None,
      "peaks.stream_triad.plausible")
check(peaks["overrides"] == {}, f"peaks.overrides {peaks['overrides']}")
warnings = peaks["warnings"]
check(isinstance(warnings, list) and all(isinstance(w, str) for w in warnings), f"peaks.warnings {warnings!r}")
implausible = [p for p in ("fma", "sgemm") if peaks[p]["plausible"] is False]
check(len(warnings) == len(implausible), f"peaks.warnings {warnings} for implausible {implausible}")
for w in warnings:
    check(f"warning: {w}" in console, f"warning not in the console: {w}")
check(f"FMA peak expected: {expected['derivation']}" in console, "no 'FMA peak expected:' line")

FLOP_KEYS = ("model_flops", "executed_flops", "model_gflops", "executed_gflops",
             "model_flops_sgemm_fraction", "executed_flops_sgemm_fraction")
def check_pass(p, where):
    numbers = ("seconds", "bytes", "gbs", "bandwidth_fraction") + FLOP_KEYS
    for key in numbers:
        check(isinstance(p.get(key), (int, float)) and math.isfinite(p[key]) and p[key] >= 0,
              f"{where}.{key} = {p.get(key)!r}")
    for key in ("flops", "gflops", "flops_fraction"):
        check(key not in p, f"{where}.{key}: a FLOP figure without its basis")
    if any(not isinstance(p.get(key), (int, float)) for key in numbers):
        return
    check(p["seconds"] > 0 and p["bytes"] > 0, f"{where}: zero time or bytes")
    for basis in ("model", "executed"):
        check(close(p[f"{basis}_gflops"], over(p[f"{basis}_flops"], p["seconds"]) * 1e-9), f"{where}.{basis}_gflops")
        check(close(p[f"{basis}_flops_sgemm_fraction"], over(p[f"{basis}_gflops"], peaks["sgemm"]["gflops"])),
              f"{where}.{basis}_flops_sgemm_fraction")
    check(close(p["bandwidth_fraction"], over(p["gbs"], peaks["stream_triad"]["gbs"])),
          f"{where}.bandwidth_fraction")

layers = report["layers"]
types = [l["type"] for l in layers]
check(types == ["Conv2D", "ReLU", "MaxPool2D", "Conv2D", "ReLU", "MaxPool2D", "Dense", "ReLU",
                "Dropout", "Dense"], f"layer types {types}")
N = 16
# Model FLOPs (forward, backward) in closed form; the first layer computes no dx.
conv1, conv2 = 2 * 32 * 28 * 28 * 25, 2 * 64 * 14 * 14 * 800
fc1, fc2 = 2 * 3136 * 256, 2 * 256 * 10
expected_flops = {
    "conv1": (N * (conv1 + 32 * 784), N * (conv1 + 32 * 784)),
    "conv2": (N * (conv2 + 64 * 196), N * (2 * conv2 + 64 * 196)),
    "fc1": (N * (fc1 + 256), N * (2 * fc1 + 256)),
    "fc2": (N * (fc2 + 10), N * (2 * fc2 + 10)),
}
# Executed FLOPs of conv2 (5 x 5, 32 -> 64 channels, 14 x 14, 'same') in
# Winograd's F(2 x 2, 5 x 5), t = 6: 7 x 7 tiles of outputs, and of inputs
# for the input gradient; per tile t^2 products of each channel pair; per
# channel the input transform B^T d B, the output transform A^T M A or the
# gradient's A d A^T, each term of a nonzero coefficient an add after a
# row's first and a multiply where the coefficient is not 1 or -1; the
# weights' (or their gradient's) 2 r t (r + t) per pair.
t, r, cin, cout, tiles = 6, 5, 32, 64, N * 49
BT = [[4, 0, -5, 0, 1, 0], [0, 4, 4, -1, -1, 0], [0, -4, 4, 1, -1, 0],
      [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
AT = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1]]
def row_flops(row):
    terms = [c for c in row if c != 0]
    return len(terms) - 1 + sum(1 for c in terms if abs(c) != 1)
input_tile = 2 * t * sum(row_flops(row) for row in BT)
output_tile = (t + 2) * sum(row_flops(row) for row in AT)
gradient_tile = (2 + t) * sum(row_flops([AT[0][i], AT[1][i]]) for i in range(t))
products = 2 * t * t * cin * cout
weights = 2 * r * t * (r + t) * cin * cout
wino_pass = tiles * (cin * input_tile + products + cout * output_tile) + weights
wino_weight_gradient = tiles * (cin * input_tile + products + cout * gradient_tile) + weights
wino_input_gradient = tiles * (cout * input_tile + products + cin * output_tile) + weights
winograd_conv2 = (wino_pass + N * 64 * 196,
                  wino_weight_gradient + wino_input_gradient + N * 64 * 196)
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
            check(isinstance(k["name"], str) and k["seconds"] >= 0 and k["launches"] >= 1, f"{where}.{p} kernel {k}")
            # Every launch states its work (kernels/impl/launch.hpp): work
            # items of its policy, bytes and FLOPs.
            check(isinstance(k["work_items"], int) and k["work_items"] >= 1, f"{where}.{p} kernel {k['name']}: work_items {k['work_items']}")
            check(k["bytes"] > 0 and k["flops"] >= 0, f"{where}.{p} kernel {k['name']}: bytes {k['bytes']}, flops {k['flops']}")
        check(sum(k["seconds"] for k in kernels) <= layer[p]["seconds"] * 1.001, f"{where}.{p}: kernels exceed the layer")
    check(math.isclose(layer["step"]["seconds"], layer["forward"]["seconds"] + layer["backward"]["seconds"]),
          f"{where}.step.seconds")
    for basis in ("model", "executed"):
        check(close(layer["step"][f"{basis}_flops"],
                    layer["forward"][f"{basis}_flops"] + layer["backward"][f"{basis}_flops"]),
              f"{where}.step.{basis}_flops")
    names = [k["name"] for k in layer["forward"]["kernels"]]
    winograd = "tessera::kernels::conv2d_forward_winograd" in names
    # Winograd where its kernels ran (conv2), the direct form's work elsewhere
    # (conv1: one input channel; every other layer).
    if winograd:
        check(layer["name"] == "conv2", f"{where}: Winograd's kernels in {layer['name']}")
        fwd, bwd = winograd_conv2
        check(layer["forward"]["executed_flops"] == fwd,
              f"{where}.forward.executed_flops {layer['forward']['executed_flops']} != {fwd}")
        check(layer["backward"]["executed_flops"] == bwd,
              f"{where}.backward.executed_flops {layer['backward']['executed_flops']} != {bwd}")
        for p in ("forward", "backward", "step"):
            check(layer[p]["executed_flops"] < layer[p]["model_flops"], f"{where}.{p}: executed >= model")
    elif layer["name"] == "conv1" and "tessera::kernels::conv2d_forward_direct" in names:
        # The direct schedule's planar form (one input channel): its tiles
        # cover each output row in whole vectors and the output channels in
        # whole tiles, and its weight gradient sums the columns past each
        # row's outputs too (zeros), more than the model's products.
        for p in ("forward", "backward", "step"):
            check(layer[p]["executed_flops"] > layer[p]["model_flops"],
                  f"{where}.{p}: executed {layer[p]['executed_flops']} <= model {layer[p]['model_flops']}")
    else:
        for p in ("forward", "backward", "step"):
            check(layer[p]["executed_flops"] == layer[p]["model_flops"],
                  f"{where}.{p}: executed {layer[p]['executed_flops']} != model {layer[p]['model_flops']}")
    if layer["name"] in expected_flops:
        fwd, bwd = expected_flops.pop(layer["name"])
        check(layer["forward"]["model_flops"] == fwd, f"{where}.forward.model_flops {layer['forward']['model_flops']} != {fwd}")
        check(layer["backward"]["model_flops"] == bwd, f"{where}.backward.model_flops {layer['backward']['model_flops']} != {bwd}")
        # The products: a KokkosBlas::gemm, a dense layer's blocks of rows
        # (each thread's one-thread gemms), or inside the convolution's
        # threads, Winograd or direct schedule (each thread's one-thread gemms
        # or register tiles run in that kernel).
        products_kernels = ("KokkosBlas::gemm", "tessera::kernels::dense_forward_rows",
                            "tessera::kernels::dense_accumulate_rows",
                            "tessera::kernels::conv2d_forward_threads",
                            "tessera::kernels::conv2d_forward_winograd",
                            "tessera::kernels::conv2d_forward_direct")
        check(any(n.startswith(products_kernels) for n in names), f"{where}: no gemm among {names}")
check(not expected_flops, f"layers missing: {sorted(expected_flops)}")
conv2_layer = next(l for l in layers if l["name"] == "conv2")
ran_winograd = any(k["name"] == "tessera::kernels::conv2d_forward_winograd"
                   for k in conv2_layer["forward"]["kernels"])
step = report["step"]
check(step["seconds"] > 0 and math.isclose(step["samples_per_second"], N / step["seconds"]), "step rate")
check(math.isclose(step["layers_seconds"], sum(l["step"]["seconds"] for l in layers)), "step.layers_seconds")
for key in ("flops", "gflops", "fma_fraction"):
    check(key not in step, f"step.{key}: a FLOP figure without its basis")
for basis in ("model", "executed"):
    flops = step[f"{basis}_flops"]
    check(close(flops, sum(l["step"][f"{basis}_flops"] for l in layers)), f"step.{basis}_flops")
    check(close(step[f"{basis}_gflops"], flops / step["seconds"] * 1e-9), f"step.{basis}_gflops")
    check(close(step[f"{basis}_flops_fma_fraction"], over(step[f"{basis}_gflops"], fma["gflops"])),
          f"step.{basis}_flops_fma_fraction")
if ran_winograd:
    check(step["executed_flops"] < step["model_flops"], "step: Winograd ran, yet executed >= model FLOPs")
for key in ("data", "forward", "backward", "optimizer"):
    check(step["phases"][key] >= 0, f"step.phases.{key}")
dense = report["dense"]
dense_layers = [l for l in layers if l["type"] == "Dense"]
check(dense["layers"] == 2, "dense.layers")
check(math.isclose(dense["seconds"], sum(l["step"]["seconds"] for l in dense_layers)), "dense.seconds")
for basis in ("model", "executed"):
    check(close(dense[f"{basis}_flops"], sum(l["step"][f"{basis}_flops"] for l in dense_layers)),
          f"dense.{basis}_flops")
    check(close(dense[f"{basis}_gflops"], dense[f"{basis}_flops"] / dense["seconds"] * 1e-9),
          f"dense.{basis}_gflops")
    check(close(dense[f"{basis}_flops_sgemm_fraction"], over(dense[f"{basis}_gflops"], peaks["sgemm"]["gflops"])),
          f"dense.{basis}_flops_sgemm_fraction")
check(dense["executed_flops"] == dense["model_flops"], "dense: executed != model FLOPs")

# The console names the basis of each rate and prints the report's figures.
def line(pattern, what):
    found = [m for m in map(re.compile(pattern).fullmatch, console) if m]
    check(len(found) == 1, f"{len(found)} console lines '{what}'")
    return [float(g) for g in found[0].groups()] if found else None
basis = r" ([\d.]+) GFLOP/s executed \(([\d.]+) % of the {}\), ([\d.]+) GFLOP/s model FLOPs \(direct form, ([\d.]+) %\)"
for figures, prefix, peak, name in ((step, "training step:", "FMA peak", "fma"),
                                    (dense, "dense layers, training step:", "sgemm peak", "sgemm")):
    printed = line(re.escape(prefix) + basis.format(peak), prefix)
    if printed:
        want = [figures["executed_gflops"], 100 * figures[f"executed_flops_{name}_fraction"],
                figures["model_gflops"], 100 * figures[f"model_flops_{name}_fraction"]]
        check(all(abs(a - b) <= 0.051 for a, b in zip(printed, want)), f"'{prefix}' prints {printed}, report {want}")
header = [l for l in console if re.match(r"layer +type +pass ", l)]
check(len(header) == 1 and header[0].split()[4:8] == ["exec", "%sgemm", "model", "%sgemm"],
      f"table header {header}")
check(any(l.startswith("exec: GFLOP/s executed") and "model: GFLOP/s of the model's FLOPs (direct form)" in l
          for l in console), "no legend naming the table's bases")
if errors:
    print("FAIL: " + "\n      ".join(errors))
    sys.exit(1)
print(f"PASS: report schema, {len(layers)} layers, Dense and Conv2D FLOPs on both bases"
      f"{' (conv2 in Winograd form)' if ran_winograd else ''}, the console's bases, "
      f"peak verdicts ({len(warnings)} warnings)")
PY

# --predict: each kernel bounded by max(bytes / bandwidth, FLOPs / peak,
# launches x latency) from the report's own figures, a pass the sum of its
# kernels, the step their sum and the optimizer's sweep; fed this host's
# peaks (the triad in the first-level cache, the register-only FMA peak:
# upper bounds of what any kernel reaches), no kernel's bound exceeds the
# time measured for it. The peaks and the kernels are timed seconds apart
# on a machine whose speed drifts by a quarter and more, so a kernel over
# its bound is timed once more by a second run: it fails where it is over
# in both (a kernel that states twice the bytes it moves is over in every
# run), and exit status 3 asks for the second run.
check_predictions() {
/usr/bin/python3 - "$scratch/out.txt" "$@" <<'PY'
import json, math, sys
console = open(sys.argv[1]).read().splitlines()
report = json.load(open(sys.argv[2]))
reruns = [json.load(open(path)) for path in sys.argv[3:]]
errors, over_bound = [], []
def roofline(k, p):
    """A kernel's roofline bound on platform p: its bytes, FLOPs or launches."""
    return max(k["bytes"] / p["bytes_per_second"], k["flops"] / p["flops_per_second"],
               k["launches"] * p["launch_seconds"])
predicted = report.get("predicted", {})
if set(predicted) != {"h100", "mi250x", "measured"}:
    errors.append(f"predicted has {sorted(predicted)}, expected h100, mi250x, measured")
for key, p in predicted.items():
    step, launches, worst, bounding = p["optimizer_seconds"], 0, -1, None
    if not p["optimizer_seconds"] > 0:
        errors.append(f"{key}: optimizer_seconds {p['optimizer_seconds']}")
    for layer, bound in zip(report["layers"], p["layers"]):
        for name in ("forward", "backward"):
            figures, got = layer[name], bound[name]
            if len(got["kernels"]) != len(figures["kernels"]):
                errors.append(f"{key} {layer['name']} {name}: {len(got['kernels'])} kernel bounds")
            total = 0
            for k, b in zip(figures["kernels"], got["kernels"]):
                want = roofline(k, p)
                if b["name"] != k["name"] or not math.isclose(b["seconds"], want, rel_tol=1e-12):
                    errors.append(f"{key} {layer['name']} {name} {k['name']}: {b}, expected {want} s")
                # Fed this host's peaks, no kernel's bound may exceed its time:
                # a kernel that states more bytes or FLOPs than it moves fails.
                if key == "measured" and want > k["seconds"]:
                    over_bound.append((layer["name"], name, k["name"], want, k["seconds"], k))
                total += want
                launches += k["launches"]
                if want > worst:
                    worst, bounding = want, f"{layer['name']} {name} {k['name']} ({b['bound_by']})"
            if not math.isclose(got["seconds"], total, rel_tol=1e-9):
                errors.append(f"{key} {layer['name']} {name}: {got['seconds']}, expected {total} s")
            step += total
    if not math.isclose(p["step_seconds"], step, rel_tol=1e-9) or p["launches_per_step"] != launches \
            or p["bounding_kernel"] != bounding:
        errors.append(f"{key}: step {p['step_seconds']} launches {p['launches_per_step']} "
                      f"bounded by {p['bounding_kernel']}; expected {step}, {launches}, {bounding}")
    if not any(l.startswith(f"predicted step on {p['platform']}: ") for l in console):
        errors.append(f"no console line 'predicted step on {p['platform']}'")
if predicted.get("measured", {}).get("step_seconds", 0) > report["step"]["seconds"]:
    errors.append(f"measured peaks: step bound {predicted['measured']['step_seconds']} above the step")
if predicted.get("h100", {}).get("launch_seconds") != 4e-6:
    errors.append("h100's launch latency is not the documented 4 us")
def over_in(rerun, layer_name, pass_name, kernel_name):
    """Whether the kernel is over its measured-peaks bound in a rerun's report."""
    p = rerun["predicted"]["measured"]
    for layer in rerun["layers"]:
        if layer["name"] != layer_name:
            continue
        for k in layer[pass_name]["kernels"]:
            if k["name"] == kernel_name:
                return roofline(k, p) > k["seconds"]
    return True  # a kernel missing from the rerun is no alibi
for layer_name, pass_name, kernel_name, want, seconds, k in over_bound:
    runs = "in both runs" if reruns else "(to be timed again)"
    if all(over_in(r, layer_name, pass_name, kernel_name) for r in reruns):
        errors.append(f"measured peaks: {layer_name} {pass_name} {kernel_name} bound {want:.3e} s "
                      f"above its measured {seconds:.3e} s ({k['bytes']:.0f} bytes, "
                      f"{k['flops']:.0f} FLOPs) {runs}")
    else:
        print(f"note: {layer_name} {pass_name} {kernel_name} over its measured-peaks bound in the "
              f"first run ({want:.3e} s > {seconds:.3e} s), within it in the second")
if errors:
    retry = not reruns and all(e.startswith("measured peaks: ") and e.endswith("(to be timed again)")
                               for e in errors)
    print(("over the bound in the first run: " if retry else "FAIL: ") + "\n      ".join(errors))
    sys.exit(3 if retry else 1)
print(f"PASS: predictions for {sorted(predicted)}; no kernel's bound above its measured time"
      f"{' (confirmed by a second run)' if over_bound else ''}")
PY
}
status=0
check_predictions "$scratch/report.json" || status=$?
if [ "$status" = 3 ]; then
  echo "a kernel over its measured-peaks bound: timing the run again"
  "$bench" "$deck" "${run_args[@]}" --json "$scratch/rerun.json" > "$scratch/rerun.txt" 2>&1 \
    || { cat "$scratch/rerun.txt"; echo "FAIL: tessera-bench's second run exited $?"; exit 1; }
  status=0
  check_predictions "$scratch/report.json" "$scratch/rerun.json" || status=$?
fi
[ "$status" = 0 ] || exit 1

# An MLP executes its model's FLOPs exactly: the two bases agree everywhere.
"$bench" "$mlp_deck" --batch 8 --steps 1 --repetitions 1 --gemm-size 64 --triad-elements 100000 \
  --peak-repetitions 1 --json "$scratch/mlp.json" > "$scratch/mlp.txt" 2>&1 \
  || { cat "$scratch/mlp.txt"; echo "FAIL: tessera-bench on the MLP exited $?"; exit 1; }
/usr/bin/python3 - "$scratch/mlp.json" "$scratch/mlp.txt" <<'PY'
import json, re, sys
report = json.load(open(sys.argv[1]))
console = open(sys.argv[2]).read()
errors = []
for layer in report["layers"]:
    for p in ("forward", "backward", "step"):
        if layer[p]["executed_flops"] != layer[p]["model_flops"]:
            errors.append(f"{layer['name']}.{p}: executed {layer[p]['executed_flops']} != model {layer[p]['model_flops']}")
step = report["step"]
for a, b in (("executed_flops", "model_flops"), ("executed_gflops", "model_gflops"),
             ("executed_flops_fma_fraction", "model_flops_fma_fraction")):
    if step[a] != step[b] or step[a] <= 0:
        errors.append(f"step.{a} {step[a]} != step.{b} {step[b]}")
m = re.search(r"^training step: ([\d.]+) GFLOP/s executed \(([\d.]+) % of the FMA peak\), ([\d.]+) GFLOP/s "
              r"model FLOPs \(direct form, ([\d.]+) %\)$", console, re.M)
if not m or m.group(1) != m.group(3) or m.group(2) != m.group(4):
    errors.append(f"console step line {m.group(0) if m else None}")
if errors:
    print("FAIL: " + "\n      ".join(errors))
    sys.exit(1)
print(f"PASS: MLP, executed = model FLOPs in {len(report['layers'])} layers and the step")
PY

# The plausibility rule on injected figures (--peaks-override; no peak
# measured): each run's verdicts, warnings and console lines.
# verdict <name> <expected fma.plausible> <expected sgemm.plausible> <warning fragment or -> <overrides...>
verdict() {
  local name="$1" want_fma="$2" want_sgemm="$3" fragment="$4"
  shift 4
  local args=() kv
  for kv in "$@"; do args+=(--peaks-override "$kv"); done
  "$bench" "$deck" --batch 2 --steps 1 --repetitions 1 --skip-peaks "${args[@]}" \
    --json "$scratch/$name.json" > "$scratch/$name.txt" 2>&1 \
    || { cat "$scratch/$name.txt"; echo "FAIL: tessera-bench $name exited $?"; exit 1; }
  /usr/bin/python3 - "$scratch/$name.json" "$scratch/$name.txt" "$name" "$want_fma" "$want_sgemm" \
    "$fragment" "$@" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
console = open(sys.argv[2]).read().splitlines()
name, want_fma, want_sgemm, fragment = sys.argv[3:7]
overrides = {k: float(v) for k, v in (a.split("=") for a in sys.argv[7:])}
peaks = report["peaks"]
verdicts = {"true": True, "false": False, "null": None}
errors = []
if peaks["overrides"] != overrides:
    errors.append(f"peaks.overrides {peaks['overrides']} != {overrides}")
if peaks["fma"]["plausible"] is not verdicts[want_fma]:
    errors.append(f"peaks.fma.plausible {peaks['fma']['plausible']}, expected {want_fma}")
if peaks["sgemm"]["plausible"] is not verdicts[want_sgemm]:
    errors.append(f"peaks.sgemm.plausible {peaks['sgemm']['plausible']}, expected {want_sgemm}")
warnings = peaks["warnings"]
if fragment == "-":
    if warnings or any(l.startswith("warning: ") for l in console):
        errors.append(f"warnings {warnings}, expected none")
elif len(warnings) != 1 or fragment not in warnings[0] or f"warning: {warnings[0]}" not in console:
    errors.append(f"warnings {warnings}, expected one with '{fragment}' also on the console")
if "clock_mhz" in overrides and (peaks["fma"]["expected"]["clock_mhz"] != overrides["clock_mhz"]
                                 or peaks["fma"]["expected"]["clock_source"] != "--peaks-override"):
    errors.append(f"peaks.fma.expected {peaks['fma']['expected']}")
if not any(l.startswith("peaks overridden (--peaks-override):") for l in console):
    errors.append("no 'peaks overridden' console line")
if errors:
    print(f"FAIL: {name}: " + "\n      ".join(errors))
    sys.exit(1)
print(f"ok: {name}: fma {want_fma}, sgemm {want_sgemm}, warnings {warnings}")
PY
}
# The threshold at 1 GHz and one core: half of 2 x floats x FMA/cycle GFLOP/s.
read -r floats per_cycle < <(/usr/bin/python3 -c 'import json, sys
e = json.load(open(sys.argv[1]))["peaks"]["fma"]["expected"]
print(e["vector_floats"], e["fma_per_cycle"])' "$scratch/report.json")
if [ "$floats" -gt 0 ]; then
  half=$((floats * per_cycle))  # GFLOP/s: half of 2 x floats x FMA/cycle x 1 GHz x 1 core
  below=$(/usr/bin/python3 -c "print($half * 0.99)") above=$(/usr/bin/python3 -c "print($half * 1.01)")
  verdict fma_below_half false true "is below half of the" \
    fma_gflops="$below" sgemm_gflops=0.001 clock_mhz=1000 cores=1
  verdict fma_above_half true true - fma_gflops="$above" sgemm_gflops=0.001 clock_mhz=1000 cores=1
  verdict fma_far_below false true "the FMA peak, 1.0 GFLOP/s" fma_gflops=1 sgemm_gflops=0.5
  verdict sgemm_above_fma true false "the sgemm peak, 200.0 GFLOP/s, is above the FMA peak" \
    fma_gflops=100 sgemm_gflops=200 clock_mhz=1
else
  echo "no FMA expectation on this CPU: only the sgemm rule is checked"
  verdict sgemm_above_fma null false "is above the FMA peak" fma_gflops=100 sgemm_gflops=200
fi

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
expect "--peaks-override fma=1: expected KEY=VALUE with KEY one of" "$deck" --peaks-override fma=1
expect "--predict h100,a100: unknown platform 'a100' (known: h100, mi250x)" "$deck" --predict h100,a100
touch "$scratch/file"
expect "cannot write $scratch/file/report.json" "$deck" --batch 2 --steps 1 --repetitions 1 --skip-peaks \
  --json "$scratch/file/report.json"
