// The CPU backend's ops against PyTorch 1.13 (tests/oracle/ops_oracle.py):
// every op's forward output and every gradient on random inputs, fp32 vs
// torch autograd, relative error (norm-wise) ≤ 1e-4. Inputs go to a
// temporary directory as raw little-endian files plus cases.json; the oracle
// writes its results back the same way. Labelled "oracle": ctest runs it as
// oracle.cpu, reported Skipped when the oracle cannot run (cmake/MaestroTest.cmake).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.h"
#include "support/oracle_python.h"
#include "support/random_vector.h"

using namespace maestro;
using F = std::vector<float>;
using I = std::vector<int32_t>;
namespace fs = std::filesystem;

namespace {

constexpr double kTorchTol = 1e-4;

F random(size_t n, uint32_t seed, float scale = 1.0f) { return test_support::random_normal(n, seed, scale); }

double rel(const F& a, const F& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(1e-12, std::sqrt(den));
}

// One op's inputs for the oracle and our results to compare with its outputs.
struct OracleCase {
  OracleCase(std::string name, std::string op, nlohmann::json params = nlohmann::json::object())
      : name(std::move(name)), op(std::move(op)), params(std::move(params)) {}
  std::string name, op;
  nlohmann::json params;
  std::vector<std::pair<std::string, F>> f32;
  std::vector<std::pair<std::string, I>> i32;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, F> ours;

  void in(const std::string& n, F v, std::vector<int64_t> shape) {
    shapes[n] = std::move(shape);
    f32.emplace_back(n, std::move(v));
  }
  void in(const std::string& n, I v, std::vector<int64_t> shape) {
    shapes[n] = std::move(shape);
    i32.emplace_back(n, std::move(v));
  }
  const F& f(const std::string& n) const {
    for (auto& [k, v] : f32)
      if (k == n) return v;
    throw std::runtime_error("no input " + n);
  }
};

template <class T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream o(p, std::ios::binary);
  o.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
}

F read_raw(const fs::path& p) {
  std::ifstream i(p, std::ios::binary | std::ios::ate);
  BOOST_REQUIRE(i.good());
  F v(size_t(i.tellg()) / sizeof(float));
  i.seekg(0);
  i.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

// Writes the cases, runs the oracle, checks each of our outputs against it.
void check_against_torch(const std::vector<OracleCase>& cases) {
  const fs::path dir = fs::temp_directory_path() / ("maestro-ops-oracle-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json inputs;
    for (auto& [n, v] : c.f32) {
      write_raw(dir / (c.name + "." + n + ".in"), v);
      inputs[n] = {{"file", c.name + "." + n + ".in"}, {"dtype", "f32"}, {"shape", c.shapes.at(n)}};
    }
    for (auto& [n, v] : c.i32) {
      write_raw(dir / (c.name + "." + n + ".in"), v);
      inputs[n] = {{"file", c.name + "." + n + ".in"}, {"dtype", "i32"}, {"shape", c.shapes.at(n)}};
    }
    list.push_back({{"name", c.name}, {"op", c.op}, {"params", c.params}, {"inputs", inputs}});
  }
  std::ofstream(dir / "cases.json") << list.dump();
  const std::string cmd = test::oracle_python() + " tests/oracle/ops_oracle.py " + dir.string();
  BOOST_REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "oracle failed: " << cmd);
  nlohmann::json outputs;
  std::ifstream(dir / "outputs.json") >> outputs;
  for (const auto& c : cases)
    for (const auto& [n, v] : c.ours) {
      BOOST_TEST_CONTEXT(c.name << "." << n) {
        BOOST_REQUIRE(outputs[c.name].contains(n));
        BOOST_TEST(rel(v, read_raw(dir / outputs[c.name][n].get<std::string>())) <= kTorchTol);
      }
    }
  fs::remove_all(dir);
}

// Gradient buffers start non-zero: the test subtracts the start so the
// comparison is of what the op added (the += contract).
F added(const F& after, const F& before) {
  F d(after.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = after[i] - before[i];
  return d;
}

}  // namespace

BOOST_AUTO_TEST_CASE(torch_oracle_every_op, *boost::unit_test::label("oracle")) {
  auto be = make_cpu_backend(2);
  std::vector<OracleCase> cases;

  {  // linear
    const int64_t N = 19, C = 33, OC = 17;
    OracleCase c{"linear", "linear"};
    c.in("inp", random(N * C, 1), {N, C});
    c.in("w", random(OC * C, 2, 0.2f), {OC, C});
    c.in("bias", random(OC, 3), {OC});
    c.in("dy", random(N * OC, 4), {N, OC});
    F out(N * OC), dinp0 = random(N * C, 5), dw0 = random(OC * C, 6), db0 = random(OC, 7);
    F dinp = dinp0, dw = dw0, db = db0;
    be->linear_forward(out.data(), c.f("inp").data(), c.f("w").data(), c.f("bias").data(), N, C, OC);
    be->linear_backward(dinp.data(), dw.data(), db.data(), c.f("dy").data(), c.f("inp").data(), c.f("w").data(), N,
                        C, OC);
    c.ours = {{"out", out}, {"dinp", added(dinp, dinp0)}, {"dw", added(dw, dw0)}, {"dbias", added(db, db0)}};
    cases.push_back(c);
  }
  {  // embedding
    const int64_t N = 23, C = 16, V = 11;
    OracleCase c{"embedding", "embedding"};
    I tok(N);
    for (int64_t i = 0; i < N; ++i) tok[i] = int32_t((i * 7) % V);
    c.in("tokens", tok, {N});
    c.in("table", random(V * C, 1), {V, C});
    c.in("dy", random(N * C, 2), {N, C});
    F out(N * C), dt(V * C);
    be->embedding_forward(out.data(), tok.data(), c.f("table").data(), N, C);
    be->embedding_backward(dt.data(), c.f("dy").data(), tok.data(), N, C);
    c.ours = {{"out", out}, {"dtable", dt}};
    cases.push_back(c);
  }
  {  // rmsnorm
    const int64_t N = 13, C = 48;
    OracleCase c{"rmsnorm", "rmsnorm", {{"eps", 1e-5}}};
    c.in("inp", random(N * C, 1), {N, C});
    c.in("w", random(C, 2), {C});
    c.in("dy", random(N * C, 3), {N, C});
    F out(N * C), rstd(N), dinp(N * C), dw(C);
    be->rmsnorm_forward(out.data(), rstd.data(), c.f("inp").data(), c.f("w").data(), N, C, 1e-5f);
    be->rmsnorm_backward(dinp.data(), dw.data(), c.f("dy").data(), c.f("inp").data(), c.f("w").data(), rstd.data(),
                         N, C);
    c.ours = {{"out", out}, {"rstd", rstd}, {"dinp", dinp}, {"dw", dw}};
    cases.push_back(c);
  }
  {  // layernorm
    const int64_t N = 11, C = 40;
    OracleCase c{"layernorm", "layernorm", {{"eps", 1e-6}}};
    c.in("inp", random(N * C, 1, 2.0f), {N, C});
    c.in("w", random(C, 2), {C});
    c.in("b", random(C, 3), {C});
    c.in("dy", random(N * C, 4), {N, C});
    F out(N * C), mean(N), rstd(N), dinp(N * C), dw(C), db(C);
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), c.f("inp").data(), c.f("w").data(), c.f("b").data(),
                          N, C, 1e-6f);
    be->layernorm_backward(dinp.data(), dw.data(), db.data(), c.f("dy").data(), c.f("inp").data(), c.f("w").data(),
                           mean.data(), rstd.data(), N, C);
    c.ours = {{"out", out}, {"dinp", dinp}, {"dw", dw}, {"db", db}};
    cases.push_back(c);
  }
  {  // rope, two packed sequences with positions restarting
    const int64_t N = 21, H = 3, D = 16;
    OracleCase c{"rope", "rope", {{"theta", 10000.0}}};
    I pos(N);
    for (int64_t i = 0; i < N; ++i) pos[i] = int32_t(i < 12 ? i : i - 12);
    c.in("pos", pos, {N});
    c.in("inp", random(N * H * D, 1), {N, H, D});
    c.in("dy", random(N * H * D, 2), {N, H, D});
    F out = c.f("inp"), dinp = c.f("dy");
    be->rope_forward(out.data(), out.data(), pos.data(), N, H, D, 10000.0f);
    be->rope_backward(dinp.data(), dinp.data(), pos.data(), N, H, D, 10000.0f);
    c.ours = {{"out", out}, {"dinp", dinp}};
    cases.push_back(c);
  }
  // attention: causal GQA over 3 packed sequences; bidirectional MHA
  for (const bool causal : {true, false}) {
    const int64_t H = causal ? 4 : 2, KV = causal ? 2 : 2, D = 8;
    const I cu = causal ? I{0, 5, 17, 26} : I{0, 9, 10, 23};
    const int64_t N = cu.back(), n_seq = int64_t(cu.size()) - 1;
    OracleCase c{causal ? "attention_causal_gqa" : "attention_bidirectional", "attention",
                 {{"H", H}, {"KV", KV}, {"D", D}, {"causal", causal}}};
    c.in("cu_seqlens", cu, {n_seq + 1});
    c.in("q", random(N * H * D, 1), {N, H * D});
    c.in("k", random(N * KV * D, 2), {N, KV * D});
    c.in("v", random(N * KV * D, 3), {N, KV * D});
    c.in("dy", random(N * H * D, 4), {N, H * D});
    F out(N * H * D), lse(N * H), dq(N * H * D), dk(N * KV * D), dv(N * KV * D);
    be->attention_forward(out.data(), lse.data(), c.f("q").data(), c.f("k").data(), c.f("v").data(), cu.data(), n_seq,
                          N, H, KV, D, causal);
    be->attention_backward(dq.data(), dk.data(), dv.data(), c.f("dy").data(), out.data(), lse.data(), c.f("q").data(),
                           c.f("k").data(), c.f("v").data(), cu.data(), n_seq, N, H, KV, D, causal);
    c.ours = {{"out", out}, {"lse", lse}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
    cases.push_back(c);
  }
  {  // swiglu
    const int64_t n = 301;
    OracleCase c{"swiglu", "swiglu"};
    c.in("gate", random(n, 1, 3.0f), {n});
    c.in("up", random(n, 2), {n});
    c.in("dy", random(n, 3), {n});
    F out(n), dg(n), du(n);
    be->swiglu_forward(out.data(), c.f("gate").data(), c.f("up").data(), n);
    be->swiglu_backward(dg.data(), du.data(), c.f("dy").data(), c.f("gate").data(), c.f("up").data(), n);
    c.ours = {{"out", out}, {"dgate", dg}, {"dup", du}};
    cases.push_back(c);
  }
  {  // gelu (tanh)
    const int64_t n = 301;
    OracleCase c{"gelu", "gelu"};
    c.in("inp", random(n, 1, 3.0f), {n});
    c.in("dy", random(n, 2), {n});
    F out(n), dinp(n);
    be->gelu_forward(out.data(), c.f("inp").data(), n);
    be->gelu_backward(dinp.data(), c.f("dy").data(), c.f("inp").data(), n);
    c.ours = {{"out", out}, {"dinp", dinp}};
    cases.push_back(c);
  }
  {  // im2col vs F.unfold
    const int64_t I_ = 2, Ch = 3, S = 12, p = 4;
    OracleCase c{"im2col", "im2col", {{"p", p}}};
    c.in("pixels", random(I_ * Ch * S * S, 1), {I_, Ch, S, S});
    F out(I_ * (S / p) * (S / p) * Ch * p * p);
    be->im2col_patches(out.data(), c.f("pixels").data(), I_, Ch, S, p);
    c.ours = {{"out", out}};
    cases.push_back(c);
  }
  {  // cross-entropy (masked rows) and KL with temperature
    const int64_t N = 9, V = 37;
    I tgt(N);
    for (int64_t i = 0; i < N; ++i) tgt[i] = i % 4 == 1 ? -1 : int32_t((i * 5) % V);
    OracleCase ce{"cross_entropy", "cross_entropy", {{"scale", 0.125}}};
    ce.in("logits", random(N * V, 1, 3.0f), {N, V});
    ce.in("targets", tgt, {N});
    F dl(N * V);
    double loss = 0;
    be->cross_entropy(&loss, dl.data(), ce.f("logits").data(), tgt.data(), N, V, 0.125f);
    ce.ours = {{"loss", F{float(loss)}}, {"dlogits", dl}};
    cases.push_back(ce);
    OracleCase kl{"kl", "kl", {{"T", 2.0}, {"scale", 0.5}}};
    kl.in("student", random(N * V, 2, 3.0f), {N, V});
    kl.in("teacher", random(N * V, 3, 3.0f), {N, V});
    kl.in("targets", tgt, {N});
    F ds(N * V);
    double kloss = 0;
    be->kl_divergence(&kloss, ds.data(), kl.f("student").data(), kl.f("teacher").data(), tgt.data(), N, V, 2.0f, 0.5f);
    kl.ours = {{"loss", F{float(kloss)}}, {"dstudent", ds}};
    cases.push_back(kl);
  }
  {  // AdamW, 3 steps, vs torch.optim.AdamW
    const int64_t n = 257, steps = 3;
    OracleCase c{"adamw", "adamw", {{"lr", 1e-2}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}}};
    c.in("p", random(n, 1), {n});
    F grads;
    for (int64_t t = 0; t < steps; ++t) {
      F g = random(n, uint32_t(10 + t));
      grads.insert(grads.end(), g.begin(), g.end());
    }
    c.in("grads", grads, {steps, n});
    F p = c.f("p"), m(n), v(n);
    for (int64_t t = 1; t <= steps; ++t)
      be->adamw(p.data(), grads.data() + (t - 1) * n, m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 1.0f,
                nullptr);
    c.ours = {{"p", p}, {"m", m}, {"v", v}};
    cases.push_back(c);
  }
  check_against_torch(cases);
}
