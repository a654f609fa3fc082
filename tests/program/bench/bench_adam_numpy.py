"""bench_adam_numpy.py - the numpy side of tshard-bench-program: one Adam step over N f32
parameters with m and v, in place, written the way a training script would; prints the median
time of several steps as adam_numpy_ms=..."""
import sys
import time

import numpy as np


def main():
    n = int(sys.argv[1])
    runs = int(sys.argv[2])
    rng = np.random.default_rng(1)
    w = rng.standard_normal(n, dtype=np.float32)
    g = rng.standard_normal(n, dtype=np.float32) * np.float32(0.01)
    m = np.zeros(n, dtype=np.float32)
    v = np.zeros(n, dtype=np.float32)
    lr, b1, b2, eps = np.float32(1e-3), np.float32(0.9), np.float32(0.999), np.float32(1e-8)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * (g * g)
        w -= lr * m / (np.sqrt(v) + eps)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print("adam_numpy_ms=%.3f" % times[len(times) // 2])


if __name__ == "__main__":
    main()
