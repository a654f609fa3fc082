#!/usr/bin/python3
"""End-to-end test of Hugging Face safetensors import and export, with real daemons (4 ranks) and
the real clients (Python and the CLI).

The reference is independent of tshard: safetensors files are written here with struct and json
(write_file, write_index) and read back the same way (read_file, read_model), and every value is
compared with numpy.

- import of every dtype (F32 F64 F16 BF16 I8 I32 I64 U8 BOOL I16 U16 U32 U64 F8_E4M3 F8_E5M2;
  the 8-bit floats' every code) under row S(0), column S(1),
  replicated R and ragged splits: the whole tensor (get) and every rank's slice (get_slice,
  against the box describe names) equal numpy; each rank read only its own slice's bytes (the
  daemons' log lines "N bytes read here" against the slices' bytes);
- names: a prefix stripped, a rename table, a subset; an HF index of three shard files;
- export: one file and HF shards (max_shard_bytes), read back by the independent reader,
  __metadata__ given, kept from the import (until the tensor is dropped) or {"format": "pt"}, files 0600, no temporary file left, a blocked layout
  packed; the exported file imported again;
- export writing: column parts sharing pages, a box held by two replicas split between them,
  ragged bf16, odd-sized, empty and blocked tensors, exported twice to one path (the second
  replacing the first) and as shards, every rank writing through shared mappings (the daemons'
  log line says how; with TSHARD_CMA=0, single copies off as across nodes, with pwrite); an
  unwritable target directory refused alike on every rank with nothing left in it;
- bad files, each refused with the same error through every rank's client, naming the file and
  the tensor, and nothing created: truncated, overlapping data_offsets, out-of-range
  data_offsets, a header over 100 MB, a header that is not JSON, an unknown dtype, an
  unsupported one (C64: refused when imported, its file's other tensors imported by name), a
  shape that does not match its bytes; a name taken already (the other
  tensors of the import not created either);
- export refusals: a symbolic link as the target (left as it was), a partial tensor, a path not
  ending in .safetensors;
- SPMD: one process per rank with connect(group="all") imports and exports once;
- the CLI: import-safetensors with repeated --attr and --default-attr, export-safetensors with
  --max-shard-size and --metadata.

usage: test_safetensors.py BUILD_BIN_DIR"""
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard
from checks import Checks, error_of
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-safetensors-")
NP = 4
TIMEOUT = 30

ST = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16,
      "I8": np.int8, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_,
      "I16": np.int16, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
      "F8_E4M3": np.uint8, "F8_E5M2": np.uint8}
TS_DTYPE = {k: k.lower() for k in ST}  # F32 -> f32, ..., F8_E4M3 -> f8_e4m3


# ---- the independent reference: safetensors with struct and json ----------------------------
def write_file(path, tensors, metadata=None, header=None):
    """tensors: {name: (ST dtype, array)}; header: entries to override after layout."""
    hdr, blobs, off = {}, [], 0
    if metadata is not None:
        hdr["__metadata__"] = metadata
    for name, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    for name, patch in (header or {}).items():
        hdr[name].update(patch)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_file(path):
    """({name: array (BF16 as uint16 bits)}, {name: ST dtype}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out, dts = {}, {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=ST[e["dtype"]]).reshape(e["shape"])
        dts[name] = e["dtype"]
    return out, dts, hdr.get("__metadata__")


def read_model(path):
    """A file, or an HF index and its files: {name: array}."""
    if not path.endswith(".json"):
        return read_file(path)[0]
    with open(path) as f:
        wm = json.load(f)["weight_map"]
    out = {}
    for fn in sorted(set(wm.values())):
        arrays = read_file(os.path.join(os.path.dirname(path), fn))[0]
        out.update({k: v for k, v in arrays.items() if wm.get(k) == fn})
    return out


def sample(dt, shape, seed):
    rng = np.random.default_rng(seed)
    if dt in ("F32", "F64", "F16"):
        return rng.standard_normal(shape).astype(ST[dt])
    if dt == "BF16":  # bits of bf16 values: the top halves of f32s
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dt.startswith("F8"):  # every code, NaNs included, from a random start
        return ((np.arange(int(np.prod(shape))) + seed) % 256).astype(np.uint8).reshape(shape)
    if dt == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    info = np.iinfo(ST[dt])
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=ST[dt])


# ---- helpers -----------------------------------------------------------------------------------
def refused_everywhere(d, what, fn, status, needles):
    """fn(client) fails with status and a message holding every needle through every rank's
    client, the same message everywhere, and no tensor exists afterwards."""
    msgs = set()
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as c:
            st, msg = error_of(lambda: fn(c))
            check(st == status, f"{what}, rank {r}: status {st} ({msg}), want {status}")
            check(msg is not None and all(n in msg for n in needles),
                  f"{what}, rank {r}: message {msg!r} lacks one of {needles}")
            msgs.add(msg.split(": ", 2)[-1] if msg else msg)
            check(c.list() == [], f"{what}, rank {r}: nothing created: {c.list()}")
    check(len(msgs) == 1, f"{what}: one error for every client: {msgs}")


def box_of(info, rank):
    r = next(x for x in info["ranks"] if x["rank"] == rank)
    return tuple(slice(lo, hi) for lo, hi in zip(r["lo"], r["hi"]))


def slices_match(d, name, ref, what):
    """Every rank's slice equals the reference's box."""
    ok = True
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as c:
            info = c.describe(name)
            if not any(x["rank"] == r and x["bytes"] > 0 for x in info["ranks"]):
                continue
            got = c.get_slice(name)
            ok = ok and np.array_equal(got.view(ref.dtype), ref[box_of(info, r)])
    check(ok, f"{what}: every rank's slice of '{name}' equals numpy")


ATTRS = {"row": "mesh=[4] placements=[S(0)]", "col": "mesh=[4] placements=[S(1)]",
         "rep": "mesh=[4] placements=[R]",
         "ragged": "mesh=[4] placements=[S(0)] splits={0:[3,0,9,5]}"}


def bytes_read_here(d, path):
    """The bytes each rank's daemon read in its import of `path` (its log line). mpirun forwards
    the daemons' output to the log asynchronously: the lines are awaited (polled, 20 s at most)."""
    pat = re.compile(r"tshardd\[(\d+)\].*imported \d+ tensors from safetensors '"
                     + re.escape(path) + r"' \((\d+) bytes read here")
    deadline = time.monotonic() + 20
    while True:
        got = {int(m.group(1)): int(m.group(2)) for m in pat.finditer(d.logs())}
        if len(got) == NP or time.monotonic() > deadline:
            return got
        time.sleep(0.05)  # polling the log file for lines in transit, bounded by the deadline


def test_dtypes_and_attributes(d, c):
    tensors = {f"layer.{dt.lower()}": (dt, sample(dt, (17, 12), i)) for i, dt in enumerate(ST)}
    path = os.path.join(work, "model.safetensors")
    write_file(path, tensors, metadata={"format": "pt"})
    for kind, attr in ATTRS.items():
        created = c.load_safetensors(path, default=attr, prefix="layer.")
        check(created == [n.split(".", 1)[1] for n in tensors], f"{kind}: names {created}")
        for full, (dt, a) in tensors.items():
            name = full.split(".", 1)[1]
            info = c.describe(name)
            check(info["dtype"] == TS_DTYPE[dt] and info["shape"] == [17, 12],
                  f"{kind} {name}: dtype and shape {info['dtype']} {info['shape']}")
            check(np.array_equal(c.get(name).view(a.dtype), a), f"{kind} {name}: get equals numpy")
            slices_match(d, name, a, f"{kind} {dt}")
        c.drop_many(created)
    # each rank read only its own slice: a column split of one f32 tensor
    a = sample("F32", (64, 40), 99)
    path = os.path.join(work, "columns.safetensors")
    write_file(path, {"w": ("F32", a)})
    c.load_safetensors(path, {"w": ATTRS["col"]})
    per_rank = bytes_read_here(d, path)
    check(per_rank == {r: 64 * 10 * 4 for r in range(NP)},
          f"column split: bytes read per rank {per_rank}, want 2560 each")
    c.drop("w")


def test_names_and_index(d, c):
    path = os.path.join(work, "names.safetensors")
    a, b, e = sample("F32", (8, 4), 1), sample("I64", (5,), 2), sample("BF16", (4, 6), 3)
    write_file(path, {"model.a": ("F32", a), "model.b": ("I64", b), "lm_head": ("BF16", e)})
    got = c.load_safetensors(path, {"a": ATTRS["row"]}, prefix="model.")
    check(got == ["a"] and c.list() == ["a"], f"subset by attrs: {got}, {c.list()}")
    got = c.load_safetensors(path, default=ATTRS["rep"], names=["b"], prefix="model.")
    check(got == ["b"] and np.array_equal(c.get("b"), b), f"subset by names: {got}")
    got = c.load_safetensors(path, {"head": ATTRS["col"]}, rename={"lm_head": "head"})
    check(got == ["head"] and np.array_equal(c.get("head"), e), f"rename: {got}")
    c.drop_many(["a", "b", "head"])
    got = c.load_safetensors(path, {"a": ATTRS["col"], "b": None}, default=ATTRS["rep"],
                             prefix="model.", names=["a", "b"])
    check(got == ["a", "b"] and c.describe("b")["attr"] == "mesh=[4]@0-3 placements=[R]" and
          c.describe("a")["attr"] == "mesh=[4]@0-3 placements=[S(1)]",
          f"an attribute of None takes the default: {got}")
    c.drop_many(got)
    check.expect(tshard.errors.InvalidArgumentError.status,
                 lambda: c.load_safetensors(path, {"a": ATTRS["col"], "b": None},
                                            prefix="model."), "None without a default",
                 "no attribute for tensor 'b'")
    check(c.list() == [], f"None without a default: nothing created: {c.list()}")
    check.expect(tshard.errors.NotFoundError.status,
                 lambda: c.load_safetensors(path, {"nope": ATTRS["row"]}), "unknown name", "nope")
    check.expect(tshard.errors.InvalidArgumentError.status,
                 lambda: c.load_safetensors(path, names=["lm_head"]), "no attribute",
                 "no attribute for tensor 'lm_head'")
    # an HF index of three shard files
    parts = {f"h.{i}": ("F32", sample("F32", (6, 8), 10 + i)) for i in range(5)}
    files = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
             "model-00003-of-00003.safetensors"]
    where = {n: files[i % 3] for i, n in enumerate(parts)}
    hdir = os.path.join(work, "hf")
    os.mkdir(hdir)
    for fn in files:
        write_file(os.path.join(hdir, fn), {n: v for n, v in parts.items() if where[n] == fn})
    index = os.path.join(hdir, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": 5 * 6 * 8 * 4}, "weight_map": where}, f)
    got = c.load_safetensors(index, default=ATTRS["ragged"].replace("[3,0,9,5]", "[1,2,0,3]"))
    check(sorted(got) == sorted(parts), f"index: created {got}")
    check(all(np.array_equal(c.get(n), v) for n, (_, v) in parts.items()),
          "index: every tensor equals numpy")
    c.drop_many(got)


def test_export(d, c):
    tensors = {dt.lower(): (dt, sample(dt, (9, 8), 20 + i)) for i, dt in enumerate(ST)}
    src = os.path.join(work, "src.safetensors")
    write_file(src, tensors)
    attrs = {"f32": ATTRS["col"], "f64": ATTRS["rep"], "bf16": ATTRS["ragged"].replace(
        "[3,0,9,5]", "[0,4,0,5]")}
    c.load_safetensors(src, attrs, default=ATTRS["row"])
    c.create("blk", "f32", (20, 12), ATTRS["row"], layout="aB4b")
    blk = sample("F32", (20, 12), 30)
    c.put("blk", blk)
    out = os.path.join(work, "out", "model.safetensors")
    os.mkdir(os.path.dirname(out))
    files = c.save_safetensors(out, all=True, metadata={"format": "pt", "source": "tshard test"})
    check(files == [out], f"export: files {files}")
    arrays, dts, meta = read_file(out)
    check(meta == {"format": "pt", "source": "tshard test"}, f"export: metadata {meta}")
    want = {n: v for n, (_, v) in tensors.items()} | {"blk": blk}
    check(sorted(arrays) == sorted(want), f"export: names {sorted(arrays)}")
    check(all(np.array_equal(arrays[n], want[n]) for n in want),
          "export: every tensor read back equals numpy")
    check(all(dts[n] == dt for n, (dt, _) in tensors.items()), f"export: dtypes {dts}")
    check(stat.S_IMODE(os.stat(out).st_mode) == 0o600, "export: file mode 0600")
    check(os.listdir(os.path.dirname(out)) == ["model.safetensors"], "export: no temporary file")
    # shards: three files and an index
    sh = os.path.join(work, "out", "sharded.safetensors")
    files = c.save_safetensors(sh, names=["f64", "i64", "f32", "i8"], max_shard_bytes=800)
    check(len(files) == 4 and files[-1] == sh + ".index.json", f"shards: files {files}")
    check(os.path.basename(files[0]) == "sharded-00001-of-00003.safetensors",
          f"shards: first file {files[0]}")
    got = read_model(sh + ".index.json")
    check(sorted(got) == ["f32", "f64", "i64", "i8"] and
          all(np.array_equal(got[n], want[n]) for n in got), "shards: read back equal numpy")
    check(read_file(files[0])[2] == {"format": "pt"}, "shards: default metadata")
    # the export imported again
    c.drop_many(c.list())
    c.load_safetensors(sh + ".index.json", default=ATTRS["col"])
    check(all(np.array_equal(c.get(n), want[n]) for n in got), "shards: imported again")
    c.drop_many(c.list())
    # refusals
    c.load_safetensors(src, {"f32": ATTRS["row"]})
    link = os.path.join(work, "out", "link.safetensors")
    os.symlink(src, link)
    before = open(src, "rb").read()
    check.expect(tshard.errors.InvalidArgumentError.status,
                 lambda: c.save_safetensors(link, all=True), "symbolic link target", "not a regular file")
    check(os.path.islink(link) and open(src, "rb").read() == before, "symbolic link untouched")
    check.expect(tshard.errors.InvalidArgumentError.status,
                 lambda: c.save_safetensors(os.path.join(work, "out", "x.bin"), all=True), "suffix",
                 ".safetensors")
    c.create("p", "f32", (4, 4), "mesh=[4] placements=[P(sum)]")
    check.expect(tshard.errors.BadAttributeError.status,
                 lambda: c.save_safetensors(os.path.join(work, "out", "p.safetensors"), ["p"]),
                 "partial tensor", "partial")
    check(sorted(os.listdir(os.path.join(work, "out"))) ==
          sorted(["model.safetensors", "link.safetensors"] + [os.path.basename(f) for f in files]),
          f"refusals leave no file: {os.listdir(os.path.join(work, 'out'))}")
    c.drop_many(["f32", "p"])


def export_ways(d, path):
    """How each rank's daemon wrote its export to `path` ("mapped" or "pwrite", its log line),
    awaited as in bytes_read_here."""
    pat = re.compile(r"tshardd\[(\d+)\].*exported to safetensors '" + re.escape(path)
                     + r"' \(\d+ files, \d+ bytes written here, (\w+)\)")
    deadline = time.monotonic() + 20
    while True:
        got = {int(m.group(1)): m.group(2) for m in pat.finditer(d.logs())}
        if len(got) == NP or time.monotonic() > deadline:
            return got
        time.sleep(0.05)  # polling the log file for lines in transit, bounded by the deadline


def test_export_parts(d, c):
    """Parts that share pages and ragged, replicated, blocked, bf16, odd-sized and empty tensors,
    exported twice to one path (the second replacing the first) and as shards; every rank writes
    through shared mappings of the files, or with pwrite where single copies are off
    (TSHARD_CMA=0, as for ranks on several nodes)."""
    want = {"wide": ("F32", sample("F32", (300, 1000), 80)),  # column runs of 1000 bytes
            "halves": ("F32", sample("F32", (33, 257), 81)),
            "bf": ("BF16", sample("BF16", (17, 4099), 82)),
            "odd": ("I8", sample("I8", (4097,), 83)),
            "none": ("F32", np.zeros((0, 8), np.float32)),
            "blk": ("F32", sample("F32", (40, 64), 84))}
    attrs = {"wide": ATTRS["col"], "halves": "mesh=[2,2] placements=[S(1),R]",
             "bf": "mesh=[4] placements=[S(1)] splits={1:[1000,0,3000,99]}",
             "odd": ATTRS["row"], "none": ATTRS["row"], "blk": ATTRS["col"]}
    for n, (dt, v) in want.items():
        c.create(n, TS_DTYPE[dt], v.shape, attrs[n], layout="aB16b" if n == "blk" else None)
        if v.size:
            c.put(n, tshard.bf16_bits(v) if dt == "BF16" else v)
    way = "pwrite" if d.env.get("TSHARD_CMA") == "0" else "mapped"
    out = os.path.join(work, "parts", "model.safetensors")
    os.mkdir(os.path.dirname(out))
    for k in range(2):  # the second export replaces the first
        if k:
            want["wide"] = ("F32", want["wide"][1] + 1)
            c.put("wide", want["wide"][1])
        c.save_safetensors(out, all=True)
        arrays, dts, _ = read_file(out)
        check(sorted(arrays) == sorted(want) and
              all(np.array_equal(arrays[n], v) and dts[n] == dt for n, (dt, v) in want.items()),
              f"parts, export {k}: every tensor read back equals numpy")
        check(os.listdir(os.path.dirname(out)) == ["model.safetensors"],
              f"parts, export {k}: no temporary file")
    ways = export_ways(d, out)
    check(ways == {r: way for r in range(NP)}, f"parts: every rank wrote by {way}: {ways}")
    sh = os.path.join(work, "parts", "sharded.safetensors")
    files = c.save_safetensors(sh, all=True, max_shard_bytes=600000)
    got = read_model(sh + ".index.json")
    check(len(files) > 2 and sorted(got) == sorted(want) and
          all(np.array_equal(got[n], v) for n, (_, v) in want.items()),
          f"parts, shards: {len(files) - 1} files read back equal numpy")
    c.drop_many(list(want))


def test_export_unwritable(d, c):
    """An export into a directory that takes no new file: the creation's error on every rank,
    naming the file, and nothing left behind. Root writes into a mode 0555 directory, so there the
    directory is made immutable (chattr +i) where the filesystem allows it, else the case is
    skipped."""
    ro = os.path.join(work, "read-only")
    os.mkdir(ro)
    os.chmod(ro, 0o555)
    immutable = False
    try:
        if os.geteuid() == 0:
            immutable = subprocess.run(["chattr", "+i", ro], capture_output=True).returncode == 0
        try:
            open(os.path.join(ro, "probe"), "w").close()
            os.unlink(os.path.join(ro, "probe"))
            print("test_export_unwritable: no unwritable directory here, skipped")
            return
        except OSError:
            pass
        c.create("u", "f32", (64, 64), ATTRS["col"])
        for r in range(NP):
            with d.connect(r, timeout=TIMEOUT) as cr:
                st, msg = error_of(lambda: cr.save_safetensors(os.path.join(ro, "m.safetensors"), all=True))
                check(st == tshard.errors.CheckpointIoError.status and msg and
                      "cannot create" in msg and ro in msg,
                      f"unwritable directory, rank {r}: {st} {msg}")
        check(os.listdir(ro) == [], f"unwritable directory: nothing left: {os.listdir(ro)}")
        c.drop("u")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", ro], capture_output=True)
        os.chmod(ro, 0o755)


def test_metadata_kept(c):
    path = os.path.join(work, "meta.safetensors")
    a, b = sample("F32", (4, 4), 60), sample("I8", (8,), 61)
    meta = {"format": "pt", "model": "tiny"}
    write_file(path, {"a": ("F32", a), "b": ("I8", b)}, metadata=meta)
    c.load_safetensors(path, default=ATTRS["row"])
    out = os.path.join(work, "meta-out.safetensors")
    c.save_safetensors(out, all=True)
    check(read_file(out)[2] == meta, f"metadata kept from the import: {read_file(out)[2]}")
    c.save_safetensors(out, all=True, metadata={"format": "pt", "x": "y"})
    check(read_file(out)[2] == {"format": "pt", "x": "y"}, "metadata given wins")
    c.drop("b")
    c.create("b", "i8", (8,), ATTRS["rep"])
    c.save_safetensors(out, all=True)
    check(read_file(out)[2] == {"format": "pt"}, f"a re-created tensor keeps nothing: "
          f"{read_file(out)[2]}")
    c.save_safetensors(out, names=["a"])
    check(read_file(out)[2] == meta, "the imported tensor alone keeps its metadata")
    c.drop_many(["a", "b"])


def test_bad_files(d):
    good = {"a": ("F32", sample("F32", (6, 4), 40)), "b": ("I32", sample("I32", (3, 4), 41))}
    cases = []

    def case(name, what, status, needles, writer):
        path = os.path.join(work, "bad", name)
        writer(path)
        cases.append((what, path, status, needles))

    os.mkdir(os.path.join(work, "bad"))
    CORRUPT = tshard.errors.CorruptError.status
    BAD_DTYPE = tshard.errors.BadDtypeError.status

    def truncated(p):
        write_file(p, good)
        os.truncate(p, os.path.getsize(p) - 5)
    case("trunc.safetensors", "truncated", CORRUPT, ["trunc.safetensors", "'b'", "truncated"],
         truncated)
    case("overlap.safetensors", "overlapping", CORRUPT, ["overlap.safetensors", "overlap"],
         lambda p: write_file(p, good, header={"b": {"data_offsets": [48, 96]},
                                               "a": {"data_offsets": [0, 96]}}))
    case("range.safetensors", "out of range", CORRUPT, ["range.safetensors", "'b'", "outside"],
         lambda p: write_file(p, good, header={"b": {"data_offsets": [120, 168]}}))

    def huge(p):
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", (100 << 20) + 1) + b"{}")
    case("huge.safetensors", "header over 100 MB", CORRUPT, ["huge.safetensors", "100 MiB"], huge)

    def not_json(p):
        h = b'{"a": {"dtype": "F32", '
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"\0" * 96)
    case("notjson.safetensors", "not JSON", CORRUPT, ["notjson.safetensors", "not a JSON"],
         not_json)
    case("dtype.safetensors", "unknown dtype", BAD_DTYPE, ["dtype.safetensors", "'a'", "Q7"],
         lambda p: write_file(p, good, header={"a": {"dtype": "Q7"}}))
    case("c64.safetensors", "unsupported dtype", BAD_DTYPE,
         ["c64.safetensors", "'a'", "C64", "not supported", "BOOL I16 U16 U32 U64 F8_E4M3"],
         lambda p: write_file(p, good, header={"a": {"dtype": "C64", "shape": [6, 2]}}))
    case("shape.safetensors", "shape against bytes", CORRUPT,
         ["shape.safetensors", "'b'", "need"],
         lambda p: write_file(p, good, header={"b": {"shape": [4, 4]}}))
    for what, path, status, needles in cases:
        refused_everywhere(d, what, lambda c: c.load_safetensors(path, default=ATTRS["row"]),
                           status, needles)
    # a C64 entry (checked, kept) does not stop an import of the other tensors by name
    c64 = os.path.join(work, "bad", "c64.safetensors")
    with d.connect(0) as c:
        check(c.load_safetensors(c64, default=ATTRS["row"], names=["b"]) == ["b"],
              "C64 beside: 'b' imported by name")
        check(np.array_equal(c.get("b"), good["b"][1]), "C64 beside: 'b' as written")
        c.drop("b")
    # a name taken: nothing of the import is created
    ok = os.path.join(work, "bad", "ok.safetensors")
    write_file(ok, good)
    with d.connect(0) as c:
        c.create("b", "f32", (2, 2), ATTRS["rep"])
        check.expect(tshard.errors.ExistsError.status,
                     lambda: c.load_safetensors(ok, default=ATTRS["row"]), "name taken", "'b'")
        check(c.list() == ["b"], f"name taken: 'a' not created either: {c.list()}")
        c.drop("b")


SPMD = """
import sys, numpy as np, tshard
with tshard.connect(group="all", job=sys.argv[2]) as c:
    names = c.load_safetensors(sys.argv[1], {"w": "mesh=[4] placements=[S(0)]"})
    np.save(sys.argv[3] + f"-{c.ping()['rank']}.npy", c.get_slice("w"))
    files = c.save_safetensors(sys.argv[3] + ".safetensors", all=True)
    c.drop("w")
print(names, files)
"""


def test_spmd(d):
    """One process per rank (connect(group="all")): the import and the export run once, after
    every process asked."""
    path = os.path.join(work, "spmd.safetensors")
    w = sample("F32", (20, 6), 70)
    write_file(path, {"w": ("F32", w)})
    out = os.path.join(work, "spmd-out")
    r = subprocess.run(["mpirun", "-np", str(NP), "--oversubscribe", sys.executable, "-c", SPMD,
                        path, d.job, out], capture_output=True, text=True, timeout=90,
                       env=dict(d.env, TSHARD_SOCKET_DIR=d.dir))
    check(r.returncode == 0, f"spmd: {r.returncode} {r.stdout} {r.stderr[-2000:]}")
    rows = np.array_split(np.arange(20), NP)
    check(all(np.array_equal(np.load(f"{out}-{k}.npy"), w[rows[k]]) for k in range(NP)),
          "spmd: every rank's slice")
    per_rank = bytes_read_here(d, path)
    check(per_rank == {k: 5 * 6 * 4 for k in range(NP)} and d.logs().count(path) == NP,
          f"spmd: the import ran once, each rank reading its rows: {per_rank}")
    check(np.array_equal(read_file(out + ".safetensors")[0]["w"], w), "spmd: the export")


def test_cli(d):
    path = os.path.join(work, "cli.safetensors")
    a, b = sample("F16", (8, 8), 50), sample("U8", (12,), 51)
    write_file(path, {"m.a": ("F16", a), "m.b": ("U8", b)})
    cli = [os.path.join(bin_dir, "tshard"), "--socket", d.socket(0)]
    run = lambda *args: subprocess.run(cli[:1] + list(args) + cli[1:], capture_output=True,
                                       text=True, timeout=TIMEOUT)
    r = run("import-safetensors", path, "--strip-prefix", "m.", "--attr",
            "a=mesh=[4] placements=[S(1)]", "--default-attr", "mesh=[4] placements=[R]")
    check(r.returncode == 0 and "imported 2 tensors" in r.stdout, f"cli import: {r.stdout}{r.stderr}")
    out = os.path.join(work, "cli-out.safetensors")
    r = run("export-safetensors", out, "a", "b", "--max-shard-size", "100", "--metadata",
            "format=pt")
    check(r.returncode == 0 and out + ".index.json" in r.stdout, f"cli export: {r.stdout}{r.stderr}")
    got = read_model(out + ".index.json")
    check(np.array_equal(got.get("a"), a) and np.array_equal(got.get("b"), b),
          "cli export: read back equals numpy")
    r = run("export-safetensors", out, "--max-shard-size", "5Q")
    check(r.returncode == 2 and "--max-shard-size" in r.stderr,
          f"cli: a bad --max-shard-size is a usage error: {r.returncode} {r.stderr}")
    r = run("import-safetensors", path, "--attr", "nothing")
    check(r.returncode == 2 and "PATTERN=ATTR" in r.stderr,
          f"cli: --attr without NAME= is a usage error: {r.returncode} {r.stderr}")
    with d.connect(0) as c:
        c.drop_many(c.list())


def main():
    d = Daemons(bin_dir, NP)
    try:
        with d.connect(0, timeout=TIMEOUT) as c:
            test_dtypes_and_attributes(d, c)
            test_names_and_index(d, c)
            test_export(d, c)
            test_export_parts(d, c)
            test_export_unwritable(d, c)
            test_metadata_kept(c)
        test_bad_files(d)
        test_spmd(d)
        test_cli(d)
    finally:
        rc = d.stop()
        check(rc == 0, f"the daemons exit 0 (sanitizers quiet): {rc}\n{d.logs()[-4000:]}")
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
