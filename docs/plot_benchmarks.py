"""Draws the benchmark figures of docs/benchmarks.md from saved benchmark outputs.

Each file docs/bench-results/NAME.txt holds one run of a tshard-bench program: a header of
'# key: value' lines (date, machine, command) and the program's key=value lines. For each file
this writes docs/images/bench-NAME.png: one bar per ratio key (a key with '_vs_' in its name and
a positive value: the program's figure against a limit measured in the same run), on a log
scale, with the line at 1 (at the limit) drawn across.

Usage: plot_benchmarks.py [RESULTS_DIR [IMAGES_DIR]] (defaults: docs/bench-results, docs/images).
Needs Debian's python3-matplotlib (docs/make-plots.sh installs it).
"""
import math
import os
import sys


def read_result(path):
    """The header (dict) and the numeric key=value lines (list of (key, float)) of one output."""
    header, values = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("#"):
                key, sep, value = line[1:].partition(":")
                if sep:
                    header[key.strip()] = value.strip()
            elif "=" in line:
                key, _, value = line.partition("=")
                try:
                    number = float(value)
                except ValueError:
                    continue
                if math.isfinite(number):
                    values.append((key.strip(), number))
    return header, values


def plot(name, header, ratios, out_path, plt):
    """One horizontal bar chart of the ratio keys, titled with the run's header."""
    height = 1.2 + 0.28 * len(ratios)
    fig, ax = plt.subplots(figsize=(9, height))
    keys = [k for k, _ in ratios]
    vals = [v for _, v in ratios]
    bars = ax.barh(range(len(keys)), vals, color="#4c72b0")
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(keys, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")  # ratios span from a few hundredths to hundreds
    ax.axvline(1.0, color="#c44e52", linestyle="--", linewidth=1)
    for bar, v in zip(bars, vals):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:.3g}",
                va="center", fontsize=7)
    ax.set_xlabel("ratio against the limit measured in the same run (1 = at the limit)")
    title = f"tshard-bench-{name}"
    detail = ", ".join(header[k] for k in ("date", "machine") if k in header)
    ax.set_title(f"{title}\n{detail}" if detail else title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)


def main(argv):
    results = argv[1] if len(argv) > 1 else "docs/bench-results"
    images = argv[2] if len(argv) > 2 else "docs/images"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_benchmarks: matplotlib is missing (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 2
    names = sorted(f[:-4] for f in os.listdir(results) if f.endswith(".txt"))
    if not names:
        print(f"plot_benchmarks: no NAME.txt outputs in {results}", file=sys.stderr)
        return 2
    os.makedirs(images, exist_ok=True)
    for name in names:
        header, values = read_result(os.path.join(results, name + ".txt"))
        ratios = [(k, v) for k, v in values if "_vs_" in k and v > 0]
        if not ratios:
            print(f"plot_benchmarks: {name}.txt has no ratio keys; skipped", file=sys.stderr)
            continue
        out = os.path.join(images, f"bench-{name}.png")
        plot(name, header, ratios, out, plt)
        print(f"{out}: {len(ratios)} ratios")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
