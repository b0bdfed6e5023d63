// The geometry of a sample in each section: whether the section runs on it,
// how many embeddings it emits, and the sequence a transformer sees (spliced
// embeddings, then text cut to max_seq) — the definitions of
// architecture.md, used by the step's schedule and by the loss normaliser.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "dsl/program.h"

namespace maestro {

// Whether a section runs on a sample: its `when` holds, and a section that
// reads nothing from the sample (a projector) has an active producer.
std::vector<bool> active_sections(const Program& program, const Sample& sample);

// Positions a transformer section sees for a sample: spliced embeddings from
// its activations flows (in flow order) and its text tokens, text cut from
// the end past max_seq. Zero for other models.
struct SequenceShape {
  int64_t spliced = 0;  // embeddings from upstream sections
  int64_t text = 0;     // text tokens kept
};
SequenceShape sequence_shape(const Program& program, int section, const Sample& sample);

// Embeddings a section emits for a sample (its output rows).
int64_t output_rows(const Program& program, int section, const Sample& sample);

}  // namespace maestro
