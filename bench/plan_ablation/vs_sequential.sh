#!/usr/bin/env bash
# Wavefront vs both sequential baselines (docs/planner.md, "Baselines";
# docs/PERFORMANCE.md §3): every model in models/ at 64 and 1,024 devices
# (kd_70b_to_8b on H200s), `--simulate --baseline sequential|sequential-ideal
# --steps STEPS --json`, one build. Usage: vs_sequential.sh BIN [STEPS]
set -euo pipefail
bin=$1 steps=${2:-4}
cd "$(dirname "$0")/../.."
uptime
run() {
  "$bin" "models/$1.sect" --config "configs/$2.toml" --simulate --baseline "$3" --steps "$steps" --json | tail -1
}
for m in llava15_7b omni_7b omni_whisper_7b video_7b kd_70b_to_8b kd_32b_to_1_5b internvl_20b internvl_26b \
  tiny_mllm tiny_kd; do
  for n in 64 1024; do
    device=h100
    [ "$m" = kd_70b_to_8b ] && device=h200
    paste <(run "$m" "${device}x$n" sequential) <(run "$m" "${device}x$n" sequential-ideal) | /usr/bin/python3 -c '
import json, sys
a, b = (json.loads(x) for x in sys.stdin.read().split("\t"))
print("%-16s %-9s wavefront %8.4f s | sequential %8.4f s %.3fx | sequential-ideal %8.4f s %.3fx | %s" % (
    sys.argv[1], sys.argv[2], a["iteration_s"], a["baseline"]["iteration_s"], a["speedup"],
    b["baseline"]["iteration_s"], b["speedup"], a["baseline"]["config"]))' "$m" "${device}x$n"
  done
done
uptime
