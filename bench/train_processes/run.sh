#!/usr/bin/env bash
# tiny_mllm's training throughput over processes (docs/PERFORMANCE.md §8):
# one process against three (`--processes 3`) with UCX over shared memory
# (UCX_TLS=cma,sysv,self) and over TCP on loopback (UCX_TLS=tcp); per
# configuration the best of N runs (all of them interleaved, so load drifts
# hit every row alike), with the step time, the scheduler actor's share of
# the wall time (issuing and routing tasks, and with it the control
# messages), and the tensors put between processes. More builds (a before
# and an after) are interleaved the same way.
#   bench/train_processes/run.sh [BUILD] [N] [MORE_BUILDS ...]     (defaults: build 3)
set -euo pipefail
builds=("${1:-build}")
runs=${2:-3}
[ $# -gt 2 ] && builds+=("${@:3}")
cd "$(dirname "$0")/../.."
echo "command: $0 ${builds[0]} $runs ${builds[*]:1}   ($(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "machine: nproc=$(nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "load before: $(uptime)"
/usr/bin/python3 - "$runs" "${builds[@]}" <<'PY'
import json, os, subprocess, sys
runs, builds = int(sys.argv[1]), sys.argv[2:]
configs = [("1 process", 1, None), ("3 processes, shm", 3, "cma,sysv,self"), ("3 processes, tcp", 3, "tcp")]
def once(build, processes, tls):
    env = dict(os.environ)
    env.pop("UCX_TLS", None)
    if tls: env["UCX_TLS"] = tls
    p = subprocess.run([f"{build}/maestro-run", "models/tiny_mllm.sect", "--json", "--quiet",
                        "--processes", str(processes)], capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.exit(f"run.sh: {build} --processes {processes} UCX_TLS={tls} exited {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])
best = {}
for i in range(runs):
    for build in builds:
        for name, processes, tls in configs:
            s = once(build, processes, tls)
            key = (build, name)
            print(f"  round {i + 1}: {build:24s} {name:18s} {s['samples_per_s']:7.1f} samples/s", file=sys.stderr)
            if key not in best or s["samples_per_s"] > best[key]["samples_per_s"]:
                best[key] = s
print(f"model: models/tiny_mllm.sect ({next(iter(best.values()))['steps']} steps); best of {runs}")
print("| build | configuration | samples/s | step ms | vs 1 process | scheduler share | tensor puts | MB put | final loss |")
print("|---|---|---|---|---|---|---|---|---|")
for build in builds:
    one = best[(build, "1 process")]["samples_per_s"]
    for name, _, _ in configs:
        s = best[(build, name)]
        print(f"| {build} | {name} | {s['samples_per_s']:.1f} | {1000 * s['wall_s'] / s['steps']:.1f} | "
              f"{s['samples_per_s'] / one:.3f} | {100 * s['sched_share']:.2f} % | {s.get('tensor_puts', 0)} | "
              f"{s.get('tensor_bytes_put', 0) / 1e6:.1f} | {s['final_loss']:.6f} |")
PY
echo "load after: $(uptime)"
