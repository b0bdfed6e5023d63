// Image preprocessing and the log-mel spectrogram against the Python oracle
// (tests/data/data_oracle.py: PIL + numpy), on the fixtures of
// tests/data/fixtures (make_fixtures.py). Label "data_oracle": run as
// oracle.data, Skipped without PIL/numpy. Tolerances:
// - PNG: our resampler is Pillow's, bit for bit, so the uint8 pixels agree
//   exactly and the normalised floats within fp32 rounding (1e-5 abs).
// - JPEG: stb_image and libjpeg (PIL) decode differently (IDCT and chroma
//   upsampling), so up to 4 levels of 255 per pixel are allowed (0.06 after
//   dividing by CLIP's std), with a mean error under 1 level.
// - log-mel (fp32 FFTW vs float64 numpy): max abs error <= 1e-4.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/log_mel.h"
#include "data/wav.h"
#include "support/oracle_python.h"

namespace maestro {
namespace {

const std::string kFixtures = "tests/data/fixtures/";

std::vector<float> oracle(const std::string& args, size_t expect) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("maestro_oracle_data_" + std::to_string(::getpid()) + ".f32")).string();
  const std::string cmd = test::oracle_python() + " tests/data/data_oracle.py " + args + " " + out;
  BOOST_REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  std::ifstream in(out, std::ios::binary);
  std::vector<float> v(expect);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(expect * 4));
  BOOST_REQUIRE_EQUAL(size_t(in.gcount()), expect * 4);
  BOOST_REQUIRE(in.peek() == EOF);
  std::remove(out.c_str());
  return v;
}

std::string fmt_args(const std::string& file, int size) {
  return "image " + kFixtures + file + " " + std::to_string(size);
}

struct Diff {
  double max = 0, mean = 0;
};
Diff diff(const std::vector<float>& a, const std::vector<float>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(double(a[i]) - b[i]);
    d.max = std::max(d.max, e);
    d.mean += e / a.size();
  }
  return d;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_oracle, *boost::unit_test::label("data_oracle"))

BOOST_AUTO_TEST_CASE(png_clip_preprocessing_matches_pil) {
  for (const char* f : {"rgb_40x30.png", "rgb_16x16.png", "rgb_9x7.png", "tall_23x61.png", "grey_37x29.png",
                        "rgba_50x50.png"})
    for (int size : {16, 8, 24}) {
      const std::vector<float> ours = clip_preprocess(decode_image(kFixtures + f), size);
      const Diff d = diff(ours, oracle(fmt_args(f, size), size_t(3) * size * size));
      BOOST_TEST_MESSAGE(f << " at " << size << ": max " << d.max);
      BOOST_TEST_INFO(f << " at " << size << ": max " << d.max);
      BOOST_TEST(d.max <= 1e-5);
    }
}

BOOST_AUTO_TEST_CASE(jpeg_clip_preprocessing_is_close_to_pil) {
  for (int size : {16, 32}) {
    const std::vector<float> ours = clip_preprocess(decode_image(kFixtures + "photo_64x48.jpg"), size);
    const Diff d = diff(ours, oracle(fmt_args("photo_64x48.jpg", size), size_t(3) * size * size));
    BOOST_TEST_MESSAGE("photo_64x48.jpg at " << size << ": max " << d.max << ", mean " << d.mean);
    BOOST_TEST_INFO("max " << d.max << " mean " << d.mean);
    BOOST_TEST(d.max <= 4.0 / 255 / 0.26);
    BOOST_TEST(d.mean <= 1.0 / 255 / 0.26);
  }
}

BOOST_AUTO_TEST_CASE(log_mel_matches_whisper_numpy) {
  for (const char* f : {"tone_s16.wav", "tone_u8.wav", "tone_s32.wav", "tone_f32.wav"})
    for (auto [bins, frames] : {std::pair{80, 100}, {16, 30}, {128, 64}}) {  // padded (100) and cut (30, 64)
      const std::vector<float> ours = log_mel_spectrogram(read_wav(kFixtures + f), bins, frames);
      const std::string args = std::string("mel ") + kFixtures + f + " " + std::to_string(bins) + " " +
                               std::to_string(frames);
      const Diff d = diff(ours, oracle(args, size_t(bins) * frames));
      BOOST_TEST_MESSAGE(f << " " << bins << " bins, " << frames << " frames: max " << d.max);
      BOOST_TEST_INFO(f << " " << bins << " bins, " << frames << " frames: max " << d.max);
      BOOST_TEST(d.max <= 1e-4);
    }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
