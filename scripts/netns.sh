#!/usr/bin/env bash
# Simulated hosts on one machine, for the multi-host tests and benchmarks: K network namespaces
# joined by a bridge that lives in a namespace of its own, so nothing touches the machine's own
# network. Each host runs its commands in fresh UTS, IPC, PID and mount namespaces too (its own
# hostname, /dev/shm, /tmp and /etc/hosts), so UCX finds no shared memory or cma path between
# two hosts and the only way across is the network, as between real machines.
#
# Usage:
#   scripts/netns.sh check                    exit 0 if this machine can do it, else 77 + why
#   scripts/netns.sh up NAME K                create hosts NAME-h0 .. NAME-h{K-1}
#   scripts/netns.sh down NAME                delete them (every namespace NAME-*)
#   scripts/netns.sh exec NAME I CMD [ARG..]  run CMD on host I (hostname NAME-hI)
#   scripts/netns.sh addr NAME I              print host I's address
#   scripts/netns.sh link NAME I up|down      take host I's only link up or down
#   scripts/netns.sh shape NAME I RATE        limit host I's link to RATE each way (tc tbf,
#                                             e.g. 1gbit); RATE "none" removes the limit
#
# Everything that runs on one host must start from one exec, as one ssh session starts a node's
# launcher: two execs on the same host are two boots of it (separate IPC, PID and /dev/shm), so
# ranks of one host started by separate execs would see each other only through the network.
#
# Host I's address is 10.213.0.(I+1)/24 on its interface eth0. Its /etc/hosts is Debian's
# (localhost, and its own name on 127.0.1.1) plus every other host's name and address, so a
# name that resolves to loopback on its own host is part of what the tests see. NAME must be
# short (the namespace names carry it) and unique to the caller: tests use their pid.
set -euo pipefail

subnet=10.213.0
die() { echo "netns.sh: $*" >&2; exit 2; }

check() {
  if [ "$(id -u)" -ne 0 ]; then echo "netns.sh: needs root (ip netns, unshare)"; return 77; fi
  if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
    echo "netns.sh: 'ip netns' is missing or fails (install iproute2)"; return 77
  fi
  if ! command -v unshare >/dev/null; then echo "netns.sh: unshare is missing"; return 77; fi
  local probe="zrtprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns.sh: cannot create a network namespace here (no CAP_SYS_ADMIN?)"; return 77
  fi
  ip netns del "$probe"
}

host_ns() { echo "$1-h$2"; }
switch_ns() { echo "$1-sw"; }
host_dir() { echo "/run/zrt-netns/$1/h$2"; }

up() {
  local name=$1 count=$2 i
  [[ $count =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 200 ] ||
    die "up: K must be 1..200, got '$count'"
  [ ${#name} -le 8 ] || die "up: NAME '$name' is over 8 characters (interface names are short)"
  down "$name" 2>/dev/null || true
  ip netns add "$(switch_ns "$name")"
  ip -n "$(switch_ns "$name")" link add br0 type bridge
  ip -n "$(switch_ns "$name")" link set br0 up
  for ((i = 0; i < count; i++)); do
    local ns dir
    ns=$(host_ns "$name" "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # The pair is made inside the host's namespace, then one end moves to the switch.
    ip -n "$ns" link add eth0 type veth peer name "p$i"
    ip -n "$ns" link set "p$i" netns "$(switch_ns "$name")"
    ip -n "$(switch_ns "$name")" link set "p$i" master br0 up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    dir=$(host_dir "$name" "$i")
    mkdir -p "$dir/tmp"
    chmod 1777 "$dir/tmp"
    {
      echo "127.0.0.1 localhost"
      echo "127.0.1.1 $ns"
      local j
      for ((j = 0; j < count; j++)); do
        [ "$j" -eq "$i" ] || echo "$subnet.$((j + 1)) $(host_ns "$name" "$j")"
      done
    } >"$dir/hosts"
  done
  # A veth reports carrier a moment after both ends are up; until then UCX sees only loopback.
  local tries
  for ((i = 0; i < count; i++)); do
    for ((tries = 0; tries < 100; tries++)); do
      ip -n "$(host_ns "$name" "$i")" link show eth0 | grep -q "state UP" && break
      sleep 0.05
    done
  done
}

down() {
  local name=$1 ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns"
  done
  rm -rf "/run/zrt-netns/$name"
}

exec_on() {
  local name=$1 index=$2
  shift 2
  [ $# -ge 1 ] || die "exec: no command given"
  local ns dir
  ns=$(host_ns "$name" "$index")
  dir=$(host_dir "$name" "$index")
  [ -f "$dir/hosts" ] || die "exec: host $index of '$name' does not exist (run 'up' first)"
  # unshare blocks SIGINT and SIGTERM; SIGKILL to this process takes the host's whole PID
  # namespace down (--kill-child). For a graceful stop, signal the command's own pid (its pid
  # in the caller's namespace; it is pid 1 on the host, so it must handle the signal).
  exec ip netns exec "$ns" unshare --uts --ipc --pid --mount --fork --kill-child --mount-proc \
    -- /bin/sh -c '
      hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
        mount --bind "$2/tmp" /tmp && mount --bind "$2/hosts" /etc/hosts || exit 125
      shift 2
      exec "$@"' sh "$ns" "$dir" "$@"
}

case ${1:-} in
  check) check ;;
  up) [ $# -eq 3 ] || die "usage: up NAME K"; up "$2" "$3" ;;
  down) [ $# -eq 2 ] || die "usage: down NAME"; down "$2" ;;
  exec) [ $# -ge 4 ] || die "usage: exec NAME I CMD [ARG...]"; shift; exec_on "$@" ;;
  addr) [ $# -eq 3 ] || die "usage: addr NAME I"; echo "$subnet.$(($3 + 1))" ;;
  link)
    [ $# -eq 4 ] && [[ $4 =~ ^(up|down)$ ]] || die "usage: link NAME I up|down"
    ip -n "$(switch_ns "$2")" link set "p$3" "$4"
    ;;
  shape)
    [ $# -eq 4 ] || die "usage: shape NAME I RATE|none"
    for end in "$(host_ns "$2" "$3") eth0" "$(switch_ns "$2") p$3"; do
      read -r ns dev <<<"$end"
      ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
      if [ "$4" != none ]; then
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$4" burst 256kb latency 50ms
      fi
    done
    ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
