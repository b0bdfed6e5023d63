#!/usr/bin/env bash
# Training throughput of a model (default models/tiny_mllm.sect) on this
# machine: samples/s under --schedule wavefront and monolithic, each with the
# same search over the loss section's micro-batch size (the planner's choice,
# then 1, 2, 4, ... up to the global batch, written into a copy of the .sect),
# alternating runs, best of N each. The monolithic baseline runs every
# section at the loss section's micro-batch, so a size that leaves its lanes
# idle (one chunk for the whole step) must not decide the ratio: the
# headline compares the wavefront as the planner resolves it with the best
# monolithic run found. Also printed: the scheduler actor's share of step
# time, the final loss, and the load average before and after.
# The copies are written to a temporary folder, so MODEL must not name
# files relative to itself (models/tiny_mllm_files.sect does).
# Usage: bench/train_tiny_mllm/run.sh [BUILD] [N] [MODEL]
set -euo pipefail
build=${1:-build}
runs=${2:-3}
model=${3:-models/tiny_mllm.sect}
cd "$(dirname "$0")/../.."
/usr/bin/python3 - "$build/maestro-run" "$runs" "$model" <<'PY'
import json, os, subprocess, sys, tempfile
run, n, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]

program = json.loads(subprocess.run([run, model, "--print", "json"], capture_output=True, text=True,
                                    check=True).stdout)
loss = next(s for s in program["sections"] if s["loss"])
batch = program["train"]["global_batch"]
lines = open(model).read().split("\n")

def with_micro_batch(m):
    """The model's text with `micro_batch = m;` in the loss section's block."""
    out = list(lines)
    first = loss["loc"]["line"] - 1
    depth, seen = 0, False
    for i in range(first, len(out)):
        depth += out[i].count("{") - out[i].count("}")
        seen = seen or "{" in out[i]
        if seen and depth == 1 and out[i].strip().startswith("micro_batch"):
            out[i] = f"  micro_batch = {m};"
            return "\n".join(out)
        if seen and depth == 0:
            out.insert(i, f"  micro_batch = {m};")
            return "\n".join(out)
    raise SystemExit(f"{model}: no end to section {loss['name']}")

tmp = tempfile.mkdtemp(prefix="train_tiny_mllm.")
variants = {"planner": model}
m = 1
while m <= batch:
    path = os.path.join(tmp, f"mb{m}.sect")
    open(path, "w").write(with_micro_batch(m))
    variants[f"mb {m}"] = path
    m *= 2

def once(path, schedule):
    p = subprocess.run([run, path, "--json", "--quiet", "--schedule", schedule],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])

print(f"machine: {os.cpu_count()} cores; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
      f"model: {model}; loss section {loss['name']}; best of {n}")
best = {}
for i in range(n):
    for name, path in variants.items():
        for schedule in ("wavefront", "monolithic"):
            s = once(path, schedule)
            key = (name, schedule)
            if key not in best or s["samples_per_s"] > best[key]["samples_per_s"]:
                best[key] = s
print(f"{'micro-batch':12s} {'wavefront':>10s} {'monolithic':>11s}   samples/s (scheduler share w / m; final loss w / m)")
for name in variants:
    w, m_ = best[(name, "wavefront")], best[(name, "monolithic")]
    print(f"{name:12s} {w['samples_per_s']:10.1f} {m_['samples_per_s']:11.1f}   "
          f"({100 * w['sched_share']:.2f}% / {100 * m_['sched_share']:.2f}%; "
          f"{w['final_loss']:.4f} / {m_['final_loss']:.4f})")
top = lambda schedule: max((k[0] for k in best if k[1] == schedule),
                           key=lambda v: best[(v, schedule)]["samples_per_s"])
w_plan = best[("planner", "wavefront")]["samples_per_s"]
w_top, m_top = top("wavefront"), top("monolithic")
w_best, m_best = best[(w_top, "wavefront")]["samples_per_s"], best[(m_top, "monolithic")]["samples_per_s"]
print(f"wavefront (planner) / best monolithic ({m_top}): {w_plan / m_best:.3f}x")
print(f"best wavefront ({w_top}) / best monolithic ({m_top}): {w_best / m_best:.3f}x")
print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
for path in variants.values():
    if path.startswith(tmp): os.remove(path)
os.rmdir(tmp)
PY
