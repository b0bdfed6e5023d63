// The CUDA backend's start-up self-check: on the first use of a device,
// (1) every kernel of the reference configuration (fp32 GEMMs, cuBLAS
// attention) that the run calls (the vocabulary-parallel losses with tp > 1
// only) runs against the CPU backend, then (2) the fast kernels (the
// tiled online-softmax attention, forward and backward, causal and
// bidirectional, GQA; the bf16 cuBLASLt GEMMs) and (3) the tensor-core
// attention and the flash kernels — each fast attention only where the run
// may call it — against
// that reference path on the same device — small random
// inputs (gpu/backend_compare.h) — and a disagreement beyond bf16
// tolerance refuses the run; (4) a hand-off left in one backend's memory
// and read by another (check_handoff_copies) must come back exact. This is what makes
// kernels written without a GPU safe to ship: on new hardware they prove
// themselves before training.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/backend_compare.h"
#include "gpu/launch_plan.h"

namespace maestro {

// A fast kernel that disagrees with the reference path; what() names the
// device, the kernel and the error.
struct GpuSelfCheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

constexpr double kSelfCheckTolerance = 1e-2;      // bf16 (llm.c's bound)
constexpr double kSelfCheckGemmTolerance = 2e-2;  // bf16-rounded operands, fp32 accumulation
// The tensor-core and flash attentions round q, k, v, P (and dO, dS) to
// bf16: three roundings in a row on the way to a gradient.
constexpr double kSelfCheckTensorCoreAttentionTolerance = 5e-2;

// Runs the check on `device`; returns every comparison, throws
// GpuSelfCheckFailed on the first one out of tolerance. tensor_parallel:
// the run has tp > 1, so the vocabulary-parallel loss kernels, which only
// it calls, are checked too. attention: the run's `--gpu-attention`; the
// fast attention kernels it never calls are not checked
// (self_checked_attention, gpu/launch_plan.h).
std::vector<OpCheck> gpu_self_check(int device, bool bf16_gemm, bool tensor_parallel,
                                    AttentionPath attention = AttentionPath::Auto);

}  // namespace maestro
