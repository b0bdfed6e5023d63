// The CUDA kernels' per-element math (gpu/kernel_math.h) run on the CPU:
// each op is rebuilt here from the same MAESTRO_HD functions the kernels
// call, in the kernels' own structure where it matters (a row's softmax
// state merged from 256 threads' partial states; attention as the fast
// kernel's online softmax over tiles of 32 keys, planned by
// plan_attention_tiles), and compared with the CPU backend (fp32: relative
// error <= 1e-5) and with cpu/reference_ops.h in double.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/reference_ops.h"
#include "gpu/kernel_math.h"
#include "gpu/launch_plan.h"
#include "nn/dtype.h"
#include "support/random_vector.h"
#include "support/rel_err.h"

using namespace maestro;
namespace gm = maestro::gpu_math;

namespace {

using Vec = std::vector<float>;

using test_support::random_normal;
Vec randn(size_t n, uint32_t seed, float scale = 1.0f) { return random_normal(n, seed, scale); }

// max |a − b| / max |b|
double rel_err(const Vec& a, const Vec& b) { return test_support::max_rel_err(a, b); }
double rel_err(const Vec& a, const std::vector<double>& b) {
  return rel_err(a, Vec(b.begin(), b.end()));
}
std::vector<double> to_double(const Vec& v) { return {v.begin(), v.end()}; }

constexpr double kF32 = 1e-5;  // the fp32 bound against the CPU backend

// The CPU backend with host buffers: its memory is host memory.
struct Cpu {
  std::unique_ptr<Backend> b = make_cpu_backend(1);
};

// A row's softmax state as a kernel block reduces it: thread t pushes
// elements t, t + T, ...; the T states merge pairwise (a tree).
gm::SoftmaxState block_state(const float* x, int64_t n, float inv_t = 1.0f, int T = 256) {
  std::vector<gm::SoftmaxState> s(size_t(T), gm::softmax_init());
  for (int64_t j = 0; j < n; ++j) s[size_t(j % T)] = gm::softmax_push(s[size_t(j % T)], x[j] * inv_t);
  for (int w = T / 2; w >= 1; w /= 2)
    for (int t = 0; t < w; ++t) s[size_t(t)] = gm::softmax_merge(s[size_t(t)], s[size_t(t + w)]);
  return s[0];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernel_math)

BOOST_AUTO_TEST_CASE(norms_match_the_cpu_backend) {
  const int64_t N = 7, C = 300;
  const Vec x = randn(size_t(N * C), 1), w = randn(size_t(C), 2), b = randn(size_t(C), 3), dy = randn(size_t(N * C), 4);
  Cpu cpu;
  // RMSNorm
  Vec out(size_t(N * C)), rstd(static_cast<size_t>(N)), cpu_out(out.size()), cpu_rstd(rstd.size());
  Vec dx(out.size(), 0.5f), dw(size_t(C), 0.25f), cpu_dx = dx, cpu_dw = dw;
  for (int64_t n = 0; n < N; ++n) {
    float ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[size_t(n * C + c)] * x[size_t(n * C + c)];
    rstd[size_t(n)] = gm::rms_rstd(ss, C, 1e-5f);
    float dot = 0;
    for (int64_t c = 0; c < C; ++c) {
      out[size_t(n * C + c)] = gm::rmsnorm_out(x[size_t(n * C + c)], rstd[size_t(n)], w[size_t(c)]);
      dot += dy[size_t(n * C + c)] * w[size_t(c)] * x[size_t(n * C + c)];
    }
    const float k = gm::rmsnorm_row_k(rstd[size_t(n)], dot, C);
    for (int64_t c = 0; c < C; ++c) {
      const size_t e = size_t(n * C + c);
      dx[e] += gm::rmsnorm_dx(x[e], dy[e], w[size_t(c)], rstd[size_t(n)], k);
      dw[size_t(c)] += gm::rmsnorm_dw(x[e], dy[e], rstd[size_t(n)]);
    }
  }
  cpu.b->rmsnorm_forward(cpu_out.data(), cpu_rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  cpu.b->rmsnorm_backward(cpu_dx.data(), cpu_dw.data(), dy.data(), x.data(), w.data(), cpu_rstd.data(), N, C);
  BOOST_TEST(rel_err(out, cpu_out) <= kF32);
  BOOST_TEST(rel_err(rstd, cpu_rstd) <= kF32);
  BOOST_TEST(rel_err(dx, cpu_dx) <= kF32);
  BOOST_TEST(rel_err(dw, cpu_dw) <= kF32);
  // LayerNorm
  Vec mean(static_cast<size_t>(N)), lout(out.size()), cpu_mean(mean.size()), lrstd(rstd.size());
  Vec ldx(out.size(), 0.5f), ldw(size_t(C), 0.25f), ldb(size_t(C), -1.0f), cpu_ldx = ldx, cpu_ldw = ldw, cpu_ldb = ldb;
  for (int64_t n = 0; n < N; ++n) {
    float s = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) s += x[size_t(n * C + c)];
    const float m = s / float(C);
    for (int64_t c = 0; c < C; ++c) v += (x[size_t(n * C + c)] - m) * (x[size_t(n * C + c)] - m);
    const float r = gm::ln_rstd(v / float(C), 1e-5f);
    mean[size_t(n)] = m;
    lrstd[size_t(n)] = r;
    float s1 = 0, s2 = 0;
    for (int64_t c = 0; c < C; ++c) {
      const size_t e = size_t(n * C + c);
      lout[e] = gm::layernorm_out(x[e], m, r, w[size_t(c)], b[size_t(c)]);
      s1 += dy[e] * w[size_t(c)];
      s2 += dy[e] * w[size_t(c)] * (x[e] - m) * r;
    }
    for (int64_t c = 0; c < C; ++c) {
      const size_t e = size_t(n * C + c);
      ldx[e] += gm::layernorm_dx(x[e], dy[e], w[size_t(c)], m, r, s1 / float(C), s2 / float(C));
      ldw[size_t(c)] += gm::layernorm_dw(x[e], dy[e], m, r);
      ldb[size_t(c)] += dy[e];
    }
  }
  Vec cpu_lout(out.size()), cpu_lrstd(rstd.size());
  cpu.b->layernorm_forward(cpu_lout.data(), cpu_mean.data(), cpu_lrstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
  cpu.b->layernorm_backward(cpu_ldx.data(), cpu_ldw.data(), cpu_ldb.data(), dy.data(), x.data(), w.data(),
                            cpu_mean.data(), cpu_lrstd.data(), N, C);
  BOOST_TEST(rel_err(lout, cpu_lout) <= kF32);
  BOOST_TEST(rel_err(ldx, cpu_ldx) <= kF32);
  BOOST_TEST(rel_err(ldw, cpu_ldw) <= kF32);
  BOOST_TEST(rel_err(ldb, cpu_ldb) <= kF32);
}

BOOST_AUTO_TEST_CASE(rotary_matches_the_cpu_backend_and_inverts) {
  const int64_t N = 5, H = 3, D = 16;
  const Vec x0 = randn(size_t(N * H * D), 5);
  const std::vector<int32_t> pos = {0, 1, 2, 700, 4095};
  Vec x = x0, cpu_x = x0;
  for (int64_t n = 0; n < N; ++n)  // rope_kernel's order: one cos/sin per (token, pair), every head
    for (int64_t i = 0; i < D / 2; ++i) {
      float c, s;
      gm::rope_cos_sin(pos[size_t(n)], gm::rope_inv_freq(i, D, 10000.0f), 1.0f, c, s);
      for (int64_t h = 0; h < H; ++h) {
        float* r = x.data() + (n * H + h) * D;
        gm::rope_apply(r[i], r[i + D / 2], c, s);
      }
    }
  Cpu cpu;
  cpu.b->rope_forward(cpu_x.data(), cpu_x.data(), pos.data(), N, H, D, 10000.0f);
  BOOST_TEST(x == cpu_x, boost::test_tools::per_element());  // the same operations, in the same precision
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        float* r = x.data() + (n * H + h) * D;
        float c, sn;
        gm::rope_cos_sin(pos[size_t(n)], gm::rope_inv_freq(i, D, 10000.0f), -1.0f, c, sn);
        gm::rope_apply(r[i], r[i + D / 2], c, sn);
      }
  BOOST_TEST(rel_err(x, x0) <= kF32);
}

BOOST_AUTO_TEST_CASE(activations_match_the_reference_in_double) {
  const size_t n = 1000;
  const Vec g = randn(n, 6, 3.0f), u = randn(n, 7), dout = randn(n, 8);
  std::vector<double> ref_out(n), ref_dg(n, 0.0), ref_du(n, 0.0), ref_gelu(n), ref_dgelu(n, 0.0);
  const std::vector<double> gd = to_double(g), ud = to_double(u), dd = to_double(dout);
  ref::swiglu_forward(ref_out.data(), gd.data(), ud.data(), n);
  ref::swiglu_backward(ref_dg.data(), ref_du.data(), dd.data(), gd.data(), ud.data(), n);
  ref::gelu_forward(ref_gelu.data(), gd.data(), n);
  ref::gelu_backward(ref_dgelu.data(), dd.data(), gd.data(), n);
  Vec out(n), dg(n), du(n), ge(n), dge(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = gm::swiglu(g[i], u[i]);
    dg[i] = gm::swiglu_dgate(dout[i], g[i], u[i]);
    du[i] = gm::swiglu_dup(dout[i], g[i]);
    ge[i] = gm::gelu(g[i]);
    dge[i] = gm::gelu_grad(dout[i], g[i]);
  }
  BOOST_TEST(rel_err(out, ref_out) <= kF32);
  BOOST_TEST(rel_err(dg, ref_dg) <= kF32);
  BOOST_TEST(rel_err(du, ref_du) <= kF32);
  BOOST_TEST(rel_err(ge, ref_gelu) <= kF32);
  BOOST_TEST(rel_err(dge, ref_dgelu) <= kF32);
}

// relu and the overwrite-or-add of a gradient (nn/backend.h's Grad), as the
// kernels apply them, against the CPU backend: the same bits.
BOOST_AUTO_TEST_CASE(relu_and_overwritten_gradients_match_the_cpu_backend) {
  const size_t n = 1000;
  Vec x = randn(n, 12), dout = randn(n, 13), acc = randn(n, 14);
  x[0] = 0.0f, x[1] = std::numeric_limits<float>::quiet_NaN();  // the kink; NaN passed on
  auto cpu = make_cpu_backend(1);
  Vec cpu_y(n), cpu_acc = acc, cpu_over(n, 7.0f);
  cpu->relu_forward(cpu_y.data(), x.data(), n);
  cpu->relu_backward(cpu_acc.data(), dout.data(), x.data(), n);
  cpu->relu_backward(Grad::overwrite(cpu_over.data()), dout.data(), x.data(), n);
  Vec y(n), over(n, 7.0f);
  for (size_t i = 0; i < n; ++i) {
    y[i] = gm::relu(x[i]);
    gm::put_grad(acc[i], gm::relu_grad(dout[i], x[i]), true);
    gm::put_grad(over[i], gm::relu_grad(dout[i], x[i]), false);
  }
  BOOST_TEST(std::isnan(y[1]));
  BOOST_TEST(std::isnan(cpu_y[1]));
  y[1] = cpu_y[1] = 0.0f;
  BOOST_TEST(y == cpu_y, boost::test_tools::per_element());
  BOOST_TEST(acc == cpu_acc, boost::test_tools::per_element());
  BOOST_TEST(over == cpu_over, boost::test_tools::per_element());
}

// The outputs' bf16 copies (nn/backend.h's Out, GradOut): the kernels'
// put_out / put_grad_out, as the CPU backend's swiglu forward and backward
// write them — each copy its own fp32 value rounded, with the fp32 values
// beside and with the copy alone; a gradient added to takes no copy.
BOOST_AUTO_TEST_CASE(bf16_copies_of_outputs_are_the_values_rounded) {
  const size_t n = 1000;
  const Vec gate = randn(n, 15), up = randn(n, 16), dout = randn(n, 17), start = randn(n, 18);
  auto cpu = make_cpu_backend(1);
  Vec cpu_y(n), cpu_dg = start;
  std::vector<uint16_t> cpu_y16(n), cpu_dg16(n), cpu_alone16(n);
  cpu->swiglu_forward({cpu_y.data(), cpu_y16.data()}, gate.data(), up.data(), n);
  cpu->swiglu_backward(GradOut::overwrite(cpu_dg.data(), cpu_dg16.data()), nullptr, dout.data(), gate.data(),
                       up.data(), n);
  cpu->swiglu_backward(GradOut::overwrite(nullptr, cpu_alone16.data()), nullptr, dout.data(), gate.data(), up.data(),
                       n);
  Vec y(n), dg = start, acc = start;
  std::vector<uint16_t> y16(n), dg16(n), alone16(n, 0x7fc0);
  for (size_t i = 0; i < n; ++i) {
    gm::put_out(y.data(), y16.data(), int64_t(i), gm::swiglu(gate[i], up[i]));
    gm::put_grad_out(dg.data(), false, dg16.data(), int64_t(i), gm::swiglu_dgate(dout[i], gate[i], up[i]));
    gm::put_grad_out(nullptr, false, alone16.data(), int64_t(i), gm::swiglu_dgate(dout[i], gate[i], up[i]));
    gm::put_grad_out(acc.data(), true, nullptr, int64_t(i), gm::swiglu_dgate(dout[i], gate[i], up[i]));
  }
  for (size_t i = 0; i < n; ++i) {
    BOOST_TEST(y16[i] == float_to_bf16(y[i]));
    BOOST_TEST(dg16[i] == float_to_bf16(dg[i]));
    BOOST_TEST(acc[i] == start[i] + dg[i]);
    BOOST_TEST(cpu_y16[i] == float_to_bf16(cpu_y[i]));
    BOOST_TEST(cpu_dg16[i] == float_to_bf16(cpu_dg[i]));
    BOOST_TEST(std::abs(y[i] - cpu_y[i]) <= 1e-6f * (1 + std::abs(cpu_y[i])));  // the same op
  }
  BOOST_TEST(alone16 == dg16, boost::test_tools::per_element());
  BOOST_TEST(cpu_alone16 == cpu_dg16, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(softmax_state_merges_in_any_tree) {
  const Vec x = randn(1000, 9, 20.0f);
  const gm::SoftmaxState serial = block_state(x.data(), 1000, 1.0f, 1), tree = block_state(x.data(), 1000);
  double mx = -1e30, sum = 0;
  for (float v : x) mx = std::max(mx, double(v));
  for (float v : x) sum += std::exp(double(v) - mx);
  const double lse = mx + std::log(sum);
  BOOST_TEST(std::abs(gm::softmax_lse(serial) - lse) <= 1e-5 * std::abs(lse));
  BOOST_TEST(std::abs(gm::softmax_lse(tree) - lse) <= 1e-5 * std::abs(lse));
  // an empty partial (a thread with no element) is the identity
  const gm::SoftmaxState e = gm::softmax_init();
  BOOST_TEST(gm::softmax_merge(e, tree).max == tree.max);
  BOOST_TEST(gm::softmax_merge(tree, e).sum == tree.sum);
}

BOOST_AUTO_TEST_CASE(cross_entropy_and_kl_match_the_cpu_backend) {
  const int64_t N = 4, V = 1000;
  const Vec logits = randn(size_t(N * V), 10, 4.0f), teacher = randn(size_t(N * V), 11, 4.0f);
  const std::vector<int32_t> targets = {3, -1, 999, 0};
  const float scale = 0.25f, T = 2.0f;
  Vec d(size_t(N * V), 0.125f), dk(size_t(N * V), -0.5f);
  Vec cpu_d = d, cpu_dk = dk;
  double loss = 0, kl = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = targets[size_t(i)];
    if (t < 0) continue;
    const float* x = logits.data() + i * V;
    const float* y = teacher.data() + i * V;
    const float lse = gm::softmax_lse(block_state(x, V));
    loss += double(lse) - double(x[t]);
    for (int64_t j = 0; j < V; ++j) d[size_t(i * V + j)] += gm::ce_grad(x[j], lse, j == t, scale);
    const float ls = gm::softmax_lse(block_state(x, V, 1.0f / T)), lt = gm::softmax_lse(block_state(y, V, 1.0f / T));
    for (int64_t j = 0; j < V; ++j) {
      kl += gm::kl_term(x[j], y[j], ls, lt, T);
      dk[size_t(i * V + j)] += gm::kl_grad(x[j], y[j], ls, lt, T, scale);
    }
  }
  Cpu cpu;
  double cpu_loss = 0, cpu_kl = 0;
  cpu.b->cross_entropy(&cpu_loss, cpu_d.data(), logits.data(), targets.data(), N, V, scale);
  cpu.b->kl_divergence(&cpu_kl, cpu_dk.data(), logits.data(), teacher.data(), targets.data(), N, V, T, scale);
  BOOST_TEST(std::abs(loss - cpu_loss) <= kF32 * std::abs(cpu_loss));
  BOOST_TEST(std::abs(kl - cpu_kl) <= kF32 * std::abs(cpu_kl) + 1e-6);
  BOOST_TEST(rel_err(d, cpu_d) <= kF32);
  BOOST_TEST(rel_err(dk, cpu_dk) <= kF32);
}

// The vocabulary-parallel kernels (gpu/cuda/vocab_parallel_kernels.cu)
// replayed for two ranks of a vocabulary of 1,000 split into 2 × 504
// columns (the last 8 padding): the ranks' statistics reduced between the
// ops as nn/vocab_parallel_loss.cpp does, each rank's results against the
// CPU backend's shard ops, and the whole against the unsplit cross-entropy
// and KL.
BOOST_AUTO_TEST_CASE(vocab_parallel_losses_match_the_cpu_backend) {
  const int64_t N = 4, vocab = 1000, R = 2, V = 504;
  const size_t n = size_t(N);
  const Vec logits = randn(size_t(N * vocab), 12, 4.0f), teacher = randn(size_t(N * vocab), 13, 4.0f);
  const std::vector<int32_t> targets = {3, -1, 999, 504};  // rank 0's, skipped, rank 1's, rank 1's first
  const float scale = 0.25f, T = 2.0f, inv_t = 1.0f / T;
  auto columns = [&](const Vec& full, int64_t r) {  // rank r's [N, V], padding zero
    Vec out(size_t(N * V), 0.0f);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < V && r * V + j < vocab; ++j) out[size_t(i * V + j)] = full[size_t(i * vocab + r * V + j)];
    return out;
  };
  auto valid_of = [&](int64_t r) { return std::min(V, vocab - r * V); };
  Cpu cpu;
  double ce = 0, cpu_ce = 0, kl_sum = 0, cpu_kl_sum = 0;
  std::vector<Vec> xs, ts, mx_parts, tmx_parts;
  for (int64_t r = 0; r < R; ++r) {
    xs.push_back(columns(logits, r));
    ts.push_back(columns(teacher, r));
  }
  // Maxima per rank (a block's max: order does not matter), then over ranks.
  Vec mx(n, -INFINITY), smx(n, -INFINITY), tmx(n, -INFINITY);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < valid_of(r); ++j) {
        const float x = xs[size_t(r)][size_t(i * V + j)], t = ts[size_t(r)][size_t(i * V + j)];
        mx[size_t(i)] = std::max(mx[size_t(i)], x);
        smx[size_t(i)] = std::max(smx[size_t(i)], x * inv_t);
        tmx[size_t(i)] = std::max(tmx[size_t(i)], t * inv_t);
      }
  // Sums of exponentials and target logits per rank, all-reduced.
  std::vector<double> se(n), sse(n), tse(n), tx(n);
  for (int64_t r = 0; r < R; ++r) {
    Vec cse(n), ctx(n), cmx(n);
    cpu.b->shard_row_max(cmx.data(), xs[size_t(r)].data(), N, V, valid_of(r), 1.0f);
    cpu.b->shard_sumexp(cse.data(), ctx.data(), xs[size_t(r)].data(), targets.data(), mx.data(), N, V, valid_of(r),
                        r * V, 1.0f);
    for (int64_t i = 0; i < N; ++i) {
      double sum = 0, ssum = 0, tsum = 0;
      for (int64_t j = 0; j < valid_of(r); ++j) {
        const float x = xs[size_t(r)][size_t(i * V + j)], t = ts[size_t(r)][size_t(i * V + j)];
        sum += double(gm::shard_exp(x, 1.0f, mx[size_t(i)]));
        ssum += double(gm::shard_exp(x, inv_t, smx[size_t(i)]));
        tsum += double(gm::shard_exp(t, inv_t, tmx[size_t(i)]));
      }
      const int64_t c = gm::shard_column(targets[size_t(i)], r * V, valid_of(r));
      const float mine = c >= 0 ? xs[size_t(r)][size_t(i * V + c)] : 0.0f;
      BOOST_TEST(std::abs(sum - double(cse[size_t(i)])) <= kF32 * sum);
      BOOST_TEST(mine == ctx[size_t(i)]);
      se[size_t(i)] += sum, sse[size_t(i)] += ssum, tse[size_t(i)] += tsum, tx[size_t(i)] += mine;
    }
  }
  const Vec se_f(se.begin(), se.end()), sse_f(sse.begin(), sse.end()), tse_f(tse.begin(), tse.end()),
      tx_f(tx.begin(), tx.end());
  Vec d_whole(size_t(N * vocab), 0.125f), dk_whole(size_t(N * vocab), -0.5f);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t valid = valid_of(r), v0 = r * V;
    Vec d(size_t(N * V), 0.125f), dk(size_t(N * V), -0.5f), kl(n);
    Vec cpu_d = d, cpu_dk = dk, cpu_kl(n, 7.0f);
    for (int64_t i = 0; i < N; ++i) {
      const int32_t t = targets[size_t(i)];
      if (t < 0) continue;
      const double lz = gm::shard_lse(mx[size_t(i)], se_f[size_t(i)]);
      if (r == 0) ce += lz - double(tx_f[size_t(i)]);  // one rank's loss stands for the row
      const int64_t c = gm::shard_column(t, v0, valid);
      const float lzs = float(gm::shard_lse(smx[size_t(i)], sse_f[size_t(i)]));
      const float lzt = float(gm::shard_lse(tmx[size_t(i)], tse_f[size_t(i)]));
      double row = 0;
      for (int64_t j = 0; j < valid; ++j) {
        const float x = xs[size_t(r)][size_t(i * V + j)], y = ts[size_t(r)][size_t(i * V + j)];
        d[size_t(i * V + j)] += gm::ce_grad(x, float(lz), j == c, scale);
        row += double(gm::kl_term(x, y, lzs, lzt, T));
        dk[size_t(i * V + j)] += gm::kl_grad(x, y, lzs, lzt, T, scale);
      }
      kl[size_t(i)] = float(row);
    }
    double rank_ce = 0, rank_kl = 0, rank_kl_cpu = 0;
    cpu.b->shard_cross_entropy(&rank_ce, cpu_d.data(), xs[size_t(r)].data(), targets.data(), mx.data(), se_f.data(),
                               tx_f.data(), N, V, valid, v0, scale);
    cpu.b->shard_kl(cpu_kl.data(), cpu_dk.data(), xs[size_t(r)].data(), ts[size_t(r)].data(), targets.data(),
                    smx.data(), sse_f.data(), tmx.data(), tse_f.data(), N, V, valid, T, scale);
    if (r == 0) cpu_ce = rank_ce;
    BOOST_TEST(rel_err(d, cpu_d) <= kF32);  // padding columns untouched on both sides
    BOOST_TEST(rel_err(dk, cpu_dk) <= kF32);
    BOOST_TEST(rel_err(kl, cpu_kl) <= kF32);
    for (int64_t i = 0; i < N; ++i)
      if (targets[size_t(i)] >= 0) rank_kl += double(kl[size_t(i)]);
    cpu.b->masked_row_sum(&rank_kl_cpu, cpu_kl.data(), targets.data(), N);
    BOOST_TEST(std::abs(rank_kl - rank_kl_cpu) <= kF32 * std::abs(rank_kl_cpu) + 1e-6);
    kl_sum += rank_kl, cpu_kl_sum += rank_kl_cpu;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < valid; ++j) {
        d_whole[size_t(i * vocab + v0 + j)] = d[size_t(i * V + j)];
        dk_whole[size_t(i * vocab + v0 + j)] = dk[size_t(i * V + j)];
      }
  }
  BOOST_TEST(std::abs(ce - cpu_ce) <= kF32 * std::abs(cpu_ce));
  // The split losses are the unsplit ones.
  double whole_ce = 0, whole_kl = 0;
  Vec whole_d(size_t(N * vocab), 0.125f), whole_dk(size_t(N * vocab), -0.5f);
  cpu.b->cross_entropy(&whole_ce, whole_d.data(), logits.data(), targets.data(), N, vocab, scale);
  cpu.b->kl_divergence(&whole_kl, whole_dk.data(), logits.data(), teacher.data(), targets.data(), N, vocab, T, scale);
  BOOST_TEST(std::abs(ce - whole_ce) <= kF32 * std::abs(whole_ce));
  BOOST_TEST(std::abs(kl_sum - whole_kl) <= kF32 * std::abs(whole_kl) + 1e-6);
  BOOST_TEST(rel_err(d_whole, whole_d) <= kF32);
  BOOST_TEST(rel_err(dk_whole, whole_dk) <= kF32);
}

BOOST_AUTO_TEST_CASE(adamw_norm_and_bf16_match_the_cpu_backend) {
  const size_t n = 5000;
  Vec p = randn(n, 12), m = randn(n, 13, 0.1f), v = randn(n, 14, 0.1f);
  for (float& x : v) x = std::abs(x);
  const Vec g = randn(n, 15);
  Vec cp = p, cm = m, cv = v;
  const gm::AdamWStep s = gm::adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.37f);
  for (size_t i = 0; i < n; ++i) gm::adamw_update(p[i], g[i], m[i], v[i], s);
  Cpu cpu;
  cpu.b->adamw(cp.data(), g.data(), cm.data(), cv.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.37f, nullptr);
  BOOST_TEST(rel_err(p, cp) <= kF32);
  BOOST_TEST(rel_err(m, cm) <= kF32);
  BOOST_TEST(rel_err(v, cv) <= kF32);
  double sq = 0, cpu_sq = 0;
  for (float x : g) sq += gm::sq(x);
  cpu.b->sq_norm(&cpu_sq, g.data(), n);
  BOOST_TEST(std::abs(sq - cpu_sq) <= 1e-12 * cpu_sq);
  // bf16: the kernels' conversion is nn/dtype.h's, bit for bit the CPU backend's
  std::vector<uint16_t> h(n), cpu_h(n);
  for (size_t i = 0; i < n; ++i) h[i] = float_to_bf16(g[i]);
  cpu.b->convert(cpu_h.data(), DType::BF16, g.data(), DType::F32, n);
  BOOST_TEST((h == cpu_h));
  // Packed two to a word, as the four-at-a-time kernels store them: the
  // bytes of two consecutive bf16 values in memory.
  for (size_t i = 0; i + 1 < n; i += 2) {
    const uint32_t w = gm::bf16x2(g[i], g[i + 1]);
    uint16_t pair[2];
    std::memcpy(pair, &w, 4);
    BOOST_TEST(pair[0] == cpu_h[i]);
    BOOST_TEST(pair[1] == cpu_h[i + 1]);
  }
}

// The embedding backward's kernel, thread by thread: each (token, column)
// adds its rows in row order from launch_plan.h's TokenRows, starting from
// the gradient's old value — the CPU backend's order, so bit for bit its
// result, with no atomics.
BOOST_AUTO_TEST_CASE(embedding_backward_by_token_is_the_cpu_backends_bit_for_bit) {
  const int64_t N = 300, C = 24, V = 40;
  std::vector<int32_t> tokens(static_cast<size_t>(N));
  std::mt19937 rng(3);
  for (int32_t& t : tokens) t = int32_t(rng() % 7) * 5;  // 7 distinct, repeated
  const Vec dout = randn(size_t(N * C), 21), start = randn(size_t(V * C), 22);
  Vec dtable = start, cpu_dtable = start;
  const TokenRows g = group_rows_by_token(tokens.data(), N);
  const int32_t *offsets = g.packed.data(), *distinct = offsets + g.distinct + 1, *rows = distinct + g.distinct;
  for (int64_t u = 0; u < g.distinct; ++u)
    for (int64_t c = 0; c < C; ++c) {
      float& d = dtable[size_t(int64_t(distinct[u]) * C + c)];
      float acc = d;
      for (int32_t k = offsets[u]; k < offsets[u + 1]; ++k) acc += dout[size_t(int64_t(rows[k]) * C + c)];
      d = acc;
    }
  Cpu cpu;
  cpu.b->embedding_backward(cpu_dtable.data(), dout.data(), tokens.data(), N, C);
  BOOST_TEST((dtable == cpu_dtable));
}

// Column sums (a norm's dw, a bias gradient), block by block: chunks of
// kColumnRows rows summed, then added to the gradient in chunk order —
// within fp32 rounding of the CPU backend's sum (another association).
BOOST_AUTO_TEST_CASE(column_sums_by_chunk_match_the_cpu_backend) {
  const int64_t N = 700, C = 33;  // 3 chunks, the last partial
  const Vec x = randn(size_t(N * C), 23), start = randn(size_t(C), 24);
  Vec out = start, cpu_out = start;
  const int64_t chunks = column_chunks(N);
  BOOST_TEST(chunks == 3);
  Vec partial(size_t(chunks * C));
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t c = 0; c < C; ++c) {
      float s = 0;
      for (int64_t i = k * kColumnRows; i < std::min(N, (k + 1) * kColumnRows); ++i) s += x[size_t(i * C + c)];
      partial[size_t(k * C + c)] = s;
    }
  for (int64_t c = 0; c < C; ++c) {
    float s = out[size_t(c)];
    for (int64_t k = 0; k < chunks; ++k) s += partial[size_t(k * C + c)];
    out[size_t(c)] = s;
  }
  Cpu cpu;  // dbias of a linear layer with no input gradient nor weight gradient: the column sum alone
  const Vec w(size_t(C * C), 0.0f);
  cpu.b->linear_backward(Grad(nullptr), Grad(nullptr), cpu_out.data(), x.data(), Operand{nullptr, nullptr}, Operand{w.data(), nullptr},
                         N, C, C);
  BOOST_TEST(rel_err(out, cpu_out) <= kF32);
}

// The fast attention kernels' algorithm, lane by lane: tiles of 8 query
// rows from plan_attention_tiles, keys in tiles of 32, online softmax with
// the running max rescaling; backward with dS from attention_dscore, dq per
// query row and dk, dv per key row (no atomics).
BOOST_AUTO_TEST_CASE(tiled_online_softmax_attention_matches_the_cpu_backend) {
  const int64_t H = 4, KV = 2, D = 16, g = H / KV;
  const std::vector<int32_t> cu = {0, 37, 37, 101, 106};  // 37, 0, 64, 5 tokens
  const int64_t n_seq = 4, N = 106;
  const Vec q = randn(size_t(N * H * D), 16), k = randn(size_t(N * KV * D), 17), v = randn(size_t(N * KV * D), 18);
  const Vec dout = randn(size_t(N * H * D), 19);
  Cpu cpu;
  for (bool causal : {true, false}) {
    Vec out(q.size()), lse(size_t(N * H)), dq(q.size(), 0.5f), dk(k.size(), 0.25f), dv(v.size(), -0.25f);
    Vec cpu_out = out, cpu_lse = lse, cpu_dq = dq, cpu_dk = dk, cpu_dv = dv;
    const float sc = 1.0f / std::sqrt(float(D));
    const auto tiles = plan_attention_tiles(cu.data(), n_seq, 8);
    for (const AttentionTile& t : tiles)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t row = t.row0; row < t.row0 + t.rows; ++row) {
          const int64_t kh = h / g, key_end = causal ? t.row0 + t.rows : t.seq_end;
          float m = -INFINITY, l = 0;
          std::vector<float> acc(size_t(D), 0.0f);
          for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += 32) {
            std::vector<float> s(32, -INFINITY);
            float tile_max = -INFINITY;
            for (int64_t j = 0; j < 32 && key0 + j < key_end; ++j) {
              if (!gm::attention_visible(row, key0 + j, causal)) continue;
              float dot = 0;
              for (int64_t d = 0; d < D; ++d) dot += q[size_t((row * H + h) * D + d)] * k[size_t(((key0 + j) * KV + kh) * D + d)];
              s[size_t(j)] = dot * sc;
              tile_max = std::max(tile_max, s[size_t(j)]);
            }
            const float m_new = std::max(m, tile_max);
            if (m_new == -INFINITY) continue;
            const float corr = std::exp(m - m_new);
            float psum = 0;
            for (float& x : s) psum += (x = x == -INFINITY ? 0.0f : std::exp(x - m_new));
            l = l * corr + psum;
            for (int64_t d = 0; d < D; ++d) {
              acc[size_t(d)] *= corr;
              for (int64_t j = 0; j < 32 && key0 + j < key_end; ++j)
                acc[size_t(d)] += s[size_t(j)] * v[size_t(((key0 + j) * KV + kh) * D + d)];
            }
            m = m_new;
          }
          for (int64_t d = 0; d < D; ++d) out[size_t((row * H + h) * D + d)] = acc[size_t(d)] / l;
          lse[size_t(row * H + h)] = m + std::log(l);
        }
    // backward, the fast kernels' way, no atomics: delta per row; dq per
    // query row over the visible keys; dk, dv per key row over the query
    // heads of its group, then the visible query rows in tiles of 32, each
    // summed in that order and added once
    Vec delta(size_t(N * H), 0.0f);
    for (int64_t row = 0; row < N; ++row)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d)
          delta[size_t(row * H + h)] += dout[size_t((row * H + h) * D + d)] * out[size_t((row * H + h) * D + d)];
    auto p_ds = [&](int64_t row, int64_t h, int64_t key) {  // p and dS of one score
      const int64_t kh = h / g;
      float s = 0, dp = 0;
      for (int64_t d = 0; d < D; ++d) {
        s += q[size_t((row * H + h) * D + d)] * k[size_t((key * KV + kh) * D + d)];
        dp += dout[size_t((row * H + h) * D + d)] * v[size_t((key * KV + kh) * D + d)];
      }
      const float p = std::exp(s * sc - lse[size_t(row * H + h)]);
      return std::pair<float, float>{p, gm::attention_dscore(p, dp, delta[size_t(row * H + h)])};
    };
    for (const AttentionTile& t : tiles)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t row = t.row0; row < t.row0 + t.rows; ++row) {
          const int64_t kh = h / g, key_end = causal ? t.row0 + t.rows : t.seq_end;
          std::vector<float> acc(size_t(D), 0.0f);
          for (int64_t key = t.seq_begin; key < key_end; ++key) {
            if (!gm::attention_visible(row, key, causal)) continue;
            const float ds = p_ds(row, h, key).second;
            for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += ds * sc * k[size_t((key * KV + kh) * D + d)];
          }
          for (int64_t d = 0; d < D; ++d) dq[size_t((row * H + h) * D + d)] += acc[size_t(d)];
        }
    for (const AttentionTile& t : tiles)  // the same tiles, read as key rows
      for (int64_t kh = 0; kh < KV; ++kh)
        for (int64_t key = t.row0; key < t.row0 + t.rows; ++key) {
          std::vector<float> dk_acc(size_t(D), 0.0f), dv_acc(size_t(D), 0.0f);
          for (int64_t h = kh * g; h < (kh + 1) * g; ++h)
            for (int64_t row = causal ? t.row0 : t.seq_begin; row < t.seq_end; ++row) {
              if (!gm::attention_visible(row, key, causal)) continue;
              const auto [p, ds] = p_ds(row, h, key);
              for (int64_t d = 0; d < D; ++d) {
                dk_acc[size_t(d)] += ds * sc * q[size_t((row * H + h) * D + d)];
                dv_acc[size_t(d)] += p * dout[size_t((row * H + h) * D + d)];
              }
            }
          for (int64_t d = 0; d < D; ++d) {
            dk[size_t((key * KV + kh) * D + d)] += dk_acc[size_t(d)];
            dv[size_t((key * KV + kh) * D + d)] += dv_acc[size_t(d)];
          }
        }
    cpu.b->attention_forward(cpu_out.data(), cpu_lse.data(), q.data(), k.data(), v.data(), cu.data(), n_seq, N, H, KV,
                             D, causal);
    cpu.b->attention_backward(cpu_dq.data(), cpu_dk.data(), cpu_dv.data(), dout.data(), cpu_out.data(), cpu_lse.data(),
                              q.data(), k.data(), v.data(), cu.data(), n_seq, N, H, KV, D, causal);
    BOOST_TEST(rel_err(out, cpu_out) <= kF32, "causal " << causal);
    BOOST_TEST(rel_err(lse, cpu_lse) <= kF32, "causal " << causal);
    BOOST_TEST(rel_err(dq, cpu_dq) <= kF32, "causal " << causal);
    BOOST_TEST(rel_err(dk, cpu_dk) <= kF32, "causal " << causal);
    BOOST_TEST(rel_err(dv, cpu_dv) <= kF32, "causal " << causal);
  }
}

// The flash kernels (gpu/cuda/flash_attention.cu) replayed on the CPU in
// their own order: blocks of kFlashForwardRows query rows, 32 per warp
// (forward), or of kFlashRows query (or key) rows, 16 per warp (dq; dk,
// dv), tiles of kFlashCols keys or queries, a warp's causal skip of tiles it cannot see, the
// online softmax of gm::flash_rescale and gm::flash_prob with O rescaled
// before P·v is added, dS from lse and delta, dq in the query block and
// dk, dv in the key block (heads of the group, then query tiles). `round`
// is what a tile load and the P and dS stores do: identity must give the
// CPU backend's results at fp32 accuracy (the tiling is exact), and bf16
// rounding must stay within the self-check's bound for these kernels.
namespace {
struct FlashReplay {
  Vec out, lse, dq, dk, dv;
};
template <typename Round>
FlashReplay flash_replay(const Vec& q, const Vec& k, const Vec& v, const Vec& dout, const std::vector<int32_t>& cu,
                         int64_t N, int64_t H, int64_t KV, int64_t D, bool causal, Round round) {
  const int64_t n_seq = int64_t(cu.size()) - 1, g = H / KV;
  const float sc = 1.0f / std::sqrt(float(D));
  FlashReplay r{Vec(q.size()), Vec(size_t(N * H)), Vec(q.size()), Vec(k.size()), Vec(v.size())};
  auto at = [&](const Vec& x, int64_t row, int64_t heads, int64_t h, int64_t d) {
    return round(x[size_t((row * heads + h) * D + d)]);
  };
  auto dot = [&](const Vec& a, int64_t ra, int64_t ha, int64_t na, const Vec& b, int64_t rb, int64_t hb, int64_t nb) {
    float s = 0;
    for (int64_t d = 0; d < D; ++d) s += at(a, ra, na, ha, d) * at(b, rb, nb, hb, d);
    return s;
  };
  for (const AttentionTile& t : plan_attention_tiles(cu.data(), n_seq, kFlashForwardRows))
    for (int64_t h = 0; h < H; ++h)
      for (int64_t local = 0; local < kFlashForwardRows; ++local) {  // forward: a warp's 32 rows, padding included
        const int64_t row = t.row0 + local, kh = h / g, last_row = t.row0 + local / 32 * 32 + 31;
        const int64_t key_end = causal ? t.row0 + t.rows : t.seq_end;
        float m = -INFINITY, l = 0;
        Vec o(size_t(D), 0.0f);
        for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += kFlashCols) {
          if (causal && key0 > last_row) continue;
          const int64_t keys = std::min<int64_t>(key_end - key0, kFlashCols);
          Vec x(size_t(kFlashCols), -INFINITY);
          float mx = -INFINITY;
          for (int64_t j = 0; j < keys; ++j)
            if (local < t.rows && gm::attention_visible(row, key0 + j, causal))
              mx = std::max(mx, x[size_t(j)] = dot(q, row, h, H, k, key0 + j, kh, KV) * sc);
          const float m_new = std::max(m, mx), alpha = gm::flash_rescale(m, m_new);
          float sum = 0;
          for (float& xj : x) sum += (xj = gm::flash_prob(xj, m_new));
          l = l * alpha + sum;
          m = m_new;
          for (int64_t d = 0; d < D; ++d) {
            o[size_t(d)] *= alpha;
            for (int64_t j = 0; j < keys; ++j) o[size_t(d)] += round(x[size_t(j)]) * at(v, key0 + j, KV, kh, d);
          }
        }
        if (local >= t.rows) continue;
        for (int64_t d = 0; d < D; ++d) r.out[size_t((row * H + h) * D + d)] = o[size_t(d)] / l;
        r.lse[size_t(row * H + h)] = m + std::log(l);
      }
  Vec delta(size_t(N * H), 0.0f);
  for (int64_t row = 0; row < N; ++row)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d)
        delta[size_t(row * H + h)] += dout[size_t((row * H + h) * D + d)] * r.out[size_t((row * H + h) * D + d)];
  auto p_ds = [&](int64_t row, int64_t h, int64_t key) {
    const int64_t kh = h / g;
    const float p = std::exp(dot(q, row, h, H, k, key, kh, KV) * sc - r.lse[size_t(row * H + h)]);
    return std::pair<float, float>{p, gm::attention_dscore(p, dot(dout, row, h, H, v, key, kh, KV),
                                                           delta[size_t(row * H + h)])};
  };
  const auto tiles = plan_attention_tiles(cu.data(), n_seq, kFlashRows);
  for (const AttentionTile& t : tiles)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t local = 0; local < t.rows; ++local) {  // dq: the query block
        const int64_t row = t.row0 + local, kh = h / g, last_row = t.row0 + local / 16 * 16 + 15;
        const int64_t key_end = causal ? t.row0 + t.rows : t.seq_end;
        Vec acc(size_t(D), 0.0f);
        for (int64_t key0 = t.seq_begin; key0 < key_end; key0 += kFlashCols) {
          if (causal && key0 > last_row) continue;
          for (int64_t key = key0; key < std::min<int64_t>(key_end, key0 + kFlashCols); ++key) {
            if (!gm::attention_visible(row, key, causal)) continue;
            const float ds = round(p_ds(row, h, key).second);
            for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += ds * at(k, key, KV, kh, d);
          }
        }
        for (int64_t d = 0; d < D; ++d) r.dq[size_t((row * H + h) * D + d)] = sc * acc[size_t(d)];
      }
  for (const AttentionTile& t : tiles)
    for (int64_t kh = 0; kh < KV; ++kh)
      for (int64_t local = 0; local < t.rows; ++local) {  // dk, dv: the key block
        const int64_t key = t.row0 + local, first_key = t.row0 + local / 16 * 16;
        Vec dk_acc(size_t(D), 0.0f), dv_acc(size_t(D), 0.0f);
        for (int64_t h = kh * g; h < (kh + 1) * g; ++h)
          for (int64_t q0 = causal ? t.row0 : t.seq_begin; q0 < t.seq_end; q0 += kFlashCols) {
            const int64_t queries = std::min<int64_t>(t.seq_end - q0, kFlashCols);
            if (causal && q0 + queries - 1 < first_key) continue;
            for (int64_t row = q0; row < q0 + queries; ++row) {
              if (!gm::attention_visible(row, key, causal)) continue;
              const auto [p, ds] = p_ds(row, h, key);
              for (int64_t d = 0; d < D; ++d) {
                dk_acc[size_t(d)] += round(ds) * at(q, row, H, h, d);
                dv_acc[size_t(d)] += round(p) * at(dout, row, H, h, d);
              }
            }
          }
        for (int64_t d = 0; d < D; ++d) {
          r.dk[size_t((key * KV + kh) * D + d)] = sc * dk_acc[size_t(d)];
          r.dv[size_t((key * KV + kh) * D + d)] = dv_acc[size_t(d)];
        }
      }
  return r;
}
}  // namespace

// Heads of 24 (padded to 64) and 128 (the 1.3B section's).
BOOST_AUTO_TEST_CASE(flash_attention_tiles_match_the_cpu_backend) {
  const int64_t H = 4, KV = 2;
  const std::vector<int32_t> cu = {0, 70, 70, 200, 205};  // 70, 0, 130, 5 tokens: partial tiles of 64 and 32
  const int64_t n_seq = 4, N = 205;
  Cpu cpu;
  const auto exact = [](float x) { return x; };
  const auto bf16 = [](float x) { return bf16_to_float(float_to_bf16(x)); };
  for (const int64_t D : {24, 128}) {
    for (bool causal : {true, false}) {
      const Vec q = randn(size_t(N * H * D), 26), k = randn(size_t(N * KV * D), 27), v = randn(size_t(N * KV * D), 28);
      const Vec dout = randn(size_t(N * H * D), 29);
      Vec out(q.size()), lse(size_t(N * H)), dq(q.size()), dk(k.size()), dv(v.size());
      cpu.b->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), n_seq, N, H, KV, D,
                               causal);
      cpu.b->attention_backward(Grad::overwrite(dq.data()), Grad::overwrite(dk.data()), Grad::overwrite(dv.data()),
                                dout.data(), out.data(), lse.data(), q.data(), k.data(), v.data(), cu.data(), n_seq, N,
                                H, KV, D, causal);
      const FlashReplay e = flash_replay(q, k, v, dout, cu, N, H, KV, D, causal, exact);
      BOOST_TEST(rel_err(e.out, out) <= kF32, "D " << D << " causal " << causal);
      BOOST_TEST(rel_err(e.lse, lse) <= kF32, "D " << D << " causal " << causal);
      BOOST_TEST(rel_err(e.dq, dq) <= kF32, "D " << D << " causal " << causal);
      BOOST_TEST(rel_err(e.dk, dk) <= kF32, "D " << D << " causal " << causal);
      BOOST_TEST(rel_err(e.dv, dv) <= kF32, "D " << D << " causal " << causal);
      const FlashReplay b = flash_replay(q, k, v, dout, cu, N, H, KV, D, causal, bf16);
      for (const auto& [name, x, ref] : {std::tuple{"out", &b.out, &out}, std::tuple{"dq", &b.dq, &dq},
                                         std::tuple{"dk", &b.dk, &dk}, std::tuple{"dv", &b.dv, &dv}}) {
        const double e16 = rel_err(*x, *ref);
        BOOST_TEST_MESSAGE("flash replay, bf16 operands: " << name << " D " << D << " causal " << causal << ": " << e16);
        BOOST_TEST((e16 > kF32 && e16 <= 5e-2), name << " D " << D << " causal " << causal << ": " << e16);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
