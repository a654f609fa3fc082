#!/usr/bin/python3
"""Checkpoints that are not lost by accident, through real daemons and the real clients (Python,
the CLI, the raw protocol):

- a save asked no tensors is refused, saying how to save everything (Python all=True, the CLI
  --all, the daemon's own check for other clients), as is a safetensors export; names, globs
  (layers.*.weight) and a prefix save exactly those tensors (read back with the pure-numpy
  reader against numpy); a glob or prefix that matches nothing is refused naming it;
- a save over a checkpoint is refused on every rank naming the directory and overwrite=True /
  --overwrite, synchronous and asynchronous alike; an overwrite that fails (a name that does not
  exist) leaves the old checkpoint byte for byte; overwrite=True replaces it;
- what an interrupted save left beside its target: a rank killed mid-save (the leader, so nobody
  removes its temporary directory), and one made by hand in the same format (struct + json), are
  removed by the next save into that directory and by `tshard checkpoint clean DIR [--json]`,
  which leaves one a save in progress holds (its flock taken here);
- --json of show, import-safetensors and export-safetensors (the README's examples among them),
  parsed and compared with what was put; the --help examples of save, export-safetensors and checkpoint, and the README's new
  checkpoint lines, run as printed.

usage: test_ckpt_safe.py BUILD_BIN_DIR"""
import fcntl
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile

import numpy as np

import tshard
import tshard.checkpoint as ck
from tshard import tshard_pb2 as pb
from checks import Checks, raw_call
from harness import Daemons

bin_dir = sys.argv[1]
src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-ckptsafe-")
rng = np.random.default_rng(7)
NP = 3
ATTR = "mesh=[3] placements=[S(0)]"
ST = {n: tshard.errors.error_for(s, "").status
      for n, s in (("INVALID", 1), ("NOT_FOUND", 14), ("EXISTS", 15))}


def put_model(c):
    """Six tensors: layers.{0,1}.{weight,bias}, head.weight, step; their numpy values."""
    ref = {}
    for name, shape in (("layers.0.weight", (6, 4)), ("layers.0.bias", (6,)),
                        ("layers.1.weight", (9, 4)), ("layers.1.bias", (9,)),
                        ("head.weight", (3, 9)), ("step", (3,))):
        ref[name] = rng.standard_normal(shape).astype(np.float32)
        c.create(name, "f32", shape, ATTR)
        c.put(name, ref[name])
    return ref


def same_files(d, files):
    return {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)} == files


def files_of(d):
    return {f: open(os.path.join(d, f), "rb").read() for f in os.listdir(d)}


def leftovers(d):
    parent, base = os.path.split(d)
    return sorted(f for f in os.listdir(parent) if f.startswith(f".{base}.tmp-"))


def cli(d, *args, cwd=None):
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job)
    return subprocess.run([os.path.join(bin_dir, "tshard"), *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120)


def selection(d, c, ref):
    # nothing asked: refused, saying how to save everything
    ck0 = os.path.join(work, "none")
    check.expect(ST["INVALID"], lambda: c.save(ck0), "save of no names", "all=True")
    check.expect(ST["INVALID"], lambda: c.save(ck0, wait=False), "async save of no names",
                 "all=True")
    check.expect(ST["INVALID"], lambda: c.save(ck0, ["step"], all=True), "names and all",
                 "one of")
    check.expect(ST["INVALID"], lambda: c.save_safetensors(ck0 + ".safetensors"),
                 "export of no names", "all=True")
    ans = raw_call(c, save=pb.SaveRequest(dir=ck0))
    check(ans.status == ST["INVALID"] and "--all in the CLI" in ans.message,
          f"the daemon refuses a save of no names from any client: {ans.status} {ans.message}")
    ans = raw_call(c, export_safetensors=pb.ExportSafetensorsRequest(path=ck0 + ".safetensors"))
    check(ans.status == ST["INVALID"] and "all=True" in ans.message,
          f"the daemon refuses an export of no names: {ans.status} {ans.message}")
    r = cli(d, "save", ck0)
    check(r.returncode == 2 and "--all" in r.stderr, f"tshard save DIR: {r.returncode} {r.stderr}")
    r = cli(d, "export-safetensors", ck0 + ".safetensors")
    check(r.returncode == 2 and "--all" in r.stderr, f"tshard export-safetensors: {r.stderr}")
    for args in (("save", ck0, "--all", "step"), ("save", ck0, "--prefix", "layers.", "step"),
                 ("export-safetensors", ck0 + ".safetensors", "--all", "--prefix", "x")):
        r = cli(d, *args)
        check(r.returncode == 2 and "give one of NAME..., --prefix P or --all" in r.stderr,
              f"tshard {' '.join(args[:1] + args[2:])}: {r.returncode} {r.stderr}")
    check(not os.path.exists(ck0) and not os.path.exists(ck0 + ".safetensors"),
          "refusals write nothing")
    # names, a glob, a prefix, all: exactly those
    ways = {"names": (dict(names=["step", "head.weight"]), ["head.weight", "step"]),
            "glob": (dict(names="layers.*.weight"), ["layers.0.weight", "layers.1.weight"]),
            "globs": (dict(names=["layers.?.bias", "st[e]p"]),
                      ["layers.0.bias", "layers.1.bias", "step"]),
            "prefix": (dict(prefix="layers.1."), ["layers.1.bias", "layers.1.weight"]),
            "all": (dict(all=True), sorted(ref))}
    for way, (kw, want) in ways.items():
        path = os.path.join(work, f"by-{way}")
        res = c.save(path, **kw)
        check(sorted(ck.names(path)) == want and res["tensors"] == len(want),
              f"save by {way}: {sorted(ck.names(path))}, want {want}")
        check(all(np.array_equal(ck.read(path, n, verify=True), ref[n]) for n in want),
              f"save by {way}: the values are numpy's")
    r = cli(d, "save", os.path.join(work, "cli-glob"), "layers.*.bias", "--json")
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    check(info.get("tensors") == 2 and
          sorted(ck.names(os.path.join(work, "cli-glob"))) == ["layers.0.bias", "layers.1.bias"],
          f"tshard save with a glob: {r.stdout} {r.stderr}")
    r = cli(d, "save", os.path.join(work, "cli-prefix"), "--prefix", "head.")
    check(r.returncode == 0 and ck.names(os.path.join(work, "cli-prefix")) == ["head.weight"],
          f"tshard save --prefix: {r.stdout} {r.stderr}")
    check.expect(ST["NOT_FOUND"], lambda: c.save(os.path.join(work, "g0"), "conv.*"),
                 "a glob matching nothing", "'conv.*' matches no tensor")
    check.expect(ST["NOT_FOUND"], lambda: c.save(os.path.join(work, "g0"), prefix="conv."),
                 "a prefix matching nothing", "'conv.'")
    out = os.path.join(work, "glob.safetensors")
    files = c.save_safetensors(out, "layers.*.weight")
    check(files == [out], f"export by glob: {files}")
    r = cli(d, "export-safetensors", os.path.join(work, "pre.safetensors"), "--prefix", "layers.0",
            "--json")
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got == {"path": os.path.join(work, "pre.safetensors"),
                  "files": [os.path.join(work, "pre.safetensors")]},
          f"export-safetensors --prefix --json: {r.stdout} {r.stderr}")
    for path, want in ((out, ["layers.0.weight", "layers.1.weight"]),
                       (os.path.join(work, "pre.safetensors"), ["layers.0.bias", "layers.0.weight"])):
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        names = sorted(k for k in head if k != "__metadata__")
        check(names == want, f"{os.path.basename(path)} holds {names}, want {want}")
        for k in names:
            lo, hi = head[k]["data_offsets"]
            a = np.frombuffer(raw[8 + n + lo:8 + n + hi], np.float32).reshape(head[k]["shape"])
            check(np.array_equal(a, ref[k]), f"{os.path.basename(path)}: {k} is numpy's")


def overwrite(d, c, ref):
    path = os.path.join(work, "ov")
    c.save(path, all=True)
    before = files_of(path)
    for r in range(NP):  # every rank refuses alike
        with d.connect(r) as cr:
            check.expect(ST["EXISTS"], lambda: cr.save(path, "step"), f"save over it, rank {r}",
                         f"'{path}' already holds a checkpoint")
            check.expect(ST["EXISTS"], lambda: cr.save(path, "step", wait=False).result(60),
                         f"async save over it, rank {r}", "overwrite=True")
    r = cli(d, "save", path, "step")
    check(r.returncode == 1 and path in r.stderr and "--overwrite" in r.stderr and
          "EXISTS" in r.stderr, f"tshard save over a checkpoint: {r.stderr}")
    check(same_files(path, before) and leftovers(path) == [], "refusals left it as it was")
    # an overwrite that fails: the old one stays, byte for byte, and still loads
    check.expect(ST["NOT_FOUND"], lambda: c.save(path, ["step", "nope"], overwrite=True),
                 "overwrite with a name that does not exist", "nope")
    check(same_files(path, before) and leftovers(path) == [], "failed overwrite: old one intact")
    c.put("step", ref["step"] + 1)
    check.expect(ST["NOT_FOUND"], lambda: c.save(path, ["step", "nope"], overwrite=True,
                                                  wait=False).result(60),
                 "async overwrite with a name that does not exist", "nope")
    check(same_files(path, before), "failed async overwrite: old one intact")
    c.drop("step")
    c.load(path, names=["step"])
    check(np.array_equal(c.get("step"), ref["step"]), "the old checkpoint still loads")
    # overwrite=True replaces it, atomically, with exactly what was asked
    res = c.save(path, "step", overwrite=True)
    check(res["tensors"] == 1 and ck.names(path) == ["step"] and
          np.array_equal(ck.read(path, "step", verify=True), ref["step"]),
          f"overwrite=True replaced it: {ck.names(path)}")
    c.put("step", ref["step"] * 3)
    c.save(path, "step", overwrite=True, wait=False).result(60)
    c.wait_saves(timeout=60)
    check(np.array_equal(ck.read(path, "step"), ref["step"] * 3), "async overwrite=True")
    r = cli(d, "save", path, "--prefix", "layers.", "--overwrite")
    check(r.returncode == 0 and sorted(ck.names(path)) == sorted(k for k in ref if
                                                                 k.startswith("layers.")),
          f"tshard save --overwrite: {r.stdout} {r.stderr}")
    check(leftovers(path) == [], f"nothing left beside it: {leftovers(path)}")
    c.put("step", ref["step"])


def hand_leftover(path, stamp):
    """A temporary directory as a save cut short leaves it: a rank file (a safetensors header
    and part of its bytes), no index."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{stamp}")
    os.mkdir(tmp, 0o700)
    head = json.dumps({"w#0": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    with open(os.path.join(tmp, "rank-00000.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + struct.pack("<2f", 1.0, 2.0))
    return tmp


def cleaning(d, c, ref):
    path = os.path.join(work, "cl")
    c.save(path, all=True)
    a, b = hand_leftover(path, "1a2b3c"), hand_leftover(path, "ff00")
    other = os.path.join(work, ".cl2.tmp-1234")  # another directory's: not touched
    os.mkdir(other)
    lookalike = os.path.join(work, ".cl.tmp-99")  # a file named alike (an export's): not touched
    open(lookalike, "w").close()
    c.put("step", ref["step"] + 5)
    c.save(path, "step", overwrite=True)
    check(leftovers(path) == [".cl.tmp-99"] and os.path.isdir(other),
          f"the next save removed the leftovers, only its own: {leftovers(path)}")
    os.unlink(lookalike)
    check(np.array_equal(ck.read(path, "step"), ref["step"] + 5), "and saved")
    # tshard checkpoint clean: what it removed; one a save holds is left
    a = hand_leftover(path, "abc")
    held = hand_leftover(path, "def")
    fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    r = cli(d, "checkpoint", "clean", path, "--json")
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got == {"dir": path, "removed": [a], "in_use": [held]},
          f"checkpoint clean --json: {r.stdout} {r.stderr}")
    check(not os.path.exists(a) and os.path.isdir(held), "removed the one, left the held one")
    os.close(fd)
    r = cli(d, "checkpoint", "clean", path)
    check(r.returncode == 0 and r.stdout == f"removed 1 unfinished save of {path}:\n{held}\n",
          f"checkpoint clean: {r.stdout!r} {r.stderr}")
    r = cli(d, "checkpoint", "clean", path)
    check(r.returncode == 0 and r.stdout == f"removed 0 unfinished saves of {path}\n",
          f"checkpoint clean, nothing left: {r.stdout!r}")
    check(sorted(ck.names(path)) == ["step"], "the checkpoint itself untouched")
    r = cli(d, "checkpoint", "clean", os.path.join(work, "nodir", "x"))
    check(r.returncode == 3 and "nodir" in r.stderr, f"clean in a missing directory: {r.stderr}")
    r = cli(d, "checkpoint", "clean")
    check(r.returncode == 2 and "clean DIR" in r.stderr, f"clean without DIR: {r.stderr}")
    c.put("step", ref["step"])


def killed_leader():
    """Rank 0 (the leader, which removes the temporary directory on failure) killed while it
    writes: its temporary directory stays; a new job's next save into the directory removes
    it."""
    path = os.path.join(work, "killed")
    env = {"TSHARD_CKPT_FAIL_RANK": "0", "TSHARD_CKPT_FAIL_AFTER": "8", "TSHARD_CKPT_FAIL_KILL": "1"}
    os.environ.update(env)
    try:
        d = Daemons(bin_dir, NP)
    finally:
        for k in env:
            del os.environ[k]
    with d:
        with d.connect(1) as c:
            c.create("w", "f32", (12, 4), ATTR)
            w = rng.standard_normal((12, 4)).astype(np.float32)
            c.put("w", w)
            try:
                c.save(path, all=True, wait=False).result(60)
                c.wait_saves(timeout=60)
                check(False, "a save whose leader was killed succeeded")
            except tshard.TshardError:
                pass
    left = leftovers(path)
    check(len(left) == 1 and not os.path.exists(path), f"the killed save left {left}")
    with Daemons(bin_dir, NP) as d, d.connect(0) as c:
        c.create("w", "f32", (12, 4), ATTR)
        c.put("w", w)
        c.save(path, "w")
        check(leftovers(path) == [] and np.array_equal(ck.read(path, "w"), w),
              f"the next save removed it and saved: {leftovers(path)}")


def json_outputs(d, c, ref):
    r = cli(d, "show", "layers.1.weight", "--json")
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    rows = np.array_split(np.arange(9), NP)
    want = {"name": "layers.1.weight", "dtype": "f32", "shape": [9, 4],
            "attr": c.describe("layers.1.weight")["attr"],
            "slices": [{"rank": k, "lo": [int(rows[k][0]), 0], "hi": [int(rows[k][-1]) + 1, 4]}
                       for k in range(NP)]}
    check(got == want, f"show --json: {r.stdout} {r.stderr}")
    r = cli(d, "show", "--shape", "5,8", "--attr", "mesh=[2,2]@3,1,0,2 placements=[S(1),R]",
            "--json")
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got.get("name") is None and got.get("shape") == [5, 8] and
          got.get("slices") == [{"rank": 3, "lo": [0, 0], "hi": [5, 4]},
                                {"rank": 1, "lo": [0, 0], "hi": [5, 4]},
                                {"rank": 0, "lo": [0, 4], "hi": [5, 8]},
                                {"rank": 2, "lo": [0, 4], "hi": [5, 8]}],
          f"show --attr --json: {r.stdout} {r.stderr}")
    path = os.path.join(work, "imp.safetensors")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    head = json.dumps({"m.a": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
                       "m.b": {"dtype": "F32", "shape": [2], "data_offsets": [48, 56]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + a.tobytes() + struct.pack("<2f", 5, 6))
    r = cli(d, "import-safetensors", path, "--strip-prefix", "m.", "--default-attr",
            "mesh=[3] placements=[R]", "--json")
    got = json.loads(r.stdout) if r.returncode == 0 else {}
    check(got == {"path": path, "created": ["a", "b"]}, f"import --json: {r.stdout} {r.stderr}")
    check(np.array_equal(c.get("a"), a) and np.array_equal(c.get("b"), [5, 6]), "imported values")
    c.drop_many(["a", "b"])


def run_lines(d, lines):
    """Command lines as printed (tshard on the PATH), in a fresh directory with ckpt/ and out/."""
    run_dir = tempfile.mkdtemp(prefix="doc-", dir=work)
    for sub in ("ckpt", "out"):
        os.mkdir(os.path.join(run_dir, sub))
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job,
               PATH=bin_dir + os.pathsep + os.environ["PATH"])
    for line in lines:
        r = subprocess.run(line, shell=True, cwd=run_dir, capture_output=True, text=True,
                           env=env, timeout=120)
        check(r.returncode == 0, f"`{line}`: {r.returncode} {r.stdout} {r.stderr}")
    return run_dir


def documented(d, c, ref):
    """The --help examples of save, export-safetensors and checkpoint, and docs/checkpoints.md's
    checkpoint lines with the new flags, as printed, on the tensors they name."""
    lines = []
    for sub in ("save", "export-safetensors", "checkpoint"):
        r = subprocess.run([os.path.join(bin_dir, "tshard"), sub, "--help"], capture_output=True,
                           text=True, timeout=60)
        lines += [ln.strip() for ln in r.stdout.split("example:\n", 1)[1].splitlines()]
        check(("clean DIR" if sub == "checkpoint" else "--all") in r.stdout,
              f"{sub} --help names its new option: {r.stdout}")
    c.create("w", "f32", (6,), ATTR)
    c.create("b", "f32", (6,), ATTR)
    run_dir = run_lines(d, lines)
    check(sorted(ck.names(os.path.join(run_dir, "ckpt/step100"))) == sorted(list(ref) + ["w", "b"])
          and sorted(ck.names(os.path.join(run_dir, "ckpt/layers"))) ==
          ["layers.0.weight", "layers.1.weight"], "the --help examples saved what they say")
    readme = open(os.path.join(src, "docs", "checkpoints.md")).read()
    sec = readme[readme.index("\n## Checkpoints\n"):]
    block = re.search(r"```sh\n(.*?)```", sec, re.S).group(1)
    new = [ln for ln in block.splitlines() if re.search(r"--all|--overwrite|clean|\*", ln)]
    check(len(new) == 4, f"the README's new checkpoint lines: {new}")
    run_dir = run_lines(d, new)
    check(np.array_equal(ck.read(os.path.join(run_dir, "ckpt/step100"), "step"), ref["step"]),
          "the README's lines saved the tensors")
    c.drop_many(["w", "b"])


def readme_json(d, c, ref):
    """The documented --json examples of show, export-safetensors and import-safetensors, as
    written (a code span's line break read as the space it renders as): the slices' boxes by
    hand, the export read back with struct + json, the import's values against numpy."""
    readme = "".join(open(os.path.join(src, p)).read()
                     for p in ("docs/clients.md", "docs/safetensors.md"))
    spans = [" ".join(m.split()) for m in re.findall(r"`(tshard [a-z-]+ [^`]*--json)`", readme)]
    show = [x for x in spans if x.startswith("tshard show --shape")]
    export = [x for x in spans if x.startswith("tshard export-safetensors")]
    imp = [x for x in spans if x.startswith("tshard import-safetensors")]
    check(len(show) == len(export) == len(imp) == 1, f"the README's --json examples: {spans}")
    if not (show and export and imp):
        return
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job,
               PATH=bin_dir + os.pathsep + os.environ["PATH"])
    run_dir = tempfile.mkdtemp(prefix="json-", dir=work)
    os.mkdir(os.path.join(run_dir, "out"))

    def run(line):
        r = subprocess.run(line, shell=True, cwd=run_dir, capture_output=True, text=True,
                           env=env, timeout=120)
        check(r.returncode == 0, f"`{line}`: {r.returncode} {r.stdout} {r.stderr}")
        return json.loads(r.stdout) if r.returncode == 0 else {}
    got = run(show[0])
    want = [{"rank": 2 * a + b, "lo": [10 * a, 6 * b], "hi": [10 * a + 10, 6 * b + 6]}
            for a in range(2) for b in range(2)]
    check(got.get("slices") == want and got.get("shape") == [20, 12] and got.get("name") is None,
          f"README show --json: {got}")
    out = os.path.join(run_dir, "out", "model.safetensors")
    got = run(export[0])
    check(got == {"path": "out/model.safetensors", "files": [out]}, f"README export --json: {got}")
    raw = open(out, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    check(sorted(k for k in head if k != "__metadata__") == sorted(ref), f"exported {list(head)}")
    for k, v in ref.items():
        lo, hi = head[k]["data_offsets"]
        check(np.array_equal(np.frombuffer(raw[8 + n + lo:8 + n + hi], np.float32)
                             .reshape(head[k]["shape"]), v), f"exported {k} is numpy's")
    c.drop_many(list(ref))
    got = run(imp[0])
    check(got.get("path") == "out/model.safetensors" and sorted(got.get("created", [])) ==
          sorted(ref), f"README import --json: {got}")
    check(all(np.array_equal(c.get(k), v) for k, v in ref.items()), "imported values are numpy's")


with Daemons(bin_dir, NP) as d:
    with d.connect(0) as c:
        ref = put_model(c)
        selection(d, c, ref)
        overwrite(d, c, ref)
        cleaning(d, c, ref)
        json_outputs(d, c, ref)
        documented(d, c, ref)
        readme_json(d, c, ref)
killed_leader()
check.finish()
