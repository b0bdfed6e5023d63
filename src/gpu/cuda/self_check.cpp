// gpu_self_check (self_check.h).
#include "gpu/cuda/self_check.h"

#include <fmt/format.h>

#include "cpu/cpu_backend.h"
#include "gpu/cuda/cuda_backend.h"

namespace maestro {

std::vector<OpCheck> gpu_self_check(int device, bool bf16_gemm, bool tensor_parallel, AttentionPath attention) {
  const SelfCheckedAttention paths = self_checked_attention(attention, bf16_gemm);
  CudaBackendOptions fast_opt, ref_opt;
  fast_opt.device = ref_opt.device = device;
  fast_opt.bf16_gemm = bf16_gemm;
  fast_opt.attention = AttentionPath::Fast;
  ref_opt.bf16_gemm = false;
  ref_opt.attention = AttentionPath::Reference;
  fast_opt.min_segment_bytes = ref_opt.min_segment_bytes = size_t(64) << 20;  // small inputs, small arenas
  // The inputs' sequences (9 and 15 tokens) are below causal_block's length:
  // blocks of 4 rows make the reference and tensor-core paths run their
  // causal GEMMs in query blocks as long sequences do (gemm_plan.h).
  CudaBackendOptions blocked_ref_opt = ref_opt;
  blocked_ref_opt.causal_block = 4;
  const std::unique_ptr<Backend> fast = make_cuda_backend(fast_opt), ref = make_cuda_backend(ref_opt);
  auto refuse = [&](const std::vector<OpCheck>& checks, const char* against) {
    for (const OpCheck& c : checks)
      if (!c.ok())
        throw GpuSelfCheckFailed(fmt::format(
            "GPU self-check on CUDA device {}: kernel {} disagrees with {}: relative error {:.3g} > {:.3g} "
            "({}--gpu-selfcheck=off skips this check)",
            device, c.op, against, c.rel_err, c.tolerance,
            c.op.rfind("attention", 0) == 0 && attention != AttentionPath::Reference
                ? "--gpu-attention=reference trains on the reference attention instead; "
                : ""));
  };
  CompareOptions o;
  o.tolerance = kSelfCheckTolerance;
  o.gemm_tolerance = kSelfCheckGemmTolerance;
  // 1. every kernel of the reference path that the run calls against the
  // CPU backend: the vocabulary-parallel losses only with tp > 1, so that
  // those kernels (not yet run on a GPU) cannot stop a run that never calls
  // them; bench/gpu's op check runs them always
  for (const std::string& family : compared_op_families())
    if (family != "vocab_parallel" || tensor_parallel) o.ops.insert(family);
  const std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::vector<OpCheck> checks = compare_backends(*ref, *cpu, o);
  refuse(checks, "the CPU backend");
  // 1b. the reference attention in causal blocks against the CPU backend
  o.ops = {"attention"};
  const std::unique_ptr<Backend> blocked_ref = make_cuda_backend(blocked_ref_opt);
  std::vector<OpCheck> blocked_checks = compare_backends(*blocked_ref, *cpu, o);
  for (OpCheck& c : blocked_checks) c.op += " (causal blocks)";
  refuse(blocked_checks, "the CPU backend");
  checks.insert(checks.end(), blocked_checks.begin(), blocked_checks.end());
  // 2. the fast kernels against the reference path: the tiled attention
  // where the run may call it, the bf16 GEMMs
  o.ops = {"linear"};
  if (paths.tiled) o.ops.insert("attention");
  std::vector<OpCheck> fast_checks = compare_backends(*fast, *ref, o);
  for (OpCheck& c : fast_checks) c.op += " (fast)";
  refuse(fast_checks, "the reference path");
  checks.insert(checks.end(), fast_checks.begin(), fast_checks.end());
  // 3. the bf16 attentions against the reference path, where the run may
  // call them: the tensor-core path (in causal blocks), the flash kernels
  auto check_bf16_attention = [&](AttentionPath path, const char* label) {
    CudaBackendOptions opt = fast_opt;
    opt.attention = path;
    opt.causal_block = 4;
    const std::unique_ptr<Backend> b = make_cuda_backend(opt);
    o.ops = {"attention"};
    o.attention_tolerance = kSelfCheckTensorCoreAttentionTolerance;
    std::vector<OpCheck> bf16_checks = compare_backends(*b, *ref, o);
    for (OpCheck& c : bf16_checks) c.op += label;
    refuse(bf16_checks, "the reference path");
    checks.insert(checks.end(), bf16_checks.begin(), bf16_checks.end());
  };
  if (paths.tensor_core) check_bf16_attention(AttentionPath::TensorCore, " (tensor cores)");
  if (paths.flash) check_bf16_attention(AttentionPath::Flash, " (flash)");
  // 4. a hand-off left in one backend's memory, read by another of this
  // device as a consumer section reads it (device to device, event-ordered)
  std::vector<OpCheck> handoff_checks = check_handoff_copies(*ref, *fast);
  refuse(handoff_checks, "the producer's bytes");
  checks.insert(checks.end(), handoff_checks.begin(), handoff_checks.end());
  return checks;
}

}  // namespace maestro
