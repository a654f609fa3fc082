#!/usr/bin/python3
"""tshard-bench-statedict - whole state dicts and checkpoints through real daemons (a program,
not a test): it starts --np tshardd daemons (default 4) and drives them with this build's Python
package, printing key=value lines, each a median of --runs runs (at least 5):

  async_conn_get_vs_fresh  a 128 MiB get on a connection whose 8 futures completed before it,
                           over the same get on a fresh connection (tests/bench/async_conn.py)
  ckpt148_save_ms, ckpt148_load_ms, ckpt148_load_vs_save
                           a save of 148 tensors of [64, 64] f32 (names given), and a load of
                           them back (the tensors dropped first), each into a new directory
  gpt2_save_ms, gpt2_load_ms, gpt2_load_vs_save
                           the same for GPT-2-small's 148 tensors (124M f32)
  put_state_dict_gpt2_ms, put_many_gpt2_ms, put_state_dict_vs_many
                           GPT-2's state dict stored by put_state_dict (the tensors there as
                           asked) and the same arrays by put_many, interleaved
  get_state_dict_gpt2_ms, get_many_gpt2_ms, get_state_dict_vs_many
                           every tensor back by get_state_dict, and by get_many of their names

Every tensor is S(0) over the ranks. One run of each is checked against its numpy source.

usage: tshard-bench-statedict [--np N] [--runs R] [--dir DIR]"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = "@CMAKE_SOURCE_DIR@"  # filled in by CMake when the program is configured into bin/


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def ckpt_ratio(c, key, shapes, attr, runs, root):
    """Medians of save and load of the tensors (each run into its own directory)."""
    import numpy as np
    data = {n: np.random.default_rng(i).standard_normal(s).astype(np.float32)
            for i, (n, s) in enumerate(shapes)}
    names = list(data)
    c.create_many({n: ("f32", a.shape, attr) for n, a in data.items()})
    c.put_many(data)
    saves, loads = [], []
    for r in range(runs):
        d = os.path.join(root, f"{key}-{r}")
        saves.append(timed(lambda: c.save(d, names=names)))
        c.drop_many(names)
        loads.append(timed(lambda: c.load(d, names=names)))
        if r == 0:
            got = c.get_many(names)
            if not all(np.array_equal(got[n], data[n]) for n in names):
                sys.exit(f"tshard-bench-statedict: {key}: the loaded tensors differ")
            del got
        shutil.rmtree(d)
    c.drop_many(names)
    s, ld = statistics.median(saves), statistics.median(loads)
    print(f"{key}_save_ms={s:.2f}")
    print(f"{key}_load_ms={ld:.2f}")
    print(f"{key}_load_vs_save={ld / s:.3f}", flush=True)


def state_dicts(c, shapes, attr, runs):
    """put_state_dict against put_many and get_state_dict against get_many, interleaved."""
    import numpy as np
    sd = {n: np.random.default_rng(i).standard_normal(s).astype(np.float32)
          for i, (n, s) in enumerate(shapes)}
    names = list(sd)
    c.put_state_dict(sd, default=attr)  # made once; the runs find them as asked
    got = c.get_state_dict()
    if sorted(got) != sorted(sd) or not all(np.array_equal(got[n], sd[n]) for n in sd):
        sys.exit("tshard-bench-statedict: get_state_dict differs from the state dict put")
    del got
    psd, pm, gsd, gm = [], [], [], []
    for _ in range(runs):
        psd.append(timed(lambda: c.put_state_dict(sd, default=attr)))
        pm.append(timed(lambda: c.put_many(sd)))
        gsd.append(timed(lambda: c.get_state_dict()))
        gm.append(timed(lambda: c.get_many(names)))
    c.drop_many(names)
    a, b, g, h = (statistics.median(x) for x in (psd, pm, gsd, gm))
    print(f"put_state_dict_gpt2_ms={a:.2f}")
    print(f"put_many_gpt2_ms={b:.2f}")
    print(f"put_state_dict_vs_many={a / b:.3f}")
    print(f"get_state_dict_gpt2_ms={g:.2f}")
    print(f"get_many_gpt2_ms={h:.2f}")
    print(f"get_state_dict_vs_many={g / h:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(prog="tshard-bench-statedict",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--np", type=int, default=4, help="daemons (ranks) to start (default 4)")
    ap.add_argument("--runs", type=int, default=5, help="runs per median (at least 5)")
    ap.add_argument("--dir", default=None,
                    help="where the checkpoints go (default: a new directory under $TMPDIR)")
    o = ap.parse_args()
    if o.np < 1 or o.runs < 5:
        ap.error("--np must be >= 1 and --runs >= 5")
    sys.path[:0] = [os.path.join(os.path.dirname(HERE), "python"),
                    os.path.join(SOURCE, "tests", "python"), os.path.join(SOURCE, "tests", "bench")]
    from async_conn import async_conn_get
    from bench_many_py import gpt2_shapes
    from harness import Daemons
    attr = f"mesh=[{o.np}] placements=[S(0)]"
    root = tempfile.mkdtemp(prefix="tshard-bench-sd-", dir=o.dir)
    try:
        with Daemons(HERE, o.np) as d, d.connect(0) as c:
            ratio, a, f = async_conn_get(lambda: d.connect(0), o.runs, attr=attr)
            print(f"async_conn_get_vs_fresh={ratio:.3f}")
            print(f"async_conn_get_ms={a:.2f}")
            print(f"fresh_conn_get_ms={f:.2f}", flush=True)
            ckpt_ratio(c, "ckpt148", [(f"t{i}", (64, 64)) for i in range(148)], attr, o.runs,
                       root)
            ckpt_ratio(c, "gpt2", gpt2_shapes(), attr, o.runs, root)
            state_dicts(c, gpt2_shapes(), attr, o.runs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
