// GEMMs as data (gemm_plan.h).
#include "gpu/gemm_plan.h"

#include <cmath>

namespace maestro {

ColumnMajorGemm to_column_major(const BatchedGemm& g) {
  // Row-major X[r,c] with row stride ld is column-major Xᵀ[c,r] with the same
  // ld, so C[M,N] = op(A)·op(B) is Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ in column-major.
  ColumnMajorGemm c;
  c.trans_a = g.tb;
  c.trans_b = g.ta;
  c.m = g.N;
  c.n = g.M;
  c.k = g.K;
  c.batch = g.batch;
  c.alpha = g.alpha;
  c.beta = g.beta;
  c.a = g.b;  // row-major B: stored [K,N] (tb: [N,K]) -> column-major N×K (tb: K×N)
  c.a_rows = g.tb ? g.K : g.N;
  c.a_cols = g.tb ? g.N : g.K;
  c.b = g.a;  // row-major A: stored [M,K] (ta: [K,M]) -> column-major K×M (ta: M×K)
  c.b_rows = g.ta ? g.M : g.K;
  c.b_cols = g.ta ? g.K : g.M;
  c.c = g.c;
  return c;
}

std::vector<BatchedGemm> attention_head_products(int dst, float alpha, int a, int b, int64_t t0, int64_t L, int64_t H,
                                                 int64_t KV, int64_t D) {
  const int64_t g = H / KV;
  std::vector<BatchedGemm> out;
  for (int64_t j = 0; j < g; ++j)  // query heads kh·g + j for every kv head kh
    out.push_back({false, true, L, L, D, KV, alpha, 0.0f, {a, t0 * H * D + j * D, H * D, g * D},
                   {b, t0 * KV * D, KV * D, D}, {dst, j * L * L, L, g * L * L}});
  return out;
}

std::vector<BatchedGemm> attention_values(int64_t t0, int64_t L, int64_t H, int64_t KV, int64_t D) {
  const int64_t g = H / KV;
  std::vector<BatchedGemm> out;
  for (int64_t j = 0; j < g; ++j)
    out.push_back({false, false, L, D, L, KV, 1.0f, 0.0f, {kAttnScores, j * L * L, L, g * L * L},
                   {kAttnV, t0 * KV * D, KV * D, D}, {kAttnOut, t0 * H * D + j * D, H * D, g * D}});
  return out;
}

std::vector<BatchedGemm> attention_gradients(int64_t t0, int64_t L, int64_t H, int64_t KV, int64_t D, bool dq,
                                             bool dk, bool dv) {
  const int64_t g = H / KV;
  const float sc = 1.0f / std::sqrt(float(D));
  std::vector<BatchedGemm> out;
  for (int64_t j = 0; j < g; ++j) {
    const GemmOperand P{kAttnScores, j * L * L, L, g * L * L}, dS{kAttnDScores, j * L * L, L, g * L * L};
    const GemmOperand kv_k{kAttnK, t0 * KV * D, KV * D, D};
    if (dv)
      out.push_back({true, false, L, D, L, KV, 1.0f, 1.0f, P, {kAttnDOut, t0 * H * D + j * D, H * D, g * D},
                     {kAttnDV, t0 * KV * D, KV * D, D}});
    if (dq)
      out.push_back({false, false, L, D, L, KV, sc, 1.0f, dS, kv_k, {kAttnDQ, t0 * H * D + j * D, H * D, g * D}});
    if (dk)
      out.push_back({true, false, L, D, L, KV, sc, 1.0f, dS, {kAttnQ, t0 * H * D + j * D, H * D, g * D},
                     {kAttnDK, t0 * KV * D, KV * D, D}});
  }
  return out;
}

}  // namespace maestro
