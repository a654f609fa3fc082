#!/usr/bin/python3
"""End-to-end test of torch tensors and DLPack objects through the Python client, with real
daemons (4 ranks). The reference is torch itself: what was put is compared, bit for bit, with
what comes back.

- every tshard dtype the installed torch has (f32 f64 f16 bf16 i8 i32 i64 u8 bool i16, and u16
  u32 u64 float8_e4m3fn float8_e5m2 from torch 2.1/2.3) from a torch CPU tensor: put then get
  with like="torch" (the torch dtype mapped, bf16 as torch.bfloat16, f8 as torch.float8_*) and
  get into a torch out= tensor
  (filled in place: the same tensor, the same data_ptr); put_slice of each rank's box (a column
  split: non-contiguous torch views) then get_slice with like="torch" and get;
- zero copy: the array the client sends for a contiguous tensor (bf16 included) is a view at the
  tensor's data_ptr; a DLPack-only object gives a view at its producer's address; an object with
  the array interface only is read too;
- refusals: a tensor on another device than the CPU (the meta device stands in for a GPU), with a
  message saying so and the stored tensor unchanged; a torch bool tensor into a u8 tensor refused
  like a numpy bool array (and converted with convert=True); a tensor of a dtype the installed
  torch lacks got like="torch": refused naming the torch dtype (numpy gets it);
- the package without torch: with torch blocked from importing, tshard imports and numpy puts
  and gets work (a child process).

usage: test_torch.py BUILD_BIN_DIR"""
import os
import subprocess
import sys

import numpy as np
import torch

import tshard
import tshard.torch as tt
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
NP = 4
TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
         "bf16": torch.bfloat16, "i8": torch.int8, "i32": torch.int32, "i64": torch.int64,
         "u8": torch.uint8, "bool": torch.bool, "i16": torch.int16}
LATER = {"u16": "uint16", "u32": "uint32", "u64": "uint64", "f8_e4m3": "float8_e4m3fn",
         "f8_e5m2": "float8_e5m2"}  # torch 2.1 (float8) and 2.3 (unsigned) have these
TORCH.update({k: getattr(torch, v) for k, v in LATER.items() if hasattr(torch, v)})
MISSING = [k for k, v in LATER.items() if not hasattr(torch, v)]


def sample(dt, shape, seed):
    g = torch.Generator().manual_seed(seed)
    if TORCH[dt] == torch.bool:
        return torch.randint(0, 2, shape, generator=g, dtype=torch.int64).to(torch.bool)
    if dt.startswith("f8"):  # every code but NaN's bits, as uint8 reinterpreted
        codes = torch.randint(0, 0x7F, shape, generator=g, dtype=torch.int64).to(torch.uint8)
        return codes.view(TORCH[dt])
    if dt in ("u32", "u64"):  # beyond int64's randint: the codes of random bytes
        b = torch.randint(0, 256, (*shape, 4 if dt == "u32" else 8), generator=g,
                          dtype=torch.int64).to(torch.uint8)
        return b.view(TORCH[dt]).reshape(shape)
    if TORCH[dt].is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(TORCH[dt])
    info = torch.iinfo(TORCH[dt])
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(TORCH[dt])


def same(a, b):
    """Bit-for-bit equality of two torch tensors of one dtype and shape."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == torch.bfloat16:
        a, b = a.view(torch.int16), b.view(torch.int16)
    if a.dtype.is_floating_point:  # bf16 and f8 included: bits compared
        return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))
    return bool(torch.equal(a, b))


def addr(a):
    a = getattr(a, "bits", a)  # bf16 data travel as tshard.bf16_bits of the tensor's own bits
    return a.__array_interface__["data"][0]


def test_round_trips(d, c):
    for i, dt in enumerate(TORCH):
        t = sample(dt, (12, 8), i)
        c.create(dt, dt, (12, 8), "mesh=[4] placements=[S(0)]")
        c.put(dt, t)
        g = c.get(dt, like="torch")
        check(isinstance(g, torch.Tensor) and g.dtype == TORCH[dt], f"{dt}: get like=torch dtype "
              f"{getattr(g, 'dtype', type(g))}")
        check(same(g, t), f"{dt}: put/get round trip equals the tensor")
        out = torch.empty((12, 8), dtype=TORCH[dt])
        ptr = out.data_ptr()
        r = c.get(dt, out=out)
        check(r is out and out.data_ptr() == ptr and same(out, t), f"{dt}: get into out= in place")
        check(isinstance(c.get(dt), np.ndarray), f"{dt}: get without like stays numpy")
        # put_slice per rank from non-contiguous column views, then get_slice like=torch
        c.reshard(dt, "mesh=[4] placements=[S(1)]")
        u = sample(dt, (12, 8), 100 + i)
        slices_ok = True
        for rank in range(NP):
            with d.connect(rank) as cr:
                part = u[:, 2 * rank:2 * rank + 2]
                slices_ok = slices_ok and not part.is_contiguous()
                cr.put_slice(dt, part)
        check(slices_ok, f"{dt}: the column views are non-contiguous")
        check(same(c.get(dt, like="torch"), u), f"{dt}: put_slice of views then get")
        ok = True
        for rank in range(NP):
            with d.connect(rank) as cr:
                s = cr.get_slice(dt, like="torch")
                ok = ok and same(s, u[:, 2 * rank:2 * rank + 2].contiguous())
        check(ok, f"{dt}: get_slice like=torch on every rank equals the tensor's columns")
    c.drop_many(list(TORCH))


class DLPackOnly:
    """An object offering only the DLPack protocol (of a torch tensor)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


class ArrayInterfaceOnly:
    def __init__(self, a):
        self.__array_interface__ = a.__array_interface__
        self._keep = a


def test_zero_copy_and_protocols(c):
    for dt in TORCH:
        t = sample(dt, (64, 32), 7)
        a = tt.as_array(t)
        check(addr(a) == t.data_ptr(), f"{dt}: the array sent is a view of the tensor")
    t = sample("f32", (64, 32), 8)
    a = tt.as_array(DLPackOnly(t))
    check(addr(a) == t.data_ptr(), "DLPack object: the array sent is a view of its memory")
    c.create("p", "f32", (64, 32), "mesh=[4] placements=[S(1)]")
    c.put("p", DLPackOnly(t))
    check(same(c.get("p", like="torch"), t), "DLPack object: put/get round trip")
    n = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    c.put("p", ArrayInterfaceOnly(n))
    check(np.array_equal(c.get("p"), n), "array-interface object: put/get round trip")
    # another device than the CPU
    meta = torch.empty((64, 32), device="meta")
    try:
        c.put("p", meta)
        check(False, "meta tensor: put refused")
    except tshard.TshardError as e:
        check("meta" in str(e) and ".cpu()" in str(e), f"meta tensor: message {e}")
    check(np.array_equal(c.get("p"), n), "meta tensor: the stored tensor unchanged")
    try:
        c.get("p", out=meta)
        check(False, "meta tensor: get into it refused")
    except tshard.TshardError as e:
        check("meta" in str(e), f"meta out=: message {e}")
    c.drop("p")
    # bool into a u8 tensor: refused like numpy's, converted with convert=True
    c.create("b", "u8", (5,), "mesh=[4] placements=[R]")
    flags = torch.tensor([True, False, True, True, False])
    check.expect(tshard.errors.BadDtypeError.status, lambda: c.put("b", flags),
                 "torch bool refused", "bool")
    c.put("b", flags, convert=True)
    check(c.get("b").tolist() == [1, 0, 1, 1, 0], "torch bool converted with convert=True")
    c.drop("b")
    c.create("b", "bool", (5,), "mesh=[4] placements=[R]")
    c.put("b", flags)
    check(same(c.get("b", like="torch"), flags), "torch bool into a bool tensor as is")
    c.drop("b")
    for dt in MISSING:  # this torch lacks the dtype: numpy gets it, like="torch" says why
        c.create("m", dt, (3,), "mesh=[4] placements=[R]")
        check.expect(tshard.errors.BadDtypeError.status, lambda: c.get("m", like="torch"),
                     f"{dt} like=torch", f"torch.{LATER[dt]}")
        check(np.array_equal(c.get("m"), np.zeros(3, tshard.DTYPES[dt])), f"{dt} as numpy")
        c.drop("m")


def test_batched(c):
    """put_many takes torch tensors of every dtype in one batch; get_many and get agree."""
    tensors = {f"m.{dt}": sample(dt, (6, 5), 100 + i) for i, dt in enumerate(TORCH)}
    for n, t in tensors.items():
        c.create(n, n[2:], (6, 5), "mesh=[4] placements=[S(1)]")
    c.put_many(tensors)
    got = c.get_many(list(tensors))
    for n, t in tensors.items():
        check(same(c.get(n, like="torch"), t), f"{n}: put_many of a torch tensor then get")
        check(np.array_equal(got[n].view(np.uint8), c.get(n).view(np.uint8)),
              f"{n}: get_many equals get")


def test_without_torch(d):
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, tshard\n"
            "with tshard.connect(socket=sys.argv[1]) as c:\n"
            "    c.create('n', 'f32', (4, 4), 'mesh=[4] placements=[S(0)]')\n"
            "    a = np.arange(16, dtype=np.float32).reshape(4, 4)\n"
            "    c.put('n', a); ok = np.array_equal(c.get('n'), a); c.drop('n')\n"
            "print('ok' if ok else 'differ')\n")
    r = subprocess.run([sys.executable, "-c", code, d.socket(0)], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0 and r.stdout.strip() == "ok",
          f"without torch: {r.returncode} {r.stdout} {r.stderr[-500:]}")


def main():
    d = Daemons(bin_dir, NP)
    try:
        with d.connect(0) as c:
            test_round_trips(d, c)
            test_zero_copy_and_protocols(c)
            test_batched(c)
        test_without_torch(d)
    finally:
        rc = d.stop()
        check(rc == 0, f"the daemons exit 0 (sanitizers quiet): {rc}\n{d.logs()[-4000:]}")
    check.finish()


if __name__ == "__main__":
    main()
