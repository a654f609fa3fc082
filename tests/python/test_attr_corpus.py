#!/usr/bin/python3
"""The Python attribute parser (client/python/tshard/attr.py) against the daemon's (shard/
attr_text.c): (1) every line of the shared corpus tests/grammar/attr_corpus.jsonl, which the C
unit test test_attr_corpus checks against the C parser, gives the same canonical form or the
same status and message; (2) random texts (valid attributes in random spellings with random
blanks, and mutations of them: characters inserted, deleted, replaced) get the same answer from
both parsers, the C one run as a filter (tshard-attr-echo); (3) accepted texts round-trip through
the Python formatter, and Attr objects with named axes format to what C accepts.

usage: test_attr_corpus.py CORPUS.jsonl ATTR_ECHO_BINARY"""
import json
import random
import subprocess
import sys

from checks import Checks
from tshard import Attr, AttrError, Mesh, Partial, Replicate, Shard

corpus_path, echo_bin = sys.argv[1], sys.argv[2]
check = Checks()


def python_answer(text):
    try:
        return {"canonical": str(Attr.parse(text))}
    except AttrError as e:
        return {"error": e.name, "message": e.message}


# (1) the corpus
entries = []
with open(corpus_path) as f:
    for no, line in enumerate(f, 1):
        if line.startswith("#") or not line.strip():
            continue
        entries.append((no, json.loads(line)))
for no, e in entries:
    want = {k: e[k] for k in ("canonical", "error", "message") if k in e}
    got = python_answer(e["text"])
    check(got == want, f"corpus line {no}: {e['text']!r}: python {got} != corpus {want}")
    if "canonical" in e:
        again = python_answer(e["canonical"])
        check(again == {"canonical": e["canonical"]}, f"corpus line {no}: canonical not stable")
check(sum("canonical" in e for _, e in entries) >= 30, "corpus has accepted texts")
check(sum("error" in e for _, e in entries) >= 50, "corpus has refused texts")

# (2) random texts through both parsers
rng = random.Random(14)
BL = ["", "", "", " ", "  ", "\t", "\n"]


def b():
    return rng.choice(BL)


def placement(mdim_names, ndim):
    k = rng.random()
    if k < 0.4:
        d = rng.randrange(ndim) if rng.random() < 0.8 else -rng.randint(1, ndim)
        rule = rng.choice(["", "", "", f",{b()}chunk", f",{b()}balanced",
                           f",{b()}split={b()}chunk"])
        return rng.choice([f"S({b()}{d}{b()}{rule})", f"Shard({d}{rule})",
                           f"Shard({b()}dim{b()}={b()}{d}{rule})"])
    if k < 0.7:
        return rng.choice(["R", "Replicate", "Replicate()", f"Replicate({b()})"])
    op = rng.choice(["sum", "max", "min"]) if rng.random() < 0.8 else "sum"
    return rng.choice([f"P({op})", f"Partial({op})", f"Partial('{op}')", f'Partial("{op}")',
                       f"Partial(reduce_op={b()}{op})", "P", "Partial()", "Partial"])


def random_text():
    mdims = rng.randint(1, 3)
    shape = [rng.randint(1, 3) for _ in range(mdims)]
    named = rng.random() < 0.4
    names = rng.sample(["dp", "tp", "pp", "x", "_y1"], mdims) if named else None
    n = 1
    for s in shape:
        n *= s
    ndim = rng.randint(1, 3)
    if named:
        mesh = ",".join(f"{b()}{x}{b()}={b()}{s}{b()}" for x, s in zip(names, shape))
    else:
        mesh = ",".join(f"{b()}{s}{b()}" for s in shape)
    o, c = rng.choice(["[]", "[]", "()"])
    text = f"{b()}mesh{b()}={b()}{o}{mesh}{rng.choice(['', '', ','])}{c}"
    if rng.random() < 0.5:
        ranks = rng.sample(range(40), n)
        text += f"{b()}@{b()}" + ",".join(f"{r}{b()}" for r in ranks)
    text += rng.choice([" ", "\t", "  "])
    places = [placement(names, ndim) for _ in range(mdims)]
    if named and rng.random() < 0.5:
        keep = rng.sample(range(mdims), rng.randint(1, mdims))
        items = [f"{names[m]}{b()}:{b()}{places[m]}" for m in keep]
    else:
        items = places
    o, c = rng.choice(["[]", "[]", "()"])
    text += (f"placements{b()}={b()}{o}" + ",".join(f"{b()}{p}{b()}" for p in items)
             + rng.choice(["", "", ",", f",{b()}"]) + c)
    if rng.random() < 0.4:
        d = rng.randrange(ndim) if rng.random() < 0.8 else -rng.randint(1, ndim)
        parts = rng.randint(1, 4)
        text += f" splits={b()}{{{d}{b()}:{b()}[" + ",".join(
            str(rng.randint(0, 5)) for _ in range(parts)) + f"]{b()}}}"
    return text + b()


ALPHABET = "mesh=[]@,-0123456789 \tplacements:SRPhardpli()'\"{}xyz_\u00e9\0chunkbl-"


def mutate(text):
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(text) + 1)
        k = rng.random()
        if k < 0.4:
            text = text[:i] + rng.choice(ALPHABET) + text[i:]
        elif k < 0.7:
            text = text[:i] + text[i + 1:]
        else:
            text = text[:i] + rng.choice(ALPHABET) + text[i + 1:]
    return text


texts = []
for _ in range(3000):
    t = random_text()
    texts.append(t)
    texts.append(mutate(t))
proc = subprocess.run([echo_bin], input="".join(json.dumps(t) + "\n" for t in texts),
                      capture_output=True, text=True, timeout=120)
check(proc.returncode == 0, f"attr_echo failed: {proc.stderr}")
c_answers = [json.loads(line) for line in proc.stdout.splitlines()]
check(len(c_answers) == len(texts), f"attr_echo answered {len(c_answers)} of {len(texts)}")
accepted = 0
for t, want in zip(texts, c_answers):
    got = python_answer(t)
    check(got == want, f"{t!r}: python {got} != C {want}")
    accepted += "canonical" in want
# both sides of the grammar were exercised
check(accepted > 1500, f"{accepted} random texts accepted")
check(len(texts) - accepted > 1500, f"{len(texts) - accepted} random texts refused")

# (3) Attr objects with names format to text C accepts unchanged
for attr in [Attr(Mesh({"dp": 2, "tp": 4}), {"tp": Shard(1)}),
             Attr(Mesh([2, 2], ranks=[3, 2, 1, 0], names=["a", "b"]), [Partial("max"), Shard(0)]),
             Attr(Mesh([4]), [Replicate()])]:
    text = str(attr)
    proc = subprocess.run([echo_bin], input=json.dumps(text) + "\n", capture_output=True,
                          text=True, timeout=60)
    check(json.loads(proc.stdout) == {"canonical": text}, f"C does not keep {text}")
    check(Attr.parse(text) == attr, f"{text} parses back equal")
check(Attr.parse("mesh=[dp=2,tp=4] placements=[R,R]") != Attr.parse("mesh=[2,4] placements=[R,R]"),
      "axis names are part of equality")
for bad in [lambda: Mesh({"dp": 2, "dp2": 0}), lambda: Mesh([2], names=["1x"]),
            lambda: Mesh([2, 2], names=["a", "a"]), lambda: Attr(Mesh([2]), {"dp": Shard(0)}),
            lambda: Attr(Mesh({"dp": 2}), {"tp": Shard(0)})]:
    try:
        bad()
        check(False, "accepted a bad mesh or placement dict")
    except ValueError:
        check(True, "refused")
try:
    Attr.parse(42)
    check(False, "parsed a number")
except TypeError:
    check(True, "refuses a non-text")
check.finish()
