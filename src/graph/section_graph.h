// SectionGraph: the Program's sections as a graph — topological order,
// producers and consumers with their flow kinds, which sections carry a loss,
// which modalities each touches, and on which samples each is active. It
// also answers how many tokens a sample puts through a section. No
// scheduling here (that is plan/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsl/program.h"

namespace maestro {

struct GraphEdge {
  int from = 0, to = 0;  // node indices
  FlowKind kind = FlowKind::Activations;
};

struct SectionNode {
  std::string name;
  std::vector<int> producers;  // edge indices into SectionGraph::edges, flow declaration order
  std::vector<int> consumers;  // edge indices
  ModalitySet touches;         // its `consumes` plus what reaches it through activations flows
  bool has_loss = false;
  int64_t params = 0;
  uint32_t active_mask = 0;    // bit b: active on a sample whose modality set has bits b
};

// The sizes of one sample a section's token count depends on (a Sample's
// fields, without depending on data/).
struct SampleSizes {
  ModalitySet modalities;
  int64_t text_tokens = 0, images = 0, audio_frames = 0;
};

struct SectionGraph {
  const Program* program = nullptr;  // the graph refers to it; it must outlive the graph
  std::vector<SectionNode> nodes;    // same order as program->sections
  std::vector<GraphEdge> edges;      // same order as program->flows
  std::vector<int> topo_order;       // producers before consumers; ties in declaration order
  std::vector<int> loss_sections;    // nodes with a loss, declaration order

  const Section& section(int node) const { return program->sections[node]; }
  int find(const std::string& name) const;  // -1 when absent
  // The section runs on a sample with these modalities: its `when` holds,
  // and — for a section that consumes no modality of its own but has
  // producers (a projector) — at least one producer is active: a projector
  // whose `when` defaults to "always" has nothing to project on a sample no
  // encoder ran on. The one rule the planner, the scheduler and the runtime
  // share.
  bool active(int node, ModalitySet sample) const { return (nodes[node].active_mask >> sample.bits) & 1u; }
  // The edge's producer output reaches its consumer: both are active.
  bool carries(int edge, ModalitySet sample) const;
  // Tokens of the sample in the section (architecture.md "Definitions"):
  // text → text_tokens; vit → images × (image/patch)²; audio → audio_frames /
  // frames_per_token; mlp → the tokens of its active producers; a consumer
  // of activations flows → its text tokens plus every spliced embedding,
  // capped at max_seq by cutting text. 0 when the section is not active.
  int64_t tokens(int node, const SampleSizes& sample) const;
  // Rows the section hands each of its outgoing flows for the sample: a
  // transformer's text tokens (it emits its text positions only, as hidden
  // states or logits), every other model's tokens().
  int64_t emitted(int node, const SampleSizes& sample) const;
  // Embeddings spliced into the section's sequence for the sample: Σ
  // emitted() over the producers of its incoming activations flows.
  int64_t spliced(int node, const SampleSizes& sample) const;
  // Sum of parameters over all sections.
  int64_t total_params() const;
};

// Builds the graph; throws std::invalid_argument on a flow naming an unknown
// section or a cycle (the front end reports these first, with places).
SectionGraph build_graph(const Program& program);

}  // namespace maestro
