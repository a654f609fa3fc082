#!/usr/bin/python3
"""End-to-end test of the Python client's data paths against real daemons (2 ranks, TCP with a
token, --max-frame 4M): shared memory (the default on a Unix socket) and the socket stream
(shm=False, TSHARD_SHM=0, TCP) for put, get, put_slice and get_slice, in one request and in
chunks through the halves of a small segment, compared with an independently computed global
array; chunks sized by the daemon's maximum frame (puts and gets larger than 4 MiB); misuse of
the shared-memory protocol answered with errors (regions outside the segment, no segment,
attach over TCP, a sealed segment that cannot be truncated); and a client process killed by
SIGKILL in the middle of a put and of a get through its segment (synchronised by a pipe it
writes, never by sleeps): the daemon frees what the client held and serves on.

usage: test_shm.py BUILD_BIN_DIR"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

os.environ["TSHARD_DIRECT"] = "0"  # whole puts and gets through the segment (test_direct.py: the other way)
import tshard
from tshard import tshard_pb2 as pb
from tshard.wire import request_frame
from checks import Checks, raw_call
from harness import Daemons, free_ports

bin_dir = sys.argv[1]
check = Checks()
TOKEN = "shm-python-token"


def reference(shape, seed, dtype=np.float32):
    """value = function of the global index and a seed (exact in f32)"""
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.int64) * 131 + seed * 17) % 97).astype(dtype).reshape(shape)


def expect(status, fn, what):
    try:
        fn()
    except tshard.TshardError as e:
        check(e.status == status and bool(e.message), f"{what}: {e.name} {e.message}")
        return
    check(False, f"{what}: no error")


def roundtrip(c, name, shape, attr, seed, what):
    ref = reference(shape, seed)
    c.create(name, "f32", shape, attr)
    c.put(name, ref)
    got = c.get(name)
    check(got.shape == ref.shape and np.array_equal(got, ref), f"{what}: whole put and get")


def blocked(box, cols_pad):
    """Ba4b of a 2-D box: [column block][row][4 columns], padding zero (a naive loop)."""
    rows, cols = box.shape
    out = np.zeros(cols_pad * rows, dtype=box.dtype)
    for r in range(rows):
        for k in range(cols):
            out[(k // 4) * rows * 4 + r * 4 + k % 4] = box[r, k]
    return out


def slices(clients, name, ref, seed, what):
    """Every rank puts its slice in Ba4b through its client and gets it back in Ba4b and
    row-major; the whole is then checked."""
    info = clients[0].describe(name)
    for x in info["ranks"]:
        c = clients[x["rank"]]
        box = ref[x["lo"][0]:x["hi"][0], x["lo"][1]:x["hi"][1]] + seed
        lay = blocked(box, (box.shape[1] + 3) // 4 * 4)
        c.put_slice(name, lay, layout="Ba4b")
        check(np.array_equal(c.get_slice(name, layout="Ba4b"), lay),
              f"{what}: rank {x['rank']}'s slice in Ba4b")
        check(np.array_equal(c.get_slice(name), box), f"{what}: rank {x['rank']}'s slice")
    check(np.array_equal(clients[0].get(name), ref + seed), f"{what}: the slices make the whole")


KILLED_CLIENT = textwrap.dedent("""
    import os, sys, numpy as np, tshard
    c = tshard.connect(socket=sys.argv[1])
    c.set_shm(True, max_bytes=64 << 10)
    def hang():
        os.write(1, b"x")         # the first chunk is through: tell the test
        sys.stdin.buffer.read(1)  # and wait for the SIGKILL
    recv, recv_data = c._wire.recv, c._wire.recv_data
    def recv_put(*a):             # the answer to a put's first chunk
        r = recv(*a)
        if r.WhichOneof("result") == "put" and not r.put.done:
            hang()
        return r
    def recv_get(*a):             # the answer to a get's first chunk
        r = recv_data(*a)
        hang()
        return r
    c._wire.recv, c._wire.recv_data = recv_put, recv_get
    if sys.argv[2] == "put":
        c.put("victim", np.zeros((256, 1024), dtype=np.float32))
    else:
        c.get("victim")
    sys.exit(3)
""")


def settle(c, connections):
    """Stats once the daemon has seen `connections` connections (closes are noticed
    asynchronously), bounded."""
    deadline = time.monotonic() + 60
    s = c.stats()
    while s["connections"] != connections and time.monotonic() < deadline:
        s = c.stats()
    return s


def kill_mid_transfer(d, c, direction):
    """A client process SIGKILLed after the first chunk of its put or get through a 64 KiB
    segment; the daemon must give back what it held."""
    before = settle(c, 1)
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, d.socket(0), direction],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    got = p.stdout.read(1)
    p.kill()
    p.wait()
    p.stdin.close()
    p.stdout.close()
    check(got == b"x" and p.returncode == -9, f"{direction}: the client was killed mid-transfer")
    deadline = time.monotonic() + 60
    while True:
        s = c.stats()
        if (s["memory_in_use"] == before["memory_in_use"]
                and s["connections"] == before["connections"]) or time.monotonic() > deadline:
            break
    check(s["memory_in_use"] == before["memory_in_use"],
          f"{direction}: memory in use {s['memory_in_use']}, before {before['memory_in_use']}")
    check(s["connections"] == before["connections"], f"{direction}: connections back")


tok_dir = tempfile.mkdtemp(prefix="tshard-token-")
token_file = os.path.join(tok_dir, "token")
with open(token_file, "w") as f:
    f.write(TOKEN + "\n")
os.chmod(token_file, 0o600)
for attempt in range(5):
    port = free_ports(2)
    try:
        daemons = Daemons(bin_dir, 2, extra_args=["--listen", f"tcp://127.0.0.1:{port}",
                                                   "--token-file", token_file,
                                                   "--max-frame", "4M"])
        break
    except RuntimeError as e:
        if "address already in use" not in str(e) or attempt == 4:
            raise

with daemons as d:
    c0, c1 = d.connect(0), d.connect(1)
    check(c0.shm and c1.shm, "shared memory is the default on a Unix socket")
    check(c0.chunk <= 4 << 20, f"chunks of {c0.chunk} bytes fit the 4 MiB frame")
    # Shared memory: 6 MiB (larger than a frame) in one request each way.
    roundtrip(c1, "a", (1536, 1024), "mesh=[2] placements=[S(1)]", 1, "shm")
    slices([c0, c1], "a", reference((1536, 1024), 1), 5, "shm")
    roundtrip(c0, "odd", (64, 30), "mesh=[2] placements=[S(1)]", 21, "shm, 15 columns a rank")
    slices([c0, c1], "odd", reference((64, 30), 21), 3, "shm, Ba4b padded")
    roundtrip(c0, "p", (100, 37), "mesh=[2] placements=[P(sum)]", 2, "shm, partial")
    # Results held at once never share memory (the client reuses a result buffer only once
    # nothing refers to it).
    g1 = c1.get("a")
    g1v = g1[3:5]
    del g1
    g2 = c1.get("a")
    g2[:] = -1
    check(not np.shares_memory(g1v, g2) and np.array_equal(g1v, (reference((1536, 1024), 1) + 5)[3:5]),
          "a held result is not overwritten by the next get")
    del g1v, g2
    check(np.array_equal(c1.get("a"), reference((1536, 1024), 1) + 5), "get after the reuse")
    # Into the caller's arrays.
    out = np.empty((1536, 1024), dtype=np.float32)
    got = c1.get("a", out=out)
    check(np.shares_memory(got, out) and np.array_equal(out, reference((1536, 1024), 1) + 5),
          "get into out")
    box = c0.describe("a")["ranks"][0]
    sl = np.empty((box["hi"][0] - box["lo"][0], box["hi"][1] - box["lo"][1]), np.float32)
    got = c0.get_slice("a", out=sl)
    check(np.shares_memory(got, sl) and np.array_equal(got, sl), "get_slice into out")
    expect(5, lambda: c0.get_slice("a", out=np.empty(7, np.float32)), "get_slice into a short out")
    expect(5, lambda: c0.get_slice("a", out=np.empty(sl.size, np.float32)),
           "get_slice into an out of the slice's size but another shape")
    check(c0.ping()["rank"] == 0, "the connection serves on after the short out")
    try:
        c1.get("a", out=np.empty((1536, 1024), dtype=np.float64))
        check(False, "get into an out of another dtype")
    except ValueError:
        pass
    # Chunks through the halves of a 64 KiB segment.
    small = d.connect(1)
    small.set_shm(True, max_bytes=64 << 10)
    roundtrip(small, "h", (300, 1000), "mesh=[2] placements=[S(0)] splits={0:[100,200]}", 3,
              "shm halves")
    slices([c0, small], "h", reference((300, 1000), 3), 7, "shm halves")
    small.close()
    # Turning shared memory off releases the segment in the daemon too.
    before = c1.stats()["memory_in_use"]
    seg = c1._seg.bytes
    c1.set_shm(False)
    after = c1.stats()["memory_in_use"]
    check(seg > 0 and before - after == seg, f"set_shm(False) gave back {before - after} of the "
          f"{seg} bytes of the segment")
    c1.set_shm(True)
    # The stream: shm=False, TSHARD_SHM=0; 6 MiB puts and gets in chunks of the 4 MiB frame.
    with tshard.connect(socket=d.socket(1), shm=False) as s:
        check(not s.shm, "shm=False")
        roundtrip(s, "s", (1536, 1024), "mesh=[2] placements=[R]", 4, "stream")
        slices([c0, s], "s", reference((1536, 1024), 4), 9, "stream")
    os.environ["TSHARD_SHM"] = "0"
    with d.connect(0) as s:
        check(not s.shm, "TSHARD_SHM=0")
        roundtrip(s, "e", (1100, 1024), "mesh=[2] placements=[S(0)]", 5, "TSHARD_SHM=0")
    del os.environ["TSHARD_SHM"]
    # TCP: the stream only.
    expect(20, lambda: tshard.connect(tcp=f"127.0.0.1:{port}", token=TOKEN, shm=True),
           "shm=True over TCP")
    with tshard.connect(tcp=f"127.0.0.1:{port + 1}", token=TOKEN) as t:
        check(not t.shm, "TCP has no shared memory")
        roundtrip(t, "t", (1536, 1000), "mesh=[2] placements=[S(1)]", 6, "TCP")
        slices([c0, t], "t", reference((1536, 1000), 6), 11, "TCP")
        r = raw_call(t, shm_attach=pb.ShmAttachRequest(bytes=1 << 20))
        check(r.status == 20, f"shm_attach over TCP answered {r.status}")

    # Misuse of the shared-memory protocol.
    with tshard.connect(socket=d.socket(0), shm=False) as m:
        r = raw_call(m, put=pb.PutRequest(name="a", offset=0, total_bytes=64,
                                           shm=pb.ShmData(offset=0, bytes=64)))
        check(r.status == 1, f"a region without a segment answered {r.status}: {r.message}")
        m.set_shm(True, max_bytes=64 << 10)
        m._segment(1)
        seg_bytes = m._seg.bytes
        check(seg_bytes == 64 << 10, f"segment of {seg_bytes} bytes")
        big = (1536 * 1024 * 4)
        for off, n in ((0, seg_bytes + 1), (seg_bytes, 1), ((1 << 64) - 1, 2), (8, (1 << 64) - 8)):
            r = raw_call(m, put=pb.PutRequest(name="a", offset=0, total_bytes=big,
                                               shm=pb.ShmData(offset=off, bytes=n)))
            check(r.status in (8, 16), f"put region {off}+{n} answered {r.status}: {r.message}")
            r = raw_call(m, get_slice=pb.GetSliceRequest(name="a", offset=0,
                                                         shm=pb.ShmData(offset=off, bytes=n)))
            check(r.status == 8, f"get_slice region {off}+{n} answered {r.status}: {r.message}")
        r = raw_call(m, put=pb.PutRequest(name="a", offset=0, total_bytes=64, data=b"x" * 64,
                                           shm=pb.ShmData(offset=0, bytes=64)))
        check(r.status == 1, f"data and a region at once answered {r.status}")
        # The segment is sealed: the client cannot shrink it under the daemon's mapping.
        req = pb.Request(id=m._take_id())
        req.shm_attach.bytes = 1 << 16
        m._wire.send(request_frame(req))
        fd_ok = True
        try:
            head, fds, _, _ = socket.recv_fds(m._sock, 4, 1)
        except OSError:
            fd_ok = False
        check(fd_ok, "no descriptor came with shm_attach")
        if fd_ok:
            rest = m._wire.recv(head + bytes(m._wire.recv_exact(4 - len(head))))
            check(rest.status == 0 and len(fds) == 1, "shm_attach answered with one descriptor")
            try:
                os.ftruncate(fds[0], 4096)
                check(False, "the segment could be truncated")
            except OSError:
                pass
            for fd in fds:
                os.close(fd)
        check(m.ping()["rank"] == 0, "the connection serves on after the misuse")
    check(np.array_equal(c0.get("a"), reference((1536, 1024), 1) + 5),
          "'a' unchanged by the refused requests")

    # Clients killed mid-transfer.
    c0.create("victim", "f32", (256, 1024), "mesh=[2] placements=[S(0)]")
    ref = reference((256, 1024), 8)
    c0.put("victim", ref)
    kill_mid_transfer(d, c0, "put")
    check(np.array_equal(c0.get("victim"), ref), "the killed put changed nothing")
    kill_mid_transfer(d, c0, "get")
    roundtrip(c0, "after", (512, 1024), "mesh=[2] placements=[S(1)]", 12, "after the kills")
    for name in c0.list():
        c0.drop(name)
    c0.close()
    c1.close()
    check(d.stop() == 0, "daemons exit 0")
shutil.rmtree(tok_dir)
check.finish()
