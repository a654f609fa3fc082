#!/usr/bin/python3
"""Randomized differential test of resharding against real daemons: for a fixed set of seeds,
chains of reshards with random attributes (1-D and 2-D meshes over random rank subsets, shards,
replicas, partials, ragged splits, balanced and chunk split rules, dims written from the end),
random strategies and target layouts, sent by a driver client
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
from checks import Checks, put_data
from harness import Daemons
from randgen import Gen, reference, same_attr

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


class Run:
    def __init__(self, d, seed):
        self.d = d
        self.rng = random.Random(seed)
        self.gen = Gen(self.rng, NP, rules=True)
        self.seed = seed
        self.model = {}   # name -> {"dtype", "shape", "attr", "layout", "ref"}
        self.stats = {"reshards": 0, "ok": 0, "spmd": 0, "bad_layout": 0, "limit": 0,
                      "bad_strategy": 0, "gets": 0, "get_limit": 0}

    def create(self, name, dtype, shape, attr=None):
        attr = attr or self.gen.attr(shape, dtype)
        ref = reference(dtype, shape)
        with self.d.connect(self.rng.randrange(NP), timeout=CALL_TIMEOUT) as c:
            c.create(name, dtype, shape, attr)
            c.put(name, put_data(ref, dtype))
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
            ok = check(same_attr(info["attr"], m["attr"], len(m["shape"]))
                       and info["layout"] == (m["layout"] or "row-major") and
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
        tgt = self.gen.attr(m["shape"], m["dtype"])
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
