// The CUDA backend (cuda_backend.h): memory (arena, staging), the GEMMs
// (cuBLASLt; the attention reference path's batched GEMMs through cuBLAS)
// and the order of kernel launches; the kernels are elementwise_kernels.cu
// and attention_kernels.cu.
#include "gpu/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "gpu/cuda/attention_kernels.h"
#include "gpu/cuda/cublas_library.h"
#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/elementwise_kernels.h"
#include "gpu/cuda/vocab_parallel_kernels.h"
#include "gpu/device_arena.h"
#include "gpu/fence_ledger.h"
#include "gpu/gemm_plan.h"
#include "gpu/launch_plan.h"
#include "transport/pinned_ranges.h"

namespace maestro {

namespace {

using namespace cuda_detail;

constexpr size_t kStagingBytes = size_t(64) << 20;    // pinned host ring for uploads
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt workspace, allocated once

// What the attention's gradient products do with a gradient (gemm_plan.h).
GradWrite grad_write(const Grad& g) { return !g.p ? GradWrite::None : g.add ? GradWrite::Add : GradWrite::Overwrite; }

// Largest power of two (<= 256) that divides the address: cuBLASLt picks
// kernels by operand alignment.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

// What a cached cuBLASLt plan depends on: a row-major product C[M,Nc] (+)=
// op(A)·op(B) (gpu/gemm_plan.h maps it to cuBLAS's column-major call).
struct GemmKey {
  bool ta, tb;
  int64_t M, Nc, K, lda, ldb, ldc;
  cudaDataType ab, cd;  // A and B's type; C and D's (bf16: a linear output in bf16 alone)
  bool bias, accumulate;
  uint32_t align_a, align_b, align_c;
  auto tie() const {
    return std::tie(ta, tb, M, Nc, K, lda, ldb, ldc, ab, cd, bias, accumulate, align_a, align_b, align_c);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool bias_epilogue = false;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : Backend(Device::Cuda), opt_(o) {
    int count = 0;
    MAESTRO_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (o.device < 0 || o.device >= count)
      throw CudaError(fmt::format("CUDA device {} does not exist ({} device(s) found)", o.device, count));
    MAESTRO_CUDA_CHECK(cudaSetDevice(o.device));
    size_t free_bytes = 0;
    MAESTRO_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &device_memory_));
    scratch_budget_ = o.attention_scratch_budget ? o.attention_scratch_budget : int64_t(device_memory_ / 8);
    if (o.attention == AttentionPath::Flash) {  // sm_80 and later have the flash kernels' shared memory
      int optin = 0;
      MAESTRO_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, o.device));
      if (optin < flash_layout(kFlashMaxHead).max_bytes())
        throw CudaError(fmt::format("CUDA device {} gives a block {} bytes of shared memory; the flash attention "
                                    "kernels take {} (--gpu-attention=tensorcore or tiled instead)",
                                    o.device, optin, flash_layout(kFlashMaxHead).max_bytes()));
    }
    MAESTRO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    MAESTRO_CUDA_CHECK(cudaMallocHost(&staging_, kStagingBytes));
    load_cublas();  // dlopen, once per process (cublas_library.h)
    MAESTRO_CUBLAS_CHECK(cublasCreate(&cublas_));
    MAESTRO_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Default math: CUBLAS_COMPUTE_32F keeps fp32 products in fp32 (no TF32),
    // and bf16 operands may take the tensor cores (pedantic mode could not).
    MAESTRO_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    MAESTRO_CUBLAS_CHECK(cublasLtCreate(&lt_));
    workspace_ = place(kWorkspaceBytes);
    // cuBLAS's own workspace too, so that it never allocates during a step
    cublas_workspace_ = place(kWorkspaceBytes);
    MAESTRO_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kWorkspaceBytes));
  }

  ~CudaBackend() override {
    // Errors here cannot be reported: the device may already be gone.
    cudaSetDevice(opt_.device);
    cudaStreamSynchronize(stream_);
    for (auto& [key, plan] : plans_) {
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.c);
      cublasLtMatmulDescDestroy(plan.desc);
    }
    for (cudaEvent_t e : fences_.take_pending()) cudaEventDestroy(e);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    for (const OpSpan& sp : spans_) cudaEventDestroy(sp.start), cudaEventDestroy(sp.end);
    for (cudaEvent_t e : timing_events_) cudaEventDestroy(e);
    cublasLtDestroy(lt_);
    cublasDestroy(cublas_);
    for (void* s : segments_) cudaFree(s);
    cudaFreeHost(staging_);
    cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const { return stream_; }

  // ---- memory -----------------------------------------------------------------
  size_t device_memory_bytes() const override { return device_memory_; }
  void* allocate(size_t n, DType dtype) override { return place(n * dtype_size(dtype)); }
  double* allocate_scalars(size_t n) override { return static_cast<double*>(place(n * sizeof(double))); }
  void release(void* p) override {
    if (!p) return;
    std::lock_guard lock(mu_);
    const auto it = blocks_.find(p);
    if (it == blocks_.end()) throw std::logic_error("CudaBackend::release: not a buffer of this backend");
    // Stream order makes this safe: work queued later that reuses the bytes
    // runs after the work queued before that still reads them.
    arena_.release(it->second);
    blocks_.erase(it);
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    const OpScope op(*this, __func__);
    if (bytes > kStagingBytes) {  // rare and large: straight from pageable memory, synchronously
      MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      MAESTRO_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    void* staged = stage(src, bytes);
    MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_));
  }
  // Pinned memory (cuda_pin_host: the transport's hand-off pools): DMA
  // straight from the caller's bytes, left queued — the caller keeps them
  // until passed(fence()). A resident hand-off (device memory of this or
  // another GPU): device to device, or peer to peer, left queued likewise.
  // Other memory: through the ring as above.
  void copy_from_host_held(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    if (const int from = device_of(src); from >= 0) {
      const OpScope op(*this, __func__);
      if (from == opt_.device)
        MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
      else
        MAESTRO_CUDA_CHECK(cudaMemcpyPeerAsync(dst, opt_.device, src, from, bytes, stream_));
      return;
    }
    if (!pinned_host_ranges().covers(src, bytes)) return copy_from_host(dst, src, bytes);
    const OpScope op(*this, __func__);
    MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  // A resident hand-off's marker: an event recorded after the work so far
  // (its own, not the fence ledger's: it lives as long as the hand-off).
  std::shared_ptr<void> ready_marker() override {
    on_device();
    cudaEvent_t e = nullptr;
    MAESTRO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::shared_ptr<void> marker(e, [](void* ev) { cudaEventDestroy(static_cast<cudaEvent_t>(ev)); });
    MAESTRO_CUDA_CHECK(cudaEventRecord(e, stream_));
    return marker;
  }
  void wait_for(const std::shared_ptr<void>& marker) override {
    if (!marker) return;
    on_device();
    MAESTRO_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(marker.get()), 0));
  }
  // A column slice from pinned memory: one strided DMA, left queued (the
  // caller holds the source as above); from other memory, row by row.
  void copy_rows_from_host_held(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                size_t rows) override {
    if (rows == 0 || row_bytes == 0) return;
    if (device_of(src) == opt_.device) {  // a resident hand-off on this GPU
      const OpScope op(*this, __func__);
      MAESTRO_CUDA_CHECK(
          cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    if (device_of(src) >= 0 || !pinned_host_ranges().covers(src, (rows - 1) * src_pitch + row_bytes))
      return Backend::copy_rows_from_host_held(dst, dst_pitch, src, src_pitch, row_bytes, rows);
    const OpScope op(*this, __func__);
    MAESTRO_CUDA_CHECK(
        cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyHostToDevice, stream_));
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    {
      const OpScope op(*this, __func__);
      if (bytes > 0) MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    }
    MAESTRO_CUDA_CHECK(cudaStreamSynchronize(stream_));  // also reports a fault of any queued kernel
    if (opt_.profile_ops) resolve_spans();
  }
  // An event recorded after the work so far; passed: the stream reached it
  // (cudaEventQuery, no wait; a faulted stream throws). fence_ledger.h.
  uint64_t fence() override {
    on_device();
    std::lock_guard lock(fence_mu_);
    cudaEvent_t e = nullptr;
    if (spare_events_.empty()) MAESTRO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    else e = spare_events_.back(), spare_events_.pop_back();
    MAESTRO_CUDA_CHECK(cudaEventRecord(e, stream_));
    return fences_.add(e);
  }
  bool passed(uint64_t f) override {
    std::lock_guard lock(fence_mu_);
    return fences_.passed(
        f,
        [](cudaEvent_t e) {
          const cudaError_t st = cudaEventQuery(e);
          if (st == cudaErrorNotReady) return false;
          MAESTRO_CUDA_CHECK(st);
          return true;
        },
        [this](cudaEvent_t e) { spare_events_.push_back(e); });
  }
  void convert(void* dst, DType dd, const void* src, DType sd, size_t n) override {
    const OpScope op(*this, __func__);
    launch_convert(dst, dd, src, sd, n, stream_);
  }
  void zero(float* p, size_t n) override {
    const OpScope op(*this, __func__);
    if (n) MAESTRO_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_));
  }
  void zero_scalars(double* p, size_t n) override {
    const OpScope op(*this, __func__);
    if (n) MAESTRO_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(double), stream_));
  }
  void copy_rows(float* dst, size_t dst_stride, const float* src, size_t src_stride, size_t width,
                 size_t rows) override {
    const OpScope op(*this, __func__);
    if (rows && width)
      MAESTRO_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float),
                                           width * sizeof(float), rows, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy(float* dst, const float* src, size_t n) override {
    const OpScope op(*this, __func__);
    if (n && dst != src)
      MAESTRO_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  void add(float* out, const float* a, const float* b, size_t n) override {
    const OpScope op(*this, __func__);
    launch_add(out, a, b, n, stream_);
  }
  void accumulate(float* dst, const float* src, size_t n) override {
    const OpScope op(*this, __func__);
    launch_accumulate(dst, src, n, stream_);
  }
  void scale(float* p, float s, size_t n) override {
    const OpScope op(*this, __func__);
    launch_scale(p, s, n, stream_);
  }
  void sq_norm(double* out, const float* p, size_t n) override {
    const OpScope op(*this, __func__);
    auto* partial = reinterpret_cast<double*>(scratch(kNormPartials, size_t(2 * kSqNormMaxBlocks)));
    launch_sq_norm(out, partial, p, n, stream_);
  }

  // ---- embedding -------------------------------------------------------------------
  void embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t N, int64_t C) override {
    const OpScope op(*this, __func__);
    launch_embedding_forward(out, upload_indices(tokens, N, 0), table, N, C, stream_);
  }
  void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t N, int64_t C) override {
    const OpScope op(*this, __func__);
    const TokenRows by_token = group_rows_by_token(tokens, N);  // no atomics: each token's rows in row order
    launch_embedding_backward(dtable, dout, upload_indices(by_token.packed.data(), int64_t(by_token.packed.size()), 0),
                              by_token.distinct, C, stream_);
  }

  // ---- linear ------------------------------------------------------------------------
  // bf16 GEMMs read the operands' bf16 copies when the engine passes them (no rounding per call).
  bool wants_bf16_operands() const override { return opt_.bf16_gemm && opt_.bf16_operand_copies; }
  bool bf16_operands_suffice() const override { return wants_bf16_operands(); }  // gemm() reads a16/b16 alone
  void linear_forward(Out out, Operand inp, Operand w, const float* bias, int64_t N, int64_t C,
                      int64_t OC) override {
    const OpScope op(*this, __func__);
    if (N == 0) return;
    // out[N,OC] = inp[N,C] · w[OC,C]ᵀ (+ bias, fused as an epilogue where cuBLASLt has one).
    // In bf16 alone from bf16 GEMMs, no bias: cuBLASLt rounds its fp32 sums into D, in bf16.
    if (!out.f32 && opt_.bf16_gemm && !bias) {
      gemm(false, true, N, OC, C, inp.f32, C, w.f32, C, false, nullptr, OC, nullptr, inp.bf16, w.bf16, out.bf16);
      return;
    }
    // Else the fp32 result (in scratch when out is bf16 alone), rounded after where a copy is wanted.
    float* o = out.f32 ? out.f32 : scratch(kLinearOut, size_t(N * OC));
    const bool fused = gemm(false, true, N, OC, C, inp.f32, C, w.f32, C, false, o, OC, bias, inp.bf16, w.bf16);
    if (bias && !fused) launch_bias_add(o, bias, N, OC, stream_);
    if (out.bf16) launch_convert(out.bf16, DType::BF16, o, DType::F32, size_t(N * OC), stream_);
  }
  void linear_backward(Grad dinp, Grad dw, float* dbias, Operand dy, Operand inp, Operand w, int64_t N, int64_t C,
                       int64_t OC) override {
    const OpScope op(*this, __func__);
    if (N == 0) {  // no rows: an overwritten dw is the empty sum
      if (dw.p && !dw.add) zero(dw.p, size_t(OC * C));
      return;
    }
    // dout's bf16 copy: the caller's (an activation op wrote it), else rounded once for both GEMMs
    const float* dout = dy.f32;
    const void* dout16 = nullptr;
    if (opt_.bf16_gemm) dout16 = dy.bf16 ? dy.bf16 : dinp.p && dw.p ? rounded(kBf16Dout, dout, size_t(N * OC)) : nullptr;
    if (dinp.p)  // dinp[N,C] += (or =) dout·w
      gemm(false, false, N, C, OC, dout, OC, w.f32, C, dinp.add, dinp.p, C, nullptr, dout16, w.bf16);
    if (dw.p)  // dw[OC,C] += (or =) doutᵀ·inp
      gemm(true, false, OC, C, N, dout, OC, inp.f32, C, dw.add, dw.p, C, nullptr, dout16, inp.bf16);
    if (dbias) {
      if (!dout) throw std::logic_error("linear_backward: dbias needs dout in fp32");
      launch_column_sum(dbias, column_partials(N, OC), dout, N, OC, stream_);
    }
  }

  // ---- norms, rotary, activations, patches ---------------------------------------------
  void rmsnorm_forward(Out out, float* rstd, const float* inp, const float* w, int64_t N, int64_t C,
                       float eps) override {
    const OpScope op(*this, __func__);
    launch_rmsnorm_forward(out.f32, bf16_out(out.bf16), rstd, inp, w, N, C, eps, stream_);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                        int64_t N, int64_t C) override {
    const OpScope op(*this, __func__);
    launch_rmsnorm_backward(dinp, dw, column_partials(N, C), dout, inp, w, rstd, N, C, stream_);
  }
  void layernorm_forward(Out out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C, float eps) override {
    const OpScope op(*this, __func__);
    launch_layernorm_forward(out.f32, bf16_out(out.bf16), mean, rstd, inp, w, b, N, C, eps, stream_);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) override {
    const OpScope op(*this, __func__);
    launch_layernorm_backward(dinp, dw, db, column_partials(N, C), dout, inp, w, mean, rstd, N, C, stream_);
  }
  void rope_forward(Out out, Operand x, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                    float theta) override {
    const OpScope op(*this, __func__);
    launch_rope(out.f32, bf16_out(out.bf16), in(x), upload_indices(pos, N, 0), N, H, D, theta, 1.0f, stream_);
  }
  void rope_backward(Out out, const float* dx, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                     float theta) override {
    const OpScope op(*this, __func__);
    launch_rope(out.f32, bf16_out(out.bf16), {dx, nullptr}, upload_indices(pos, N, 0), N, H, D, theta, -1.0f,
                stream_);
  }
  void swiglu_forward(Out out, Operand gate, Operand up, size_t n) override {
    const OpScope op(*this, __func__);
    launch_swiglu_forward(out.f32, bf16_out(out.bf16), in(gate), in(up), n, stream_);
  }
  void swiglu_backward(GradOut dgate, GradOut dup, const float* dout, Operand gate, Operand up,
                       size_t n) override {
    const OpScope op(*this, __func__);
    launch_swiglu_backward(dgate.p, dgate.add, bf16_out(dgate.bf16), dup.p, dup.add, bf16_out(dup.bf16), dout,
                           in(gate), in(up), n, stream_);
  }
  void gelu_forward(Out out, const float* inp, size_t n) override {
    const OpScope op(*this, __func__);
    launch_gelu_forward(out.f32, bf16_out(out.bf16), inp, n, stream_);
  }
  void gelu_backward(GradOut dinp, const float* dout, const float* inp, size_t n) override {
    const OpScope op(*this, __func__);
    if (dinp.wanted()) launch_gelu_backward(dinp.p, dinp.add, bf16_out(dinp.bf16), dout, inp, n, stream_);
  }
  void relu_forward(float* out, const float* inp, size_t n) override {
    const OpScope op(*this, __func__);
    launch_relu_forward(out, inp, n, stream_);
  }
  void relu_backward(Grad dinp, const float* dout, const float* inp, size_t n) override {
    const OpScope op(*this, __func__);
    launch_relu_backward(dinp.p, dinp.add, dout, inp, n, stream_);
  }
  void im2col_patches(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p) override {
    const OpScope op(*this, __func__);
    launch_im2col_patches(patches, pixels, I, Ch, S, p, stream_);
  }

  // ---- attention ------------------------------------------------------------------------
  AttentionKernel attention_kernel(const int32_t* cu, int64_t n_seq, int64_t H, int64_t D) const {
    return choose_attention(opt_.attention, opt_.bf16_gemm, D, longest_sequence(cu, n_seq), H, scratch_budget_);
  }
  // The query-row block of a sequence's batched GEMMs (0: the whole square).
  int64_t block_of(int64_t L, bool causal) const {
    if (!causal) return 0;
    return opt_.causal_block > 0 ? opt_.causal_block : causal_block(L);
  }
  void attention_forward(float* out, float* lse, Operand qo, Operand ko, Operand vo, const int32_t* cu, int64_t n_seq,
                         int64_t N, int64_t H, int64_t KV, int64_t D, bool causal) override {
    const OpScope op(*this, __func__);
    if (N == 0) return;
    const AttentionKernel kernel = attention_kernel(cu, n_seq, H, D);
    if (kernel == AttentionKernel::Tiled) {  // fp32: q, k, v widened where they come in bf16 alone
      const float *q = widened(kQ16, qo, N * H * D), *k = widened(kK16, ko, N * KV * D), *v = widened(kV16, vo, N * KV * D);
      const auto [tiles, n_tiles] = upload_tiles(cu, n_seq, kFastRowsPerTile);
      launch_fast_attention_forward(out, lse, q, k, v, tiles, n_tiles, H, KV, D, causal, stream_);
      return;
    }
    if (kernel == AttentionKernel::Flash) {  // reads bf16 copies of q, k, v
      void* b16[kAttnBuffers] = {};
      attention_inputs16(b16, qo, ko, vo, nullptr, N, H, KV, D);
      const auto [tiles, n_tiles] = upload_tiles(cu, n_seq, kFlashForwardRows);
      launch_flash_attention_forward(out, lse, bits(b16[kAttnQ]), bits(b16[kAttnK]), bits(b16[kAttnV]), tiles,
                                     n_tiles, H, KV, D, causal, stream_);
      return;
    }
    // Batched GEMMs per sequence (gpu/gemm_plan.h): S = scale·q·kᵀ by cuBLAS,
    // P = masked softmax(S) in place, out = P·v; with bf16 operands (rounded
    // copies of q, k, v and P) on the tensor-core path; a long causal
    // sequence in query blocks that skip the masked keys.
    const bool b16 = kernel == AttentionKernel::BatchedBf16;
    const float sc = 1.0f / std::sqrt(float(D));
    float* bufs[kAttnBuffers] = {};  // fp32 q, k, v only for the fp32 GEMMs (widened where they come in bf16 alone)
    if (!b16) fp32_qkv(bufs, qo, ko, vo, N, H, KV, D);
    bufs[kAttnOut] = out;
    void* bufs16[kAttnBuffers] = {};
    if (b16) attention_inputs16(bufs16, qo, ko, vo, nullptr, N, H, KV, D);
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t t0 = cu[s], L = cu[s + 1] - cu[s];
      if (L == 0) continue;
      bufs[kAttnScores] = scratch(kScores, size_t(H * L * L));  // [H, L, L]
      const int64_t blk = block_of(L, causal);
      run(attention_head_products(kAttnScores, sc, kAttnQ, kAttnK, t0, L, H, KV, D, blk), bufs,
          b16 ? bufs16 : nullptr);
      if (b16) {  // P straight to bf16, the P·v GEMM's operand
        void* p16 = scratch(kP16, size_t(H * L * L + 1) / 2);
        launch_attention_softmax_bf16(bufs[kAttnScores], static_cast<uint16_t*>(p16), lse, t0, L, H, causal, blk,
                                      stream_);
        bufs16[kAttnScores] = p16;
      } else {
        launch_attention_softmax(bufs[kAttnScores], lse, t0, L, H, causal, stream_);
      }
      run(attention_values(t0, L, H, KV, D, blk), bufs, b16 ? bufs16 : nullptr);
    }
  }
  void attention_backward(Grad dq, Grad dk, Grad dv, const float* dout, const float* out, const float* lse,
                          Operand qo, Operand ko, Operand vo, const int32_t* cu, int64_t n_seq, int64_t N, int64_t H,
                          int64_t KV, int64_t D, bool causal) override {
    const OpScope op(*this, __func__);
    if (N == 0 || (!dq.p && !dk.p && !dv.p)) return;
    float* delta = scratch(kDelta, size_t(N * H));  // [N, H] = Σ_d dout·out
    launch_attention_delta(delta, dout, out, N, H, D, stream_);
    const AttentionKernel kernel = attention_kernel(cu, n_seq, H, D);
    if (kernel == AttentionKernel::Tiled) {  // as in the forward
      const float *q = widened(kQ16, qo, N * H * D), *k = widened(kK16, ko, N * KV * D), *v = widened(kV16, vo, N * KV * D);
      const auto [tiles, n_tiles] = upload_tiles(cu, n_seq, kFastRowsPerTile);
      launch_fast_attention_backward(dq.p, dq.add, dk.p, dk.add, dv.p, dv.add, dout, lse, delta, q, k, v, tiles, n_tiles,
                                     H, KV, D, causal, stream_);
      return;
    }
    if (kernel == AttentionKernel::Flash) {  // reads bf16 copies of q, k, v, dout
      void* b16[kAttnBuffers] = {};
      attention_inputs16(b16, qo, ko, vo, dout, N, H, KV, D);
      const auto [tiles, n_tiles] = upload_tiles(cu, n_seq, kFlashRows);
      launch_flash_attention_backward(dq.p, dq.add, dk.p, dk.add, dv.p, dv.add, bits(b16[kAttnDOut]), lse, delta,
                                      bits(b16[kAttnQ]), bits(b16[kAttnK]), bits(b16[kAttnV]), tiles, n_tiles, H, KV,
                                      D, causal, stream_);
      return;
    }
    // Batched GEMMs per sequence (gpu/gemm_plan.h): P from lse; dP = dO·vᵀ;
    // dS = P∘(dP − delta); dv += Pᵀ·dO; dq += scale·dS·k; dk += scale·dSᵀ·q
    // (or =: β = 0, gemm_plan.h). Query heads of a group add into their kv
    // head in turn (stream order).
    const bool b16 = kernel == AttentionKernel::BatchedBf16;
    const float sc = 1.0f / std::sqrt(float(D));
    float* bufs[kAttnBuffers] = {nullptr, nullptr, nullptr, const_cast<float*>(out), const_cast<float*>(dout),
                                 dq.p, dk.p, dv.p};
    if (!b16) fp32_qkv(bufs, qo, ko, vo, N, H, KV, D);  // as in the forward
    void* bufs16[kAttnBuffers] = {};
    if (b16) attention_inputs16(bufs16, qo, ko, vo, dout, N, H, KV, D);
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t t0 = cu[s], L = cu[s + 1] - cu[s];
      if (L == 0) continue;
      bufs[kAttnScores] = scratch(kScores, size_t(H * L * L));    // [H, L, L]
      bufs[kAttnDScores] = scratch(kDScores, size_t(H * L * L));  // [H, L, L]
      const int64_t blk = block_of(L, causal);
      run(attention_head_products(kAttnScores, sc, kAttnQ, kAttnK, t0, L, H, KV, D, blk), bufs,
          b16 ? bufs16 : nullptr);
      run(attention_head_products(kAttnDScores, 1.0f, kAttnDOut, kAttnV, t0, L, H, KV, D, blk), bufs,
          b16 ? bufs16 : nullptr);
      if (b16) {  // P and dS in one pass, straight to bf16 (the gradient GEMMs' operands)
        void* p16 = scratch(kP16, size_t(H * L * L + 1) / 2);
        void* ds16 = scratch(kDS16, size_t(H * L * L + 1) / 2);
        launch_attention_backward_scores_bf16(bufs[kAttnScores], bufs[kAttnDScores], static_cast<uint16_t*>(p16),
                                              static_cast<uint16_t*>(ds16), lse, delta, t0, L, H, causal, blk,
                                              stream_);
        bufs16[kAttnScores] = p16;
        bufs16[kAttnDScores] = ds16;
      } else {
        launch_attention_probs(bufs[kAttnScores], lse, t0, L, H, causal, stream_);
        launch_attention_dscores(bufs[kAttnDScores], bufs[kAttnScores], delta, t0, L, H, stream_);
      }
      run(attention_gradients(t0, L, H, KV, D, grad_write(dq), grad_write(dk), grad_write(dv), blk), bufs,
          b16 ? bufs16 : nullptr);
    }
  }

  // ---- losses -------------------------------------------------------------------------------
  void cross_entropy(double* loss, float* dlogits, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                     float scale) override {
    const OpScope op(*this, __func__);
    zero_scalars(loss, 1);
    launch_cross_entropy(loss, row_terms(N), dlogits, logits, upload_indices(targets, N, 0), N, V, scale, stream_);
  }
  void kl_divergence(double* loss, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                     int64_t N, int64_t V, float T, float scale) override {
    const OpScope op(*this, __func__);
    zero_scalars(loss, 1);
    launch_kl_divergence(loss, row_terms(N), dstudent, student, teacher, upload_indices(targets, N, 0), N, V, T, scale,
                         stream_);
  }

  // ---- vocabulary-parallel losses (vocab_parallel_kernels.h) ----------------------------------------
  void shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t valid, float inv_t) override {
    const OpScope op(*this, __func__);
    launch_shard_row_max(mx, x, N, V, valid, inv_t, stream_);
  }
  void max_of_parts(float* mx, const float* parts, int64_t R, int64_t N) override {
    const OpScope op(*this, __func__);
    launch_max_of_parts(mx, parts, R, N, stream_);
  }
  void shard_sumexp(float* se, float* tx, const float* x, const int32_t* targets, const float* mx, int64_t N,
                    int64_t V, int64_t valid, int64_t v0, float inv_t) override {
    const OpScope op(*this, __func__);
    launch_shard_sumexp(se, tx, x, tx ? upload_indices(targets, N, 0) : nullptr, mx, N, V, valid, v0, inv_t, stream_);
  }
  void shard_cross_entropy(double* loss, float* dlogits, const float* x, const int32_t* targets, const float* mx,
                           const float* se, const float* tx, int64_t N, int64_t V, int64_t valid, int64_t v0,
                           float scale) override {
    const OpScope op(*this, __func__);
    launch_shard_cross_entropy(loss, row_terms(N), dlogits, x, upload_indices(targets, N, 0), mx, se, tx, N, V, valid,
                               v0, scale, stream_);
  }
  void shard_kl(float* kl, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                const float* mx_s, const float* se_s, const float* mx_t, const float* se_t, int64_t N, int64_t V,
                int64_t valid, float T, float scale) override {
    const OpScope op(*this, __func__);
    launch_shard_kl(kl, dstudent, student, teacher, upload_indices(targets, N, 0), mx_s, se_s, mx_t, se_t, N, V, valid,
                    T, scale, stream_);
  }
  void masked_row_sum(double* out, const float* rows, const int32_t* targets, int64_t N) override {
    const OpScope op(*this, __func__);
    launch_masked_row_sum(out, rows, upload_indices(targets, N, 0), N, stream_);
  }

  // ---- optimizer --------------------------------------------------------------------------------
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2, float eps,
             float weight_decay, int64_t t, float grad_scale, void* p16) override {
    const OpScope op(*this, __func__);
    launch_adamw(p, g, m, v, static_cast<uint16_t*>(p16), n,
                 gpu_math::adamw_step(lr, beta1, beta2, eps, weight_decay, t, grad_scale), stream_);
  }

  void set_threads(int) override {}  // the device decides; nothing to size
  int threads() const override { return 1; }

 private:
  enum ScratchSlot { kScores, kDScores, kDelta, kIndices, kTiles, kBf16A, kBf16B, kBf16Dout, kQ16, kK16, kV16, kDO16,
                     kP16, kDS16, kNormPartials, kColumnPartials, kRowTerms, kLinearOut, kSlots };

  // The caller's thread may have another device current (several backends
  // per process): every entry point makes ours current first.
  void on_device() { MAESTRO_CUDA_CHECK(cudaSetDevice(opt_.device)); }

  // ---- the op profile (CudaBackendOptions::profile_ops) -----------------------------------
  // An op's entry: its device made current and, when profiling, the op's
  // work on the stream bracketed by two timing events (an op that another
  // op calls is counted in its caller's). Resolved after a sync.
  class OpScope {
   public:
    OpScope(CudaBackend& b, const char* op) : b_(b), op_(op) {
      b_.on_device();
      if (!b_.opt_.profile_ops) return;
      if (op_depth_ == 0) start_ = b_.timing_event();
      ++op_depth_;
    }
    ~OpScope() {
      if (!b_.opt_.profile_ops) return;
      --op_depth_;
      if (start_) b_.end_span(op_, start_);
    }
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    CudaBackend& b_;
    const char* op_;
    cudaEvent_t start_ = nullptr;
  };
  struct OpSpan {
    const char* op;
    cudaEvent_t start, end;
  };
  // A timing event recorded on the stream now.
  cudaEvent_t timing_event() {
    cudaEvent_t e = nullptr;
    {
      std::lock_guard lock(profile_mu_);
      if (!timing_events_.empty()) e = timing_events_.back(), timing_events_.pop_back();
    }
    if (!e) MAESTRO_CUDA_CHECK(cudaEventCreate(&e));
    MAESTRO_CUDA_CHECK(cudaEventRecord(e, stream_));
    return e;
  }
  // Closes an op's span (a destructor: an error drops the span; a faulted
  // stream is reported by the next sync anyway).
  void end_span(const char* op, cudaEvent_t start) noexcept {
    try {
      const cudaEvent_t end = timing_event();
      std::lock_guard lock(profile_mu_);
      spans_.push_back({op, start, end});
    } catch (...) {
      std::lock_guard lock(profile_mu_);
      timing_events_.push_back(start);
    }
  }
  // After a sync of the stream (every span's events done): the spans' times
  // added to their ops' totals, their events kept for reuse.
  void resolve_spans() {
    std::lock_guard lock(profile_mu_);
    for (const OpSpan& sp : spans_) {
      float ms = 0;
      MAESTRO_CUDA_CHECK(cudaEventElapsedTime(&ms, sp.start, sp.end));
      OpTime& t = op_totals_[sp.op];
      t.op = sp.op;
      ++t.calls;
      t.ms += ms;
      timing_events_.push_back(sp.start);
      timing_events_.push_back(sp.end);
    }
    spans_.clear();
  }

 public:
  // The ops' device time since the last call, most first (waits for the stream).
  std::vector<OpTime> take_op_times() {
    on_device();
    MAESTRO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    resolve_spans();
    std::lock_guard lock(profile_mu_);
    std::vector<OpTime> r;
    for (auto& [op, t] : op_totals_) r.push_back(t);
    op_totals_.clear();
    std::sort(r.begin(), r.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
    return r;
  }

 private:

  // The GPU whose memory p is in, or -1 for host memory (pinned, pageable
  // or unknown to CUDA).
  static int device_of(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // an unknown pointer is host memory; clear the sticky-free error
      return -1;
    }
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
  }
  void* place(size_t bytes) {
    on_device();
    std::lock_guard lock(mu_);
    std::optional<DeviceArena::Block> b = arena_.place(bytes);
    if (!b) {  // a new segment: only while the pools grow, never in a steady step
      const size_t seg = DeviceArena::segment_bytes(bytes, opt_.min_segment_bytes);
      void* base = nullptr;
      const cudaError_t st = cudaMalloc(&base, seg);
      if (st != cudaSuccess) {
        cudaGetLastError();
        throw CudaError(fmt::format("CUDA device {}: out of memory placing {} bytes ({} in use in {} segment(s)): {}",
                                    opt_.device, bytes, arena_.bytes_in_use(), arena_.segments(), cudaGetErrorString(st)));
      }
      segments_.push_back(base);
      arena_.add_segment(seg);
      b = arena_.place(bytes);
    }
    void* p = static_cast<char*>(segments_[b->segment]) + b->offset;
    blocks_.emplace(p, *b);
    MAESTRO_CUDA_CHECK(cudaMemsetAsync(p, 0, b->bytes, stream_));
    return p;
  }

  // Scratch of the sums that take no atomics: column chunks' sums [column_chunks(N), C]
  // (launch_plan.h) and a loss's row terms [N] in fp64.
  float* column_partials(int64_t N, int64_t C) { return scratch(kColumnPartials, size_t(column_chunks(N) * C)); }
  double* row_terms(int64_t N) { return reinterpret_cast<double*>(scratch(kRowTerms, size_t(2 * N))); }
  // Grow-only device scratch per slot.
  float* scratch(ScratchSlot slot, size_t floats) {
    auto& [p, cap] = scratch_[slot];
    if (cap < floats) {
      if (p) release(p);
      cap = std::max(floats, cap * 2);
      p = static_cast<float*>(allocate(cap, DType::F32));
    }
    return p;
  }

  // Copies host bytes into the pinned ring; the async copy from there is
  // queued by the caller. Wrapping waits for the stream: the ring's old
  // bytes may still be in flight.
  void* stage(const void* src, size_t bytes) {
    const size_t need = DeviceArena::round_up(bytes);
    if (staging_head_ + need > kStagingBytes) {
      MAESTRO_CUDA_CHECK(cudaStreamSynchronize(stream_));
      staging_head_ = 0;
    }
    void* dst = static_cast<char*>(staging_) + staging_head_;
    std::memcpy(dst, src, bytes);
    staging_head_ += need;
    return dst;
  }
  // A host index array (tokens, positions, targets) as device memory, valid
  // for the work queued next on the stream.
  const int32_t* upload_indices(const int32_t* host, int64_t n, int slot_offset) {
    (void)slot_offset;
    if (n == 0) return nullptr;
    auto* d = reinterpret_cast<int32_t*>(scratch(kIndices, size_t(n)));
    copy_from_host(d, host, size_t(n) * sizeof(int32_t));
    return d;
  }
  std::pair<const AttentionTile*, int64_t> upload_tiles(const int32_t* cu, int64_t n_seq, int rows_per_tile) {
    const std::vector<AttentionTile> tiles = plan_attention_tiles(cu, n_seq, rows_per_tile);
    if (tiles.empty()) return {nullptr, 0};
    static_assert(sizeof(AttentionTile) == 4 * sizeof(float));
    auto* d = reinterpret_cast<AttentionTile*>(scratch(kTiles, tiles.size() * 4));
    copy_from_host(d, tiles.data(), tiles.size() * sizeof(AttentionTile));
    return {d, int64_t(tiles.size())};
  }

  static const uint16_t* bits(const void* p) { return static_cast<const uint16_t*>(p); }
  static uint16_t* bf16_out(void* p) { return static_cast<uint16_t*>(p); }
  // bf16 copies of q, k, v (and dout when given) for the tensor-core and
  // flash paths: the caller's (Operand::bf16), else rounded into scratch.
  void attention_inputs16(void** bufs16, Operand q, Operand k, Operand v, const float* dout, int64_t N, int64_t H,
                          int64_t KV, int64_t D) {
    auto copy = [&](ScratchSlot slot, Operand x, int64_t n) {
      return x.bf16 ? const_cast<void*>(x.bf16) : rounded(slot, x.f32, size_t(n));
    };
    bufs16[kAttnQ] = copy(kQ16, q, N * H * D);
    bufs16[kAttnK] = copy(kK16, k, N * KV * D);
    bufs16[kAttnV] = copy(kV16, v, N * KV * D);
    if (dout) bufs16[kAttnDOut] = rounded(kDO16, dout, size_t(N * H * D));
  }

  // An element-wise op's Operand input (nn/backend.h): its fp32 values, else its bf16 alone.
  static gpu_math::In in(Operand x) { return {x.f32, static_cast<const uint16_t*>(x.bf16)}; }
  // An fp32 kernel's input: x's fp32 values, or its bf16 alone widened into a scratch slot.
  const float* widened(ScratchSlot slot, Operand x, int64_t n) {
    if (x.f32) return x.f32;
    float* d = scratch(slot, size_t(n));
    launch_convert(d, DType::F32, x.bf16, DType::BF16, size_t(n), stream_);
    return d;
  }
  // q, k, v as the fp32 batched GEMMs read them (widened as above).
  void fp32_qkv(float** bufs, Operand q, Operand k, Operand v, int64_t N, int64_t H, int64_t KV, int64_t D) {
    bufs[kAttnQ] = const_cast<float*>(widened(kQ16, q, N * H * D));
    bufs[kAttnK] = const_cast<float*>(widened(kK16, k, N * KV * D));
    bufs[kAttnV] = const_cast<float*>(widened(kV16, v, N * KV * D));
  }

  // src[n] rounded to bf16 into a grow-only scratch slot.
  void* rounded(ScratchSlot slot, const float* src, size_t n) {
    void* d = scratch(slot, (n + 1) / 2);
    launch_convert(d, DType::BF16, src, DType::F32, n, stream_);
    return d;
  }

  // Row-major C[M,Nc] = op(A)·op(B) (+ C when accumulate) (+ bias[Nc]) through
  // cuBLASLt, fp32 compute; bf16 operands (rounded into scratch, or the
  // caller's rounding a16 / b16 when it has one) when opt_.bf16_gemm.
  // With c16 (bf16 operands, no accumulate, no bias): the result in bf16
  // there instead of C — cuBLASLt's C and D in bf16, the fp32 sums rounded
  // once on the way out. Returns whether the bias was fused.
  bool gemm(bool ta, bool tb, int64_t M, int64_t Nc, int64_t K, const float* A, int64_t lda, const float* B,
            int64_t ldb, bool accumulate, float* C, int64_t ldc, const float* bias, const void* a16 = nullptr,
            const void* b16 = nullptr, void* c16 = nullptr) {
    if (c16 && (!opt_.bf16_gemm || accumulate || bias))
      throw std::logic_error("gemm: a bf16 result needs bf16 operands, no accumulation and no bias");
    void* d = c16 ? c16 : static_cast<void*>(C);
    const void *a = A, *b = B;
    cudaDataType ab = CUDA_R_32F;
    if (opt_.bf16_gemm) {
      // Operands are dense here (lda, ldb are their row lengths): round them whole.
      a = a16 ? a16 : rounded(kBf16A, A, size_t(M * K));
      b = b16 ? b16 : rounded(kBf16B, B, size_t(Nc * K));
      ab = CUDA_R_16BF;
    }
    const cudaDataType cd = c16 ? CUDA_R_16BF : CUDA_R_32F;
    const GemmKey key{ta, tb, M, Nc, K, lda, ldb, ldc, ab, cd, bias != nullptr, accumulate,
                      alignment_of(a), alignment_of(b), alignment_of(d)};
    LtPlan& plan = lt_plan(key);
    if (plan.bias_epilogue)
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                           sizeof(bias)));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    MAESTRO_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, d, plan.c, d, plan.c,
                                        &plan.algo, workspace_, kWorkspaceBytes, stream_));
    return plan.bias_epilogue;
  }

  LtPlan& lt_plan(const GemmKey& k) {
    const auto found = plans_.find(k);
    if (found != plans_.end()) return found->second;
    LtPlan p;
    // bf16 operands are dense copies: their row stride is their row length.
    const bool dense = k.ab == CUDA_R_16BF;
    BatchedGemm g;
    g.ta = k.ta;
    g.tb = k.tb;
    g.M = k.M;
    g.N = k.Nc;
    g.K = k.K;
    g.a.ld = dense ? (k.ta ? k.M : k.K) : k.lda;
    g.b.ld = dense ? (k.tb ? k.K : k.Nc) : k.ldb;
    g.c.ld = k.ldc;
    const ColumnMajorGemm c = to_column_major(g);
    const cublasOperation_t opa = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
    MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
    MAESTRO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, k.ab, c.a_rows, c.a_cols, c.a.ld));
    MAESTRO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, k.ab, c.b_rows, c.b_cols, c.b.ld));
    MAESTRO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, k.cd, c.m, c.n, c.c.ld));
    auto heuristic = [&](cublasLtEpilogue_t epi) {
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      cublasLtMatmulPreference_t pref;
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      const size_t ws = kWorkspaceBytes;
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                                sizeof(ws)));
      const uint32_t aa = k.align_b, ab = k.align_a, ac = k.align_c;  // cuBLAS A is our B
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof(aa)));
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof(ab)));
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof(ac)));
      MAESTRO_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac, sizeof(ac)));
      cublasLtMatmulHeuristicResult_t result{};
      int found_n = 0;
      const cublasStatus_t st =
          cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found_n);
      cublasLtMatmulPreferenceDestroy(pref);
      if (st != CUBLAS_STATUS_SUCCESS || found_n == 0) return false;
      p.algo = result.algo;
      return true;
    };
    if (k.bias && heuristic(CUBLASLT_EPILOGUE_BIAS)) {
      p.bias_epilogue = true;
    } else if (!heuristic(CUBLASLT_EPILOGUE_DEFAULT)) {
      throw CudaError(fmt::format("cuBLASLt has no algorithm for a {}x{}x{} {} GEMM with {} output (ta {}, tb {})", k.M,
                                  k.Nc, k.K, k.ab == CUDA_R_16BF ? "bf16" : "fp32",
                                  k.cd == CUDA_R_16BF ? "bf16" : "fp32", k.ta, k.tb));
    }
    return plans_.emplace(k, p).first->second;
  }

  // Each GEMM through cuBLAS strided-batched, in order on the stream, fp32
  // compute and output; the A and B operands from bufs16 (bf16) when given.
  void run(const std::vector<BatchedGemm>& gemms, float* const* bufs, void* const* bufs16) {
    const cudaDataType ab = bufs16 ? CUDA_R_16BF : CUDA_R_32F;
    auto operand = [&](const GemmOperand& o) -> const void* {
      if (bufs16) return static_cast<const uint16_t*>(bufs16[o.buffer]) + o.offset;
      return bufs[o.buffer] + o.offset;
    };
    for (const BatchedGemm& g : gemms) {
      const ColumnMajorGemm c = to_column_major(g);
      MAESTRO_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          cublas_, c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, int(c.m), int(c.n),
          int(c.k), &c.alpha, operand(c.a), ab, int(c.a.ld), c.a.stride, operand(c.b), ab, int(c.b.ld), c.b.stride,
          &c.beta, bufs[c.c.buffer] + c.c.offset, CUDA_R_32F, int(c.c.ld), c.c.stride, int(c.batch),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }

  CudaBackendOptions opt_;
  int64_t scratch_budget_ = 0;  // bytes the batched attention's [H, L, L] buffers may take (choose_attention)
  size_t device_memory_ = 0;    // the GPU's, in bytes
  cudaStream_t stream_ = nullptr;
  std::mutex fence_mu_;  // fences_ and spare_events_: a runner asks from its worker thread
  FenceLedger<cudaEvent_t> fences_;
  std::vector<cudaEvent_t> spare_events_;  // reached, to record again
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  void* cublas_workspace_ = nullptr;
  void* staging_ = nullptr;
  size_t staging_head_ = 0;
  std::mutex mu_;  // the arena: the activation pool may release from another thread
  DeviceArena arena_;
  std::vector<void*> segments_;
  std::unordered_map<void*, DeviceArena::Block> blocks_;
  std::pair<float*, size_t> scratch_[kSlots] = {};
  std::map<GemmKey, LtPlan> plans_;
  // the op profile: spans recorded and not yet resolved, spare timing events, totals by op
  std::mutex profile_mu_;
  std::vector<OpSpan> spans_;
  std::vector<cudaEvent_t> timing_events_;
  std::map<std::string, OpTime> op_totals_;
  static inline thread_local int op_depth_ = 0;  // OpScopes open on this thread
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

std::vector<OpTime> cuda_backend_op_times(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda ? cuda->take_op_times() : std::vector<OpTime>{};
}

void* cuda_backend_stream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda ? static_cast<void*>(cuda->stream()) : nullptr;
}

}  // namespace maestro
