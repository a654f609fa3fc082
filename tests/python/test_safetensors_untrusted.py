#!/usr/bin/python3
"""Hugging Face safetensors files as untrusted input, through real daemons (2 ranks) and the
Python client: what a file makes the daemons hold stays inside --memory-limit, and every check
over a file's entries (and over an export's metadata keys) takes time near-linear in their
number.

The files are written here with struct and json (write_st), independently of tshard; the
daemons' memory is read from the kernel (/proc/PID/status VmRSS, the daemon's pid from the
socket's SO_PEERCRED) and from each daemon's own account (stats: memory_in_use).

- an 8 MiB __metadata__ imported with 100 empty tensors under --memory-limit 64M: each daemon's
  RSS grows by a few times the metadata while it is parsed and by about the metadata once when
  the daemons are idle again (not once per tensor), its memory account shows the
  metadata's bytes, an export writes it back whole, and the account returns to where it was once
  the last of the tensors is dropped (not before);
- a __metadata__ larger than the limit: LIMIT naming the bytes on every rank, nothing created,
  nothing left charged;
- 10k, 20k and 40k entries (a prefix stripped), 40k renamed and named one by one, and 40k over
  the four files of an HF index, each imported with well under 5 s of each daemon's CPU
  (/proc/PID/stat; pairwise checks took 33 s for 40k) while another client's `list` is answered
  (once the import's names are published);
- an export whose request holds 160,000 metadata keys (and the same with one key twice, refused)
  is answered within seconds (it took 56 s), and a ping to the same daemon meanwhile within two
  seconds (it waited the whole time);
- a tensor named __metadata__ is refused by an export (naming it and saying to rename it, no
  file written); a file's __metadata__ that is not text to text is CORRUPT naming it; each file of
  an index keeps its own __metadata__ for its tensors;
- the kept metadata belongs to the stored tensor: a program's output written over it
  (overwrite=True), a drop and a re-create, drop_many and a re-import, and a copy made by a
  reshard's keep_source_as do not carry the old file's metadata into an export, while the
  original keeps it;
- shapes that no tensor may have ([0, 2^62], [3, 0, 2^58], [0, 2^50], [3, 0, 2^49]: a dim past
  2^50, or 2^50 bytes passed with a zero dim counted as 1) are refused by the import up front,
  naming the tensor by its tshard name (after a rename), on every rank, nothing created, before a
  tensor ahead of them in the file asks for memory.

usage: test_safetensors_untrusted.py BUILD_BIN_DIR [TEST_NAME ...] (default: every test)"""
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time

import tshard
from tshard._status import STATUS
from checks import Checks, error_of
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-st-untrusted-")
os.environ["TSHARD_PROGRAM_CACHE"] = os.path.join(work, "cache")
NP = 2
TIMEOUT = 120
MiB = 1 << 20
CODE = {name: code for code, (name, _) in STATUS.items()}
# A sanitizer build (set by tests/safetensors_untrusted.cmake): several times slower, and its
# allocator keeps freed memory (quarantine) rather than giving it back to the system.
SANITIZED = os.environ.get("TSHARD_TEST_SANITIZED") == "1"
SLOW = 10 if SANITIZED else 1
REP = tshard.Attr(tshard.Mesh([NP]), [tshard.Replicate()])
timings = []


# ---- the independent writer: struct + json ------------------------------------------------------
def write_st(path, entries, metadata=None, data_size=0, raw_metadata=None):
    """entries: [(name, dtype, shape, begin, end)]; the data section is data_size bytes (a sparse
    file: nothing is written there). raw_metadata: any JSON value as __metadata__."""
    hdr = {}
    if metadata is not None:
        hdr["__metadata__"] = metadata
    if raw_metadata is not None:
        hdr["__metadata__"] = raw_metadata
    for name, dt, shape, b, e in entries:
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [b, e]}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + data_size)
    return path


def read_metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__")


def one_byte_entries(names):
    return [(nm, "U8", [1], i, i + 1) for i, nm in enumerate(names)]


# ---- the daemons' memory as the kernel and their account see it --------------------------------
def daemon_pid(d, rank):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(d.socket(rank))
        pid, _, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    finally:
        s.close()
    return pid


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def in_use(d, rank):
    with d.connect(rank, timeout=TIMEOUT) as c:
        return c.stats()["memory_in_use"]


def drop_all(c, names=None):
    """Drops the names (None: every tensor) in batches the daemons accept."""
    names = c.list() if names is None else list(names)
    for i in range(0, len(names), 4000):
        c.drop_many(names[i:i + 4000])


def refused_everywhere(d, what, fn, status, needles):
    """fn(client) fails with status and a message holding every needle through every rank's
    client, and no tensor exists afterwards."""
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as c:
            st, msg = error_of(lambda: fn(c))
            check(st == status, f"{what}, rank {r}: status {st} ({msg}), want {status}")
            check(msg is not None and all(n in msg for n in needles),
                  f"{what}, rank {r}: message {msg!r} lacks one of {needles}")
            check(c.list() == [], f"{what}, rank {r}: nothing created: {c.list()[:5]}")
            drop_all(c)  # what a failing check left, so that the next rank starts clean


# ---- memory: the metadata held once, in the account ----------------------------------------------
def test_metadata_once(d):
    meta = {"format": "pt", "blob": "m" * (8 * MiB)}
    names = [f"t{i:03d}" for i in range(100)]
    path = write_st(os.path.join(work, "meta8.safetensors"),
                    [(nm, "F32", [0], 0, 0) for nm in names], metadata=meta)
    pids = [daemon_pid(d, r) for r in range(NP)]
    rss0, use0 = [rss(p) for p in pids], [in_use(d, r) for r in range(NP)]
    with d.connect(0, timeout=TIMEOUT) as c:
        got = c.load_safetensors(path, default=REP)
        check(got == names, f"metadata x100: imported {len(got)} tensors")
    use1 = [in_use(d, r) for r in range(NP)]
    peak = [rss(p) for p in pids]
    # what the parse freed goes back to the system once the daemons are idle (ts_pool_trim)
    deadline = time.monotonic() + 15
    while True:
        rss1 = [rss(p) for p in pids]
        if (all(rss1[r] - rss0[r] < 24 * MiB for r in range(NP)) or SANITIZED
                or time.monotonic() > deadline):
            break
        time.sleep(0.1)  # polling for the idle trim, bounded by the deadline
    for r in range(NP):
        grew, counted = rss1[r] - rss0[r], use1[r] - use0[r]
        print(f"rank {r}: RSS {rss0[r] / MiB:.1f} MiB before, {peak[r] / MiB:.1f} after the "
              f"import, {rss1[r] / MiB:.1f} once idle; memory_in_use +{counted} bytes",
              flush=True)
        check(peak[r] - rss0[r] < 64 * MiB, f"rank {r}: RSS grew by "
              f"{(peak[r] - rss0[r]) / MiB:.1f} MiB for an 8 MiB metadata kept by 100 tensors "
              f"(want it held once)")
        check(grew < 24 * MiB or SANITIZED, f"rank {r}: RSS still {grew / MiB:.1f} MiB above "
              f"where it was, once idle; want the 8 MiB metadata held once")
        check(8 * MiB <= counted < 16 * MiB, f"rank {r}: the memory account grew by {counted} "
              f"bytes; want the metadata's 8 MiB once")
    with d.connect(1, timeout=TIMEOUT) as c:
        out = os.path.join(work, "meta8-out.safetensors")
        c.save_safetensors(out, names=names[:3])
        check(read_metadata(out) == meta, "the kept metadata exported whole")
        os.unlink(out)
        c.drop_many(names[:99])
        check(in_use(d, 0) - use0[0] >= 8 * MiB, "the metadata held while one tensor keeps it")
        c.drop(names[99])
    for r in range(NP):
        left = in_use(d, r) - use0[r]
        check(left < MiB, f"rank {r}: {left} bytes still counted after the last tensor dropped")


def test_metadata_over_limit(d):
    path = write_st(os.path.join(work, "meta72.safetensors"), [("a", "F32", [2], 0, 8)],
                    metadata={"blob": "m" * (72 * MiB)}, data_size=8)
    use0 = [in_use(d, r) for r in range(NP)]
    refused_everywhere(d, "a metadata over the limit",
                       lambda c: c.load_safetensors(path, default=REP), CODE["LIMIT"],
                       ["bytes", "limit"])
    for r in range(NP):
        check(in_use(d, r) - use0[r] < MiB, f"rank {r}: nothing left charged by a refused import")
    os.unlink(path)


def test_shape_before_memory(d):
    """A tensor of 128 MiB (over the limit) first in the file, then one whose shape no tensor may
    have: the import refuses the shape, up front, not the memory."""
    path = write_st(os.path.join(work, "order.safetensors"),
                    [("a", "F32", [32 * MiB], 0, 128 * MiB), ("b", "F32", [0, 1 << 50], 0, 0)],
                    data_size=128 * MiB)
    refused_everywhere(d, "a bad shape after a big tensor",
                       lambda c: c.load_safetensors(path, default=REP), CODE["LIMIT"],
                       ["'b'", "2^50"])
    os.unlink(path)


# ---- time: checks near-linear in the entries ----------------------------------------------------
def cpu_seconds(pid):
    """The CPU time (user + system) the process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_import(d, what, fn, budget):
    """fn(client) imports; meanwhile another client's list is answered. The budget bounds the
    CPU time of the daemon that spent least (what other jobs on the machine stretch little; a
    daemon waiting for a slower peer spins, so the other's figure is the work), the wall time
    gets six times as much. Returns the names imported."""
    budget *= SLOW
    lat, result, done = [], {}, threading.Event()
    pids = [daemon_pid(d, r) for r in range(NP)]

    def run():
        with d.connect(0, timeout=TIMEOUT) as c:
            t0 = time.monotonic()
            try:
                result["names"] = fn(c)
            except tshard.TshardError as e:
                result["error"] = e
            result["s"] = time.monotonic() - t0
        done.set()

    th = threading.Thread(target=run)
    cpu0 = [cpu_seconds(p) for p in pids]
    with d.connect(1, timeout=TIMEOUT) as other:
        th.start()
        while not done.is_set():
            t0 = time.monotonic()
            other.list()
            lat.append(time.monotonic() - t0)
        th.join()
    cpu = min(cpu_seconds(p) - c0 for p, c0 in zip(pids, cpu0))
    s = result["s"]
    timings.append((what, s, cpu))
    print(f"{what}: {s:.2f} s, {cpu:.2f} s of CPU on the least busy daemon (list answered "
          f"{len(lat)} times, at most in {max(lat) if lat else 0:.2f} s)", flush=True)
    check("error" not in result, f"{what}: {result.get('error')}")
    check(cpu < budget, f"{what}: {cpu:.2f} s of a daemon's CPU, want under {budget} s")
    check(s < 6 * budget, f"{what}: {s:.2f} s, want under {6 * budget} s")
    # a list waits for the import's names (published before its answer), no longer
    check(not lat or max(lat) < s + 2, f"{what}: a list took {max(lat):.2f} s meanwhile")
    return result.get("names", [])


def test_many_entries(d):
    for n in (10000, 20000, 40000):
        names = [f"model.layer{i}.w" for i in range(n)]
        path = write_st(os.path.join(work, f"n{n}.safetensors"), one_byte_entries(names),
                        data_size=n)
        got = timed_import(d, f"import of {n} entries (prefix)",
                           lambda c: c.load_safetensors(path, default=REP, prefix="model."),
                           5.0 if n == 40000 else 30.0)
        check(len(got) == n and got[-1] == f"layer{n - 1}.w", f"{n} entries: {got[-1:]}")
        with d.connect(0, timeout=TIMEOUT) as c:
            drop_all(c, got)
    n = 40000
    names = [f"layer{i}.w" for i in range(n)]
    path = os.path.join(work, f"n{n}.safetensors")
    rename = {f"model.{nm}": f"r.{nm}" for nm in names}
    got = timed_import(d, "import of 40000 entries (each renamed, each named)",
                       lambda c: c.load_safetensors(path, names=[f"r.{nm}" for nm in names],
                                                    default=REP, rename=rename), 5.0)
    check(len(got) == n and got[0] == "r.layer0.w", f"renamed: {got[:1]}")
    with d.connect(0, timeout=TIMEOUT) as c:
        drop_all(c, got)
    where = {}
    for f in range(4):
        part = [f"p{f}.{i}" for i in range(n // 4)]
        write_st(os.path.join(work, f"idx-{f}.safetensors"), one_byte_entries(part),
                 data_size=len(part))
        where.update({nm: f"idx-{f}.safetensors" for nm in part})
    idx = os.path.join(work, "model.safetensors.index.json")
    with open(idx, "w") as fh:
        json.dump({"metadata": {"total_size": n}, "weight_map": where}, fh)
    got = timed_import(d, "import of 40000 entries over an index of 4 files",
                       lambda c: c.load_safetensors(idx, default=REP), 5.0)
    check(sorted(got) == sorted(where), f"index: {len(got)} of {len(where)} tensors")
    with d.connect(0, timeout=TIMEOUT) as c:
        drop_all(c, got)


def test_export_many_keys(d):
    from tshard import safetensors as st
    with d.connect(0, timeout=TIMEOUT) as c:
        c.create("x", "f32", (4,), REP)
    meta = {f"key{i:06d}": "v" for i in range(160000)}
    out = os.path.join(work, "keys.safetensors")

    def export_ok(c):
        return c.save_safetensors(out, names=["x"], metadata=meta)

    def export_twice(c):
        req = st.export_request(out + ".dup.safetensors", ["x"], metadata=meta)
        req.metadata.add(key="key000000", value="again")
        return c._op(None, lambda r: list(r.safetensors.files), True, "export",
                     export_safetensors=req)

    for what, fn, want in (("160000 metadata keys", export_ok, None),
                           ("160000 metadata keys, one twice", export_twice, "given twice")):
        result, done = {}, threading.Event()

        def run():
            with d.connect(0, timeout=TIMEOUT) as c:
                t0 = time.monotonic()
                result["st"], result["msg"] = error_of(lambda: fn(c))
                result["s"] = time.monotonic() - t0
            done.set()

        pings = []
        with d.connect(0, timeout=TIMEOUT) as p:
            th = threading.Thread(target=run)
            th.start()
            while not done.is_set():
                t0 = time.monotonic()
                p.ping()
                pings.append(time.monotonic() - t0)
            th.join()
        worst = max(pings) if pings else 0.0
        print(f"export, {what}: {result['s']:.2f} s, {len(pings)} pings meanwhile, the slowest "
              f"{worst:.3f} s", flush=True)
        timings.append((f"export, {what}", result["s"], None))
        if want is None:
            check(result["st"] is None, f"{what}: {result['msg']}")
            check(len(read_metadata(out)) == 160000, f"{what}: the keys written")
        else:
            check(result["st"] == CODE["INVALID_ARGUMENT"] and want in result["msg"],
                  f"{what}: {result['st']} {result['msg']}")
        check(result["s"] < 20.0 * SLOW, f"{what}: answered in {result['s']:.2f} s")
        check(worst < 2.0 * SLOW, f"{what}: a ping took {worst:.2f} s meanwhile")
    os.unlink(out)
    with d.connect(0, timeout=TIMEOUT) as c:
        c.drop("x")


# ---- __metadata__: the format's key, never a tensor, never dropped -----------------------------
def test_metadata_key(d):
    with d.connect(0, timeout=TIMEOUT) as c:
        c.create("__metadata__", "f32", (4,), REP)
        c.create("ok", "f32", (4,), REP)
        out = os.path.join(work, "reserved.safetensors")
        st, msg = error_of(lambda: c.save_safetensors(out, all=True))
        check(st == CODE["INVALID_ARGUMENT"] and "'__metadata__'" in msg and "rename" in msg,
              f"a tensor named __metadata__ exported: {st} {msg}")
        check(not os.path.exists(out), "no file written")
        c.drop("__metadata__")
        c.drop("ok")
    for what, raw in (("a number", {"format": "pt", "n": 1}), ("a list", {"x": ["a"]}),
                      ("an object", {"x": {"y": "z"}}), ("text", "pt")):
        path = write_st(os.path.join(work, "badmeta.safetensors"), [("a", "F32", [2], 0, 8)],
                        raw_metadata=raw, data_size=8)
        refused_everywhere(d, f"__metadata__ holding {what}",
                           lambda c: c.load_safetensors(path, default=REP), CODE["CORRUPT"],
                           ["__metadata__", "badmeta.safetensors"])
    # each file of an index keeps its own metadata
    write_st(os.path.join(work, "m1.safetensors"), [("u", "F32", [2], 0, 8)],
             metadata={"format": "pt", "part": "1"}, data_size=8)
    write_st(os.path.join(work, "m2.safetensors"), [("v", "F32", [2], 0, 8)],
             metadata={"format": "pt", "part": "2"}, data_size=8)
    idx = os.path.join(work, "two.safetensors.index.json")
    with open(idx, "w") as fh:
        json.dump({"weight_map": {"u": "m1.safetensors", "v": "m2.safetensors"}}, fh)
    with d.connect(1, timeout=TIMEOUT) as c:
        c.load_safetensors(idx, default=REP)
        out = os.path.join(work, "part.safetensors")
        for nm, want in (("u", {"format": "pt", "part": "1"}),
                         ("v", {"format": "pt", "part": "2"})):
            c.save_safetensors(out, names=[nm])
            check(read_metadata(out) == want, f"{nm}: metadata {read_metadata(out)}, want {want}")
        c.save_safetensors(out, all=True)
        check(read_metadata(out) == {"format": "pt"}, "two metadata: the default")
        c.drop_many(["u", "v"])


# ---- the kept metadata lives with the stored tensor ---------------------------------------------
def test_stale_metadata(d):
    meta = {"format": "pt", "origin": "old file"}
    path = write_st(os.path.join(work, "old.safetensors"),
                    [("w", "F32", [8], 0, 32), ("k", "F32", [8], 32, 64)], metadata=meta,
                    data_size=64)
    out = os.path.join(work, "stale.safetensors")

    def exported(c, names):
        c.save_safetensors(out, names=names)
        return read_metadata(out)

    prog = {"name": "double", "dims": {"p": {"min": 1, "max": 4096, "buckets": {"step": 128}}},
            "inputs": [{"name": "x", "dtype": "f32", "shape": ["p"]}],
            "ops": [{"out": "y", "op": "mul", "args": ["x", 2.0]}], "outputs": ["y"]}
    with d.connect(0, timeout=TIMEOUT) as c:
        c.load_safetensors(path, default=REP)
        check(exported(c, ["w"]) == meta, "imported: the file's metadata")
        c.create("x", "f32", (8,), REP)
        pid = c.program_compile(prog, lazy=True)
        c.program_run(pid, {"x": "x"}, {"y": "w"}, overwrite=True)
        check(exported(c, ["w"]) == {"format": "pt"},
              f"a program's output over w: {exported(c, ['w'])}")
        check(exported(c, ["k"]) == meta, "k still keeps it")
        c.reshard("k", REP, keep_source_as="k2")
        check(exported(c, ["k2"]) == {"format": "pt"}, "a copy is a new tensor")
        check(exported(c, ["k"]) == meta, "the source keeps it")
        c.drop("k")
        c.create("k", "f32", (8,), REP)
        check(exported(c, ["k"]) == {"format": "pt"}, "dropped and created again")
        c.drop_many(["w", "k", "k2"])
        write_st(path, [("w", "F32", [8], 0, 32), ("k", "F32", [8], 32, 64)], data_size=64)
        c.load_safetensors(path, default=REP)
        check(exported(c, ["w", "k"]) == {"format": "pt"}, "imported again without metadata")
        c.drop_many(["w", "k", "x"])


def test_bad_shapes(d):
    """Shapes of no bytes that create refuses: a dim past 2^50 (BAD_SHAPE), or dims within it
    whose product, a zero counted as 1, passes 2^50 bytes (LIMIT)."""
    for what, shape, status in (("[0, 2^62]", [0, 1 << 62], "BAD_SHAPE"),
                                ("[3, 0, 2^58]", [3, 0, 1 << 58], "BAD_SHAPE"),
                                ("[0, 2^50]", [0, 1 << 50], "LIMIT"),
                                ("[3, 0, 2^49]", [3, 0, 1 << 49], "LIMIT")):
        path = write_st(os.path.join(work, "shape.safetensors"),
                        [("fine", "F32", [2], 0, 8), ("huge", "F32", shape, 8, 8)], data_size=8)
        refused_everywhere(d, f"shape {what}", lambda c: c.load_safetensors(path, default=REP),
                           CODE[status], ["'huge'", "2^50"])
        refused_everywhere(d, f"shape {what}, renamed",
                           lambda c: c.load_safetensors(path, default=REP,
                                                        rename={"huge": "big.one"}),
                           CODE[status], ["'big.one'"])


def run(d, test):
    """One test from an empty store; an exception it raises is a failure, and the others run."""
    if len(sys.argv) > 2 and test.__name__ not in sys.argv[2:]:
        return
    with d.connect(0, timeout=TIMEOUT) as c:
        drop_all(c)
    try:
        test(d)
    except (tshard.TshardError, OSError, KeyError) as e:
        check(False, f"{test.__name__}: {type(e).__name__}: {e}")


def main():
    try:
        for args, tests in ((["--memory-limit", "64M"],
                             (test_metadata_once, test_metadata_over_limit,
                              test_shape_before_memory)),
                            ([], (test_many_entries, test_export_many_keys, test_metadata_key,
                                  test_stale_metadata, test_bad_shapes))):
            with Daemons(bin_dir, NP, extra_args=args) as d:
                for test in tests:
                    run(d, test)
                rc = d.stop()
                check(rc == 0, f"the daemons exit 0 (sanitizers quiet): {rc}\n{d.logs()[-4000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for what, s, cpu in timings:
        print(f"timing: {what}: {s:.2f} s" + (f", {cpu:.2f} s of CPU" if cpu is not None else ""))
    check.finish()


if __name__ == "__main__":
    main()
