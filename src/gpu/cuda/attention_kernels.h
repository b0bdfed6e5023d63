// The attention kernels of the CUDA backend (attention_kernels.cu), launched
// by cuda_backend.cu on its stream. Shapes as in nn/backend.h: q[N,H*D],
// k,v[N,KV*D], out[N,H*D], lse[N,H]; g = H/KV query heads per kv head.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/launch_plan.h"

namespace maestro::cuda_detail {

// ---- reference path pieces (the GEMMs are cuBLAS, in cuda_backend.cu) ----
// S[H,L,L] holds scale·q·kᵀ of one sequence starting at token t0: in place,
// P = the causal- (or not) masked softmax of each row; lse[(t0+i)*H + h].
void launch_attention_softmax(float* S, float* lse, int64_t t0, int64_t L, int64_t H, bool causal, cudaStream_t st);
// In place: S (scores) -> P = exp(S − lse) where visible, else 0.
void launch_attention_probs(float* S, const float* lse, int64_t t0, int64_t L, int64_t H, bool causal,
                            cudaStream_t st);
// In place: dP -> dS = P·(dP − delta[(t0+i)*H + h]).
void launch_attention_dscores(float* dP, const float* P, const float* delta, int64_t t0, int64_t L, int64_t H,
                              cudaStream_t st);
// Tensor-core path: P = the masked softmax of S's rows as bf16 into P16[H,L,L]
// (S unchanged), lse as launch_attention_softmax. block: the GEMMs' causal
// block (0: none); row i is written up to gm::attention_row_end.
void launch_attention_softmax_bf16(const float* S, uint16_t* P16, float* lse, int64_t t0, int64_t L, int64_t H,
                                   bool causal, int64_t block, cudaStream_t st);
// Tensor-core path, backward: P = exp(S − lse) where visible (else 0) and
// dS = P·(dP − delta), both as bf16 into P16, dS16 [H,L,L] up to
// gm::attention_row_end; S, dP unchanged.
void launch_attention_backward_scores_bf16(const float* S, const float* dP, uint16_t* P16, uint16_t* dS16,
                                           const float* lse, const float* delta, int64_t t0, int64_t L, int64_t H,
                                           bool causal, int64_t block, cudaStream_t st);
// delta[N,H] = Σ_d dout·out per (token, head).
void launch_attention_delta(float* delta, const float* dout, const float* out, int64_t N, int64_t H, int64_t D,
                            cudaStream_t st);

// ---- fast path: tiled online softmax over tiles[n_tiles] (device memory) ----
constexpr int kFastRowsPerTile = 8;  // query rows (warps) per thread block
void launch_fast_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                   const AttentionTile* tiles, int64_t n_tiles, int64_t H, int64_t KV, int64_t D,
                                   bool causal, cudaStream_t st);
// dq, dk, dv += (add) or = (each may be null); delta from
// launch_attention_delta. No atomics: dq one warp per query row, dk and dv
// one warp per key row (the tiles read as key rows), each summed in a fixed
// order — the same bits on every run.
void launch_fast_attention_backward(float* dq, bool add_dq, float* dk, bool add_dk, float* dv, bool add_dv,
                                    const float* dout, const float* lse, const float* delta, const float* q,
                                    const float* k, const float* v, const AttentionTile* tiles, int64_t n_tiles,
                                    int64_t H, int64_t KV, int64_t D, bool causal, cudaStream_t st);

// ---- flash path (flash_attention.cu): the tiled online softmax on the
// tensor cores (bf16 operands, fp32 sums; gpu/launch_plan.h's FlashLayout),
// over tiles of kFlashRows rows (plan_attention_tiles); head sizes up to
// kFlashMaxHead. q16, k16, v16, dout16: bf16 copies of q, k, v, dout (the
// bits of nn/dtype.h's rounding; 16-byte aligned). The same contract as the
// fast path's launchers otherwise: dq, dk, dv += or =, each may be null;
// delta from launch_attention_delta; no atomics.
void launch_flash_attention_forward(float* out, float* lse, const uint16_t* q16, const uint16_t* k16,
                                    const uint16_t* v16, const AttentionTile* tiles, int64_t n_tiles, int64_t H,
                                    int64_t KV, int64_t D, bool causal, cudaStream_t st);
void launch_flash_attention_backward(float* dq, bool add_dq, float* dk, bool add_dk, float* dv, bool add_dv,
                                     const uint16_t* dout16, const float* lse, const float* delta,
                                     const uint16_t* q16, const uint16_t* k16, const uint16_t* v16,
                                     const AttentionTile* tiles, int64_t n_tiles, int64_t H, int64_t KV, int64_t D,
                                     bool causal, cudaStream_t st);

}  // namespace maestro::cuda_detail
