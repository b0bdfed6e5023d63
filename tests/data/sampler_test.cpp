// The synthetic sampler: the same seed gives the same samples (in any order
// of asking), the mix is drawn in its proportions, sizes stay inside their
// distributions, and bad data blocks are refused.
#define BOOST_TEST_MODULE data
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "data/sampler.h"

namespace maestro {
namespace {

Distribution uniform(double lo, double hi) {
  Distribution d;
  d.kind = Distribution::Kind::Uniform;
  d.min = lo;
  d.max = hi;
  return d;
}

Distribution lognormal(double median, double sigma, double cap) {
  Distribution d;
  d.kind = Distribution::Kind::LogNormal;
  d.median = median;
  d.sigma = sigma;
  d.max = cap;
  return d;
}

MixEntry entry(std::string name, std::vector<Modality> mods, double weight) {
  MixEntry e;
  e.name = std::move(name);
  for (Modality m : mods) e.modalities.add(m);
  e.weight = weight;
  return e;
}

// image_text 0.5, text 0.3, audio_text 0.2 (tiny_mllm's mix).
DataSpec mllm_data(uint64_t seed) {
  DataSpec d;
  d.seed = seed;
  d.mix = {entry("image_text", {Modality::Image, Modality::Text}, 0.5), entry("text", {Modality::Text}, 0.3),
           entry("audio_text", {Modality::Audio, Modality::Text}, 0.2)};
  d.text_tokens = lognormal(48, 0.6, 256);
  Distribution one;
  one.value = 1;
  d.images = one;
  d.audio_frames = uniform(32, 128);
  return d;
}

bool same(const Sample& a, const Sample& b) {
  return a.id == b.id && a.modalities == b.modalities && a.text_tokens == b.text_tokens && a.images == b.images &&
         a.audio_frames == b.audio_frames;
}

}  // namespace

BOOST_AUTO_TEST_CASE(same_seed_same_samples_in_any_order) {
  const Sampler a(mllm_data(7), 64), b(mllm_data(7), 64);
  const Batch step3 = a.batch(3);
  BOOST_REQUIRE_EQUAL(step3.samples.size(), 64u);
  BOOST_CHECK_EQUAL(step3.step, 3);
  // b asks for later steps first: the counter-based draw does not care.
  const Batch later = b.batch(5);
  const Batch again = b.batch(3);
  for (size_t i = 0; i < 64; ++i) {
    BOOST_CHECK_EQUAL(step3.samples[i].id, int64_t(3 * 64 + i));
    BOOST_CHECK(same(step3.samples[i], again.samples[i]));
    BOOST_CHECK(same(step3.samples[i], a.sample(3 * 64 + int64_t(i))));
  }
  BOOST_CHECK_EQUAL(later.samples.front().id, 5 * 64);
  // A different seed gives a different stream.
  const Batch other = Sampler(mllm_data(8), 64).batch(3);
  int differing = 0;
  for (size_t i = 0; i < 64; ++i) differing += !same(step3.samples[i], other.samples[i]);
  BOOST_CHECK_GT(differing, 32);
}

BOOST_AUTO_TEST_CASE(mix_drawn_in_proportion) {
  const int64_t n = 20000;
  const Sampler s(mllm_data(11), n);
  const Batch b = s.batch(0);
  std::map<uint8_t, int64_t> count;
  for (const Sample& x : b.samples) count[x.modalities.bits]++;
  const auto share = [&](const MixEntry& e) { return double(count[e.modalities.bits]) / double(n); };
  for (const MixEntry& e : mllm_data(11).mix) {
    const double sd = std::sqrt(e.weight * (1 - e.weight) / double(n));  // binomial
    BOOST_TEST_CONTEXT(e.name) { BOOST_CHECK_LE(std::abs(share(e) - e.weight), 4 * sd); }
  }
  BOOST_CHECK_EQUAL(count.size(), 3u);  // no modality set outside the mix
  BOOST_CHECK_CLOSE(s.modality_share(Modality::Image), 0.5, 1e-9);
  BOOST_CHECK_CLOSE(s.modality_share(Modality::Audio), 0.2, 1e-9);
  BOOST_CHECK_CLOSE(s.modality_share(Modality::Text), 1.0, 1e-9);
}

BOOST_AUTO_TEST_CASE(sizes_inside_their_distributions) {
  const int64_t n = 20000;
  const Batch b = Sampler(mllm_data(3), n).batch(1);
  double audio_sum = 0;
  int64_t audio_n = 0, capped = 0;
  std::vector<int32_t> text;
  for (const Sample& x : b.samples) {
    BOOST_REQUIRE(x.modalities.has(Modality::Text));
    BOOST_REQUIRE_GE(x.text_tokens, 1);
    BOOST_REQUIRE_LE(x.text_tokens, 256);
    capped += x.text_tokens == 256;
    text.push_back(x.text_tokens);
    BOOST_REQUIRE_EQUAL(x.images, x.modalities.has(Modality::Image) ? 1 : 0);
    if (x.modalities.has(Modality::Audio)) {
      BOOST_REQUIRE_GE(x.audio_frames, 32);
      BOOST_REQUIRE_LE(x.audio_frames, 128);
      audio_sum += x.audio_frames;
      audio_n++;
    } else {
      BOOST_REQUIRE_EQUAL(x.audio_frames, 0);
    }
  }
  // uniform(32, 128) over integers: mean 80, sd 27.7.
  BOOST_CHECK_LE(std::abs(audio_sum / double(audio_n) - 80.0), 4 * 27.7 / std::sqrt(double(audio_n)));
  // lognormal(median 48): half below, half above (within 4 sd of a binomial).
  std::sort(text.begin(), text.end());
  BOOST_CHECK_LE(std::abs(text[text.size() / 2] - 48), 2);
  // P(x > 256) = P(z > ln(256/48)/0.6 = 2.79) = 0.26%: the cap is hit, rarely.
  BOOST_CHECK_GT(capped, 0);
  BOOST_CHECK_LT(capped, n / 100);
}

BOOST_AUTO_TEST_CASE(draw_covers_each_kind) {
  Distribution c;
  c.value = 7;
  BOOST_CHECK_EQUAL(draw(c, 0.3, 0.9), 7);
  const Distribution u = uniform(2, 4);
  BOOST_CHECK_EQUAL(draw(u, 0.0, 0.5), 2);
  BOOST_CHECK_EQUAL(draw(u, 0.999999, 0.5), 4);
  Distribution choice;
  choice.kind = Distribution::Kind::Choice;
  choice.values = {1, 2, 3};
  choice.weights = {1, 0, 3};
  BOOST_CHECK_EQUAL(draw(choice, 0.2, 0), 1);   // 0.8 < 1
  BOOST_CHECK_EQUAL(draw(choice, 0.3, 0), 3);   // 1.2 is past 1 and the empty 2
  BOOST_CHECK_EQUAL(draw(choice, 0.99, 0), 3);
  const Distribution ln = lognormal(100, 0.5, 0);
  BOOST_CHECK_EQUAL(draw(ln, 0.0, 0.25), 100);  // z = 0: the median
  for (double u1 : {0.0, 0.1, 0.5, 0.9, 0.999999})
    for (double u2 : {0.0, 0.3, 0.7})
      BOOST_CHECK_GE(draw(ln, u1, u2), 0);
  for (int i = 0; i < 1000; ++i) {
    const double x = uniform01(42, i, 3);
    BOOST_REQUIRE(x >= 0 && x < 1);
  }
}

BOOST_AUTO_TEST_CASE(video_frames_are_images_to_the_vision_section) {
  // video_text 0.75 (8–64 frames), text 0.25; no images distribution needed
  DataSpec d;
  d.seed = 3;
  d.mix = {entry("video_text", {Modality::Video, Modality::Text}, 0.75), entry("text", {Modality::Text}, 0.25)};
  d.text_tokens = lognormal(48, 0.6, 256);
  d.video_frames = uniform(8, 64);
  const Sampler s(d, 64);
  int videos = 0, lo = 1000, hi = 0;
  for (int64_t id = 0; id < 2000; ++id) {
    const Sample x = s.sample(id);
    if (!x.modalities.has(Modality::Video)) {
      BOOST_TEST(x.images == 0);
      BOOST_TEST(!x.modalities.has(Modality::Image));
      continue;
    }
    ++videos;
    BOOST_TEST(x.modalities.has(Modality::Image));  // frames are images, as a manifest's "video" list
    BOOST_TEST(x.images >= 8);
    BOOST_TEST(x.images <= 64);
    lo = std::min(lo, x.images), hi = std::max(hi, x.images);
  }
  BOOST_TEST(std::abs(videos / 2000.0 - 0.75) < 0.05);
  BOOST_TEST(lo <= 10);  // the whole range is drawn
  BOOST_TEST(hi >= 62);
  // with an image as well: the frames add to the images
  d.mix = {entry("image_video_text", {Modality::Image, Modality::Video, Modality::Text}, 1.0)};
  Distribution two;
  two.value = 2;
  d.images = two;
  for (int64_t id = 0; id < 200; ++id) {
    const int images = Sampler(d, 4).sample(id).images;
    BOOST_TEST(images >= 2 + 8);
    BOOST_TEST(images <= 2 + 64);
  }
  d.video_frames.reset();
  BOOST_CHECK_THROW(Sampler(d, 64), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(bad_data_blocks_are_refused) {
  DataSpec no_images = mllm_data(1);
  no_images.images.reset();
  BOOST_CHECK_THROW(Sampler(no_images, 4), std::invalid_argument);
  DataSpec no_audio = mllm_data(1);
  no_audio.audio_frames.reset();
  BOOST_CHECK_THROW(Sampler(no_audio, 4), std::invalid_argument);
  DataSpec zero = mllm_data(1);
  for (MixEntry& e : zero.mix) e.weight = 0;
  BOOST_CHECK_THROW(Sampler(zero, 4), std::invalid_argument);
  // No mix: text only, 512 tokens by default.
  DataSpec bare;
  const Batch b = Sampler(bare, 3).batch(0);
  for (const Sample& x : b.samples) {
    BOOST_CHECK(x.modalities.has(Modality::Text));
    BOOST_CHECK_EQUAL(x.text_tokens, 512);
  }
}

}  // namespace maestro
