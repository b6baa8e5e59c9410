#!/usr/bin/env python3
"""PyTorch reference for tessera-bench: builds the model a Tessera deck
describes, trains it on the same synthetic data shapes with the deck's
optimizer, and prints the median training-step throughput as one JSON line.

Thread settings are the caller's: --threads sets torch.set_num_threads, and
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS must be set in the environment before
Python starts (bench/side_by_side.sh tries several and keeps the best).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import tomllib

import torch
from torch import nn


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
    """nanoGPT's attention (its explicit path: PyTorch 1.13 has no fused
    scaled_dot_product_attention): fused QKV, causal mask, softmax,
    dropout, output projection."""

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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = self.dropout(att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1))
        return self.proj((att @ v).transpose(1, 2).reshape(n, t, c))


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
            linear.weight = modules[spec["tie"]].table.weight
        return nn.Sequential(nn.Flatten(), linear) if len(shape) > 1 and not last_axis else linear
    if kind == "embedding":
        return Embedding(spec["vocabulary"], spec["dim"], shape[0] if spec.get("positions") else 0)
    if kind == "causalselfattention":
        return CausalSelfAttention(shape[-1], shape[0], spec["heads"], spec.get("dropout", 0.0),
                                   spec.get("bias", True))
    if kind == "conv2d":
        return nn.Conv2d(shape[0], spec["out_channels"], pair(spec["kernel"]),
                         pair(spec.get("stride", 1)), pair(spec.get("padding", 0)))
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deck")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="override a deck value, as tessera-train --set")
    parser.add_argument("--batch", type=int, help="batch size (default: training.batch_size)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per repetition")
    parser.add_argument("--repetitions", type=int, default=5, help="timed repetitions (median)")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    args = parser.parse_args()

    try:
        with open(args.deck, "rb") as f:
            deck = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"{args.deck}: {e}")
    for override in args.overrides:
        apply_override(deck, override)
    if args.threads:
        torch.set_num_threads(args.threads)
    batch = args.batch or deck.get("training", {}).get("batch_size", 128)
    seed = deck.get("run", {}).get("seed", 0)
    clip_norm = deck.get("training", {}).get("clip_norm", 0.0)

    torch.manual_seed(seed)
    model = DeckModel(deck)
    model.train()
    optimizer = make_optimizer(deck, model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    # The same data tessera-bench uses in kind: inputs in [-1, 1), random
    # labels, one epoch = `steps` batches gathered through a permutation; for
    # a language model, windows of random token ids with a label per position.
    samples = batch * args.steps
    generator = torch.Generator().manual_seed(seed)
    classes = model.output_shape[-1]
    if deck.get("data", {}).get("format") == "tokens":
        x = torch.randint(0, classes, (samples,) + model.input_shape, generator=generator).float()
        y = torch.randint(0, classes, (samples,) + model.input_shape, generator=generator)
    else:
        x = torch.rand((samples,) + model.input_shape, generator=generator) * 2 - 1
        y = torch.randint(0, classes, (samples,), generator=generator)

    def epoch():
        order = torch.randperm(samples, generator=generator)
        start = time.perf_counter()
        for s in range(args.steps):
            index = order[s * batch:(s + 1) * batch]
            inputs, labels = x.index_select(0, index), y.index_select(0, index)
            optimizer.zero_grad(set_to_none=False)
            loss = loss_fn(model(inputs).reshape(-1, classes), labels.reshape(-1))
            loss.backward()
            if clip_norm > 0:
                nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
        loss.item()
        return (time.perf_counter() - start) / args.steps

    epoch()  # warm-up
    step = statistics.median(epoch() for _ in range(args.repetitions))
    print(json.dumps({
        "framework": f"PyTorch {torch.__version__}",
        "deck": args.deck,
        "overrides": args.overrides,
        "batch_size": batch,
        "torch_threads": torch.get_num_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", ""),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", ""),
        "step_seconds": step,
        "samples_per_second": batch / step,
    }))


if __name__ == "__main__":
    main()
