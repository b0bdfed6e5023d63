// Compound models against the PyTorch oracle: an MLLM (vit -> mlp and an
// audio encoder spliced into a transformer, gradients flowing back into the
// encoders through the spliced blocks) and knowledge distillation (a frozen
// teacher's logits -> a student trained on cross_entropy + 0.5 kl(T = 2)).
#include <boost/test/unit_test.hpp>

#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

BOOST_AUTO_TEST_SUITE(compound)

BOOST_AUTO_TEST_CASE(mllm_gradients_reach_the_encoders, *kOracle) {
  VitSpec v{.layers = 1, .hidden = 16, .heads = 2, .ffn = 24, .patch = 4, .image = 8, .channels = 3};
  AudioEncoderSpec a{.layers = 1, .hidden = 32, .heads = 4, .ffn = 40, .mel_bins = 8, .frames_per_token = 2,
                     .max_frames = 64};
  MlpSpec p{.in = 16, .out = 32, .hidden = 32, .layers = 2, .act = Activation::Gelu};
  SectionModel vision(make_section("vision", {"vit", v}), cpu(), 1);
  SectionModel proj(make_section("proj", {"mlp", p}), cpu(), 1);
  SectionModel audio(make_section("audio", {"audio_encoder", a}), cpu(), 1);
  SectionModel llm(make_section("llm", llama(2, 32, 4, 2, 48, 29), Mode::Train, false,
                                {{LossKind::CrossEntropy, 1.0, 1.0}}),
                   cpu(), 1);
  int seed = 20;
  for (SectionModel* m : {&vision, &proj, &audio, &llm}) {
    randomize(*m, seed++);
    m->zero_grads();
  }
  // Samples: 0 image + text, 1 audio + text, 2 two images + audio + text, 3 text.
  const std::vector<std::vector<int32_t>> tokens{random_tokens(6, 1, 29), random_tokens(4, 2, 29),
                                                 random_tokens(5, 3, 29), random_tokens(9, 4, 29)};
  const std::vector<float> px0 = random_floats(3 * 64, 5), px2 = random_floats(2 * 3 * 64, 6);
  const std::vector<float> mel1 = random_floats(7 * 8, 7), mel2 = random_floats(10 * 8, 8);
  const int64_t n_global = 5 + 3 + 4 + 8;

  // Forward in dependency order.
  std::vector<SampleInput> vin(2), ain(2), pin(2), lin(4);
  vin[0].values = span_of(px0);
  vin[1].values = span_of(px2);
  ForwardOutput vf = vision.forward(vin);
  // Outputs reach the next model through the host, as the runtime hands them on.
  const std::vector<float> v0 = host_of(vf.outputs[0]), v1 = host_of(vf.outputs[1]);
  pin[0].values = span_of(v0);
  pin[1].values = span_of(v1);
  ForwardOutput pf = proj.forward(pin);
  ain[0].values = span_of(mel1);
  ain[1].values = span_of(mel2);
  ForwardOutput af = audio.forward(ain);
  for (int i = 0; i < 4; ++i) lin[i].tokens = tokens[i];
  const std::vector<float> p0 = host_of(pf.outputs[0]), p1 = host_of(pf.outputs[1]);
  const std::vector<float> a0 = host_of(af.outputs[0]), a1 = host_of(af.outputs[1]);
  lin[0].spliced = {span_of(p0)};
  lin[1].spliced = {span_of(a0)};
  lin[2].spliced = {span_of(p1), span_of(a1)};  // flow order: vision_proj, then audio
  ForwardOutput lf = llm.forward(lin);
  const double loss = llm.loss(*lf.context, {}, n_global);
  // Backward in reverse.
  auto dl = llm.backward(*lf.context, {});
  const std::vector<float> dl00 = host_of(dl[0][0]), dl20 = host_of(dl[2][0]);
  const std::vector<float> dl10 = host_of(dl[1][0]), dl21 = host_of(dl[2][1]);
  auto dp = proj.backward(*pf.context, {span_of(dl00), span_of(dl20)});
  const std::vector<float> dp0 = host_of(dp[0][0]), dp1 = host_of(dp[1][0]);
  vision.backward(*vf.context, {span_of(dp0), span_of(dp1)});
  audio.backward(*af.context, {span_of(dl10), span_of(dl21)});

  OracleCase c;
  for (SectionModel* m : {&vision, &proj, &audio, &llm}) c.add_model(*m);
  c.json["order"] = {"vision", "proj", "audio", "llm"};
  c.add_input("px0", px0);
  c.add_input("px2", px2);
  c.add_input("mel1", mel1);
  c.add_input("mel2", mel2);
  using J = nlohmann::json;
  const J from_proj = {{"model", "proj"}}, from_audio = {{"model", "audio"}};
  c.json["samples"] = J::array(
      {{{"vision", {{"input", "px0"}}}, {"proj", {{"model", "vision"}}},
        {"llm", {{"tokens", tokens[0]}, {"splice", J::array({from_proj})}}}},
       {{"audio", {{"input", "mel1"}}}, {"llm", {{"tokens", tokens[1]}, {"splice", J::array({from_audio})}}}},
       {{"vision", {{"input", "px2"}}}, {"proj", {{"model", "vision"}}}, {"audio", {{"input", "mel2"}}},
        {"llm", {{"tokens", tokens[2]}, {"splice", J::array({from_proj, from_audio})}}}},
       {{"llm", {{"tokens", tokens[3]}}}}});
  c.json["loss"] = {{"model", "llm"}, {"terms", {{{"kind", "ce"}, {"weight", 1.0}}}}, {"n_global", n_global}};
  Reference ref = c.run("mllm");

  const float got_loss = float(loss);
  check_close("loss", &got_loss, 1, ref, "loss", 1e-5);
  check_close("llm logits of sample 2", lf.logits[2].data, lf.logits[2].values().size(), ref, "logits.llm.2");
  for (SectionModel* m : {&vision, &proj, &audio, &llm}) check_grads(*m, ref);
}

BOOST_AUTO_TEST_CASE(distillation_matches_torch, *kOracle) {
  SectionModel teacher(make_section("teacher", llama(2, 32, 4, 4, 48, 31), Mode::Frozen), cpu(), 1);
  SectionModel student(make_section("student", llama(1, 16, 2, 1, 24, 31), Mode::Train, false,
                                    {{LossKind::CrossEntropy, 1.0, 1.0}, {LossKind::KL, 0.5, 2.0}}),
                       cpu(), 2);
  randomize(teacher, 30);
  randomize(student, 31);
  student.zero_grads();
  BOOST_CHECK(teacher.grads() == nullptr);
  BOOST_CHECK_EQUAL(teacher.grad_count(), 0u);
  const std::vector<std::vector<int32_t>> tokens{random_tokens(11, 1, 31), random_tokens(6, 2, 31)};
  std::vector<SampleInput> in(2);
  for (int i = 0; i < 2; ++i) in[i].tokens = tokens[i];
  ForwardOutput tf = teacher.forward(in);
  ForwardOutput sf = student.forward(in);
  const int64_t n_global = 10 + 5;
  const std::vector<float> t0 = host_of(tf.logits[0]), t1 = host_of(tf.logits[1]);
  const double loss = student.loss(*sf.context, {span_of(t0), span_of(t1)}, n_global);
  student.backward(*sf.context, {});

  OracleCase c;
  c.add_model(teacher);
  c.add_model(student);
  c.json["order"] = {"teacher", "student"};
  for (int i = 0; i < 2; ++i)
    c.json["samples"].push_back({{"teacher", {{"tokens", tokens[i]}}}, {"student", {{"tokens", tokens[i]}}}});
  c.json["loss"] = {{"model", "student"},
                    {"teacher", "teacher"},
                    {"terms", {{{"kind", "ce"}, {"weight", 1.0}}, {{"kind", "kl"}, {"weight", 0.5}, {"temperature", 2.0}}}},
                    {"n_global", n_global}};
  Reference ref = c.run("kd");
  check_close("teacher logits", tf.logits[0].data, tf.logits[0].values().size(), ref, "logits.teacher.0");
  const float got_loss = float(loss);
  check_close("loss", &got_loss, 1, ref, "loss", 1e-5);
  check_grads(student, ref);
}

BOOST_AUTO_TEST_SUITE_END()
