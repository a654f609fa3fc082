#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_frame (tests/fuzz/corpus/): framed tshard.Request messages
encoded by hand (protobuf wire format), one valid request of each kind plus a few broken ones."""
import os
import struct

def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload

def s(num, text):
    return field(num, 2, text.encode() if isinstance(text, str) else text)

def packed(num, values):
    return field(num, 2, b"".join(varint(v) for v in values))

def frame(body):
    return struct.pack("<I", len(body)) + body

def request(op_num, op_body, rid=1, key=None):
    body = field(1, 0, rid)
    if key:
        body += s(2, key)
    return body + field(op_num, 2, op_body)

attr_text = s(5, "mesh=[2]@0-1 placements=[S(0)]")
attr_msg = packed(1, [2, 2]) + packed(2, [0, 1, 2, 3]) + field(3, 2, field(2, 0, 1)) + \
    field(3, 2, field(1, 0, 1)) + field(4, 2, field(1, 0, 1) + packed(2, [3, 3]))
create = s(1, "t") + s(2, "f32") + packed(3, [4, 6]) + field(4, 2, attr_text) + field(5, 2, s(1, "ab"))
create_msg = s(1, "u") + s(2, "bf16") + packed(3, [8, 6]) + field(4, 2, attr_msg) + \
    field(5, 2, s(1, "aB4b"))
put = s(1, "t") + field(2, 0, 0) + field(3, 0, 96) + s(4, bytes(range(96)))
put_slice = s(1, "t") + field(3, 0, 48) + s(4, bytes(48)) + field(5, 2, s(1, "ba"))
get = s(1, "t") + field(3, 0, 64)
get_slice = s(1, "t") + field(2, 2, s(1, "ba")) + field(3, 0, 16)
reshard = s(1, "t") + field(2, 2, attr_msg) + s(3, "p2p") + s(4, "t2") + field(5, 2, s(1, ""))
plan = s(1, "t") + field(2, 2, s(5, "mesh=[4] placements=[R]")) + s(3, "allgather")
shm_region = field(1, 0, 4096) + field(2, 0, 96)
put_shm = s(1, "t") + field(3, 0, 96) + field(5, 2, shm_region)
get_shm = s(1, "t") + field(4, 2, field(1, 0, 0))
# compiled programs: the JSON text; a ProgramGraph message (a dim group, an input, a slice) with a
# bucketing rule override; both forms at once (refused)
prog_text = s(1, '{"inputs":[{"name":"x","dtype":"f32","shape":[4]}],"ops":[{"out":"y","op":'
                 '"neg","args":["x"]}],"outputs":["y"]}') + field(2, 0, 1)
graph = s(1, "g") + field(2, 2, s(1, "n") + field(2, 0, 1) + field(3, 0, 64) + field(4, 0, 1)) + \
    field(3, 2, s(1, "x") + s(2, "f64") + field(3, 2, s(2, "n"))) + \
    field(4, 2, s(1, "slice") + s(2, "y") + field(3, 2, s(1, "x")) + field(11, 2, s(2, "n-1"))) + \
    s(5, "y")
prog_graph = field(20, 2, graph) + field(21, 2, s(1, "n") + field(5, 0, 8)) + field(2, 0, 1)

# batches, checkpoints, background saves and snapshots, safetensors, the internal save_finish
items = field(1, 2, s(1, "t") + field(2, 2, attr_text) + s(3, "alltoall")) + \
    field(1, 2, s(1, "u") + field(2, 2, attr_msg) + field(4, 2, s(1, "ba")))
put_many = field(1, 2, s(1, "a") + s(2, "f32") + packed(3, [2, 3])) + \
    field(1, 2, s(1, "b") + s(2, "i8") + packed(3, [4])) + field(2, 0, 0) + field(3, 0, 28) + \
    s(4, bytes(28)) + field(6, 0, 1)
get_many = field(1, 2, s(1, "a") + field(2, 0, 24)) + field(1, 2, s(1, "b") + field(2, 0, 4)) + \
    field(3, 0, 1 << 16)
save_bg = s(1, "/tmp/ck") + s(2, "a") + s(2, "b") + field(120, 0, 1)
save_snap = s(1, "/tmp/ck") + field(121, 0, 1) + field(4, 0, 1)
load = s(1, "/tmp/ck") + s(2, "a") + field(3, 2, attr_text) + field(4, 0, 1)
imp = s(1, "/tmp/m.safetensors") + field(2, 2, s(1, "w") + field(2, 2, attr_text)) + \
    field(3, 2, s(5, "mesh=[2] placements=[R]")) + s(4, "w") + s(5, "model.") + \
    field(6, 2, s(1, "model.w") + s(2, "w"))
exp = s(1, "/tmp/out.safetensors") + s(2, "w") + s(2, "__metadata__") + field(3, 0, 1 << 20) + \
    field(4, 2, s(1, "format") + s(2, "pt")) + field(4, 2, s(1, "format") + s(2, "np"))

seeds = {
    "reshard_many": frame(request(36, items + s(2, "auto"), key="rm")),
    "drop_many": frame(request(37, s(1, "a") + s(1, "b") + s(1, "a"))),
    "put_get_many": frame(request(100, put_many)) + frame(request(101, get_many)) +
    frame(request(101, field(2, 0, 64) + field(3, 0, 64))),
    "save_load": frame(request(28, save_bg, key="s1")) + frame(request(28, save_snap)) +
    frame(request(29, load)),
    "safetensors": frame(request(110, imp, key="i1")) + frame(request(111, exp)),
    "save_finish": frame(request(120, field(1, 0, 7))),
    "ping": frame(request(10, b"")),
    "create": frame(request(11, create, key="k1")),
    "create_msg": frame(request(11, create_msg)),
    "put": frame(request(12, put)),
    "put_slice": frame(request(13, put_slice)),
    "get": frame(request(14, get)),
    "get_slice": frame(request(15, get_slice)),
    "reshard": frame(request(16, reshard, key="reshard-1")),
    "drop": frame(request(17, s(1, "t"))),
    "list_describe_stats": frame(request(18, b"")) + frame(request(19, s(1, "t"))) +
    frame(request(21, b"")),
    "plan": frame(request(20, plan)),
    "shutdown": frame(request(22, b"")),
    "shm_attach_put_get": frame(request(40, field(1, 0, 1 << 20))) + frame(request(12, put_shm)) +
    frame(request(14, get_shm)),
    "unknown_op": frame(field(1, 0, 3) + field(30, 2, b"")),
    "truncated": frame(request(11, create))[:-5],
    "oversize": struct.pack("<I", 0xFFFFFFF0) + b"\x08\x01",
    # strings the daemon refuses on the wire: a NUL inside a name, invalid UTF-8, a duplicate split
    "name_nul": frame(request(12, s(1, b"keep\x00evil") + field(3, 0, 4) + s(4, bytes(4)))),
    "name_utf8": frame(request(17, s(1, b"bad\xff\xc0\xaf")) ) +
    frame(request(19, s(1, "gr\u00f6\u00dfe"), key="k\u00e9")),
    "program_compile_text": frame(request(32, prog_text, key="p1")),
    "program_compile_graph": frame(request(32, prog_graph, key="p2")),
    "program_compile_both": frame(request(32, prog_text + field(20, 2, graph), key="p3")),
    "dup_split": frame(request(11, s(1, "d") + s(2, "f32") + packed(3, [4]) + field(4, 2,
        packed(1, [2]) + field(3, 2, field(2, 0, 0)) + field(4, 2, packed(2, [2, 2])) +
        field(4, 2, packed(2, [1, 3]))))),
}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
