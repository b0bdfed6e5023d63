#!/usr/bin/env bash
# Engine vs PyTorch 1.13 on this CPU: one training step (forward, loss,
# backward, AdamW) of two transformers, ours and torch's interleaved round by
# round in one run, same thread count. Usage: run.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
threads=${THREADS:-2}
cd "$(dirname "$0")/../.."
[ -n "${NO_BUILD:-}" ] || cmake --build "$build" --target bench_engine_step >/dev/null
ours="${PIN:-} $build/bench/bench_engine_step"
py="${PIN:-} /usr/bin/python3"
tiny="--layers 2 --hidden 128 --heads 4 --ffn 384 --vocab 256 --samples 32 --tokens 48"
large="--layers 4 --hidden 512 --heads 8 --ffn 1536 --vocab 32000 --samples 8 --tokens 512"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
$ours --threads "$threads" --steps 1 --warmup 0 --sgemm | $py -c 'import json,sys; print("sgemm peak (1024^3, best of 5): %.1f GFLOP/s" % json.load(sys.stdin)["sgemm_gflops"])'
for model in tiny large; do
  args=${!model}
  steps=10; warmup=2; [ "$model" = large ] && steps=3 && warmup=1
  for r in $(seq "$rounds"); do
    $ours $args --threads "$threads" --steps $steps --warmup $warmup --sgemm
    $py bench/engine_vs_torch/torch_step.py $args --threads "$threads" --steps $steps --warmup $warmup
  done > "/tmp/engine_vs_torch_$model.jsonl"
  $py - "$model" "/tmp/engine_vs_torch_$model.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
ours = [s for r in rows if r["impl"] == "maestro" for s in r["step_s"]]
torch = [s for r in rows if r["impl"] == "torch" for s in r["step_s"]]
m = [r for r in rows if r["impl"] == "maestro"]
flops = m[0]["flops_per_step"]
peak = statistics.median(r["sgemm_gflops"] for r in m)
mo, mt = statistics.median(ours), statistics.median(torch)
print(f"{sys.argv[1]}: maestro median {mo*1e3:.1f} ms/step ({flops/mo/1e9:.1f} GFLOP/s, {flops/mo/1e9/peak*100:.0f}% of sgemm {peak:.1f}), "
      f"torch median {mt*1e3:.1f} ms/step ({flops/mt/1e9:.1f} GFLOP/s); torch/maestro = {mt/mo:.2f}x  [{len(ours)} vs {len(torch)} steps]")
PY
done
