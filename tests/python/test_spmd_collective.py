#!/usr/bin/python3
"""Idempotency keys and SPMD collectives against real daemons (3 ranks,
--key-ttl 3s), with the Python client, the CLI (C library) and raw requests:

- skewed SPMD clients (one thread per rank, each its own connection with group=all): one rank
  sleeps before its put (skew in the client under test); the reshard every rank submits runs
  once, after every slice is in: each rank's new slice equals the numpy reference, and rank 0's
  daemon counts one reshard per step;
- a missing client: the others get IncompleteError naming it after the collective timeout, all
  the same message, the late one too; nothing was created;
- mismatched submissions (same key, another reshard): KeyConflictError for all, one message,
  the tensor unchanged (data compared with numpy);
- keys: a retry of the identical request answers without running again (from any rank); the
  same key for another request is KeyConflictError saying what the key was used for; create
  after a drop under the same key creates again; a key expires after --key-ttl (the retry then
  runs again);
- misuse: participants on a per-rank operation, without a key, outside the job, twice, without
  this rank, a timeout without participants; a group without a run id or a key; the CLI without
  --key, and two CLI processes creating one tensor as participants.

usage: test_spmd_collective.py BUILD_BIN_DIR"""
import atexit
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import numpy as np

import tshard
from tshard import tshard_pb2 as pb
from tshard.spmd import run_id_from_env
from tshard.wire import request_frame
from harness import Daemons

NP = 3
TTL_S = 3.0
bin_dir = sys.argv[1]
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}", flush=True)


def spmd(d, body, ranks=range(NP), timeout=60, **kw):
    """Runs body(client, rank) in one thread per rank, each on its own grouped connection;
    returns {rank: result or exception}."""
    out = {}

    def one(r):
        try:
            with tshard.connect(socket=d.socket(r), timeout=timeout, **kw) as c:
                out[r] = body(c, r)
        except Exception as e:  # noqa: BLE001 - the test compares them
            out[r] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def reshards_run(c):
    return sum(s["reshards"] for s in c.stats()["strategies"].values())


def test_skewed(d):
    shape = (12, 9)
    ref = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    targets = ["mesh=[3] placements=[S(1)]", "mesh=[3] placements=[R]",
               "mesh=[3] placements=[S(0)]"]
    run = f"skew-{uuid.uuid4().hex[:8]}"
    with d.connect(0) as c0:
        before = reshards_run(c0)
    for late in (2, 0):  # the rank that is late with its put: another rank, then rank 0
        def body(c, r):
            c.create("skew", "f32", shape, "mesh=[3] placements=[S(0)]")
            box = [x for x in c.describe("skew")["ranks"] if x["rank"] == r][0]
            if r == late:
                time.sleep(1.0)  # skew of the client under test, not a synchronization
            c.put_slice("skew", ref[box["lo"][0]:box["hi"][0], box["lo"][1]:box["hi"][1]])
            got = []
            for t in targets:
                c.reshard("skew", t)
                box = [x for x in c.describe("skew")["ranks"] if x["rank"] == r][0]
                got.append((c.get_slice("skew"), box))
            c.drop("skew")
            return got

        res = spmd(d, body, group="all", run_id=f"{run}-{late}")
        for r in range(NP):
            ok = not isinstance(res.get(r), Exception) and res.get(r) is not None
            check(ok, f"skewed (late {late}) rank {r}: {res.get(r)!r}")
            if not ok:
                continue
            for t, (arr, box) in zip(targets, res[r]):
                want = ref[box["lo"][0]:box["hi"][0], box["lo"][1]:box["hi"][1]]
                check(arr is not None and np.array_equal(arr, want),
                      f"skewed (late {late}) rank {r} after {t}: slice equals numpy's")
    with d.connect(0) as c0:
        check(reshards_run(c0) - before == 2 * len(targets),
              f"each reshard ran once: {reshards_run(c0) - before} for {2 * len(targets)}")
        check(c0.list() == [], f"every collective drop ran: {c0.list()}")


def test_missing(d):
    t0 = time.monotonic()
    res = spmd(d, lambda c, r: c.create("miss", "f32", (4,), "mesh=[3] placements=[R]",
                                        key="miss-1"),
               ranks=(0, 1), group="all", collective_timeout=1.0)
    took = time.monotonic() - t0
    msgs = [res[r].message if isinstance(res[r], tshard.errors.IncompleteError) else repr(res[r])
            for r in (0, 1)]
    check(all(isinstance(res[r], tshard.errors.IncompleteError) for r in (0, 1)),
          f"the present ranks get IncompleteError: {res}")
    check(msgs[0] == msgs[1], f"one message for every participant: {msgs}")
    check("rank(s) 2 never submitted it" in msgs[0] and "create 'miss'" in msgs[0] and
          "1000 ms" in msgs[0], f"the message names the missing rank: {msgs[0]}")
    check(took >= 0.95, f"the collective waited its timeout: {took:.2f} s")
    late = spmd(d, lambda c, r: c.create("miss", "f32", (4,), "mesh=[3] placements=[R]",
                                         key="miss-1"),
                ranks=(2,), group="all", collective_timeout=1.0)[2]
    check(isinstance(late, tshard.errors.IncompleteError) and late.message == msgs[0],
          f"the late participant gets the same error: {late!r}")
    with d.connect(1) as c:
        check("miss" not in c.list(), "nothing was created")


def test_mismatch(d):
    ref = np.arange(36, dtype=np.float32).reshape(6, 6)
    with d.connect(0) as c:
        c.create("mm", "f32", ref.shape, "mesh=[3] placements=[S(0)]")
        c.put("mm", ref)

    def body(c, r):
        c.reshard("mm", "mesh=[3] placements=[S(1)]" if r == 1 else "mesh=[3] placements=[R]",
                  key="mm-reshard")

    res = spmd(d, body, group="all")
    errs = [res[r] for r in range(NP)]
    check(all(isinstance(e, tshard.errors.KeyConflictError) for e in errs),
          f"every participant gets KeyConflictError: {errs}")
    if all(isinstance(e, tshard.TshardError) for e in errs):
        check(len({e.message for e in errs}) == 1, f"one message: {[e.message for e in errs]}")
        check("every participant must submit the identical request" in errs[0].message and
              "reshard 'mm'" in errs[0].message, f"the message says why: {errs[0].message}")
    with d.connect(2) as c:
        check(c.describe("mm")["attr"].startswith("mesh=[3]") and
              "S(0)" in c.describe("mm")["attr"], f"unchanged: {c.describe('mm')['attr']}")
        check(np.array_equal(c.get("mm"), ref), "the data is intact")
        c.drop("mm")


def test_keys(d):
    attr = "mesh=[3] placements=[S(0)]"
    with d.connect(0) as c, d.connect(2) as c2:
        c.create("k1", "f32", (6, 2), attr, key="once")
        c.put("k1", np.ones((6, 2), np.float32))
        c.create("k1", "f32", (6, 2), attr, key="once")  # a retry: answered, not run again
        c2.create("k1", "f32", (6, 2), attr, key="once")  # from another rank too
        check(np.array_equal(c.get("k1"), np.ones((6, 2), np.float32)),
              "the retries did not run again (the data stays)")
        try:
            c.create("k1", "f32", (6, 3), attr, key="once")
            check(False, "the same key for another request is refused")
        except tshard.errors.KeyConflictError as e:
            check("idempotency key 'once' was used for create 'k1'" in e.message and
                  "use a new key" in e.message, f"the message says what the key was: {e.message}")
        c.drop("k1")
        c.create("k1", "f32", (6, 2), attr, key="once")  # after the drop: runs again
        check("k1" in c2.list() and np.array_equal(c2.get("k1"), np.zeros((6, 2), np.float32)),
              "create after a drop under the same key created the tensor")
        c.drop("k1")
        # expiry: the retry is answered until --key-ttl passed, then runs again (EXISTS)
        c.create("t1", "f32", (3,), "mesh=[3] placements=[R]", key="ttl")
        t0 = time.monotonic()
        reran = None
        while time.monotonic() - t0 < 5 * TTL_S:
            try:
                c.create("t1", "f32", (3,), "mesh=[3] placements=[R]", key="ttl")
            except tshard.errors.ExistsError:
                reran = time.monotonic() - t0
                break
            time.sleep(0.2)  # polling for the expiry, bounded by the deadline above
        check(reran is not None and reran >= TTL_S - 0.3,
              f"the key expired after --key-ttl {TTL_S} s: {reran}")
        c.drop("t1")


def raw(c, **fields):
    req = pb.Request(id=c._take_id(), **{k: v for k, v in fields.items() if k != "op"})
    name, msg = fields["op"]
    getattr(req, name).CopyFrom(msg)
    c._wire.send(request_frame(req))
    r = c._wire.recv()
    return r.status, r.message


def test_misuse(d):
    create = ("create", pb.CreateRequest(name="mu", dtype="f32", shape=[3],
                                        attr=pb.DistAttr(text="mesh=[3] placements=[R]")))
    cases = [
        (dict(op=("put_slice", pb.PutSliceRequest(name="mu", total_bytes=4, data=b"1234")),
              participants=[0, 1], idempotency_key="p"), "put_slice does not take participants"),
        (dict(op=create, participants=[0, 1]), "needs an idempotency key"),
        (dict(op=create, participants=[0, 7], idempotency_key="x"),
         "participant 7 is not a rank of the job (ranks 0 to 2)"),
        (dict(op=create, participants=[1, 1], idempotency_key="x"), "participant 1 is named twice"),
        (dict(op=create, participants=[0, 2], idempotency_key="x"),
         "rank 1, which is not among the 2 participants"),
        (dict(op=create, collective_timeout_ms=5, idempotency_key="x"),
         "collective_timeout_ms applies only to a request naming participants"),
        (dict(op=create, participants=[0, 1], collective_timeout_ms=90000000, idempotency_key="x"),
         "collective_timeout_ms 90000000; at most 600000 (the daemons' --collective-timeout-max"),
        (dict(op=create, participants=[0, 1], collective_timeout_ms=600001, idempotency_key="x"),
         "collective_timeout_ms 600001; at most 600000 (the daemons' --collective-timeout-max"),
    ]
    with d.connect(1) as c:
        for fields, want in cases:
            st, msg = raw(c, **fields)
            check(st == 1 and want in msg, f"misuse {fields}: {st} {msg}")
        check("mu" not in c.list(), "no misuse created anything")
    # A client with a long timeout: the collective timeout made from it stays within the daemons'
    # maximum, so its collectives run.
    res = spmd(d, lambda c, r: c.create("longwait", "f32", (4,), "mesh=[3] placements=[R]",
                                        key="longwait"), group="all", timeout=3600)
    check(all(res[r] is None for r in range(NP)), f"grouped clients with a 3600 s timeout: {res}")
    with d.connect(0) as c:
        c.drop("longwait")
    for group, want in (([0, 5], "group rank 5 is not a rank of the job"),
                        ([1, 2], "talks to rank 0, which is not in its group"),
                        ("0,x", "expected 'all' or ranks")):
        try:
            tshard.connect(socket=d.socket(0), group=group).close()
            check(False, f"group {group} refused")
        except tshard.TshardError as e:
            check(want in e.message, f"group {group}: {e.message}")
    check(run_id_from_env({}) is None and
          run_id_from_env({"PMIX_NAMESPACE": "42"}) == "pmix-42", "run ids from the environment")
    saved = {k: os.environ.pop(k) for k in list(os.environ)
             if k in ("TSHARD_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid",
                      "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")}
    try:
        with tshard.connect(socket=d.socket(0), group="all") as c:
            try:
                c.drop("nothing")
                check(False, "a group without a run id needs keys")
            except tshard.TshardError as e:
                check("none was found: pass key=" in e.message, f"no run id: {e.message}")
    finally:
        os.environ.update(saved)


def test_cli(d):
    cli = os.path.join(bin_dir, "tshard")
    base = ["--attr", "mesh=[3] placements=[S(0)]", "--shape", "6,4"]

    def run(args, rank):
        return subprocess.Popen([cli] + args + ["--socket", d.socket(rank)], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    procs = [run(["create", "cl"] + base + ["--participants", "0,1", "--key", "cli-1"], r)
             for r in (1, 0)]
    outs = [p.communicate(timeout=60) for p in procs]
    check(all(p.returncode == 0 for p in procs), f"both CLI participants succeed: {outs}")
    with d.connect(2) as c:
        check(c.describe("cl")["shape"] == [6, 4], "the CLI collective created the tensor once")
    p = run(["drop", "cl", "--participants", "all", "--key", "cli-2", "--collective-timeout",
             "500ms"], 0)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 1 and "rank(s) 1, 2 never submitted it" in err,
          f"a lone CLI participant times out naming the others: {p.returncode} {err}")
    p = run(["drop", "cl", "--participants", "0,1"], 0)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 2 and "--participants needs --key" in err, f"CLI without key: {err}")
    p = run(["drop", "cl", "--collective-timeout", "1s", "--key", "z"], 0)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 2 and "only with --participants" in err, f"CLI timeout alone: {err}")
    with d.connect(0) as c:
        c.drop("cl")


def test_grouped_compute(d):
    """einsum and save/load are collectives of the group too: with a rank late with its put,
    the einsum still sees every slice (result equals numpy's), and the save/load round trip
    gives the tensor back."""
    import tempfile
    rng = np.random.default_rng(11)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32)
    ckdir = tempfile.mkdtemp(prefix="tshard-spmd-ck-")
    atexit.register(shutil.rmtree, ckdir, True)

    def body(c, r):
        for name, x in (("ga", a), ("gb", b)):
            c.create(name, "f32", x.shape, "mesh=[3] placements=[S(0)]")
            box = [e for e in c.describe(name)["ranks"] if e["rank"] == r][0]
            if r == 1 and name == "gb":
                time.sleep(1.0)  # skew of the client under test, not a synchronization
            c.put_slice(name, x[box["lo"][0]:box["hi"][0], box["lo"][1]:box["hi"][1]])
        c.einsum("ij,jk->ik", "ga", "gb", out="gc", attr="mesh=[3] placements=[R]")
        got = c.get_slice("gc")
        c.save(os.path.join(ckdir, "ck"), names=["gc"])
        for name in ("ga", "gb", "gc"):
            c.drop(name)
        c.load(os.path.join(ckdir, "ck"), names=["gc"])
        back = c.get_slice("gc")
        c.drop("gc")
        return got, back

    res = spmd(d, body, group="all", run_id=f"compute-{uuid.uuid4().hex[:8]}")
    want = a @ b
    for r in range(NP):
        ok = isinstance(res.get(r), tuple)
        check(ok, f"grouped einsum/save/load rank {r}: {res.get(r)!r}")
        if ok:
            got, back = res[r]
            check(np.allclose(got, want, rtol=1e-5, atol=1e-5),
                  f"grouped einsum rank {r}: equals numpy's despite the late put")
            check(np.array_equal(back, got), f"grouped save/load rank {r}: the tensor back")
    with d.connect(0) as c0:
        check(c0.list() == [], f"every grouped drop ran: {c0.list()}")


with Daemons(bin_dir, NP, extra_args=("--key-ttl", f"{int(TTL_S)}s")) as d:
    try:
        for t in (test_skewed, test_missing, test_mismatch, test_keys, test_misuse, test_cli,
                  test_grouped_compute):
            t0 = time.monotonic()
            t(d)
            print(f"{t.__name__}: {time.monotonic() - t0:.1f} s", flush=True)
    except Exception:
        print(d.logs()[-4000:])
        raise
    finally:
        rc = d.stop()
check(rc == 0, f"daemons stopped cleanly: {rc}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
