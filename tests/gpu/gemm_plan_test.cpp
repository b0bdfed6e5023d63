// The CUDA backend's GEMMs as data (gpu/gemm_plan.h), replayed on the CPU
// with a plain column-major strided-batched GEMM — the BLAS semantics cuBLAS
// implements — through to_column_major: the linear layers' three products
// against cpu/reference_ops.h, and the attention reference path of several
// packed sequences (GQA, causal and bidirectional) with its softmax and dS
// steps written from gpu/kernel_math.h, against the CPU backend — adding
// to the gradients and overwriting them (β = 0 where a product writes first).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/reference_ops.h"
#include "gpu/gemm_plan.h"
#include "gpu/launch_plan.h"
#include "gpu/kernel_math.h"
#include "support/random_vector.h"
#include "support/rel_err.h"

using namespace maestro;
using test_support::random_normal;
namespace gm = maestro::gpu_math;

namespace {

using Vec = std::vector<float>;
constexpr GradWrite kNone = GradWrite::None, kAdd = GradWrite::Add;

// C_i[m,n] = alpha·op(A_i)·op(B_i) + beta·C_i, column-major, as cublasGemmStridedBatchedEx.
void column_major_gemm(const ColumnMajorGemm& g, float* const* bufs) {
  BOOST_REQUIRE_EQUAL(g.a_rows, g.trans_a ? g.k : g.m);
  BOOST_REQUIRE_EQUAL(g.a_cols, g.trans_a ? g.m : g.k);
  BOOST_REQUIRE_EQUAL(g.b_rows, g.trans_b ? g.n : g.k);
  BOOST_REQUIRE_EQUAL(g.b_cols, g.trans_b ? g.k : g.n);
  BOOST_REQUIRE(g.a.ld >= g.a_rows && g.b.ld >= g.b_rows && g.c.ld >= g.m);  // what cuBLAS requires
  for (int64_t i = 0; i < g.batch; ++i) {
    const float* A = bufs[g.a.buffer] + g.a.offset + i * g.a.stride;
    const float* B = bufs[g.b.buffer] + g.b.offset + i * g.b.stride;
    float* C = bufs[g.c.buffer] + g.c.offset + i * g.c.stride;
    for (int64_t r = 0; r < g.m; ++r)
      for (int64_t c = 0; c < g.n; ++c) {
        double s = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const float a = g.trans_a ? A[p + r * g.a.ld] : A[r + p * g.a.ld];
          const float b = g.trans_b ? B[c + p * g.b.ld] : B[p + c * g.b.ld];
          s += double(a) * b;
        }
        float& out = C[r + c * g.c.ld];
        out = float(g.alpha * s + (g.beta == 0 ? 0.0 : double(g.beta) * out));
      }
  }
}
void run(const std::vector<BatchedGemm>& gemms, float* const* bufs) {
  for (const BatchedGemm& g : gemms) column_major_gemm(to_column_major(g), bufs);
}

double rel_err(const Vec& a, const Vec& b) { return test_support::max_rel_err(a, b); }

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm_plan)

// The three products of a linear layer, as cuda_backend.cpp builds them.
BOOST_AUTO_TEST_CASE(linear_products_match_the_reference) {
  const int64_t N = 5, C = 7, OC = 3;
  Vec inp = random_normal(size_t(N * C), 1), w = random_normal(size_t(OC * C), 2), dout = random_normal(size_t(N * OC), 3);
  Vec out(size_t(N * OC)), dinp = random_normal(size_t(N * C), 4), dw = random_normal(size_t(OC * C), 5);
  std::vector<double> r_out(out.size()), r_dinp(dinp.begin(), dinp.end()), r_dw(dw.begin(), dw.end());
  const std::vector<double> di(inp.begin(), inp.end()), dww(w.begin(), w.end()), dd(dout.begin(), dout.end());
  ref::linear_forward(r_out.data(), di.data(), dww.data(), static_cast<const double*>(nullptr), N, C, OC);
  ref::linear_backward(r_dinp.data(), r_dw.data(), static_cast<double*>(nullptr), dd.data(), di.data(), dww.data(), N, C, OC);
  float* bufs[] = {inp.data(), w.data(), out.data(), dout.data(), dinp.data(), dw.data()};
  // out[N,OC] = inp·wᵀ; dinp[N,C] += dout·w; dw[OC,C] += doutᵀ·inp
  run({{false, true, N, OC, C, 1, 1.0f, 0.0f, {0, 0, C, 0}, {1, 0, C, 0}, {2, 0, OC, 0}},
       {false, false, N, C, OC, 1, 1.0f, 1.0f, {3, 0, OC, 0}, {1, 0, C, 0}, {4, 0, C, 0}},
       {true, false, OC, C, N, 1, 1.0f, 1.0f, {3, 0, OC, 0}, {0, 0, C, 0}, {5, 0, C, 0}}},
      bufs);
  BOOST_TEST(rel_err(out, Vec(r_out.begin(), r_out.end())) <= 1e-6);
  BOOST_TEST(rel_err(dinp, Vec(r_dinp.begin(), r_dinp.end())) <= 1e-6);
  BOOST_TEST(rel_err(dw, Vec(r_dw.begin(), r_dw.end())) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(attention_reference_path_matches_the_cpu_backend) {
  const int64_t H = 6, KV = 2, D = 8, g = H / KV;
  const std::vector<int32_t> cu = {0, 5, 5, 17, 18};  // 5, 0, 12, 1 tokens
  const int64_t n_seq = 4, N = 18;
  const Vec q = random_normal(size_t(N * H * D), 6), k = random_normal(size_t(N * KV * D), 7),
            v = random_normal(size_t(N * KV * D), 8), dout = random_normal(size_t(N * H * D), 9);
  auto cpu = make_cpu_backend(1);
  // blocks: 0 = the whole square; 4 and 5 rows: causal blocks, the last one
  // partial (12 tokens: 4 + 4 + 4 and 5 + 5 + 2). What the blocked GEMMs
  // skip stays NaN: read, it would poison every gradient.
  // Overwritten gradients start as NaN on both sides: a product that reads
  // one (β ≠ 0 where it writes first) poisons it.
  for (const bool overwrite : {false, true})
  for (const auto& [causal, block] : {std::pair{true, int64_t(0)}, std::pair{false, int64_t(0)},
                                      std::pair{true, int64_t(4)}, std::pair{true, int64_t(5)}})
  BOOST_TEST_CONTEXT("causal " << causal << ", block " << block << ", overwrite " << overwrite) {
    Vec out(q.size()), lse(size_t(N * H)), dq = random_normal(q.size(), 10), dk = random_normal(k.size(), 11),
        dv = random_normal(v.size(), 12);
    if (overwrite)
      for (Vec* x : {&dq, &dk, &dv}) x->assign(x->size(), NAN);
    const GradWrite how = overwrite ? GradWrite::Overwrite : GradWrite::Add;
    Vec c_out = out, c_lse = lse, c_dq = dq, c_dk = dk, c_dv = dv;
    Vec S, dS;
    float* bufs[kAttnBuffers] = {const_cast<float*>(q.data()), const_cast<float*>(k.data()),
                                 const_cast<float*>(v.data()), out.data(), const_cast<float*>(dout.data()),
                                 dq.data(), dk.data(), dv.data()};
    const float sc = 1.0f / std::sqrt(float(D));
    // forward: scores, the softmax kernel's rows (gm::softmax_*), values
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t t0 = cu[size_t(s)], L = cu[size_t(s) + 1] - t0;
      if (L == 0) continue;
      S.assign(size_t(H * L * L), NAN);
      bufs[kAttnScores] = S.data();
      run(attention_head_products(kAttnScores, sc, kAttnQ, kAttnK, t0, L, H, KV, D, block), bufs);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          float* row = S.data() + (h * L + i) * L;
          const int64_t end = causal ? i + 1 : L;
          gm::SoftmaxState st = gm::softmax_init();
          for (int64_t j = 0; j < end; ++j) st = gm::softmax_push(st, row[j]);
          const float l = gm::softmax_lse(st);
          for (int64_t j = 0; j < L; ++j) row[j] = j < end ? std::exp(row[j] - l) : 0.0f;
          lse[size_t((t0 + i) * H + h)] = l;
        }
      run(attention_values(t0, L, H, KV, D, block), bufs);
    }
    // backward: delta, P from lse, dP, dS, the gradient products
    Vec delta(size_t(N * H));
    for (int64_t r = 0; r < N * H; ++r)
      for (int64_t d = 0; d < D; ++d) delta[size_t(r)] += dout[size_t(r * D + d)] * out[size_t(r * D + d)];
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t t0 = cu[size_t(s)], L = cu[size_t(s) + 1] - t0;
      if (L == 0) continue;
      S.assign(size_t(H * L * L), NAN);
      dS.assign(size_t(H * L * L), NAN);
      bufs[kAttnScores] = S.data();
      bufs[kAttnDScores] = dS.data();
      run(attention_head_products(kAttnScores, sc, kAttnQ, kAttnK, t0, L, H, KV, D, block), bufs);
      run(attention_head_products(kAttnDScores, 1.0f, kAttnDOut, kAttnV, t0, L, H, KV, D, block), bufs);
      for (int64_t e = 0; e < H * L * L; ++e) {
        const int64_t j = e % L, i = (e / L) % L, h = e / (L * L);
        S[size_t(e)] = gm::attention_visible(i, j, causal) ? std::exp(S[size_t(e)] - lse[size_t((t0 + i) * H + h)]) : 0.0f;
        dS[size_t(e)] = gm::attention_dscore(S[size_t(e)], dS[size_t(e)], delta[size_t((t0 + i) * H + h)]);
      }
      run(attention_gradients(t0, L, H, KV, D, how, how, how, block), bufs);
    }
    cpu->attention_forward(c_out.data(), c_lse.data(), q.data(), k.data(), v.data(), cu.data(), n_seq, N, H, KV, D,
                           causal);
    auto grad = [&](Vec& x) { return overwrite ? Grad::overwrite(x.data()) : Grad(x.data()); };
    cpu->attention_backward(grad(c_dq), grad(c_dk), grad(c_dv), dout.data(), c_out.data(), c_lse.data(), q.data(),
                            k.data(), v.data(), cu.data(), n_seq, N, H, KV, D, causal);
    BOOST_TEST(rel_err(out, c_out) <= 1e-5);
    BOOST_TEST(rel_err(lse, c_lse) <= 1e-5);
    BOOST_TEST(rel_err(dq, c_dq) <= 1e-5);
    BOOST_TEST(rel_err(dk, c_dk) <= 1e-5);
    BOOST_TEST(rel_err(dv, c_dv) <= 1e-5);
  }
  (void)g;
}

// 2,048 causal tokens in blocks of 256: 8 query blocks, each product over
// (b + 1)·256 keys — 36/64 of the square's multiply-adds for every product.
BOOST_AUTO_TEST_CASE(causal_blocks_skip_the_masked_keys) {
  const int64_t L = 2048, H = 4, KV = 2, D = 64, b = 256;
  const double whole = double(multiply_adds(attention_head_products(kAttnScores, 1.0f, kAttnQ, kAttnK, 0, L, H, KV, D)));
  BOOST_TEST(multiply_adds(attention_head_products(kAttnScores, 1.0f, kAttnQ, kAttnK, 0, L, H, KV, D, b)) / whole ==
             36.0 / 64.0);
  BOOST_TEST(multiply_adds(attention_values(0, L, H, KV, D, b)) / whole == 36.0 / 64.0);
  BOOST_TEST(double(multiply_adds(attention_gradients(0, L, H, KV, D, kAdd, kAdd, kAdd, b))) / (3 * whole) ==
             36.0 / 64.0);
  BOOST_TEST(attention_values(0, L, H, KV, D, b).size() == size_t(8 * (H / KV)));
  BOOST_TEST(attention_values(0, L, H, KV, D, L).size() == size_t(H / KV));  // a block of the whole: one each
}

// What the blocked GEMMs read of P and dS is, in every score row i, exactly
// [0, gm::attention_row_end(i, L, block)): the kernels write that far (the
// masked zeros inside the diagonal block included) and no further.
BOOST_AUTO_TEST_CASE(blocked_gemms_read_each_score_row_to_its_row_end) {
  const int64_t H = 4, KV = 2, D = 8, g = H / KV;
  for (const int64_t L : {1, 7, 12, 40})
    for (const int64_t block : {0, 4, 5, 16})
      BOOST_TEST_CONTEXT("L " << L << ", block " << block) {
        std::vector<BatchedGemm> reads = attention_values(0, L, H, KV, D, block);
        for (const BatchedGemm& x : attention_gradients(0, L, H, KV, D, kAdd, kAdd, kAdd, block)) reads.push_back(x);
        for (const int buffer : {int(kAttnScores), int(kAttnDScores)}) {
          std::vector<int> seen(size_t(g * L * L));  // [head of a group j, row, column]: reads
          for (const BatchedGemm& x : reads) {
            if (x.a.buffer != buffer) continue;
            BOOST_TEST(x.a.ld == L);
            BOOST_TEST(x.a.stride == g * L * L);
            const int64_t j = x.a.offset / (L * L), r0 = x.a.offset % (L * L) / L, c0 = x.a.offset % L;
            const int64_t rows = x.ta ? x.K : x.M, cols = x.ta ? x.M : x.K;
            BOOST_TEST(r0 + rows <= L);
            BOOST_TEST(c0 + cols <= L);
            for (int64_t r = r0; r < r0 + rows; ++r)
              for (int64_t c = c0; c < c0 + cols; ++c) seen[size_t((j * L + r) * L + c)]++;
          }
          for (int64_t j = 0; j < g; ++j)
            for (int64_t i = 0; i < L; ++i) {
              const int64_t end = gm::attention_row_end(i, L, block);
              for (int64_t c = 0; c < L; ++c)  // P by P·V and by dV, dS by dQ and by dK: twice each
                BOOST_TEST(seen[size_t((j * L + i) * L + c)] == (c < end ? 2 : 0),
                           "row " << i << " column " << c << " (row end " << end << ")");
            }
        }
      }
}

BOOST_AUTO_TEST_CASE(unwanted_gradients_get_no_product) {
  BOOST_TEST(attention_gradients(0, 4, 4, 2, 8, kAdd, kAdd, kAdd).size() == 6u);  // 3 per query head of a group
  BOOST_TEST(attention_gradients(0, 4, 4, 2, 8, kNone, kAdd, kNone).size() == 2u);
  for (const BatchedGemm& x : attention_gradients(0, 4, 4, 2, 8, kNone, kAdd, kNone)) BOOST_TEST(x.c.buffer == kAttnDK);
}

BOOST_AUTO_TEST_SUITE_END()
