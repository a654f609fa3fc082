#!/usr/bin/env bash
# A lost rank is named to every client. Through the real launcher, daemons and clients:
#  - 3 ranks; a C client (rank_lost_client), the CLI (a loop of `tshard reshard`) and a Python
#    client each reshard in a loop while rank 2 is killed with SIGKILL: every one fails with
#    RANK_LOST naming rank 2, its host, signal 9 and the launcher's log, within 6 s of the kill
#    (the figures are printed); the next call on the same C and Python connections gives the same
#    error (not "the connection is closed"); `tshard-launch status` names the rank and exits 1;
#    the job's sockets are gone, a new connection (CLI; Python and C: RANK_LOST) says the job
#    lost rank 2, and
#    `stop` says the job is not running and names the rank;
#  - a save interrupted by the loss of rank 1 fails with CHECKPOINT_IO naming the path, through
#    Python and through the CLI; the checkpoint saved before stays complete: a new job loads it
#    and gets the values put (numpy reference);
#  - a job stopped by the launcher is only "not running" for status, no lost rank.
# usage: test_rank_lost.sh BUILD_BIN_DIR
set -u
bin=$1
launch=$bin/tshard-launch
dir=$(mktemp -d /tmp/tshard-lost-test.XXXXXX)
chmod 700 "$dir"
export TSHARD_SOCKET_DIR=$dir PYTHONPATH=$bin/../python
job=rl$$
passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
cleanup() {
  "$launch" stop --job "$job" --timeout 20 >/dev/null 2>&1
  rm -rf "$dir"
}
trap cleanup EXIT
now_ms() { date +%s%3N; }
# waits (bounded) until the command succeeds
until_ok() { for _ in $(seq 3000); do "$@" && return 0; sleep 0.01; done; return 1; }
rank_pid() { grep "ready: job $job rank $1 " "$dir/tshard-$job.log" | grep -oE "pid [0-9]+" | awk '{print $2}'; }
has() { grep -q -- "$2" "$1" || { echo "--- $1 lacks '$2':"; cat "$1"; return 1; }; }

# ---- a reshard loop in every client while rank 2 is killed ----
ok "$launch" start -np 3 --job "$job"
/usr/bin/python3 -c "
import numpy as np
np.save('$dir/a.npy', np.arange(300 * 240, dtype=np.float32).reshape(300, 240))"
ok "$bin/tshard" put t "$dir/a.npy" --attr "mesh=[3] placements=[S(0)]" --job "$job"
"$bin/rank_lost_client" "$job" 0 t 3 "$dir/c.ready" >"$dir/c.out" 2>&1 &
cpid=$!
( # the CLI: one process per call, as scripts use it
  i=0 rc=0
  while [ "$rc" -eq 0 ]; do
    "$bin/tshard" reshard t --to "mesh=[3] placements=[S($((i % 2)))]" --job "$job" --rank 1 \
      >/dev/null 2>"$dir/cli.err"
    rc=$? # the exit code of the call that failed, not of the loop
    i=$((i + 1))
    if [ "$rc" -eq 0 ] && [ "$i" -eq 1 ]; then : >"$dir/cli.ready"; fi
  done
  echo "exit $rc at $(now_ms)" >"$dir/cli.out"
) &
clipid=$!
/usr/bin/python3 - "$job" "$dir/py.ready" >"$dir/py.out" 2>&1 <<'PY' &
import sys, time, tshard
job, ready = sys.argv[1], sys.argv[2]
c = tshard.connect(rank=1, job=job, timeout=60)
try:
    for i in range(1000000):
        c.reshard("t", f"mesh=[3] placements=[S({(i + 1) % 2})]")
        if i == 0:
            open(ready, "w").close()
    print("no failure")
except tshard.TshardError as e:
    print(f"first {e.name} {int(time.time() * 1000)} {e.message}")
    print(f"connection_error {isinstance(e, ConnectionError)}")
    try:
        c.list()
        print("later OK")
    except tshard.TshardError as e2:
        print(f"later {e2.name} {e2.message}")
PY
pypid=$!
ok until_ok test -e "$dir/c.ready" -a -e "$dir/cli.ready" -a -e "$dir/py.ready"
pid2=$(rank_pid 2)
killed=$(now_ms)
kill -KILL "$pid2"
wait "$cpid" "$clipid" "$pypid"
host=$(hostname)
for out in c.out py.out; do
  ok has "$dir/$out" "^first RANK_LOST [0-9]* rank 2 (host $host) was lost: killed by signal 9"
  ok has "$dir/$out" "the launcher's log: $dir/tshard-$job.log"
  ok has "$dir/$out" "^later RANK_LOST rank 2 (host $host) was lost"
done
ok has "$dir/py.out" "^connection_error True"
ok has "$dir/cli.err" "rank 2 (host $host) was lost: killed by signal 9 (Killed).*(RANK_LOST)"
ok has "$dir/cli.out" "^exit 1 "
for who in c py cli; do
  at=$(grep -oE "^(first RANK_LOST|exit 1 at) [0-9]+" "$dir/$who.out" | grep -oE "[0-9]+$")
  echo "figure: $who client failed $(( ${at:-0} - killed )) ms after the kill"
  ok test -n "$at" -a "$(( ${at:-0} - killed ))" -lt 6000
done
ok until_ok test ! -e "$dir/tshard-$job.pid"
"$launch" status --job "$job" >"$dir/status.out" 2>&1
ok test $? -eq 1
ok has "$dir/status.out" "not running: rank 2 (host $host) was lost: killed by signal 9 (Killed)"
ok test -z "$(ls "$dir"/tshard-"$job"-*.sock 2>/dev/null)"
# a new connection to the lost job says why there is no daemon (CLI: exit 4; Python and C:
# RANK_LOST)
"$bin/tshard" ping --job "$job" --rank 1 >"$dir/ping.out" 2>&1
ok test $? -eq 4
ok has "$dir/ping.out" "job $job lost rank 2 (host $host): killed by signal 9 (Killed)"
/usr/bin/python3 -c "
import sys, tshard
try:
    tshard.connect(rank=1, job='$job')
except tshard.TshardError as e:
    print(e.name, e.message)" >"$dir/pyconnect.out" 2>&1
ok has "$dir/pyconnect.out" "^RANK_LOST job $job lost rank 2 (host $host): killed by signal 9 (Killed)"
"$bin/rank_lost_client" "$job" 1 t 3 "$dir/none.ready" >"$dir/cconnect.out" 2>&1
ok has "$dir/cconnect.out" "^connect RANK_LOST: job $job lost rank 2 (host $host): killed by signal 9"
"$launch" stop --job "$job" >"$dir/stop.out" 2>&1
ok has "$dir/stop.out" "is not running (rank 2 (host $host) was lost"

# ---- a save interrupted by a lost rank: CHECKPOINT_IO naming the path, the old one intact ----
ckpt=$dir/ckpt
ok "$launch" start -np 3 --job "$job"
/usr/bin/python3 - "$job" "$ckpt" "$dir/save.ready" >"$dir/save.out" 2>&1 <<'PY' &
import sys, numpy as np, tshard
job, ckpt, ready = sys.argv[1:4]
c = tshard.connect(rank=0, job=job, timeout=60)
ref = (np.arange(2048 * 8192, dtype=np.float32) % 977).reshape(2048, 8192)
c.create("big", "f32", ref.shape, "mesh=[3] placements=[S(0)]")
c.put("big", ref)
c.save(ckpt, all=True)  # the complete checkpoint the interrupted saves must leave as it is
open(ready, "w").close()
try:
    for i in range(100000):
        c.save(ckpt, all=True, overwrite=True)
    print("no failure")
except tshard.TshardError as e:
    print(f"save {e.name} {e.message}")
PY
savepid=$!
ok until_ok test -e "$dir/save.ready"
kill -KILL "$(rank_pid 1)"
wait "$savepid"
ok has "$dir/save.out" "^save CHECKPOINT_IO save to $ckpt was interrupted: rank 1 (host $host) was lost: killed by signal 9"
ok has "$dir/save.out" "$ckpt holds a complete checkpoint or nothing"
ok until_ok test ! -e "$dir/tshard-$job.pid"
# the CLI's save, on a new job, interrupted the same way
ok "$launch" start -np 3 --job "$job"
ok "$bin/tshard" load "$ckpt" --job "$job"
for k in 2 3 4; do # 256 MiB to save: the save lasts long enough to be caught in the act
  ok "$bin/tshard" reshard big --to "mesh=[3] placements=[S($((k % 2)))]" --keep-as "big$k" --job "$job" >/dev/null
done
declare -A before=()
for d in "$dir"/.ckpt.tmp-*; do [ -e "$d" ] && before[$d]=1; done
"$bin/tshard" save "$ckpt" --all --overwrite --job "$job" >/dev/null 2>"$dir/clisave.err" &
clisave=$!
saving() { # the save's temporary directory appeared (one an interrupted save left does not count)
  local d
  for d in "$dir"/.ckpt.tmp-*; do [ -e "$d" ] && [ -z "${before[$d]:-}" ] && return 0; done
  return 1
}
ok until_ok saving
kill -KILL "$(rank_pid 2)"
wait "$clisave"
ok test $? -eq 1
ok has "$dir/clisave.err" "save to $ckpt was interrupted: rank 2 (host $host) was lost.*(CHECKPOINT_IO)"
ok until_ok test ! -e "$dir/tshard-$job.pid"
# the checkpoint is complete and holds the values put
ok "$launch" start -np 2 --job "$job"
/usr/bin/python3 - "$job" "$ckpt" >"$dir/load.out" 2>&1 <<'PY'
import sys, numpy as np, tshard
job, ckpt = sys.argv[1:3]
with tshard.connect(rank=0, job=job, timeout=60) as c:
    c.load(ckpt, attr="mesh=[2] placements=[S(1)]")
    got = c.get("big")
ref = (np.arange(2048 * 8192, dtype=np.float32) % 977).reshape(2048, 8192)
print("loaded", "equal" if np.array_equal(got, ref) else "DIFFERENT")
PY
ok has "$dir/load.out" "^loaded equal"

# ---- a stopped job is not a lost rank ----
ok "$bin/tshard" ping --job "$job" --rank 1
ok "$launch" stop --job "$job"
"$launch" status --job "$job" >"$dir/status2.out" 2>&1
ok has "$dir/status2.out" "^job '$job': not running$"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
