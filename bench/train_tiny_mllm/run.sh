#!/usr/bin/env bash
# Training throughput of models/tiny_mllm.sect on this machine: samples/s
# under --schedule wavefront and monolithic (alternating runs, best of N
# each), their ratio, and the share of step time the scheduler actor spends
# issuing and routing tasks. Usage: bench/train_tiny_mllm/run.sh [BUILD] [N]
set -euo pipefail
build=${1:-build}
runs=${2:-3}
cd "$(dirname "$0")/../.."
/usr/bin/python3 - "$build/maestro-run" "$runs" <<'PY'
import json, subprocess, sys, os
run, n = sys.argv[1], int(sys.argv[2])
def once(schedule):
    p = subprocess.run([run, "models/tiny_mllm.sect", "--json", "--quiet", "--schedule", schedule],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])
best = {}
for i in range(n):
    for schedule in ("wavefront", "monolithic"):
        s = once(schedule)
        if schedule not in best or s["samples_per_s"] > best[schedule]["samples_per_s"]:
            best[schedule] = s
print(f"machine: {os.cpu_count()} cores; model: models/tiny_mllm.sect ({best['wavefront']['steps']} steps); best of {n}")
for k, s in best.items():
    print(f"{k:10s} {s['samples_per_s']:8.1f} samples/s  wall {s['wall_s']:.2f} s  "
          f"scheduler share {100 * s['sched_share']:.2f}%  final loss {s['final_loss']:.4f}")
print(f"wavefront / monolithic: {best['wavefront']['samples_per_s'] / best['monolithic']['samples_per_s']:.3f}x")
PY
