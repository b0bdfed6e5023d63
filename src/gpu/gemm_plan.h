// The GEMMs of the CUDA backend as data, host code only so they are
// unit-tested here (tests/gpu/gemm_plan_test.cpp replays them on the CPU
// with a plain column-major GEMM and compares with the CPU backend).
//
// A BatchedGemm is row-major, the engine's view: C_i = alpha·op(A_i)·op(B_i)
// + beta·C_i for i < batch, each operand a buffer id, an element offset, a
// row stride (ld) and a batch stride. cuBLAS is column-major:
// to_column_major() gives the call (C_iᵀ = op(B_i)ᵀ·op(A_i)ᵀ, so the
// row-major B comes first), the one mapping both cuBLASLt (linear layers)
// and cuBLAS strided-batched (attention's reference path) use.
//
// The attention reference path of one sequence (tokens [t0, t0+L)) is a
// list of such GEMMs over the buffers of AttentionBuffer, with GQA by
// batching over kv heads once per query head of a group (g = H/KV):
//   forward:  S = scale·Q·Kᵀ; (softmax kernel) P; Out = P·V
//   backward: S = scale·Q·Kᵀ -> (kernel) P; dP = dO·Vᵀ; (kernel) dS;
//             dV += Pᵀ·dO; dQ += scale·dS·K; dK += scale·dSᵀ·Q
// S and dS are scratch [H, L, L] per sequence.
//
// Causal blocks: with `block` > 0 (a causal sequence; launch_plan.h's
// causal_block chooses) the query rows are taken `block` at a time and each
// block multiplies only the keys up to its own end — S, dP, P·V and dS·K
// for query blocks, Pᵀ·dO and dSᵀ·Q for key blocks over the queries from the
// block's start — so the score products skip the masked upper blocks: with
// nb blocks, (nb + 1) / 2nb of the work. What they skip is never written
// (S and dS above the diagonal blocks stay as they were) and never read;
// inside a diagonal block the kernels' zeros of P and dS mask as before.
// block = 0 (or ≥ L): the whole square, one GEMM per query head of a group.
#pragma once

#include <cstdint>
#include <vector>

namespace maestro {

struct GemmOperand {
  int buffer = 0;       // an id the caller maps to a pointer
  int64_t offset = 0;   // elements
  int64_t ld = 0;       // row stride (row-major), elements
  int64_t stride = 0;   // between batch items, elements
};

struct BatchedGemm {
  bool ta = false, tb = false;  // op(A) = Aᵀ, op(B) = Bᵀ
  int64_t M = 0, N = 0, K = 0;  // C[M,N], op(A)[M,K], op(B)[K,N]
  int64_t batch = 1;
  float alpha = 1, beta = 0;
  GemmOperand a, b, c;
};

// The column-major call: C_cm[m,n] = op_a(A_cm)·op_b(B_cm), operands stored
// as a_rows × a_cols (leading dimension a.ld), likewise b; c is m × n.
struct ColumnMajorGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  float alpha = 1, beta = 0;
  GemmOperand a, b, c;
  int64_t a_rows = 0, a_cols = 0, b_rows = 0, b_cols = 0;
};
ColumnMajorGemm to_column_major(const BatchedGemm& g);

// Buffers of the attention GEMMs ([N,H*D] or [N,KV*D] as in nn/backend.h;
// Scores, DScores: [H, L, L] scratch of the sequence).
enum AttentionBuffer { kAttnQ, kAttnK, kAttnV, kAttnOut, kAttnDOut, kAttnDQ, kAttnDK, kAttnDV, kAttnScores,
                       kAttnDScores, kAttnBuffers };

// dst[H,L,L] = alpha · a·bᵀ per head: a is [N,H*D] (q or dout), b [N,KV*D] (k or v).
std::vector<BatchedGemm> attention_head_products(int dst, float alpha, int a, int b, int64_t t0, int64_t L, int64_t H,
                                                 int64_t KV, int64_t D, int64_t block = 0);
// Out = P·V (P in Scores).
std::vector<BatchedGemm> attention_values(int64_t t0, int64_t L, int64_t H, int64_t KV, int64_t D,
                                          int64_t block = 0);
// What a gradient's products do with it: nothing (not wanted), add to it,
// or overwrite it (nn/backend.h's Grad: its old contents never read).
enum class GradWrite { None, Add, Overwrite };
// dV += Pᵀ·dO, dQ += scale·dS·K, dK += scale·dSᵀ·Q (P in Scores, dS in
// DScores); the wanted ones only, each query head of a group in turn. Each
// row block of dQ is one product's, so an overwritten dQ gets β = 0
// throughout; the query heads of a group add into one kv head, so an
// overwritten dK or dV gets β = 0 from its first query head only.
std::vector<BatchedGemm> attention_gradients(int64_t t0, int64_t L, int64_t H, int64_t KV, int64_t D, GradWrite dq,
                                             GradWrite dk, GradWrite dv, int64_t block = 0);
// Σ M·N·K·batch over a list: the multiply-adds it does.
int64_t multiply_adds(const std::vector<BatchedGemm>& gemms);

}  // namespace maestro
