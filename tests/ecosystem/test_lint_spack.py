#!/usr/bin/env python3
"""Unit tests of scripts/lint-spack.py's pieces: Spack's version ranges, the
spec syntax it parses, and the YAML subset it reads."""
import importlib.util
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "lint_spack", os.path.join(HERE, "..", "..", "scripts", "lint-spack.py"))
lint = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lint)


class Versions(unittest.TestCase):
    def test_prefix_and_ranges(self):
        sat = lint.version_satisfies
        self.assertTrue(sat("4.7.04", "4"))
        self.assertFalse(sat("5.0.0", "4"))
        self.assertTrue(sat("4.7.04", ":4"))
        self.assertFalse(sat("5.0.0", ":4"))
        self.assertTrue(sat("4.6.01", "4.6:"))
        self.assertFalse(sat("4.5.01", "4.6:"))
        self.assertTrue(sat("4.7.04", "4.6:4"))
        self.assertTrue(sat("5.1.1", "4.7.04:4,5.1:"))
        self.assertFalse(sat("5.0.2", "4.7.04:4,5.1:"))
        self.assertTrue(sat("4.7.04", "=4.7.04"))
        self.assertFalse(sat("4.7.04", "=4.7"))
        self.assertTrue(sat("develop", "4:"))
        self.assertFalse(sat("develop", ":4"))
        self.assertTrue(sat("4.10.00", "4.9:"))  # numeric, not text, order


class Specs(unittest.TestCase):
    def test_nodes(self):
        nodes = lint.parse_spec("kokkos@4.6:+cuda~shared cuda_arch=80 ^[virtuals=blas] openblas "
                                "threads=openmp %cxx=gcc")
        self.assertEqual([n.name for n in nodes], ["kokkos", "openblas", "gcc"])
        self.assertEqual(nodes[0].versions, "4.6:")
        self.assertEqual([(v[0], v[1]) for v in nodes[0].variants],
                         [("cuda", True), ("shared", False), ("cuda_arch", "80")])
        self.assertEqual(nodes[1].virtuals, ["blas"])
        self.assertEqual(nodes[2].virtuals, ["cxx"])

    def test_anonymous(self):
        nodes = lint.parse_spec("+cuda ^kokkos@:4")
        self.assertIsNone(nodes[0].name)
        self.assertEqual(nodes[1].name, "kokkos")
        self.assertEqual(nodes[1].versions, ":4")

    def test_errors(self):
        for bad in ("kokkos ^", "kokkos@4@5", "kokkos openblas"):
            with self.assertRaises(lint.SpecError, msg=bad):
                lint.parse_spec(bad)


class Yaml(unittest.TestCase):
    def read(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
        try:
            return lint.read_yaml(f.name)
        finally:
            os.unlink(f.name)

    def test_environment(self):
        env = self.read("spack:\n  specs:\n  - kokkos +openmp  # comment\n  - 'cmake@3.20:'\n"
                        "  packages:\n    blas:\n      require: [openblas]\n"
                        "  develop:\n    tessera:\n      path: .\n      spec: tessera@=0.1.0\n")
        self.assertEqual(env["spack"]["specs"], ["kokkos +openmp", "cmake@3.20:"])
        self.assertEqual(env["spack"]["packages"]["blas"]["require"], ["openblas"])
        self.assertEqual(env["spack"]["develop"]["tessera"]["spec"], "tessera@=0.1.0")

    def test_unquoted_colon_is_a_mapping(self):
        env = self.read("spack:\n  specs:\n  - cmake@3.16:\n")
        self.assertEqual(env["spack"]["specs"], [{"cmake@3.16": None}])

    def test_bad_indentation(self):
        with self.assertRaises(lint.YamlError):
            self.read("spack:\n  specs:\n  - a\n     - b\n")


if __name__ == "__main__":
    unittest.main()
