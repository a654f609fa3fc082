#!/usr/bin/python3
"""Shared buffers between the daemons of one node (TSHARD_SHARED_BUFFERS=1: the receivers of an
exchange copy out of the senders' pool buffers through their mappings), against numpy.

- Every daemon says in its log that its transfers go as single copies with shared buffers, and
  with TSHARD_SHARED_BUFFERS=0 that its buffers are not shared (on a machine that forbids single
  copies, that they go through MPI: the moves are checked all the same).
- Tensors large enough for their pieces to go as copies of their own (pairs over 32 KiB, slices
  in the pool's mapped buffers): the column splits of a model's matrices (short runs of 192 to
  768 bytes, which MPI packs without shared buffers), long runs, 1-D gathers, in several dtypes.
  reshard_many moves them S(0) -> S(1) and back, single reshards move them, then random targets
  (random rank subsets, so groups differ; replicas, ragged splits). After each step
  every rank reads every tensor back equal to its numpy reference and with its target attribute.
- A fault on one rank mid-batch (TSHARD_FAULT=batch-transfer@2: rank 2 fails the last tensor's
  transfer after the others moved): the same error through every rank, and every tensor as it
  was.

Every client call has a timeout, so a hang fails the test.

usage: test_shared_buffers.py BUILD_BIN_DIR NRANKS"""
import os
import random
import sys

import numpy as np

import tshard
from checks import Checks, error_of, put_data
from harness import Daemons
from randgen import Gen, reference, same_attr

bin_dir, NP = sys.argv[1], int(sys.argv[2])
T = 120  # any client call longer than this is a hang
check = Checks()
SHAPES = {"emb": ("f32", (2048, 192)), "qkv": ("f32", (256, 2304)), "fc2": ("f32", (1536, 768)),
          "proj": ("f16", (768, 768)), "w64": ("f64", (512, 384)), "bias": ("f64", (65536,)),
          "bf": ("bf16", (1024, 640))}


def daemons(value, extra=()):
    os.environ["TSHARD_SHARED_BUFFERS"] = value
    try:
        return Daemons(bin_dir, NP, list(extra))
    finally:
        del os.environ["TSHARD_SHARED_BUFFERS"]


def values(dtype, shape, seed):
    """The reference, shuffled so that every element differs from its neighbours."""
    v = reference(dtype, shape).ravel().copy()
    np.random.default_rng(seed).shuffle(v)
    return v.reshape(shape)


def check_all(d, want, attrs, what):
    for r in range(NP):
        with d.connect(r, timeout=T) as c:
            for n, w in want.items():
                got = c.get(n)
                check(np.array_equal(got, w), f"{what}: rank {r} reads '{n}' wrong")
                check(same_attr(c.describe(n)["attr"], attrs[n]),
                      f"{what}: rank {r}: '{n}' is {c.describe(n)['attr']}, want {attrs[n]}")


def split(n, dim):
    return f"mesh=[{NP}] placements=[{'R' if dim is None else f'S({dim})'}]"


def moves():
    with daemons("1") as d:
        log = d.logs()
        if log.count("transfers between the daemons: MPI") == NP:
            print("single copies are off here (TSHARD_CMA=0, or process_vm_readv forbidden): "
                  "no shared buffers; the moves are checked all the same")
        else:
            check(log.count("single copies, shared buffers") == NP,
                  f"every daemon says its buffers are shared:\n{log[-2000:]}")
        want, attrs = {}, {}
        with d.connect(0, timeout=T) as c:
            for i, (n, (dt, shape)) in enumerate(SHAPES.items()):
                want[n] = values(dt, shape, i)
                attrs[n] = split(n, 0)
                c.create(n, dt, shape, attrs[n])
                c.put(n, put_data(want[n]))
            check_all(d, want, attrs, "put")
            for rnd in range(2):  # S(0) -> S(1) (1-D: R) and back, as one batch
                attrs = {n: split(n, (1 - rnd if len(s[1]) == 2 else (None if rnd == 0 else 0)))
                         for n, s in SHAPES.items()}
                c.reshard_many(attrs)
                check_all(d, want, attrs, f"batch {rnd}")
            for n in SHAPES:  # one call each
                attrs[n] = split(n, 1 if len(SHAPES[n][1]) == 2 else None)
                c.reshard(n, attrs[n])
            check_all(d, want, attrs, "single reshards")
            rng = random.Random(7)
            for rnd in range(4):  # random targets: groups, replicas, ragged splits
                gen = Gen(rng, NP)
                attrs = {n: gen.attr(s[1]) for n, s in SHAPES.items()}
                attrs = {n: a for n, a in attrs.items() if "P(" not in a}  # exact targets
                c.reshard_many(attrs)
                sub = {n: want[n] for n in attrs}
                check_all(d, sub, attrs, f"random batch {rnd}")
        check(d.stop() == 0, f"the daemons exit 0:\n{d.logs()[-3000:]}")


def not_shared():
    with daemons("0") as d:
        log = d.logs()
        check(log.count("single copies (buffers not shared)") == NP
              or log.count("transfers between the daemons: MPI") == NP,
              f"every daemon says its buffers are not shared:\n{log[-2000:]}")
        with d.connect(1, timeout=T) as c:
            a = values("f32", (1024, 768), 3)
            c.create("x", "f32", a.shape, split("x", 0))
            c.put("x", a)
            c.reshard("x", split("x", 1))
            check(np.array_equal(c.get("x"), a), "a reshard without shared buffers")


def fault():
    os.environ["TSHARD_FAULT"] = f"batch-transfer@2*{3 * NP}"
    try:
        d = daemons("1")
    finally:
        del os.environ["TSHARD_FAULT"]
    with d:
        want = {}
        with d.connect(0, timeout=T) as c:
            for i, (n, (dt, shape)) in enumerate(SHAPES.items()):
                want[n] = values(dt, shape, 10 + i)
                c.create(n, dt, shape, split(n, 0))
                c.put(n, put_data(want[n]))
        before = {n: split(n, 0) for n in SHAPES}
        targets = {n: split(n, 1 if len(s[1]) == 2 else None) for n, s in SHAPES.items()}
        last = list(SHAPES)[-1]
        for rk in range(NP):
            with d.connect(rk, timeout=T) as c:
                st, msg = error_of(lambda: c.reshard_many(targets))
            check(st is not None and "injected batch transfer failure on rank 2" in msg
                  and f"'{last}'" in msg, f"fault through rank {rk}: {st} {msg}")
        check_all(d, want, before, "after the fault")
        check(d.stop() == 0, f"the daemons exit 0:\n{d.logs()[-3000:]}")


moves()
not_shared()
if NP > 2:
    fault()
check.finish()
