#!/usr/bin/python3
"""End-to-end test of the Python client against real daemons (single-driver style): every
operation, every strategy, partial tensors, bf16, blocked slices, and errors mapped to
exceptions. Values are a function of the global index, so every slice is checked against the
region of an independently computed global array.

usage: test_client.py BUILD_BIN_DIR NRANKS"""
import os
import shutil
import socket
import sys
import tempfile

import numpy as np

import tshard
from checks import Checks, put_data
from harness import Daemons, free_ports

bin_dir, np_ranks = sys.argv[1], int(sys.argv[2])
check = Checks()


def expect(exc, fn, what):
    try:
        fn()
    except exc as e:
        check(bool(str(e)), f"{what}: empty message")
        return e
    except Exception as e:  # noqa: BLE001 - the wrong exception is a failure
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return None
    check(False, f"{what}: no exception")
    return None


def reference(shape, dtype=np.float32):
    """value = function of the global index (exact in every dtype used here)"""
    return (np.arange(int(np.prod(shape))) % 251 - 100).astype(dtype).reshape(shape)


def check_all(daemons, name, ref, what):
    """The whole tensor from every rank, and every rank's slice against its box."""
    for r in range(daemons.np):
        with daemons.connect(r) as c:
            got = c.get(name)
            check(got.dtype == ref.dtype and np.array_equal(got, ref), f"{what}: get from rank {r}")
            info = c.describe(name)
            box = [x for x in info["ranks"] if x["rank"] == r]
            s = c.get_slice(name)
            if box:
                region = ref[tuple(slice(lo, hi) for lo, hi in zip(box[0]["lo"], box[0]["hi"]))]
                check(s is not None and np.array_equal(s, region), f"{what}: slice of rank {r}")
            else:
                check(s.shape == (0,) * ref.ndim and s.dtype == ref.dtype,
                      f"{what}: rank {r} holds no slice: an empty array")


n = np_ranks
with Daemons(bin_dir, n) as d:
    with d.connect(0) as c:
        for r in range(n):
            with d.connect(r) as cr:
                p = cr.ping()
                check(p["rank"] == r and p["world_size"] == n and p["job"] == d.job, f"ping {r}")

        # uneven S(0), put whole from rank 0, read back everywhere
        shape = (4 * n + 1, 2 * n)  # rows uneven (root applies), columns uniform (allgather)
        ref = reference(shape)
        all_ranks = tshard.Mesh([n])
        c.create("w", "f32", shape, tshard.Attr(all_ranks, [tshard.Shard(0)]))
        c.put("w", ref)
        check_all(d, "w", ref, "put whole S(0)")
        check("w" in c.list(), "list holds w")
        info = c.describe("w")
        check(info["dtype"] == "f32" and info["shape"] == list(shape)
              and tshard.Attr.parse(info["attr"]) == tshard.Attr(all_ranks, [tshard.Shard(0)]),
              f"describe: {info}")
        check(sum(x["bytes"] for x in info["ranks"]) == ref.nbytes, "bytes per rank add up")

        # every strategy, each through the forced strategy and checked whole and per slice
        half = max(n // 2, 1)
        cases = [
            ("alltoall", f"mesh=[{n}] placements=[S(1)]"),
            ("allgather", f"mesh=[{n}] placements=[R]"),  # from the uniform S(1)
            ("local", f"mesh=[{n}] placements=[S(0)]"),    # R -> S(0): cut locally
            ("root", f"mesh=[{n}] placements=[R]"),        # uneven S(0) -> R through a root
            ("local", f"mesh=[{n}] placements=[S(0)] splits={{0:[{','.join(['0'] * (n - 1) + [str(shape[0])])}]}}"),
            ("p2p", f"mesh=[{half}]@{n - half}-{n - 1} placements=[S(1)]" if n > 1 else
                    "mesh=[1]@0 placements=[S(1)]"),
        ]
        for strategy, target in cases:
            try:
                plan = c.plan("w", target, strategy=strategy)
                check(plan["strategy"] == strategy and strategy in plan["explain"],
                      f"plan {strategy}: {plan['strategy']}")
                c.reshard("w", target, strategy=strategy)
                check(tshard.Attr.parse(c.describe("w")["attr"]) == tshard.Attr.parse(target),
                      f"attribute after {strategy}")
                check_all(d, "w", ref, f"after {strategy} to {target}")
            except tshard.TshardError as e:
                check(False, f"{strategy} to {target}: {e}")
        # auto, keeping the source under a new name
        c.reshard("w", f"mesh=[{n}] placements=[S(0)]", keep_source_as="w2")
        check(sorted(c.list()) == ["w", "w2"], f"list after keep_source_as: {c.list()}")
        check_all(d, "w2", ref, "keep_source_as result")
        check_all(d, "w", ref, "kept source")

        # a blocked slice: rank 0's rows of w2 in layout Ba4b (column blocks of 4 outermost, the
        # columns padded to a multiple of 4), against numpy's own blocking
        box = [x for x in c.describe("w2")["ranks"] if x["rank"] == 0][0]
        mine = ref[box["lo"][0]:box["hi"][0], :]
        cols = (shape[1] + 3) // 4 * 4
        padded = np.zeros((mine.shape[0], cols), np.float32)
        padded[:, :shape[1]] = mine
        blocked = padded.reshape(mine.shape[0], cols // 4, 4).transpose(1, 0, 2).reshape(-1)
        got = c.get_slice("w2", layout="Ba4b")
        check(got is not None and np.array_equal(got, blocked), "blocked slice Ba4b")

        # partial sums put slice by slice, then reduced by allreduce and reduce_scatter
        pshape = (2 * n, 3)
        pref = reference(pshape, np.int32)
        c.create("p", "i32", pshape, f"mesh=[{n}] placements=[P(sum)]")
        for r in range(n):
            with d.connect(r) as cr:  # rank r holds (r+1) * ref; the sum is ref * n(n+1)/2
                cr.put_slice("p", pref * (r + 1))
        c.reshard("p", f"mesh=[{n}] placements=[S(0)]", strategy="reduce_scatter",
                  keep_source_as="p_rs")
        check_all(d, "p_rs", pref * (n * (n + 1) // 2), "reduce_scatter of partial sums")
        c.reshard("p", f"mesh=[{n}] placements=[R]", strategy="allreduce")
        check_all(d, "p", pref * (n * (n + 1) // 2), "allreduce of partial sums")

        # bf16 travels as uint16 bits
        bits = (np.arange(40, dtype=np.uint16) * 997).reshape(8, 5)
        c.create("b", "bf16", bits.shape, f"mesh=[{n}] placements=[S(0)]")
        c.put("b", tshard.bf16_bits(bits))
        check(np.array_equal(c.get("b"), bits), "bf16 round trip")

        st = c.stats()
        check(st["tensors"] >= 5 and st["operations"] > 0 and st["collective_ops"] > 0
              and st["memory_in_use"] > 0, f"stats: {st}")
        pool = st["pool"]
        check(0 < pool["stored"] <= st["memory_in_use"] and pool["staging"] <= st["memory_in_use"]
              and pool["peak"] >= st["memory_in_use"] and pool["cache_cap"] == 1 << 30,
              f"stats show the buffer pool: {pool}")
        check(sum(v["reshards"] for v in st["strategies"].values()) >= len(cases),
              f"stats count reshards per strategy: {st['strategies']}")
        topo = {k: st["topology"][k] for k in ("spec", "hosts", "host", "rank_hosts")}
        check(topo == {"spec": f"hosts=1x{n}", "hosts": 1, "host": 0, "rank_hosts": [0] * n},
              f"every rank on this one host: {st['topology']}")

        # latency per operation kind: every rank runs each collective operation once, so N more
        # reshards add N to the reshard kind's count on every rank
        def reshard_count(r):
            with d.connect(r) as cr:
                return cr.stats()["ops"].get("reshard", {}).get("count", 0)

        def relayed_count(r):
            with d.connect(r) as cr:
                return sum(v["relayed"] for v in cr.stats()["strategies"].values())
        before = [reshard_count(r) for r in range(n)]
        relayed_before = [relayed_count(r) for r in range(n)]
        c.create("lat", "f32", (16, 16), f"mesh=[{n}] placements=[S(0)]")
        for i in range(20):
            c.reshard("lat", f"mesh=[{n}] placements=[S({1 - i % 2})]")
        for r in range(n):
            with d.connect(r) as cr:
                ops = cr.stats()["ops"]
            rs = ops.get("reshard", {})
            check(rs.get("count") == before[r] + 20
                  and 0 < rs["p50_us"] <= rs["p99_us"]
                  and rs["batch_p50"] == 1 and rs["batch_max"] == 1
                  and ops.get("create", {}).get("count", 0) >= 1,
                  f"rank {r}'s stats count 20 more reshards ({before[r]} before): {ops}")
        # 1 KiB tensors: with more than one rank their pieces ride on the agreement, on every rank;
        # a 64 KiB one's do not fit, and go through their own exchange
        relayed = [relayed_count(r) for r in range(n)]
        check(all(relayed[r] - relayed_before[r] == (20 if n > 1 else 0) for r in range(n)),
              f"relayed reshards per rank: {relayed_before} before, {relayed} after 20")
        c.create("big", "f32", (128, 128), f"mesh=[{n}] placements=[S(0)]")
        big = np.arange(128 * 128, dtype=np.float32).reshape(128, 128)
        c.put("big", big)
        c.reshard("big", f"mesh=[{n}] placements=[S(1)]")
        check(np.array_equal(c.get("big"), big), "64 KiB reshard")
        check([relayed_count(r) for r in range(n)] == relayed,
              f"a 64 KiB reshard is not relayed: {relayed}")
        c.drop("big")

        # errors carry the daemon's message, as the exception of the status code
        expect(tshard.errors.NotFoundError, lambda: c.get("nope"), "get of an unknown tensor")
        expect(tshard.errors.ExistsError,
               lambda: c.create("w", "f32", shape, f"mesh=[{n}] placements=[S(0)]"),
               "duplicate create")
        e = expect(tshard.TshardError,
                   lambda: c.create("bad", "f32", (4,), "mesh=[2 placements=[S(0)]"),
                   "unparsable attribute")
        check(e is not None and e.name in ("PARSE", "BAD_ATTRIBUTE"), f"attribute error name: {e}")
        expect(tshard.errors.BadAttributeError,
               lambda: c.create("bad", "f32", (4,), f"mesh=[1]@{n + 5} placements=[S(0)]"),
               "rank outside the world")
        expect(tshard.errors.BadStrategyError,
               lambda: c.reshard("w", f"mesh=[{n}] placements=[S(1)]", strategy="allreduce"),
               "forced strategy that does not apply")
        expect(tshard.TshardError, lambda: c.put("w", np.zeros(3, np.float32)),
               "put of the wrong number of bytes")
        check_all(d, "w", ref, "w unchanged after the failed operations")
        expect(ValueError, lambda: c.create("x", "complex", (2,), "mesh=[1] placements=[R]"),
               "unknown dtype")

        # Names: the daemon's rules, checked before sending; a valid UTF-8 name works everywhere.
        for bad, why in (("a\0b", "NUL"), ("tab\tname", "control character"),
                         ("c1\x85", "C1 control character"), ("x" * 128, "128 bytes"),
                         ("\u00e9" * 64, "128 bytes of UTF-8"), ("lone\ud800", "lone surrogate"),
                         ("__tshard.x", "reserved prefix"), ("", "empty")):
            expect(tshard.errors.InvalidArgumentError,
                   lambda: c.create(bad, "f32", (2,), "mesh=[1] placements=[R]"),
                   f"name with {why}")
            expect(tshard.errors.InvalidArgumentError, lambda: c.describe(bad),
                   f"describe of a name with {why}")
        uname = "gr\u00f6\u00dfe_\u540d"
        c.create(uname, "i32", (n,), f"mesh=[{n}] placements=[S(0)]")
        c.put(uname, np.arange(n, dtype=np.int32))
        check(np.array_equal(c.get(uname), np.arange(n, dtype=np.int32)) and uname in c.list(),
              "a UTF-8 name is stored, listed and read back")
        c.drop(uname)

        for name in ("w", "w2", "p", "p_rs", "b", "lat"):
            c.drop(name)
        check(c.list() == [], "everything dropped")
    check(d.stop() == 0, "daemons exit 0 after shutdown")

# TCP with a token: daemons listening on loopback (rank r on port+r)
def tcp_daemons(token_file):
    """Another process may take one of the ports between the probe and the daemons' bind (the
    daemons then refuse to start, saying so): the launch is retried on other ports."""
    for attempt in range(5):
        p = free_ports(n)
        try:
            return p, Daemons(bin_dir, n, extra_args=["--listen", f"tcp://127.0.0.1:{p}",
                                                      "--token-file", token_file])
        except RuntimeError as e:
            if "address already in use" not in str(e) or attempt == 4:
                raise


tok_dir = tempfile.mkdtemp(prefix="tshard-token-")
token_file = os.path.join(tok_dir, "token")
with open(token_file, "w") as f:
    f.write("s3cret-token-for-tests\n")
os.chmod(token_file, 0o600)
port, daemons = tcp_daemons(token_file)
with daemons as d:
    for r in range(n):
        with tshard.connect(tcp=f"127.0.0.1:{port + r}", token="s3cret-token-for-tests") as c:
            check(c.ping()["rank"] == r, f"tcp ping of rank {r}")
    with tshard.connect(tcp=("127.0.0.1", port), token="s3cret-token-for-tests") as c:
        c.create("t", "i64", (n, 3), f"mesh=[{n}] placements=[S(0)]")
        t = np.arange(3 * n, dtype=np.int64).reshape(n, 3)
        c.put("t", t)
        check(np.array_equal(c.get("t"), t), "put and get over TCP")
    expect(tshard.errors.AuthError,
           lambda: tshard.connect(tcp=f"127.0.0.1:{port}", token="wrong-token-123"),
           "a wrong token is refused")
    with tshard.connect(tcp=("127.0.0.1", port), token_file=token_file) as c:
        check(c.ping()["rank"] == 0, "connect with the token file")
    # Token files: one that others may read, and one of 256 characters, are refused.
    loose = os.path.join(tok_dir, "loose")
    with open(loose, "w") as f:
        f.write("s3cret-token-for-tests\n")
    os.chmod(loose, 0o644)
    e = expect(tshard.errors.AuthError,
               lambda: tshard.connect(tcp=("127.0.0.1", port), token_file=loose),
               "a token file of mode 0644")
    check(e is not None and "chmod 600" in str(e), f"mode 0644 message: {e}")
    longf = os.path.join(tok_dir, "long")
    with open(longf, "w") as f:
        f.write("k" * 256 + "\n")
    os.chmod(longf, 0o600)
    e = expect(tshard.errors.AuthError,
               lambda: tshard.connect(tcp=("127.0.0.1", port), token_file=longf),
               "a token file of 256 characters")
    check(e is not None and "8 to 255" in str(e), f"long token message: {e}")
    expect(tshard.errors.AuthError,
           lambda: tshard.connect(tcp=("127.0.0.1", port), token="k" * 256),
           "a token of 256 characters")
    expect(tshard.errors.IoError,
           lambda: tshard.connect(tcp=("127.0.0.1", port), token_file=longf + ".missing"),
           "a missing token file")
    check(d.stop() == 0, "TCP daemons exit 0")
shutil.rmtree(tok_dir)

check.finish()
