// WAV for files(manifest): a RIFF/WAVE parser for 16 kHz mono PCM — 8-bit
// unsigned, 16- and 32-bit signed integer, 32-bit IEEE float
// (WAVE_FORMAT_PCM, WAVE_FORMAT_IEEE_FLOAT, or WAVE_FORMAT_EXTENSIBLE with
// either subformat). Anything else is refused naming what it is (the rate,
// the channel count, the format). Pure functions over bytes, fuzzed by
// tests/fuzz/fuzz_data.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace maestro {

inline constexpr int kWavRate = 16000;

struct WavInfo {
  int format = 0;             // 1 = integer PCM, 3 = IEEE float
  int bits = 0;               // 8, 16 or 32
  int64_t frames = 0;         // samples (mono)
  size_t data_offset = 0;     // where the samples start in the file
};

// Parses and checks the header (every chunk up to "data"; the data chunk
// must fit in `bytes`). Throws DataError("<name>: ...").
WavInfo parse_wav_header(std::string_view bytes, const std::string& name);

// Samples as floats in [-1, 1] (ints divided by 2^(bits-1); 8-bit is offset 128).
std::vector<float> decode_wav(std::string_view bytes, const std::string& name);

// Reads the file and decodes it; throws DataError.
std::vector<float> read_wav(const std::string& path);

// The header of a file (reads the file); throws DataError.
WavInfo probe_wav(const std::string& path);

}  // namespace maestro
