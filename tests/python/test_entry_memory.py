#!/usr/bin/python3
"""A tensor's store entry is memory the daemon holds for as long as the tensor lives, counted in
the memory account like its slice: through real daemons (2 ranks) and the Python client.

Empty tensors (no slice bytes at all) still raise memory in use by their entries, on every rank,
and give it back when dropped; under a small --memory-limit, creating empty tensors ends in
LimitError naming the entry, with the daemons serving and nothing half made.

usage: test_entry_memory.py BUILD_BIN_DIR"""
import sys

import tshard
from checks import Checks
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
ATTR = "mesh=[2] placements=[S(0)]"

with Daemons(bin_dir, 2) as d:
    c = d.connect(0)
    base = [d.connect(r).stats()["memory_in_use"] for r in range(2)]
    for i in range(200):
        c.create(f"e{i}", "f32", [0, 3], ATTR)
    grown = [d.connect(r).stats()["memory_in_use"] - base[r] for r in range(2)]
    check(all(g >= 200 * 512 for g in grown), f"200 empty tensors hold {grown} bytes of entries")
    check(all(d.connect(r).stats()["pool"]["staging"] == 0 for r in range(2)),
          "entries are not staging")
    for i in range(200):
        c.drop(f"e{i}")
    back = [d.connect(r).stats()["memory_in_use"] for r in range(2)]
    check(back == base, f"memory in use back after the drops: {back}, before {base}")
    check(d.stop() == 0, "the daemons exit 0")

with Daemons(bin_dir, 2, ["--memory-limit", "256K", "--pool-cache", "0"]) as d:
    c = d.connect(0)
    made, err = 0, None
    for i in range(2000):
        try:
            c.create(f"e{i}", "f32", [0], ATTR)
            made += 1
        except tshard.TshardError as e:
            err = e
            break
    check(isinstance(err, tshard.LimitError) and "a tensor's entry" in str(err)
          and "262144" in str(err), f"after {made} empty tensors: {err!r}")
    check(100 <= made < 2000 and len(c.list()) == made,
          f"{made} made, {len(c.list())} listed: the refused one is not half made")
    check(c.ping()["rank"] == 0 and d.connect(1).ping()["rank"] == 1, "both ranks serve")
    check(d.stop() == 0, "the daemons exit 0")
check.finish()
