#!/usr/bin/env bash
# multihost_test.sh NETNS_PEER: the transfer engine between hosts (issue 12,
# "Multi-host"), hosts being network namespaces made by netns.sh:
#   1. two hosts, UCX_TLS=tcp over the veth LAN: 1 MiB and 64 MiB tensors
#      put one-sided from host 0 into host 1's registered memory, every
#      float checked by the receiver;
#   2. three hosts: a RingCommunicator all_reduce equal bitwise to the
#      rank-order fold on every host.
# Exit 77 (skipped, with the reason) where namespaces cannot be made.
set -uo pipefail
peer=${1:?usage: multihost_test.sh NETNS_PEER}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/maestro-netns.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
"$here/netns.sh" check || exit $?
# UCX over the namespace's veth only (its loopback would be another host's).
env="UCX_TLS=tcp UCX_NET_DEVICES=eth0"
"$here/netns.sh" run 2 --timeout 25 -- \
  "$env $peer put $dir 0" ::: "$env $peer put $dir 1" || { echo "FAILED: put between 2 hosts" >&2; exit 1; }
"$here/netns.sh" run 3 --timeout 25 -- \
  "$env $peer ring $dir 0 3" ::: "$env $peer ring $dir 1 3" ::: "$env $peer ring $dir 2 3" ||
  { echo "FAILED: ring all_reduce over 3 hosts" >&2; exit 1; }
echo "multi-host transfer engine: ok"
