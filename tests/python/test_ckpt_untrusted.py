#!/usr/bin/python3
"""End-to-end test of checkpoints met on untrusted ground, with real daemons (3 ranks) and the
real clients: what a save may replace and the modes it writes, and loads of directories someone
else prepared.

- save: a directory holding a stray index.json, other files and a subdirectory is refused with a
  message naming it and why, on every rank alike, and left exactly as it was (no temporary
  directory left beside it); so is a directory with a tshard index and a file the index does not
  name. An empty 0700 target, a new target and a replaced checkpoint come back 0700 with files
  0600 (stat).
- load: a FIFO as index.json or as a piece file, a symbolic link or a directory as a piece file,
  a symbolic link as index.json: CORRUPT naming the file, well within the client's timeout, and
  every daemon answers a ping and a list afterwards; the pure-Python reader refuses them too
  (run in a child process with a timeout, so that a reader blocking on a FIFO fails the test
  instead of hanging it).
- load: index names that break the name rule of requests (the reserved prefix `__tshard`, a tab,
  a newline, the C1 control U+0085, DEL): CORRUPT naming the index and the name escaped, and no
  tensor created.
- load: data_offsets [9223372036854775800, -9223372036854775720] (their difference wraps to the
  piece's 96 bytes) and a shape of 2^50 elements whose piece the file cannot hold: CORRUPT
  naming the file, the piece and the tensor, in well under a second.

Checkpoints are written here by hand where the test needs control of every byte (the reference
is this writer), or saved by the daemons and then altered.

usage: test_ckpt_untrusted.py BUILD_BIN_DIR"""
import ctypes
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext

import numpy as np

import tshard
from checks import Checks, error_of
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-ckpt-untrusted-")
NP = 3
TIMEOUT = 20  # seconds a client waits for an answer: a blocked daemon fails the test
INVALID = tshard.errors.InvalidArgumentError.status
CORRUPT = tshard.errors.CorruptError.status


def tree(root):
    """Every path under root with its type, mode and content (files), for 'untouched' checks."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (
                stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode),
                open(p, "rb").read() if stat.S_ISREG(st.st_mode) else None)
    return out


def siblings(path):
    """The temporary directories of saves into path left beside it."""
    base = os.path.basename(path)
    return [n for n in os.listdir(os.path.dirname(path)) if n.startswith(f".{base}.tmp-")]


def on_every_rank(d, what, fn, status, needles):
    """fn(client) fails with status and a message holding every needle, on every rank's client,
    the same message everywhere, each within the timeout."""
    msgs = set()
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as c:
            t0 = time.monotonic()
            st, msg = error_of(lambda: fn(c))
            took = time.monotonic() - t0
            check(st == status, f"{what}, rank {r}: status {st} ({msg}), want {status}")
            check(msg is not None and all(n in msg for n in needles),
                  f"{what}, rank {r}: message {msg!r} lacks one of {needles}")
            check(took < TIMEOUT / 2, f"{what}, rank {r}: answered in {took:.1f} s")
            msgs.add(msg.split(": ", 1)[-1] if msg else msg)  # "rank k: " prefixes differ
    check(len(msgs) == 1, f"{what}: one error for every client: {msgs}")


def all_serving(d, what):
    for r in range(NP):
        try:
            with d.connect(r, timeout=TIMEOUT) as c:
                check(c.ping()["rank"] == r, f"{what}: rank {r} answers a ping")
                check(c.list() == [], f"{what}: rank {r} lists no tensor: {c.list()}")
        except tshard.TshardError as e:
            check(False, f"{what}: rank {r} does not answer: {e}")


class FifoDrain(threading.Thread):
    """While a test of a FIFO runs: opens the FIFO for writing again and again (each open returns
    when a reader opens it) and closes it at once, so that a reader that blocks on it (a daemon or
    a reader that does not refuse FIFOs) reads its end and the test fails instead of hanging."""

    def __init__(self, fifo):
        super().__init__(daemon=True)
        self.fifo, self.done = fifo, False
        self.start()

    def run(self):
        while not self.done:
            os.close(os.open(self.fifo, os.O_WRONLY))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.done = True
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)  # releases the pending open
        self.join()
        os.close(fd)


def reader_fails(ckpt, name, needles, what):
    """tshard.checkpoint.read in a child process (a reader blocked on a FIFO cannot hang this
    test): it must raise CheckpointError holding every needle."""
    code = ("import sys, tshard.checkpoint as ck\n"
            "try:\n    ck.read(sys.argv[1], sys.argv[2])\n"
            "except ck.CheckpointError as e:\n    print('CheckpointError:', e); sys.exit(3)\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, ckpt, name], capture_output=True,
                             text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        check(False, f"reader, {what}: blocked for {TIMEOUT} s")
        return
    check(out.returncode == 3 and all(n in out.stdout for n in needles),
          f"reader, {what}: exit {out.returncode}, {out.stdout!r} {out.stderr[-500:]!r}")


xxh = ctypes.CDLL("libxxhash.so.0")  # an independent XXH3-64 for the pieces written here
xxh.XXH3_64bits.restype = ctypes.c_uint64
xxh.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def write_ckpt(dirpath, tensors):
    """A checkpoint written here: tensors maps name -> (dtype, shape, pieces), each piece
    (box, header shape, data_offsets or None for the real ones, data bytes); one file
    'rank-00000.safetensors' holds them all."""
    os.mkdir(dirpath)
    st_names = {"f32": "F32", "i32": "I32"}
    header, blobs, off = {}, [], 0
    index = {"format": "tshard-checkpoint", "version": 1, "checksum": "xxh3-64",
             "saved_ranks": 1, "tensors": {}}
    for name, (dtype, shape, pieces) in tensors.items():
        entry = {"dtype": dtype, "shape": list(shape),
                 "attr": f"mesh=[{NP}] placements=[S(0)]", "partial_kept": False, "pieces": []}
        for k, (box, hshape, offs, data) in enumerate(pieces):
            key = f"p{len(header)}"
            header[key] = {"dtype": st_names[dtype], "shape": list(hshape),
                           "data_offsets": offs if offs else [off, off + len(data)]}
            off += len(data)
            blobs.append(data)
            entry["pieces"].append({"file": "rank-00000.safetensors", "key": key,
                                    "box": [list(b) for b in box],
                                    "xxh3": "%016x" % xxh.XXH3_64bits(data, len(data))})
        index["tensors"][name] = entry
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(dirpath, "rank-00000.safetensors"), "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    with open(os.path.join(dirpath, "index.json"), "w") as f:
        json.dump(index, f)


old_umask = os.umask(0o022)  # the usual umask: the modes below are the daemons' choice
with Daemons(bin_dir, NP) as d:
    c = d.connect(0, timeout=TIMEOUT)
    W = (np.arange(12 * 5, dtype=np.float32) * 0.5 - 3).reshape(12, 5)
    c.create("w", "f32", W.shape, f"mesh=[{NP}] placements=[S(0)]")
    c.put("w", W)

    # ---- save: what it may replace, and the modes it writes
    foreign = os.path.join(work, "foreign")
    os.makedirs(os.path.join(foreign, "sub"))
    open(os.path.join(foreign, "index.json"), "w").write('{"my": "notes", "version": 1}\n')
    open(os.path.join(foreign, "thesis.tex"), "w").write("\\section{Precious}\n")
    open(os.path.join(foreign, "sub", "data.bin"), "wb").write(bytes(range(256)))
    os.chmod(os.path.join(foreign, "thesis.tex"), 0o640)
    before = tree(foreign)
    on_every_rank(d, "save over a directory with a stray index.json",
                  lambda cl: cl.save(foreign, all=True), INVALID,
                  (f"'{foreign}' exists and is not a tshard checkpoint",
                   "index.json does not parse as one", "choose a new or empty directory"))
    check(tree(foreign) == before, "the directory with a stray index.json is untouched")
    check(siblings(foreign) == [], f"no temporary directory left: {siblings(foreign)}")

    good = os.path.join(work, "good")
    c.save(good, all=True)
    mixed = os.path.join(work, "mixed")  # a real index, and a file it does not name
    shutil.copytree(good, mixed)
    open(os.path.join(mixed, "diary.txt"), "w").write("mine")
    before = tree(mixed)
    on_every_rank(d, "save over a checkpoint holding another file", lambda cl: cl.save(mixed, all=True, overwrite=True),
                  INVALID,
                  (f"'{mixed}'", "diary.txt", "does not name", "choose a new or empty directory"))
    check(tree(mixed) == before, "the checkpoint holding another file is untouched")
    check(siblings(mixed) == [], "no temporary directory left beside it")

    def modes_private(path, what):
        st = os.stat(path)
        check(stat.S_IMODE(st.st_mode) == 0o700,
              f"{what}: directory mode {oct(stat.S_IMODE(st.st_mode))}, want 0o700")
        files = os.listdir(path)
        check("index.json" in files and len(files) >= 2, f"{what}: files {files}")
        for n in files:
            m = stat.S_IMODE(os.stat(os.path.join(path, n)).st_mode)
            check(m == 0o600, f"{what}: {n} mode {oct(m)}, want 0o600")

    empty = os.path.join(work, "empty")
    os.mkdir(empty, 0o700)
    c.save(empty, all=True)
    modes_private(empty, "an empty 0700 target")
    modes_private(good, "a new target")
    c.save(good, all=True, overwrite=True)  # replaces a checkpoint
    modes_private(good, "a replaced checkpoint")
    check(siblings(good) == [], "the replaced checkpoint is removed")
    c.drop("w")
    c.load(good)
    check(np.array_equal(c.get("w"), W), "the replaced checkpoint loads")
    c.drop("w")

    # ---- load: files that are not regular files
    fifo_index = os.path.join(work, "fifo_index")
    os.mkdir(fifo_index)
    os.mkfifo(os.path.join(fifo_index, "index.json"))
    with FifoDrain(os.path.join(fifo_index, "index.json")):
        on_every_rank(d, "load with a FIFO as index.json", lambda cl: cl.load(fifo_index),
                      CORRUPT, (os.path.join(fifo_index, "index.json"), "FIFO"))
        all_serving(d, "after a FIFO index")
        reader_fails(fifo_index, "w", ("index.json", "FIFO"), "a FIFO index")

    def altered(tag, alter):
        dst = os.path.join(work, tag)
        shutil.copytree(good, dst)
        files = sorted(f for f in os.listdir(dst) if f.endswith(".safetensors"))
        victim = os.path.join(dst, files[-1])
        alter(dst, victim)
        return dst, os.path.basename(victim)

    def fifo_piece(dst, victim):
        os.remove(victim)
        os.mkfifo(victim)

    def link_piece(dst, victim):
        os.rename(victim, os.path.join(work, "elsewhere.safetensors"))
        os.symlink(os.path.join(work, "elsewhere.safetensors"), victim)

    def dir_piece(dst, victim):
        os.remove(victim)
        os.mkdir(victim)

    def link_index(dst, victim):
        os.rename(os.path.join(dst, "index.json"), os.path.join(work, "elsewhere.json"))
        os.symlink(os.path.join(work, "elsewhere.json"), os.path.join(dst, "index.json"))

    for tag, alter, kind, in_index in (("fifo_piece", fifo_piece, "FIFO", False),
                                       ("link_piece", link_piece, "symbolic link", False),
                                       ("dir_piece", dir_piece, "directory", False),
                                       ("link_index", link_index, "symbolic link", True)):
        dst, victim = altered(tag, alter)
        named = "index.json" if in_index else victim
        with FifoDrain(os.path.join(dst, victim)) if tag == "fifo_piece" else nullcontext():
            on_every_rank(d, f"load with a {kind} as {named}", lambda cl: cl.load(dst),
                          CORRUPT, (named, kind))
            all_serving(d, f"after {tag}")
            reader_fails(dst, "w", (named, kind), tag)
        for f in ("elsewhere.safetensors", "elsewhere.json"):
            if os.path.exists(os.path.join(work, f)):
                os.remove(os.path.join(work, f))

    # ---- load: names from the index obey the name rule of requests
    piece = np.arange(4, dtype=np.int32)
    clean = os.path.join(work, "clean")  # the writer here is sound: its checkpoint loads
    write_ckpt(clean, {"fine": ("i32", (4,), [(((0, 4),), (4,), None, piece.tobytes())])})
    c.load(clean)
    check(np.array_equal(c.get("fine"), piece), "a checkpoint written here loads")
    c.drop("fine")
    for bad, shown in (("__tshard_x", "__tshard_x"), ("a\tb", "a\\tb"), ("a\nb", "a\\nb"),
                       ("\u0085x", "\\u0085x"), ("a\x7fb", "a\\x7fb")):
        tag = os.path.join(work, f"name{len(os.listdir(work))}")
        write_ckpt(tag, {"fine": ("i32", (4,), [(((0, 4),), (4,), None, piece.tobytes())]),
                         bad: ("i32", (4,), [(((0, 4),), (4,), None, piece.tobytes())])})
        on_every_rank(d, f"load of an index naming {shown!r}", lambda cl: cl.load(tag),
                      CORRUPT,
                      (os.path.join(tag, "index.json"), f'tensor "{shown}"'))
        all_serving(d, f"after the name {shown!r}")
        st, msg = error_of(lambda: c.load(tag, names=["fine"]))
        check(st == CORRUPT and c.list() == [],
              f"a load of the good name of that index fails too ({st}: {msg}), nothing created")

    # ---- load: offsets and sizes the file does not hold
    ovf = os.path.join(work, "overflow")
    write_ckpt(ovf, {"o": ("f32", (4, 6), [(((0, 4), (0, 6)), (4, 6),
                                            [9223372036854775800, -9223372036854775720],
                                            bytes(96))])})
    on_every_rank(d, "load of data_offsets whose difference wraps", lambda cl: cl.load(ovf),
                  CORRUPT,
                  ("rank-00000.safetensors", "tensor 'o'", "data_offsets [9223372036854775800, "
                   "-9223372036854775720]"))
    all_serving(d, "after overflowing data_offsets")
    reader_fails(ovf, "o", ("rank-00000.safetensors", "data_offsets"), "overflowing offsets")

    huge = os.path.join(work, "huge")
    n = 1 << 24  # [2^24, 2^24] of f32: 2^50 bytes (the most a tensor has), in 64 data bytes
    write_ckpt(huge, {"h": ("f32", (n, n), [(((0, n), (0, n)), (n, n), [0, 4 * n * n],
                                             bytes(64))])})
    for r in range(NP):
        with d.connect(r, timeout=TIMEOUT) as cr:
            t0 = time.monotonic()
            st, msg = error_of(lambda: cr.load(huge))
            took = time.monotonic() - t0
            check(st == CORRUPT and all(
                s in (msg or "") for s in ("rank-00000.safetensors", "tensor 'h'",
                                           "data_offsets")), f"huge shape, rank {r}: {st} {msg}")
            check(took < 1.0, f"huge shape, rank {r}: refused in {took:.3f} s, want < 1 s")
    all_serving(d, "after the huge shape")
    reader_fails(huge, "h", ("rank-00000.safetensors", "data_offsets"), "the huge shape")

    c.close()
    code = d.stop()
    check(code == 0, f"{NP} daemons exit 0 after shutdown ({code}):\n{d.logs()[-3000:]}")

os.umask(old_umask)
shutil.rmtree(work)
check.finish()
