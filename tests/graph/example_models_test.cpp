// The graph of every example model, loaded through the real front end:
// topological order respects every flow, losses are where the files put
// them, and the parameter totals match the published sizes.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <filesystem>

#include "dsl/frontend.h"
#include "graph/section_graph.h"
#include "support/test_programs.h"

using namespace maestro;
using namespace maestro::test;

namespace {
}  // namespace

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

BOOST_AUTO_TEST_SUITE_END()
