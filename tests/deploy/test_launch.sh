#!/usr/bin/env bash
# The launcher and faults: start waits until every rank serves, a second start of the same job is
# refused, list shows the running job, stop leaves nothing behind; -np below 1 and unknown
# commands are refused with exit 2 and a message (the closest command suggested); a daemon killed mid-run gives the other ranks' clients a
# clear error within their timeout (no hang) and the foreground launcher names the dead rank; a
# restarted job starts clean. The socket directory: one not 0700, a link, or another user's is
# refused; links planted where the log and pid file go are not followed; $XDG_RUNTIME_DIR is
# preferred; the pid file goes when the job is stopped by a signal; each rank's ready line names
# its own TCP port.
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
# list: this user's running jobs, with their ranks, leader pid, socket directory and log
listed() { "$launch" list | awk -v j="$1" '$1 == j {print $2, $3, $4, $5}'; }
ok test "$(listed "$job")" = "3 $(head -1 "$dir/tshard-$job.pid") $dir $dir/tshard-$job.log"
ok test "$("$launch" list | head -1 | awk '{print $1, $2, $3}')" = "JOB RANKS PID"
ok "$launch" stop --job "$job"
ok test -z "$(ls "$dir"/*.sock 2>/dev/null)"
ok test ! -e "$dir/tshard-$job.pid"
ok test -z "$(listed "$job")"

# ---- refusals: exit 2 and a message naming what was wrong, nothing started ----
# refusal EXPECTED_MESSAGE ARGS...
refusal() {
  local want=$1 out rc
  shift
  out=$("$launch" "$@" 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && echo "$out" | grep -qF -- "$want" ||
    { echo "tshard-launch $*: exit $rc, output: $out"; return 1; }
}
for n in 0 -1 x 1.5; do
  ok refusal "-np '$n': the number of ranks must be a whole number of at least 1" start -np "$n" --job "$job"
done
ok test ! -e "$dir/tshard-$job.pid"
ok refusal "unknown command 'statsu'; did you mean 'status'?" statsu --job "$job"
ok refusal "unknown command 'lsit'; did you mean 'list'?" lsit
ok refusal "unknown command 'strat'; did you mean 'start'?" strat -np 2
ok refusal "(commands: start stop status list;" halt

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
# restarted: stale sockets are replaced, every rank serves; a socket a dead job left (rank 5 of
# an earlier, larger run) is removed by start, and one left meanwhile by stop; another job's stays
/usr/bin/python3 -c "import socket, sys; [socket.socket(socket.AF_UNIX).bind(p) for p in sys.argv[1:]]" \
  "$dir/tshard-$job-5.sock" "$dir/tshard-$job-x-0.sock"
ok "$launch" start -np 3 --job "$job"
ok test ! -e "$dir/tshard-$job-5.sock"
ok test -S "$dir/tshard-$job-x-0.sock"
ok "$bin/tshard" ping --job "$job" --rank 2
ok "$launch" stop --job "$job"
/usr/bin/python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$dir/tshard-$job-4.sock"
ok "$launch" stop --job "$job"
ok test ! -e "$dir/tshard-$job-4.sock"
ok test -S "$dir/tshard-$job-x-0.sock"
rm -f "$dir/tshard-$job-x-0.sock"

# ---- the socket directory must be the caller's alone (0700), links are never followed ----
echo "precious" >"$dir/target"
# refused: exit 2, the reason in the message, nothing written in the directory; $1 the message
refused() {
  local d=$1 want=$2 out rc
  out=$("$launch" start -np 2 --job "$job" --socket-dir "$d" 2>&1)
  rc=$?
  echo "$out" | grep -q -- "$want" && [ "$rc" -eq 2 ] && [ ! -e "$d/tshard-$job-0.sock" ] ||
    { echo "start in $d: exit $rc, output: $out"; return 1; }
}
mkdir -m 755 "$dir/open"
ok refused "$dir/open" "has mode 755: it must be 0700"
ok test ! -e "$dir/open/tshard-$job.log"
ln -s "$dir/open" "$dir/linkdir"
ok refused "$dir/linkdir" "is a symbolic link"
mkdir -m 700 "$dir/theirs"
ln -s "$dir/target" "$dir/theirs/tshard-$job.log" # planted by the directory's owner
if [ "$(id -u)" -eq 0 ]; then
  chown -h nobody "$dir/theirs" "$dir/theirs/tshard-$job.log"
  ok refused "$dir/theirs" "belongs to uid $(id -u nobody), not to you"
  # stop and status refuse it too (a pid file there could name any process)
  ok test "$("$launch" stop --job "$job" --socket-dir "$dir/theirs" 2>&1 | grep -c 'not to you')" -eq 1
else
  ok refused /tmp "belongs to uid 0, not to you" # not root: a directory of another user
fi
ok test "$(cat "$dir/target")" = precious
# links planted in our own directory (left by an earlier run, say) are replaced, not followed
ln -s "$dir/target" "$dir/tshard-$job.log"
ln -s "$dir/target" "$dir/tshard-$job.pid"
ok "$launch" start -np 2 --job "$job"
ok test "$(cat "$dir/target")" = precious
ok test ! -L "$dir/tshard-$job.log"
ok grep -q "ready: job $job rank 1 " "$dir/tshard-$job.log"
ok test ! -L "$dir/tshard-$job.pid"
ok test "$(stat -c %a "$dir/tshard-$job.log")" = 600
ok "$launch" stop --job "$job"

# ---- $XDG_RUNTIME_DIR is preferred to /tmp when TSHARD_SOCKET_DIR is not set ----
mkdir -m 700 "$dir/xdg"
ok env -u TSHARD_SOCKET_DIR XDG_RUNTIME_DIR="$dir/xdg" "$launch" start -np 2 --job "$job"
ok test -S "$dir/xdg/tshard/tshard-$job-1.sock"
ok test "$(stat -c %a "$dir/xdg/tshard")" = 700
ok env -u TSHARD_SOCKET_DIR XDG_RUNTIME_DIR="$dir/xdg" "$bin/tshard" ping --job "$job" --rank 1
ok env -u TSHARD_SOCKET_DIR XDG_RUNTIME_DIR="$dir/xdg" "$launch" stop --job "$job"
ok test ! -e "$dir/xdg/tshard/tshard-$job.pid"

# ---- the pid file goes when the job is stopped by a signal (not by the launcher) ----
# waits (bounded) until path $1 is gone
gone() { for _ in $(seq 300); do [ -e "$1" ] || return 0; sleep 0.1; done; return 1; }
for how in mpirun group; do
  ok "$launch" start -np 2 --job "$job"
  lead=$(head -1 "$dir/tshard-$job.pid")
  if [ "$how" = mpirun ]; then kill -TERM "$(pgrep -P "$lead" -x mpirun)"; else kill -TERM -- "-$lead"; fi
  ok gone "$dir/tshard-$job.pid"
  ok gone "/proc/$lead"
  ok test "$("$launch" status --job "$job")" = "job '$job': not running"
done

# ---- each rank's ready line names its own TCP port (PORT + rank) ----
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token"
chmod 600 "$dir/token"
started=0 # a random port may be taken by another test running at the same time: try another
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  if "$launch" start -np 3 --job "$job" -- --listen "tcp://127.0.0.1:$port" \
    --token-file "$dir/token" >"$dir/tcp.out" 2>&1; then
    started=1
    break
  fi
  grep -q "address already in use" "$dir/tcp.out" || break
done
cat "$dir/tcp.out"
ok test "$started" = 1
for r in 0 1 2; do
  ok grep -q "ready: job $job rank $r of 3 .* and tcp://127.0.0.1:$((port + r))\$" "$dir/tshard-$job.log"
done
ok "$bin/tshard" ping --tcp "127.0.0.1:$((port + 2))" --token-file "$dir/token"
ok "$launch" stop --job "$job"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
