#!/usr/bin/python3
"""The tracing guide's screenshot: a trace of a known sequence on a real job of four daemons
(a create, a put, three reshards there and back, a get), written by tshard.trace() with every
rank's ring, opened in speedscope (the npm package, a viewer of Chrome trace files that runs
offline in a browser), served from loopback and captured with headless Chromium.

usage: trace_screenshot.py BUILD_BIN_DIR SPEEDSCOPE_RELEASE_DIR OUT_PNG [TRACE_JSON]"""
import http.server
import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
from harness import Daemons  # noqa: E402

import tshard  # noqa: E402


def make_trace(bin_dir, path):
    with Daemons(bin_dir, 4, job="demo") as d:
        conns = [d.connect(r) for r in range(4)]
        c = conns[0]
        with tshard.trace() as t:
            c.create("w", "f32", (1024, 1024), "mesh=[4] placements=[S(0)]")
            c.put("w", np.ones((1024, 1024), np.float32))
            for _ in range(3):
                c.reshard("w", "mesh=[2,2] placements=[S(1),R]")
                c.reshard("w", "mesh=[4] placements=[S(0)]")
            c.get("w")
        t.save(path, job="demo", ranks=[x.trace() for x in conns])
        for x in conns:
            x.close()


def main():
    bin_dir, viewer, out = sys.argv[1:4]
    work = tempfile.mkdtemp(prefix="tshard-trace-shot-")
    try:
        site = os.path.join(work, "site")
        shutil.copytree(viewer, site)
        trace = sys.argv[4] if len(sys.argv) > 4 else os.path.join(work, "trace.json")
        make_trace(bin_dir, trace)
        with open(trace) as f:
            doc = json.load(f)
        for e in doc["traceEvents"]:  # speedscope opens a slice before it closes the one that
            if e["ph"] == "X" and e.get("cat") == "span":  # ends at the same instant: 1 ns less
                e["dur"] = max(0.0, e["dur"] - 0.001)      # keeps abutting spans side by side
        with open(os.path.join(site, "trace.json"), "w") as f:
            json.dump(doc, f)
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a):
                super().__init__(*a, directory=site)

            def log_message(self, *a):
                pass
        handler = Quiet
        with socketserver.TCPServer(("127.0.0.1", 0), handler) as srv:
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            base = f"http://127.0.0.1:{srv.server_address[1]}"
            subprocess.run([shutil.which("chromium") or "chromium", "--headless", "--no-sandbox",
                            "--disable-gpu", "--hide-scrollbars", "--window-size=1400,300",
                            "--user-data-dir=" + os.path.join(work, "chromium"),
                            "--virtual-time-budget=8000", "--screenshot=" + out,
                            f"{base}/index.html#profileURL={base}/trace.json"],
                           check=True, capture_output=True, timeout=120)
            srv.shutdown()
        print(f"{out} written")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
