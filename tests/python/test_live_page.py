#!/usr/bin/python3
"""End-to-end test of the live page on rank 0's metrics port (tshardd --metrics), real daemons
at 4 ranks.

A job with tensors of several layouts (1-D to 3-D, sharded over one and two mesh dims, uneven
and chunk splits, replicated, partial, on a subset of the ranks, several dtypes), then:
- GET /api/tensors against each tensor's describe (an independent path: the RPC socket): name,
  dtype, shape, canonical attribute, and every holding rank's box and bytes;
- GET /api/ranks: every rank with its host and NUMA node as describe_job gives them, and, once
  rank 0 gathered them, each rank's memory account, tensors and stored bytes equal to that
  rank's own stats; a tensor created later shows up there within a few seconds (refreshed live);
  the operation history grows; the gathering operation is not logged at info level and is
  refused from clients;
- GET / in headless Chromium (Debian's chromium): the page draws (its DOM holds a picture per
  tensor with one block per distinct box, naming its ranks, a mesh cell per mesh rank, a row per
  rank with its memory), references nothing outside the daemon, and a screenshot is taken
  (written to TSHARD_SCREENSHOT_DIR when set);
- the other ranks answer the page's paths 404 naming rank 0's port; with --metrics-page 0 rank 0
  too, saying so, and /metrics is still served.

usage: test_live_page.py BUILD_BIN_DIR"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

from checks import Checks, raw_call
from harness import Daemons, free_ports
from tshard import tshard_pb2 as pb

bin_dir = sys.argv[1]
check = Checks()
NP = 4
work = tempfile.mkdtemp(prefix="tshard-page-")

TENSORS = [  # name, dtype, shape, attribute, data
    ("emb", "f32", (64, 32), "mesh=[4] placements=[S(0)]", True),
    ("grid", "f64", (10, 12), "mesh=[2,2] placements=[S(0),S(1)]", True),
    ("ragged", "f32", (13, 5), "mesh=[4] placements=[S(0,chunk)]", True),
    ("bias", "i32", (16,), "mesh=[4] placements=[R]", True),
    ("grad", "f32", (8, 8), "mesh=[2,2] placements=[S(0),P(sum)]", False),
    ("pair", "bf16", (6, 40), "mesh=[2]@1,3 placements=[S(1)]", False),
    ("cube", "f32", (4, 6, 8), "mesh=[2,2] placements=[S(2),S(0)]", True),
    ("odd", "i64", (7,), "mesh=[4] placements=[S(0)] splits={0:[1,0,4,2]}", True),
]


def http_get(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def api(port, path):
    status, ctype, body = http_get(port, path)
    check(status == 200 and ctype.startswith("application/json"),
          f"{path}: 200 with JSON ({status}, {ctype})")
    return json.loads(body)


def poll(cond, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            check(False, f"{what}: not within {timeout} s")
            return None
        time.sleep(delay)  # polling the daemons, bounded by the deadline
        delay = min(delay * 2, 0.5)


def settled_tensors(port):
    """/api/tensors by name once no tensor is busy, else None: an operation's new metadata is
    published just after its answer, and the page says busy until then."""
    got = {t["name"]: t for t in api(port, "/api/tensors")["tensors"]}
    return None if any(t["busy"] for t in got.values()) else got


def check_tensors(c, port):
    got = poll(lambda: settled_tensors(port), "/api/tensors with no tensor changing") or {}
    check(sorted(got) == sorted(n for n, *_ in TENSORS), f"/api/tensors names: {sorted(got)}")
    for name, dtype, shape, _, _ in TENSORS:
        t, d = got.get(name), c.describe(name)
        if not t:
            continue
        check(t["dtype"] == d["dtype"] == dtype and t["shape"] == list(shape),
              f"{name}: dtype and shape {t['dtype']} {t['shape']}")
        check(t["attr"] == d["attr"], f"{name}: attribute {t['attr']!r} == {d['attr']!r}")
        want = sorted((r["rank"], list(r["lo"]), list(r["hi"]), r["bytes"]) for r in d["ranks"])
        have = sorted((r["rank"], r["lo"], r["hi"], r["bytes"]) for r in t["ranks"])
        check(have == want, f"{name}: every rank's box and bytes as describe gives them\n"
                            f"{have}\n{want}")
        check(t["bytes"] == int(np.prod(shape)) * {"f32": 4, "f64": 8, "i32": 4, "bf16": 2,
                                                   "i64": 8}[dtype], f"{name}: bytes")
        check(t["busy"] is False, f"{name}: not changing")
        mesh, ranks = re.match(r"mesh=\[([\d,]+)\]@?([\d,\-]*)", d["attr"]).groups()
        want_ranks = []
        for part in (ranks.split(",") if ranks else []):
            lo, _, hi = part.partition("-")
            want_ranks += list(range(int(lo), int(hi or lo) + 1))
        check(t["mesh"] == [int(x) for x in mesh.split(",")] and
              t["mesh_ranks"] == (want_ranks or list(range(int(np.prod(t["mesh"]))))),
              f"{name}: mesh {t['mesh']} and its ranks {t['mesh_ranks']}")
    return got


def ranks_match(port, conns):
    """/api/ranks when every gathered rank equals its own stats now, else None."""
    view = api(port, "/api/ranks")
    if view["gathered_ms_ago"] is None:
        return None
    for r, c in enumerate(conns):
        s, v = c.stats(), view["ranks"][r]
        want = {"held": s["memory_in_use"] - s["pool"]["staging"], "staging": s["pool"]["staging"],
                "limit": s["memory_limit"], "tensors": s["tensors"], "stored": s["pool"]["stored"]}
        if any(v[k] != want[k] for k in want):
            return None
    return view


class Dom(html.parser.HTMLParser):
    """The elements of the dumped DOM with their attributes, by class and data attributes."""

    def __init__(self):
        super().__init__()
        self.elems = []

    def handle_starttag(self, tag, attrs):
        self.elems.append((tag, dict(attrs)))

    def with_class(self, cls):
        return [a for _, a in self.elems if cls in (a.get("class") or "").split()]


def chromium(args, timeout=120):
    exe = shutil.which("chromium")
    if not check(exe is not None, "chromium is installed (deploy/install-deps.sh)"):
        return None
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--user-data-dir=" + os.path.join(work, "chromium"),
           "--virtual-time-budget=8000", *args]
    p = subprocess.run(cmd, capture_output=True, timeout=timeout)
    check(p.returncode == 0, f"chromium {args[-1]}: exit {p.returncode}\n{p.stderr[-2000:]!r}")
    return p


def check_browser(port, world):
    url = f"http://127.0.0.1:{port}/"
    p = chromium(["--dump-dom", url])
    if not p:
        return
    dom = Dom()
    dom.feed(p.stdout.decode())
    body = [a for t, a in dom.elems if t == "body"]
    check(body and body[0].get("data-ready") == "1",
          f"the page drew with every rank gathered: {body[0] if body else None}")
    pics = {a["data-name"]: a for a in dom.with_class("tensor")}
    check(sorted(pics) == sorted(n for n, *_ in TENSORS), f"a picture per tensor: {sorted(pics)}")
    # blocks and mesh cells, in document order after each tensor's div
    cur, blocks, cells = None, {}, {}
    for _, a in dom.elems:
        if "tensor" in (a.get("class") or "").split():
            cur = a["data-name"]
            blocks[cur], cells[cur] = [], []
        elif a.get("class") == "block" and cur:
            blocks[cur].append(a)
        elif a.get("class") == "mesh-cell" and cur:
            cells[cur].append(int(a["data-rank"]))
    for name, t in world.items():
        distinct = {(tuple(r["lo"]), tuple(r["hi"])) for r in t["ranks"]}
        have = sorted((a["data-lo"], a["data-hi"], a["data-ranks"]) for a in blocks.get(name, []))
        want = sorted((",".join(map(str, lo)), ",".join(map(str, hi)),
                       " ".join(str(r["rank"]) for r in t["ranks"]
                                if (tuple(r["lo"]), tuple(r["hi"])) == (lo, hi)))
                      for lo, hi in distinct)
        check(have == want, f"{name}: one block per distinct box, naming its ranks\n{have}\n{want}")
        check(cells.get(name) == t["mesh_ranks"],
              f"{name}: a mesh cell per mesh rank {cells.get(name)}")
    rows = [a for t, a in dom.elems if t == "tr" and "data-rank" in a]
    check(sorted(int(a["data-rank"]) for a in rows) == list(range(NP)), "a row per rank")
    check(all(a.get("data-held", "") != "" for a in rows), "every rank's memory shown")
    shot_dir = os.environ.get("TSHARD_SCREENSHOT_DIR") or work
    shot = os.path.join(shot_dir, "live-page.png")
    if chromium([f"--screenshot={shot}", "--window-size=1280,1500", "--hide-scrollbars", url]):
        with open(shot, "rb") as f:
            png = f.read()
        check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000,
              f"a screenshot of the page ({len(png)} bytes)")


def check_page_source(port):
    status, ctype, body = http_get(port, "/")
    text = body.decode()
    check(status == 200 and ctype.startswith("text/html"), f"GET /: {status} {ctype}")
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", text)
    fetches = re.findall(r"""fetch\(\s*["'`]([^"'`]*)""", text)
    check(refs == [] and fetches and all("://" not in f for f in fetches),
          f"the page loads nothing from elsewhere: refs {refs}, fetches {fetches}")
    check("<script src" not in text and "@import" not in text and "url(" not in text,
          "no external scripts, imports or urls in styles")


def main():
    port = free_ports(NP)
    with Daemons(bin_dir, NP, extra_args=["--metrics", f"127.0.0.1:{port}"]) as d:
        conns = [d.connect(r) for r in range(NP)]
        c = conns[0]
        rng = np.random.default_rng(7)
        for name, dtype, shape, attr, data in TENSORS:
            c.create(name, dtype, shape, attr)
            if data:
                npd = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
                c.put(name, rng.standard_normal(shape).astype(npd[dtype]))
        c.reshard("emb", "mesh=[2,2] placements=[S(1),R]")
        TENSORS[0] = ("emb", "f32", (64, 32), "mesh=[2,2] placements=[S(1),R]", True)
        world = check_tensors(c, port)
        check_page_source(port)

        view = poll(lambda: ranks_match(port, conns), "/api/ranks equal to every rank's stats")
        job = c.describe_job()
        if view:
            want = [(job["host_names"][h], n) for h, n in zip(job["rank_hosts"], job["rank_numa"])]
            check([(r["host"], r["numa"]) for r in view["ranks"]] == want,
                  f"hosts and NUMA nodes as describe_job gives them: {want}")
            check(view["world"] == NP and [r["rank"] for r in view["ranks"]] == list(range(NP)),
                  "every rank listed once")
            check(all(r["held"] > 0 for r in view["ranks"]), "every rank holds memory")
        # refreshed live: a tensor created now is counted within a few seconds
        c.create("late", "f32", (4, 4), "mesh=[4] placements=[R]")
        TENSORS.append(("late", "f32", (4, 4), "mesh=[4] placements=[R]", False))
        poll(lambda: ranks_match(port, conns) and
             all(r["tensors"] == len(TENSORS) for r in api(port, "/api/ranks")["ranks"]),
             "the new tensor counted on every rank")
        world = check_tensors(c, port)
        hist = poll(lambda: len(api(port, "/api/ranks")["history"]) >= 2 and
                    api(port, "/api/ranks")["history"], "two history samples")
        if hist:
            check(all(h["ops_per_s"] >= 0 and h["latency_ms"] >= 0 for h in hist) and
                  all(b["t"] > a["t"] for a, b in zip(hist, hist[1:])),
                  f"history samples in time order: {hist[:3]}")
        check_browser(port, world)

        for r in range(1, NP):
            try:
                http_get(port + r, "/api/ranks")
                check(False, f"rank {r} serves /api/ranks")
            except urllib.error.HTTPError as e:
                msg = e.read().decode()
                check(e.code == 404 and f"port {port}" in msg, f"rank {r}: 404 naming rank 0's "
                                                               f"port: {msg!r}")
        status, _, _ = http_get(port + 1, "/metrics")
        check(status == 200, "the other ranks still serve /metrics")
        resp = raw_call(c, observe=pb.ObserveRequest())
        check(resp.status != 0 and "ordered by the daemons" in resp.message,
              f"observe refused from a client: {resp.status} {resp.message!r}")
        log = d.logs()
        check("op observe" not in log, "the gathering is not logged at info level")
        for x in conns:
            x.close()
    # --metrics-page 0: rank 0 serves /metrics only
    port = free_ports(2)
    with Daemons(bin_dir, 2, extra_args=["--metrics", f"127.0.0.1:{port}",
                                         "--metrics-page", "0"]) as d:
        for path in ("/", "/api/ranks", "/api/tensors"):
            try:
                http_get(port, path)
                check(False, f"--metrics-page 0: {path} served")
            except urllib.error.HTTPError as e:
                msg = e.read().decode()
                check(e.code == 404 and "--metrics-page 0" in msg,
                      f"--metrics-page 0: {path} 404 saying why: {msg!r}")
        check(http_get(port, "/metrics")[0] == 200, "--metrics-page 0: /metrics served")
    shutil.rmtree(work, ignore_errors=True)


main()
check.finish()
