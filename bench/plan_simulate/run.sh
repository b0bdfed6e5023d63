#!/usr/bin/env bash
# Wavefront vs tuned Megatron on the example models (docs/PERFORMANCE.md, section 3):
# simulated iteration, lower bound, utilisation, megatron's best configuration
# and the speedup, mean of 4 sampled steps. Usage: bench/plan_simulate/run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
run() {
  echo "-- $*"
  "$build/maestro-run" "$@" --simulate --baseline megatron --steps 4 | tail -n +2
}
run models/llava15_7b.sect --config configs/h100x8.toml
run bench/plan_simulate/llava15_7b_auto.sect --config configs/h100x8.toml
run models/llava15_7b.sect --config configs/h100x64.toml
run bench/plan_simulate/llava15_7b_auto.sect --config configs/h100x64.toml
run models/omni_7b.sect --config configs/h100x64.toml
run bench/plan_simulate/omni_7b_auto.sect --config configs/h100x64.toml
run models/kd_70b_to_8b.sect --config configs/h200x64.toml
run bench/plan_simulate/kd_70b_to_8b_pp_auto.sect --config configs/h100x64.toml
echo "-- models/kd_70b_to_8b.sect --config configs/h100x64.toml (fits with the optimizer sharded, as models/ writes it; unsharded the student does not)"
"$build/maestro-run" models/kd_70b_to_8b.sect --config configs/h100x64.toml --simulate || echo "exit status $?"
