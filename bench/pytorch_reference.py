#!/usr/bin/env python3
"""PyTorch twin of a Tessera deck for bench/side_by_side.sh: builds the
model the deck describes, trains it on synthetic data of the deck's shapes
with the deck's optimizer, and prints JSON lines: first the BLAS the
process runs, read from the process itself, then each variant's median
training-step throughput (eager; torch.compile; channels_last for decks
with convolutions).

Thread settings are the caller's: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
must be set in the environment before Python starts (bench/side_by_side.sh
tries several and keeps the best). With --serve the warmed-up variants stay
and one is measured on each `measure VARIANT` line of stdin, so that the
interleaved rounds of the benchmark protocol compile once. --parameters
prints the model's parameter count as tessera-train --check does and exits
(tests/app/pytorch_twin.sh compares the two).

Attention goes through torch's fused scaled_dot_product_attention where
torch has it (2.x, on the CPU as on the GPU), else through the explicit
T x T matrix (1.13). --device cuda runs the twin on the GPU
(scripts/gpu-validate.sh): in fp32 throughout, with TF32 off for matrix
products and cuDNN as Tessera computes in fp32.
"""
import argparse
import ctypes
import json
import math
import os
import re
import signal
import statistics
import sys
import time
import tomllib
import traceback
import warnings

# PyPI's torch warns at import when NumPy is absent; nothing here uses it.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
from torch import nn  # noqa: E402

VARIANTS = ("eager", "compiled", "eager+channels_last", "compiled+channels_last")
# Set in main(): attention through torch's fused kernel (torch 2.x).
FUSED_ATTENTION = False


def fail(message):
    print(f"pytorch_reference.py: {message}", file=sys.stderr)
    sys.exit(2)


def apply_override(deck, override):
    """--set key.path=value as tessera-train applies it: `[i]` picks an
    array entry, the value is TOML or else a string."""
    if "=" not in override:
        fail(f"--set {override}: expected key.path=value")
    path, text = override.split("=", 1)
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    node = deck
    parts = path.split(".")
    for i, part in enumerate(parts):
        index = None
        if part.endswith("]") and "[" in part:
            part, index = part[:-1].split("[")
            index = int(index)
        last = i == len(parts) - 1
        if index is None:
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            entry = node[part]
            if index >= len(entry):
                fail(f"--set {override}: {part} has {len(entry)} entries")
            if last:
                entry[index] = value
            else:
                node = entry[index]


def pair(value):
    return tuple(value) if isinstance(value, list) else (value, value)


class Sum(nn.Module):
    def forward(self, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out


class Concat(nn.Module):
    def forward(self, *xs):
        return torch.cat(xs, dim=1)


class Embedding(nn.Module):
    """Tessera's embedding: token ids (floats in the input buffer) to
    vectors, plus a learned vector per position when asked."""

    def __init__(self, vocabulary, dim, positions):
        super().__init__()
        self.table = nn.Embedding(vocabulary, dim)
        self.position = nn.Parameter(torch.randn(positions, dim) * 0.02) if positions else None

    def forward(self, ids):
        y = self.table(ids.long())
        return y + self.position if self.position is not None else y


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention: fused QKV, causal mask, softmax, dropout,
    output projection; through torch's fused scaled_dot_product_attention
    where it has one (2.x), else the explicit path (1.13)."""

    def __init__(self, channels, positions, heads, dropout, bias):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(channels, 3 * channels, bias=bias)
        self.proj = nn.Linear(channels, channels, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(positions, positions, dtype=torch.bool)))

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(n, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if FUSED_ATTENTION:
            y = nn.functional.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout.p if self.training else 0.0, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(n, t, c))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = self.dropout(att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1))
        return self.proj((att @ v).transpose(1, 2).reshape(n, t, c))


def tied_weight(module):
    """The weight a Dense with `tie` shares: an embedding's table or a
    Dense's own (nn.Linear, or the Linear after nn.Flatten)."""
    if isinstance(module, Embedding):
        return module.table.weight
    return (module[-1] if isinstance(module, nn.Sequential) else module).weight


def make_layer(spec, in_shapes, modules):
    """The module for one [[model.layers]] entry; in_shapes exclude the
    batch; modules are the earlier layers' by name (for tied weights)."""
    kind = spec["type"]
    shape = in_shapes[0]
    if kind == "dense":
        last_axis = spec.get("last_axis", False)
        linear = nn.Linear(shape[-1] if last_axis else math.prod(shape), spec["units"],
                           bias=spec.get("bias", True))
        if spec.get("tie"):
            linear.weight = tied_weight(modules[spec["tie"]])
        return nn.Sequential(nn.Flatten(), linear) if len(shape) > 1 and not last_axis else linear
    if kind == "embedding":
        return Embedding(spec["vocabulary"], spec["dim"], shape[0] if spec.get("positions") else 0)
    if kind == "causalselfattention":
        return CausalSelfAttention(shape[-1], shape[0], spec["heads"], spec.get("dropout", 0.0),
                                   spec.get("bias", True))
    if kind == "conv2d":
        return nn.Conv2d(shape[0], spec["out_channels"], pair(spec["kernel"]),
                         pair(spec.get("stride", 1)), pair(spec.get("padding", 0)),
                         bias=spec.get("bias", True))
    if kind in ("maxpool2d", "avgpool2d"):
        kernel = pair(spec["kernel"])
        stride = pair(spec.get("stride", spec["kernel"]))
        padding = pair(spec.get("padding", 0))
        if kind == "maxpool2d":
            return nn.MaxPool2d(kernel, stride, padding)
        return nn.AvgPool2d(kernel, stride, padding, count_include_pad=True)
    if kind == "globalavgpool":
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
    if kind == "batchnorm":
        norm = nn.BatchNorm1d if len(shape) == 1 else nn.BatchNorm2d
        return norm(shape[0], eps=spec.get("eps", 1e-5), momentum=spec.get("momentum", 0.1))
    if kind == "layernorm":
        normalized = [shape[-1]] if spec.get("last_axis", False) else list(shape)
        return nn.LayerNorm(normalized, eps=spec.get("eps", 1e-5))
    if kind == "dropout":
        return nn.Dropout(spec["rate"])
    simple = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
              "flatten": nn.Flatten, "add": Sum, "concat": Concat}
    if kind in simple:
        return simple[kind]()
    if kind == "softmax":  # Tessera's is along dimension 1
        return nn.Softmax(dim=1)
    if kind == "leakyrelu":
        return nn.LeakyReLU(spec.get("slope", 0.01))
    fail(f"layer type '{kind}' is not known")


class DeckModel(nn.Module):
    """The layer graph of a deck: each layer reads named earlier layers
    ("input" is the model input), by default the previous one."""

    def __init__(self, deck):
        super().__init__()
        shapes = {"input": tuple(deck["model"]["input_shape"])}
        self.blocks = nn.ModuleList()
        self.wiring = []
        modules = {}
        previous = "input"
        for index, spec in enumerate(deck["model"]["layers"]):
            name = spec.get("name", f"{spec['type']}{index}")
            inputs = spec.get("inputs", [previous])
            module = make_layer(spec, [shapes[n] for n in inputs], modules)
            modules[name] = module
            with torch.no_grad():  # infer the output shape from a batch of two
                out = module(*[torch.zeros((2,) + shapes[n]) for n in inputs])
            shapes[name] = tuple(out.shape[1:])
            self.blocks.append(module)
            self.wiring.append((name, inputs))
            previous = name
        self.output = previous
        self.input_shape = shapes["input"]
        self.output_shape = shapes[previous]

    def forward(self, x):
        values = {"input": x}
        for module, (name, inputs) in zip(self.blocks, self.wiring):
            values[name] = module(*[values[n] for n in inputs])
        return values[self.output]


def make_optimizer(deck, parameters):
    opt = dict(deck.get("optimizer", {}))
    kind = opt.get("type", "sgd")
    if kind == "sgd":
        return torch.optim.SGD(parameters, lr=opt.get("lr", 0.01), momentum=opt.get("momentum", 0.0),
                               nesterov=opt.get("nesterov", False),
                               weight_decay=opt.get("weight_decay", 0.0))
    betas = (opt.get("beta1", 0.9), opt.get("beta2", 0.999))
    if kind == "adam":
        return torch.optim.Adam(parameters, lr=opt.get("lr", 0.001), betas=betas,
                                eps=opt.get("eps", 1e-8), weight_decay=opt.get("weight_decay", 0.0))
    if kind == "adamw":
        return torch.optim.AdamW(parameters, lr=opt.get("lr", 0.001), betas=betas,
                                 eps=opt.get("eps", 1e-8), weight_decay=opt.get("weight_decay", 0.01))
    fail(f"optimizer.type '{kind}' is not known")


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def defining_library(handle, symbol):
    """The file that defines `symbol` as the dynamic linker binds it for
    the library behind `handle`: the global scope first, then the library
    and its dependencies in load order. None if nothing defines it."""
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    for scope in (libc, handle):
        try:
            address = ctypes.cast(getattr(scope, symbol), ctypes.c_void_p)
        except AttributeError:
            continue
        info = DlInfo()
        if libc.dladdr(address, ctypes.byref(info)) and info.dli_fname:
            return info.dli_fname.decode()
    return None


def c_string(library, symbol, *args):
    try:
        function = getattr(library, symbol)
    except AttributeError:
        return None
    if args:  # MKL_Get_Version_String(buffer, length)
        buffer = ctypes.create_string_buffer(256)
        function(buffer, len(buffer) - 1)
        return buffer.value.decode(errors="replace")
    function.restype = ctypes.c_char_p
    return function().decode(errors="replace")


def blas_in_process():
    """The BLAS this process runs, read from the process after a matrix
    product: the library that defines the sgemm_ libtorch_cpu calls, what
    that library says it is, every BLAS library mapped, and the build
    settings torch reports."""
    a = torch.rand(64, 64)
    (a @ a).sum().item()
    mapped = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/") and fields[5] not in mapped:
                mapped.append(fields[5])
    blas_name = re.compile(r"^lib(open)?blas|^libmkl_|^libblis|^libflexiblas|^libcblas|^libatlas")
    blas_files = sorted({os.path.realpath(p) for p in mapped if blas_name.search(os.path.basename(p))})
    config = torch.__config__.show()
    settings = dict(re.findall(r"\b(BLAS_INFO|LAPACK_INFO)=([^,\s]*)", config))
    capability = re.search(r"CPU capability usage: (\S+)", config)
    info = {"mapped": blas_files, "torch_blas_info": settings.get("BLAS_INFO", ""),
            "cpu_capability": capability.group(1) if capability else "", "sgemm": "", "library": "",
            "threading": "", "warning": ""}
    torch_cpu = next((p for p in mapped if "libtorch_cpu" in os.path.basename(p)), None)
    provider = defining_library(ctypes.CDLL(torch_cpu), "sgemm_") if torch_cpu else None
    if provider:
        info["sgemm"] = os.path.realpath(provider)
        library = ctypes.CDLL(provider)
        openblas = c_string(library, "openblas_get_config")
        mkl = c_string(library, "MKL_Get_Version_String", True)
        blis = c_string(library, "bli_info_get_version_str")
        if openblas:
            info["library"] = openblas
            core = c_string(library, "openblas_get_corename")
            if core and core not in openblas:
                info["library"] += f" ({core})"
            parallel = getattr(library, "openblas_get_parallel", None)
            if parallel:
                info["threading"] = {0: "sequential", 1: "pthreads", 2: "OpenMP"}.get(parallel(), "")
        elif mkl:
            info["library"] = mkl.strip()
        elif blis:
            info["library"] = f"BLIS {blis}"
        else:
            info["library"] = "a BLAS that is not OpenBLAS, MKL or BLIS"
    if len({os.path.dirname(p) for p in blas_files}) > 1:
        info["warning"] = "BLAS libraries of more than one build are mapped: " + ", ".join(blas_files)
    return info


def emit(record):
    print(json.dumps(record), flush=True)


class CompileTimeout(Exception):
    pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deck")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="override a deck value, as tessera-train --set")
    parser.add_argument("--batch", type=int, help="batch size (default: training.batch_size)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per repetition")
    parser.add_argument("--repetitions", type=int, default=5, help="timed repetitions (median)")
    parser.add_argument("--variants", default="auto",
                        help="comma-separated, of " + ", ".join(VARIANTS) + "; auto (default): eager, "
                        "compiled where torch has torch.compile, and both with channels_last when "
                        "the model has a Conv2D")
    parser.add_argument("--compile-timeout", type=float, default=1200,
                        help="seconds a variant's warm-up (compilation included) may take")
    parser.add_argument("--serve", action="store_true",
                        help="warm up, print a ready line, then measure on each 'measure VARIANT' "
                        "line of stdin until 'quit' or end of input")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="where the twin trains (cuda: fp32 with TF32 off, fused attention)")
    parser.add_argument("--parameters", action="store_true",
                        help="print the parameter count ('total parameters: N') and exit")
    args = parser.parse_args()

    try:
        with open(args.deck, "rb") as f:
            deck = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{args.deck}: {e}")
    for override in args.overrides:
        apply_override(deck, override)
    seed = deck.get("run", {}).get("seed", 0)
    torch.manual_seed(seed)
    if args.parameters:
        # Tied weights are one tensor: parameters() yields it once.
        print(f"total parameters: {sum(p.numel() for p in DeckModel(deck).parameters())}")
        return
    if args.steps < 1 or args.repetitions < 1:
        fail("--steps and --repetitions must be at least 1")
    global FUSED_ATTENTION
    device = torch.device(args.device)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            fail("--device cuda: torch sees no CUDA GPU")
        # Both sides in fp32: no TF32 in matrix products or convolutions.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    # Attention through torch's fused kernel wherever it has one (2.x: flash
    # attention on the GPU and on the CPU; 1.13 builds the T x T matrix).
    FUSED_ATTENTION = hasattr(nn.functional, "scaled_dot_product_attention")
    batch = args.batch or deck.get("training", {}).get("batch_size", 128)
    clip_norm = deck.get("training", {}).get("clip_norm", 0.0)

    emit({"kind": "process", "framework": f"PyTorch {torch.__version__.split('+')[0]}",
          "torch_version": torch.__version__, "python": sys.executable,
          "torch_threads": torch.get_num_threads(),
          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", ""),
          "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", ""),
          "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""),
          "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
          "tf32": False if args.device == "cuda" else None,
          "fused_attention": FUSED_ATTENTION,
          "blas": blas_in_process()})

    probe = DeckModel(deck)
    has_conv = any(isinstance(m, nn.Conv2d) for m in probe.modules())
    can_compile = hasattr(torch, "compile")
    if args.variants == "auto":
        names = ["eager"] + (["compiled"] if can_compile else [])
        if has_conv:
            names += [f"{n}+channels_last" for n in names]
    else:
        names = args.variants.split(",")
        for name in names:
            if name not in VARIANTS:
                fail(f"--variants: '{name}' is not one of {', '.join(VARIANTS)}")

    loss_fn = nn.CrossEntropyLoss()
    # The same data tessera-bench uses in kind: inputs in [-1, 1), random
    # labels, one epoch = `steps` batches gathered through a permutation; for
    # a language model, windows of random token ids with a label per position.
    samples = batch * args.steps
    generator = torch.Generator().manual_seed(seed)
    classes = probe.output_shape[-1]
    if deck.get("data", {}).get("format") == "tokens":
        x = torch.randint(0, classes, (samples,) + probe.input_shape, generator=generator).float()
        y = torch.randint(0, classes, (samples,) + probe.input_shape, generator=generator)
    else:
        x = torch.rand((samples,) + probe.input_shape, generator=generator) * 2 - 1
        y = torch.randint(0, classes, (samples,), generator=generator)
    x, y = x.to(device), y.to(device)
    del probe

    class Variant:
        """One way to run the model: its own copy (same seed), optimizer
        and step function."""

        def __init__(self, name):
            self.name = name
            self.channels_last = name.endswith("+channels_last")
            if self.channels_last and len(x.shape) != 4:
                raise ValueError("channels_last needs 4-d inputs (images)")
            if name.startswith("compiled") and not can_compile:
                raise RuntimeError(f"PyTorch {torch.__version__} has no torch.compile")
            torch.manual_seed(seed)
            self.model = DeckModel(deck).to(device)
            if self.channels_last:
                self.model = self.model.to(memory_format=torch.channels_last)
            self.model.train()
            self.optimizer = make_optimizer(deck, self.model.parameters())
            model = self.model

            def forward_loss(inputs, labels):
                return loss_fn(model(inputs).reshape(-1, classes), labels.reshape(-1))

            # The model and the loss in one graph (inductor); the optimizer runs eagerly.
            self.forward_loss = torch.compile(forward_loss) if name.startswith("compiled") else forward_loss

        def epoch(self):
            order = torch.randperm(samples, generator=generator).to(device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for s in range(args.steps):
                index = order[s * batch:(s + 1) * batch]
                inputs, labels = x.index_select(0, index), y.index_select(0, index)
                if self.channels_last:
                    inputs = inputs.contiguous(memory_format=torch.channels_last)
                self.optimizer.zero_grad(set_to_none=False)
                loss = self.forward_loss(inputs, labels)
                loss.backward()
                if clip_norm > 0:
                    nn.utils.clip_grad_norm_(self.model.parameters(), clip_norm)
                self.optimizer.step()
            loss.item()  # waits for the device
            return (time.perf_counter() - start) / args.steps

        def measure(self):
            self.epoch()  # untimed, as tessera-bench warms up in every run
            step = statistics.median(self.epoch() for _ in range(args.repetitions))
            return {"kind": "variant", "variant": self.name, "status": "ok", "batch_size": batch,
                    "step_seconds": step, "samples_per_second": batch / step}

    def timed_out(signum, frame):
        raise CompileTimeout(f"warm-up (compilation included) took over {args.compile_timeout:g} s")

    signal.signal(signal.SIGALRM, timed_out)
    ready = {}
    for name in names:
        # A variant that fails or times out is reported and left out; the others go on.
        start = time.perf_counter()
        try:
            signal.setitimer(signal.ITIMER_REAL, args.compile_timeout)
            try:
                variant = Variant(name)
                variant.epoch()  # warm-up: torch.compile compiles here
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            warmup = time.perf_counter() - start
            if not args.serve:
                emit(dict(variant.measure(), warmup_seconds=warmup))
                del variant
            else:
                ready[name] = variant
        except Exception as e:  # noqa: BLE001 - any failure of one variant is its row's result
            traceback.print_exc(file=sys.stderr)
            message = str(e).strip().splitlines()
            emit({"kind": "variant", "variant": name, "status": "failed",
                  "error": f"{type(e).__name__}: {message[0] if message else ''}"[:300],
                  "warmup_seconds": time.perf_counter() - start})
    if not args.serve:
        return
    emit({"kind": "ready", "variants": list(ready)})
    for line in sys.stdin:
        command = line.split()
        if command == ["quit"]:
            break
        if len(command) == 2 and command[0] == "measure" and command[1] in ready:
            emit(ready[command[1]].measure())
        else:
            emit({"kind": "error", "error": f"unknown command '{line.strip()}'; "
                  f"expected 'measure VARIANT' (one of {', '.join(ready)}) or 'quit'"})


if __name__ == "__main__":
    main()
