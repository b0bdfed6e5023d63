// The WAV parser: every supported sample format decodes to the same clip,
// and what is refused says why (rate, channels, format, truncation).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <string>

#include "data/data_error.h"
#include "data/wav.h"

namespace maestro {
namespace {

const std::string kFixtures = "tests/data/fixtures/";

std::string refusal(const std::string& bytes) {
  try {
    parse_wav_header(bytes, "clip.wav");
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(wav)

BOOST_AUTO_TEST_CASE(every_sample_format_decodes_the_same_clip) {
  const std::vector<float> ref = read_wav(kFixtures + "tone_f32.wav");
  BOOST_TEST(ref.size() == 8000u);
  for (auto [f, tol] : {std::pair{"tone_s16.wav", 1e-4}, {"tone_s32.wav", 1e-6}, {"tone_u8.wav", 1.0 / 64}}) {
    const std::vector<float> v = read_wav(kFixtures + f);
    BOOST_REQUIRE_EQUAL(v.size(), ref.size());
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, double(std::fabs(v[i] - ref[i])));
    BOOST_TEST_INFO(f);
    BOOST_TEST(worst <= tol);
  }
  const WavInfo info = probe_wav(kFixtures + "tone_s16.wav");
  BOOST_TEST(info.bits == 16);
  BOOST_TEST(info.frames == 8000);
}

BOOST_AUTO_TEST_CASE(other_rates_channels_and_formats_are_refused_by_name) {
  auto message = [](const char* f) {
    try {
      read_wav(kFixtures + f);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BOOST_TEST(message("tone_44k.wav").find("44100 Hz with 1 channel(s)") != std::string::npos);
  BOOST_TEST(message("tone_stereo.wav").find("16000 Hz with 2 channel(s)") != std::string::npos);
  BOOST_TEST(message("tone_s24.wav").find("sample format 1 with 24 bits") != std::string::npos);
  BOOST_TEST(message("tone_s24.wav").find(kFixtures + "tone_s24.wav") == 0u);
  BOOST_TEST(message("missing.wav").find("cannot open") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(truncated_and_malformed_headers_are_refused) {
  std::ifstream in(kFixtures + "tone_s16.wav", std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  BOOST_TEST(refusal(good).empty());
  BOOST_TEST(refusal("").find("not a RIFF/WAVE") != std::string::npos);
  BOOST_TEST(refusal(good.substr(0, 30)).find("runs past the end") != std::string::npos);
  BOOST_TEST(refusal(good.substr(0, good.size() - 2)).find("the \"data\" chunk claims") != std::string::npos);
  BOOST_TEST(refusal(good.substr(0, 12)).find("no \"fmt \" chunk") != std::string::npos);
  std::string no_data = good.substr(0, 12 + 8 + 16);
  BOOST_TEST(refusal(no_data).find("no \"data\" chunk") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_float_clip_with_a_nan_is_refused) {
  std::ifstream in(kFixtures + "tone_f32.wav", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const size_t at = parse_wav_header(bytes, "x").data_offset + 4 * 10;
  bytes.replace(at, 4, std::string("\x00\x00\xc0\x7f", 4));  // quiet NaN, sample 10
  try {
    decode_wav(bytes, "nan.wav");
    BOOST_FAIL("decoded a NaN");
  } catch (const DataError& e) {
    BOOST_TEST(std::string(e.what()) == "nan.wav: sample 10 is not a finite number");
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace maestro
