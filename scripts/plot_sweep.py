#!/usr/bin/env python3
"""Plot a tessera-sweep directory: the objective against each parameter, and
the validation curves of the best trials.

    python3 scripts/plot_sweep.py output/<sweep> [-o sweep.png] [--best 3]

Reads <sweep>/sweep.jsonl (the parameters and the objective), <sweep>/results.csv
(every trial's values and results) and the best trials' metrics.jsonl. Trials
stopped early by successive halving are drawn hollow, at the objective of the
rung where they stopped; failed trials are left out and counted in the title.
"""
import argparse
import csv
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_metrics import load_run  # noqa: E402  (the same metrics reader)


def read_sweep(directory):
    log_path = os.path.join(directory, "sweep.jsonl")
    header = None
    try:
        with open(log_path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a last line cut short by a kill
                if record.get("type") == "sweep":
                    header = record
    except OSError as e:
        sys.exit(f"{log_path}: {e.strerror}")
    if header is None:
        sys.exit(f"{log_path}: no sweep record; is this a tessera-sweep directory?")
    results_path = os.path.join(directory, "results.csv")
    try:
        with open(results_path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"{results_path}: {e.strerror} (the sweep has not finished yet)")
    return header, rows


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def epoch_curve(directory, metric):
    """(epochs, values) of a trial's metric, each epoch once (a resumed run
    logs the epochs after its checkpoint again; the later record wins)."""
    path = os.path.join(directory, "metrics.jsonl")
    _, epochs = load_run(path)
    by_epoch = {e["epoch"]: e[metric] for e in epochs if metric in e}
    xs = sorted(by_epoch)
    return xs, [by_epoch[x] for x in xs]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="the sweep directory (sweep.output_dir)")
    parser.add_argument("-o", "--output", help="PNG to write (default: <sweep>/sweep.png)")
    parser.add_argument("--best", type=int, default=3, help="curves of this many best trials")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_sweep.py needs matplotlib: apt-get install python3-matplotlib")

    header, rows = read_sweep(args.sweep)
    metric = header["metric"]
    parameters = header["parameters"]
    ok = [r for r in rows if r["state"] != "failed"]
    failed = len(rows) - len(ok)
    if not ok:
        sys.exit(f"{args.sweep}: every trial failed; nothing to plot")

    panels = len(parameters) + 1
    columns = min(panels, 3)
    lines = math.ceil(panels / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.6 * columns, 3.8 * lines), squeeze=False)
    axes = [ax for row in axes for ax in row]
    for ax in axes[panels:]:
        ax.set_visible(False)

    for ax, parameter in zip(axes, parameters):
        key = parameter["key"]
        values = [r[key] for r in ok]
        numeric = all(number(v) is not None for v in values)
        if numeric:
            xs = [number(v) for v in values]
            positive = all(x > 0 for x in xs)
            spread = positive and max(xs) >= 20 * min(xs)
            if parameter["distribution"] == "log_uniform" or spread:
                ax.set_xscale("log")
        else:
            categories = sorted(set(values))
            xs = [categories.index(v) for v in values]
            ax.set_xticks(range(len(categories)))
            ax.set_xticklabels(categories)
        ys = [float(r[metric]) for r in ok]
        finished = [r["state"] == "finished" for r in ok]
        ax.scatter([x for x, f in zip(xs, finished) if f], [y for y, f in zip(ys, finished) if f],
                   label="finished", zorder=3)
        if not all(finished):
            ax.scatter([x for x, f in zip(xs, finished) if not f],
                       [y for y, f in zip(ys, finished) if not f],
                       facecolors="none", edgecolors="C0", label="stopped early", zorder=3)
            ax.legend(fontsize="small")
        ax.set(xlabel=key, ylabel=metric)
        ax.grid(alpha=0.3)

    curves = axes[len(parameters)]
    for r in ok[: args.best]:
        trial_dir = os.path.join(args.sweep, r["directory"])
        xs, ys = epoch_curve(trial_dir, metric)
        # The values are in results.md; long labels would squeeze the panels.
        curves.plot(xs, ys, "o-", label=f"trial {r['trial']} (rank {r['rank']})")
    curves.set(xlabel="epoch", ylabel=metric, title=f"the best {min(args.best, len(ok))} trials")
    curves.grid(alpha=0.3)
    curves.legend(fontsize="small")

    title = (f"sweep {header['name']}: {header['strategy']}, {len(rows)} trials, "
             f"{metric} ({header['goal']})")
    if failed:
        title += f"; {failed} failed"
    fig.suptitle(title)
    fig.tight_layout()
    output = args.output or os.path.join(args.sweep, "sweep.png")
    fig.savefig(output, dpi=110)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
