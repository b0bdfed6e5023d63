#!/usr/bin/env bash
# Wall time of a whole `maestro-run models/omni_7b.sect --check` process
# (start-up, parse, import, checks, counts, summary, exit): 5 warm-up runs,
# then RUNS timed runs; prints the median and p90 in milliseconds, and the same
# for /bin/true: the cost of starting any process on this machine.
# Usage: bench/check_time/run.sh [BUILD_DIR] [RUNS]   (BUILD_DIR default: build)
set -euo pipefail
build=${1:-build}
runs=${2:-50}
cd "$(dirname "$0")/../.."
bin="$build/maestro-run"
model=models/omni_7b.sect
[[ -x "$bin" ]] || { echo "no $bin: build the maestro-run target first" >&2; exit 1; }

# time_runs LABEL COMMAND...: RUNS timed runs after 5 warm-up runs, one summary line.
time_runs() {
  local label=$1
  shift
  for _ in 1 2 3 4 5; do "$@" > /dev/null; done
  local times=() start end
  for ((i = 0; i < runs; i++)); do
    start=${EPOCHREALTIME/./}  # microseconds, read by bash itself (no `date` process in the timing)
    "$@" > /dev/null
    end=${EPOCHREALTIME/./}
    times+=($(( end - start )))
  done
  local sorted=($(printf '%s\n' "${times[@]}" | sort -n))
  printf '%s: %d runs, median %.2f ms, p90 %.2f ms, min %.2f ms, max %.2f ms\n' "$label" "$runs" \
    "$(bc -l <<< "${sorted[$(( runs / 2 ))]} / 1000")" "$(bc -l <<< "${sorted[$(( (runs * 9 + 9) / 10 - 1 ))]} / 1000")" \
    "$(bc -l <<< "${sorted[0]} / 1000")" "$(bc -l <<< "${sorted[$(( runs - 1 ))]} / 1000")"
}

time_runs "maestro-run $model --check" "$bin" "$model" --check
time_runs "/bin/true (process start floor)" /bin/true
printf 'load average (1/5/15 min): %s\n' "$(cut -d" " -f1-3 /proc/loadavg)"
printf 'machine: %s cores, %s\n' "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
