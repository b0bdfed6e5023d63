#!/usr/bin/env bash
# The two 4 KiB figures of run.sh that are bimodal on this VM, ours against
# ucx_perftest over many interleaved rounds (docs/PERFORMANCE.md §8, "4 KiB
# puts over many rounds"): the round trip over tcp and the bandwidth over
# shared memory. Both sides' figures fall, run by run, into one of two
# modes (tcp round trip about 21 or 28 µs; perftest's shared-memory
# bandwidth 20-28 or about 45 GB/s), so a median over 3 rounds (run.sh) can
# compare one side's fast mode with the other's slow one; this gives each
# side ROUNDS runs, alternating.
#   bench/transport/small_puts.sh [BUILD_DIR] [ROUNDS]    (defaults: build 12)
# Prints the command, the machine and the load average before and after,
# each side's figures sorted, their medians and the ratio to perftest's
# (ours / perftest in bandwidth, perftest / ours in round trip).
set -euo pipefail
build=${1:-build}
rounds=${2:-12}
bin=$build/bench/transport/bench_transport_put
[ -x "$bin" ] || { echo "small_puts.sh: no $bin (cmake --build $build --target bench_transport_put)" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "small_puts.sh: no ucx_perftest (apt-get install ucx-utils)" >&2; exit 2; }
echo "command: $0 $build $rounds   ($(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "machine: nproc=$(nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), UCX $(ucx_info -v | sed -n "s/^# Version //p")"
echo "load before: $(uptime)"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

# TLS TEST N AWK: one perftest run at 4 KiB (its "Final" line: iterations,
# one-way latency 50%ile, ... (µs), bandwidth average, overall (MiB/s), ...)
perftest() {
  local port=$((20000 + RANDOM % 20000)) server
  UCX_TLS=$1 timeout 60 nice -n 5 ucx_perftest -p $port >/dev/null 2>&1 &
  server=$!
  sleep 0.5
  UCX_TLS=$1 timeout 60 nice -n 5 ucx_perftest 127.0.0.1 -p $port -t $2 -s 4096 -n $3 2>&1 | awk "$4"
  wait $server || true
}
for ((round = 1; round <= rounds; round++)); do
  # ours: the sleeping waiter and the waiter that progresses (run.sh's rows)
  for variant in "" progress; do
    nice -n 5 "$bin" ucx tcp $variant | awk -v what="ucx(tcp${variant:+,$variant})" \
      '/ size=4096 / { for (i = 2; i <= NF; i++) if ($i ~ /^lat_us=/) { sub(/lat_us=/, "", $i); print what, $i } }'
  done
  nice -n 5 "$bin" ucx cma,sysv,self | awk \
    '/ size=4096 / { for (i = 2; i <= NF; i++) if ($i ~ /^bw_GBps=/) { sub(/bw_GBps=/, "", $i); print "ucx(cma,sysv,self)", $i } }'
  perftest tcp ucp_put_lat 500 '/Final/ { printf "ucx_perftest(tcp) %.1f\n", 2 * $3 }'  # round trip = 2 x one-way median
  perftest cma,sysv,self ucp_put_bw 262144 '/Final/ { printf "ucx_perftest(cma,sysv,self) %.3f\n", $7 * 1048576 / 1e9 }'
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
    sorted(v["ucx_perftest(tcp)"]); rt = med
    sorted(v["ucx_perftest(cma,sysv,self)"]); bw = med
    for (w in v) {
      s = sorted(v[w])
      if (w ~ /tcp/) printf "tcp 4 KiB round trip          %-28s median %6.1f us    perftest/ours %.2f  rounds:%s\n", w, med, rt / med, s
      else printf "shared memory 4 KiB bandwidth %-28s median %6.2f GB/s  ours/perftest %.2f  rounds:%s\n", w, med, med / bw, s
    }
  }' "$raw" | sort
echo "load after: $(uptime)"
