#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then the installed tree is used as a user would:
#  - the tree: bin/{tshard,tshardd,tshard-launch}, lib/libtshard.so.MAJOR (soname) and its links,
#    include/tshard/{tshard.h,tshard_errors.h} and no other header, lib/cmake/tshard,
#    lib/pkgconfig/tshard.pc; the library exports exactly the functions tshard.h declares and
#    needs libprotobuf-c;
#  - tests/install/prog.c built with `gcc prog.c $(pkg-config --cflags --libs tshard)` and with
#    find_package(tshard) (tests/install/consumer), both run: version, error strings, a failed
#    connect, and against 2 daemons started by the installed launcher a create/put/reshard/get
#    compared with the values put;
#  - the Python package installed offline by Debian's pip from a copy of the sources
#    (--no-build-isolation --no-index), into a --target directory and into a venv over Debian's
#    numpy: __version__ is the C version, the generated modules are there, and it reads and
#    writes a tensor on the same daemons (compared with numpy); with PATH not holding the CLI,
#    tshard.plan says what to install, and with TSHARD_CLI naming the installed CLI tshard.plan
#    and tshard.show give the CLI's answers;
#  - the quickstart builds the target that holds the install set and every build/bin program the
#    README and its guides in docs/ name (so `cmake --install` works after the quickstart).
# usage: test_install.sh BUILD_DIR SOURCE_DIR VERSION SANITIZE(ON|OFF)
set -u
build=$1 src=$2 version=$3 sanitize=$4
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/tshard-install-test.XXXXXX)
prefix=$tmp/prefix
job=inst$$
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
cleanup() {
  [ -x "$prefix/bin/tshard-launch" ] &&
    "$prefix/bin/tshard-launch" stop --job "$job" --socket-dir "$tmp/sock" --timeout 20 >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

san_flags=()
[ "$sanitize" = ON ] && san_flags=(-fsanitize=address,undefined)

# -- the quickstart's build builds what the README names and what `cmake --install` installs:
# deploy/quickstart.sh builds the target tshard-programs, which must depend on the install set and
# on every build/bin program the README and its guides (docs/) mention (read from the Makefile
# generator's graph)
ok grep -q -- "--target tshard-programs" "$src/deploy/quickstart.sh"
graph=$build/CMakeFiles/Makefile2
if [ -f "$graph" ]; then
  grep -E "^CMakeFiles/tshard-programs.dir/all: " "$graph" | sed 's|.*/CMakeFiles/||; s|.*: CMakeFiles/||; s|\.dir/all$||' |
    sort -u >"$tmp/programs"
  # (a name ending in '-' is a pattern such as tshard-bench-*; the launcher is copied there when
  # the build is configured)
  named=$(grep -ohE "build/bin/tshard[a-z-]*" "$src/README.md" "$src"/docs/*.md | grep -v -- '-$' |
    sed 's|build/bin/||; s|^tshard$|tshard-cli|' | grep -vx tshard-launch | sort -u)
  for t in tshard_shared tshardd tshard-cli tshard-python $named; do
    grep -qx -- "$t" "$tmp/programs" || { echo "the quickstart's build (tshard-programs) lacks $t"; ok false; }
  done
  ok test -x "$build/bin/tshard-launch"
fi

# -- the installed tree
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
for f in bin/tshard bin/tshardd bin/tshard-launch; do ok test -x "$prefix/$f"; done
ok test -f "$prefix/include/tshard/tshard.h"
ok test -f "$prefix/include/tshard/tshard_errors.h"
ok test "$(find "$prefix/include" -type f | wc -l)" -eq 2 # internal headers stay private
libdir=$(dirname "$(find "$prefix" -name tshard.pc)")/..
libdir=$(cd "$libdir" && pwd)
major=${version%%.*}
ok test -f "$libdir/libtshard.so.$version"
ok test -L "$libdir/libtshard.so.$major"
ok test -L "$libdir/libtshard.so"
ok test ! -e "$libdir/libtshard.a"
ok test -f "$libdir/cmake/tshard/tshardConfig.cmake"
soname=$(objdump -p "$libdir/libtshard.so.$version" | awk '$1 == "SONAME" {print $2}')
ok test "$soname" = "libtshard.so.$major"
ok grep -q "libprotobuf-c" <(objdump -p "$libdir/libtshard.so.$version" | awk '$1 == "NEEDED"')
# exports: exactly the functions of the installed header, nothing internal (ts_*, tshard__*)
grep -oE '\btshard_[a-z0-9_]+\(' "$prefix/include/tshard/tshard.h" | tr -d '(' | sort -u >"$tmp/declared"
nm -D --defined-only "$libdir/libtshard.so" | awk '$2 ~ /^[TtWiDdBbRr]$/ {print $3}' | sort -u >"$tmp/exported"
ok test -s "$tmp/declared"
ok diff "$tmp/declared" "$tmp/exported"

# -- daemons from the installed launcher (it finds tshardd beside it)
mkdir -m 700 "$tmp/sock"
ok "$prefix/bin/tshard-launch" start -np 2 --job "$job" --socket-dir "$tmp/sock" --timeout 60
export TSHARD_SOCKET_DIR=$tmp/sock
ok "$prefix/bin/tshard" ping --job "$job" --rank 1

# -- pkg-config: the compile line of docs/clients.md
export PKG_CONFIG_PATH=$libdir/pkgconfig
ok test "$(pkg-config --modversion tshard)" = "$version"
# shellcheck disable=SC2046
if gcc "${san_flags[@]}" -Wall -Wextra -Werror -o "$tmp/prog_pc" "$here/prog.c" $(pkg-config --cflags --libs tshard); then
  ok env LD_LIBRARY_PATH="$libdir" "$tmp/prog_pc" "$version" "$tmp/sock/none.sock" "$job" w_pc
else
  ok false
fi

# -- find_package(tshard)
if cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
     -DCMAKE_C_FLAGS="${san_flags[*]} -Wall -Wextra -Werror" >"$tmp/consumer.log" 2>&1 &&
   cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1; then
  ok "$tmp/consumer/prog" "$version" "$tmp/sock/none.sock" "$job" w_cmake
else
  cat "$tmp/consumer.log"
  ok false
fi

# -- the Python package: pip install offline from a copy of the sources
mkdir -p "$tmp/src/client" "$tmp/src/proto" "$tmp/src/include"
cp "$src/CMakeLists.txt" "$tmp/src/"
cp "$src/proto/tshard.proto" "$tmp/src/proto/"
cp "$src/include/tshard_errors.h" "$tmp/src/include/"
cp -r "$src/client/python" "$tmp/src/client/"
rm -rf "$tmp/src/client/python/build" "$tmp/src/client/python/"*.egg-info
if /usr/bin/python3 -m pip install --no-build-isolation --no-index --no-deps --quiet \
     --disable-pip-version-check --root-user-action=ignore --target "$tmp/py" \
     "$tmp/src/client/python" >"$tmp/pip.log" 2>&1; then
  ok test -f "$tmp/py/tshard/tshard_pb2.py"
  ok test -f "$tmp/py/tshard/_status.py"
  (cd "$tmp" && PATH=/usr/bin:/bin TS_INSTALLED_CLI="$prefix/bin/tshard" PYTHONPATH="$tmp/py" \
     /usr/bin/python3 - "$version" "$job" "$tmp/py" <<'PY')
import sys
import numpy as np
import tshard
version, job = sys.argv[1], sys.argv[2]
bad = []
if tshard.__version__ != version:
    bad.append(f"__version__ {tshard.__version__} != {version}")
if not tshard.__file__.startswith(sys.argv[3] + "/"):
    bad.append(f"imported from {tshard.__file__}, not from the pip target {sys.argv[3]}")
if tshard.errors.NotFoundError.status != 14:
    bad.append("status codes")
with tshard.connect(rank=1, job=job, timeout=30) as c:
    a = np.arange(30, dtype=np.float64).reshape(5, 6) * 0.25
    c.create("w_py", "f64", a.shape, "mesh=[dp=2] placements=[Replicate()]")
    c.put("w_py", a)
    c.reshard("w_py", tshard.Attr(tshard.Mesh({"dp": 2}), {"dp": tshard.Shard(1)}))
    got = c.get("w_py")
    if not np.array_equal(got, a):
        bad.append("values differ")
    if c.describe("w_py")["attr"] != "mesh=[dp=2]@0-1 placements=[S(1)]":
        bad.append(f"attr {c.describe('w_py')['attr']}")
    c.drop("w_py")
# planning and drawing offline: without the CLI on PATH the error says what to install; with
# TSHARD_CLI naming the installed one they give the CLI's own answers
import os, shutil, subprocess
cli = os.environ["TS_INSTALLED_CLI"]
if shutil.which("tshard"):
    bad.append(f"the CLI is on PATH ({shutil.which('tshard')}): the test needs it absent")
try:
    tshard.plan((8, 6), "mesh=[2] placements=[S(0)]", "mesh=[2] placements=[S(1)]")
    bad.append("plan without the CLI did not fail")
except tshard.TshardError as e:
    if "cmake --install build --prefix PREFIX" not in e.message or "TSHARD_CLI" not in e.message:
        bad.append(f"plan without the CLI: {e.message}")
os.environ["TSHARD_CLI"] = cli
p = tshard.plan((8, 6), "mesh=[2] placements=[S(0)]", "mesh=[2] placements=[S(1)]")
want = subprocess.run([cli, "plan", "--shape", "8,6", "--from", "mesh=[2] placements=[S(0)]",
                       "--to", "mesh=[2] placements=[S(1)]", "--json"], capture_output=True,
                      text=True).stdout
import json
w = json.loads(want)  # plan_ms differs between runs: the plan itself must not
if (p["strategy"], p.get("costs")) != (w["strategy"], w.get("costs")) or p["strategy"] != "alltoall":
    bad.append(f"plan {p} != the CLI's {want}")
drawn = tshard.show((4, 4), "mesh=[2] placements=[S(0)]")
if drawn.rstrip("\n") != subprocess.run([cli, "show", "--shape", "4,4", "--attr",
                                         "mesh=[2] placements=[S(0)]"], capture_output=True,
                                        text=True).stdout.rstrip("\n"):
    bad.append(f"show: {drawn!r}")
print("python:", "; ".join(bad) or "ok")
sys.exit(1 if bad else 0)
PY
  ok test $? -eq 0
else
  cat "$tmp/pip.log"
  ok false
fi

# docs/clients.md's other way: a venv over Debian's numpy and protobuf (made without its own pip,
# which takes long to set up: Debian's pip installs into it with --python)
if /usr/bin/python3 -m venv --without-pip --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1 &&
   /usr/bin/python3 -m pip --python "$tmp/venv/bin/python" install --no-build-isolation --no-index --quiet \
     --disable-pip-version-check --root-user-action=ignore "$tmp/src/client/python" \
     >>"$tmp/venv.log" 2>&1; then
  ok test "$(cd "$tmp" && "$tmp/venv/bin/python" -c 'import tshard; print(tshard.__version__, tshard.__file__)')" = \
    "$version $tmp/venv/lib/python3.$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])')/site-packages/tshard/__init__.py"
else
  cat "$tmp/venv.log"
  ok false
fi

ok "$prefix/bin/tshard-launch" stop --job "$job" --socket-dir "$tmp/sock" --timeout 30
echo "passed=$passed failed=$failed"
[ "$failed" -eq 0 ]
