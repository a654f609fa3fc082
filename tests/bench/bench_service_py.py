"""bench_service_py.py - the Python half of tshard-bench-service: puts and gets a whole f32 tensor
(SIZE MiB, [SIZE*64, 4096], S(0) over the 4 ranks) through the tshard package, as a training
script would, and prints key=value lines that the C benchmark forwards:

  py_put_1gib_gbps, py_get_1gib_gbps   medians over REPS puts and gets (GB = 1e9 bytes)
  py_put_1gib_first_gbps, ...           the first of them (a fresh connection's segment)

The array got back is compared with the one put (outside the timed calls).

usage: PYTHONPATH=build/python /usr/bin/python3 bench_service_py.py --socket PATH
       [--size-mib N] [--reps R]
"""
import argparse
import statistics
import sys
import time

import numpy as np

import tshard


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="Unix socket of the daemon to use (rank 0)")
    ap.add_argument("--size-mib", type=int, default=1024, help="tensor size in MiB (default 1024)")
    ap.add_argument("--reps", type=int, default=5, help="puts and gets timed (default 5)")
    a = ap.parse_args()
    if a.size_mib < 1 or a.reps < 1:
        ap.error("--size-mib and --reps must be at least 1")
    shape = (a.size_mib * 64, 4096)
    data = (np.arange(shape[0] * shape[1], dtype=np.int64) % 1000).astype(np.float32)
    data = data.reshape(shape)
    nbytes = data.nbytes
    with tshard.connect(socket=a.socket, timeout=600) as c:
        c.create("py_big", "f32", shape, "mesh=[4] placements=[S(0)]")
        puts, gets, back = [], [], None
        for _ in range(a.reps):
            t0 = time.perf_counter()
            c.put("py_big", data)
            puts.append(time.perf_counter() - t0)
            back = None  # the previous copy is freed before the next get, as a loop would
            t0 = time.perf_counter()
            back = c.get("py_big")
            gets.append(time.perf_counter() - t0)
        c.drop("py_big")
    if back.shape != shape or back.dtype != np.float32 or not np.array_equal(back, data):
        print("bench_service_py: the tensor got back differs from the one put", file=sys.stderr)
        return 1
    print(f"py_put_1gib_first_gbps={nbytes / puts[0] / 1e9:.2f}")
    print(f"py_get_1gib_first_gbps={nbytes / gets[0] / 1e9:.2f}")
    print(f"py_put_1gib_gbps={nbytes / statistics.median(puts) / 1e9:.2f}")
    print(f"py_get_1gib_gbps={nbytes / statistics.median(gets) / 1e9:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
