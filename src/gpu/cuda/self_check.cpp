// gpu_self_check (self_check.h).
#include "gpu/cuda/self_check.h"

#include <fmt/format.h>

#include "gpu/cuda/cuda_backend.h"

namespace maestro {

std::vector<OpCheck> gpu_self_check(int device, bool bf16_gemm) {
  CudaBackendOptions fast_opt, ref_opt;
  fast_opt.device = ref_opt.device = device;
  fast_opt.bf16_gemm = bf16_gemm;
  fast_opt.attention = AttentionPath::Fast;
  ref_opt.bf16_gemm = false;
  ref_opt.attention = AttentionPath::Reference;
  fast_opt.min_segment_bytes = ref_opt.min_segment_bytes = size_t(64) << 20;  // small inputs, small arenas
  const std::unique_ptr<Backend> fast = make_cuda_backend(fast_opt), ref = make_cuda_backend(ref_opt);
  CompareOptions o;
  o.ops = {"attention", "linear"};
  o.tolerance = kSelfCheckTolerance;
  o.gemm_tolerance = kSelfCheckGemmTolerance;
  std::vector<OpCheck> checks = compare_backends(*fast, *ref, o);
  for (const OpCheck& c : checks)
    if (!c.ok())
      throw GpuSelfCheckFailed(fmt::format(
          "GPU self-check on CUDA device {}: kernel {} disagrees with the reference path: relative error {:.3g} > {:.3g} "
          "(--gpu-selfcheck=off skips this check)",
          device, c.op, c.rel_err, c.tolerance));
  return checks;
}

}  // namespace maestro
