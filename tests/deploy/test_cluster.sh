#!/usr/bin/env bash
# Cluster smoke test: three hosts made of network namespaces, joined by a bridge (in a switch
# namespace of its own) and veth pairs, with addresses in a private test range that exists only
# inside these namespaces. mpirun runs in the first host and launches the other ranks through a
# remote-shell agent that enters each host's namespace (ip netns exec), with the TCP transport
# only, so every byte between ranks crosses a real network stack. Reshards whose source and
# target groups live on different hosts (p2p, all-to-all, root) are driven and verified through
# the CLI run inside each host, and the daemons are checked to run in three different
# namespaces. Everything created is torn down on exit, failure or interrupt. Without root or `ip`
# it says SKIPPED with the reason (exit 77, which CTest reports as skipped).
# usage: test_cluster.sh BUILD_BIN_DIR
set -u
bin=$(cd "$1" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
# the namespaces, their names and the remote-shell agent (netns_hosts.sh)
source "$(dirname "${BASH_SOURCE[0]}")/netns_hosts.sh"
netns_hosts_names ts "the cluster smoke test"
mpipid=""
cleanup() {
  [ -n "$mpipid" ] && kill -TERM -- "-$mpipid" 2>/dev/null && sleep 1 && kill -KILL -- "-$mpipid" 2>/dev/null
  for h in "${hosts[@]}" "$sw"; do ip netns del "$h" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

netns_hosts_up
printf '%s slots=1\n' "$net.1" "$net.2" "$net.3" >"$work/hostfile"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TSHARD_SOCKET_DIR=$work
unset OMPI_MCA_btl OMPI_MCA_rmaps_base_oversubscribe
job=cluster
# Starts the job across the hosts; returns 1 when not every rank serves within the deadline.
launch() {
  setsid ip netns exec "${hosts[0]}" mpirun --hostfile "$work/hostfile" -np 3 \
    --mca plm_rsh_agent "$work/ns-rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca orte_startup_timeout 45 \
    --mca btl self,tcp --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
    "$bin/tshardd" --job "$job" --socket-dir "$work" >"$work/daemons.log" 2>&1 </dev/null &
  mpipid=$!
  for _ in $(seq 600); do
    [ "$(grep -c "ready: job $job rank" "$work/daemons.log")" -ge 3 ] && return 0
    kill -0 "$mpipid" 2>/dev/null || break
    sleep 0.1 # polling for the ready lines, bounded
  done
  echo "the daemons did not all start across the hosts; mpirun's output and the processes:"
  cat "$work/daemons.log"
  ps -eo pid,ppid,stat,etime,args | grep -E "mpirun|orted|tshardd|ns-rsh" | grep -v grep
  kill -TERM -- "-$mpipid" 2>/dev/null
  sleep 1
  kill -KILL -- "-$mpipid" 2>/dev/null
  wait "$mpipid" 2>/dev/null
  mpipid=""
  return 1
}
if ! launch; then
  echo "retrying the launch once"
  launch || { echo "FAIL: the job could not be started across the hosts"; exit 1; }
fi

passed=0 failed=0
ok() { if "$@"; then passed=$((passed + 1)); else echo "FAIL: $*"; failed=$((failed + 1)); fi; }
# the CLI of host r+1 talking to the daemon of rank r
on() { local r=$1; shift; ip netns exec "${hosts[$r]}" "$bin/tshard" "$@" --job "$job" --rank "$r"; }

# every daemon runs in its own host namespace
declare -A seen=()
for r in 0 1 2; do
  pid=$(grep "ready: job $job rank $r " "$work/daemons.log" | grep -oE "pid [0-9]+" | awk '{print $2}')
  ns=$(ip netns identify "$pid")
  seen[$ns]=1
  ok test "$ns" = "${hosts[$r]}"
done
ok test "${#seen[@]}" -eq 3

/usr/bin/python3 -c "
import numpy as np
np.save('$work/w.npy', (np.arange(301 * 64) % 509 - 250).astype(np.float32).reshape(301, 64))"
ok on 0 put w "$work/w.npy" --attr "mesh=[1]@0 placements=[R]"
check_all() { # the whole tensor read back on every host equals the original
  for r in 0 1 2; do
    on "$r" get w "$work/back$r.npy" >/dev/null &&
      /usr/bin/python3 -c "
import numpy as np, sys
sys.exit(0 if np.array_equal(np.load('$work/w.npy'), np.load('$work/back$r.npy')) else 1)" ||
      { echo "FAIL: $1: host $((r + 1)) reads a different tensor"; return 1; }
  done
}
# rank 0 knows where every rank lives: one rank on each of the three hosts
ok grep -q "ranks on 3 hosts: hosts=3x1; plans weigh each host's link" "$work/daemons.log"
# and every rank says so in its stats, with its own host
for r in 0 1 2; do
  topo=$(on "$r" stats --json)
  ok /usr/bin/python3 -c "
import json, sys
s = json.loads('''$topo''')
sys.exit(0 if (s['topology'], s['hosts'], s['host']) == ('hosts=3x1', 3, $r) else 1)"
done
# describe (no tensor) lists the three hosts, each named as its namespace names itself: `ip
# netns exec` enters a network namespace only, so unless the namespaces were given UTS
# namespaces of their own they all give this machine's name (three hosts of one name)
names=()
for r in 0 1 2; do names[$r]=$(ip netns exec "${hosts[$r]}" hostname); done
if [ "$(printf '%s\n' "${names[@]}" | sort -u | wc -l)" -eq 3 ]; then
  echo "the hosts name themselves apart: ${names[*]}"
else
  echo "the hosts share a name (no UTS namespaces of their own): ${names[*]}"
fi
for r in 0 1 2; do
  desc=$(on "$r" describe --json)
  ok /usr/bin/python3 -c "
import glob, json, sys
d = json.loads(sys.argv[1])
names = sys.argv[2:]
nodes = {int(p.split('/node')[-1]) for p in glob.glob('/sys/devices/system/node/node[0-9]*')}
want = {'rank': $r, 'ranks': 3, 'hosts': 3, 'topology': 'hosts=3x1', 'host_names': names,
        'rank_hosts': [0, 1, 2]}
ok = {k: d.get(k) for k in want} == want
ok = ok and [(h['host'], h['name'], h['ranks']) for h in d['by_host']] == \
    [(i, n, [i]) for i, n in enumerate(names)]
ok = ok and all(n in nodes if nodes else n == -1 for n in d['rank_numa'])
sys.exit(0 if ok else print('describe --json on rank $r:', d, 'want', want, 'nodes', nodes))" \
    "$desc" "${names[@]}"
done
text=$(on 2 describe)
ok test "$(head -1 <<<"$text")" = "3 ranks on 3 hosts (hosts=3x1), answered by rank 2"
for r in 0 1 2; do # each host's line, with the NUMA node its rank's stats give
  numa=$(on "$r" stats --json | /usr/bin/python3 -c "
import json, sys
n = json.load(sys.stdin)['numa']
print(n if n >= 0 else 'unknown')")
  ok grep -qxF "  host $r ${names[$r]}: 1 rank: NUMA node $numa: ranks $r" <<<"$text"
done
# cross-host p2p: from host 1 alone to hosts 2 and 3
ok on 1 reshard w --to "mesh=[2]@1-2 placements=[S(0)]" --strategy p2p
ok check_all "p2p host 1 -> hosts 2,3"
# all-to-all across the three hosts
ok on 2 reshard w --to "mesh=[3] placements=[S(0)]" --strategy p2p
ok on 0 reshard w --to "mesh=[3] placements=[S(1)]" --strategy alltoall
ok check_all "alltoall across hosts"
# root: uneven rows to replicas on every host
ok on 1 reshard w --to "mesh=[3] placements=[S(0)]"
ok on 2 reshard w --to "mesh=[3] placements=[R]" --strategy root
ok check_all "root across hosts"
stats=$(on 0 stats --json)
ok /usr/bin/python3 -c "
import json, sys
s = json.loads('''$stats''')['strategies']
sys.exit(0 if all(s[k]['bytes_sent'] + s[k]['bytes_received'] > 0 for k in ('p2p', 'alltoall', 'root')) else 1)"
# the bytes really crossed the network: the bridge ports counted them
rx=$(ip -n "$sw" -s link show p1 | awk '/RX:/{getline; print $1}')
ok test "${rx:-0}" -gt $((301 * 64 * 4))
ok on 0 shutdown
for _ in $(seq 300); do kill -0 "$mpipid" 2>/dev/null || break; sleep 0.1; done
ok test ! -e "/proc/$mpipid"
mpipid=""
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
