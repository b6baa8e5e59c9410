#!/usr/bin/env python3
"""Checks a PyTorch state dict tessera-export wrote against Tessera's own
predictions (tessera-predict --out FILE.h5 --save-inputs):

    check_pytorch.py --twin bench/pytorch_reference.py DECK MODEL.pt PREDICTIONS.h5
                     [--set key=value ...] [--tolerance 1e-5]

Builds the deck's PyTorch twin (DeckModel of bench/pytorch_reference.py,
with the same --set overrides as tessera-train), loads the state dict with
strict=True (its keys must be exactly the twin's), and runs the file's
inputs in fp32, in evaluation mode; the relative error in norm against the
file's logits must be at most the tolerance. Exit status 1 when a check
fails, 2 on a usage error.
"""
import argparse
import importlib.util
import os
import sys
import tomllib

# One thread unless told otherwise, set before NumPy and torch load their
# BLAS: Debian's torch 1.13 over pthreads OpenBLAS has hung in small matrix
# products with more.
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_onnx import TOLERANCE, check_failed, compare, read_predictions, usage_error  # noqa: E402

PROGRAM = "check_pytorch.py"


def import_twin(path):
    spec = importlib.util.spec_from_file_location("pytorch_reference", path)
    if spec is None or not os.path.isfile(path):
        usage_error(PROGRAM, f"--twin {path}: no such Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--twin", required=True, help="bench/pytorch_reference.py")
    parser.add_argument("deck")
    parser.add_argument("model", help="the state dict (tessera-export --pytorch)")
    parser.add_argument("predictions", help="tessera-predict --out FILE.h5 --save-inputs")
    parser.add_argument("--set", action="append", default=[], dest="overrides",
                        help="override a deck value, as tessera-train --set")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help=f"largest relative error in norm (default {TOLERANCE:g})")
    args = parser.parse_args()

    twin = import_twin(args.twin)
    import torch

    try:
        with open(args.deck, "rb") as f:
            deck = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        usage_error(PROGRAM, f"{args.deck}: {e}")
    for override in args.overrides:
        twin.apply_override(deck, override)
    inputs, logits = read_predictions(PROGRAM, args.predictions)
    try:
        state = torch.load(args.model)
    except Exception as e:  # noqa: BLE001 - torch.load raises several kinds for a bad file
        usage_error(PROGRAM, f"cannot read {args.model} as a PyTorch state dict: {e}")

    model = twin.DeckModel(deck)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        check_failed(PROGRAM, f"{args.model} does not fit the twin of {args.deck}: {e}")
    model.eval()
    with torch.no_grad():
        actual = model(torch.from_numpy(inputs)).numpy()
    failure = compare(PROGRAM, "pytorch", actual, logits, args.tolerance)
    if failure:
        check_failed(PROGRAM, failure)


if __name__ == "__main__":
    main()
