#!/usr/bin/env bash
# Peak resident memory of each process of a run over processes
# (docs/PERFORMANCE.md §8): runs maestro-run on a model with --processes 2
# for each build given, one after the other, and prints each process's
# VmHWM (sampled every 0.1 s from /proc while it runs), the losses and the
# throughput. The default model is kd_big.sect: a frozen teacher handing
# its student 153.7 MB of logits a sample, 16 samples a step.
#   bench/train_processes/peak_memory.sh [MODEL] BUILD [MORE_BUILDS ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=bench/train_processes/kd_big.sect
[ $# -gt 0 ] && [[ "$1" == *.sect ]] && { model=$1; shift; }
[ $# -gt 0 ] || set -- build
echo "command: $0 $model $*   ($(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "machine: nproc=$(nproc), $(free -g | awk '/^Mem/ {print $2}') GiB; load before: $(uptime)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for build in "$@"; do
  "$build/maestro-run" "$model" --processes 2 --json --quiet > "$out" 2>&1 &
  root=$!
  declare -A peak=() role=()
  while kill -0 "$root" 2>/dev/null; do
    for p in $root $(pgrep -P "$root" || true); do
      h=$(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
      [ -n "$h" ] || continue
      [ "${peak[$p]:-0}" -lt "$h" ] && peak[$p]=$h
      [ "$p" = "$root" ] && role[$p]=coordinator || role[$p]=worker
    done
    sleep 0.1
  done
  st=0; wait "$root" || st=$?
  echo "== $build (status $st)"
  for p in "${!peak[@]}"; do echo "  ${role[$p]}: peak $(( ${peak[$p]} / 1024 )) MiB"; done | sort
  tail -1 "$out" | /usr/bin/python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); print("  losses", j["losses"], "samples/s %.3f" % j["samples_per_s"])' || tail -3 "$out"
done
echo "load after: $(uptime)"
