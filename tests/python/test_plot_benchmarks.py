"""docs/plot_benchmarks.py draws one PNG per saved benchmark output, one bar per ratio key.

Runs the script on the outputs committed in docs/bench-results (into a temporary directory) and
on made-up outputs, and checks: each image is a PNG of a plausible size; the count of ratios the
script reports for a file equals the count of numeric '_vs_' keys read here with a regular
expression; a file without ratio keys is skipped with a message; an empty directory, and a
missing matplotlib, are refused with exit status 2 and a message. Usage: SCRIPT DOCS_DIR.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

docs = sys.argv[1]
script = os.path.join(docs, "plot_benchmarks.py")
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print("FAIL:", what)


def ratio_keys(path):
    """The positive numeric keys with '_vs_' of a key=value file (the independent count)."""
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.fullmatch(r"[A-Za-z0-9_]*_vs_[A-Za-z0-9_]*=[0-9.]*[1-9][0-9.]*(e[-+]?[0-9]+)?\s*", line):
                n += 1
    return n


def run(results, images, env=None):
    return subprocess.run([sys.executable, script, results, images], capture_output=True,
                          text=True, timeout=300, env=env)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def check_dir(results):
    with tempfile.TemporaryDirectory() as images:
        r = run(results, images)
        check(r.returncode == 0, f"plot over {results}: exit {r.returncode}: {r.stderr}")
        for name in sorted(f[:-4] for f in os.listdir(results) if f.endswith(".txt")):
            want = ratio_keys(os.path.join(results, name + ".txt"))
            out = os.path.join(images, f"bench-{name}.png")
            if want == 0:
                check(not os.path.exists(out) and f"{name}.txt has no ratio keys" in r.stderr,
                      f"{name}: no ratios, no image, a message")
                continue
            check(f"{out}: {want} ratios" in r.stdout, f"{name}: {want} ratios reported ({r.stdout})")
            size = png_size(out) if os.path.exists(out) else None
            check(size is not None and size[0] >= 400 and size[1] >= 100,
                  f"{name}: a PNG of a plausible size ({size})")


check_dir(os.path.join(docs, "bench-results"))
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "a.txt"), "w") as f:
        f.write("# date: 2026-01-01\n# machine: test\nx_ms=3\nx_vs_raw=1.5\ny_vs_memcpy=0.8\n"
                "bad_vs_value=abc\ninf_vs_raw=inf\nzero_vs_raw=0\nneg_vs_raw=-2\n")
    with open(os.path.join(d, "b.txt"), "w") as f:
        f.write("only_ms=4\n")
    check_dir(d)
with tempfile.TemporaryDirectory() as d:
    r = run(d, d)
    check(r.returncode == 2 and "no NAME.txt outputs" in r.stderr, f"empty dir refused: {r.stderr}")
with tempfile.TemporaryDirectory() as d:
    # a package directory named matplotlib that fails to import stands for a missing one
    os.makedirs(os.path.join(d, "matplotlib"))
    with open(os.path.join(d, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('no matplotlib here')\n")
    r = run(os.path.join(docs, "bench-results"), d, env=dict(os.environ, PYTHONPATH=d))
    check(r.returncode == 2 and "python3-matplotlib" in r.stderr, f"missing matplotlib: {r.stderr}")

print(f"{failures} failures")
sys.exit(1 if failures else 0)
