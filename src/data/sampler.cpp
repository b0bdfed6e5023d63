// synthetic(seed): see sampler.h.
#include "data/sampler.h"

#include <cmath>
#include <stdexcept>

namespace maestro {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fields of a sample, each with its own stream.
enum Field : uint64_t { kMix = 1, kText1, kText2, kImage1, kImage2, kAudio1, kAudio2, kVideo1, kVideo2 };

}  // namespace

double uniform01(uint64_t seed, int64_t id, uint64_t field) {
  uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(id)) ^ field);
  return double(h >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

double draw(const Distribution& d, double u1, double u2) {
  switch (d.kind) {
    case Distribution::Kind::Constant:
      return d.value;
    case Distribution::Kind::Uniform: {
      double lo = std::ceil(d.min), hi = std::floor(d.max);
      return std::min(hi, lo + std::floor(u1 * (hi - lo + 1)));
    }
    case Distribution::Kind::LogNormal: {
      double r = std::sqrt(-2.0 * std::log(1.0 - u1));  // 1-u1 in (0, 1]
      double z = r * std::cos(6.283185307179586 * u2);
      double v = std::round(d.median * std::exp(d.sigma * z));
      return d.max > 0 ? std::min(v, d.max) : v;
    }
    case Distribution::Kind::Choice: {
      double total = 0;
      for (double w : d.weights) total += w;
      double x = u1 * total;
      for (size_t i = 0; i < d.values.size(); ++i) {
        double w = i < d.weights.size() ? d.weights[i] : 0;
        if (x < w) return d.values[i];
        x -= w;
      }
      return d.values.back();
    }
  }
  return 0;
}

Sampler::Sampler(const DataSpec& data, int64_t global_batch) : data_(data), global_batch_(global_batch) {
  if (data_.mix.empty()) {  // text only, one entry
    MixEntry text{"text", {}, 1.0};
    text.modalities.add(Modality::Text);
    data_.mix.push_back(text);
  }
  for (const MixEntry& e : data_.mix) {
    total_weight_ += e.weight;
    if (e.modalities.has(Modality::Image) && !data_.images)
      throw std::invalid_argument("data: mix entry '" + e.name + "' has images but no `images` distribution");
    if (e.modalities.has(Modality::Audio) && !data_.audio_frames)
      throw std::invalid_argument("data: mix entry '" + e.name + "' has audio but no `audio_frames` distribution");
    if (e.modalities.has(Modality::Video) && !data_.video_frames)
      throw std::invalid_argument("data: mix entry '" + e.name + "' has video but no `video_frames` distribution");
  }
  if (!(total_weight_ > 0)) throw std::invalid_argument("data: the mix weights sum to zero");
  if (!data_.text_tokens) {
    Distribution text;  // constant 512
    text.value = 512;
    data_.text_tokens = text;
  }
}

Sample Sampler::sample(int64_t id) const {
  const uint64_t seed = data_.seed;
  Sample s;
  s.id = id;
  double x = uniform01(seed, id, kMix) * total_weight_;
  const MixEntry* entry = &data_.mix.back();
  for (const MixEntry& e : data_.mix) {
    if (x < e.weight) { entry = &e; break; }
    x -= e.weight;
  }
  s.modalities = entry->modalities;
  if (s.modalities.has(Modality::Text) || s.modalities.bits == 0) {
    s.modalities.add(Modality::Text);
    s.text_tokens = int32_t(std::max(1.0, draw(*data_.text_tokens, uniform01(seed, id, kText1),
                                                uniform01(seed, id, kText2))));
  }
  if (s.modalities.has(Modality::Image))
    s.images = int32_t(std::max(1.0, draw(*data_.images, uniform01(seed, id, kImage1), uniform01(seed, id, kImage2))));
  if (s.modalities.has(Modality::Video)) {  // frames are images to the vision section (manifest.cpp alike)
    s.modalities.add(Modality::Image);
    s.images += int32_t(std::max(1.0, draw(*data_.video_frames, uniform01(seed, id, kVideo1), uniform01(seed, id, kVideo2))));
  }
  if (s.modalities.has(Modality::Audio))
    s.audio_frames =
        int32_t(std::max(1.0, draw(*data_.audio_frames, uniform01(seed, id, kAudio1), uniform01(seed, id, kAudio2))));
  return s;
}

Batch Sampler::batch(int64_t step) const {
  Batch b;
  b.step = step;
  b.samples.reserve(size_t(global_batch_));
  for (int64_t i = 0; i < global_batch_; ++i) b.samples.push_back(sample(step * global_batch_ + i));
  return b;
}

double Sampler::modality_share(Modality m) const {
  double w = 0;
  for (const MixEntry& e : data_.mix)
    if (e.modalities.has(m) || (m == Modality::Text)) w += e.weight;
  return w / total_weight_;
}

}  // namespace maestro
