// Program → SectionGraph (section_graph.h).
#include "graph/section_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "graph/model_tensors.h"

namespace maestro {

int SectionGraph::find(const std::string& name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == name) return int(i);
  return -1;
}

bool SectionGraph::carries(int edge, ModalitySet sample) const {
  return active(edges[edge].from, sample) && active(edges[edge].to, sample);
}

int64_t SectionGraph::tokens(int node, const SampleSizes& sample) const {
  if (!active(node, sample.modalities)) return 0;
  const Section& s = section(node);
  const auto consumes = [&](Modality m) { return std::find(s.consumes.begin(), s.consumes.end(), m) != s.consumes.end(); };
  if (auto* v = std::get_if<VitSpec>(&s.model.spec))
    return sample.modalities.has(Modality::Image) ? sample.images * v->tokens_per_image() : 0;
  if (auto* a = std::get_if<AudioEncoderSpec>(&s.model.spec))
    return sample.modalities.has(Modality::Audio) ? sample.audio_frames / a->frames_per_token : 0;
  const int64_t spliced = this->spliced(node, sample);
  if (std::holds_alternative<MlpSpec>(s.model.spec)) return spliced;
  const auto& t = std::get<TransformerSpec>(s.model.spec);
  const int64_t text = consumes(Modality::Text) && sample.modalities.has(Modality::Text) ? sample.text_tokens : 0;
  return spliced + std::max<int64_t>(0, std::min(text, t.max_seq - spliced));
}

int64_t SectionGraph::spliced(int node, const SampleSizes& sample) const {
  int64_t n = 0;
  for (int e : nodes[node].producers)
    if (edges[e].kind == FlowKind::Activations && carries(e, sample.modalities)) n += emitted(edges[e].from, sample);
  return n;
}

int64_t SectionGraph::emitted(int node, const SampleSizes& sample) const {
  const int64_t all = tokens(node, sample);
  if (!std::holds_alternative<TransformerSpec>(section(node).model.spec) || all == 0) return all;
  return all - spliced(node, sample);
}

int64_t SectionGraph::total_params() const {
  int64_t n = 0;
  for (const auto& node : nodes) n += node.params;
  return n;
}

SectionGraph build_graph(const Program& program) {
  SectionGraph g;
  g.program = &program;
  for (const Section& s : program.sections) {
    SectionNode node;
    node.name = s.name;
    node.has_loss = !s.loss.empty();
    node.params = parameter_count(s.model);
    for (Modality m : s.consumes) node.touches.add(m);
    g.nodes.push_back(std::move(node));
  }
  for (const Flow& f : program.flows) {
    const int from = g.find(f.from), to = g.find(f.to);
    if (from < 0 || to < 0)
      throw std::invalid_argument(fmt::format("flow {} -> {} names an unknown section", f.from, f.to));
    g.nodes[from].consumers.push_back(int(g.edges.size()));
    g.nodes[to].producers.push_back(int(g.edges.size()));
    g.edges.push_back({from, to, f.kind});
  }
  // Kahn's algorithm, always taking the ready node declared first.
  std::vector<int> pending(g.nodes.size(), 0);
  for (const auto& e : g.edges) ++pending[e.to];
  std::vector<bool> done(g.nodes.size(), false);
  while (g.topo_order.size() < g.nodes.size()) {
    int next = -1;
    for (size_t i = 0; i < g.nodes.size() && next < 0; ++i)
      if (!done[i] && pending[i] == 0) next = int(i);
    if (next < 0) throw std::invalid_argument("the section graph has a cycle");
    done[next] = true;
    g.topo_order.push_back(next);
    for (int e : g.nodes[next].consumers) --pending[g.edges[e].to];
  }
  for (int n : g.topo_order) {  // producers first: their masks are final
    const Section& s = g.section(n);
    for (uint32_t bits = 0; bits < (1u << kNumModalities); ++bits) {
      const ModalitySet m{uint8_t(bits)};
      bool on = s.when.eval(m);
      if (on && s.consumes.empty() && !g.nodes[n].producers.empty()) {
        on = false;
        for (int e : g.nodes[n].producers) on = on || g.active(g.edges[e].from, m);
      }
      if (on) g.nodes[n].active_mask |= 1u << bits;
    }
    for (int e : g.nodes[n].producers)
      if (g.edges[e].kind == FlowKind::Activations) g.nodes[n].touches.bits |= g.nodes[g.edges[e].from].touches.bits;
    if (g.nodes[n].has_loss) g.loss_sections.push_back(n);
  }
  std::sort(g.loss_sections.begin(), g.loss_sections.end());
  return g;
}

}  // namespace maestro
