#!/usr/bin/python3
"""Casts in transit against real daemons: reshard(..., dtype=) and reshard_many with per-item
dtypes, through the Python client.

Randomized (fixed seeds): tensors of a source dtype with random values (rounding ties, subnormals,
values near the limits of the target), random pairs of attributes (1-D and 2-D meshes, sub-meshes,
shards, replicas, ragged splits), source and target layouts (row-major, column-major, blocked
with padding) and strategies forced by name; after each cast the whole tensor
read back through a random rank is compared bit for bit with numpy's conversion of the whole
reference (bf16, which numpy lacks, by a round-to-nearest-even reference written here and
checked against the exact rounding of tests/python/dtype_ref.py), and every rank describes the
tensor with the new dtype and attribute. Partial sources (pieces put per rank; integers whose
sum is exact in the source dtype but whose pieces would round differently) reduce in the source
dtype, then convert; casts to partial targets fill the target dtype's identity. keep_source_as keeps the source's dtype. Refused casts (a value that would
not survive on one rank only, an unknown dtype, an f8 partial target, a forced strategy that
does not apply, new slices over the daemons' --memory-limit) leave the tensor exactly as it was
on every rank. An idempotency key covers the dtype: a retry runs once, another dtype under the
key is a conflict; SPMD clients (a group, or one key) cast once.

usage: test_reshard_cast.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import random
import sys
import threading

import numpy as np

import tshard
from checks import Checks, put_data
from dtype_ref import bf16_bits_of
from harness import Daemons
from randgen import same_attr

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [5, 6]
CALL_TIMEOUT = 60
check = Checks()
NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
         "i64": np.int64, "i8": np.int8, "u8": np.uint8, "i16": np.int16}
# (source, target) casts; narrowing ones convert before the wire, the others after it
CASTS = [("f32", "bf16"), ("f32", "f16"), ("bf16", "f32"), ("f64", "f32"), ("i32", "f32"),
         ("f32", "i32"), ("f64", "bf16"), ("f16", "f32"), ("f64", "f16"), ("i64", "i8"),
         ("f32", "f64"), ("i32", "i64"), ("bf16", "f16")]
STRATEGIES = ["auto", "auto", "p2p", "alltoall", "allgather", "root", "local", "allreduce",
              "reduce_scatter"]


# ---- references ---------------------------------------------------------------------------
def bf16_from_f32(a):
    """bf16 bits of float32 values, round to nearest even, from magnitudes in float64 (exact
    here): the truncated bf16 below the value and the next one up (one bf16 quantum of the
    value's binade higher; past the largest finite it is infinity), nearer wins, a tie goes to
    the even code. NaN stays NaN, made quiet."""
    a = np.asarray(a, np.float32)
    u = a.view(np.uint32)
    sign = (u >> 16) & 0x8000
    lo = (u & 0x7FFFFFFF) >> 16
    down = (lo << 16).view(np.float32).astype(np.float64)
    binade = np.maximum((u >> 23) & 0xFF, 1).astype(np.int64)
    quantum = np.ldexp(1.0, binade - 127 - 7)
    x = np.abs(a.astype(np.float64))
    pick_up = (x - down > quantum / 2) | ((x - down == quantum / 2) & (lo & 1 == 1))
    out = (sign | (lo + pick_up)).astype(np.uint16)
    special = (u & 0x7F800000) == 0x7F800000  # inf stays inf, NaN quiet
    return np.where(special, ((u >> 16) | np.where((u & 0x7FFFFF) != 0, 0x40, 0)),
                    out).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def convert(ref, src, dst):
    """numpy's conversion of the whole tensor (bf16 as bits)."""
    if src == "bf16":
        ref = bf16_to_f32(ref)
        src = "f32"
    if dst == "bf16":
        if src == "f64":  # exactly, without going through f32 (no double rounding)
            return np.array([bf16_bits_of(float(v)) for v in ref.ravel()],
                            np.uint16).reshape(ref.shape)
        return bf16_from_f32(ref.astype(np.float32))
    return ref.astype(NUMPY[dst])


def values(rng, src, dst, n):
    """Random values of dtype src that survive the cast to dst, with the hard cases."""
    r = np.random.default_rng(rng.randrange(1 << 30))
    if src in ("i32", "i64"):
        lim = 100 if dst == "i8" else (1 << 30)
        return r.integers(-lim, lim, n).astype(NUMPY[src])
    if dst in ("i32", "i64"):
        return (r.standard_normal(n) * 1e6).astype(NUMPY[src])
    if dst == "f16" or src == "f16":
        v = r.standard_normal(n) * 300
        edge = [60000.0, -60000.0, 1e-5, 2049.0, 2051.0, 0.0, 3.0]
        edge += [] if src == "bf16" else [65504.0, -65504.0, 6e-8]  # bf16(65504) is 65536
        v[: n // 4] = r.choice(edge, n // 4)
        return v.astype(np.float32 if src == "bf16" else NUMPY[src])
    v = r.standard_normal(n) * 10.0 ** r.integers(-30, 30, n)
    if src != "f64":
        # exact bf16 ties (0x...8000 patterns) and their neighbours
        ties = (r.integers(0, 0x7F00, n // 4, dtype=np.uint32) << 16 | 0x8000).astype(np.uint32)
        v = v.astype(np.float32)
        v[: n // 4] = ties.view(np.float32)
        v[n // 4: n // 2] = np.float32(1e-40)  # subnormals
    return v


def source_ref(rng, src, dst, shape):
    v = values(rng, src, dst, int(np.prod(shape))).reshape(shape)
    if src == "bf16":
        return bf16_from_f32(v.astype(np.float32))
    return v.astype(NUMPY[src])


# ---- attributes ---------------------------------------------------------------------------
def attrs(np_, shape):
    """Attributes of a 2-D tensor of this shape (dims multiples of 4) over np_ ranks."""
    a = [f"mesh=[{np_}] placements=[S(0)]", f"mesh=[{np_}] placements=[S(1)]",
         f"mesh=[{np_}] placements=[R]", "mesh=[2]@0-1 placements=[S(0)]",
         f"mesh=[{np_ - 1}]@1-{np_ - 1} placements=[S(1)]" if np_ > 2 else
         "mesh=[1]@1 placements=[R]"]
    if np_ == 4:
        a += ["mesh=[2,2] placements=[S(0),S(1)]", "mesh=[2,2] placements=[R,S(0)]",
              f"mesh=[4] placements=[S(0)] splits={{0:[1,{shape[0] - 3},0,2]}}"]
    else:
        ragged = [shape[1] - np_ + 1] + [1] * (np_ - 1)
        a += [f"mesh=[{np_}] placements=[S(1)] splits={{1:[{','.join(map(str, ragged))}]}}"]
    return a


def call(fn):
    try:
        return "ok", fn()
    except tshard.TshardError as e:
        return e.name, str(e)


class Run:
    def __init__(self, d, seed):
        self.d, self.rng, self.seed = d, random.Random(seed), seed
        self.stats = {"casts": 0, "forced": 0, "bad_strategy": 0, "refused": 0, "partial": 0,
                      "kept": 0, "many": 0}

    def conn(self):
        return self.d.connect(self.rng.randrange(NP), timeout=CALL_TIMEOUT)

    def state(self, name):
        """What every rank says of the tensor, and its data read back through each rank."""
        out = []
        for rk in range(NP):
            with self.d.connect(rk, timeout=CALL_TIMEOUT) as c:
                st, info = call(lambda: c.describe(name))
                data = c.get(name) if st == "ok" else None
                out.append((st, (info["dtype"], info["attr"]) if st == "ok" else None, data))
        return out

    def same(self, a, b):
        return all(x[0] == y[0] and x[1] == y[1] and
                   (x[2] is None and y[2] is None or
                    np.array_equal(x[2].view(np.uint8), y[2].view(np.uint8)))
                   for x, y in zip(a, b))

    def expect_data(self, c, name, dst, attr, want, what):
        info = c.describe(name)
        check(info["dtype"] == dst, f"{what}: dtype {info['dtype']}, want {dst}")
        check(same_attr(info["attr"], attr), f"{what}: attr {info['attr']}, want {attr}")
        with self.conn() as g:
            got = g.get(name)
        got = np.asarray(got)
        ok = got.dtype.itemsize == want.dtype.itemsize and np.array_equal(
            got.view(f"u{want.dtype.itemsize}"), want.view(f"u{want.dtype.itemsize}"))
        check(ok, f"{what}: bits differ from numpy's conversion:\n got {got.ravel()[:8]}\n"
                  f"want {want.ravel()[:8]}")

    def one(self, step):
        src, dst = self.rng.choice(CASTS)
        shape = (self.rng.randint(1, 9) * 4, self.rng.randint(1, 7) * 4)
        a_src, a_dst = self.rng.sample(attrs(NP, shape), 2) if self.rng.random() < 0.8 else \
            [self.rng.choice(attrs(NP, shape))] * 2
        strat = self.rng.choice(STRATEGIES)
        ref = source_ref(self.rng, src, dst, shape)
        what = f"seed {self.seed} step {step}: {src}->{dst} {a_src} -> {a_dst} ({strat})"
        name = f"t{step}"
        keep = self.rng.random() < 0.2
        layout = self.rng.choice([None, None, "ba", "aB4b"])  # new slices: column-major, blocked
        src_layout = self.rng.choice([None, None, "Ab4a"])
        with self.conn() as c:
            c.create(name, src, shape, a_src, layout=src_layout)
            c.put(name, put_data(ref, src))
            before = self.state(name) if strat != "auto" else None
            def cast():
                return call(lambda: c.reshard(name, a_dst, strategy=strat, dtype=dst,
                                              keep_source_as=f"{name}k" if keep else None,
                                              layout=layout))
            st, r = cast()
            if st == "BAD_STRATEGY":  # the forced strategy does not apply: nothing changed
                self.stats["bad_strategy"] += 1
                check(self.same(before, self.state(name)), f"{what}: refused, unchanged")
                check(call(lambda: c.describe(f"{name}k"))[0] == "NOT_FOUND",
                      f"{what}: refused, no kept copy")
                strat = "auto"
                st, r = cast()
            if check(st == "ok", f"{what}: {st} {r}"):
                self.stats["casts"] += 1
                if strat != "auto":
                    self.stats["forced"] += 1
                    check(r["strategy"] == strat, f"{what}: ran {r['strategy']}")
                out = f"{name}k" if keep else name
                self.expect_data(c, out, dst, a_dst, convert(ref, src, dst), what)
                check(c.describe(out)["layout"] == (layout or "row-major"),
                      f"{what}: layout {c.describe(out)['layout']}")
                if keep:
                    self.stats["kept"] += 1
                    info = c.describe(name)
                    check(info["dtype"] == src, f"{what}: the kept source is {info['dtype']}")
                    with self.conn() as g:
                        check(np.array_equal(g.get(name), ref), f"{what}: kept source's data")
                    c.drop(out)
            c.drop(name)

    def partial(self, step):
        """Partial(sum) pieces put per rank; the sum is exact in f32 but not in bf16, so a
        reduction in the narrow dtype would give other bits than this reference."""
        shape = (4, 6)
        r = np.random.default_rng(self.seed * 100 + step)
        pieces = [r.integers(-(1 << 20), 1 << 20, shape).astype(np.float32) for _ in range(NP)]
        total = np.sum(np.array(pieces, np.float64), axis=0)  # exact: |sum| < 2^24
        dst = self.rng.choice(["bf16", "bf16", "i32", "f64"])
        tgt = self.rng.choice([f"mesh=[{NP}] placements=[S(0)]", f"mesh=[{NP}] placements=[R]",
                               f"mesh=[{NP}] placements=[S(1)]"])
        strat = self.rng.choice(["auto", "allreduce", "reduce_scatter", "p2p"])
        what = f"seed {self.seed} partial {step}: P(sum) f32 -> {tgt} {dst} ({strat})"
        name = f"p{step}"
        with self.conn() as c:
            c.create(name, "f32", shape, f"mesh=[{NP}] placements=[P(sum)]")
            for rk in range(NP):
                with self.d.connect(rk, timeout=CALL_TIMEOUT) as s:
                    s.put_slice(name, pieces[rk])
            st, res = call(lambda: c.reshard(name, tgt, strategy=strat, dtype=dst))
            if st == "BAD_STRATEGY":
                self.stats["bad_strategy"] += 1
                st, res = call(lambda: c.reshard(name, tgt, dtype=dst))
            if check(st == "ok", f"{what}: {st} {res}"):
                self.stats["partial"] += 1
                self.expect_data(c, name, dst, tgt, convert(total, "f64", dst), what)
            c.drop(name)

    def refusals(self):
        """Casts that cannot be made change nothing, on any rank."""
        shape = (8, 8)
        a = np.arange(64, dtype=np.float32).reshape(shape) - 20.5
        big = a.copy()
        big[7, 7] = 70000.0  # on the last rank of S(0) only: f16 overflows there
        nan = a.copy()
        nan[0, 0] = np.nan   # on rank 0 only
        cases = [(big, "f16", "mesh=[%d] placements=[S(1)]", "BAD_DTYPE", "f16"),
                 (big, "i8", "mesh=[%d] placements=[R]", "BAD_DTYPE", "i8"),
                 (nan, "i32", "mesh=[%d] placements=[S(1)]", "BAD_DTYPE", "i32"),
                 (a, "bf17", "mesh=[%d] placements=[S(1)]", "BAD_DTYPE", "bf17"),
                 (a, "f8_e4m3", "mesh=[%d] placements=[P(sum)]", "BAD_DTYPE", "reductions")]
        for k, (data, dst, tgt, status, needle) in enumerate(cases):
            name = f"r{k}"
            with self.conn() as c:
                c.create(name, "f32", shape, f"mesh=[{NP}] placements=[S(0)]")
                c.put(name, data)
                before = self.state(name)
                for keep in (None, f"{name}k"):
                    st, msg = call(lambda: c.reshard(name, tgt % NP, dtype=dst,
                                                     keep_source_as=keep))
                    what = f"refused cast to {dst} ({tgt % NP}, keep {keep})"
                    check(st == status and needle in msg, f"{what}: {st} {msg}")
                    check(self.same(before, self.state(name)), f"{what}: unchanged everywhere")
                    if keep:
                        check(self.state(keep) == [("NOT_FOUND", None, None)] * NP,
                              f"{what}: no kept copy on any rank")
                    self.stats["refused"] += 1
                c.drop(name)

    def partial_targets(self):
        """Casts to partial targets: the ranks without a summand hold the identity of the
        target dtype's reduction (INT32_MIN for a max into i32), so the value reads back as the
        conversion of the source; a partial source to a partial target is refused."""
        a = (np.arange(48, dtype=np.float32).reshape(8, 6) - 20.25) * 3
        for k, (dst, op, src_attr) in enumerate([
                ("i32", "max", "S(0)"), ("bf16", "sum", "R"), ("f64", "min", "S(1)"),
                ("i16", "min", "R"), ("f16", "max", "S(0)")]):
            name = f"pt{k}"
            tgt = f"mesh=[{NP}] placements=[P({op})]"
            with self.conn() as c:
                c.create(name, "f32", a.shape, f"mesh=[{NP}] placements=[{src_attr}]")
                c.put(name, a)
                st, msg = call(lambda: c.reshard(name, tgt, dtype=dst))
                if check(st == "ok", f"f32 {src_attr} -> {tgt} {dst}: {st} {msg}"):
                    self.expect_data(c, name, dst, tgt, convert(a, "f32", dst),
                                     f"f32 {src_attr} -> {tgt} {dst}")
                    before = self.state(name)
                    st, msg = call(lambda: c.reshard(name, tgt.replace(op, "sum" if op != "sum"
                                                                       else "max"),
                                                     dtype="f32"))
                    check(st == "UNSUPPORTED" and "partial target" in msg,
                          f"a partial source to a partial target: {st} {msg}")
                    check(self.same(before, self.state(name)), "partial to partial: unchanged")
                    self.stats["partial"] += 1
                c.drop(name)

    def many(self, step):
        """reshard_many with a dtype per item (one keeps its dtype)."""
        items, refs = {}, {}
        for k, (src, dst) in enumerate(self.rng.sample(CASTS, 3) + [("f32", None)]):
            shape = (8, 4 * (k + 1))
            a_src, a_dst = self.rng.sample(attrs(NP, shape), 2)
            ref = source_ref(self.rng, src, dst or "f32", shape)
            name = f"m{step}_{k}"
            with self.conn() as c:
                c.create(name, src, shape, a_src)
                c.put(name, put_data(ref, src))
            items[name] = {"attr": a_dst, "dtype": dst} if dst else a_dst
            refs[name] = (src, dst or src, a_dst,
                          convert(ref, src, dst) if dst else ref)
        with self.conn() as c:
            st, res = call(lambda: c.reshard_many(items))
            if check(st == "ok", f"seed {self.seed} many {step}: {st} {res}"):
                self.stats["many"] += 1
                for name, (src, dst, a_dst, want) in refs.items():
                    self.expect_data(c, name, dst, a_dst, want,
                                     f"seed {self.seed} many {step} '{name}' {src}->{dst}")
            # one item that cannot cast: the whole batch is refused, nothing changes
            bad = dict(items)
            last = list(refs)[-1]
            with self.d.connect(0, timeout=CALL_TIMEOUT) as p:
                z = np.full(p.describe(last)["shape"], 1e30, np.float32)
                p.put(last, z)  # f32 1e30 does not fit f16
            bad[last] = {"attr": f"mesh=[{NP}] placements=[S(1)]", "dtype": "f16"}
            before = {n: self.state(n) for n in refs}
            st, msg = call(lambda: c.reshard_many(bad))
            check(st == "BAD_DTYPE" and last in msg,
                  f"seed {self.seed} many {step}: a bad item refuses the batch: {st} {msg}")
            check(all(self.same(before[n], self.state(n)) for n in refs),
                  f"seed {self.seed} many {step}: refused batch, every tensor unchanged")
            for name in refs:
                c.drop(name)

    def keyed(self):
        """A keyed cast retried is answered once; another dtype under the key conflicts."""
        a = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
        with self.conn() as c:
            c.create("k", "f32", a.shape, f"mesh=[{NP}] placements=[S(0)]")
            c.put("k", a)
            key = f"cast-{self.seed}"
            tgt = f"mesh=[{NP}] placements=[S(1)]"
            c.reshard("k", tgt, dtype="bf16", key=key)
            st, msg = call(lambda: c.reshard("k", tgt, dtype="bf16", key=key))
            check(st == "ok", f"keyed retry: {st} {msg}")
            self.expect_data(c, "k", "bf16", tgt, bf16_from_f32(a), "keyed cast, retried")
            st, msg = call(lambda: c.reshard("k", tgt, dtype="f16", key=key))
            check(st == "KEY_CONFLICT", f"another dtype under the key: {st} {msg}")
            check(c.describe("k")["dtype"] == "bf16", "the conflict changed nothing")
        # SPMD: every rank's client submits the cast (as a group, and with one key only); it
        # runs once, every client gets the same answer
        for k, group in enumerate(("all", None)):
            answers = [None] * NP

            def one(rk):
                with tshard.connect(socket=self.d.socket(rk), timeout=CALL_TIMEOUT,
                                    group=group) as s:
                    answers[rk] = call(lambda: s.reshard(
                        "k", f"mesh=[{NP}] placements=[R]", dtype=["f32", "f64"][k],
                        key=f"spmd-cast-{self.seed}-{k}") and None)

            threads = [threading.Thread(target=one, args=(rk,)) for rk in range(NP)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            check(answers == [("ok", None)] * NP, f"SPMD cast (group {group}): {answers}")
            with self.conn() as c:
                want = bf16_to_f32(bf16_from_f32(a)).astype(["f4", "f8"][k])
                self.expect_data(c, "k", ["f32", "f64"][k], f"mesh=[{NP}] placements=[R]", want,
                                 f"SPMD cast (group {group})")
        with self.conn() as c:
            c.drop("k")

    def run(self, steps):
        for step in range(steps):
            self.one(step)
        for step in range(3):
            self.partial(step)
        for step in range(2):
            self.many(step)
        self.refusals()
        self.keyed()
        self.partial_targets()
        print(f"seed {self.seed}: {self.stats}", flush=True)
        return self.stats


def memory_limit(d):
    """A widening cast whose new slices do not fit the daemons' --memory-limit (600 KiB) is
    refused on every rank, the tensor unchanged; the same cast of a small tensor goes through."""
    run = Run(d, 0)
    a = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    with d.connect(0, timeout=CALL_TIMEOUT) as c:
        c.create("big", "f32", a.shape, f"mesh=[{NP}] placements=[S(0)]")
        c.put("big", a)
        before = run.state("big")
        st, msg = call(lambda: c.reshard("big", f"mesh=[{NP}] placements=[R]", dtype="f64"))
        check(st == "LIMIT" and "memory limit" in msg, f"a cast over the limit: {st} {msg}")
        check(run.same(before, run.state("big")), "over the limit: unchanged everywhere")
        c.drop("big")
        c.create("small", "f32", (64, 64), f"mesh=[{NP}] placements=[S(0)]")
        c.put("small", a[:64, :64])
        c.reshard("small", f"mesh=[{NP}] placements=[R]", dtype="f64")
        run.expect_data(c, "small", "f64", f"mesh=[{NP}] placements=[R]",
                        a[:64, :64].astype(np.float64), "a small cast under the limit")
        c.drop("small")


# the bf16 reference rounds as the exact reference does (ties, subnormals, large values)
probe = np.random.default_rng(7).standard_normal(3000).astype(np.float32) * \
    np.float32(10.0) ** np.random.default_rng(8).integers(-40, 38, 3000).astype(np.float32)
probe[:500] = (np.arange(500, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
check(np.array_equal(bf16_from_f32(probe),
                     np.array([bf16_bits_of(float(v)) for v in probe], np.uint16)),
      "the test's bf16 reference rounds as dtype_ref's exact one")

totals = {}
with Daemons(bin_dir, NP) as daemons:
    for seed in SEEDS:
        for k, v in Run(daemons, seed).run(40).items():
            totals[k] = totals.get(k, 0) + v
    check(daemons.stop() == 0, "daemons exit 0 after shutdown")
with Daemons(bin_dir, NP, extra_args=["--memory-limit", str(600 << 10)]) as daemons:
    memory_limit(daemons)
    check(daemons.stop() == 0, "daemons exit 0 after shutdown (memory limit)")
check(totals["casts"] >= 40 and totals["forced"] >= 10 and totals["partial"] >= 2 and
      totals["many"] >= 2 and totals["refused"] >= 10 and totals["kept"] >= 2,
      f"coverage: {totals}")
print(f"{NP} ranks: {totals}")
check.finish()
