// StepInputs (see step_inputs.h).
#include "actors/step_inputs.h"

#include <fmt/format.h>

#include "actors/sample_shape.h"
#include "data/content.h"
#include "data/data_error.h"
#include "data/sampler.h"

namespace maestro {

namespace {

bool consumes(const Section& s, Modality m) {
  for (Modality c : s.consumes)
    if (c == m) return true;
  return false;
}

// A logits flow hands the student its teacher's logits for each of its kept
// text positions: the teacher must run on every sample the student runs on
// and keep at least as many text tokens. Bad input (exit status 2), found
// before the step runs rather than inside the student's loss.
void check_logits_flows(const SectionGraph& g, const Sample& x, int64_t step) {
  const SampleSizes sizes = sizes_of(x);
  for (const GraphEdge& edge : g.edges) {
    if (edge.kind != FlowKind::Logits || !g.active(edge.to, x.modalities)) continue;
    const Section &teacher = g.section(edge.from), &student = g.section(edge.to);
    if (!g.active(edge.from, x.modalities))
      throw DataError(fmt::format("step {}, sample {}: section '{}' reads the logits of '{}' (flow {} -> {} : logits) "
                                  "but '{}' does not run on this sample: its 'when' must hold wherever '{}''s does",
                                  step, x.id, student.name, teacher.name, teacher.name, student.name, teacher.name,
                                  student.name));
    const int64_t kept = g.emitted(edge.from, sizes), needed = g.emitted(edge.to, sizes);
    if (kept < needed)
      throw DataError(fmt::format("step {}, sample {}: flow {} -> {} : logits needs the teacher's logits at each of "
                                  "the student's {} text positions, but '{}' keeps {} (raise its max_seq, now {})",
                                  step, x.id, teacher.name, student.name, needed, teacher.name, kept,
                                  std::get<TransformerSpec>(teacher.model.spec).max_seq));
  }
}

}  // namespace

struct StepInputs::SamplerBox {
  Sampler sampler;
};

StepInputs::StepInputs(const SectionGraph& graph, const DataSpec& data, int64_t global_batch)
    : graph_(graph), data_seed_(data.seed), global_batch_(global_batch) {
  if (data.source == DataSpec::Source::Files) {
    ManifestOptions options;
    options.skip_bad = data.skip_bad_samples;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const Section& s = graph.section(int(i));
      if (auto* t = std::get_if<TransformerSpec>(&s.model.spec);
          t && consumes(s, Modality::Text) && (options.vocab == 0 || t->vocab < options.vocab)) {
        options.vocab = t->vocab;
        options.vocab_section = s.name;
      }
      if (auto* a = std::get_if<AudioEncoderSpec>(&s.model.spec); a && consumes(s, Modality::Audio))
        options.audio_frames = a->max_frames;
      if (auto* v = std::get_if<VitSpec>(&s.model.spec); v && v->channels != 3)
        throw DataError(fmt::format("section '{}': files(manifest) images are RGB, the vit needs channels = 3, not {}",
                                    s.name, v->channels));
    }
    manifest_ = Manifest::load(data.manifest, options);
  } else {
    sampler_ = std::make_unique<SamplerBox>(SamplerBox{Sampler(data, global_batch)});
  }
}

StepInputs::~StepInputs() = default;

const std::vector<std::string>& StepInputs::skipped_samples() const {
  static const std::vector<std::string> none;
  return manifest_ ? manifest_->skipped() : none;
}
StepInputs::StepInputs(StepInputs&&) noexcept = default;

Batch StepInputs::batch(int64_t step) const {
  if (manifest_) return manifest_->batch(step, global_batch_);
  return sampler_->sampler.batch(step);
}

std::shared_ptr<const StepData> StepInputs::step(int64_t step) const {
  auto d = std::make_shared<StepData>();
  d->batch = batch(step);
  const size_t n_sections = graph_.nodes.size(), n = d->batch.samples.size();
  d->inputs.assign(n_sections, {});
  d->loss_positions.assign(n_sections, 0);
  for (size_t i = 0; i < n; ++i) {
    const Sample& sample = d->batch.samples[i];
    check_logits_flows(graph_, sample, step);
    for (size_t s = 0; s < n_sections; ++s) {
      if (!graph_.active(int(s), sample.modalities)) continue;
      const Section& sec = graph_.section(int(s));
      SampleInputs in;
      if (auto* t = std::get_if<TransformerSpec>(&sec.model.spec)) {
        const SequenceShape shape = sequence_shape(graph_, int(s), sample);
        if (consumes(sec, Modality::Text)) {
          in.tokens = manifest_ ? manifest_->tokens(sample.id) : synthetic_tokens(data_seed_, sample, t->vocab);
          in.tokens.resize(size_t(shape.text));
        }
        if (!sec.loss.empty()) d->loss_positions[s] += std::max<int64_t>(shape.text - 1, 0);
      } else if (auto* v = std::get_if<VitSpec>(&sec.model.spec);
                 v && (consumes(sec, Modality::Image) || consumes(sec, Modality::Video))) {
        in.pixels = manifest_ ? manifest_->pixels(sample.id, int(v->image))
                              : synthetic_pixels(data_seed_, sample, v->channels, v->image);
      } else if (auto* a = std::get_if<AudioEncoderSpec>(&sec.model.spec); a && consumes(sec, Modality::Audio)) {
        in.mel = manifest_ ? manifest_->mel(sample.id, int(a->mel_bins)) : synthetic_mel(data_seed_, sample, a->mel_bins);
      }
      if (d->inputs[s].empty()) d->inputs[s].resize(n);
      d->inputs[s][i] = std::move(in);
    }
  }
  return d;
}

}  // namespace maestro
