#!/usr/bin/python3
"""The shipped example programs (deploy/examples/programs) run exactly as documented: every shell
and Python block of deploy/examples/programs/README.md and the two blocks of docs/programs.md's
"Compiled programs" section (after its marker comment) run as written, from a work directory
where `deploy` and `build/bin` are the repository's and this build's, against 4 real daemons of
job "demo" (TSHARD_SOCKET_DIR points the CLI and Python at them; the blocks' launcher lines are
this harness's job), and so do the examples `tshard program --help` prints. Every program run of the blocks, through the CLI and through Python, is
checked against numpy on the tensors as they were just before it (sharded over 4 ranks): Adam,
AdamW in bf16 (the bf16 weights checked to the last bit as the round-to-nearest-even of the f32
master, on the uint32 bits), SGD with momentum, the two steps of the gradient-norm clip, the
layer norm and README's sum-of-squares program. The ids the documents give are the ones compile
prints, and compile prints a short report (no bucket list) unless --verbose.

usage: test_program_examples.py BUILD_BIN_DIR SOURCE_DIR"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-examples-")
os.makedirs(os.path.join(work, "build"))
os.symlink(os.path.join(src, "deploy"), os.path.join(work, "deploy"))
os.symlink(bin_dir, os.path.join(work, "build", "bin"))
os.environ["TSHARD_PROGRAM_CACHE"] = os.path.join(work, "cache")
os.makedirs(os.environ["TSHARD_PROGRAM_CACHE"], mode=0o700)

IDS = {"b4ef54aea3cd6255": "adam", "311f6c322375ed14": "adamw_bf16",
       "318ec4c96e63ffea": "sgd_momentum", "24233af1af5043f4": "clip_sumsq",
       "0f7ae550fff1b62b": "clip_scale", "79f841339a4cba56": "layernorm"}
verified = set()


def blocks(path, after=None):
    """The fenced sh and python blocks of a markdown file (after the marker line, if given)."""
    text = open(path).read()
    if after is not None:
        text = text[text.index(after):]
    return re.findall(r"```(sh|python)\n(.*?)```", text, re.S)


def bf16_bits(x):
    """Round-to-nearest-even of f32 values to bf16, on their uint32 bits (numpy has no bf16)."""
    u = np.atleast_1d(np.asarray(x, np.float32)).view(np.uint32).astype(np.uint64)
    s16, one = np.uint64(16), np.uint64(1)
    r = ((u + np.uint64(0x7FFF) + ((u >> s16) & one)) >> s16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, np.float32))
    return np.where(nan, ((u >> s16) | np.uint64(0x40)).astype(np.uint16), r)


def bf16_value(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def close(got, want, what, rtol=1e-5, atol=1e-6):
    ok = got.shape == want.shape and np.allclose(got, want, rtol=rtol, atol=atol)
    err = np.max(np.abs(got - want)) if got.shape == want.shape else f"{got.shape} {want.shape}"
    return check(ok, f"{what}: max diff {err}")


def verify(c, pid, args, outputs, before):
    """The tensors after a run of program pid against numpy on their values before it."""
    name = IDS.get(pid, "sum_of_squares" if set(args) == {"x"} else pid)
    t = {k: before.get(k) for k in args}
    s = {k: np.float32(v) for k, v in args.items() if not isinstance(v, str)}
    got = lambda k: c.get(args[k])  # noqa: E731
    out = lambda k: c.get((outputs or {}).get(k, k))  # noqa: E731
    if name == "adam":
        m = np.float32(0.9) * t["m"] + np.float32(0.1) * t["g"]
        v = np.float32(0.999) * t["v"] + np.float32(0.001) * (t["g"] * t["g"])
        w = t["w"] - (m / (np.sqrt(v) + np.float32(1e-8))) * s["lr"]
        close(got("m"), m, "adam m") and close(got("v"), v, "adam v")
        close(got("w"), w, "adam w")
    elif name == "adamw_bf16":
        g = bf16_value(t["g"])
        m = t["m"] * np.float32(0.9) + g * np.float32(0.1)
        v = t["v"] * np.float32(0.999) + (g * g) * np.float32(0.001)
        master = (t["master"] - t["master"] * s["decay"]) - (m / (np.sqrt(v) + np.float32(1e-8))) * s["lr"]
        close(got("m"), m, "adamw m") and close(got("v"), v, "adamw v")
        new_master = got("master")
        close(new_master, master, "adamw master")
        w = got("w")
        check(w.dtype == np.uint16 and np.array_equal(w, bf16_bits(new_master)),
              f"adamw: the bf16 weights are the master rounded to nearest even, bit for bit "
              f"({np.count_nonzero(w != bf16_bits(new_master))} differ)")
        check(np.array_equal(got("g"), t["g"]), "adamw: g unchanged")
    elif name == "sgd_momentum":
        buf = t["buf"] * s["momentum"] + (t["g"] + t["w"] * s["wd"])
        close(got("buf"), buf, "sgd buf")
        close(got("w"), t["w"] - buf * s["lr"], "sgd w")
    elif name == "clip_sumsq":
        total = out("sumsq")
        close(total, np.array((t["g"].astype(np.float64) ** 2).sum(), np.float32), "clip sumsq",
              rtol=1e-6)
        check("P(sum)" in c.describe((outputs or {}).get("sumsq", "sumsq"))["attr"],
              "clip sumsq: the sum of the ranks' partial sums")
    elif name == "clip_scale":
        scale = min(np.float32(1), s["max_norm"] / (np.sqrt(t["sumsq"]) + np.float32(1e-6)))
        close(got("g"), t["g"] * np.float32(scale), "clip scale")
        check(np.sqrt((got("g").astype(np.float64) ** 2).sum()) <= float(s["max_norm"]) * 1.0001,
              "clip: the norm after is at most max_norm")
    elif name == "layernorm":
        x = t["x"].astype(np.float64)
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        y = (x - mu) / np.sqrt(var + 1e-5) * t["gamma"] + t["beta"]
        close(out("y"), y.astype(np.float32), "layernorm y", rtol=1e-4, atol=1e-4)
        rows = lambda n: [(r["lo"][0], r["hi"][0]) for r in c.describe(n)["ranks"]]  # noqa: E731
        check(rows((outputs or {}).get("y", "y")) == rows(args["x"]), "layernorm: y is split like x")
    elif name == "sum_of_squares":
        close(out("total"), np.array((t["x"].astype(np.float64) ** 2).sum(), np.float32),
              "README sum of squares", rtol=1e-6)
    else:
        check(False, f"a run of an unknown program {pid}")
    verified.add(name)


def snapshot(c, args):
    names = set(c.list())
    return {k: c.get(v) for k, v in args.items() if isinstance(v, str) and v in names}


# Python blocks: each program_run is checked against the state just before it
plain_run = tshard.Client.program_run


def checked_run(self, program_id, inputs, outputs=None, key=None, overwrite=False):
    before = snapshot(self, inputs)
    plain_run(self, program_id, inputs, outputs, key=key, overwrite=overwrite)
    verify(self, program_id, inputs, outputs, before)


tshard.Client.program_run = checked_run


def run_sh(d, c, line):
    """One documented command line, as written (a program run checked against numpy)."""
    argv = shlex.split(line, comments=True)
    if not argv or argv[0] == "deploy/tshard-launch":
        return
    args, outputs = {}, {}
    argv[0] = "build/bin/tshard" if argv[0] == "tshard" else argv[0]  # --help's examples
    if argv[:3] == ["build/bin/tshard", "program", "run"]:
        for flag, dest in (("--input", args), ("--output", outputs)):
            for i, a in enumerate(argv):
                if a == flag:
                    k, v = argv[i + 1].split("=", 1)
                    try:
                        dest[k] = float(v) if flag == "--input" else v
                    except ValueError:
                        dest[k] = v
    before = snapshot(c, args)
    r = subprocess.run(line, shell=True, cwd=work, capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"`{line}` exits 0: {r.returncode} {r.stdout} {r.stderr}"):
        return
    if argv[:3] == ["build/bin/tshard", "program", "compile"]:
        documented = re.search(r"id=([0-9a-f]{16})", line)
        pid = r.stdout.split("\n")[0][3:]
        check(pid in IDS and (not documented or documented.group(1) == pid),
              f"compile prints the documented id: {r.stdout[:40]}")
        check("buckets: " in r.stdout and "\n  bucket 0:" not in r.stdout and
              "--buckets ahead" in r.stdout, f"compile prints a short report: {r.stdout}")
    if argv[:3] == ["build/bin/tshard", "program", "run"]:
        verify(c, argv[3], args, outputs, before)


with Daemons(bin_dir, 4, job="demo") as d:
    os.environ["TSHARD_SOCKET_DIR"] = d.dir
    os.chdir(work)
    with d.connect(0) as c:
        readme = blocks(os.path.join(src, "docs", "programs.md"),
                        after="<!-- tests/python/test_program_examples.py")[:2]
        examples = blocks(os.path.join(src, "deploy/examples/programs/README.md"))
        for lang, body in readme + [("drop", "")] + examples:
            if lang == "drop":  # the two documents each start from no tensors
                for name in c.list():
                    c.drop(name)
                continue
            if lang == "sh":
                for line in body.splitlines():
                    run_sh(d, c, line)
            else:
                try:
                    exec(compile(body, "<documented block>", "exec"), {})
                except Exception as e:  # a documented block that fails is a failed check
                    check(False, f"documented Python block failed: {e!r}\n{body}")
        check(verified == set(IDS.values()) | {"sum_of_squares"},
              f"every example ran and was checked: {sorted(verified)}")
        # the examples of `tshard program --help`, as printed (tshard on the PATH, TSHARD_JOB)
        os.environ["PATH"] = os.path.join(work, "build", "bin") + os.pathsep + os.environ["PATH"]
        os.environ["TSHARD_JOB"] = "demo"
        helped = subprocess.run(["tshard", "program", "--help"], capture_output=True, text=True,
                                timeout=60).stdout.split("example:\n", 1)[-1]
        check(helped.count("tshard program ") == 2, f"--help has two examples: {helped}")
        for line in helped.strip().splitlines():
            run_sh(d, c, line.strip())
        report = c.program_show("311f6c322375ed14")
        check("kernel 0: elementwise, 16 fused" in report and "kernel 1:" not in report,
              f"the AdamW bf16 step is one fused kernel: {report[:1500]}")
        # the full report on request: every bucket
        r = subprocess.run(["build/bin/tshard", "program", "compile",
                            "deploy/examples/programs/adam.json", "--verbose", "--job", "demo"],
                           cwd=work, capture_output=True, text=True, timeout=300)
        check(r.returncode == 0 and "\n  bucket 0: n=1 not built" in r.stdout and
              "\n  bucket 30: n=1073741824" in r.stdout and "pool plan" in r.stdout,
              f"compile --verbose lists every bucket: {r.stdout[-300:]} {r.stderr}")
        check(re.search(r"buckets: 31, 1 built", c.program_show("b4ef54aea3cd6255",
                                                                  summary=True)) is not None,
              "after the runs, the summary counts the one bucket they built")
    rc = d.stop()
tshard.Client.program_run = plain_run
os.chdir(src)
shutil.rmtree(work, ignore_errors=True)
check(rc == 0, f"daemons exited with {rc}")
check.finish()
