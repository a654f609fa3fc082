#!/usr/bin/python3
"""End-to-end test of asynchronous saves and snapshots with real daemons and the real clients.

An asynchronous save (save(wait=False)) with operations racing it on the same connection (a
put, a reshard and a drop of saved tensors issued right after the save returned, a put from
another connection while it writes): the checkpoint holds the values at the save's point in
the order, read by the pure-numpy reader and loaded back, compared with numpy references; what
the save and the load report (bytes, files, tensors); stats' saves. A background write that
fails on one rank (the write-failure hook) leaves the previous checkpoint intact and no
temporary directory, and stats and the log say why. A copy that does not fit --memory-limit is
refused naming the synchronous save, which then works. Periodic snapshots every second while a
client works: the newest --snapshot-keep kept, each complete and holding values the client put.
Then the job stopped and resumed on 2 ranks (--resume, --resume-attr) against the last snapshot,
and the refusals of --resume before serving (no checkpoint, a tensor no rule places, a rule that
does not fit, a corrupt index), every rank with the same message; tshard-launch start --resume. Bad input: save_finish from a
client, a snapshot without --snapshot-dir or with names, bad snapshot and resume flags.

usage: test_ckpt_async.py BUILD_BIN_DIR"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import tshard
import tshard.checkpoint as ck
from tshard import tshard_pb2 as pb
from tshard._status import STATUS
from checks import Checks, raw_call
from harness import Daemons

bin_dir = sys.argv[1]
check = Checks()
rng = np.random.default_rng(7)
work = tempfile.mkdtemp(prefix="tshard-ckpt-async-")
atexit.register(shutil.rmtree, work, True)
ST = {name: code for code, (name, _) in STATUS.items()}


def poll(cond, what, timeout=30.0):
    """Waits for cond() with a deadline (polling, not sleeping as synchronization)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not cond():
        if time.monotonic() > deadline:
            check(False, f"{what}: not within {timeout} s")
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return True


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".tmp-" in n]


def racing_save(d):
    """The save's point in the order: what the operations issued after it change is not in it."""
    ckdir = os.path.join(work, "race")
    with d.connect(0) as c, d.connect(2) as c2:
        big0 = rng.standard_normal((2048, 512)).astype(np.float32)
        w0 = rng.standard_normal((64, 48)).astype(np.float32)
        b0 = rng.standard_normal(30)
        p_parts = [rng.integers(-9, 9, (8, 6)).astype(np.float32) for _ in range(2)]
        c.create("big", "f32", big0.shape, "mesh=[4] placements=[S(0)]")
        c.put("big", big0)
        c.create("w", "f32", w0.shape, "mesh=[2,2] placements=[S(0),S(1)]")
        c.put("w", w0)
        c.create("b", "f64", b0.shape, "mesh=[4] placements=[R]")
        c.put("b", b0)
        c.create("p", "f32", (8, 6), "mesh=[2,2] placements=[P(sum),R]")
        for r in range(4):  # rank r holds partial part r // 2
            with d.connect(r) as cr:
                cr.put_slice("p", p_parts[r // 2])
        p0 = p_parts[0] + p_parts[1]
        fut = c.save(ckdir, all=True, wait=False)
        w1 = w0 * 2 + 1
        racing = [c.put("w", w1, wait=False),
                  c.reshard("big", "mesh=[4] placements=[S(1)]", wait=False),
                  c.drop("b", wait=False)]
        res = fut.result(timeout=60)
        check(res["tensors"] == 4, f"async save result tensors {res}")
        check(res["bytes"] == big0.nbytes + w0.nbytes + b0.nbytes + p0.nbytes,
              f"async save result bytes {res}")
        check(res["dir"] == ckdir and res["save_id"] > 0, f"async save result {res}")
        check(res["files"] >= 2, f"async save files {res}")
        tshard.wait(racing, timeout=60)
        c2.put("w", w1 * 3)  # another connection, while the files may still be written
        done = c.wait_saves(timeout=60)
        check(len(done) <= 1 and all(s["state"] == "done" for s in done), f"wait_saves {done}")
        rec = [s for s in c.stats()["saves"] if s["save_id"] == res["save_id"]]
        check(len(rec) == 1 and rec[0]["state"] == "done" and rec[0]["dir"] == ckdir and
              rec[0]["bytes_written"] == rec[0]["bytes_total"] and
              rec[0]["checkpoint_bytes"] == res["bytes"], f"stats saves {rec}")
        check(sorted(ck.names(ckdir)) == ["b", "big", "p", "w"], f"names {ck.names(ckdir)}")
        for name, want in (("big", big0), ("w", w0), ("b", b0), ("p", p0)):
            got = ck.read(ckdir, name)
            check(np.array_equal(got, want), f"checkpoint '{name}' holds the save-time values")
        check(np.array_equal(c.get("w"), w1 * 3), "the live tensor has the later values")
        check("b" not in c.list(), "the drop after the save ran")
        check(leftovers(work) == [], f"temporary directories left: {leftovers(work)}")
        for n in ("big", "w", "p"):
            c.drop(n)
        lres = c.load(ckdir)
        check(lres["tensors"] == 4 and lres["bytes"] == res["bytes"] and lres["files"] >= 1,
              f"load result {lres}")
        check(np.array_equal(c.get("big"), big0) and np.array_equal(c.get("b"), b0),
              "loaded back")
        sres = c.save(ckdir, all=True, overwrite=True)  # synchronous: its report
        check(not sres["writing"] and sres["tensors"] == 4 and sres["bytes"] == res["bytes"],
              f"sync save result {sres}")
        for n in ("big", "w", "b", "p"):
            c.drop(n)
        # a second asynchronous save while one writes: it completes the first, then runs
        c.create("x", "f32", (512, 256), "mesh=[4] placements=[S(0)]")
        x0 = rng.standard_normal((512, 256)).astype(np.float32)
        c.put("x", x0)
        f1 = c.save(os.path.join(work, "two-a"), all=True, wait=False)
        f2 = c.save(os.path.join(work, "two-b"), all=True, wait=False)
        r1, r2 = f1.result(60), f2.result(60)
        c.wait_saves(timeout=60)
        for r in (r1, r2):
            check(np.array_equal(ck.read(r["dir"], "x"), x0), f"two saves: {r['dir']}")
        c.drop("x")
    with d.connect(0) as c:  # misuse, on a connection without operations in flight
        ans = raw_call(c, save_finish=pb.SaveFinishRequest(save_id=1))
        check(ans.status == ST["INVALID_ARGUMENT"] and "ordered by the daemons" in ans.message,
              f"save_finish from a client: {ans.status} {ans.message}")
        check.expect(ST["INVALID_ARGUMENT"], c.snapshot, "snapshot without --snapshot-dir",
                     "--snapshot-dir")
        ans = raw_call(c, save=pb.SaveRequest(snapshot=True, names=["x"]))
        check(ans.status == ST["INVALID_ARGUMENT"] and "every tensor" in ans.message,
              f"snapshot with names: {ans.message}")
        check(c.ping()["rank"] == 0, "still serving")


def cli_checks(d):
    """The CLI: save --async --wait --json, load --json, checkpoint show --json, stats' saves,
    snapshot without --snapshot-dir."""
    import json
    env = dict(os.environ, TSHARD_SOCKET_DIR=d.dir, TSHARD_JOB=d.job)
    tsh = os.path.join(bin_dir, "tshard")

    def run(*args):
        return subprocess.run([tsh, *args], capture_output=True, text=True, env=env, timeout=120)
    ckdir = os.path.join(work, "cli")
    with d.connect(0) as c:
        z0 = rng.standard_normal((256, 64)).astype(np.float32)
        c.create("z", "f32", z0.shape, "mesh=[4] placements=[S(1)]")
        c.put("z", z0)
        out = run("save", ckdir, "z", "--async", "--wait", "--json")
        info = json.loads(out.stdout) if out.returncode == 0 else {}
        check(info.get("writing") is True and info.get("tensors") == 1 and
              info.get("bytes") == z0.nbytes, f"tshard save --async --json: {out.stdout} {out.stderr}")
        check(np.array_equal(ck.read(ckdir, "z"), z0), "tshard save --async --wait: files complete")
        out = run("save", ckdir, "--all", "--overwrite", "--async", "--wait", "--progress")
        check(out.returncode == 0 and "complete" in out.stdout and "MiB/s" in out.stderr,
              f"tshard save --async --wait --progress: {out.stdout} {out.stderr}")
        out = run("stats", "--json")
        saves = json.loads(out.stdout)["saves"] if out.returncode == 0 else []
        check(len(saves) >= 2 and saves[-1]["dir"] == ckdir and saves[-1]["state"] == "done",
              f"tshard stats --json saves: {saves}")
        out = run("stats")
        check(out.returncode == 0 and f"to {ckdir}: done" in out.stdout, f"tshard stats: {out.stdout}")
        c.drop("z")
        out = run("load", ckdir, "--json")
        info = json.loads(out.stdout) if out.returncode == 0 else {}
        check(info.get("tensors") == 1 and info.get("bytes") == z0.nbytes and
              info.get("files", 0) >= 1, f"tshard load --json: {out.stdout} {out.stderr}")
        check(np.array_equal(c.get("z"), z0), "tshard load: values")
        out = run("save", ckdir, "--all", "--overwrite")
        check(out.returncode == 0 and "saved 1 tensors" in out.stdout, f"tshard save: {out.stdout}")
        out = run("checkpoint", "show", ckdir, "--json")
        show = json.loads(out.stdout) if out.returncode == 0 else {}
        check(show.get("bytes") == z0.nbytes and show.get("tensors", [{}])[0].get("name") == "z"
              and show.get("files", 0) >= 2, f"tshard checkpoint show --json: {out.stdout}")
        out = run("save", ckdir, "--wait")
        check(out.returncode == 2 and "--async" in out.stderr, f"--wait without --async: {out.stderr}")
        out = run("snapshot")
        check(out.returncode == 1 and "--snapshot-dir" in out.stderr, f"tshard snapshot: {out.stderr}")
        c.drop("z")


def failing_write():
    """Rank 1's background write fails: the previous checkpoint stays, nothing is left."""
    ckdir = os.path.join(work, "fail")
    os.environ.update(TSHARD_CKPT_FAIL_RANK="1", TSHARD_CKPT_FAIL_AFTER=str(1 << 20))
    try:
        d = Daemons(bin_dir, 3)
    finally:
        for k in ("TSHARD_CKPT_FAIL_RANK", "TSHARD_CKPT_FAIL_AFTER"):
            os.environ.pop(k)
    with d, d.connect(0) as c:
        small = np.arange(60, dtype=np.float32).reshape(6, 10)
        c.create("s", "f32", small.shape, "mesh=[3] placements=[S(0)]")
        c.put("s", small)
        c.save(ckdir, all=True, wait=False).result(60)
        c.wait_saves(timeout=60)  # under the hook's threshold: complete
        big = rng.standard_normal((1536, 512)).astype(np.float32)  # 1 MiB per rank
        c.create("big", "f32", big.shape, "mesh=[3] placements=[S(0)]")
        c.put("big", big)
        c.put("s", small + 100)
        res = c.save(ckdir, all=True, overwrite=True, wait=False).result(60)
        check(res["writing"], f"failing save answered after its copy: {res}")
        check.expect(ST["CHECKPOINT_IO"], lambda: c.wait_saves(timeout=60),
                     "wait_saves of a failed background write", "cannot write piece")
        rec = [s for s in c.stats()["saves"] if s["save_id"] == res["save_id"]]
        check(len(rec) == 1 and rec[0]["state"] == "failed" and
              rec[0]["status"] == ST["CHECKPOINT_IO"] and "rank-00001" in rec[0]["message"],
              f"stats of the failed save {rec}")
        check(ck.names(ckdir) == ["s"] and np.array_equal(ck.read(ckdir, "s"), small),
              "the previous checkpoint is intact")
        check(leftovers(work) == [], f"temporary directories left: {leftovers(work)}")
        check(np.array_equal(c.get("s"), small + 100), "tensors untouched by the failed save")
        check(poll(lambda: "background save" in d.logs() and "failed" in d.logs(),
                   "the log names the failed save"), "log")


def memory_limit():
    """The copy counts against --memory-limit: refused naming the synchronous save."""
    ckdir = os.path.join(work, "mem")
    with Daemons(bin_dir, 2, extra_args=["--memory-limit", "24M", "--pool-cache", "0"]) as d, \
            d.connect(0) as c:
        c.create("m", "f32", (2048, 4096), "mesh=[2] placements=[S(0)]")  # 16 MiB per rank
        check.expect(ST["LIMIT"], lambda: c.save(ckdir, all=True, wait=False).result(60),
                     "asynchronous save over the memory limit", "save synchronously")
        check(not os.path.exists(ckdir) and leftovers(work) == [], "nothing written")
        res = c.save(ckdir, all=True)
        check(res["bytes"] == 2048 * 4096 * 4, f"the synchronous save works: {res}")
        check(not ck.read(ckdir, "m").any(), "zeros saved")


def snapshots():
    """Periodic snapshots while a client works on 3 ranks: the newest two kept, each a complete
    checkpoint of values the client put; then the job stopped and resumed on 2 ranks, a rule
    placing the tensor saved over 3 ranks, the one saved on ranks 0-1 under its own attribute,
    against the last snapshot."""
    sdir = os.path.join(work, "snaps")
    rep0 = rng.standard_normal((5, 7))
    with Daemons(bin_dir, 3, extra_args=["--snapshot-dir", sdir, "--snapshot-every", "1s",
                                         "--snapshot-keep", "2"]) as d, d.connect(0) as c:
        c.create("v", "i64", (64, 8), "mesh=[3] placements=[S(0)]")
        c.put("v", np.zeros((64, 8), np.int64))
        c.create("rep", "f64", rep0.shape, "mesh=[2]@0,1 placements=[R]")
        c.put("rep", rep0)
        i = 0

        def done_snaps():
            return [s for s in c.stats()["saves"] if s["state"] == "done"]
        deadline = time.monotonic() + 30
        while len(done_snaps()) < 3 and time.monotonic() < deadline:
            i += 1
            c.put("v", np.full((64, 8), i, np.int64))
        check(len(done_snaps()) >= 3, f"three periodic snapshots within 30 s: {done_snaps()}")
        on_demand = c.snapshot()
        check(on_demand["dir"].startswith(sdir + "/") and on_demand["writing"],
              f"tshard snapshot: {on_demand}")
        c.wait_saves(timeout=60)
        last_put = i
    kept = sorted(n for n in os.listdir(sdir) if not n.startswith("."))
    check(len(kept) == 2, f"--snapshot-keep 2 kept {kept}")
    check(kept[-1] == os.path.basename(on_demand["dir"]), "the newest is the on-demand one")
    vals = []
    for n in kept:
        v = ck.read(os.path.join(sdir, n), "v")
        check((v == v[0, 0]).all() and 0 <= v[0, 0] <= last_put, f"snapshot {n} holds one put")
        vals.append(int(v[0, 0]))
    check(vals == sorted(vals), f"snapshots in order of time {vals}")
    check(leftovers(sdir) == [], "no temporary directory left")
    last = os.path.join(sdir, kept[-1])
    rule = "v*=mesh=[2] placements=[S(1)]"
    with Daemons(bin_dir, 2, extra_args=["--resume", sdir, "--resume-attr", "x*=mesh=[2] "
                                         "placements=[R]", "--resume-attr", rule]) as d, \
            d.connect(1) as c:
        check(sorted(c.list()) == ["rep", "v"], f"resumed names {c.list()}")
        check(np.array_equal(c.get("v"), ck.read(last, "v")), "v resumed from the last snapshot")
        check(np.array_equal(c.get("rep"), rep0), "rep resumed")
        check(c.describe("v")["attr"] == "mesh=[2]@0-1 placements=[S(1)]",
              f"v under the rule: {c.describe('v')['attr']}")
        check(c.describe("rep")["attr"].startswith("mesh=[2]@0-1 placements=[R]"),
              f"rep under its saved attribute: {c.describe('rep')['attr']}")
        logs = d.logs()
        check(f"resumed 2 tensors" in logs and last in logs and rule in logs,
              "the log says what was restored and from where")
    return sdir, last


def refused_resume(sdir, last):
    """--resume refusals, every rank the same message, before serving."""
    def start(np_, *args):
        sock = tempfile.mkdtemp(prefix="tshard-resume-")
        atexit.register(shutil.rmtree, sock, True)
        os.chmod(sock, 0o700)
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        p = subprocess.run(["mpirun", "-np", str(np_), "--oversubscribe",
                            os.path.join(bin_dir, "tshardd"), "--socket-dir", sock, "--job",
                            "resume", *args], capture_output=True, text=True, env=env,
                           timeout=120)
        served = any(n.endswith(".sock") for n in os.listdir(sock))
        return p.returncode, p.stdout + p.stderr, served
    empty = tempfile.mkdtemp(prefix="tshard-empty-", dir=work)
    cases = [
        (["--resume", empty], [empty, "no complete snapshot"]),
        (["--resume", sdir], ["tensor 'v'", "no --resume-attr rule matches"]),
        (["--resume", sdir, "--resume-attr", "*=mesh=[3] placements=[S(0)]"],
         ["--resume-attr '*=mesh=[3] placements=[S(0)]'", "tensor 'v'"]),
    ]
    bad = os.path.join(work, "corrupt")
    os.makedirs(os.path.join(bad, "snap"))
    for f in os.listdir(last):
        with open(os.path.join(last, f), "rb") as src, open(os.path.join(bad, "snap", f), "wb") as dst:
            dst.write(src.read())
    with open(os.path.join(bad, "snap", "index.json"), "r+b") as f:
        f.seek(5)
        f.write(b"@@@@")
    cases.append((["--resume", bad, "--resume-attr", "*=mesh=[2] placements=[S(0)]"],
                  [os.path.join(bad, "snap"), "index does not parse"]))
    for args, needles in cases:
        rc, out, served = start(2, *args)
        lines = [l for l in out.splitlines() if "cannot start" in l]
        check(rc != 0 and not served and len(lines) == 2 and lines[0].split("cannot start")[1] ==
              lines[1].split("cannot start")[1] and all(n in lines[0] for n in needles),
              f"resume {args}: rc {rc}, served {served}, {lines}")


def launcher_resume(sdir, last):
    """tshard-launch start --resume passes the flags and prints what was restored."""
    launch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                          "tshard-launch")
    sock = tempfile.mkdtemp(prefix="tshard-launch-")
    atexit.register(shutil.rmtree, sock, True)
    os.chmod(sock, 0o700)
    env = dict(os.environ, TSHARD_BIN=bin_dir)
    common = ["--job", "resume-launch", "--socket-dir", sock]
    out = subprocess.run([launch, "start", "--resume", sdir, "--resume-attr",
                          "*=mesh=[2] placements=[S(0)]", "-np", "2", *common],
                         capture_output=True, text=True, env=env, timeout=120)
    check(out.returncode == 0 and "resumed 2 tensors" in out.stdout and last in out.stdout and
          "resumed 'v'" in out.stdout, f"tshard-launch start --resume: {out.stdout} {out.stderr}")
    try:
        with tshard.connect(socket=os.path.join(sock, "tshard-resume-launch-0.sock")) as c:
            check(np.array_equal(c.get("v"), ck.read(last, "v")), "launcher resume: values")
    finally:
        subprocess.run([launch, "stop", *common], capture_output=True, env=env, timeout=120)


def bad_flags():
    exe = os.path.join(bin_dir, "tshardd")
    for args, needle in ((["--snapshot-every", "5s"], "needs --snapshot-dir"),
                         (["--snapshot-dir", "rel/dir"], "absolute path"),
                         (["--snapshot-dir", "/tmp/x", "--snapshot-every", "200ms"], "at least 1s"),
                         (["--snapshot-dir", "/tmp/x", "--snapshot-keep", "0"], "snapshot-keep"),
                         (["--resume-attr", "*=mesh=[2] placements=[S(0)]"], "needs --resume"),
                         (["--resume", "/tmp/x", "--resume-attr", "nothing"], "GLOB=ATTR"),
                         (["--resume", "/tmp/x", "--resume-attr", "*=mesh=[2"], "the attribute"),
                         (["--resume", "relative"], "absolute path"),
                         (["--link-rates", "cross=5"], "expected a number and a unit"),
                         (["--link-rates", "wan=1GB/s"], "is neither host=RATE")):
        p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
        check(p.returncode != 0 and needle in p.stderr, f"tshardd {args}: {p.stderr!r}")


with Daemons(bin_dir, 4, extra_args=["--ckpt-chunk", "64K"]) as dm:
    racing_save(dm)
    cli_checks(dm)
failing_write()
memory_limit()
snap = snapshots()
refused_resume(*snap)
launcher_resume(*snap)
bad_flags()
check.finish()
