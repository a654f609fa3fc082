#!/usr/bin/python3
"""End-to-end test of the Prometheus endpoint (tshardd --metrics) with real daemons at 3 ranks.

A known sequence of operations through rank 0 (creates, puts, reshards, one casting f32 to bf16,
a drop that fails, a save with all=True, a snapshot), then every rank scraped over HTTP and the answer read by this
test's own parser of the text exposition format 0.0.4 (HELP and TYPE lines before their samples,
label values with their escapes, no series twice, counters named _total, histograms with
monotone cumulative buckets, +Inf equal to _count, a _sum), every sample carrying the job and
rank labels; the values checked against the sequence and against each rank's stats (answers
per kind against stats' operations, latency counts against stats' ops, bytes by dtype against
the stored bytes, the memory account, connections, collective operations, background saves,
the snapshot's age, bytes moved); a request the loop thread refuses counted under its kind and
status. Bad input to the endpoint: unknown paths 404, other methods
405 naming GET, huge headers, a slow client that never finishes its request, many connections
at once; each answered or closed while the daemon serves RPC, and the endpoint serves again
afterwards. With --listen and --token-file the endpoint asks no token and shows none. --metrics
refused at startup (no port, a bad port, a name, a non-loopback address
without --metrics-remote, a port in use, a rank's port past 65535), each naming what is wrong.
tshard.launch(metrics_port=...) (tshard-launch --metrics-port): the service-discovery file's
targets and labels, status naming it, each target serving, stop removing it.

usage: test_metrics.py BUILD_BIN_DIR"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

import tshard
from checks import Checks, raw_call
from tshard import tshard_pb2 as pb
from harness import MPI_ENV, Daemons, free_ports

bin_dir = sys.argv[1]
check = Checks()
NP = 3
work = tempfile.mkdtemp(prefix="tshard-metrics-")


# ---------------------------------------------------------------------------------------------
# An independent reader of the text exposition format 0.0.4.

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_labels(text, where):
    """name="value",... with the escapes \\\\, \\" and \\n; returns a dict."""
    labels, i = {}, 0
    while i < len(text):
        m = re.match(LABEL + "=\"", text[i:])
        if not m:
            raise ValueError(f"{where}: bad label at {text[i:]!r}")
        name = m.group(0)[:-2]
        i += len(m.group(0))
        value = []
        while True:
            if i >= len(text):
                raise ValueError(f"{where}: unterminated label value")
            ch = text[i]
            if ch == "\\":
                nxt = text[i + 1:i + 2]
                if nxt not in ("\\", "\"", "n"):
                    raise ValueError(f"{where}: bad escape \\{nxt}")
                value.append("\n" if nxt == "n" else nxt)
                i += 2
            elif ch == "\"":
                i += 1
                break
            elif ch == "\n":
                raise ValueError(f"{where}: raw line feed in a label value")
            else:
                value.append(ch)
                i += 1
        if name in labels:
            raise ValueError(f"{where}: label {name} twice")
        labels[name] = "".join(value)
        if i < len(text):
            if text[i] != ",":
                raise ValueError(f"{where}: expected ',' at {text[i:]!r}")
            i += 1
    return labels


def parse_value(s, where):
    if s in ("+Inf", "-Inf", "NaN"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise ValueError(f"{where}: bad value {s!r}")
    return float(s)


def family_of(name, types):
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) in ("histogram", "summary"):
            return name[:-len(suffix)]
    return None


def parse_exposition(text):
    """{family: {"type", "help", "samples": [(name, labels, value)]}}; raises ValueError naming
    the first rule broken."""
    if not text.endswith("\n"):
        raise ValueError("the text does not end with a line feed")
    fams, types, seen, closed = {}, {}, set(), set()
    current = None
    for n, line in enumerate(text[:-1].split("\n"), 1):
        where = f"line {n}"
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            m = re.fullmatch(r"# (HELP|TYPE) (" + NAME + r") ?(.*)", line)
            if not m:
                raise ValueError(f"{where}: bad {line[2:6]} line {line!r}")
            kind, name, rest = m.groups()
            f = fams.setdefault(name, {"type": None, "help": None, "samples": []})
            if name in closed:
                raise ValueError(f"{where}: {name} comes back after other families")
            if current is not None and current != name:
                closed.add(current)
            current = name
            if kind == "TYPE":
                if f["type"] is not None or f["samples"]:
                    raise ValueError(f"{where}: TYPE of {name} twice or after its samples")
                if rest not in TYPES:
                    raise ValueError(f"{where}: unknown type {rest!r}")
                f["type"] = types[name] = rest
            else:
                if f["help"] is not None:
                    raise ValueError(f"{where}: HELP of {name} twice")
                if re.search(r"\\[^\\n]", rest.replace("\\\\", "")):
                    raise ValueError(f"{where}: bad escape in HELP")
                f["help"] = rest.replace("\\n", "\n").replace("\\\\", "\\")
            continue
        if line.startswith("#") or not line:
            continue
        m = re.fullmatch("(" + NAME + r")(\{(.*)\})? (\S+)( -?\d+)?", line)
        if not m:
            raise ValueError(f"{where}: bad sample {line!r}")
        name, _, ltext, vtext, _ = m.groups()
        fam = family_of(name, types)
        if fam is None or fam != current:
            raise ValueError(f"{where}: sample {name} outside its family's TYPE block")
        labels = parse_labels(ltext or "", where)
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise ValueError(f"{where}: series {key} twice")
        seen.add(key)
        fams[fam]["samples"].append((name, labels, parse_value(vtext, where)))
    return fams


def check_families(fams, job, rank):
    """The rules a well-formed answer of tshardd keeps beyond the grammar."""
    for name, f in fams.items():
        check(f["type"] is not None and f["help"], f"rank {rank}: {name} has TYPE and HELP")
        if f["type"] == "counter":
            check(name.endswith("_total"), f"rank {rank}: counter {name} ends with _total")
            check(all(v >= 0 for _, _, v in f["samples"]), f"rank {rank}: {name} not negative")
        for sname, labels, _ in f["samples"]:
            if labels.get("job") != job or labels.get("rank") != str(rank):
                check(False, f"rank {rank}: {sname}{labels} lacks job={job} rank={rank}")
        if f["type"] == "histogram":
            check_histogram(name, f["samples"], rank)


def check_histogram(name, samples, rank):
    groups = {}
    for sname, labels, v in samples:
        key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
        g = groups.setdefault(key, {"buckets": [], "sum": None, "count": None})
        if sname == name + "_bucket":
            check("le" in labels, f"rank {rank}: {sname} without le")
            g["buckets"].append((parse_value(labels["le"], sname), v))
        elif sname == name + "_sum":
            g["sum"] = v
        elif sname == name + "_count":
            g["count"] = v
    for key, g in groups.items():
        b = g["buckets"]
        les = [le for le, _ in b]
        check(les == sorted(les) and b and math.isinf(les[-1]),
              f"rank {rank}: {name}{key}: buckets in order, ending at +Inf: {les}")
        counts = [c for _, c in b]
        check(all(x <= y for x, y in zip(counts, counts[1:])),
              f"rank {rank}: {name}{key}: cumulative buckets monotone: {counts}")
        check(g["count"] is not None and b and b[-1][1] == g["count"],
              f"rank {rank}: {name}{key}: +Inf {b[-1][1] if b else None} == _count {g['count']}")
        check(g["sum"] is not None and g["sum"] >= 0, f"rank {rank}: {name}{key}: _sum present")


def value(fams, name, **labels):
    """The sample of family/metric name whose labels include these; None when absent."""
    fam = family_of(name, {k: f["type"] for k, f in fams.items()})
    for sname, ls, v in fams.get(fam, {"samples": []})["samples"]:
        if sname == name and all(ls.get(k) == x for k, x in labels.items()):
            return v
    return None


def samples(fams, name):
    fam = family_of(name, {k: f["type"] for k, f in fams.items()})
    return [(ls, v) for sname, ls, v in fams.get(fam, {"samples": []})["samples"] if sname == name]


def scrape(port, path="/metrics", method="GET", timeout=10):
    """(status, headers, body) of one request."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def metrics_of(port, job, rank):
    status, headers, body = scrape(port)
    check(status == 200, f"rank {rank}: GET /metrics: {status}")
    check(headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"),
          f"rank {rank}: content type {headers.get('Content-Type')}")
    try:
        fams = parse_exposition(body)
    except ValueError as e:
        check(False, f"rank {rank}: the exposition does not parse: {e}")
        return {}
    check_families(fams, job, rank)
    return fams


# The parser itself against text with escapes and a broken histogram.
demo = ('# HELP x_total a \\\\ b\\nc\n# TYPE x_total counter\n'
        'x_total{a="q\\"u\\\\o\\nte",b=""} 3\n')
pf = parse_exposition(demo)
check(pf["x_total"]["help"] == "a \\ b\nc" and
      pf["x_total"]["samples"][0][1] == {"a": "q\"u\\o\nte", "b": ""}, f"parser: {pf}")
for bad in ['x{a="b} 1\n', "# TYPE x counter\nx 1\n# TYPE x gauge\n", 'x{a="\\t"} 1\n',
            "# TYPE x counter\nx 1\nx 2\n", "y 1\n"]:
    try:
        parse_exposition(bad)
        check(False, f"parser accepted {bad!r}")
    except ValueError:
        pass


# ---------------------------------------------------------------------------------------------
# The known sequence at 3 ranks.

def run_sequence(d, port):
    job = d.job
    c = d.connect(0)
    a = np.arange(30 * 4, dtype=np.float32).reshape(30, 4)
    b = np.arange(9, dtype=np.int32)
    c.create("a", "f32", (30, 4), "mesh=[3] placements=[S(0)]")
    c.create("b", "i32", (9,), "mesh=[3] placements=[R]")
    c.put("a", a)
    c.put("b", b)
    c.reshard("a", "mesh=[3] placements=[R]")
    c.reshard("b", "mesh=[3] placements=[S(0)]")
    c.create("h", "f32", (6,), "mesh=[3] placements=[R]")
    c.reshard("h", "mesh=[3] placements=[S(0)]", dtype="bf16")  # its bytes move to bf16
    check.expect(14, lambda: c.drop("nope"), "drop of a missing tensor", "nope")
    r = c.save(os.path.join(work, "ckpt"), all=True)
    check(r["tensors"] == 3, f"save: {r}")
    c.snapshot()  # a save too: kind save
    c.wait_saves(timeout=60)
    check(np.array_equal(c.get("a"), a), "a as put")
    clients = {0: c}
    for rank in range(1, NP):
        clients[rank] = d.connect(rank)
    # the published numbers follow each engine turn: the last saves' completion on every rank
    check.poll(lambda: all(clients[r].stats()["saves"] and
                     all(s["state"] != "writing" for s in clients[r].stats()["saves"])
                     for r in range(NP)), "every rank's background save ended")
    for rank in range(NP):
        st = clients[rank].stats()
        fams = metrics_of(port + rank, job, rank)
        check_rank(fams, st, rank)
    return clients


def check_rank(fams, st, rank):
    where = f"rank {rank}"
    check(value(fams, "tshard_up") == 1, f"{where}: tshard_up")
    ops = {(ls["kind"], ls["status"]): v for ls, v in samples(fams, "tshard_operations_total")}
    if rank == 0:
        for kind, status, n in [("create", "OK", 3), ("put", "OK", 2), ("reshard", "OK", 3),
                                ("drop", "NOT_FOUND", 1), ("save", "OK", 2), ("stats", "OK", None)]:
            got = ops.get((kind, status))
            check(got == n if n is not None else got and got >= 1,
                  f"{where}: operations {kind} {status}: {got}, want {n}")
        check(("drop", "OK") not in ops, f"{where}: no drop succeeded: {ops}")
    else:
        check(("create", "OK") not in ops and ("stats", "OK") in ops,
              f"{where}: answers only its own clients': {ops}")
    # every answer of the engine counted by kind: stats' operations, plus stats' own answer;
    # list and describe are answered by the engine or the loop thread (busy names, requests in
    # flight on the connection), pings by the loop thread alone
    engine = sum(v for (kind, _), v in ops.items() if kind not in ("ping", "list", "describe"))
    either = sum(v for (kind, _), v in ops.items() if kind in ("list", "describe"))
    check(engine <= st["operations"] + 1 <= engine + either,
          f"{where}: engine answers {engine} (+ up to {either} lists and describes), stats says "
          f"{st['operations']} before its own")
    # latency: every collective kind on every rank, as many as stats' window counts
    for kind in ("create", "put", "reshard", "drop", "save"):
        cnt = value(fams, "tshard_operation_duration_seconds_count", kind=kind)
        want = st["ops"].get(kind, {}).get("count")
        check(cnt is not None and cnt == want, f"{where}: {kind} latencies {cnt}, stats {want}")
    check(value(fams, "tshard_operation_duration_seconds_count", kind="create") == 3,
          f"{where}: three creates timed")
    check(value(fams, "tshard_collective_operations_total") == st["collective_ops"],
          f"{where}: collective ops {value(fams, 'tshard_collective_operations_total')} vs "
          f"{st['collective_ops']}")
    check(value(fams, "tshard_tensors") == st["tensors"] == 3, f"{where}: tensors")
    f32 = value(fams, "tshard_tensor_bytes", dtype="f32")
    i32 = value(fams, "tshard_tensor_bytes", dtype="i32")
    bf16 = value(fams, "tshard_tensor_bytes", dtype="bf16")
    check(f32 == 30 * 4 * 4 and i32 == 3 * 4 and bf16 == 2 * 2,
          f"{where}: bytes by dtype f32 {f32} i32 {i32} bf16 {bf16}")
    total = sum(v for _, v in samples(fams, "tshard_tensor_bytes"))
    check(total == st["pool"]["stored"], f"{where}: bytes by dtype {total} vs stored "
          f"{st['pool']['stored']}")
    held = value(fams, "tshard_memory_bytes", account="held")
    staging = value(fams, "tshard_memory_bytes", account="staging")
    check(held + staging == st["memory_in_use"] and staging == st["pool"]["staging"],
          f"{where}: memory held {held} + staging {staging} vs in use {st['memory_in_use']}")
    check(value(fams, "tshard_memory_bytes", account="cached") <= st["pool"]["cached"],
          f"{where}: cached (trimmed only since stats)")
    check(value(fams, "tshard_memory_limit_bytes") == st["memory_limit"], f"{where}: limit")
    check(value(fams, "tshard_connections") == st["connections"] == 1,
          f"{where}: connections {value(fams, 'tshard_connections')} vs {st['connections']}")
    check(value(fams, "tshard_requests_in_flight") == 0, f"{where}: nothing in flight")
    sent = value(fams, "tshard_transfer_bytes_total", direction="sent", peer="same_node")
    recv = value(fams, "tshard_transfer_bytes_total", direction="received", peer="same_node")
    # a S(0) -> R of 30x4 f32: each rank's 10 rows to the 2 others, at least
    check(sent >= 2 * 160 and recv >= 2 * 160, f"{where}: bytes moved {sent} / {recv}")
    check(value(fams, "tshard_transfer_bytes_total", direction="sent", peer="other_node") == 0,
          f"{where}: one node: nothing to another")
    done = [s for s in st["saves"] if s["state"] == "done"]
    check(value(fams, "tshard_background_saves_total", outcome="done") == len(done) == 1,
          f"{where}: one background save done: {st['saves']}")
    check(value(fams, "tshard_background_saves_total", outcome="failed") == 0, f"{where}: failed")
    check(value(fams, "tshard_background_save_writing") == 0, f"{where}: nothing writing")
    check(value(fams, "tshard_background_save_written_bytes_total") ==
          sum(s["bytes_written"] for s in done) > 0, f"{where}: bytes the saves wrote")
    age = value(fams, "tshard_snapshot_age_seconds")
    check(age is not None and 0 <= age < 120, f"{where}: snapshot age {age}")


def refused_counted(c, port, job):
    """A request the loop thread refuses (a reserved name) counts under its kind and status."""
    before = value(metrics_of(port, job, 0), "tshard_operations_total", kind="create",
                   status="INVALID_ARGUMENT") or 0
    resp = raw_call(c, create=pb.CreateRequest(name="__tshard.reserved", dtype="f32", shape=[3],
                                               attr=pb.DistAttr(text="mesh=[3] placements=[R]")))
    check(resp.status == 1, f"reserved name refused: {resp.status} {resp.message}")
    after = value(metrics_of(port, job, 0), "tshard_operations_total", kind="create",
                  status="INVALID_ARGUMENT")
    check(after == before + 1, f"the refusal counted: {before} -> {after}")


# ---------------------------------------------------------------------------------------------
# Bad input to the endpoint, while the daemon serves.

def raw_exchange(port, data, timeout=10.0):
    """Sends data, reads until the server closes or the deadline; the bytes read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    got = b""
    try:
        s.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (ConnectionResetError, BrokenPipeError, socket.timeout):
        pass
    finally:
        s.close()
    return got


def rpc_fine(c, what):
    try:
        ok = c.ping()["rank"] == 0
        c.create("probe", "f32", (3,), "mesh=[3] placements=[R]")
        c.drop("probe")
    except tshard.TshardError as e:
        ok = False
        what += f": {e}"
    check(ok, f"RPC while {what}")


def bad_http(port, c):
    for path in ("/", "/nope", "/metrics/", "/api/x", "/api/ranks/", "/metrics?x=1&y"):
        st, _, body = scrape(port, path)
        want = 200 if path.startswith("/metrics?") or path == "/" else 404  # /: the live page
        check(st == want, f"GET {path}: {st}, want {want}")
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        st, headers, _ = scrape(port, method=method)
        check(st == 405 and "GET" in headers.get("Allow", ""), f"{method} /metrics: {st} {headers}")
    st, _, body = scrape(port, method="HEAD")
    check(st == 200 and body == "", f"HEAD /metrics: {st}")
    # a POST with a body: answered, nothing read into the engine
    got = raw_exchange(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
    check(got.startswith(b"HTTP/1.1 405"), f"POST with a body: {got[:40]!r}")
    # huge headers: refused (431) or closed, not answered 200
    got = raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 +
                       b"\r\n\r\n")
    check(not got.startswith(b"HTTP/1.1 200"), f"huge header: {got[:40]!r}")
    got = raw_exchange(port, b"GET /metrics HTTP/1.1\r\n" +
                       b"".join(b"X-%d: v\r\n" % i for i in range(5000)) + b"\r\n")
    check(not got.startswith(b"HTTP/1.1 200"), f"many headers: {got[:40]!r}")
    got = raw_exchange(port, b"\x00\xff garbage\r\n\r\n")
    check(not got.startswith(b"HTTP/1.1 200"), f"garbage: {got[:40]!r}")
    rpc_fine(c, "bad requests came")
    # a slow client that never finishes its request: the endpoint and RPC serve meanwhile, and
    # the endpoint closes it after its timeout (5 s without progress)
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    slow.sendall(b"GET /metrics HTTP/1.1\r\nHo")
    t0 = time.monotonic()
    check(scrape(port)[0] == 200, "a scrape beside a slow client")
    rpc_fine(c, "a slow client holds a connection")
    slow.settimeout(20)
    try:
        slow.recv(100)  # b"" (closed) or an answer refusing the request, then the close
        closed = True
    except ConnectionResetError:
        closed = True
    except socket.timeout:
        closed = False
    check(closed and time.monotonic() - t0 < 25, f"slow client closed after "
          f"{time.monotonic() - t0:.1f} s")
    slow.close()
    # many connections at once (beyond the endpoint's limit): RPC unaffected, served after
    many = []
    for _ in range(300):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /metr")
            many.append(s)
        except OSError:
            break
    check(len(many) >= 64, f"opened {len(many)} connections")
    rpc_fine(c, f"{len(many)} connections are open")
    for s in many:
        s.close()
    check.poll(lambda: _scrape_ok(port), "the endpoint after many connections", 30)
    rpc_fine(c, "after the connections closed")


def _scrape_ok(port):
    try:
        return scrape(port, timeout=2)[0] == 200
    except OSError:
        return False


def token_apart():
    """With --listen and a token, the endpoint asks no token and shows none."""
    token = "metrics-secret-token-1234"
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    os.chmod(token_file, 0o600)
    p = free_ports(4)
    with Daemons(bin_dir, 2, extra_args=["--listen", f"tcp://127.0.0.1:{p}", "--token-file",
                                         token_file, "--metrics", f"127.0.0.1:{p + 2}"]) as d:
        for rank in range(2):
            st, _, body = scrape(p + 2 + rank)
            check(st == 200 and "tshard_up" in body and token not in body,
                  f"rank {rank}: served without the token, and without showing it")
        check(d.stop() == 0, f"the TCP daemons exit 0:\n{d.logs()[-2000:]}")


# ---------------------------------------------------------------------------------------------
# Refused --metrics flags.

def refused_flags():
    env = dict(os.environ, **MPI_ENV)
    tshardd = os.path.join(bin_dir, "tshardd")
    for arg, needle in [("127.0.0.1", "HOST:PORT"), ("127.0.0.1:0", "PORT 1..65535"),
                        ("127.0.0.1:70000", "PORT 1..65535"), ("127.0.0.1:x", "HOST:PORT"),
                        ("127.0.0.1:", "HOST:PORT"), ("example.com:9400", "not an IPv4"),
                        ("10.1.2.3:9400", "--metrics-remote 1"),
                        ("0.0.0.0:9400", "--metrics-remote 1")]:
        r = subprocess.run([tshardd, "--metrics", arg], capture_output=True, text=True,
                           timeout=60, env=env)
        check(r.returncode == 2 and needle in r.stderr and f"--metrics {arg}" in r.stderr,
              f"--metrics {arg}: {r.returncode} {r.stderr!r}")
    r = subprocess.run([tshardd, "--metrics-remote", "2"], capture_output=True, text=True,
                       timeout=60, env=env)
    check(r.returncode == 2 and "--metrics-remote 2" in r.stderr, f"--metrics-remote 2: {r.stderr}")
    r = subprocess.run([tshardd, "--help"], capture_output=True, text=True, timeout=60, env=env)
    check("--metrics " in r.stdout and "--metrics-remote" in r.stdout, "--help names --metrics")
    # a port in use, and a rank's port past 65535: every rank refuses to start, saying why
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    p = busy.getsockname()[1]
    for arg, needle in [(f"127.0.0.1:{p}", f"cannot serve metrics on 127.0.0.1:{p}"),
                        ("127.0.0.1:65535", "above 65535")]:
        sock_dir = tempfile.mkdtemp(prefix="tshard-metrics-bad-")
        os.chmod(sock_dir, 0o700)
        r = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", tshardd, "--socket-dir",
                            sock_dir, "--metrics", arg], capture_output=True, text=True,
                           timeout=120, env=env)
        out = r.stdout + r.stderr
        check(r.returncode != 0 and needle in out and "ready:" not in out,
              f"--metrics {arg}: {r.returncode} {out[-600:]!r}")
        check(not [n for n in os.listdir(sock_dir) if n.endswith(".sock")],
              f"--metrics {arg}: no socket left")
        shutil.rmtree(sock_dir, ignore_errors=True)
    busy.close()


# ---------------------------------------------------------------------------------------------
# The launcher's service-discovery file.

def launcher_sd():
    sock_dir = tempfile.mkdtemp(prefix="tshard-metrics-launch-")
    os.chmod(sock_dir, 0o700)
    os.environ["TSHARD_LAUNCH"] = os.path.join(bin_dir, "tshard-launch")
    port = free_ports(2)
    job = f"m{os.getpid()}"
    check.expect(1, lambda: tshard.launch(np=2, socket_dir=sock_dir, metrics_port=65535),
                 "metrics_port past 65535 at 2 ranks", "metrics_port")
    r = subprocess.run([os.path.join(bin_dir, "tshard-launch"), "start", "-np", "2",
                        "--metrics-port", "0"], capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--metrics-port '0'" in r.stderr, f"--metrics-port 0: {r.stderr}")
    with tshard.launch(np=2, job=job, socket_dir=sock_dir, metrics_port=port) as j:
        sd = j.metrics_sd_file
        check(sd == os.path.join(sock_dir, f"tshard-{job}.prometheus.json") and os.path.isfile(sd),
              f"SD file {sd}")
        with open(sd) as f:
            targets = json.load(f)
        want = [{"targets": [f"127.0.0.1:{port + r}"], "labels": {"job": job, "rank": str(r)}}
                for r in range(2)]
        check(targets == want, f"SD file: {targets}, want {want}")
        st = subprocess.run([os.path.join(bin_dir, "tshard-launch"), "status", "--job", job,
                             "--socket-dir", sock_dir], capture_output=True, text=True,
                            timeout=60, env=dict(os.environ, TSHARD_SOCKET_DIR=sock_dir))
        check(st.returncode == 0 and sd in st.stdout, f"status names the SD file: {st.stdout!r}")
        for t in targets:
            host, p = t["targets"][0].rsplit(":", 1)
            fams = metrics_of(int(p), job, int(t["labels"]["rank"]))
            check(value(fams, "tshard_up") == 1, f"target {t['targets'][0]} serves")
    check(not os.path.exists(sd), "stop removed the SD file")
    shutil.rmtree(sock_dir, ignore_errors=True)


try:
    port = free_ports(NP)
    snap = os.path.join(work, "snaps")
    with Daemons(bin_dir, NP, extra_args=["--metrics", f"127.0.0.1:{port}", "--snapshot-dir",
                                          snap]) as d:
        log = d.wait_logs([f"metrics http://127.0.0.1:{port + r}/metrics" for r in range(NP)])
        check(all(f"metrics http://127.0.0.1:{port + r}/metrics" in log for r in range(NP)),
              "each ready line names its metrics address")
        clients = run_sequence(d, port)
        refused_counted(clients[0], port, d.job)
        bad_http(port, clients[0])
        fams = metrics_of(port, d.job, 0)
        check(value(fams, "tshard_up") == 1, "the endpoint serves after the bad input")
        for c in clients.values():
            c.close()
        code = d.stop()
        check(code == 0 and "Sanitizer" not in d.logs() and "runtime error" not in d.logs(),
              f"the daemons exit 0 after the scrapes and the bad input (and, in the sanitizer "
              f"build, without a report):\n{d.logs()[-3000:]}")
    token_apart()
    refused_flags()
    launcher_sd()
finally:
    shutil.rmtree(work, ignore_errors=True)
check.finish()
