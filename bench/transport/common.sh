# Sourced by run.sh and small_puts.sh (bench/transport/): with `build` and
# `rounds` set, checks the tools, prints the command, the machine and the
# load average, makes the raw-lines file `raw` and defines `perftest`.
set -euo pipefail
name=$(basename "$0")
bin=$build/bench/transport/bench_transport_put
[ -x "$bin" ] || { echo "$name: no $bin (cmake --build $build --target bench_transport_put)" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "$name: no ucx_perftest (apt-get install ucx-utils)" >&2; exit 2; }
echo "command: $0 $build $rounds   ($(date -u +%FT%TZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "machine: nproc=$(nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), UCX $(ucx_info -v | sed -n "s/^# Version //p")"
echo "load before: $(uptime)"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

# perftest TLS ALLOC TEST SIZE ITERS -> one line in the bench's format.
# ALLOC (UCX_MEM_ALLOC_METHODS) "md,mmap,heap" is UCX's default: its buffers
# come from the sysv memory domain, which shared-memory puts write into
# directly; "heap" gives it malloc'd buffers like our pools, reachable only
# through CMA between processes.
perftest() {
  local tls=$1 alloc=$2 test=$3 size=$4 n=$5 port=$((20000 + RANDOM % 20000)) server what="ucx_perftest($1)"
  [ "$alloc" = heap ] && what="ucx_perftest($1,heap)"
  UCX_MEM_ALLOC_METHODS=$alloc UCX_TLS=$tls timeout 60 nice -n 5 ucx_perftest -p $port >/dev/null 2>&1 &
  server=$!
  sleep 0.5
  # Final: iterations, latency 50%ile/average/overall (µs), bandwidth average/overall (MiB/s), message rates
  UCX_MEM_ALLOC_METHODS=$alloc UCX_TLS=$tls timeout 60 nice -n 5 ucx_perftest 127.0.0.1 -p $port -t $test -s $size -n $n 2>&1 |
    awk -v tls="$what" -v size=$size -v test=$test '/Final/ {
      if (test == "ucp_put_bw") printf "%s size=%s bw_GBps=%.3f\n", tls, size, $7 * 1048576 / 1e9;
      else printf "%s size=%s lat_us=%.1f\n", tls, size, 2 * $3 }'  # round trip = 2 x one-way median
  wait $server || true
}

