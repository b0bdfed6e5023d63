// Sample geometry per section (see sample_shape.h).
#include "actors/sample_shape.h"

#include <fmt/format.h>

#include <stdexcept>

namespace maestro {

namespace {

int index_of(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.sections.size(); ++i)
    if (p.sections[i].name == name) return int(i);
  throw std::logic_error(fmt::format("unknown section '{}'", name));
}

bool consumes(const Section& s, Modality m) {
  for (Modality c : s.consumes)
    if (c == m) return true;
  return false;
}

bool is_active(const Program& p, int s, const Sample& sample, std::vector<int>& memo) {
  if (memo[s] >= 0) return memo[s];
  const Section& sec = p.sections[s];
  bool active = sec.when.eval(sample.modalities);
  if (active && sec.consumes.empty()) {
    bool any_producer = false, has_inflow = false;
    for (const Flow& f : p.flows)
      if (f.to == sec.name) {
        has_inflow = true;
        any_producer = any_producer || is_active(p, index_of(p, f.from), sample, memo);
      }
    active = !has_inflow || any_producer;
  }
  memo[s] = active;
  return active;
}

}  // namespace

std::vector<bool> active_sections(const Program& program, const Sample& sample) {
  std::vector<int> memo(program.sections.size(), -1);
  std::vector<bool> out(program.sections.size());
  for (size_t s = 0; s < out.size(); ++s) out[s] = is_active(program, int(s), sample, memo);
  return out;
}

int64_t output_rows(const Program& program, int section, const Sample& sample) {
  const Section& sec = program.sections[section];
  if (auto* v = std::get_if<VitSpec>(&sec.model.spec)) return int64_t(sample.images) * v->patches_per_image();
  if (auto* a = std::get_if<AudioEncoderSpec>(&sec.model.spec)) return sample.audio_frames / a->frames_per_token;
  if (std::holds_alternative<TransformerSpec>(sec.model.spec)) {
    SequenceShape s = sequence_shape(program, section, sample);
    return s.spliced + s.text;
  }
  // mlp: one row per upstream embedding.
  const std::vector<bool> active = active_sections(program, sample);
  int64_t rows = 0;
  for (const Flow& f : program.flows)
    if (f.to == sec.name && f.kind == FlowKind::Activations && active[index_of(program, f.from)])
      rows += output_rows(program, index_of(program, f.from), sample);
  return rows;
}

SequenceShape sequence_shape(const Program& program, int section, const Sample& sample) {
  const Section& sec = program.sections[section];
  const auto* t = std::get_if<TransformerSpec>(&sec.model.spec);
  if (!t) return {};
  const std::vector<bool> active = active_sections(program, sample);
  SequenceShape s;
  for (const Flow& f : program.flows)
    if (f.to == sec.name && f.kind == FlowKind::Activations && active[index_of(program, f.from)])
      s.spliced += output_rows(program, index_of(program, f.from), sample);
  s.text = consumes(sec, Modality::Text) ? sample.text_tokens : 0;
  if (s.spliced > t->max_seq)
    throw std::runtime_error(fmt::format("sample {}: {} spliced embeddings exceed max_seq {} of section '{}'",
                                         sample.id, s.spliced, t->max_seq, sec.name));
  s.text = std::min(s.text, t->max_seq - s.spliced);
  return s;
}

}  // namespace maestro
