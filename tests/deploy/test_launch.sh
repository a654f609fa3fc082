#!/usr/bin/env bash
# The launcher and faults: start waits until every rank serves, a second start of the same job is
# refused, stop leaves nothing behind; a daemon killed mid-run gives the other ranks' clients a
# clear error within their timeout (no hang) and the foreground launcher names the dead rank; a
# restarted job starts clean.
# usage: test_launch.sh BUILD_BIN_DIR
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
launch="$here/../../deploy/tshard-launch"
dir=$(mktemp -d /tmp/tshard-launch-test.XXXXXX)
export TSHARD_SOCKET_DIR=$dir TSHARD_BIN=$bin
job=lt$$
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
cleanup() {
  "$launch" stop --job "$job" --timeout 20 >/dev/null 2>&1
  [ -n "${fg:-}" ] && kill "$fg" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

ok "$launch" start -np 3 --job "$job"
for r in 0 1 2; do ok "$bin/tshard" ping --job "$job" --rank "$r"; done
ok test "$("$launch" start -np 3 --job "$job" 2>&1 | grep -c 'already runs')" -eq 1
ok "$launch" status --job "$job"
ok "$launch" stop --job "$job"
ok test -z "$(ls "$dir"/*.sock 2>/dev/null)"
ok test ! -e "$dir/tshard-$job.pid"

# a rank dies mid-run
"$launch" start -np 3 --job "$job" --foreground >"$dir/fg.out" 2>&1 &
fg=$!
for _ in $(seq 600); do grep -q "serving on" "$dir/fg.out" && break; sleep 0.1; done
ok grep -q "serving on 3 ranks" "$dir/fg.out"
pid2=$(grep "ready: job $job rank 2 " "$dir/tshard-$job.log" | grep -oE "pid [0-9]+" | awk '{print $2}')
# a client of rank 1 keeps asking for a collective operation while rank 2 is killed: it must get
# an error, not hang, within its 20 s timeout
PYTHONPATH="$bin/../python" /usr/bin/python3 - "$dir/tshard-$job-1.sock" "$pid2" <<'PY' >"$dir/client.out" 2>&1
import os, signal, sys, time
import tshard
c = tshard.connect(socket=sys.argv[1], timeout=20)
c.create("t", "f32", (6, 4), "mesh=[3] placements=[S(0)]")
os.kill(int(sys.argv[2]), signal.SIGKILL)
t0 = time.monotonic()
try:
    for i in range(1000):  # collective operations need every rank
        c.reshard("t", "mesh=[3] placements=[S(1)]" if i % 2 == 0 else "mesh=[3] placements=[S(0)]")
    print("no error")
except tshard.TshardError as e:
    print(f"error after {time.monotonic() - t0:.1f}s: {e.name}: {e.message}")
PY
ok grep -q "^error after" "$dir/client.out"
cat "$dir/client.out"
for _ in $(seq 300); do kill -0 "$fg" 2>/dev/null || break; sleep 0.1; done
ok test ! -e /proc/$fg
ok grep -q "rank 2 died" "$dir/fg.out"
fg=""
# restarted: stale sockets are replaced, every rank serves
ok "$launch" start -np 3 --job "$job"
ok "$bin/tshard" ping --job "$job" --rank 2
ok "$launch" stop --job "$job"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
