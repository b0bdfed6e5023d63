// Counter-based synthetic contents (see content.h).
#include "data/content.h"

#include <cmath>

namespace maestro {

namespace {

enum Stream : uint32_t { kTokens = 1, kPixels = 2, kMel = 3 };

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1) with 24 bits: exactly representable in fp32.
float unit_float(uint64_t bits) { return float(bits >> 40) * (1.0f / 16777216.0f); }

}  // namespace

uint64_t counter_random(uint64_t seed, int64_t sample, uint32_t stream, uint64_t index) {
  uint64_t k = splitmix64(seed);
  k = splitmix64(k ^ static_cast<uint64_t>(sample));
  k = splitmix64(k ^ (uint64_t(stream) << 32));
  return splitmix64(k ^ index);
}

std::vector<int32_t> synthetic_tokens(uint64_t seed, const Sample& s, int64_t vocab) {
  // A "counting" text: each token follows its predecessor (+1 mod vocab)
  // with probability 7/8, else it is drawn afresh. Every id is still uniform
  // in [0, vocab) (the successor map is a bijection), but the next token is
  // predictable, so a model's loss can fall below the ln(vocab) of pure noise.
  std::vector<int32_t> ids(s.text_tokens);
  for (int32_t i = 0; i < s.text_tokens; ++i) {
    const uint64_t r = counter_random(seed, s.id, kTokens, i);
    ids[i] = i > 0 && (r >> 61) != 0 ? int32_t((int64_t(ids[i - 1]) + 1) % vocab) : int32_t(r % uint64_t(vocab));
  }
  return ids;
}

std::vector<float> synthetic_pixels(uint64_t seed, const Sample& s, int64_t channels, int64_t image) {
  std::vector<float> px(size_t(s.images) * channels * image * image);
  for (size_t i = 0; i < px.size(); ++i)
    px[i] = 2.0f * unit_float(counter_random(seed, s.id, kPixels, i)) - 1.0f;
  return px;
}

std::vector<float> synthetic_mel(uint64_t seed, const Sample& s, int64_t mel_bins) {
  // Box-Muller on two counter draws per value; computed in double, stored fp32.
  std::vector<float> mel(size_t(s.audio_frames) * mel_bins);
  for (size_t i = 0; i < mel.size(); ++i) {
    double u1 = (double(counter_random(seed, s.id, kMel, 2 * i) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    double u2 = double(counter_random(seed, s.id, kMel, 2 * i + 1) >> 11) * 0x1.0p-53;      // [0, 1)
    mel[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return mel;
}

}  // namespace maestro
