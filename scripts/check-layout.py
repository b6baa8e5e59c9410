#!/usr/bin/env python3
"""The shape of the source tree, checked from the files themselves.

  check-layout.py ladder ROOT   the folders of include/tessera and src form
                                the ladder of docs/architecture.md: every
                                #include <tessera/FOLDER/...> names the
                                including file's own folder or one below it,
                                so no folder cycle can form
  check-layout.py sizes ROOT    no function longer than 80 lines and no file
                                longer than 600 in src/, include/ and apps/,
                                except the ones listed in
                                scripts/layout-exceptions.txt, which may
                                only shrink (an entry that no longer exceeds
                                its limit is an error too)
  check-layout.py mpi ROOT      no MPI function is called in src/,
                                include/ and apps/ outside
                                src/parallel/communicator.cpp (the MPI
                                calls of tessera::Communicator) and MPI's
                                start and end in src/core/runtime.cpp
  check-layout.py host_paths ROOT
                                no kernel branches on the host outside the
                                one predicate of include/tessera/core/
                                host_paths.hpp (host_fast_paths_v, and
                                TESSERA_HOST_VECTORS for vector types):
                                no preprocessor test of a host backend or
                                instruction set and no type test of a host
                                space in src/, include/ and apps/, except
                                where HOST_TESTS_ALLOWED says why
  check-layout.py launches ROOT every kernel in src/ and include/ is
                                launched through include/tessera/kernels/
                                impl/launch.hpp with the work it does:
                                no Kokkos::parallel_for, _reduce or _scan
                                at the top level (a team's nested ranges
                                are no launch) and no compat::gemm
                                elsewhere
  check-layout.py instances ROOT
                                below the trainer (src/ and include/
                                tessera/ of layers, model, optim,
                                parallel and train) no code makes an
                                execution space instance of its own
                                (ExecSpace(), ExecSpace{} or a local
                                `const ExecSpace exec;`): kernels run on
                                the instance they are given (the model's,
                                StepContext::exec), except where
                                INSTANCES_ALLOWED says why
  check-layout.py self-test     the checks fail on planted trees (a
                                back-edge, a cycle, a long function, a
                                direct MPI call, a host-only branch, a
                                direct launch, an instance made below
                                the trainer)

Exit status: 0 when the tree holds, 1 with one line per violation
(file:line and what to change) when it does not, 2 on bad usage.
"""

import os
import re
import shutil
import sys
import tempfile

LADDER_DOC = "docs/architecture.md"
EXCEPTIONS = "scripts/layout-exceptions.txt"
FUNCTION_LINES = 80
FILE_LINES = 600
INCLUDE = re.compile(r'^\s*#\s*include\s*<tessera/([a-z_]+)/([^>]+)>', re.M)
# A call of an MPI function (MPI_Allreduce(, PMPI_Send(, MPIX_Query_cuda_support().
MPI_CALL = re.compile(r"\b(P?MPIX?_[A-Z][a-z0-9_]*)\s*\(")
# MPI's handle types, which a functional cast could write like a call.
MPI_TYPES = {"MPI_Aint", "MPI_Comm", "MPI_Count", "MPI_Datatype", "MPI_Errhandler", "MPI_File",
             "MPI_Fint", "MPI_Group", "MPI_Info", "MPI_Message", "MPI_Offset", "MPI_Op",
             "MPI_Request", "MPI_Session", "MPI_Status", "MPI_Win"}
# The files that may call MPI, and which functions (None: any).
MPI_ALLOWED = {
    # tessera::Communicator and its request lists: every other file goes through them.
    "src/parallel/communicator.cpp": None,
    # tessera::Runtime starts and ends MPI, and aborts the job when a rank's
    # CPU lacks the build's vector instructions; core/ sits below parallel/
    # on the ladder.
    "src/core/runtime.cpp": {"MPI_Initialized", "MPI_Init_thread", "MPI_Comm_rank",
                             "MPI_Comm_size", "MPI_Finalized", "MPI_Finalize", "MPI_Abort"},
}

# A preprocessor test of a host backend or a host instruction set.
HOST_MACRO = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif)\b[^\n]*?\b"
                        r"(KOKKOS_ENABLE_(?:OPENMP|SERIAL|THREADS|HPX)|__(?:AVX|SSE|F16C|FMA)\w*"
                        r"|__x86_64__|__GNUC__)", re.M)
# A type test of a host space: whether a space is OpenMP, Serial or Threads,
# or whether an execution space reaches host memory.
HOST_TYPE = re.compile(r"\bis_same(?:_v)?<[^;{}]*\bKokkos::(?:OpenMP|Serial|Threads|HPX)\b"
                       r"|\bSpaceAccessibility<\s*\w*(?:ExecSpace|Exec|Space)\s*,\s*"
                       r"(?:Kokkos::)?HostSpace\s*>")
# Where a host test is not a kernel path, and why (file: the tokens it may test).
HOST_TESTS_ALLOWED = {
    # The predicate itself.
    "include/tessera/core/host_paths.hpp": {"__GNUC__", "SpaceAccessibility"},
    # thread_gemm_space_v: host_fast_paths_v and a space whose threads may each call the BLAS.
    "include/tessera/kernels/impl/thread_gemm.hpp": {"KOKKOS_ENABLE_OPENMP", "KOKKOS_ENABLE_SERIAL",
                                                     "is_same"},
    # A team's size on a host backend (Kokkos::AUTO): team_sum's bits do not depend on it.
    "include/tessera/kernels/impl/team.hpp": {"SpaceAccessibility"},
    # The work items a launch reports for a host backend's team: a count, no kernel path.
    "include/tessera/kernels/impl/launch.hpp": {"SpaceAccessibility"},
    # Conversions through F16C: the same bits as the portable conversion.
    "include/tessera/core/precision.hpp": {"__F16C__"},
    # MPI's reduction of 16-bit buffers, which are in host memory.
    "src/parallel/sum16.cpp": {"__F16C__", "__AVX__"},
    # The backends and the instruction set a build has, for --version and reports.
    "src/core/runtime.cpp": {"KOKKOS_ENABLE_OPENMP", "KOKKOS_ENABLE_THREADS",
                             "KOKKOS_ENABLE_SERIAL"},
    "src/core/machine.cpp": {"__AVX512F__", "__AVX2__", "__AVX__", "__SSE2__"},
    # The width of the host's vector registers for the lane types: no kernel
    # path (every lane computes the same values at any width).
    "include/tessera/kernels/impl/lanes.hpp": {"__AVX512F__", "__AVX__"},
    # tessera-bench's measurement of the CPU's multiply-add peak.
    "apps/fma_peak.hpp": {"__x86_64__", "__GNUC__"},
}


def ladder_of(root):
    """The folders from the bottom up, from the doc's `Ladder:` line."""
    path = os.path.join(root, LADDER_DOC)
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^Ladder \(bottom to top\): (.+)\.$", line.strip())
                if m:
                    return [name.strip().strip("`") for name in m.group(1).split(",")], path
    except OSError as e:
        sys.exit(f"check-layout: {path}: {e.strerror}")
    sys.exit(f"check-layout: {path}: no line 'Ladder (bottom to top): a, b, ....'")


def sources(root, tops):
    for top in tops:
        base = os.path.join(root, top)
        for directory, dirs, files in os.walk(base):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".hpp", ".cpp", ".hpp.in")):
                    yield os.path.join(directory, name), os.path.relpath(
                        os.path.join(directory, name), base)


def folder_edges(root):
    """(from folder, to folder, file, line) for every include across folders."""
    edges = []
    for path, rel in sources(root, ["include/tessera", "src"]):
        parts = rel.split(os.sep)
        if len(parts) < 2:
            continue  # files beside the folders (src/CMakeLists.txt has none)
        folder = parts[0]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in INCLUDE.finditer(text):
            if m.group(1) != folder:
                line = text.count("\n", 0, m.start()) + 1
                edges.append((folder, m.group(1), os.path.relpath(path, root), line))
    return edges


def find_cycle(edges):
    """A folder cycle as a list of edges, or None."""
    graph = {}
    for edge in edges:
        graph.setdefault(edge[0], []).append(edge)
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        for edge in graph.get(node, []):
            stack.append(edge)
            target = edge[1]
            if state.get(target) == "open":
                start = next(i for i, e in enumerate(stack) if e[0] == target)
                return stack[start:]
            if target not in state:
                found = visit(target)
                if found:
                    return found
            stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check_ladder(root):
    ladder, doc = ladder_of(root)
    rank = {name: i for i, name in enumerate(ladder)}
    errors = []
    present = set()
    for top in ("include/tessera", "src"):
        base = os.path.join(root, top)
        present.update(d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d)))
    for folder in sorted(present - set(rank)):
        errors.append(f"{doc}: folder '{folder}' is not on the ladder: add it to the "
                      "'Ladder (bottom to top)' line where its includes allow")
    edges = folder_edges(root)
    cycle = find_cycle(edges)
    if cycle:
        errors.append("folder cycle " + " -> ".join([cycle[0][0]] + [e[1] for e in cycle]) +
                      ": " + "; ".join(f"{e[2]}:{e[3]} includes {e[1]}/" for e in cycle))
    for source, target, path, line in edges:
        if source in rank and target in rank and rank[target] > rank[source]:
            errors.append(f"{path}:{line}: {source}/ includes {target}/, which is above it on "
                          f"the ladder of {doc}: move what it needs down, or the file up")
    return errors


def strip_code(text):
    """text with comments, strings and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of each function body at namespace or class scope."""
    code = strip_code(text)
    scopes = []  # for each open brace: "namespace", "class", "function", "other"
    found = []
    head_start = 0
    for i, c in enumerate(code):
        if c in ";":
            if not scopes or scopes[-1] in ("namespace", "class"):
                head_start = i + 1
        elif c == "{":
            inside = any(s == "function" for s in scopes)
            head = code[head_start:i]
            kind = "other"
            if not inside:
                flat = " ".join(head.split())
                if re.search(r"\bnamespace\b|extern \"C\"", flat):
                    kind = "namespace"
                elif re.search(r"\b(class|struct|union)\b[^()]*$", flat) and "=" not in flat:
                    kind = "class"
                elif re.search(r"\benum\b", flat) or flat.endswith("="):
                    kind = "other"
                elif ")" in flat:
                    kind = "function"
                    names = re.findall(r"([A-Za-z_~][\w:~<>]*|operator\S+)\s*\(", flat)
                    name = names[0] if names else flat[:40]
                    if "[" in flat and re.search(r"\]\s*\(", flat):
                        name = "lambda"
                    found.append([name, code.count("\n", 0, i) + 1, None, len(scopes)])
            scopes.append(kind)
            if kind in ("namespace", "class"):
                head_start = i + 1
        elif c == "}":
            if scopes:
                kind = scopes.pop()
                if kind == "function":
                    for entry in reversed(found):
                        if entry[2] is None and entry[3] == len(scopes):
                            entry[2] = code.count("\n", 0, i) + 1
                            break
            if not scopes or scopes[-1] in ("namespace", "class"):
                head_start = i + 1
    return [(name, first, last) for name, first, last, _ in found if last is not None]


def read_exceptions(root):
    path = os.path.join(root, EXCEPTIONS)
    allowed = {}
    if not os.path.exists(path):
        return allowed, path
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                sys.exit(f"check-layout: {path}:{number}: expected 'FILE' or 'FILE:FUNCTION' "
                         "and its line count")
            allowed[parts[0]] = (int(parts[1]), number)
    return allowed, path


def check_sizes(root):
    allowed, exceptions = read_exceptions(root)
    errors, seen = [], set()

    def judge(key, lines, limit, where, what):
        if lines <= limit:
            return
        seen.add(key)
        if key in allowed:
            cap, number = allowed[key]
            if lines > cap:
                errors.append(f"{where}: {what} has {lines} lines, more than the {cap} of "
                              f"{exceptions}:{number}; split it (limit {limit})")
            return
        errors.append(f"{where}: {what} has {lines} lines, over the limit of {limit}: split it")

    for path, _ in sources(root, ["include", "src", "apps"]):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        judge(rel, text.count("\n"), FILE_LINES, rel, "the file")
        for name, first, last in functions(text):
            judge(f"{rel}:{name}", last - first + 1, FUNCTION_LINES, f"{rel}:{first}",
                  f"function {name}")
    for key, (cap, number) in sorted(allowed.items(), key=lambda item: item[1][1]):
        if key not in seen:
            errors.append(f"{exceptions}:{number}: {key} is within its limit now (or gone): "
                          "remove the entry")
    return errors


def check_mpi(root):
    errors = []
    for path, _ in sources(root, ["src", "include", "apps"]):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        allowed = MPI_ALLOWED.get(rel, set())
        if allowed is None:
            continue
        with open(path, encoding="utf-8") as f:
            code = strip_code(f.read())
        for m in MPI_CALL.finditer(code):
            name = m.group(1)
            if name in MPI_TYPES or name in allowed:
                continue
            line = code.count("\n", 0, m.start()) + 1
            errors.append(f"{rel}:{line}: {name} called directly: go through tessera::Communicator "
                          "(include/tessera/parallel/communicator.hpp), adding the wrapper it "
                          "lacks to src/parallel/communicator.cpp")
    return errors


def check_host_paths(root):
    errors = []
    for path, _ in sources(root, ["src", "include", "apps"]):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        allowed = HOST_TESTS_ALLOWED.get(rel, set())
        with open(path, encoding="utf-8") as f:
            text = f.read()
        code = strip_code(text)
        hits = [(m.start(), m.group(1)) for m in HOST_MACRO.finditer(text)]
        hits += [(m.start(), m.group(0).split("<")[0].split("::")[-1].replace("_v", ""))
                 for m in HOST_TYPE.finditer(code)]
        for start, token in sorted(hits):
            if token in allowed:
                continue
            source = text if token.startswith(("KOKKOS_", "__")) else code
            line = source.count("\n", 0, start) + 1
            errors.append(f"{rel}:{line}: a host-only branch on {token}: test "
                          "host_fast_paths_v<ExecSpace> (include/tessera/core/host_paths.hpp) "
                          "instead, so that -DTessera_HOST_FAST_PATHS=OFF runs the GPU path; "
                          "or, if it is no kernel path, add the file and why to "
                          "HOST_TESTS_ALLOWED in scripts/check-layout.py")
    return errors


LAUNCH_HOME = "include/tessera/kernels/impl/launch.hpp"
LAUNCH_CALL = re.compile(r"\bKokkos\s*::\s*(parallel_for|parallel_reduce|parallel_scan)\s*\(|"
                         r"\bcompat\s*::\s*(gemm)\s*\(")
NESTED_POLICY = re.compile(r"\s*(Kokkos\s*::\s*)?(TeamThreadRange|TeamVectorRange|ThreadVectorRange|"
                           r"TeamThreadMDRange|TeamVectorMDRange|ThreadVectorMDRange)\b")


def check_launches(root):
    errors = []
    for path, _ in sources(root, ["src", "include"]):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel == LAUNCH_HOME:
            continue
        with open(path, encoding="utf-8") as f:
            code = strip_code(f.read())
        for m in LAUNCH_CALL.finditer(code):
            if m.group(1) and NESTED_POLICY.match(code, m.end()):
                continue
            line = code.count("\n", 0, m.start()) + 1
            name = m.group(1) or "compat::gemm"
            errors.append(f"{rel}:{line}: {name} launched directly: call "
                          f"kernels::impl::{m.group(1) or 'gemm'} ({LAUNCH_HOME}) with the "
                          "kernel's Work (bytes moved, FLOPs), so that tessera-bench reports "
                          "its work items, bytes and FLOPs")
    return errors


INSTANCE_FOLDERS = ("layers", "model", "optim", "parallel", "train")
INSTANCE_MADE = re.compile(r"\bExecSpace\s*(\(\s*\)|\{\s*\})|\bconst\s+ExecSpace\s+\w+\s*;")
# Where a default instance is right, and why (file: how many); none so far:
# a model holds the default instance until set_execution_space().
INSTANCES_ALLOWED = {}


def check_instances(root):
    errors = []
    for path, _ in sources(root, ["src", "include"]):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        parts = rel.split("/")
        folder = parts[1] if parts[0] == "src" else parts[2] if len(parts) > 2 else ""
        if folder not in INSTANCE_FOLDERS:
            continue
        with open(path, encoding="utf-8") as f:
            code = strip_code(f.read())
        hits = list(INSTANCE_MADE.finditer(code))
        for m in hits[INSTANCES_ALLOWED.get(rel, 0):]:
            line = code.count("\n", 0, m.start()) + 1
            errors.append(f"{rel}:{line}: an execution space instance made here: run on the "
                          "instance given (StepContext::exec in a layer, the model's "
                          "execution_space(), an `exec` parameter), so that a GPU's streams are "
                          "honoured; or add the file and why to INSTANCES_ALLOWED in "
                          "scripts/check-layout.py")
    return errors


def self_test(root):
    """Each check must fail on a copy of the tree with a planted violation."""
    failures = []

    def plant(tree, folder, name, text):
        path = os.path.join(tree, folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    with tempfile.TemporaryDirectory() as scratch:
        tree = os.path.join(scratch, "tree")
        for top in ("include", "src", "apps", "docs", "scripts"):
            shutil.copytree(os.path.join(root, top), os.path.join(tree, top))
        if (check_ladder(tree) or check_sizes(tree) or check_mpi(tree) or check_host_paths(tree)
                or check_launches(tree) or check_instances(tree)):
            failures.append("the copied tree does not pass to begin with")
        ladder, _ = ladder_of(tree)
        low, high = ladder[1], ladder[-1]
        # A back-edge: a low folder includes the top one.
        down = plant(tree, f"include/tessera/{low}", "planted.hpp",
                     f"#pragma once\n#include <tessera/{high}/planted.hpp>\n")
        errors = check_ladder(tree)
        if not any(f"{low}/ includes {high}/" in e for e in errors):
            failures.append(f"a back-edge {low} -> {high} was not reported: {errors}")
        # ... and the edge back down closes a cycle.
        up = plant(tree, f"include/tessera/{high}", "planted.hpp",
                   f"#pragma once\n#include <tessera/{low}/planted.hpp>\n")
        if not any(e.startswith("folder cycle") for e in check_ladder(tree)):
            failures.append(f"the cycle {low} -> {high} -> {low} was not reported")
        os.remove(down)
        os.remove(up)
        # A function one line too long beside a short member with a lambda.
        body = "\n".join(f"  x += {i};" for i in range(FUNCTION_LINES - 2))
        plant(tree, f"src/{ladder[0]}", "planted.cpp",
              "namespace tessera {\nint planted(int x) {\n" + body + "\n  return x;\n}\n"
              "struct S {\n  char ok() { auto f = [] { return '{'; }; return f(); }\n};\n}\n")
        errors = check_sizes(tree)
        if not any(f"function planted has {FUNCTION_LINES + 1} lines" in e for e in errors):
            failures.append(f"a function of {FUNCTION_LINES + 1} lines was not reported: {errors}")
        if any("function ok" in e for e in errors):
            failures.append(f"a short member function was reported: {errors}")
        # A direct MPI call beside mentions that are not calls (a comment, a
        # string, a handle type's cast), and a collective in the runtime,
        # which may call MPI only to start, end and abort it.
        plant(tree, f"src/{ladder[-1]}", "planted_mpi.cpp",
              "// MPI_Barrier(comm) in a comment\nvoid planted(MPI_Comm c) {\n"
              "  const char* s = \"MPI_Barrier(c)\";\n  MPI_Comm d = MPI_Comm(c);\n"
              "  MPI_Barrier (d);\n}\n")
        with open(os.path.join(tree, "src/core/runtime.cpp"), "a", encoding="utf-8") as f:
            f.write("void planted() { MPI_Barrier(MPI_COMM_WORLD); }\n")
        errors = check_mpi(tree)
        expected = [f"src/{ladder[-1]}/planted_mpi.cpp:5: MPI_Barrier called directly",
                    "src/core/runtime.cpp:"]
        if len(errors) != 2 or not all(any(e.startswith(x) for e in errors) for x in expected):
            failures.append(f"the planted MPI calls were not reported as {expected}: {errors}")
        # Host-only branches outside the predicate: a backend macro in a
        # kernel header and a space's type test in a layer, beside a
        # comment that names both and a test of the predicate.
        plant(tree, "include/tessera/kernels", "planted_host.hpp",
              "#pragma once\n// #ifdef KOKKOS_ENABLE_OPENMP in a comment\n"
              "#ifdef KOKKOS_ENABLE_OPENMP\nint fast();\n#endif\n")
        plant(tree, "src/layers", "planted_host.cpp",
              "template <class ExecSpace> int f() {\n"
              "  if constexpr (host_fast_paths_v<ExecSpace>) return 1;\n"
              "  if constexpr (std::is_same_v<ExecSpace, Kokkos::Serial>) return 2;\n"
              "  return 3;\n}\n")
        errors = check_host_paths(tree)
        expected = ["include/tessera/kernels/planted_host.hpp:3: a host-only branch on "
                    "KOKKOS_ENABLE_OPENMP", "src/layers/planted_host.cpp:3: a host-only branch on "
                    "is_same"]
        if len(errors) != 2 or not all(any(e.startswith(x) for e in errors) for x in expected):
            failures.append(f"the planted host branches were not reported as {expected}: {errors}")
        # A kernel launched around launch.hpp beside a team's nested range, a
        # comment and a launch through it.
        plant(tree, "include/tessera/kernels", "planted_launch.hpp",
              "#pragma once\n// Kokkos::parallel_for(\"x\", n, f) in a comment\n"
              "void f(int n) {\n  Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), g);\n"
              "  impl::parallel_for(\"a\", p, Work{}, g);\n"
              "  Kokkos::parallel_reduce(\"b\", p, g, r);\n}\n")
        errors = check_launches(tree)
        expected = "include/tessera/kernels/planted_launch.hpp:6: parallel_reduce launched directly"
        if len(errors) != 1 or not errors[0].startswith(expected):
            failures.append(f"the planted launch was not reported as {expected}: {errors}")
        # A layer that makes its own instance, beside one that takes the
        # context's and a comment naming ExecSpace().
        plant(tree, "src/layers", "planted_instance.cpp",
              "// ExecSpace() in a comment\nvoid f(const StepContext& ctx) {\n"
              "  g(ctx.exec);\n  const ExecSpace exec;\n  g(ExecSpace());\n}\n")
        errors = check_instances(tree)
        expected = ["src/layers/planted_instance.cpp:4: an execution space instance made here",
                    "src/layers/planted_instance.cpp:5: an execution space instance made here"]
        if len(errors) != 2 or not all(e.startswith(x) for e, x in zip(errors, expected)):
            failures.append(f"the planted instances were not reported as {expected}: {errors}")
    return failures


def main(argv):
    if len(argv) == 2 and argv[1] == "self-test":
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        failures = self_test(root)
        for failure in failures:
            print(f"check-layout self-test: {failure}")
        if not failures:
            print("check-layout self-test: a planted back-edge, cycle, long function, direct "
                  "MPI call, host-only branch, direct launch and instance made below the trainer "
                  "fail")
        return 1 if failures else 0
    checks = {"ladder": check_ladder, "sizes": check_sizes, "mpi": check_mpi,
              "host_paths": check_host_paths, "launches": check_launches,
              "instances": check_instances}
    if len(argv) != 3 or argv[1] not in checks:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = argv[2]
    errors = checks[argv[1]](root)
    for error in errors:
        print(error)
    if not errors:
        print(f"check-layout {argv[1]}: the tree holds")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
