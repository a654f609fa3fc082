#!/usr/bin/python3
"""Casts in transit through the CLI and the README, against 4 real daemons of job "demo" (their
socket directory in TSHARD_SOCKET_DIR): the README's python and sh examples of "Casts in transit"
run as written, and what they make and print is compared with independent references (numpy's
astype; bf16 by the exact rounding of dtype_ref); `tshard reshard --dtype` of one tensor and of
a batch, with --json; refusals (a bad dtype: exit 2; a value that would not survive: exit 1 with
the daemon's message, the tensor unchanged on every rank); `tshard plan --to-dtype`: a narrowing
cast halves the wire bytes, a partial source and a widening cast travel in the source dtype; the
--help texts name the options and their examples.

usage: test_cli_cast.py BUILD_BIN_DIR README.md"""
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402
from dtype_ref import bf16_bits_of  # noqa: E402
from harness import Daemons  # noqa: E402

bin_dir, readme = sys.argv[1], sys.argv[2]
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()
NP = 4


def bf16(a):
    return np.array([bf16_bits_of(float(v)) for v in np.asarray(a).ravel()],
                    np.uint16).reshape(np.shape(a))


def run(*args, env=None):
    return subprocess.run([tshard_bin, *args], capture_output=True, text=True, timeout=120,
                          env=env)


text = open(readme).read()
start = text.index("\n## Casts in transit\n")
section = text[start:text.find("\n## ", start + 1)]
py_block = re.findall(r"```python\n(.*?)```", section, re.S)[0]
sh_block = re.findall(r"```sh\n(.*?)```", section, re.S)[0]

with Daemons(bin_dir, NP, job="demo") as d, tempfile.TemporaryDirectory() as tmp:
    os.environ["TSHARD_SOCKET_DIR"] = d.dir
    env = dict(os.environ)

    # ---- the README's python example ----
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(py_block, "README.md", "exec"), {})
    master = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    want = "\n".join(["bf16 f32", str(bf16(master)[0]), str(master.astype(np.float16)[0])])
    check(buf.getvalue().strip() == want, f"README python prints {buf.getvalue()!r}, want {want!r}")
    for line, got in zip(want.split("\n"), py_block.split("print(")[1:]):
        check(line in got.split("#", 1)[1], f"the README's comment shows {line!r}: {got!r}")
    with d.connect(0) as c:
        check(c.list() == [], f"the example drops what it made: {c.list()}")

    # ---- the README's sh example, as written ----
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((8, 12)) * 1000).astype(np.float32)
    with d.connect(1) as c:
        c.create("w", "f32", w.shape, "mesh=[4] placements=[S(1)]")
        c.put("w", w)
    r = subprocess.run(["bash", "-c", sh_block.replace("build/bin/tshard", tshard_bin)],
                       capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode == 0 and "cast: f32 -> bf16, before the wire (bf16 on the wire)" in r.stdout
          and "reshard w -> w (bf16): done by" in r.stdout, f"README sh: {r.stdout} {r.stderr}")
    for rk in range(NP):
        with d.connect(rk) as c:
            info = c.describe("w")
            check(info["dtype"] == "bf16" and info["attr"] == "mesh=[4]@0-3 placements=[S(0)]",
                  f"rank {rk} describes w as {info}")
            check(np.array_equal(c.get("w"), bf16(w)), f"w read through rank {rk}: bf16 of w")

    # ---- reshard --dtype of one tensor and of a batch, --json ----
    with d.connect(0) as c:
        c.create("a", "f64", (8, 4), "mesh=[4] placements=[S(0)]")
        c.put("a", rng.standard_normal((8, 4)) * 1e3)
        a = c.get("a")
        c.create("b", "i32", (4, 8), "mesh=[4] placements=[R]")
        c.put("b", rng.integers(-60000, 60000, (4, 8)).astype(np.int32))  # within f16's range
        b = c.get("b")
    sock = ["--job", "demo"]
    r = run("reshard", "a", "--to", "mesh=[4] placements=[S(1)]", "--dtype", "float32",
            "--strategy", "alltoall", "--json", *sock, env=env)
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    check(j.get("dtype") == "f32" and j.get("strategy") == "alltoall",
          f"reshard --dtype --json: {r.stdout} {r.stderr}")
    r = run("reshard", "a", "b", "--to", "mesh=[4] placements=[S(0)]", "--dtype", "f16", *sock,
            env=env)
    check(r.returncode == 0, f"batch reshard --dtype: {r.stderr}")
    with d.connect(3) as c:
        check(c.describe("a")["dtype"] == "f16" and c.describe("b")["dtype"] == "f16",
              "the batch cast both")
        check(np.array_equal(c.get("a"), a.astype(np.float32).astype(np.float16)),
              "a: f64 -> f32 -> f16 as numpy")
        check(np.array_equal(c.get("b"), b.astype(np.float16)), "b: i32 -> f16 as numpy")
        check(c.describe("b")["attr"] == "mesh=[4]@0-3 placements=[S(0)]", "b moved")

    # ---- refusals ----
    r = run("reshard", "w", "--to", "mesh=[4] placements=[R]", "--dtype", "bf17", *sock, env=env)
    check(r.returncode == 2 and "unknown dtype 'bf17'" in r.stderr, f"bad dtype: {r.stderr}")
    with d.connect(0) as c:
        c.create("big", "f32", (8, 4), "mesh=[4] placements=[S(0)]")
        big = np.ones((8, 4), np.float32)
        big[6, 1] = 1e6  # on rank 3 only; i16 holds at most 32767
        c.put("big", big)
    r = run("reshard", "big", "--to", "mesh=[4] placements=[S(1)]", "--dtype", "i16", *sock,
            env=env)
    check(r.returncode == 1 and "BAD_DTYPE" in r.stderr and "i16" in r.stderr
          and "1000000" in r.stderr, f"a value that would not survive: {r.returncode} {r.stderr}")
    for rk in range(NP):
        with d.connect(rk) as c:
            info = c.describe("big")
            check(info["dtype"] == "f32" and info["attr"] == "mesh=[4]@0-3 placements=[S(0)]"
                  and np.array_equal(c.get("big"), big), f"big unchanged on rank {rk}: {info}")

    # ---- help ----
    r = run("reshard", "--help")
    check(r.returncode == 0 and "--dtype T" in r.stdout and
          "tshard reshard w --to 'mesh=[4] placements=[S(0)]' --dtype bf16" in r.stdout,
          f"reshard --help: {r.stdout}")
    r = run("plan", "--help")
    check(r.returncode == 0 and "--to-dtype U" in r.stdout, f"plan --help: {r.stdout}")

# ---- plan --to-dtype: the bytes on the wire ----
def wire(frm, to, dt, to_dt=None):
    args = ["plan", "--shape", "64,48", "--from", frm, "--to", to, "--dtype", dt, "--json"]
    r = run(*args, *(["--to-dtype", to_dt] if to_dt else []))
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    return j.get("costs", {}).get("wire_bytes"), j.get("cast"), r


s0, s1, p = ("mesh=[4] placements=[S(0)]", "mesh=[4] placements=[S(1)]",
             "mesh=[4] placements=[P(sum)]")
full, _, _ = wire(s0, s1, "f32")
half, cast, r = wire(s0, s1, "f32", "bf16")
check(full == 64 * 48 * 4 * 3 // 4 and half * 2 == full and
      cast == {"from": "f32", "to": "bf16", "wire": "bf16"}, f"f32 -> bf16 halves: {r.stdout}")
same, cast, r = wire(p, s0, "f32", "bf16")
check(same == wire(p, s0, "f32")[0] and cast["wire"] == "f32",
      f"a partial source travels in f32: {r.stdout}")
same, cast, r = wire(s0, s1, "bf16", "f32")
check(same == half and cast["wire"] == "bf16", f"a widening cast travels narrow: {r.stdout}")
_, _, r = wire(s0, p, "f32", "f8_e4m3")
check(r.returncode == 1 and "no reductions" in r.stderr, f"f8 partial target: {r.stderr}")
_, _, r = wire(s0, s1, "f32", "f33")
check(r.returncode == 2 and "f33" in r.stderr, f"bad --to-dtype: {r.stderr}")
check.finish()
