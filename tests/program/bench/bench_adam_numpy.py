"""bench_adam_numpy.py - the numpy side of tshard-bench-program, written the way a training script
would: `N RUNS adam` times one Adam step over N f32 parameters with m and v, in place, and prints
adam_numpy_ms=...; `N RUNS adamw_bf16` times one AdamW step of mixed-precision training in f32
(the bf16 gradient widened from its bits, the f32 master weights and moments updated in place,
the bf16 weights rounded from the master to nearest even on the bits, as numpy has no bfloat16)
and prints adamw_bf16_numpy_ms=.... Both print the median of RUNS steps."""
import sys
import time

import numpy as np


def adam(n, runs):
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
    return times


def adamw_bf16(n, runs):
    rng = np.random.default_rng(1)
    master = rng.standard_normal(n, dtype=np.float32)
    g16 = (rng.standard_normal(n, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    w16 = np.zeros(n, dtype=np.uint16)
    m = np.zeros(n, dtype=np.float32)
    v = np.zeros(n, dtype=np.float32)
    lr, decay = np.float32(1e-3), np.float32(1e-5)
    b1, b2, eps = np.float32(0.9), np.float32(0.999), np.float32(1e-8)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        g = (g16.astype(np.uint32) << 16).view(np.float32)
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * (g * g)
        master -= master * decay
        master -= lr * m / (np.sqrt(v) + eps)
        bits = master.view(np.uint32)
        w16[...] = (bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main():
    n, runs = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "adam"
    times = sorted({"adam": adam, "adamw_bf16": adamw_bf16}[mode](n, runs))
    print("%s_numpy_ms=%.3f" % (mode, times[len(times) // 2]))


if __name__ == "__main__":
    main()
