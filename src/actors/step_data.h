// StepData: one step's batch with the contents each section reads from the
// sample (token ids, pixels, mel frames), materialised by the data loader
// ahead of use. Shared read-only (shared_ptr<const StepData>) by every task
// of the step, so messages carry a pointer, never the data.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace maestro {

struct SampleInputs {
  std::vector<int32_t> tokens;  // [text_tokens]              sections consuming text
  std::vector<float> pixels;    // [images, channels, image, image]  vit sections
  std::vector<float> mel;       // [audio_frames, mel_bins]    audio_encoder sections
};

struct StepData {
  Batch batch;
  // inputs[section][i]: what section (index into Program::sections) reads of
  // batch.samples[i]; empty when it consumes nothing from the sample.
  std::vector<std::vector<SampleInputs>> inputs;
  // For each section with a loss, the global batch's count of its target
  // positions (text positions whose next position is text): the loss
  // normaliser N_global, indexed like Program::sections (0 = no loss).
  std::vector<int64_t> loss_positions;
};

}  // namespace maestro
