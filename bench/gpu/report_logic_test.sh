#!/usr/bin/env bash
# The report logic of bench/gpu/run.sh, checked without a GPU: run.sh drives
# stand-in programs (nvidia-smi, bench_gpu, maestro-run, test_gpu,
# compute-sanitizer) that print canned JSON lines of the real programs'
# shapes, so what is tested is run.sh's own plumbing — the step loop, the
# checks it draws from each output (loss agreement, falling loss, MFU), the
# PASS/FAIL/SKIP verdicts, the report and the exit status — never the GPU
# code. Usage: report_logic_test.sh (from the repository root).
set -uo pipefail
cd "$(dirname "$0")/../.."
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
mkdir -p "$fake/bin" "$fake/build/bench" "$fake/build/tests/gpu"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" > "$1"; chmod +x "$1"; }
# one GPU unless GPUS says how many
stub "$fake/bin/nvidia-smi" 'case "$1" in -L) for i in $(seq 0 $((${GPUS:-1} - 1))); do echo "GPU $i: stand-in"; done;; *) echo "stand-in, 80 GiB, 0";; esac'
stub "$fake/bin/compute-sanitizer" 'shift 4; exec "$@"'
stub "$fake/bin/nopython" 'exit 1'  # TORCH_PYTHON without torch: the torch steps are SKIP
# TORCH_PYTHON with torch: 10,000 tokens/s eager, 40,000 with --sdpa
stub "$fake/bin/torchpy" '[ "$1" = -c ] && exit 0
case " $* " in *" --sdpa "*) echo "{\"tokens_per_s\": 40000.0, \"sdpa\": true}";; *) echo "{\"tokens_per_s\": 10000.0, \"sdpa\": false}";; esac'
stub "$fake/build/tests/gpu/test_gpu" 'echo "*** No errors detected"'
# falling losses unless FALLING=0; cuda and cpu agree unless AGREE=0
stub "$fake/build/maestro-run" '
backend=$(grep -o "\"[a-z]*\"" "${@: -1}" | tr -d \") ; for a; do [ "$prev" = --config ] && backend=$(grep -o "\"[a-z]*\"" "$a" | tr -d \"); prev=$a; done
l2=1.5; [ "${FALLING:-1}" = 0 ] && l2=2.5; [ "$backend" = cpu ] && [ "${AGREE:-1}" = 0 ] && l2=1.0
if [ -n "${NONDET:-}" ]; then n=$(( $(cat "$NONDET" 2>/dev/null || echo 0) + 1 )); echo $n > "$NONDET"; l2=1.5$n; fi  # each run its own last loss
case "$1" in *llm_1_3b.sect) for i in 0 1 2 3 4 5 6 7; do  # a first step of 900 ms, then 250 ms
  echo "maestro-run: [debug] step $i done: loss 8.0, 2 samples, $([ $i = 0 ] && echo 900.0 || echo 250.0) ms (0.1 ms in the scheduler)" >&2; done;; esac
sps=120.0; case " $* " in *" --gpu-handoffs=host "*) sps=100.0;; esac
case " $* " in *" --quiet "*) ;; *) [ "$backend" = cuda ] && { echo "plan  llm: dp 1, pp 1, micro_batch 4, GPU 0"
  q=$(printf "\\047"); [ "${PLANNED:-1}" = 1 ] && echo "plan  planned on ${GPUS:-1} GPU$([ "${GPUS:-1}" = 1 ] || echo s) as the device table${q}s h200 (150.1 GB each)"; };; esac
echo "{\"backend\": \"$backend\", \"first_loss\": 2.0, \"final_loss\": $l2, \"losses\": [2.0, $l2], \"samples_per_s\": $sps}"'
stub "$fake/build/bench/bench_gpu" '
for a; do case "$a" in
  gemm) echo "{\"check\": \"gemm\", \"peak_tflops\": 700.0, \"device\": \"stand-in\"}"; exit 0;;
  copies) echo "{\"check\": \"copies\", \"sizes\": [{\"bytes\": 67108864, \"d2h_pageable_gbs\": 10.0, \"d2h_pinned_gbs\": 25.0, \"h2d_pageable_gbs\": 12.0, \"h2d_pinned_gbs\": 12.5, \"h2d_held_pinned_gbs\": 50.0, \"held_bytes_match\": true, \"pinned\": true}], \"rows\": {\"rows\": 2048, \"row_bytes\": 64000, \"pitch\": 128000, \"pinned\": true, \"per_row_gbs\": 2.0, \"strided_gbs\": 40.0, \"bytes_match\": true}, \"handoff\": {\"bytes\": 67108864, \"kept_gbs\": 500.0, \"host_gbs\": 10.0, \"pinned\": true, \"bytes_match\": true}, \"ok\": true}"; exit 0;;
  step) case " $* " in  # rounding every GEMM operand on each call: 19,000 tokens/s; the flash kernels 25,000
    *" --profile "*) echo "{\"check\": \"step\", \"tokens_per_s\": 18000.0, \"tflops\": 190.0, \"attention\": 0, \"ops\": [{\"op\": \"linear_backward\", \"calls\": 15.0, \"ms\": 6.0}, {\"op\": \"attention_backward\", \"calls\": 2.0, \"ms\": 3.0}, {\"op\": \"adamw\", \"calls\": 1.0, \"ms\": 1.0}], \"ops_ms\": 10.0}";;
    *" --attention flash "*) echo "{\"check\": \"step\", \"tokens_per_s\": 25000.0, \"tflops\": 262.5, \"bf16_copies\": true}";;
    *" --no-bf16-copies "*) echo "{\"check\": \"step\", \"tokens_per_s\": 19000.0, \"tflops\": 199.5, \"bf16_copies\": false}";;
    *) echo "{\"check\": \"step\", \"tokens_per_s\": 20000.0, \"tflops\": 210.0, \"bf16_copies\": true}";; esac; exit 0;;
  selfcheck) [ "${STALL:-0}" = 1 ] && sleep 60; echo "{\"check\": \"$a\", \"ok\": true}"; exit 0;;
  nccl) r=${GPUS:-1}; n=$((4 * (5 + r) + 1)); if [ "${NCCL_OK:-1}" = 1 ]; then
      echo "{\"check\": \"nccl\", \"ranks\": $r, \"init_all\": {\"passed\": $n}, \"init_rank\": {\"passed\": $n}, \"ok\": true}"; exit 0; fi
    echo "{\"check\": \"nccl\", \"ranks\": $r, \"init_all\": {\"passed\": $n}, \"init_rank\": {\"failed\": [{\"call\": \"all_gather(in place) n=4099\", \"wrong\": 3, \"error\": \"\"}], \"passed\": $((n - 1))}, \"ok\": false}"; exit 1;;
  ops|model) echo "{\"check\": \"$a\", \"ok\": true}"; exit 0;;
  long) echo "{\"check\": \"long\", \"tokens\": 8192, \"heads\": 16, \"head_dim\": 128, \"batched_scratch_gb\": 12.9, \"budget_gb\": 10.0, \"auto_kernel\": \"tiled\", \"auto\": {\"ms\": 90.0}, \"tensorcore\": {\"ms\": 30.0}, \"flash\": {\"ms\": 20.0}, \"rel_err\": {\"out\": 0.004, \"dq\": 0.006, \"dk\": 0.005, \"dv\": 0.003}, \"flash_rel_err\": {\"out\": 0.002, \"dq\": 0.003, \"dk\": 0.004, \"dv\": 0.001}, \"ok\": true}"; exit 0;;
esac; done; exit 2'
run() { PATH="$fake/bin:$PATH" TORCH_PYTHON="$fake/bin/${TORCHPY:-nopython}" bash bench/gpu/run.sh --no-build --build "$fake/build" --report "$fake/report.md" ${STEP_TIMEOUT:+--step-timeout $STEP_TIMEOUT} ${ONLY:+--only "$ONLY"} >"$fake/stdout" 2>&1; }
fail=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi; }

run; st=$?
check '[ $st = 0 ]' "all stand-ins pass: status 0 ($st)"
check 'grep -q "^## torch step: SKIP" "$fake/report.md" && grep -q "^## torch step sdpa: SKIP" "$fake/report.md"' "no torch with CUDA: both torch steps are SKIP"
check 'grep -q "MFU 21.2% of 989 TFLOP/s (H100 bf16), 30.0% of the measured cuBLASLt peak 700.0" "$fake/report.md"' "MFU against 989 and against the measured peak, in the report"
check 'grep -q "without the engine.s bf16 copies of GEMM operands 19000 tokens/s: the copies. speed-up 1.053x" "$fake/report.md"' "the step without the bf16 copies of GEMM operands, and the copies' speed-up"
check 'grep -q "loss 2.0000 -> 1.5000" "$fake/report.md"' "the falling loss, in the report"
check '[ $(grep -c ": PASS" "$fake/report.md") = 31 ]' "31 steps PASS (all but build, skipped, and torch)"
check 'grep -q "attention auto: 10.00 ms of ops per step; linear_backward 6.00 ms (60.0 %, 15 calls), attention_backward 3.00 ms (30.0 %, 2 calls)" "$fake/report.md"' "the step profile: each op's device time and share, the most first"
check 'grep -q "^plan  planned on 1 GPU as the device table.s h200" "$fake/report.md"' "the run on cuda planned on the one GPU, in the report"
check 'grep -q -- "--gpu-attention=tiled against reference: per-step loss rel err 0; 120.0 against 120.0 samples/s" "$fake/report.md"' "the attention paths against each other, in the report"
check 'grep -q "two runs on cuda: all 2 per-step losses the same bits" "$fake/report.md"' "two runs on cuda with the same losses, in the report"
check 'grep -q -- "--gpu-attention=flash against tensorcore (bf16): per-step loss rel err 0, loss 2.0000 -> 1.5000; 120.0 against 120.0 samples/s" "$fake/report.md"' "tiny_mllm in bf16, flash against the tensor cores, in the report"
check 'grep -q "hand-offs in GPU memory 120.0 samples/s, through host memory 100.0 samples/s (1.20x); per-step loss rel err 0" "$fake/report.md"' "hand-offs in GPU memory against host memory: speed and loss agreement"
check 'grep -q "one sequence of 8192 tokens (batched buffers 12.9 GB, budget 10.0 GB): Auto took the tiled kernel, fwd+bwd 90.0 ms against 30.0 ms on the tensor cores (3.00x); rel err out 0.004, dq 0.006, dk 0.005, dv 0.003" "$fake/report.md"' "the long attention: the kernel Auto took, its time against the tensor cores, its errors"
check 'grep -q "flash kernels: fwd+bwd 20.0 ms (0.67x the tensor cores, 0.22x the tiled kernel); rel err out 0.002, dq 0.003, dk 0.004, dv 0.001" "$fake/report.md"' "... and the flash kernels' time and errors"
check 'grep -q "flash attention: tokens/s 25000 (1.250x auto.s 20000), MFU 26.5% of 989 TFLOP/s, 37.5% of the cuBLASLt peak" "$fake/report.md"' "the 1.3B step with the flash kernels against auto's"
check 'grep -q "NCCL, 1 rank(s), one per GPU: init_all 25 calls passed; init_rank 25 calls passed" "$fake/report.md"' "one GPU: the NCCL check's groups of one rank, in the report"
check 'grep -q "maestro-run 16384 tokens/s (median step 250.0 ms over steps 2-7, the first 900 ms), 0.82 of the bare section loop" "$fake/report.md"' "maestro-run's steady step time against the bare loop, in the report"
check 'grep -q "64 MiB device->host: pinned 25.0 GB/s, pageable 10.0 GB/s (2.50x); host->device: 12.5 / 12.0 GB/s, held from pinned memory (DMA, no staging) 50.0 GB/s (4.00x)" "$fake/report.md"' "the host copies, pinned against pageable, in the report"
check 'grep -q "a column slice (2048 rows of 64000 of 128000 bytes) held from pinned memory: one strided DMA 40.0 GB/s, a copy per row 2.0 GB/s (20.0x)" "$fake/report.md"' "the column slice's strided upload against a copy per row"
check 'grep -q "a 64 MiB hand-off between two backends of the GPU: kept in GPU memory 500.0 GB/s, through pinned host memory 10.0 GB/s (50.0x)" "$fake/report.md"' "a hand-off kept in GPU memory against one through host memory"
check 'grep -q "^## dp 2 over NCCL: SKIP" "$fake/report.md" && grep -q "^## tp 2 over NCCL: SKIP" "$fake/report.md"' "one GPU: the dp 2 and tp 2 steps are SKIP"
check 'grep -q "^## dp 2 over processes: PASS" "$fake/report.md"' "... but dp 2 over processes runs (the staged ring on one GPU)"

GPUS=2 run; st=$?
check '[ $st = 0 ] && grep -q "^## dp 2 over NCCL: PASS" "$fake/report.md" && grep -q "^## tp 2 over NCCL: PASS" "$fake/report.md"' "two GPUs: the dp 2 and tp 2 steps run and pass ($st)"
check 'grep -q "^## dp 2 over processes: PASS" "$fake/report.md"' "... and dp 2 over processes"
check 'grep -q "NCCL, 2 rank(s), one per GPU: init_all 29 calls passed; init_rank 29 calls passed" "$fake/report.md"' "two GPUs: the NCCL check's groups of two ranks"
check 'grep -q "^## plan on the GPUs: PASS" "$fake/report.md" && grep -q "^plan  planned on 2 GPUs" "$fake/report.md"' "two GPUs: the run planned on both"
PLANNED=0 run; st=$?
check '[ $st = 1 ] && grep -q "^## plan on the GPUs: FAIL" "$fake/report.md" && grep -q "planned on one slot" "$fake/report.md"' "a run on cuda not planned on the GPUs fails the plan step, saying why ($st)"
NCCL_OK=0 run; st=$?
check '[ $st = 1 ] && grep -q "^## nccl collectives: FAIL" "$fake/report.md"' "a failed NCCL call fails the nccl step ($st)"
check 'grep -q "init_rank 24 calls passed, failed: all_gather(in place) n=4099 (3 wrong)" "$fake/report.md"' "... and the report names the call"
GPUS=2 AGREE=0 run; st=$?
check 'grep -q "^## dp 2 over NCCL: FAIL" "$fake/report.md" && grep -q "^## dp 2 over processes: FAIL" "$fake/report.md" && grep -q "^## tp 2 over NCCL: FAIL" "$fake/report.md"' "two GPUs: cuda and cpu losses that differ fail both dp 2 steps and the tp 2 step"

FALLING=0 run; st=$?
check '[ $st = 1 ]' "a loss that rises fails the run ($st)"
check 'grep -q "^## train tiny_kd: FAIL" "$fake/report.md"' "... naming the step"

AGREE=0 run; st=$?
check 'grep -q "^## engine cuda vs cpu: FAIL" "$fake/report.md"' "cuda and cpu losses that differ fail the comparison"

NONDET="$fake/runs" run; st=$?
check '[ $st = 1 ] && grep -q "^## reproducible: FAIL" "$fake/report.md" && grep -q "step 1 differs" "$fake/report.md"' "two cuda runs whose losses differ fail the reproducible step, naming the step ($st)"

TORCHPY=torchpy run; st=$?
check '[ $st = 0 ] && grep -q "PyTorch 10000 tokens/s, maestro 20000 tokens/s: maestro / torch = 2.00" "$fake/report.md"' "torch with CUDA: the eager peer's ratio ($st)"
check 'grep -q "PyTorch (SDPA, fused AdamW) 40000 tokens/s, maestro 20000 tokens/s: maestro / torch = 0.50" "$fake/report.md"' "... and PyTorch's best, SDPA and fused AdamW"

STALL=1 STEP_TIMEOUT=2 run; st=$?
check '[ $st = 1 ] && grep -q "^## selfcheck: FAIL" "$fake/report.md" && grep -q "stopped after --step-timeout 2 s" "$fake/report.md"' "a step that hangs is stopped at --step-timeout and FAILs ($st)"
check '[ $(grep -c ": PASS" "$fake/report.md") = 29 ]' "... and the steps after it still run (both self-checks stall)"

ONLY=flash run; st=$?
check '[ $st = 0 ] && [ $(grep -c "^## " "$fake/report.md") = 6 ] && [ $(grep -c ": PASS" "$fake/report.md") = 6 ]' "--only flash: the six flash steps, and only those ($st)"
check 'grep -q "flash attention: tokens/s 25000 (no .transformer step. to compare), MFU 26.5% of 989 TFLOP/s, no .gemm peak." "$fake/report.md"' "... the flash step says what it has nothing to compare with"
check 'grep -q "^- steps: only those matching --only .flash." "$fake/report.md"' "... and the report says which steps it ran"

[ "$fail" = 0 ] || { echo "--- report headers:"; grep "^## " "$fake/report.md"; }
exit $fail
