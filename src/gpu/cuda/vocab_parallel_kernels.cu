// Vocabulary-parallel loss kernels (vocab_parallel_kernels.h): a block of
// kRowThreads per row of a rank's logits, reducing with device_reduce.cuh.
// Sums of exponentials and losses accumulate in fp64, as the CPU backend's.
#include "gpu/cuda/vocab_parallel_kernels.h"

#include "gpu/cuda/cuda_check.h"
#include "gpu/cuda/device_reduce.cuh"
#include "gpu/cuda/elementwise_kernels.h"
#include "gpu/launch_plan.h"

namespace maestro::cuda_detail {

namespace gm = gpu_math;

namespace {

constexpr int kRowThreads = 256;

__global__ void shard_row_max_kernel(float* mx, const float* x, int64_t V, int64_t valid, float inv_t) {
  __shared__ float shared[32];
  const float* row = x + int64_t(blockIdx.x) * V;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, row[j] * inv_t);
  m = block_max(m, shared);
  if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ void max_of_parts_kernel(float* mx, const float* parts, int64_t R, int64_t N) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    float m = parts[i];
    for (int64_t r = 1; r < R; ++r) m = fmaxf(m, parts[r * N + i]);
    mx[i] = m;
  }
}

__global__ void shard_sumexp_kernel(float* se, float* tx, const float* x, const int32_t* targets, const float* mx,
                                    int64_t V, int64_t valid, int64_t v0, float inv_t) {
  __shared__ double shared[32];
  const int64_t i = blockIdx.x;
  const float* row = x + i * V;
  const float m = mx[i];
  double sum = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) sum += double(gm::shard_exp(row[j], inv_t, m));
  sum = block_sum(sum, shared);
  if (threadIdx.x != 0) return;
  se[i] = float(sum);
  if (tx) {
    const int64_t c = gm::shard_column(targets[i], v0, valid);
    tx[i] = c >= 0 ? row[c] : 0.0f;
  }
}

// terms[i]: row i's loss (0 for a skipped row), summed afterwards in a fixed order.
__global__ void shard_cross_entropy_kernel(double* terms, float* dlogits, const float* x, const int32_t* targets,
                                           const float* mx, const float* se, const float* tx, int64_t V,
                                           int64_t valid, int64_t v0, float scale) {
  const int64_t i = blockIdx.x;
  const int32_t t = targets[i];
  if (t < 0) {  // the whole block leaves together
    if (threadIdx.x == 0) terms[i] = 0;
    return;
  }
  const double lz = gm::shard_lse(mx[i], se[i]);
  if (threadIdx.x == 0) terms[i] = lz - double(tx[i]);
  if (!dlogits) return;
  const float lzf = float(lz);
  const int64_t c = gm::shard_column(t, v0, valid);
  const float* row = x + i * V;
  float* d = dlogits + i * V;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) d[j] += gm::ce_grad(row[j], lzf, j == c, scale);
}

__global__ void shard_kl_kernel(float* kl, float* dstudent, const float* student, const float* teacher,
                                const int32_t* targets, const float* mx_s, const float* se_s, const float* mx_t,
                                const float* se_t, int64_t V, int64_t valid, float T, float scale) {
  __shared__ double shared[32];
  const int64_t i = blockIdx.x;
  if (targets[i] < 0) {  // the whole block leaves together
    if (threadIdx.x == 0) kl[i] = 0;
    return;
  }
  const float lzs = float(gm::shard_lse(mx_s[i], se_s[i])), lzt = float(gm::shard_lse(mx_t[i], se_t[i]));
  const float *s = student + i * V, *t = teacher + i * V;
  double total = 0;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) {
    total += double(gm::kl_term(s[j], t[j], lzs, lzt, T));
    if (dstudent) dstudent[i * V + j] += gm::kl_grad(s[j], t[j], lzs, lzt, T, scale);
  }
  total = block_sum(total, shared);
  if (threadIdx.x == 0) kl[i] = float(total);
}

__global__ void masked_row_sum_kernel(double* out, const float* rows, const int32_t* targets, int64_t N) {
  __shared__ double shared[32];
  double total = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
    if (targets[i] >= 0) total += double(rows[i]);
  total = block_sum(total, shared);
  if (threadIdx.x == 0) *out = total;
}

}  // namespace

void launch_shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t valid, float inv_t,
                          cudaStream_t st) {
  if (N == 0) return;
  shard_row_max_kernel<<<unsigned(N), kRowThreads, 0, st>>>(mx, x, V, valid, inv_t);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_max_of_parts(float* mx, const float* parts, int64_t R, int64_t N, cudaStream_t st) {
  if (N == 0) return;
  max_of_parts_kernel<<<unsigned(grid_blocks(N, kRowThreads)), kRowThreads, 0, st>>>(mx, parts, R, N);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_shard_sumexp(float* se, float* tx, const float* x, const int32_t* targets, const float* mx, int64_t N,
                         int64_t V, int64_t valid, int64_t v0, float inv_t, cudaStream_t st) {
  if (N == 0) return;
  shard_sumexp_kernel<<<unsigned(N), kRowThreads, 0, st>>>(se, tx, x, targets, mx, V, valid, v0, inv_t);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_shard_cross_entropy(double* loss, double* terms, float* dlogits, const float* x, const int32_t* targets,
                                const float* mx, const float* se, const float* tx, int64_t N, int64_t V, int64_t valid,
                                int64_t v0, float scale, cudaStream_t st) {
  MAESTRO_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(double), st));
  if (N == 0) return;
  shard_cross_entropy_kernel<<<unsigned(N), kRowThreads, 0, st>>>(terms, dlogits, x, targets, mx, se, tx, V, valid,
                                                                  v0, scale);
  MAESTRO_CUDA_LAUNCH_CHECK();
  launch_add_row_terms(loss, terms, N, st);
}

void launch_shard_kl(float* kl, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                     const float* mx_s, const float* se_s, const float* mx_t, const float* se_t, int64_t N, int64_t V,
                     int64_t valid, float T, float scale, cudaStream_t st) {
  if (N == 0) return;
  shard_kl_kernel<<<unsigned(N), kRowThreads, 0, st>>>(kl, dstudent, student, teacher, targets, mx_s, se_s, mx_t, se_t,
                                                       V, valid, T, scale);
  MAESTRO_CUDA_LAUNCH_CHECK();
}

void launch_masked_row_sum(double* out, const float* rows, const int32_t* targets, int64_t N, cudaStream_t st) {
  masked_row_sum_kernel<<<1, 1024, 0, st>>>(out, rows, targets, N);  // N: a micro-batch's text rows
  MAESTRO_CUDA_LAUNCH_CHECK();
}

}  // namespace maestro::cuda_detail
