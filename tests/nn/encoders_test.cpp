// vit, audio_encoder and mlp against the PyTorch oracle: outputs and every
// parameter gradient under a random upstream gradient, on packed
// micro-batches (a sample with two images; clips with a frame remainder;
// each mlp activation), without recompute, with half the layers recomputed and with all.
#include <boost/test/unit_test.hpp>

#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

namespace {

// Runs the forward, a backward with random output gradients, the oracle,
// and checks outputs, parameter gradients and (mlp) input gradients.
void check_against_torch(SectionModel& m, const std::vector<std::vector<float>>& values, const std::string& tag) {
  const std::string& name = m.section().name;
  m.zero_grads();
  std::vector<SampleInput> in(values.size());
  for (size_t i = 0; i < values.size(); ++i) in[i].values = span_of(values[i]);
  ForwardOutput fw = m.forward(in);
  std::vector<std::vector<float>> grads;
  for (size_t i = 0; i < values.size(); ++i) grads.push_back(random_floats(fw.outputs[i].values().size(), 50 + i));
  std::vector<std::span<const float>> gspans;
  for (const auto& g : grads) gspans.push_back(span_of(g));
  auto dins = m.backward(*fw.context, gspans);

  OracleCase c;
  c.add_model(m);
  c.json["order"] = {name};
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string x = "x" + std::to_string(i), g = "g" + std::to_string(i);
    c.add_input(x, values[i]);
    c.add_input(g, grads[i]);
    c.json["samples"].push_back({{name, {{"input", x}}}});
    c.json["out_grads"][name][std::to_string(i)] = g;
  }
  Reference ref = c.run(tag);
  for (size_t i = 0; i < values.size(); ++i)
    check_close(name + " output " + std::to_string(i), fw.outputs[i].data, fw.outputs[i].values().size(), ref,
                "out." + name + "." + std::to_string(i));
  check_grads(m, ref);
  if (std::holds_alternative<MlpSpec>(m.section().model.spec))
    for (size_t i = 0; i < values.size(); ++i)
      check_close("d input " + std::to_string(i), dins[i].at(0).data, dins[i][0].values().size(), ref,
                  "dinput.x" + std::to_string(i));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(encoders)

BOOST_AUTO_TEST_CASE(vit_matches_torch, *kOracle) {
  for (int64_t recompute : {0, 1, 2}) {  // layers of 2: none, every other one (partial), all
    Section sec = make_section("vision", small_vit());
    sec.recompute = recompute;
    SectionModel m(sec, cpu(), 1);
    randomize(m, 11);
    const int64_t image = 3 * 12 * 12;
    check_against_torch(m, {random_floats(2 * image, 1), random_floats(image, 2)}, "vit");
  }
}

BOOST_AUTO_TEST_CASE(vit_output_drops_class_tokens) {
  SectionModel m(make_section("vision", small_vit()), cpu(), 1);
  std::vector<float> px = random_floats(2 * 3 * 12 * 12, 1);
  std::vector<SampleInput> in(1);
  in[0].values = span_of(px);
  ForwardOutput fw = m.forward(in);
  BOOST_CHECK_EQUAL(fw.outputs[0].rows, 2 * 9);  // two images of (12/4)² patches
  BOOST_CHECK_EQUAL(fw.outputs[0].cols, 24);
  std::vector<float> half = random_floats(100, 1);
  in[0].values = span_of(half);
  BOOST_CHECK_THROW(m.forward(in), std::invalid_argument);
}

// pixel_shuffle: 0.5 on 16 px images of 4 px patches: a 4×4 grid leaves as
// 2×2 tokens of 4·24 channels, checked against InternVL's pixel_shuffle.
ModelSpec shuffled_vit() {
  ModelSpec m = small_vit();
  auto& v = std::get<VitSpec>(m.spec);
  v.image = 16;
  v.merge = 2;
  return m;
}

BOOST_AUTO_TEST_CASE(vit_pixel_shuffle_matches_torch, *kOracle) {
  for (int64_t recompute : {0, 1, 2}) {  // layers of 2: none, every other one (partial), all
    Section sec = make_section("vision", shuffled_vit());
    sec.recompute = recompute;
    SectionModel m(sec, cpu(), 1);
    randomize(m, 12);
    const int64_t image = 3 * 16 * 16;
    check_against_torch(m, {random_floats(2 * image, 3), random_floats(image, 4)}, "vit_shuffle");
  }
}

BOOST_AUTO_TEST_CASE(vit_pixel_shuffle_output_shape) {
  SectionModel m(make_section("vision", shuffled_vit()), cpu(), 1);
  std::vector<float> px = random_floats(2 * 3 * 16 * 16, 1);
  std::vector<SampleInput> in(1);
  in[0].values = span_of(px);
  ForwardOutput fw = m.forward(in);
  BOOST_CHECK_EQUAL(fw.outputs[0].rows, 2 * 4);  // two images of (16/4/2)² tokens
  BOOST_CHECK_EQUAL(fw.outputs[0].cols, 4 * 24);
}

BOOST_AUTO_TEST_CASE(audio_encoder_matches_torch, *kOracle) {
  for (int64_t recompute : {0, 1, 2}) {  // layers of 2: none, every other one (partial), all
    Section sec = make_section("audio", small_audio());
    sec.recompute = recompute;
    SectionModel m(sec, cpu(), 1);
    randomize(m, 12);
    // 9 frames (4 tokens, one frame dropped) and 14 frames (7 tokens)
    check_against_torch(m, {random_floats(9 * 10, 3), random_floats(14 * 10, 4)}, "audio");
  }
}

BOOST_AUTO_TEST_CASE(audio_encoder_drops_the_frame_remainder) {
  SectionModel m(make_section("audio", small_audio()), cpu(), 1);
  std::vector<float> mel = random_floats(9 * 10, 1);
  std::vector<SampleInput> in(1);
  in[0].values = span_of(mel);
  BOOST_CHECK_EQUAL(m.forward(in).outputs[0].rows, 4);
  std::vector<float> too_long = random_floats(66 * 10, 1);
  in[0].values = span_of(too_long);
  BOOST_CHECK_THROW(m.forward(in), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(mlp_matches_torch_for_each_activation, *kOracle) {
  for (Activation act : {Activation::Gelu, Activation::Relu, Activation::Silu}) {
    MlpSpec p;
    p.in = 12;
    p.out = 20;
    p.hidden = 16;
    p.layers = 3;
    p.act = act;
    SectionModel m(make_section("proj", {"mlp", p}), cpu(), 1);
    randomize(m, 13);
    check_against_torch(m, {random_floats(5 * 12, 5), random_floats(2 * 12, 6)}, "mlp");
  }
}

BOOST_AUTO_TEST_SUITE_END()
