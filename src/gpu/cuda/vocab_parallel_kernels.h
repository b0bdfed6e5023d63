// Kernels of the vocabulary-parallel losses (nn/backend.h's shard_* ops):
// a tensor-parallel rank's columns of the logits, [N, V] with its first
// `valid` columns real vocabulary; the ranks' row statistics are reduced
// between the calls (nn/vocab_parallel_loss.cpp), so the full rows are never
// gathered. One block per row; per-element math in gpu/kernel_math.h
// (shard_*, ce_grad, kl_term, kl_grad). Index arrays (targets) are device
// memory here; scalar outputs (*loss, *out) are written, not added to.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace maestro::cuda_detail {

// mx[N] = max over the valid columns of x·inv_t
void launch_shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t valid, float inv_t, cudaStream_t st);
// mx[N] = max over r of parts[r, n]                                parts[R, N]
void launch_max_of_parts(float* mx, const float* parts, int64_t R, int64_t N, cudaStream_t st);
// se[N] = Σ_valid exp(x·inv_t − mx); tx[N] (when not null, targets then too) = the target's logit where it is this rank's, else 0
void launch_shard_sumexp(float* se, float* tx, const float* x, const int32_t* targets, const float* mx, int64_t N,
                         int64_t V, int64_t valid, int64_t v0, float inv_t, cudaStream_t st);
// *loss = Σ_rows (mx + log se − tx), each row's into terms[N] (fp64 scratch)
// and summed in a fixed order; dlogits (when not null) += scale · (softmax −
// onehot) on the valid columns
void launch_shard_cross_entropy(double* loss, double* terms, float* dlogits, const float* x, const int32_t* targets,
                                const float* mx, const float* se, const float* tx, int64_t N, int64_t V, int64_t valid,
                                int64_t v0, float scale, cudaStream_t st);
// kl[N] = this rank's share of each row's T²·KL (0 for skipped rows); dstudent (when not null) += its gradient
void launch_shard_kl(float* kl, float* dstudent, const float* student, const float* teacher, const int32_t* targets,
                     const float* mx_s, const float* se_s, const float* mx_t, const float* se_t, int64_t N, int64_t V,
                     int64_t valid, float T, float scale, cudaStream_t st);
// *out = Σ_{n: targets[n] >= 0} rows[n], in fp64
void launch_masked_row_sum(double* out, const float* rows, const int32_t* targets, int64_t N, cudaStream_t st);

}  // namespace maestro::cuda_detail
