#!/usr/bin/python3
"""End-to-end test of checkpoints with real daemons and the real clients.

Round trips of every dtype and placement kind (shard balanced and ragged with empty parts,
2-D meshes, replicate, partial reduced and partial kept), blocked local layouts; saved on 4
daemons and loaded on 4 under other attributes, on 3 and on 6; the pure-numpy reader against the
daemons' writer, and the daemons and the reader against an independent writer written here (its
own safetensors files and index, pieces that come from no attribute); faults: a corrupted byte, a
missing file, a header that lies, an unwritable path, a rank killed mid-save (the previous
checkpoint intact and readable, no tensor created by a failed load); the CLI's save, load and
`checkpoint show`. References are numpy arrays made here.

usage: test_ckpt.py BUILD_BIN_DIR"""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
import tshard.checkpoint as ck
from checks import Checks, put_data
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
rng = np.random.default_rng(16)
work = tempfile.mkdtemp(prefix="tshard-ckpt-")

DT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16, "i8": np.int8,
      "i32": np.int32, "i64": np.int64, "u8": np.uint8}


def values(dtype, shape):
    n = int(np.prod(shape))
    if dtype == "bf16":  # bf16 bits of small integers (exact)
        f = (rng.integers(-50, 50, n)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).reshape(shape)
    if dtype in ("i8", "u8", "i32", "i64"):
        info = np.iinfo(DT[dtype])
        return rng.integers(max(info.min, -1000), min(info.max, 1000), n).astype(DT[dtype]).reshape(shape)
    return rng.integers(-1000, 1000, n).astype(DT[dtype]).reshape(shape)


def expect(exc, fn, what, needles=()):
    try:
        fn()
    except exc as e:
        msg = str(e)
        check(all(n in msg for n in needles), f"{what}: message {msg!r} lacks {needles}")
        return msg
    except Exception as e:  # noqa: BLE001 - the wrong exception is a failure
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: no exception")
    return None


# name -> (dtype, shape, attr, layout)
CASES = {
    "s0_f32": ("f32", (20, 12), "mesh=[4] placements=[S(0)]", None),
    "ragged_f64": ("f64", (11, 6), "mesh=[4] placements=[S(0)] splits={0:[5,0,6,0]}", None),
    "s1_f16": ("f16", (6, 13), "mesh=[4] placements=[S(1)]", None),
    "mesh2_bf16": ("bf16", (9, 10), "mesh=[2,2] placements=[S(0),S(1)]", None),
    "rep_i8": ("i8", (7, 5), "mesh=[4] placements=[R]", None),
    "s0r_i32": ("i32", (10, 4), "mesh=[2,2] placements=[S(0),R]", None),
    "blocked_i64": ("i64", (6, 10), "mesh=[2] placements=[S(0)]", "aB4b"),
    "sub_u8": ("u8", (3, 4, 5), "mesh=[2]@1,3 placements=[S(2)]", None),
    "partial_f32": ("f32", (8, 6), "mesh=[2,2] placements=[P(sum),S(0)]", None),
    "vec_f64": ("f64", (5,), "mesh=[4] placements=[S(0)]", None),
    # large enough that a resharding load takes the move path (each piece read once, then moved)
    "big_f32": ("f32", (1024, 512), "mesh=[4] placements=[S(0)]", None),
}
ref = {}

with Daemons(bin_dir, 4) as d:
    c = d.connect(0)
    for name, (dt, shape, attr, layout) in CASES.items():
        ref[name] = values(dt, shape)
        c.create(name, dt, shape, attr, layout=layout)
        c.put(name, put_data(ref[name]))
    # a partial tensor whose ranks hold different partial values (put_slice per rank)
    kp_attr = "mesh=[2,2] placements=[P(sum),S(1)]"
    c.create("kept", "i32", (4, 6), kp_attr)
    parts = {}
    for r in range(4):
        with d.connect(r) as cr:
            lo = (r % 2) * 3
            parts[r] = values("i32", (4, 3))
            cr.put_slice("kept", put_data(parts[r]))
    kept_ref = np.zeros((4, 6), np.int32)
    for r in range(4):
        lo = (r % 2) * 3
        kept_ref[:, lo:lo + 3] += parts[r]
    check(np.array_equal(c.get("kept"), kept_ref), "kept: the daemons' sum is the reference")

    # save everything; the pure-numpy reader reads each tensor back
    c1 = os.path.join(work, "c1")
    c.save(c1, all=True)
    check(sorted(ck.names(c1)) == sorted(list(CASES) + ["kept"]), "every tensor in the index")
    for name in CASES:
        got = ck.read(c1, name, verify=True)
        check(got.dtype == ref[name].dtype and np.array_equal(got, ref[name]),
              f"reader: {name} equals the reference")
    check(np.array_equal(ck.read(c1, "kept"), kept_ref), "reader: kept (reduced on save)")
    idx = json.load(open(os.path.join(c1, "index.json")))
    # replicas written once, spread over ranks
    check(len(idx["tensors"]["rep_i8"]["pieces"]) == 1, "a replicated tensor is one piece")
    check(len(idx["tensors"]["s0r_i32"]["pieces"]) == 2, "S(0),R over [2,2]: two pieces")
    writers = {p["file"] for t in idx["tensors"].values() for p in t["pieces"]}
    check(len(writers) == 4, f"writing spread over the 4 ranks: {writers}")
    check(len(idx["tensors"]["ragged_f64"]["pieces"]) == 2, "empty parts are no pieces")
    # keep_partial: the partial pieces themselves; the reader reduces them
    c2 = os.path.join(work, "c2")
    c.save(c2, names=["kept", "partial_f32"], keep_partial=True)
    ix2 = json.load(open(os.path.join(c2, "index.json")))
    check(len(ix2["tensors"]["kept"]["pieces"]) == 4 and ix2["tensors"]["kept"]["partial_kept"],
          "keep_partial: 4 partial pieces")
    check(np.array_equal(ck.read(c2, "kept"), kept_ref), "reader reduces kept partial pieces")
    check(np.array_equal(ck.read(c2, "partial_f32"), ref["partial_f32"]), "reader: partial_f32")

    # load back on the same 4 ranks: saved attributes, and others
    for name in CASES:
        c.drop(name)
    c.drop("kept")
    c.load(c1)
    for name in CASES:
        check(np.array_equal(c.get(name), ref[name]), f"load (saved attr): {name}")
        check(c.describe(name)["attr"] == c.describe(name)["attr"], "")
    check(c.describe("s0_f32")["attr"] == "mesh=[4]@0-3 placements=[S(0)]", "saved attr kept")
    c.drop("s0_f32")
    c.load(c1, names="s0_f32", attr="mesh=[2,2] placements=[S(1),S(0)]")
    check(np.array_equal(c.get("s0_f32"), ref["s0_f32"]), "load s0_f32 under [S(1),S(0)]")
    c.drop("s0_f32")
    c.load(c1, names=["s0_f32"], attr="mesh=[4] placements=[P(max)]")
    check(np.array_equal(c.get("s0_f32"), ref["s0_f32"]), "load s0_f32 into P(max)")
    c.drop("kept")
    c.load(c2, names=["kept"])
    check(np.array_equal(c.get("kept"), kept_ref), "load kept partial pieces, saved attr")
    check(c.describe("kept")["attr"] == "mesh=[2,2]@0-3 placements=[P(sum),S(1)]", "kept attr")
    c.drop("kept")
    c.load(c2, names=["kept"], attr="mesh=[3] placements=[S(0)]")
    check(np.array_equal(c.get("kept"), kept_ref), "load kept partial pieces into S(0) on 3")

    # per-node directories (one node here: the node's leader is rank 0)
    pn = os.path.join(work, "pernode")
    c.save(pn, names=["s1_f16", "rep_i8"], per_node=True)
    check(np.array_equal(ck.read(pn, "s1_f16"), ref["s1_f16"]), "per-node save, reader")
    c.drop("s1_f16")
    c.load(pn, names=["s1_f16"], attr="mesh=[4] placements=[S(0)]", per_node=True)
    check(np.array_equal(c.get("s1_f16"), ref["s1_f16"]), "per-node load")

    # misuse
    expect(tshard.errors.ExistsError, lambda: c.load(c1, names=["kept"]), "load over an existing",
           ("kept", "exists"))
    expect(tshard.errors.NotFoundError, lambda: c.load(c1, names=["nope"]), "unknown name",
           ("nope",))
    expect(tshard.errors.NotFoundError, lambda: c.save(os.path.join(work, "c9"), names=["nope"]),
           "save unknown name", ("nope",))
    check(not os.path.exists(os.path.join(work, "c9")), "failed save leaves no directory")
    expect(tshard.TshardError, lambda: c.load(os.path.join(work, "none")), "missing checkpoint",
           ("index.json",))

    # faults: the previous checkpoint stays; every failure names the path
    afile = os.path.join(work, "afile")
    open(afile, "w").close()
    expect(tshard.TshardError, lambda: c.save(os.path.join(afile, "sub"), all=True), "unwritable path",
           (afile,))
    before = {f: open(os.path.join(c1, f), "rb").read() for f in os.listdir(c1)}
    expect(tshard.TshardError, lambda: c.save(afile, all=True), "target is a file", (afile,))
    notckpt = os.path.join(work, "notckpt")
    os.mkdir(notckpt)
    open(os.path.join(notckpt, "precious"), "w").write("x")
    expect(tshard.TshardError, lambda: c.save(notckpt, all=True), "a foreign non-empty directory",
           ("notckpt",))
    check(os.path.exists(os.path.join(notckpt, "precious")), "foreign directory untouched")

    def corrupt_copy(tag, mutate):
        dst = os.path.join(work, tag)
        shutil.copytree(c1, dst)
        mutate(dst)
        return dst

    piece = idx["tensors"]["s0_f32"]["pieces"][1]
    pfile = piece["file"]

    def flip(dst):
        p = os.path.join(dst, pfile)
        h = json.loads(open(p, "rb").read()[8:8 + int.from_bytes(open(p, "rb").read(8), "little")])
        off = 8 + int.from_bytes(open(p, "rb").read(8), "little") + h[piece["key"]]["data_offsets"][0]
        with open(p, "r+b") as f:
            f.seek(off + 5)
            b = f.read(1)
            f.seek(off + 5)
            f.write(bytes([b[0] ^ 0x10]))

    def lie(dst):  # the header claims another shape for the piece
        p = os.path.join(dst, pfile)
        raw = open(p, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        h = json.loads(raw[8:8 + n])
        h[piece["key"]]["shape"] = [h[piece["key"]]["shape"][0] + 1] + h[piece["key"]]["shape"][1:]
        text = json.dumps(h).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        data = raw[8 + n:]
        # keep the data offsets valid for the new header length
        open(p, "wb").write(len(text).to_bytes(8, "little") + text + data)

    def edit_index(dst, edit):
        p = os.path.join(dst, "index.json")
        ix = json.load(open(p))
        edit(ix["tensors"]["s0_f32"]["pieces"])
        json.dump(ix, open(p, "w"))

    def overlap(ps):  # piece 1 claims rows of piece 0
        ps[1]["box"][0][0] -= 1

    for tag, mutate, needles in (
            ("flip", flip, (pfile, piece["key"], "checksum")),
            ("missing", lambda dst: os.remove(os.path.join(dst, pfile)), (pfile,)),
            ("lie", lie, (pfile, piece["key"])),
            ("overlap", lambda dst: edit_index(dst, overlap), ("s0_f32", "overlap")),
            ("hole", lambda dst: edit_index(dst, lambda ps: ps.pop()), ("s0_f32", "elements"))):
        bad = corrupt_copy(tag, mutate)
        c.drop("s0_f32") if "s0_f32" in c.list() else None
        msgs = set()
        for r in range(4):  # every client gets the same error
            with d.connect(r) as cr:
                msgs.add(expect(tshard.TshardError, lambda: cr.load(bad, names=["s0_f32"], key=f"{tag}"),
                                f"{tag}: load fails at rank {r}", needles))
        check(len(msgs) == 1, f"{tag}: one error for every client: {msgs}")
        check("s0_f32" not in c.list(), f"{tag}: no tensor created")
        if tag == "flip":
            expect(ck.CheckpointError, lambda: ck.read(bad, "s0_f32", verify=True),
                   "reader: flipped byte", (pfile, piece["key"]))
        # a whole-checkpoint load that fails creates none of the others either
        for n in c.list():
            c.drop(n)
        expect(tshard.TshardError, lambda: c.load(bad), f"{tag}: load of all", needles[:1])
        check(c.list() == [], f"{tag}: a failed load of all creates nothing: {c.list()}")
    # a resharded load reads only parts of pieces: the verifier still reads the whole one
    bad = os.path.join(work, "flip")
    expect(tshard.errors.CorruptError,
           lambda: c.load(bad, names=["s0_f32"], attr="mesh=[4] placements=[S(1)]"),
           "flip: resharded load", (pfile, "checksum"))

    # the move path: a flipped byte in one piece of big_f32, loaded S(1): every client gets the
    # same error naming the file and the piece, and nothing is created
    bpiece = idx["tensors"]["big_f32"]["pieces"][2]

    def flip_big(dst):
        p = os.path.join(dst, bpiece["file"])
        raw = open(p, "rb").read()
        n = int.from_bytes(raw[:8], "little")
        off = 8 + n + json.loads(raw[8:8 + n])[bpiece["key"]]["data_offsets"][0] + 4097
        with open(p, "r+b") as f:
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0x01]))

    bad = corrupt_copy("flip_big", flip_big)
    c.drop("big_f32") if "big_f32" in c.list() else None
    msgs = set()
    for r in range(4):
        with d.connect(r) as cr:
            msgs.add(expect(tshard.errors.CorruptError,
                            lambda: cr.load(bad, names=["big_f32"], attr="mesh=[4] placements=[S(1)]",
                                            key="flip_big"),
                            f"flip_big: resharded load fails at rank {r}",
                            (bpiece["file"], bpiece["key"], "checksum")))
    check(len(msgs) == 1, f"flip_big: one error for every client: {msgs}")
    check("big_f32" not in c.list(), "flip_big: no tensor created")
    c.load(c1, names=["big_f32"], attr="mesh=[4] placements=[S(1)]")
    check(np.array_equal(c.get("big_f32"), ref["big_f32"]), "big_f32 loaded S(1) on 4")
    c.drop("big_f32")

    c.load(c1, names=["kept"])
    # the CLI
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job)
    tsh = os.path.join(bin_dir, "tshard")
    out = subprocess.run([tsh, "checkpoint", "show", c1], capture_output=True, text=True, env=env)
    check(out.returncode == 0 and "s0_f32" in out.stdout and "rank-0000" in out.stdout,
          f"checkpoint show: {out.stdout} {out.stderr}")
    c3 = os.path.join(work, "c3")
    out = subprocess.run([tsh, "save", c3, "kept"], capture_output=True, text=True, env=env)
    check(out.returncode == 0 and ck.names(c3) == ["kept"], f"tshard save: {out.stderr}")
    c.drop("kept")
    out = subprocess.run([tsh, "load", c3, "kept", "--default-attr", "mesh=[2] placements=[S(1)]"],
                         capture_output=True, text=True, env=env)
    check(out.returncode == 0 and np.array_equal(c.get("kept"), kept_ref), f"tshard load: {out.stderr}")
    c.drop("kept")
    out = subprocess.run([tsh, "load", os.path.join(work, "flip")], capture_output=True, text=True,
                         env=env)
    check(out.returncode == 1 and pfile in out.stderr, f"tshard load corrupt: {out.stderr}")
    out = subprocess.run([tsh, "checkpoint", "show", work], capture_output=True, text=True)
    check(out.returncode != 0 and "index.json" in out.stderr, "checkpoint show of no checkpoint")
    c.close()
    code = d.stop()
    check(code == 0, f"4 daemons exit 0 after shutdown ({code}):\n{d.logs()[-3000:]}")

# a rank killed mid-save: the previous checkpoint stays whole and loadable
killed_env = {"TSHARD_CKPT_FAIL_RANK": "2", "TSHARD_CKPT_FAIL_AFTER": "8", "TSHARD_CKPT_FAIL_KILL": "1"}
old = {k: os.environ.get(k) for k in killed_env}
os.environ.update(killed_env)
try:
    with Daemons(bin_dir, 4) as d:
        for k in killed_env:
            del os.environ[k]
        with d.connect(0) as c:
            c.create("k", "f32", (16, 4), "mesh=[4] placements=[S(0)]")
            c.put("k", np.ones((16, 4), np.float32))
            before = {f: open(os.path.join(c1, f), "rb").read() for f in os.listdir(c1)}
            expect(tshard.TshardError, lambda: c.save(c1, all=True, overwrite=True),
                   "save with a rank killed")
        after = {f: open(os.path.join(c1, f), "rb").read() for f in os.listdir(c1)}
        check(before == after, "killed save: the previous checkpoint is unchanged")
        check(np.array_equal(ck.read(c1, "s0_f32", verify=True), ref["s0_f32"]),
              "killed save: previous checkpoint still reads")
finally:
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

# an independent writer: its own files and index, pieces from no attribute, 2 files + 1
lib = ctypes.CDLL("libxxhash.so.0")
lib.XXH3_64bits.restype = ctypes.c_uint64
lib.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
ind = os.path.join(work, "indep")
os.mkdir(ind)
W = (np.arange(13 * 7) * 3 - 50).astype(np.float32).reshape(13, 7)
B16 = np.arange(5 * 4, dtype=np.int64).reshape(5, 4) - 7
boxes = {"W": [((0, 4), (0, 7)), ((4, 13), (0, 3)), ((4, 13), (3, 7))], "B": [((0, 5), (0, 4))]}
files = {"a.safetensors": [("W", 0), ("B", 0)], "b.safetensors": [("W", 2), ("W", 1)]}
arrays = {"W": W, "B": B16}
index = {"format": "tshard-checkpoint", "version": 1, "checksum": "xxh3-64", "saved_ranks": 2,
         "tensors": {"W": {"dtype": "f32", "shape": [13, 7], "attr": "mesh=[2] placements=[S(0)]",
                           "partial_kept": False, "pieces": []},
                     "B": {"dtype": "i64", "shape": [5, 4], "attr": "mesh=[1] placements=[R]",
                           "partial_kept": False, "pieces": []}}}
stdt = {"W": "F32", "B": "I64"}
for fname, items in files.items():
    header, blobs, off = {}, [], 0
    for tname, k in items:
        (r0, r1), (c0, c1_) = boxes[tname][k]
        blob = np.ascontiguousarray(arrays[tname][r0:r1, c0:c1_]).astype("<" + arrays[tname].dtype.str[1:])
        raw = blob.tobytes()
        key = f"{tname}/piece{k}"
        header[key] = {"dtype": stdt[tname], "shape": [r1 - r0, c1_ - c0],
                       "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
        buf = np.frombuffer(raw, np.uint8)
        index["tensors"][tname]["pieces"].append(
            {"file": fname, "key": key, "box": [[r0, r1], [c0, c1_]],
             "xxh3": "%016x" % lib.XXH3_64bits(buf.ctypes.data, buf.nbytes)})
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(ind, fname), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
json.dump(index, open(os.path.join(ind, "index.json"), "w"))
check(np.array_equal(ck.read(ind, "W", verify=True), W), "reader: independent writer's W")
check(np.array_equal(ck.read(ind, "B", verify=True), B16), "reader: independent writer's B")

# other rank counts: 3 (saved attributes do not fit) and 6; these daemons cut the pieces they save
# into chunks of about 16 KiB (--ckpt-chunk)
with Daemons(bin_dir, 3, extra_args=("--ckpt-chunk", "16K")) as d, d.connect(1) as c:
    expect(tshard.errors.BadAttributeError, lambda: c.load(c1, names=["s0_f32"]),
           "saved on 4, loaded on 3 under the saved attribute", ("s0_f32", "attribute"))
    check(c.list() == [], "nothing created")
    for name, (dt, shape, attr, layout) in CASES.items():
        tgt = "mesh=[3] placements=[S(%d)]" % (len(shape) - 1) if shape else "mesh=[3] placements=[R]"
        c.load(c1, names=[name], attr=tgt)
        check(np.array_equal(c.get(name), ref[name]), f"loaded on 3 under {tgt}: {name}")
    c.load(c1, names=["kept"], attr="mesh=[1,3] placements=[R,S(0)]")
    check(np.array_equal(c.get("kept"), kept_ref), "kept on 3")
    c.load(ind, attr="mesh=[3] placements=[S(1)]")
    check(np.array_equal(c.get("W"), W) and np.array_equal(c.get("B"), B16),
          "the daemons load the independent writer's checkpoint")
    c4 = os.path.join(work, "c4")
    c.save(c4, names=["W"])
    check(np.array_equal(ck.read(c4, "W"), W), "saved on 3, read back")
    # chunked pieces: every case saved from its S(last dim) layout on 3, read by the reader and
    # loaded back under another attribute
    c5 = os.path.join(work, "c5")
    c.save(c5, names=list(CASES))
    ix5 = ck.index(c5)
    check(len(ix5["tensors"]["big_f32"]["pieces"]) >= 30,
          f"big_f32 cut into chunks: {len(ix5['tensors']['big_f32']['pieces'])} pieces")
    for name in CASES:
        check(np.array_equal(ck.read(c5, name, verify=True), ref[name]), f"reader, chunked: {name}")
        c.drop(name)
        tgt = "mesh=[3] placements=[S(0)]" if CASES[name][1] else "mesh=[3] placements=[R]"
        c.load(c5, names=[name], attr=tgt)
        check(np.array_equal(c.get(name), ref[name]), f"chunked, loaded under {tgt}: {name}")
    c.close()
    code = d.stop()
    check(code == 0, f"3 daemons exit 0 after shutdown ({code}):\n{d.logs()[-3000:]}")

with Daemons(bin_dir, 6) as d, d.connect(5) as c:
    c.load(c1)  # the saved attributes name ranks 0-3 of 6
    for name in CASES:
        check(np.array_equal(c.get(name), ref[name]), f"loaded on 6, saved attr: {name}")
    c.drop("s0r_i32")
    c.load(c1, names=["s0r_i32"], attr="mesh=[2,3] placements=[S(1),S(0)]")
    check(np.array_equal(c.get("s0r_i32"), ref["s0r_i32"]), "loaded on 6 under [2,3]")
    c.load(os.path.join(work, "c4"), names=["W"])
    check(np.array_equal(c.get("W"), W), "saved on 3, loaded on 6")
    c.drop("big_f32")
    c.load(c1, names=["big_f32"], attr="mesh=[6] placements=[S(1)]")
    check(np.array_equal(c.get("big_f32"), ref["big_f32"]), "saved on 4, loaded S(1) on 6")
    c.close()
    code = d.stop()
    check(code == 0, f"6 daemons exit 0 after shutdown ({code}):\n{d.logs()[-3000:]}")

shutil.rmtree(work)
check.finish()
