// Sample and Batch: what one training step draws from the data source, as
// metadata (modalities and sizes). The wavefront scheduler and the simulator
// work from this alone; the runtime materialises the contents (token ids,
// pixels, mel frames) for the samples a section runs on.
#pragma once

#include <cstdint>
#include <vector>

#include "dsl/program.h"

namespace maestro {

struct Sample {
  int64_t id = 0;            // position in the data stream (step * global_batch + i)
  ModalitySet modalities;    // from the mix entry drawn
  int32_t text_tokens = 0;   // >= 1 for every sample with text
  int32_t images = 0;        // 0 unless it has image
  int32_t audio_frames = 0;  // 0 unless it has audio
};

struct Batch {
  int64_t step = 0;
  std::vector<Sample> samples;  // global_batch of them, in loader order
};

}  // namespace maestro
