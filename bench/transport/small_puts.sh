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
build=${1:-build}
rounds=${2:-12}
. "$(dirname "$0")/common.sh"

# Every line in the bench's format (what size=... bw_GBps=... lat_us=...);
# only the 4 KiB lines are kept.
for ((round = 1; round <= rounds; round++)); do
  nice -n 5 "$bin" ucx tcp                # the sleeping waiter (the tensor server's puts)
  nice -n 5 "$bin" ucx tcp progress       # the waiter that progresses (a collective's)
  nice -n 5 "$bin" ucx cma,sysv,self
  perftest tcp md,mmap,heap ucp_put_lat 4096 500
  perftest cma,sysv,self md,mmap,heap ucp_put_bw 4096 262144
done | awk '/ size=4096 /' | tee /dev/stderr >"$raw"

awk '
  function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "" }
  # the tcp rows: the round trip; the shared-memory rows: the bandwidth
  { x = field($1 ~ /tcp/ ? "lat_us" : "bw_GBps"); if (x != "") v[$1] = v[$1] " " x }
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
