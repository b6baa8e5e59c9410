#!/usr/bin/env python3
"""Checks an ONNX model tessera-export wrote against Tessera's own
predictions (tessera-predict --out FILE.h5 --save-inputs):

    check_onnx.py MODEL.onnx PREDICTIONS.h5 [--tolerance 1e-5]

onnx.checker (full check) and strict shape inference must pass, the
inferred output shape must be [batch, *logits shape] with a symbolic batch,
and onnxruntime (CPUExecutionProvider) and onnx.reference.ReferenceEvaluator
must each reproduce the file's logits from its inputs within the relative
error ||a - b|| / ||b|| <= tolerance (b: Tessera's logits). Prints one line
per runner; exit status 1 when a check fails, 2 on a usage error.

Needs a current onnx, onnxruntime, numpy and h5py (tests/export/requirements.txt).
The helpers read_predictions, relative_error and compare serve
check_pytorch.py too.
"""
import argparse
import sys

import h5py
import numpy as np

TOLERANCE = 1e-5


def usage_error(program, message):
    print(f"{program}: {message}", file=sys.stderr)
    sys.exit(2)


def check_failed(program, message):
    print(f"{program}: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def read_predictions(program, path):
    """The file's inputs (float32, token ids as floats) and logits."""
    try:
        with h5py.File(path, "r") as f:
            missing = [name for name in ("inputs", "logits") if name not in f]
            if missing:
                usage_error(program, f"{path}: no dataset {' or '.join(missing)} (write it with "
                            "tessera-predict --out FILE.h5 --save-inputs)")
            return np.asarray(f["inputs"], dtype=np.float32), np.asarray(f["logits"],
                                                                          dtype=np.float32)
    except OSError as e:
        usage_error(program, f"cannot read {path}: {e}")


def relative_error(actual, expected):
    """||actual - expected|| / ||expected|| in double precision."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return None
    norm = np.linalg.norm(expected)
    difference = np.linalg.norm(actual - expected)
    return difference / norm if norm > 0 else difference


def compare(program, runner, actual, expected, tolerance):
    """Prints the runner's error; returns a failure message or None."""
    error = relative_error(actual, expected)
    if error is None:
        print(f"{runner}: output shape {list(np.shape(actual))}, expected {list(expected.shape)}")
        return f"{runner}: output shape {list(np.shape(actual))} is not the logits' " \
               f"{list(expected.shape)}"
    ok = bool(np.isfinite(error)) and error <= tolerance
    print(f"{runner}: relative error {error:.3e} (tolerance {tolerance:g}) "
          f"{'ok' if ok else 'FAILED'}")
    return None if ok else f"{runner}: relative error {error:.3e} exceeds {tolerance:g}"


def main():
    program = "check_onnx.py"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the ONNX model (tessera-export --onnx)")
    parser.add_argument("predictions", help="tessera-predict --out FILE.h5 --save-inputs")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE,
                        help=f"largest relative error in norm (default {TOLERANCE:g})")
    args = parser.parse_args()

    import onnx
    import onnx.reference
    import onnxruntime

    try:
        model = onnx.load(args.model)
    except Exception as e:  # noqa: BLE001 - onnx raises several kinds for a bad file
        usage_error(program, f"cannot read {args.model} as an ONNX model: {e}")
    inputs, logits = read_predictions(program, args.predictions)

    try:
        onnx.checker.check_model(model, full_check=True)
        inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        check_failed(program, f"{args.model}: {e}")
    outputs = inferred.graph.output
    if len(outputs) != 1:
        check_failed(program, f"{args.model}: {len(outputs)} graph outputs, expected one")
    dims = outputs[0].type.tensor_type.shape.dim
    shape = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in dims]
    if not dims or dims[0].HasField("dim_value") or shape[1:] != list(logits.shape[1:]):
        expected = ", ".join(["batch"] + [str(d) for d in logits.shape[1:]])
        check_failed(program, f"{args.model}: output '{outputs[0].name}' is inferred as {shape}; "
                     f"expected [{expected}] with a symbolic batch")
    print(f"shape inference: output {outputs[0].name} {shape}")

    graph_input = model.graph.input[0]
    if graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        if not np.array_equal(inputs, np.round(inputs)):
            check_failed(program, f"{args.predictions}: the model takes token ids, the inputs "
                         "are not whole numbers")
        inputs = inputs.astype(np.int64)
    feed = {graph_input.name: inputs}

    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    failures = [compare(program, "onnxruntime", session.run(None, feed)[0], logits,
                        args.tolerance),
                compare(program, "onnx.reference", onnx.reference.ReferenceEvaluator(model).run(
                    None, feed)[0], logits, args.tolerance)]
    failures = [f for f in failures if f]
    if failures:
        check_failed(program, "; ".join(failures))


if __name__ == "__main__":
    main()
