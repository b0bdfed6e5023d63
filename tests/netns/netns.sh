#!/usr/bin/env bash
# netns.sh: N throw-away "hosts" on one machine for multi-host tests — N
# network namespaces, each with its own address on one virtual LAN, every
# trace of them removed on exit (success, failure, timeout, signal).
#
#   netns.sh check
#       exit 0 if namespaces can be made here, else print "skipped: …" and
#       exit 77 (ctest: SKIP_RETURN_CODE 77).
#   netns.sh run N [--timeout S] -- CMD_0 ::: CMD_1 ::: … ::: CMD_{N-1}
#       makes the namespaces, runs CMD_i (a bash command line) in namespace i,
#       all at once, each under `timeout S` (default 60), waits for all and
#       exits with the first non-zero status among them (0 if all passed,
#       124 for a command that timed out), 77 when namespaces cannot be made.
#
# Layout (all names carry this script's pid, so concurrent runs never meet):
#   maestro-<pid>-0 … maestro-<pid>-{N-1}: the hosts; in each, `lo` up and
#       `eth0` (one end of a veth pair) with 10.77.0.<i+1>/24;
#   maestro-<pid>-lan: the switch — a bridge `br0` holding the other ends.
# Nothing is added to the namespace the script runs in: the veth pairs are
# made there under temporary names (m<pid>h<i>/m<pid>s<i>) and moved at
# once; addresses exist only inside the namespaces. The 10.77.0.0/24 subnet
# may repeat across concurrent runs: each run's LAN is its own namespace.
#
# Each host has its own host name too (a UTS namespace): netns-host-<i>.
# Each command sees MAESTRO_NETNS_INDEX (i), MAESTRO_NETNS_NAME (its
# namespace), MAESTRO_NETNS_HOST (its host name), MAESTRO_NETNS_ADDR (its address), MAESTRO_NETNS_ADDRS (all N
# addresses, space-separated, by index) and MAESTRO_NETNS_DEVICE=eth0 (for
# UCX_NET_DEVICES). Network namespaces share the file system: a temp dir is
# the simplest rendezvous between the hosts.
#
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2 `ip`, with
# veth and bridge support in the kernel. Works as root in a plain Docker
# container only with --privileged or --cap-add NET_ADMIN --cap-add SYS_ADMIN
# (see tests/netns/README.md).
set -uo pipefail

readonly SKIP=77
readonly prefix="maestro-$$"
readonly subnet="10.77.0"
namespaces=()
temp_links=()
children=()

skip() {
  echo "skipped: $*" >&2
  exit $SKIP
}

cleanup() {
  local pid ns link
  for pid in "${children[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${children[@]}"; do wait "$pid" 2>/dev/null; done
  for ns in "${namespaces[@]}"; do
    # Anything still running inside (a command that ignored TERM) is ours.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  for link in "${temp_links[@]}"; do ip link del "$link" 2>/dev/null; done
  namespaces=()
  temp_links=()
  children=()
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

# Tries to make (and removes) one namespace; prints why not and returns 1.
can_make_namespaces() {
  command -v ip >/dev/null 2>&1 || { echo "no 'ip' command (iproute2)"; return 1; }
  local probe="$prefix-probe" err
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cannot create a network namespace ($(id -un), uid $(id -u)): $err"
    return 1
  fi
  if ! err=$(ip link add "m$$p0" type veth peer name "m$$p1" 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create a veth pair: $err"
    return 1
  fi
  ip link del "m$$p0" 2>/dev/null
  if ! err=$(ip netns exec "$probe" ip link add br0 type bridge 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot create a bridge: $err"
    return 1
  fi
  if ! err=$(ip netns exec "$probe" unshare --uts sh -c 'hostname netns-probe' 2>&1); then
    ip netns del "$probe" 2>/dev/null
    echo "cannot give a host its own name (unshare --uts): $err"
    return 1
  fi
  ip netns del "$probe" 2>/dev/null
  return 0
}

die_setup() {
  echo "netns.sh: setting up the namespaces failed: $*" >&2
  exit 1
}

# Makes the LAN and N hosts (see the layout above).
make_hosts() {
  local n=$1 i ns lan="$prefix-lan" host_end switch_end
  ip netns add "$lan" || die_setup "ip netns add $lan"
  namespaces+=("$lan")
  ip -n "$lan" link set lo up || die_setup "lo up in $lan"
  ip -n "$lan" link add br0 type bridge forward_delay 0 || die_setup "bridge in $lan"
  ip -n "$lan" link set br0 up || die_setup "br0 up in $lan"
  for ((i = 0; i < n; i++)); do
    ns="$prefix-$i"
    host_end="m$$h$i"
    switch_end="m$$s$i"
    ip netns add "$ns" || die_setup "ip netns add $ns"
    namespaces+=("$ns")
    ip link add "$host_end" type veth peer name "$switch_end" || die_setup "veth pair $host_end/$switch_end"
    temp_links+=("$host_end")
    ip link set "$host_end" netns "$ns" || die_setup "moving $host_end into $ns"
    ip link set "$switch_end" netns "$lan" || die_setup "moving $switch_end into $lan"
    ip -n "$ns" link set "$host_end" name eth0 || die_setup "renaming $host_end in $ns"
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0 || die_setup "address in $ns"
    ip -n "$ns" link set lo up || die_setup "lo up in $ns"
    ip -n "$ns" link set eth0 up || die_setup "eth0 up in $ns"
    ip -n "$lan" link set "$switch_end" master br0 || die_setup "$switch_end into br0"
    ip -n "$lan" link set "$switch_end" up || die_setup "$switch_end up"
  done
  # The LAN is up when every host's eth0 has its carrier and every switch
  # port forwards (bounded: 5 s).
  local tries
  for ((tries = 0; tries < 50; tries++)); do
    local ready=1
    for ((i = 0; i < n; i++)); do
      ip -n "$prefix-$i" link show eth0 | grep -q 'LOWER_UP' || ready=0
      ip -n "$lan" -d link show "m$$s$i" | grep -q 'state forwarding' || ready=0
    done
    ((ready)) && break
    sleep 0.1
  done
  ((tries < 50)) || die_setup "the links did not come up within 5 s"
}

usage() {
  echo "usage: netns.sh check | netns.sh run N [--timeout S] -- CMD_0 ::: CMD_1 ::: … (N commands)" >&2
  exit 2
}

case "${1:-}" in
  check)
    [ $# -eq 1 ] || usage
    why=$(can_make_namespaces) || skip "$why"
    echo "network namespaces, veth pairs and bridges can be made here"
    exit 0
    ;;
  run) ;;
  *) usage ;;
esac

shift
n=${1:-}
[[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 32)) || { echo "netns.sh run: N must be 1..32, not '$n'" >&2; usage; }
shift
limit=60
if [ "${1:-}" = --timeout ]; then
  [[ "${2:-}" =~ ^[0-9]+$ ]] && ((${2} > 0)) || { echo "netns.sh run: --timeout wants seconds, not '${2:-}'" >&2; usage; }
  limit=$2
  shift 2
fi
[ "${1:-}" = -- ] || usage
shift
commands=()
current=""
for word in "$@"; do
  if [ "$word" = ":::" ]; then
    commands+=("$current")
    current=""
  else
    current+="${current:+ }$word"
  fi
done
commands+=("$current")
if [ ${#commands[@]} -ne "$n" ]; then
  echo "netns.sh run: $n namespaces but ${#commands[@]} commands (separate them with :::)" >&2
  exit 2
fi

why=$(can_make_namespaces) || skip "$why"
make_hosts "$n"

addrs=""
for ((i = 0; i < n; i++)); do addrs+="${addrs:+ }$subnet.$((i + 1))"; done
for ((i = 0; i < n; i++)); do
  # timeout puts the command in its own process group and kills the group.
  MAESTRO_NETNS_INDEX=$i MAESTRO_NETNS_NAME="$prefix-$i" MAESTRO_NETNS_ADDR="$subnet.$((i + 1))" \
    MAESTRO_NETNS_ADDRS="$addrs" MAESTRO_NETNS_DEVICE=eth0 \
    MAESTRO_NETNS_HOST="netns-host-$i" \
    timeout -k 2 "$limit" ip netns exec "$prefix-$i" unshare --uts bash -c "hostname netns-host-$i && ${commands[$i]}" &
  children+=($!)
done
status=0
for ((i = 0; i < n; i++)); do
  wait "${children[$i]}"
  rc=$?
  if ((rc != 0)); then
    if ((rc == 124)); then
      echo "netns.sh: command $i (in $prefix-$i) timed out after $limit s" >&2
    else
      echo "netns.sh: command $i (in $prefix-$i) exited $rc" >&2
    fi
    ((rc == SKIP)) && rc=1  # only the harness itself skips
    ((status == 0)) && status=$rc
  fi
done
children=()
exit $status
