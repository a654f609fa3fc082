#!/usr/bin/python3
"""A training-script-like SPMD example: one Python process per rank, beside the tshardd daemons.

Each process connects to its own rank's daemon as an SPMD client of the whole job
(group="all"): create, reshard and drop then run once, after every process submitted them,
with keys made from the launch's id. Each process holds its column slice of a weight under
tensor parallelism (S(1) over the ranks) and puts it into its own daemon; the reshard to a
data-parallel layout (every rank a full replica) waits for every process's submission, so no
barrier is needed between the puts and the reshard. Each process then gets its new slice and
checks it against the weight it can compute. Any number of runs in a row work.

Run it under mpirun, one process per daemon rank (as root add --allow-run-as-root):
    deploy/tshard-launch start -np 4 --job demo
    TSHARD_JOB=demo mpirun --oversubscribe -np 4 /usr/bin/python3 deploy/examples/spmd_reshard.py
    deploy/tshard-launch stop --job demo
"""
import argparse
import os
import sys

import numpy as np

import tshard

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--job", default=None, help="daemons' job id (default $TSHARD_JOB or 'default')")
parser.add_argument("--socket-dir", default=None,
                    help="daemons' socket directory (default $TSHARD_SOCKET_DIR or the per-user one)")
parser.add_argument("--rows", type=int, default=64)
parser.add_argument("--cols", type=int, default=30)
args = parser.parse_args()

job = args.job or os.environ.get("TSHARD_JOB") or "default"
if args.socket_dir:
    os.environ["TSHARD_SOCKET_DIR"] = args.socket_dir

# the weight every process can compute (a function of the global index)
weight = (np.arange(args.rows * args.cols, dtype=np.float32) * 0.5).reshape(args.rows, args.cols)

# rank: this process's MPI rank from the launcher's environment
with tshard.connect(job=job, group="all") as c:
    p = c.ping()
    rank, world = p["rank"], p["world_size"]
    tp = tshard.Attr(tshard.Mesh([world]), [tshard.Shard(1)])    # tensor parallel: column slices
    dp = tshard.Attr(tshard.Mesh([world]), [tshard.Replicate()])  # data parallel: full replicas
    c.create("weight", "f32", weight.shape, tp)        # collective: runs once, for everyone
    box = [r for r in c.describe("weight")["ranks"] if r["rank"] == rank][0]
    cols = slice(box["lo"][1], box["hi"][1])
    c.put_slice("weight", weight[:, cols])            # my tensor-parallel slice
    before = c.stats()
    c.reshard("weight", dp)                            # runs once every process submitted it
    after = c.stats()
    mine = c.get_slice("weight")
    ok = mine is not None and np.array_equal(mine, weight)
    print(f"rank {rank}: tensor-parallel columns {cols.start}:{cols.stop} -> "
          f"data-parallel replica {mine.shape if mine is not None else None}: "
          f"{'ok' if ok else 'WRONG'}", flush=True)
    if rank == 0:
        ran = sum(s["reshards"] for s in after["strategies"].values()) - \
            sum(s["reshards"] for s in before["strategies"].values())
        print(f"reshards run: {ran} (one, although {world} processes asked)", flush=True)
    c.drop("weight")                                   # collective too

sys.exit(0 if ok else 1)
