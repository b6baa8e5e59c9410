#!/usr/bin/env python3
"""tessera-compare's performance-portability arithmetic on small reports whose
efficiencies are worked out by hand: the harmonic mean, the zero for a
platform an application fails on or lacks, architectural efficiency against
the roofline of the measured peaks, application efficiency against the best
report per platform. (The tests with real reports are bench_compare.sh and
pp_backends.sh.)"""
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
loader = importlib.machinery.SourceFileLoader(
    "tessera_compare", os.path.join(HERE, "..", "..", "apps", "tessera-compare"))
spec = importlib.util.spec_from_loader(loader.name, loader)
compare = importlib.util.module_from_spec(spec)
loader.exec_module(compare)


def report(platform, step_seconds, layers, gflops=100.0, gbs=10.0, version="0.1.0",
           status="ok", schema=2):
    """layers: (name, seconds, flops, bytes) with flops and bytes per step;
    schema 3: (name, seconds, (model flops, executed flops), bytes)."""
    r = {"schema": "tessera-bench", "schema_version": schema, "tessera_version": version,
         "platform": platform, "backend": "OpenMP", "threads": 1, "run_name": "t",
         "batch_size": 8, "deck": "t.toml", "status": status,
         "machine": {"hostname": "h", "cpu": "cpu", "cores": 2}}
    if status == "failed":
        r["error"] = "out of memory"
        return r
    r["peaks"] = {"sgemm": {"size": 64, "gflops": gflops},
                  "stream_triad": {"elements": 1024, "gbs": gbs}}
    r["step"] = {"seconds": step_seconds, "samples_per_second": 8 / step_seconds}
    def work(f, b):
        if schema < 3:
            return {"flops": f, "bytes": b}
        return {"model_flops": f[0], "executed_flops": f[1], "bytes": b}
    r["layers"] = [{"name": n, "type": "Conv2D",
                    "forward": {"seconds": s / 2}, "backward": {"seconds": s / 2},
                    "step": work(f, b)} for n, s, f, b in layers]
    r["step"].update(work((sum(l[2][0] for l in layers), sum(l[2][1] for l in layers))
                          if schema >= 3 else sum(l[2] for l in layers), 0))
    return r


class Metric(unittest.TestCase):
    def test_harmonic_mean_and_zero(self):
        pp = compare.performance_portability
        self.assertAlmostEqual(pp([0.5, 1.0]), 2 / 3)
        self.assertAlmostEqual(pp([0.25, 0.25, 0.25]), 0.25)
        self.assertEqual(pp([0.5, 0.0]), 0.0)
        self.assertEqual(pp([]), 0.0)
        self.assertIsNone(pp([0.5, None]))


class Efficiencies(unittest.TestCase):
    def test_architectural_is_roofline_time_over_time(self):
        # 1 GFLOP at 100 GFLOP/s = 0.01 s; 0.05 GB at 10 GB/s = 0.005 s: compute bound.
        # 0.02 s taken -> 0.5 of the roofline; a bandwidth-bound layer likewise.
        a = report("P1", 0.1, [("fc", 0.02, 1e9, 5e7), ("relu", 0.01, 0, 2e7)])
        self.assertAlmostEqual(compare.architectural_efficiency(a, "fc"), 0.5)
        self.assertAlmostEqual(compare.architectural_efficiency(a, "relu"), 0.2)
        # The step: (0.01 + 0.002) s of roofline over 0.1 s.
        self.assertAlmostEqual(compare.architectural_efficiency(a, None), 0.12)
        self.assertIsNone(compare.architectural_efficiency(
            report("P1", 0.1, [("fc", 0.02, 1e9, 5e7)], gflops=0), "fc"))

    def test_two_platforms_one_application(self):
        a = report("P1", 0.1, [("fc", 0.02, 1e9, 5e7)])
        b = report("P2", 0.2, [("fc", 0.04, 1e9, 5e7)])
        hosts, result = compare.portability([a, b], ["P1", "P2"], ["T", "T"])
        self.assertEqual(hosts, ["P1", "P2"])
        fc = result["T"]["fc"]
        self.assertEqual(fc["app"], [1.0, 1.0])  # the only report on each platform
        self.assertAlmostEqual(fc["pp_app"], 1.0)
        self.assertAlmostEqual(fc["arch"][1], 0.25)
        self.assertAlmostEqual(fc["pp_arch"], 2 / (1 / 0.5 + 1 / 0.25))

    def test_application_efficiency_and_a_missing_platform(self):
        fast = report("P1", 1.0, [("fc", 0.5, 1e9, 5e7)])
        slow = report("P1", 2.0, [("fc", 1.0, 1e9, 5e7)])
        other = report("P2", 3.0, [("fc", 1.5, 1e9, 5e7)])
        hosts, result = compare.portability([fast, slow, other], ["P1", "P1", "P2"],
                                            ["A", "B", "A"])
        self.assertEqual(result["A"][None]["app"], [1.0, 1.0])
        self.assertAlmostEqual(result["A"][None]["pp_app"], 1.0)
        self.assertEqual(result["B"][None]["app"], [0.5, 0.0])  # B has no P2 report
        self.assertEqual(result["B"][None]["pp_app"], 0.0)
        self.assertEqual(result["B"][None]["pp_arch"], 0.0)

    def test_a_failed_platform_zeroes_the_metric(self):
        ok = report("P1", 1.0, [("fc", 0.5, 1e9, 5e7)])
        bad = report("P2", 0, [], status="failed")
        hosts, result = compare.portability([ok, bad], ["P1", "P2"], ["A", "A"])
        self.assertEqual(result["A"][None]["app"], [1.0, 0.0])
        self.assertEqual(result["A"][None]["pp_app"], 0.0)
        self.assertEqual(result["A"]["fc"]["pp_arch"], 0.0)


class Bases(unittest.TestCase):
    def test_architectural_efficiency_takes_the_executed_flops(self):
        # Winograd: 1 GFLOP in the model's direct form, 0.4 GFLOP executed;
        # at 100 GFLOP/s the roofline is 0.004 s (0.01 GB at 10 GB/s: 0.001
        # s), over 0.02 s taken.
        v3 = report("P1", 0.1, [("conv", 0.02, (1e9, 4e8), 1e7)], schema=3)
        self.assertAlmostEqual(compare.architectural_efficiency(v3, "conv"), 0.2)
        # Schema 2 carries model FLOPs only, which stand in.
        v2 = report("P1", 0.1, [("conv", 0.02, 1e9, 1e7)])
        self.assertAlmostEqual(compare.architectural_efficiency(v2, "conv"), 0.5)

    def test_rows_name_their_basis_and_schema_2_lacks_executed(self):
        v2 = report("P1", 0.1, [("conv", 0.02, 1e9, 5e7)])
        v3 = report("P2", 0.1, [("conv", 0.02, (1e9, 4e8), 5e7)], schema=3)
        rows = {}
        for line in compare.table([v3, v2], ["new", "old"]).splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| "):
                rows[cells[0]] = cells[1:]
        # 0.4 GFLOP and 1 GFLOP in 0.1 s; schema 2: "-" executed, 10 model.
        self.assertEqual(rows["training step, executed FLOPs (GFLOP/s)"], ["4.0", "-", "-"])
        self.assertEqual(rows["training step, model FLOPs, direct form (GFLOP/s)"],
                         ["10.0", "10.0", "1.00x"])
        text = compare.portability_table([v3, v2], ["P1", "P2"], ["T", "T"])
        self.assertIn("Reports of schema 2 carry model FLOPs (direct form) only", text)
        self.assertNotIn("Reports of schema",
                         compare.portability_table([v3, v3], ["P1", "P2"], ["T", "T"]))


class CommandLine(unittest.TestCase):
    def run_compare(self, *args):
        out, err = io.StringIO(), io.StringIO()
        saved = sys.argv
        sys.argv = ["tessera-compare", *args]
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                compare.main()
            code = 0
        except SystemExit as e:
            code = e.code
        finally:
            sys.argv = saved
        return code, out.getvalue(), err.getvalue()

    def write(self, directory, name, r):
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            json.dump(r, f)
        return path

    def test_table_kokkos_options_and_mismatched_labels(self):
        with tempfile.TemporaryDirectory() as d:
            a = self.write(d, "a.json", report("P1", 0.1, [("fc", 0.02, 1e9, 5e7)]))
            b = self.write(d, "b.json", report("P2", 0.2, [("fc", 0.04, 1e9, 5e7)]))
            code, out, _ = self.run_compare(a, b, "--kokkos-threads=1")
            self.assertEqual(code, 0)
            self.assertIn("| Tessera 0.1.0 | training step |", out)
            self.assertIn("PP of Tessera 0.1.0, training step: 1.000 (application efficiency)",
                          out)
            code, _, err = self.run_compare(a, b, "--platform", "X")
            self.assertEqual(code, 2)
            self.assertIn("1 --platform for 2 reports", err)
            c = self.write(d, "c.json", dict(report("P1", 0.1, []), run_name="other"))
            code, out, _ = self.run_compare(a, c)
            self.assertIn("Not rated: the reports measure different problems", out)

    def test_version(self):
        code, out, _ = self.run_compare("--version")
        self.assertEqual(code, 0)
        self.assertIn("tessera-compare (Tessera ", out)


if __name__ == "__main__":
    unittest.main()
