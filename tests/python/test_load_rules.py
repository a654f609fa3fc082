#!/usr/bin/python3
"""Attribute rules of load (per name, globs, a default) through real daemons and clients: a
checkpoint of mixed 1-D and 2-D tensors saved on 4 ranks loads onto 3 in one call (Python's
Client.load and the CLI's `tshard load --attr PATTERN=ATTR --default-attr ATTR`), every tensor
equal to its numpy reference and under the attribute its rule gives (an exact name before the
globs, the first glob in order before the later ones, then the default, as
tshard.attr_rules.pick predicts: the C and the Python matcher agree); load_safetensors takes the
same rules (a glob imports what it matches). Misuse: a rule naming a tensor the checkpoint lacks,
a rule whose attribute does not fit its tensor, no rule or default for a tensor whose saved
attribute does not fit the ranks, bad patterns and rule texts (Python and CLI), wrong types;
each refused with a message naming what was wrong, and nothing created on any rank.

usage: test_load_rules.py BUILD_BIN_DIR"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import tshard
from tshard import attr_rules
from checks import Checks, error_of
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
rng = np.random.default_rng(7)
work = tempfile.mkdtemp(prefix="tshard-rules-")

# name -> (dtype, shape, attr on 4 ranks)
SAVED = {
    "wte": ("f32", (50, 8), "mesh=[4] placements=[S(0)]"),
    "wpe": ("f32", (12, 8), "mesh=[4] placements=[R]"),
    "h.0.attn.w": ("f32", (8, 24), "mesh=[4] placements=[S(1)]"),
    "h.0.attn.b": ("f32", (24,), "mesh=[4] placements=[S(0)]"),
    "h.1.attn.w": ("f64", (8, 24), "mesh=[2,2] placements=[S(0),S(1)]"),
    "h.1.attn.b": ("f64", (24,), "mesh=[4] placements=[R]"),
    "ln_f.w": ("f16", (8,), "mesh=[4] placements=[S(0)]"),
    "ln_f.b": ("i32", (8,), "mesh=[4] placements=[R]"),
}
NP_DT = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32}
ref = {n: rng.integers(-1000, 1000, size=s).astype(NP_DT[dt]) for n, (dt, s, _) in SAVED.items()}

S0, S1, REP = ("mesh=[3] placements=[S(0)]", "mesh=[3] placements=[S(1)]",
               "mesh=[3] placements=[R]")
RULES = {"h.1.attn.w": S0,        # an exact name wins over the glob below
         "h.*.w": S1,             # 2-D weights: columns
         "h.*": S0,               # a later glob: only what the earlier ones do not match
         "ln_?.[!w]": REP,        # ln_f.b
         "wte": S0}
DEFAULT = REP


def canon(attr, c):
    """The canonical text the daemons print for an attribute on this job."""
    c.create("__probe", "f32", (6, 6), attr)
    try:
        return c.describe("__probe")["attr"]
    finally:
        c.drop("__probe")


def expected_attr(name):
    return attr_rules.attr_for(attr_rules.parse(RULES), DEFAULT, name)


def check_loaded(c, what):
    ok = True
    for name in SAVED:
        got = c.get(name)
        ok &= got.dtype == ref[name].dtype and np.array_equal(got, ref[name])
    check(ok, f"{what}: every tensor equals its numpy reference")
    want = {n: canon(expected_attr(n), c) for n in SAVED}
    got = {n: c.describe(n)["attr"] for n in SAVED}
    check(got == want, f"{what}: attributes by rule {got} != {want}")


def nothing_created(d, what):
    for r in range(d.np):
        with d.connect(r) as cr:
            check(cr.list() == [], f"{what}: rank {r} holds {cr.list()}")


def main():
    ck = os.path.join(work, "ck")
    with Daemons(bin_dir, 4) as d, d.connect(0) as c:
        for n, (dt, s, a) in SAVED.items():
            c.create(n, dt, s, a)
            c.put(n, ref[n])
        c.save(ck, names=list(SAVED))

    # the matchers agree on which rule each name takes (the C one is checked through the daemons)
    rules = attr_rules.parse(RULES)
    check([attr_rules.pick(rules, n) for n in SAVED] == [4, -1, 1, 2, 0, 2, -1, 3],
          f"pick: {[attr_rules.pick(rules, n) for n in SAVED]}")
    check(attr_rules.parse(["h.*.w=mesh=[3] placements=[S(1)]"]) == [("h.*.w", S1)],
          "a rule's text splits at its first '='")

    with Daemons(bin_dir, 3) as d, d.connect(0) as c:
        res = c.load(ck, attr=RULES, default=DEFAULT)
        check(res["tensors"] == len(SAVED), f"one load of every tensor: {res}")
        check_loaded(c, "Python load with rules")
        c.drop_many(list(SAVED))

        env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job)
        tsh = os.path.join(bin_dir, "tshard")
        args = [tsh, "load", ck]
        for p, a in RULES.items():
            args += ["--attr", f"{p}={a}"]
        out = subprocess.run(args + ["--default-attr", DEFAULT], capture_output=True, text=True,
                             env=env, timeout=120)
        check(out.returncode == 0 and f"loaded {len(SAVED)} tensors" in out.stdout,
              f"tshard load --attr rules: {out.returncode} {out.stdout} {out.stderr}")
        check_loaded(c, "CLI load with rules")
        c.drop_many(list(SAVED))

        # only some names, the rules as "PATTERN=ATTR" texts
        c.load(ck, names=["h.0.attn.w", "ln_f.b"], attr=[f"h.*.w={S1}"], default=REP)
        check(c.describe("h.0.attn.w")["attr"] == canon(S1, c) and
              c.describe("ln_f.b")["attr"] == canon(REP, c) and
              np.array_equal(c.get("h.0.attn.w"), ref["h.0.attn.w"]), "names with text rules")
        c.drop_many(["h.0.attn.w", "ln_f.b"])

        # misuse: refused, nothing created anywhere
        cases = [
            (lambda: c.load(ck, attr={"nope": S0}, default=REP), tshard.NotFoundError,
             ["'nope'", "attribute rule"]),
            (lambda: c.load(ck, attr={"h.*": S1}, default=REP), tshard.BadAttributeError,
             ["the rule 'h.*'", "h.0.attn.b"]),
            (lambda: c.load(ck, attr={"wte": S0}), tshard.BadAttributeError,
             ["give a rule or a default"]),
            (lambda: c.load(ck, attr={"h.[^0]": S0}, default=REP), tshard.InvalidArgumentError,
             ["'[!'"]),
            (lambda: c.load(ck, attr={"h.[01": S0}, default=REP), tshard.InvalidArgumentError,
             ["not closed"]),
            (lambda: c.load(ck, attr=["mesh=[3] placements=[R]"]), tshard.InvalidArgumentError,
             ["expected PATTERN=ATTR"]),
            (lambda: c.load(ck, attr={"wte": 3}), TypeError, ["'wte'"]),
            (lambda: c.load(ck, attr=S0, default=REP), TypeError, ["not both"]),
            (lambda: c.load(ck, attr=42), TypeError, ["int"]),
        ]
        for i, (fn, exc, needles) in enumerate(cases):
            check.raises(exc, fn, f"misuse {i}", needles)
            nothing_created(d, f"misuse {i}")
        for bad, needle in [(["--attr", "mesh=[3] placements=[R]"], "expected PATTERN=ATTR"),
                            (["--attr", f"h.[^1]={S0}"], "'[!'")]:
            out = subprocess.run([tsh, "load", ck, *bad], capture_output=True, text=True,
                                 env=env, timeout=120)
            check(out.returncode != 0 and needle in out.stderr,
                  f"tshard load {bad}: {out.returncode} {out.stderr}")
        nothing_created(d, "CLI misuse")

        # load_safetensors takes the same rules: a glob imports the tensors it matches
        st = os.path.join(work, "m.safetensors")
        c.load(ck, names=list(SAVED), default=REP)
        c.save_safetensors(st, names=list(SAVED))
        c.drop_many(list(SAVED))
        check(error_of(lambda: c.load_safetensors(st, {"wte": None}))[0] == 1,
              "a rule without attribute and no default is refused")
        got = c.load_safetensors(st, {"h.*.w": S1})
        check(sorted(got) == ["h.0.attn.w", "h.1.attn.w"] and
              c.describe("h.1.attn.w")["attr"] == canon(S1, c) and
              np.array_equal(c.get("h.1.attn.w"), ref["h.1.attn.w"]),
              f"load_safetensors with a glob rule: {got}")
        c.drop_many(got)
        got = c.load_safetensors(st, {"h.*.w": S1, "wte": S0}, default=REP)
        check(sorted(got) == sorted(SAVED) and c.describe("wte")["attr"] == canon(S0, c) and
              c.describe("ln_f.w")["attr"] == canon(REP, c) and
              all(np.array_equal(c.get(n), ref[n]) for n in SAVED),
              "load_safetensors: rules and a default")
    shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
