#!/usr/bin/env bash
# tessera-compare on two real tessera-bench reports (1 and 2 OpenMP threads):
# the markdown table carries both columns, every layer, the measured rates
# and the speed-up between them, the PNG chart is written, and the
# performance-portability table over the two platforms matches the metric
# recomputed from the reports; a report's predicted H100 step stands beside a
# report measured on an H100 for the same deck.
# Usage: bench_compare.sh <tessera-bench> <tessera-compare> <deck>
set -euo pipefail
bench="$1" compare="$2" deck="$3"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for t in 1 2; do
  OMP_NUM_THREADS=$t "$bench" "$deck" --steps 3 --repetitions 2 --gemm-size 128 --triad-elements 100000 \
    --peak-repetitions 2 --predict h100 --json "$scratch/t$t.json" > "$scratch/t$t.log" 2>&1 \
    || { cat "$scratch/t$t.log"; echo "FAIL: tessera-bench with $t threads"; exit 1; }
done
# The chart needs matplotlib: the first python3 on PATH may lack it where
# another (Debian's, with python3-matplotlib) has it.
python=python3
python3 -c "import matplotlib" 2>/dev/null || python=/usr/bin/python3
"$python" "$compare" "$scratch/t1.json" "$scratch/t2.json" --label "1 thread" --label "2 threads" \
  -o "$scratch/table.md" --png "$scratch/chart.png"
cat "$scratch/table.md"
/usr/bin/python3 - "$scratch/t1.json" "$scratch/t2.json" "$scratch/table.md" "$scratch/chart.png" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
lines = open(sys.argv[3]).read().splitlines()
errors = []
rows = {}
for line in lines:
    if line.startswith("| "):
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
header = rows.get("", [])
if header != ["1 thread", "2 threads", "speed-up"]:
    errors.append(f"header {header}")
def number(text):
    return float(text.replace(",", ""))
rate = rows.get("samples/s")
if not rate or abs(number(rate[0]) - a["step"]["samples_per_second"]) > 0.5 \
        or abs(number(rate[1]) - b["step"]["samples_per_second"]) > 0.5:
    errors.append(f"samples/s row {rate} vs {a['step']['samples_per_second']}, {b['step']['samples_per_second']}")
else:
    speedup = b["step"]["samples_per_second"] / a["step"]["samples_per_second"]
    if rate[2] != f"{speedup:.2f}x":
        errors.append(f"speed-up {rate[2]}, expected {speedup:.2f}x")
for layer in a["layers"]:
    row = rows.get(f"{layer['name']} fwd+bwd (ms)")
    ms = 1e3 * (layer["forward"]["seconds"] + layer["backward"]["seconds"])
    if not row or abs(number(row[0]) - ms) > 0.0005 + 1e-6 * ms:
        errors.append(f"layer {layer['name']}: row {row}, expected {ms:.3f}")
for key, peak in (("sgemm peak (GFLOP/s)", a["peaks"]["sgemm"]["gflops"]),
                  ("stream triad peak (GB/s)", a["peaks"]["stream_triad"]["gbs"])):
    if key not in rows or abs(number(rows[key][0]) - peak) > 0.05:
        errors.append(f"{key}: {rows.get(key)} vs {peak}")
# The step's FLOP rates, one row per basis, for both reports.
for key, basis in (("training step, executed FLOPs (GFLOP/s)", "executed"),
                   ("training step, model FLOPs, direct form (GFLOP/s)", "model")):
    row = rows.get(key)
    want = [r["step"][f"{basis}_gflops"] for r in (a, b)]
    if not row or any(abs(number(row[i]) - want[j]) > 0.05 for i, j in ((0, 0), (1, 1))):
        errors.append(f"{key}: {row} vs {want}")
if not any("2 threads: " in l and "OpenMP with 2 threads" in l for l in lines):
    errors.append("no machine line for the second report")
with open(sys.argv[4], "rb") as f:
    if f.read(8) != b"\x89PNG\r\n\x1a\n":
        errors.append("chart is not a PNG")

# Performance portability over the two platforms (1 and 2 cores), recomputed
# here from the reports: each platform has one report, so application
# efficiency is 1 everywhere; architectural efficiency is roofline time
# (executed FLOPs at the measured sgemm rate, or bytes at the triad
# bandwidth) over measured time.
def roofline(r, layer):
    return max(layer["step"]["executed_flops"] / (r["peaks"]["sgemm"]["gflops"] * 1e9),
               layer["step"]["bytes"] / (r["peaks"]["stream_triad"]["gbs"] * 1e9))
def arch(r, name):
    if name is None:
        return sum(roofline(r, l) for l in r["layers"]) / r["step"]["seconds"]
    layer = next(l for l in r["layers"] if l["name"] == name)
    return roofline(r, layer) / (layer["forward"]["seconds"] + layer["backward"]["seconds"])
app_name = f"Tessera {a['tessera_version']}"
pp_rows = {}
for line in lines:
    cells = [c.strip() for c in line.strip("|").split("|")]
    if line.startswith("| ") and cells[0] == app_name:
        pp_rows[cells[1]] = cells[2:]
if a["platform"] == b["platform"]:
    errors.append(f"1 and 2 threads share the platform {a['platform']}")
for name in [None] + [l["name"] for l in a["layers"]]:
    key = "training step" if name is None else f"{name} fwd+bwd"
    row = pp_rows.get(key)
    ea, eb = arch(a, name), arch(b, name)
    pp = 2 / (1 / ea + 1 / eb)
    expected = [f"{ea:.3f}", "1.000", f"{eb:.3f}", "1.000", f"{pp:.3f}", "1.000"]
    if row != expected:
        errors.append(f"PP row {key}: {row}, expected {expected}")
summary = f"PP of {app_name}, training step: 1.000 (application efficiency)"
if not any(l.startswith(summary) for l in lines):
    errors.append(f"no line '{summary}'")
if errors:
    print("FAIL: " + "\n      ".join(errors))
    sys.exit(1)
print("PASS: merged table, chart and performance portability")
PY
# A file that is not a report: status 2, naming it.
echo '{"hello": 1}' > "$scratch/other.json"
set +e
out=$("$compare" "$scratch/t1.json" "$scratch/other.json" 2>&1); rc=$?
set -e
if [ "$rc" -ne 2 ] || ! grep -qF "$scratch/other.json: not a tessera-bench report" <<<"$out"; then
  echo "FAIL: non-report input: exit $rc: $out"
  exit 1
fi
echo "PASS: non-report input -> exit 2 naming the file"

# Predictions beside a measurement: the second report stands in for one
# measured on an H100 (its platform renamed), a third for another deck.
/usr/bin/python3 - "$scratch" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/t2.json"))
r["platform"] = "NVIDIA H100 80GB HBM3"
json.dump(r, open(f"{d}/h100.json", "w"))
r["deck"] = "other.toml"
r["step"]["seconds"] *= 3
json.dump(r, open(f"{d}/other-deck.json", "w"))
PY
"$compare" "$scratch/t1.json" "$scratch/other-deck.json" "$scratch/h100.json" -o "$scratch/predicted.md"
/usr/bin/python3 - "$scratch/t1.json" "$scratch/h100.json" "$scratch/predicted.md" <<'PY'
import json, sys
a, gpu = (json.load(open(p)) for p in sys.argv[1:3])
text = open(sys.argv[3]).read()
rows = [l for l in text.splitlines() if l.startswith("| ") and "NVIDIA H100 SXM" in l]
p = a["predicted"]["h100"]
want = (f"| {a['backend']} {a['threads']}t @ {a['machine']['hostname']} | {p['platform']} | "
        f"{p['launches_per_step']} | {1e3 * p['step_seconds']:,.3f} | {p['bounding_kernel']} | "
        f"{1e3 * gpu['step']['seconds']:,.3f} (NVIDIA H100 80GB HBM3) |")
if "## Predicted GPU steps" not in text or want not in rows:
    print(f"FAIL: prediction rows {rows}, expected {want}")
    sys.exit(1)
print("PASS: the predicted H100 step beside the H100 report of the same deck")
PY
