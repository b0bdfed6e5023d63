#!/usr/bin/env bash
# Planner + scheduler (+ simulator) wall time for omni_7b with a global batch
# of 4,096 on 1,024 H100s: whole process, one step. Usage: bench/plan_scale/run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
for args in "--print schedule" "--simulate --steps 1"; do
  echo "-- $args"
  /usr/bin/time -f "%e s wall, %M KB max RSS" "$build/maestro-run" bench/plan_scale/omni_7b_gb4096.sect $args \
    --config bench/plan_scale/h100x1024.toml > /dev/null
done
