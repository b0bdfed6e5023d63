#!/usr/bin/env bash
# Data loader throughput (samples/s, 1 and 2 threads) against the training
# step's consumption on models/tiny_mllm_files.sect, and, from a --trace of
# the real run, how long the scheduler waited for each step's data.
# Usage: bench/data_loader/run.sh [BUILD] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-60}
cd "$(dirname "$0")/../.."
[[ -f models/demo-data/train.jsonl ]] || scripts/make-demo-data
uptime
"$build/bench/data_loader/bench_data_loader" models/tiny_mllm_files.sect "$steps"
trace=$(mktemp --suffix=.json)
trap 'rm -f "$trace"' EXIT
"$build/maestro-run" models/tiny_mllm_files.sect --steps "$steps" --json --quiet --trace "$trace" > "$trace.out"
/usr/bin/python3 - "$trace" "$trace.out" <<'PY'
import json, sys
summary = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
events = json.load(open(sys.argv[1]))
events = events["traceEvents"] if isinstance(events, dict) else events
waits = {}
for e in events:
    name = e.get("name", "")
    if name.startswith("wait for step "):
        waits[int(name.split()[-1])] = e.get("dur", 0) / 1000.0
loads = [e.get("dur", 0) / 1000.0 for e in events if e.get("name", "").startswith("load step ")]
later = [w for k, w in waits.items() if k > 0]
print(f"training: {summary['samples_per_s']:8.1f} samples/s ({summary['steps']} steps, wall {summary['wall_s']:.2f} s)")
print(f"loader wait: step 0 {waits.get(0, 0):.2f} ms; steps 1+: max {max(later):.3f} ms, "
      f"total {sum(later):.2f} ms of {1000 * summary['wall_s']:.0f} ms; a step's decode: "
      f"median {sorted(loads)[len(loads) // 2]:.2f} ms")
PY
rm -f "$trace.out"
uptime
