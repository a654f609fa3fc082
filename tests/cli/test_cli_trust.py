#!/usr/bin/python3
"""Clients users can trust against real daemons, through the CLI and
the Python client: puts of another dtype or shape are refused naming both and leave the tensor
intact; --convert / convert=True store what numpy's astype stores and refuse values that would
not survive (checked against numpy, randomized, and the CLI and Python paths against each other); byte counts in dtypes
and shapes; size-0 dims and a ragged SPMD loop where a rank's part is empty; fix-it errors
(--rank beyond the world, layout NCHW, describe --json's layout); reshard's strategy and time;
progress with rate and time left; the daemon's log line per operation.

usage: test_cli_trust.py BUILD_BIN_DIR NRANKS"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402
from dtype_ref import fits  # noqa: E402
from harness import Daemons  # noqa: E402

import tshard  # noqa: E402
from tshard import tshard_pb2 as pb  # noqa: E402

bin_dir, n = sys.argv[1], int(sys.argv[2])
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()
rng = np.random.default_rng(14)

def reference(x, dst):
    """numpy's own conversion of values that fit (floats to integers truncate toward zero)."""
    return np.asarray(x).astype(tshard.DTYPES[dst])


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


with Daemons(bin_dir, n) as d, tempfile.TemporaryDirectory() as tmp:
    def cli(*args, rank=0):
        return subprocess.run([tshard_bin, *args, "--socket", d.socket(rank)], capture_output=True,
                              text=True, timeout=120)

    def cli_job(*args):
        env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir)
        return subprocess.run([tshard_bin, *args, "--job", d.job], capture_output=True,
                              text=True, timeout=120, env=env)

    def save(name, arr):
        path = os.path.join(tmp, name)
        np.save(path, arr)
        return path

    out = os.path.join(tmp, "out.npy")
    attr = f"mesh=[{n}] placements=[S(0)]"
    c = d.connect(0)

    # ---- 1. no silent corruption: CLI
    ref = np.arange(20 * 12, dtype=np.float32).reshape(20, 12)
    c.create("w", "f32", (20, 12), attr)
    c.put("w", ref)
    r = cli("put", "w", save("t.npy", np.arange(240, dtype=np.int32).reshape(12, 20)))
    check(r.returncode == 1 and "i32[12,20]" in r.stderr and "f32[20,12]" in r.stderr,
          f"CLI put of another shape and dtype names both: {r.stderr!r}")
    r = cli("put", "w", save("i.npy", np.arange(240, dtype=np.int32).reshape(20, 12)))
    check(r.returncode == 1 and "i32[20,12]" in r.stderr and "--convert" in r.stderr,
          f"CLI put of another dtype suggests --convert: {r.stderr!r}")
    check(same(c.get("w"), ref), "refused puts leave the tensor as it was")
    r = cli("put", "w", save("ft.npy", ref.T.copy()))
    check(r.returncode == 1 and "f32[12,20]" in r.stderr, f"transposed shape: {r.stderr!r}")
    r = cli("put", "w", save("i.npy", np.arange(240, dtype=np.int32).reshape(20, 12) - 7),
            "--convert")
    check(r.returncode == 0 and same(c.get("w"), (np.arange(240).reshape(20, 12) - 7)
                                     .astype(np.float32)), f"CLI --convert i32->f32: {r.stderr}")

    # ---- 1. Python: the daemon refuses what the declaration says differs
    for bad, needles in [(np.arange(240, dtype=np.int32).reshape(12, 20), ["i32[12,20]", "f32[20,12]"]),
                         (np.zeros((20, 12), np.float64), ["f64[20,12]", "f32[20,12]", "convert=True"]),
                         (np.zeros((240,), np.float32), ["f32[240]", "f32[20,12]"])]:
        try:
            c.put("w", bad)
            check(False, f"Python put of {bad.dtype}{bad.shape} was accepted")
        except tshard.TshardError as e:
            check(all(s in str(e) for s in needles), f"Python put names both: {e}")
    try:
        c.put("w", np.zeros((20, 12), np.int16))
        check(False, "int16 accepted")
    except tshard.TshardError as e:
        check(e.status == 4 and "i16[20,12]" in str(e) and "f32[20,12]" in str(e), f"int16: {e}")
    # an undeclared put (an older client) of the wrong byte count: the error speaks in elements
    try:
        c._call(put=pb.PutRequest(name="w", offset=0, total_bytes=40, data=bytes(40)))
        check(False, "undeclared 40-byte put accepted")
    except tshard.TshardError as e:
        check("10 f32 elements" in str(e) and "f32[20,12]" in str(e) and "240" in str(e),
              f"byte count in dtypes and shapes: {e}")
    try:
        c._call(put=pb.PutRequest(name="w", offset=0, total_bytes=42, data=bytes(42)))
        check(False, "42-byte put accepted")
    except tshard.TshardError as e:
        check("not a whole number of f32 elements" in str(e), f"42 bytes: {e}")
    check(same(c.get("w"), (np.arange(240).reshape(20, 12) - 7).astype(np.float32)),
          "still intact after the refusals")

    # ---- 1. conversion rules, randomized: Python convert=True and CLI --convert against numpy;
    # values that would not survive (out of range, NaN or infinities into integers, overflow
    # to infinity) are refused by both, naming both dtypes, the tensor unchanged
    specials = np.array([np.nan, np.inf, -np.inf, 1e300, -1e300, 127.9, -128.9, 255.5, -0.5,
                         0.49, 2.5, -2.5, 3e9, -3e9])
    for trial, dst in enumerate(["i8", "u8", "i32", "f16", "f32", "f64"]):
        x = np.concatenate([specials, rng.normal(0, 300, 64 - len(specials))])
        rng.shuffle(x)
        fit = np.array([fits(float(v), dst) for v in x])
        name = f"cv{trial}"
        c.create(name, dst, (64,), attr)
        before = c.get(name)
        if not fit.all():
            try:
                c.put(name, x, convert=True)
                check(False, f"Python convert f64->{dst} of values that do not fit: accepted")
            except tshard.BadDtypeError as e:
                check("f64" in str(e) and dst in str(e), f"refusal names both dtypes: {e}")
            r = cli("put", name, save("x.npy", x), "--convert")
            check(r.returncode == 1 and "f64" in r.stderr and dst in r.stderr,
                  f"CLI --convert f64->{dst} of values that do not fit: {r.stderr!r}")
            check(same(c.get(name), before), f"refused conversions leave {name} unchanged")
        y = np.where(fit, x, 1.0)
        c.put(name, y, convert=True)
        py = c.get(name)
        check(same(py, reference(y, dst)), f"Python convert f64->{dst} follows numpy's astype")
        c.put(name, np.zeros(64, tshard.DTYPES[dst]))
        r = cli("put", name, save("x.npy", y), "--convert")
        check(r.returncode == 0 and same(c.get(name), py), f"CLI --convert f64->{dst} = Python")
    # integer to integer: in range only; put_slice converts too
    c.create("wi", "i8", (2 * n,), attr)
    big = np.arange(2 * n, dtype=np.int64) * 100 + 1000
    try:
        c.put("wi", big, convert=True)
        check(False, "i64->i8 of 1000 accepted")
    except tshard.BadDtypeError as e:
        check("i64" in str(e) and "i8" in str(e) and "1000" in str(e), f"i64->i8: {e}")
    small = np.arange(2 * n, dtype=np.int64) * 10 - 5
    c.put("wi", small, convert=True)
    check(same(c.get("wi"), small.astype(np.int8)), "i64->i8 in range")
    with d.connect(n - 1) as cl:
        cl.put_slice("wi", np.full(2, 100.7), convert=True)
        try:
            cl.put_slice("wi", np.full(2, 300.7), convert=True)
            check(False, "put_slice of 300.7 into i8 accepted")
        except tshard.BadDtypeError as e:
            check("300.7" in str(e) and "i8" in str(e), f"put_slice f64->i8 refusal: {e}")
        try:
            cl.put_slice("wi", np.zeros(3, np.int8))
            check(False, "put_slice of the wrong shape accepted")
        except tshard.TshardError as e:
            check("i8[3]" in str(e) and "slice" in str(e) and "i8[2]" in str(e),
                  f"put_slice names the slice: {e}")
    check(list(c.get("wi")[-2:]) == [100, 100], "put_slice f64->i8 truncates toward zero")

    # ---- 6. size-0 dims: create, put, get through the CLI and Python
    r = cli("create", "z", "--shape", "0,4", "--attr", attr)
    check(r.returncode == 0, f"create with a size-0 dim: {r.stderr}")
    r = cli("put", "z", save("z.npy", np.zeros((0, 4), np.float32)))
    check(r.returncode == 0, f"CLI put of a zero-size file: {r.stderr}")
    r = cli("get", "z", out)
    check(r.returncode == 0 and np.load(out).shape == (0, 4), f"CLI get of (0,4): {r.stderr}")
    c.put("z", np.zeros((0, 4), np.float32))
    check(c.get("z").shape == (0, 4), "Python put/get of (0,4)")
    r = cli("create", "zz", "--shape", "4,-1", "--attr", attr)
    check(r.returncode == 2 and "--shape" in r.stderr, f"negative size: {r.stderr!r}")
    # a ragged SPMD loop: every rank puts its part; the last rank's part is empty
    sizes = [3] * (n - 1) + [0]
    total = sum(sizes)
    rag = f"mesh=[{n}] placements=[S(0)] splits={{0:[{','.join(map(str, sizes))}]}}"
    c.create("rag", "f64", (total, 5), rag)
    full = rng.normal(size=(total, 5))
    lo = 0
    for rank in range(n):
        with d.connect(rank) as cr:
            part = full[lo:lo + sizes[rank]]
            cr.put_slice("rag", part)
            got = cr.get_slice("rag")
            check(got is not None and same(got, part), f"rank {rank}'s part of {sizes[rank]} rows")
        lo += sizes[rank]
    check(same(c.get("rag"), full), "the ragged tensor gathers whole")
    c.reshard("rag", f"mesh=[{n}] placements=[S(1)]")
    check(same(c.get("rag"), full), "and reshards")

    # ---- 7. errors that say how to fix them; reshard's strategy and time
    r = cli_job("ping", "--rank", str(n + 3))
    check(r.returncode == 2 and f"has {n} ranks" in r.stderr, f"ping beyond the world: {r.stderr!r}")
    os.environ["TSHARD_SOCKET_DIR"] = d.dir  # Python's connect by job and rank
    for kw, needle in [(dict(rank=n + 3, job=d.job), f"has {n} ranks"),
                       (dict(rank=1, job="nojob"), "no daemon serves job nojob on rank 1"),
                       (dict(rank=0, job="a/b"), "job name 'a/b'")]:
        try:
            tshard.connect(**kw).close()
            check(False, f"connect {kw} succeeded")
        except tshard.TshardError as e:
            check(needle in str(e), f"Python connect {kw}: {e}")
    r = cli("create", "q", "--shape", "2,3,4,5", "--attr", attr.replace("S(0)", "R"),
            "--layout", "NCHW")
    check(r.returncode == 1 and "'abcd'" in r.stderr, f"NCHW suggests abcd: {r.stderr!r}")
    r = cli("create", "q", "--shape", "2,3,4,5", "--attr", attr.replace("S(0)", "R"),
            "--layout", "NHWC")
    check(r.returncode == 1 and "'acdb'" in r.stderr, f"NHWC suggests acdb: {r.stderr!r}")
    r = cli("reshard", "w", "--to", f"mesh=[{n}] placements=[S(1)]", "--strategy", "fast")
    check(r.returncode == 1 and "alltoall" in r.stderr and "root" in r.stderr,
          f"--strategy fast lists the names: {r.stderr!r}")
    r = cli("reshard", "w", "--to", f"mesh=[{n}] placements=[S(1)]")
    check(r.returncode == 0 and "done by alltoall in" in r.stdout and " ms" in r.stdout,
          f"reshard prints its strategy and time: {r.stdout!r}")
    r = cli("reshard", "w", "--to", f"mesh=[{n}] placements=[S(0)]", "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    check(j.get("strategy") == "alltoall" and j.get("ms", -1) >= 0, f"reshard --json: {r.stdout!r}")
    rep = c.reshard("w", f"mesh=[{n}] placements=[R]", strategy="root")
    check(rep["strategy"] == "root" and rep["ms"] >= 0, f"Python reshard reports: {rep}")
    c.reshard("w", f"mesh=[{n}] placements=[S(0)]")
    r1, r2 = cli("describe", "w"), cli("describe", "w", "--json")
    check("layout: row-major" in r1.stdout and json.loads(r2.stdout)["layout"] == "row-major",
          "describe --json shows the layout the text shows")

    # ---- 8. progress: CLI bar on request, Python callback per chunk
    r = cli("get", "w", out, "--progress")
    check(r.returncode == 0 and "MiB/s" in r.stderr and "left" in r.stderr and "100%" in r.stderr,
          f"CLI --progress: {r.stderr!r}")
    with tshard.connect(socket=d.socket(0), shm=False) as cs:
        cs.chunk = 4096
        big = rng.normal(size=(64, 1000)).astype(np.float32)
        cs.create("pg", "f32", big.shape, attr)
        seen = []
        cs.put("pg", big, progress=lambda done, tot: seen.append((done, tot)))
        check(len(seen) > 10 and seen[-1] == (big.nbytes, big.nbytes)
              and all(a[0] < b[0] for a, b in zip(seen, seen[1:])),
              f"put progress rises to the total over chunks: {seen[:3]}...{seen[-1:]}")
        wide = big.astype(np.float64) * 3.0  # a staged, chunked conversion over the stream
        cs.put("pg", wide, convert=True)
        check(same(cs.get("pg"), wide.astype(np.float32)), "chunked f64->f32 put over the stream")
        cs.put("pg", big)
        seen = []
        got = cs.get("pg", progress=lambda done, tot: seen.append((done, tot)))
        check(same(got, big) and seen and seen[-1] == (big.nbytes, big.nbytes),
              "get progress reaches the total")
        try:
            cs.put("pg", big, progress="yes")
            check(False, "progress='yes' accepted")
        except TypeError as e:
            check("progress" in str(e), f"bad progress: {e}")
    # ---- 10. Python show and offline plan (the CLI's drawer and the daemons' planner)
    drawing = c.show("w", width=30, ascii=True)
    r = cli("show", "w", "--width", "30", "--ascii")
    check(drawing == r.stdout and "mesh=" in drawing and str(n - 1) in drawing,
          f"Client.show draws as tshard show: {drawing!r}")
    m = 4096
    p = tshard.plan((m, m), f"mesh=[{m}] placements=[S(0)]", f"mesh=[{m}] placements=[S(1)]",
                    ranks=m)
    check(p["strategy"] == "alltoall" and p["min_wire_bytes"] == m * m * 4 - m * 4,
          f"offline plan of 4096 ranks moves all but the diagonal blocks: {p.get('min_wire_bytes')}")
    big = tshard.show((m, m), tshard.Attr.parse(f"mesh=[{m}] placements=[S(1)]"), width=40,
                      ascii=True)
    check(max(len(ln) for ln in big.splitlines() if ln[:1] in "+|") <= 42 and "4095" in big,
          "tshard.show of 4096 ranks respects the width")
    for bad, status in [(lambda: tshard.plan((8,), "mesh=[2] placements=[S(0)]",
                                             "mesh=[2] placements=[R]", strategy="fast"), 1),
                        (lambda: tshard.show((8,), "mesh=[2] placements=[Q]"), 10)]:
        try:
            bad()
            check(False, "bad offline input accepted")
        except tshard.TshardError as e:
            check(e.status == status and ("fast" in str(e) or "column" in str(e)),
                  f"offline error: {e}")

    # ---- 7. a Python timeout names the timeout and says the operation may still complete
    mute_path = os.path.join(tmp, "mute.sock")
    import socket as _socket
    mute = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    mute.bind(mute_path)
    mute.listen(1)
    try:
        tshard.connect(socket=mute_path, timeout=0.3).close()
        check(False, "a mute socket answered")
    except tshard.TshardError as e:
        check(e.status == 19 and "timeout=" in str(e) and "may still complete" in str(e),
              f"Python timeout: {e}")
    mute.close()

    # ---- 8. the daemon's log: one line per operation with operation, tensor, bytes, strategy
    log = d.wait_logs(["op reshard tensor w bytes", f"op put tensor w bytes {20 * 12 * 4}",
                       "op put_slice tensor rag bytes 120", "op get_slice tensor rag"])
    check("op reshard tensor w bytes" in log and "strategy alltoall ms" in log and "client conn"
          in log, "daemon logs reshard with strategy, time and client")
    check(f"op put tensor w bytes {20 * 12 * 4} strategy - ms" in log, "daemon logs put with bytes")
    check("op put_slice tensor rag bytes 120 strategy - ms - client conn" in log
          and "op get_slice tensor rag" in log, "daemon logs put_slice and get_slice")
    c.close()

# the daemons stopped cleanly, without sanitizer reports (in the ASan build)
check(d.proc.returncode == 0 and "Sanitizer" not in d.logs() and "runtime error" not in d.logs(),
      f"daemons exit cleanly: {d.proc.returncode}")
check.finish()
