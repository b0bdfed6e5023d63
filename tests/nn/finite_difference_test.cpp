// Finite differences, independent of torch: for every parameter tensor of
// each model, the derivative of an objective along u = sign(gradient of that
// tensor), (J(θ + h·u) − J(θ − h·u)) / 2h, against Σ |gradient| from
// backward. J = the section's loss (transformer: cross_entropy + kl) plus
// Σ output · g for fixed random g (a transformer's output: its final-normed
// hidden states).
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

namespace {

struct Objective {
  std::vector<SampleInput> inputs;
  std::vector<std::vector<float>> out_grads;  // per sample, filled on first use
  std::vector<std::vector<float>> teacher;    // per sample, for kl
  int64_t n_global = 1;

  double operator()(SectionModel& m, bool backward) {
    ForwardOutput fw = m.forward(inputs);
    double j = 0;
    if (!m.section().loss.empty()) {
      std::vector<std::span<const float>> t;
      for (const auto& x : teacher) t.push_back(span_of(x));
      j += m.loss(*fw.context, t, n_global);
    }
    std::vector<std::span<const float>> g;
    for (size_t i = 0; i < fw.outputs.size(); ++i) {
      if (out_grads.size() <= i) out_grads.push_back(random_floats(fw.outputs[i].values().size(), 90 + i, 0.5f));
      for (size_t k = 0; k < out_grads[i].size(); ++k) j += double(fw.outputs[i].data[k]) * out_grads[i][k];
      g.push_back(span_of(out_grads[i]));
    }
    if (backward) m.backward(*fw.context, g);
    return j;
  }
};

void check_finite_differences(SectionModel& m, Objective& f) {
  m.zero_grads();
  f(m, true);
  const std::vector<float> grads(m.grads(), m.grads() + m.grad_count());
  int64_t offset = 0;
  const float h = 1e-3f;
  for (const auto& t : m.tensors()) {
    // Taken again before each write: a write through params() marks the
    // parameters' bf16 copy for refresh at the next pass (section_model.h).
    const auto tensor = [&m, at = offset] { return m.params() + at; };
    double analytic = 0;
    std::vector<float> saved(tensor(), tensor() + t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) analytic += std::fabs(grads[offset + i]);
    offset += t.numel();
    if (analytic < 1e-4) continue;  // k_proj.bias: exactly 0 in theory (softmax shift invariance)
    float* p = tensor();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = saved[i] + (grads[offset - t.numel() + i] > 0 ? h : -h);
    const double plus = f(m, false);
    p = tensor();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = saved[i] - (grads[offset - t.numel() + i] > 0 ? h : -h);
    const double minus = f(m, false);
    std::copy(saved.begin(), saved.end(), tensor());
    const double numeric = (plus - minus) / (2.0 * h);
    BOOST_CHECK_MESSAGE(std::fabs(numeric - analytic) <= 2e-2 * analytic,
                        m.section().name << " " << t.name << ": finite difference " << numeric << ", backward "
                                         << analytic);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(finite_differences)

BOOST_AUTO_TEST_CASE(transformer_with_ce_and_kl) {
  TransformerSpec t{.layers = 2, .hidden = 16, .heads = 4, .kv_heads = 2, .ffn = 24, .vocab = 19, .max_seq = 32};
  SectionModel m(make_section("llm", {"transformer", t}, Mode::Train, false,
                              {{LossKind::CrossEntropy, 1.0, 1.0}, {LossKind::KL, 0.5, 2.0}}),
                 cpu(), 1);
  randomize(m, 60);
  Objective f;
  const std::vector<std::vector<int32_t>> tokens{random_tokens(6, 1, 19), random_tokens(9, 2, 19)};
  const std::vector<float> spliced = random_floats(3 * 16, 3);
  f.inputs.resize(2);
  for (int i = 0; i < 2; ++i) f.inputs[i].tokens = tokens[i];
  f.inputs[1].spliced = {span_of(spliced)};
  f.teacher = {random_floats(6 * 19, 4, 2.0f), random_floats(9 * 19, 5, 2.0f)};
  f.n_global = 13;
  check_finite_differences(m, f);
}

BOOST_AUTO_TEST_CASE(encoders_and_mlp) {
  SectionModel vit(make_section("vision", {"vit", VitSpec{.layers = 1, .hidden = 12, .heads = 2, .ffn = 16, .patch = 2,
                                                           .image = 4, .channels = 2}}),
                   cpu(), 1);
  SectionModel audio(make_section("audio", {"audio_encoder", AudioEncoderSpec{.layers = 1, .hidden = 12, .heads = 2,
                                                                               .ffn = 16, .mel_bins = 6}}),
                     cpu(), 1);
  SectionModel mlp(make_section("proj", {"mlp", MlpSpec{.in = 5, .out = 7, .hidden = 9, .layers = 2}}), cpu(), 1);
  const std::vector<float> px = random_floats(2 * 2 * 16, 7), mel = random_floats(7 * 6, 8), x = random_floats(3 * 5, 9);
  const std::vector<std::span<const float>> values{span_of(px), span_of(mel), span_of(x)};
  int k = 0;
  for (SectionModel* m : {&vit, &audio, &mlp}) {
    randomize(*m, 70 + k);
    Objective f;
    f.inputs.resize(1);
    f.inputs[0].values = values[k++];
    check_finite_differences(*m, f);
  }
}

BOOST_AUTO_TEST_SUITE_END()
