#!/usr/bin/python3
"""Randomized differential test of checkpoints against real daemons and numpy: for a fixed set of
seeds, tensors of random dtypes, shapes, attributes (1-D and 2-D meshes over random rank subsets,
shards, replicas, partials, ragged splits with zero parts, balanced and chunk split rules, dims
written from the end) and stored layouts (row-major, permuted,
blocked) are put from numpy, saved (partial values reduced or kept, pieces cut into 4 KiB chunks
by --ckpt-chunk), read back by the pure-numpy reader and loaded under random attributes, on the
saving ranks and on 3 ranks. Misuse is mixed in: names the checkpoint does not hold, names that
already exist, and one flipped byte in a random piece, which must give CORRUPT naming the file and
the piece and create nothing, and load again once the byte is restored.

After every load the whole tensor read back equals the numpy reference, and every rank describes
it under the attribute asked for (the saved one when none is given). Every client call has a
timeout, so a hang fails the test.

usage: test_ckpt_random.py BUILD_BIN_DIR [SEED ...]"""
import json
import os
import random
import shutil
import sys
import tempfile

import numpy as np

import tshard
import tshard.checkpoint as ck
from checks import Checks, put_data
from harness import Daemons
from randgen import Gen, reference, same_attr

bin_dir = sys.argv[1]
SEEDS = [int(s) for s in sys.argv[2:]] or [21, 22]
NP = 4
TENSORS = 6        # per seed
LOADS = 10         # per seed, on the saving ranks
CALL_TIMEOUT = 60
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-ckpt-random-")


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def as_ref(dtype, x):
    """The client's and the reader's bf16 arrays as the reference holds them: uint16 bits."""
    x = np.asarray(x)
    return x.view(np.uint16) if dtype == "bf16" and x.dtype != np.uint16 else x


def attr_ranks(text):
    a = tshard.Attr.parse(text)
    n = int(np.prod(a.mesh.shape))
    return list(a.mesh.ranks) if a.mesh.ranks is not None else list(range(n))


def piece_span(path, key):
    """[begin, end) of piece `key` in a safetensors file, read from the file's own header."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    b, e = header[key]["data_offsets"]
    return 8 + n + b, 8 + n + e


class Seed:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.seed = seed
        self.model = {}  # name -> dtype, shape, attr, ref
        self.stats = {"loads": 0, "loads3": 0, "kept": 0, "chunked": 0, "corrupt": 0}

    def what(self, text):
        return f"seed {self.seed}: {text}"

    def tensors(self, c, gen):
        r = self.rng
        for i in range(TENSORS):
            name = f"t{i}"
            dtype = r.choice(list(tshard.DTYPES))
            ndim = 2 if i == 0 else r.randint(1, 3)
            # the first tensor large enough that its slices are cut into 4 KiB chunks
            hi = {1: 3000, 2: 300 if i == 0 else 70, 3: 20}[ndim]
            shape = tuple(r.randint(hi // 4 if i == 0 else 1, hi) for _ in range(ndim))
            attr = gen.attr(shape, dtype)
            layout, fits = gen.layout(ndim)
            layout = layout if fits else ""
            ref = reference(dtype, shape)
            c.create(name, dtype, list(shape), attr, layout=layout or None)
            c.put(name, put_data(ref, dtype))
            self.model[name] = {"dtype": dtype, "shape": shape, "attr": attr, "ref": ref}

    def check_loaded(self, d, nranks, name, want_attr, what):
        m = self.model[name]
        with d.connect(self.rng.randrange(nranks), timeout=CALL_TIMEOUT) as c:
            got = as_ref(m["dtype"], c.get(name))
        check(same(got, m["ref"]), self.what(f"{what}: values of {name} ({m['dtype']}, "
                                             f"{m['shape']}, {want_attr})"))
        for rk in range(nranks):
            with d.connect(rk, timeout=CALL_TIMEOUT) as c:
                info = c.describe(name)
            check(same_attr(info["attr"], want_attr, len(m["shape"])),
                  self.what(f"{what}: rank {rk} describes {name} as {info['attr']}, "
                            f"want {want_attr}"))

    def reader(self, ckdir, what):
        ix = ck.index(ckdir)
        for name, m in self.model.items():
            got = as_ref(m["dtype"], ck.read(ckdir, name, verify=True))
            check(same(got, m["ref"]), self.what(f"{what}: the numpy reader's {name}"))
            pieces = ix["tensors"][name]["pieces"]
            self.stats["chunked"] += len(pieces) > NP

    def corrupt(self, d, c, ckdir, kept):
        """One flipped byte in a random piece of a random tensor: CORRUPT naming file and piece,
        nothing created; the byte restored, the tensor loads again."""
        r = self.rng
        ix = ck.index(ckdir)
        name = r.choice([n for n in self.model if n not in kept])
        piece = r.choice(ix["tensors"][name]["pieces"])
        path = os.path.join(ckdir, piece["file"])
        b, e = piece_span(path, piece["key"])
        at = r.randrange(b, e)
        with open(path, "r+b") as f:
            f.seek(at)
            old = f.read(1)
            f.seek(at)
            f.write(bytes([old[0] ^ (1 << r.randrange(8))]))
        c.drop(name)
        try:
            c.load(ckdir, names=[name])
            check(False, self.what(f"corrupt byte {at} of {piece['file']} ({name}): loaded"))
        except tshard.TshardError as x:
            check(x.name == "CORRUPT" and piece["file"] in str(x) and piece["key"] in str(x),
                  self.what(f"corrupt {name}: {x.name} {x}"))
        check(name not in c.list(), self.what(f"corrupt {name}: a tensor was created"))
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(old)
        c.load(ckdir, names=[name])
        self.stats["corrupt"] += 1
        self.check_loaded(d, NP, name, self.model[name]["attr"], "after the byte was restored")

    def run(self):
        r = self.rng
        ckdir = os.path.join(work, f"s{self.seed}")
        gen4 = Gen(r, NP, rules=True)
        with Daemons(bin_dir, NP, extra_args=("--ckpt-chunk", "4K")) as d, \
                d.connect(r.randrange(NP), timeout=CALL_TIMEOUT) as c:
            self.tensors(c, gen4)
            keep = r.random() < 0.4
            c.save(ckdir, all=True, keep_partial=keep)
            ix = ck.index(ckdir)
            kept = {n for n in self.model if keep and "P(" in self.model[n]["attr"]}
            self.stats["kept"] += len(kept)
            check(sorted(ix["tensors"]) == sorted(self.model), self.what("the index names"))
            self.reader(ckdir, "saved on 4")
            for _ in range(LOADS):
                name = r.choice(list(self.model))
                m = self.model[name]
                c.drop(name)
                tgt = None if r.random() < 0.25 else gen4.attr(m["shape"], m["dtype"])
                c.load(ckdir, names=[name], attr=tgt)
                self.stats["loads"] += 1
                self.check_loaded(d, NP, name, tgt or m["attr"], "loaded on 4")
            name = r.choice(list(self.model))
            check.expect(tshard.errors.ExistsError.status, lambda: c.load(ckdir, names=[name]),
                         self.what("a load over an existing tensor"), name)
            check.expect(tshard.errors.NotFoundError.status,
                         lambda: c.load(ckdir, names=["nope"]),
                         self.what("a name the checkpoint does not hold"), "nope")
            self.corrupt(d, c, ckdir, kept)
        # 3 ranks: every tensor under a random attribute of 3 ranks; a kept-partial one loads
        # only where its saved ranks exist
        gen3 = Gen(r, 3, rules=True)
        with Daemons(bin_dir, 3) as d, d.connect(r.randrange(3), timeout=CALL_TIMEOUT) as c:
            for name, m in self.model.items():
                tgt = gen3.attr(m["shape"], m["dtype"])
                fits = max(attr_ranks(m["attr"])) < 3
                try:
                    c.load(ckdir, names=[name], attr=tgt)
                    check(name not in kept or fits,
                          self.what(f"{name} kept partial over ranks {attr_ranks(m['attr'])}: "
                                    "loaded on 3"))
                    self.stats["loads3"] += 1
                    self.check_loaded(d, 3, name, tgt, "loaded on 3")
                except tshard.TshardError as x:
                    check(name in kept and not fits and "partial values kept" in str(x),
                          self.what(f"load of {name} on 3 under {tgt}: {x.name} {x}"))
            again = os.path.join(work, f"s{self.seed}-3")
            loaded = c.list()
            if loaded:
                c.save(again, all=True)
                for name in loaded:
                    m = self.model[name]
                    got = as_ref(m["dtype"], ck.read(again, name, verify=True))
                    check(same(got, m["ref"]), self.what(f"saved on 3, read back: {name}"))
        print(f"seed {self.seed}: {self.stats}", flush=True)


try:
    for s in SEEDS:
        Seed(s).run()
finally:
    shutil.rmtree(work, ignore_errors=True)
check.finish()
