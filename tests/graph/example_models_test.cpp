// The graph of every example model, loaded through the real front end:
// topological order respects every flow, losses are where the files put
// them, and the parameter totals match the published sizes.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "dsl/frontend.h"
#include "graph/model_tensors.h"
#include "graph/section_graph.h"
#include "support/test_programs.h"

using namespace maestro;
using namespace maestro::test;

BOOST_AUTO_TEST_SUITE(example_models)

BOOST_AUTO_TEST_CASE(topological_order_respects_every_flow) {
  for (const auto& e : std::filesystem::directory_iterator("models")) {
    if (e.path().extension() != ".sect") continue;
    const Program p = load(e.path().string());
    const SectionGraph g = build_graph(p);
    std::vector<int> position(g.nodes.size());
    for (size_t i = 0; i < g.topo_order.size(); ++i) position[g.topo_order[i]] = int(i);
    for (const GraphEdge& edge : g.edges) BOOST_TEST(position[edge.from] < position[edge.to], e.path());
    BOOST_TEST(!g.loss_sections.empty(), e.path());
  }
}

BOOST_AUTO_TEST_CASE(llava) {
  const Program p = load("models/llava15_7b.sect");
  const SectionGraph g = build_graph(p);
  BOOST_TEST(g.nodes[g.find("vision")].params == 303'507'456);
  BOOST_TEST(g.nodes[g.find("llm")].params == 6'738'415'616);
  BOOST_TEST(g.loss_sections == std::vector<int>{g.find("llm")});
  // one 336 px image is 576 tokens; with 700 text tokens the LLM sees 1276
  ModalitySet image_text;
  image_text.add(Modality::Image);
  image_text.add(Modality::Text);
  BOOST_TEST(g.tokens(g.find("projector"), {image_text, 700, 1, 0}) == 576);
  BOOST_TEST(g.tokens(g.find("llm"), {image_text, 700, 1, 0}) == 1276);
}

BOOST_AUTO_TEST_CASE(distillation_logits_flow) {
  const Program p = load("models/kd_70b_to_8b.sect");
  const SectionGraph g = build_graph(p);
  BOOST_TEST(g.edges.size() == 1u);
  BOOST_TEST((g.edges[0].kind == FlowKind::Logits));
  BOOST_TEST(g.topo_order == (std::vector<int>{g.find("teacher"), g.find("student")}));
  // a logits flow splices nothing: the student sees its own text only
  ModalitySet text;
  text.add(Modality::Text);
  BOOST_TEST(g.tokens(g.find("student"), {text, 1800, 0, 0}) == 1800);
}

// Published counts (docs/graph.md): within `tol` relative; where the only
// difference is a stated shape difference, the count is also checked exactly.
void near_published(int64_t count, double published, double tol, const std::string& what) {
  BOOST_TEST(std::abs(double(count) - published) / published <= tol, what << ": " << count << " vs " << published);
}

ModalitySet with(std::initializer_list<Modality> ms) {
  ModalitySet s;
  for (Modality m : ms) s.add(m);
  return s;
}

BOOST_AUTO_TEST_CASE(internvl_26b_published_counts) {
  const Program p = load("models/internvl_26b.sect");
  const SectionGraph g = build_graph(p);
  const int64_t vision = g.nodes[g.find("vision")].params, llm = g.nodes[g.find("llm")].params;
  const int64_t projector = g.nodes[g.find("projector")].params;
  BOOST_TEST(vision == 5'536'649'600);
  near_published(vision, 5'540e6, 0.001, "InternViT-6B-448px-V1.5 (45 blocks)");
  BOOST_TEST(llm == 19'861'149'696);  // InternLM2-20B's shapes, no biases: exact
  BOOST_TEST(projector == 116'429'824 - 25'600);  // InternVL's mlp1 less its LayerNorm(12800)
  near_published(g.total_params(), 25.5e9, 0.002, "InternVL-Chat-V1.5 (26B)");
  // InternViT-6B as trained, 48 blocks: 5,903 M published.
  VitSpec v48 = std::get<VitSpec>(p.sections[size_t(g.find("vision"))].model.spec);
  v48.layers = 48;
  BOOST_TEST(parameter_count({"vit", v48}) == 5'905'414'400);
  near_published(parameter_count({"vit", v48}), 5'903e6, 0.001, "InternViT-6B (48 blocks)");
  // 448/14 = 32×32 patches, pixel-shuffled 0.5: 256 tokens of 12,800 per tile.
  const auto& v = std::get<VitSpec>(p.sections[size_t(g.find("vision"))].model.spec);
  BOOST_TEST(v.merge == 2);
  BOOST_TEST(p.sections[size_t(g.find("vision"))].model.output_width() == 12800);
  BOOST_TEST(g.tokens(g.find("vision"), {with({Modality::Image, Modality::Text}), 300, 12, 0}) == 12 * 256);
  BOOST_TEST(g.tokens(g.find("projector"), {with({Modality::Image, Modality::Text}), 300, 1, 0}) == 256);
  // 12 tiles = 3,072 tokens; max_seq 4096 leaves 1,024 of 2,000 text tokens
  BOOST_TEST(g.tokens(g.find("llm"), {with({Modality::Image, Modality::Text}), 2000, 12, 0}) == 4096);
  BOOST_TEST(g.tokens(g.find("llm"), {with({Modality::Text}), 300, 0, 0}) == 300);
}

BOOST_AUTO_TEST_CASE(video_7b_frames_reach_the_llm) {
  const Program p = load("models/video_7b.sect");
  const SectionGraph g = build_graph(p);
  BOOST_TEST(g.nodes[g.find("vision")].params == 303'507'456);  // CLIP ViT-L/14-336
  BOOST_TEST(g.nodes[g.find("llm")].params == 7'615'616'512 - 129'024);  // Qwen2-7B less q/k/v biases
  // 64 frames × (24/2)² = 9,216 tokens, + the text
  const SampleSizes video{with({Modality::Video, Modality::Image, Modality::Text}), 250, 64, 0};
  BOOST_TEST(g.tokens(g.find("vision"), video) == 64 * 144);
  BOOST_TEST(g.tokens(g.find("llm"), video) == 64 * 144 + 250);
  BOOST_TEST(p.data.video_frames.has_value());
}

BOOST_AUTO_TEST_CASE(omni_whisper_7b_counts_and_tokens) {
  const Program p = load("models/omni_whisper_7b.sect");
  const SectionGraph g = build_graph(p);
  // Whisper-large-v3's encoder is 636,968,960 parameters; ours replaces the two
  // convolutions (5,409,280) and the position table (1,920,000) with one
  // linear frame embedding (128·2·1280 + 1280).
  BOOST_TEST(g.nodes[g.find("audio")].params == 636'968'960 - 5'409'280 - 1'920'000 + 327'680 + 1'280);
  near_published(g.nodes[g.find("audio")].params, 636'968'960, 0.012, "Whisper-large-v3 encoder");
  // 30 s = 3,000 mel frames = 1,500 positions
  BOOST_TEST(g.tokens(g.find("audio"), {with({Modality::Audio, Modality::Text}), 100, 0, 3000}) == 1500);
  // a video with its sound track: 16 frames × 256 + 800 frames / 2 + text
  const SampleSizes av{with({Modality::Audio, Modality::Video, Modality::Image, Modality::Text}), 100, 16, 800};
  BOOST_TEST(g.tokens(g.find("llm"), av) == 16 * 256 + 400 + 100);
}

BOOST_AUTO_TEST_CASE(kd_32b_to_1_5b_published_counts) {
  const Program p = load("models/kd_32b_to_1_5b.sect");
  const SectionGraph g = build_graph(p);
  const int64_t teacher = g.nodes[g.find("teacher")].params, student = g.nodes[g.find("student")].params;
  BOOST_TEST(teacher == 32'763'876'352 - 458'752);  // Qwen2.5-32B less q/k/v biases
  near_published(teacher, 32'763'876'352, 0.0001, "Qwen2.5-32B");
  // Qwen2.5-1.5B: + untied head (152,064 × 1,536), + 128 padded rows, − biases
  BOOST_TEST(student == 1'543'714'304 + 152'064 * 1'536 + 128 * 1'536 - 57'344);
  BOOST_TEST(teacher / student >= 2);
  BOOST_TEST(teacher / student <= 20);
  BOOST_TEST(p.train.optimizer.shard);
}

BOOST_AUTO_TEST_SUITE_END()
