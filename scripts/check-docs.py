#!/usr/bin/env python3
"""Runs the commands that README.md and docs/*.md show, and compares the
output samples they print, so that the documents cannot drift from the code.

Every code block (fenced, or indented by four spaces) that shows a command
carries a marker on the line before it, an HTML comment that renders as
nothing:

  <!-- docs: run -->           the commands below are run, each must exit 0
  <!-- docs: illustrative -->  shown, not run (needs a GPU, Spack, the network,
                               hours, or names a file of the reader's own)
  <!-- docs: output -->        exact output of the last command of the run
                               block before it, compared line by line
  <!-- docs: sample -->        "$ command" lines followed by their output:
                               each command is run and its output compared

A block shows a command when one of its lines starts (after "$ " and
VAR=value assignments) with a program: a tessera-* app, a path under build/,
scripts/ or bench/, or one of PROGRAMS below. Such a block without a marker
is an error, and so is a marker with no block after it.

Options of run and sample markers (repeatable, separated by spaces, quoted
as in the shell where a value holds spaces):
  set=KEY=VALUE      appended as "--set KEY=VALUE" to every tessera-train,
                     tessera-sweep and tessera-bench command of the block, to
                     keep runs short
  append=ARG         appended to every tessera-* command of the block
                     (e.g. append=--steps=5 for tessera-bench)
  env=NAME=VALUE     set in the commands' environment
  commands=1,3       run only these commands of the block (1-based); the
                     others are illustrative
  fresh=PATH         removed from the scratch copy before each command of the
                     block (fresh=output: every run starts without earlier
                     runs' output folders)
  timeout=SECONDS    for each command (default 90)
Options of output and sample markers:
  loose=PREFIX       a line that starts with PREFIX (after its indentation)
                     matches any output line starting with PREFIX
  figures=all        every number in the sample matches any number: for
                     machine-dependent figures (say which machine in the text)
  figures=PREFIX     the same for the lines that start with PREFIX
In a sample, "..." inside a line matches any text, a line that is "..." alone
matches any number of lines (none included), and a line ending in "..."
matches one or more lines starting with what precedes the dots.

Commands run with bash from a scratch copy of the tracked files (one per
document, so nothing in the clone is written), with build/ there pointing at
the build directory and its apps first on PATH. mpiexec gets
--oversubscribe and may run as root.

Usage: check-docs.py [--build DIR] [--list] [FILE.md ...]
       check-docs.py --self-test [--build DIR]
Exit status: 0 when every check passes, 1 otherwise, 2 on bad usage.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PROGRAMS = {
    "bash", "sh", "python3", "python", "mpiexec", "mpirun", "srun", "cmake",
    "ctest", "spack", "h5dump", "h5ls", "pip", "git", "make", "apt-get",
    "nsys", "ncu", "rocprof", "env", "cd", "ls", "cat",
}
MARKER = re.compile(r"^\s*<!--\s*docs:\s*(\w[\w-]*)(.*?)-->\s*$")
KINDS = {"run", "illustrative", "output", "sample"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
DEFAULT_TIMEOUT = 90


class Block:
    def __init__(self, path, line, text_lines, marker, marker_line):
        self.path = path
        self.line = line            # 1-based line of the block's first line
        self.lines = text_lines     # the block's lines, indentation removed
        self.kind = marker[0] if marker else None
        self.options = marker[1] if marker else []
        self.marker_line = marker_line

    def where(self):
        return f"{self.path}:{self.line}"

    def option_values(self, name):
        return [value for key, value in self.options if key == name]

    def lines_clean(self):
        """The block's lines without trailing spaces and trailing blank lines."""
        lines = [line.rstrip() for line in self.lines]
        while lines and not lines[-1]:
            lines.pop()
        return lines


def parse_options(text):
    options = []
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        options.append((key, value))
    return options


def read_blocks(path, text):
    """The code blocks of a markdown text, each with the marker before it."""
    lines = text.split("\n")
    blocks, problems = [], []
    marker, marker_line = None, None
    i = 0
    while i < len(lines):
        line = lines[i]
        found = MARKER.match(line)
        if found:
            if marker:
                problems.append(f"{path}:{marker_line}: marker '{marker[0]}' has no code block after it")
            kind = found.group(1)
            if kind not in KINDS:
                problems.append(f"{path}:{i + 1}: unknown marker 'docs: {kind}' (allowed: {', '.join(sorted(KINDS))})")
                kind = "illustrative"
            marker, marker_line = (kind, parse_options(found.group(2))), i + 1
            i += 1
            continue
        fence = re.match(r"^(\s*)(```+|~~~+)", line)
        if fence:
            indent, mark = len(fence.group(1)), fence.group(2)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(mark):
                j += 1
            body = [l[indent:] if l[:indent].strip() == "" else l.lstrip() for l in lines[i + 1:j]]
            blocks.append(Block(path, i + 2, body, marker, marker_line))
            marker = None
            i = j + 1
            continue
        previous_blank = i == 0 or not lines[i - 1].strip() or MARKER.match(lines[i - 1])
        if line.startswith("    ") and line.strip() and previous_blank:
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or (
                    not lines[j].strip() and j + 1 < len(lines) and lines[j + 1].startswith("    "))):
                j += 1
            body = [l[4:] for l in lines[i:j]]
            blocks.append(Block(path, i + 1, body, marker, marker_line))
            marker = None
            i = j
            continue
        if line.strip() and marker:
            problems.append(f"{path}:{marker_line}: marker '{marker[0]}' has no code block after it")
            marker = None
        i += 1
    if marker:
        problems.append(f"{path}:{marker_line}: marker '{marker[0]}' has no code block after it")
    return blocks, problems


def program_of(line):
    """The program a shell line starts, or None."""
    words = line.strip().split()
    if words and words[0] == "$":
        words = words[1:]
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    word = words[0]
    name = os.path.basename(word)
    if name.startswith("tessera-") or name in PROGRAMS:
        return name
    if re.match(r"^(\./)?(build[^/]*|scripts|bench|tests)/\S+$", word):
        return name
    return None


def shows_command(block):
    return any(program_of(line) for line in block.lines)


def commands_of(lines):
    """Shell commands of a block: continuation lines joined."""
    commands, current, first = [], "", None
    for number, line in enumerate(lines):
        if not current and not line.strip():
            continue
        if first is None:
            first = number
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append((first, current.strip()))
        current, first = "", None
    if current.strip():
        commands.append((first, current.strip()))
    return commands


def strip_comment(command):
    """The command without a trailing '# ...' comment outside quotes."""
    quote = None
    for index, char in enumerate(command):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and index > 0 and command[index - 1] in " \t":
            return command[:index].rstrip()
    return command


def prepare(command, block):
    """The command as it is run: overrides appended, mpiexec oversubscribed."""
    command = strip_comment(command)
    overrides = block.option_values("set")
    if overrides and re.search(r"(^|[\s/])tessera-(train|sweep|bench)\s", command + " "):
        command += "".join(f" --set {value}" for value in overrides)
    extra = block.option_values("append")
    if extra and re.search(r"(^|[\s/])tessera-[a-z0-9]+\s", command + " "):
        command += "".join(f" {value}" for value in extra)
    command = re.sub(r"(^|\s)(mpiexec|mpirun)(\s)(?!.*--oversubscribe)", r"\1\2 --oversubscribe\3", command)
    return command


class Runner:
    def __init__(self, repo, build):
        self.repo = repo
        self.build = os.path.abspath(build)
        self.scratch = {}
        self.root = tempfile.mkdtemp(prefix="tessera-docs-")

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def scratch_for(self, path):
        """A copy of the tracked files for one document, build/ linked in."""
        if path in self.scratch:
            return self.scratch[path]
        directory = os.path.join(self.root, re.sub(r"[^\w.-]", "_", path))
        files = subprocess.run(["git", "ls-files", "-z"], cwd=self.repo, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for name in files:
            source = os.path.join(self.repo, name)
            if not name or not os.path.isfile(source) or name.startswith("build/"):
                continue
            target = os.path.join(directory, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)
        os.makedirs(directory, exist_ok=True)
        os.symlink(self.build, os.path.join(directory, "build"))
        self.scratch[path] = directory
        return directory

    def run(self, block, command):
        env = dict(os.environ)
        env.update({
            # The build's apps, then Debian's own Python (the one the setup
            # script installs matplotlib for, as on the Debian 12 machine
            # the docs address), then the rest.
            "PATH": os.pathsep.join([os.path.join(self.build, "apps"), "/usr/bin",
                                     env.get("PATH", "")]),
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "TESSERA_BUILD_DIR": self.build,
        })
        env.setdefault("OMP_PROC_BIND", "spread")
        env.setdefault("OMP_PLACES", "threads")
        for value in block.option_values("env"):
            name, _, setting = value.partition("=")
            env[name] = setting
        timeout = float((block.option_values("timeout") or [DEFAULT_TIMEOUT])[-1])
        directory = self.scratch_for(block.path)
        for path in block.option_values("fresh"):
            target = os.path.normpath(os.path.join(directory, path))
            if not target.startswith(directory + os.sep):
                raise ValueError(f"{block.where()}: fresh={path} is outside the scratch copy")
            shutil.rmtree(target, ignore_errors=True)
        start = time.monotonic()
        process = subprocess.Popen(["bash", "-c", command], cwd=directory, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, err = process.communicate(timeout=timeout)
            status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            status = f"timed out after {timeout:g} s"
        seconds = time.monotonic() - start
        return status, out.decode(errors="replace"), err.decode(errors="replace"), seconds


def clean(text):
    """Output lines as a reader sees them: progress-bar redraws and colours gone."""
    lines = []
    for line in text.split("\n"):
        line = ANSI.sub("", line).split("\r")[-1]
        lines.append(line.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    return lines


def line_pattern(expected, loose, figures):
    stripped = expected.strip()
    figures = any(f == "all" or stripped.startswith(f) for f in figures)
    for prefix in loose:
        if stripped.startswith(prefix):
            return re.compile(re.escape(expected[:len(expected) - len(stripped)] + prefix) + ".*")
    parts = []
    for index, piece in enumerate(expected.split("...")):
        if index:
            parts.append(".*")
        if figures:
            last = 0
            for number in NUMBER.finditer(piece):
                parts.append(re.escape(piece[last:number.start()]))
                parts.append(NUMBER.pattern)
                last = number.end()
            parts.append(re.escape(piece[last:]))
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts))


def compare(expected, actual, loose=(), figures=()):
    """None when the output matches the sample, else the first difference."""
    def match(e, a):
        if e == len(expected):
            return None if a == len(actual) else (e, a)
        line = expected[e].rstrip()
        if line.strip() == "...":
            best = None
            for skip in range(a, len(actual) + 1):
                result = match(e + 1, skip)
                if result is None:
                    return None
                best = best or result
            return best
        if line.endswith("...") and line.strip() != "...":
            prefix = line[:-3]
            count = 0
            while a + count < len(actual) and actual[a + count].startswith(prefix.rstrip()):
                count += 1
            if count == 0:
                return (e, a)
            for used in range(count, 0, -1):
                result = match(e + 1, a + used)
                if result is None:
                    return None
            return (e + 1, a + count)
        if a < len(actual) and line_pattern(line, loose, figures).fullmatch(actual[a]):
            return match(e + 1, a + 1)
        return (e, a)

    sys.setrecursionlimit(max(10000, 4 * (len(expected) + len(actual))))
    result = match(0, 0)
    if result is None:
        return None
    e, a = result
    want = expected[e] if e < len(expected) else "(end of the sample)"
    got = actual[a] if a < len(actual) else "(end of the output)"
    return f"line {e + 1} of the sample: expected {want!r}\n    got {got!r} (line {a + 1} of the output)"


def selected_commands(block, commands):
    chosen = block.option_values("commands")
    if not chosen:
        return commands
    numbers = {int(n) for value in chosen for n in value.split(",") if n}
    return [c for index, c in enumerate(commands, 1) if index in numbers]


def sample_steps(block):
    """The (line, command, expected output) of a sample's "$ command" lines."""
    steps = []
    for number, line in enumerate(block.lines):
        if line.startswith("$ "):
            steps.append((number, line[2:].strip(), []))
        elif steps:
            steps[-1][2].append(line.rstrip())
    for _, _, expected in steps:
        while expected and not expected[-1].strip():
            expected.pop()
    return steps


class Checker:
    """Checks the blocks of documents in order, printing a line for each."""

    def __init__(self, runner, out):
        self.runner, self.out = runner, out
        self.problems = []
        self.counts = {"run": 0, "compared": 0, "illustrative": 0}
        self.last_output = None

    def fail(self, message, detail=""):
        self.problems.append(message)
        print(f"{message}: FAIL{detail}", file=self.out)

    def document(self, path):
        with open(os.path.join(self.runner.repo, path)) as handle:
            blocks, found = read_blocks(path, handle.read())
        for message in found:
            self.fail(message)
        self.last_output = None
        for block in blocks:
            if block.kind is None:
                if shows_command(block):
                    self.fail(f"{block.where()}: a command block without a marker "
                              "(<!-- docs: run --> or <!-- docs: illustrative -->)")
            elif block.kind == "illustrative":
                self.counts["illustrative"] += 1
            elif block.kind == "output":
                self.output(block)
            elif block.kind == "run":
                for line, command in selected_commands(block, commands_of(block.lines)):
                    self.command(block, line, command, None)
            else:
                steps = sample_steps(block)
                if not steps:
                    self.fail(f"{block.where()}: a sample without a '$ command' line")
                for line, command, expected in steps:
                    self.command(block, line, command, expected)

    def differs(self, block, expected, actual):
        self.counts["compared"] += 1
        return compare(expected, actual, block.option_values("loose"), block.option_values("figures"))

    def output(self, block):
        if self.last_output is None:
            self.fail(f"{block.where()}: an output sample with no successful run block before it")
            return
        difference = self.differs(block, block.lines_clean(), self.last_output)
        self.last_output = None
        if difference:
            self.fail(f"{block.where()}: the output differs from the sample: {difference}")
        else:
            print(f"{block.where()}: output matches: ok", file=self.out)

    def command(self, block, line, command, expected):
        self.counts["run"] += 1
        actual = prepare(command, block)
        status, stdout, stderr, seconds = self.runner.run(block, actual)
        where = f"{block.path}:{block.line + line}"
        self.last_output = None
        if status != 0:
            self.problems.append(f"{where}: exit status {status}: {actual}")
            print(f"{where}: {seconds:.1f} s: FAIL (exit status {status})\n  $ {actual}", file=self.out)
            for text in clean(stdout + stderr)[-25:]:
                print(f"  | {text}", file=self.out)
            return
        self.last_output = clean(stdout)
        if expected is None:
            print(f"{where}: {seconds:.1f} s: ok", file=self.out)
            return
        difference = self.differs(block, expected, self.last_output)
        if difference:
            self.problems.append(f"{where}: the output differs from the sample: {difference}")
            print(f"{where}: {seconds:.1f} s: FAIL (the output differs from the sample)\n  {difference}",
                  file=self.out)
        else:
            print(f"{where}: {seconds:.1f} s: ok, output matches", file=self.out)


def check(paths, runner, out=sys.stdout):
    """Checks the documents; returns the problems found and what was done."""
    checker = Checker(runner, out)
    for path in paths:
        checker.document(path)
    return checker.problems, checker.counts


def documents(repo):
    return ["README.md"] + sorted(os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, "docs", "*.md")))


MATCHER_CASES = [
    # (sample, output, options, matches)
    (["a", "...", "z"], ["a", "b", "c", "z"], {}, True),
    (["a", "...", "z"], ["a", "z"], {}, True),
    (["a", "...", "z"], ["a", "b"], {}, False),
    (["  | ...", "end"], ["  | x", "  |", "  | y", "end"], {}, True),
    (["  | ...", "end"], ["end"], {}, False),
    (["took ... s"], ["took 1.5 s"], {}, True),
    (["rate 12.5 GB/s"], ["rate 7 GB/s"], {"figures": ["all"]}, True),
    (["rate 12.5 GB/s"], ["rate 7 GB/s"], {}, False),
    (["rate 12.5 GB/s"], ["rate 7 MB/s"], {"figures": ["all"]}, False),
    (["epoch: 4 (0-based)", "x"], ["epoch: 4 of 4, finished", "x"], {"loose": ["epoch:"]}, True),
    (["a", "b"], ["a", "b", "c"], {}, False),
]


def self_test(repo, build):
    """Plants two drifts in a copy of docs/checkpoint.md and expects both reported."""
    for sample, output, options, matches in MATCHER_CASES:
        if (compare(sample, output, **options) is None) != matches:
            print(f"self-test: the matcher {'rejects' if matches else 'accepts'} {output} for {sample} {options}: FAIL")
            return 1
    print(f"self-test: the matcher gives the expected verdict on {len(MATCHER_CASES)} cases")
    source = os.path.join(repo, "docs", "checkpoint.md")
    with open(source) as handle:
        lines = handle.read().split("\n")
    planted_output = planted_marker = None
    for index, line in enumerate(lines):
        found = MARKER.match(line)
        if found and found.group(1) == "sample" and planted_output is None:
            j = index + 1
            while not lines[j].strip().startswith("$ "):
                j += 1
            j += 1
            while "..." in lines[j] or not lines[j].strip():
                j += 1
            lines[j] = lines[j] + " (planted)"
            planted_output = j + 1
        elif found and found.group(1) in ("run", "illustrative") and planted_marker is None:
            lines[index] = "<!-- a marker removed -->"
            planted_marker = index + 1
    if planted_output is None or planted_marker is None:
        print("self-test: docs/checkpoint.md has no sample or no command marker to plant drift in")
        return 1
    runner = Runner(repo, build)
    try:
        copy = os.path.join(runner.root, "checkpoint-drifted.md")
        with open(copy, "w") as handle:
            handle.write("\n".join(lines))
        print(f"self-test: a copy of docs/checkpoint.md with its sample's line {planted_output} changed "
              f"and the marker of line {planted_marker} removed")
        problems, _ = check([copy], runner)
    finally:
        runner.close()
    output_caught = any("differs from the sample" in p for p in problems)
    marker_caught = any("without a marker" in p for p in problems)
    print(f"self-test: the changed output line {'reported' if output_caught else 'NOT reported'}; "
          f"the unmarked command block {'reported' if marker_caught else 'NOT reported'}; "
          f"{len(problems)} problem(s) in all")
    ok = output_caught and marker_caught and len(problems) == 2
    print("self-test: ok" if ok else "self-test: FAIL")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="documents to check (default: README.md docs/*.md)")
    parser.add_argument("--build", default=os.environ.get("TESSERA_BUILD_DIR", "build"),
                        help="the build directory whose apps/ the commands run (default: $TESSERA_BUILD_DIR or build)")
    parser.add_argument("--self-test", action="store_true", help="plant drifts in a copy of a document and expect them reported")
    parser.add_argument("--list", action="store_true", help="list the blocks and their markers, run nothing")
    args = parser.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.join(repo, args.build) if not os.path.isabs(args.build) else args.build
    if not args.list and not os.path.isfile(os.path.join(build, "apps", "tessera-train")):
        print(f"check-docs.py: no {build}/apps/tessera-train; build the apps (target tessera_apps) "
              "or give --build DIR", file=sys.stderr)
        return 2
    if args.self_test:
        return self_test(repo, build)
    paths = args.files or documents(repo)
    if args.list:
        for path in paths:
            with open(os.path.join(repo, path)) as handle:
                blocks, _ = read_blocks(path, handle.read())
            for block in blocks:
                first = next((l for l in block.lines if l.strip()), "")
                command = "command" if shows_command(block) else "-"
                print(f"{block.where()}: {block.kind or 'unmarked'} ({command}): {first.strip()[:70]}")
        return 0
    start = time.monotonic()
    runner = Runner(repo, build)
    try:
        problems, counts = check(paths, runner)
    finally:
        runner.close()
    total = time.monotonic() - start
    print(f"docs: {counts['run']} commands run, {counts['compared']} samples compared, "
          f"{counts['illustrative']} blocks illustrative, {len(problems)} problem(s), {total:.0f} s")
    for message in problems:
        print(f"  {message.splitlines()[0]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
