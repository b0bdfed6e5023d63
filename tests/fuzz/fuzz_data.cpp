// libFuzzer entry point for the data parsers of files(manifest): the first
// byte picks the target, the rest is its input.
//   'W' ...: a WAV file (parse_wav_header, decode_wav)
//   else   : a manifest's text, parsed as if at tests/data/fixtures/fuzz.jsonl
//            (so its lines can name the fixture images and clips), in both
//            on_bad_sample modes.
// Any input must give a value or a DataError, never a crash, a hang or a
// sanitizer report. Image decoding is stb_image's and is not fuzzed here.
// Replayed over tests/fuzz/data_corpus/ by ctest (fuzz.data_corpus).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "data/manifest.h"
#include "data/wav.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'W') {
    try {
      const maestro::WavInfo info = maestro::parse_wav_header(rest, "fuzz.wav");
      if (info.data_offset + size_t(info.frames) * size_t(info.bits / 8) > rest.size()) __builtin_trap();
      if (maestro::decode_wav(rest, "fuzz.wav").size() != size_t(info.frames)) __builtin_trap();
    } catch (const maestro::DataError&) {
    }
    return 0;
  }
  for (bool skip : {false, true}) {
    maestro::ManifestOptions options;
    options.vocab = 256;
    options.audio_frames = 20;
    options.skip_bad = skip;
    std::istringstream in{std::string(rest)};
    try {
      const maestro::Manifest m = maestro::Manifest::parse(in, "tests/data/fixtures/fuzz.jsonl", options);
      if (m.size() <= 0) __builtin_trap();
      const maestro::Batch b = m.batch(0, 2);
      for (const maestro::Sample& s : b.samples)
        if (s.text_tokens < 2) __builtin_trap();
    } catch (const maestro::DataError&) {
    }
  }
  return 0;
}
