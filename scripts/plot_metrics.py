#!/usr/bin/env python3
"""Plot a tessera-train metrics file (JSON lines) as loss and accuracy curves.

    python3 scripts/plot_metrics.py output/<run>/metrics.jsonl [-o curves.png]

The PNG shows the per-step training loss with the per-epoch test loss, and
the per-epoch training and test accuracy. A run restarted from a checkpoint
is plotted whole, its pieces joined at the checkpoint's step; of a file that
holds several runs (written before an output folder held one run only),
the last.
"""
import argparse
import json
import os
import sys


def load_run(path):
    """The per-step and per-epoch records of the file's last run, joined
    across its restarts.

    A "run" record starts a new run unless a "restart" record follows it: a
    restart continues the records before it, cut at the checkpoint's step
    (and its completed epochs), so that steps trained after the checkpoint
    and then trained again appear once. A "run" record with nothing after it
    (a run that stopped before training, in files written before such runs
    left no record) does not end the run before it.
    """
    steps, epochs = [], []
    new_run = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON line: {e}")
            kind = record.get("type")
            if kind == "run":
                new_run = True
            elif kind == "restart":
                new_run = False
                steps = [s for s in steps if s["step"] <= record["step"]]
                if "epoch" in record:
                    epochs = [e for e in epochs if e["epoch"] <= record["epoch"]]
            elif kind in ("step", "epoch"):
                if new_run:
                    steps, epochs = [], []
                    new_run = False
                (steps if kind == "step" else epochs).append(record)
    if not steps:
        sys.exit(f"{path}: no training steps recorded")
    return steps, epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", help="metrics.jsonl written by tessera-train")
    parser.add_argument("-o", "--output", help="PNG to write (default: next to the metrics file)")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics.py needs matplotlib: apt-get install python3-matplotlib")

    steps, epochs = load_run(args.metrics)
    output = args.output or os.path.join(os.path.dirname(args.metrics), "curves.png")
    steps_per_epoch = max(1, len(steps) // max(1, len(epochs)))

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4))
    loss_ax.plot([s["step"] / steps_per_epoch for s in steps], [s["loss"] for s in steps],
                 lw=0.6, alpha=0.6, label="train (per step)")
    if epochs:
        acc_ax.plot([e["epoch"] for e in epochs], [e["train_accuracy"] for e in epochs], "o-", label="train")
    # Epochs that were evaluated, on the validation split or the test set.
    for kind in ("validation", "test"):
        evaluated = [e for e in epochs if kind + "_loss" in e]
        if evaluated:
            loss_ax.plot([e["epoch"] for e in evaluated], [e[kind + "_loss"] for e in evaluated], "o-", label=kind)
            acc_ax.plot([e["epoch"] for e in evaluated], [e[kind + "_accuracy"] for e in evaluated], "o-", label=kind)
    loss_ax.set(xlabel="epoch", ylabel="loss", title="loss")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    for ax in (loss_ax, acc_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
