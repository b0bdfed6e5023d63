#!/usr/bin/env bash
# Put bandwidth and latency (docs/PERFORMANCE.md, "Transfer engine"): one
# table of UcxTransport between two processes over each UCX transport here,
# ucx_perftest ucp_put_bw / ucp_put_lat on the same sizes and transports,
# memcpy and the same bytes as a CAF message; median and [min, max] over
# ROUNDS rounds (interleaved, so load drifts hit all rows alike).
#   bench/transport/run.sh [BUILD_DIR] [ROUNDS]      (defaults: build 3)
# Prints the command, the machine (nproc, CPU model) and the load average
# before and after. Raw lines of every round go to stderr.
build=${1:-build}
rounds=${2:-3}
. "$(dirname "$0")/common.sh"

for ((round = 1; round <= rounds; round++)); do
  echo "round $round"
  for tls in cma,sysv,self tcp; do
    nice -n 5 "$bin" ucx "$tls"
    nice -n 5 "$bin" ucx "$tls" progress
    for size in 4096 1048576 67108864; do
      # The same 1 GiB per bandwidth figure as ours (bench_transport_put's
      # bw_iters): 5,000 puts of 4 KiB took perftest 0.5-1 ms, too short to
      # time (it moved 18-51 GB/s between runs).
      case $size in 4096) bw_n=262144 lat_n=500 ;; 1048576) bw_n=1024 lat_n=50 ;; *) bw_n=16 lat_n=4 ;; esac
      allocs="md,mmap,heap"
      [ "$tls" = tcp ] || allocs+=" heap"
      for alloc in $allocs; do
        perftest "$tls" "$alloc" ucp_put_bw $size $bw_n
        perftest "$tls" "$alloc" ucp_put_lat $size $lat_n
      done
    done
  done
  nice -n 5 "$bin" memcpy
  nice -n 5 "$bin" caf
done | tee /dev/stderr >"$raw"

# One row per (what, size): median [min, max] of each measure over the rounds.
awk '
  function field(name,   i, kv) { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] } return "" }
  $1 == "round" { r = $2; next }
  { key = $1 " " field("size"); if (!(key in seen)) { seen[key] = 1; order[++nkeys] = key }
    v = field("bw_GBps"); if (v != "") byround[r, key, "bw"] = v
    v = field("lat_us");  if (v != "") byround[r, key, "lat"] = v
    rounds = r
    v = field("bw_GBps"); if (v != "") bw[key] = bw[key] " " v
    v = field("lat_us");  if (v != "") lat[key] = lat[key] " " v }
  function stats(list,   a, n, i, j, t) {
    n = split(list, a, " "); if (n == 0) return "-"
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return sprintf("%s [%s, %s]", a[int((n + 1) / 2)], a[1], a[n])
  }
  END {
    printf "| %-28s | %9s | %-30s | %-30s |\n", "what", "bytes", "bandwidth GB/s: median [min, max]", "latency us (round trip): median [min, max]"
    printf "|------------------------------|-----------|--------------------------------|--------------------------------|\n"
    for (k = 1; k <= nkeys; k++) { split(order[k], p, " "); printf "| %-28s | %9s | %-30s | %-30s |\n", p[1], p[2], stats(bw[order[k]]), stats(lat[order[k]]) }
    # Paired with perftest in the same round (seconds apart; this VM
    # switches between speed modes that last many seconds, so medians
    # taken apart can compare one mode with the other): ours / perftest
    # in bandwidth, perftest / ours in round trip; 1 = as fast.
    printf "\n| %-28s | %9s | %-30s | %-30s |\n", "what, paired with perftest", "bytes", "bandwidth ours/perftest", "round trip perftest/ours"
    printf "|------------------------------|-----------|--------------------------------|--------------------------------|\n"
    for (k = 1; k <= nkeys; k++) {
      split(order[k], p, " "); if (p[1] !~ /^ucx\(/) continue
      peer = p[1]; sub(/^ucx\(/, "ucx_perftest(", peer); sub(/,progress\)$/, ")", peer); peer = peer " " p[2]
      rb = ""; rl = ""
      for (i = 1; i <= rounds; i++) {
        if (byround[i, order[k], "bw"] != "" && byround[i, peer, "bw"] > 0) rb = rb " " sprintf("%.2f", byround[i, order[k], "bw"] / byround[i, peer, "bw"])
        if (byround[i, order[k], "lat"] > 0 && byround[i, peer, "lat"] != "") rl = rl " " sprintf("%.2f", byround[i, peer, "lat"] / byround[i, order[k], "lat"])
      }
      printf "| %-28s | %9s | %-30s | %-30s |\n", p[1], p[2], stats(rb), stats(rl)
    }
  }' "$raw"
echo "load after: $(uptime)"
