#!/usr/bin/python3
"""End-to-end test of whole puts and gets that name the Python client's own memory (3 ranks on
this node, the default on a Unix socket): random dtypes, shapes and attributes (row, column,
uneven, replicated, a transposed local layout, and the staged cases: blocked layouts and partial
placements) put and got back against numpy, non-contiguous and ``out=`` arrays, every rank's
slice put and got through its own client (row-major, and a blocked layout staged by the daemon),
with no segment ever attached; the same data through the segment (TSHARD_DIRECT=0 in a client process) agrees;
misuse of the wire field answered with clear errors and the tensor unchanged (an address not
mapped in the client, a byte count that is not the tensor's, convert, a later offset, TCP);
daemons started with TSHARD_DIRECT=0 answer NO_DIRECT once and the client goes on through its
segment. A client killed by SIGKILL while it puts two arrays in turn (the kill lands wherever
the loop is: synchronised by the line it writes after its first puts, never by sleeps): the
tensor is then exactly one of the two arrays, never a mix, and the daemons serve on with their
memory back.
After fork(): a child that writes requests naming its memory by hand on the inherited socket is
refused (AUTH, naming both processes) and nothing moves; a child using the inherited client
objects (direct path, and a client on its segment) gets its own connection and correct results,
with arrays at the very addresses of the parent's (copies on write) that the daemons must not
confuse with the parent's; the parent's arrays, tensors, connections and segment are intact.

usage: test_direct.py BUILD_BIN_DIR"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard
from tshard import tshard_pb2 as pb
from tshard.wire import request_frame
from checks import Checks, raw_call
from harness import Daemons, free_ports

bin_dir = sys.argv[1]
check = Checks()
rng = np.random.default_rng(20261124)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.float16]
ATTRS = ["mesh=[3] placements=[S(0)]", "mesh=[3] placements=[S(1)]", "mesh=[3] placements=[R]",
         "mesh=[3] placements=[S(0)] splits={0:[1,0,N]}"]


def random_array(shape, dt):
    if np.issubdtype(dt, np.floating):
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def no_segment(c, what):
    check(c._seg is None or c._seg.bytes == 0, f"{what}: a segment was attached")


def differential(c):
    for i in range(30):
        dt = DTYPES[i % len(DTYPES)]
        rows, cols = int(rng.integers(1, 200)), int(rng.integers(1, 70))
        attr = ATTRS[i % len(ATTRS)].replace("N", str(rows - 1))
        tag = "ba" if i % 5 == 4 else None
        ref = random_array((rows, cols), dt)
        name = f"d{i}"
        c.create(name, np.dtype(dt).name, (rows, cols), attr, layout=tag)
        c.put(name, ref)
        got = c.get(name)
        check(got.dtype == ref.dtype and np.array_equal(got, ref),
              f"case {i}: {np.dtype(dt).name}[{rows},{cols}] {attr} {tag}")
        c.drop(name)
    no_segment(c, "random cases")
    # A non-contiguous source, and out= of the right size.
    big = random_array((40, 60), np.float32)
    c.create("t", "f32", (60, 40), "mesh=[3] placements=[S(1)]")
    c.put("t", big.T)
    out = np.empty((60, 40), np.float32)
    back = c.get("t", out=out)
    check(back is out or np.shares_memory(back, out), "get(out=) fills out")
    check(np.array_equal(out, big.T), "a transposed view put and got into out")
    # Staged at the asking rank: blocked layout and partial placement.
    for name, attr, tag in [("blk", "mesh=[3] placements=[S(1)]", "Ba4b"),
                            ("par", "mesh=[3] placements=[P(sum)]", None)]:
        ref = random_array((33, 21), np.float64)
        c.create(name, "f64", ref.shape, attr, layout=tag)
        c.put(name, ref)
        check(np.array_equal(c.get(name), ref), f"{name}: staged put and get")
        c.drop(name)
    no_segment(c, "staged cases")
    return big


def slices(d):
    clients = [d.connect(r) for r in range(3)]
    try:
        for stored in (None, "Ba4b"):
            ref = random_array((90, 37), np.float32)
            c0 = clients[0]
            c0.create("sl", "f32", ref.shape, "mesh=[3] placements=[S(1)] splits={1:[5,0,32]}",
                      layout=stored)
            info = c0.describe("sl")
            for r in info["ranks"]:
                c = clients[r["rank"]]
                box = tuple(slice(lo, hi) for lo, hi in zip(r["lo"], r["hi"]))
                c.put_slice("sl", ref[box])
                got = c.get_slice("sl")
                want = ref[box]
                check(got is not None and got.shape == want.shape and np.array_equal(got, want),
                      f"stored {stored}: rank {r['rank']}'s slice")
                out = np.empty(want.shape, np.float32)
                if want.size:
                    c.get_slice("sl", out=out)
                    check(np.array_equal(out, want), f"stored {stored}: get_slice(out=)")
            check(np.array_equal(c0.get("sl"), ref), f"stored {stored}: the slices make the tensor")
            c0.drop("sl")
        for c in clients:
            no_segment(c, "slices")
    finally:
        for c in clients:
            c.close()


SEGMENT_CLIENT = """
import sys, numpy as np, tshard
c = tshard.connect(socket=sys.argv[1])
a = c.get("t")
c.put("t", a * 2)
print(c._seg is not None and c._seg.bytes > 0)
"""


def through_segment(d, c, big):
    env = dict(os.environ, TSHARD_DIRECT="0")
    out = subprocess.run([sys.executable, "-c", SEGMENT_CLIENT, d.socket(0)], env=env,
                         capture_output=True, text=True, timeout=120)
    check(out.returncode == 0 and out.stdout.strip() == "True",
          f"a client with TSHARD_DIRECT=0 went through its segment: {out.stdout} {out.stderr}")
    check(np.array_equal(c.get("t"), big.T * 2), "the segment's put, seen directly")


def misuse(c):
    ref = random_array((90, 30), np.float32)
    c.create("m", "f32", ref.shape, "mesh=[3] placements=[S(0)]")
    c.put("m", ref)
    buf = np.zeros(ref.size, np.float32)
    addr = buf.__array_interface__["data"][0]

    def put(**kw):
        m = pb.PutRequest(name="m", total_bytes=kw.pop("total", ref.nbytes))
        m.client_memory.address = kw.pop("address", addr)
        m.client_memory.bytes = kw.pop("bytes", ref.nbytes)
        for k, v in kw.items():
            setattr(m, k, v)
        return raw_call(c, put=m)
    cases = [
        (put(address=4096), 1, "not mapped"),
        (put(bytes=ref.nbytes - 4, total=ref.nbytes - 4), 5, "elements"),
        (put(total=ref.nbytes + 4), 1, "total_bytes"),
        (put(convert=True), 1, "convert"),
        (put(offset=64), 1, "offset"),
    ]
    for i, (r, status, word) in enumerate(cases):
        check(r.status != 0 and (status is None or r.status == status) and word in r.message,
              f"misuse {i}: status {r.status}: {r.message}")
    g = pb.GetRequest(name="m")
    g.client_memory.address, g.client_memory.bytes = addr, ref.nbytes + 8
    r = raw_call(c, get=g)
    check(r.status == 5 and "client's buffer" in r.message, f"get of the wrong size: {r.message}")
    check(np.array_equal(c.get("m"), ref), "'m' unchanged by the refused requests")
    check(c.ping()["rank"] == 0, "the connection serves on")
    c.drop("m")


KILLED_CLIENT = """
import sys, numpy as np, tshard
c = tshard.connect(socket=sys.argv[1])
a = np.load(sys.argv[2])
pair = [a, a + 1]
for i in range(1000000):
    c.put("k", pair[i % 2])
    if i == 3:
        print("going", flush=True)
"""


def killed_putter(d, c):
    ref = random_array((2048, 1024), np.float32)  # 8 MiB
    c.create("k", "f32", ref.shape, "mesh=[3] placements=[S(1)]")
    c.put("k", ref)
    base = c.stats()["memory_in_use"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "a.npy")
        np.save(path, ref)
        for round_ in range(3):
            p = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, d.socket(0), path],
                                 stdout=subprocess.PIPE, text=True)
            line = p.stdout.readline()
            p.kill()
            p.wait(timeout=60)
            p.stdout.close()
            check(line.strip() == "going", f"round {round_}: the putting client ran")
            got = c.get("k")
            check(np.array_equal(got, ref) or np.array_equal(got, ref + 1),
                  f"round {round_}: the tensor is one of the two arrays put, not a mix")
    c.put("k", ref)
    check(np.array_equal(c.get("k"), ref), "put and get after the kills")
    deadline = time.monotonic() + 30
    while c.stats()["memory_in_use"] != base and time.monotonic() < deadline:
        pass  # polling, bounded: frees follow the close of the killed connections
    check(c.stats()["memory_in_use"] == base, "memory in use back after the kills")
    c.drop("k")


FORK_ROWS, FORK_COLS = 512, 384  # 768 KiB of f32: whole puts and gets take the direct path


def _raw_exchange(fd, frame, timeout=60):
    """Writes a frame on a socket descriptor by hand and reads one answer (None: none came)."""
    import select
    os.write(fd, frame)
    buf = b""
    deadline = time.monotonic() + timeout
    while True:
        if len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "little"):
            r = pb.Response()
            r.ParseFromString(buf[4:4 + int.from_bytes(buf[:4], "little")])
            return r
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        more = os.read(fd, 65536)
        if not more:
            return None
        buf += more


def _fork_child(c, cs, keep, secret, parent, report):
    """The child's part of forked(): by hand on the inherited socket, then through the clients."""
    me = os.getpid()

    def note(ok, what):
        report.write(("ok " if ok else "FAIL ") + what.replace("\n", " ") + "\n")
    for op in ("put", "get"):  # (b): requests written by hand, naming the parent's arrays
        req = pb.Request(id=900 + len(op))
        m = req.put if op == "put" else req.get
        m.name = "fa"
        if op == "put":
            m.total_bytes = secret.nbytes
        m.client_memory.address = (secret if op == "put" else keep).__array_interface__["data"][0]
        m.client_memory.bytes = secret.nbytes
        r = _raw_exchange(c._sock.fileno(), b"".join(request_frame(req)))
        note(r is not None and r.id == req.id and r.status == 23
             and f"belongs to process {parent}" in r.message
             and f"process {me} sent this request" in r.message and "fork()" in r.message,
             f"raw {op} on the inherited socket refused: {r and (r.status, r.message)}")
    # (a): the inherited clients; the child's arrays sit at the parent's addresses
    keep[:] = -7.0  # the child's copy (on write); the parent's stays as it was
    c.put("fa", keep)
    note(c._pid == me, "the client opened the child's own connection")
    got = np.empty_like(keep)
    c.get("fa", out=got)
    note(np.array_equal(got, keep), "child: put and get through the inherited client")
    secret[:] = 3.5
    c.get("fa", out=secret)  # written into the child's copy of the parent's array
    note(np.all(secret == -7.0), "child: get into an array at the parent's address")
    sl = c.get_slice("fa")
    note(sl is not None and np.all(sl == -7.0), "child: get_slice (direct)")
    both = keep + 1
    cs.put("fs", both)
    note(np.array_equal(cs.get("fs"), both) and cs._seg is not None and cs._seg.bytes > 0,
         "child: the segment client put and got through a segment of its own")


def forked(d):
    """The fork cases (a) and (b) of the top; the child reports through a pipe."""
    c = d.connect(0)
    os.environ["TSHARD_DIRECT"] = "0"
    try:
        cs = d.connect(1)  # a client on its segment
    finally:
        del os.environ["TSHARD_DIRECT"]
    shape = (FORK_ROWS, FORK_COLS)
    keep = random_array(shape, np.float32)
    secret = random_array(shape, np.float32)
    keep_ref, secret_ref = keep.copy(), secret.copy()
    c.create("fa", "f32", shape, "mesh=[3] placements=[S(0)]")
    c.create("fs", "f32", shape, "mesh=[3] placements=[S(1)]")
    c.put("fa", keep)
    cs.put("fs", secret)
    check(np.array_equal(c.get("fa"), keep) and np.array_equal(cs.get("fs"), secret)
          and cs._seg is not None and cs._seg.bytes > 0, "parent: put and get before the fork")
    seg_before = cs._seg.view.copy()
    rfd, wfd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            with os.fdopen(wfd, "w") as report:
                try:
                    _fork_child(c, cs, keep, secret, parent, report)
                    code = 0
                except BaseException as e:
                    report.write(f"FAIL child raised {type(e).__name__}: {e}\n")
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd) as report:
        lines = report.read().splitlines()  # until the child exits (bounded by the test timeout)
    _, status = os.waitpid(pid, 0)
    check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}")
    check(len(lines) == 7, f"the child reported {len(lines)} of 7 checks")
    for line in lines:
        check(line.startswith("ok "), f"child: {line}")
    check(np.array_equal(keep, keep_ref) and np.array_equal(secret, secret_ref),
          "parent: its arrays untouched by the child's transfers")
    check(np.array_equal(cs._seg.view, seg_before), "parent: its segment untouched")
    check(c.ping()["rank"] == 0 and cs.ping()["rank"] == 1, "parent: its connections serve on")
    check(np.all(c.get("fa") == -7.0), "parent: the child's put is the tensor")
    check(np.all(cs.get("fs") == -6.0), "parent: the child's segment put")
    cs.put("fs", secret)
    check(np.array_equal(cs.get("fs"), secret_ref), "parent: its segment after the fork")
    c.put("fa", keep)
    check(np.array_equal(c.get("fa"), keep_ref), "parent: direct put and get after the fork")
    c.drop("fa")
    c.drop("fs")
    cs.close()
    c.close()


def over_tcp(bin_dir):
    port = free_ports(1)
    token = "direct-python-token"
    tok = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tshard-direct-{os.getpid()}")
    with open(os.open(tok, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(token + "\n")
    d = Daemons(bin_dir, 2, extra_args=["--listen", f"tcp://127.0.0.1:{port}",
                                         "--token-file", tok])
    try:
        with tshard.connect(tcp=f"127.0.0.1:{port}", token=token) as t:
            t.create("w", "f32", (10, 10), "mesh=[2] placements=[S(0)]")
            m = pb.PutRequest(name="w", total_bytes=400)
            m.client_memory.address, m.client_memory.bytes = 4096, 400
            req = pb.Request(id=t._take_id(), token=token)
            req.put.CopyFrom(m)
            t._wire.send(request_frame(req))
            r = t._wire.recv()
            check(r.status == 38 and "TCP" in r.message, f"client memory over TCP: {r.message}")
            ref = random_array((10, 10), np.float32)
            t.put("w", ref)
            check(np.array_equal(t.get("w"), ref), "TCP put and get (frames)")
    finally:
        os.unlink(tok)
        check(d.stop() == 0, "TCP daemons exit 0")


def refusing(bin_dir):
    os.environ["TSHARD_DIRECT"] = "0"
    try:
        d = Daemons(bin_dir, 2, job=f"pyoff{os.getpid()}")
    finally:
        del os.environ["TSHARD_DIRECT"]
    try:
        with d.connect(0) as c:
            ref = random_array((64, 48), np.int32)
            c.create("r", "i32", ref.shape, "mesh=[2] placements=[S(1)]")
            c.put("r", ref)  # NO_DIRECT once, then the segment
            check(not c._direct_on and c._seg is not None and c._seg.bytes > 0,
                  "a refusing daemon: the client went to its segment")
            check(np.array_equal(c.get("r"), ref), "a refusing daemon: put and get")
    finally:
        check(d.stop() == 0, "refusing daemons exit 0")


os.environ.pop("TSHARD_DIRECT", None)
os.environ.pop("TSHARD_SHM", None)
d = Daemons(bin_dir, 3)
try:
    with d.connect(0) as c:
        big = differential(c)
        slices(d)
        through_segment(d, c, big)
        misuse(c)
        c.drop("t")
        killed_putter(d, c)
    forked(d)
finally:
    check(d.stop() == 0, "daemons exit 0")
over_tcp(bin_dir)
refusing(bin_dir)
check.finish()
