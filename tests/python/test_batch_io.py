#!/usr/bin/python3
"""put_many and get_many against real daemons, checked against numpy.

- Randomized differential test: for fixed seeds, batches of 1-200 tensors of random dtypes and
  shapes (empty ones too) under random attributes (random rank subsets, shards, replicas, partials, ragged splits
  with empty parts, blocked stored layouts), put with one put_many and read back with one
  get_many, through each data path (the client's memory, the shared segment, frames; half of
  the batches in chunks of 64 KiB; some with convert=True from float64 arrays); every tensor
  equals its numpy reference, also read back by a single get and by a get_many(wait=False).
- Bad input: a name twice, an unknown tensor, a wrong dtype without convert, a wrong shape, more
  tensors than --batch-max-tensors, more bytes than --batch-max-bytes, one item whose memory is
  not readable: refused through every rank with the same message naming the tensor or the flag,
  and afterwards no tensor changed.
- SPMD: one process per rank (group="all"), each put_many's its own tensors under its own key,
  then a keyed collective reshard_many runs once all submitted, and every process get_many's
  all of them; a retry of an identical keyed put_many is answered by its key without running.
- Futures: put_many and get_many with wait=False, in order on one connection, and their errors.
- A batch whose new slices exceed --memory-limit on some rank, found when the operation runs
  (staged in frames, and from the client's memory): LIMIT, and no tensor changed.

Every client call has a timeout, so a hang fails the test.

usage: test_batch_io.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import os
import random
import sys
import threading

import numpy as np

import tshard
from tshard import tshard_pb2 as pb
from checks import Checks, exact_values, put_data
from dtype_ref import f8_value
from harness import Daemons
from randgen import Gen

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [41, 42]
MAX_TENSORS = 200
MAX_BYTES = 2 << 20
FLAGS = ["--batch-max-tensors", str(MAX_TENSORS), "--batch-max-bytes", str(MAX_BYTES)]
T = 120  # any client call longer than this is a hang
check = Checks()
DTYPES = list(tshard.DTYPES)
MODES = ("direct", "segment", "frames")
STATS = {"batches": 0, "tensors": 0, "converted": 0}


def connect(d, rank, mode, small=False):
    """A client whose puts and gets take the given data path; small: a segment or frames of
    64 KiB, so that batches go in several chunks."""
    if mode == "segment":
        os.environ["TSHARD_DIRECT"] = "0"  # read when the client connects
        try:
            c = tshard.connect(socket=d.socket(rank), timeout=T, shm=True)
        finally:
            del os.environ["TSHARD_DIRECT"]
        if small:
            c.set_shm(True, max_bytes=64 << 10)
        return c
    c = tshard.connect(socket=d.socket(rank), timeout=T, shm=mode == "direct")
    if small and mode == "frames":
        c.chunk = 64 << 10
    return c


def status_of(fn):
    try:
        return "ok", fn()
    except tshard.TshardError as e:
        return e.name, str(e)


def pm(arrays, dtypes=None):
    """A dict of references as put_many data (bf16 and f8 references are their bits; dtypes:
    {name: tshard dtype} when they may hold any)."""
    return {n: put_data(a, (dtypes or {}).get(n)) for n, a in arrays.items()}


def values(rng, dtype, shape):
    """Random values exact in every dtype (small integers; bf16 and f8 as their bits)."""
    v = np.array([rng.randint(-60, 60) for _ in range(int(np.prod(shape)))], dtype=np.int64)
    return exact_values(v, dtype, -60).reshape(shape)


def as_float64(dtype, a):
    """The values of a reference array as float64 (the source of a converting put)."""
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype in ("f8_e4m3", "f8_e5m2"):
        return np.array([f8_value(int(b), dtype) for b in a.ravel()]).reshape(a.shape)
    if dtype in ("c64", "c128"):  # real values: a real put converts them (imaginary 0)
        return a.real.astype(np.float64)
    return a.astype(np.float64)


def random_round(d, rng, seed, rnd, mode):
    gen = Gen(rng, NP)
    k = rng.choice([1, 2, rng.randint(1, MAX_TENSORS), MAX_TENSORS])
    names = [f"s{seed}r{rnd}{mode[0]}t{i}" for i in range(k)]
    refs, arrays = {}, {}
    convert = rng.random() < 0.25
    what = f"seed {seed} round {rnd} {mode} ({k} tensors{', convert' if convert else ''})"
    small = rng.random() < 0.5
    what += ", 64 KiB chunks" if small and mode != "direct" else ""
    with connect(d, rng.randrange(NP), mode, small) as c:
        for n in names:
            dtype = rng.choice(DTYPES)
            shape = [rng.randint(0 if rng.random() < 0.05 else 1, 9)
                     for _ in range(rng.randint(1, 3))]
            tag, fits = gen.layout(len(shape)) if rng.random() < 0.15 else ("", True)
            c.create(n, dtype, shape, gen.attr(shape, dtype), layout=tag if fits else "")
            refs[n] = values(rng, dtype, shape)
            arrays[n] = as_float64(dtype, refs[n]) if convert else put_data(refs[n], dtype)
        st, got = status_of(lambda: c.put_many(arrays, convert=convert))
        if not check(st == "ok", f"{what}: put_many: {st} {got}"):
            return
        order = names[:]
        rng.shuffle(order)
        st, got = status_of(lambda: c.get_many(order))
        if not check(st == "ok" and list(got) == order, f"{what}: get_many: {st} "
                     f"{got if st != 'ok' else list(got)[:3]}"):
            return
        for n in names:
            if not check(got[n].flags.aligned and got[n].flags.c_contiguous,
                         f"{what}: '{n}' comes back unaligned or not C-contiguous"):
                return
            if not check(got[n].dtype == refs[n].dtype and np.array_equal(got[n], refs[n]),
                         f"{what}: '{n}' reads back {got[n]!r}, want {refs[n]!r}"):
                return
        for n in rng.sample(names, min(4, k)):  # the single get agrees
            check(np.array_equal(c.get(n), refs[n]), f"{what}: single get of '{n}' differs")
        fut = c.get_many(order, wait=False)  # the same through the reader thread, in frames
        got = fut.result(T)
        check(all(np.array_equal(got[n], refs[n]) for n in names), f"{what}: get_many(wait=False)")
        ops = c.stats()["ops"]
        for kind in ("put_many", "get_many"):
            o = ops.get(kind, {})
            check(o.get("count", 0) >= 1 and o.get("batch_max", 0) >= k,
                  f"{what}: stats of {kind} after a batch of {k}: {o}")
        c.drop_many(names)
    STATS["batches"] += 1
    STATS["tensors"] += k
    STATS["converted"] += k if convert else 0


def raw_put_many(c, items, data):
    """A put_many request made by hand (frames): items [(name, dtype, shape, client memory)]."""
    m = pb.PutManyRequest(total_bytes=len(data), data=data)
    for name, dtype, shape, mem in items:
        it = m.items.add(name=name, dtype=dtype, shape=shape)
        if mem is not None:
            it.client_memory.address, it.client_memory.bytes = mem
    if mem is not None:
        m.ClearField("data")
        m.total_bytes = 0
    return c._call(None, put_many=m)


def bad_input(d):
    refs = {"b0": values(random.Random(1), "f32", [4, 6]),
            "b1": values(random.Random(2), "i32", [5]),
            "big": np.arange(MAX_BYTES + 1, dtype=np.int64).astype(np.uint8)}
    with d.connect(0, timeout=T) as c:
        c.create("b0", "f32", [4, 6], f"mesh=[{NP}] placements=[S(0)]")
        c.create("b1", "i32", [5], "mesh=[2]@0-1 placements=[S(0)] splits={0:[5,0]}")
        c.create("big", "u8", [MAX_BYTES + 1], "mesh=[2]@0-1 placements=[R]")
        c.put_many({n: refs[n] for n in ("b0", "b1")})
        c.put("big", refs["big"])
    f32, i32 = refs["b0"], refs["b1"]
    tiny = {f"x{i}": np.zeros(1, np.float32) for i in range(MAX_TENSORS + 1)}
    unreadable = (4096, f32.nbytes)  # the first page: never mapped
    cases = [
        ("put_many twice", lambda c: raw_put_many(
            c, [("b0", "f32", [4, 6], None), ("b1", "i32", [5], None), ("b0", "f32", [4, 6], None)],
            f32.tobytes() + i32.tobytes() + f32.tobytes()), "INVALID_ARGUMENT", "'b0' twice"),
        ("get_many twice", lambda c: c.get_many(["b1", "b0", "b1"]), "INVALID_ARGUMENT",
         "'b1' twice"),
        ("put_many unknown", lambda c: c.put_many({"b0": f32 + 1, "nope": i32}), "NOT_FOUND",
         "'nope'"),
        ("get_many unknown", lambda c: c.get_many(["b0", "nope"]), "NOT_FOUND", "'nope'"),
        ("dtype", lambda c: c.put_many({"b0": f32 + 1, "b1": i32.astype(np.float32)}),
         "BAD_DTYPE", "'b1'"),
        ("shape", lambda c: c.put_many({"b1": i32 + 1, "b0": (f32 + 1).reshape(6, 4)}),
         "BAD_SHAPE", "'b0'"),
        ("put_many count", lambda c: c.put_many(tiny), "LIMIT", "--batch-max-tensors"),
        ("get_many count", lambda c: c.get_many(list(tiny)), "LIMIT", "--batch-max-tensors"),
        ("put_many bytes", lambda c: c.put_many({"b0": f32 + 1, "big": refs["big"]}), "LIMIT",
         "--batch-max-bytes"),
        ("get_many bytes", lambda c: c.get_many(["big", "b0"]), "LIMIT", "--batch-max-bytes"),
        ("unreadable item", lambda c: raw_put_many(
            c, [("b1", "i32", [5], (i32.__array_interface__["data"][0], i32.nbytes)),
                ("b0", "f32", [4, 6], unreadable)], b""), None, "'b0'"),
    ]
    for what, fn, status, needle in cases:
        seen = set()
        for rk in range(NP):
            for mode in ("direct", "frames") if what.startswith(("dtype", "put_many u")) else ("direct",):
                with connect(d, rk, mode) as c:
                    st, msg = status_of(lambda: fn(c))
                check(st != "ok" and (status is None or st == status) and needle in msg,
                      f"bad input {what} through rank {rk} ({mode}): {st} {msg}")
                seen.add((st, msg))
        check(len(seen) == 1, f"bad input {what}: answers differ: {seen}")
        for rk in range(NP):  # nothing changed on any tensor, read through every rank
            with d.connect(rk, timeout=T) as c:
                got = c.get_many(["b0", "b1"])
                check(all(np.array_equal(got[n], refs[n]) for n in got)
                      and np.array_equal(c.get("big"), refs["big"]),
                      f"after bad input {what}: a tensor changed (read through rank {rk})")
    with d.connect(0, timeout=T) as c:
        c.drop_many(["b0", "b1"])
        c.drop("big")


def spmd_keys(d):
    names = {r: [f"p{r}w", f"p{r}b"] for r in range(NP)}
    refs = {}
    rng = random.Random(5)
    with d.connect(0, timeout=T) as c:
        for r in range(NP):
            c.create(names[r][0], "f32", [2 * NP, 3], f"mesh=[{NP}] placements=[S(0)]")
            c.create(names[r][1], "i64", [7], f"mesh=[{NP}] placements=[R]")
            refs[names[r][0]] = values(rng, "f32", [2 * NP, 3])
            refs[names[r][1]] = values(rng, "i64", [7])
    target = {n: f"mesh=[{NP}] placements=[S(1)]" if n.endswith("w") else
              f"mesh=[{NP}] placements=[S(0)] splits={{0:[7{',0' * (NP - 1)}]}}"
              for r in range(NP) for n in names[r]}
    out = {}

    def one(r):
        try:
            with tshard.connect(socket=d.socket(r), timeout=T, group="all",
                                run_id="batchio-spmd") as c:
                mine = {n: refs[n].copy() for n in names[r]}
                c.put_many(pm(mine), key=f"load-{r}")
                for a in mine.values():  # the retry sends the same request: not run again
                    a += 1
                c.put_many(pm(mine), key=f"load-{r}")
                res = c.reshard_many(target)  # a keyed collective: runs once all put theirs
                out[r] = ("ok", res, c.get_many([n for q in range(NP) for n in names[q]]))
        except Exception as e:  # noqa: BLE001 - compared below
            out[r] = ("error", repr(e), None)
    threads = [threading.Thread(target=one, args=(r,)) for r in range(NP)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * T)
    for r in range(NP):
        o = out.get(r)
        if not check(o is not None and o[0] == "ok", f"SPMD rank {r}: {o}"):
            continue
        check(set(o[1]) == set(target) and all(v.get("strategy") for v in o[1].values()),
              f"SPMD rank {r}: reshard_many results {o[1]}")
        for n, want in refs.items():
            check(np.array_equal(o[2][n], want), f"SPMD rank {r}: '{n}' is {o[2][n]}, want {want}")
    with d.connect(1, timeout=T) as c:
        for n in target:
            check(tshard.Attr.parse(c.describe(n)["attr"]) == tshard.Attr.parse(target[n]),
                  f"SPMD: '{n}' is not under its target attribute")
        c.drop_many(list(target))


def futures(d):
    rng = random.Random(9)
    with d.connect(2 % NP, timeout=T) as c:
        names = [f"fu{i}" for i in range(30)]
        refs, dts = {}, {}
        for i, n in enumerate(names):
            dtype = dts[n] = DTYPES[i % len(DTYPES)]
            shape = [rng.randint(1, 40), 3]
            c.create(n, dtype, shape, f"mesh=[{NP}] placements=[S(0)]")
            refs[n] = values(rng, dtype, shape)
        fp = c.put_many(pm(refs, dts), wait=False)
        fg = c.get_many(names[::-1], wait=False)  # after the put: one connection runs in order
        bad = c.get_many(["fu0", "nope"], wait=False)
        badp = c.put_many({"fu0": refs["fu0"].astype(np.float64)}, wait=False)  # fu0 is f32
        put_res, got = tshard.wait([fp, fg], timeout=T)
        check(put_res is None and list(got) == names[::-1], f"futures: {put_res} {list(got)[:3]}")
        check(all(np.array_equal(got[n], refs[n]) for n in names), "futures: values differ")
        e = bad.exception(T)
        check(isinstance(e, tshard.errors.NotFoundError) and "'nope'" in str(e),
              f"futures: get_many of an unknown tensor: {e!r}")
        e = badp.exception(T)
        check(isinstance(e, tshard.errors.BadDtypeError) and "'fu0'" in str(e),
              f"futures: put_many of the wrong dtype: {e!r}")
        check(np.array_equal(c.get("fu0"), refs["fu0"]), "futures: the refused put changed fu0")
        c.chunk = 8 << 10  # several chunks each way, all in flight at once
        refs2 = {n: a[::-1].copy() for n, a in refs.items()}
        fp, fg = c.put_many(pm(refs2, dts), wait=False), c.get_many(names, wait=False)
        got = tshard.wait([fp, fg], timeout=T)[1]
        check(all(np.array_equal(got[n], refs2[n]) for n in names), "futures in chunks: values")
        c.drop_many(names)


def memory_limit():
    """A batch whose new slices do not fit --memory-limit on some rank, found only when the
    operation runs (after the asking rank staged or checked it): LIMIT, and nothing changed."""
    with Daemons(bin_dir, NP, ["--memory-limit", "4M"]) as d:
        rep = f"mesh=[{NP}] placements=[R]"
        for mode, big in (("frames", [("m_big", 1500000)]),
                          ("direct", [("m_a", 1100000), ("m_b", 1100000)])):
            refs = {"m_small": np.arange(16, dtype=np.float32)}
            with d.connect(0, timeout=T) as c:
                c.create("m_small", "f32", [16], f"mesh=[{NP}] placements=[S(0)]")
                c.put("m_small", put_data(refs["m_small"]))
                for n, size in big:
                    refs[n] = (np.arange(size) % 251).astype(np.uint8)
                    c.create(n, "u8", [size], rep)
                    c.put(n, put_data(refs[n]))
            with connect(d, 1, mode) as c:
                st, msg = status_of(lambda: c.put_many(pm({n: a + 1 for n, a in refs.items()})))
            check(st == "LIMIT" and "memory" in msg,
                  f"memory limit ({mode}): a batch over it: {st} {msg}")
            for rk in range(NP):
                with d.connect(rk, timeout=T) as c:
                    got = c.get_many(list(refs))
                    check(all(np.array_equal(got[n], refs[n]) for n in refs),
                          f"memory limit ({mode}): a tensor changed (read through rank {rk})")
            with d.connect(0, timeout=T) as c:
                c.drop_many(list(refs))
        check(d.stop() == 0, f"the daemons with a memory limit exit 0:\n{d.logs()[-3000:]}")


def main():
    with Daemons(bin_dir, NP, FLAGS) as d:
        bad_input(d)
        spmd_keys(d)
        futures(d)
        for seed in SEEDS:
            rng = random.Random(seed)
            for rnd, mode in enumerate(MODES * 2):
                random_round(d, rng, seed, rnd, mode)
        check(d.stop() == 0, f"the daemons exit 0:\n{d.logs()[-3000:]}")
    memory_limit()
    print("random batches:", STATS)
    check(STATS["batches"] == 2 * len(MODES) * len(SEEDS), f"batches run: {STATS}")
    check.finish()


main()
