#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one command (docs/gpu.md): builds, then
#   1. unit.gpu (the kernels' per-element math on the CPU)
#   2. the start-up self-check (fast kernels vs the reference path), timed;
#      again with the flash kernels' check (--gpu-attention=flash)
#   3. every op, CUDA backend vs CPU backend: fp32 (<= 1e-5) and bf16 (~1e-2),
#      and the tensor-core and flash attentions (5e-2)
#   4. a transformer's loss and all gradients, CUDA vs CPU engine (fp32, bf16;
#      bf16 also with sequences of 1,500 and 3,000 tokens: tensor-core attention;
#      bf16 through the flash kernels, at 40 and 1,500 tokens)
#   5. maestro-run: tiny_mllm 3 steps, backend cuda vs cpu (fp32 losses agree)
#   6. maestro-run: tiny_mllm and tiny_kd on cuda, the loss falls; tiny_mllm
#      in bf16 with the flash kernels against the tensor-core attention
#   6a. the plan of a run on cuda: made on this machine's GPUs (the device
#      table's row for their name), every section on a GPU
#   6b. tiny_mllm with its llm section at dp = 2 (gradients all-reduced
#      over NCCL), 3 steps cuda vs cpu (fp32 losses agree); SKIP on < 2 GPUs
#   6c. the same over 2 processes (--processes 2: the llm's replicas in
#      different processes): one NCCL communicator across them on 2 GPUs,
#      the staged ring over UCX where both share the one GPU
#   6d. tiny_mllm with its llm section at tp = 2 (a tp group over NCCL, the
#      vocabulary-parallel loss kernels), 3 steps cuda vs cpu; SKIP on < 2 GPUs
#   6e. every collective over NCCL groups of all the GPUs here, checked
#      exactly (bench_gpu nccl): with one GPU, groups of one rank
#   6f. attention over one sequence whose batched [H, L, L] buffers pass an
#      eighth of the device's memory: Auto takes the tiled kernel; it and
#      the flash kernels checked against the tensor-core batched path (5e-2)
#      and timed (bench_gpu long)
#   7. cuBLASLt bf16 GEMM peak, then the 1.3B transformer section (layers 24,
#      hidden 2048, heads 16, ffn 5504, vocab 32000, seq 2048, bf16):
#      tokens/s, MFU vs 989 TFLOP/s (H100) and vs the measured GEMM peak,
#      with auto's attention (the tensor cores) and with the flash kernels;
#      the same section trained by maestro-run (bench/gpu/llm_1_3b.sect:
#      the whole runtime, its step times against the bare loop's);
#      the same model in PyTorch (bf16 autocast) on the same GPU when
#      $TORCH_PYTHON (default python3) has torch with CUDA, else SKIP: as
#      our side (attention written out, plain AdamW), and at PyTorch's best
#      (scaled_dot_product_attention, fused AdamW)
#   7a. where a step's device time goes: 2 layers of the 1.3B section,
#      each op of the engine timed by events around it (bench_gpu step
#      --profile), with auto's attention and with the flash kernels
#   8. compute-sanitizer (memcheck) on the op check and a 2-step run, and
#      memcheck and racecheck (shared memory) on the flash kernels' op check
#      (last: the slowest steps)
# and writes one report (markdown, every step's JSON, PASS/FAIL).
#
# Usage: bench/gpu/run.sh [--dry-run] [--build DIR] [--report FILE] [--quick] [--no-build]
#                         [--step-timeout S] [--only REGEX]
#   --dry-run  checks the build here (no GPU needed) and prints the plan
#   --quick    a 4-layer model instead of the 1.3B one in step 7
#   --no-build uses DIR as it is (no cmake step; bench/gpu/bundle.sh packs
#              one for a GPU machine without this project's packages)
#   --step-timeout S  a step still running after S seconds (default 900) is
#              stopped and FAILs, so a hung kernel cannot hang the run
#   --only REGEX  runs only the steps whose names match (bash =~; the build
#              step always), e.g. --only flash: a lent GPU's minutes on what
#              has never run there. A step that compares with another
#              step's figures says so when that one did not run.
# Exit status: 0 all passed, 1 a check failed, 2 bad usage or no build.
set -uo pipefail
cd "$(dirname "$0")/../.."
dry=0 build=build report="" quick=0 no_build=0 step_timeout=900 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --quick) quick=1 ;;
    --no-build) no_build=1 ;;
    --build) build=${2:?--build needs a folder}; shift ;;
    --report) report=${2:?--report needs a file}; shift ;;
    --step-timeout) step_timeout=${2:?--step-timeout needs seconds}; shift
      [[ "$step_timeout" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: error: --step-timeout '$step_timeout' is not a whole number of seconds" >&2; exit 2; } ;;
    --only) only=${2:?--only needs a pattern}; shift
      [[ "" =~ $only ]]; [ $? = 2 ] && { echo "run.sh: error: --only '$only' is not a valid pattern" >&2; exit 2; } ;;
    *) echo "run.sh: error: unknown argument '$1' (usage: run.sh [--dry-run] [--build DIR] [--report FILE] [--quick] [--no-build] [--step-timeout S] [--only REGEX])" >&2; exit 2 ;;
  esac
  shift
done
report=${report:-$build/gpu-report.md}
selected() { [ "$1" = build ] || [ -z "$only" ] || [[ "$1" =~ $only ]]; }
bench="$build/bench/bench_gpu"
run="$build/maestro-run"
py=/usr/bin/python3  # the checks below need only json: any python3 where Debian's is absent
[ -x "$py" ] || py=$(command -v python3)
torch_py=${TORCH_PYTHON:-python3}  # a python whose torch has CUDA, for the PyTorch peer (skipped without one)
big="--layers 24 --hidden 2048 --heads 16 --ffn 5504 --vocab 32000 --samples 2 --tokens 2048"
[ "$quick" = 1 ] && big="--layers 4 --hidden 1024 --heads 8 --ffn 2816 --vocab 32000 --samples 2 --tokens 2048"
# the step profile: two of big's layers (the head and AdamW's share grow with fewer layers)
prof="--layers 2 ${big#--layers [0-9]* }"
small="--layers 2 --hidden 128 --heads 4 --ffn 384 --vocab 512 --samples 3 --tokens 40"
# rows of 1,500 and 3,000 keys: the tensor-core attention (auto from 256 tokens in bf16) with its softmax
# kernels for rows of up to 2,048 and 4,096 keys, which the self-check's short sequences do not reach
long_rows="--layers 2 --hidden 128 --heads 4 --ffn 384 --vocab 512"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
cfg_dir=$(mktemp -d)
trap 'rm -rf "$cfg_dir"' EXIT
printf '[runtime]\nbackend = "cuda"\n' > "$cfg_dir/cuda.toml"
printf '[runtime]\nbackend = "cpu"\n' > "$cfg_dir/cpu.toml"
# tiny_mllm with its llm section's dp = auto pinned to 2: two NCCL ranks on cuda
sed 's/parallel { dp = auto; }/parallel { dp = 2; }/' models/tiny_mllm.sect > "$cfg_dir/tiny_mllm_dp2.sect"
# ... and pinned to tp = 2: a tp group of two NCCL ranks on cuda
sed 's/parallel { dp = auto; }/parallel { tp = 2; dp = 1; }/' models/tiny_mllm.sect > "$cfg_dir/tiny_mllm_tp2.sect"
# ... and in bf16: the tensor-core and flash attentions train it (both refuse fp32)
sed 's/precision = fp32;/precision = bf16;/' models/tiny_mllm.sect > "$cfg_dir/tiny_mllm_bf16.sect"

# The plan: name | command (the checks read each command's last stdout line).
plan=(
  "build|cmake -S . -B $build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build $build -j \$(nproc) --target maestro-run bench_gpu test_gpu"
  "unit.gpu|$build/tests/gpu/test_gpu"
  "selfcheck|$bench selfcheck"
  "selfcheck flash|$bench --attention flash selfcheck"
  "ops fp32|$bench --fp32 ops"
  "ops bf16|$bench ops"
  "ops tensor-core attention|$bench --attention tensorcore ops"
  "ops flash attention|$bench --attention flash ops"
  "model fp32|$bench --fp32 model $small"
  "model bf16|$bench model $small"
  "model bf16 long rows|$bench model $long_rows --samples 2 --tokens 1500 && $bench model $long_rows --samples 1 --tokens 3000"
  "model bf16 flash|$bench --attention flash model $small && $bench --attention flash model $long_rows --samples 2 --tokens 1500"
  "engine cuda vs cpu|$run models/tiny_kd.sect --steps 3 --json --quiet --config $cfg_dir/cuda.toml ; $run models/tiny_kd.sect --steps 3 --json --quiet --config $cfg_dir/cpu.toml"
  "train tiny_mllm|$run models/tiny_mllm.sect --steps 30 --json --quiet --config $cfg_dir/cuda.toml"
  "train tiny_kd|$run models/tiny_kd.sect --steps 30 --json --quiet --config $cfg_dir/cuda.toml"
  "plan on the GPUs|$run models/tiny_mllm.sect --steps 1 --config $cfg_dir/cuda.toml"
  "reproducible|$run models/tiny_kd.sect --steps 6 --json --quiet --config $cfg_dir/cuda.toml ; $run models/tiny_kd.sect --steps 6 --json --quiet --config $cfg_dir/cuda.toml"
  "attention paths|$run models/tiny_mllm.sect --steps 5 --json --quiet --config $cfg_dir/cuda.toml --gpu-attention=reference ; $run models/tiny_mllm.sect --steps 5 --json --quiet --config $cfg_dir/cuda.toml --gpu-attention=tiled"
  "flash end to end|$run $cfg_dir/tiny_mllm_bf16.sect --steps 10 --json --quiet --config $cfg_dir/cuda.toml --gpu-attention=tensorcore ; $run $cfg_dir/tiny_mllm_bf16.sect --steps 10 --json --quiet --config $cfg_dir/cuda.toml --gpu-attention=flash"
  "hand-offs device vs host|$run models/tiny_mllm.sect --steps 30 --json --quiet --config $cfg_dir/cuda.toml --gpu-handoffs=host ; $run models/tiny_mllm.sect --steps 30 --json --quiet --config $cfg_dir/cuda.toml --gpu-handoffs=device"
  "dp 2 over NCCL|$run $cfg_dir/tiny_mllm_dp2.sect --steps 3 --json --quiet --config $cfg_dir/cuda.toml ; $run $cfg_dir/tiny_mllm_dp2.sect --steps 3 --json --quiet --config $cfg_dir/cpu.toml"
  "dp 2 over processes|$run $cfg_dir/tiny_mllm_dp2.sect --steps 3 --json --quiet --processes 2 --config $cfg_dir/cuda.toml ; $run $cfg_dir/tiny_mllm_dp2.sect --steps 3 --json --quiet --config $cfg_dir/cpu.toml"
  "tp 2 over NCCL|$run $cfg_dir/tiny_mllm_tp2.sect --steps 3 --json --quiet --config $cfg_dir/cuda.toml ; $run $cfg_dir/tiny_mllm_tp2.sect --steps 3 --json --quiet --config $cfg_dir/cpu.toml"
  "nccl collectives|$bench nccl"
  "long attention|$bench long"
  "gemm peak|$bench gemm"
  "host copies|$bench copies"
  "transformer step|$bench step $big --steps 5 --warmup 2 --no-bf16-copies && $bench step $big --steps 5 --warmup 2"
  "flash step|$bench --attention flash step $big --steps 5 --warmup 2"
  "step profile|$bench step $prof --steps 3 --warmup 1 --profile && $bench --attention flash step $prof --steps 3 --warmup 1 --profile"
  "maestro-run 1.3B|$run bench/gpu/llm_1_3b.sect --steps 8 --json --quiet --log-level debug --config $cfg_dir/cuda.toml"
  "torch step|$torch_py bench/engine_vs_torch/torch_step.py $big --device cuda --bf16 --steps 5 --warmup 2"
  "torch step sdpa|$torch_py bench/engine_vs_torch/torch_step.py $big --device cuda --bf16 --sdpa --fused-adamw --steps 5 --warmup 2"
  "sanitizer ops|$sanitizer --tool memcheck --error-exitcode 1 $bench --fp32 ops"
  "sanitizer run|$sanitizer --tool memcheck --error-exitcode 1 $run models/tiny_kd.sect --steps 2 --quiet --config $cfg_dir/cuda.toml"
  "sanitizer flash|$sanitizer --tool memcheck --error-exitcode 1 $bench --attention flash ops && $sanitizer --tool racecheck --error-exitcode 1 $bench --attention flash ops"
)

if [ "$dry" = 1 ]; then
  echo "bench/gpu/run.sh --dry-run: checking the build in $build"
  fail=0
  for f in "$bench" "$run" "$build/tests/gpu/test_gpu"; do
    if [ -x "$f" ]; then echo "  ok  $f"; else echo "  MISSING  $f (build with the CUDA toolkit: make build)"; fail=1; fi
  done
  if [ -x "$bench" ]; then
    for sub in ops selfcheck model step gemm copies nccl long; do
      "$bench" "$sub" --help >/dev/null 2>&1 && echo "  ok  bench_gpu $sub --help" || { echo "  FAIL bench_gpu $sub --help"; fail=1; }
    done
    # without a device the CUDA backend must refuse with a clear error, never crash
    out=$("$bench" --fp32 ops 2>&1); st=$?
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
      echo "  (a GPU is present: run without --dry-run)"
    elif [ "$st" = 1 ] && grep -q "bench_gpu: error: .*CUDA" <<<"$out"; then
      echo "  ok  no GPU here: bench_gpu refuses with status 1: ${out}"
    else
      echo "  FAIL bench_gpu without a GPU: status $st: $out"; fail=1
    fi
  fi
  [ -x "$sanitizer" ] && echo "  ok  $sanitizer" || echo "  note: no compute-sanitizer here ($sanitizer): the sanitizer steps need it on the GPU machine"
  for m in models/tiny_mllm.sect models/tiny_kd.sect bench/gpu/llm_1_3b.sect; do
    if [ -x "$run" ]; then
      "$run" "$m" --check >/dev/null 2>&1 && echo "  ok  $m (maestro-run --check)" || { echo "  FAIL $m: maestro-run --check"; fail=1; }
    else
      [ -f "$m" ] && echo "  ok  $m" || { echo "  MISSING $m"; fail=1; }
    fi
  done
  grep -q "dp = 2" "$cfg_dir/tiny_mllm_dp2.sect" && echo "  ok  tiny_mllm at dp = 2 for 'dp 2 over NCCL'" ||
    { echo "  FAIL models/tiny_mllm.sect no longer has the llm's 'parallel { dp = auto; }' that run.sh pins to 2"; fail=1; }
  grep -q "tp = 2" "$cfg_dir/tiny_mllm_tp2.sect" && echo "  ok  tiny_mllm at tp = 2 for 'tp 2 over NCCL'" ||
    { echo "  FAIL models/tiny_mllm.sect no longer has the llm's 'parallel { dp = auto; }' that run.sh pins to tp 2"; fail=1; }
  grep -q "precision = bf16;" "$cfg_dir/tiny_mllm_bf16.sect" && echo "  ok  tiny_mllm in bf16 for 'flash end to end'" ||
    { echo "  FAIL models/tiny_mllm.sect no longer has the 'precision = fp32;' that run.sh turns to bf16"; fail=1; }
  echo "plan (on a machine with an NVIDIA GPU; report: $report):"
  i=1
  for p in "${plan[@]}"; do
    selected "${p%%|*}" && echo "  $i. ${p%%|*}: ${p#*|}" || echo "  $i. ${p%%|*}: (not selected by --only)"
    i=$((i + 1))
  done
  echo "  MFU = model FLOP/s of 'transformer step' / 989e12 (H100 dense bf16) and / the GEMM peak of 'gemm peak'"
  [ "$fail" = 0 ] && echo "dry run: ok" || echo "dry run: FAILED"
  exit $fail
fi

command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "run.sh: error: no NVIDIA GPU here (nvidia-smi -L failed); --dry-run checks the build only" >&2; exit 2; }
{
  echo "# bench/gpu/run.sh report"
  echo
  echo "- date: $(date -u)"
  echo "- machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1); $(nproc) cores; $(uptime)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- 2>/dev/null || echo ' with uncommitted changes')"
  [ -n "$only" ] && echo "- steps: only those matching --only '$only'"
  echo
} > "$report"
failures=0
declare -A out
for p in "${plan[@]}"; do
  name=${p%%|*} cmd=${p#*|}
  [ "$name" = build ] && [ "$no_build" = 1 ] && continue
  selected "$name" || continue
  echo "== $name: $cmd"
  if [[ "$name" == "torch step"* ]] && ! $torch_py -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "   SKIP ($torch_py has no torch with CUDA)"
    printf '## %s: SKIP\n\n%s has no torch with CUDA (set TORCH_PYTHON)\n\n' "$name" "$torch_py" >> "$report"
    continue
  fi
  if [ "$name" = "torch step sdpa" ] && ! $torch_py -c "import torch, sys; sys.exit(0 if hasattr(torch.nn.functional, 'scaled_dot_product_attention') else 1)" 2>/dev/null; then
    echo "   SKIP ($torch_py's torch has no scaled_dot_product_attention: torch < 2.0)"
    printf '## %s: SKIP\n\n%s has no scaled_dot_product_attention (torch < 2.0)\n\n' "$name" "$torch_py" >> "$report"
    continue
  fi
  if { [ "$name" = "dp 2 over NCCL" ] || [ "$name" = "tp 2 over NCCL" ]; } && [ "$(nvidia-smi -L | grep -c '^GPU')" -lt 2 ]; then
    echo "   SKIP (one GPU: a group needs a GPU per NCCL rank)"
    printf '## %s: SKIP\n\none GPU here; %s on cuda needs two\n\n' "$name" "${name%% over*}" >> "$report"
    continue
  fi
  start=$(date +%s)
  log=$(timeout -k 10 "$step_timeout" bash -c "$cmd" 2>&1); st=$?
  [ "$st" = 124 ] || [ "$st" = 137 ] && log="$log
run.sh: stopped after --step-timeout $step_timeout s"
  out[$name]=$log
  verdict=PASS
  [ "$st" = 0 ] || verdict=FAIL
  # Checks and figures drawn from the output (a brace group: verdict survives).
  {
  case "$name" in
    "engine cuda vs cpu"|"dp 2 over NCCL"|"dp 2 over processes"|"tp 2 over NCCL")
      [ "$st" = 0 ] && { $py - "$log" <<'PY' || verdict=FAIL; }
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
a, b = lines[0]["losses"], lines[1]["losses"]
assert lines[0]["backend"] == "cuda" and lines[1]["backend"] == "cpu", lines
err = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("per-step loss rel err cuda vs cpu: %.3g" % err)
assert err <= 1e-2, err  # tiny_kd and tiny_mllm train in fp32; the GPU's sums run in other orders than the CPU's
PY
      ;;
    "reproducible")
      # no sum on the GPU uses atomics (docs/gpu.md, "Deterministic sums"): two runs, the same bits
      [ "$st" = 0 ] && { $py - "$log" <<'PY' || verdict=FAIL; }
import json, sys
a, b = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")][-2:]
assert a["backend"] == "cuda" and b["backend"] == "cuda", (a, b)
diff = [i for i, (x, y) in enumerate(zip(a["losses"], b["losses"])) if x != y]
assert len(a["losses"]) == len(b["losses"]) and not diff, "step %d differs: %r against %r" % (
    diff[0], a["losses"][diff[0]], b["losses"][diff[0]]) if diff else (a["losses"], b["losses"])
print("two runs on cuda: all %d per-step losses the same bits" % len(a["losses"]))
PY
      ;;
    "attention paths")
      # --gpu-attention end to end: the fp32 reference path against the tiled kernel (tiny_mllm trains in fp32)
      [ "$st" = 0 ] && { $py - "$log" <<'PY' || verdict=FAIL; }
import json, sys
ref, tiled = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")][-2:]
assert ref["backend"] == "cuda" and tiled["backend"] == "cuda", (ref, tiled)
err = max(abs(x - y) / abs(y) for x, y in zip(tiled["losses"], ref["losses"]))
print("--gpu-attention=tiled against reference: per-step loss rel err %.3g; %.1f against %.1f samples/s"
      % (err, tiled["samples_per_s"], ref["samples_per_s"]))
assert err <= 1e-4, err  # both fp32
PY
      ;;
    "flash end to end")
      # tiny_mllm in bf16 trained with the flash kernels against the tensor-core path: both learn, losses close
      [ "$st" = 0 ] && { $py - "$log" <<'PY' || verdict=FAIL; }
import json, sys
tc, flash = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")][-2:]
assert tc["backend"] == "cuda" and flash["backend"] == "cuda", (tc, flash)
err = max(abs(x - y) / abs(y) for x, y in zip(flash["losses"], tc["losses"]))
print("--gpu-attention=flash against tensorcore (bf16): per-step loss rel err %.3g, loss %.4f -> %.4f; "
      "%.1f against %.1f samples/s" % (err, flash["first_loss"], flash["final_loss"], flash["samples_per_s"],
                                      tc["samples_per_s"]))
assert err <= 5e-2, err  # both bf16: their roundings differ (P, dS in other orders)
assert flash["final_loss"] < flash["first_loss"], flash
PY
      ;;
    "hand-offs device vs host")
      [ "$st" = 0 ] && { $py - "$log" <<'PY' || verdict=FAIL; }
import json, sys
host, device = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")][-2:]
assert host["backend"] == "cuda" and device["backend"] == "cuda", (host, device)
err = max(abs(x - y) / abs(y) for x, y in zip(device["losses"], host["losses"]))
print("hand-offs in GPU memory %.1f samples/s, through host memory %.1f samples/s (%.2fx); per-step loss rel err %.3g"
      % (device["samples_per_s"], host["samples_per_s"], device["samples_per_s"] / host["samples_per_s"], err))
assert err <= 1e-2, err  # the same bytes handed on
PY
      ;;
    "plan on the GPUs")
      # a run in one process on cuda is planned on every GPU here (docs/gpu.md, "Choice")
      if [ "$st" = 0 ]; then
        gpus=$(nvidia-smi -L | grep -c '^GPU')
        grep "^plan  " <<<"$log"
        grep -q "^plan  planned on $gpus GPUs\{0,1\} as the device table's" <<<"$log" ||
          { echo "no 'planned on $gpus GPU(s)' line: the GPU's name is not in the device table, so the run was planned on one slot"; verdict=FAIL; }
        ! grep "^plan  [A-Za-z0-9_]*: \(tp [0-9]*, \)\{0,1\}dp" <<<"$log" | grep -v ", GPUs\{0,1\} [0-9]" || { echo "a section line without its GPUs"; verdict=FAIL; }
      fi
      ;;
    "train tiny_mllm"|"train tiny_kd")
      [ "$st" = 0 ] && { $py -c "import json,sys; j=json.loads(sys.argv[1].splitlines()[-1]); print('loss %.4f -> %.4f' % (j['first_loss'], j['final_loss'])); assert j['backend']=='cuda' and j['final_loss'] < j['first_loss']" "$log" || verdict=FAIL; }
      ;;
    "transformer step")
      [ "$st" = 0 ] && $py - "${out[gemm peak]:-}" "$log" <<'PY'
import json, sys
gemm = json.loads(sys.argv[1].splitlines()[-1]) if sys.argv[1] else None  # None: 'gemm peak' did not run
step = json.loads(sys.argv[2].splitlines()[-1])
tf = step["tflops"]
print("tokens/s %.0f, model %.1f TFLOP/s, MFU %.1f%% of 989 TFLOP/s (H100 bf16), %s"
      % (step["tokens_per_s"], tf, 100 * tf / 989,
         "%.1f%% of the measured cuBLASLt peak %.1f TFLOP/s on %s" % (100 * tf / gemm["peak_tflops"], gemm["peak_tflops"],
                                                                    gemm["device"]) if gemm else "no 'gemm peak'"))
# the same step rounding every GEMM operand on each call (--no-bf16-copies, run first)
off = [j for j in map(json.loads, filter(lambda l: l.startswith("{"), sys.argv[2].splitlines())) if j.get("bf16_copies") is False]
if off:
    print("without the engine's bf16 copies of GEMM operands %.0f tokens/s: the copies' speed-up %.3fx"
          % (off[0]["tokens_per_s"], step["tokens_per_s"] / off[0]["tokens_per_s"]))
PY
      ;;
    "flash step")
      # the same step with --attention flash, against auto's (the tensor cores) in "transformer step"
      [ "$st" = 0 ] && $py - "${out[transformer step]:-}" "${out[gemm peak]:-}" "$log" <<'PY'
import json, sys
def last(log):
    lines = [l for l in log.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
auto, gemm, flash = map(last, sys.argv[1:4])
tf = flash["tflops"]
print("flash attention: tokens/s %.0f (%s), MFU %.1f%% of 989 TFLOP/s, %s"
      % (flash["tokens_per_s"], "%.3fx auto's %.0f" % (flash["tokens_per_s"] / auto["tokens_per_s"], auto["tokens_per_s"])
         if auto else "no 'transformer step' to compare", 100 * tf / 989,
         "%.1f%% of the cuBLASLt peak" % (100 * tf / gemm["peak_tflops"]) if gemm else "no 'gemm peak'"))
PY
      ;;
    "step profile")
      # each op's device time per step, the most first, with auto's attention and with the flash kernels
      [ "$st" = 0 ] && { $py - "$log" <<'PY' || verdict=FAIL; }
import json, sys
for run in [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]:
    ops, total = run["ops"], run["ops_ms"]
    assert ops and total > 0, "no op profile"
    print("attention %s: %.2f ms of ops per step; %s" % ("flash" if run.get("attention") == 4 else "auto", total,
          ", ".join("%s %.2f ms (%.1f %%, %g calls)" % (o["op"], o["ms"], 100 * o["ms"] / total, o["calls"])
                    for o in ops[:10])))
PY
      ;;
    "maestro-run 1.3B")
      # the runtime's step times (--log-level debug) from step 2 on, against the bare loop of "transformer step"
      [ "$st" = 0 ] && { $py - "$quick" "${out[transformer step]:-}" "$log" <<'PY' || verdict=FAIL; }
import json, re, statistics, sys
quick, loop_log, log = sys.argv[1:4]
run = json.loads([l for l in log.splitlines() if l.startswith("{")][-1])
ms = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step (\d+) done: [^\n]*?, ([\d.]+) ms \(", log)}
steady = [ms[k] for k in sorted(ms) if k >= 2]
assert run["backend"] == "cuda" and len(steady) >= 3, (run.get("backend"), ms)
median = statistics.median(steady)
tps = 2 * 2048 / (median / 1e3)  # llm_1_3b.sect: global_batch 2 of 2,048 tokens
ratio = ""
if quick == "0":  # --quick times a smaller section in "transformer step"
    try:
        ratio = ", %.2f of the bare section loop" % (tps / json.loads(loop_log.splitlines()[-1])["tokens_per_s"])
    except (ValueError, KeyError, IndexError):  # that step failed: no ratio, this one's verdict stands
        ratio = ", no bare-loop figure to compare"
print("maestro-run %.0f tokens/s (median step %.1f ms over steps 2-%d, the first %.0f ms)%s"
      % (tps, median, max(ms), ms[0], ratio))
PY
      ;;
    "nccl collectives")
      # also when it failed: the JSON names the calls that did
      $py - "$log" <<'PY'
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l.startswith("{")]
if not lines:
    sys.exit("no result line: bench_gpu nccl stopped before its checks (its error is in the log)")
j = json.loads(lines[-1])
def group(k):
    g = j[k]
    bad = "; ".join("%s (%s)" % (f["call"], f["error"] or "%d wrong" % f["wrong"]) for f in g.get("failed", []))
    return "%s %d calls passed%s" % (k, g["passed"], ", failed: " + bad if bad else "")
print("NCCL, %d rank(s), one per GPU: %s; %s" % (j["ranks"], group("init_all"), group("init_rank")))
PY
      ;;
    "long attention")
      $py - "$log" <<'PY'
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l.startswith("{")]
if not lines:
    sys.exit("no result line: bench_gpu long stopped before its check (its error is in the log)")
j = json.loads(lines[-1]); e = j["rel_err"]
print("one sequence of %d tokens (batched buffers %.1f GB, budget %.1f GB): Auto took the %s kernel, fwd+bwd %.1f ms "
      "against %.1f ms on the tensor cores (%.2fx); rel err out %.2g, dq %.2g, dk %.2g, dv %.2g"
      % (j["tokens"], j["batched_scratch_gb"], j["budget_gb"], j["auto_kernel"], j["auto"]["ms"],
         j["tensorcore"]["ms"], j["auto"]["ms"] / j["tensorcore"]["ms"], e["out"], e["dq"], e["dk"], e["dv"]))
if "flash_error" in j:
    print("flash kernels: FAILED: %s" % j["flash_error"])
if "flash_rel_err" in j:
    f = j["flash_rel_err"]
    print("flash kernels: fwd+bwd %.1f ms (%.2fx the tensor cores, %.2fx the tiled kernel); rel err out %.2g, dq %.2g, "
          "dk %.2g, dv %.2g" % (j["flash"]["ms"], j["flash"]["ms"] / j["tensorcore"]["ms"],
                                j["flash"]["ms"] / j["auto"]["ms"], f["out"], f["dq"], f["dk"], f["dv"]))
PY
      ;;
    "host copies")
      [ "$st" = 0 ] && $py -c "
import json, sys
j = json.loads(sys.argv[1].splitlines()[-1]); x = j['sizes'][-1]
print('%d MiB device->host: pinned %.1f GB/s, pageable %.1f GB/s (%.2fx); host->device: %.1f / %.1f GB/s, '
      'held from pinned memory (DMA, no staging) %.1f GB/s (%.2fx)'
      % (x['bytes'] >> 20, x['d2h_pinned_gbs'], x['d2h_pageable_gbs'], x['d2h_pinned_gbs'] / x['d2h_pageable_gbs'],
         x['h2d_pinned_gbs'], x['h2d_pageable_gbs'], x['h2d_held_pinned_gbs'],
         x['h2d_held_pinned_gbs'] / x['h2d_pinned_gbs']))
r = j.get('rows')
if r: print('a column slice (%d rows of %d of %d bytes) held from pinned memory: one strided DMA %.1f GB/s, '
            'a copy per row %.1f GB/s (%.1fx)' % (r['rows'], r['row_bytes'], r['pitch'], r['strided_gbs'],
            r['per_row_gbs'], r['strided_gbs'] / r['per_row_gbs']))
h = j.get('handoff')
if h: print('a %d MiB hand-off between two backends of the GPU: kept in GPU memory %.1f GB/s, through pinned host '
            'memory %.1f GB/s (%.1fx)' % (h['bytes'] >> 20, h['kept_gbs'], h['host_gbs'], h['kept_gbs'] / h['host_gbs']))" "$log"
      ;;
    "torch step"|"torch step sdpa")
      [ "$st" = 0 ] && $py - "${out[transformer step]:-}" "$log" <<'PY'
import json, sys
ours = json.loads(sys.argv[1].splitlines()[-1]); torch = json.loads(sys.argv[2].splitlines()[-1])
print("PyTorch%s %.0f tokens/s, maestro %.0f tokens/s: maestro / torch = %.2f"
      % (" (SDPA, fused AdamW)" if torch.get("sdpa") else "", torch["tokens_per_s"], ours["tokens_per_s"],
         ours["tokens_per_s"] / torch["tokens_per_s"]))
PY
      ;;
  esac
  } > "$cfg_dir/analysis" 2>&1
  analysis=$(cat "$cfg_dir/analysis")
  [ "$verdict" = PASS ] || failures=$((failures + 1))
  {
    echo "## $name: $verdict ($(( $(date +%s) - start )) s)"
    echo
    [ -n "$analysis" ] && printf '%s\n\n' "$analysis"
    echo '```'
    echo "\$ $cmd"
    echo "$log" | tail -c 4000
    echo '```'
    echo
  } >> "$report"
  [ -n "$analysis" ] && echo "   $analysis"
  echo "   $verdict"
done
echo "report: $report ($failures failed)"
[ "$failures" = 0 ]
