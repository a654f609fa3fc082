# netns_hosts.sh - sourced by the cluster tests (test_cluster.sh, test_cluster_resume.sh): three
# hosts made of network namespaces, joined by a bridge in a switch namespace of its own through
# veth pairs, with the addresses $net.1 to $net.3, and the remote-shell agent $work/ns-rsh
# ("ns-rsh HOST COMMAND..." runs COMMAND in HOST's namespace) that mpirun launches remote ranks
# through. The caller defines skip(), calls netns_hosts_names (which sets tag, net, sw, hosts and
# work) and removes the namespaces on exit.

# netns_hosts_names PREFIX WHAT: skips (WHAT needs root...) without root or `ip`; else names the
# namespaces after PREFIX and this shell's pid, picks the test range and makes the work directory.
netns_hosts_names() {
  [ "$(id -u)" -eq 0 ] || skip "$2 needs root to create network namespaces"
  command -v ip >/dev/null || skip "no 'ip' command (apt-get install iproute2)"
  tag="$1$(( $$ % 10000 ))"
  net="10.213.$(( $$ % 200 + 20 ))"
  sw="${tag}sw"
  hosts=("${tag}h1" "${tag}h2" "${tag}h3")
  work=$(mktemp -d /tmp/tshard-cluster.XXXXXX)
}

netns_hosts_up() {
  ip netns add "$sw" || skip "cannot create network namespaces here (ip netns add failed)"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for i in 0 1 2; do
    h=${hosts[$i]}
    ip netns add "$h"
    ip -n "$sw" link add "p$i" type veth peer name eth0 netns "$h"
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    ip -n "$h" addr add "$net.$((i + 1))/24" dev eth0
    ip -n "$h" link set eth0 up
    ip -n "$h" link set lo up
  done

  # the remote-shell agent: "agent HOST COMMAND..." runs COMMAND in HOST's namespace
  cat >"$work/ns-rsh" <<AGENT
#!/usr/bin/env bash
host=\$1; shift
case \$host in
  $net.1) ns=${hosts[0]} ;;
  $net.2) ns=${hosts[1]} ;;
  $net.3) ns=${hosts[2]} ;;
  *) echo "ns-rsh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
  chmod +x "$work/ns-rsh"
}
