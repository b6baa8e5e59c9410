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

    def test_exact_and_propagated_values(self):
        nodes = lint.parse_spec("kokkos-kernels scalars:=float layouts==right ^openblas")
        self.assertEqual([v[:2] for v in nodes[0].variants],
                         [("scalars", "float"), ("layouts", "right")])
        self.assertEqual(nodes[0].variants[0][2], "scalars:=float")
        self.assertEqual(nodes[1].name, "openblas")

    def test_errors(self):
        for bad in ("kokkos ^", "kokkos@4@5", "kokkos openblas"):
            with self.assertRaises(lint.SpecError, msg=bad):
                lint.parse_spec(bad)


def linter(**packages):
    facts = {"packages": {name: dict({"variants": {}}, **f) for name, f in packages.items()}}
    return lint.Linter(facts, "tessera", {"versions": ["0.1.0"], "variants": {}}, "test")


class Couplings(unittest.TestCase):
    """kokkos-kernels@X depends on kokkos@X in its recipe: pins of the two
    that no pair satisfies are an error, pins that some pair satisfies are not."""

    def test_read_from_recipe_directives(self):
        self.assertEqual(lint._version_coupling("kokkos@4.6.02", "@4.6.02"),
                         {"when": "4.6.02", "package": "kokkos", "versions": "4.6.02"})
        self.assertIsNone(lint._version_coupling("kokkos+cuda", "@4"))
        self.assertIsNone(lint._version_coupling("kokkos@4", "+cuda"))
        self.assertIsNone(lint._version_coupling("kokkos@4", None))

    def pair(self, kernels, kokkos):
        versions = ["4.7.00", "4.6.02", "4.6.01", "4.5.01"]
        couplings = [{"when": v, "package": "kokkos", "versions": v} for v in versions]
        linter_ = linter(**{"kokkos": {"versions": versions + ["4.4.00"]},
                            "kokkos-kernels": {"versions": versions, "couplings": couplings}})
        linter_.check_spec(f"kokkos-kernels@{kernels}", "kk", None, always=True)
        linter_.check_spec(f"kokkos@{kokkos}", "k", None, always=True)
        linter_.check_couplings()
        return linter_.problems

    def test_pairs(self):
        self.assertEqual(self.pair("4.6", "4.6.01"), [])
        self.assertEqual(self.pair("4", "4.5"), [])
        problems = self.pair("4.6", "4.5")
        self.assertEqual(len(problems), 1)
        self.assertIn("kokkos-kernels 4.6.02, 4.6.01 (from @4.6 (kk)) cannot go with kokkos "
                      "4.5.01 (from @4.5 (k))", problems[0])
        # Nothing pairs with kokkos 4.4.00.
        self.assertEqual(len(self.pair("4", "4.4.00")), 1)

    def test_conditional_specs_do_not_pin(self):
        linter_ = linter(kokkos={"versions": ["4.6.02", "4.5.01"]})
        linter_.check_spec("kokkos@4.5", "a", None)
        linter_.check_spec("kokkos@4.6", "b", None, always=True)
        linter_.check_couplings()
        self.assertEqual(linter_.problems, [])
        linter_.check_spec("kokkos@4.5", "c", None, always=True)
        linter_.check_couplings()
        self.assertIn("no version of kokkos satisfies all of @4.6 (b); @4.5 (c)",
                      linter_.problems[0])


class Variants(unittest.TestCase):
    def setUp(self):
        self.linter = linter(**{"kokkos-kernels": {"versions": ["4.6.02"], "variants": {
            "scalars": [{"default": "double", "values": ["float", "double"], "multi": True,
                         "when": None}]}}})

    def test_default_kept_beside_requested_value(self):
        self.linter.check_spec("kokkos-kernels scalars=float", "dep", None, bounded=True)
        self.assertIn("keeps kokkos-kernels's default scalars=double", self.linter.problems[0])

    def test_exact_values_and_conflicts_pass(self):
        self.linter.check_spec("kokkos-kernels scalars:=float", "dep", None, bounded=True)
        self.linter.check_spec("kokkos-kernels scalars=double,float", "dep", None, bounded=True)
        self.linter.check_spec("kokkos-kernels scalars=float", "conflict", None)
        self.assertEqual(self.linter.problems, [])

    def test_self_reference(self):
        self.linter.check_self_reference("kokkos+cuda_lambda", "+cuda ^kokkos@:4", "dep")
        self.linter.check_self_reference("kokkos+cuda_lambda", "+cuda", "dep")
        self.linter.check_self_reference("kokkos+openmp", "^[virtuals=blas] openblas", "dep")
        self.assertEqual(len(self.linter.problems), 1)
        self.assertIn("write requires('^kokkos+cuda_lambda'", self.linter.problems[0])


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
