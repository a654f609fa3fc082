"""setup.py - builds the Python package tshard with setuptools (see pyproject.toml).

The package's sources are in tshard/; four modules are generated at build time from the
repository, exactly as client/python/CMakeLists.txt generates them for build/python:
tshard_pb2.py (protoc, from proto/tshard.proto), _status.py (gen_status.py, from
include/tshard_errors.h), _limits.py (gen_limits.py, from the C headers of LIMIT_HEADERS; a copy
of client/python without them keeps the committed tshard/_limits.py) and _version.py (from
_version.py.in and the project version in the top-level CMakeLists.txt, the one version
source). Needs protoc (Debian: protobuf-compiler)."""
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# the headers gen_limits.py reads (as client/python/CMakeLists.txt's TS_LIMIT_HEADERS)
LIMIT_HEADERS = ["proto/ts_rules.h", "client/client_internal.h", "shard/plan/ts_plan.h",
                 "kernels/ts_kernels.h"]


def project_version():
    path = os.path.join(ROOT, "CMakeLists.txt")
    try:
        text = open(path).read()
    except OSError as e:
        sys.exit(f"tshard setup.py: cannot read the project version from {path}: {e}; build from "
                 f"the tshard repository (pip install client/python)")
    m = re.search(r"project\(\s*tshard\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    if not m:
        sys.exit(f"tshard setup.py: no 'project(tshard VERSION x.y.z' in {path}")
    return m.group(1)


def generate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    protoc = shutil.which("protoc")
    if not protoc:
        sys.exit("tshard setup.py: protoc not found: apt-get install protobuf-compiler")
    subprocess.run([protoc, "--proto_path=" + os.path.join(ROOT, "proto"),
                    "--python_out=" + out_dir, os.path.join(ROOT, "proto", "tshard.proto")],
                   check=True)
    subprocess.run([sys.executable, os.path.join(HERE, "gen_status.py"),
                    os.path.join(ROOT, "include", "tshard_errors.h"),
                    os.path.join(out_dir, "_status.py")], check=True)
    headers = [os.path.join(ROOT, h) for h in LIMIT_HEADERS]
    if all(os.path.exists(h) for h in headers):
        subprocess.run([sys.executable, os.path.join(HERE, "gen_limits.py"),
                        os.path.join(out_dir, "_limits.py")] + headers, check=True)
    # else (a copy of client/python without the C sources): tshard/_limits.py as committed, which
    # test_package_imports keeps equal to what gen_limits.py makes of the headers
    template = open(os.path.join(HERE, "_version.py.in")).read()
    with open(os.path.join(out_dir, "_version.py"), "w") as f:
        f.write(template.replace("@PROJECT_VERSION@", project_version()))


class BuildPyWithGenerated(build_py):
    def run(self):
        super().run()
        generate(os.path.join(self.build_lib, "tshard"))


setup(version=project_version(), cmdclass={"build_py": BuildPyWithGenerated})
