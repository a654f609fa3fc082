#!/usr/bin/python3
"""Batched operations (reshard_many, drop_many) against real daemons, checked against numpy.

- Randomized differential test: for fixed seeds, rounds of batches of 1-200 tensors of random
  dtypes and shapes, each with its own random target attribute (random rank subsets, so targets
  cross groups; shards, replicas, partials, ragged splits), random strategies and layouts. A batch
  either succeeds, and then every tensor has its target attribute on every rank and reads back
  equal to its numpy reference, or is refused naming one of its tensors, and then every tensor is
  exactly as before.
- Bad input: an empty batch, a tensor named twice, an unknown tensor, more tensors than
  --batch-max-tensors, more bytes than --batch-max-bytes: refused with the same message through
  every rank, naming the tensor or the flag; nothing changes.
- list(details=True) gives every tensor's dtype, shape, attribute and bytes as the model says.
- A keyed SPMD batch: every rank's client submits the same reshard_many and drop_many under one
  key with participants; it runs once and every client gets the answer.
- The CLI's forms (through libtshard's tshard_reshard_many and tshard_drop_many):
  `tshard reshard A B C --to ATTR`, `tshard drop A B C`, an unknown tensor refused with nothing
  changed, --keep-as refused for several tensors.
- Partial tensors reduced together: a batch of partial sums and maxima (several dtypes, two meshes,
  one tensor spanning many staging rounds of daemons started with the smallest --staging) and
  plain S(0) -> S(1) tensors, each rank's partial slice put by that rank: every reduced tensor
  equals numpy's sum or maximum of the slices, on every rank.
- A fault on one rank mid-batch (TSHARD_FAULT=batch-transfer@2: that rank fails the last tensor's
  transfer after the others moved): every rank answers the same error, nothing changed anywhere;
  also for a batch of coalesced tensors and one of partial tensors.

Every client call has a timeout, so a hang fails the test.

usage: test_batch.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import os
import random
import subprocess
import sys
import threading

import numpy as np

import tshard
from checks import Checks, put_data
from harness import Daemons
from randgen import Gen, reference, same_attr

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [21, 22]
ROUNDS = 4
MAX_TENSORS = 200
MAX_BYTES = 2 << 20
FLAGS = ["--batch-max-tensors", str(MAX_TENSORS), "--batch-max-bytes", str(MAX_BYTES)]
T = 120  # any client call longer than this is a hang
check = Checks()
DTYPES = list(tshard.DTYPES)
STRATEGIES = ["", "", "", "", "p2p", "alltoall", "allgather", "root", "local"]
STATS = {"batches": 0, "ok": 0, "refused": 0, "tensors_moved": 0}


def status_of(fn):
    try:
        return "ok", fn()
    except tshard.TshardError as e:
        return e.name, str(e)


def random_shape(rng):
    nd = rng.randint(1, 3)
    return [rng.randint(1, 9) for _ in range(nd)]


class Model:
    """The tensors as they must be: name -> {dtype, shape, attr, ref}."""

    def __init__(self, d, rng):
        self.d, self.rng, self.t = d, rng, {}
        self.gen = Gen(rng, NP)

    def create(self, c, name, dtype, shape):
        attr = self.gen.attr(shape, dtype)
        ref = reference(dtype, shape)
        c.create(name, dtype, shape, attr)
        c.put(name, put_data(ref, dtype))
        self.t[name] = {"dtype": dtype, "shape": shape, "attr": attr, "ref": ref}

    def verify(self, names, what, ranks=None):
        """Every named tensor as the model says: its attribute on the given ranks, its values."""
        ranks = range(NP) if ranks is None else ranks
        for rk in ranks:
            with self.d.connect(rk, timeout=T) as c:
                for n in names:
                    got = c.describe(n)["attr"]
                    if not check(same_attr(got, self.t[n]["attr"]),
                                 f"{what}: rank {rk} '{n}' is {got}, want {self.t[n]['attr']}"):
                        return
        with self.d.connect(self.rng.randrange(NP), timeout=T) as c:
            for n in names:
                v = c.get(n)
                if not check(np.array_equal(np.asarray(v), self.t[n]["ref"]),
                             f"{what}: '{n}' values differ from the reference"):
                    return


def random_round(d, m, seed, rnd):
    rng = m.rng
    k = rng.choice([1, 2, rng.randint(1, MAX_TENSORS), MAX_TENSORS]) if rnd else MAX_TENSORS
    names = [f"s{seed}r{rnd}t{i}" for i in range(k)]
    with d.connect(rng.randrange(NP), timeout=T) as c:
        for n in names:
            m.create(c, n, rng.choice(DTYPES), random_shape(rng))
        for attempt in range(2):
            targets, bad = {}, False
            # attempt 0: auto strategies and layouts that fit (moves unless a plan refuses);
            # attempt 1: forced strategies and any layouts, each refusing the whole batch
            for n in names:
                t = m.t[n]
                tag, fits = m.gen.layout(len(t["shape"])) if rng.random() < 0.2 else ("", True)
                while attempt == 0 and not fits:
                    tag, fits = m.gen.layout(len(t["shape"]))
                strat = rng.choice(STRATEGIES) if attempt else ""
                targets[n] = {"attr": m.gen.attr(t["shape"], t["dtype"]), "strategy": strat, "layout": tag}
                bad = bad or not fits
            st, got = status_of(lambda: c.reshard_many(targets))
            STATS["batches"] += 1
            STATS["ok" if st == "ok" else "refused"] += 1
            STATS["tensors_moved"] += k if st == "ok" else 0
            what = f"seed {seed} round {rnd} attempt {attempt} ({k} tensors)"
            if st == "ok":
                check(not bad, f"{what}: a layout that does not fit was accepted")
                check(sorted(got) == sorted(names) and all(got[n]["strategy"] for n in names),
                      f"{what}: results {list(got.items())[:3]}...")
                for n in names:
                    m.t[n]["attr"] = targets[n]["attr"]
                rm = c.stats()["ops"].get("reshard_many", {})
                check(rm.get("count", 0) >= 1 and rm.get("batch_max", 0) >= k
                      and 1 <= rm.get("batch_p50", 0) <= rm["batch_max"],
                      f"{what}: stats of reshard_many after a batch of {k}: {rm}")
            else:
                check(any(f"'{n}'" in got for n in names),
                      f"{what}: refusal names no tensor of the batch: {st} {got}")
            check_ranks = [rng.randrange(NP)] if k > 20 else None
            m.verify(names, what, check_ranks)
        listed = {t["name"]: t for t in c.list(details=True)}
        for n in names:
            t, e = listed.get(n), m.t[n]
            want = int(np.prod(e["shape"])) * np.dtype(tshard.DTYPES[e["dtype"]]).itemsize
            check(t is not None and t["dtype"] == e["dtype"] and t["shape"] == e["shape"]
                  and same_attr(t["attr"], e["attr"]) and t["bytes"] == want,
                  f"seed {seed} round {rnd}: list says {t} for '{n}', want {e['dtype']} "
                  f"{e['shape']} {e['attr']} {want} bytes")
        if rnd % 2:
            c.drop_many(names)
            check(not set(names) & set(c.list()), f"seed {seed} round {rnd}: drop_many left some")
            for n in names:
                del m.t[n]


def bad_input(d, m):
    with d.connect(0, timeout=T) as c:
        m.create(c, "b0", "f32", [4, 6])
        m.create(c, "b1", "i32", [5])
        c.create("big", "u8", [MAX_BYTES + 1], "mesh=[2]@0-1 placements=[R]")
    m.t["big"] = {"attr": "mesh=[2]@0-1 placements=[R]"}
    a = "mesh=[2]@0-1 placements=[S(0)]"
    cases = [
        ("empty", lambda c: c.reshard_many({}), "INVALID_ARGUMENT", "empty"),
        ("empty drop", lambda c: c.drop_many([]), "INVALID_ARGUMENT", "empty"),
        ("twice", lambda c: c.drop_many(["b0", "b1", "b0"]), "INVALID_ARGUMENT", "'b0' twice"),
        ("unknown", lambda c: c.reshard_many({"b0": a, "nope": a}), "NOT_FOUND", "'nope'"),
        ("unknown drop", lambda c: c.drop_many(["b1", "nope"]), "NOT_FOUND", "'nope'"),
        ("count", lambda c: c.drop_many([f"x{i}" for i in range(MAX_TENSORS + 1)]), "LIMIT",
         "--batch-max-tensors"),
        ("bytes", lambda c: c.reshard_many({"b0": a, "big": a}), "LIMIT", "--batch-max-bytes"),
        ("bad attr", lambda c: c.reshard_many({"b0": a, "b1": "mesh=[2]@0-1 placements=[S(3)]"}),
         None, "'b1'"),
    ]
    for what, fn, status, needle in cases:
        seen = set()
        for rk in range(NP):
            with d.connect(rk, timeout=T) as c:
                st, msg = status_of(lambda: fn(c))
            check(st != "ok" and (status is None or st == status) and needle in msg,
                  f"bad input {what} through rank {rk}: {st} {msg}")
            seen.add((st, msg))
        check(len(seen) == 1, f"bad input {what}: answers differ across ranks: {seen}")
    m.verify(["b0", "b1"], "after bad input")


def spmd_batch(d, m):
    with d.connect(0, timeout=T) as c:
        for n in ("k0", "k1", "k2"):
            m.create(c, n, "f64", [6, 4])
    targets = {n: m.gen.attr(m.t[n]["shape"], m.t[n]["dtype"]) for n in ("k0", "k1", "k2")}
    out = [None] * NP

    def one(rk):
        with tshard.connect(socket=d.socket(rk), timeout=T, group="all", run_id="batchspmd") as c:
            out[rk] = (status_of(lambda: c.reshard_many(targets)),
                       status_of(lambda: c.drop_many(["k2"])))

    ths = [threading.Thread(target=one, args=(rk,)) for rk in range(NP)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(2 * T)
    check(all(o and o[0][0] == "ok" and o[1][0] == "ok" for o in out),
          f"keyed SPMD batch: {out}")
    for n in ("k0", "k1"):
        m.t[n]["attr"] = targets[n]
    m.verify(["k0", "k1"], "keyed SPMD batch")
    with d.connect(1, timeout=T) as c:
        check("k2" not in c.list(), "keyed SPMD drop_many: k2 still listed")


def cli_batch(d, m):
    def cli(*args, rank=0):
        return subprocess.run([os.path.join(bin_dir, "tshard"), *args, "--socket",
                               d.socket(rank)], capture_output=True, text=True, timeout=T)
    names = ["c0", "c1", "c2"]
    with d.connect(0, timeout=T) as c:
        for n in names:
            m.create(c, n, m.rng.choice(DTYPES), [6, 5])
    attr = f"mesh=[{NP}] placements=[S(1)]"
    r = cli("reshard", *names, "--to", attr, rank=1)
    check(r.returncode == 0 and "reshard of 3 tensors" in r.stdout, f"cli reshard: {r.stderr}")
    for n in names:
        m.t[n]["attr"] = attr
    m.verify(names, "cli reshard A B C")
    r = cli("reshard", "c0", "nope", "--to", "mesh=[1] placements=[R]", rank=2)
    check(r.returncode == 1 and "'nope'" in r.stderr, f"cli reshard unknown: {r.stderr}")
    r = cli("reshard", "c0", "c1", "--to", attr, "--keep-as", "x")
    check(r.returncode == 2 and "--keep-as" in r.stderr, f"cli reshard --keep-as: {r.stderr}")
    m.verify(names, "after the refused cli batches")
    r = cli("drop", *names, rank=3 % NP)
    check(r.returncode == 0, f"cli drop A B C: {r.stderr}")
    with d.connect(0, timeout=T) as c:
        check(not set(names) & set(c.list()), "cli drop A B C left some")
    for n in names:
        del m.t[n]


PARTIALS = [("f32", (7, 5), "sum"), ("f64", (100003,), "sum"), ("i32", (6, 4), "max"),
            ("i64", (9,), "sum"), ("f32", (3, 11), "max"), ("f64", (2, 2), "sum"),
            ("u8", (40,), "max"), ("i32", (5000,), "sum"), ("f32", (3, 0, 5), "sum"),
            ("i64", (0, 4), "max")]  # empty partials reduce too (no elements, nothing sent)


def put_plain(d, prefix, k):
    """k row-major f32 tensors, S(0) over every rank: {name: array}."""
    plain = {f"{prefix}{i}": np.arange(24 * (i + 1), dtype=np.float32).reshape(4 * (i + 1), 6)
             for i in range(k)}
    with d.connect(0, timeout=T) as c:
        for n, a in plain.items():
            c.create(n, "f32", a.shape, f"mesh=[{NP}] placements=[S(0)]")
            c.put(n, a)
    return plain


def partial_data(dtype, shape, k, r):
    """Rank r's partial slice of partial tensor k (small values: sums stay exact)."""
    n = int(np.prod(shape))
    v = (np.arange(n) * (k + 3) + r * 7) % 23
    return v.reshape(shape).astype(tshard.DTYPES[dtype])


def partial_batch():
    """Partial sums and maxima reduced by one reshard_many, with plain tensors beside them."""
    with Daemons(bin_dir, NP, FLAGS + ["--staging", "65536"]) as d:
        want, targets = {}, {}
        meshes = [(f"mesh=[{NP}]", "P({})", "R")]
        if NP % 2 == 0:
            meshes.append((f"mesh=[2,{NP // 2}]", "P({}),S(0)", "R,S(0)"))
        for mi, (mesh, src, tgt) in enumerate(meshes):
            for k, (dt, shape, op) in enumerate(PARTIALS):
                name = f"p{mi}_{k}"
                with d.connect(0, timeout=T) as c:
                    c.create(name, dt, shape, f"{mesh} placements=[{src.format(op)}]")
                parts = [partial_data(dt, shape, k, r) for r in range(NP)]
                for r in range(NP):  # 2-D: rank r holds rows chunk r % (NP/2) of its partial
                    rows = np.array_split(np.arange(shape[0]), NP // 2)[r % (NP // 2)]
                    with d.connect(r, timeout=T) as c:
                        c.put_slice(name, parts[r] if mi == 0 else parts[r][rows])
                # the partial dim: all ranks (1-D), or ranks r and r + NP/2 (2-D, dim 0 of 2)
                groups = [list(range(NP))] if mi == 0 else [[r, r + NP // 2] for r in range(NP // 2)]
                full = np.zeros(shape, dtype=tshard.DTYPES[dt])
                for g in groups:
                    red = (np.sum([parts[r] for r in g], axis=0) if op == "sum"
                           else np.max([parts[r] for r in g], axis=0)).astype(full.dtype)
                    if mi == 0:
                        full = red
                    else:  # the line of ranks g holds rows of its shard index along mesh dim 1
                        rows = np.array_split(np.arange(shape[0]), NP // 2)[g[0]]
                        full[rows] = red[rows]
                want[name] = full
                targets[name] = f"{mesh} placements=[{tgt}]"
        plain = put_plain(d, "q", 3)
        targets.update({n: f"mesh=[{NP}] placements=[S(1)]" for n in plain})
        with d.connect(0, timeout=T) as c:
            got = c.reshard_many(targets)
        ran = {n: got[n]["strategy"] for n in want}
        check(all(s == "allreduce" for n, s in ran.items() if n.startswith("p0_"))
              and (NP % 2 or sum(s == "allreduce" for n, s in ran.items() if n.startswith("p1_"))
                   >= 2), f"partial tensors reduced: {ran}")
        for r in range(NP):
            with d.connect(r, timeout=T) as c:
                for n, w in want.items():
                    v = c.get(n)
                    check(c.describe(n)["attr"].endswith(targets[n].split("placements=")[1])
                          and np.array_equal(v, w), f"rank {r}: '{n}' {v.ravel()[:6]} want "
                          f"{w.ravel()[:6]}")
                for n, a in plain.items():
                    check(np.array_equal(c.get(n), a), f"rank {r}: plain '{n}' beside partials")
        check(d.stop() == 0, f"the daemons exit 0:\n{d.logs()[-3000:]}")


def fault(seed):
    os.environ["TSHARD_FAULT"] = f"batch-transfer@2*{3 * NP}"
    try:
        d = Daemons(bin_dir, NP, FLAGS)
    finally:
        del os.environ["TSHARD_FAULT"]
    with d:
        m = Model(d, random.Random(seed))
        names = [f"f{i}" for i in range(12)]
        with d.connect(0, timeout=T) as c:
            for n in names:
                m.create(c, n, m.rng.choice(DTYPES), random_shape(m.rng))
        targets = {n: m.gen.attr(m.t[n]["shape"], m.t[n]["dtype"]) for n in names}
        seen = set()
        for rk in range(NP):  # submitted through each rank: the same answer, nothing changed
            with d.connect(rk, timeout=T) as c:
                st, msg = status_of(lambda: c.reshard_many(targets))
            seen.add((st, msg))
            check(st != "ok" and "injected batch transfer failure on rank 2" in msg
                  and f"'{names[-1]}'" in msg, f"fault through rank {rk}: {st} {msg}")
            m.verify(names, f"after the fault through rank {rk}")
        check(len(seen) == 1, f"fault: answers differ: {seen}")
        # every tensor coalesced (row-major f32, S(0) -> S(1)): the one exchange never runs
        plain = put_plain(d, "g", 4)
        seen = set()
        for rk in range(NP):
            with d.connect(rk, timeout=T) as c:
                st, msg = status_of(lambda: c.reshard_many(
                    {n: f"mesh=[{NP}] placements=[S(1)]" for n in plain}))
                seen.add((st, msg))
                check(st != "ok" and "injected batch transfer failure on rank 2" in msg
                      and "'g3'" in msg, f"coalesced fault through rank {rk}: {st} {msg}")
                for n, a in plain.items():
                    check(c.describe(n)["attr"].endswith("placements=[S(0)]")
                          and np.array_equal(c.get(n), a), f"coalesced fault changed {n}")
        check(len(seen) == 1, f"coalesced fault: answers differ: {seen}")
        # partial sums reduced together: the fault on the last one leaves every one partial
        parts = {f"h{i}": [partial_data("f64", (6, 3), i, r) for r in range(NP)] for i in range(3)}
        for n, ps in parts.items():
            for r in range(NP):
                with d.connect(r, timeout=T) as c:
                    if r == 0:
                        c.create(n, "f64", (6, 3), f"mesh=[{NP}] placements=[P(sum)]")
                    c.put_slice(n, ps[r])
        seen = set()
        for rk in range(NP):
            with d.connect(rk, timeout=T) as c:
                st, msg = status_of(lambda: c.reshard_many(
                    {n: f"mesh=[{NP}] placements=[R]" for n in parts}))
                seen.add((st, str(msg)))
                check(st != "ok" and "injected batch transfer failure on rank 2" in msg
                      and "'h2'" in msg, f"reduced fault through rank {rk}: {st} {msg}")
                for n, ps in parts.items():
                    check(c.describe(n)["attr"].endswith("placements=[P(sum)]")
                          and np.array_equal(c.get_slice(n), ps[rk]),
                          f"reduced fault changed {n} on rank {rk}")
        check(len(seen) == 1, f"reduced fault: answers differ: {seen}")
        check(d.stop() == 0, f"the daemons with the fault exit 0:\n{d.logs()[-3000:]}")


def main():
    with Daemons(bin_dir, NP, FLAGS) as d:
        m = Model(d, random.Random(SEEDS[0]))
        bad_input(d, m)
        spmd_batch(d, m)
        cli_batch(d, m)
        for seed in SEEDS:
            m.rng.seed(seed)
            for rnd in range(ROUNDS):
                random_round(d, m, seed, rnd)
        check(d.stop() == 0, f"the daemons exit 0:\n{d.logs()[-3000:]}")
    partial_batch()
    fault(SEEDS[0])
    print("random batches:", STATS)
    check(STATS["ok"] >= 3 and STATS["refused"] >= 3, f"too few of each outcome: {STATS}")
    check.finish()


main()
