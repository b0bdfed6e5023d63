#!/usr/bin/env bash
# Wavefront vs sequential, two builds side by side (docs/PERFORMANCE.md §3):
# every model in models/ at 64 and 1,024 devices (kd_70b_to_8b on H200s),
# `--simulate --baseline sequential --steps STEPS --json`. The sequential
# baseline is each build's own. Usage: before_after.sh BEFORE_BIN AFTER_BIN [STEPS]
# BEFORE_MODELS=DIR: the before binary reads its models from DIR (the models
# of its own commit, e.g. a git worktree's models/, when the files changed).
set -euo pipefail
before=$1 after=$2 steps=${3:-4}
cd "$(dirname "$0")/../.."
uptime
summary() {
  local models=models
  [ "$1" = "$before" ] && models=${BEFORE_MODELS:-models}
  "$1" "$models/$2.sect" --config "configs/$3.toml" --simulate --baseline sequential --steps "$steps" --json | tail -1 |
    /usr/bin/python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print("%.4f s / seq %.4f s = %.3fx (lb %.4f s)" % (d["iteration_s"], d["baseline"]["iteration_s"], d["speedup"], d["lower_bound_s"]))'
}
for m in llava15_7b omni_7b omni_whisper_7b video_7b kd_70b_to_8b kd_32b_to_1_5b internvl_20b internvl_26b \
  tiny_mllm tiny_kd; do
  for n in 64 1024; do
    device=h100
    [ "$m" = kd_70b_to_8b ] && device=h200
    echo "$m ${device}x$n | before: $(summary "$before" "$m" "${device}x$n") | after: $(summary "$after" "$m" "${device}x$n")"
  done
done
uptime
