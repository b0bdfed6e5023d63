// Sample contents for synthetic(seed): the token ids, pixels and mel frames
// of a sample, materialised only where a section consumes them. Every value
// is a pure function of (seed, sample id, stream, index) through a
// counter-based generator (splitmix64 over a mixed key), so any replica on
// any machine materialises the same sample identically, in any order.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"

namespace maestro {

// Token ids of the sample's text, each uniform in [0, vocab); a token
// follows its predecessor (+1 mod vocab) with probability 7/8.  [s.text_tokens]
std::vector<int32_t> synthetic_tokens(uint64_t seed, const Sample& s, int64_t vocab);

// Pixels, uniform in [-1, 1].                   [s.images, channels, image, image]
std::vector<float> synthetic_pixels(uint64_t seed, const Sample& s, int64_t channels, int64_t image);

// Log-mel frames, standard normal.                        [s.audio_frames, mel_bins]
std::vector<float> synthetic_mel(uint64_t seed, const Sample& s, int64_t mel_bins);

// The generator itself: 64 random bits for (seed, sample, stream, index).
uint64_t counter_random(uint64_t seed, int64_t sample, uint32_t stream, uint64_t index);

}  // namespace maestro
