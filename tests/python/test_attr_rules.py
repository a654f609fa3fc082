#!/usr/bin/python3
"""One grammar of attribute rules in C and Python: the C matcher (proto/rules.c, through the
tshard-rule-echo filter) and tshard.attr_rules agree on random patterns, names and rule texts
(fixed seed): which patterns are valid, which rule a name takes (an exact name first, else the
first glob matching, else none), and how a "PATTERN=ATTR" text splits; plus hand-written cases
with their expected answers.

usage: test_attr_rules.py RULE_ECHO"""
import json
import random
import subprocess
import sys

from tshard import attr_rules
from tshard.errors import TshardError
from checks import Checks

check = Checks()
rng = random.Random(29)


def py_valid(p):
    try:
        attr_rules.parse({p: None})
        return True
    except (TshardError, TypeError):
        return False


def py_split(text):
    try:
        return list(attr_rules.parse([text])[0][:2])
    except (TshardError, TypeError):
        return None


def word(alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


HAND = [  # (patterns, name, the pick expected)
    (["h.*.w", "h.1.w"], "h.1.w", 1),          # an exact name before an earlier glob
    (["h.*", "h.*.w"], "h.0.w", 0),            # the first glob in order
    (["ln_?.[!w]"], "ln_f.b", 0),
    (["ln_?.[!w]"], "ln_f.w", -1),
    (["[]a]x"], "]x", 0),                      # ']' first in a set is one of its characters
    (["a\\b"], "a\\b", 0),                     # no escapes: a backslash is itself
    (["w[0-9]"], "w7", 0),
]


def main():
    cases = []
    for pats, name, _ in HAND:
        cases.append({"patterns": pats, "name": name, "rule": f"{pats[0]}=mesh=[2] placements=[R]"})
    glob_chars = "ab.*?[]!^-"
    for _ in range(3000):
        pats = [word(glob_chars, 0, 7) for _ in range(rng.randint(1, 4))]
        name = word("ab.-*[]?!^", 1, 7)
        if rng.random() < 0.6:  # a name near a pattern: its wildcards filled in
            name = "".join(word("ab.", 0, 3) if ch == "*" else rng.choice("ab.") if ch == "?"
                           else ch for ch in rng.choice(pats)) or "a"
        rule = rng.choice([word("ab.*?[]!", 0, 5) + "=" + rng.choice(
                               ["mesh=[2] placements=[R]", " mesh=[2]", "\tmesh", "[2]", ""])
                           for _ in range(3)] + ["mesh=[2] placements=[R]", word("ab=", 0, 4)])
        cases.append({"patterns": pats, "name": name, "rule": rule})
    r = subprocess.run([sys.argv[1]], input="".join(json.dumps(c) + "\n" for c in cases),
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"tshard-rule-echo: {r.returncode} {r.stderr}")
    outs = [json.loads(line) for line in r.stdout.splitlines()]
    check(len(outs) == len(cases), f"{len(outs)} answers to {len(cases)} cases")
    bad = []
    for k, (c, o) in enumerate(zip(cases, outs)):
        valid = [py_valid(p) for p in c["patterns"]]
        rules = [(p, None) for p, v in zip(c["patterns"], valid) if v]
        py = {"valid": valid, "pick": attr_rules.pick(rules, c["name"]),
              "split": py_split(c["rule"])}
        if py != o:
            bad.append((c, o, py))
        if k < len(HAND):
            check(o["pick"] == HAND[k][2], f"hand case {HAND[k]}: C picked {o['pick']}")
    check(not bad, f"{len(bad)} of {len(cases)} cases differ, e.g. {bad[:3]}")
    check(sum(all(o["valid"]) for o in outs) > 500 and sum(o["pick"] >= 0 for o in outs) > 300
          and sum(o["split"] is not None for o in outs) > 300,
          "the random cases exercise valid patterns, matches and splits")
    check.finish()


if __name__ == "__main__":
    main()
