// SectionGraph topology, activity and per-sample tokens on a Program shaped
// like models/tiny_mllm.sect (built directly, without the parser).
#include <boost/test/unit_test.hpp>

#include "graph/model_tensors.h"
#include "graph/section_graph.h"
#include "support/test_programs.h"

using namespace maestro;
using namespace maestro::test;

namespace {

ModelSpec mlp(int64_t in, int64_t out) {
  MlpSpec m;
  m.in = in, m.out = out, m.hidden = out;
  return {"mlp", m};
}

Flow flow(std::string from, std::string to) {
  Flow f;
  f.from = std::move(from), f.to = std::move(to);
  return f;
}

// Declared out of topological order on purpose: llm first.
Program tiny_mllm() {
  TransformerSpec llm;
  llm.layers = 2, llm.hidden = 128, llm.heads = 4, llm.kv_heads = 4, llm.ffn = 384, llm.vocab = 256, llm.max_seq = 512;
  VitSpec vision;
  vision.layers = 2, vision.hidden = 64, vision.heads = 4, vision.ffn = 256, vision.patch = 4, vision.image = 16;
  AudioEncoderSpec audio;
  audio.layers = 2, audio.hidden = 64, audio.heads = 4, audio.ffn = 256, audio.mel_bins = 16;
  Program p;
  p.sections.push_back(section("llm", {"transformer", llm}, {Modality::Text}, {}));
  p.sections.back().loss.push_back({});
  p.sections.push_back(section("vision", {"vit", vision}, {Modality::Image}, Condition::has(Modality::Image)));
  p.sections.push_back(section("vision_proj", mlp(64, 128), {}, {}));
  p.sections.push_back(section("audio", {"audio_encoder", audio}, {Modality::Audio}, Condition::has(Modality::Audio)));
  p.sections.push_back(section("audio_proj", mlp(64, 128), {}, {}));
  for (auto [from, to] : {std::pair{"vision", "vision_proj"}, {"vision_proj", "llm"}, {"audio", "audio_proj"},
                          {"audio_proj", "llm"}})
    p.flows.push_back(flow(from, to));
  return p;
}

ModalitySet set(std::initializer_list<Modality> ms) {
  ModalitySet s;
  for (Modality m : ms) s.add(m);
  return s;
}

int bits(std::initializer_list<Modality> ms) { return set(ms).bits; }

}  // namespace

BOOST_AUTO_TEST_SUITE(section_graph)

BOOST_AUTO_TEST_CASE(topology) {
  const Program p = tiny_mllm();
  const SectionGraph g = build_graph(p);
  BOOST_TEST(g.nodes.size() == 5u);
  BOOST_TEST(g.edges.size() == 4u);
  // ready nodes are taken in declaration order: vision, vision_proj, audio, audio_proj, llm
  BOOST_TEST(g.topo_order == (std::vector<int>{1, 2, 3, 4, 0}));
  BOOST_TEST(g.loss_sections == std::vector<int>{0});
  const int llm = g.find("llm");
  BOOST_TEST(g.nodes[llm].producers.size() == 2u);
  BOOST_TEST(g.edges[g.nodes[llm].producers[0]].from == g.find("vision_proj"));
  BOOST_TEST(g.nodes[llm].consumers.empty());
  BOOST_TEST(g.nodes[g.find("vision")].consumers.size() == 1u);
  BOOST_TEST(g.find("nope") == -1);
  BOOST_TEST(g.nodes[llm].touches.bits == bits({Modality::Text, Modality::Image, Modality::Audio}));
  BOOST_TEST(g.nodes[g.find("vision_proj")].touches.bits == bits({Modality::Image}));
  BOOST_TEST(g.total_params() == parameter_count(p.sections[0].model) + parameter_count(p.sections[1].model) +
                                     parameter_count(p.sections[2].model) + parameter_count(p.sections[3].model) +
                                     parameter_count(p.sections[4].model));
}

BOOST_AUTO_TEST_CASE(activity_and_flows) {
  const Program p = tiny_mllm();
  const SectionGraph g = build_graph(p);
  const ModalitySet text = set({Modality::Text}), image_text = set({Modality::Image, Modality::Text});
  BOOST_TEST(g.active(g.find("llm"), text));
  BOOST_TEST(!g.active(g.find("vision"), text));
  BOOST_TEST(g.active(g.find("vision"), image_text));
  // A projector's `when` is "always", but it runs only where a producer does.
  BOOST_TEST(!g.active(g.find("vision_proj"), text));
  BOOST_TEST(g.active(g.find("vision_proj"), image_text));
  BOOST_TEST(!g.active(g.find("audio_proj"), image_text));
  BOOST_TEST(!g.carries(0, text));
  BOOST_TEST(g.carries(0, image_text));
}

BOOST_AUTO_TEST_CASE(tokens_per_sample) {
  const Program p = tiny_mllm();
  const SectionGraph g = build_graph(p);
  SampleSizes s{set({Modality::Image, Modality::Text}), 40, 2, 0};
  BOOST_TEST(g.tokens(g.find("vision"), s) == 2 * 16);  // (16/4)² patches per image
  BOOST_TEST(g.tokens(g.find("vision_proj"), s) == 32);
  BOOST_TEST(g.tokens(g.find("audio"), s) == 0);
  BOOST_TEST(g.tokens(g.find("audio_proj"), s) == 0);
  BOOST_TEST(g.tokens(g.find("llm"), s) == 40 + 32);
  SampleSizes a{set({Modality::Audio, Modality::Text}), 10, 0, 101};
  BOOST_TEST(g.tokens(g.find("audio"), a) == 50);  // 101 frames / 2 per token
  BOOST_TEST(g.tokens(g.find("llm"), a) == 60);
  SampleSizes long_text{set({Modality::Image, Modality::Text}), 600, 1, 0};
  BOOST_TEST(g.tokens(g.find("llm"), long_text) == 512);  // text cut to max_seq, the 16 image tokens kept
}

// A transformer hands on its text positions only: an LLM that splices an
// image and feeds a projector emits its (cut) text, not its whole sequence.
BOOST_AUTO_TEST_CASE(a_transformer_emits_its_text_rows) {
  Program p = tiny_mllm();
  p.sections.push_back(section("head", mlp(128, 128), {}, {}));
  p.flows.push_back(flow("llm", "head"));
  const SectionGraph g = build_graph(p);
  const int llm = g.find("llm"), head = g.find("head");
  SampleSizes s{set({Modality::Image, Modality::Text}), 40, 2, 0};
  BOOST_TEST(g.spliced(llm, s) == 32);
  BOOST_TEST(g.tokens(llm, s) == 40 + 32);
  BOOST_TEST(g.emitted(llm, s) == 40);
  BOOST_TEST(g.tokens(head, s) == 40);
  BOOST_TEST(g.emitted(g.find("vision"), s) == 32);  // an encoder emits what it computes
  SampleSizes long_text{set({Modality::Image, Modality::Text}), 600, 1, 0};
  BOOST_TEST(g.emitted(llm, long_text) == 512 - 16);  // the text kept after the cut
}

BOOST_AUTO_TEST_CASE(bad_graphs_throw) {
  Program p = tiny_mllm();
  p.flows.push_back(flow("llm", "vision"));
  BOOST_CHECK_THROW(build_graph(p), std::invalid_argument);
  p = tiny_mllm();
  p.flows.push_back(flow("llm", "ghost"));
  BOOST_CHECK_THROW(build_graph(p), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
