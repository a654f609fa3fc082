#!/usr/bin/python3
"""End-to-end test of the message form of programs (ProgramGraph, program/PROGRAM.md "The message
form") through real daemons, the Python client and the tshard CLI: programs given as JSON and as
ProgramGraph messages (tshard.graph_from_json, and messages built field by field or from protobuf
text format) compile to the same buckets (the same cache files, the same report) and run to the
same bits on sharded tensors, checked against numpy; malformed messages (unknown op, missing
fields, undefined names, bad dim references, a group named twice, a non-finite literal) give the
same status and message as the same mistake in JSON; text and graph together or neither are
refused; the CLI compiles a serialized message (.pb, --format pb) and refuses bytes that are not
one; bucketing rule overrides (Python buckets=, the CLI's --buckets NAME=RULE) for texts and
messages, checked by the parser like any rule. The daemons get a private program cache.

usage: test_program_graph.py BUILD_BIN_DIR NRANKS"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from google.protobuf import text_format

import tshard
from tshard import tshard_pb2 as pb
from checks import Checks
from harness import Daemons

bin_dir, n = sys.argv[1], int(sys.argv[2])
check = Checks()
cache = tempfile.mkdtemp(prefix="tshard-prog-graph-")
os.environ["TSHARD_PROGRAM_CACHE"] = cache


def error_of(fn):
    try:
        fn()
    except tshard.TshardError as e:
        return e.status, str(e)
    return None


def normalized(report):
    """The report without what differs between a compile and a cache hit of the same code."""
    out = []
    for line in report.splitlines():
        if line.startswith("stats:"):
            continue
        out.append(line.replace("built (cache hit)", "built").replace("built (compiled)", "built"))
    return "\n".join(out)


def cache_files(report):
    return sorted(re.findall(r"(\S+\.so)", report))


PROGRAMS = [
    # elementwise with broadcasting, a reduction, an in-place update
    {"name": "mix", "dims": {"p": {"min": 1, "max": 512, "buckets": {"step": 64}}},
     "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 4]},
                {"name": "b", "dtype": "f64", "shape": [4]},
                {"name": "s", "dtype": "f64", "shape": []}],
     "ops": [{"out": "y", "op": "mul", "args": ["x", "s"]},
             {"out": "z", "op": "add", "args": ["y", "b"]},
             {"out": "t", "op": "tanh", "args": ["z"]},
             {"out": "cs", "op": "sum", "args": ["t"], "dims": [0], "keepdims": True},
             {"out": "w", "op": "sub", "args": ["t", 0.25]},
             {"op": "assign", "args": ["x", "w"]}],
     "outputs": ["cs"]},
    # a max over every dim, a cast, a compare and where, a transpose and an einsum
    {"name": "misc", "dims": {"p": {"min": 1, "max": 300, "buckets": [32, 128, 300]}},
     "inputs": [{"name": "x", "dtype": "f64", "shape": ["p", 4]},
                {"name": "m", "dtype": "f64", "shape": [4, 3]}],
     "ops": [{"out": "mx", "op": "max", "args": ["x"]},
             {"out": "pos", "op": "gt", "args": ["x", 0]},
             {"out": "r", "op": "where", "args": ["pos", "x", 0.5]},
             {"out": "mt", "op": "transpose", "args": ["m"], "perm": [1, 0]},
             {"out": "e", "op": "einsum", "args": ["r", "mt"], "eq": "pj,kj->k"},
             {"out": "ci", "op": "cast", "args": ["e"], "dtype": "f32"}],
     "outputs": ["mx", "ci"]},
    # a static program with a reshape
    {"inputs": [{"name": "x", "dtype": "f64", "shape": [6, 4]}],
     "ops": [{"out": "r", "op": "reshape", "args": ["x"], "shape": [4, -1]},
             {"out": "q", "op": "mean", "args": ["r"], "dims": [-1]}],
     "outputs": ["q"]},
]


def numpy_of(k, x, extra):
    if k == 0:
        t = np.tanh(x * extra["s"] + extra["b"])
        return {"cs": t.sum(axis=0, keepdims=True), "x": t - 0.25}
    if k == 1:
        r = np.where(x > 0, x, 0.5)
        return {"mx": x.max(), "ci": np.einsum("pj,kj->k", r, extra["m"].T).astype(np.float32)}
    return {"q": x.reshape(4, -1).mean(axis=-1)}


rng = np.random.default_rng(17)
rows = 40 * n + 3
sharded = tshard.Attr(tshard.Mesh([n]), [tshard.Shard(0)])
replicated = tshard.Attr(tshard.Mesh([n]), [tshard.Replicate()])
with Daemons(bin_dir, n) as d:
    with d.connect(0) as c:
        # the same programs as JSON and as messages: same buckets, same report, same bits
        for k, prog in enumerate(PROGRAMS):
            g = tshard.graph_from_json(prog)
            check(isinstance(g, pb.ProgramGraph), "graph_from_json gives a ProgramGraph")
            jid = c.program_compile(prog, lazy=True)
            gid = c.program_compile(graph=g, lazy=True)
            check(c.program_compile(g, lazy=True) == gid, f"program {k}: a message as `program`")
            check(c.program_compile(graph=pb.ProgramGraph.FromString(g.SerializeToString()),
                                    lazy=True) == gid,
                  f"program {k}: the same message, the same id")
            check(re.fullmatch(r"[0-9a-f]{16}", gid) is not None, f"graph id {gid!r}")
            static = "dims" not in prog
            shape = (6, 4) if static else (rows, 4)
            x = rng.standard_normal(shape)
            attr = replicated if static or k == 1 else sharded
            extra = {"b": rng.standard_normal(4), "s": 1.5, "m": rng.standard_normal((4, 3))}
            outs = {}
            for form, pid in (("json", jid), ("graph", gid)):
                name = f"x{k}{form}"
                c.create(name, "f64", shape, attr)
                c.put(name, x)
                ins = {"x": name}
                if k == 0:
                    c.create(f"b{k}{form}", "f64", (4,), replicated)
                    c.put(f"b{k}{form}", extra["b"])
                    ins.update({"b": f"b{k}{form}", "s": extra["s"]})
                if k == 1:
                    c.create(f"m{k}{form}", "f64", (4, 3), replicated)
                    c.put(f"m{k}{form}", extra["m"])
                    ins["m"] = f"m{k}{form}"
                onames = {o: f"{o}{k}{form}" for o in prog["outputs"]}
                c.program_run(pid, ins, onames)
                outs[form] = {o: c.get(t) for o, t in onames.items()}
                outs[form]["x"] = c.get(name)
            js, gs = c.program_show(jid), c.program_show(gid)
            check(normalized(js) == normalized(gs),
                  f"program {k}: reports differ:\n{js}\n---\n{gs}")
            check(cache_files(js) and cache_files(js) == cache_files(gs),
                  f"program {k}: cache files {cache_files(js)} vs {cache_files(gs)}")
            check("built (cache hit)" in gs, f"program {k}: the message's build hit the cache")
            ref = numpy_of(k, x, extra)
            for o, want in ref.items():
                a, b = outs["json"][o], outs["graph"][o]
                check(np.array_equal(a, b), f"program {k} output {o}: JSON and message differ")
                check(np.allclose(a, want, rtol=1e-5, atol=1e-6),
                      f"program {k} output {o}: {a} vs numpy {want}")

        # a message built field by field, and one from protobuf text format
        g = pb.ProgramGraph(name="byhand")
        g.dims.add(name="p", min=1, max=100, step=50)
        g.inputs.add(name="x", dtype="f64", shape=[pb.ProgramGraphDimRef(expr="p")])
        g.ops.add(op="exp", out="e", args=[pb.ProgramGraphArg(name="x")])
        g.ops.add(op="sum", out="s", args=[pb.ProgramGraphArg(name="e")])
        g.outputs.append("s")
        hid = c.program_compile(graph=g)
        v = rng.standard_normal(77)
        c.create("hv", "f64", (77,), replicated)
        c.put("hv", v)
        c.program_run(hid, {"x": "hv"}, {"s": "hs"})
        check(np.allclose(c.get("hs"), np.exp(v).sum()), "field-by-field message runs")
        tp = text_format.Parse('name: "tp" inputs { name: "x" dtype: "f64" shape { size: 77 } } '
                               'ops { op: "neg" out: "y" args { name: "x" } } outputs: "y"',
                               pb.ProgramGraph())
        tid = c.program_compile(graph=tp)
        c.program_run(tid, {"x": "hv"}, {"y": "hy"})
        check(np.array_equal(c.get("hy"), -v), "text-format message runs")

        # malformed: the same mistake as JSON and as a message gives the same error
        base = {"dims": {"n": {"min": 1, "max": 64}},
                "inputs": [{"name": "x", "dtype": "f32", "shape": ["n"]}],
                "ops": [{"out": "y", "op": "exp", "args": ["x"]}], "outputs": ["y"]}

        def variant(**kw):
            p = {k: (v.copy() if isinstance(v, dict) else list(v)) for k, v in base.items()}
            p.update(kw)
            return p

        bad = {
            "unknown op": variant(ops=[{"out": "y", "op": "frobnicate", "args": ["x"]}]),
            "op missing": variant(ops=[{"out": "y", "args": ["x"]}]),
            "out missing": variant(ops=[{"op": "exp", "args": ["x"]}]),
            "dtype missing": variant(inputs=[{"name": "x", "shape": ["n"]}]),
            "name missing": variant(inputs=[{"dtype": "f32", "shape": ["n"]}]),
            "bad dtype": variant(inputs=[{"name": "x", "dtype": "f16x", "shape": ["n"]}]),
            "undefined arg": variant(ops=[{"out": "y", "op": "exp", "args": ["nope"]}]),
            "undefined dim": variant(inputs=[{"name": "x", "dtype": "f32", "shape": ["q"]}]),
            "bad formula": variant(ops=[{"out": "y", "op": "reshape", "args": ["x"],
                                         "shape": ["3*q"]}]),
            "bad range": variant(dims={"n": {"min": 5, "max": 2}}),
            "no outputs": variant(outputs=[]),
            "undefined output": variant(outputs=["zz"]),
            "wrong arity": variant(ops=[{"out": "y", "op": "add", "args": ["x"]}]),
            "bad reduce dim": variant(ops=[{"out": "y", "op": "sum", "args": ["x"], "dims": [3]}]),
            "bad einsum": variant(ops=[{"out": "y", "op": "einsum", "args": ["x"], "eq": "ij->i"}]),
            "shape mismatch": variant(inputs=[{"name": "x", "dtype": "f32", "shape": ["n"]},
                                              {"name": "z", "dtype": "f32", "shape": [3]}],
                                      ops=[{"out": "y", "op": "add", "args": ["x", "z"]}]),
        }
        for what, prog in bad.items():
            ej = error_of(lambda: c.program_compile(prog))
            eg = error_of(lambda: c.program_compile(graph=tshard.graph_from_json(prog)))
            check(ej is not None and eg is not None, f"{what}: JSON {ej}, message {eg}")
            check(ej == eg, f"{what}: JSON gives {ej}, the message {eg}")
        # mistakes only a message can make
        g = tshard.graph_from_json(base)
        g.dims.add(name="n", min=1, max=8)
        e = error_of(lambda: c.program_compile(graph=g))
        check(e is not None and e[0] == 9 and "defined twice" in e[1], f"group twice: {e}")
        g = tshard.graph_from_json(variant(ops=[{"out": "y", "op": "add", "args": ["x", 1.0]}]))
        g.ops[0].args[1].value = float("nan")
        e = error_of(lambda: c.program_compile(graph=g))
        check(e is not None and e[0] == 9 and "finite" in e[1], f"NaN literal: {e}")
        g = tshard.graph_from_json(variant(ops=[{"out": "y", "op": "add", "args": ["x", 1.0]}]))
        g.ops[0].args[1].Clear()  # an argument with neither a name nor a value
        e = error_of(lambda: c.program_compile(graph=g))
        check(e is not None and e[0] == 9 and "args[1]" in e[1], f"empty arg: {e}")
        g = tshard.graph_from_json(base)
        g.inputs[0].shape.add()  # a shape entry with neither a size nor a name
        e = error_of(lambda: c.program_compile(graph=g))
        check(e is not None and e[0] == 9 and "shape[1]" in e[1], f"empty dim: {e}")
        # exactly one of text and graph
        both = pb.ProgramCompileRequest(text="{}", graph=tshard.graph_from_json(base))
        e = error_of(lambda: c._call(None, program_compile=both))
        check(e is not None and e[0] == 1 and "exactly one" in e[1], f"both: {e}")
        e = error_of(lambda: c._call(None, program_compile=pb.ProgramCompileRequest()))
        check(e is not None and e[0] == 1 and "neither" in e[1], f"neither: {e}")
        for misuse in (lambda: c.program_compile(), lambda: c.program_compile(base, graph=g),
                       lambda: c.program_compile(graph="{}"),
                       lambda: tshard.graph_from_json({"ops": [{"op": "exp", "args": [[1]]}]})):
            try:
                misuse()
                check(False, "client misuse: no exception")
            except TypeError:
                pass

        # bucketing rule overrides (Python buckets=, the CLI's --buckets NAME=RULE), for a text
        # and a message alike; the parser checks the rules
        prog = PROGRAMS[0]
        plain = c.program_compile(prog, lazy=True)
        for rule, want in (([100, 512], "list: 100 512"), ("step:128", "step 128: 128 256 384 512"),
                           ({"step": 256}, "step 256: 256 512"), ("pow2", "pow2: 1 2 4"),
                           ("64,512", "list: 64 512")):
            oid = c.program_compile(prog, lazy=True, buckets={"p": rule})
            gid = c.program_compile(graph=tshard.graph_from_json(prog), lazy=True,
                                    buckets={"p": rule})
            check(oid != plain and gid != plain, f"override {rule}: a different program id")
            for q in (oid, gid):
                rep = c.program_show(q)
                check(f"p in [1, 512], {want}" in rep, f"override {rule}: {rep}")
        x = rng.standard_normal((rows, 4))
        c.create("ox", "f64", (rows, 4), sharded)
        c.put("ox", x)
        c.create("ob", "f64", (4,), replicated)
        c.put("ob", np.zeros(4))
        oid = c.program_compile(prog, lazy=True, buckets={"p": [50, 512]})
        c.program_run(oid, {"x": "ox", "b": "ob", "s": 2.0}, {"cs": "ocs"})
        check(np.allclose(c.get("ocs"), np.tanh(2 * x).sum(axis=0, keepdims=True)),
              "a program with an overridden rule runs")
        check("p=50 built" in c.program_show(oid), f"bucket 50 used: {c.program_show(oid)}")
        for rule, status, needle in (({"step": 0}, 9, "step 0 must be >= 1"),
                                     ([16, 64], 9, "does not cover max 512"),
                                     ([64, 32, 512], 9, "ascending")):
            e = error_of(lambda: c.program_compile(prog, lazy=True, buckets={"p": rule}))
            check(e is not None and e[0] == status and needle in e[1], f"bad rule {rule}: {e}")
        e = error_of(lambda: c.program_compile(prog, lazy=True, buckets={"q": "pow2"}))
        check(e is not None and e[0] == 1 and "no dim group 'q'" in e[1] and "p" in e[1],
              f"override of an unknown group: {e}")
        try:
            c.program_compile(prog, buckets={"p": {"stride": 2}})
            check(False, "bad rule type: no exception")
        except TypeError:
            pass

        # the CLI: a serialized message (.pb, or --format pb), and bytes that are not one
        prog = PROGRAMS[0]
        pbfile = os.path.join(cache, "mix.pb")
        with open(pbfile, "wb") as f:
            f.write(tshard.graph_from_json(prog).SerializeToString())
        binfile = os.path.join(cache, "mix.bin")
        shutil.copy(pbfile, binfile)
        cli = [os.path.join(bin_dir, "tshard")]
        conn = ["--socket", d.socket(0)]
        gid = c.program_compile(graph=tshard.graph_from_json(prog))
        for args in ([pbfile], [binfile, "--format", "pb"]):
            r = subprocess.run(cli + ["program", "compile"] + args + conn, capture_output=True,
                               text=True, timeout=300)
            check(r.returncode == 0 and r.stdout.startswith(f"id={gid}\n"),
                  f"cli compile {args}: {r.returncode} {r.stdout[:200]} {r.stderr}")
        r = subprocess.run(cli + ["program", "compile", binfile, "--format", "yaml"] + conn,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "--format" in r.stderr, f"cli bad format: {r.stderr}")
        junk = os.path.join(cache, "junk.pb")
        with open(junk, "wb") as f:
            f.write(b"\xff\xff\xff\xff not a message")
        r = subprocess.run(cli + ["program", "compile", junk] + conn, capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 1 and "ProgramGraph" in r.stderr, f"cli junk .pb: {r.stderr}")
        r = subprocess.run(cli + ["program", "compile", pbfile, "--format", "json"] + conn,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and ("PARSE" in r.stderr or "UTF-8" in r.stderr),
              f"cli .pb read as JSON: {r.stderr}")
        jsonfile = os.path.join(cache, "mix.json")
        with open(jsonfile, "w") as f:
            json.dump(prog, f)
        for args, code, needle in (
                (["--buckets", "lazy", "--buckets", "p=16,64,512"], 0, "list: 16 64 512"),
                (["--buckets=p=step:256", "--buckets", "lazy"], 0, "step 256: 256 512"),
                (["--buckets", "p=step:0"], 1, "PARSE"),
                (["--buckets", "p=abc"], 1, "INVALID_ARGUMENT"),
                (["--buckets", "q=pow2"], 1, "no dim group 'q'"),
                (["--buckets", "sideways"], 2, "--buckets")):
            r = subprocess.run(cli + ["program", "compile", jsonfile] + args + conn,
                               capture_output=True, text=True, timeout=300)
            out = r.stdout + r.stderr
            check(r.returncode == code and needle in out,
                  f"cli --buckets {args}: {r.returncode} {out[:600]}")
        r = subprocess.run(cli + ["program", "compile", pbfile, "--buckets", "lazy",
                                  "--buckets", "p=100,512"] + conn,
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0 and "list: 100 512" in r.stdout,
              f"cli .pb with a rule override: {r.stdout} {r.stderr}")
    rc = d.stop()
shutil.rmtree(cache, ignore_errors=True)
check(rc == 0, f"daemons exited with {rc}")
check.finish()
