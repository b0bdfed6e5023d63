#!/usr/bin/env bash
# The 4 KiB round trip over UCX's tcp transport, ours against ucx_perftest,
# over many interleaved rounds (docs/PERFORMANCE.md §8, "The tcp round trip
# over many rounds"). On this 2-core VM both sides' round trips fall into
# one of two modes (about 21 µs or about 28 µs) from one run to the next,
# so a median over 3 rounds (run.sh) can compare one side's fast mode with
# the other's slow one; this gives each side ROUNDS runs, alternating.
#   bench/transport/round_trip.sh [BUILD_DIR] [ROUNDS]    (defaults: build 12)
# Prints the command, the machine and the load average before and after,
# each side's round trips sorted, their medians and perftest / ours.
set -euo pipefail
build=${1:-build}
rounds=${2:-12}
bin=$build/bench/transport/bench_transport_put
[ -x "$bin" ] || { echo "round_trip.sh: no $bin (cmake --build $build --target bench_transport_put)" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "round_trip.sh: no ucx_perftest (apt-get install ucx-utils)" >&2; exit 2; }
echo "command: $0 $build $rounds   ($(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "machine: nproc=$(nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), UCX $(ucx_info -v | sed -n "s/^# Version //p")"
echo "load before: $(uptime)"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

for ((round = 1; round <= rounds; round++)); do
  # ours: the sleeping waiter and the waiter that progresses (run.sh's rows)
  for variant in "" progress; do
    nice -n 5 "$bin" ucx tcp $variant | awk -v what="ucx(tcp${variant:+,$variant})" \
      '/ size=4096 / { for (i = 2; i <= NF; i++) if ($i ~ /^lat_us=/) { sub(/lat_us=/, "", $i); print what, $i } }'
  done
  port=$((20000 + RANDOM % 20000))
  UCX_TLS=tcp timeout 60 nice -n 5 ucx_perftest -p $port >/dev/null 2>&1 &
  server=$!
  sleep 0.5
  # Final: iterations, one-way latency 50%ile ... (µs); round trip = 2 x one-way median
  UCX_TLS=tcp timeout 60 nice -n 5 ucx_perftest 127.0.0.1 -p $port -t ucp_put_lat -s 4096 -n 500 2>&1 |
    awk '/Final/ { printf "ucx_perftest(tcp) %.1f\n", 2 * $3 }'
  wait $server || true
done | tee /dev/stderr >"$raw"

awk '
  { v[$1] = v[$1] " " $2 }
  function sorted(list,   a, n, i, j, t, out) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    med = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    for (i = 1; i <= n; i++) out = out " " a[i]
    return out
  }
  END {
    sorted(v["ucx_perftest(tcp)"]); peer = med
    for (w in v) {
      s = sorted(v[w])
      printf "%-20s median %5.1f us  perftest/ours %.2f  rounds:%s\n", w, med, peer / med, s
    }
  }' "$raw" | sort
echo "load after: $(uptime)"
