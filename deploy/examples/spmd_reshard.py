#!/usr/bin/python3
"""A training-script-like SPMD example: one Python process per rank, beside the tshardd daemons.

Each process holds its column slice of a weight under tensor parallelism (S(1) over the ranks),
puts it into its own rank's daemon, and then all processes submit the same reshard to a
data-parallel layout (every rank a full replica) with one idempotency key, so the reshard runs
once. Each process then gets its new slice and checks it against the weight it can compute.

Run it under mpirun, one process per daemon rank (see deploy/tshard-launch):
    mpirun -np 4 /usr/bin/python3 deploy/examples/spmd_reshard.py --job demo
mpi4py provides the barrier a training job already has (torch.distributed would do the same).
"""
import argparse
import sys

import numpy as np
from mpi4py import MPI

import tshard

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--job", default=None, help="daemons' job id (default $TSHARD_JOB or 'default')")
parser.add_argument("--socket-dir", default=None, help="daemons' socket directory")
parser.add_argument("--rows", type=int, default=64)
parser.add_argument("--cols", type=int, default=30)
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, world = comm.Get_rank(), comm.Get_size()
job = args.job or "default"
sock = None
if args.socket_dir:
    sock = f"{args.socket_dir}/tshard-{job}-{rank}.sock"

# the weight every process can compute (a function of the global index)
weight = (np.arange(args.rows * args.cols, dtype=np.float32) * 0.5).reshape(args.rows, args.cols)
tp = tshard.Attr(tshard.Mesh([world]), [tshard.Shard(1)])    # tensor parallel: column slices
dp = tshard.Attr(tshard.Mesh([world]), [tshard.Replicate()])  # data parallel: full replicas

with tshard.connect(rank=rank, job=job, socket=sock) as c:
    c.create("weight", "f32", weight.shape, tp, key="create-weight")
    box = [r for r in c.describe("weight")["ranks"] if r["rank"] == rank][0]
    cols = slice(box["lo"][1], box["hi"][1])
    c.put_slice("weight", weight[:, cols])            # my tensor-parallel slice
    comm.Barrier()                                     # every slice is in
    c.reshard("weight", dp, key="to-data-parallel")    # the same call everywhere: runs once
    mine = c.get_slice("weight")
    ok = mine is not None and np.array_equal(mine, weight)
    print(f"rank {rank}: tensor-parallel columns {cols.start}:{cols.stop} -> "
          f"data-parallel replica {mine.shape if mine is not None else None}: "
          f"{'ok' if ok else 'WRONG'}", flush=True)
    comm.Barrier()
    if rank == 0:
        stats = c.stats()
        print(f"reshards run: {sum(s['reshards'] for s in stats['strategies'].values())} "
              f"(one, although {world} processes asked)", flush=True)
    comm.Barrier()
    c.drop("weight", key="drop-weight")

sys.exit(0 if comm.allreduce(0 if ok else 1) == 0 else 1)
