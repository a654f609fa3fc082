#!/usr/bin/python3
"""Regression tests of "ranks must never disagree", against real daemons (4 ranks,
--memory-limit 64K):

1. a reshard that fails only where data would move (a layout tag that does not fit the tensor, a
   memory-limit refusal) fails on every rank with the same message, whichever rank it is sent
   through, and every rank still records the old tensor with its data;
2. a request that decodes once but not after re-encoding (an unknown field 0 written with an
   overlong tag) is answered, and a final put chunk sent this way keeps nothing charged;
3. partial reductions give the same result in every strategy: every dtype x sum/max/min x every
   strategy that applies, against p2p and a numpy reference (integer sums wrap like C casts,
   bool's sum and max are "or" and min "and", as numpy's add, maximum and minimum of bools); a
   partial f8_e4m3 or f8_e5m2 tensor is refused, naming the dtype and the reductions that exist;
4. a reshard small enough that its pieces ride on the agreement, refused by the memory limit on
   one rank only: the same LIMIT naming that rank everywhere, nothing relayed, every rank keeps
   the tensor; the same reshard then fits and is relayed on every rank;
5. what a client saw complete, every rank shows at once: after each of a series of reshards,
   creates, drops and batches sent through one rank, describe, list and list with details through
   every rank (connections held open, asked right after the answer) give the new attribute and
   names, never the old ones.

usage: test_agreement.py BUILD_BIN_DIR [ITEM ...]   (items 1 2 3 4 5; default all)"""
import socket
import struct
import sys

import numpy as np

import tshard
from tshard import tshard_pb2 as pb
from checks import Checks, put_data
from harness import Daemons

bin_dir = sys.argv[1]
ITEMS = [int(i) for i in sys.argv[2:]] or [1, 2, 3, 4, 5]
check = Checks()
NP = 4
OVERLONG_FIELD_0 = bytes([0x80, 0x00, 0x05])  # tag 0 as a 2-byte varint, then the value 5


def reference(shape):
    return (np.arange(int(np.prod(shape))) % 251 - 100).astype(np.float32).reshape(shape)


def describe_all(d, name):
    """describe of `name` on every rank (the dict, or the error's status name)."""
    out = []
    for r in range(NP):
        with d.connect(r, timeout=30) as c:
            try:
                out.append(c.describe(name))
            except tshard.TshardError as e:
                out.append(e.name)
    return out


def expect_error(fn, what):
    try:
        fn()
    except tshard.TshardError as e:
        return e
    check(False, f"{what}: no error")
    return None


def raw_call(d, rank, req_bytes, timeout=20):
    """Sends one frame of raw bytes; the Response, or None when none comes within the timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(d.socket(rank))
        s.sendall(struct.pack("<I", len(req_bytes)) + req_bytes)
        head = b""
        while len(head) < 4:
            k = s.recv(4 - len(head))
            if not k:
                return None
            head += k
        (n,) = struct.unpack("<I", head)
        body = b""
        while len(body) < n:
            k = s.recv(n - len(body))
            if not k:
                return None
            body += k
        return pb.Response.FromString(body)
    except socket.timeout:
        return None
    finally:
        s.close()


def unchanged_everywhere(d, name, attr, ref, what, get_ranks=range(NP)):
    infos = describe_all(d, name)
    check(all(isinstance(i, dict) and i["attr"] == attr for i in infos),
          f"{what}: every rank records {attr}: {[i if isinstance(i, str) else i['attr'] for i in infos]}")
    for r in get_ranks:
        with d.connect(r, timeout=30) as c:
            try:
                check(np.array_equal(c.get(name), ref), f"{what}: get through rank {r}")
            except tshard.TshardError as e:
                check(False, f"{what}: get through rank {r}: {e}")


# ---------------------------------------------------------------------------------------------
# 1. failures met only where data moves

def item1(d):
    src = "mesh=[1]@3 placements=[R]"
    ref = reference((4, 3))
    with d.connect(1) as c:
        c.create("t", "f32", (4, 3), src)
        c.put("t", put_data(ref))
    messages = set()
    for via in (1, 0, 2):  # rank 1 and 2 hold nothing of either mesh
        with d.connect(via) as c:
            e = expect_error(lambda: c.reshard("t", "mesh=[1,2]@0,3 placements=[R,R]",
                                               layout="A0ab"), f"bad layout via rank {via}")
            check(e is not None and e.name == "BAD_LAYOUT", f"bad layout via rank {via}: {e}")
            messages.add(str(e))
    check(len(messages) == 1, f"the same message through every rank: {messages}")
    unchanged_everywhere(d, "t", src, ref, "after the bad layout")

    # --memory-limit 64K: rank 0 cannot hold the whole 60000-byte tensor beside its half
    src = "mesh=[2]@0,3 placements=[S(0)]"
    big = reference((5000, 3))
    with d.connect(1) as c:
        c.create("u", "f32", big.shape, src)
        c.put("u", big)
        e = expect_error(lambda: c.reshard("u", "mesh=[1]@0 placements=[R]"),
                         "memory-limit refusal via rank 1")
        check(e is not None and e.name == "LIMIT", f"memory-limit refusal via rank 1: {e}")
    unchanged_everywhere(d, "u", src, big, "after the memory-limit refusal", get_ranks=(1, 2))

    # keep_source_as that the limit refuses on ranks 0 and 3 only: no rank keeps the copy
    with d.connect(2) as c:
        e = expect_error(lambda: c.reshard("u", "mesh=[2]@0,3 placements=[S(1)]",
                                           keep_source_as="u2"), "keep_source_as over the limit")
        check(e is not None and e.name == "LIMIT", f"keep_source_as over the limit: {e}")
    check(all(i == "NOT_FOUND" for i in describe_all(d, "u2")), "no rank keeps the copy")
    with d.connect(0) as c:
        c.drop("u")

    # and the job is live: a good reshard through a rank outside both meshes
    with d.connect(2) as c:
        c.reshard("t", "mesh=[1,2]@0,3 placements=[R,R]", layout="ab")
    unchanged_everywhere(d, "t", "mesh=[1,2]@0,3 placements=[R,R]", ref, "after a good reshard")
    with d.connect(0) as c:
        c.drop("t")


# ---------------------------------------------------------------------------------------------
# 2. requests that do not survive re-encoding

def memory_in_use(d):
    out = []
    for r in range(NP):
        with d.connect(r, timeout=30) as c:
            out.append(c.stats()["memory_in_use"])
    return out


def item2(d):
    with d.connect(0) as c:
        c.create("k", "f32", (4, 3), f"mesh=[{NP}] placements=[S(0)]")
    base = memory_in_use(d)
    for via in (1, 0):
        req = pb.Request(id=7, drop=pb.DropRequest(name="k")).SerializeToString()
        r = raw_call(d, via, req + OVERLONG_FIELD_0)
        check(r is not None and r.id == 7 and r.status != 0,
              f"drop with an overlong field 0 via rank {via} is answered: {r}")
    check(all(isinstance(i, dict) for i in describe_all(d, "k")), "k still on every rank")
    # final put chunks sent this way: answered, staging freed (26 x 16000 bytes > the limit)
    data = np.arange(4000, dtype=np.float32)
    with d.connect(0) as c:
        c.create("v", "f32", data.shape, f"mesh=[{NP}] placements=[S(0)]")
    with_v = memory_in_use(d)  # v's slice (4000 bytes a rank) and its entry
    for i in range(26):
        req = pb.Request(id=100 + i, put=pb.PutRequest(name="v", offset=0,
                                                       total_bytes=data.nbytes,
                                                       data=data.tobytes()))
        r = raw_call(d, 1 + i % 3, req.SerializeToString() + OVERLONG_FIELD_0)
        if not check(r is not None and r.status != 0, f"put {i} with an overlong field 0 is "
                                                       f"answered with an error: {r}"):
            break
    with d.connect(0) as c:
        used = memory_in_use(d)
        check(used == with_v and all(w - b >= 4000 for w, b in zip(with_v, base)),
              f"nothing stays charged: before {base}, with v {with_v}, after {used} (v adds "
              f"4000 bytes a rank and its entry)")
        c.put("v", data)  # fits: nothing leaked
        check(np.array_equal(c.get("v"), data), "a normal put afterwards")
        c.drop("v")
        c.drop("k")


# ---------------------------------------------------------------------------------------------
# 3. partial reductions: every dtype x op x strategy

def bf16_bits(x):
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def contributions(dtype, n):
    """Two ranks' partial values: 8-, 16-, 32- and 64-bit sums overflow (200 + 100 in u8, 100 +
    100 in i8 first); bools every pair; floats hold small integers, exact in every float dtype."""
    i = np.arange(n, dtype=np.int64)
    if dtype == "bool":
        return [(i % 2).astype(np.bool_), ((i // 2) % 2).astype(np.bool_)]
    if dtype in ("i16", "u16", "u32", "u64"):
        t = tshard.DTYPES[dtype]
        top = int(np.iinfo(t).max)
        return [np.array([top - k * 1000 for k in i.tolist()], dtype=t),
                np.array([k * 997 + 1 + (k % 2) * 5000 for k in i.tolist()], dtype=t)]
    if dtype == "u8":
        return [((i * 37 + 200) % 256).astype(np.uint8), ((i * 53 + 100) % 256).astype(np.uint8)]
    if dtype == "i8":
        return [((i * 37 + 228) % 256 - 128).astype(np.int8),
                ((i * 53 + 228) % 256 - 128).astype(np.int8)]
    if dtype in ("i32", "i64"):
        t = np.int32 if dtype == "i32" else np.int64
        top = np.iinfo(t).max
        return [(top - i * 1000).astype(t), (i * 997 + 1 - (i % 2) * 5000).astype(t)]
    a, b = (i * 7) % 17 - 8, (i * 5) % 13 - 6
    if dtype == "bf16":
        return [bf16_bits(a), bf16_bits(b)]
    return [a.astype(tshard.DTYPES[dtype]), b.astype(tshard.DTYPES[dtype])]


def reduced(dtype, op, parts):
    """numpy reference: integer sums wrap (numpy's array arithmetic), floats are exact here."""
    f = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    if dtype == "bf16":
        return bf16_bits(f(bf16_values(parts[0]), bf16_values(parts[1])))
    with np.errstate(over="ignore"):
        return f(parts[0], parts[1])


STRATEGIES = ["auto", "allreduce", "reduce_scatter", "allgather", "alltoall", "p2p", "root",
              "local"]


def item3(d):
    shape = (6, 4)
    n = int(np.prod(shape))
    src = "mesh=[2]@0,1 placements=[P(%s)]"
    targets = ["mesh=[2]@0,1 placements=[R]", "mesh=[2]@0,1 placements=[S(0)]",
               "mesh=[2]@0,1 placements=[S(1)]", "mesh=[1]@3 placements=[R]"]
    runs = 0
    with d.connect(0) as c:
        for dtype in tshard.DTYPES:
            for op in ("sum", "max", "min"):
                # the 8-bit floats have no reductions, complex ones no max or min: refused at create
                if dtype in ("f8_e4m3", "f8_e5m2") or (dtype in ("c64", "c128") and op != "sum"):
                    check.expect(tshard.errors.BadDtypeError.status,
                                 lambda: c.create("p", dtype, shape, src % op),
                                 f"partial {dtype}", f"partial {op} of {dtype}")
                    check("p" not in c.list(), f"partial {dtype}: nothing created")
                    continue
                parts = contributions(dtype, n)
                want = reduced(dtype, op, parts).reshape(shape)
                c.create("p", dtype, shape, src % op)
                for r in range(2):
                    with d.connect(r) as cr:
                        cr.put_slice("p", put_data(parts[r].reshape(shape), dtype))
                got = c.get("p")  # the gather reduces through the executor
                check(np.array_equal(got, want), f"{dtype} P({op}) get: {got.ravel()[:4]} "
                                                 f"want {want.ravel()[:4]}")
                for tgt in targets:
                    results = {}
                    for s in STRATEGIES:
                        try:
                            c.plan("p", tgt, strategy=s)
                        except tshard.errors.BadStrategyError:
                            continue
                        c.reshard("p", tgt, strategy=s, keep_source_as="q")
                        results[s] = c.get("q")
                        c.drop("q")
                        runs += 1
                    check("p2p" in results, f"{dtype} P({op}) -> {tgt}: p2p applies")
                    for s, got in results.items():
                        check(np.array_equal(got, want) and np.array_equal(got, results["p2p"]),
                              f"{dtype} P({op}) -> {tgt} by {s}: {got.ravel()[:4]} want "
                              f"{want.ravel()[:4]}")
                c.drop("p")
    print(f"item 3: {runs} reshards compared")


# ---------------------------------------------------------------------------------------------
# 4. a failure on one rank only, where the pieces ride on the agreement

def relayed_counts(d):
    out = []
    for r in range(NP):
        with d.connect(r, timeout=30) as c:
            out.append(sum(v["relayed"] for v in c.stats()["strategies"].values()))
    return out


def item4(d):
    src, tgt = (f"mesh=[{NP}]@0-{NP - 1} placements=[S({k})]" for k in (0, 1))  # canonical
    ref = reference((32, 32))  # 4 KiB: 1 KiB a rank, 256-byte pieces
    with d.connect(0) as c:
        c.create("s", "f32", ref.shape, src)
        c.put("s", put_data(ref))
        # rank 1 alone holds 61200 more bytes (and the entries): a new 1 KiB slice no longer
        # fits 64K
        c.create("hog", "f32", (15300,), "mesh=[1]@1 placements=[R]")
    before = relayed_counts(d)
    messages = set()
    for via in (0, 2):
        with d.connect(via) as c:
            e = expect_error(lambda: c.reshard("s", tgt, keep_source_as="s2"),
                             f"a relayed reshard over the limit on rank 1, via rank {via}")
            check(e is not None and e.name == "LIMIT" and "rank 1" in str(e),
                  f"LIMIT naming rank 1 via rank {via}: {e}")
            messages.add(str(e))
    check(len(messages) == 1, f"the same message through every rank: {messages}")
    check(relayed_counts(d) == before, f"nothing relayed: {before}, then {relayed_counts(d)}")
    check(all(i == "NOT_FOUND" for i in describe_all(d, "s2")), "no rank keeps the copy")
    unchanged_everywhere(d, "s", src, ref, "after the refusal on rank 1")
    with d.connect(0) as c:
        c.drop("hog")
        c.reshard("s", tgt)
    check([a - b for a, b in zip(relayed_counts(d), before)] == [1] * NP,
          f"relayed on every rank once it fits: {before}, then {relayed_counts(d)}")
    unchanged_everywhere(d, "s", tgt, ref, "after the relayed reshard")
    with d.connect(0) as c:
        c.drop("s")


def item5(d):
    conns = [d.connect(r) for r in range(NP)]
    attrs = [f"mesh=[{NP}] placements=[S(0)]", f"mesh=[{NP}] placements=[S(1)]",
             f"mesh=[2,2] placements=[S(1),R]", f"mesh=[{NP}] placements=[R]"]
    conns[0].create("fresh", "f32", (16, 16), attrs[0])
    stale = []
    for i in range(60):
        via = conns[i % NP]
        want = attrs[(i + 1) % len(attrs)]
        if i % 3 == 2:
            via.reshard_many({"fresh": want})
        else:
            via.reshard("fresh", want)
        extra = f"x{i}"
        if i % 5 == 0:
            via.create(extra, "f32", (4,), attrs[0])
        for r, c in enumerate(conns):
            got = tshard.Attr.parse(c.describe("fresh")["attr"])
            if got != tshard.Attr.parse(want):
                stale.append(f"step {i}: rank {r} describes {got}, not {want}")
            details = {t["name"]: t for t in c.list(details=True)}
            if tshard.Attr.parse(details["fresh"]["attr"]) != tshard.Attr.parse(want):
                stale.append(f"step {i}: rank {r} lists {details['fresh']['attr']}")
            if i % 5 == 0 and extra not in c.list():
                stale.append(f"step {i}: rank {r} does not list the new {extra}")
        if i % 5 == 0:
            via.drop(extra)
            for r, c in enumerate(conns):
                if extra in c.list():
                    stale.append(f"step {i}: rank {r} still lists the dropped {extra}")
    check(not stale, f"every rank shows what completed: {stale[:5]}")
    conns[0].drop("fresh")
    for c in conns:
        c.close()


with Daemons(bin_dir, NP, extra_args=["--memory-limit", "64K"]) as daemons:
    for item in ITEMS:
        (item1, item2, item3, item4, item5)[item - 1](daemons)
    check(daemons.stop() == 0, "daemons exit 0 after shutdown")
check.finish()
