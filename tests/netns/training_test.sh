#!/usr/bin/env bash
# training_test.sh MAESTRO_RUN: training across hosts (issue 12,
# "Multi-host"), the hosts being three network namespaces made by netns.sh
# on one veth LAN (10.77.0.1-3, nothing outside them). Host 0 runs the
# coordinator (`--processes 3 --listen 10.77.0.1:PORT`), hosts 1 and 2 a
# `maestro-run --worker 10.77.0.1:PORT` each, UCX over the namespace's eth0
# only (UCX_TLS=tcp UCX_NET_DEVICES=eth0): a component that advertised
# 127.0.0.1 or another host's loopback could not be reached. Four runs in
# one set of namespaces — tiny_mllm, tiny_mllm with ZeRO-1
# (`[runtime] shard_optimizer = true`), tiny_kd, and tiny_mllm planned on a
# `[cluster]` of the three hosts (`device = "cpu"`, a node each, named by
# the hosts' names in another order than the workers join) — each giving the
# single-process run's per-step losses (<= 1e-5 relative, as
# tests/e2e/processes_test.cpp asserts on loopback), with tensors really put
# between the hosts (`tensor_puts` > 0). ZeRO-1's own effect is checked on
# loopback (processes_test); here it is the same losses across hosts.
# Exit 77 (skipped, with the reason) where namespaces cannot be made.
set -uo pipefail
run=$(realpath "${1:?usage: training_test.sh MAESTRO_RUN}")
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
dir=$(mktemp -d /tmp/maestro-netns-train.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
"$here/netns.sh" check || exit $?
fail() { echo "FAILED: $*" >&2; for f in "$dir"/*.err "$dir"/w*.out; do [ -s "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done; exit 1; }

printf '[runtime]\nthreads = 1\n' > "$dir/plain.toml"
printf '[runtime]\nthreads = 1\nshard_optimizer = true\n' > "$dir/shard.toml"
# The hosts as the [cluster]'s nodes: the run executes the planner's plan
# on them, each replica on its node's host (docs/runtime.md, "Placement").
# Node 1 is named for host 2 and node 2 for host 1, and host 1's worker
# starts first: admitted by its host name, it must be process 2 (arrival
# order would make it process 1).
printf '[runtime]\nthreads = 1\n[cluster]\ndevice = "cpu"\ndevices_per_node = 1\nhosts = ["netns-host-0", "netns-host-2", "netns-host-1"]\n' > "$dir/nodes.toml"
# case: name model steps config port
cases=("mllm tiny_mllm 3 plain 7411" "mllm_zero1 tiny_mllm 2 shard 7412" "kd tiny_kd 2 plain 7413"
       "mllm_nodes tiny_mllm 2 nodes 7414")

# The single-process references, on this host.
for c in "${cases[@]}"; do
  read -r name model steps cfg port <<< "$c"
  "$run" "$src/models/$model.sect" --steps "$steps" --config "$dir/$cfg.toml" --json --quiet > "$dir/$name.ref" 2> "$dir/$name.ref.err" ||
    fail "single-process $name"
done

# The same runs across the three hosts: one command line per host.
env="UCX_TLS=tcp UCX_NET_DEVICES=eth0"
coord="" w1="" w2=""
for c in "${cases[@]}"; do
  read -r name model steps cfg port <<< "$c"
  quiet=--quiet
  [ "$name" = mllm_nodes ] && quiet=""  # its workers say which process they are
  coord+="$env '$run' '$src/models/$model.sect' --steps $steps --config '$dir/$cfg.toml' --json $quiet --processes 3 --listen 10.77.0.1:$port > '$dir/$name.out' 2> '$dir/$name.err' || exit 1; "
  w1+="$env '$run' --worker 10.77.0.1:$port > '$dir/w1.$name.out' 2>&1 || exit 1; "
  [ "$name" = mllm_nodes ] && w2+="sleep 2; "
  w2+="$env '$run' --worker 10.77.0.1:$port > '$dir/w2.$name.out' 2>&1 || exit 1; "
done
"$here/netns.sh" run 3 --timeout 420 -- "$coord" ::: "$w1" ::: "$w2" || fail "training across 3 hosts (netns.sh exit $?)"

for c in "${cases[@]}"; do
  read -r name model steps cfg port <<< "$c"
  /usr/bin/python3 - "$dir/$name.ref" "$dir/$name.out" "$name" <<'PY' || fail "$name: across hosts differs from one process"
import json, sys
ref = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
got = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
name = sys.argv[3]
a, b = got["losses"], ref["losses"]
assert len(a) == len(b) > 0, (name, a, b)
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-5 * abs(y), f"{name} step {i}: {x} across hosts vs {y} in one process"
assert got["transport"] == "ucx (UCX_TLS=tcp)", got["transport"]
assert got["tensor_puts"] > 0 and got["tensor_bytes_put"] > 0, "no tensor crossed between the hosts"
print(f"{name}: {len(a)} steps across 3 hosts equal one process; {got['tensor_puts']} puts, {got['tensor_bytes_put']} bytes between hosts")
PY
done
# Admitted by host name ([cluster] hosts): host 2's worker is process 1, host 1's process 2.
grep -q "worker 1 (pid [0-9]* on netns-host-2) of 3 processes" "$dir/w2.mllm_nodes.out" ||
  fail "host 2's worker is not process 1: $(cat "$dir/w2.mllm_nodes.out")"
grep -q "worker 2 (pid [0-9]* on netns-host-1) of 3 processes" "$dir/w1.mllm_nodes.out" ||
  fail "host 1's worker is not process 2: $(cat "$dir/w1.mllm_nodes.out")"
echo "mllm_nodes: each worker took the node named for its host"
echo "multi-host training: ok"
