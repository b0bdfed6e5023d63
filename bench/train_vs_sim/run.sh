#!/usr/bin/env bash
# Real training step time on this CPU against the simulator's prediction
# for the same plan on this CPU as measured by --calibrate: one device
# (every section shares the machine's cores, as in a real run). Two models:
# tiny_mllm (STEPS steps) and an LLM on long sequences (12 steps), where
# attention is a large share of the step.
# Usage: bench/train_vs_sim/run.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-40}
cd "$(dirname "$0")/../.."
run="$build/maestro-run"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$run" --calibrate "$dir/cpu.toml"
printf '[cluster]\ndevice = "%s"\ndevices = 1\nnodes = 1\ndevices_per_node = 1\n' "$dir/cpu.toml" > "$dir/cluster.toml"
for entry in "tiny_mllm_cpu_plan.sect $steps" "long_llm_cpu_plan.sect 12"; do
  set -- $entry
  model=bench/train_vs_sim/$1
  sim=$("$run" "$model" --simulate --steps 8 --json --config "$dir/cluster.toml" | tail -1)
  real=$("$run" "$model" --steps "$2" --quiet --json | tail -1)
  /usr/bin/python3 - "$1" "$sim" "$real" <<'PY'
import json, sys
name, sim, real = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
step = real["wall_s"] / real["steps"]
print(f"{name}: simulated iteration {sim['iteration_s']*1e3:.1f} ms (lower bound {sim['lower_bound_s']*1e3:.1f} ms), "
      f"measured {step*1e3:.1f} ms/step over {real['steps']} steps (wall {real['wall_s']:.2f} s); "
      f"measured / simulated = {step / sim['iteration_s']:.2f}")
PY
done
