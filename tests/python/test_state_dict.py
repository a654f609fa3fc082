#!/usr/bin/python3
"""Whole state dicts through 3 real daemons: put_state_dict of numpy arrays and torch tensors
(bf16 included, numpy bf16 as bits) under attribute rules (exact names, globs, a default) and
get_state_dict back (like="numpy" and like="torch", names, prefix) bit-exact against the inputs
(and against bytes read back with get); a second put_state_dict replaces the tensors whose dtype,
shape or attribute changed and only refills the others; create_many (atomic: a bad item creates
nothing) and create(exist_ok=True) (as asked: a no-op keeping the values; different: an error
naming every difference); get_many(like="torch", out={...}) filling numpy arrays and torch
tensors in place. Misuse is refused with clear errors and changes nothing anywhere.

usage: test_state_dict.py BUILD_BIN_DIR"""
import os
import subprocess
import sys

import numpy as np

import tshard
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
rng = np.random.default_rng(5)
try:
    import torch
except ImportError:  # the numpy half runs alone
    torch = None

COLS, ROWS, REP = ("mesh=[3] placements=[S(1)]", "mesh=[3] placements=[S(0)]",
                   "mesh=[3] placements=[R]")


def bits(shape):
    f = rng.standard_normal(shape).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def raw(v):
    """The bytes of a state dict value (numpy, bf16 bits or torch)."""
    if isinstance(v, tshard.BF16Bits):
        return v.bits.tobytes()
    if torch is not None and isinstance(v, torch.Tensor):
        return v.contiguous().view(torch.uint8).numpy().tobytes() if v.numel() else b""
    return np.ascontiguousarray(v).tobytes()


def names_everywhere(d):
    out = []
    for r in range(d.np):
        with d.connect(r) as cr:
            out.append(sorted(cr.list()))
    return out


def round_trip(c):
    sd = {"enc.wte": rng.standard_normal((30, 12)).astype(np.float32),
          "enc.ln.b": rng.standard_normal(12),
          "enc.step": np.arange(7, dtype=np.int32),
          "dec.w_bf16bits": tshard.bf16_bits(bits((9, 6)))}
    if torch is not None:
        sd["dec.h.0.w"] = torch.randn(12, 6)
        sd["dec.h.0.b"] = torch.randn(6).to(torch.bfloat16)
        sd["dec.h.1.w"] = torch.randn(12, 6).to(torch.float16)
    rules = {"enc.wte": ROWS, "dec.h.*.w": COLS, "dec.*bits": ROWS}
    stored = c.put_state_dict(sd, rules, default=REP)
    check(stored == list(sd), f"the names stored, in order: {stored}")
    want = {"enc.wte": ROWS, "enc.ln.b": REP, "enc.step": REP, "dec.w_bf16bits": ROWS,
            "dec.h.0.w": COLS, "dec.h.0.b": REP, "dec.h.1.w": COLS}
    for n in sd:
        check(c.describe(n)["attr"].replace("@0-2", "") == want[n],
              f"{n}: attribute by rule: {c.describe(n)['attr']}")
        check(c.get(n).tobytes() == raw(sd[n]), f"{n}: get equals the input bytes")
    got = c.get_state_dict()
    check(sorted(got) == sorted(sd) and all(got[n].tobytes() == raw(sd[n]) for n in sd),
          "get_state_dict(like='numpy') round-trips bit-exact")
    check(got["dec.w_bf16bits"].dtype == np.uint16, "numpy bf16 comes as uint16 bits")
    if torch is not None:
        gt = c.get_state_dict(like="torch")
        check(all(isinstance(v, torch.Tensor) for v in gt.values()) and
              gt["dec.h.0.b"].dtype == torch.bfloat16 and gt["dec.h.1.w"].dtype == torch.float16
              and all(raw(gt[n]) == raw(sd[n]) for n in sd),
              "get_state_dict(like='torch') round-trips bit-exact, bf16 as torch.bfloat16")
        sub = c.get_state_dict(like="torch", prefix="dec.h.")
        check(sorted(sub) == ["0.b", "0.w", "1.w"] and torch.equal(sub["0.w"], sd["dec.h.0.w"]),
              f"prefix: keys without it: {sorted(sub)}")
    part = c.get_state_dict(names=["enc.step", "enc.ln.b"])
    check(list(part) == ["enc.step", "enc.ln.b"] and
          np.array_equal(part["enc.ln.b"], sd["enc.ln.b"]), "get_state_dict of some names")

    # again, changed: one dtype, one shape, one attribute; the others keep their tensors
    sd2 = dict(sd)
    sd2["enc.step"] = np.arange(7, dtype=np.int64)
    sd2["enc.ln.b"] = rng.standard_normal(15)
    sd2["enc.wte"] = rng.standard_normal((30, 12)).astype(np.float32)
    c.put_state_dict(sd2, {"enc.wte": COLS, "dec.h.*.w": COLS, "dec.*bits": ROWS}, default=REP)
    got = c.get_state_dict()
    check(all(got[n].tobytes() == raw(sd2[n]) for n in sd2) and got["enc.step"].dtype == np.int64
          and got["enc.ln.b"].shape == (15,) and
          c.describe("enc.wte")["attr"].replace("@0-2", "") == COLS,
          "a second put_state_dict replaces what changed and refills the rest")

    # stored as asked: one request, as many as a put_many of the same arrays
    rules2 = {"enc.wte": COLS, "dec.h.*.w": COLS, "dec.*bits": ROWS}
    n_sd = requests(c, lambda: c.put_state_dict(sd2, rules2, default=REP))
    n_pm = requests(c, lambda: c.put_many(sd2))
    check(n_sd == n_pm == 1, f"put_state_dict as stored: {n_sd} requests, put_many {n_pm}")
    n_gsd = requests(c, lambda: c.get_state_dict())
    n_gm = requests(c, lambda: c.get_many(list(sd2)))
    check(n_gsd == n_gm == 2, f"get_state_dict: {n_gsd} requests (a list and a get_many), "
                              f"get_many {n_gm}")
    # a put_many asking for another attribute is refused, nothing stored
    from tshard import batch_io
    check.raises(tshard.BadAttributeError,
                 lambda: batch_io.put_many(c, {"enc.step": np.zeros(7, np.int64),
                                               "enc.wte": np.zeros((30, 12), np.float32)},
                                           attrs={"enc.wte": ROWS}),
                 "put_many with another attribute",
                 ["'enc.wte'", "placements=[S(1)], not mesh=[3]@0-2 placements=[S(0)]"])
    check(np.array_equal(c.get("enc.step"), sd2["enc.step"]), "the refused put stored nothing")
    return sd2


def requests(c, fn):
    """The requests fn sends (the client numbers them)."""
    first = c._take_id()
    fn()
    return c._take_id() - first - 1


def misuse(d, c, sd):
    before = c.get_state_dict()
    cases = [
        (lambda: c.put_state_dict(sd), tshard.InvalidArgumentError, ["no attribute for"]),
        (lambda: c.put_state_dict(sd, {"nope": REP}, default=REP), tshard.NotFoundError,
         ["'nope'"]),
        (lambda: c.put_state_dict({"x": np.zeros((4, 4), "<M8[s]")}, default=REP),
         tshard.BadDtypeError, ["'x'", "datetime64"]),
        (lambda: c.put_state_dict({"enc.wte": np.zeros((30, 12), np.float32),
                                   "w5": np.zeros(5, np.float32)}, default=COLS),
         tshard.BadAttributeError, ["w5"]),
        (lambda: c.put_state_dict([("a", np.zeros(3))], default=REP), TypeError, ["dict"]),
        (lambda: c.put_state_dict({"a": "text"}, default=REP), TypeError, ["'a'"]),
        (lambda: c.get_state_dict(like="jax"), ValueError, ["'numpy' or 'torch'"]),
        (lambda: c.get_state_dict(names="enc.wte"), TypeError, ["list of names"]),
        (lambda: c.get_state_dict(names=["enc.wte", "gone"]), tshard.NotFoundError, ["'gone'"]),
    ]
    for i, (fn, exc, needles) in enumerate(cases):
        check.raises(exc, fn, f"state dict misuse {i}", needles)
    after = c.get_state_dict()
    check(sorted(after) == sorted(before) and
          all(after[n].tobytes() == before[n].tobytes() for n in before),
          "misuse changed nothing")
    check(all(n == sorted(before) for n in names_everywhere(d)), "no tensor left on any rank")


def create_calls(d, c):
    c.create("cx", "f32", (6, 4), ROWS)
    c.put("cx", np.ones((6, 4), np.float32))
    c.create("cx", "float32", (6, 4), "mesh=[3] placements=[Shard(0)]", exist_ok=True)
    check(np.array_equal(c.get("cx"), np.ones((6, 4), np.float32)),
          "create(exist_ok=True) as asked: a no-op keeping the values")
    check.raises(tshard.ExistsError,
                 lambda: c.create("cx", "f16", (6, 5), COLS, exist_ok=True),
                 "create(exist_ok=True) differing",
                 ["'cx' exists but not as asked", "its dtype is f32 (asked f16)",
                  "its shape is [6,4] (asked [6,5])",
                  "its attribute is mesh=[3]@0-2 placements=[S(0)]"])
    check.raises(tshard.ExistsError, lambda: c.create("cx", "f32", (6, 4), ROWS),
                 "create of a taken name", ["exist_ok"])
    before = names_everywhere(d)
    c.create_many({"m1": ("f32", (6, 3), ROWS), "m2": {"dtype": "i64", "shape": [5],
                                                       "attr": REP}, "cx": ("f32", (6, 4), ROWS)},
                  exist_ok=True)
    check(c.describe("m2")["dtype"] == "i64" and c.get("m1").shape == (6, 3) and
          np.array_equal(c.get("cx"), np.ones((6, 4), np.float32)),
          "create_many: new ones made, one as asked left")
    after = names_everywhere(d)
    check.raises(tshard.BadAttributeError,
                 lambda: c.create_many({"m3": ("f32", (6,), ROWS),
                 "m4": ("f32", (5,), COLS)}), "create_many with a bad item", ["'m4'"])
    check.raises(tshard.ExistsError,
                 lambda: c.create_many({"m3": ("f32", (6,), ROWS),
                 "m1": ("f32", (6, 3), ROWS)}), "create_many of a taken name", ["'m1'"])
    check.raises(TypeError,
                 lambda: c.create_many({"m3": ("f32", (6,))}),
                 "create_many spec too short", ["(dtype, shape, attr)"])
    check(names_everywhere(d) == after and after != before and
          all("m3" not in n for n in after), "a refused create_many created nothing anywhere")
    c.create_many({"m1": ("f64", (6, 3), COLS)}, replace=True)
    check(c.describe("m1")["dtype"] == "f64" and c.describe("m1")["attr"].replace("@0-2", "")
          == COLS, "create_many(replace=True) replaced the differing tensor")
    c.drop_many(["cx", "m1", "m2"])


def get_many_out(c):
    a = rng.standard_normal((8, 5)).astype(np.float32)
    b = bits((4, 6))
    c.create_many({"ga": ("f32", (8, 5), ROWS), "gb": ("bf16", (4, 6), COLS)})
    c.put_many({"ga": a, "gb": tshard.bf16_bits(b)})
    out_a = np.zeros((8, 5), np.float32)
    got = c.get_many(["ga", "gb"], out={"ga": out_a})
    check(got["ga"] is out_a and np.array_equal(out_a, a) and np.array_equal(got["gb"], b),
          "get_many out= fills the numpy array in place")
    check.raises(tshard.BadShapeError,
                 lambda: c.get_many(["ga"], out={"ga": np.zeros((5, 8), np.float32)}),
                 "get_many out of another shape", ["(5, 8)"])
    check.raises(tshard.InvalidArgumentError,
                 lambda: c.get_many(["ga"], out={"gb": np.zeros((4, 6), np.uint16)}),
                 "get_many out of a name not asked", ["'gb'"])
    check.raises(ValueError,
                 lambda: c.get_many(["ga"], like="torch", wait=False),
                 "get_many like='torch' without waiting", ["wait=True"])
    if torch is not None:
        got = c.get_many(["ga", "gb"], like="torch")
        check(isinstance(got["ga"], torch.Tensor) and got["gb"].dtype == torch.bfloat16 and
              np.array_equal(got["ga"].numpy(), a) and raw(got["gb"]) == b.tobytes(),
              "get_many like='torch': bf16 as torch.bfloat16")
        tb = torch.zeros(4, 6, dtype=torch.bfloat16)
        got = c.get_many(["ga", "gb"], like="torch", out={"gb": tb})
        check(got["gb"] is tb and raw(tb) == b.tobytes() and isinstance(got["ga"], torch.Tensor),
              "get_many out= fills a bf16 torch tensor in place")
    c.drop_many(["ga", "gb"])


WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None  # import torch fails from here on
import numpy as np, tshard
with tshard.connect(socket=sys.argv[1]) as c:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    c.put_state_dict({"nt.a": a}, default="mesh=[3] placements=[R]")
    got = c.get_state_dict(prefix="nt.")
    assert list(got) == ["a"] and np.array_equal(got["a"], a), got
    c.drop("nt.a")
print("ok")
"""


def main():
    with Daemons(bin_dir, 3) as d, d.connect(0) as c:
        r = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, d.socket(0)], capture_output=True,
                           text=True, timeout=120, env=dict(os.environ))
        check(r.returncode == 0 and r.stdout.strip() == "ok",
              f"the package and the numpy state dicts work without torch: {r.stdout} {r.stderr}")
        sd = round_trip(c)
        misuse(d, c, sd)
        c.drop_many(list(sd))
        create_calls(d, c)
        get_many_out(c)
        check(names_everywhere(d) == [[], [], []], "every rank empty at the end")
    check.finish()


if __name__ == "__main__":
    main()
