#!/usr/bin/python3
"""The README's "From PyTorch" section runs as written: its python blocks (in one namespace, as a
reader pastes them into one session) and its sh blocks (bash), in order, in a fresh directory
holding a `build` link to the build tree, against 4 daemons of job "demo" (their socket
directory in TSHARD_SOCKET_DIR, as tshard-launch's would be found). Then, against independent
references: from_dtensor_spec printed DTensor's attribute (the chunk rule); the state_dict came
back equal to the model's; describe printed the column split;
the shards, the index and the CLI's consolidated export hold the model's values (read with
struct and json).

usage: test_readme_torch.py BUILD_BIN_DIR README.md"""
import contextlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

from checks import Checks
from harness import Daemons

bin_dir, readme = sys.argv[1], sys.argv[2]
check = Checks()


def blocks(path, heading):
    text = open(path).read()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    return re.findall(r"```(python|sh)\n(.*?)```", section, re.S)


def read_file(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]],
                             dtype=np.float32).reshape(e["shape"])
            for k, e in hdr.items() if k != "__metadata__"}


def main():
    found = blocks(readme, "From PyTorch")
    check([k for k, _ in found] == ["python", "python", "python", "sh", "python"],
          f"the section's blocks: {found}")
    work = tempfile.mkdtemp(prefix="tshard-readme-torch-")
    os.symlink(os.path.dirname(os.path.abspath(bin_dir)), os.path.join(work, "build"))
    d = Daemons(bin_dir, 4, job="demo")
    os.environ["TSHARD_SOCKET_DIR"] = d.dir
    here = os.getcwd()
    ns, outs = {}, []
    try:
        os.chdir(work)
        for kind, code in found:
            if kind == "python":
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    exec(compile(code, "README.md", "exec"), ns)
                outs.append(buf.getvalue())
            else:
                r = subprocess.run(["bash", "-e", "-c", code], capture_output=True, text=True,
                                   timeout=60)
                check(r.returncode == 0, f"sh block: {r.returncode} {r.stdout} {r.stderr}")
                outs.append(r.stdout)
        model = {k: v.detach().numpy() for k, v in ns["model"].state_dict().items()}
        check(sorted(model) == sorted(ns["back"]) and
              all(np.array_equal(ns["back"][k].numpy(), model[k]) for k in model),
              "the state_dict came back equal")
        # DTensor's attribute: the chunk rule, the dim from the end resolved on the shape
        check(outs[0].split("\n")[:2] == ["mesh=[2,2]@0-3 placements=[S(0,chunk),S(1,chunk)]",
                                          "mesh=[4]@0-3 placements=[S(1,chunk)]"],
              f"from_dtensor_spec printed {outs[0]!r}")
        check(outs[2].strip() == "mesh=[4]@0-3 placements=[S(1)]", f"describe printed {outs[2]!r}")
        # the gradients 0, 1, 2, 3 of the four ranks averaged: (0 + 1 + 2 + 3) / 4
        check(outs[4].strip() == str(np.float32((0 + 1 + 2 + 3) / 4)),
              f"the averaged gradient printed {outs[4]!r}")
        check(tuple(ns["w"].shape) == (16, 16) and np.array_equal(ns["w"].numpy(),
                                                                  model["fc2.weight"][:, :16]),
              "rank 0's slice of fc2.weight is its first 16 columns")
        idx = json.load(open("tp/model.safetensors.index.json"))
        got = {}
        for fn in sorted(set(idx["weight_map"].values())):
            got.update(read_file(os.path.join("tp", fn)))
        check(sorted(set(idx["weight_map"].values())) == ["model-00001-of-00002.safetensors",
                                                          "model-00002-of-00002.safetensors"],
              f"two shards: {idx['weight_map']}")
        check(all(np.array_equal(got[k], model[k]) for k in model), "the shards hold the model")
        allf = read_file("all.safetensors")
        check(all(np.array_equal(allf[k], model[k]) for k in model),
              "the CLI's export holds the model")
        check("imported 4 tensors" in outs[3], f"the CLI import: {outs[3]!r}")
    finally:
        os.chdir(here)
        rc = d.stop()
        check(rc == 0, f"the daemons exit 0 (sanitizers quiet): {rc}\n{d.logs()[-4000:]}")
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
