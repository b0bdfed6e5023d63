#!/usr/bin/env bash
# Planning time where the planner searches by simulation (docs/planner.md):
# the whole process of `maestro-run MODEL --simulate --steps 1 --json` on the
# workloads whose search is longest, plus one too large to search.
# With a second build the two alternate run by run; each line then gives
# both medians, their ratio (this build / the other) and whether the two
# printed the same plan and results (the JSON summary, byte for byte).
# THREADS=N plans on N threads (`[runtime] threads` added to a copy of each
# cluster config; default: the configs as they are, every core).
# Usage: [THREADS=N] bench/plan_time/run.sh [BUILD_DIR [OTHER_BUILD_DIR [RUNS]]]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
other=${2:-}
runs=${3:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

workloads=(
  "models/internvl_20b.sect configs/h100x64.toml"
  "models/internvl_26b.sect configs/h100x64.toml"
  "models/omni_whisper_7b.sect configs/h100x8.toml"
  "models/video_7b.sect configs/h100x8.toml"
  "bench/plan_scale/omni_7b_gb4096.sect bench/plan_scale/h100x1024.toml"
)

# Seconds of one run; its stdout's last line (the JSON summary) to $3.
timed() {
  local bin=$1 args=$2 summary=$3 t0 t1
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  "$bin/maestro-run" $args | tail -n 1 > "$summary"
  t1=$(date +%s%N)
  awk -v ns=$((t1 - t0)) 'BEGIN {printf "%.3f", ns / 1e9}'
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)  runs: $runs  build: $build${other:+  other: $other}  threads: ${THREADS:-all cores}"
for w in "${workloads[@]}"; do
  read -r model cluster <<< "$w"
  if [[ -n ${THREADS:-} ]]; then
    cp "$cluster" "$out/cluster.toml"
    printf '\n[runtime]\nthreads = %s\n' "$THREADS" >> "$out/cluster.toml"
    name_cluster=$cluster cluster=$out/cluster.toml
  else
    name_cluster=$cluster
  fi
  args="$model --simulate --steps 1 --json --config $cluster"
  ours="" theirs="" same=yes
  for ((i = 0; i < runs; i++)); do
    ours+=" $(timed "$build" "$args" "$out/ours.json")"
    if [[ -n $other ]]; then
      theirs+=" $(timed "$other" "$args" "$out/theirs.json")"
      cmp -s "$out/ours.json" "$out/theirs.json" || same=no
    fi
  done
  name="$(basename "$model" .sect) on $(basename "$name_cluster" .toml)"
  if [[ -n $other ]]; then
    a=$(echo "$ours" | median) b=$(echo "$theirs" | median)
    printf '%-32s %8.2f s  other %8.2f s  ratio %.3f  same result: %s\n' "$name" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {print a / b}')" "$same"
  else
    printf '%-32s %8.2f s  (runs:%s)\n' "$name" "$(echo "$ours" | median)" "$ours"
  fi
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
