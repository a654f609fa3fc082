#!/usr/bin/python3
"""Randomized differential test of resharding against real daemons: for a fixed set of seeds,
chains of reshards with random attributes (1-D and 2-D meshes over random rank subsets, shards,
replicas, partials, ragged splits), random strategies and target layouts, sent by a driver client
(one connection, any rank) or by SPMD clients (every rank at once with one idempotency key).
Failures are injected on some ranks only: layout tags that do not fit the tensor, forced
strategies that do not apply, and memory-limit refusals (two large tensors under --memory-limit,
so replicas fit on some ranks and not on others).

After every step: every rank describes every tensor identically and as the model says (the target
after a success, the old attribute after a failure); SPMD clients all got the same answer; the
whole tensor read back through a rank equals the numpy reference (a reshard never changes
values); every client call has a timeout, so a hang fails the test; the job shuts down cleanly at
the end.

usage: test_reshard_random.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import random
import sys
import threading
import time

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [11, 12, 13]
STEPS = 200 if NP <= 4 else 150        # per seed
BUDGET_S = 150                          # wall clock for all seeds together, shared out evenly
LIMIT = 512 << 10                       # --memory-limit of every daemon
CALL_TIMEOUT = 60                       # any client call longer than this is a hang
check = Checks()

DTYPES = list(tshard.DTYPES)
STRATEGIES = ["auto", "auto", "p2p", "alltoall", "allgather", "root", "allreduce",
              "reduce_scatter", "local"]


def reference(dtype, shape):
    """Small integers, exact in every dtype (bf16 as its uint16 bits)."""
    v = np.arange(int(np.prod(shape)), dtype=np.int64) % 23 - 11
    if dtype == "u8":
        v = v + 11
    if dtype == "bf16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).reshape(shape)
    return v.astype(tshard.DTYPES[dtype]).reshape(shape)


class Gen:
    """Random attributes and layouts for one tensor shape over NP ranks."""

    def __init__(self, rng):
        self.rng = rng

    def mesh(self):
        r = self.rng
        k = r.randint(1, NP)
        ranks = r.sample(range(NP), k)
        if r.random() < 0.5:
            ranks.sort()
        divs = [a for a in range(2, k) if k % a == 0]
        shape = [k] if not divs or r.random() < 0.5 else [r.choice(divs), 0]
        if len(shape) == 2:
            shape[1] = k // shape[0]
        return shape, ranks

    def attr(self, tshape):
        r = self.rng
        mshape, ranks = self.mesh()
        op = r.choice(["sum", "max", "min"])
        places = []
        for _ in mshape:
            x = r.random()
            if x < 0.45:
                places.append(f"S({r.randrange(len(tshape))})")
            elif x < 0.8:
                places.append("R")
            else:
                places.append(f"P({op})")
        text = (f"mesh=[{','.join(map(str, mshape))}]@{','.join(map(str, ranks))} "
                f"placements=[{','.join(places)}]")
        # ragged splits for some sharded dim, zeros allowed
        sharded = sorted({int(p[2:-1]) for p in places if p.startswith("S(")})
        if sharded and r.random() < 0.3:
            d = r.choice(sharded)
            parts = int(np.prod([m for m, p in zip(mshape, places) if p == f"S({d})"]))
            cuts = sorted(r.randint(0, tshape[d]) for _ in range(parts - 1))
            sizes = [b - a for a, b in zip([0] + cuts, cuts + [tshape[d]])]
            text += f" splits={{{d}:[{','.join(map(str, sizes))}]}}"
        return text

    def layout(self, ndim):
        """(tag, fits): row-major, permuted, blocked, or one that does not fit the tensor."""
        r = self.rng
        good = {1: ["", "a", "A2a", "A4a"], 2: ["", "ab", "ba", "aB4b", "Ab2a", "BA2a"],
                3: ["", "abc", "cab", "aBc2b"]}[ndim]
        bad = ["A0ab", "zz", "abcd"[:ndim + 1], "aa"[:max(ndim, 2)], "ab" if ndim != 2 else "abc"]
        if r.random() < 0.12:
            return r.choice(bad), False
        return r.choice(good), True


def call(fn):
    """('ok', value) or (status name, message)."""
    try:
        return "ok", fn()
    except tshard.TshardError as e:
        return e.name, str(e)


def describe_all(d, name):
    out = []
    for rk in range(NP):
        with d.connect(rk, timeout=CALL_TIMEOUT) as c:
            out.append(call(lambda: c.describe(name)))
    return out


def same_attr(a, b):
    return tshard.Attr.parse(a) == tshard.Attr.parse(b)


class Run:
    def __init__(self, d, seed):
        self.d = d
        self.rng = random.Random(seed)
        self.gen = Gen(self.rng)
        self.seed = seed
        self.model = {}   # name -> {"dtype", "shape", "attr", "layout", "ref"}
        self.stats = {"reshards": 0, "ok": 0, "spmd": 0, "bad_layout": 0, "limit": 0,
                      "bad_strategy": 0, "gets": 0, "get_limit": 0}

    def create(self, name, dtype, shape, attr=None):
        attr = attr or self.gen.attr(shape)
        ref = reference(dtype, shape)
        with self.d.connect(self.rng.randrange(NP), timeout=CALL_TIMEOUT) as c:
            c.create(name, dtype, shape, attr)
            c.put(name, ref)
        self.model[name] = {"dtype": dtype, "shape": list(shape), "attr": attr, "layout": "",
                            "ref": ref}

    def agree(self, name, what):
        """Every rank records the model's tensor, identically."""
        m = self.model.get(name)
        got = describe_all(self.d, name)
        if m is None:
            return check(all(g[0] == "NOT_FOUND" for g in got),
                         f"{what}: '{name}' absent everywhere: {got}")
        ok = all(g[0] == "ok" for g in got) and all(g[1] == got[0][1] for g in got)
        ok = check(ok, f"{what}: every rank describes '{name}' the same: {got}")
        if ok:
            info = got[0][1]
            ok = check(same_attr(info["attr"], m["attr"]) and info["layout"] == m["layout"] and
                       info["dtype"] == m["dtype"] and info["shape"] == m["shape"],
                       f"{what}: '{name}' is {info['attr']} [{info['layout']}], the model says "
                       f"{m['attr']} [{m['layout']}]")
        return ok

    def compare_data(self, name, what):
        m = self.model[name]
        order = self.rng.sample(range(NP), NP)
        for rk in order:
            with self.d.connect(rk, timeout=CALL_TIMEOUT) as c:
                st, val = call(lambda: c.get(name))
            if st == "LIMIT":  # the gathered copy does not fit there: another rank
                self.stats["get_limit"] += 1
                continue
            self.stats["gets"] += 1
            return check(st == "ok" and np.array_equal(val, m["ref"]),
                         f"{what}: get of '{name}' through rank {rk}: {st} {val if st != 'ok' else ''}")
        return True

    def reshard(self, name, step):
        m = self.model[name]
        r = self.rng
        tgt = self.gen.attr(m["shape"])
        tag, fits = self.gen.layout(len(m["shape"]))
        strategy = r.choice(STRATEGIES)
        if strategy != "auto" and r.random() < 0.8:  # mostly one that applies
            with self.d.connect(r.randrange(NP), timeout=CALL_TIMEOUT) as c:
                if call(lambda: c.plan(name, tgt, strategy=strategy))[0] == "BAD_STRATEGY":
                    strategy = "auto"
        keep = f"{name}_k{step}" if r.random() < 0.15 else None
        spmd = r.random() < 0.35
        what = (f"seed {self.seed} step {step}: {'spmd' if spmd else 'driver'} reshard '{name}' "
                f"{m['attr']} -> {tgt} [{tag}] by {strategy}{' keep ' + keep if keep else ''}")
        kwargs = dict(strategy=strategy, layout=tag, keep_source_as=keep)
        if spmd:
            key = f"rnd-{self.seed}-{step}"
            answers = [None] * NP

            def one(rk):
                with self.d.connect(rk, timeout=CALL_TIMEOUT) as c:
                    # the status and message (the report's time differs per answering rank)
                    answers[rk] = call(lambda: c.reshard(name, tgt, key=key, **kwargs) and None)

            threads = [threading.Thread(target=one, args=(rk,)) for rk in range(NP)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            check(all(a == answers[0] for a in answers),
                  f"{what}: every SPMD client gets the same answer: {answers}")
            st, msg = answers[0]
            self.stats["spmd"] += 1
        else:
            with self.d.connect(r.randrange(NP), timeout=CALL_TIMEOUT) as c:
                st, msg = call(lambda: c.reshard(name, tgt, **kwargs))
        self.stats["reshards"] += 1
        check(st not in ("TIMEOUT", "IO", "INTERNAL", "MPI", "PROTOCOL"), f"{what}: {st} {msg}")
        if not fits:
            check(st == "BAD_LAYOUT", f"{what}: a tag that does not fit fails: {st} {msg}")
            self.stats["bad_layout"] += st == "BAD_LAYOUT"
        self.stats["limit"] += st == "LIMIT"
        self.stats["bad_strategy"] += st == "BAD_STRATEGY"
        if st == "ok":
            self.stats["ok"] += 1
            if keep:
                self.model[keep] = dict(m)
                name = keep
            self.model[name] = dict(self.model[name], attr=tgt, layout=tag)
        if self.agree(name, what) and (keep is None or self.agree(keep, what)):
            self.compare_data(name, what)
        return st

    def run(self, deadline):
        self.create("a", self.rng.choice(DTYPES), (self.rng.randint(1, 9), self.rng.randint(1, 7)))
        self.create("b", self.rng.choice(DTYPES), (self.rng.randint(1, 13),))
        self.create("c", self.rng.choice(DTYPES), (self.rng.randint(1, 4), self.rng.randint(1, 5),
                                                    self.rng.randint(1, 3)))
        # large ones: their replicas fit the memory limit on some ranks and not on others
        spread = f"mesh=[{NP}] placements=[S(0)]"
        self.create("big1", "f32", (192, 256), spread)
        self.create("big2", "f64", (96, 256), spread)
        steps = 0
        for step in range(STEPS):
            if time.monotonic() > deadline:
                break
            names = sorted(self.model)
            self.reshard(self.rng.choice(names), step)
            steps += 1
            kept = [n for n in self.model if "_k" in n]
            if len(kept) > 2:  # drop a kept copy through a random rank
                victim = self.rng.choice(kept)
                with self.d.connect(self.rng.randrange(NP), timeout=CALL_TIMEOUT) as c:
                    c.drop(victim)
                del self.model[victim]
                self.agree(victim, f"seed {self.seed} step {step}: dropped '{victim}'")
        for name in sorted(self.model):
            self.agree(name, f"seed {self.seed} end")
            self.compare_data(name, f"seed {self.seed} end")
            with self.d.connect(0, timeout=CALL_TIMEOUT) as c:
                c.drop(name)
        print(f"seed {self.seed}: {steps} steps {self.stats}", flush=True)
        return steps, self.stats


start = time.monotonic()
totals = {}
with Daemons(bin_dir, NP, extra_args=["--memory-limit", str(LIMIT)]) as daemons:
    for k, seed in enumerate(SEEDS):
        steps, st = Run(daemons, seed).run(start + BUDGET_S * (k + 1) / len(SEEDS))
        check(steps >= 10, f"seed {seed}: at least 10 steps within the budget ({steps})")
        for k, v in st.items():
            totals[k] = totals.get(k, 0) + v
    check(daemons.stop() == 0, "daemons exit 0 after shutdown (the job stayed live)")
# the failures were injected and the successes happened: the run tested what it says
check(totals["ok"] >= 10 and totals["bad_layout"] >= 1 and totals["limit"] >= 1 and
      totals["spmd"] >= 5, f"coverage: {totals}")
print(f"{NP} ranks, {time.monotonic() - start:.1f} s: {totals}")
check.finish()
