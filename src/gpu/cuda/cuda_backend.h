// The CUDA backend: every op of nn/backend.h on one CUDA device, queued on
// the backend's own stream (so sections sharing a GPU overlap on separate
// streams, and a step synchronises only in copy_to_host).
//
// Precision: the interface's buffers are fp32. With bf16 GEMMs (the
// default, `precision = bf16`) each linear layer's operands are rounded to
// bf16 into scratch and multiplied by cuBLASLt with fp32 accumulation and
// an fp32 result; with fp32 GEMMs (`precision = fp32`) cuBLASLt computes in
// plain fp32 (no TF32). Every other kernel computes in fp32; their
// per-element math is gpu/kernel_math.h.
//
// Attention: the reference path runs per sequence cuBLAS strided-batched
// Q·Kᵀ, a fused masked softmax and P·V (backward likewise) in fp32; the
// tensor-core path is the same with bf16 GEMM operands; the fast path is a
// tiled online-softmax kernel (a warp per query row, K/V tiles of 32 keys
// in shared memory) for head sizes up to 128. `Auto`: choose_attention
// (gpu/launch_plan.h).
//
// Memory: buffers are placed in a DeviceArena (gpu/device_arena.h) over a
// few large device allocations; host uploads go through a pinned staging
// ring; never managed memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpu/launch_plan.h"  // AttentionPath
#include "nn/backend.h"

namespace maestro {

struct CudaBackendOptions {
  int device = 0;
  bool bf16_gemm = true;
  // With bf16 GEMMs: want the engine's bf16 copies of linear operands
  // (Backend::wants_bf16_operands); off, every linear op rounds its input
  // and weight itself (bench_gpu step --no-bf16-copies, the A/B of
  // bench/gpu/run.sh).
  bool bf16_operand_copies = true;
  AttentionPath attention = AttentionPath::Auto;
  size_t min_segment_bytes = size_t(1) << 30;  // the arena grows by at least this much
  // Query-row block of a causal sequence's batched attention GEMMs
  // (gemm_plan.h): 0 = causal_block(L) (launch_plan.h); the self-check sets
  // a small one so its short sequences run the blocked GEMMs.
  int64_t causal_block = 0;
  // Under Auto, the most device memory the batched attention's [H, L, L]
  // buffers may take (choose_attention, launch_plan.h); a longer sequence
  // takes the tiled kernel. 0 = an eighth of the device's memory.
  int64_t attention_scratch_budget = 0;
  // Time every op's work on the device: two timing events on the stream
  // around each op (cuda_backend_op_times; bench_gpu step --profile). Off:
  // no events.
  bool profile_ops = false;
};

// One op of nn/backend.h in a profile: its calls and their device time.
struct OpTime {
  std::string op;  // "linear_forward", ...
  int64_t calls = 0;
  double ms = 0;
};

// With CudaBackendOptions::profile_ops: each op's device time since the
// last call, the most first (waits for the backend's queued work). Empty
// for any other backend, or with profiling off.
std::vector<OpTime> cuda_backend_op_times(Backend& backend);

// Throws CudaError (gpu/cuda/cuda_check.h) when the device cannot be used.
std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options);

// The stream (a cudaStream_t) every op of a backend from make_cuda_backend
// is queued on; null for any other backend.
void* cuda_backend_stream(Backend& backend);

}  // namespace maestro
