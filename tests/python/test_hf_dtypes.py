#!/usr/bin/python3
"""End-to-end test of the dtypes beyond the first eight (bool, i16, u16, u32, u64, f8_e4m3,
f8_e5m2), with real daemons (4 ranks). The references are independent of tshard: safetensors
files written and read here with struct and json, numpy for values and reductions, and the
8-bit floats by their formats written out in dtype_ref (every code decoded field by field,
rounding by picking the nearest of all codes).

- a Hugging Face file with BOOL, I16, U16, U32, U64, F8_E4M3 and F8_E5M2 entries (every f8 code,
  the integers' extremes) and a C64 entry: imported by name (the C64 entry checked but not asked
  for), every rank's slice and the whole tensor equal to the file's bytes; asking for the C64
  entry refuses the import, naming it, nothing created; resharded row -> column -> replicated
  -> ragged, the bytes unchanged; exported, and the file read back equals the original entry by
  entry (dtype, shape, bytes);
- partial reductions: sum, max and min of P(op) tensors of i16, u16, u32, u64 and bool put slice
  by slice on 4 ranks, got (reduced) and resharded to R, against numpy (integer sums wrap, bool's
  sum and max are "or" and min is "and"); a partial f8 tensor refused at create and by a reshard,
  naming the dtype and the reductions that exist, the tensor unchanged;
- checkpoints: saved, dropped and loaded back, and read offline by tshard.checkpoint, equal; an
  f8 tensor loaded under a partial attribute refused, nothing created;
- einsum and programs, which compute in the first eight dtypes only, refuse the new ones naming
  the dtype (nothing created);
- a randomized differential test against numpy: random shapes, values and attributes for every
  new dtype, put, resharded and got; converting puts of random f64 values into each (the values
  that survive stored as numpy's astype or the f8 reference rounds them, the others refused).

usage: test_hf_dtypes.py BUILD_BIN_DIR"""
import json
import os
import random
import shutil
import struct
import sys
import tempfile

import numpy as np

import tshard
import tshard.checkpoint as ck
from checks import Checks, error_of, put_data
from dtype_ref import convert, f8_bits_of, f8_value, fits, same
from harness import Daemons
from randgen import Gen

bin_dir = sys.argv[1]
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-hf-dtypes-")
NP = 4
TIMEOUT = 60
ST = {"BOOL": np.bool_, "I16": np.int16, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
      "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}
TS = {"BOOL": "bool", "I16": "i16", "U16": "u16", "U32": "u32", "U64": "u64",
      "F8_E4M3": "f8_e4m3", "F8_E5M2": "f8_e5m2"}
NEW = list(TS.values())
ATTRS = {"row": "mesh=[4] placements=[S(0)]", "col": "mesh=[4] placements=[S(1)]",
         "rep": "mesh=[4] placements=[R]",
         "ragged": "mesh=[4] placements=[S(0)] splits={0:[5,0,9,2]}"}


# ---- the independent safetensors reference ---------------------------------------------------
def write_file(path, entries):
    """entries: {name: (dtype text, shape, raw bytes)} in order."""
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dt, shape, raw) in entries.items():
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_file(path):
    """{name: (dtype text, shape, raw bytes)}."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    return {k: (e["dtype"], tuple(e["shape"]), data[e["data_offsets"][0]:e["data_offsets"][1]])
            for k, e in hdr.items() if k != "__metadata__"}


def sample(st, shape, rng):
    """Values of a safetensors dtype: every f8 code in turn, integers over their whole range
    (both extremes included), bools at random."""
    n = int(np.prod(shape))
    if st.startswith("F8"):
        return (np.arange(n) % 256).astype(np.uint8).reshape(shape)
    if st == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    info = np.iinfo(ST[st])
    a = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=ST[st])
    a[:2] = [info.min, info.max]
    return a.reshape(shape)


def box_of(info, rank):
    r = next(x for x in info["ranks"] if x["rank"] == rank)
    return tuple(slice(lo, hi) for lo, hi in zip(r["lo"], r["hi"]))


def slices_match(d, name, ref):
    """Every rank's slice of name equals ref's box, byte for byte."""
    ok = True
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as c:
            info = c.describe(name)
            if not any(x["rank"] == r and x["bytes"] > 0 for x in info["ranks"]):
                continue
            ok = ok and np.array_equal(c.get_slice(name), ref[box_of(info, r)])
    return ok


# ---- 1. a Hugging Face file of every new dtype -------------------------------------------------
def hf_file(d):
    rng = np.random.default_rng(11)
    refs = {f"model.{st.lower()}": (st, sample(st, (16, 20), rng)) for st in ST}
    entries = {n: (st, a.shape, a.tobytes()) for n, (st, a) in refs.items()}
    entries["model.complex"] = ("C64", (4,), bytes(range(32)))  # a dtype tshard has not
    src = os.path.join(work, "model.safetensors")
    write_file(src, entries)
    names = [n for n in refs]
    with d.connect(0, timeout=TIMEOUT) as c:
        st, msg = error_of(lambda: c.load_safetensors(src, default=ATTRS["row"]))
        check(st == tshard.errors.BadDtypeError.status and "'model.complex'" in msg and
              "C64" in msg and "not supported" in msg and "BOOL I16 U16 U32 U64" in msg,
              f"the C64 entry asked for (default: all): {st} {msg}")
        check(c.list() == [], f"a refused import creates nothing: {c.list()}")
        got = c.load_safetensors(src, default=ATTRS["row"], names=[n[6:] for n in names],
                                 prefix="model.")
        check(sorted(got) == sorted(n[6:] for n in names), f"imported by name: {got}")
        for n, (stdt, a) in refs.items():
            t = n[6:]
            info = c.describe(t)
            check(info["dtype"] == TS[stdt] and tuple(info["shape"]) == a.shape,
                  f"{t}: {info['dtype']} {info['shape']}")
            check(np.array_equal(c.get(t), a), f"{t}: get equals the file's bytes")
            check(slices_match(d, t, a), f"{t}: every rank's row slice equals the file's")
            for attr in ("col", "rep", "ragged"):
                c.reshard(t, ATTRS[attr])
                check(np.array_equal(c.get(t), a) and slices_match(d, t, a),
                      f"{t}: resharded to {attr}, the bytes unchanged")
        out = os.path.join(work, "export.safetensors")
        c.save_safetensors(out, names=[n[6:] for n in names])
        back = read_file(out)
        for n, (stdt, a) in refs.items():
            e = back.get(n[6:])
            check(e is not None and e[0] == stdt and e[1] == a.shape and e[2] == a.tobytes(),
                  f"{n[6:]}: exported byte-exact ({e[0] if e else None}, {e[1] if e else None})")
        # the f8 codes mean what their formats say: the bits read back as values
        for fmt in ("f8_e4m3", "f8_e5m2"):
            codes = c.get(fmt)
            c.create(f"{fmt}_f32", "f32", codes.shape, ATTRS["rep"])
            c.put(f"{fmt}_f32", tshard.f8_bits(codes, fmt[3:]), convert=True)
            want = np.array([f8_value(int(b), fmt) for b in codes.ravel()],
                            np.float32).reshape(codes.shape)
            check(np.array_equal(c.get(f"{fmt}_f32"), want, equal_nan=True),
                  f"{fmt}: its codes converted to f32 are their values")
            c.drop(f"{fmt}_f32")
        c.drop_many([n[6:] for n in names])


# ---- 2. partial reductions ---------------------------------------------------------------------
def reductions(d):
    rng = np.random.default_rng(12)
    shape = (6, 5)
    with d.connect(0, timeout=TIMEOUT) as c:
        for dt in ("i16", "u16", "u32", "u64", "bool"):
            np_dt = tshard.DTYPES[dt]
            for op in ("sum", "max", "min"):
                if dt == "bool":
                    parts = [rng.integers(0, 2, size=shape).astype(np.bool_) for _ in range(NP)]
                else:
                    info = np.iinfo(np_dt)
                    parts = [rng.integers(info.min, info.max, size=shape, endpoint=True,
                                          dtype=np_dt) for _ in range(NP)]
                f = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
                want = parts[0]
                for p in parts[1:]:
                    want = f(want, p)  # numpy: integer sums wrap; bools: or / and
                name = f"p_{dt}_{op}"
                c.create(name, dt, shape, f"mesh=[4] placements=[P({op})]")
                for r in range(NP):
                    with d.connect(r, timeout=TIMEOUT) as cr:
                        cr.put_slice(name, parts[r])
                got = c.get(name)
                check(got.dtype == np_dt and np.array_equal(got, want),
                      f"{dt} P({op}): get {got.ravel()[:3]} want {want.ravel()[:3]}")
                c.reshard(name, ATTRS["rep"])
                check(np.array_equal(c.get(name), want) and slices_match(d, name, want),
                      f"{dt} P({op}) -> R equals numpy's")
                c.drop(name)
        for fmt in ("f8_e4m3", "f8_e5m2"):
            for op in ("sum", "max", "min"):
                st, msg = error_of(lambda: c.create("q", fmt, shape,
                                                    f"mesh=[4] placements=[P({op})]"))
                check(st == tshard.errors.BadDtypeError.status and f"partial {op} of {fmt}" in msg
                      and "sum, max and min exist for" in msg and "bool" in msg,
                      f"partial {fmt} {op} at create: {st} {msg}")
            check(c.list() == [], f"no partial f8 created: {c.list()}")
            codes = (np.arange(30) * 7 % 0x7e).astype(np.uint8).reshape(shape)
            c.create("q", fmt, shape, ATTRS["row"])
            c.put("q", tshard.f8_bits(codes, fmt[3:]))
            st, msg = error_of(lambda: c.reshard("q", "mesh=[4] placements=[P(max)]"))
            check(st == tshard.errors.BadDtypeError.status and fmt in msg and
                  "has no reductions" in msg, f"reshard of {fmt} to P(max): {st} {msg}")
            info = c.describe("q")
            check(info["attr"] == "mesh=[4]@0-3 placements=[S(0)]" and
                  np.array_equal(c.get("q"), codes), f"{fmt}: unchanged after the refusal")
            c.drop("q")


# ---- 3. checkpoints ----------------------------------------------------------------------------
def checkpoints(d):
    rng = np.random.default_rng(13)
    refs = {}
    with d.connect(0, timeout=TIMEOUT) as c:
        for i, dt in enumerate(NEW):
            st = next(k for k, v in TS.items() if v == dt)
            refs[dt] = sample(st, (9, 7), rng)
            attr = "mesh=[4] placements=[S(0)] splits={0:[4,0,3,2]}" if i % 2 else ATTRS["col"]
            c.create(dt, dt, (9, 7), attr)
            c.put(dt, put_data(refs[dt], dt))
        path = os.path.join(work, "ckpt")
        c.save(path, names=list(NEW))
        c.drop_many(NEW)
        for fmt in ("f8_e4m3", "f8_e5m2"):  # loaded as partial: refused, nothing created
            st, msg = error_of(lambda: c.load(path, names=[fmt],
                                              attr="mesh=[4] placements=[P(sum)]"))
            check(st == tshard.errors.BadDtypeError.status and f"partial sum of {fmt}" in msg
                  and c.list() == [], f"{fmt} loaded as P(sum): {st} {msg} {c.list()}")
        c.load(path)
        for dt, a in refs.items():
            info = c.describe(dt)
            check(info["dtype"] == dt and np.array_equal(c.get(dt), a),
                  f"{dt}: checkpoint save, load: {info['dtype']}")
            off = ck.read(path, dt, verify=None)
            check(off.dtype == a.dtype and np.array_equal(off, a), f"{dt}: read offline")
        c.drop_many(NEW)


# ---- 4. einsum and programs refuse the new dtypes -----------------------------------------------
def compute_refusals(d):
    with d.connect(0, timeout=TIMEOUT) as c:
        for dt in NEW:
            c.create("A", dt, (4, 4), ATTRS["row"])
            st, msg = error_of(lambda: c.einsum("ij,jk->ik", "A", "A", out="Y"))
            check(st == tshard.errors.BadDtypeError.status and f"dtype {dt} is not supported" in msg
                  and "f32" in msg, f"einsum of {dt}: {st} {msg}")
            prog = {"dims": {"p": {"min": 1, "max": 64}},
                    "inputs": [{"name": "x", "dtype": dt, "shape": ["p", 4]}],
                    "ops": [{"out": "y", "op": "add", "args": ["x", "x"]}], "outputs": ["y"]}
            st, msg = error_of(lambda: c.program_compile(prog))
            check(st == tshard.errors.BadDtypeError.status and f"dtype {dt} is not supported" in msg,
                  f"program of {dt}: {st} {msg}")
            c.drop("A")
            check(c.list() == [], f"{dt}: nothing created: {c.list()}")


# ---- 5. randomized differential test against numpy ---------------------------------------------
def randomized(d):
    rng = random.Random(14)
    nrng = np.random.default_rng(14)
    gen = Gen(rng, NP)
    cases = 0
    with d.connect(0, timeout=TIMEOUT) as c:
        for it in range(70):
            dt = NEW[it % len(NEW)]
            st = next(k for k, v in TS.items() if v == dt)
            shape = tuple(rng.randint(1, 9) for _ in range(rng.randint(1, 3)))
            ref = sample(st, shape, nrng)
            if st.startswith("F8"):
                ref = nrng.integers(0, 256, size=shape).astype(np.uint8)
            name = f"r{it}"
            c.create(name, dt, shape, gen.attr(shape, dt))
            c.put(name, put_data(ref, dt))
            for _ in range(2):
                tgt = gen.attr(shape, dt)
                c.reshard(name, tgt)
                ok = np.array_equal(c.get(name), ref) and slices_match(d, name, ref) \
                    if "P(" not in tgt else np.array_equal(c.get(name), ref)
                check(ok, f"{name} {dt}{shape} -> {tgt}: differs from numpy")
                cases += 1
            # a converting put of random doubles: what survives as the reference stores it
            vals = [float(x) for x in nrng.choice(
                [0.0, 1.0, -1.0, 0.5, 3.75, -2.5, 255.0, 300.0, 448.0, 464.0, 465.0, 65535.0,
                 65536.0, 4294967296.0, 2.0**63, 2.0**64, -40000.0, 57344.0, 61440.0, 1e-3,
                 float("nan"), float("inf")], size=8)]
            vals += [float(x) for x in nrng.standard_normal(8) * 40]
            ok_vals = [v for v in vals if fits(v, dt)]
            c.drop(name)
            c.create(name, dt, (len(ok_vals),), ATTRS["rep"])
            c.put(name, np.array(ok_vals, np.float64), convert=True)
            want = convert(ok_vals, dt, np.float64)
            check(same(c.get(name), want, dt),
                  f"{name}: f64 {ok_vals} into {dt}: {c.get(name).tolist()} want {want.tolist()}")
            c.drop(name)
            c.create(name, dt, (2,), ATTRS["row"])  # each value that does not survive, beside 0
            before = c.get(name)
            for v in [v for v in vals if not fits(v, dt)]:
                st_, msg = error_of(lambda: c.put(name, np.array([0.0, v]), convert=True))
                check(st_ == tshard.errors.BadDtypeError.status and f"f64 to {dt}" in msg and
                      "element 1" in msg, f"{name}: f64 {v} into {dt} refused: {st_} {msg}")
                check(same(c.get(name), before, dt), f"{name}: unchanged after the refusal")
            c.drop(name)
        # f32 -> f8 rounding of random floats of every magnitude, against the nearest code
        f = (nrng.standard_normal(400) * 2.0 ** nrng.integers(-12, 18, 400)).astype(np.float32)
        for fmt in ("f8_e4m3", "f8_e5m2"):
            keep = [float(x) for x in f if fits(float(x), fmt)]
            c.create("round", fmt, (len(keep),), ATTRS["row"])
            c.put("round", np.array(keep, np.float32), convert=True)
            want = np.array([f8_bits_of(x, fmt) for x in keep], np.uint8)
            check(np.array_equal(c.get("round"), want), f"f32 -> {fmt}: nearest, ties to even")
            c.drop("round")
    check(cases > 100, f"{cases} random reshards compared")


with Daemons(bin_dir, NP) as d:
    hf_file(d)
    reductions(d)
    checkpoints(d)
    compute_refusals(d)
    randomized(d)
    with d.connect(0, timeout=TIMEOUT) as c:
        check(c.list() == [], f"tensors left: {c.list()}")
shutil.rmtree(work, ignore_errors=True)
check.finish()
