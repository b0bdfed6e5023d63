// A transformer's sequence for a sample (see sample_shape.h).
#include "actors/sample_shape.h"

#include <fmt/format.h>

#include <stdexcept>

#include "data/data_error.h"

namespace maestro {

SequenceShape sequence_shape(const SectionGraph& g, int section, const Sample& sample) {
  const Section& sec = g.section(section);
  const auto* t = std::get_if<TransformerSpec>(&sec.model.spec);
  if (!t || !g.active(section, sample.modalities)) return {};
  const SampleSizes sizes = sizes_of(sample);
  SequenceShape s;
  s.spliced = g.spliced(section, sizes);
  if (s.spliced > t->max_seq)
    throw DataError(fmt::format("sample {}: {} spliced embeddings exceed max_seq {} of section '{}' (fewer images or "
                                "frames per sample, or a larger max_seq)",
                                sample.id, s.spliced, t->max_seq, sec.name));
  s.text = g.tokens(section, sizes) - s.spliced;
  return s;
}

}  // namespace maestro
