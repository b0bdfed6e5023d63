#!/usr/bin/env bash
# The cost model's calibration case: Llama-2-7B, seq 4096, 8×H100, planner-tuned;
# prints the simulated MFU (tests/plan/cost_test.cpp checks its range) and the
# plan. Usage: bench/plan_calibration/run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
"$build/tests/plan/test_plan" --run_test=cost/llama2_7b_calibration_in_megatron_mfu_range --log_level=message
"$build/maestro-run" bench/plan_calibration/llama2_7b.sect --config configs/h100x8.toml --simulate \
  --baseline megatron --steps 1 | tail -n 6
