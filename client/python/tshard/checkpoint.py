"""Reading tshard checkpoints without a daemon: only json and numpy (checksums through the
system's libxxhash by ctypes when it is there).

A checkpoint directory holds ``index.json`` and one file per writing rank in the safetensors
layout (8-byte little-endian header length, a JSON header naming each piece with dtype, shape and
data_offsets, then the raw little-endian bytes); the format is documented with the daemon's
checkpoints.

    import tshard.checkpoint as ck
    ck.names("/shared/ckpt/step100")          # the tensors it holds
    w = ck.read("/shared/ckpt/step100", "w")  # the whole tensor as a numpy array

bf16 tensors come back as uint16 arrays holding the bf16 bits (numpy has no bfloat16), f8_e4m3
and f8_e5m2 tensors as uint8 arrays of their bits, as everywhere in the tshard package."""
import ctypes
import ctypes.util
import json
import os
import re
import stat

import numpy as np

_DTYPES = {"f32": "<f4", "f64": "<f8", "f16": "<f2", "bf16": "<u2", "i8": "i1", "i32": "<i4",
           "i64": "<i8", "u8": "u1", "bool": "?", "i16": "<i2", "u16": "<u2", "u32": "<u4",
           "u64": "<u8", "f8_e4m3": "u1", "f8_e5m2": "u1", "c64": "<c8", "c128": "<c16"}
_ST_NAMES = {"f32": "F32", "f64": "F64", "f16": "F16", "bf16": "BF16", "i8": "I8", "i32": "I32",
             "i64": "I64", "u8": "U8", "bool": "BOOL", "i16": "I16", "u16": "U16", "u32": "U32",
             "u64": "U64", "f8_e4m3": "F8_E4M3", "f8_e5m2": "F8_E5M2", "c64": "C64",
             "c128": "C128"}


class CheckpointError(Exception):
    """A checkpoint that cannot be read or does not match its index (the message names the file
    and the piece)."""


def _xxh3():
    """XXH3_64bits of the system's libxxhash (its x86 dispatcher, the AVX2 / AVX-512 code where
    the CPU has them, when the library exports it), or None."""
    for name in (ctypes.util.find_library("xxhash"), "libxxhash.so.0"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            f = getattr(lib, "XXH3_64bits_dispatch", None) or lib.XXH3_64bits
        except (OSError, AttributeError):
            continue
        f.restype = ctypes.c_uint64
        f.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return lambda a: f(a.ctypes.data, a.nbytes)
    return None


_HASH = _xxh3()


def _open_regular(path, what):
    """path opened for reading without blocking on a FIFO and without following a symbolic link,
    checked to be a regular file (anything else is a CheckpointError naming it), its reads then
    blocking again."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            raise CheckpointError(f"{what} '{path}' is {_kind(mode)}; checkpoint files are "
                                  f"regular files") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise CheckpointError(f"{what} '{path}' is {_kind(mode)}; checkpoint files are regular "
                              f"files")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def index(path):
    """The parsed index.json of a checkpoint directory."""
    p = os.path.join(path, "index.json")
    try:
        with _open_regular(p, "checkpoint index") as f:
            idx = json.load(f)
    except OSError as e:
        raise CheckpointError(f"checkpoint index '{p}' cannot be read: {e.strerror}") from None
    except ValueError as e:
        raise CheckpointError(f"checkpoint index '{p}' is not JSON: {e}") from None
    if idx.get("format") != "tshard-checkpoint" or idx.get("version") != 1:
        raise CheckpointError(f"checkpoint index '{p}': not a tshard checkpoint of version 1")
    return idx


def names(path):
    return list(index(path)["tensors"])


def _header(fpath):
    with _open_regular(fpath, "checkpoint file") as f:
        n = int.from_bytes(f.read(8), "little")
        size = os.fstat(f.fileno()).st_size
        if n <= 0 or n > size - 8:
            raise CheckpointError(f"checkpoint file '{fpath}': header length {n} does not fit "
                                  f"the file of {size} bytes")
        try:
            h = json.loads(f.read(n))
        except ValueError as e:
            raise CheckpointError(f"checkpoint file '{fpath}': header is not JSON: {e}") from None
    return h, 8 + n, size


_REDUCE_FNS = {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum,
               "min": np.minimum}


def _reduce(op, acc, x, dtype):
    """acc op= x; f16 and bf16 through f32 (as the daemons reduce); bool: sum and max are "or",
    min and prod are "and" (numpy's add, multiply, maximum and minimum of bools); avg sums
    (_finish divides)."""
    f = _REDUCE_FNS[op]
    if dtype == "bf16":
        a = (acc.astype(np.uint32) << 16).view(np.float32)
        b = (x.astype(np.uint32) << 16).view(np.float32)
        r = f(a, b).view(np.uint32)
        rounded = (r + 0x7FFF + ((r >> 16) & 1)) >> 16  # round to nearest even
        return np.where(np.isnan(f(a, b)), (r >> 16) | 0x40, rounded).astype(np.uint16)
    if dtype == "f16":
        return f(acc.astype(np.float32), x.astype(np.float32)).astype(np.float16)
    return f(acc, x)


def _finish(op, acc, count, dtype):
    """avg: the sum of `count` contributions divided once (f16 and bf16 through f32)."""
    if op != "avg" or count == 1:
        return acc
    if dtype == "bf16":
        a = (acc.astype(np.uint32) << 16).view(np.float32) / np.float32(count)
        r = a.view(np.uint32)
        rounded = (r + 0x7FFF + ((r >> 16) & 1)) >> 16
        return np.where(np.isnan(a), (r >> 16) | 0x40, rounded).astype(np.uint16)
    if dtype == "f16":
        return (acc.astype(np.float32) / np.float32(count)).astype(np.float16)
    return (acc / acc.dtype.type(count)).astype(acc.dtype)


def read(path, name, verify=None):
    """The whole tensor `name` of the checkpoint in `path` as a numpy array. verify: True checks
    every piece's XXH3-64 (needs libxxhash), False skips it, None checks when libxxhash is found.
    A checkpoint saved with partial values kept is reduced here."""
    idx = index(path)
    t = idx["tensors"].get(name)
    if t is None:
        raise CheckpointError(f"checkpoint '{path}' holds no tensor named '{name}'; it holds "
                              f"{', '.join(idx['tensors']) or 'none'}")
    if verify and _HASH is None:
        raise CheckpointError("verify=True needs libxxhash (XXH3_64bits), which was not found")
    check = _HASH if verify is not False else None
    dtype = t["dtype"]
    dt = np.dtype(_DTYPES[dtype])
    shape = tuple(t["shape"])
    # every piece's header entry checked against the index and its file's size first, so that
    # nothing is allocated for a shape the files do not hold
    headers, plan = {}, []
    for p in t["pieces"]:
        fpath = os.path.join(path, p["file"])
        if fpath not in headers:
            try:
                headers[fpath] = _header(fpath)
            except OSError as e:
                raise CheckpointError(f"checkpoint file '{fpath}' (piece '{p['key']}'): "
                                      f"{e.strerror}") from None
        h, start, size = headers[fpath]
        e = h.get(p["key"])
        box = [tuple(b) for b in p["box"]]
        ext = tuple(hi - lo for lo, hi in box)
        where = f"checkpoint file '{fpath}', piece '{p['key']}' (tensor '{name}')"
        if not isinstance(e, dict) or e.get("dtype") != _ST_NAMES[dtype] or \
                tuple(e.get("shape", ())) != ext:
            raise CheckpointError(f"{where}: the header does not match the index")
        offs = e.get("data_offsets")
        nbytes = dt.itemsize
        for x in ext:  # Python integers: no overflow
            nbytes *= x
        if not (isinstance(offs, list) and len(offs) == 2 and
                all(type(x) is int for x in offs)) or offs[0] < 0 or \
                offs[1] - offs[0] != nbytes or start + offs[1] > size:
            raise CheckpointError(f"{where}: data_offsets {offs} do not hold {nbytes} bytes "
                                  f"inside the file of {size} bytes")
        plan.append((p, fpath, start + offs[0], nbytes, box, ext, where))
    total = 1
    for x in shape:
        total *= x
    held = sum(item[3] for item in plan) // dt.itemsize
    if not t.get("partial_kept") and held != total:
        raise CheckpointError(f"checkpoint '{path}': tensor '{name}': pieces hold {held} of "
                              f"{total} elements")
    groups = {}  # partial coordinates -> (whole array, elements covered)
    for p, fpath, at, nbytes, box, ext, where in plan:
        with _open_regular(fpath, "checkpoint file") as f:
            f.seek(at)
            raw = np.frombuffer(f.read(nbytes), dtype=np.uint8)
        if raw.nbytes != nbytes:
            raise CheckpointError(f"{where}: the file is shorter than its header says")
        if check is not None and check(raw) != int(p["xxh3"], 16):
            raise CheckpointError(f"{where}: checksum mismatch")
        key = tuple(p.get("partial_coords", ()))
        if key not in groups:
            groups[key] = [np.zeros(shape, dtype=dt), 0]
        groups[key][0][tuple(slice(lo, hi) for lo, hi in box)] = raw.view(dt).reshape(ext)
        groups[key][1] += raw.nbytes // dt.itemsize
    total = int(np.prod(shape, dtype=np.int64))
    if not groups:
        if total:
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}' has no pieces")
        return np.zeros(shape, dtype=dt)
    for key, (_, n) in groups.items():
        if n != total and not (t.get("partial_kept") and n <= total):
            raise CheckpointError(f"checkpoint '{path}': tensor '{name}': pieces hold {n} of "
                                  f"{total} elements")
    if len(groups) == 1 and not t.get("partial_kept"):
        return next(iter(groups.values()))[0]
    # kept partial pieces: reduced mesh dim by mesh dim in mesh-dim order, each by its op (the
    # pieces' partial coordinates are in that order), avg as a sum divided once at the end
    ops = re.findall(r"P\((sum|max|min|avg|prod)\)", t["attr"])
    arrays = {k: a for k, (a, _) in groups.items()}
    count = 1
    for op in ops:
        reduced = {}
        for key in sorted(arrays):  # along this dim in increasing coordinate, per group
            rest = key[1:]
            reduced[rest] = (arrays[key] if rest not in reduced
                             else _reduce(op, reduced[rest], arrays[key], dtype))
        if op == "avg":
            count *= len({key[0] for key in arrays})
        arrays = reduced
    if len(arrays) != 1:
        raise CheckpointError(f"checkpoint '{path}': tensor '{name}': partial pieces of "
                              f"{len(arrays)} groups do not match its attribute {t['attr']}")
    out = next(iter(arrays.values()))
    return _finish("avg", out, count, dtype) if count > 1 else out
