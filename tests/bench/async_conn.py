#!/usr/bin/python3
"""A 128 MiB get on a connection that had operations in flight against the same get on a fresh
connection: async_conn_get(sock) returns the ratio of the medians (>= 5 trials each, the two
interleaved in one run); 1.0 means futures cost the later gets nothing. Run standalone (starts 2
daemons) it prints async_conn_get_vs_fresh=RATIO and the two medians in ms as key=value lines.

usage: async_conn.py BUILD_BIN_DIR [TRIALS]"""
import statistics
import sys
import time

import numpy as np

import tshard

_MIB = 1 << 20


def _timed_get(c, name):
    t = time.perf_counter()
    c.get(name)
    return (time.perf_counter() - t) * 1000.0


def async_conn_get(connect, trials=5, mib=128, attr="mesh=[2] placements=[S(0)]"):
    """connect() opens a connection to one daemon; returns (ratio, async ms, fresh ms)."""
    name = "bench_async_conn"
    with connect() as c:
        c.create(name, "f32", (mib * _MIB // 4,), attr)
        c.put(name, np.arange(mib * _MIB // 4, dtype=np.float32))
    try:
        used, fresh = [], []
        for _ in range(max(5, trials)):
            with connect() as c:
                futs = [c.describe(name, wait=False) for _ in range(4)]
                futs += [c.get(name, wait=False) for _ in range(4)]
                tshard.wait(futs, 600)
                del futs
                _timed_get(c, name)  # the result buffer, as the fresh connection's first
                used.append(_timed_get(c, name))
            with connect() as c:
                _timed_get(c, name)
                fresh.append(_timed_get(c, name))
        a, f = statistics.median(used), statistics.median(fresh)
        return a / f, a, f
    finally:
        with connect() as c:
            c.drop(name)


def main():
    sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/python")
    from harness import Daemons
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with Daemons(sys.argv[1], 2) as d:
        ratio, a, f = async_conn_get(lambda: d.connect(0), trials)
    print(f"async_conn_get_vs_fresh={ratio:.3f}")
    print(f"async_conn_get_ms={a:.2f}")
    print(f"fresh_conn_get_ms={f:.2f}")


if __name__ == "__main__":
    main()
