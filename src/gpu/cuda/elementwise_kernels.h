// The non-GEMM, non-attention kernels of the CUDA backend
// (elementwise_kernels.cu): one launcher per op of nn/backend.h, same
// shapes and the same = / += conventions. Index arrays (tokens, targets)
// are device memory here. Per-element math: gpu/kernel_math.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/kernel_math.h"
#include "nn/dtype.h"

namespace maestro::cuda_detail {

void launch_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, size_t n, cudaStream_t st);
void launch_add(float* out, const float* a, const float* b, size_t n, cudaStream_t st);
void launch_accumulate(float* dst, const float* src, size_t n, cudaStream_t st);
void launch_scale(float* p, float s, size_t n, cudaStream_t st);
// *out = Σ p², the same bits on every call (no atomics); partial: kSqNormMaxBlocks doubles of scratch.
constexpr int64_t kSqNormMaxBlocks = 1024;
void launch_sq_norm(double* out, double* partial, const float* p, size_t n, cudaStream_t st);

void launch_embedding_forward(float* out, const int32_t* tokens, const float* table, int64_t N, int64_t C,
                              cudaStream_t st);
// dtable[V, C] += the rows of dout[N, C] by token, each token's rows in row
// order; packed: launch_plan.h's TokenRows of the N tokens (U distinct).
void launch_embedding_backward(float* dtable, const float* dout, const int32_t* packed, int64_t U, int64_t C,
                               cudaStream_t st);
void launch_bias_add(float* out, const float* bias, int64_t N, int64_t OC, cudaStream_t st);
// Column sums in chunk order, no atomics; partial: column_chunks(N) · C
// floats of scratch (launch_plan.h), here and in the norms' backward.
void launch_column_sum(float* out, float* partial, const float* in, int64_t N, int64_t C,
                       cudaStream_t st);  // out[C] += Σ_rows in

// Forward kernels write out (fp32) and/or out16 (bf16), either may be null
// (nn/backend.h's Out).
void launch_rmsnorm_forward(float* out, uint16_t* out16, float* rstd, const float* inp, const float* w, int64_t N, int64_t C, float eps,
                            cudaStream_t st);
void launch_rmsnorm_backward(float* dinp, float* dw, float* partial, const float* dout, const float* inp,
                             const float* w, const float* rstd, int64_t N, int64_t C, cudaStream_t st);
void launch_layernorm_forward(float* out, uint16_t* out16, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                              int64_t N, int64_t C, float eps, cudaStream_t st);
void launch_layernorm_backward(float* dinp, float* dw, float* db, float* partial, const float* dout, const float* inp,
                               const float* w, const float* mean, const float* rstd, int64_t N, int64_t C,
                               cudaStream_t st);

// Inputs that may be kept in bf16 alone are gpu_math::In (fp32, else bf16).
// out (and/or out16) = x rotated; out may be x (x.f32 == out, or x.b16 == out16)
void launch_rope(float* out, uint16_t* out16, gpu_math::In x, const int32_t* pos, int64_t N, int64_t H, int64_t D,
                 float theta, float sign, cudaStream_t st);
void launch_swiglu_forward(float* out, uint16_t* out16, gpu_math::In gate, gpu_math::In up, size_t n,
                           cudaStream_t st);
// Backward kernels: `add` false overwrites the gradient (nn/backend.h's
// Grad); the swiglu and gelu ones also write a bf16 copy where given (GradOut).
void launch_swiglu_backward(float* dgate, bool add_dgate, uint16_t* dgate16, float* dup, bool add_dup, uint16_t* dup16,
                            const float* dout, gpu_math::In gate, gpu_math::In up, size_t n, cudaStream_t st);
void launch_gelu_forward(float* out, uint16_t* out16, const float* inp, size_t n, cudaStream_t st);
void launch_gelu_backward(float* dinp, bool add, uint16_t* dinp16, const float* dout, const float* inp, size_t n,
                          cudaStream_t st);
void launch_relu_forward(float* out, const float* inp, size_t n, cudaStream_t st);
void launch_relu_backward(float* dinp, bool add, const float* dout, const float* inp, size_t n, cudaStream_t st);
void launch_im2col_patches(float* patches, const float* pixels, int64_t I, int64_t Ch, int64_t S, int64_t p,
                           cudaStream_t st);

// *out += Σ terms[0, n), summed by one block in a fixed order.
void launch_add_row_terms(double* out, const double* terms, int64_t n, cudaStream_t st);
// *loss += Σ rows' losses: each row's into terms[N] (fp64 scratch; 0 for a
// skipped row), then added in a fixed order — the same bits on every run.
void launch_cross_entropy(double* loss, double* terms, float* dlogits, const float* logits, const int32_t* targets,
                          int64_t N, int64_t V, float scale, cudaStream_t st);
void launch_kl_divergence(double* loss, double* terms, float* dstudent, const float* student, const float* teacher,
                          const int32_t* targets, int64_t N, int64_t V, float T, float scale, cudaStream_t st);

// p16[n] (bf16) or null: the updated parameters' bf16 copy (Backend::adamw)
void launch_adamw(float* p, const float* g, float* m, float* v, uint16_t* p16, size_t n,
                  const gpu_math::AdamWStep& step, cudaStream_t st);

}  // namespace maestro::cuda_detail
