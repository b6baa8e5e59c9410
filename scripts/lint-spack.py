#!/usr/bin/env python3
"""Check Tessera's Spack package and environment against Spack's own recipes.

    python3 scripts/lint-spack.py                      lint spack/ and spack.yaml
    python3 scripts/lint-spack.py --package P --env E  lint other files (the tests do)
    python3 scripts/lint-spack.py --refresh-facts CHECKOUT
        re-read the recipes of a spack/spack-packages checkout into spack/recipe-facts.json

Every spec written in spack/spack_repo/tessera/packages/tessera/package.py (its
depends_on, conflicts, requires and when= clauses) and in spack.yaml (specs,
package requirements, develop entries) is parsed, and each package name,
version (or version range), variant name and variant value it uses is checked
against the facts in spack/recipe-facts.json. A variant that only exists for
some versions (kokkos +cuda_lambda only up to 4.x) must be used with a version
constraint that leaves such a version. Beyond names and values:
  - the version pins that hold in every build (depends_on without when=,
    spack.yaml's specs and plain package requirements) must leave each
    package a version, and a pair of versions the recipes allow together
    (kokkos-kernels@4.6.02 depends on kokkos@4.6.02, so kokkos@4.5 with
    kokkos-kernels@4.6 has no solution);
  - a multi-valued variant asked for with name=v, where the recipe's default
    has other values, keeps them (scalars=float gives scalars:=double,float):
    name:=v asks for exactly v;
  - depends_on("X...", when="... ^X...") is self-referential, which Spack's
    audit rejects (requires("^X...", when=...) says it).
Exit status 0 when everything is known, 1 with one line per problem
otherwise, 2 for a file that cannot be read.

What this is not: Spack's concretizer. It does not solve the environment, so
conflicts between packages, compiler requirements and build failures are not
found here; scripts/spack-check.sh runs Spack's audit and concretizer on a
machine with Spack.

The facts come from executing the recipes' class bodies with a stand-in for
Spack's directive functions (version, variant, depends_on, ...), which records
what each directive declares. No Spack installation is needed for either mode;
Python 3's standard library is.
"""
import argparse
import contextlib
import difflib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PACKAGE = os.path.join(ROOT, "spack", "spack_repo", "tessera", "packages", "tessera",
                               "package.py")
DEFAULT_ENV = os.path.join(ROOT, "spack.yaml")
DEFAULT_FACTS = os.path.join(ROOT, "spack", "recipe-facts.json")

# The recipes whose facts Tessera's package and environment may refer to.
FACT_PACKAGES = ("kokkos", "kokkos-kernels", "kokkos-nvcc-wrapper", "openblas", "openmpi", "hdf5",
                 "googletest", "tomlplusplus", "cli11", "nlohmann-json", "zlib", "zlib-ng",
                 "cmake", "python", "py-matplotlib", "py-numpy", "py-h5py", "py-onnx", "cuda", "hip", "rocblas", "gcc", "mpich",
                 "cray-mpich")
FACT_CLASSES = {"CMakePackage": "cmake", "CudaPackage": "cuda", "ROCmPackage": "rocm"}
# Class attributes of the build-system classes that recipes read in their bodies.
FACT_ATTRIBUTES = {"CudaPackage": ("cuda_arch_values",), "ROCmPackage": ("amdgpu_targets",)}

# Spec keys every package accepts (compiler flags, architecture, bookkeeping).
UNIVERSAL_KEYS = {"cflags", "cxxflags", "fflags", "cppflags", "ldflags", "ldlibs", "target", "os",
                  "platform", "arch", "namespace", "dev_path", "patches", "commit", "build_system"}
# Versions Spack orders above every numbered one.
INFINITE_VERSIONS = ("develop", "main", "master", "head", "trunk", "stable")


# ---------------------------------------------------------------------------
# Versions and version constraints, as Spack orders and matches them.

def version_key(text):
    if text in INFINITE_VERSIONS:
        return ((2, INFINITE_VERSIONS[::-1].index(text)),)
    parts = []
    for piece in re.split(r"[.\-_]", text):
        parts.append((1, int(piece)) if piece.isdigit() else (0, piece))
    return tuple(parts)


def version_satisfies(version, constraint):
    """Does a concrete version lie in a constraint such as 4, =4.7.04, :4, 4.6:, 4.6:4, a,b?"""
    key = version_key(version)

    def prefix_match(bound):
        b = version_key(bound)
        return key[:len(b)] == b

    for part in constraint.split(","):
        part = part.strip()
        if part.startswith("="):
            if version == part[1:]:
                return True
        elif ":" in part:
            low, high = part.split(":", 1)
            if (not low or key >= version_key(low)) and \
                    (not high or key <= version_key(high) or prefix_match(high)):
                return True
        elif part and (version == part or prefix_match(part)):
            return True
    return False


# ---------------------------------------------------------------------------
# Specs: the subset of Spack's spec syntax that recipes and environments use.

class Node:
    def __init__(self, name=None, edge=""):
        self.name = name          # None: the package being described (when= clauses)
        self.edge = edge          # "", "^" (dependency) or "%" (direct, e.g. compiler)
        self.versions = None
        self.variants = []        # (name, value or True/False, written as)
        self.virtuals = []        # from [virtuals=blas] or %cxx=gcc

    def __repr__(self):
        return f"Node({self.edge}{self.name}@{self.versions} {self.variants})"


TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<edge>[\^%])
  | (?P<annotation>\[[^\]]*\])
  | (?P<keyvalue>[A-Za-z_][\w\-]*(?::=|==?)(?:"[^"]*"|'[^']*'|[^\s~^%@\[\]]+))
  | (?P<version>@=?[^\s+~^%@\[\]]+)
  | (?P<flag>(?:\+\+|~~|\+|~)[A-Za-z_][\w\-]*)
  | (?P<name>[A-Za-z_][\w\-.]*)
""", re.VERBOSE)


class SpecError(ValueError):
    pass


def parse_spec(text):
    """A list of nodes: the root (possibly anonymous), then ^ and % nodes in order."""
    nodes = [Node()]
    pending_edge = None
    pending_virtuals = []
    pos = 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            raise SpecError(f"cannot parse '{text[pos:]}' in spec '{text}'")
        pos = m.end()
        kind, value = m.lastgroup, m.group()
        if kind == "ws":
            continue
        if kind == "edge":
            pending_edge, pending_virtuals = value, []
            continue
        if kind == "annotation":
            inner = value[1:-1].strip()
            if inner.startswith("virtuals="):
                pending_virtuals = [v for v in inner[len("virtuals="):].split(",") if v]
            continue
        if pending_edge is not None and kind == "keyvalue":
            # %cxx=gcc: the provider of a virtual, as a direct dependency.
            key, _, provider = value.partition("=")
            node = Node(provider.strip("=\"'"), pending_edge)
            node.virtuals = [key]
            nodes.append(node)
            pending_edge = None
            continue
        if pending_edge is not None:
            if kind != "name":
                raise SpecError(f"'{pending_edge}' must be followed by a package name in '{text}'")
            node = Node(value, pending_edge)
            node.virtuals = pending_virtuals
            nodes.append(node)
            pending_edge = None
            continue
        node = nodes[-1]
        if kind == "name":
            if node.name is not None or node.versions is not None or node.variants:
                raise SpecError(f"unexpected name '{value}' in spec '{text}'")
            node.name = value
        elif kind == "version":
            if node.versions is not None:
                raise SpecError(f"two versions for one node in '{text}'")
            node.versions = value[1:]
        elif kind == "flag":
            on = value[0] == "+"
            node.variants.append((value.lstrip("+~"), on, value))
        elif kind == "keyvalue":
            # name=v (at least v), name:=v (exactly v), name==v (propagated)
            key, _, rest = value.partition("=")
            node.variants.append((key.rstrip(":"), rest.lstrip("=").strip("\"'"), value))
    if pending_edge is not None:
        raise SpecError(f"spec '{text}' ends with '{pending_edge}'")
    return nodes


# ---------------------------------------------------------------------------
# A stand-in for Spack's package API: the directives record what they declare.

_pending = []          # directives run since the last package class was created
_when_stack = []       # enclosing `with when(...)` conditions
_default_args = []     # enclosing `with default_args(...)` keyword arguments


def _condition(when):
    parts = [w for w in _when_stack + [when] if w]
    return " ".join(parts) if parts else None


def _record(kind, args, kwargs):
    merged = {}
    for d in _default_args:
        merged.update(d)
    merged.update(kwargs)
    merged["when"] = _condition(merged.get("when"))
    _pending.append((kind, args, merged))


class AnyCombinationOf:
    """values=any_combination_of(...): several values, or 'none'."""

    def __init__(self, *values):
        self.values = ("none",) + tuple(values)


class DisjointSets(AnyCombinationOf):
    def __init__(self, *sets):
        flat = []
        for s in sets:
            flat += list(s)
        self.values = tuple(flat)

    def with_default(self, *args, **kwargs):
        return self

    def with_error(self, *args, **kwargs):
        return self

    def with_non_feature_values(self, *args, **kwargs):
        return self


class _When:
    """when(...) is a context manager in class bodies and a method decorator."""

    def __init__(self, condition):
        self.condition = condition

    def __enter__(self):
        _when_stack.append(self.condition)

    def __exit__(self, *exc):
        _when_stack.pop()

    def __call__(self, function):
        return function


class Dummy:
    """Anything a recipe touches that does not matter for its declarations."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return Dummy()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Dummy()

    def __iter__(self):
        return iter(())

    def __getitem__(self, item):
        return Dummy()

    def __or__(self, other):
        return self


class _StandInBase:
    def __init__(self, *args, **kwargs):
        pass

    def __class_getitem__(cls, item):
        return cls

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Dummy()


def _stand_in(name):
    """A class for a capitalised name (recipes derive from those), else a Dummy."""
    if name[:1].isupper():
        return type(name, (_StandInBase,), {})
    return Dummy()


class PackageMeta(type):
    """Collects the directives that ran in a class body (and its bases')."""

    def __new__(mcs, name, bases, namespace):
        global _pending
        own, _pending = _pending, []
        cls = super().__new__(mcs, name, bases, namespace)
        inherited = []
        for base in bases:
            inherited += getattr(base, "_directives", [])
        cls._directives = inherited + own
        cls.versions = {VersionText(args[0]): kw for kind, args, kw in cls._directives
                        if kind == "version"}
        return cls


class VersionText(str):
    pass


class PackageBase(metaclass=PackageMeta):
    pass


def _directive(kind):
    def record(*args, **kwargs):
        _record(kind, args, kwargs)
    record.__name__ = kind
    return record


def _make_spack_package_module():
    module = types.ModuleType("spack.package")
    directives = ("version", "variant", "depends_on", "conflicts", "requires", "provides",
                  "patch", "resource", "extends", "maintainers", "license", "build_system",
                  "redistribute", "can_splice", "filter_compiler_wrappers", "requires_compiler")
    for kind in directives:
        setattr(module, kind, _directive(kind))
    module.when = _When
    module.default_args = contextlib.contextmanager(_default_args_context)
    module.any_combination_of = AnyCombinationOf
    module.auto_or_any_combination_of = AnyCombinationOf
    module.disjoint_sets = DisjointSets
    module.conditional = lambda *values, **kw: tuple(values)
    module.join_path = os.path.join
    module.PackageBase = PackageBase
    for base in ("Package", "BundlePackage"):
        setattr(module, base, PackageMeta(base, (PackageBase,), {}))
    for base in ("BuilderWithDefaults", "Builder", "InstallError",
                 "SpackError", "Version", "Prefix", "Spec", "Executable", "ProcessError",
                 "EnvironmentModifications"):
        setattr(module, base, type(base, (Exception,) if "Error" in base else (), {
            "__init__": lambda self, *a, **k: None}))
    for name in ("run_after", "run_before", "on_package_attributes", "memoized",
                 "cache_extra_test_sources", "install_test_root", "working_dir", "which",
                 "spack_cxx", "spack_cc", "spack_fc", "spack_f77", "tty", "dedupe", "find",
                 "find_libraries", "filter_file", "mkdirp", "install", "install_tree",
                 "get_cmake_prefix_path", "register_builder", "LibraryList", "HeaderList",
                 "env", "Executable", "ProcessError", "is_system_path", "force_remove"):
        if not hasattr(module, name):
            setattr(module, name, Dummy())
    module.__getattr__ = _stand_in
    module.__all__ = [n for n in vars(module) if not n.startswith("_")]
    return module


def _default_args_context(**kwargs):
    _default_args.append(kwargs)
    try:
        yield
    finally:
        _default_args.pop()


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """spack.* and llnl.* become stand-ins; spack.package is the recorder above.
    Build-system modules can be stand-ins too, made from recorded facts."""

    def __init__(self, build_systems=None):
        self.spack_package = _make_spack_package_module()
        self.build_systems = build_systems or {}

    def find_spec(self, fullname, path, target=None):
        if fullname in ("spack", "llnl") or fullname.startswith(("spack.", "llnl.")) \
                or fullname in self.build_systems \
                or (self.build_systems and fullname in ("spack_repo", "spack_repo.builtin",
                                                        "spack_repo.builtin.build_systems")):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        if spec.name == "spack.package":
            return self.spack_package
        if spec.name in self.build_systems:
            return self.build_systems[spec.name]
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _stand_in
        return module

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def stand_ins(build_systems=None):
    finder = _StandIns(build_systems)
    saved = {k: v for k, v in sys.modules.items()
             if k.split(".")[0] in ("spack", "llnl", "spack_repo")}
    for k in saved:
        del sys.modules[k]
    sys.meta_path.insert(0, finder)
    try:
        yield finder.spack_package
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k.split(".")[0] in ("spack", "llnl", "spack_repo")]:
            del sys.modules[k]
        sys.modules.update(saved)


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def package_class(module):
    classes = [v for v in vars(module).values()
               if isinstance(v, PackageMeta) and v.__module__ == module.__name__]
    if not classes:
        raise SpecError(f"{module.__file__}: no package class")
    return classes[-1]


# ---------------------------------------------------------------------------
# Facts: what a recipe declares, in JSON.

def _values_json(values):
    if values is None:
        return [True, False]
    if isinstance(values, AnyCombinationOf):
        return list(values.values)
    if callable(values):
        return None  # a validator function: any value
    return list(values)


def facts_of(cls):
    versions, deprecated, variants, provides, couplings = [], [], {}, [], []
    for kind, args, kw in cls._directives:
        if kind == "version":
            versions.append(str(args[0]))
            if kw.get("deprecated"):
                deprecated.append(str(args[0]))
        elif kind == "variant":
            name = args[0]
            values = _values_json(kw.get("values"))
            default = kw.get("default")
            if values == [True, False] and default is None:
                default = False
            if values is not None and values != [True, False]:
                values = [str(v) for v in values]
            multi = kw.get("multi")
            if multi is None:
                multi = isinstance(kw.get("values"), AnyCombinationOf)
            variants.setdefault(name, []).append({
                "default": default if isinstance(default, (bool, type(None))) else str(default),
                "values": values, "multi": bool(multi), "when": kw.get("when")})
        elif kind == "provides":
            for virtual in args:
                provides.append({"virtual": parse_spec(virtual)[0].name, "when": kw.get("when")})
        elif kind == "depends_on":
            coupling = _version_coupling(args[0], kw.get("when"))
            if coupling:
                couplings.append(coupling)
    out = {"versions": versions, "variants": variants}
    if deprecated:
        out["deprecated"] = deprecated
    if provides:
        out["provides"] = provides
    if couplings:
        out["couplings"] = couplings
    return out


def _version_coupling(dependency, when):
    """depends_on("kokkos@4.6.02", when="@4.6.02"): a version of this package
    that needs certain versions of another package with facts."""
    try:
        condition = parse_spec(when) if when else None
        needed = parse_spec(dependency)
    except SpecError:
        return None
    if not condition or len(condition) != 1 or condition[0].name or condition[0].variants \
            or condition[0].versions is None:
        return None
    if len(needed) != 1 or needed[0].name not in FACT_PACKAGES or needed[0].versions is None:
        return None
    return {"when": condition[0].versions, "package": needed[0].name,
            "versions": needed[0].versions}


def _import_recipe(module_name):
    """Import a recipe; a name it takes from Spack's API that the stand-in lacks
    (host_platform, say) becomes a Dummy and the import is tried again."""
    spack_package = sys.modules["spack.package"]
    for _ in range(50):
        try:
            return importlib.import_module(module_name)
        except NameError as e:
            missing = getattr(e, "name", None)
            if not missing or missing in vars(spack_package):
                raise
            setattr(spack_package, missing, Dummy())
            spack_package.__all__.append(missing)
            sys.modules.pop(module_name, None)
            global _pending
            _pending = []
    raise SpecError(f"{module_name}: too many names missing from the stand-in")


def refresh_facts(checkout, facts_path):
    repos = os.path.join(checkout, "repos")
    builtin = os.path.join(repos, "spack_repo", "builtin")
    if not os.path.isfile(os.path.join(builtin, "repo.yaml")):
        sys.exit(f"lint-spack: {checkout}: no repos/spack_repo/builtin/repo.yaml; give a "
                 "spack/spack-packages checkout")
    try:
        commit = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
        date = subprocess.run(["git", "-C", checkout, "log", "-1", "--format=%cs"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit, date = "unknown", "unknown"
    facts = {"source": {"repository": "https://github.com/spack/spack-packages",
                        "commit": commit, "date": date,
                        "how": "python3 scripts/lint-spack.py --refresh-facts <checkout>"},
             "classes": {}, "packages": {}}
    sys.path.insert(0, repos)
    try:
        with stand_ins():
            for cls_name, module_name in FACT_CLASSES.items():
                module = importlib.import_module(f"spack_repo.builtin.build_systems.{module_name}")
                cls = getattr(module, cls_name)
                entry = facts_of(cls)
                for attr in FACT_ATTRIBUTES.get(cls_name, ()):
                    entry[attr] = list(getattr(cls, attr))
                facts["classes"][cls_name] = entry
            for name in FACT_PACKAGES:
                module = _import_recipe(
                    f"spack_repo.builtin.packages.{name.replace('-', '_')}.package")
                facts["packages"][name] = facts_of(package_class(module))
    finally:
        sys.path.remove(repos)
    with open(facts_path, "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"lint-spack: wrote {facts_path} from {checkout} at {commit[:12]} ({date})")


# ---------------------------------------------------------------------------
# Lint.

class Linter:
    def __init__(self, facts, self_name, self_facts, where):
        self.facts = facts
        self.packages = dict(facts["packages"])
        self.packages[self_name] = self_facts
        self.self_name = self_name
        self.virtuals = {}
        for name, f in self.packages.items():
            for p in f.get("provides", []):
                self.virtuals.setdefault(p["virtual"], []).append(name)
        # Language virtuals every compiler package provides.
        for v in ("c", "cxx", "fortran"):
            self.virtuals.setdefault(v, []).append("gcc")
        self.problems = []
        self.where = where
        # package -> [(version constraint, origin)] that hold in every build
        self.pinned = {}

    def problem(self, origin, message):
        self.problems.append(f"{origin}: {message}")

    def check_spec(self, text, origin, context, bounded=False, always=False):
        """context: the package an anonymous root node refers to. bounded: the
        spec asks for a dependency (not a conflict), so a Kokkos version it
        allows must lie in the range cmake/TesseraKokkos.cmake supports.
        always: the spec holds in every build (no when=), so its versions
        take part in check_couplings."""
        try:
            nodes = parse_spec(text)
        except SpecError as e:
            self.problem(origin, str(e))
            return
        for node in nodes:
            name = node.name or context
            if name is None:
                if node.versions or node.variants:
                    self.problem(origin, f"'{text}': an anonymous spec outside a package")
                continue
            name = name.split(".")[-1]  # builtin.kokkos -> kokkos
            if name in self.virtuals and name not in self.packages:
                if node.variants:
                    self.problem(origin, f"'{text}': virtual '{name}' has no variants")
                continue
            if name not in self.packages:
                close = difflib.get_close_matches(name, list(self.packages) + list(self.virtuals),
                                                  1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.problem(origin, f"'{text}': unknown package '{name}'{hint}; the known ones "
                             "are in spack/recipe-facts.json")
                continue
            facts = self.packages[name]
            for v in node.virtuals:
                if v not in self.virtuals or name not in self.virtuals[v]:
                    self.problem(origin, f"'{text}': {name} does not provide '{v}'")
            if node.versions is not None:
                self.check_versions(text, origin, name, facts, node.versions)
                if always:
                    self.pinned.setdefault(name, []).append((node.versions, origin))
                if bounded and name in ("kokkos", "kokkos-kernels"):
                    self.check_kokkos_range(text, origin, name, facts, node.versions)
            for variant, value, written in node.variants:
                self.check_variant(text, origin, name, facts, node.versions, variant, value,
                                   written, bounded)

    def check_versions(self, text, origin, name, facts, constraint):
        versions = facts["versions"]
        if not versions:
            return
        for part in constraint.split(","):
            if not any(version_satisfies(v, part) for v in versions):
                self.problem(origin, f"'{text}': no version of {name} matches '@{part}' (known: "
                             f"{', '.join(versions[:12])}{', ...' if len(versions) > 12 else ''})")

    def check_self_reference(self, dependency, when, origin):
        """depends_on("kokkos+cuda_lambda", when="^kokkos@:4") lets the solver
        drop the condition instead of meeting the dependency; Spack's audit
        rejects it as self-referential."""
        try:
            name = parse_spec(dependency)[0].name
            named = [n.name for n in parse_spec(when)[1:] if not n.virtuals] if when else []
        except SpecError:
            return  # reported by check_spec
        if name in named:
            self.problem(origin, f"depends_on('{dependency}') when '{when}' is self-referential "
                         f"(Spack's audit rejects it); write requires('^{dependency}', "
                         f"when='{when}')")

    def allowed_versions(self, name):
        """The versions of a package that every pinned constraint leaves, as
        Spack would pick them (deprecated ones only when asked for by name)."""
        facts = self.packages[name]
        pins = self.pinned.get(name, [])
        deprecated = set(facts.get("deprecated", []))
        return [v for v in facts["versions"]
                if all(version_satisfies(v, c) for c, _ in pins)
                and (v not in deprecated or any(c.lstrip("=") == v for c, _ in pins))]

    def check_couplings(self):
        """Versions that cannot go together: kokkos-kernels@4.6.02 depends on
        kokkos@4.6.02 in its recipe, so pinning kokkos@4.5 with
        kokkos-kernels@4.6 leaves Spack no solution."""
        for name in sorted(self.pinned):
            if name not in self.packages:
                continue
            pins = "; ".join(f"@{c} ({o})" for c, o in self.pinned[name])
            allowed = self.allowed_versions(name)
            if not allowed:
                self.problem(name, f"no version of {name} satisfies all of {pins}")
                continue
            by_package = {}
            for c in self.packages[name].get("couplings", []):
                if c["package"] in self.pinned and c["package"] in self.packages:
                    by_package.setdefault(c["package"], []).append(c)
            for other, couplings in sorted(by_package.items()):
                others = self.allowed_versions(other)
                if not others:
                    continue  # reported on its own
                if any(all(version_satisfies(w, c["versions"]) for c in couplings
                           if version_satisfies(v, c["when"]))
                       for v in allowed for w in others):
                    continue
                example = next((c for c in couplings if version_satisfies(allowed[0], c["when"])),
                               None)
                why = (f"its recipe makes {name}@{example['when']} depend on "
                       f"{other}@{example['versions']}" if example else "")
                other_pins = "; ".join(f"@{c} ({o})" for c, o in self.pinned[other])
                self.problem(name, f"{name} {', '.join(allowed)} (from {pins}) cannot go with "
                             f"{other} {', '.join(others)} (from {other_pins}): {why}; pin "
                             "versions that the recipes pair")

    def check_kokkos_range(self, text, origin, name, facts, constraint):
        low, high = kokkos_range()
        if low is None:
            self.problem(origin, "cannot read the supported Kokkos range from "
                         "cmake/TesseraKokkos.cmake")
            return
        outside = [v for v in facts["versions"] if version_satisfies(v, constraint)
                   and v not in INFINITE_VERSIONS
                   and not (version_key(low) <= version_key(v) < version_key(high))]
        if outside:
            self.problem(origin, f"'{text}' allows {name} {', '.join(outside)}, outside the "
                         f"range Tessera supports ({low} up to, not including, {high}; "
                         "cmake/TesseraKokkos.cmake)")

    def check_variant(self, text, origin, name, facts, constraint, variant, value, written,
                      bounded=False):
        if variant in UNIVERSAL_KEYS:
            return
        declared = facts["variants"].get(variant)
        if not declared:
            close = difflib.get_close_matches(variant, list(facts["variants"]), 1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            self.problem(origin, f"'{text}': {name} has no variant '{variant}'{hint}")
            return
        if isinstance(value, bool):
            if not any(d["values"] == [True, False] for d in declared):
                self.problem(origin, f"'{text}': {name} variant '{variant}' is not on/off; write "
                             f"{variant}=<value>")
                return
        else:
            candidates = [d for d in declared if d["values"] != [True, False]]
            if not candidates:
                if value.lower() not in ("true", "false"):
                    self.problem(origin, f"'{text}': {name} variant '{variant}' is on/off; write "
                                 f"+{variant} or ~{variant}")
                    return
                candidates = declared
            values = value.split(",")
            ok = False
            for d in candidates:
                if d["values"] is None:
                    ok = True
                    break
                if len(values) > 1 and not d["multi"]:
                    continue
                if all(v in d["values"] or v.lower() in ("true", "false") for v in values):
                    ok = True
                    break
            if not ok:
                allowed = sorted({v for d in candidates for v in (d["values"] or [])})
                self.problem(origin, f"'{text}': {name} {variant}={value} is not allowed "
                             f"(allowed: {', '.join(map(str, allowed))})")
                return
            # name=v on a multi-valued variant asks for v besides the
            # default: kokkos-kernels scalars=float concretizes to
            # scalars:=double,float. Only name:=v gives exactly v.
            kept = [d for d in candidates if d["multi"] and isinstance(d["default"], str)]
            extra = sorted({x for d in kept for x in d["default"].split(",")} - set(values) -
                           {"none"})
            if bounded and ":=" not in written and "==" not in written and extra:
                self.problem(origin, f"'{text}': {written} keeps {name}'s default "
                             f"{variant}={','.join(extra)} beside it; write "
                             f"{variant}:={value} for exactly {value}")
                return
        # A variant declared only for some versions must leave such a version.
        if constraint is None:
            return
        versions = [v for v in facts["versions"] if version_satisfies(v, constraint)]
        for d in declared:
            when_versions = None
            if d["when"]:
                try:
                    when_versions = parse_spec(d["when"])[0].versions
                except SpecError:
                    when_versions = None
            if when_versions is None or any(version_satisfies(v, when_versions) for v in versions):
                return
        whens = "; ".join(d["when"] for d in declared)
        self.problem(origin, f"'{text}': {name} has '{variant}' only when {whens}, and no version "
                     f"in @{constraint} is such a version")


def lint_package(path, facts):
    """Run Tessera's recipe against stand-in base classes built from the facts."""
    build_systems = {}
    for cls_name, module_name in FACT_CLASSES.items():
        entry = facts["classes"][cls_name]
        namespace = {attr: tuple(entry[attr]) for attr in FACT_ATTRIBUTES.get(cls_name, ())}
        module = types.ModuleType(f"spack_repo.builtin.build_systems.{module_name}")
        build_systems[module.__name__] = (module, cls_name, entry, namespace)
    modules = {}
    with stand_ins({k: v[0] for k, v in build_systems.items()}):
        for module_name, (module, cls_name, entry, namespace) in build_systems.items():
            for name, declared in entry["variants"].items():
                for d in declared:
                    _record("variant", (name,), {"default": d["default"],
                                                 "values": tuple(d["values"]) if d["values"]
                                                 and d["values"] != [True, False] else None,
                                                 "multi": d["multi"], "when": d["when"]})
            cls = PackageMeta(cls_name, (PackageBase,), dict(namespace))
            setattr(module, cls_name, cls)
            modules[module_name] = module
        try:
            recipe = load_module(path, "spack_repo.tessera.packages.tessera.package")
        except SyntaxError as e:
            raise SpecError(f"{path}:{e.lineno}: {e.msg}")
        cls = package_class(recipe)
    return cls


def shown(path):
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def project_version():
    """The VERSION of project() in CMakeLists.txt, which package.py must offer."""
    try:
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            m = re.search(r"project\(\s*Tessera\s+VERSION\s+([0-9.]+)", f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def kokkos_range():
    """(min, max exclusive) from cmake/TesseraKokkos.cmake, the one statement of it."""
    try:
        with open(os.path.join(ROOT, "cmake", "TesseraKokkos.cmake")) as f:
            text = f.read()
    except OSError:
        return None, None
    low = re.search(r"set\(Tessera_KOKKOS_MIN_VERSION\s+([0-9.]+)\)", text)
    high = re.search(r"set\(Tessera_KOKKOS_MAX_VERSION\s+([0-9.]+)\)", text)
    return (low.group(1), high.group(1)) if low and high else (None, None)


def lint(package_path, env_path, facts_path):
    try:
        with open(facts_path) as f:
            facts = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        print(f"lint-spack: cannot read {facts_path}: {e}", file=sys.stderr)
        return 2
    try:
        cls = lint_package(package_path, facts)
    except OSError as e:
        print(f"lint-spack: cannot read {package_path}: {e.strerror}", file=sys.stderr)
        return 2
    except Exception as e:  # the recipe itself failed to run
        print(f"lint-spack: {package_path}: the recipe does not load: {e}", file=sys.stderr)
        return 1
    self_facts = facts_of(cls)
    linter = Linter(facts, "tessera", self_facts, package_path)
    rel = shown(package_path)
    version = project_version()
    if version and version not in self_facts["versions"]:
        linter.problem(rel, f"CMakeLists.txt says Tessera {version}, and the recipe has no "
                       f"version('{version}') (it has: {', '.join(self_facts['versions'])})")
    for kind, args, kw in cls._directives:
        if kind in ("variant", "version", "maintainers", "license", "build_system", "patch",
                    "redistribute", "filter_compiler_wrappers"):
            if kind == "variant" and kw.get("when"):
                linter.check_spec(kw["when"], f"{rel}: variant '{args[0]}' when=", "tessera")
            continue
        origin = f"{rel}: {kind}({', '.join(repr(a) for a in args)})"
        if kind == "depends_on":
            linter.check_spec(args[0], origin, None, bounded=True, always=not kw.get("when"))
            linter.check_self_reference(args[0], kw.get("when"), origin)
        elif kind in ("conflicts", "requires"):
            for a in args:
                linter.check_spec(a, origin, "tessera")
        elif kind == "provides":
            for a in args:
                linter.check_spec(a, origin, None)
        if kw.get("when"):
            linter.check_spec(kw["when"], origin + " when=", "tessera")
    try:
        env = read_yaml(env_path)
    except OSError as e:
        print(f"lint-spack: cannot read {env_path}: {e.strerror}", file=sys.stderr)
        return 2
    except YamlError as e:
        print(f"lint-spack: {shown(env_path)}:{e}", file=sys.stderr)
        return 1
    lint_env(linter, env, shown(env_path), os.path.dirname(os.path.abspath(env_path)))
    linter.check_couplings()
    for p in linter.problems:
        print(f"lint-spack: {p}")
    if linter.problems:
        print(f"lint-spack: {len(linter.problems)} problem(s); facts from spack-packages "
              f"{facts['source']['commit'][:12]} ({facts['source']['date']})", file=sys.stderr)
        return 1
    specs = sum(1 for k, *_ in cls._directives if k in ("depends_on", "conflicts", "requires"))
    print(f"lint-spack: OK: {specs} directives in {rel} and the specs in "
          f"{shown(env_path)} match spack-packages {facts['source']['commit'][:12]} "
          f"({facts['source']['date']}); concretization not run")
    return 0


def lint_env(linter, env, origin, env_dir):
    spack = env.get("spack") if isinstance(env, dict) else None
    if not isinstance(spack, dict):
        linter.problem(origin, "no top-level 'spack:' mapping")
        return
    repos = spack.get("repos") or {}
    if not isinstance(repos, dict) or "tessera" not in repos:
        linter.problem(origin, "repos: has no 'tessera' entry (spack/spack_repo/tessera)")
    else:
        repo_yaml = os.path.join(env_dir, str(repos["tessera"]), "repo.yaml")
        try:
            namespace = (read_yaml(repo_yaml).get("repo") or {}).get("namespace")
        except (OSError, YamlError, AttributeError):
            namespace = None
        if namespace != "tessera":
            linter.problem(origin, f"repos: tessera: {repo_yaml} is not a repository with "
                           "namespace 'tessera'")
    specs = spack.get("specs", [])
    if not isinstance(specs, list):
        linter.problem(origin, "'specs' must be a list")
        specs = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, str):
            linter.problem(origin, f"specs[{i}] is {type(spec).__name__}, not a string (a spec "
                           "ending in ':' must be quoted)")
            continue
        linter.check_spec(spec, f"{origin}: specs[{i}]", None, bounded=True, always=True)
    for name, entry in (spack.get("packages") or {}).items():
        if not isinstance(entry, dict):
            linter.problem(origin, f"packages:{name} must be a mapping")
            continue
        context = None if name == "all" else name
        for key in ("require", "prefer"):
            items = entry.get(key, [])
            items = items if isinstance(items, list) else [items]
            for item in items:
                texts = item.get("one_of", []) + item.get("any_of", []) + \
                    ([item["spec"]] if "spec" in item else []) if isinstance(item, dict) \
                    else [item]
                # A plain requirement holds in every build; a choice or a
                # conditional one does not.
                always = key == "require" and (not isinstance(item, dict) or (
                    "spec" in item and not item.get("when")))
                for t in texts:
                    if isinstance(t, str):
                        linter.check_spec(t, f"{origin}: packages:{name}:{key}", context,
                                          bounded=True, always=always)
                if isinstance(item, dict) and item.get("when"):
                    linter.check_spec(item["when"], f"{origin}: packages:{name}:{key} when",
                                      context)
        if "variants" in entry:
            v = entry["variants"]
            for t in (v if isinstance(v, list) else [v]):
                linter.check_spec(str(t), f"{origin}: packages:{name}:variants", context)
        if "version" in entry:
            for t in entry["version"]:
                linter.check_spec(f"{context}@{t}" if context else f"@{t}",
                                  f"{origin}: packages:{name}:version", None)
        providers = entry.get("providers", {})
        for virtual, names in providers.items():
            for p in names:
                linter.check_spec(p, f"{origin}: packages:{name}:providers:{virtual}", None)
    for name, entry in (spack.get("develop") or {}).items():
        if not isinstance(entry, dict) or "spec" not in entry:
            linter.problem(origin, f"develop:{name} needs a 'spec:'")
            continue
        linter.check_spec(entry["spec"], f"{origin}: develop:{name}", None)
        try:
            if parse_spec(entry["spec"])[0].name != name:
                linter.problem(origin, f"develop:{name}: the spec names another package")
        except SpecError:
            pass
        roots = [s for s in specs if isinstance(s, str) and s.split("@")[0].split()[0] == name]
        if not roots:
            linter.problem(origin, f"develop:{name}: no spec in specs: builds {name}")


# ---------------------------------------------------------------------------
# YAML: the block-style subset environments are written in (mappings, lists,
# plain and quoted scalars, comments). PyYAML is not in the standard library.

class YamlError(ValueError):
    pass


def read_yaml(path):
    with open(path) as f:
        text = f.read()
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = _strip_comment(raw).rstrip()
        if stripped.strip():
            if "\t" in raw[:len(raw) - len(raw.lstrip())]:
                raise YamlError(f"{number}: tab in indentation")
            lines.append((number, len(stripped) - len(stripped.lstrip()), stripped.strip()))
    value, pos = _yaml_block(lines, 0, 0)
    if pos != len(lines):
        raise YamlError(f"{lines[pos][0]}: unexpected indentation")
    return value


def _strip_comment(line):
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(text, number):
    text = text.strip()
    if text[:1] in "\"'":
        if len(text) < 2 or text[-1] != text[0]:
            raise YamlError(f"{number}: unterminated quoted string")
        return text[1:-1]
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    if text in ("", "null", "~"):
        return None
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(t, number) for t in text[1:-1].split(",") if t.strip()]
    if text.startswith("{"):
        raise YamlError(f"{number}: flow mappings are not supported here")
    return text


def _split_key(text, number):
    m = re.match(r"""^("[^"]*"|'[^']*'|[^\s:"'][^:]*?)\s*:(?:\s+(.*)|$)""", text)
    if not m:
        return None
    key = m.group(1).strip("\"'")
    return key, m.group(2)


def _yaml_block(lines, pos, indent):
    if pos >= len(lines):
        return None, pos
    number, ind, text = lines[pos]
    if ind < indent:
        return None, pos
    if text.startswith("- ") or text == "-":
        items = []
        while pos < len(lines) and lines[pos][1] == ind and (lines[pos][2].startswith("- ")
                                                             or lines[pos][2] == "-"):
            number, _, text = lines[pos]
            rest = text[1:].strip()
            if not rest:
                value, pos = _yaml_block(lines, pos + 1, ind + 1)
            elif _split_key(rest, number) and not rest[:1] in "\"'":
                # "- key: value" starts a mapping inside the list item.
                sub_indent = ind + 2
                lines[pos] = (number, sub_indent, rest)
                value, pos = _yaml_block(lines, pos, sub_indent)
            else:
                value, pos = _scalar(rest, number), pos + 1
            items.append(value)
        return items, pos
    mapping = {}
    while pos < len(lines) and lines[pos][1] == ind:
        number, _, text = lines[pos]
        if text.startswith("- "):
            raise YamlError(f"{number}: a list item where a key was expected")
        split = _split_key(text, number)
        if not split:
            raise YamlError(f"{number}: expected 'key: value', found '{text}' (a spec ending in "
                            "':' must be quoted)")
        key, rest = split
        if key in mapping:
            raise YamlError(f"{number}: duplicate key '{key}'")
        if rest is None or rest == "":
            if pos + 1 < len(lines) and lines[pos + 1][1] > ind:
                value, pos = _yaml_block(lines, pos + 1, lines[pos + 1][1])
            elif pos + 1 < len(lines) and lines[pos + 1][1] == ind and \
                    lines[pos + 1][2].startswith("- "):
                value, pos = _yaml_block(lines, pos + 1, ind)  # list at the key's indent
            else:
                value, pos = None, pos + 1
        else:
            value, pos = _scalar(rest, number), pos + 1
        mapping[key] = value
    if pos < len(lines) and lines[pos][1] > ind:
        raise YamlError(f"{lines[pos][0]}: unexpected indentation")
    return mapping, pos


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default=DEFAULT_PACKAGE, help="package.py to lint")
    parser.add_argument("--env", default=DEFAULT_ENV, help="spack.yaml to lint")
    parser.add_argument("--facts", default=DEFAULT_FACTS, help="recipe facts (JSON)")
    parser.add_argument("--refresh-facts", metavar="CHECKOUT",
                        help="re-read the facts from a spack/spack-packages checkout")
    args = parser.parse_args()
    if args.refresh_facts:
        refresh_facts(args.refresh_facts, args.facts)
        return 0
    return lint(args.package, args.env, args.facts)


if __name__ == "__main__":
    sys.exit(main())
