// GEMMs as data (gemm_plan.h).
#include "gpu/gemm_plan.h"

#include <algorithm>
#include <cmath>
#include <utility>

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

namespace {

// The row blocks [r0, r0 + rows) of a sequence of L rows: one (0, L) without blocking.
std::vector<std::pair<int64_t, int64_t>> row_blocks(int64_t L, int64_t block) {
  if (block <= 0 || block >= L) return {{0, L}};
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t r0 = 0; r0 < L; r0 += block) out.push_back({r0, std::min(block, L - r0)});
  return out;
}

}  // namespace

std::vector<BatchedGemm> attention_head_products(int dst, float alpha, int a, int b, int64_t t0, int64_t L, int64_t H,
                                                 int64_t KV, int64_t D, int64_t block) {
  const int64_t g = H / KV;
  std::vector<BatchedGemm> out;
  for (const auto& [r0, m] : row_blocks(L, block))  // query rows [r0, r0 + m) against keys [0, r0 + m)
    for (int64_t j = 0; j < g; ++j)                 // query heads kh·g + j for every kv head kh
      out.push_back({false, true, m, r0 + m, D, KV, alpha, 0.0f, {a, (t0 + r0) * H * D + j * D, H * D, g * D},
                     {b, t0 * KV * D, KV * D, D}, {dst, j * L * L + r0 * L, L, g * L * L}});
  return out;
}

std::vector<BatchedGemm> attention_values(int64_t t0, int64_t L, int64_t H, int64_t KV, int64_t D, int64_t block) {
  const int64_t g = H / KV;
  std::vector<BatchedGemm> out;
  for (const auto& [r0, m] : row_blocks(L, block))
    for (int64_t j = 0; j < g; ++j)
      out.push_back({false, false, m, D, r0 + m, KV, 1.0f, 0.0f, {kAttnScores, j * L * L + r0 * L, L, g * L * L},
                     {kAttnV, t0 * KV * D, KV * D, D}, {kAttnOut, (t0 + r0) * H * D + j * D, H * D, g * D}});
  return out;
}

std::vector<BatchedGemm> attention_gradients(int64_t t0, int64_t L, int64_t H, int64_t KV, int64_t D, GradWrite dq,
                                             GradWrite dk, GradWrite dv, int64_t block) {
  const int64_t g = H / KV;
  const float sc = 1.0f / std::sqrt(float(D));
  std::vector<BatchedGemm> out;
  for (const auto& [r0, m] : row_blocks(L, block))
    for (int64_t j = 0; j < g; ++j) {
      // Rows [r0, r0 + m) of P and dS: as query rows they meet keys [0, r0 +
      // m); as key columns they meet query rows [r0, L), the block
      // [r0, L) × [r0, r0 + m) of P and dS, transposed.
      const int64_t at = j * L * L, below = L - r0;
      const GemmOperand P_keys{kAttnScores, at + r0 * L + r0, L, g * L * L},
          dS_rows{kAttnDScores, at + r0 * L, L, g * L * L}, dS_keys{kAttnDScores, at + r0 * L + r0, L, g * L * L};
      // β: 0 where this product writes the gradient first and overwrites it
      auto beta = [&](GradWrite x, bool first) { return x == GradWrite::Overwrite && first ? 0.0f : 1.0f; };
      if (dv != GradWrite::None)
        out.push_back({true, false, m, D, below, KV, 1.0f, beta(dv, j == 0), P_keys,
                       {kAttnDOut, (t0 + r0) * H * D + j * D, H * D, g * D}, {kAttnDV, (t0 + r0) * KV * D, KV * D, D}});
      if (dq != GradWrite::None)
        out.push_back({false, false, m, D, r0 + m, KV, sc, beta(dq, true), dS_rows, {kAttnK, t0 * KV * D, KV * D, D},
                       {kAttnDQ, (t0 + r0) * H * D + j * D, H * D, g * D}});
      if (dk != GradWrite::None)
        out.push_back({true, false, m, D, below, KV, sc, beta(dk, j == 0), dS_keys,
                       {kAttnQ, (t0 + r0) * H * D + j * D, H * D, g * D}, {kAttnDK, (t0 + r0) * KV * D, KV * D, D}});
    }
  return out;
}

int64_t multiply_adds(const std::vector<BatchedGemm>& gemms) {
  int64_t n = 0;
  for (const BatchedGemm& x : gemms) n += x.M * x.N * x.K * x.batch;
  return n;
}

}  // namespace maestro
