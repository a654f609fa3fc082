#!/usr/bin/python3
"""The tshard CLI against real daemons: put/get/get-slice through .npy files checked with numpy,
create, reshard with a forced strategy, show NAME, describe/list/stats/ping with --json, drop,
shutdown, and the exit codes of failures (1 with the daemon's message, 4 with no daemon, 2 for a
token file others may read or one too long).

usage: test_cli_daemon.py BUILD_BIN_DIR NRANKS"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from checks import Checks  # noqa: E402
from harness import Daemons  # noqa: E402

bin_dir, n = sys.argv[1], int(sys.argv[2])
tshard_bin = os.path.join(bin_dir, "tshard")
check = Checks()


with Daemons(bin_dir, n) as d, tempfile.TemporaryDirectory() as tmp:
    def cli(*args, rank=0):
        return subprocess.run([tshard_bin, *args, "--socket", d.socket(rank)], capture_output=True,
                              text=True, timeout=120)

    ref = (np.arange(5 * n * 7) % 97).astype(np.float32).reshape(5 * n, 7)
    src = os.path.join(tmp, "w.npy")
    np.save(src, np.asfortranarray(ref))  # Fortran order on the way in
    r = cli("put", "w", src, "--attr", f"mesh=[{n}] placements=[S(0)]")
    check(r.returncode == 0, f"put: {r.stderr}")
    out = os.path.join(tmp, "out.npy")
    for rank in range(n):
        r = cli("get", "w", out, rank=rank)
        check(r.returncode == 0 and np.array_equal(np.load(out), ref), f"get from rank {rank}: {r.stderr}")
    r = cli("get", "w", out, "--json", rank=n - 1)
    check(r.returncode == 0 and json.loads(r.stdout) == {"operation": "get", "name": "w",
                                                         "bytes": ref.nbytes, "file": out},
          f"get --json: {r.stdout}")
    r = cli("get-slice", "w", out, rank=n - 1)
    check(r.returncode == 0 and np.array_equal(np.load(out), ref[5 * (n - 1):]), f"get-slice: {r.stderr}")
    r = cli("reshard", "w", "--to", f"mesh=[{n}] placements=[S(1)]", "--strategy", "alltoall")
    check(r.returncode == 0, f"reshard: {r.stderr}")
    r = cli("describe", "w", "--json")
    info = json.loads(r.stdout) if r.returncode == 0 else {}
    check(info.get("attr") == f"mesh=[{n}]@0{'-' + str(n - 1) if n > 1 else ''} placements=[S(1)]"
          and info.get("shape") == [5 * n, 7] and len(info.get("ranks", [])) == n,
          f"describe --json: {r.stdout} {r.stderr}")
    r = cli("get", "w", out)
    check(r.returncode == 0 and np.array_equal(np.load(out), ref), "get after reshard")
    r = cli("show", "w", "--ascii")
    check(r.returncode == 0 and "placements=[S(1)]" in r.stdout and "+" in r.stdout
          and all(f" {k} " in r.stdout for k in range(n)), f"show w: {r.stdout} {r.stderr}")
    r = cli("create", "z", "--dtype", "i32", "--shape", "4,4", "--attr", "mesh=[1] placements=[R]")
    check(r.returncode == 0, f"create: {r.stderr}")
    r = cli("list", "--json")
    check(r.returncode == 0 and sorted(json.loads(r.stdout)) == ["w", "z"], f"list: {r.stdout}")
    r = cli("get", "z", out)
    check(r.returncode == 0 and np.array_equal(np.load(out), np.zeros((4, 4), np.int32)), "zeros")
    r = cli("stats", "--json")
    st = json.loads(r.stdout) if r.returncode == 0 else {}
    check(st.get("tensors") == 2 and st.get("strategies", {}).get("alltoall", {}).get("reshards") == 1,
          f"stats: {r.stdout}")
    # a tensor this small rides on the agreement with more than one rank
    check(st["strategies"]["alltoall"].get("relayed") == (1 if n > 1 else 0),
          f"stats count the relayed reshard: {r.stdout}")
    pool = st.get("pool", {})
    check(sorted(pool) == ["cache_cap", "cached", "hits", "misses", "peak", "released", "staging",
                           "stored"] and 0 < pool["stored"] <= st["memory_in_use"]
          and pool["cache_cap"] == 1 << 30 and pool["peak"] >= st["memory_in_use"],
          f"stats shows the buffer pool: {r.stdout}")
    rs = st.get("ops", {}).get("reshard", {})
    check(rs.get("count") == 1 and 0 < rs["p50_us"] <= rs["p99_us"] and rs["batch_max"] == 1
          and st["ops"].get("create", {}).get("count") == 2,
          f"stats shows the latency of each operation kind: {r.stdout}")
    r = cli("stats")
    check(r.returncode == 0 and "pool: stored " in r.stdout and "hits" in r.stdout
          and "  reshard         1, p50 " in r.stdout
          and f"  alltoall        1 reshards ({1 if n > 1 else 0} relayed), " in r.stdout,
          f"stats text: {r.stdout}")
    r = cli("ping", "--json", rank=n - 1)
    check(r.returncode == 0 and json.loads(r.stdout) == {"rank": n - 1, "world_size": n}, "ping")
    # failures: the daemon's message and exit code 1; no daemon: exit code 4
    r = cli("get", "nope", out)
    check(r.returncode == 1 and "NOT_FOUND" in r.stderr, f"get unknown: {r.stderr}")
    r = cli("reshard", "w", "--to", "mesh=[2 placements=[R]")
    check(r.returncode == 1 and "column" in r.stderr, f"bad attribute: {r.stderr}")
    r = subprocess.run([tshard_bin, "ping", "--socket", os.path.join(tmp, "none.sock")],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 4 and "cannot reach" in r.stderr, f"no daemon: {r.stderr}")
    r = cli("put", "w", os.path.join(tmp, "missing.npy"))
    check(r.returncode == 3, f"missing file: {r.returncode} {r.stderr}")
    # a progress bar on a terminal (script gives the CLI a pseudo-terminal), none otherwise
    big = os.path.join(tmp, "big.npy")
    np.save(big, np.ones((5000, 1024), np.float32))  # 20 MiB
    r = subprocess.run(["script", "-qec", f"{tshard_bin} put big {big} --attr 'mesh=[{n}] "
                        f"placements=[S(0)]' --socket {d.socket(0)}", "/dev/null"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "put big [" in r.stdout and "100% 19.5/19.5 MiB" in r.stdout
          and "MiB/s" in r.stdout and "left" in r.stdout,
          f"progress bar on a terminal: {r.stdout!r}")
    r = cli("get", "big", out)
    check(r.returncode == 0 and "[#" not in r.stdout + r.stderr,
          f"no progress bar off a terminal: {r.stdout!r} {r.stderr!r}")
    # names by the daemon's rules, refused before anything is sent
    r = cli("describe", "tab\tname")
    check(r.returncode == 1 and "control character" in r.stderr, f"name with a tab: {r.stderr}")
    # --token-file: the daemon's rules (private file, 8 to 255 characters), checked before connecting
    loose = os.path.join(tmp, "loose-token")
    with open(loose, "w") as f:
        f.write("s3cret-token-for-tests\n")
    os.chmod(loose, 0o644)
    longf = os.path.join(tmp, "long-token")
    with open(longf, "w") as f:
        f.write("k" * 256)
    os.chmod(longf, 0o600)
    for path, want in ((loose, "chmod 600"), (longf, "8 to 255")):
        r = subprocess.run([tshard_bin, "ping", "--tcp", "127.0.0.1:1", "--token-file", path],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and want in r.stderr, f"token file {path}: {r.returncode} {r.stderr}")
    for name in ("w", "z", "big"):
        check(cli("drop", name).returncode == 0, f"drop {name}")
    r = cli("shutdown")
    check(r.returncode == 0, f"shutdown: {r.stderr}")
    check(d.proc.wait(60) == 0, "daemons exit 0")

check.finish()
