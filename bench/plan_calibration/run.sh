#!/usr/bin/env bash
# The cost model's calibration points (docs/PERFORMANCE.md, "Calibration"):
#   1. Llama-2-7B, seq 4096, 8×H100, planner-tuned: simulated MFU
#      (tests/plan/cost_test.cpp checks its range against Megatron-LM's);
#   2. GPT-3 175B, seq 2048, batch 1536, full recompute, 1,024×A100
#      (Narayanan et al. 2021 §5.1: 140 TFLOP/s per GPU → 31.47 s per step);
#   3. Llama-3-70B, seq 8192, batch 128, 64×H100 BF16 (NeMo AutoModel's
#      performance summary: 18.90 s per step, 389 model TFLOP/s per GPU).
# Prints each simulated step beside the published one (cost_test checks
# points 2 and 3 stay inside their stated bands).
# Usage: bench/plan_calibration/run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
uptime
"$build/tests/plan/test_plan" --run_test=cost/llama2_7b_calibration_in_megatron_mfu_range --log_level=message
"$build/tests/plan/test_plan" --run_test=cost/published_points_gpt3_175b_and_llama3_70b --log_level=message
"$build/maestro-run" bench/plan_calibration/llama2_7b.sect --config configs/h100x8.toml --simulate \
  --baseline megatron --steps 1 | tail -n 6
"$build/maestro-run" bench/plan_calibration/gpt3_175b.sect --config bench/plan_calibration/a100x1024.toml \
  --simulate --baseline megatron --steps 1 | tail -n 5
"$build/maestro-run" bench/plan_calibration/llama3_70b.sect --config configs/h100x64.toml --simulate \
  --baseline megatron --steps 1 | tail -n 5
