#!/usr/bin/env bash
# Put bandwidth and latency (docs/PERFORMANCE.md, "Transfer engine"):
# UcxTransport between two processes over each UCX transport of this host,
# ucx_perftest ucp_put_bw / ucp_put_lat on the same sizes and transports,
# memcpy and the same bytes as a CAF message. Usage: run.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bin=$build/bench/transport/bench_transport_put
uptime
for tls in cma,sysv,self tcp; do
  nice -n 5 "$bin" ucx "$tls"
  for size in 4096 1048576 67108864; do
    case $size in 4096) bw_n=20000 lat_n=2000 ;; 1048576) bw_n=1024 lat_n=100 ;; *) bw_n=16 lat_n=8 ;; esac
    for test in ucp_put_bw ucp_put_lat; do
      n=$bw_n; [ $test = ucp_put_lat ] && n=$lat_n
      port=$((20000 + RANDOM % 20000))
      UCX_TLS=$tls timeout 120 nice -n 5 ucx_perftest -p $port >/dev/null 2>&1 &
      server=$!
      sleep 0.5
      # Final: iterations, latency 50%ile/average/overall (µs), bandwidth average/overall (MiB/s), message rates
      UCX_TLS=$tls timeout 120 nice -n 5 ucx_perftest 127.0.0.1 -p $port -t $test -s $size -n $n 2>&1 |
        awk -v tls="$tls" -v size=$size -v test=$test '/Final/ {
          if (test == "ucp_put_bw") printf "ucx_perftest(%s) %s size=%s bw_GBps=%.3f iters=%s\n", tls, test, size, $7 * 1048576 / 1e9, $2;
          else printf "ucx_perftest(%s) %s size=%s lat_us=%.1f (one way, median) iters=%s\n", tls, test, size, $3, $2 }'
      wait $server || true
    done
  done
done
nice -n 5 "$bin" memcpy
nice -n 5 "$bin" caf
uptime
