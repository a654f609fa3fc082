"""bench_many_py.py - the Python half of tshard-bench-many: many tensors and small tensors through
the tshard package, as a training script would drive the daemons. Prints key=value lines that the
C benchmark forwards (times at the client, medians unless said):

  small_<B>_us        p50 of REPS S(0)->S(1) or S(1)->S(0) reshards (alternating) of an f32
                      square tensor of B bytes (4096, 65536, 1048576), one synchronous call each
  gpt2_loop_ms        GPT-2-small's 148 tensors, one reshard call each (2-D S(0)->S(1), 1-D
                      S(0)->R); median of RUNS (each run followed by the way back, untimed)
  gpt2_batched_ms     the same 148 as one c.reshard_many (only when the client has it)
  gpt2_put_loop_ms    the 148 tensors (S(0) over every rank) put whole, one c.put each; median of
                      RUNS after a warm-up run
  gpt2_put_many_ms    the same 148 as one c.put_many
  gpt2_get_loop_ms    the 148 got whole, one c.get each
  gpt2_get_many_ms    the same 148 as one c.get_many; also gpt2_put_many_vs_loop and
                      gpt2_get_many_vs_loop (many over loop)
  small148_<op>_ms    the same four (op: put_loop, put_many, get_loop, get_many) for 148 small
                      tensors (768 f32 each, 3 KiB), where the per-request cost shows
  async_overlap_ratio a reshard of ASYNC_MIB issued with wait=False, single-threaded numpy work
                      of about its duration, then .result(): time over max(reshard alone, work
                      alone); also async_reshard_ms, async_work_ms, async_overlap_ms (only when
                      reshard takes wait=)

A key whose API the client lacks is printed as "<key>=unavailable" with the reason on stderr.
Every tensor is compared with what was put after its timed reshards (outside the timings).

usage: PYTHONPATH=build/python /usr/bin/python3 bench_many_py.py --socket PATH --np N
       [--runs R] [--reps R] [--async-mib N]
"""
import argparse
import inspect
import statistics
import sys
import time

import numpy as np

import tshard

SMALL_BYTES = (4096, 65536, 1048576)


def gpt2_shapes():
    """GPT-2-small's 148 parameter tensors: (name, shape)."""
    t = [("wte", (50304, 768)), ("wpe", (1024, 768))]
    for b in range(12):
        p = f"h{b}."
        t += [(p + "ln1.w", (768,)), (p + "ln1.b", (768,)), (p + "qkv.w", (768, 2304)),
              (p + "qkv.b", (2304,)), (p + "proj.w", (768, 768)), (p + "proj.b", (768,)),
              (p + "ln2.w", (768,)), (p + "ln2.b", (768,)), (p + "fc.w", (768, 3072)),
              (p + "fc.b", (3072,)), (p + "fc2.w", (3072, 768)), (p + "fc2.b", (768,))]
    t += [("lnf.w", (768,)), ("lnf.b", (768,))]
    assert len(t) == 148
    return t


def data_for(shape, seed):
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.int64) * 7 + seed) % 1009).astype(np.float32).reshape(shape)


def check(c, name, want):
    got = c.get(name)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise SystemExit(f"bench_many_py: {name}: the tensor got back differs from the one put")


def unavailable(key, why):
    print(f"{key}=unavailable")
    print(f"bench_many_py: {key}: {why}", file=sys.stderr)


def small(c, mesh, reps):
    s0, s1 = f"{mesh} placements=[S(0)]", f"{mesh} placements=[S(1)]"
    for nbytes in SMALL_BYTES:
        d = int(round((nbytes // 4) ** 0.5))
        name = f"small_{nbytes}"
        data = data_for((d, d), nbytes)
        c.create(name, "f32", (d, d), s0)
        c.put(name, data)
        for k in range(5):  # warm-up: the first calls of a shape
            c.reshard(name, s1 if k % 2 == 0 else s0)
        c.reshard(name, s0)
        times = []
        for k in range(reps):
            t0 = time.perf_counter()
            c.reshard(name, s1 if k % 2 == 0 else s0)
            times.append(time.perf_counter() - t0)
        check(c, name, data)
        c.drop(name)
        print(f"small_{nbytes}_us={statistics.median(times) * 1e6:.1f}")
        print(f"small_{nbytes}_p90_us={sorted(times)[int(0.9 * (len(times) - 1))] * 1e6:.1f}")
        sys.stdout.flush()


def gpt2(c, mesh, runs):
    src = f"{mesh} placements=[S(0)]"
    tensors = gpt2_shapes()
    target = {n: f"{mesh} placements=[{'S(1)' if len(s) == 2 else 'R'}]" for n, s in tensors}
    data = {}
    for i, (n, s) in enumerate(tensors):
        data[n] = data_for(s, i)
        c.create(n, "f32", s, src)
        c.put(n, data[n])
    print(f"gpt2_bytes={sum(a.nbytes for a in data.values())}")

    def back():
        for n, _ in tensors:
            c.reshard(n, src)

    loop = []
    for _ in range(runs + 1):  # the first run is a warm-up
        t0 = time.perf_counter()
        for n, _ in tensors:
            c.reshard(n, target[n])
        loop.append(time.perf_counter() - t0)
        back()
    print(f"gpt2_loop_first_ms={loop[0] * 1e3:.2f}")
    print(f"gpt2_loop_ms={statistics.median(loop[1:]) * 1e3:.2f}")
    sys.stdout.flush()
    for n in ("wte", "h0.qkv.w", "h11.fc.b", "lnf.b"):
        check(c, n, data[n])

    if not hasattr(c, "reshard_many"):
        unavailable("gpt2_batched_ms", "this client has no Client.reshard_many")
    else:
        batched = []
        for _ in range(runs + 1):
            t0 = time.perf_counter()
            c.reshard_many(dict(target))
            batched.append(time.perf_counter() - t0)
            for n in ("wte", "h5.fc2.w", "h5.ln2.w"):
                check(c, n, data[n])
            c.reshard_many({n: src for n, _ in tensors})
        print(f"gpt2_batched_first_ms={batched[0] * 1e3:.2f}")
        print(f"gpt2_batched_ms={statistics.median(batched[1:]) * 1e3:.2f}")
    for n, _ in tensors:
        c.drop(n)
    sys.stdout.flush()


def gpt2_io(c, mesh, runs, tensors=None, prefix="gpt2"):
    """Whole puts and gets of the 148 tensors: one call each, or one put_many / get_many."""
    src = f"{mesh} placements=[S(0)]"
    tensors = tensors or gpt2_shapes()
    data = {n: data_for(s, i) for i, (n, s) in enumerate(tensors)}
    for n, s in tensors:
        c.create(n, "f32", s, src)
    have = hasattr(c, "put_many") and hasattr(c, "get_many")

    def timed(fn):
        times = []
        for _ in range(runs + 1):  # the first run is a warm-up
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[1:]) * 1e3

    def put_loop():
        for n, _ in tensors:
            c.put(n, data[n])

    def get_loop():
        for n, _ in tensors:
            c.get(n)
    figs = {"put_loop": timed(put_loop)}
    for n, _ in tensors[::37]:
        check(c, n, data[n])
    figs["get_loop"] = timed(get_loop)
    if have:
        figs["put_many"] = timed(lambda: c.put_many(data))
        for n, _ in tensors[5::29]:
            check(c, n, data[n])
        figs["get_many"] = timed(lambda: c.get_many([n for n, _ in tensors]))
        got = c.get_many([n for n, _ in tensors])
        if any(not np.array_equal(got[n], data[n]) for n, _ in tensors):
            raise SystemExit("bench_many_py: get_many gave back other values than were put")
    for k in ("put_loop", "put_many", "get_loop", "get_many"):
        if k in figs:
            print(f"{prefix}_{k}_ms={figs[k]:.2f}")
        else:
            unavailable(f"{prefix}_{k}_ms", "this client has no Client.put_many / get_many")
    for k in ("put", "get"):
        if f"{k}_many" in figs:
            print(f"{prefix}_{k}_many_vs_loop={figs[k + '_many'] / figs[k + '_loop']:.3f}")
    for n, _ in tensors:
        c.drop(n)
    sys.stdout.flush()


def takes_wait(c):
    try:
        params = inspect.signature(c.reshard).parameters
    except (TypeError, ValueError):
        return False
    return "wait" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def numpy_work(a, b, out, iters):
    """Single-threaded numpy work (element-wise: no BLAS threads)."""
    for _ in range(iters):
        np.multiply(a, b, out=out)
        np.add(out, a, out=out)


def async_overlap(c, mesh, async_mib, runs):
    if not takes_wait(c):
        unavailable("async_overlap_ratio", "Client.reshard takes no wait= argument")
        return
    d = int(round((async_mib * 1024 * 1024 // 4) ** 0.5))
    d -= d % 64
    s0, s1 = f"{mesh} placements=[S(0)]", f"{mesh} placements=[S(1)]"
    data = data_for((d, d), 3)
    c.create("async_big", "f32", (d, d), s0)
    c.put("async_big", data)
    alone = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        c.reshard("async_big", s1)
        alone.append(time.perf_counter() - t0)
        c.reshard("async_big", s0)
    t_reshard = statistics.median(alone[1:])
    # the work: about t_reshard of element-wise passes over 8 MiB arrays
    a = np.linspace(0.0, 1.0, 1 << 21, dtype=np.float32)
    b, out = a[::-1].copy(), np.empty_like(a)
    numpy_work(a, b, out, 3)
    t0 = time.perf_counter()
    numpy_work(a, b, out, 20)
    iters = max(1, int(round(t_reshard / ((time.perf_counter() - t0) / 20))))
    work = []
    for _ in range(runs):
        t0 = time.perf_counter()
        numpy_work(a, b, out, iters)
        work.append(time.perf_counter() - t0)
    t_work = statistics.median(work)
    both = []
    for _ in range(runs + 1):
        t0 = time.perf_counter()
        fut = c.reshard("async_big", s1, wait=False)
        numpy_work(a, b, out, iters)
        fut.result()
        both.append(time.perf_counter() - t0)
        c.reshard("async_big", s0)
    check(c, "async_big", data)
    c.drop("async_big")
    t_both = statistics.median(both[1:])
    print(f"async_bytes={d * d * 4}")
    print(f"async_reshard_ms={t_reshard * 1e3:.2f}")
    print(f"async_work_ms={t_work * 1e3:.2f}")
    print(f"async_overlap_ms={t_both * 1e3:.2f}")
    print(f"async_overlap_ratio={t_both / max(t_reshard, t_work):.3f}")
    sys.stdout.flush()


def many_tensors(c, mesh, n=10000):
    """Leaves n small tensors stored (create_many batches within --batch-max-tensors) for the C
    half's scrapes of the metrics endpoint."""
    for lo in range(0, n, 4000):
        c.create_many({f"metrics.t{i}": ("f32", (4,), f"{mesh} placements=[R]")
                       for i in range(lo, min(n, lo + 4000))})
    print(f"metrics_tensors={n}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="Unix socket of the daemon to use (rank 0)")
    ap.add_argument("--np", type=int, required=True, help="ranks of the daemons' job")
    ap.add_argument("--runs", type=int, default=5, help="GPT-2 and async runs (default 5)")
    ap.add_argument("--reps", type=int, default=200, help="small-tensor reshards (default 200)")
    ap.add_argument("--async-mib", type=int, default=256, help="async tensor MiB (default 256)")
    ap.add_argument("--small-only", action="store_true", help="only the small-tensor reshards")
    a = ap.parse_args()
    if a.np < 1 or a.runs < 1 or a.reps < 1 or a.async_mib < 1:
        ap.error("--np, --runs, --reps and --async-mib must be at least 1")
    mesh = f"mesh=[{a.np}]"
    with tshard.connect(socket=a.socket, timeout=600) as c:
        small(c, mesh, a.reps)
        if a.small_only:
            return 0
        gpt2(c, mesh, a.runs)
        gpt2_io(c, mesh, a.runs)
        gpt2_io(c, mesh, a.runs, [(f"small{i}", (768,)) for i in range(148)], "small148")
        async_overlap(c, mesh, a.async_mib, a.runs)
        many_tensors(c, mesh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
