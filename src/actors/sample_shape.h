// The sequence a transformer section sees for a sample (spliced embeddings,
// then text cut to max_seq), split out of the graph's token count
// (SectionGraph::tokens, architecture.md "Definitions"): what the data
// loader cuts token ids to and counts loss positions on. Which sections run
// on a sample is the graph's rule (SectionGraph::active); nothing here
// restates it.
#pragma once

#include <cstdint>

#include "data/batch.h"
#include "graph/section_graph.h"

namespace maestro {

// The sizes of a sample the graph's rules read.
inline SampleSizes sizes_of(const Sample& s) { return {s.modalities, s.text_tokens, s.images, s.audio_frames}; }

// Positions a transformer section sees for a sample: embeddings spliced in
// from its activations flows and its text tokens, text cut from the end
// past max_seq. Zero for other models and on samples the section skips.
// Throws std::runtime_error when the spliced embeddings alone exceed max_seq.
struct SequenceShape {
  int64_t spliced = 0;  // embeddings from upstream sections
  int64_t text = 0;     // text tokens kept
};
SequenceShape sequence_shape(const SectionGraph& graph, int section, const Sample& sample);

}  // namespace maestro
