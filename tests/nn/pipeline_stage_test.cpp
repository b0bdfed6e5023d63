// Pipeline stages: a model split into 2 or 3 SectionModels by layer range
// (graph/model_tensors.h) computes exactly what the whole model computes —
// outputs, loss, every parameter gradient and the spliced blocks' gradients
// — with each stage holding only its own tensors. Bitwise: a stage runs the
// same ops on the same numbers, only in separate contexts.
#include <boost/test/unit_test.hpp>

#include <map>

#include "graph/model_tensors.h"
#include "oracle_harness.h"

using namespace maestro;
using namespace maestro::test;

namespace {

// name -> [first float, numel] in a model's flat buffers.
std::map<std::string, std::pair<int64_t, int64_t>> layout(const SectionModel& m) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (const TensorShape& t : m.tensors()) {
    out[t.name] = {at, t.numel()};
    at += t.numel();
  }
  return out;
}

// Copies the whole model's parameters into a stage, by name.
void copy_params(SectionModel& whole, SectionModel& stage) {
  const auto from = layout(whole);
  for (const auto& [name, slot] : layout(stage)) {
    const auto& [at, n] = from.at(name);
    std::copy(whole.params() + at, whole.params() + at + n, stage.params() + slot.first);
  }
}

// Every gradient of the stage equals the whole model's, bitwise.
void check_grads_equal(SectionModel& whole, SectionModel& stage) {
  const auto from = layout(whole);
  for (const auto& [name, slot] : layout(stage)) {
    const auto& [at, n] = from.at(name);
    bool same = std::equal(whole.grads() + at, whole.grads() + at + n, stage.grads() + slot.first);
    BOOST_CHECK_MESSAGE(same, "stage " << stage.stage() << " of " << stage.stages() << ": gradient of " << name);
  }
}

bool same_rows(const RowsView& a, const RowsView& b) {
  return a.rows == b.rows && a.cols == b.cols && std::equal(a.data, a.data + a.rows * a.cols, b.data);
}

// Runs `whole` and the same model split into `stages` pipeline stages on one
// micro-batch (forward stage to stage, the loss on the last when the
// section has one, backward last to first) and compares everything.
void check_split(const Section& sec, int64_t stages, const std::vector<SampleInput>& in,
                 const std::vector<std::vector<float>>& out_grads) {
  BOOST_TEST_CONTEXT(sec.name << " in " << stages << " stages") {
    SectionModel whole(sec, cpu(), 3);
    randomize(whole, 11);
    whole.zero_grads();
    std::vector<std::unique_ptr<SectionModel>> parts;
    int64_t params = 0;
    for (int64_t k = 0; k < stages; ++k) {
      parts.push_back(std::make_unique<SectionModel>(sec, cpu(), 3, k, stages));
      copy_params(whole, *parts.back());
      parts.back()->zero_grads();
      params += parts.back()->parameter_count();
    }
    BOOST_CHECK_EQUAL(params, whole.parameter_count());  // every tensor on exactly one stage
    std::vector<std::span<const float>> grads;
    for (const auto& g : out_grads) grads.push_back(span_of(g));

    ForwardOutput w = whole.forward(in);
    const bool has_loss = !sec.loss.empty();
    const double wloss = has_loss ? whole.loss(*w.context, {}, 40) : 0.0;
    auto wdin = whole.backward(*w.context, grads);

    std::vector<ForwardOutput> fw;
    std::vector<float> hidden;  // the previous stage's output, handed on through the host as the runtime does
    for (int64_t k = 0; k < stages; ++k) {
      StageInput si;
      if (k > 0) {
        hidden = host_of(fw.back().hidden);
        si = {span_of(hidden), fw.back().geometry};
      }
      fw.push_back(parts[size_t(k)]->forward(in, k > 0 ? &si : nullptr));
      if (k + 1 < stages) {
        BOOST_CHECK(fw.back().outputs.empty());
        BOOST_CHECK(fw.back().geometry != nullptr);
      }
    }
    const ForwardOutput& last = fw.back();
    BOOST_REQUIRE_EQUAL(last.outputs.size(), w.outputs.size());
    for (size_t i = 0; i < w.outputs.size(); ++i)
      BOOST_CHECK_MESSAGE(same_rows(last.outputs[i], w.outputs[i]), "output of sample " << i);
    BOOST_REQUIRE_EQUAL(last.logits.size(), w.logits.size());
    for (size_t i = 0; i < w.logits.size(); ++i)
      BOOST_CHECK_MESSAGE(same_rows(last.logits[i], w.logits[i]), "logits of sample " << i);
    if (has_loss) BOOST_CHECK_EQUAL(parts.back()->loss(*last.context, {}, 40), wloss);
    std::vector<std::vector<RowsView>> din;
    std::span<const float> dhidden;
    std::vector<float> dhidden_host;
    for (int64_t k = stages - 1; k >= 0; --k) {
      din = parts[size_t(k)]->backward(*fw[size_t(k)].context, k == stages - 1 ? grads
                                                                             : std::vector<std::span<const float>>{},
                                       dhidden);
      if (k > 0) {
        const RowsView d = SectionModel::stage_input_grad(*fw[size_t(k)].context);
        BOOST_CHECK_EQUAL(d.rows, fw[size_t(k - 1)].hidden.rows);
        dhidden_host = host_of(d);
        dhidden = span_of(dhidden_host);
      }
    }
    for (auto& p : parts) check_grads_equal(whole, *p);
    BOOST_REQUIRE_EQUAL(din.size(), wdin.size());
    for (size_t i = 0; i < din.size(); ++i) {
      BOOST_REQUIRE_EQUAL(din[i].size(), wdin[i].size());
      for (size_t b = 0; b < din[i].size(); ++b)
        BOOST_CHECK_MESSAGE(same_rows(din[i][b], wdin[i][b]), "input gradient " << b << " of sample " << i);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(pipeline_stages)

BOOST_AUTO_TEST_CASE(stage_layers_split_by_layer_count) {
  const ModelSpec m = llama(5, 8, 2, 2, 8, 11, 16);
  BOOST_CHECK_EQUAL(stage_layers(m, 0, 2).first, 0);
  BOOST_CHECK_EQUAL(stage_layers(m, 0, 2).last, 2);
  BOOST_CHECK_EQUAL(stage_layers(m, 1, 2).first, 2);
  BOOST_CHECK_EQUAL(stage_layers(m, 1, 2).last, 5);
  BOOST_CHECK_THROW(stage_layers(m, 0, 6), std::invalid_argument);  // more stages than layers
  BOOST_CHECK_THROW(stage_layers(m, 2, 2), std::invalid_argument);
  // Stage 0 starts with the embedding, the last ends with the head.
  BOOST_CHECK_EQUAL(stage_tensors(m, 0, 2).front().name, "model.embed_tokens.weight");
  BOOST_CHECK_EQUAL(stage_tensors(m, 0, 2).back().name, "model.layers.1.mlp.down_proj.weight");
  BOOST_CHECK_EQUAL(stage_tensors(m, 1, 2).front().name, "model.layers.2.input_layernorm.weight");
  BOOST_CHECK_EQUAL(stage_tensors(m, 1, 2).back().name, "lm_head.weight");
  MlpSpec p;
  p.in = 4;
  p.out = 4;
  p.hidden = 4;
  BOOST_CHECK_THROW(stage_layers(ModelSpec{"mlp", p}, 0, 2), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(transformer_stages_equal_the_whole_model) {
  const ModelSpec m = llama(3, 32, 4, 2, 48, 37, 16);
  std::vector<std::vector<int32_t>> tokens{random_tokens(7, 1, 37), random_tokens(5, 2, 37), random_tokens(20, 3, 37)};
  std::vector<float> splice_a = random_floats(3 * 32, 4), splice_b = random_floats(2 * 32, 5);
  std::vector<SampleInput> in(3);
  for (int i = 0; i < 3; ++i) in[i].tokens = tokens[i];
  in[1].spliced = {span_of(splice_a), span_of(splice_b)};
  const std::vector<std::vector<float>> g{random_floats(7 * 32, 6, 0.05f), {}, {}};  // on sample 0's hidden states
  for (int64_t recompute : {0, 2, 3}) {  // layers of 3: none, two (spread over the stages), all
    Section sec = make_section("llm", m, Mode::Train, false, {{LossKind::CrossEntropy, 1.0, 1.0}});
    sec.recompute = recompute;
    check_split(sec, 2, in, g);
    check_split(sec, 3, in, g);
  }
}

BOOST_AUTO_TEST_CASE(encoder_stages_equal_the_whole_model) {
  std::vector<float> two_images = random_floats(2 * 3 * 12 * 12, 1), one_image = random_floats(3 * 12 * 12, 2);
  std::vector<SampleInput> vin(2);
  vin[0].values = span_of(two_images);
  vin[1].values = span_of(one_image);
  check_split(make_section("vision", small_vit(2), Mode::Train), 2, vin,
              {random_floats(2 * 9 * 24, 3), random_floats(9 * 24, 4)});

  std::vector<float> clip_a = random_floats(9 * 10, 5), clip_b = random_floats(4 * 10, 6);  // 4 and 2 tokens
  std::vector<SampleInput> ain(2);
  ain[0].values = span_of(clip_a);
  ain[1].values = span_of(clip_b);
  for (int64_t stages : {2, 3})
    check_split(make_section("audio", small_audio(3), Mode::Train), stages, ain,
                {random_floats(4 * 24, 7), random_floats(2 * 24, 8)});
}

BOOST_AUTO_TEST_CASE(a_later_stage_without_its_input_is_an_error) {
  const Section sec = make_section("llm", llama(2, 8, 2, 2, 8, 11, 16));
  SectionModel second(sec, cpu(), 1, 1, 2);
  std::vector<int32_t> tok{1, 2, 3};
  std::vector<SampleInput> in(1);
  in[0].tokens = tok;
  BOOST_CHECK_THROW(second.forward(in), std::invalid_argument);
  SectionModel first(sec, cpu(), 1, 0, 2);
  ForwardOutput f = first.forward(in);
  std::vector<float> short_hidden(f.hidden.values().begin(), f.hidden.values().end() - 1);
  StageInput bad{span_of(short_hidden), f.geometry};
  BOOST_CHECK_THROW(second.forward(in, &bad), std::invalid_argument);
  BOOST_CHECK_THROW(SectionModel(sec, cpu(), 1, 0, 3), std::invalid_argument);  // 2 layers, 3 stages
}

BOOST_AUTO_TEST_SUITE_END()
