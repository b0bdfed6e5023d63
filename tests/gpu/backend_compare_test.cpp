// compare_backends (gpu/backend_compare.h), the harness of the CUDA
// self-check and of bench/gpu's op check, run here with CPU backends: two
// CPU backends agree on every op of every family; a backend with one op off
// by 1e-3 is caught and named, the others still pass; so is a norm, an
// embedding or an attention backward whose bits vary from call to call,
// and an op that reads a gradient it is to overwrite; a hand-off read from
// another backend's memory comes back exact (check_handoff_copies), and a
// strided copy that drops a row is named.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "cpu/cpu_backend.h"
#include "gpu/backend_compare.h"
#include "support/checked_backend.h"

using namespace maestro;

namespace {

// The CPU backend with one op nudged: gelu_forward's output by 1e-3 (a
// broken kernel), every second sq_norm in its last bits (a sum whose
// order varies from call to call, as with atomics), every second
// embedding and attention backward in one gradient's last bit (the same),
// or a linear op or the attention given
// its operands' bf16 copies (a backend that wants them) computing from the
// copies — not what it computes when it gets none — or a gradient it is
// to overwrite (nn/backend.h's Grad) added to instead, old contents read,
// or an RMSNorm that leaves the bf16 copy of its output unwritten (Out).
enum class Nudge { Gelu, NormBits, SumBits, Bf16Copy, OverwriteAdds, AdamwSkipsCopy, SliceDropsARow, NormSkipsCopy };
class Nudged final : public Backend {
 public:
  explicit Nudged(Nudge nudge) : Backend(Device::Host), b_(make_cpu_backend(1)), nudge_(nudge) {}
  const char* name() const override { return "nudged"; }
  void* allocate(size_t n, DType d) override { return b_->allocate(n, d); }
  double* allocate_scalars(size_t n) override { return b_->allocate_scalars(n); }
  void release(void* p) override { b_->release(p); }
  void copy_from_host(void* d, const void* s, size_t n) override { b_->copy_from_host(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { b_->copy_to_host(d, s, n); }
  void copy_rows_from_host_held(void* d, size_t dp, const void* s, size_t sp, size_t w, size_t rows) override {
    Backend::copy_rows_from_host_held(d, dp, s, sp, w, nudge_ == Nudge::SliceDropsARow && rows > 0 ? rows - 1 : rows);
  }
  void convert(void* d, DType dd, const void* s, DType sd, size_t n) override { b_->convert(d, dd, s, sd, n); }
  void zero(float* p, size_t n) override { b_->zero(p, n); }
  void zero_scalars(double* p, size_t n) override { b_->zero_scalars(p, n); }
  void copy(float* d, const float* s, size_t n) override { b_->copy(d, s, n); }
  void add(float* o, const float* a, const float* b, size_t n) override { b_->add(o, a, b, n); }
  void accumulate(float* d, const float* s, size_t n) override { b_->accumulate(d, s, n); }
  void scale(float* p, float s, size_t n) override { b_->scale(p, s, n); }
  void sq_norm(double* o, const float* p, size_t n) override {
    b_->sq_norm(o, p, n);
    if (nudge_ == Nudge::NormBits && ++norms_ % 2 == 0) *o *= 1 + 1e-15;
  }
  void embedding_forward(float* o, const int32_t* t, const float* tb, int64_t N, int64_t C) override {
    b_->embedding_forward(o, t, tb, N, C);
  }
  void embedding_backward(float* d, const float* o, const int32_t* t, int64_t N, int64_t C) override {
    b_->embedding_backward(d, o, t, N, C);
    wobble(d);
  }
  bool wants_bf16_operands() const override { return nudge_ == Nudge::Bf16Copy; }
  void linear_forward(Out o, Operand i, Operand w, const float* b, int64_t N, int64_t C, int64_t OC) override {
    b_->linear_forward(o, widened(i, N * C, 0), widened(w, OC * C, 1), b, N, C, OC);
  }
  void linear_backward(Grad di, Grad dw, float* db, Operand d, Operand i, Operand w, int64_t N, int64_t C,
                       int64_t OC) override {
    b_->linear_backward(adds(di), adds(dw), db, widened(d, N * OC, 2), widened(i, N * C, 0), widened(w, OC * C, 1), N,
                        C, OC);
  }
  void rmsnorm_forward(Out o, float* r, const float* i, const float* w, int64_t N, int64_t C, float e) override {
    b_->rmsnorm_forward(nudge_ == Nudge::NormSkipsCopy ? Out(o.f32) : o, r, i, w, N, C, e);
  }
  void rmsnorm_backward(float* di, float* dw, const float* d, const float* i, const float* w, const float* r,
                        int64_t N, int64_t C) override {
    b_->rmsnorm_backward(di, dw, d, i, w, r, N, C);
  }
  void layernorm_forward(Out o, float* m, float* r, const float* i, const float* w, const float* b, int64_t N,
                         int64_t C, float e) override {
    b_->layernorm_forward(o, m, r, i, w, b, N, C, e);
  }
  void layernorm_backward(float* di, float* dw, float* db, const float* d, const float* i, const float* w,
                          const float* m, const float* r, int64_t N, int64_t C) override {
    b_->layernorm_backward(di, dw, db, d, i, w, m, r, N, C);
  }
  void rope_forward(Out o, Operand x, const int32_t* p, int64_t N, int64_t H, int64_t D, float t) override {
    b_->rope_forward(o, x, p, N, H, D, t);
  }
  void rope_backward(Out o, const float* x, const int32_t* p, int64_t N, int64_t H, int64_t D, float t) override {
    b_->rope_backward(o, x, p, N, H, D, t);
  }
  void attention_forward(float* o, float* l, Operand q, Operand k, Operand v, const int32_t* cu, int64_t ns, int64_t N,
                         int64_t H, int64_t KV, int64_t D, bool c) override {
    b_->attention_forward(o, l, widened(q, N * H * D, 0), widened(k, N * KV * D, 1), widened(v, N * KV * D, 2), cu, ns,
                          N, H, KV, D, c);
  }
  void attention_backward(Grad dq, Grad dk, Grad dv, const float* d, const float* o, const float* l, Operand q,
                          Operand k, Operand v, const int32_t* cu, int64_t ns, int64_t N, int64_t H, int64_t KV,
                          int64_t D, bool c) override {
    b_->attention_backward(adds(dq), adds(dk), adds(dv), d, o, l, widened(q, N * H * D, 0), widened(k, N * KV * D, 1),
                           widened(v, N * KV * D, 2), cu, ns, N, H, KV, D, c);
    wobble(dk.p);
  }
  void swiglu_forward(Out o, Operand g, Operand u, size_t n) override { b_->swiglu_forward(o, g, u, n); }
  void swiglu_backward(GradOut dg, GradOut du, const float* d, Operand g, Operand u, size_t n) override {
    b_->swiglu_backward(adds(dg), adds(du), d, g, u, n);
  }
  void gelu_forward(Out o, const float* i, size_t n) override {
    b_->gelu_forward(o, i, n);
    if (nudge_ == Nudge::Gelu && o.f32)
      for (size_t k = 0; k < n; ++k) o.f32[k] += 1e-3f;
  }
  void gelu_backward(GradOut di, const float* d, const float* i, size_t n) override {
    b_->gelu_backward(adds(di), d, i, n);
  }
  void relu_forward(float* o, const float* i, size_t n) override { b_->relu_forward(o, i, n); }
  void relu_backward(Grad di, const float* d, const float* i, size_t n) override { b_->relu_backward(adds(di), d, i, n); }
  void im2col_patches(float* p, const float* x, int64_t I, int64_t Ch, int64_t S, int64_t ps) override {
    b_->im2col_patches(p, x, I, Ch, S, ps);
  }
  void cross_entropy(double* l, float* d, const float* x, const int32_t* t, int64_t N, int64_t V, float s) override {
    b_->cross_entropy(l, d, x, t, N, V, s);
  }
  void kl_divergence(double* l, float* d, const float* s, const float* t, const int32_t* tg, int64_t N, int64_t V,
                     float T, float sc) override {
    b_->kl_divergence(l, d, s, t, tg, N, V, T, sc);
  }
  void shard_row_max(float* mx, const float* x, int64_t N, int64_t V, int64_t va, float it) override {
    b_->shard_row_max(mx, x, N, V, va, it);
  }
  void max_of_parts(float* mx, const float* p, int64_t R, int64_t N) override { b_->max_of_parts(mx, p, R, N); }
  void shard_sumexp(float* se, float* tx, const float* x, const int32_t* t, const float* mx, int64_t N, int64_t V,
                    int64_t va, int64_t v0, float it) override {
    b_->shard_sumexp(se, tx, x, t, mx, N, V, va, v0, it);
  }
  void shard_cross_entropy(double* l, float* d, const float* x, const int32_t* t, const float* mx, const float* se,
                           const float* tx, int64_t N, int64_t V, int64_t va, int64_t v0, float sc) override {
    b_->shard_cross_entropy(l, d, x, t, mx, se, tx, N, V, va, v0, sc);
  }
  void shard_kl(float* kl, float* d, const float* s, const float* t, const int32_t* tg, const float* ms,
                const float* ss, const float* mt, const float* st, int64_t N, int64_t V, int64_t va, float T,
                float sc) override {
    b_->shard_kl(kl, d, s, t, tg, ms, ss, mt, st, N, V, va, T, sc);
  }
  void masked_row_sum(double* o, const float* r, const int32_t* t, int64_t N) override { b_->masked_row_sum(o, r, t, N); }
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2, float e, float wd,
             int64_t t, float gs, void* p16) override {
    b_->adamw(p, g, m, v, n, lr, b1, b2, e, wd, t, gs, nudge_ == Nudge::AdamwSkipsCopy ? nullptr : p16);
  }
  void set_threads(int) override {}
  int threads() const override { return 1; }

 private:
  Grad adds(Grad g) const { return nudge_ == Nudge::OverwriteAdds ? Grad(g.p) : g; }
  GradOut adds(GradOut g) const { return nudge_ == Nudge::OverwriteAdds && g.p ? GradOut(g.p) : g; }
  // An operand's copy back in fp32 (into wide_[slot]) when there is one, else its fp32 values.
  const float* widened(Operand x, int64_t n, int slot) {
    if (!x.bf16) return x.f32;
    wide_[slot].resize(size_t(n));
    b_->convert(wide_[slot].data(), DType::F32, x.bf16, DType::BF16, size_t(n));
    return wide_[slot].data();
  }
  std::unique_ptr<Backend> b_;
  std::vector<float> wide_[3];
  Nudge nudge_;
  int norms_ = 0, sums_ = 0;
  void wobble(float* p) {
    if (nudge_ == Nudge::SumBits && p && ++sums_ % 2 == 0) p[0] = std::nextafter(p[0], INFINITY);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(backend_compare)

BOOST_AUTO_TEST_CASE(two_cpu_backends_agree_on_every_op) {
  auto a = make_cpu_backend(1), b = make_cpu_backend(2);
  const std::vector<OpCheck> r = compare_backends(*a, *b, {});
  BOOST_TEST(r.size() >= 40u);
  for (const OpCheck& c : r) BOOST_TEST(c.ok(), c.op << " rel err " << c.rel_err);
  for (const char* op : {"attention_backward(causal).dk", "attention_forward(bidirectional)", "linear_backward.dw",
                         "cross_entropy.loss", "kl_divergence.dstudent", "adamw.v", "adamw(bf16 copy).p16",
                         "im2col_patches",
                         "embedding_backward", "rope_backward", "layernorm_backward.db", "sq_norm",
                         "shard_cross_entropy.dlogits", "shard_kl.dstudent", "masked_row_sum", "max_of_parts"})
    BOOST_TEST(std::any_of(r.begin(), r.end(), [&](const OpCheck& c) { return c.op == op; }), op);
}

BOOST_AUTO_TEST_CASE(a_broken_op_is_named) {
  Nudged nudged(Nudge::Gelu);
  auto cpu = make_cpu_backend(1);
  const std::vector<OpCheck> r = compare_backends(nudged, *cpu, {});
  // its bf16 copy (written from the unnudged values) is named too
  for (const OpCheck& c : r)
    BOOST_TEST(c.ok() == (c.op != "gelu_forward" && c.op != "gelu_forward (bf16 out)"), c.op << " rel err " << c.rel_err);
}

BOOST_AUTO_TEST_CASE(a_bf16_copy_left_unwritten_is_named) {
  Nudged skips(Nudge::NormSkipsCopy);
  auto cpu = make_cpu_backend(1);
  const std::vector<OpCheck> r = compare_backends(skips, *cpu, {});
  for (const OpCheck& c : r)
    BOOST_TEST(c.ok() == (c.op != "rmsnorm_forward (bf16 out)"), c.op << " rel err " << c.rel_err);
  // swiglu, gelu, rmsnorm, layernorm, rope forward; swiglu dgate, dup, gelu, rope backward;
  // linear forward with and without a bias
  int outs = 0;
  for (const OpCheck& c : r) outs += c.op.ends_with("(bf16 out)");
  BOOST_TEST(outs == 11);
}

BOOST_AUTO_TEST_CASE(a_norm_that_varies_from_call_to_call_is_named) {
  Nudged wobbly(Nudge::NormBits);
  auto cpu = make_cpu_backend(1);
  const std::vector<OpCheck> r = compare_backends(wobbly, *cpu, {});
  for (const OpCheck& c : r) BOOST_TEST(c.ok() == (c.op != "sq_norm (repeatable)"), c.op << " rel err " << c.rel_err);
  BOOST_TEST(std::any_of(r.begin(), r.end(), [](const OpCheck& c) { return c.op == "sq_norm (repeatable)"; }));
}

// A kernel whose sums vary from run to run (atomics, a race): each such op
// is named by its "(repeatable)" check, and only those; the norms backward,
// not nudged, passes its own.
BOOST_AUTO_TEST_CASE(sums_that_vary_from_run_to_run_are_named) {
  Nudged wobbly(Nudge::SumBits);
  auto cpu = make_cpu_backend(1);
  const std::vector<OpCheck> r = compare_backends(wobbly, *cpu, {});
  const std::set<std::string> varying = {"embedding_backward (repeatable)",
                                         "attention_backward(causal) (repeatable)",
                                         "attention_backward(bidirectional) (repeatable)",
                                         "attention_backward(causal, long) (repeatable)",
                                         "attention_backward(bidirectional, long) (repeatable)"};
  for (const OpCheck& c : r) BOOST_TEST(c.ok() == !varying.count(c.op), c.op << " rel err " << c.rel_err);
  for (const std::string& op : varying)
    BOOST_TEST(std::any_of(r.begin(), r.end(), [&](const OpCheck& c) { return c.op == op; }), op);
  BOOST_TEST(std::any_of(r.begin(), r.end(), [](const OpCheck& c) { return c.op == "rmsnorm_backward (repeatable)"; }));
}

BOOST_AUTO_TEST_CASE(a_backend_reading_bf16_copies_must_match_its_own_rounding) {
  auto cpu = make_cpu_backend(1);
  const auto named = [](const std::vector<OpCheck>& r, const std::string& op) {
    return std::any_of(r.begin(), r.end(), [&](const OpCheck& c) { return c.op == op; });
  };
  BOOST_TEST(!named(compare_backends(*cpu, *cpu, {}), "linear_forward (bf16 copies)"));  // wants none
  test_support::CheckedBackend checked(1);  // wants them, computes in fp32 either way
  std::vector<OpCheck> r = compare_backends(checked, *cpu, {});
  for (const OpCheck& c : r) BOOST_TEST(c.ok(), c.op << " rel err " << c.rel_err);
  BOOST_TEST(named(r, "linear_forward (bf16 copies)"));
  BOOST_TEST(named(r, "linear_backward.dinp (bf16 copies)"));
  BOOST_TEST(named(r, "linear_backward.dw (bf16 copies)"));
  // linear: the input and the weight, forward and backward, and dout; attention: q, k, v forward and
  // backward, in 4 shapes
  BOOST_TEST(checked.bf16_copy_uses() == 5 + 6 * 4);
  Nudged from_copy(Nudge::Bf16Copy);
  r = compare_backends(from_copy, *cpu, {});
  for (const OpCheck& c : r)
    BOOST_TEST(c.ok() == !c.op.ends_with("(bf16 copies)"), c.op << " rel err " << c.rel_err);
}

BOOST_AUTO_TEST_CASE(a_gradient_added_to_where_it_is_to_be_overwritten_is_named) {
  Nudged adds(Nudge::OverwriteAdds);
  auto cpu = make_cpu_backend(1);
  const std::vector<OpCheck> r = compare_backends(adds, *cpu, {});
  int overwritten = 0;
  for (const OpCheck& c : r) {
    // the activations' gradients with a bf16 copy too: the copy is not the sum
    const bool bf16_grad = c.op.ends_with("(bf16 out)") &&
                           (c.op.starts_with("swiglu_backward") || c.op.starts_with("gelu_backward"));
    BOOST_TEST(c.ok() == !(c.op.ends_with("(overwrite)") || bf16_grad), c.op << " rel err " << c.rel_err);
    overwritten += c.op.ends_with("(overwrite)");
  }
  // linear dinp, dw and dw with no rows, swiglu dgate and dup, gelu, relu; attention dq, dk, dv, causal and
  // not, short and long
  BOOST_TEST(overwritten == 19);
}

BOOST_AUTO_TEST_CASE(an_adamw_that_leaves_the_bf16_copy_unwritten_is_named) {
  Nudged skips(Nudge::AdamwSkipsCopy);
  auto cpu = make_cpu_backend(1);
  const std::vector<OpCheck> r = compare_backends(skips, *cpu, {});
  BOOST_TEST(std::any_of(r.begin(), r.end(), [](const OpCheck& c) { return c.op == "adamw(bf16 copy).p16"; }));
  for (const OpCheck& c : r) BOOST_TEST(c.ok() == (c.op != "adamw(bf16 copy).p16"), c.op << " rel err " << c.rel_err);
}

// A hand-off in another backend's memory (check_handoff_copies), as the
// CUDA self-check reads one: the consumer waits for the producer's marker
// and gets its bytes back exactly; a strided copy that drops a row is named.
BOOST_AUTO_TEST_CASE(a_handoff_read_from_another_backend_gives_its_bytes_back) {
  test_support::CheckedBackend producer(1), consumer(1);  // each other's memory is not their own
  const std::vector<OpCheck> r = check_handoff_copies(producer, consumer);
  BOOST_TEST_REQUIRE(r.size() == 2u);
  for (const OpCheck& c : r) BOOST_TEST((c.ok() && c.rel_err == 0.0), c.op << " rel err " << c.rel_err);
  BOOST_TEST(consumer.waits() == 1);
  auto cpu = make_cpu_backend(1);
  Nudged drops(Nudge::SliceDropsARow);
  const std::vector<OpCheck> broken = check_handoff_copies(*cpu, drops);
  BOOST_TEST(broken.at(0).ok());
  BOOST_TEST(!broken.at(1).ok(), broken.at(1).op);
}

BOOST_AUTO_TEST_CASE(families_can_be_chosen) {
  auto a = make_cpu_backend(1), b = make_cpu_backend(1);
  CompareOptions o;
  o.ops = {"attention"};
  const std::vector<OpCheck> r = compare_backends(*a, *b, o);
  // fwd out, lse; bwd dq, dk, dv added to and overwritten, repeatable; causal and not; short and long
  BOOST_TEST(r.size() == 36u);
  for (const OpCheck& c : r) BOOST_TEST(c.op.starts_with("attention_"));
  BOOST_TEST(std::any_of(r.begin(), r.end(), [](const OpCheck& c) { return c.op == "attention_forward(causal, long)"; }));
  o.ops = {"flash"};
  BOOST_CHECK_THROW(compare_backends(*a, *b, o), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
