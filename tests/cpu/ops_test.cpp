// The CPU backend's ops: each fast fp32 kernel against the naive double
// reference (cpu/reference_ops.h) on random inputs, forward and every
// gradient, with gradients accumulated into non-zero buffers (the +=
// contract); the reference's backward against central finite differences in
// double; and bitwise-identical results with 1 and 2 threads.
#define BOOST_TEST_MODULE cpu
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/reference_ops.h"
#include "support/random_vector.h"

using namespace maestro;
using F = std::vector<float>;
using Dv = std::vector<double>;

namespace {

F random(size_t n, uint32_t seed, float scale = 1.0f) { return test_support::random_normal(n, seed, scale); }
Dv wide(const F& v) { return Dv(v.begin(), v.end()); }

// ‖a − b‖ / ‖b‖ (‖b‖ floored at 1e-12).
double rel(const F& a, const Dv& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(1e-12, std::sqrt(den));
}
double rel(const Dv& a, const Dv& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num) / std::max(1e-12, std::sqrt(den));
}

// Central differences of loss() with respect to every element of x,
// compared with the analytic gradient.
double fd_error(Dv& x, const std::function<double()>& loss, const Dv& analytic, double h = 1e-6) {
  Dv numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    numeric[i] = (up - down) / (2 * h);
  }
  return rel(analytic, numeric);
}
double dot(const Dv& a, const Dv& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

constexpr double kTol = 1e-5;   // fast fp32 vs double reference
constexpr double kFdTol = 1e-6; // reference backward vs finite differences

}  // namespace

BOOST_AUTO_TEST_CASE(linear_forward_backward) {
  const int64_t N = 7, C = 13, OC = 5;
  auto be = make_cpu_backend(2);
  F x = random(N * C, 1), w = random(OC * C, 2), b = random(OC, 3), dy = random(N * OC, 4);
  F y(N * OC), dx = random(N * C, 5), dw = random(OC * C, 6), db = random(OC, 7);
  Dv Y(N * OC), DX = wide(dx), DW = wide(dw), DB = wide(db);
  be->linear_forward(y.data(), x.data(), w.data(), b.data(), N, C, OC);
  be->linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
  Dv X = wide(x), W = wide(w), B = wide(b), DY = wide(dy);
  ref::linear_forward(Y.data(), X.data(), W.data(), B.data(), N, C, OC);
  ref::linear_backward(DX.data(), DW.data(), DB.data(), DY.data(), X.data(), W.data(), N, C, OC);
  BOOST_TEST(rel(y, Y) < kTol);
  BOOST_TEST(rel(dx, DX) < kTol);
  BOOST_TEST(rel(dw, DW) < kTol);
  BOOST_TEST(rel(db, DB) < kTol);
  // Null gradients are skipped.
  be->linear_backward(nullptr, nullptr, nullptr, dy.data(), x.data(), w.data(), N, C, OC);
  // Finite differences of Σ y·dy.
  auto loss = [&] {
    Dv out(N * OC);
    ref::linear_forward(out.data(), X.data(), W.data(), B.data(), N, C, OC);
    return dot(out, DY);
  };
  Dv gx(N * C), gw(OC * C), gb(OC);
  ref::linear_backward(gx.data(), gw.data(), gb.data(), DY.data(), X.data(), W.data(), N, C, OC);
  BOOST_TEST(fd_error(X, loss, gx) < kFdTol);
  BOOST_TEST(fd_error(W, loss, gw) < kFdTol);
  BOOST_TEST(fd_error(B, loss, gb) < kFdTol);
}

BOOST_AUTO_TEST_CASE(embedding_forward_backward) {
  const int64_t N = 9, C = 6, V = 5;
  auto be = make_cpu_backend(2);
  std::vector<int32_t> tok{0, 3, 3, 1, 4, 0, 2, 3, 1};
  F table = random(V * C, 1), dy = random(N * C, 2), out(N * C), dt = random(V * C, 3);
  Dv OUT(N * C), DT = wide(dt);
  be->embedding_forward(out.data(), tok.data(), table.data(), N, C);
  be->embedding_backward(dt.data(), dy.data(), tok.data(), N, C);
  Dv T = wide(table), DY = wide(dy);
  ref::embedding_forward(OUT.data(), tok.data(), T.data(), N, C);
  ref::embedding_backward(DT.data(), DY.data(), tok.data(), N, C);
  BOOST_TEST(rel(out, OUT) < kTol);
  BOOST_TEST(rel(dt, DT) < kTol);
  Dv g(V * C);
  ref::embedding_backward(g.data(), DY.data(), tok.data(), N, C);
  BOOST_TEST(fd_error(T, [&] { Dv o(N * C); ref::embedding_forward(o.data(), tok.data(), T.data(), N, C); return dot(o, DY); }, g) < kFdTol);
}

BOOST_AUTO_TEST_CASE(rmsnorm_forward_backward) {
  const int64_t N = 5, C = 11;
  auto be = make_cpu_backend(2);
  F x = random(N * C, 1), w = random(C, 2), dy = random(N * C, 3), y(N * C), r(N), dx = random(N * C, 4), dw = random(C, 5);
  Dv X = wide(x), W = wide(w), DY = wide(dy), Y(N * C), R(N), DX = wide(dx), DW = wide(dw);
  be->rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
  be->rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
  ref::rmsnorm_forward(Y.data(), R.data(), X.data(), W.data(), N, C, 1e-5);
  ref::rmsnorm_backward(DX.data(), DW.data(), DY.data(), X.data(), W.data(), R.data(), N, C);
  BOOST_TEST(rel(y, Y) < kTol);
  BOOST_TEST(rel(dx, DX) < kTol);
  BOOST_TEST(rel(dw, DW) < kTol);
  auto loss = [&] { Dv o(N * C), rr(N); ref::rmsnorm_forward(o.data(), rr.data(), X.data(), W.data(), N, C, 1e-5); return dot(o, DY); };
  Dv gx(N * C), gw(C);
  ref::rmsnorm_backward(gx.data(), gw.data(), DY.data(), X.data(), W.data(), R.data(), N, C);
  BOOST_TEST(fd_error(X, loss, gx) < kFdTol);
  BOOST_TEST(fd_error(W, loss, gw) < kFdTol);
}

BOOST_AUTO_TEST_CASE(layernorm_forward_backward) {
  const int64_t N = 6, C = 9;
  auto be = make_cpu_backend(2);
  F x = random(N * C, 1), w = random(C, 2), b = random(C, 3), dy = random(N * C, 4), y(N * C), m(N), r(N);
  F dx = random(N * C, 5), dw = random(C, 6), db = random(C, 7);
  Dv X = wide(x), W = wide(w), B = wide(b), DY = wide(dy), Y(N * C), M(N), R(N), DX = wide(dx), DW = wide(dw), DB = wide(db);
  be->layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  be->layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
  ref::layernorm_forward(Y.data(), M.data(), R.data(), X.data(), W.data(), B.data(), N, C, 1e-5);
  ref::layernorm_backward(DX.data(), DW.data(), DB.data(), DY.data(), X.data(), W.data(), M.data(), R.data(), N, C);
  BOOST_TEST(rel(y, Y) < kTol);
  BOOST_TEST(rel(dx, DX) < kTol);
  BOOST_TEST(rel(dw, DW) < kTol);
  BOOST_TEST(rel(db, DB) < kTol);
  auto loss = [&] {
    Dv o(N * C), mm(N), rr(N);
    ref::layernorm_forward(o.data(), mm.data(), rr.data(), X.data(), W.data(), B.data(), N, C, 1e-5);
    return dot(o, DY);
  };
  Dv gx(N * C), gw(C), gb(C);
  ref::layernorm_backward(gx.data(), gw.data(), gb.data(), DY.data(), X.data(), W.data(), M.data(), R.data(), N, C);
  BOOST_TEST(fd_error(X, loss, gx) < kFdTol);
  BOOST_TEST(fd_error(W, loss, gw) < kFdTol);
  BOOST_TEST(fd_error(B, loss, gb) < kFdTol);
}

BOOST_AUTO_TEST_CASE(rope_forward_backward) {
  const int64_t N = 7, H = 3, D = 8;
  auto be = make_cpu_backend(2);
  std::vector<int32_t> pos{0, 1, 2, 3, 0, 1, 2};  // two packed sequences
  F x = random(N * H * D, 1), dy = random(N * H * D, 2);
  Dv X = wide(x), DY = wide(dy);
  be->rope_forward(x.data(), x.data(), pos.data(), N, H, D, 10000.0f);
  be->rope_backward(dy.data(), dy.data(), pos.data(), N, H, D, 10000.0f);
  Dv Y = X, G = DY;
  ref::rope(Y.data(), pos.data(), N, H, D, 10000.0, 1.0);
  ref::rope(G.data(), pos.data(), N, H, D, 10000.0, -1.0);
  BOOST_TEST(rel(x, Y) < kTol);
  BOOST_TEST(rel(dy, G) < kTol);
  auto loss = [&] { Dv o = X; ref::rope(o.data(), pos.data(), N, H, D, 10000.0, 1.0); return dot(o, DY); };
  BOOST_TEST(fd_error(X, loss, G) < kFdTol);
}

namespace {

void check_attention(std::vector<int32_t> cu, int64_t H, int64_t KV, int64_t D, bool causal) {
  const int64_t n_seq = int64_t(cu.size()) - 1, N = cu.back();
  auto be = make_cpu_backend(2);
  F q = random(N * H * D, 1), k = random(N * KV * D, 2), v = random(N * KV * D, 3), dy = random(N * H * D, 4);
  F out(N * H * D), lse(N * H), dq = random(N * H * D, 5), dk = random(N * KV * D, 6), dv = random(N * KV * D, 7);
  Dv Q = wide(q), K = wide(k), V = wide(v), DY = wide(dy), OUT(N * H * D), LSE(N * H), DQ = wide(dq), DK = wide(dk), DV = wide(dv);
  be->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), n_seq, N, H, KV, D, causal);
  be->attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), out.data(), lse.data(), q.data(), k.data(),
                         v.data(), cu.data(), n_seq, N, H, KV, D, causal);
  ref::attention_forward(OUT.data(), LSE.data(), Q.data(), K.data(), V.data(), cu.data(), n_seq, H, KV, D, causal);
  ref::attention_backward(DQ.data(), DK.data(), DV.data(), DY.data(), Q.data(), K.data(), V.data(), LSE.data(),
                          cu.data(), n_seq, H, KV, D, causal);
  BOOST_TEST(rel(out, OUT) < kTol);
  BOOST_TEST(rel(lse, LSE) < kTol);
  BOOST_TEST(rel(dq, DQ) < kTol);
  BOOST_TEST(rel(dk, DK) < kTol);
  BOOST_TEST(rel(dv, DV) < kTol);
  auto loss = [&] {
    Dv o(N * H * D), l(N * H);
    ref::attention_forward(o.data(), l.data(), Q.data(), K.data(), V.data(), cu.data(), n_seq, H, KV, D, causal);
    return dot(o, DY);
  };
  Dv gq(N * H * D), gk(N * KV * D), gv(N * KV * D);
  ref::attention_backward(gq.data(), gk.data(), gv.data(), DY.data(), Q.data(), K.data(), V.data(), LSE.data(),
                          cu.data(), n_seq, H, KV, D, causal);
  BOOST_TEST(fd_error(Q, loss, gq) < kFdTol);
  BOOST_TEST(fd_error(K, loss, gk) < kFdTol);
  BOOST_TEST(fd_error(V, loss, gv) < kFdTol);
  // A packed micro-batch equals each sequence run alone.
  if (n_seq > 1) {
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t t0 = cu[s], L = cu[s + 1] - cu[s];
      std::vector<int32_t> one{0, int32_t(L)};
      F o1(L * H * D), l1(L * H);
      be->attention_forward(o1.data(), l1.data(), q.data() + t0 * H * D, k.data() + t0 * KV * D,
                            v.data() + t0 * KV * D, one.data(), 1, L, H, KV, D, causal);
      for (int64_t i = 0; i < L * H * D; ++i) BOOST_TEST_REQUIRE(o1[i] == out[t0 * H * D + i]);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_causal_packed_gqa) { check_attention({0, 5, 12, 15}, 4, 2, 6, true); }
BOOST_AUTO_TEST_CASE(attention_bidirectional_packed) { check_attention({0, 7, 10, 19}, 2, 2, 4, false); }
BOOST_AUTO_TEST_CASE(attention_single_odd_sequence_mqa) { check_attention({0, 9}, 3, 1, 5, true); }

BOOST_AUTO_TEST_CASE(swiglu_and_gelu) {
  const size_t n = 37;
  auto be = make_cpu_backend(2);
  F g = random(n, 1, 2.0f), u = random(n, 2), dy = random(n, 3), y(n), dg = random(n, 4), du = random(n, 5);
  Dv G = wide(g), U = wide(u), DY = wide(dy), Y(n), DG = wide(dg), DU = wide(du);
  be->swiglu_forward(y.data(), g.data(), u.data(), n);
  be->swiglu_backward(dg.data(), du.data(), dy.data(), g.data(), u.data(), n);
  ref::swiglu_forward(Y.data(), G.data(), U.data(), n);
  ref::swiglu_backward(DG.data(), DU.data(), DY.data(), G.data(), U.data(), n);
  BOOST_TEST(rel(y, Y) < kTol);
  BOOST_TEST(rel(dg, DG) < kTol);
  BOOST_TEST(rel(du, DU) < kTol);
  auto sl = [&] { Dv o(n); ref::swiglu_forward(o.data(), G.data(), U.data(), n); return dot(o, DY); };
  Dv gg(n), gu(n);
  ref::swiglu_backward(gg.data(), gu.data(), DY.data(), G.data(), U.data(), n);
  BOOST_TEST(fd_error(G, sl, gg) < kFdTol);
  BOOST_TEST(fd_error(U, sl, gu) < kFdTol);

  F gy(n), gdx = random(n, 6);
  Dv GY(n), GDX = wide(gdx);
  be->gelu_forward(gy.data(), g.data(), n);
  be->gelu_backward(gdx.data(), dy.data(), g.data(), n);
  ref::gelu_forward(GY.data(), G.data(), n);
  ref::gelu_backward(GDX.data(), DY.data(), G.data(), n);
  BOOST_TEST(rel(gy, GY) < kTol);
  BOOST_TEST(rel(gdx, GDX) < kTol);
  Dv gx(n);
  ref::gelu_backward(gx.data(), DY.data(), G.data(), n);
  BOOST_TEST(fd_error(G, [&] { Dv o(n); ref::gelu_forward(o.data(), G.data(), n); return dot(o, DY); }, gx) < kFdTol);
}

BOOST_AUTO_TEST_CASE(im2col_matches_reference) {
  const int64_t I = 2, Ch = 3, S = 8, p = 4;
  auto be = make_cpu_backend(2);
  F px = random(I * Ch * S * S, 1), out(I * (S / p) * (S / p) * Ch * p * p);
  Dv PX = wide(px), OUT(out.size());
  be->im2col_patches(out.data(), px.data(), I, Ch, S, p);
  ref::im2col_patches(OUT.data(), PX.data(), I, Ch, S, p);
  BOOST_TEST(rel(out, OUT) == 0.0);
}

BOOST_AUTO_TEST_CASE(cross_entropy_and_kl) {
  const int64_t N = 6, V = 11;
  auto be = make_cpu_backend(2);
  std::vector<int32_t> t{3, -1, 0, 10, 5, 5};
  F s = random(N * V, 1, 2.0f), te = random(N * V, 2, 2.0f), ds = random(N * V, 3), dk = random(N * V, 4);
  Dv S = wide(s), TE = wide(te), DS = wide(ds), DK = wide(dk);
  double l = 0, kl = 0;  // the CPU backend's scalar accumulators are host memory
  be->cross_entropy(&l, ds.data(), s.data(), t.data(), N, V, 0.25f);
  const double L = ref::cross_entropy(DS.data(), S.data(), t.data(), N, V, 0.25);
  BOOST_TEST(std::abs(l - L) / L < 1e-6);
  BOOST_TEST(rel(ds, DS) < kTol);
  be->kl_divergence(&kl, dk.data(), s.data(), te.data(), t.data(), N, V, 2.0f, 0.5f);
  const double KL = ref::kl_divergence(DK.data(), S.data(), TE.data(), t.data(), N, V, 2.0, 0.5);
  BOOST_TEST(std::abs(kl - KL) / KL < 1e-6);
  BOOST_TEST(rel(dk, DK) < kTol);
  // Finite differences (scale 1: the gradient of the returned sum).
  Dv g(N * V);
  ref::cross_entropy(g.data(), S.data(), t.data(), N, V, 1.0);
  BOOST_TEST(fd_error(S, [&] { return ref::cross_entropy<double>(nullptr, S.data(), t.data(), N, V, 1.0); }, g) < kFdTol);
  Dv gk(N * V);
  ref::kl_divergence(gk.data(), S.data(), TE.data(), t.data(), N, V, 2.0, 1.0);
  BOOST_TEST(fd_error(S, [&] { return ref::kl_divergence<double>(nullptr, S.data(), TE.data(), t.data(), N, V, 2.0, 1.0); }, gk) < kFdTol);
}

BOOST_AUTO_TEST_CASE(adamw_three_steps) {
  const size_t n = 50;
  auto be = make_cpu_backend(2);
  F p = random(n, 1), m(n), v(n);
  Dv P = wide(p), M(n), V(n);
  for (int64_t t = 1; t <= 3; ++t) {
    F g = random(n, uint32_t(10 + t));
    Dv G = wide(g);
    be->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 1.0f, nullptr);
    ref::adamw(P.data(), G.data(), M.data(), V.data(), n, 1e-2, 0.9, 0.95, 1e-8, 0.1, t);
  }
  BOOST_TEST(rel(p, P) < kTol);
  BOOST_TEST(rel(m, M) < kTol);
  BOOST_TEST(rel(v, V) < kTol);
  // A clipping coefficient applied inside the step: the bits of scaling the
  // gradient first, and the gradient left as it was.
  F g = random(n, 20), g_scaled = g, p2 = p, m2 = m, v2 = v;
  const F g0 = g;
  be->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.37f, nullptr);
  be->scale(g_scaled.data(), 0.37f, n);
  be->adamw(p2.data(), g_scaled.data(), m2.data(), v2.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 1.0f, nullptr);
  BOOST_TEST(p == p2);
  BOOST_TEST(m == m2);
  BOOST_TEST(v == v2);
  BOOST_TEST(g == g0);
  // Writing the bf16 copy in the same pass: the same p, m, v bits, and the
  // copy is the updated p rounded.
  std::vector<uint16_t> p16(n, 0x7fc0);
  be->adamw(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 1.0f, p16.data());
  be->adamw(p2.data(), g.data(), m2.data(), v2.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 1.0f, nullptr);
  BOOST_TEST(p == p2);
  BOOST_TEST(m == m2);
  BOOST_TEST(v == v2);
  for (size_t i = 0; i < n; ++i) BOOST_TEST(p16[i] == float_to_bf16(p[i]));
}

BOOST_AUTO_TEST_CASE(elementwise_and_norm) {
  auto be = make_cpu_backend(2);
  const size_t n = 100003;  // several chunks, a ragged last one
  F a = random(n, 1), b = random(n, 2), out(n);
  be->add(out.data(), a.data(), b.data(), n);
  be->accumulate(out.data(), a.data(), n);
  be->scale(out.data(), 0.5f, n);
  double sq = 0;
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST_REQUIRE(out[i] == (a[i] + b[i] + a[i]) * 0.5f);
    sq += double(a[i]) * a[i];
  }
  double* norm = be->allocate_scalars(1);
  be->sq_norm(norm, a.data(), n);
  double host = 0;
  be->copy_to_host(&host, norm, sizeof(double));
  be->release(norm);
  BOOST_TEST(std::abs(host - sq) / sq < 1e-12);
  float* buf = be->allocate(1000);
  BOOST_TEST(reinterpret_cast<uintptr_t>(buf) % 64 == 0u);
  for (int i = 0; i < 1000; ++i) BOOST_TEST_REQUIRE(buf[i] == 0.0f);
  be->release(buf);
}

// Every op gives the same bits with 1 and 2 threads.
BOOST_AUTO_TEST_CASE(thread_count_independence) {
  const int64_t N = 300, C = 96, H = 4, D = 24, V = 700;
  std::vector<int32_t> cu{0, 100, 177, 300}, pos(N), tok(N), tgt(N);
  for (int64_t i = 0; i < N; ++i) {
    pos[i] = int32_t(i < 100 ? i : i < 177 ? i - 100 : i - 177);
    tok[i] = int32_t((i * 7) % V);
    tgt[i] = i % 5 == 0 ? -1 : int32_t((i * 13) % V);
  }
  auto run = [&](Backend& b) {
    F x = random(N * C, 1), w = random(C, 2), dy = random(N * C, 3), y(N * C), r(N), dx(N * C), dw(C);
    b.rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
    b.rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
    F table = random(V * C, 4), dt(V * C);
    b.embedding_backward(dt.data(), dy.data(), tok.data(), N, C);
    F q = random(N * H * D, 5), k = random(N * H * D, 6), v = random(N * H * D, 7), o(N * H * D), lse(N * H);
    F dq(N * H * D), dk(N * H * D), dv(N * H * D);
    b.attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), 3, N, H, H, D, true);
    b.attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), o.data(), lse.data(), q.data(), k.data(),
                         v.data(), cu.data(), 3, N, H, H, D, true);
    F logits = random(N * V, 8), dl(N * V);
    double ce = 0, kl = 0, sq = 0;
    b.cross_entropy(&ce, dl.data(), logits.data(), tgt.data(), N, V, 0.01f);
    F lin(N * C), wl = random(C * C, 9), dwl(C * C), dbl(C);
    b.linear_forward(lin.data(), x.data(), wl.data(), w.data(), N, C, C);
    b.linear_backward(dx.data(), dwl.data(), dbl.data(), dy.data(), x.data(), wl.data(), N, C, C);
    // GQA: two query heads per kv head add into it in turn.
    F kg = random(N * 2 * D, 10), vg = random(N * 2 * D, 11), og(N * H * D), lg(N * H), dqg(N * H * D),
      dkg(N * 2 * D), dvg(N * 2 * D);
    b.attention_forward(og.data(), lg.data(), q.data(), kg.data(), vg.data(), cu.data(), 3, N, H, 2, D, false);
    b.attention_backward(dqg.data(), dkg.data(), dvg.data(), dy.data(), og.data(), lg.data(), q.data(), kg.data(),
                         vg.data(), cu.data(), 3, N, H, 2, D, false);
    F ln(N * C), lm(N), lr(N), dxl(N * C), dwln(C), dbln(C);
    b.layernorm_forward(ln.data(), lm.data(), lr.data(), x.data(), w.data(), dy.data(), N, C, 1e-5f);
    b.layernorm_backward(dxl.data(), dwln.data(), dbln.data(), dy.data(), x.data(), w.data(), lm.data(), lr.data(), N,
                         C);
    F emb(N * C);
    b.embedding_forward(emb.data(), tok.data(), table.data(), N, C);
    F rq = q, rdq = dq;  // [N, H, D]
    b.rope_forward(rq.data(), rq.data(), pos.data(), N, H, D, 10000.0f);
    b.rope_backward(rdq.data(), rdq.data(), pos.data(), N, H, D, 10000.0f);
    F teacher = random(N * V, 12), dks(N * V);
    b.kl_divergence(&kl, dks.data(), logits.data(), teacher.data(), tgt.data(), N, V, 2.0f, 0.01f);
    b.sq_norm(&sq, logits.data(), N * V);
    const size_t n = size_t(N * C);
    F sw(n), dsg(n), dsu(n), ge(n), dge(n), sum(n);
    b.swiglu_forward(sw.data(), x.data(), dy.data(), n);
    b.swiglu_backward(dsg.data(), dsu.data(), y.data(), x.data(), dy.data(), n);
    b.gelu_forward(ge.data(), x.data(), n);
    b.gelu_backward(dge.data(), y.data(), x.data(), n);
    b.add(sum.data(), x.data(), y.data(), n);
    b.accumulate(sum.data(), dy.data(), n);
    b.scale(sum.data(), 0.3f, n);
    F p = random(n, 13), m(n), vv(n);
    for (int64_t t = 1; t <= 2; ++t)
      b.adamw(p.data(), dx.data(), m.data(), vv.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 1.0f, nullptr);
    F px = random(4 * 3 * 16 * 16, 14), patches(4 * 16 * 48);
    b.im2col_patches(patches.data(), px.data(), 4, 3, 16, 4);
    std::vector<F> all{y,   dx,  dw,   dt,  o,   lse,  dq,   dk,   dv,  dl,  lin, dwl, dbl, og,  lg,  dqg, dkg, dvg,
                       ln,  lm,  lr,   dxl, dwln, dbln, emb, rq,   rdq, dks, sw,  dsg, dsu, ge,  dge, sum, p,   m,
                       vv,  patches,
                       F{float(ce), float(kl), float(sq)}};
    return all;
  };
  // One backend at a time: the OpenBLAS thread count is process-wide.
  const auto a = run(*make_cpu_backend(1));
  const auto b = run(*make_cpu_backend(2));
  for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i]);
}

// GEMMs large enough that OpenBLAS splits them over threads: same bits.
BOOST_AUTO_TEST_CASE(threaded_gemm_independence) {
  const int64_t N = 512, C = 384, OC = 640;
  F x = random(N * C, 1), w = random(OC * C, 2), bias = random(OC, 3), dy = random(N * OC, 4);
  auto run = [&](Backend& b) {
    F out(N * OC), dx(N * C), dw(OC * C), db(OC);
    b.linear_forward(out.data(), x.data(), w.data(), bias.data(), N, C, OC);
    b.linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
    return std::vector<F>{out, dx, dw, db};
  };
  // One backend at a time: the OpenBLAS thread count is process-wide.
  const auto a = run(*make_cpu_backend(1));
  const auto b = run(*make_cpu_backend(2));
  for (size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i] == b[i]);
}

// A null gradient pointer skips that gradient; the others come out the same.
BOOST_AUTO_TEST_CASE(null_gradients_skipped) {
  auto be = make_cpu_backend(2);
  const int64_t N = 10, C = 12, H = 2, D = 6;
  F x = random(N * C, 1), w = random(C, 2), b = random(C, 3), dy = random(N * C, 4), y(N * C), m(N), r(N);
  F dx(N * C), dw(C), db(C), dx1(N * C), dw1(C), db1(C);
  be->rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, 1e-5f);
  be->rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
  be->rmsnorm_backward(dx1.data(), nullptr, dy.data(), x.data(), w.data(), r.data(), N, C);
  be->rmsnorm_backward(nullptr, dw1.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
  BOOST_TEST(dx == dx1);
  BOOST_TEST(dw == dw1);
  std::fill(dx.begin(), dx.end(), 0.0f), std::fill(dw.begin(), dw.end(), 0.0f);
  std::fill(dx1.begin(), dx1.end(), 0.0f), std::fill(dw1.begin(), dw1.end(), 0.0f);
  be->layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  be->layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
  be->layernorm_backward(dx1.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
  be->layernorm_backward(nullptr, dw1.data(), nullptr, dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
  be->layernorm_backward(nullptr, nullptr, db1.data(), dy.data(), x.data(), w.data(), m.data(), r.data(), N, C);
  BOOST_TEST(dx == dx1);
  BOOST_TEST(dw == dw1);
  BOOST_TEST(db == db1);
  F dg(N * C), du(N * C), dg1(N * C), du1(N * C);
  be->swiglu_backward(dg.data(), du.data(), dy.data(), x.data(), b.data(), size_t(C));
  be->swiglu_backward(dg1.data(), nullptr, dy.data(), x.data(), b.data(), size_t(C));
  be->swiglu_backward(nullptr, du1.data(), dy.data(), x.data(), b.data(), size_t(C));
  BOOST_TEST(dg == dg1);
  BOOST_TEST(du == du1);
  std::vector<int32_t> cu{0, 4, 10};
  F q = random(N * H * D, 5), k = random(N * D, 6), v = random(N * D, 7), o(N * H * D), lse(N * H), g = random(N * H * D, 8);
  F dq(N * H * D), dk(N * D), dv(N * D), dq1(N * H * D), dk1(N * D), dv1(N * D);
  be->attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), 2, N, H, 1, D, true);
  be->attention_backward(dq.data(), dk.data(), dv.data(), g.data(), o.data(), lse.data(), q.data(), k.data(), v.data(),
                         cu.data(), 2, N, H, 1, D, true);
  for (int which = 0; which < 3; ++which)
    be->attention_backward(which == 0 ? dq1.data() : nullptr, which == 1 ? dk1.data() : nullptr,
                           which == 2 ? dv1.data() : nullptr, g.data(), o.data(), lse.data(), q.data(), k.data(),
                           v.data(), cu.data(), 2, N, H, 1, D, true);
  BOOST_TEST(dq == dq1);
  BOOST_TEST(dk == dk1);
  BOOST_TEST(dv == dv1);
  be->attention_backward(nullptr, nullptr, nullptr, g.data(), o.data(), lse.data(), q.data(), k.data(), v.data(),
                         cu.data(), 2, N, H, 1, D, true);
  F lg = random(N * C, 9);
  std::vector<int32_t> t(N, 3);
  double ce = 0, kl = 0;
  be->cross_entropy(&ce, nullptr, lg.data(), t.data(), N, C, 1.0f);
  be->kl_divergence(&kl, nullptr, lg.data(), x.data(), t.data(), N, C, 2.0f, 1.0f);
  BOOST_TEST(ce > 0.0);
  BOOST_TEST(kl > 0.0);
}

// A gradient passed as Grad::overwrite is written (=), its old contents
// (NaN here) never read: the result is what accumulating into zeros gives,
// bit for bit. relu against its definition.
BOOST_AUTO_TEST_CASE(overwritten_gradients_and_relu) {
  auto be = make_cpu_backend(2);
  const int64_t N = 9, C = 7, OC = 5;
  const size_t n = size_t(N * C);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  F x = random(n, 1), u = random(n, 2), dy = random(n, 3), w = random(OC * C, 4), dz = random(N * OC, 5);
  x[0] = 0.0f;  // relu's kink: no gradient, as in PyTorch
  F acc(n), over(n, nan), acc2(n), over2(n, nan);
  be->linear_backward(acc.data(), nullptr, nullptr, dz.data(), x.data(), w.data(), N, C, OC);
  be->linear_backward(Grad::overwrite(over.data()), nullptr, nullptr, dz.data(), x.data(), w.data(), N, C, OC);
  BOOST_TEST(acc == over);
  {  // a weight gradient overwritten: the bits of adding into zeros; zeros when there are no rows
    F dw_acc(size_t(OC * C)), dw_over(size_t(OC * C), nan);
    be->linear_backward(nullptr, dw_acc.data(), nullptr, dz.data(), x.data(), w.data(), N, C, OC);
    be->linear_backward(nullptr, Grad::overwrite(dw_over.data()), nullptr, dz.data(), x.data(), w.data(), N, C, OC);
    BOOST_TEST(dw_acc == dw_over);
    std::fill(dw_over.begin(), dw_over.end(), nan);
    be->linear_backward(nullptr, Grad::overwrite(dw_over.data()), nullptr, dz.data(), x.data(), w.data(), 0, C, OC);
    BOOST_TEST(dw_over == F(size_t(OC * C)));
  }
  std::fill(acc.begin(), acc.end(), 0.0f), std::fill(over.begin(), over.end(), nan);
  be->swiglu_backward(acc.data(), acc2.data(), dy.data(), x.data(), u.data(), n);
  be->swiglu_backward(Grad::overwrite(over.data()), Grad::overwrite(over2.data()), dy.data(), x.data(), u.data(), n);
  BOOST_TEST(acc == over);
  BOOST_TEST(acc2 == over2);
  std::fill(acc.begin(), acc.end(), 0.0f), std::fill(over.begin(), over.end(), nan);
  be->gelu_backward(acc.data(), dy.data(), x.data(), n);
  be->gelu_backward(Grad::overwrite(over.data()), dy.data(), x.data(), n);
  BOOST_TEST(acc == over);
  F y(n), dr(n, 1.0f), dr_over(n, nan);
  be->relu_forward(y.data(), x.data(), n);
  be->relu_backward(dr.data(), dy.data(), x.data(), n);  // += onto ones
  be->relu_backward(Grad::overwrite(dr_over.data()), dy.data(), x.data(), n);
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    BOOST_TEST(dr_over[i] == (x[i] > 0 ? dy[i] : 0.0f));
    BOOST_TEST(dr[i] == 1.0f + dr_over[i]);
  }
}

// bf16 storage: F32 -> BF16 rounds to nearest even on the backend, BF16 ->
// F32 is exact, and the bits agree with the per-element function (nn/dtype.h)
// whatever the chunking of the pool.
BOOST_AUTO_TEST_CASE(bf16_storage_convert_and_copies) {
  auto be = make_cpu_backend(3);
  BOOST_TEST((be->device() == Device::Host));
  const float one = 1.0f, ulp = std::ldexp(1.0f, -7);  // bf16 spacing at 1
  const F probes{one,
                 one + ulp / 2,                              // tie: to even (1.0)
                 one + 3 * ulp / 2,                          // tie: to even (1 + 2 ulp)
                 one + ulp / 2 + std::ldexp(1.0f, -20),      // just above the tie: up
                 -2.5f,
                 std::numeric_limits<float>::infinity(),
                 std::numeric_limits<float>::max(),          // rounds to +inf, as torch does
                 std::numeric_limits<float>::quiet_NaN(),
                 0.0f};
  const std::vector<uint16_t> expect{0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x7F80, 0x7F80, 0, 0x0000};
  const size_t n = probes.size();
  float* f32 = be->allocate(n);
  auto* b16 = static_cast<uint16_t*>(be->allocate(n, DType::BF16));
  BOOST_TEST(reinterpret_cast<uintptr_t>(b16) % 64 == 0u);
  be->copy_from_host(f32, probes.data(), n * sizeof(float));
  be->convert(b16, DType::BF16, f32, DType::F32, n);
  std::vector<uint16_t> bits(n);
  be->copy_to_host(bits.data(), b16, n * sizeof(uint16_t));
  for (size_t i = 0; i + 2 < n; ++i) BOOST_TEST(bits[i] == expect[i], "probe " << i);
  BOOST_TEST(std::isnan(bf16_to_float(bits[7])));
  BOOST_TEST(bits[8] == 0u);
  // Back to F32: exact (every bf16 is a float).
  float* back = be->allocate(n);
  be->convert(back, DType::F32, b16, DType::BF16, n);
  F host(n);
  be->copy_to_host(host.data(), back, n * sizeof(float));
  BOOST_TEST(host[2] == one + 2 * ulp);
  BOOST_TEST(host[4] == -2.5f);
  for (void* p : {static_cast<void*>(f32), static_cast<void*>(b16), static_cast<void*>(back)}) be->release(p);

  // Many elements (several pool chunks): bitwise the scalar function, and
  // the round trip within half a bf16 ulp (2^-8 relative: 8 significant bits).
  const size_t m = 100003;
  const F x = random(m, 21, 50.0f);
  float* xs = be->allocate(m);
  auto* xb = static_cast<uint16_t*>(be->allocate(m, DType::BF16));
  float* xr = be->allocate(m);
  be->copy_from_host(xs, x.data(), m * sizeof(float));
  be->convert(xb, DType::BF16, xs, DType::F32, m);
  be->convert(xr, DType::F32, xb, DType::BF16, m);
  std::vector<uint16_t> xbits(m);
  F rt(m);
  be->copy_to_host(xbits.data(), xb, m * sizeof(uint16_t));
  be->copy_to_host(rt.data(), xr, m * sizeof(float));
  size_t mismatches = 0, too_far = 0;
  for (size_t i = 0; i < m; ++i) {
    mismatches += xbits[i] != float_to_bf16(x[i]);
    too_far += std::abs(rt[i] - x[i]) > std::ldexp(std::abs(x[i]), -8);
  }
  BOOST_TEST(mismatches == 0u);
  BOOST_TEST(too_far == 0u);
  // Same dtype: a copy.
  be->convert(xr, DType::F32, xs, DType::F32, m);
  be->copy_to_host(rt.data(), xr, m * sizeof(float));
  BOOST_TEST(rt == x);

  // fp32 compute on bf16 storage: weights kept in bf16, widened for the GEMM,
  // equal the GEMM on the rounded weights.
  const int64_t N = 5, C = 16, OC = 7;
  const F w = random(OC * C, 22), inp = random(N * C, 23);
  F w_rounded(w.size());
  for (size_t i = 0; i < w.size(); ++i) w_rounded[i] = bf16_to_float(float_to_bf16(w[i]));
  auto* wb = static_cast<uint16_t*>(be->allocate(w.size(), DType::BF16));
  float* ww = be->allocate(w.size());
  be->copy_from_host(ww, w.data(), w.size() * sizeof(float));
  be->convert(wb, DType::BF16, ww, DType::F32, w.size());
  be->convert(ww, DType::F32, wb, DType::BF16, w.size());
  F out(N * OC), expect_out(N * OC);
  be->linear_forward(out.data(), inp.data(), ww, nullptr, N, C, OC);
  be->linear_forward(expect_out.data(), inp.data(), w_rounded.data(), nullptr, N, C, OC);
  BOOST_TEST(out == expect_out);
  for (void* p : {static_cast<void*>(xs), static_cast<void*>(xb), static_cast<void*>(xr), static_cast<void*>(wb),
                  static_cast<void*>(ww)})
    be->release(p);
}
