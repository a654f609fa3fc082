#!/usr/bin/python3
"""End-to-end test of the program name rule (program/PROGRAM.md "Names") through real daemons,
the Python client and the tshard CLI: every string field of a program - its name, dim group
names, input names, dtypes and shape references, op names, results, argument references, einsum
equations, dim formulas, outputs, and the request's bucketing rule overrides - is tried with a
comment end, a line end, '#', a quote, a backslash, a non-ASCII letter and a payload that would
define a constructor creating a marker file if it reached the generated C. Each is sent as a JSON
text and as a ProgramGraph message, with the Python client and with `tshard program compile`
(FILE.json and FILE.pb); each must be refused with PARSE naming the field and the rule, the marker
must never appear and nothing may be built in the (private) program cache. Valid names with
every allowed character compile.

usage: test_program_names.py BUILD_BIN_DIR NRANKS"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

import tshard
from checks import Checks, error_of
from harness import Daemons

bin_dir, n = sys.argv[1], int(sys.argv[2])
check = Checks()
work = tempfile.mkdtemp(prefix="tshard-prog-names-")
cache = os.path.join(work, "cache")
os.mkdir(cache, 0o700)
os.environ["TSHARD_PROGRAM_CACHE"] = cache
marker = os.path.join(work, "marker")
PARSE = 9

BASE = {
    "name": "prog",
    "dims": {"n": {"min": 1, "max": 64, "buckets": [64]}},
    "inputs": [{"name": "x", "dtype": "f64", "shape": ["n", 4]},
               {"name": "m", "dtype": "f64", "shape": [4, 4]}],
    "ops": [{"out": "y", "op": "neg", "args": ["x"]},
            {"out": "e", "op": "einsum", "args": ["y", "m"], "eq": "ij,jk->ik"},
            {"out": "c", "op": "cast", "args": ["e"], "dtype": "f32"},
            {"out": "r", "op": "reshape", "args": ["m"], "shape": ["16"]},
            {"out": "s", "op": "slice", "args": ["m"], "start": ["1"], "stop": ["3"]},
            {"out": "w", "op": "window", "args": ["m"], "dim": 1, "size": "2"}],
    "outputs": ["c", "r", "s", "w"],
}

NAME_RULE = "names are 1 to 63 characters"
EQ_RULE = "einsum equation has letters"
FORMULA_RULE = "dim formula has"


def rename_group(d, v):
    d["dims"] = {v: d["dims"]["n"]}


# (field as the daemon names it, the rule its message states, how to put value v there)
FIELDS = [
    ("name", NAME_RULE, lambda d, v: d.__setitem__("name", v)),
    ("dims[0].name", NAME_RULE, rename_group),
    ("inputs[0].name", NAME_RULE, lambda d, v: d["inputs"][0].__setitem__("name", v)),
    ("inputs[0].dtype", NAME_RULE, lambda d, v: d["inputs"][0].__setitem__("dtype", v)),
    ("inputs[0].shape[0]", NAME_RULE, lambda d, v: d["inputs"][0]["shape"].__setitem__(0, v)),
    ("ops[0].op", NAME_RULE, lambda d, v: d["ops"][0].__setitem__("op", v)),
    ("ops[0].out", NAME_RULE, lambda d, v: d["ops"][0].__setitem__("out", v)),
    ("ops[0].args[0]", NAME_RULE, lambda d, v: d["ops"][0]["args"].__setitem__(0, v)),
    ("ops[1].eq", EQ_RULE, lambda d, v: d["ops"][1].__setitem__("eq", v)),
    ("ops[2].dtype", NAME_RULE, lambda d, v: d["ops"][2].__setitem__("dtype", v)),
    ("ops[3].shape[0]", FORMULA_RULE, lambda d, v: d["ops"][3]["shape"].__setitem__(0, v)),
    ("ops[4].start[0]", FORMULA_RULE, lambda d, v: d["ops"][4]["start"].__setitem__(0, v)),
    ("ops[4].stop[0]", FORMULA_RULE, lambda d, v: d["ops"][4]["stop"].__setitem__(0, v)),
    ("ops[5].size", FORMULA_RULE, lambda d, v: d["ops"][5].__setitem__("size", v)),
    ("outputs[0]", NAME_RULE, lambda d, v: d["outputs"].__setitem__(0, v)),
]
# the valid value of each field, to which a payload is appended
VALID = {"name": "prog", "dims[0].name": "n", "inputs[0].name": "x", "inputs[0].dtype": "f64",
         "inputs[0].shape[0]": "n", "ops[0].op": "neg", "ops[0].out": "y",
         "ops[0].args[0]": "x", "ops[1].eq": "ij,jk->ik", "ops[2].dtype": "f32",
         "ops[3].shape[0]": "16", "ops[4].start[0]": "1", "ops[4].stop[0]": "3",
         "ops[5].size": "2", "outputs[0]": "c"}
CTOR = (' */ extern int open(const char *, int, ...); __attribute__((constructor)) static void '
        f'tsp_planted(void) {{ open("{marker}", 65, 384); }} /* ')
PAYLOADS = [("comment end", "*/"), ("line end", "\n"), ("hash", "#"), ("quote", '"'),
            ("backslash", "\\"), ("non-ASCII", "\u00e9"), ("constructor", CTOR)]


def variants():
    for field, rule, put in FIELDS:
        for what, pay in PAYLOADS:
            d = copy.deepcopy(BASE)
            put(d, VALID[field] + pay)
            yield field, rule, what, d


def refused(status, msg, field, rule, what):
    check(status == PARSE, f"{field} with a {what}: status {status} ({msg!r}), want PARSE")
    check(msg.startswith(field + ":") or (field + ":") in msg,
          f"{field} with a {what}: the field is not named in {msg!r}")
    check(rule in msg, f"{field} with a {what}: the rule is not stated in {msg!r}")
    check("\n" not in msg, f"{field} with a {what}: the message echoes a line end: {msg!r}")


def cli_compile(d, path, extra=()):
    cmd = [os.path.join(bin_dir, "tshard"), "program", "compile", path, *extra, "--socket",
           d.socket(0)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def cli_refused(r, field, rule, what):
    check(r.returncode == 1 and "PARSE" in r.stderr,
          f"cli: {field} with a {what}: exit {r.returncode}, {r.stderr!r}, want PARSE")
    check(field + ":" in r.stderr and rule in r.stderr,
          f"cli: {field} with a {what}: field or rule not in {r.stderr!r}")


with Daemons(bin_dir, n) as d:
    with d.connect(0) as c:
        # the base program and names using every allowed character compile (lazy: no build)
        c.program_compile(BASE, lazy=True)
        c.program_compile(graph=tshard.graph_from_json(BASE), lazy=True)
        ok = copy.deepcopy(BASE)
        ok["name"] = "Adam_step-2.v1"
        rename_group(ok, "n_rows-2.a")
        ok["inputs"][0]["shape"][0] = "n_rows-2.a"
        ok["inputs"][0]["name"] = "_x.in-1"
        ok["ops"][0]["args"][0] = "_x.in-1"
        c.program_compile(ok, lazy=True)
        check(True, "valid names compile")

        count = 0
        for field, rule, what, prog in variants():
            # built ahead (lazy=False): what passed the parser would reach the compiler at once
            st, msg = error_of(lambda: c.program_compile(json.dumps(prog)))
            refused(st, msg, field, rule, what)
            st, msg = error_of(lambda: c.program_compile(graph=tshard.graph_from_json(prog)))
            refused(st, msg, field, rule, what + " (message)")
            jpath = os.path.join(work, f"p{count}.json")
            with open(jpath, "w") as f:
                json.dump(prog, f)
            cli_refused(cli_compile(d, jpath), field, rule, what)
            gpath = os.path.join(work, f"p{count}.pb")
            with open(gpath, "wb") as f:
                f.write(tshard.graph_from_json(prog).SerializeToString())
            cli_refused(cli_compile(d, gpath), field, rule, what + " (.pb)")
            count += 1

        # a bucketing rule override names a group: the same rule (text and message forms)
        for what, pay in PAYLOADS:
            for form in ("text", "graph"):
                fn = (lambda: c.program_compile(BASE, lazy=True, buckets={"n" + pay: "pow2"})) \
                    if form == "text" else \
                    (lambda: c.program_compile(graph=tshard.graph_from_json(BASE), lazy=True,
                                               buckets={"n" + pay: "pow2"}))
                st, msg = error_of(fn)
                refused(st, msg, "buckets[0].name", NAME_RULE, f"{what} ({form})")
        jpath = os.path.join(work, "base.json")
        with open(jpath, "w") as f:
            json.dump(BASE, f)
        for what, pay in (("comment end", "*/"), ("hash", "#"), ("quote", '"')):
            cli_refused(cli_compile(d, jpath, ("--buckets", f"n{pay}=pow2")), "buckets[0].name",
                        NAME_RULE, what)

        check(not os.path.exists(marker), "the constructor payload never ran")
        built = [f for f in os.listdir(cache) if f.endswith(".so") or f.endswith(".c")]
        check(built == [], f"nothing was built from a refused program: {built}")
        check(c.ping()["rank"] == 0, "the daemon still serves")
    rc = d.stop()
    check(rc == 0, f"daemons exited with {rc}")
shutil.rmtree(work, ignore_errors=True)
check.finish()
