#!/usr/bin/python3
"""Split rules (balanced and chunk) and negative dims end to end, through real daemons, against
an independent model of where every slice lies.

The model: a dim of length L in k parts is balanced (the remainder to the first parts) or cut as
torch.chunk cuts it (parts of ceil(L/k), the last ones smaller or empty, as DTensor's Shard pads
them), nested over the mesh dims that shard it in mesh-dim order; the model is checked against
torch.chunk itself when torch is installed. Random cases on the whole world or a subset of ranks
(1-D and 2-D meshes, tensors of 1 to 3 dims with empty and uneven dims, negative dims in
placements and splits, explicit sizes beside balanced dims): every rank's get_slice is the
model's box of numpy's tensor, describe gives the normalized canonical text on every rank, a
reshard between rules and spellings keeps the values, a checkpoint saved under one rule loads
under the other, a safetensors export imports under the other rule, and `tshard show` draws the
chunk rule's parts. Misuse (unknown rules, dims out of range, chunk with explicit sizes, mixed
rules on one dim) gives a clear error and changes nothing. The Python side: Shard(d,
split=...) validation, Attr.normalized, from_dtensor_spec with tshard placements and with
torch.distributed.tensor placements (stand-ins recognised by their class, and the real ones when
this torch has them), tshard.torch.dtensor_attr of a DTensor-like object.

usage: test_split_rules.py BUILD_BIN_DIR NRANKS [SEED ...]"""
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import types

import numpy as np

import tshard
from checks import Checks, raw_call
from harness import Daemons

bin_dir, NP = sys.argv[1], int(sys.argv[2])
SEEDS = [int(s) for s in sys.argv[3:]] or [1, 2]
CASES = 14  # per seed
TIMEOUT = 60
UNSUPPORTED = tshard.errors.UnsupportedError.status
EXISTS = tshard.errors.ExistsError.status
check = Checks()


# ---------------------------------------------------------------------------------------------
# The model

def torch_chunk_sizes(length, k):
    """torch.chunk's part sizes, written out: chunks of ceil(L/k) while elements are left, then
    (DTensor's Shard) empty parts up to k."""
    c = -(-length // k)
    sizes, start = [], 0
    while c and start < length:
        sizes.append(min(c, length - start))
        start += c
    return sizes + [0] * (k - len(sizes))


def part_sizes(length, ks, rule):
    """Sizes of the parts of a dim sharded over mesh dims of sizes ks (in mesh-dim order)."""
    k = int(np.prod(ks)) if ks else 1
    if rule == "balanced":
        return [length // k + (p < length % k) for p in range(k)]
    level = [length]
    for km in ks:
        level = [s for x in level for s in torch_chunk_sizes(x, km)]
    return level


def model_boxes(attr, shape):
    """{rank: [(lo, hi) per dim]} of a normalized Attr on shape."""
    mshape, ranks = attr.mesh.shape, attr.mesh.ranks or list(range(int(np.prod(attr.mesh.shape))))
    offsets = {}
    for d in range(len(shape)):
        mdims = [m for m, p in enumerate(attr.placements) if isinstance(p, tshard.Shard)
                 and p.dim == d]
        rule = attr.placements[mdims[0]].split if mdims else "balanced"
        sizes = attr.splits.get(d) or part_sizes(shape[d], [mshape[m] for m in mdims], rule)
        offsets[d] = (mdims, np.concatenate([[0], np.cumsum(sizes)]).astype(int))
    out = {}
    for i, coord in enumerate(itertools.product(*[range(s) for s in mshape])):
        box = []
        for d in range(len(shape)):
            mdims, off = offsets[d]
            part = 0
            for m in mdims:
                part = part * mshape[m] + coord[m]
            box.append((int(off[part]), int(off[part + 1])))
        out[ranks[i]] = box
    return out


def model_check_against_torch():
    try:
        import torch
    except ImportError:
        print("torch is not installed: the model is checked against its own torch.chunk only")
        return
    rng = random.Random(5)
    for _ in range(400):
        length, k = rng.randint(0, 70), rng.randint(1, 9)
        got = [len(t) for t in torch.chunk(torch.arange(length), k)] if length else []
        got += [0] * (k - len(got))
        check(got == torch_chunk_sizes(length, k), f"torch.chunk({length}, {k}): {got}")


# ---------------------------------------------------------------------------------------------
# Random attributes

def random_attr(rng, shape, ranks=None):
    """An attribute text (negative dims written sometimes) and its normalized Attr."""
    ndim = len(shape)
    if ranks is None:
        k = rng.randint(1, NP)
        ranks = rng.sample(range(NP), k)
        if rng.random() < 0.5:
            ranks.sort()
    k = len(ranks)
    divs = [a for a in range(2, k) if k % a == 0]
    mshape = [k] if not divs or rng.random() < 0.4 else [rng.choice(divs)]
    if len(mshape) == 1 and k > 1 and rng.random() < 0.2:
        mshape = [1, k]
    elif len(mshape) == 1 and divs:
        pass
    if len(mshape) == 1 and mshape[0] != k:
        mshape.append(k // mshape[0])
    rules = {d: rng.choice(["balanced", "chunk", "chunk"]) for d in range(ndim)}
    places = []
    for _ in mshape:
        if rng.random() < 0.75:
            d = rng.randrange(ndim)
            places.append(tshard.Shard(d - ndim if rng.random() < 0.4 else d, rules[d]))
        else:
            places.append(tshard.Replicate())
    splits = {}
    for d in range(ndim):
        mdims = [m for m, p in enumerate(places) if isinstance(p, tshard.Shard)
                 and p.dim % ndim == d]
        if mdims and rules[d] == "balanced" and rng.random() < 0.3:
            parts = int(np.prod([mshape[m] for m in mdims]))
            cuts = sorted(rng.randint(0, shape[d]) for _ in range(parts - 1))
            key = d - ndim if places[mdims[0]].dim < 0 else d
            splits[key] = [b - a for a, b in zip([0] + cuts, cuts + [shape[d]])]
    attr = tshard.Attr(tshard.Mesh(mshape, ranks), places, splits)
    return str(attr), attr.normalized(ndim)


def random_shape(rng):
    return [rng.choice([0, 1, 2, 3, 5, 7, 10, 13]) for _ in range(rng.randint(1, 3))]


def reference(shape):
    return (np.arange(int(np.prod(shape)), dtype=np.float32) * 3 - 7).reshape(shape)


# ---------------------------------------------------------------------------------------------
# Checks through the daemons

def slices_match(d, name, ref, attr, what):
    """Every rank's slice is the model's box of ref; every rank describes the normalized text."""
    boxes = model_boxes(attr, list(ref.shape))
    ok = True
    for rk in range(NP):
        with d.connect(rk, timeout=TIMEOUT) as c:
            desc = c.describe(name)["attr"]
            ok &= check(desc == str(attr), f"{what}: rank {rk} describes {desc}, want {attr}")
            got = c.get_slice(name)
            if rk in boxes:
                want = ref[tuple(slice(lo, hi) for lo, hi in boxes[rk])]
                ok &= check(got.shape == want.shape and np.array_equal(got, want),
                            f"{what}: rank {rk} slice {got.shape}, model {want.shape} "
                            f"(box {boxes[rk]})")
            else:
                ok &= check(got.size == 0, f"{what}: rank {rk} off the mesh holds {got.shape}")
    return ok


def run_case(d, rng, seed, i, tmp):
    shape = random_shape(rng)
    ref = reference(shape)
    text, attr = random_attr(rng, shape)
    name = f"t{seed}_{i}"
    what = f"seed {seed} case {i}: {shape} {text}"
    with d.connect(rng.randrange(NP), timeout=TIMEOUT) as c:
        c.create(name, "f32", shape, text)
        c.put(name, ref)
    slices_match(d, name, ref, attr, what)
    # reshards: between rules and spellings, values kept
    for step in range(3):
        text, attr = random_attr(rng, shape)
        with d.connect(rng.randrange(NP), timeout=TIMEOUT) as c:
            c.reshard(name, text)
            check(np.array_equal(c.get(name), ref), f"{what}: get after reshard to {text}")
        slices_match(d, name, ref, attr, f"{what}: reshard {step} to {text}")
    # a checkpoint saved under this rule, loaded under the other; a safetensors export of that,
    # imported under the other rule again
    attr = via_file(d, rng, name, ref, attr, os.path.join(tmp, f"ck{seed}_{i}"), "checkpoint",
                    what)
    via_file(d, rng, name, ref, attr, os.path.join(tmp, f"st{seed}_{i}.safetensors"),
             "safetensors", what)
    with d.connect(0, timeout=TIMEOUT) as c:
        c.drop(name)


def via_file(d, rng, name, ref, attr, path, kind, what):
    """The tensor written to path (a checkpoint or a safetensors file) from its layout under
    attr, dropped and read back under the other rule: values and every slice as the model says.
    Returns the attribute it was read under."""
    text, other = flipped(rng, attr, ref.ndim)
    with d.connect(0, timeout=TIMEOUT) as c:
        if kind == "checkpoint":
            c.save(path, names=[name])
            c.drop(name)
            c.load(path, names=[name], attr=text)
        else:
            c.save_safetensors(path, names=[name])
            c.drop(name)
            c.load_safetensors(path, {name: text})
        check(np.array_equal(c.get(name), ref), f"{what}: {kind} read under {text}")
    slices_match(d, name, ref, other, f"{what}: {kind} read under {text}")
    return other


def flipped(rng, attr, ndim):
    """attr with every dim's rule turned to the other (explicit sizes dropped where a dim becomes
    chunk), and sometimes its dims written from the end."""
    places = []
    for p in attr.placements:
        if isinstance(p, tshard.Shard):
            rule = "chunk" if p.split == "balanced" else "balanced"
            places.append(tshard.Shard(p.dim - ndim if rng.random() < 0.5 else p.dim, rule))
        else:
            places.append(p)
    a = tshard.Attr(attr.mesh, places)
    return str(a), a.normalized(ndim)


def dtensor_examples(d):
    """The documented examples, as DTensor lays them out, through the daemons."""
    cases = [([13, 2], [4], [tshard.Shard(0)], {0: [4, 4, 4, 1]}),
             ([5], [4], [tshard.Shard(-1)], {0: [2, 2, 1, 0]}),
             ([10, 3], [2, 2], [tshard.Shard(0), tshard.Shard(0)], {0: [3, 2, 3, 2]})]
    for shape, mshape, places, want in cases:
        if int(np.prod(mshape)) > NP:
            continue
        attr = tshard.from_dtensor_spec(mshape, places, shape)
        ref = reference(shape)
        with d.connect(0, timeout=TIMEOUT) as c:
            c.create("ex", "f32", shape, attr)
            c.put("ex", ref)
        for dim, sizes in want.items():
            got = []
            for rk in range(int(np.prod(mshape))):
                with d.connect(rk, timeout=TIMEOUT) as c:
                    got.append(c.get_slice("ex").shape[dim])
            check(got == sizes, f"DTensor layout of {shape} on {mshape}: {got}, want {sizes}")
        with d.connect(0, timeout=TIMEOUT) as c:
            c.drop("ex")


def misuse(d):
    with d.connect(0, timeout=TIMEOUT) as c:
        mesh = f"mesh=[{NP}]"
        check.expect(9, lambda: c.create("bad", "f32", (4, 4), f"{mesh} placements=[S(0,foo)]"),
                     "unknown split rule", "a split rule (balanced or chunk) or \"cyclic=\"")
        check.expect(10, lambda: c.create("bad", "f32", (4, 4), f"{mesh} placements=[S(-3)]"),
                     "dim below -ndim", "(valid: -2 to 1)")
        check.expect(10, lambda: c.create("bad", "f32", (4, 4), f"{mesh} placements=[S(2)]"),
                     "dim beyond ndim", "valid: S(-2) to S(1)")
        check.expect(10, lambda: c.create("bad", "f32", (4,), f"{mesh} placements=[S(0,chunk)] "
                                          f"splits={{0:[{','.join(['1'] * (NP - 1) + [str(5 - NP)])}]}}"),
                     "chunk with explicit sizes", "both explicit split sizes and the chunk rule")
        if NP >= 4:
            check.expect(10, lambda: c.create("bad", "f32", (4,), "mesh=[2,2] placements="
                                              "[S(-1,chunk),S(0)]"),
                         "mixed rules on one dim", "different split rules")
        check(c.list() == [] or "bad" not in [t["name"] for t in c.list()],
              "nothing created by a refused create")
        c.create("keep", "f32", (6, 5), f"{mesh} placements=[S(-1,chunk)]")
        c.put("keep", reference([6, 5]))
        before = c.describe("keep")["attr"]
        # exist_ok compares the normalized forms: either spelling is the tensor as stored
        c.create("keep", "f32", (6, 5), f"{mesh} placements=[S(-1,chunk)]", exist_ok=True)
        c.create("keep", "f32", (6, 5), f"{mesh} placements=[S(1,chunk)]", exist_ok=True)
        check.expect(EXISTS, lambda: c.create("keep", "f32", (6, 5), f"{mesh} placements=[S(-1)]",
                                              exist_ok=True),
                     "exist_ok with the other rule", "not as asked")
        check(before == f"mesh=[{NP}]@0{'-' + str(NP - 1) if NP > 1 else ''} "
                        f"placements=[S(1,chunk)]", f"stored normalized: {before}")
        check.expect(10, lambda: c.reshard("keep", f"{mesh} placements=[S(-5)]"),
                     "reshard to a dim out of range", "(valid: -2 to 1)")
        check.expect(9, lambda: c.reshard("keep", f"{mesh} placements=[Shard(0, split=torch)]"),
                     "reshard to an unknown rule", "balanced or chunk")
        # the distributed einsum takes balanced (and explicit) splits only; a dim from the end
        # in its output attribute is resolved
        c.create("m", "f32", (5, 6), f"{mesh} placements=[R]")
        c.put("m", reference([5, 6]))
        check.expect(UNSUPPORTED, lambda: c.einsum("ij,jk->ik", "keep", "m", out="prod"),
                     "einsum of a chunk operand", "reshard it to S(1) first")
        c.reshard("keep", f"{mesh} placements=[S(-1)]")
        c.einsum("ij,jk->ik", "keep", "m", out="prod", attr=f"{mesh} placements=[S(-2)]")
        want = reference([6, 5]) @ reference([5, 6])
        check(np.allclose(c.get("prod"), want), "einsum with an output attribute of S(-2)")
        check(c.describe("prod")["attr"].endswith("placements=[S(0)]"),
              f"einsum output normalized: {c.describe('prod')['attr']}")
        c.reshard("keep", f"{mesh} placements=[S(1,chunk)]")
        c.drop_many(["m", "prod"])
    wire_message(d)
    for rk in range(NP):
        with d.connect(rk, timeout=TIMEOUT) as c:
            check(c.describe("keep")["attr"] == before, f"rank {rk}: unchanged by refusals")
            check(np.array_equal(c.get("keep"), reference([6, 5])), f"rank {rk}: values kept")
    with d.connect(0, timeout=TIMEOUT) as c:
        c.drop("keep")


def wire_message(d):
    """The DistAttr message's fields (not its text): Placement.split and negative dims."""
    from tshard import tshard_pb2 as pb

    def create(name, placements, splits=()):
        attr = pb.DistAttr(mesh_shape=[NP], placements=placements, splits=splits)
        with d.connect(0, timeout=TIMEOUT) as c:
            return raw_call(c, create=pb.CreateRequest(name=name, dtype="f32", shape=[5, 3],
                                                       attr=attr, layout=pb.Layout(tag="")))

    r = create("w1", [pb.Placement(kind=pb.SHARD, dim=-2, split=pb.CHUNK)])
    check(r.status == 0, f"a structured chunk attribute: {r.status} {r.message}")
    with d.connect(0, timeout=TIMEOUT) as c:
        got = c.describe("w1")["attr"]
        check(got.endswith("placements=[S(0,chunk)]"), f"described as {got}")
        c.drop("w1")
    r = create("w2", [pb.Placement(kind=pb.SHARD, dim=0, split=7)])
    check(r.status == 10 and "valid: 0 balanced, 1 chunk" in r.message,
          f"an unknown rule on the wire: {r.status} {r.message}")
    r = create("w3", [pb.Placement(kind=pb.SHARD, dim=-1)],
               [pb.DimSplit(dim=-1, sizes=[3] + [0] * (NP - 1))])
    check(r.status == 0, f"structured splits of dim -1: {r.status} {r.message}")
    with d.connect(0, timeout=TIMEOUT) as c:
        got = c.describe("w3")["attr"]
        check(got.endswith("placements=[S(1)] splits={1:[3" + ",0" * (NP - 1) + "]}"),
              f"described as {got}")
        c.drop("w3")
    r = create("w4", [pb.Placement(kind=pb.SHARD, dim=0, split=pb.CHUNK)],
               [pb.DimSplit(dim=0, sizes=[5] + [0] * (NP - 1))])
    check(r.status == 10 and "both explicit split sizes and the chunk rule" in r.message,
          f"chunk with explicit sizes on the wire: {r.status} {r.message}")


def show_draws_chunk_parts():
    cli = os.path.join(bin_dir, "tshard")
    out = subprocess.run([cli, "show", "--shape", "13,4", "--attr",
                          "mesh=[4] placements=[S(-2,chunk)]", "--json"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    check(out.returncode == 0, f"tshard show: {out.stderr}")
    drawn = json.loads(out.stdout)
    check(drawn["attr"] == "mesh=[4]@0-3 placements=[S(0,chunk)]", f"tshard show: {drawn}")
    rows = [(s["lo"][0], s["hi"][0]) for s in sorted(drawn["slices"], key=lambda s: s["rank"])]
    check(rows == [(0, 4), (4, 8), (8, 12), (12, 13)], f"tshard show's chunk parts: {rows}")


# ---------------------------------------------------------------------------------------------
# The Python side, without daemons

class _FakeTorchPlacement:
    pass


def fake_torch(name, **fields):
    """An object of a class named as torch.distributed.tensor's, from a torch module."""
    cls = types.new_class(name, (_FakeTorchPlacement,))
    cls.__module__ = "torch.distributed.tensor.placement_types"
    obj = cls()
    for k, v in fields.items():
        setattr(obj, k, v)
    return obj


def python_side():
    check(str(tshard.Shard(0, split="chunk")) == "S(0,chunk)", "Shard(0, split='chunk')")
    check(str(tshard.Shard(-1)) == "S(-1)", "Shard(-1)")
    check(tshard.Shard(1) != tshard.Shard(1, "chunk"), "the rule is part of equality")
    check.raises(ValueError, lambda: tshard.Shard(0, split="even"), "unknown rule",
                 ["'even'", "balanced, chunk"])
    check.raises(ValueError, lambda: tshard.Shard(-9), "dim -9", ["-8 to 7"])
    a = tshard.Attr([2], [tshard.Shard(-1, "chunk")])
    check(str(a.normalized(3)) == "mesh=[2]@0-1 placements=[S(2,chunk)]", "normalized")
    check.raises(ValueError, lambda: a.normalized(0), "normalized on a 0-dim tensor", ["no dims"])
    b = tshard.Attr([2], [tshard.Shard(-3)], splits={-3: [1, 1]})
    check.raises(ValueError, lambda: b.normalized(2), "normalized out of range",
                 ["valid: -2 to 1"])
    check(str(b.normalized(3)) == "mesh=[2]@0-1 placements=[S(0)] splits={0:[1,1]}",
          "splits normalized")
    check.raises(ValueError, lambda: tshard.Attr([2], [tshard.Shard(0, "chunk")],
                                                 splits={0: [1, 1]}),
                 "chunk with explicit sizes", ["both explicit split sizes"])
    check(tshard.Attr.parse(str(a)) == a, "round trip through the text")
    # from_dtensor_spec: tshard placements, torch-like placements (recognised by class)
    spec = tshard.from_dtensor_spec([2, 2], [tshard.Shard(0), tshard.Replicate()], [10, 3])
    check(str(spec) == "mesh=[2,2]@0-3 placements=[S(0,chunk),R]", f"from_dtensor_spec {spec}")
    spec = tshard.from_dtensor_spec({"dp": 2, "tp": 2},
                                    [fake_torch("Shard", dim=-1), fake_torch("Partial",
                                                                             reduce_op="avg")],
                                    [4, 6])
    check(str(spec) == "mesh=[dp=2,tp=2]@0-3 placements=[S(1,chunk),P(avg)]",
          f"from_dtensor_spec with torch placements: {spec}")
    spec = tshard.from_dtensor_spec([4], [fake_torch("Replicate")], None)
    check(str(spec) == "mesh=[4]@0-3 placements=[R]", f"Replicate: {spec}")
    check.raises(ValueError, lambda: tshard.from_dtensor_spec([2], [fake_torch("_StridedShard",
                                                                                dim=0)], [4]),
                 "a DTensor placement with no counterpart", ["_StridedShard", "Shard, Replicate"])
    check.raises(ValueError, lambda: tshard.from_dtensor_spec([2], ["S(0)"], [4]),
                 "not a placement", ["expected Shard, Replicate or Partial"])
    check.raises(ValueError, lambda: tshard.from_dtensor_spec([2], [tshard.Shard(-2)], [4]),
                 "dim out of range for the shape", ["valid: -1 to 0"])
    # a DTensor-like object: a DeviceMesh (ranks as a numpy grid), placements, a global shape
    mesh = types.SimpleNamespace(mesh=np.array([[3, 2], [1, 0]]), mesh_dim_names=("dp", "tp"))
    dt = types.SimpleNamespace(device_mesh=mesh, placements=[fake_torch("Shard", dim=0),
                                                             fake_torch("Shard", dim=-1)],
                               shape=(10, 7))
    got = str(tshard.torch.dtensor_attr(dt))
    check(got == "mesh=[dp=2,tp=2]@3,2,1,0 placements=[S(0,chunk),S(1,chunk)]",
          f"dtensor_attr: {got}")
    check.raises(TypeError, lambda: tshard.torch.dtensor_attr(np.zeros(3)), "not a DTensor",
                 ["expected a DTensor"])
    # without torch: the package imports and builds DTensor's attribute
    code = ("import sys; sys.modules['torch'] = None; import tshard; "
            "print(tshard.from_dtensor_spec([4], [tshard.Shard(-1)], [13]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=TIMEOUT)
    check(out.returncode == 0 and out.stdout.strip() == "mesh=[4]@0-3 placements=[S(0,chunk)]",
          f"without torch: {out.stdout} {out.stderr}")
    try:
        from torch.distributed.tensor import Partial, Replicate, Shard
    except ImportError:
        print("torch.distributed.tensor is not available: DTensor's own placements are skipped")
        return
    spec = tshard.from_dtensor_spec([2, 2], [Shard(0), Partial()], [5, 5])
    check(str(spec) == "mesh=[2,2]@0-3 placements=[S(0,chunk),P(sum)]", f"DTensor: {spec}")
    spec = tshard.from_dtensor_spec([2], [Replicate()], [5])
    check(str(spec) == "mesh=[2]@0-1 placements=[R]", f"DTensor Replicate: {spec}")


def main():
    model_check_against_torch()
    python_side()
    show_draws_chunk_parts()
    tmp = tempfile.mkdtemp(prefix="tshard-split-")
    try:
        d = Daemons(bin_dir, NP)
        try:
            dtensor_examples(d)
            misuse(d)
            for seed in SEEDS:
                rng = random.Random(seed)
                for i in range(CASES):
                    run_case(d, rng, seed, i, tmp)
        finally:
            rc = d.stop()
            check(rc == 0, f"the daemons exit 0 (sanitizers quiet): {rc}\n{d.logs()[-4000:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
