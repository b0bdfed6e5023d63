// Program-wide rules for the checker (checker.h): what can only be checked
// once every section and flow is read — the flow graph is acyclic, losses sit
// where they can be computed, consumes matches the data mix, micro_batch fits
// the global batch, and no frozen section is fed by a trainable one.
#include "dsl/checker.h"

namespace maestro::sect {

void Checker::check_flow_cycles() {
  std::map<std::string, int> color;  // 0 new, 1 on the path, 2 done
  std::vector<std::string> path;
  std::vector<size_t> edge_path;
  bool found = false;
  // Iterative DFS: the graph can be as long as the program.
  for (const std::string& root : section_names_) {
    if (found || color[root] != 0) continue;
    std::vector<std::pair<std::string, size_t>> stack{{root, 0}};
    color[root] = 1;
    path = {root};
    while (!stack.empty() && !found) {
      auto& [node, next] = stack.back();
      size_t f = next;
      while (f < program_.flows.size() && program_.flows[f].from != node) ++f;
      if (f == program_.flows.size()) {
        color[node] = 2;
        stack.pop_back();
        path.pop_back();
        continue;
      }
      next = f + 1;
      const std::string& to = program_.flows[f].to;
      if (color[to] == 1) {
        std::string cycle;
        size_t start = std::find(path.begin(), path.end(), to) - path.begin();
        for (size_t k = start; k < path.size(); ++k) cycle += path[k] + " -> ";
        error(flow_spans_[f], fmt::format("the flows form a cycle: {}{}", cycle, to));
        found = true;
      } else if (color[to] == 0) {
        color[to] = 1;
        path.push_back(to);
        stack.push_back({to, 0});
      }
    }
  }
}

void Checker::check_sections_against_program() {
  for (size_t i = 0; i < program_.sections.size(); ++i) {
    Section& sec = program_.sections[i];
    const SectionInfo& si = infos_[i];
    bool leaves = false, logits_in = false, logits_out = false, activations_in = false;
    for (const Flow& f : program_.flows) {
      leaves |= f.from == sec.name;
      logits_out |= f.from == sec.name && f.kind == FlowKind::Logits;
      logits_in |= f.to == sec.name && f.kind == FlowKind::Logits;
      activations_in |= f.to == sec.name && f.kind == FlowKind::Activations;
    }
    // An mlp reads nothing from the sample (check_consumes): without an
    // incoming activations flow it would run on nothing.
    if (si.model_ok && flows_ok_ && !activations_in && std::holds_alternative<MlpSpec>(sec.model.spec))
      error(si.name_span, fmt::format("section '{}' is an mlp, which reads its input from activations flows, but none "
                                      "comes into it", sec.name));
    // A trained section that feeds another keeps its activations until its
    // consumers' backward returns (the sequential step runs its forward
    // twice instead): with `recompute` not written, recomputing it is the
    // planner's choice, as `recompute = auto` (docs/language.md).
    if (leaves && sec.mode == Mode::Train && !si.recompute_written) sec.recompute_auto = true;
    if (auto* t = std::get_if<TransformerSpec>(&sec.model.spec)) t->logits_read = !sec.loss.empty() || logits_out;
    if (!sec.loss.empty() && si.model_ok && flows_ok_) {
      if (!leaves && !std::holds_alternative<TransformerSpec>(sec.model.spec))
        error(si.loss_span, fmt::format("section '{}' has a 'loss' but it is not a transformer and no flow leaves it",
                                        sec.name));
      for (const LossTerm& t : sec.loss)
        if (t.kind == LossKind::KL && !logits_in)
          error(si.loss_span, fmt::format("section '{}' has a kl loss but no 'logits' flow comes into it", sec.name));
    }
    if (data_read_ && mix_ok_ && !program_.data.mix.empty()) {
      if (program_.data.source == DataSpec::Source::Synthetic) check_against_synthetic_data(sec, si);
      for (size_t k = 0; k < sec.consumes.size(); ++k) {
        bool present = false;
        for (const MixEntry& m : program_.data.mix) present |= m.modalities.has(sec.consumes[k]);
        if (!present)
          error(si.consume_spans[k], fmt::format("section '{}' consumes '{}' but no 'mix' entry of the data has it",
                                                 sec.name, modality_name(sec.consumes[k])));
      }
    }
    if (sec.parallel.dp && program_.train.global_batch > 0 && *sec.parallel.dp > program_.train.global_batch)
      error(si.dp_span, fmt::format("section '{}' has dp = {} replicas but 'global_batch' is {}: each step some "
                                    "would get no sample", sec.name, *sec.parallel.dp, program_.train.global_batch));
    if (sec.micro_batch && program_.train.global_batch > 0 && *sec.micro_batch > program_.train.global_batch)
      error(si.micro_batch_span, fmt::format("'micro_batch' ({}) of section '{}' is larger than 'global_batch' ({})",
                                             *sec.micro_batch, sec.name, program_.train.global_batch));
  }
}

// The modalities of the samples a synthetic mix entry draws (data/sampler.cpp):
// its own, text when it names none, image when it has video (frames are
// images to the vision section).
static ModalitySet sample_modalities(const MixEntry& m) {
  ModalitySet s = m.modalities;
  if (s.bits == 0) s.add(Modality::Text);
  if (s.has(Modality::Video)) s.add(Modality::Image);
  return s;
}

// The largest value a distribution draws (data/sampler.cpp).
static double largest(const Distribution& d) {
  switch (d.kind) {
    case Distribution::Kind::Constant: return d.value;
    case Distribution::Kind::Uniform:
    case Distribution::Kind::LogNormal: return d.max;
    case Distribution::Kind::Choice: break;
  }
  double m = 0;
  for (size_t i = 0; i < d.values.size(); ++i)
    if (d.weights.empty() || d.weights[i] > 0) m = std::max(m, d.values[i]);
  return m;
}

// What a synthetic source draws, against what the section takes; and over
// the samples its mix draws: the section runs at all, an encoder only where
// its input is (a vit where there are images, an audio encoder where there
// is audio), and a section reading a teacher's logits only where the teacher
// runs too. (With files(manifest) the runtime checks each sample:
// actors/step_inputs.cpp.)
void Checker::check_against_synthetic_data(const Section& sec, const SectionInfo& si) {
  const DataSpec& data = program_.data;
  if (const auto* a = std::get_if<AudioEncoderSpec>(&sec.model.spec); a && data.audio_frames)
    if (const double most = largest(*data.audio_frames); most > double(a->max_frames))
      error(audio_frames_span_, fmt::format("'audio_frames' draws up to {} frames, but section '{}' takes at most "
                                            "max_frames = {}", most, sec.name, a->max_frames));
  if (!sec.loss.empty() && data.text_tokens && largest(*data.text_tokens) < 2)
    error(text_tokens_span_, fmt::format("'text_tokens' is never more than 1, so no text position is followed by text: "
                                         "the loss of section '{}' has no target position to average", sec.name));
  bool runs = false;
  const bool vit = std::holds_alternative<VitSpec>(sec.model.spec),
             audio = std::holds_alternative<AudioEncoderSpec>(sec.model.spec);
  for (const MixEntry& m : program_.data.mix) {
    const ModalitySet s = sample_modalities(m);
    if (m.weight <= 0 || !sec.when.eval(s)) continue;
    runs = true;
    if (si.when_written && ((vit && !s.has(Modality::Image)) || (audio && !s.has(Modality::Audio)))) {
      error(si.when_span, fmt::format("section '{}' reads {} but its 'when' holds on mix entry '{}', which has none",
                                      sec.name, vit ? "images" : "audio", m.name));
      return;
    }
    for (size_t f = 0; f < program_.flows.size(); ++f) {
      const Flow& flow = program_.flows[f];
      const Section* teacher = program_.find_section(flow.from);
      if (flow.kind != FlowKind::Logits || flow.to != sec.name || !teacher || teacher->when.eval(s)) continue;
      error(flow_spans_[f], fmt::format("flow {} -> {}: '{}' needs the logits of '{}' on every sample it runs on, but "
                                        "'{}' does not run on mix entry '{}' (its 'when')",
                                        flow.from, flow.to, sec.name, flow.from, flow.from, m.name));
      return;
    }
  }
  // Text-only teacher and student keep min(text, max_seq) positions each:
  // the text drawn must fit the teacher as far as it fits the student (else
  // the runtime stops at the first such sample: actors/step_inputs.cpp).
  for (size_t f = 0; f < program_.flows.size() && data.text_tokens; ++f) {
    const Flow& flow = program_.flows[f];
    const Section* teacher = program_.find_section(flow.from);
    if (flow.kind != FlowKind::Logits || flow.to != sec.name || !teacher) continue;
    const auto* ts = std::get_if<TransformerSpec>(&teacher->model.spec);
    const auto* ss = std::get_if<TransformerSpec>(&sec.model.spec);
    bool spliced = false;
    for (const Flow& in : program_.flows)
      spliced |= in.kind == FlowKind::Activations && (in.to == sec.name || in.to == teacher->name);
    const int64_t most = int64_t(largest(*data.text_tokens));
    if (!ts || !ss || spliced || std::min(most, ss->max_seq) <= ts->max_seq) continue;
    error(flow_spans_[f], fmt::format("flow {} -> {}: '{}' keeps at most {} text positions (its max_seq) but '{}' up "
                                      "to {} ('text_tokens' draws up to {}), and its loss needs the teacher's logits at "
                                      "each of them",
                                      flow.from, flow.to, flow.from, ts->max_seq, sec.name, std::min(most, ss->max_seq),
                                      most));
  }
  if (!runs && si.when_written)
    error(si.when_span, fmt::format("section '{}' would never run: its 'when' holds on no entry of the mix", sec.name));
}

void Checker::check_frozen_sections() {
  for (size_t f = 0; f < program_.flows.size(); ++f) {
    const Flow& flow = program_.flows[f];
    const Section* from = program_.find_section(flow.from);
    const Section* to = program_.find_section(flow.to);
    if (flow.kind == FlowKind::Activations && from && to && to->mode == Mode::Frozen && from->mode == Mode::Train)
      error(flow_spans_[f], fmt::format("flow {} -> {}: section '{}' is frozen but takes activations from '{}', "
                                        "which trains: gradients cannot pass back through a frozen section "
                                        "(freeze '{}' too, or train '{}')",
                                        flow.from, flow.to, flow.to, flow.from, flow.from, flow.to));
  }
}

}  // namespace maestro::sect
