// compare_backends (backend_compare.h).
#include "gpu/backend_compare.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>

namespace maestro {

namespace {

using Vec = std::vector<float>;

// One buffer on both backends, released with the pair.
struct Twin {
  Backend &t, &r;
  size_t n;
  float *on_t, *on_r;
  Twin(Backend& t_, Backend& r_, const Vec& host) : t(t_), r(r_), n(host.size()) {
    on_t = t.allocate(std::max<size_t>(n, 1));
    on_r = r.allocate(std::max<size_t>(n, 1));
    t.copy_from_host(on_t, host.data(), n * sizeof(float));
    r.copy_from_host(on_r, host.data(), n * sizeof(float));
  }
  Twin(const Twin&) = delete;
  ~Twin() {
    t.release(on_t);
    r.release(on_r);
  }
};

double rel_err(const Vec& a, const Vec& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return NAN;
    num = std::max(num, d);
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

class Comparison {
 public:
  Comparison(Backend& t, Backend& r, const CompareOptions& o) : t_(t), r_(r), o_(o), rng_(o.seed) {}

  Vec randn(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    Vec v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  enum class Kind { Plain, Gemm, Attention };
  void check(const std::string& op, const Twin& x, Kind kind = Kind::Plain) {
    Vec a(x.n), b(x.n);
    t_.copy_to_host(a.data(), x.on_t, x.n * sizeof(float));
    r_.copy_to_host(b.data(), x.on_r, x.n * sizeof(float));
    double tol = o_.tolerance;
    if (kind == Kind::Gemm) tol = o_.gemm_tolerance;
    if (kind == Kind::Attention && o_.attention_tolerance >= 0) tol = o_.attention_tolerance;
    results_.push_back({op, rel_err(a, b), tol});
  }
  void check_scalar(const std::string& op, double* on_t, double* on_r) {
    double a = 0, b = 0;
    t_.copy_to_host(&a, on_t, sizeof(double));
    r_.copy_to_host(&b, on_r, sizeof(double));
    results_.push_back({op, std::abs(a - b) / std::max(std::abs(b), 1e-30), o_.tolerance});
  }
  // The tested backend's outputs of run() twice from the same starting
  // values, bit for bit: a kernel that sums with no atomics and has no race
  // gives the same bits every run (docs/gpu.md, "Deterministic sums").
  // The outputs are left as they were.
  void repeatable(const std::string& op, const std::vector<const Twin*>& outputs, const std::function<void()>& run) {
    std::vector<Vec> start, first;
    for (const Twin* x : outputs) {
      start.emplace_back(x->n);
      t_.copy_to_host(start.back().data(), x->on_t, x->n * sizeof(float));
    }
    double worst = 0;
    for (int k = 0; k < 2; ++k) {
      for (size_t i = 0; i < outputs.size(); ++i)
        t_.copy_from_host(outputs[i]->on_t, start[i].data(), outputs[i]->n * sizeof(float));
      run();
      for (size_t i = 0; i < outputs.size(); ++i) {
        Vec got(outputs[i]->n);
        t_.copy_to_host(got.data(), outputs[i]->on_t, got.size() * sizeof(float));
        if (k == 0) first.push_back(std::move(got));
        else worst = std::max(worst, got == first[i] ? 0.0 : std::max(rel_err(got, first[i]), 1e-300));
      }
    }
    for (size_t i = 0; i < outputs.size(); ++i)  // as before: the checks after this one compare the two sides again
      t_.copy_from_host(outputs[i]->on_t, start[i].data(), outputs[i]->n * sizeof(float));
    results_.push_back({op + " (repeatable)", worst, 0.0});
  }
  // The bf16 copy of an output that run(f32, bf16) writes on the tested
  // backend in the same pass (nn/backend.h's Out and GradOut; bf16 NaN
  // before each run): beside the fp32 values, each element must be its fp32
  // value rounded; alone (f32 null: only where the backend says its copies
  // suffice), the same bits again — or, for a GEMM (ulps 1), at most one
  // bf16 step away: cuBLASLt may take another algorithm for a bf16 D, whose
  // fp32 sums differ in their last bits. x is left as it was.
  void bf16_output(const std::string& op, const Twin& x, const std::function<void(float*, void*)>& run,
                   int ulps = 0) {
    Vec start(x.n), f32(x.n);
    t_.copy_to_host(start.data(), x.on_t, x.n * sizeof(float));
    void* b16 = t_.allocate(std::max<size_t>(x.n, 1), DType::BF16);
    const std::vector<uint16_t> nan16(x.n, 0x7fc0);
    std::vector<uint16_t> beside(x.n), alone(x.n);
    t_.copy_from_host(b16, nan16.data(), x.n * 2);
    run(x.on_t, b16);
    t_.copy_to_host(beside.data(), b16, x.n * 2);
    t_.copy_to_host(f32.data(), x.on_t, x.n * sizeof(float));
    t_.copy_from_host(x.on_t, start.data(), x.n * sizeof(float));
    if (t_.bf16_operands_suffice()) {
      t_.copy_from_host(b16, nan16.data(), x.n * 2);
      run(nullptr, b16);
      t_.copy_to_host(alone.data(), b16, x.n * 2);
    } else {
      alone = beside;
    }
    t_.release(b16);
    size_t wrong = 0;
    for (size_t i = 0; i < x.n; ++i)
      wrong += beside[i] != float_to_bf16(f32[i]) || std::abs(int(alone[i]) - int(beside[i])) > ulps;
    results_.push_back({op + " (bf16 out)", double(wrong) / double(std::max<size_t>(x.n, 1)), 0.0});
  }
  // An op's inputs in bf16 alone (Operand: only where the backend's copies
  // suffice) must give, bit for bit, what their widened values give in fp32:
  // run(operands) once with fp32 buffers holding each input rounded and
  // widened, once with the bf16 roundings alone; outputs compared. Inputs
  // and outputs are left as they were.
  void bf16_inputs(const std::string& op, const std::vector<const Twin*>& inputs,
                   const std::vector<const Twin*>& outputs, const std::function<void(const std::vector<Operand>&)>& run) {
    if (!t_.bf16_operands_suffice()) return;
    std::vector<Operand> wide, alone;
    std::vector<void*> held;
    for (const Twin* x : inputs) {
      Vec v(x->n);
      t_.copy_to_host(v.data(), x->on_t, x->n * sizeof(float));
      std::vector<uint16_t> r(x->n);
      for (size_t i = 0; i < x->n; ++i) r[i] = float_to_bf16(v[i]), v[i] = bf16_to_float(r[i]);
      auto* w = static_cast<float*>(t_.allocate(std::max<size_t>(x->n, 1), DType::F32));
      void* b = t_.allocate(std::max<size_t>(x->n, 1), DType::BF16);
      t_.copy_from_host(w, v.data(), x->n * sizeof(float));
      t_.copy_from_host(b, r.data(), x->n * 2);
      wide.emplace_back(w), alone.emplace_back(nullptr, b), held.push_back(w), held.push_back(b);
    }
    std::vector<Vec> start, got[2];
    for (const Twin* y : outputs) {
      start.emplace_back(y->n);
      t_.copy_to_host(start.back().data(), y->on_t, y->n * sizeof(float));
    }
    for (int k = 0; k < 2; ++k) {
      for (size_t i = 0; i < outputs.size(); ++i)
        t_.copy_from_host(outputs[i]->on_t, start[i].data(), start[i].size() * sizeof(float));
      run(k == 0 ? wide : alone);
      for (const Twin* y : outputs) {
        got[k].emplace_back(y->n);
        t_.copy_to_host(got[k].back().data(), y->on_t, y->n * sizeof(float));
      }
    }
    double worst = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      t_.copy_from_host(outputs[i]->on_t, start[i].data(), start[i].size() * sizeof(float));
      if (got[1][i] != got[0][i]) worst = std::max(worst, std::max(rel_err(got[1][i], got[0][i]), 1e-300));
    }
    for (void* p : held) t_.release(p);
    results_.push_back({op + " (bf16 in)", worst, 0.0});
  }
  // Fills a buffer with NaN on both sides: the output of an op that is to
  // overwrite it (nn/backend.h's Grad), so an op that reads it shows NaN.
  void poison(const Twin& x) {
    const Vec nan(x.n, std::numeric_limits<float>::quiet_NaN());
    t_.copy_from_host(x.on_t, nan.data(), x.n * sizeof(float));
    r_.copy_from_host(x.on_r, nan.data(), x.n * sizeof(float));
  }
  // Runs f(backend, buffer of that backend...) on both sides.
  template <class F>
  void both(F&& f) {
    f(t_, true);
    f(r_, false);
  }

  Backend &t_, &r_;
  const CompareOptions& o_;
  std::mt19937 rng_;
  std::vector<OpCheck> results_;
};

#define ON(tw) (is_t ? (tw).on_t : (tw).on_r)

// Shapes shared by the ops.
constexpr int64_t N = 24, C = 64, OC = 96, V = 50, H = 4, KV = 2, D = 32;
const std::vector<int32_t> kCu = {0, 9, 9, 24};  // 9, 0 and 15 tokens
const std::vector<int32_t> kTokens = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4};
const std::vector<int32_t> kPos = {0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
const std::vector<int32_t> kTargets = {1, 2, -1, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 49};

void run_elementwise(Comparison& c) {
  const size_t n = 1003;  // not a multiple of 4: kernels that take four elements at a time finish with a tail
  Twin a(c.t_, c.r_, c.randn(n, 2.0f)), b(c.t_, c.r_, c.randn(n)), out(c.t_, c.r_, Vec(n)), g(c.t_, c.r_, c.randn(n));
  c.both([&](Backend& be, bool is_t) { be.add(ON(out), ON(a), ON(b), n); });
  c.check("add", out);
  c.both([&](Backend& be, bool is_t) { be.accumulate(ON(out), ON(g), n); be.scale(ON(out), 0.5f, n); });
  c.check("accumulate+scale", out);
  // a column block: rows 0..19 of a [20, 50] view, columns 7..36, into a [20, 50] view at column 13
  c.both([&](Backend& be, bool is_t) { be.copy_rows(ON(out) + 13, 50, ON(a) + 7, 50, 30, 20); });
  c.check("copy_rows", out);
  double *st = c.t_.allocate_scalars(1), *sr = c.r_.allocate_scalars(1);
  c.t_.sq_norm(st, a.on_t, n);
  c.r_.sq_norm(sr, a.on_r, n);
  c.check_scalar("sq_norm", st, sr);
  c.r_.release(sr);
  // The replicas of a dp group compare their norms bit for bit (the
  // scheduler stops a run whose replicas disagree), so the same buffer's
  // norm must come out the same on every call: over enough elements for a
  // GPU's blocks to finish in varying orders.
  {
    const size_t big = size_t(1) << 19;
    Twin x(c.t_, c.r_, c.randn(big));
    double first = 0, spread = 0;
    for (int k = 0; k < 4; ++k) {
      double v = 0;
      c.t_.sq_norm(st, x.on_t, big);
      c.t_.copy_to_host(&v, st, sizeof v);
      if (k == 0) first = v;
      spread = std::max(spread, std::abs(v - first));
    }
    c.results_.push_back({"sq_norm (repeatable)", spread / std::max(std::abs(first), 1e-30), 0.0});
  }
  c.t_.release(st);
  // bf16 round trip
  void *ht = c.t_.allocate(n, DType::BF16), *hr = c.r_.allocate(n, DType::BF16);
  c.both([&](Backend& be, bool is_t) {
    be.convert(is_t ? ht : hr, DType::BF16, ON(a), DType::F32, n);
    be.convert(ON(out), DType::F32, is_t ? ht : hr, DType::BF16, n);
  });
  c.check("convert(bf16 round trip)", out);
  c.t_.release(ht);
  c.r_.release(hr);
  // activations
  Twin dg(c.t_, c.r_, c.randn(n)), du(c.t_, c.r_, c.randn(n));
  c.both([&](Backend& be, bool is_t) { be.swiglu_forward(ON(out), ON(a), ON(b), n); });
  c.check("swiglu_forward", out);
  c.both([&](Backend& be, bool is_t) { be.swiglu_backward(ON(dg), ON(du), ON(g), ON(a), ON(b), n); });
  c.check("swiglu_backward.dgate", dg);
  c.check("swiglu_backward.dup", du);
  c.both([&](Backend& be, bool is_t) { be.gelu_forward(ON(out), ON(a), n); });
  c.check("gelu_forward", out);
  c.both([&](Backend& be, bool is_t) { be.gelu_backward(ON(dg), ON(g), ON(a), n); });
  c.check("gelu_backward", dg);
  c.both([&](Backend& be, bool is_t) { be.relu_forward(ON(out), ON(a), n); });
  c.check("relu_forward", out);
  c.both([&](Backend& be, bool is_t) { be.relu_backward(ON(dg), ON(g), ON(a), n); });
  c.check("relu_backward", dg);
  // The same gradients overwritten: the outputs' old contents (NaN) never read.
  c.poison(dg), c.poison(du);
  c.both([&](Backend& be, bool is_t) {
    be.swiglu_backward(Grad::overwrite(ON(dg)), Grad::overwrite(ON(du)), ON(g), ON(a), ON(b), n);
  });
  c.check("swiglu_backward.dgate (overwrite)", dg);
  c.check("swiglu_backward.dup (overwrite)", du);
  c.poison(dg);
  c.both([&](Backend& be, bool is_t) { be.gelu_backward(Grad::overwrite(ON(dg)), ON(g), ON(a), n); });
  c.check("gelu_backward (overwrite)", dg);
  c.poison(dg);
  c.both([&](Backend& be, bool is_t) { be.relu_backward(Grad::overwrite(ON(dg)), ON(g), ON(a), n); });
  c.check("relu_backward (overwrite)", dg);
  // The activations' bf16 copies written in the same pass (Out, GradOut),
  // from finite values (the gradients above end poisoned where an op reads
  // what it is to overwrite: NaN rounds to the NaN the copy starts as).
  Backend& t = c.t_;
  for (Twin* x : {&dg, &du}) {
    const Vec fresh = c.randn(n);
    t.copy_from_host(x->on_t, fresh.data(), n * sizeof(float));
    c.r_.copy_from_host(x->on_r, fresh.data(), n * sizeof(float));
  }
  // From and to addresses one element past the buffers' starts (not 16-byte
  // aligned): what kernels taking four elements at a time must do one by one.
  c.both([&](Backend& be, bool is_t) {
    be.add(ON(out) + 1, ON(a) + 1, ON(b) + 1, n - 1);
    be.swiglu_forward(ON(out) + 1, ON(a) + 1, ON(b) + 1, n - 1);
    be.swiglu_backward(ON(dg) + 1, ON(du) + 1, ON(g) + 1, ON(a) + 1, ON(b) + 1, n - 1);
    be.accumulate(ON(out) + 1, ON(dg) + 1, n - 1);
  });
  c.check("add, swiglu, accumulate (unaligned)", out);
  c.check("swiglu_backward.dup (unaligned)", du);
  c.bf16_output("swiglu_forward", out, [&](float* o, void* o16) { t.swiglu_forward({o, o16}, a.on_t, b.on_t, n); });
  c.bf16_output("gelu_forward", out, [&](float* o, void* o16) { t.gelu_forward({o, o16}, a.on_t, n); });
  c.bf16_output("swiglu_backward.dgate", dg, [&](float* d, void* d16) {
    t.swiglu_backward(GradOut::overwrite(d, d16), nullptr, g.on_t, a.on_t, b.on_t, n);
  });
  c.bf16_output("swiglu_backward.dup", du, [&](float* d, void* d16) {
    t.swiglu_backward(nullptr, GradOut::overwrite(d, d16), g.on_t, a.on_t, b.on_t, n);
  });
  c.bf16_output("gelu_backward", dg,
                [&](float* d, void* d16) { t.gelu_backward(GradOut::overwrite(d, d16), g.on_t, a.on_t, n); });
  // gate and up in bf16 alone (the decoder's where the copies suffice), aligned and not
  c.bf16_inputs("swiglu_forward", {&a, &b}, {&out}, [&](const std::vector<Operand>& x) {
    t.swiglu_forward(out.on_t, x[0], x[1], n);
  });
  c.bf16_inputs("swiglu_backward", {&a, &b}, {&dg, &du}, [&](const std::vector<Operand>& x) {
    t.swiglu_backward(dg.on_t, du.on_t, g.on_t, x[0], x[1], n);
  });
  auto skip1 = [](Operand x) { return x.f32 ? Operand(x.f32 + 1) : Operand(nullptr, static_cast<const uint16_t*>(x.bf16) + 1); };
  c.bf16_inputs("swiglu_forward, swiglu_backward (unaligned)", {&a, &b}, {&out, &dg}, [&](const std::vector<Operand>& x) {
    t.swiglu_forward(out.on_t + 1, skip1(x[0]), skip1(x[1]), n - 1);
    t.swiglu_backward(Grad::overwrite(dg.on_t + 1), nullptr, g.on_t + 1, skip1(x[0]), skip1(x[1]), n - 1);
  });
}

void run_embedding(Comparison& c) {
  Twin table(c.t_, c.r_, c.randn(size_t(V * C))), out(c.t_, c.r_, Vec(size_t(N * C))),
      dout(c.t_, c.r_, c.randn(size_t(N * C))), dtable(c.t_, c.r_, c.randn(size_t(V * C)));
  c.both([&](Backend& be, bool is_t) { be.embedding_forward(ON(out), kTokens.data(), ON(table), N, C); });
  c.check("embedding_forward", out);
  c.both([&](Backend& be, bool is_t) { be.embedding_backward(ON(dtable), ON(dout), kTokens.data(), N, C); });
  c.check("embedding_backward", dtable);
  c.repeatable("embedding_backward", {&dtable},
               [&] { c.t_.embedding_backward(dtable.on_t, dout.on_t, kTokens.data(), N, C); });
}

void run_linear(Comparison& c) {
  Twin inp(c.t_, c.r_, c.randn(size_t(N * C))), w(c.t_, c.r_, c.randn(size_t(OC * C), 0.1f)),
      bias(c.t_, c.r_, c.randn(size_t(OC))), out(c.t_, c.r_, Vec(size_t(N * OC))),
      dout(c.t_, c.r_, c.randn(size_t(N * OC))), dinp(c.t_, c.r_, c.randn(size_t(N * C))),
      dw(c.t_, c.r_, c.randn(size_t(OC * C))), db(c.t_, c.r_, c.randn(size_t(OC)));
  c.both([&](Backend& be, bool is_t) { be.linear_forward(ON(out), ON(inp), ON(w), ON(bias), N, C, OC); });
  c.check("linear_forward", out, Comparison::Kind::Gemm);
  c.both([&](Backend& be, bool is_t) { be.linear_forward(ON(out), ON(inp), ON(w), nullptr, N, C, OC); });
  c.check("linear_forward(no bias)", out, Comparison::Kind::Gemm);
  c.both([&](Backend& be, bool is_t) {
    be.linear_backward(ON(dinp), ON(dw), ON(db), ON(dout), ON(inp), ON(w), N, C, OC);
  });
  c.check("linear_backward.dinp", dinp, Comparison::Kind::Gemm);
  c.check("linear_backward.dw", dw, Comparison::Kind::Gemm);
  c.check("linear_backward.dbias", db);
  c.poison(dinp);
  c.both([&](Backend& be, bool is_t) {
    be.linear_backward(Grad::overwrite(ON(dinp)), nullptr, nullptr, ON(dout), ON(inp), ON(w), N, C, OC);
  });
  c.check("linear_backward.dinp (overwrite)", dinp, Comparison::Kind::Gemm);
  c.poison(dw);
  c.both([&](Backend& be, bool is_t) {
    be.linear_backward(nullptr, Grad::overwrite(ON(dw)), nullptr, ON(dout), ON(inp), ON(w), N, C, OC);
  });
  c.check("linear_backward.dw (overwrite)", dw, Comparison::Kind::Gemm);
  c.poison(dw);  // no rows: an overwritten dw is zeros
  c.both([&](Backend& be, bool is_t) {
    be.linear_backward(nullptr, Grad::overwrite(ON(dw)), nullptr, ON(dout), ON(inp), ON(w), 0, C, OC);
  });
  c.check("linear_backward.dw, no rows (overwrite)", dw);
  // The output's bf16 rounding, beside the fp32 one and alone (Out): with a
  // bias, and without (where a bf16 GEMM writes it, cuBLASLt's D in bf16).
  for (const bool with_bias : {true, false})
    c.bf16_output(with_bias ? "linear_forward" : "linear_forward(no bias)", out, [&](float* o, void* o16) {
      c.t_.linear_forward({o, o16}, inp.on_t, w.on_t, with_bias ? bias.on_t : nullptr, N, C, OC);
    }, 1);
  // A backend that reads the operands' bf16 copies (the engine's, nn/backend.h)
  // must give what it gives when it rounds them itself: bit for bit — and
  // with the copies alone, where it says they suffice (bf16_operands_suffice).
  if (!c.t_.wants_bf16_operands()) return;
  Backend& t = c.t_;
  void *inp16 = t.allocate(size_t(N * C), DType::BF16), *w16 = t.allocate(size_t(OC * C), DType::BF16),
       *dout16 = t.allocate(size_t(N * OC), DType::BF16);
  t.convert(inp16, DType::BF16, inp.on_t, DType::F32, size_t(N * C));
  t.convert(w16, DType::BF16, w.on_t, DType::F32, size_t(OC * C));
  t.convert(dout16, DType::BF16, dout.on_t, DType::F32, size_t(N * OC));
  const Vec dinp0 = c.randn(size_t(N * C)), dw0 = c.randn(size_t(OC * C));
  struct Outputs {
    Vec out, dinp, dw;
  };
  auto outputs = [&](Operand x, Operand lw, Operand dy) {
    Outputs r{Vec(size_t(N * OC)), Vec(dinp0.size()), Vec(dw0.size())};
    t.linear_forward(out.on_t, x, lw, bias.on_t, N, C, OC);
    t.copy_from_host(dinp.on_t, dinp0.data(), dinp0.size() * sizeof(float));
    t.copy_from_host(dw.on_t, dw0.data(), dw0.size() * sizeof(float));
    t.linear_backward(dinp.on_t, dw.on_t, nullptr, dy, x, lw, N, C, OC);
    t.copy_to_host(r.out.data(), out.on_t, r.out.size() * sizeof(float));
    t.copy_to_host(r.dinp.data(), dinp.on_t, r.dinp.size() * sizeof(float));
    t.copy_to_host(r.dw.data(), dw.on_t, r.dw.size() * sizeof(float));
    return r;
  };
  const Outputs rounding = outputs(inp.on_t, w.on_t, dout.on_t),
                copies = outputs({inp.on_t, inp16}, {w.on_t, w16}, {dout.on_t, dout16});
  c.results_.push_back({"linear_forward (bf16 copies)", rel_err(copies.out, rounding.out), 0.0});
  c.results_.push_back({"linear_backward.dinp (bf16 copies)", rel_err(copies.dinp, rounding.dinp), 0.0});
  c.results_.push_back({"linear_backward.dw (bf16 copies)", rel_err(copies.dw, rounding.dw), 0.0});
  if (t.bf16_operands_suffice()) {
    const Outputs alone = outputs({nullptr, inp16}, {nullptr, w16}, {nullptr, dout16});
    c.results_.push_back({"linear_forward (bf16 copies alone)", rel_err(alone.out, rounding.out), 0.0});
    c.results_.push_back({"linear_backward.dinp (bf16 copies alone)", rel_err(alone.dinp, rounding.dinp), 0.0});
    c.results_.push_back({"linear_backward.dw (bf16 copies alone)", rel_err(alone.dw, rounding.dw), 0.0});
  }
  t.release(inp16);
  t.release(w16);
  t.release(dout16);
}

void run_norms(Comparison& c) {
  Twin x(c.t_, c.r_, c.randn(size_t(N * C))), w(c.t_, c.r_, c.randn(size_t(C))), b(c.t_, c.r_, c.randn(size_t(C))),
      out(c.t_, c.r_, Vec(size_t(N * C))), mean(c.t_, c.r_, Vec(size_t(N))), rstd(c.t_, c.r_, Vec(size_t(N))),
      dout(c.t_, c.r_, c.randn(size_t(N * C))), dx(c.t_, c.r_, c.randn(size_t(N * C))),
      dw(c.t_, c.r_, c.randn(size_t(C))), db(c.t_, c.r_, c.randn(size_t(C)));
  c.both([&](Backend& be, bool is_t) { be.rmsnorm_forward(ON(out), ON(rstd), ON(x), ON(w), N, C, 1e-5f); });
  c.check("rmsnorm_forward", out);
  c.check("rmsnorm_forward.rstd", rstd);
  c.both([&](Backend& be, bool is_t) { be.rmsnorm_backward(ON(dx), ON(dw), ON(dout), ON(x), ON(w), ON(rstd), N, C); });
  c.check("rmsnorm_backward.dinp", dx);
  c.check("rmsnorm_backward.dw", dw);
  c.repeatable("rmsnorm_backward", {&dx, &dw},
               [&] { c.t_.rmsnorm_backward(dx.on_t, dw.on_t, dout.on_t, x.on_t, w.on_t, rstd.on_t, N, C); });
  c.both([&](Backend& be, bool is_t) {
    be.layernorm_forward(ON(out), ON(mean), ON(rstd), ON(x), ON(w), ON(b), N, C, 1e-5f);
  });
  c.check("layernorm_forward", out);
  c.both([&](Backend& be, bool is_t) {
    be.layernorm_backward(ON(dx), ON(dw), ON(db), ON(dout), ON(x), ON(w), ON(mean), ON(rstd), N, C);
  });
  c.check("layernorm_backward.dinp", dx);
  c.check("layernorm_backward.dw", dw);
  c.check("layernorm_backward.db", db);
  Backend& t = c.t_;
  c.bf16_output("rmsnorm_forward", out, [&](float* o, void* o16) {
    t.rmsnorm_forward({o, o16}, rstd.on_t, x.on_t, w.on_t, N, C, 1e-5f);
  });
  c.bf16_output("layernorm_forward", out, [&](float* o, void* o16) {
    t.layernorm_forward({o, o16}, mean.on_t, rstd.on_t, x.on_t, w.on_t, b.on_t, N, C, 1e-5f);
  });
}

void run_rope(Comparison& c) {
  Twin x(c.t_, c.r_, c.randn(size_t(N * H * D)));
  c.both([&](Backend& be, bool is_t) { be.rope_forward(ON(x), ON(x), kPos.data(), N, H, D, 10000.0f); });
  c.check("rope_forward", x);
  c.both([&](Backend& be, bool is_t) { be.rope_backward(ON(x), ON(x), kPos.data(), N, H, D, 10000.0f); });
  c.check("rope_backward", x);
  // Out of place on the tested side: x unchanged, y what rotating x in place gives, bit for bit.
  Backend& t = c.t_;
  Twin y(c.t_, c.r_, Vec(size_t(N * H * D)));
  Vec before(x.n), after(x.n), out_of_place(x.n), in_place(x.n);
  t.copy_to_host(before.data(), x.on_t, x.n * sizeof(float));
  t.rope_forward(y.on_t, x.on_t, kPos.data(), N, H, D, 10000.0f);
  t.copy_to_host(after.data(), x.on_t, x.n * sizeof(float));
  t.copy_to_host(out_of_place.data(), y.on_t, y.n * sizeof(float));
  t.rope_forward(x.on_t, x.on_t, kPos.data(), N, H, D, 10000.0f);
  t.copy_to_host(in_place.data(), x.on_t, x.n * sizeof(float));
  t.copy_from_host(x.on_t, before.data(), x.n * sizeof(float));
  c.results_.push_back(
      {"rope_forward (out of place)", after == before && out_of_place == in_place ? 0.0 : 1.0, 0.0});
  // and with the bf16 copy (Out), in place
  c.bf16_output("rope_forward", x, [&](float* o, void* o16) {
    t.rope_forward({o, o16}, x.on_t, kPos.data(), N, H, D, 10000.0f);
  });
  c.bf16_output("rope_backward", x, [&](float* o, void* o16) {
    t.rope_backward({o, o16}, x.on_t, kPos.data(), N, H, D, 10000.0f);
  });
  // x in bf16 alone (q and k as their GEMMs wrote them): into fp32, and in
  // place in bf16 — the decoder's — its rounded fp32 result.
  c.bf16_inputs("rope_forward", {&x}, {&y}, [&](const std::vector<Operand>& in) {
    t.rope_forward(y.on_t, in[0], kPos.data(), N, H, D, 10000.0f);
  });
  if (t.bf16_operands_suffice()) {
    std::vector<uint16_t> x16(x.n), rotated(x.n);
    for (size_t i = 0; i < x.n; ++i) x16[i] = float_to_bf16(before[i]);
    Vec wide(x.n), y_wide(x.n);
    for (size_t i = 0; i < x.n; ++i) wide[i] = bf16_to_float(x16[i]);
    void* b16 = t.allocate(x.n, DType::BF16);
    t.copy_from_host(b16, x16.data(), x.n * 2);
    t.rope_forward({nullptr, b16}, {nullptr, b16}, kPos.data(), N, H, D, 10000.0f);
    t.copy_to_host(rotated.data(), b16, x.n * 2);
    t.copy_from_host(x.on_t, wide.data(), x.n * sizeof(float));
    t.rope_forward(y.on_t, x.on_t, kPos.data(), N, H, D, 10000.0f);
    t.copy_to_host(y_wide.data(), y.on_t, y.n * sizeof(float));
    t.copy_from_host(x.on_t, before.data(), x.n * sizeof(float));
    t.release(b16);
    size_t wrong = 0;
    for (size_t i = 0; i < x.n; ++i) wrong += rotated[i] != float_to_bf16(y_wide[i]);
    c.results_.push_back({"rope_forward (bf16 in place)", double(wrong) / double(x.n), 0.0});
  }
}

// Attention over two shapes: the short sequences above (9, 0 and 15
// tokens, head 32), and sequences of 70 and 130 tokens with heads of 128
// ("long"), which cross the tiles of the tiled and flash kernels (query
// tiles of 64, key tiles of 32, partial ones) and take the flash kernels'
// larger head.
struct AttentionShape {
  int64_t N, H, KV, D;
  std::vector<int32_t> cu;
  const char* suffix;
};

void attention_copies(Comparison& c, const std::string& tag, const Twin& q, const Twin& k, const Twin& v,
                      const Twin& dout, const int32_t* cu, int64_t n_seq, int64_t N, int64_t H, int64_t KV, int64_t D,
                      bool causal);

void run_attention(Comparison& c) {
  const AttentionShape shapes[] = {{N, H, KV, D, kCu, ""}, {200, 4, 2, 128, {0, 70, 70, 200}, ", long"}};
  for (const AttentionShape& a : shapes)
    for (bool causal : {true, false}) {
      const int64_t N = a.N, H = a.H, KV = a.KV, D = a.D;  // NOLINT: shadows the short shape's
      const int32_t* cu = a.cu.data();
      const std::string tag = std::string(causal ? "(causal" : "(bidirectional") + a.suffix + ")";
      Twin q(c.t_, c.r_, c.randn(size_t(N * H * D))), k(c.t_, c.r_, c.randn(size_t(N * KV * D))),
          v(c.t_, c.r_, c.randn(size_t(N * KV * D))), out(c.t_, c.r_, Vec(size_t(N * H * D))),
          lse(c.t_, c.r_, Vec(size_t(N * H))), dout(c.t_, c.r_, c.randn(size_t(N * H * D))),
          dq(c.t_, c.r_, c.randn(size_t(N * H * D))), dk(c.t_, c.r_, c.randn(size_t(N * KV * D))),
          dv(c.t_, c.r_, c.randn(size_t(N * KV * D)));
      const int64_t n_seq = int64_t(a.cu.size()) - 1;
      c.both([&](Backend& be, bool is_t) {
        be.attention_forward(ON(out), ON(lse), ON(q), ON(k), ON(v), cu, n_seq, N, H, KV, D, causal);
      });
      c.check("attention_forward" + tag, out, Comparison::Kind::Attention);
      c.check("attention_forward" + tag + ".lse", lse, Comparison::Kind::Attention);
      c.both([&](Backend& be, bool is_t) {
        be.attention_backward(ON(dq), ON(dk), ON(dv), ON(dout), ON(out), ON(lse), ON(q), ON(k), ON(v), cu, n_seq, N,
                              H, KV, D, causal);
      });
      c.check("attention_backward" + tag + ".dq", dq, Comparison::Kind::Attention);
      c.check("attention_backward" + tag + ".dk", dk, Comparison::Kind::Attention);
      c.check("attention_backward" + tag + ".dv", dv, Comparison::Kind::Attention);
      for (const Twin* x : {&dq, &dk, &dv}) c.poison(*x);
      c.both([&](Backend& be, bool is_t) {
        be.attention_backward(Grad::overwrite(ON(dq)), Grad::overwrite(ON(dk)), Grad::overwrite(ON(dv)), ON(dout),
                              ON(out), ON(lse), ON(q), ON(k), ON(v), cu, n_seq, N, H, KV, D, causal);
      });
      c.check("attention_backward" + tag + ".dq (overwrite)", dq, Comparison::Kind::Attention);
      c.check("attention_backward" + tag + ".dk (overwrite)", dk, Comparison::Kind::Attention);
      c.check("attention_backward" + tag + ".dv (overwrite)", dv, Comparison::Kind::Attention);
      c.repeatable("attention_backward" + tag, {&dq, &dk, &dv}, [&] {
        c.t_.attention_backward(dq.on_t, dk.on_t, dv.on_t, dout.on_t, out.on_t, lse.on_t, q.on_t, k.on_t, v.on_t, cu,
                                n_seq, N, H, KV, D, causal);
      });
      // q, k, v's bf16 copies given (the engine's, nn/backend.h): what the
      // backend gives when it rounds them itself, bit for bit.
      if (c.t_.wants_bf16_operands()) attention_copies(c, tag, q, k, v, dout, cu, n_seq, N, H, KV, D, causal);
    }
}

void attention_copies(Comparison& c, const std::string& tag, const Twin& q, const Twin& k, const Twin& v,
                      const Twin& dout, const int32_t* cu, int64_t n_seq, int64_t N, int64_t H, int64_t KV, int64_t D,
                      bool causal) {
  Backend& t = c.t_;
  const size_t nq = size_t(N * H * D), nkv = size_t(N * KV * D);
  void *q16 = t.allocate(nq, DType::BF16), *k16 = t.allocate(nkv, DType::BF16), *v16 = t.allocate(nkv, DType::BF16);
  t.convert(q16, DType::BF16, q.on_t, DType::F32, nq);
  t.convert(k16, DType::BF16, k.on_t, DType::F32, nkv);
  t.convert(v16, DType::BF16, v.on_t, DType::F32, nkv);
  float *out = t.allocate(nq), *lse = t.allocate(size_t(N * H)), *dq = t.allocate(nq), *dk = t.allocate(nkv),
        *dv = t.allocate(nkv);
  auto run = [&](Operand qo, Operand ko, Operand vo) {
    std::vector<Vec> r = {Vec(nq), Vec(size_t(N * H)), Vec(nq), Vec(nkv), Vec(nkv)};
    t.attention_forward(out, lse, qo, ko, vo, cu, n_seq, N, H, KV, D, causal);
    t.attention_backward(Grad::overwrite(dq), Grad::overwrite(dk), Grad::overwrite(dv), dout.on_t, out, lse, qo, ko,
                         vo, cu, n_seq, N, H, KV, D, causal);
    const float* from[] = {out, lse, dq, dk, dv};
    for (size_t i = 0; i < r.size(); ++i) t.copy_to_host(r[i].data(), from[i], r[i].size() * sizeof(float));
    return r;
  };
  const std::vector<Vec> rounding = run(q.on_t, k.on_t, v.on_t),
                         copies = run({q.on_t, q16}, {k.on_t, k16}, {v.on_t, v16});
  const char* names[] = {"", ".lse", ".dq", ".dk", ".dv"};
  for (size_t i = 0; i < rounding.size(); ++i)
    c.results_.push_back({std::string(i < 2 ? "attention_forward" : "attention_backward") + tag + names[i] +
                              " (bf16 copies)",
                          rel_err(copies[i], rounding[i]), 0.0});
  // q, k, v in bf16 alone (the decoder's where the copies suffice): what
  // their values widened to fp32 give, bit for bit (an fp32 attention
  // computes from them widened; a bf16 one rounds the widened values back).
  if (t.bf16_operands_suffice()) {
    float *wq = t.allocate(nq), *wk = t.allocate(nkv), *wv = t.allocate(nkv);
    t.convert(wq, DType::F32, q16, DType::BF16, nq);
    t.convert(wk, DType::F32, k16, DType::BF16, nkv);
    t.convert(wv, DType::F32, v16, DType::BF16, nkv);
    const std::vector<Vec> wide = run(wq, wk, wv), alone = run({nullptr, q16}, {nullptr, k16}, {nullptr, v16});
    for (size_t i = 0; i < wide.size(); ++i)
      c.results_.push_back({std::string(i < 2 ? "attention_forward" : "attention_backward") + tag + names[i] +
                                " (bf16 alone)",
                            rel_err(alone[i], wide[i]), 0.0});
    for (float* p : {wq, wk, wv}) t.release(p);
  }
  for (void* p : {q16, k16, v16}) t.release(p);
  for (float* p : {out, lse, dq, dk, dv}) t.release(p);
}

void run_patches(Comparison& c) {
  const int64_t I = 2, Ch = 3, S = 8, p = 4;
  Twin pixels(c.t_, c.r_, c.randn(size_t(I * Ch * S * S))), patches(c.t_, c.r_, Vec(size_t(I * Ch * S * S)));
  c.both([&](Backend& be, bool is_t) { be.im2col_patches(ON(patches), ON(pixels), I, Ch, S, p); });
  c.check("im2col_patches", patches);
}

void run_losses(Comparison& c) {
  Twin logits(c.t_, c.r_, c.randn(size_t(N * V), 3.0f)), teacher(c.t_, c.r_, c.randn(size_t(N * V), 3.0f)),
      d(c.t_, c.r_, c.randn(size_t(N * V)));
  double *lt = c.t_.allocate_scalars(1), *lr = c.r_.allocate_scalars(1);
  c.t_.cross_entropy(lt, d.on_t, logits.on_t, kTargets.data(), N, V, 0.5f);
  c.r_.cross_entropy(lr, d.on_r, logits.on_r, kTargets.data(), N, V, 0.5f);
  c.check_scalar("cross_entropy.loss", lt, lr);
  c.check("cross_entropy.dlogits", d);
  c.t_.kl_divergence(lt, d.on_t, logits.on_t, teacher.on_t, kTargets.data(), N, V, 2.0f, 0.5f);
  c.r_.kl_divergence(lr, d.on_r, logits.on_r, teacher.on_r, kTargets.data(), N, V, 2.0f, 0.5f);
  c.check_scalar("kl_divergence.loss", lt, lr);
  c.check("kl_divergence.dstudent", d);
  c.t_.release(lt);
  c.r_.release(lr);
}

// A tensor-parallel rank's columns [v0, v0 + valid) of the logits, V − valid
// of padding that no op may touch (the gradients start random: a write there
// shows); kTargets has rows skipped, targets of this rank and of others.
void run_vocab_parallel(Comparison& c) {
  const int64_t valid = 41, v0 = 10, R = 3;
  const float inv_t = 0.5f, T = 2.0f, scale = 0.5f;
  Twin x(c.t_, c.r_, c.randn(size_t(N * V), 3.0f)), teacher(c.t_, c.r_, c.randn(size_t(N * V), 3.0f)),
      parts(c.t_, c.r_, c.randn(size_t(R * N), 2.0f)), d(c.t_, c.r_, c.randn(size_t(N * V))),
      mx(c.t_, c.r_, Vec(N)), se(c.t_, c.r_, Vec(N)), tx(c.t_, c.r_, c.randn(N)), mx_t(c.t_, c.r_, Vec(N)),
      se_t(c.t_, c.r_, Vec(N)), kl(c.t_, c.r_, c.randn(N));
  c.both([&](Backend& be, bool is_t) { be.max_of_parts(ON(mx), ON(parts), R, N); });
  c.check("max_of_parts", mx);
  // cross-entropy (inv_t = 1)
  c.both([&](Backend& be, bool is_t) {
    be.shard_row_max(ON(mx), ON(x), N, V, valid, 1.0f);
    be.shard_sumexp(ON(se), ON(tx), ON(x), kTargets.data(), ON(mx), N, V, valid, v0, 1.0f);
  });
  c.check("shard_row_max", mx);
  c.check("shard_sumexp.se", se);
  c.check("shard_sumexp.tx", tx);
  double *lt = c.t_.allocate_scalars(1), *lr = c.r_.allocate_scalars(1);
  c.t_.shard_cross_entropy(lt, d.on_t, x.on_t, kTargets.data(), mx.on_t, se.on_t, tx.on_t, N, V, valid, v0, scale);
  c.r_.shard_cross_entropy(lr, d.on_r, x.on_r, kTargets.data(), mx.on_r, se.on_r, tx.on_r, N, V, valid, v0, scale);
  c.check_scalar("shard_cross_entropy.loss", lt, lr);
  c.check("shard_cross_entropy.dlogits", d);
  // KL at temperature T (x/T): the student's and the teacher's statistics
  c.both([&](Backend& be, bool is_t) {
    be.shard_row_max(ON(mx), ON(x), N, V, valid, inv_t);
    be.shard_row_max(ON(mx_t), ON(teacher), N, V, valid, inv_t);
    be.shard_sumexp(ON(se), nullptr, ON(x), kTargets.data(), ON(mx), N, V, valid, v0, inv_t);
    be.shard_sumexp(ON(se_t), nullptr, ON(teacher), kTargets.data(), ON(mx_t), N, V, valid, v0, inv_t);
    be.shard_kl(ON(kl), ON(d), ON(x), ON(teacher), kTargets.data(), ON(mx), ON(se), ON(mx_t), ON(se_t), N, V, valid, T,
                scale);
  });
  c.check("shard_sumexp(1/T).se", se);
  c.check("shard_kl.kl", kl);
  c.check("shard_kl.dstudent", d);
  c.t_.masked_row_sum(lt, kl.on_t, kTargets.data(), N);
  c.r_.masked_row_sum(lr, kl.on_r, kTargets.data(), N);
  c.check_scalar("masked_row_sum", lt, lr);
  c.t_.release(lt);
  c.r_.release(lr);
}

void run_adamw(Comparison& c) {
  const size_t n = 2000;
  Vec v0 = c.randn(n, 0.01f);
  for (float& x : v0) x = std::abs(x);
  Twin p(c.t_, c.r_, c.randn(n)), g(c.t_, c.r_, c.randn(n)), m(c.t_, c.r_, c.randn(n, 0.1f)), v(c.t_, c.r_, v0);
  c.both([&](Backend& be, bool is_t) {
    be.adamw(ON(p), ON(g), ON(m), ON(v), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f, nullptr);
  });
  c.check("adamw.p", p);
  c.check("adamw.m", m);
  c.check("adamw.v", v);
  // with a clipping coefficient
  c.both([&](Backend& be, bool is_t) {
    be.adamw(ON(p), ON(g), ON(m), ON(v), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.37f, nullptr);
  });
  c.check("adamw(grad_scale).p", p);
  c.check("adamw(grad_scale).m", m);
  c.check("adamw(grad_scale).v", v);
  c.check("adamw(grad_scale).g", g);  // not written
  // Writing the parameters' bf16 copy in the same pass (Backend::adamw's
  // p16), over a count with a tail past the last four: the copy must be the
  // tested side's updated p rounded (nn/dtype.h), bit for bit.
  const size_t k = n - 2;
  void* p16 = c.t_.allocate(k, DType::BF16);
  const std::vector<uint16_t> nan16(k, 0x7fc0);
  c.t_.copy_from_host(p16, nan16.data(), k * 2);
  c.both([&](Backend& be, bool is_t) {
    be.adamw(ON(p), ON(g), ON(m), ON(v), k, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 1.0f, is_t ? p16 : nullptr);
  });
  c.check("adamw(bf16 copy).p", p);
  c.check("adamw(bf16 copy).m", m);
  float* wide = c.t_.allocate(k);
  c.t_.convert(wide, DType::F32, p16, DType::BF16, k);
  Vec copy(k), rounded(k);
  c.t_.copy_to_host(copy.data(), wide, k * sizeof(float));
  c.t_.copy_to_host(rounded.data(), p.on_t, k * sizeof(float));
  for (float& x : rounded) x = bf16_to_float(float_to_bf16(x));
  c.results_.push_back({"adamw(bf16 copy).p16", rel_err(copy, rounded), 0.0});
  c.t_.release(wide);
  c.t_.release(p16);
}

const std::vector<std::pair<std::string, void (*)(Comparison&)>>& families() {
  static const std::vector<std::pair<std::string, void (*)(Comparison&)>> f = {
      {"elementwise", run_elementwise}, {"embedding", run_embedding}, {"linear", run_linear},
      {"norms", run_norms},             {"rope", run_rope},           {"attention", run_attention},
      {"patches", run_patches},         {"losses", run_losses},       {"vocab_parallel", run_vocab_parallel},
      {"adamw", run_adamw}};
  return f;
}

}  // namespace

const std::vector<std::string>& compared_op_families() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, fn] : families()) n.push_back(name);
    return n;
  }();
  return names;
}

std::vector<OpCheck> compare_backends(Backend& test, Backend& ref, const CompareOptions& options) {
  for (const std::string& op : options.ops)
    if (std::find(compared_op_families().begin(), compared_op_families().end(), op) == compared_op_families().end())
      throw std::invalid_argument("compare_backends: unknown op family '" + op + "'");
  Comparison c(test, ref, options);
  for (const auto& [name, run] : families())
    if (options.ops.empty() || options.ops.count(name)) run(c);
  return std::move(c.results_);
}

std::vector<OpCheck> check_handoff_copies(Backend& producer, Backend& consumer, uint32_t seed) {
  constexpr int64_t rows = 37, cols = 53, first = 11, width = 29;  // a slice of columns [first, first + width)
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> host(size_t(rows * cols));               // [rows, cols]
  for (float& x : host) x = dist(rng);
  float* block = producer.allocate(host.size());               // the hand-off [rows, cols]
  producer.copy_from_host(block, host.data(), host.size() * sizeof(float));
  consumer.wait_for(producer.ready_marker());
  float* whole = consumer.allocate(host.size());               // [rows, cols]
  float* slice = consumer.allocate(size_t(rows * width));      // [rows, width]
  consumer.copy_from_host_held(whole, block, host.size() * sizeof(float));
  consumer.copy_rows_from_host_held(slice, width * sizeof(float), block + first, cols * sizeof(float),
                                    width * sizeof(float), rows);
  std::vector<float> got_whole(host.size()), got_slice(size_t(rows * width)), want_slice(got_slice.size());
  consumer.copy_to_host(got_whole.data(), whole, got_whole.size() * sizeof(float));  // the consumer's sync
  consumer.copy_to_host(got_slice.data(), slice, got_slice.size() * sizeof(float));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(host.begin() + r * cols + first, width, want_slice.begin() + r * width);
  consumer.release(whole);
  consumer.release(slice);
  producer.release(block);  // after the consumer's copies are done
  auto rel_err = [](const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = std::abs(double(got[i]) - double(want[i]));
      diff = std::isnan(d) ? std::numeric_limits<double>::quiet_NaN() : std::max(diff, d);
      if (std::isnan(diff)) break;
      scale = std::max(scale, std::abs(double(want[i])));
    }
    return diff / std::max(scale, 1e-30);
  };
  return {{"copy_from_host_held (a hand-off in another backend's memory)", rel_err(got_whole, host), 0.0},
          {"copy_rows_from_host_held (a hand-off in another backend's memory)", rel_err(got_slice, want_slice), 0.0}};
}

}  // namespace maestro
