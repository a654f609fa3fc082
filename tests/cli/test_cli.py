#!/usr/bin/python3
"""The tshard CLI without a daemon: `plan` simulating 4096 ranks (the EXPLAIN and --json agree
with the planner's minimum) and ranks on hosts (--topology, --hostfile), `--help` on every
subcommand, and errors with their exit codes.

usage: test_cli.py BUILD_BIN_DIR"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402

tshard = os.path.join(sys.argv[1], "tshard")
check = Checks()


def run(*args):
    return subprocess.run([tshard, *args], capture_output=True, text=True, timeout=120)


n = 4096
s0 = f"mesh=[{n}] placements=[S(0)]"
s1 = f"mesh=[{n}] placements=[S(1)]"
r = run("plan", "--shape", "4096,4096", "--from", s0, "--to", s1, "--ranks", str(n), "--json")
check(r.returncode == 0, f"plan 4096 ranks: {r.stderr}")
p = json.loads(r.stdout)
check(p["strategy"] == "alltoall", f"S(0)->S(1) picks alltoall, not {p['strategy']}")
# every element not already local crosses the wire once: 4096*4096*4 bytes minus the diagonal
# blocks each rank keeps
expect_min = 4096 * 4096 * 4 - n * 4
check(p["min_wire_bytes"] == expect_min, f"min wire bytes {p['min_wire_bytes']} != {expect_min}")
check(p["costs"]["wire_bytes"] == expect_min, "auto moves exactly the minimum")
check(p["plan_ms"] < 100, f"planning 4096 ranks took {p['plan_ms']} ms")
check(p["strategies"]["allgather"]["wire_bytes"] > p["costs"]["wire_bytes"],
      "allgather moves more bytes than alltoall")
check(p["strategies"]["local"].get("applies") is False, "local does not apply")

r = run("plan", "--shape", "4096,4096", "--from", s0, "--to", s1, "--ranks", str(n))
check(r.returncode == 0 and "strategy: alltoall" in r.stdout and "per rank (8 of 4096)" in r.stdout,
      "text EXPLAIN names the strategy and summarizes 8 of 4096 ranks")

# forcing a strategy that does not apply is a clear error
r = run("plan", "--shape", "8,8", "--from", "mesh=[2] placements=[S(0)]",
        "--to", "mesh=[2] placements=[S(1)]", "--strategy", "allreduce")
check(r.returncode == 1 and "allreduce" in r.stderr, f"forced allreduce: {r.stderr!r}")
# ranks beyond the simulated world
r = run("plan", "--shape", "8", "--from", "mesh=[2]@0,5 placements=[S(0)]",
        "--to", "mesh=[2] placements=[R]", "--ranks", "4")
check(r.returncode == 1 and "5" in r.stderr, f"rank outside the world: {r.stderr!r}")

# ranks on hosts: 1,024 hosts of 8 ranks planned in under 100 ms, with the bound each host's link
# must carry (every host lacks all but its own 1/1024 of the 128 MiB); a partial sum scattered
# over two hosts is reduced inside each host first, then crosses once (the bound), instead of
# through a root that receives 128 MiB
big = "mesh=[8192] placements=[S(0)]"
r = run("plan", "--shape", "8192,4096", "--from", big, "--to", "mesh=[8192] placements=[R]",
        "--topology", "hosts=1024x8", "--json")
check(r.returncode == 0, f"plan on 1024 hosts: {r.stderr}")
p = json.loads(r.stdout)
check(p["plan_ms"] < 100 and p["hosts"] == 1024 and p["topology"] == "hosts=1024x8",
      f"1024x8: {p['plan_ms']} ms, {p.get('hosts')} hosts")
check(p["host_bound_bytes"] == 8192 * 4096 * 4 // 1024 * 1023, f"bound {p['host_bound_bytes']}")
# hierarchical: every block enters each host once (the count is an even-spread estimate at this
# many pieces, within rounding of the bound)
check(p["strategy"] == "hierarchical"
      and abs(p["costs"]["host_link_bytes"] - p["host_bound_bytes"]) < p["host_bound_bytes"] / 1000,
      f"1024x8 S(0)->R: {p['strategy']}, link {p['costs']['host_link_bytes']} bytes")
hf = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tshard-hostfile-{os.getpid()}")
with open(hf, "w") as f:
    f.write("# two hosts of two slots\nnode-a slots=2\nnode-b slots=2\n")
r = run("plan", "--shape", "4096,4096", "--from", "mesh=[4] placements=[P(sum)]",
        "--to", "mesh=[4] placements=[S(0)]", "--hostfile", hf)
check(r.returncode == 0 and "topology: hosts=2x2 (2 hosts)" in r.stdout
      and "host link bound: 33554432 bytes" in r.stdout and "strategy: hierarchical" in r.stdout
      and "1. reduce_scatter to mesh=[2,2]@0-3 placements=[P(sum),S(0)] (host link 0 bytes)"
      in r.stdout and "2. p2p to mesh=[4]@0-3 placements=[S(0)] (host link 33554432 bytes)"
      in r.stdout,
      f"P(sum)->S(0) on a hostfile's two hosts:\n{r.stdout}{r.stderr}")
with open(hf, "w") as f:
    f.write("node-a slots=zero\n")
r = run("plan", "--shape", "8", "--from", "mesh=[2] placements=[S(0)]",
        "--to", "mesh=[2] placements=[R]", "--hostfile", hf)
check(r.returncode == 2 and "line 1" in r.stderr and hf in r.stderr, f"bad hostfile: {r.stderr!r}")
os.unlink(hf)
for spec, says in [("hosts=2x", "ranks per host"), ("racks=2", "valid: hosts=HxR"),
                   ("hosts=1x2", "valid ranks are 0 to 1")]:
    r = run("plan", "--shape", "8", "--from", "mesh=[4] placements=[S(0)]",
            "--to", "mesh=[4] placements=[R]", "--topology", spec)
    check(r.returncode in (1, 2) and says in r.stderr, f"--topology {spec}: {r.stderr!r}")
r = run("plan", "--shape", "8", "--from", s0, "--to", s1, "--topology", "hosts=2x2",
        "--hostfile", "/nonexistent")
check(r.returncode == 2 and "not both" in r.stderr, f"--topology and --hostfile: {r.stderr!r}")

# docs/operations.md's example of a simulated placement, run as written
readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "operations.md")).read()
block = [b for b in readme.split("```sh\n")[1:] if "--topology hosts=2x2" in b][0].split("```")[0]
r = subprocess.run(["bash", "-c", block.replace("build/bin/tshard", tshard)], capture_output=True,
                   text=True, timeout=120)
check(r.returncode == 0 and "strategy: hierarchical" in r.stdout and "stages:" in r.stdout
      and "host link bound: 33554432 bytes" in r.stdout and "strategy: allgather" in r.stdout
      and "between hosts 5e+04 MB/s (set)" in r.stdout, f"README's plan example: {r.stderr!r}")

# link rates: the estimate in the JSON, and the refusals
plan_rates = ("plan", "--shape", "4096,4096", "--from", "mesh=[4] placements=[S(0)]", "--to",
              "mesh=[4] placements=[R]", "--topology", "hosts=2x2")
for rates, want in (("cross=500mbit", "hierarchical"), ("host=8GB/s,cross=50GB/s", "allgather")):
    r = run(*plan_rates, "--link-rates", rates, "--json")
    j = json.loads(r.stdout) if r.returncode == 0 else {}
    check(j.get("strategy") == want and j.get("costs", {}).get("time_ns", 0) > 0,
          f"--link-rates {rates}: {r.stdout[:300]!r} {r.stderr!r}")
r = run(*plan_rates, "--link-rates", "cross=500mbit", "--json")
j = json.loads(r.stdout)
ag = j["strategies"]["allgather"]
check(j["link_rates"] == {"host": 8e9, "cross": 62.5e6}
      and abs(ag["time_ns"] - 1e9 * (ag["host_link_bytes"] / 62.5e6
                                     + ag["max_rank_bytes"] / 8e9)) < 2,
      f"the estimate of allgather: {ag} at {j.get('link_rates')}")
for bad, msg in (("cross=5mb", "expected a number and a unit"), ("lan=1GB/s", "is neither host=RATE"),
                 ("cross=1GB/s,", "trailing comma")):
    r = run(*plan_rates, "--link-rates", bad)
    check(r.returncode == 2 and msg in r.stderr, f"--link-rates {bad}: {r.stderr!r}")
r = run("plan", "--shape", "8,8", "--from", "mesh=[2] placements=[S(0)]", "--to",
        "mesh=[2] placements=[R]", "--link-rates", "cross=1GB/s")
check(r.returncode == 2 and "with --topology or --hostfile" in r.stderr,
      f"--link-rates without a topology: {r.stderr!r}")

# a bad attribute points at the character
r = run("show", "--shape", "8,8", "--attr", "mesh=[2,2] placements=[S(0),Q]")
check(r.returncode == 1 and "column" in r.stderr, f"bad attribute: {r.stderr!r}")
# ragged sizes that do not sum to the dim
r = run("show", "--shape", "10", "--attr", "mesh=[2] placements=[S(0)] splits={0:[3,4]}")
check(r.returncode == 1 and "10" in r.stderr, f"ragged sizes: {r.stderr!r}")
# usage errors
check(run("show", "--shape", "8").returncode == 2, "show without --attr is a usage error")
check(run("plan", "--shape", "x,3", "--from", s0, "--to", s1).returncode == 2, "bad --shape")
check(run("frobnicate").returncode == 2, "unknown subcommand")
check(run().returncode == 2, "no subcommand")
# help everywhere, with an example
r = run("--help")
check(r.returncode == 0 and "exit codes" in r.stdout, "tshard --help")
for sub in ["plan", "show"]:
    r = run(sub, "--help")
    check(r.returncode == 0 and "example:" in r.stdout and "tshard " + sub in r.stdout,
          f"{sub} --help")

check.finish()
