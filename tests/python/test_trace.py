#!/usr/bin/python3
"""Traces end to end: real daemons, the Python client driving them, `tshard trace` gathering
every rank's ring; the file read back by Python's own json module and checked against what the
test did.

- every operation the test ran is in the file once per rank that ran it (reshards, a put, a get
  on every rank; a get_slice on the rank asked), named by kind and tensor, with rank 0's sequence
  number the same on every rank, its strategy and bytes as the answer and stats say;
- each operation's spans follow one another inside it, in the order of the points, with no
  negative duration; the origin rank's reshard has every point from received to answered;
- the ranks' clocks line up: no rank's first agreement of a reshard passed before every rank had
  begun it (within the measured round trips);
- --last N keeps each rank's N newest; --since keeps what ended in that window; a ring of 4
  (--trace-ring 4) holds the last 4 and counts the dropped ones; --trace-ring 0 records nothing;
- --summary (text and --json) gives per kind shares that add up to 100%;
- misuse: --last 0, --since 5parsecs, an unknown job: exit codes 2 and 4 with the reason;
- Python: Client.trace (last, within; bad values refused), and tshard.trace() recording a
  script's calls, plain and with wait=False, saved beside every rank's ring: each call's request
  id is the origin rank's operation's, and the call's span holds the daemon's received..answered.

usage: test_trace.py BUILD_BIN_DIR NRANKS"""
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard
from checks import Checks, raw_call
from harness import Daemons

bin_dir, NP = sys.argv[1], int(sys.argv[2])
TSHARD = os.path.join(bin_dir, "tshard")
POINTS = ["received", "submitted", "ordered", "started", "planned", "agreed", "moved",
          "committed", "ended", "answered"]
check = Checks()


def cli(d, *args):
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir)
    return subprocess.run([TSHARD, "trace", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def gather(d, *args):
    """The trace file `tshard trace --job J ARGS --out F` writes, parsed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.json")
        r = cli(d, "--job", d.job, *args, "--out", out)
        if not check(r.returncode == 0, f"trace {args}: exit {r.returncode}: {r.stderr}"):
            return None
        with open(out) as f:
            return json.load(f)


def ops_of(trace):
    """{rank: [(op event, [span events])]} in file order (an operation's spans follow it)."""
    out, last = {}, None
    for e in trace["traceEvents"]:
        if e["ph"] != "X" or e["pid"] != 0:
            continue
        if e["cat"] != "span":
            last = (e, [])
            out.setdefault(e["args"]["rank"], []).append(last)
        else:
            last[1].append(e)
    return out


def nested(trace, what):
    """Viewers nest the slices of one track: on every track no two operations overlap, and each
    operation's spans lie within it."""
    by_track = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") != "span":
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    bad = [(k, a, b) for k, v in by_track.items() for a, b in zip(sorted(v), sorted(v)[1:])
           if b[0] < a[1] - 1e-3]
    return check(not bad, f"{what}: operations overlap on one track: {bad[:3]}")


def point(spans, name):
    """The time (us) a span of that name ends: the point it leads to."""
    return next(s["ts"] + s["dur"] for s in spans if s["name"] == name)


def spans_ok(op, spans, what):
    ok = op["dur"] >= 0
    t = op["ts"]
    for s in spans:
        ok = ok and s["dur"] >= 0 and abs(s["ts"] - t) < 1e-3 and s["args"]["seq"] == op["args"]["seq"]
        t = s["ts"] + s["dur"]
    if spans:
        ok = ok and abs(t - (op["ts"] + op["dur"])) < 1e-3
    return check(ok, f"{what}: spans do not tile the operation: {op} {spans}")


def main_job():
    d = Daemons(bin_dir, NP)
    try:
        n_reshard = 6
        with d.connect(NP - 1) as c:
            c.create("w", "f32", [8 * NP, 16], f"mesh=[{NP}]@0-{NP - 1} placements=[S(0)]")
            c.put("w", np.arange(8 * NP * 16, dtype=np.float32).reshape(8 * NP, 16))
            for i in range(n_reshard):
                c.reshard("w", f"mesh=[{NP}]@0-{NP - 1} placements=[{'S(1)' if i % 2 == 0 else 'S(0)'}]")
            got = c.get("w")
            check(got.shape == (8 * NP, 16), "the tensor came back")
        with d.connect(0) as c:
            c.get_slice("w")
        tr = gather(d)
        if tr is None:
            return d
        by_rank = ops_of(tr)
        check(sorted(by_rank) == list(range(NP)), f"every rank's operations: {sorted(by_rank)}")
        nested(tr, "tshard trace")
        for e in tr["traceEvents"]:
            if e["ph"] == "X" and e.get("cat") != "span":
                check(e["tid"] % NP == e["args"]["rank"], f"a rank's lanes are its tracks: {e}")
        ranks = tr["otherData"]["ranks"]
        check(len(ranks) == NP and all(x["ring"] == 4096 for x in ranks), f"rings: {ranks}")
        names = {e["tid"]: e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M" and
                 e["name"] == "thread_name"}
        check(all(names.get(r, "").startswith(f"rank {r} ") for r in range(NP)), f"tracks: {names}")
        seqs = {}
        for r, ops in by_rank.items():
            kinds = [o["cat"] for o, _ in ops]
            check(kinds.count("reshard") == n_reshard, f"rank {r}: reshards {kinds}")
            collective = [o["cat"] for o, _ in ops if o["args"]["seq"] > 0]
            check(collective.count("create") == 1 and collective.count("put") == 1 and
                  collective.count("get") == 1, f"rank {r}: {collective}")
            # local: a put's and a get's chunks, the get_slice; a describe when the engine
            # answered it (its names busy)
            check(all(o["cat"] in ("put", "get", "get_slice", "describe", "list") for o, _ in ops
                      if o["args"]["seq"] == 0), f"rank {r}: local operations {kinds}")
            check(("get_slice" in kinds) == (r == 0), f"rank {r}: get_slice only on rank 0: {kinds}")
            for o, spans in ops:
                spans_ok(o, spans, f"rank {r} {o['name']}")
                if o["cat"] == "reshard":
                    check(o["name"] == "reshard w" and o["args"]["tensor"] == "w", f"{o}")
                    check(o["args"]["strategy"] in ("alltoall", "p2p", "allgather", "root") and
                          o["args"]["status"] == 0, f"rank {r}: {o['args']}")
                    check(o["args"]["bytes_sent"] > 0 or NP == 1, f"rank {r} sent: {o['args']}")
                    seqs.setdefault(o["args"]["seq"], {})[r] = (o, spans)
            origin = [(o, s) for o, s in ops if o["cat"] == "reshard" and o["args"]["origin"]]
            check(len(origin) == (n_reshard if r == NP - 1 else 0), f"rank {r}: origin {origin}")
            for o, s in origin:
                check([x["name"] for x in s] == ["queued", "ordering", "waiting", "planning",
                                                 "agreeing", "moving", "committing", "finishing",
                                                 "answering"], f"origin spans {[x['name'] for x in s]}")
        check(len(seqs) == n_reshard and all(len(v) == NP for v in seqs.values()),
              f"every reshard on every rank under one seq: {[sorted(v) for v in seqs.values()]}")
        slack_us = max(x["clock_rtt_ns"] for x in ranks) / 2e3 + 50
        for seq, per in seqs.items():
            begun = max(point(sp, "planning") for o, sp in per.values())
            agreed = min(point(sp, "agreeing") for o, sp in per.values())
            check(agreed + slack_us >= begun, f"reshard {seq}: a rank agreed at {agreed:.1f} us "
                  f"before the last one began at {begun:.1f} (slack {slack_us:.1f})")
        # --last keeps each rank's newest
        last = gather(d, "--last", "3")
        if last:
            for r, ops in ops_of(last).items():
                full = [o["args"]["seq"] for o, _ in by_rank[r]][-3:]
                check([o["args"]["seq"] for o, _ in ops] == full, f"rank {r} --last 3: {ops}")
        # --since: only what ended in the window
        time.sleep(4)  # an age gap between the operations above and the next (not a wait)
        with d.connect(0) as c:
            c.reshard("w", f"mesh=[{NP}]@0-{NP - 1} placements=[R]")
        recent = gather(d, "--since", "2s")
        if recent:
            for r, ops in ops_of(recent).items():
                check([o["cat"] for o, _ in ops] == ["reshard"] and
                      ops[0][0]["args"]["seq"] > max(seqs), f"rank {r} --since 2s: {ops}")
        # the summary, text and JSON
        r = cli(d, "--job", d.job, "--summary")
        check(r.returncode == 0 and "reshard:" in r.stdout and "moving" in r.stdout,
              f"summary: {r.returncode} {r.stdout} {r.stderr}")
        r = cli(d, "--job", d.job, "--summary", "--json")
        s = json.loads(r.stdout) if r.returncode == 0 else {}
        kinds = {k["kind"]: k for k in s.get("kinds", [])}
        check("reshard" in kinds and kinds["reshard"]["records"] == (n_reshard + 1) * NP,
              f"summary json: {s}")
        for k in kinds.values():
            check(abs(sum(k["share"].values()) - 100) < 0.5, f"shares of {k['kind']}: {k}")
        # misuse
        r = cli(d, "--job", d.job, "--last", "0")
        check(r.returncode == 2 and "--last" in r.stderr, f"--last 0: {r.returncode} {r.stderr}")
        r = cli(d, "--job", d.job, "--since", "5parsecs")
        check(r.returncode == 2 and "--since" in r.stderr and "30s" in r.stderr,
              f"--since 5parsecs: {r.returncode} {r.stderr}")
        r = cli(d, "--job", d.job, "--lats", "3")
        check(r.returncode == 2 and "--last" in r.stderr, f"--lats: {r.returncode} {r.stderr}")
        r = cli(d, "--job", d.job + "x")
        check(r.returncode == 4 and "rank 0" in r.stderr, f"unknown job: {r.returncode} {r.stderr}")
    finally:
        d.stop()
    return None


def raw_trace(c, q):
    """The status and message of a TraceRequest sent as it is."""
    resp = raw_call(c, trace=q)
    return resp.status, resp.message


def python_side():
    d = Daemons(bin_dir, NP)
    os.environ["TSHARD_SOCKET_DIR"] = d.dir
    try:
        attr = lambda p: f"mesh=[{NP}]@0-{NP - 1} placements=[{p}]"  # noqa: E731
        with d.connect(1 % NP) as c:
            c.create("p", "f32", [4 * NP, 8], attr("S(0)"))
            with tshard.trace() as t:
                c.reshard("p", attr("S(1)"))
                c.reshard("p", attr("R"), wait=False).result(60)
                c.reshard("p", attr("S(0)"))
            with tshard.trace():
                check.raises(RuntimeError, lambda: tshard.trace().__enter__(),
                             "a trace block inside another", ["already"])
            check(tshard.tracing.active is None, "the block's end stops the recording")
            mine = c.trace(last=2)
            check([o["kind"] for o in mine["ops"]] == ["reshard", "reshard"] and
                  mine["rank"] == 1 % NP and mine["ring"] == 4096, f"Client.trace(last=2): {mine}")
            check(c.trace(within=3600)["ops"], "Client.trace(within=3600)")
            for bad in ({"last": -1}, {"last": "3"}, {"within": 0}, {"within": -2.0}):
                check.expect(1, lambda: c.trace(**bad), f"Client.trace({bad})")
        # the daemon's own checks, past the client's: raw requests on a plain connection
        with d.connect(0) as raw:
            for q, needle in ((tshard.tshard_pb2.TraceRequest(within_ns=-5), "within_ns"),
                              (tshard.tshard_pb2.TraceRequest(last=(1 << 20) + 1), "last")):
                st, msg = raw_trace(raw, q)
                check(st == 1 and needle in msg, f"raw {q}: {st} {msg}")
        with tempfile.TemporaryDirectory() as tmp:
            doc = t.save(os.path.join(tmp, "t.json"), job=d.job)
            with open(os.path.join(tmp, "t.json")) as f:
                check(json.load(f) == json.loads(json.dumps(doc)), "the file is the trace")
        nested(doc, "tshard.trace().save")
        calls = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1]
        check([e["name"] for e in calls] == ["reshard"] * 3, f"client calls: {calls}")
        origin = {e["args"]["request_id"]: e for e in doc["traceEvents"]
                  if e["ph"] == "X" and e["pid"] == 0 and e["args"].get("rank") == 1 % NP and
                  e.get("cat") == "reshard" and e["args"]["origin"]}
        for e in calls:
            o = origin.get(e["args"]["request_id"])
            if check(o is not None, f"the call {e} is the origin rank's operation"):
                check(e["ts"] <= o["ts"] + 50 and e["ts"] + e["dur"] + 50 >= o["ts"] + o["dur"],
                      f"the call {e} holds the daemon's span {o}")
    finally:
        d.stop()


def small_rings():
    d = Daemons(bin_dir, NP, extra_args=["--trace-ring", "4"])
    try:
        with d.connect(0) as c:
            c.create("v", "f32", [4 * NP], f"mesh=[{NP}]@0-{NP - 1} placements=[S(0)]")
            for i in range(5):
                c.reshard("v", f"mesh=[{NP}]@0-{NP - 1} placements=[{'R' if i % 2 == 0 else 'S(0)'}]")
        tr = gather(d)
        if tr:
            for r, ops in ops_of(tr).items():
                check([o["cat"] for o, _ in ops] == ["reshard"] * 4, f"rank {r} ring of 4: {ops}")
            check(all(x["ring"] == 4 and x["dropped"] == 2 for x in tr["otherData"]["ranks"]),
                  f"ring 4: {tr['otherData']['ranks']}")
    finally:
        d.stop()
    d = Daemons(bin_dir, NP, extra_args=["--trace-ring", "0"])
    try:
        with d.connect(0) as c:
            c.create("v", "f32", [4 * NP], f"mesh=[{NP}]@0-{NP - 1} placements=[S(0)]")
        tr = gather(d)
        if tr:
            check(not ops_of(tr) and all(x["ring"] == 0 for x in tr["otherData"]["ranks"]),
                  f"tracing off: {tr}")
        r = cli(d, "--job", d.job)
        check(r.returncode == 0 and "no operations recorded" in r.stdout, f"off: {r.stdout}")
    finally:
        d.stop()


main_job()
python_side()
small_rings()
check.finish()
