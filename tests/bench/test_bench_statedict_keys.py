#!/usr/bin/python3
"""tshard-bench-statedict as the README runs it (`build/bin/tshard-bench-statedict`, from the
directory holding the build tree): it exits 0 (every tensor it loaded or got back matched what it
put) and prints each of its keys with a number, every ratio its two figures' quotient within their
printed rounding. Figures are not judged here (a loaded CI box).

usage: test_bench_statedict_keys.py BUILD_BIN_DIR"""
import os
import re
import subprocess
import sys

bin_dir = os.path.abspath(sys.argv[1])
build = os.path.dirname(bin_dir)
prog = os.path.join(os.path.basename(build), os.path.basename(bin_dir), "tshard-bench-statedict")
r = subprocess.run([prog], cwd=os.path.dirname(build), capture_output=True, text=True,
                   timeout=1500)  # build/bin/tshard-bench-statedict in a tree named build
print(r.stdout, r.stderr)
failed = 0 if r.returncode == 0 else 1
vals = dict(m.groups() for m in re.finditer(r"^(\w+)=(-?[0-9.]+)$", r.stdout, re.M))
RATIOS = {"async_conn_get_vs_fresh": ("async_conn_get_ms", "fresh_conn_get_ms"),
          "ckpt148_load_vs_save": ("ckpt148_load_ms", "ckpt148_save_ms"),
          "gpt2_load_vs_save": ("gpt2_load_ms", "gpt2_save_ms"),
          "put_state_dict_vs_many": ("put_state_dict_gpt2_ms", "put_many_gpt2_ms"),
          "get_state_dict_vs_many": ("get_state_dict_gpt2_ms", "get_many_gpt2_ms")}
for k, (a, b) in RATIOS.items():
    if not all(x in vals for x in (k, a, b)):
        print(f"FAIL: missing {k}, {a} or {b}")
        failed += 1
        continue
    A, B, R = float(vals[a]), float(vals[b]), float(vals[k])
    lo, hi = (A - 0.005) / (B + 0.005) - 0.001, (A + 0.005) / max(B - 0.005, 1e-9) + 0.001
    if not (B > 0 and lo <= R <= hi):
        print(f"FAIL: {k}={R} is not {a}/{b} = {A}/{B}")
        failed += 1
print(f"{len(RATIOS) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
