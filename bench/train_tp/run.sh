#!/usr/bin/env bash
# Tensor parallelism on this CPU: models/tiny_mllm.sect with its LLM at
# tp = 1 and tp = 2 (dp = 1 both; alternating runs, best of N each): time
# per step, the tp = 2 overhead, the losses' largest relative difference,
# and the tp all-reduce bytes of step 0 counted by the runtime against the
# planner's (--print plan). Usage: bench/train_tp/run.sh [BUILD] [N] [STEPS]
set -euo pipefail
build=${1:-build}
runs=${2:-3}
steps=${3:-10}
cd "$(dirname "$0")/../.."
uptime
/usr/bin/python3 - "$build/maestro-run" "$runs" "$steps" <<'PY'
import json, os, re, subprocess, sys, tempfile
run, n, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
src = open("models/tiny_mllm.sect").read()
tmp = tempfile.mkdtemp(prefix="bench-tp-")
models = {}
for tp in (1, 2):
    path = os.path.join(tmp, f"tp{tp}.sect")
    open(path, "w").write(src.replace("parallel { dp = auto; }", f"parallel {{ tp = {tp}; dp = 1; }}", 1))
    models[tp] = path
def once(tp, *args):
    p = subprocess.run([run, models[tp], "--json", "--quiet", *args], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])
best = {}
for i in range(n):
    for tp in (1, 2):
        s = once(tp, "--steps", steps)
        if tp not in best or s["wall_s"] < best[tp]["wall_s"]:
            best[tp] = s
print(f"machine: {os.cpu_count()} cores; models/tiny_mllm.sect, llm at tp 1 and 2 (dp 1), {steps} steps, best of {n}")
for tp, s in best.items():
    print(f"tp {tp}: {1000 * s['wall_s'] / s['steps']:7.1f} ms/step  final loss {s['final_loss']:.6f}")
print(f"tp 2 / tp 1 time per step: {best[2]['wall_s'] / best[1]['wall_s']:.3f}x")
rel = max(abs(a - b) / abs(b) for a, b in zip(best[2]["losses"], best[1]["losses"]))
print(f"largest relative loss difference tp 2 vs tp 1: {rel:.2e}")
plan = subprocess.run([run, models[2], "--print", "plan"], capture_output=True, text=True, check=True).stdout
planned = sum(int(b) for b in re.findall(r"tp all-reduce per step \(step 0[^)]*\): (\d+) bytes", plan))
counted = once(2, "--steps", "1")["tp_all_reduce_bytes"]
print(f"tp all-reduce bytes in step 0: planner {planned}, runtime {counted} ({100 * (counted - planned) / planned:+.2f} %)")
PY
uptime
