#!/usr/bin/env bash
# Wavefront vs sequential with each lever off in turn (docs/PERFORMANCE.md §3),
# every model in models/ at 64 and 1,024 devices (kd_70b_to_8b on H200s: its
# student does not fit an H100). Usage: bench/plan_ablation/run.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build=${1:-build}
steps=${2:-4}
cd "$(dirname "$0")/../.."
uptime
for m in llava15_7b omni_7b omni_whisper_7b video_7b kd_70b_to_8b kd_32b_to_1_5b internvl_20b internvl_26b \
  tiny_mllm tiny_kd; do
  for n in 64 1024; do
    device=h100
    [ "$m" = kd_70b_to_8b ] && device=h200
    "$build/bench/bench_plan_ablation" "models/$m.sect" "configs/${device}x$n.toml" "$steps"
  done
done
uptime
